"""The controller against the real control plane: kube-apiserver, kube-controller-manager, kwok.

Each test runs its own `python -m controller` subprocess restricted to the test's namespace, and
looks at the cluster the way a user does, through kubectl. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from attacks.objects import foo_v1
from controller.settings import Settings
from fooapi.crd import CRD_NAME, crd_manifest
from hack.plane.cluster import LocalControlPlane, free_port
from tests.e2e.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
LEASE = "foo-operator-controller"
# The controllers' leader-election timings (their defaults). The lease's times are the candidates'
# own stamps, so a takeover is measured without the latency of this test's kubectl polls.
LEASE_SECONDS = Settings.lease_duration
# A candidate sees a renewal at its next try, one jittered retry period later (client-go's factor
# 1.2: up to 2.2 periods), then reads the Lease once more when it expires.
SEEN_WITHIN = Settings.retry_period * 2.2
# Those two reads of the Lease through kube-apiserver, and the candidate's own turn, on a busy machine.
API_SLACK = 5.0
# The lease is judged on a monotonic clock, its stamps are wall time: NTP may slew one against the other.
CLOCK_SLEW = 0.1


# ---- helpers ---------------------------------------------------------------------------------


def get(plane: LocalControlPlane, *args: str, check: bool = True) -> dict[str, Any] | None:
    result = plane.kubectl("get", *args, "-o", "json", check=check)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return dict(c)
    return {}


class Controller:
    """`python -m controller` as a subprocess with its own ports and log file."""

    def __init__(self, plane: LocalControlPlane, name: str, *args: str) -> None:
        self.plane = plane
        self.name = name
        self.args = list(args)
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.log_file = plane.logs_dir / f"controller-{name}-{os.getpid()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Controller:
        argv = [
            sys.executable, "-m", "controller",
            "--kubeconfig", str(self.plane.kubeconfig),
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--log-level", "debug",
            *self.args,
        ]  # fmt: skip
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def ready(self) -> bool:
        self.check_alive()
        try:
            return self._get(self.health_port, "/readyz")[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30) -> Controller:
        wait_for(f"controller {self.name} /readyz", self.ready, timeout)
        return self

    def metric(self, metric: str, **labels: str) -> float | None:
        _, text = self._get(self.metrics_port, "/metrics")
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            if series == (f"{metric}{{{wanted}}}" if labels else metric):
                return float(value)
        return None

    def reconciles(self) -> float:
        """controller_runtime_reconcile_total of the Foo controller, whatever the result."""
        _, text = self._get(self.metrics_port, "/metrics")
        return sum(
            float(line.rpartition(" ")[2])
            for line in text.splitlines()
            if line.startswith('controller_runtime_reconcile_total{controller="foo",')
        )

    def idle(self) -> bool:
        """Nothing queued and no reconcile running: what the controller was told, it has done."""
        return (
            self.metric("workqueue_depth", name="foo") == 0
            and self.metric("controller_runtime_active_workers", controller="foo") == 0
        )

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"controller {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def terminate(self, timeout: float = 40) -> int:
        """SIGTERM, as a kubelet would, and the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"controller {self.name} ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd(control_plane: LocalControlPlane, request: pytest.FixtureRequest) -> None:
    """The lead's `foo_crd` fixture (CRD + webhooks) if the suite has it, else the bare CRD."""
    try:
        request.getfixturevalue("foo_crd")
        return
    except pytest.FixtureLookupError:
        pass
    if control_plane.kubectl("get", "crd", CRD_NAME, check=False).returncode != 0:
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(crd_manifest()))
    control_plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")


@pytest.fixture
def controllers(control_plane: LocalControlPlane, namespace: str, crd: None) -> Iterator[list[Controller]]:
    """Controllers a test starts; whatever is still running at the end gets SIGTERM."""
    started: list[Controller] = []
    yield started
    for ctl in started:
        if ctl.proc is not None and ctl.proc.poll() is None:
            ctl.terminate()


@pytest.fixture
def controller(control_plane: LocalControlPlane, namespace: str, controllers: list[Controller]) -> Controller:
    ctl = Controller(control_plane, namespace, "--namespace", namespace).start()
    controllers.append(ctl)
    return ctl.wait_ready()


def deployment_of(plane: LocalControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    return get(plane, "deployment", name, "-n", namespace, check=False)


def foo_with_its_deployment(plane: LocalControlPlane, namespace: str, name: str, replicas: int) -> dict[str, Any]:
    """Apply a Foo (its Deployment ``<name>-nginx``, as foo_v1 names it) and wait for the controller to make it."""
    plane.apply(foo_v1(name, namespace=namespace, replicas=replicas))
    return wait_for("the Deployment", lambda: deployment_of(plane, namespace, f"{name}-nginx"))


# ---- the contract ------------------------------------------------------------------------------


@pytest.mark.smoke
def test_a_new_foo_gets_sample_controllers_deployment(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    control_plane.apply(foo_v1("example", namespace=namespace, replicas=2, image="nginx:1.27"))
    the_foo = get(control_plane, "foo", "example", "-n", namespace)
    assert the_foo is not None

    deployment = wait_for("the Deployment", lambda: deployment_of(control_plane, namespace, "example-nginx"))

    assert deployment["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "name": "example",
            "uid": the_foo["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    labels = {"app": "nginx", "controller": "example"}
    assert deployment["spec"]["selector"] == {"matchLabels": labels}
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("nginx", "nginx:1.27")

    events = wait_for(
        "the Synced event",
        lambda: get(
            control_plane, "events", "-n", namespace, "--field-selector", "involvedObject.name=example,reason=Synced"
        )["items"],  # type: ignore[index]
    )
    assert events[0]["message"] == "Foo synced successfully" and events[0]["type"] == "Normal"


@pytest.mark.smoke
def test_scaling_the_foo_scales_the_deployment(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    foo_with_its_deployment(control_plane, namespace, "scaled", replicas=1)

    control_plane.kubectl("scale", "foo/scaled", "--replicas=3", "-n", namespace)

    wait_for(
        "3 replicas on the Deployment",
        lambda: (deployment_of(control_plane, namespace, "scaled-nginx") or {}).get("spec", {}).get("replicas") == 3,
    )


def test_a_hand_edited_deployment_is_reverted(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    foo_with_its_deployment(control_plane, namespace, "edited", replicas=2)

    control_plane.kubectl("scale", "deployment/edited-nginx", "--replicas=5", "-n", namespace)
    control_plane.kubectl("set", "image", "deployment/edited-nginx", "nginx=nginx:1.0", "-n", namespace)
    control_plane.kubectl("label", "deployment/edited-nginx", "team=web", "-n", namespace)

    def reverted() -> bool:
        deployment = deployment_of(control_plane, namespace, "edited-nginx") or {}
        containers = deployment["spec"]["template"]["spec"]["containers"]
        return deployment["spec"]["replicas"] == 2 and containers[0]["image"] == "nginx:latest"

    wait_for("replicas and image to be reverted", reverted)
    deployment = deployment_of(control_plane, namespace, "edited-nginx")
    assert deployment is not None
    assert deployment["metadata"]["labels"] == {"team": "web"}  # not ours to touch


@pytest.mark.smoke
def test_foo_status_follows_the_real_rollout(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    control_plane.apply(foo_v1("rolled", namespace=namespace, replicas=3))

    def ready_foo() -> dict[str, Any] | None:
        the_foo = get(control_plane, "foo", "rolled", "-n", namespace)
        return the_foo if the_foo and condition(the_foo, "Ready").get("status") == "True" else None

    the_foo = wait_for("the Foo to become Ready", ready_foo, timeout=90)
    deployment = deployment_of(control_plane, namespace, "rolled-nginx")
    assert deployment is not None
    status = the_foo["status"]
    assert status["availableReplicas"] == deployment["status"]["availableReplicas"] == 3
    assert status["readyReplicas"] == 3 and status["replicas"] == 3
    assert status["observedGeneration"] == the_foo["metadata"]["generation"]
    progressing = condition(the_foo, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")
    # kubectl's printer columns show what a user would check.
    row = control_plane.kubectl("get", "foo", "rolled", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:5] == ["rolled-nginx", "3", "3", "True"]

    # Scale down: the status follows the rollout again.
    control_plane.kubectl("scale", "foo/rolled", "--replicas=1", "-n", namespace)
    wait_for(
        "availableReplicas 1",
        lambda: (
            (get(control_plane, "foo", "rolled", "-n", namespace) or {}).get("status", {}).get("availableReplicas") == 1
        ),
        timeout=90,
    )


def _rolled_out_and_reported(plane: LocalControlPlane, namespace: str, name: str) -> bool:
    """The Deployment has finished rolling out and the Foo's status says so: nothing left to change."""
    current, deployment = (
        get(plane, "foo", name, "-n", namespace) or {},
        deployment_of(plane, namespace, f"{name}-nginx"),
    )
    if deployment is None:
        return False
    rolled_out = (
        deployment.get("status", {}).get("observedGeneration") == deployment["metadata"]["generation"]
        and condition(deployment, "Progressing").get("reason") == "NewReplicaSetAvailable"
    )
    reported = (
        current.get("status", {}).get("observedGeneration") == current["metadata"].get("generation")
        and condition(current, "Ready").get("status") == "True"
        and condition(current, "Progressing").get("reason") == "NewReplicaSetAvailable"
    )
    return rolled_out and reported


def test_a_quiet_foo_costs_no_writes(control_plane: LocalControlPlane, namespace: str, controller: Controller) -> None:
    control_plane.apply(foo_v1("quiet", namespace=namespace, replicas=1))
    wait_for(
        "the rollout, reported in the Foo's status",
        lambda: _rolled_out_and_reported(control_plane, namespace, "quiet"),
        timeout=90,
    )
    wait_for("the controller to be idle", controller.idle)
    deployment_before = (deployment_of(control_plane, namespace, "quiet-nginx") or {})["metadata"]["resourceVersion"]
    reconciles = controller.reconciles()

    # A change that is not the controller's business makes it look again; looking costs no write.
    control_plane.kubectl("label", "foo", "quiet", "looked-at=yes", "-n", namespace)
    labelled = (get(control_plane, "foo", "quiet", "-n", namespace) or {})["metadata"]["resourceVersion"]
    wait_for("the controller to reconcile the labelled Foo", lambda: controller.reconciles() > reconciles)
    wait_for("the controller to be idle again", controller.idle)

    assert (get(control_plane, "foo", "quiet", "-n", namespace) or {})["metadata"]["resourceVersion"] == labelled
    assert (deployment_of(control_plane, namespace, "quiet-nginx") or {})["metadata"][
        "resourceVersion"
    ] == deployment_before


def test_a_foreign_deployment_is_left_alone_and_reported(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    control_plane.kubectl("create", "deployment", "taken", "--image=httpd", "--replicas=2", "-n", namespace)
    before = deployment_of(control_plane, namespace, "taken")
    assert before is not None

    control_plane.apply(foo_v1("intruder", namespace=namespace, deployment="taken", replicas=4))

    events = wait_for(
        "the ErrResourceExists event",
        lambda: get(
            control_plane,
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.name=intruder,reason=ErrResourceExists",
        )["items"],  # type: ignore[index]
    )
    assert events[0]["type"] == "Warning"
    assert events[0]["message"] == 'Resource "taken" already exists and is not managed by Foo'
    ready = wait_for(
        "the Ready=False condition",
        lambda: condition(get(control_plane, "foo", "intruder", "-n", namespace) or {}, "Ready") or None,
    )
    assert (ready["status"], ready["reason"]) == ("False", "ErrResourceExists")

    after = deployment_of(control_plane, namespace, "taken")
    assert after is not None
    assert after["spec"] == before["spec"]
    assert "ownerReferences" not in after["metadata"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]

    # Once the owner removes it, the Foo gets its own Deployment without anyone touching the Foo.
    control_plane.kubectl("delete", "deployment", "taken", "-n", namespace)
    replaced = wait_for(
        "a Deployment owned by the Foo",
        lambda: (d := deployment_of(control_plane, namespace, "taken")) and d["metadata"].get("ownerReferences") and d,
    )
    assert replaced["spec"]["replicas"] == 4


@pytest.mark.smoke
def test_deleting_the_foo_garbage_collects_its_deployment(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    foo_with_its_deployment(control_plane, namespace, "doomed", replicas=1)

    control_plane.kubectl("delete", "foo", "doomed", "-n", namespace)

    wait_for(
        "the Deployment to be garbage-collected",
        lambda: deployment_of(control_plane, namespace, "doomed-nginx") is None,
    )
    controller.check_alive()


def test_foreground_deletion_is_not_fought(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    foo_with_its_deployment(control_plane, namespace, "careful", replicas=1)

    # The Foo stays (with a deletionTimestamp) until the collector removed the Deployment;
    # a controller re-creating it meanwhile would keep the Foo alive forever.
    control_plane.kubectl("delete", "foo", "careful", "-n", namespace, "--cascade=foreground", "--timeout=60s")

    assert get(control_plane, "foo", "careful", "-n", namespace, check=False) is None
    wait_for("the controller to be idle", controller.idle)
    # The collector may not have seen the Deployment as a dependent yet when the Foo went (both are
    # from the same second); it then collects it a moment later, its owner being gone. The fight
    # this test is about shows above: a controller re-creating the Deployment keeps the Foo alive.
    wait_for("the Deployment to be collected", lambda: deployment_of(control_plane, namespace, "careful-nginx") is None)


def lease_spec(plane: LocalControlPlane, namespace: str) -> dict[str, Any]:
    lease = get(plane, "lease", LEASE, "-n", namespace, check=False) or {}
    return dict(lease.get("spec") or {})


def lease_holder(plane: LocalControlPlane, namespace: str) -> str:
    return str(lease_spec(plane, namespace).get("holderIdentity") or "")


def held_by(plane: LocalControlPlane, namespace: str, identity: str) -> dict[str, Any] | None:
    """The Lease's spec once ``identity`` holds it."""
    spec = lease_spec(plane, namespace)
    return spec if spec.get("holderIdentity") == identity else None


def stamped(micro_time: str) -> datetime:
    """A Lease's acquireTime or renewTime: the wall clock of the candidate that wrote it."""
    return datetime.fromisoformat(micro_time)


def test_one_of_two_controllers_leads_and_the_other_takes_over(
    control_plane: LocalControlPlane, namespace: str, controllers: list[Controller]
) -> None:
    common = ["--namespace", namespace, "--leader-elect", "--leader-elect-namespace", namespace]
    a = Controller(control_plane, f"{namespace}-a", *common, "--identity", "ctl-a").start()
    b = Controller(control_plane, f"{namespace}-b", *common, "--identity", "ctl-b").start()
    controllers += [a, b]
    a.wait_ready()
    b.wait_ready()  # a standby is ready too: its caches are warm

    leader_id = wait_for("a leader", lambda: lease_holder(control_plane, namespace))
    leader, standby = (a, b) if leader_id == "ctl-a" else (b, a)
    assert leader.metric("leader_election_master_status", name=LEASE) == 1
    assert standby.metric("leader_election_master_status", name=LEASE) == 0
    control_plane.apply(foo_v1("first", namespace=namespace, replicas=1))
    wait_for("the leader's Deployment", lambda: deployment_of(control_plane, namespace, "first-nginx"))
    assert standby.metric("controller_runtime_reconcile_total", controller="foo", result="success") is None

    # The leader dies without a word: the standby waits out the lease, on its own clock.
    leader.kill()
    last_renewal: list[str] = []

    def taken_over() -> dict[str, Any] | None:
        spec = lease_spec(control_plane, namespace)
        if spec.get("holderIdentity") == leader_id:
            last_renewal[:] = [spec["renewTime"]]  # a renewal sent just before the kill may land late
        return spec if spec.get("holderIdentity") == standby_id(standby) else None

    taken = wait_for("the standby to take over", taken_over)
    assert last_renewal, "the standby held the lease before the dead leader's last renewal was seen"
    took = (stamped(taken["acquireTime"]) - stamped(last_renewal[0])).total_seconds()
    print(f"\nfailover after SIGKILL: {took:.1f}s from the last renewal to the takeover (lease {LEASE_SECONDS:g}s)")
    assert took >= LEASE_SECONDS - CLOCK_SLEW, f"the standby took a lease renewed {took:.1f}s before"
    assert took <= LEASE_SECONDS + SEEN_WITHIN + API_SLACK, f"takeover {took:.1f}s after the last renewal"
    control_plane.apply(foo_v1("second", namespace=namespace, replicas=1))
    wait_for("the new leader's Deployment", lambda: deployment_of(control_plane, namespace, "second-nginx"))

    # A graceful stop hands the lease over at once: the successor takes it before the last renewal
    # could have run out, which waiting out the lease cannot do.
    successor = Controller(control_plane, f"{namespace}-c", *common, "--identity", "ctl-c").start().wait_ready()
    controllers.append(successor)
    renewed = lease_spec(control_plane, namespace)
    assert renewed.get("holderIdentity") == standby_id(standby), renewed
    assert standby.terminate() == 0
    assert "released" in standby.log_tail()
    handed = wait_for("the successor to take over", lambda: held_by(control_plane, namespace, "ctl-c"))
    took = (stamped(handed["acquireTime"]) - stamped(renewed["renewTime"])).total_seconds()
    print(f"handover after SIGTERM: {took:.1f}s from a renewal read before the signal to the takeover")
    assert took < LEASE_SECONDS, f"the successor waited out the lease: {took:.1f}s after a renewal"


def standby_id(ctl: Controller) -> str:
    return ctl.args[ctl.args.index("--identity") + 1]


def test_sigterm_finishes_in_flight_work_and_exits_zero(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    control_plane.apply(*(foo_v1(f"busy-{i}", namespace=namespace, replicas=1) for i in range(10)))
    assert controller.terminate() == 0
    log = controller.log_tail(200)
    assert "stopping workers" in log and "stopped" in log
    assert "Traceback" not in log


def test_converges_after_kube_apiserver_restarts(
    control_plane: LocalControlPlane, namespace: str, controller: Controller
) -> None:
    foo_with_its_deployment(control_plane, namespace, "survivor", replicas=1)

    control_plane.restart_apiserver()

    control_plane.kubectl("scale", "foo/survivor", "--replicas=2", "-n", namespace)
    control_plane.apply(foo_v1("newcomer", namespace=namespace, replicas=1))
    wait_for(
        "the scale to reach the Deployment",
        lambda: (deployment_of(control_plane, namespace, "survivor-nginx") or {}).get("spec", {}).get("replicas") == 2,
        timeout=90,
    )
    wait_for("the newcomer's Deployment", lambda: deployment_of(control_plane, namespace, "newcomer-nginx"), timeout=90)
    controller.check_alive()


def count_items(plane: LocalControlPlane, path: str, predicate: Callable[[dict[str, Any]], bool] = bool) -> int:
    """How many objects a raw list of ``path`` holds that satisfy ``predicate`` (cheaper than kubectl)."""
    status, body = plane.get(path)
    assert status == 200, body[:300]
    return sum(1 for item in json.loads(body)["items"] if predicate(item))


def bulk_deployment(name: str, namespace: str) -> dict[str, Any]:
    labels = {"app": "nginx", "controller": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
            },
        },
    }


def test_convergence_time_for_100_foos(
    control_plane: LocalControlPlane, namespace: str, controllers: list[Controller]
) -> None:
    """Measured, and bounded only generously: the numbers are for the report, not a verdict."""
    count = 100
    # The yardstick: the apiserver creating 100 Deployments straight from kubectl.
    baseline_ns = f"{namespace}-base"[:63].rstrip("-")
    control_plane.kubectl("create", "namespace", baseline_ns)
    try:
        began = time.monotonic()
        control_plane.apply(*(bulk_deployment(f"base-{i}", baseline_ns) for i in range(count)))
        baseline = time.monotonic() - began
    finally:
        control_plane.kubectl("delete", "namespace", baseline_ns, "--wait=false", check=False)

    # 100 Foos waiting for a controller, as after an install or a long outage.
    control_plane.apply(*(foo_v1(f"bulk-{i}", namespace=namespace, replicas=1) for i in range(count)))
    ctl = Controller(control_plane, namespace, "--namespace", namespace).start()
    controllers.append(ctl)
    began = time.monotonic()
    ctl.wait_ready()
    ready_at = time.monotonic() - began

    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    wait_for(
        f"{count} Deployments", lambda: count_items(control_plane, deployments) >= count, timeout=120, interval=0.05
    )
    created = time.monotonic() - began

    def is_ready(item: dict[str, Any]) -> bool:
        return condition(item, "Ready").get("status") == "True"

    def is_available(item: dict[str, Any]) -> bool:
        return (item.get("status") or {}).get("availableReplicas") == item["spec"]["replicas"]

    foos = f"/apis/samplecontroller.k8s.io/v1/namespaces/{namespace}/foos"
    rolled_out: list[float] = []

    def all_foos_ready() -> bool:
        if not rolled_out and count_items(control_plane, deployments, is_available) == count:
            rolled_out.append(time.monotonic() - began)  # kube-controller-manager's part is done
        return count_items(control_plane, foos, is_ready) == count

    wait_for(f"{count} Ready Foos", all_foos_ready, timeout=300, interval=0.2)
    all_ready = time.monotonic() - began
    print(
        f"\n{count} Foos from controller start: caches synced {ready_at:.2f}s, all Deployments {created:.2f}s"
        f" ({created - ready_at:.2f}s after sync), all Deployments available"
        f" {rolled_out[0] if rolled_out else all_ready:.2f}s, all Foos Ready {all_ready:.2f}s;"
        f" kubectl apply of {count} Deployments {baseline:.2f}s"
        f" (ratio after sync {(created - ready_at) / baseline:.2f})"
    )
    assert created < 120
