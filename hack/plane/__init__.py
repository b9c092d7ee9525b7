"""A real local Kubernetes control plane built from Go modules, a real node beside it, and the
product started on them: what tests, benchmarks and `make run` stand on."""
