"""A real node leaves the machine as it found it, also when the test using it fails.

Its own plane and node (in one case with a second node beside it; one set per machine at a
time): a pod runs on each, so the kubelet has made its cgroups, mounts, network namespace and
iptables chains and changed its sysctls; then the test body fails, and after the teardown every
trace is compared with what was there before.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from hack.plane.cluster import LocalControlPlane
from hack.plane.machine import machine_state
from hack.plane.node import PAUSE_IMAGE, NodeBridge, RealNode, another_node, machine_lock
from tests.e2e.waiting import wait_for


class SimulatedTestFailure(Exception):
    pass


def _pod(node: RealNode) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"sleeper-on-{node.name}"},
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
    assert changes_left_by_a_failed_test(tmp_path, second_node=False) == {}


def test_teardown_after_a_failed_test_restores_the_machine_with_a_second_node_too(
    node_image: dict[str, Any], tmp_path: Path
) -> None:
    """A pod on each of two nodes, the test fails inside both blocks: the second node's teardown
    (its own containerd, cgroup root, address, work dir) and then the first's leave nothing."""
    assert changes_left_by_a_failed_test(tmp_path, second_node=True) == {}


def changes_left_by_a_failed_test(tmp_path: Path, *, second_node: bool) -> dict[str, Any]:
    """What differs on the machine after a test that failed with a pod running on a real node
    (and on a second one beside it): nothing, if the teardown is thorough. The machine lock is
    held around it all, so no other session's node starts between the two readings."""
    with machine_lock:
        before = machine_state()
        with pytest.raises(SimulatedTestFailure):
            with (
                NodeBridge() as bridge,
                LocalControlPlane(tmp_path, address=bridge.address) as plane,
                RealNode(plane, bridge) as node,
                another_node(node, None) if second_node else contextlib.nullcontext() as second,
            ):
                for each in (node, second):
                    if each is not None:
                        run_a_pod(plane, each)
                during = machine_state()
                # The node did change the machine: there is something to put back.
                assert during["cgroups"] and during["netns"] and during["processes"] and during["mounts"], during
                assert during["sysctls"] != before["sysctls"], "the kubelet set no sysctl"
                assert any(during["iptables"].values()), "no KUBE-/CNI- rules while the node ran"
                if second is not None:
                    assert f"/sys/fs/cgroup/memory/{second.name}" in during["cgroups"], during["cgroups"]
                    assert any(str(second.workdir) in m for m in during["mounts"]), during["mounts"]
                raise SimulatedTestFailure
        after = machine_state()
    return {k: (before[k], v) for k, v in after.items() if v != before[k]}


def run_a_pod(plane: LocalControlPlane, node: RealNode) -> None:
    pod = _pod(node)
    plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    name = pod["metadata"]["name"]
    wait_for(
        f"the pod {name} to run",
        lambda: plane.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
        interval=0.5,
    )
