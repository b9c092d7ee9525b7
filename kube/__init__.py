"""The async Kubernetes client toolkit foo-operator stands on (client-go's ports): the client and
its config, informers and their caches, the work queue and rate limits, leader election, events,
access reviews and the client metrics. No Foo knowledge: fooapi is not imported here."""
