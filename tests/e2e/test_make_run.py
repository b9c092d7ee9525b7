"""`make run` as shipped: the whole product on a plane of its own, tried with kubectl as the README says.

`python -m hack.plane.demo` (what `make run` runs once the binaries are built) is started as a user
starts it; the tests read its ready line and then use the kubeconfig it prints. Its plane dials
APIServices by name (no aggregator routing), so insights on loopback is reached through an
ExternalName Service: the session's plane, which dials endpoints, cannot stand in for it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hack.plane.binaries import find_binaries
from hack.plane.procs import Component
from insights.manifests import APISERVICE_NAME
from tests.e2e.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
READY_LINE = "Press Ctrl-C to stop and remove everything."


@dataclass
class Demo:
    banner: str
    kubeconfig: Path
    available_at_ready: str  # the APIService's Available condition when the ready line was printed
    process: Component

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(find_binaries().kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result


@pytest.fixture(scope="module")
def make_run(built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    workdir = tmp_path_factory.mktemp("make-run")
    demo = Component(
        "make run",
        [sys.executable, "-m", "hack.plane.demo", "--workdir", str(workdir)],
        workdir / "make-run.log",
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    demo.start()
    try:
        log = demo.log_file
        wait_for("make run's ready line", lambda: READY_LINE in log.read_text(), timeout=300, server=demo)
        banner = log.read_text()
        match = re.search(r"export KUBECONFIG=(\S+)", banner)
        assert match, banner
        running = Demo(banner=banner, kubeconfig=Path(match.group(1)), available_at_ready="", process=demo)
        running.available_at_ready = running.kubectl(
            "get", "apiservice", APISERVICE_NAME, "-o", 'jsonpath={.status.conditions[?(@.type=="Available")].status}'
        ).stdout
        yield running
    finally:
        demo.stop(grace=90)
    assert "stopped; everything removed." in demo.log_file.read_text()


def test_make_run_says_ready_only_once_the_aggregated_api_is_available(make_run: Demo) -> None:
    assert make_run.available_at_ready == "True"


def test_make_run_prints_the_aggregated_api_commands(make_run: Demo) -> None:
    for command in ("kubectl get foohealths", "kubectl explain foohealth", "kubectl create -f examples/fooreview.yaml"):
        assert command in make_run.banner


def test_kubectl_get_foohealths_on_make_run_lists_the_example(make_run: Demo) -> None:
    def listed() -> str:
        out = make_run.kubectl("get", "foohealths").stdout
        return out if "example-foo" in out else ""

    header, *rows = wait_for("the example's FooHealth", listed).splitlines()
    assert header.split()[0] == "NAME"
    assert [row.split()[0] for row in rows] == ["example-foo"]


def test_kubectl_explain_foohealth_on_make_run_reads_our_openapi(make_run: Demo) -> None:
    out = make_run.kubectl("explain", "foohealth").stdout
    assert "KIND:       FooHealth" in out
    assert "GROUP:      insights.samplecontroller.k8s.io" in out


def test_kubectl_create_of_the_example_fooreview_on_make_run_returns_every_field_error(make_run: Demo) -> None:
    out = make_run.kubectl("create", "-f", "examples/fooreview.yaml", "-o", "yaml").stdout
    verdict = yaml.safe_load(out)["status"]
    assert (verdict["allowed"], verdict["reason"]) == (False, "Invalid")
    # In the version the user wrote (v1alpha1): deploymentName, not v1's deployment.name.
    assert [cause["field"] for cause in verdict["causes"]] == ["spec.deploymentName", "spec.replicas"]


def test_the_controller_on_make_run_makes_the_examples_deployment(make_run: Demo) -> None:
    def made() -> bool:
        deployment = json.loads(make_run.kubectl("get", "deployment", "example-foo", "-o", "json").stdout)
        return bool(deployment["metadata"]["ownerReferences"][0]["name"] == "example-foo")

    wait_for("the example's Deployment, made by the controller", made)
