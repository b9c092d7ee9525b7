"""What a hostile or honest caller does, and the objects and reviews it sends: the harnesses tests
and benchmarks share. bench measures with them; tests give verdicts with them; nothing here
imports either (a contract in pyproject.toml)."""
