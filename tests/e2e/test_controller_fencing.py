"""A leader that may have lost its lease writes nothing: two controller processes, one plane that audits.

Issue 34: the leader, paused (SIGSTOP) past its 15 s lease while it worked, resumed after the
standby had taken over and the user had scaled the Foos, and wrote 32-56 times: Deployments
patched back to the old replica count, statuses of an older generation, stale Events. Each
replica here runs as a user of its own (a client certificate each), so the apiserver's audit log
says which process made every write.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from attacks.objects import foo_v1
from fooapi.crd import CRD_NAME, crd_manifest
from hack.plane.audit import WriteAudit
from hack.plane.cluster import LocalControlPlane
from hack.plane.pki import issue_user
from tests.e2e.test_controller import LEASE, Controller, get, lease_holder
from tests.e2e.waiting import wait_for

FOOS = 300
WORKERS = 16  # reconciles in flight at once


@pytest.fixture(scope="module")
def audited(built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalControlPlane, WriteAudit]]:
    """etcd + kube-apiserver (no controller-manager: nothing rolls out) logging every write, with the CRD."""
    audit = WriteAudit(tmp_path_factory.mktemp("audit"))
    with LocalControlPlane(
        tmp_path_factory.mktemp("audited-plane"), minimal=True, apiserver_args=audit.apiserver_args()
    ) as plane:
        plane.apply(crd_manifest())
        plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
        yield plane, audit


def replica(plane: LocalControlPlane, namespace: str, identity: str) -> Controller:
    """A controller process leader-electing in ``namespace``, as user ``identity``."""
    assert plane.pki is not None
    issue_user(plane.pki, identity, identity, ("system:masters",))
    kubeconfig = plane.component_kubeconfig(identity)
    args = [
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        namespace,
        "--identity",
        identity,
        "--workers",
        str(WORKERS),
    ]
    return Controller(plane, f"{namespace}-{identity}", *args, "--leader-elect", "--leader-elect-namespace", namespace)


def converged(plane: LocalControlPlane, namespace: str, replicas: int) -> bool:
    """Every Deployment has ``replicas`` and every Foo's status has seen its generation."""
    deployments = (get(plane, "deployments", "-n", namespace) or {}).get("items", [])
    foos = (get(plane, "foos", "-n", namespace) or {}).get("items", [])
    return (
        len(deployments) == len(foos) == FOOS
        and all(d["spec"]["replicas"] == replicas for d in deployments)
        and all((f.get("status") or {}).get("observedGeneration") == f["metadata"]["generation"] for f in foos)
    )


def test_a_leader_paused_past_its_lease_writes_nothing_once_another_leads(
    audited: tuple[LocalControlPlane, WriteAudit],
) -> None:
    plane, audit = audited
    namespace = f"fencing-{os.getpid() % 10000}"
    plane.kubectl("create", "namespace", namespace)
    plane.apply(*(foo_v1(f"foo-{i}", namespace=namespace, replicas=1) for i in range(FOOS)))
    old, new = replica(plane, namespace, "ctl-old"), replica(plane, namespace, "ctl-new")
    try:
        # The leader is frozen as soon as it starts working through 300 Foos: reconciles in
        # flight, the rest queued.
        old.start()
        wait_for(
            "ctl-old's first write as the leader",
            lambda: any(w.user == "ctl-old" and w.resource == "deployments" for w in audit.writes()),
            interval=0.01,
        )
        old.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        new.start().wait_ready()
        wait_for("ctl-new to take the lease over", lambda: lease_holder(plane, namespace) == "ctl-new", timeout=60)
        took_over = min(w.received for w in audit.writes() if w.user == "ctl-new" and w.resource == "leases")

        # The user scales every Foo; the new leader does what it is told.
        plane.apply(*(foo_v1(f"foo-{i}", namespace=namespace, replicas=2) for i in range(FOOS)))
        wait_for("ctl-new to converge the scaled Foos", lambda: converged(plane, namespace, 2), timeout=120)

        # The old leader wakes up with its workers mid-reconcile and its caches a generation old.
        old.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        wait_for("ctl-old to step down", lambda: "lost the lease; campaigning again" in old.log_tail(1000), timeout=60)
        assert old.metric("leader_election_master_status", name=LEASE) == 0

        # What the frozen process had already let past its fence, at most one write per worker
        # (its request handed to aiohttp, which writes it from a task of its own), reaches the
        # apiserver when it wakes; each was judged from a state the new leader has since
        # changed, so its preconditions (resourceVersion, uid; AlreadyExists for a create)
        # refuse it. Every later write meets the fence.
        late = [w for w in audit.writes() if w.user == "ctl-old" and w.received >= took_over]
        accepted = [w for w in late if w.succeeded]
        assert accepted == [], f"ctl-old wrote {len(accepted)} times after ctl-new took over: {accepted[:5]}"
        assert len(late) <= WORKERS, f"ctl-old sent {len(late)} writes after ctl-new took over: {late[:5]}"
        assert converged(plane, namespace, 2)
        tried = old.log_tail(5000).count("not written")
        print(
            f"\nctl-old after it resumed: {tried} writes refused by its fence; {len(late)} sent before it froze "
            f"reached the apiserver after the takeover, all refused ({sorted({w.code for w in late})})"
        )
    finally:
        if old.proc is not None and old.proc.poll() is None:
            old.proc.send_signal(signal.SIGCONT)
        for ctl in (old, new):
            if ctl.proc is not None and ctl.proc.poll() is None:
                ctl.terminate()
        plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
