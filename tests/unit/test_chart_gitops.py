"""The chart as GitOps tools render it: `helm template`, no cluster to look anything up in, again and
again (Argo CD compares each render with the cluster; any byte that moves is a diff it syncs).

Every TLS mode but `generated` renders the same bytes each time; `generated` cannot (it makes a CA
when `lookup` finds none), which is why docs/gitops.md says to use rotator or certManager there.
Argo CD's annotations: the kept CRD is neither pruned nor deleted, the APIService comes in a later
wave than the insights pods, and the one hook (migrate-storage) stays a Helm hook, which Argo CD
maps to its own (an Argo CD hook annotation anywhere would make it ignore every Helm hook).
tests/e2e/test_chart_gitops.py renders with Helm 4 too and checks docs/gitops.md's examples.
"""

from __future__ import annotations

import pytest

from .test_chart import CHART, MODES, Objects, find, helm_with_values, mode_values, render

DETERMINISTIC_MODES = tuple(m for m in MODES if m != "generated")
EVERYTHING_ON = {
    "migrateStorage": {"job": {"enabled": True}},
    "metrics": {
        "serviceMonitor": {"enabled": True, "authorization": {"createTokenSecret": True}},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
    "networkPolicy": {"enabled": True},
}


def template(mode: str) -> str:
    values = {**mode_values(mode), **EVERYTHING_ON}
    result = helm_with_values("template", values, "foo-operator", str(CHART), "--namespace", "foo-system")
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("mode", DETERMINISTIC_MODES)
def test_every_mode_but_generated_renders_the_same_bytes_twice(mode: str) -> None:
    assert template(mode) == template(mode)


def test_generated_mode_makes_a_new_ca_on_every_render_without_a_cluster() -> None:
    """Not a GitOps mode: under Argo CD each render is a new CA, so the app is never in sync and every
    sync rotates the CA while `failurePolicy: Fail` refuses Foo writes in the window."""
    first, second = template("generated"), template("generated")
    changed = [line for line in first.splitlines() if line not in second.splitlines()]
    assert changed and all(("caBundle:" in line or ".crt:" in line or ".key:" in line) for line in changed), changed


def _annotations(objects: Objects, kind: str) -> dict[str, str]:
    annotations: dict[str, str] = find(objects, kind)["metadata"].get("annotations") or {}
    return annotations


@pytest.mark.parametrize("mode", MODES)
def test_the_apiservice_is_applied_after_insights_in_argo_cds_sync_waves(mode: str) -> None:
    objects = render(mode_values(mode))
    assert _annotations(objects, "APIService")["argocd.argoproj.io/sync-wave"] == "1"
    deployment = find(objects, "Deployment", "foo-operator-insights")
    assert "argocd.argoproj.io/sync-wave" not in (deployment["metadata"].get("annotations") or {}), "wave 0"


def test_no_object_carries_an_argo_cd_hook_so_argo_cd_maps_the_helm_hooks() -> None:
    """Argo CD ignores every Helm hook of a chart that has one Argo CD hook annotation."""
    objects = render({**EVERYTHING_ON})
    for obj in objects:
        annotations = obj["metadata"].get("annotations") or {}
        assert not any(key.startswith("argocd.argoproj.io/hook") for key in annotations), obj["metadata"]["name"]
    hooks = {o["metadata"]["name"] for o in objects if "helm.sh/hook" in (o["metadata"].get("annotations") or {})}
    assert hooks == {"foo-operator-migrate-storage", "foo-operator-test-readyz"}
