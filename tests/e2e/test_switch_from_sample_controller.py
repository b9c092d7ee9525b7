"""Switching from sample-controller in place, as a user would, on a control plane of this module's own.

The Foo CRD is cluster-scoped and the session's shared plane carries foo-operator's CRD, over which
sample-controller's cannot be applied; so this module starts its own plane (~10 s). The story, in
test order (each step builds on the last):

1. the Go sample-controller runs with its own CRD (v1alpha1 only) and makes 20 Foos' Deployments;
   it is stopped; etcd holds every Foo at v1alpha1;
2. foo-operator is installed over it (the CRD by server-side apply, webhook and controller):
   the CRD becomes ours, every Foo reads the same at both versions, and the controller adopts
   every Deployment without changing a Deployment, ReplicaSet or Pod;
3. ``foo-operator migrate-storage`` refuses while the conversion webhook is down, then re-writes
   every Foo at v1 and prunes ``status.storedVersions`` to ``[v1]``; a second run writes nothing;
4. the way back still works: sample-controller runs against our CRD at v1alpha1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from apimachinery.objects import Object
from fooapi.crd import CRD_NAME
from hack.plane.binaries import BUILD_SCRIPT, find_binaries
from hack.plane.cluster import LocalControlPlane
from hack.plane.procs import Component, wait_until
from hack.plane.product import LocalProduct
from tests.e2e.storage import DONE_LINE, etcd_foos
from tests.e2e.waiting import wait_for

# One journey in steps (module docstring): they run in file order, also when the suite is shuffled.
pytestmark = pytest.mark.story

FOOS = 20
NAMESPACE = "switch-from-sample-controller"
SCALED = "foo-00"  # scaled by the user after the switch
COLLECTED = "foo-19"  # deleted at the end: its Deployment must be garbage-collected
FOO_OPERATOR = Path(sys.executable).parent / "foo-operator"


# ---- helpers ----------------------------------------------------------------------------------------


def items(plane: LocalControlPlane, resource: str) -> list[Object]:
    out = plane.kubectl("get", resource, "-n", NAMESPACE, "-o", "json").stdout
    return list(json.loads(out)["items"])


def foos(plane: LocalControlPlane, version: str) -> dict[str, Object]:
    return {f["metadata"]["name"]: f for f in items(plane, f"foos.{version}.samplecontroller.k8s.io")}


def deployment_of(plane: LocalControlPlane, foo_name: str) -> Object:
    """The Deployment sample-controller's naming gives the Foo (``<foo>-nginx``)."""
    return dict(
        json.loads(plane.kubectl("get", "deployment", f"{foo_name}-nginx", "-n", NAMESPACE, "-o", "json").stdout)
    )


def scale_at_v1alpha1(plane: LocalControlPlane, foo_name: str, replicas: int) -> None:
    """Patch a Foo's replicas, named at v1alpha1 in full: kubectl's discovery cache may still map
    ``foo`` to a v1 that sample-controller's own CRD no longer serves."""
    resource = "foos.v1alpha1.samplecontroller.k8s.io"
    patch = json.dumps({"spec": {"replicas": replicas}})
    plane.kubectl("patch", resource, foo_name, "-n", NAMESPACE, "--type=merge", "-p", patch)


def crd(plane: LocalControlPlane) -> Object:
    return dict(json.loads(plane.kubectl("get", "crd", CRD_NAME, "-o", "json", "--show-managed-fields").stdout))


def legacy_foo(i: int) -> Object:
    return {
        "apiVersion": "samplecontroller.k8s.io/v1alpha1",
        "kind": "Foo",
        "metadata": {"name": f"foo-{i:02d}", "namespace": NAMESPACE},
        "spec": {"deploymentName": f"foo-{i:02d}-nginx", "replicas": 1 + i % 3},
    }


@dataclass
class Workloads:
    """Identities a restart or a re-created Deployment would change."""

    deployments: dict[str, tuple[str, int]]  # name -> (uid, generation)
    replica_sets: dict[str, tuple[str, str]]  # name -> (uid, pod-template-hash)
    pods: dict[str, str]  # name -> uid
    owner_api_versions: set[str] = field(default_factory=set)


def workloads(plane: LocalControlPlane) -> Workloads:
    deployments = items(plane, "deployments")
    return Workloads(
        deployments={d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"]) for d in deployments},
        replica_sets={
            r["metadata"]["name"]: (r["metadata"]["uid"], r["metadata"]["labels"]["pod-template-hash"])
            for r in items(plane, "replicasets")
        },
        pods={p["metadata"]["name"]: p["metadata"]["uid"] for p in items(plane, "pods")},
        owner_api_versions={ref["apiVersion"] for d in deployments for ref in d["metadata"]["ownerReferences"]},
    )


def available(plane: LocalControlPlane, foo_version: str) -> bool:
    """Every Foo's Deployment fully available, and the Foo's status saying so."""
    deployments = {d["metadata"]["name"]: d for d in items(plane, "deployments")}
    found = foos(plane, foo_version)
    if len(found) < FOOS:
        return False
    for foo in found.values():
        spec = foo["spec"]
        name = spec.get("deploymentName") or spec.get("deployment", {}).get("name")
        status = deployments.get(name, {}).get("status", {})
        if status.get("availableReplicas") != spec["replicas"] or status.get("updatedReplicas") != spec["replicas"]:
            return False
        if (foo.get("status") or {}).get("availableReplicas") != spec["replicas"]:
            return False
    return True


def synced_by_us(plane: LocalControlPlane) -> bool:
    """Our controller has observed every Foo's generation and found it Ready."""
    for foo in foos(plane, "v1").values():
        status = foo.get("status") or {}
        ready = [c for c in status.get("conditions") or () if c["type"] == "Ready"]
        if (
            status.get("observedGeneration") != foo["metadata"]["generation"]
            or not ready
            or ready[0]["status"] != "True"
        ):
            return False
    return True


def migrate_storage(plane: LocalControlPlane, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run(
        [str(FOO_OPERATOR), "migrate-storage", "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - began
    print(f"$ foo-operator migrate-storage (exit {result.returncode}, {took:.1f}s)\n{result.stdout}{result.stderr}")
    return result, took


def resource_versions(plane: LocalControlPlane) -> dict[str, str]:
    return {name: f["metadata"]["resourceVersion"] for name, f in foos(plane, "v1").items()}


def sample_controller(plane: LocalControlPlane, log_name: str) -> Component:
    binaries = find_binaries()
    log = plane.logs_dir / log_name
    process = Component("sample-controller", [binaries.sample_controller, f"-kubeconfig={plane.kubeconfig}"], log)
    process.start()
    wait_until(
        "sample-controller's workers",
        lambda: "Started workers" in log.read_text(errors="replace"),
        timeout=60,
        watch=[process],
    )
    return process


# ---- the story's fixtures ------------------------------------------------------------------------------


@dataclass
class Legacy:
    """The cluster as sample-controller left it."""

    plane: LocalControlPlane
    specs: dict[str, Object]  # Foo name -> v1alpha1 spec
    before: Workloads
    stored: dict[str, tuple[str, int]]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    if not FOO_OPERATOR.exists():
        pytest.fail(
            f"{FOO_OPERATOR} is missing: reinstall the package (`make venv`, or pip install -e .)", pytrace=False
        )
    if find_binaries().missing("sample_controller", "sample_controller_crd"):
        build = subprocess.run(["bash", str(BUILD_SCRIPT), "sample-controller"], capture_output=True, text=True)
        if build.returncode != 0:
            pytest.fail(
                f"hack/build.sh sample-controller failed:\n{build.stdout[-3000:]}{build.stderr[-3000:]}", pytrace=False
            )
    began = time.monotonic()
    with LocalControlPlane(tmp_path_factory.mktemp("switch-plane"), nodes=1) as p:
        print(f"this module's control plane ready in {time.monotonic() - began:.1f}s")
        yield p


@pytest.fixture(scope="module")
def legacy(plane: LocalControlPlane) -> Legacy:
    began = time.monotonic()
    plane.kubectl("apply", "-f", str(find_binaries().sample_controller_crd))
    plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    plane.kubectl("create", "namespace", NAMESPACE)
    controller = sample_controller(plane, "sample-controller.log")
    try:
        plane.apply(*(legacy_foo(i) for i in range(FOOS)))
        wait_for(
            "sample-controller to roll out every Foo's Deployment", lambda: available(plane, "v1alpha1"), timeout=180
        )
    finally:
        controller.stop()
    print(f"sample-controller converged {FOOS} Foos in {time.monotonic() - began:.1f}s")
    specs = {name: f["spec"] for name, f in foos(plane, "v1alpha1").items()}
    return Legacy(plane, specs, workloads(plane), etcd_foos(plane, NAMESPACE))


@pytest.fixture(scope="module")
def product(legacy: Legacy) -> Iterator[LocalProduct]:
    """foo-operator installed over sample-controller's CRD, its controller synced with every Foo."""
    began = time.monotonic()
    with LocalProduct(legacy.plane, controller=True) as installed:
        wait_for("foo-operator's controller to sync every Foo", lambda: synced_by_us(legacy.plane))
        print(f"foo-operator installed and synced {FOOS} Foos in {time.monotonic() - began:.1f}s")
        yield installed


# ---- 1. sample-controller's world ----------------------------------------------------------------------


def test_sample_controller_left_every_foo_stored_at_v1alpha1(legacy: Legacy) -> None:
    assert len(legacy.stored) == FOOS
    assert {version for version, _ in legacy.stored.values()} == {"samplecontroller.k8s.io/v1alpha1"}
    assert legacy.before.owner_api_versions == {"samplecontroller.k8s.io/v1alpha1"}
    assert len(legacy.before.deployments) == FOOS
    assert len(legacy.before.pods) == sum(1 + i % 3 for i in range(FOOS))


# ---- 2. the switch ------------------------------------------------------------------------------------------


def test_installing_foo_operator_upgrades_sample_controllers_crd_to_ours(product: LocalProduct) -> None:
    live = crd(product.plane)
    ours = product.manifests()[0]
    assert live["spec"] == ours["spec"]  # nothing of sample-controller's CRD left behind
    assert [(v["name"], v["served"], v["storage"]) for v in live["spec"]["versions"]] == [
        ("v1", True, True),
        ("v1alpha1", True, False),
    ]
    assert live["spec"]["conversion"]["strategy"] == "Webhook"
    assert live["status"]["storedVersions"] == ["v1alpha1", "v1"]
    spec_owners = {m["manager"] for m in live["metadata"]["managedFields"] if "f:spec" in m.get("fieldsV1", {})}
    assert "foo-operator" in spec_owners


def test_every_foo_reads_the_same_at_v1alpha1_and_v1(legacy: Legacy, product: LocalProduct) -> None:
    assert_both_versions_agree(legacy)


def assert_both_versions_agree(legacy: Legacy) -> None:
    old, new = foos(legacy.plane, "v1alpha1"), foos(legacy.plane, "v1")
    assert sorted(old) == sorted(new) == sorted(legacy.specs)
    for name, spec in legacy.specs.items():
        assert old[name]["spec"] == spec, name
        assert new[name]["spec"]["deployment"]["name"] == spec["deploymentName"], name
        assert new[name]["spec"]["replicas"] == spec["replicas"], name
        assert old[name]["metadata"]["uid"] == new[name]["metadata"]["uid"]


def test_sample_controllers_deployments_are_adopted_without_touching_a_pod(
    legacy: Legacy, product: LocalProduct
) -> None:
    after = workloads(legacy.plane)
    assert after.deployments == legacy.before.deployments  # same uid, same generation: never written
    assert after.replica_sets == legacy.before.replica_sets  # same pod-template-hash, no new ReplicaSet
    assert after.pods == legacy.before.pods  # not one Pod recreated
    assert after.owner_api_versions == {"samplecontroller.k8s.io/v1alpha1"}  # sample-controller's references stand


def test_adopted_foos_report_our_status(legacy: Legacy, product: LocalProduct) -> None:
    for name, foo in foos(legacy.plane, "v1").items():
        status = foo["status"]
        replicas = legacy.specs[name]["replicas"]
        assert (status["observedGeneration"], status["readyReplicas"], status["availableReplicas"]) == (
            foo["metadata"]["generation"],
            replicas,
            replicas,
        ), name


def test_scaling_a_foo_moves_its_deployment_and_status(legacy: Legacy, product: LocalProduct) -> None:
    plane = legacy.plane
    plane.kubectl("scale", "foo", SCALED, "-n", NAMESPACE, "--replicas=3")

    def scaled() -> bool:
        foo = foos(plane, "v1")[SCALED]
        deployment = deployment_of(plane, SCALED)
        return bool(
            deployment["spec"]["replicas"] == 3
            and deployment["status"].get("availableReplicas") == 3
            and foo["status"].get("availableReplicas") == 3
            and foo["status"].get("observedGeneration") == foo["metadata"]["generation"]
        )

    wait_for(f"{SCALED}'s Deployment and status at 3 replicas", scaled)
    legacy.specs[SCALED] = {**legacy.specs[SCALED], "replicas": 3}
    after = workloads(plane)
    uid, generation = legacy.before.deployments[f"{SCALED}-nginx"]
    assert after.deployments[f"{SCALED}-nginx"] == (uid, generation + 1)
    assert after.replica_sets == legacy.before.replica_sets  # scaling is no rollout
    assert set(legacy.before.pods.items()) < set(after.pods.items())  # one Pod more, none replaced


# ---- 3. storage migration -------------------------------------------------------------------------------------


def test_migrate_storage_refuses_while_the_conversion_webhook_is_down(legacy: Legacy, product: LocalProduct) -> None:
    plane = legacy.plane
    before = resource_versions(plane)
    product.stop_webhook()
    try:
        result, _ = migrate_storage(plane)
    finally:
        product.start_webhook()
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith("error: cannot read Foos at v1alpha1: the conversion webhook is not answering (")
    assert "connection refused" in result.stderr
    assert result.stderr.rstrip().endswith("start foo-operator's webhook and run again")
    assert resource_versions(plane) == before  # not one Foo written
    assert crd(plane)["status"]["storedVersions"] == ["v1alpha1", "v1"]


def test_migrate_storage_rewrites_every_foo_at_v1_and_prunes_v1alpha1(legacy: Legacy, product: LocalProduct) -> None:
    plane = legacy.plane
    before = resource_versions(plane)
    result, took = migrate_storage(plane)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"CRD {CRD_NAME}: storage version v1, served v1, v1alpha1, status.storedVersions [v1alpha1, v1]"
    assert lines[1].startswith("conversion webhook: answering (read ")
    assert lines[2].startswith(f"page 1: {FOOS} Foos: ")
    done = DONE_LINE.search(result.stdout)
    assert done is not None, result.stdout
    # A Foo the controller's status writes re-encoded at v1 already (the schema defaults its image
    # on every read, so nothing is left for the webhook to fill) comes back with its resourceVersion
    # unchanged: "already stored at v1". Every other one is written anew.
    counts = {k: int(v) for k, v in done.groupdict().items() if k != "seconds"}
    assert counts["rewritten"] + counts["current"] == counts["total"] == FOOS, counts
    assert (counts["gone"], counts["failed"]) == (0, 0), counts
    assert lines[-1] == "status.storedVersions: [v1alpha1, v1] -> [v1]"
    print(f"migrated {FOOS} Foos: command {took:.1f}s, walk {done['seconds']}s")

    assert crd(plane)["status"]["storedVersions"] == ["v1"]
    stored = etcd_foos(plane, NAMESPACE)
    assert {version for version, _ in stored.values()} == {"samplecontroller.k8s.io/v1"}
    after = resource_versions(plane)
    assert sum(after[name] != before[name] for name in before) == counts["rewritten"]


def test_after_the_migration_no_deployment_or_pod_changed(legacy: Legacy, product: LocalProduct) -> None:
    plane = legacy.plane
    wait_for("the controller to observe the generations the migration wrote", lambda: synced_by_us(plane))
    v1 = foos(plane, "v1")
    assert {f["spec"]["deployment"]["image"] for f in v1.values()} == {"nginx:latest"}  # defaults persisted
    after = workloads(plane)
    expected = dict(legacy.before.deployments)
    uid, generation = expected[f"{SCALED}-nginx"]
    expected[f"{SCALED}-nginx"] = (uid, generation + 1)  # the user's scale, nothing else
    assert after.deployments == expected
    assert after.replica_sets == legacy.before.replica_sets
    assert set(legacy.before.pods.items()) <= set(after.pods.items())
    assert_both_versions_agree(legacy)


def test_a_second_migration_writes_nothing(legacy: Legacy, product: LocalProduct) -> None:
    plane = legacy.plane
    versions, stored = resource_versions(plane), etcd_foos(plane, NAMESPACE)
    result, _ = migrate_storage(plane)
    assert result.returncode == 0, result.stderr
    done = DONE_LINE.search(result.stdout)
    assert done is not None and (int(done["rewritten"]), int(done["current"])) == (0, FOOS), result.stdout
    assert result.stdout.splitlines()[-1] == "status.storedVersions: already [v1]"
    assert resource_versions(plane) == versions
    assert etcd_foos(plane, NAMESPACE) == stored  # not one etcd write


# ---- 4. the way back -----------------------------------------------------------------------------------------


def test_sample_controller_still_works_against_our_crd_after_the_migration(
    legacy: Legacy, product: LocalProduct
) -> None:
    plane = legacy.plane
    assert product.controller is not None
    product.controller.stop()  # one controller at a time
    name = "foo-01"
    rs_before = {n: v for n, v in workloads(plane).replica_sets.items() if n.startswith(f"{name}-nginx-")}
    controller = sample_controller(plane, "sample-controller-after.log")
    try:
        scale_at_v1alpha1(plane, name, 3)

        def moved() -> bool:
            foo = foos(plane, "v1alpha1")[name]
            deployment = deployment_of(plane, name)
            return bool(
                deployment["status"].get("availableReplicas") == 3 and foo["status"].get("availableReplicas") == 3
            )

        wait_for("sample-controller to scale foo-01 through our CRD", moved)
    finally:
        controller.stop()
    after = workloads(plane)
    assert {n: v for n, v in after.replica_sets.items() if n.startswith(f"{name}-nginx-")} == rs_before
    assert crd(plane)["status"]["storedVersions"] == ["v1"]


def test_deleting_a_foo_still_collects_the_deployment_sample_controller_made(
    legacy: Legacy, product: LocalProduct
) -> None:
    plane = legacy.plane
    plane.kubectl("delete", "foo", COLLECTED, "-n", NAMESPACE)
    wait_for(
        f"the garbage collector to delete {COLLECTED}'s Deployment",
        lambda: f"{COLLECTED}-nginx" not in workloads(plane).deployments,
    )


def test_the_whole_way_back_to_sample_controllers_own_crd(legacy: Legacy, product: LocalProduct) -> None:
    """Storage back to v1alpha1, one migration, then sample-controller's CRD replaces ours."""
    plane = legacy.plane
    flip = [
        {"op": "replace", "path": "/spec/versions/0/storage", "value": False},
        {"op": "replace", "path": "/spec/versions/1/storage", "value": True},
    ]
    plane.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(flip))
    refused = plane.kubectl("replace", "-f", str(find_binaries().sample_controller_crd), check=False)
    assert refused.returncode != 0
    assert "v1 was previously a storage version, and must remain in spec.versions" in refused.stderr

    result, _ = migrate_storage(plane)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "status.storedVersions: [v1, v1alpha1] -> [v1alpha1]"
    assert {version for version, _ in etcd_foos(plane, NAMESPACE).values()} == {"samplecontroller.k8s.io/v1alpha1"}

    plane.kubectl("replace", "-f", str(find_binaries().sample_controller_crd))
    product.unregister_admission()  # what `helm uninstall` removes
    product.stop_webhook()
    live = crd(plane)
    assert [v["name"] for v in live["spec"]["versions"]] == ["v1alpha1"]
    assert live["spec"]["conversion"] == {"strategy": "None"}
    assert live["status"]["storedVersions"] == ["v1alpha1"]

    name = "foo-02"
    controller = sample_controller(plane, "sample-controller-back.log")
    try:
        scale_at_v1alpha1(plane, name, 2)  # v1 is gone now
        wait_for(
            "sample-controller, on its own CRD again, to scale foo-02",
            lambda: foos(plane, "v1alpha1")[name]["status"].get("availableReplicas") == 2,
        )
    finally:
        controller.stop()
    back = foos(plane, "v1alpha1")
    assert {n: f["spec"]["deploymentName"] for n, f in back.items()} == {
        n: s["deploymentName"] for n, s in legacy.specs.items() if n != COLLECTED
    }
    assert workloads(plane).deployments[f"{name}-nginx"][0] == legacy.before.deployments[f"{name}-nginx"][0]


# ---- the Helm path -----------------------------------------------------------------------------------------------


def test_helm_take_ownership_turns_sample_controllers_crd_into_the_charts(tmp_path: Path) -> None:
    """`helm install --take-ownership` over the real sample-controller CRD leaves exactly the chart's CRD.

    The chart's own e2e (test_real_node.py) covers serving behind the chart, on real pods; this checks the CRD
    takeover from sample-controller's actual CRD, on a bare plane (no pods needed).
    """
    chart = Path(__file__).resolve().parents[2] / "charts" / "foo-operator"
    with LocalControlPlane(tmp_path / "plane", minimal=True) as bare:
        bare.kubectl("apply", "-f", str(find_binaries().sample_controller_crd))
        bare.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
        install = ["install", "foo-operator", str(chart), "-n", "foo-system", "--create-namespace"]
        refused = bare.helm(*install, check=False)
        assert refused.returncode != 0 and "cannot be imported into the current release" in refused.stderr
        bare.helm(*install, "--take-ownership")
        live = json.loads(bare.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
        rendered = yaml.safe_load(
            bare.helm(
                "template", "foo-operator", str(chart), "-n", "foo-system", "--show-only", "templates/crd.yaml"
            ).stdout
        )
        for obj in (live, rendered):  # the generated CA differs on every render
            obj["spec"]["conversion"]["webhook"]["clientConfig"].pop("caBundle")
        assert live["spec"] == rendered["spec"]
        assert live["status"]["storedVersions"] == ["v1alpha1", "v1"]
        assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
