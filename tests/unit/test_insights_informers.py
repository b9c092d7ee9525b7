"""What insights caches: its four informers, over every namespace or the one it is told to watch."""

from __future__ import annotations

from typing import cast

import pytest

from insights.__main__ import parse_args
from insights.cluster import health_informers
from kube.client import KubeClient

NO_CLIENT = cast(KubeClient, object())  # an informer only holds its client until it starts


@pytest.mark.parametrize("namespace", [None, "team-a"])
def test_every_informer_of_the_view_watches_the_namespace_it_is_given(namespace: str | None) -> None:
    informers = health_informers(NO_CLIENT, namespace)
    assert set(informers) == {"foos", "deployments", "pods", "events"}
    assert {name: i.namespace for name, i in informers.items()} == dict.fromkeys(informers, namespace)


def test_namespace_flag_defaults_to_every_namespace() -> None:
    assert parse_args(["--cert-dir=/certs"]).namespace is None
    assert parse_args(["--cert-dir=/certs", "--namespace", "team-a"]).namespace == "team-a"
