"""Disruptions a cluster goes through, on the real node, each under the same steady load.

The chart runs its pods on the real node (kubelet + containerd) with two replicas of each
component. Each case starts a steady load of its own, in a namespace of its own (a Foo created
and stored every round, a page of Foos read at v1alpha1 through the conversion webhook, a page of
FooHealths read through the aggregated API), disrupts one thing, waits for the cluster to say it
has recovered, and counts what the clients saw: every request that failed, every Foo answered
201 that is not stored or has no Deployment (lost), every Foo with more than one Deployment or
whose Deployment was made again (duplicated), and every effect of a request that failed.

A process is killed the way the kernel's OOM killer or a crashed runtime would: SIGKILL to the
container's task through the node's containerd, so nothing drains; once by the OOM killer itself,
at the container's memory limit. The kubelet then restarts the container in the same pod. Where
requests in flight at the moment are the question (the webhook's and kube-apiserver's cases),
readers send v1alpha1 pages back to back beside the load, and the table says how many requests
were in flight and how many of those failed.

Each case adds a row to a table written, when the module ends, to ``dist/disruptions.md`` (or
``$FOO_DISRUPTIONS_TABLE``), which a release attaches; docs/disruptions.md holds the table of a
run and why each number is what it is.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.plane.cluster import LocalControlPlane
from hack.plane.machine import run
from hack.plane.node import NODE_LABEL, RealNode, another_node, chart_values, plane_with_real_node
from tests.e2e.effects import Effects, deployment_uids, effects, foo_names
from tests.e2e.load import Answers, Call, foo_create, reads, steady_load
from tests.e2e.test_real_node import CHART, NAMESPACE, RELEASE, Cluster
from tests.e2e.waiting import wait_for, wait_for_more
from tests.e2e.watchers import ClientGoWatchers, Watchers, availability, instance, totals, unavailable_seconds

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE = Path(os.environ.get("FOO_DISRUPTIONS_TABLE", REPO_ROOT / "dist" / "disruptions.md"))
REPLICAS = 2
PERIOD = 0.25  # seconds between the load's rounds: a Foo stored (and a Deployment made) in each
WATCHERS = 6  # FooHealth watchers in the insights case at first (more join until both pods have some)
CLIENT_GO_WATCHERS = 2  # and client-go informers beside them (as many more join)
DRAIN = "kubectl drain of the node holding 1 of 2 of each (2 real nodes)"
# The table's rows, in this order whatever order the cases ran in.
CASES = (
    "SIGKILL 1 of 2 webhook pods",
    "SIGKILL the leading controller of 2",
    "SIGKILL 1 of 2 insights pods under open FooHealth watches",
    "kube-apiserver restarted (SIGTERM, start)",
    "SIGKILL 1 of 2 webhook pods holding requests (stopped first)",
    "OOM kill of 1 of 2 webhook pods (the kernel's, at its memory limit)",
    DRAIN,
)
READERS = 2  # senders of reads beside the load, with no pause: requests in flight at any moment
HELD = 1  # webhook calls a stopped pod must hold, written on connections open before the stop
LEASE = {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}  # the chart's


@dataclass(frozen=True)
class Row:
    case: str
    answers: Answers
    lost: int
    duplicated: int
    recovery: str
    in_flight: str = "not counted"  # at the kill or the SIGTERM: how many requests, and how many of them failed

    def markdown(self) -> str:
        return (
            f"| {self.case} | {self.answers.requests()} | {len(self.answers.failures)} | {self.in_flight} | "
            f"{self.lost} / {self.duplicated} | {self.recovery} |"
        )


def table(rows: list[Row]) -> str:
    head = [
        "| case | requests | failed | in flight at the disruption (failed) | lost / duplicated effects | recovery |",
        "|---|---|---|---|---|---|",
    ]
    ordered = sorted(rows, key=lambda row: CASES.index(row.case))
    return "\n".join([*head, *(row.markdown() for row in ordered)]) + "\n"


@pytest.fixture(scope="module")
def rows() -> Iterator[list[Row]]:
    """The table's rows, written to TABLE once every case has run (also after a failed one)."""
    made: list[Row] = []
    yield made
    if made:
        TABLE.parent.mkdir(parents=True, exist_ok=True)
        TABLE.write_text(table(made))
        print(f"\n{TABLE}:\n{table(made)}")


@pytest.fixture(scope="module")
def release(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The chart on a plane of its own with a real node, two replicas of each component."""
    workdir = tmp_path_factory.mktemp("disruptions")
    with plane_with_real_node(workdir, node_image["archive"]) as (plane, node):
        values = chart_values(node, node_image["ref"])
        for component in ("webhook", "insights", "controller"):
            values[component]["replicas"] = REPLICAS
        values["controller"]["leaderElection"] = LEASE
        values_file = workdir / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        cluster = Cluster(plane, node, node_image["ref"], values_file)
        try:
            cluster.install()
            yield cluster
        finally:
            plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _restarts(pod: dict[str, Any]) -> int:
    return int(pod["status"]["containerStatuses"][0]["restartCount"])


def sigkill(release: Cluster, pod: dict[str, Any]) -> float:
    """SIGKILL the pod's container through the node's containerd; when it was sent."""
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    ctr = ("ctr", "--address", str(release.node.socket), "-n", "k8s.io")
    killed_at = time.monotonic()
    run(*ctr, "tasks", "kill", "-s", "SIGKILL", container)
    return killed_at


def restarted_and_ready(release: Cluster, pod: dict[str, Any]) -> bool:
    """Whether the kubelet has restarted the pod's killed container and the pod is Ready again."""
    now = release.get("pod", pod["metadata"]["name"], "-n", NAMESPACE)
    return _restarts(now) > _restarts(pod) and _ready(now)


def killed_and_back(release: Cluster, pod: dict[str, Any], answers: Answers) -> tuple[float, float]:
    """SIGKILL the pod's container under the load; when, and when the pod was Ready again."""
    killed_at = sigkill(release, pod)
    return killed_at, back(release, pod, answers)


def back(release: Cluster, pod: dict[str, Any], answers: Answers) -> float:
    """When the pod's killed container was restarted and the pod Ready again (the load then
    answered 10 more creates)."""
    wait_for(
        f"the killed pod {pod['metadata']['name']} restarted and Ready",
        lambda: restarted_and_ready(release, pod),
        timeout=120,
    )
    ready_at = time.monotonic()
    wait_for_more("creates after the recovery", lambda: answers.answered["write"], 10)
    return ready_at


def all_ready(release: Cluster, component: str) -> list[dict[str, Any]]:
    pods = release.pods(component)
    assert len(pods) == REPLICAS and all(_ready(p) for p in pods), pods
    return pods


def the_load(namespace: str) -> list[Call]:
    """Every case's load: a Foo stored, a page read at v1alpha1, a page of FooHealths."""
    return [foo_create(namespace, dry_run=False), *reads(namespace)]


@contextlib.contextmanager
def webhook_load(plane: LocalControlPlane, namespace: str) -> Iterator[Answers]:
    """The webhook cases' load: the load, and the readers reading pages of Foos at v1alpha1 (each
    through the conversion webhook) back to back; yielded once it has stored 10 Foos."""
    readers = reads(namespace)[:1]
    with steady_load(plane, the_load(namespace), period=PERIOD, readers=readers, senders=READERS) as answers:
        wait_for_more("creates before the disruption", lambda: answers.answered["write"], 10)
        yield answers


def only_webhook_calls_failed(answers: Answers) -> None:
    """Every failure a 500 for a webhook call: admission's `failed calling webhook`, conversion's
    `conversion webhook`."""
    for failure in answers.failures:
        assert " 500: " in failure and "webhook" in failure, failure


def in_flight(answers: Answers, moment: float) -> str:
    """The table's count of the requests in flight at ``moment``: "n (f failed)"."""
    held, failed = answers.in_flight(moment)
    return f"{held} ({failed} failed)"


def case_namespace(plane: LocalControlPlane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    return name


def tally(
    rows: list[Row], case: str, answers: Answers, found: Effects, recovery: str, held: str = "not counted"
) -> None:
    """The case's row in the table; then, whatever else it proves, no effect lost or duplicated."""
    rows.append(Row(case, answers, *found.counted, recovery, held))
    assert found == Effects([], [], []), found


def caught_up(plane: LocalControlPlane, namespace: str, *watchers: Watchers | ClientGoWatchers) -> float:
    """When every watcher's cache held a FooHealth per Foo (the load stopped, the watchers not)."""
    foos = foo_names(plane, namespace)
    wait_for(
        "every watcher's cache to hold a FooHealth per Foo",
        lambda: all(cache == foos for each in watchers for cache in each.caches()),
        timeout=120,
    )
    return time.monotonic()


def _report(case: str, answers: Answers, found: Effects, killed_at: float, since: str = "the kill") -> None:
    print(
        f"\n{case}: {answers.requests()} requests in {answers.rounds} rounds, {dict(answers.answered)} answered, "
        f"{len(answers.failures)} failed; lost {found.lost}, duplicated {found.duplicated}, "
        f"stored though refused {found.unacknowledged}"
    )
    for moment, failure in zip(answers.failed_at, answers.failures, strict=True):
        print(f"  {moment - killed_at:+.2f}s from {since}: {failure}")


# ----------------------------------------------------------------------------- the webhook
def test_sigkill_of_one_webhook_pod_of_two_fails_only_the_requests_it_held(release: Cluster, rows: list[Row]) -> None:
    """One of the two webhook pods SIGKILLed under load. kube-apiserver does not try an
    admission or conversion call again: Go's HTTP client repeats no POST that was written onto a
    connection, and client-go's REST client repeats only GETs after a connection reset. So the
    requests whose webhook call the killed process held fail (500, `failed calling webhook`),
    and only in the moments before its endpoint is taken out; nothing else fails, and every
    failed create stored nothing."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-webhook")
    with webhook_load(plane, namespace) as answers:
        victim = serving_most(release)
        killed_at, recovered_at = killed_and_back(release, victim, answers)
    found = effects(plane, namespace, answers)
    _report("webhook SIGKILL", answers, found, killed_at)
    tally(rows, CASES[0], answers, found, f"{recovered_at - killed_at:.1f} s to Ready", in_flight(answers, killed_at))
    assert all(killed_at <= moment <= recovered_at for moment in answers.failed_at), "a request failed outside the kill"
    only_webhook_calls_failed(answers)


def test_a_webhook_pod_killed_while_it_holds_requests_fails_those_and_no_others(
    release: Cluster, rows: list[Row]
) -> None:
    """A webhook pod that hangs (stopped: SIGSTOP) while kube-apiserver keeps calling it, then
    SIGKILLed once it certainly holds a call: one written on a connection kube-apiserver had open
    before the stop (bytes the process never read). Such a call ends with the connection reset
    under it, and kube-apiserver tries none again, so its request fails with a 500 (`failed
    calling webhook` or `conversion webhook`) and a create it held stored nothing; a call waiting
    for a new connection to the stopped pod goes out on whichever connection frees up first (Go's
    transport). Nothing lost; only webhook calls fail, and only from the stop to the restart."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-webhook-held")
    with webhook_load(plane, namespace) as answers:
        victim = serving_most(release)
        pid = task_pid(release, victim)
        open_before = {row.split()[3] for row in _connections(pid)}  # kube-apiserver's ends
        stopped_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)  # the process hangs; the kernel still accepts connections for it
        try:  # (before its liveness probe fails 3 times, 10 s apart, and the kubelet kills it itself)
            held = wait_for(f"{HELD} calls held", lambda: _holding(pid, open_before, HELD), timeout=20)
        finally:  # a stopped pod is killed whatever happened: the kubelet restarts it
            killed_at, recovered_at = killed_and_back(release, victim, answers)
    found = effects(plane, namespace, answers)
    _report("webhook SIGKILL of a stopped pod", answers, found, killed_at)
    print(
        f"  stopped {killed_at - stopped_at:.1f}s before the kill, holding {held} calls written on connections open "
        f"before the stop; client requests in flight at the kill: {in_flight(answers, killed_at)}"
    )
    tally(rows, CASES[4], answers, found, f"{recovered_at - killed_at:.1f} s to Ready", in_flight(answers, killed_at))
    assert all(stopped_at <= moment <= recovered_at for moment in answers.failed_at), "a request failed outside"
    only_webhook_calls_failed(answers)


def serving_most(release: Cluster) -> dict[str, Any]:
    """The webhook pod kube-apiserver holds the most connections to (under load): the one a kill
    meets. kube-apiserver keeps its HTTP/1.1 connections to a webhook open and reuses them, and
    dials anew only when it needs more, so after one pod restarts the other may serve it all."""
    pods = all_ready(release, "webhook")
    held = {pod["metadata"]["name"]: len(_connections(task_pid(release, pod))) for pod in pods}
    print(f"\n  kube-apiserver's connections to each webhook pod: {held}")
    return max(pods, key=lambda pod: held[pod["metadata"]["name"]])


def _connections(pid: int) -> list[str]:
    """The established connections to the webhook's port in ``pid``'s network namespace."""
    listed = run("nsenter", "-t", str(pid), "-n", "ss", "-Htn", "state", "established", "( sport = :9443 )")
    return listed.stdout.splitlines()


def _holding(pid: int, open_before: set[str], count: int) -> int | None:
    """How many of the connections in ``open_before`` hold bytes ``pid`` has not read (a call
    written to it), once there are ``count``."""
    rows = [row.split() for row in _connections(pid)]
    unread = sum(1 for row in rows if row[3] in open_before and int(row[0]) > 0)  # Recv-Q, peer
    return unread if unread >= count else None


def task_pid(release: Cluster, pod: dict[str, Any]) -> int:
    """The host's pid of the pod's container's process (its containerd task)."""
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    listed = run("ctr", "--address", str(release.node.socket), "-n", "k8s.io", "tasks", "ls").stdout
    (pid,) = [line.split()[1] for line in listed.splitlines() if line.startswith(container)]
    return int(pid)


# A process in the container's cgroup (and pid namespace) that forks children, each allocating
# half the server's resident memory, until together they pass the memory limit. No child is
# ever as large as the server, so the OOM killer, which kills the largest process of the cgroup
# (all have the container's oom_score_adj), picks the server (pid 1 here); its death ends the
# pid namespace, and the children with it.
ALLOCATE = """
import os, sys, time
limit = int(sys.argv[1])
server = int(open("/proc/1/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
chunk = max(server // 2, 4 << 20)
for _ in range(limit // chunk + 2):
    if os.fork() == 0:
        held = b"\x01" * chunk
        time.sleep(600)
        os._exit(0)
    time.sleep(0.05)
time.sleep(600)
"""


def test_an_oom_kill_of_one_webhook_pod_of_two_is_a_sigkill_by_the_kernel(release: Cluster, rows: list[Row]) -> None:
    """One webhook pod's container made to pass its memory limit for real (processes exec'd in
    its cgroup allocate): the kernel's OOM killer kills the server, the largest process, the
    kubelet records `OOMKilled` and restarts it. For the clients it is the SIGKILL above: only
    the requests whose webhook call the dead process held or dialled before its endpoint went
    fail, with a 500, and nothing is lost."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-webhook-oom")
    with webhook_load(plane, namespace) as answers:
        victim = serving_most(release)
        limit = _bytes(victim["spec"]["containers"][0]["resources"]["limits"]["memory"])
        container = victim["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
        pid = task_pid(release, victim)
        began_at = time.monotonic()
        ctr = ("ctr", "--address", str(release.node.socket), "-n", "k8s.io")
        allocator = subprocess.Popen(
            [
                *ctr,
                "tasks",
                "exec",
                "--exec-id",
                f"oom-{os.getpid()}",
                container,
                "python3",
                "-c",
                ALLOCATE,
                str(limit),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:  # its exec ends when the container's processes die: then the kernel has killed
            wait_for("the allocator's end", lambda: allocator.poll() is not None, timeout=120)
        finally:
            if allocator.poll() is None:
                allocator.kill()
            allocator.wait()
        killed_at = time.monotonic()
        recovered_at = back(release, victim, answers)
    found = effects(plane, namespace, answers)
    last = release.get("pod", victim["metadata"]["name"], "-n", NAMESPACE)["status"]["containerStatuses"][0]
    terminated = last["lastState"]["terminated"]
    kills = oom_kills(container)
    _report("webhook OOM kill", answers, found, killed_at)
    print(
        f"  limit {limit} bytes; allocator ran {killed_at - began_at:.1f}s; the kernel killed {kills} "
        f"(the server: pid {pid}); lastState.terminated {terminated['reason']}, exit {terminated['exitCode']}; "
        f"client requests in flight at its end: {in_flight(answers, killed_at)}"
    )
    tally(rows, CASES[5], answers, found, f"{recovered_at - killed_at:.1f} s to Ready", in_flight(answers, killed_at))
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137, terminated
    assert kills and kills[0] == pid, f"the OOM killer's first victim was not the server (pid {pid}): {kills}"
    assert all(began_at <= moment <= recovered_at for moment in answers.failed_at), "a request failed outside"
    only_webhook_calls_failed(answers)


def _bytes(quantity: str) -> int:
    """A memory quantity of the chart's kind (Ki, Mi, Gi) in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else int(quantity)


def oom_kills(container: str) -> list[int]:
    """The pids the kernel's OOM killer killed in the container's memory cgroup, in order (its log)."""
    log = run("dmesg").stdout
    return [
        int(line.split(",pid=")[1].split(",")[0])
        for line in log.splitlines()
        if "oom-kill:" in line and "task_memcg=" in line and container in line.split("task_memcg=")[1]
    ]


# ----------------------------------------------------------------------------- the controller
def test_sigkill_of_the_leading_controller_loses_and_duplicates_no_deployment(
    release: Cluster, rows: list[Row]
) -> None:
    """The leading controller SIGKILLed while Foos keep coming (its workers mid-reconcile): the
    standby takes the Lease once the dead leader's record has gone unrenewed for the lease
    duration, and then every Foo has exactly one Deployment, the ones made before the kill the
    same objects, and every status is current. No request fails: the controller serves none."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-controller")
    pods = all_ready(release, "controller")  # the standby is Ready too: its caches are synced
    lease = lambda: controller_lease(release)  # noqa: E731
    holder = wait_for("a controller to hold the lease", lambda: lease().get("holderIdentity"))
    (leader,) = [p for p in pods if holder.startswith(p["metadata"]["name"])]
    with steady_load(plane, the_load(namespace), period=PERIOD) as answers:
        wait_for_more("creates before the kill", lambda: answers.answered["write"], 10)
        before = deployment_uids(plane, namespace)
        killed_at = sigkill(release, leader)
        last_renew = lease()["renewTime"]
        pending = foo_names(plane, namespace) - set(deployment_uids(plane, namespace))  # still to reconcile
        taken = wait_for("another controller to take the lease", lambda: _taken(lease(), holder), timeout=120)
        took_over_at = time.monotonic()
        wait_for_more("creates after the takeover", lambda: answers.answered["write"], 10)
    found = effects(plane, namespace, answers, before)
    takeover = took_over_at - killed_at
    unrenewed = _micro_time(taken["acquireTime"]) - _micro_time(last_renew)
    (standby,) = [p for p in pods if p is not leader]
    _report("controller SIGKILL", answers, found, killed_at)
    print(
        f"  lease: last renewed {last_renew} by {holder}, taken {taken['acquireTime']} by {taken['holderIdentity']} "
        f"({'the standby' if taken['holderIdentity'].startswith(standby['metadata']['name']) else 'the restarted one'}), "
        f"{takeover:.1f}s after the kill, {unrenewed:.1f}s after the last renewal "
        f"(leaseDuration {LEASE['leaseDurationSeconds']}s); {len(before)} Deployments before the kill, "
        f"{len(pending)} Foos without one just after it"
    )
    tally(rows, CASES[1], answers, found, f"{takeover:.1f} s to a new leader")
    assert answers.failures == [], answers.failures
    # Nobody takes a lease its holder may still think it holds: not before a whole lease duration
    # without a renewal. The bound after the kill: that duration plus a retry period (jittered, up
    # to 2.2 of them) for the standby to look again, with room for a busy machine.
    assert unrenewed >= LEASE["leaseDurationSeconds"], f"taken {unrenewed:.1f}s after the last renewal"
    assert takeover < 2 * LEASE["leaseDurationSeconds"], f"a new leader only {takeover:.1f}s after the kill"


def controller_lease(release: Cluster) -> dict[str, Any]:
    """The spec of the controllers' Lease (the chart's --leader-elect-name)."""
    return dict(release.get("lease", f"{RELEASE}-controller", "-n", NAMESPACE)["spec"])


def _taken(lease: dict[str, Any], holder: str) -> dict[str, Any] | None:
    """The lease's spec once someone other than ``holder`` holds it."""
    return lease if lease.get("holderIdentity") not in (None, "", holder) else None


def _micro_time(stamp: str) -> float:
    """A Lease's MicroTime (RFC 3339, UTC) in seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# ----------------------------------------------------------------------------- insights
def spread_over_every_pod(watchers: Watchers | ClientGoWatchers) -> Callable[[], bool]:
    """A probe: whether the watches are spread over every insights pod (each watcher's
    resourceVersion names the process serving it). All of the first few may have landed on one
    pod, so each 5 s it is still false, one more watcher."""
    polls = itertools.count(1)

    def spread() -> bool:
        if len({instance(v) for v in watchers.versions()} - {""}) == REPLICAS:
            return True
        if next(polls) % 20 == 0:
            watchers.add()
        return False

    return spread


def test_sigkill_of_one_insights_pod_of_two_under_open_watches_relists_and_loses_no_foohealth(
    release: Cluster, rows: list[Row], tmp_path: Path
) -> None:
    """One of the two insights pods SIGKILLed while watchers hold FooHealth watches on both,
    through the aggregator: client-go informers (hack/list-rules --watch) and kube.informers
    (which follow client-go's reflector). A watch the dead pod served ends; its watcher resumes
    from its resourceVersion, which no other insights process holds (each numbers its own
    changes), so it is answered 410 Expired and relists, as a reflector expects. Every watcher's
    cache comes back to the truth (a FooHealth per Foo); writes and v1alpha1 reads never fail;
    only FooHealth reads the aggregator sent to the dead pod before its endpoint was taken out."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-insights")
    victim = all_ready(release, "insights")[0]
    load = the_load(namespace)
    with (
        availability(plane) as changes,
        Watchers(plane.kubeconfig, namespace, WATCHERS) as watchers,
        ClientGoWatchers(plane.kubeconfig, namespace, CLIENT_GO_WATCHERS, tmp_path) as client_go,
    ):
        with steady_load(plane, load, period=PERIOD) as answers:
            wait_for_more("creates before the kill", lambda: answers.answered["write"], 10)
            wait_for("watches open on both insights pods", spread_over_every_pod(watchers), timeout=120)
            wait_for("client-go's watches open on both insights pods", spread_over_every_pod(client_go), timeout=120)
            restarts_before, lists_before = watchers.restarts(), watchers.lists()
            go_before, go_errors_before = client_go.counts(), client_go.errors()
            killed_at, ready_at = killed_and_back(release, victim, answers)
        converged_at = caught_up(plane, namespace, watchers, client_go)
        go = [
            {what: after[what] - before[what] for what in after}
            for before, after in zip(go_before, client_go.counts(), strict=True)
        ]
        go_errors = [after[len(before) :] for before, after in zip(go_errors_before, client_go.errors(), strict=True)]
        go_exited = client_go.exited()
        restarts = [
            {reason: after[reason] - before[reason] for reason in after}
            for before, after in zip(restarts_before, watchers.restarts(), strict=True)
        ]
        relists = [after - before for before, after in zip(lists_before, watchers.lists(), strict=True)]
        wait_for("the APIService Available", lambda: bool(changes) and changes[-1][1], timeout=120)
        down = unavailable_seconds(changes, killed_at)
        unexpected = list(watchers.unexpected.lines)
    found = effects(plane, namespace, answers)
    _report("insights SIGKILL", answers, found, killed_at)
    print(
        f"  watchers after the kill: restarts {restarts} ({totals(restarts)}), relists {relists}; "
        f"pod Ready {ready_at - killed_at:.1f}s, caches converged {converged_at - killed_at:.1f}s after the kill; "
        f"APIService not Available for {down:.1f}s; its changes: "
        + ", ".join(f"{t - killed_at:+.1f}s {'Available' if up else 'unavailable'}" for t, up in changes)
    )
    print(f"  client-go watchers after the kill: {go}; how their watches ended: {go_errors}")
    recovery = f"{ready_at - killed_at:.1f} s to Ready, watchers relisted in {converged_at - killed_at:.1f} s"
    tally(rows, CASES[2], answers, found, f"{recovery}, APIService unavailable {down:.1f} s")
    assert unexpected == [], unexpected
    broken = [i for i, r in enumerate(restarts) if any(r.values())]
    assert broken, "no watch ended: the kill met no watcher"
    assert all(relists[i] >= 1 for i in broken), f"a watcher whose watch ended did not relist: {relists}"
    # client-go: the watches the dead pod served end, resume, get 410 and relist; its processes run on.
    assert go_exited == [None] * len(go_exited), f"a client-go watcher exited: {go_exited}"
    go_broken = [counts for counts in go if counts["ended"]]
    assert go_broken, f"no client-go watch ended: the kill met none ({go})"
    # Each then resumed its watch or (on a 410, or at once after a stream error) relisted: either
    # way it watches again, and caught_up has shown its cache whole.
    assert all(counts["watches"] >= 1 for counts in go_broken), f"a client-go watcher never watched again: {go}"
    assert all(killed_at <= moment <= ready_at for moment in answers.failed_at), "a request failed outside the kill"
    for failure in answers.failures:
        assert failure.startswith("read-foohealths "), failure


# ----------------------------------------------------------------------------- kube-apiserver
def test_a_kube_apiserver_restart_under_load_loses_no_foo_and_every_client_reconnects(
    release: Cluster, rows: list[Row]
) -> None:
    """kube-apiserver stopped (SIGTERM: it finishes the requests in flight) and started again
    under load. While it is down every request is refused at connect, and client-go tries none
    of them again (its REST client repeats a GET only after a reset or EOF), so they fail: that
    number is the time it was down times the load's rate, and only a second apiserver behind a
    load balancer bounds it. What the product must do: no Foo lost, no Deployment made twice, the
    controllers' informers and lease back, every FooHealth watcher caught up, the APIService
    Available again."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-apiserver")
    load = the_load(namespace)
    with availability(plane) as changes, Watchers(plane.kubeconfig, namespace, 2) as watchers:
        with steady_load(plane, load, period=PERIOD, readers=reads(namespace), senders=READERS) as answers:
            wait_for_more("creates before the restart", lambda: answers.answered["write"], 10)
            before = deployment_uids(plane, namespace)
            leader = controller_lease(release)
            stopped_at = time.monotonic()
            plane.stop_apiserver()  # SIGTERM: returns once it has finished what was in flight and exited
            exited_at = time.monotonic()
            plane.start_apiserver()  # returns once /readyz answers 200
            ready_at = time.monotonic()
            wait_for("the APIService Available", lambda: bool(changes) and changes[-1][1], timeout=120)
            available_at = time.monotonic()
            wait_for_more("creates after the restart", lambda: answers.answered["write"], 10)
        converged_at = caught_up(plane, namespace, watchers)
        unexpected = list(watchers.unexpected.lines)
    found = effects(plane, namespace, answers, before)
    after = controller_lease(release)
    _report("kube-apiserver restart", answers, found, stopped_at, since="the SIGTERM")
    first, last = (min(answers.failed_at, default=stopped_at), max(answers.failed_at, default=stopped_at))
    print(
        f"  exited {exited_at - stopped_at:.1f}s after SIGTERM, /readyz {ready_at - stopped_at:.1f}s after it; "
        f"requests failed from {first - stopped_at:+.1f}s to {last - stopped_at:+.1f}s; APIService Available "
        f"{available_at - stopped_at:.1f}s, watchers caught up {converged_at - stopped_at:.1f}s after the SIGTERM; "
        f"the lease held by {leader['holderIdentity']} ({leader.get('leaseTransitions', 0)} transitions) before, "
        f"by {after['holderIdentity']} ({after.get('leaseTransitions', 0)}) after; "
        f"requests in flight at the SIGTERM: {in_flight(answers, stopped_at)}"
    )
    recovery = f"refused connections for {last - first:.1f} s, /readyz at {ready_at - stopped_at:.1f} s"
    held = in_flight(answers, stopped_at)
    tally(rows, CASES[3], answers, found, f"{recovery}, watchers caught up at {converged_at - stopped_at:.1f} s", held)
    assert unexpected == [], unexpected
    assert all(moment <= ready_at for moment in answers.failed_at), "a request failed after /readyz"


# ----------------------------------------------------------------------------- a node drained
# What a platform team sets to spread two replicas over two nodes, beside the chart's soft
# anti-affinity: at most one more on a node than on another, counting only the Deployment's current
# revision (pod-template-hash: a rollout's old pods do not push the new ones together), and a node
# that is cordoned (its unschedulable taint, which the pods do not tolerate) no longer a place to
# count: a drained replica's replacement may then join the other one on the node left.
SPREAD = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "DoNotSchedule",
    "matchLabelKeys": ["pod-template-hash"],
    "nodeTaintsPolicy": "Honor",
}
COMPONENTS = ("webhook", "insights", "controller")


@pytest.fixture
def second_node(release: Cluster, node_image: dict[str, Any]) -> Iterator[RealNode]:
    """A second real node beside the release's (its own kubelet and containerd, on the same plane
    and bridge), the release spread over both meanwhile; afterwards back on the first node alone,
    where the other cases find it, and the second node torn down."""
    with another_node(release.node, node_image["archive"]) as node:
        try:
            yield node
        finally:
            for name in (release.node.name, node.name):
                release.plane.kubectl("uncordon", name, check=False)
            upgrade(release, release.values)


def upgrade(release: Cluster, values: Path) -> None:
    """helm upgrade the release to ``values`` and wait for every rollout."""
    release.plane.helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values), "--wait", "--timeout=180s", timeout=240
    )


def spread_over_real_nodes(release: Cluster, values_file: Path) -> None:
    """The release's values with each component's pods allowed on any real node, spread by SPREAD."""
    values = yaml.safe_load(release.values.read_text())
    for component in COMPONENTS:
        values[component]["nodeSelector"] = dict([NODE_LABEL])
        values[component]["topologySpreadConstraints"] = [SPREAD]
    values_file.write_text(yaml.safe_dump(values))
    upgrade(release, values_file)


def placement(release: Cluster) -> dict[str, list[str]]:
    """The node of each Ready pod of each component, sorted."""
    return {c: sorted(p["spec"]["nodeName"] for p in release.pods(c) if _ready(p)) for c in COMPONENTS}


def leader(release: Cluster) -> tuple[str, str] | None:
    """The lease's holder and its node, once it is one of the controller pods not being deleted."""
    holder = controller_lease(release).get("holderIdentity") or ""
    for pod in release.pods("controller"):
        if holder.startswith(pod["metadata"]["name"]):
            return holder, pod["spec"]["nodeName"]
    return None


def disruptions_allowed(release: Cluster) -> dict[str, int]:
    """Each component's PodDisruptionBudget: how many of its pods an eviction may take now."""
    budgets = release.get("pdb", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    return {
        b["metadata"]["labels"]["app.kubernetes.io/component"]: b["status"].get("disruptionsAllowed", 0)
        for b in budgets
    }


def test_drain_of_the_node_holding_one_replica_of_each_fails_no_request(
    release: Cluster, second_node: RealNode, rows: list[Row], tmp_path: Path
) -> None:
    """Two real nodes, one replica of each component on each, and `kubectl drain` of the one
    holding the leading controller. drain cordons the node and evicts its pods through the Eviction
    API, which grants an eviction only while the component's PodDisruptionBudget (maxUnavailable 1)
    allows one: here one pod of each, each granted at once. Each evicted pod gets SIGTERM and its
    grace period: the webhook and insights leave their Services' endpoints before they stop
    listening, the controller releases its Lease and the standby takes it; the replacements start
    on the other node. No request fails, nothing is lost or made twice."""
    plane = release.plane
    both = sorted([release.node.name, second_node.name])
    spread_over_real_nodes(release, tmp_path / "spread.yaml")
    wait_for(
        "one Ready replica of each component on each node",
        lambda: placement(release) == dict.fromkeys(COMPONENTS, both),
        timeout=120,
    )
    wait_for(
        "each PodDisruptionBudget to allow one eviction",
        lambda: disruptions_allowed(release) == dict.fromkeys(COMPONENTS, 1),
        timeout=60,
    )
    # The rollout's old leader may still hold the lease while it drains: wait for one of these.
    holder, drained = wait_for("a current controller pod to hold the lease", lambda: leader(release), timeout=120)
    (other,) = [name for name in both if name != drained]
    namespace = case_namespace(plane, "disrupt-drain")
    try:
        with availability(plane) as changes, steady_load(plane, the_load(namespace), period=PERIOD) as answers:
            wait_for_more("creates before the drain", lambda: answers.answered["write"], 10)
            before = deployment_uids(plane, namespace)
            began = time.monotonic()
            drain = plane.kubectl(
                "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s", timeout=360
            )
            drained_at = time.monotonic()
            taken = wait_for(
                "another controller to take the lease", lambda: _taken(controller_lease(release), holder), timeout=120
            )
            took_over_at = time.monotonic()
            wait_for(
                f"two Ready replicas of each component on {other}",
                lambda: placement(release) == dict.fromkeys(COMPONENTS, [other, other]),
                timeout=180,
            )
            ready_at = time.monotonic()
            wait_for_more("creates after the drain", lambda: answers.answered["write"], 10)
    finally:
        plane.kubectl("uncordon", drained)
    found = effects(plane, namespace, answers, before)
    down = unavailable_seconds(changes, began)
    refused = (drain.stdout + drain.stderr).count("violate the pod's disruption budget")
    _report("drain", answers, found, began, since="the drain")
    print(
        f"  kubectl drain {drained} (held the lease; {other} kept the other replicas): done in {drained_at - began:.1f}s, "
        f"{refused} evictions refused by a PodDisruptionBudget; lease taken by {taken['holderIdentity']} "
        f"{took_over_at - began:.1f}s after the drain began; two Ready replicas of each on {other} at "
        f"{ready_at - began:.1f}s; APIService not Available for {down:.1f}s\n{drain.stdout}{drain.stderr}"
    )
    recovery = (
        f"drained in {drained_at - began:.1f} s, new leader at {took_over_at - began:.1f} s, "
        f"replacements Ready at {ready_at - began:.1f} s, APIService unavailable {down:.1f} s"
    )
    tally(rows, DRAIN, answers, found, recovery)
    assert answers.failures == [], answers.failures
    assert refused == 0, "a second pod of one component was on the drained node"
