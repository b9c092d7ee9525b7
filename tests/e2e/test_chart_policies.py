"""The chart passes the policies a platform team enforces, checked by the real kube-apiserver.

Each rendering (defaults, and every optional feature on in each TLS mode) goes to a namespace
labelled `pod-security.kubernetes.io/enforce=restricted` and bound to tests/policies (Kyverno's
best-practices rules as ValidatingAdmissionPolicies), by server-side dry run:

* every pod the chart makes, as a Pod: PodSecurity admission enforces only on Pods, and a
  Deployment or Job that violates the profile is admitted with a warning;
* every Deployment and Job as itself: the workload rules, and not one warning from PodSecurity.

hostNetwork (webhook/insights.hostNetwork, for EKS with a custom CNI) is not among the features
turned on: the restricted profile forbids it by definition (the chart README says so).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.plane.cluster import LocalControlPlane
from tests.e2e.waiting import wait_for
from tests.unit.test_chart import render

POLICIES = Path(__file__).resolve().parents[1] / "policies" / "best-practices.yaml"
POD_SECURITY = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}

SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]
EVERYTHING_ON: dict[str, Any] = {
    "metrics": {
        "serviceMonitor": {"enabled": True, "authorization": {"createTokenSecret": True}},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
    "networkPolicy": {"enabled": True},
    "migrateStorage": {"job": {"enabled": True}},
    "webhook": {"topologySpreadConstraints": SPREAD, "podAntiAffinity": "hard"},
    "controller": {"replicas": 2, "topologySpreadConstraints": SPREAD},
    "insights": {"topologySpreadConstraints": SPREAD},
}
RENDERINGS = {
    "defaults": {},
    "everything-generated": EVERYTHING_ON,
    "everything-rotator": {**EVERYTHING_ON, "tls": {"mode": "rotator"}},
    "everything-cert-manager": {**EVERYTHING_ON, "tls": {"mode": "certManager"}},
}


@pytest.fixture(scope="module")
def policies(control_plane: LocalControlPlane) -> Iterator[None]:
    documents = [d for d in yaml.safe_load_all(POLICIES.read_text()) if d]
    control_plane.kubectl_objects("apply", documents)
    yield
    control_plane.kubectl_objects("delete", documents, "--ignore-not-found")


@pytest.fixture
def restricted(control_plane: LocalControlPlane, namespace: str, policies: None) -> str:
    """``namespace`` under the profile and the policy set, once kube-apiserver applies them there:
    it sees new policies, their bindings and a namespace's labels through informers, so the first
    dry runs after the label could come before them (and be admitted, a CI run found)."""
    labels = [f"{k}={v}" for k, v in POD_SECURITY.items()] + ["foo-operator.test/policies=best-practices"]
    control_plane.kubectl("label", "namespace", namespace, *labels)
    canary = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "policy-canary", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "canary"}},
            "template": {
                "metadata": {"labels": {"app": "canary"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]},
            },
        },
    }
    wait_for("the policy set to apply in the labelled namespace", lambda: _refused(control_plane, canary))
    return namespace


def _refused(control_plane: LocalControlPlane, obj: dict[str, Any]) -> subprocess.CompletedProcess[str] | None:
    """The server-side dry run of creating ``obj``, if the policies refused it."""
    result = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)
    refused = result.returncode != 0 and ("denied request" in result.stderr or "PodSecurity" in result.stderr)
    return result if refused else None


def _as_pod(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A workload's pod template as the Pod its controller would create."""
    if obj["kind"] == "Pod":
        pod = copy.deepcopy(obj)
    else:
        template = obj["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(template["metadata"])}
        pod["spec"] = copy.deepcopy(template["spec"])
        pod["metadata"]["name"] = f"{obj['metadata']['name']}-{obj['kind'].lower()}"
    pod["metadata"]["namespace"] = namespace
    return pod


def _workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Deployment", "Job", "Pod")]


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_pod_of_the_chart_is_admitted_under_restricted_and_the_policy_set(
    control_plane: LocalControlPlane, restricted: str, rendering: str
) -> None:
    objects = render(RENDERINGS[rendering], namespace=restricted)
    # The ServiceAccount admission plugin refuses a Pod whose ServiceAccount does not exist.
    control_plane.kubectl_objects("apply", [o for o in objects if o["kind"] == "ServiceAccount"])
    pods = [_as_pod(o, restricted) for o in _workloads(objects)]
    assert len(pods) >= (3 if rendering == "defaults" else 4)
    for pod in pods:
        result = control_plane.kubectl_objects("create", [pod], "--dry-run=server", timeout=60)
        assert "Warning" not in result.stderr, (pod["metadata"]["name"], result.stderr)


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_workload_of_the_chart_is_admitted_without_a_pod_security_warning(
    control_plane: LocalControlPlane, restricted: str, rendering: str
) -> None:
    workloads = [o for o in _workloads(render(RENDERINGS[rendering], namespace=restricted)) if o["kind"] != "Pod"]
    for workload in workloads:
        result = control_plane.kubectl_objects("create", [workload], "--dry-run=server", timeout=60)
        assert "Warning" not in result.stderr, (workload["metadata"]["name"], result.stderr)


def _break_ro_rootfs(container: dict[str, Any]) -> None:
    del container["securityContext"]["readOnlyRootFilesystem"]


def _break_requests(container: dict[str, Any]) -> None:
    del container["resources"]["requests"]


def _break_tag(container: dict[str, Any]) -> None:
    container["image"] = "nginx:latest"


def _break_drop_all(container: dict[str, Any]) -> None:
    container["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}


@pytest.mark.parametrize(
    ("rule", "undo"),
    [
        ("require-ro-rootfs", _break_ro_rootfs),
        ("require-pod-requests-limits", _break_requests),
        ("disallow-latest-tag", _break_tag),
        ("require-drop-all", _break_drop_all),
    ],
)
def test_the_policies_refuse_a_chart_pod_with_its_hardening_undone(
    control_plane: LocalControlPlane, restricted: str, rule: str, undo: Any
) -> None:
    """The check can fail: each rule refuses the workload that breaks it, and its pod, naming the rule
    (PodSecurity refuses the pod first where the profile covers the same field: drop ALL)."""
    objects = render(namespace=restricted)
    control_plane.kubectl_objects("apply", [o for o in objects if o["kind"] == "ServiceAccount"])
    workload = copy.deepcopy(next(o for o in objects if o["kind"] == "Deployment"))
    undo(workload["spec"]["template"]["spec"]["containers"][0])
    pod = _as_pod(workload, restricted)
    for obj in (workload, pod):
        # Each policy reaches kube-apiserver's admission through an informer of its own.
        result = wait_for(f"{rule} to refuse the {obj['kind']}", lambda obj=obj: _refused(control_plane, obj))
        expected = "PodSecurity" if obj is pod and rule == "require-drop-all" else f"denied request: {rule}: "
        assert expected in result.stderr, result.stderr


def test_pod_security_warns_about_a_workload_and_refuses_its_pod(
    control_plane: LocalControlPlane, restricted: str
) -> None:
    objects = render(namespace=restricted)
    control_plane.kubectl_objects("apply", [o for o in objects if o["kind"] == "ServiceAccount"])
    workload = copy.deepcopy(next(o for o in objects if o["kind"] == "Deployment"))
    workload["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    warned = control_plane.kubectl_objects("create", [workload], "--dry-run=server")
    assert 'violate PodSecurity "restricted:latest"' in warned.stderr
    pod = _as_pod(workload, restricted)  # the same pod as a Pod: refused, not warned about
    refused = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr
