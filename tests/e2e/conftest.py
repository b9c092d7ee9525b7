"""End-to-end fixtures: one real local control plane (hack/) per test session.

Every test under tests/e2e is marked `e2e`. `FOO_E2E=0` skips them all (e.g. on a machine
without Go); otherwise the first session builds the binaries (~11 min cold, seconds warm).
`K8S_VERSION=v1.37.2` runs the plane of another version; the tests marked `smoke` are the ones
`make test` runs on every version of the matrix (`K8S_SMOKE_VERSIONS` in hack/versions.env).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = Path(__file__).resolve().parent
# `hack` is a tooling package, not installed with the product; `pytest` run as a script
# (rather than `python -m pytest`) would not have the repo root on sys.path.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from hack.plane.binaries import BUILD_SCRIPT, versions  # noqa: E402
from hack.plane.cluster import LocalControlPlane  # noqa: E402


def pytest_report_header(config: pytest.Config) -> str:
    # K8S_VERSION picks the plane (hack/versions.env has the default and the smoke matrix).
    return f"kubernetes: {versions()['K8S_VERSION']} (K8S_VERSION; `-m smoke` is the matrix's subset)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, not just this directory's: filter by path.
    skip = pytest.mark.skip(reason="FOO_E2E=0: end-to-end tests disabled")
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if os.environ.get("FOO_E2E") == "0":
                item.add_marker(skip)


class _Stories:
    @pytest.hookimpl(wrapper=True)  # around every other implementation: -k's deselection, the shuffle
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Iterator[None]:
        collected = list(items)
        yield
        bring_earlier_steps(collected, items)
        keep_stories_in_order(items)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Stories(), "foo-operator-stories")


def _line(item: pytest.Item) -> int:
    return item.reportinfo()[1] or 0


def bring_earlier_steps(collected: list[pytest.Item], items: list[pytest.Item]) -> None:
    """A story's step selected with ``-k`` without the steps before it runs after them.

    A step stands on the ones before it, as the user's cluster does; run alone it would read what
    they never made. So the earlier steps come along, as if selected too (pytest's summary still
    counts them as deselected). A step named by node id is collected alone and still fails.
    """
    selected = set(items)
    last: dict[str, int] = {}
    for item in items:
        if item.get_closest_marker("story") is not None:
            last[str(item.path)] = max(last.get(str(item.path), 0), _line(item))
    items.extend(
        item
        for item in collected
        if item not in selected and str(item.path) in last and _line(item) < last[str(item.path)]
    )


def keep_stories_in_order(items: list[pytest.Item]) -> None:
    """The steps of a module marked ``story`` keep their file order, wherever a shuffle put them.

    Such a module is one user journey told step by step (switching from sample-controller: each
    step stands on the last, as the user's cluster does); every other test stands alone and may
    run in any order.
    """
    slots: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.get_closest_marker("story") is not None:
            slots.setdefault(str(item.path), []).append(index)
    for indices in slots.values():
        steps = sorted((items[i] for i in indices), key=_line)
        for index, step in zip(indices, steps, strict=True):
            items[index] = step


def _build(*argv: str, env: dict[str, str] | None = None) -> None:
    """hack/build.sh (or another build script): a no-op in seconds when the cache is warm."""
    command = list(argv) or ["bash", str(BUILD_SCRIPT)]
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        pytest.fail(f"{' '.join(command)} failed (exit {result.returncode}):\n{tail}", pytrace=False)
    print(f"{' '.join(command)} took {time.monotonic() - began:.1f}s")


@pytest.fixture(scope="session")
def built() -> None:
    """hack/build.sh has run: the plane's binaries and this repository's Go programs are in the cache."""
    _build()


@pytest.fixture(scope="session")
def control_plane(built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and one kwok node.

    Shared by the whole session: tests isolate themselves by namespace and object names.
    Component logs stay in the pytest temp dir (`<tmp>/control-plane0/logs`) after teardown.
    """
    workdir = tmp_path_factory.mktemp("control-plane")
    began = time.monotonic()
    with LocalControlPlane(workdir, nodes=1) as plane:
        print(f"control plane ready in {time.monotonic() - began:.1f}s at {plane.server}")
        yield plane


# --- foo-operator on the plane ------------------------------------------------------------------

from hack.plane.product import LocalProduct  # noqa: E402


@pytest.fixture(scope="session")
def foo_operator(control_plane: LocalControlPlane) -> Iterator[LocalProduct]:
    """The webhook service on 127.0.0.1, with the CRD and both admission configurations registered."""
    with LocalProduct(control_plane) as product:
        yield product


@pytest.fixture
def namespace(control_plane: LocalControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, named after it, deleted afterwards (without waiting)."""
    # The name is cut short (47 characters in all, so a Service's DNS name in this namespace still
    # fits a certificate's 64-character CN), and a digest of the whole test id keeps two
    # parametrized cases (whose ids differ only at the end) apart while the first one's
    # namespace is still being deleted.
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:5]
    slug = request.node.name.lower().replace("_", "-")[:34].strip("-")
    name = f"t-{slug}-{digest}-{os.getpid() % 10000}"
    name = "".join(c for c in name if c.isalnum() or c == "-").strip("-")
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


# --- a real node (hack/plane/node.py) ------------------------------------------------------------------

from hack.plane.kube_versions import kubelet_skew_refusal, node_version  # noqa: E402
from hack.plane.node import cannot_host_node, image_metadata  # noqa: E402


@pytest.fixture(scope="session")
def node_image() -> dict[str, Any]:
    """The parts a real node runs, built here: kubelet, kube-proxy, pause, the product image.

    Where no node can run (not root, no containerd) the tier is skipped with the reason, except
    under CI=true, where it must run: there that is a failure.
    """
    reason = cannot_host_node()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the real-node tier cannot run: {reason}", pytrace=False)
        pytest.skip(f"no real node here: {reason}")
    # A plane of another version of the matrix (K8S_VERSION) gets the default version's kubelet,
    # where the version skew policy allows it; else the tier says why and steps aside.
    refusal = kubelet_skew_refusal(versions()["K8S_VERSION"], node_version())
    if refusal:
        pytest.skip(f"no real node on this plane: {refusal}")
    default_version = {key: value for key, value in os.environ.items() if key != "K8S_VERSION"}
    _build("bash", str(BUILD_SCRIPT), "node", env=default_version)
    _build("bash", str(REPO_ROOT / "hack" / "image.sh"), env={**default_version, "PYTHON": sys.executable})
    return image_metadata()
