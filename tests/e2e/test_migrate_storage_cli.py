"""`foo-operator migrate-storage` as an operator runs it on production data: progress with a total and
time left, `--dry-run` that writes nothing, `-o json` for scripts — against the real plane.

The Foos here are this test's own (in its namespace); others the session made may be counted
too, so totals are checked as "at least" and the pages as consistent with the total.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fooapi.crd import CRD_NAME
from hack.plane.cluster import LocalControlPlane
from hack.plane.product import LocalProduct
from tests.e2e.waiting import wait_for

FOO_OPERATOR = Path(sys.executable).parent / "foo-operator"
FOOS = 25
PAGE = re.compile(r"^page (?P<page>\d+): .* \((?P<done>\d+) of ~(?P<total>\d+)(, ~(?P<left>\w+) left)?, [\d.]+s\)$")


def migrate(plane: LocalControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FOO_OPERATOR), "migrate-storage", "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_foos(plane: LocalControlPlane, namespace: str) -> dict[str, str]:
    items = [
        {
            "apiVersion": "samplecontroller.k8s.io/v1alpha1",
            "kind": "Foo",
            "metadata": {"name": f"foo-{i:02d}", "namespace": namespace},
            "spec": {"deploymentName": f"foo-{i:02d}-nginx", "replicas": 1},
        }
        for i in range(FOOS)
    ]
    plane.kubectl_objects("create", items)
    return resource_versions(plane, namespace)


def resource_versions(plane: LocalControlPlane, namespace: str) -> dict[str, str]:
    listed = json.loads(plane.kubectl("get", "foos.v1.samplecontroller.k8s.io", "-n", namespace, "-o", "json").stdout)
    return {f["metadata"]["name"]: f["metadata"]["resourceVersion"] for f in listed["items"]}


def stored_versions(plane: LocalControlPlane) -> list[str]:
    crd: dict[str, Any] = json.loads(plane.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    return list(crd["status"]["storedVersions"])


def set_stored_versions(plane: LocalControlPlane, versions: list[str]) -> None:
    plane.kubectl(
        "patch",
        "crd",
        CRD_NAME,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"storedVersions": versions}}),
    )


def test_progress_lines_carry_the_total_from_remaining_item_count_and_time_left(
    foo_operator: LocalProduct, namespace: str
) -> None:
    make_foos(foo_operator.plane, namespace)
    result = migrate(foo_operator.plane, "--page-size", "10")
    assert result.returncode == 0, result.stderr
    pages = [PAGE.match(line) for line in result.stdout.splitlines() if line.startswith("page ")]
    assert pages and all(pages), result.stdout
    total = int(pages[-1]["total"])  # type: ignore[index]
    assert total >= FOOS and int(pages[-1]["done"]) == total  # type: ignore[index]
    assert [int(p["done"]) for p in pages] == [min(10 * (i + 1), total) for i in range(len(pages))]  # type: ignore[index]
    assert all(int(p["total"]) == total for p in pages)  # type: ignore[index]  # the count held
    assert pages[0]["left"] is not None  # type: ignore[index]


def test_dry_runs_write_neither_foos_nor_stored_versions(foo_operator: LocalProduct, namespace: str) -> None:
    plane = foo_operator.plane
    before = make_foos(plane, namespace)
    set_stored_versions(plane, ["v1alpha1", "v1"])
    try:
        for mode in ("client", "server"):
            result = migrate(plane, f"--dry-run={mode}", "-o", "json")
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            assert report["dryRun"] == mode and report["foos"]["checked"] >= FOOS
            assert report["foos"]["rewritten"] == report["foos"]["failed"] == 0
            assert report["storedVersions"] == {"before": ["v1alpha1", "v1"], "after": ["v1alpha1", "v1"]}
            assert "would be [v1alpha1, v1] -> [v1] (dry run: left as it is)" in result.stderr
            assert resource_versions(plane, namespace) == before
            assert stored_versions(plane) == ["v1alpha1", "v1"]
    finally:
        result = migrate(plane, "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["storedVersions"] == {"before": ["v1alpha1", "v1"], "after": ["v1"]}
    assert report["succeeded"] and stored_versions(plane) == ["v1"]


def test_json_output_is_one_document_on_stdout(foo_operator: LocalProduct, namespace: str) -> None:
    make_foos(foo_operator.plane, namespace)
    result = migrate(foo_operator.plane, "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # nothing else on stdout
    assert report["crd"] == CRD_NAME and report["storageVersion"] == "v1"
    assert report["foos"]["total"] >= FOOS and report["failures"] == []
    assert "conversion webhook: answering" in result.stderr


def test_on_a_terminal_progress_is_a_bar_on_stderr(foo_operator: LocalProduct, namespace: str) -> None:
    make_foos(foo_operator.plane, namespace)
    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [
                str(FOO_OPERATOR),
                "migrate-storage",
                "--kubeconfig",
                str(foo_operator.plane.kubeconfig),
                "--page-size",
                "10",
            ],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            timeout=300,
        )
        os.close(follower)
        follower = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert result.returncode == 0
    assert not any(line.startswith("page ") for line in result.stdout.splitlines())  # the bar replaces them
    assert re.search(rb"\[[#.]{30}\] +\d+% \d+ of ~\d+", drawn), drawn[-400:]
    assert result.stdout.splitlines()[-1].startswith("status.storedVersions: ")


@pytest.mark.parametrize("flag", [["--dry-run=maybe"], ["-o", "yaml"]])
def test_unknown_choices_are_one_line(flag: list[str], foo_operator: LocalProduct) -> None:
    result = migrate(foo_operator.plane, *flag)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


def test_the_charts_job_rbac_is_enough_for_the_command(
    foo_operator: LocalProduct, namespace: str, tmp_path: Path
) -> None:
    """The hook Job's ServiceAccount, ClusterRole and binding, applied for real, then the command run
    with that ServiceAccount's token: RBAC is what the Job needs (kwok runs no container)."""
    from tests.unit.test_chart import render

    plane = foo_operator.plane
    objects = [
        o
        for o in render({"migrateStorage": {"job": {"enabled": True}}}, release=f"r{os.getpid()}", namespace=namespace)
        if "migrate-storage" in o["metadata"]["name"] and o["kind"] != "Job"
    ]
    plane.apply(*objects)
    account = next(o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount")
    job = f"--as=system:serviceaccount:{namespace}:{account}"
    # kube-apiserver's authorizer learns of the ClusterRole and its binding from a watch, a moment later.
    wait_for(
        "the Job's ClusterRole to apply to its ServiceAccount",
        lambda: plane.kubectl("auth", "can-i", "update", "foos", "-A", job, check=False).stdout.strip() == "yes",
    )
    try:
        make_foos(plane, namespace)
        set_stored_versions(plane, ["v1alpha1", "v1"])
        token = plane.kubectl("create", "token", account, "-n", namespace).stdout.strip()
        kubeconfig = tmp_path / "job-kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "job",
                    "clusters": [
                        {
                            "name": "plane",
                            "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)},
                        }
                    ],
                    "users": [{"name": "job", "user": {"token": token}}],
                    "contexts": [{"name": "job", "context": {"cluster": "plane", "user": "job"}}],
                }
            )
        )
        result = subprocess.run(
            [str(FOO_OPERATOR), "migrate-storage", "--kubeconfig", str(kubeconfig), "-o", "json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["storedVersions"]["after"] == ["v1"]
        denied = plane.kubectl("auth", "can-i", "delete", "foos", "-A", job, check=False)
        assert denied.stdout.strip() == "no"  # nothing beyond what the command does
    finally:
        cluster_scoped = [
            f"{o['kind'].lower()}/{o['metadata']['name']}"
            for o in objects
            if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
        ]
        plane.kubectl("delete", *cluster_scoped, "--ignore-not-found", check=False)
