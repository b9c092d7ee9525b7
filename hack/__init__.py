"""Tooling for a real local Kubernetes control plane: `hack/build.sh` builds it, `hack.cluster` runs it."""
