"""A real node leaves the machine as it found it, also when the test using it fails.

Its own plane and node (one real node per machine at a time): a pod runs, so the kubelet has
made its cgroups, mounts, network namespace and iptables chains and changed its sysctls; then
the test body fails, and after the teardown every trace is compared with what was there before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.plane.cluster import LocalControlPlane
from hack.plane.machine import machine_state
from hack.plane.node import PAUSE_IMAGE, NodeBridge, RealNode
from tests.e2e.waiting import wait_for


class SimulatedTestFailure(Exception):
    pass


def _pod(node: RealNode) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [{"key": node.taint["key"], "operator": "Exists"}],
            "containers": [
                {
                    "name": "pause",
                    "image": PAUSE_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {"memory": "16Mi"}},
                }
            ],
        },
    }


def test_teardown_after_a_failed_test_restores_the_machine(node_image: dict[str, Any], tmp_path: Path) -> None:
    before = machine_state()
    with pytest.raises(SimulatedTestFailure):
        with (
            NodeBridge() as bridge,
            LocalControlPlane(tmp_path, address=bridge.address) as plane,
            RealNode(plane, bridge) as node,
        ):
            plane.kubectl("apply", "-f", "-", input=json.dumps(_pod(node)))
            wait_for(
                "the pod to run",
                lambda: plane.kubectl("get", "pod", "sleeper", "-o", "jsonpath={.status.phase}").stdout == "Running",
                interval=0.5,
            )
            during = machine_state()
            # The node did change the machine: there is something to put back.
            assert during["cgroups"] and during["netns"] and during["processes"] and during["mounts"], during
            assert during["sysctls"] != before["sysctls"], "the kubelet set no sysctl"
            assert any(during["iptables"].values()), "no KUBE-/CNI- rules while the node ran"
            raise SimulatedTestFailure
    after = machine_state()
    assert {k: v for k, v in after.items() if v != before[k]} == {}, f"before: {before}"
