"""The async Kubernetes toolkit foo-operator stands on: no Foo knowledge beyond field errors."""
