"""The chart's knobs are objects a real kube-apiserver accepts: server-side dry-run of `helm template`.

Every knob of tests/unit/test_chart_values.py set at once (and the defaults), rendered into a
fresh namespace and applied with `--dry-run=server`: the apiserver validates each object
against its real schema (a typo'd probe field, a malformed selector, a hostNetwork pod with a
containerPort its hostPort disagrees with would all be refused here) and answers with what it
would store. New objects are created and existing ones (the CRD, say, that another test
registered) replaced, both with `--dry-run=server`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from hack.plane.cluster import LocalControlPlane
from tests.unit.test_chart import render

EVERY_KNOB: dict[str, Any] = {
    "commonLabels": {"team": "platform"},
    "webhook": {
        "failurePolicy": "Ignore",
        "timeoutSeconds": 8,
        "namespaceSelector": {"matchLabels": {"admission": "on"}},
        "objectSelector": {"matchExpressions": [{"key": "skip-admission", "operator": "DoesNotExist"}]},
        "validating": {"failurePolicy": "Fail", "timeoutSeconds": 3},
        "hostNetwork": True,
        "containerPort": 10443,
        "revisionHistoryLimit": 3,
        "readinessProbe": {"periodSeconds": 2, "timeoutSeconds": 2},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
    },
    "insights": {
        "hostNetwork": True,
        "containerPort": 10444,
        "metricsPort": 10445,
        "revisionHistoryLimit": 1,
        "strategy": {"type": "Recreate"},
        "service": {"annotations": {"a.example/x": "1"}, "labels": {"team": "platform"}},
    },
    "controller": {
        "livenessProbe": {"httpGet": None, "exec": {"command": ["true"]}},
        "extraEnv": [{"name": "GOMAXPROCS", "value": "2"}],
        # Issue #28's per-component knobs, which the apiserver validates more closely than the schema.
        "replicas": 2,
        "leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20, "retryPeriodSeconds": 4},
        "deploymentAnnotations": {"policy.example/owner": "platform"},
        "podAnnotations": {"pod.example/scrape": "no"},
        "podLabels": {"tier": "system"},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        "podSecurityContext": {"supplementalGroups": [4000]},
        "securityContext": {"seLinuxOptions": {"level": "s0:c123,c456"}},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "podDisruptionBudget": {"minAvailable": 1},
        "priorityClassName": "system-cluster-critical",
    },
    "serviceAccount": {"controller": {"labels": {"team": "platform"}}},
    "migrateStorage": {"job": {"enabled": True, "priorityClassName": "system-cluster-critical"}},
    "tests": {"priorityClassName": "system-cluster-critical"},
}


def _items(answer: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON document per object (a List only for `apply`): read them all."""
    decoder, items, at = json.JSONDecoder(), [], 0
    while at < len(answer.rstrip()):
        document, end = decoder.raw_decode(answer, at)
        items += document["items"] if document.get("kind") == "List" else [document]
        at = end
        while at < len(answer) and answer[at].isspace():
            at += 1
    return items


def server_dry_run(plane: LocalControlPlane, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each object as the apiserver would store it: created if new, replaced whole if it exists.

    Not `apply --server-side`: a CRD or webhook configuration another test registered (the
    session shares the cluster-scoped ones) keeps that manager's fields — its clientConfig.url
    beside our service — and the merge is invalid for reasons that are not the chart's.
    """
    existing, new = [], []
    for obj in objects:
        where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        found = plane.kubectl(
            "get",
            f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}/{obj['metadata']['name']}"
            if "/" in obj["apiVersion"]
            else f"{obj['kind']}/{obj['metadata']['name']}",
            *where,
            "-o",
            "name",
            check=False,
        )
        (existing if found.returncode == 0 else new).append(obj)
    stored = []
    for verb, batch in (("create", new), ("replace", existing)):
        if batch:
            stored += _items(plane.kubectl_objects(verb, batch, "--dry-run=server", "-o", "json").stdout)
    assert len(stored) == len(objects)
    return stored


def dry_run(plane: LocalControlPlane, namespace: str, values: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """What the apiserver would store for every rendered object, by (kind, name)."""
    return {(o["kind"], o["metadata"]["name"]): o for o in server_dry_run(plane, render(values, namespace=namespace))}


def test_defaults_pass_a_server_side_dry_run(control_plane: LocalControlPlane, namespace: str) -> None:
    dry_run(control_plane, namespace, {})


def test_every_knob_passes_a_server_side_dry_run(control_plane: LocalControlPlane, namespace: str) -> None:
    dry_run(control_plane, namespace, EVERY_KNOB)


def test_the_knobs_survive_the_apiservers_defaulting(control_plane: LocalControlPlane, namespace: str) -> None:
    stored = dry_run(control_plane, namespace, EVERY_KNOB)
    mutating = stored[("MutatingWebhookConfiguration", "foo-operator")]["webhooks"][0]
    validating = stored[("ValidatingWebhookConfiguration", "foo-operator")]["webhooks"][0]
    assert (mutating["failurePolicy"], mutating["timeoutSeconds"]) == ("Ignore", 8)
    assert (validating["failurePolicy"], validating["timeoutSeconds"]) == ("Fail", 3)
    assert mutating["objectSelector"] == EVERY_KNOB["webhook"]["objectSelector"]
    assert mutating["namespaceSelector"]["matchLabels"] == {"admission": "on"}

    webhook = stored[("Deployment", "foo-operator-webhook")]
    pod = webhook["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and webhook["spec"]["revisionHistoryLimit"] == 3
    (main,) = pod["containers"]
    # On the host network the containerPort is the node's port (a Pod, not a template, gets the
    # matching hostPort defaulted when it is created).
    assert {"name": "https", "containerPort": 10443, "protocol": "TCP"} in main["ports"]
    assert "--admission-timeout-seconds=3" in main["args"]
    assert main["readinessProbe"]["periodSeconds"] == 2 and main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in main["env"]
    assert webhook["metadata"]["labels"]["team"] == "platform"

    controller = stored[("Deployment", "foo-operator-controller")]["spec"]["template"]["spec"]["containers"][0]
    assert "httpGet" not in controller["livenessProbe"] and controller["livenessProbe"]["exec"] == {"command": ["true"]}

    assert stored[("Deployment", "foo-operator-insights")]["spec"]["strategy"] == {"type": "Recreate"}
    spread = stored[("Deployment", "foo-operator-controller")]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    assert stored[("PodDisruptionBudget", "foo-operator-controller")]["spec"]["minAvailable"] == 1


def test_the_plain_manifests_pass_a_server_side_dry_run(control_plane: LocalControlPlane) -> None:
    """deploy/foo-operator.yaml as a user without Helm applies it (its namespace made first, as
    `kubectl apply` of the file would, since the Namespace is its first object)."""
    manifests = Path(__file__).resolve().parents[2] / "deploy" / "foo-operator.yaml"
    created = control_plane.kubectl("create", "namespace", "foo-system", check=False).returncode == 0
    try:
        objects = [o for o in yaml.safe_load_all(manifests.read_text()) if o and o["kind"] != "Namespace"]
        server_dry_run(control_plane, objects)
    finally:
        if created:
            control_plane.kubectl("delete", "namespace", "foo-system", "--wait=false", check=False)
