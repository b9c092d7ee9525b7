"""What a Helm release must leave behind once uninstalled: its kept CRD and nothing else."""

from __future__ import annotations

import json

from fooapi.crd import CRD_NAME
from hack.plane.cluster import LocalControlPlane

# The kinds the chart makes, by scope; every one carries the release's instance label.
NAMESPACED_KINDS = "deployments,services,secrets,serviceaccounts,roles,rolebindings,poddisruptionbudgets"
CLUSTER_KINDS = (
    "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,validatingwebhookconfigurations,apiservices"
)


def assert_only_the_kept_crd_is_left(plane: LocalControlPlane, release: str, namespace: str) -> None:
    """No object of ``release`` in its namespace, kube-system or the cluster scope; the CRD kept."""
    selector = f"app.kubernetes.io/instance={release}"
    for where in (namespace, "kube-system"):
        left = plane.kubectl("get", NAMESPACED_KINDS, "-n", where, "-l", selector, "-o", "name").stdout.split()
        assert left == [], f"left in {where}: {left}"
    assert plane.kubectl("get", CLUSTER_KINDS, "-l", selector, "-o", "name").stdout.split() == []
    crd = json.loads(plane.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
