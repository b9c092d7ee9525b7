"""hack/plane/kube_versions.py: the per-version table answers for the version asked, by its minor."""

from __future__ import annotations

import pytest

from hack.plane.kube_versions import go_tags, kubelet_skew_refusal, minor_of, node_version, plane_flags, smoke_versions


@pytest.mark.parametrize(("version", "minor"), [("v1.27.16", 27), ("1.37.2", 37), ("v1.34", 34), ("v1.38.0-rc.1", 38)])
def test_minor_of_reads_the_minor(version: str, minor: int) -> None:
    assert minor_of(version) == minor


@pytest.mark.parametrize("version", ["v2.0.0", "latest", "v1.x.1"])
def test_minor_of_refuses_what_is_not_a_1_x_version(version: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes 1.x version"):
        minor_of(version)


@pytest.mark.parametrize(("version", "tags"), [("v1.27.16", ["providerless"]), ("v1.34.4", []), ("v1.37.2", [])])
def test_only_v1_27_is_built_providerless(version: str, tags: list[str]) -> None:
    assert go_tags(version) == tags


@pytest.mark.parametrize("version", ["v1.27.16", "v1.34.4", "v1.37.2"])
def test_no_matrix_version_needs_flags_of_its_own(version: str) -> None:
    # The endpoint reconciler follows the plane's address (hack/plane/cluster.py), not its version.
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert plane_flags(component, version) == []


def test_the_smoke_matrix_is_sorted_oldest_first() -> None:
    versions = smoke_versions()
    assert versions == sorted(versions, key=minor_of) and len(versions) >= 2


@pytest.mark.parametrize(
    ("apiserver", "kubelet"), [("v1.34.4", "v1.34.4"), ("v1.37.2", "v1.34.4"), ("v1.35.0", "v1.34.4")]
)
def test_a_kubelet_up_to_three_minors_older_may_join(apiserver: str, kubelet: str) -> None:
    assert kubelet_skew_refusal(apiserver, kubelet) is None


def test_a_kubelet_newer_than_the_apiserver_may_not_join() -> None:
    refusal = kubelet_skew_refusal("v1.27.16", "v1.34.4")
    assert refusal is not None and "newer than kube-apiserver v1.27.16" in refusal


def test_a_kubelet_four_minors_behind_may_not_join() -> None:
    refusal = kubelet_skew_refusal("v1.38.0", "v1.34.4")
    assert refusal is not None and "4 minors behind" in refusal


def test_the_real_node_runs_the_default_version_whatever_the_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_VERSION", "v1.99.0")  # a plane of another version
    assert node_version() != "v1.99.0"
