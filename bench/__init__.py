"""Benchmarks of foo-operator against its peers, side by side in one run: numbers and ratios, never verdicts."""
