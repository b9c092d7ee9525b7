"""Disruptions a cluster goes through, on the real node, each under the same steady load.

The chart runs its pods on the real node (kubelet + containerd) with two replicas of each
component. Each case starts a steady load of its own, in a namespace of its own (a Foo created
and stored every round, a page of Foos read at v1alpha1 through the conversion webhook, a page of
FooHealths read through the aggregated API), disrupts one thing, waits for the cluster to say it
has recovered, and counts what the clients saw: every request that failed, every Foo answered
201 that is not stored or has no Deployment (lost), every Foo with more than one Deployment or
whose Deployment was made again (duplicated), and every effect of a request that failed.

A process is killed the way the kernel's OOM killer or a crashed runtime would: SIGKILL to the
container's task through the node's containerd, so nothing drains. The kubelet then restarts the
container in the same pod.

Each case adds a row to a table written, when the module ends, to ``dist/disruptions.md`` (or
``$FOO_DISRUPTIONS_TABLE``), which a release attaches; docs/disruptions.md holds the table of a
run and why each number is what it is.
"""

from __future__ import annotations

import itertools
import os
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
from hack.plane.node import chart_values, plane_with_real_node
from tests.e2e.effects import Effects, deployment_uids, effects, foo_names
from tests.e2e.load import Answers, Call, foo_create, reads, steady_load
from tests.e2e.test_real_node import NAMESPACE, RELEASE, Cluster
from tests.e2e.waiting import wait_for, wait_for_more
from tests.e2e.watchers import Watchers, availability, instance, totals, unavailable_seconds

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE = Path(os.environ.get("FOO_DISRUPTIONS_TABLE", REPO_ROOT / "dist" / "disruptions.md"))
REPLICAS = 2
PERIOD = 0.25  # seconds between the load's rounds: a Foo stored (and a Deployment made) in each
WATCHERS = 6  # FooHealth watchers in the insights case at first (more join until both pods have some)
# The table's rows, in this order whatever order the cases ran in.
CASES = (
    "SIGKILL 1 of 2 webhook pods",
    "SIGKILL the leading controller of 2",
    "SIGKILL 1 of 2 insights pods under open FooHealth watches",
    "kube-apiserver restarted (SIGTERM, start)",
)
LEASE = {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}  # the chart's


@dataclass(frozen=True)
class Row:
    case: str
    answers: Answers
    lost: int
    duplicated: int
    recovery: str

    def markdown(self) -> str:
        return (
            f"| {self.case} | {self.answers.requests()} | {len(self.answers.failures)} | "
            f"{self.lost} / {self.duplicated} | {self.recovery} |"
        )


def table(rows: list[Row]) -> str:
    head = [
        "| case | requests | failed | lost / duplicated effects | recovery |",
        "|---|---|---|---|---|",
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
    """SIGKILL the pod's container under the load; when, and when the pod was Ready again (the
    load then answered 10 more creates)."""
    killed_at = sigkill(release, pod)
    wait_for(
        f"the killed pod {pod['metadata']['name']} restarted and Ready",
        lambda: restarted_and_ready(release, pod),
        timeout=120,
    )
    ready_at = time.monotonic()
    wait_for_more("creates after the recovery", lambda: answers.answered["write"], 10)
    return killed_at, ready_at


def all_ready(release: Cluster, component: str) -> list[dict[str, Any]]:
    pods = release.pods(component)
    assert len(pods) == REPLICAS and all(_ready(p) for p in pods), pods
    return pods


def the_load(namespace: str) -> list[Call]:
    """Every case's load: a Foo stored, a page read at v1alpha1, a page of FooHealths."""
    return [foo_create(namespace, dry_run=False), *reads(namespace)]


def case_namespace(plane: LocalControlPlane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    return name


def tally(rows: list[Row], case: str, answers: Answers, found: Effects, recovery: str) -> None:
    """The case's row in the table; then, whatever else it proves, no effect lost or duplicated."""
    rows.append(Row(case, answers, *found.counted, recovery))
    assert found == Effects([], [], []), found


def caught_up(plane: LocalControlPlane, namespace: str, watchers: Watchers) -> float:
    """When every watcher's cache held a FooHealth per Foo (the load stopped, the watchers not)."""
    foos = foo_names(plane, namespace)
    wait_for(
        "every watcher's cache to hold a FooHealth per Foo",
        lambda: all(cache == foos for cache in watchers.caches()),
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
    victim = all_ready(release, "webhook")[0]
    with steady_load(plane, the_load(namespace), period=PERIOD) as answers:
        wait_for_more("creates before the kill", lambda: answers.answered["write"], 10)
        killed_at, recovered_at = killed_and_back(release, victim, answers)
    found = effects(plane, namespace, answers)
    _report("webhook SIGKILL", answers, found, killed_at)
    tally(rows, CASES[0], answers, found, f"{recovered_at - killed_at:.1f} s to Ready")
    assert all(killed_at <= moment <= recovered_at for moment in answers.failed_at), "a request failed outside the kill"
    for failure in answers.failures:  # admission's `failed calling webhook`, conversion's `conversion webhook`
        assert " 500: " in failure and "webhook" in failure, failure


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
def spread_over_every_pod(watchers: Watchers) -> Callable[[], bool]:
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
    release: Cluster, rows: list[Row]
) -> None:
    """One of the two insights pods SIGKILLed while watchers (kube.informer, client-go's reflector
    protocol) hold FooHealth watches on both, through the aggregator. A watch the dead pod served
    ends; its watcher resumes from its resourceVersion, which no other insights process holds
    (each numbers its own changes), so it is answered 410 Expired and relists, as a reflector
    expects. Every watcher's cache comes back to the truth (a FooHealth per Foo); writes and
    v1alpha1 reads never fail; only FooHealth reads the aggregator sent to the dead pod before its
    endpoint was taken out."""
    plane = release.plane
    namespace = case_namespace(plane, "disrupt-insights")
    victim = all_ready(release, "insights")[0]
    load = the_load(namespace)
    with availability(plane) as changes, Watchers(plane.kubeconfig, namespace, WATCHERS) as watchers:
        with steady_load(plane, load, period=PERIOD) as answers:
            wait_for_more("creates before the kill", lambda: answers.answered["write"], 10)
            wait_for("watches open on both insights pods", spread_over_every_pod(watchers), timeout=120)
            restarts_before, lists_before = watchers.restarts(), watchers.lists()
            killed_at, ready_at = killed_and_back(release, victim, answers)
        converged_at = caught_up(plane, namespace, watchers)
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
    recovery = f"{ready_at - killed_at:.1f} s to Ready, watchers relisted in {converged_at - killed_at:.1f} s"
    tally(rows, CASES[2], answers, found, f"{recovery}, APIService unavailable {down:.1f} s")
    assert unexpected == [], unexpected
    broken = [i for i, r in enumerate(restarts) if any(r.values())]
    assert broken, "no watch ended: the kill met no watcher"
    assert all(relists[i] >= 1 for i in broken), f"a watcher whose watch ended did not relist: {relists}"
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
        with steady_load(plane, load, period=PERIOD) as answers:
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
        f"by {after['holderIdentity']} ({after.get('leaseTransitions', 0)}) after"
    )
    recovery = f"refused connections for {last - first:.1f} s, /readyz at {ready_at - stopped_at:.1f} s"
    tally(rows, CASES[3], answers, found, f"{recovery}, watchers caught up at {converged_at - stopped_at:.1f} s")
    assert unexpected == [], unexpected
    assert all(moment <= ready_at for moment in answers.failed_at), "a request failed after /readyz"
