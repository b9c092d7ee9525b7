"""Insights watching one namespace (`--namespace`, the chart's controller.watchNamespace): its
informers list and watch that namespace alone, under a Role there and no cluster-wide read.

The server is the aggregated-API module's (tests/e2e/test_aggregated_api.py: its own network
namespace, reached through kube-apiserver), started with the namespaced RBAC insights.manifests
builds and the chart renders when a namespace is watched. Cluster-wide informers would get 403s
from that RBAC and never sync; with cluster-wide RBAC they would show every namespace's Foos.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.e2e.test_aggregated_api import (  # noqa: F401 (fixtures)
    GROUP,
    SERVICE_ACCOUNT,
    SERVICE_NAMESPACE,
    Insights,
    _foo,
    _health,
    available,
    insights,
)
from tests.e2e.waiting import wait_for

INSIGHTS_WATCH_NAMESPACE = f"foo-watched-{os.getpid() % 10000}"
ACCOUNT = f"system:serviceaccount:{SERVICE_NAMESPACE}:{SERVICE_ACCOUNT}-one-namespace"


def _foohealths(insights: Insights, *scope: str) -> list[dict[str, Any]]:
    out = insights.kubectl("get", f"foohealths.{GROUP}", *scope, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def test_a_foo_outside_the_watched_namespace_has_no_foohealth(available: Insights, namespace: str) -> None:
    # The other namespace's Foo first: a cluster-wide watch would deliver it before the watched one's.
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("elsewhere"))
    available.kubectl("apply", "-n", INSIGHTS_WATCH_NAMESPACE, "-f", "-", input=_foo("watched"))
    wait_for(
        "the watched namespace's Foo to have a FooHealth",
        lambda: bool(_health(available, INSIGHTS_WATCH_NAMESPACE, "watched")),
        server=available.server,
    )
    assert _health(available, namespace, "elsewhere") == {}
    assert not _foohealths(available, "-n", namespace)
    everywhere = {(h["metadata"]["namespace"], h["metadata"]["name"]) for h in _foohealths(available, "-A")}
    assert everywhere == {(INSIGHTS_WATCH_NAMESPACE, "watched")}


def test_insights_may_read_the_watched_namespace_alone(available: Insights, namespace: str) -> None:
    def can(verb: str, resource: str, *scope: str) -> str:
        result = available.kubectl("auth", "can-i", verb, resource, f"--as={ACCOUNT}", *scope, check=False)
        return result.stdout.strip()

    for resource in ("foos.samplecontroller.k8s.io", "deployments.apps", "pods", "events"):
        assert can("watch", resource, "-n", INSIGHTS_WATCH_NAMESPACE) == "yes", resource
        assert can("list", resource, "-n", namespace) == "no", resource
        assert can("list", resource, "--all-namespaces") == "no", resource
        assert can("get", resource, "-n", INSIGHTS_WATCH_NAMESPACE) == "no", "list and watch only"
    roles = json.loads(available.kubectl("get", "roles", "-n", INSIGHTS_WATCH_NAMESPACE, "-o", "json").stdout)
    assert [r["metadata"]["name"] for r in roles["items"]] == [f"{SERVICE_ACCOUNT}-one-namespace:insights-reader"]
