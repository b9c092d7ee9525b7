"""``kubectl foo-operator``: a kubectl plugin (``kubectl-foo_operator`` on PATH) for the people who run foo-operator.

``health`` reads FooHealths from the aggregated API, ``migrate-storage`` is ``foo-operator
migrate-storage``, ``certs`` says when the CA in each caBundle the apiserver trusts expires.
The top layer: it only wires what the other packages provide to kubectl's flags and output.
"""
