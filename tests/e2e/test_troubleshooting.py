"""What docs/troubleshooting.md says about an unavailable APIService, shown on the real plane:
namespace deletion hangs, the namespace says why, and removing the APIService lets it finish.

The APIService here is of a group of its own pointing at a Service that does not exist, so the
test stands alone and never touches insights' registration.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hack.plane.cluster import LocalControlPlane
from tests.e2e.waiting import wait_for

GROUP = "stuck.foo-operator.example"
APISERVICE = f"v1.{GROUP}"


def _namespace(plane: LocalControlPlane, name: str) -> dict[str, Any] | None:
    result = plane.kubectl("get", "namespace", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _discovery_failure(plane: LocalControlPlane, name: str) -> str:
    namespace = _namespace(plane, name) or {}
    for condition in namespace.get("status", {}).get("conditions", []):
        if condition["type"] == "NamespaceDeletionDiscoveryFailure" and condition["status"] == "True":
            return str(condition["message"])
    return ""


def test_an_unavailable_apiservice_blocks_namespace_deletion_until_it_goes(control_plane: LocalControlPlane) -> None:
    plane = control_plane
    name = f"doomed-{os.getpid() % 10000}"
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": GROUP,
            "version": "v1",
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
            "insecureSkipTLSVerify": True,
            "service": {"namespace": "default", "name": "no-such-service", "port": 443},
        },
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(apiservice))
    try:
        plane.kubectl("create", "namespace", name)
        plane.kubectl("delete", "namespace", name, "--wait=false")
        message = wait_for(
            "the namespace to report the discovery failure", lambda: _discovery_failure(plane, name), timeout=120
        )
        assert GROUP in message
        assert (_namespace(plane, name) or {})["status"]["phase"] == "Terminating"
    finally:
        plane.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", check=False)
    wait_for("the namespace to finish deleting", lambda: _namespace(plane, name) is None, timeout=120)
