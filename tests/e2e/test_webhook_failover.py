"""SIGTERM a webhook replica under load: zero failed requests through the remaining replica.

Two replicas of `python -m webhook`, each in its own network namespace (two "pods"), behind one
selector-less Service whose EndpointSlice the test writes by hand. kube-apiserver reaches them as
in a cluster (`--enable-aggregator-routing`: Service → EndpointSlice → endpoint IP, TLS checked
for `<svc>.<ns>.svc`) for /mutate-foo, /validate-foo and, through the CRD's service reference,
/convert. The test plays the endpoints controller: it probes each replica's /readyz like a
kubelet (a fresh connection each time) and marks a replica not ready in the slice as soon as it
answers 503 or stops answering, and removes it once its process has exited.

Writers do dry-run creates of v1 and v1alpha1 Foos through kube-apiserver; once A has answered
its share of them, replica A gets SIGTERM (`--drain-seconds 3`), and the writers go on until B has
answered as many more after A's exit. Not one write may fail.

What makes that hard: kube-apiserver's webhook clients keep HTTP/1.1 connections alive and
resolve the Service only when they dial, so marking A not ready changes nothing for the
connections already open — they keep carrying requests to A for the whole drain, and when A
closes them a POST written onto one fails with EOF or a broken pipe (Go does not retry a
non-idempotent request on a reused connection). The webhook therefore answers with
`Connection: close` while draining (serving.reviews.protocol.Connection.write); the test prints A's open
connections during the drain, which should fall to zero well before its listener closes.

A plane of its own (minimal: etcd + kube-apiserver, ~3 s): the session's plane has the same
CRD and webhook configurations registered by URL, and a failure here must not leave them broken.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from apimachinery.resources import Resource
from certs.authority import issue_serving, new_ca, service_dns_names
from certs.files import write_serving_files
from fooapi.crd import CRD_NAME, crd_manifest
from hack.plane.binaries import BUILD_SCRIPT, MissingBinaryError
from hack.plane.cluster import LocalControlPlane
from hack.plane.netns import NetNamespace
from kube.client import ApiError
from kube.config import connect
from serving.lifecycle import ServingOptions
from tests.e2e.waiting import wait_for
from webhook.manifests import mutating_configuration, service_client_config, validating_configuration

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_NAMESPACE = "foo-operator-system"
FOOS_NAMESPACE = "foo-failover"
SERVICE = "foo-operator-webhook"
SERVICE_HOST = f"{SERVICE}.{SERVICE_NAMESPACE}.svc"  # the name kube-apiserver checks the certificate for
SLICE = f"{SERVICE}-e2e"
PORT = 9443
METRICS_PORT = 8080  # the webhook's own /metrics listener, in the replica's netns
DRAIN_SECONDS = 3.0
# Then the listener closes and requests in progress get the webhook's shutdown timeout: the longest
# a replica may take to exit after SIGTERM, well inside the chart's termination grace period.
EXIT_WITHIN = DRAIN_SECONDS + ServingOptions.shutdown_timeout
SERVED_BEFORE_SIGTERM = 300  # webhook requests A has answered: kube-apiserver's pools hold it then
WRITES_AFTER_EXIT = 300  # answered after A is gone: B carries the load alone
WARM_UP_WITHIN = 90.0  # the new CRD discovered and both replicas answering through kube-apiserver
LOAD_WITHIN = 300.0  # only a hang takes this; the load ends on its own progress
WRITERS = 4
PROBE_INTERVAL = 0.1
WEBHOOK_PATHS = ("/mutate-foo", "/validate-foo", "/convert")

FOOS_V1 = Resource("samplecontroller.k8s.io", "v1", "foos", "Foo")
FOOS_V1ALPHA1 = Resource("samplecontroller.k8s.io", "v1alpha1", "foos", "Foo")
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")


@dataclass
class Replica:
    name: str
    netns: NetNamespace
    proc: subprocess.Popen[bytes]
    log_file: Path
    # What the endpoints controller saw and did, in time.monotonic().
    state: str = "ready"  # ready → unready → gone
    saw_503_at: float | None = None
    no_answer_at: float | None = None
    unready_at: float | None = None
    exited_at: float | None = None
    last_requests: dict[str, float] = field(default_factory=dict)  # last /metrics read, per webhook path
    connections: list[tuple[float, int]] = field(default_factory=list)  # (when, established TCP conns to :PORT)

    @property
    def ip(self) -> str:
        return self.netns.ns_ip


@dataclass
class Failover:
    plane: LocalControlPlane
    ca_pem: bytes
    a: Replica
    b: Replica


# ----------------------------------------------------------------------------- set-up
@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    """etcd + kube-apiserver only: nothing else writes EndpointSlices, so ours are the truth."""
    workdir = tmp_path_factory.mktemp("failover-plane")
    try:
        control_plane = LocalControlPlane(workdir, minimal=True)
        control_plane.bin.require("etcd", "kube_apiserver", "kubectl")
    except MissingBinaryError:
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, capture_output=True)
        control_plane = LocalControlPlane(workdir, minimal=True)
    with control_plane:
        yield control_plane


def _slice(endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE,
            "namespace": SERVICE_NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "e2e.foo-operator",
            },
        },
        "addressType": "IPv4",
        # The name must match the Service port's; the port is where the endpoint listens.
        "ports": [{"name": "https", "port": PORT, "protocol": "TCP"}],
        "endpoints": endpoints,
    }


def _endpoint(ip: str, ready: bool) -> dict[str, Any]:
    return {"addresses": [ip], "conditions": {"ready": ready, "serving": True, "terminating": not ready}}


def _start_replica(name: str, netns: NetNamespace, cert_dir: Path, log_file: Path) -> Replica:
    log = open(log_file, "ab")  # noqa: SIM115 - the process owns it
    proc = netns.popen(
        [
            sys.executable,
            "-m",
            "webhook",
            "--cert-dir",
            cert_dir,
            "--bind-address",
            netns.ns_ip,
            "--port",
            str(PORT),
            "--drain-seconds",
            str(DRAIN_SECONDS),
            "--metrics-bind-address",
            f"{netns.ns_ip}:{METRICS_PORT}",
            "--workers",
            "1",  # this test signals the serving process itself and reads its connections
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    log.close()
    return Replica(name=name, netns=netns, proc=proc, log_file=log_file)


def _probe_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


def _ready_sync(replica: Replica, context: ssl.SSLContext) -> bool:
    """GET /readyz at the replica's address, the certificate checked for the Service's name."""
    if replica.proc.poll() is not None:
        raise AssertionError(f"replica {replica.name} exited {replica.proc.returncode}; see {replica.log_file}")
    try:
        with (
            socket.create_connection((replica.ip, PORT), timeout=2) as raw,
            context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls,
        ):
            tls.sendall(f"GET /readyz HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nConnection: close\r\n\r\n".encode())
            return tls.recv(64).startswith(b"HTTP/1.1 200 ")
    except OSError:
        return False


@pytest.fixture
def failover(plane: LocalControlPlane, tmp_path: Path) -> Iterator[Failover]:
    # Addresses in the pod CIDR the plane makes unreachable; a netns's /32 route wins over it.
    # Spread by pid so that two concurrent runs on one machine do not collide.
    base = (os.getpid() % 60) * 4
    ip = lambda n: f"10.244.250.{base + n}"  # noqa: E731
    ca = new_ca("foo-failover-e2e-ca")
    serving = issue_serving(ca, common_name=SERVICE, dns_names=service_dns_names(SERVICE, SERVICE_NAMESPACE))
    cert_dir = tmp_path / "certs"
    write_serving_files(cert_dir, ca, serving, force=True)

    plane.kubectl("create", "namespace", SERVICE_NAMESPACE)
    plane.kubectl("create", "namespace", FOOS_NAMESPACE)
    with (
        NetNamespace(f"foofo-a-{os.getpid()}", ns_ip=ip(1), host_ip=ip(2)) as netns_a,
        NetNamespace(f"foofo-b-{os.getpid()}", ns_ip=ip(3), host_ip=ip(4)) as netns_b,
    ):
        a = _start_replica("A", netns_a, cert_dir, plane.logs_dir / "webhook-a.log")
        b = _start_replica("B", netns_b, cert_dir, plane.logs_dir / "webhook-b.log")
        context = _probe_context(ca.cert_pem)
        for replica in (a, b):
            wait_for(f"replica {replica.name} to be ready", partial(_ready_sync, replica, context), interval=0.05)

        plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE, "namespace": SERVICE_NAMESPACE},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": PORT, "protocol": "TCP"}]},
            },
            _slice([_endpoint(a.ip, True), _endpoint(b.ip, True)]),
            field_manager="e2e",
        )
        plane.apply(
            crd_manifest(
                conversion_client_config=service_client_config(SERVICE_NAMESPACE, SERVICE, "/convert", ca.cert_pem)
            ),
            mutating_configuration(service_client_config(SERVICE_NAMESPACE, SERVICE, "/mutate-foo", ca.cert_pem)),
            validating_configuration(service_client_config(SERVICE_NAMESPACE, SERVICE, "/validate-foo", ca.cert_pem)),
            field_manager="e2e",
        )
        plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
        try:
            yield Failover(plane=plane, ca_pem=ca.cert_pem, a=a, b=b)
        finally:
            for replica in (a, b):
                if replica.proc.poll() is None:
                    replica.proc.terminate()
                    try:
                        replica.proc.wait(timeout=EXIT_WITHIN)
                    except subprocess.TimeoutExpired:
                        replica.proc.kill()
                        replica.proc.wait()


# ----------------------------------------------------------------------------- the run
def _foo(worker: int, n: int, legacy: bool) -> tuple[Resource, dict[str, Any]]:
    name = f"fo-{worker}-{n}"
    if legacy:
        return FOOS_V1ALPHA1, {
            "apiVersion": "samplecontroller.k8s.io/v1alpha1",
            "kind": "Foo",
            "metadata": {"name": name},
            "spec": {"deploymentName": name, "replicas": 1},
        }
    return FOOS_V1, {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": name},
        "spec": {"deployment": {"name": name}, "replicas": 1},
    }


def _webhook_requests(metrics_text: str) -> dict[str, float]:
    """controller_runtime_webhook_requests_total per webhook path (all codes)."""
    totals = dict.fromkeys(WEBHOOK_PATHS, 0.0)
    for line in metrics_text.splitlines():
        if line.startswith("controller_runtime_webhook_requests_total{"):
            for path in WEBHOOK_PATHS:
                if f'webhook="{path}"' in line:
                    totals[path] += float(line.rsplit(" ", 1)[1])
    return totals


@dataclass
class Run:
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[float, str]] = field(default_factory=list)  # (seconds after load start, message)
    started: float = 0.0
    ended: float = 0.0
    sigterm_at: float | None = None
    a_at_sigterm: dict[str, float] = field(default_factory=dict)
    b_at_sigterm: dict[str, float] = field(default_factory=dict)
    b_at_a_exit: dict[str, float] = field(default_factory=dict)
    b_at_end: dict[str, float] = field(default_factory=dict)
    slice_writes: list[tuple[float, str]] = field(default_factory=list)
    warmup_seconds: float = 0.0

    def at(self, moment: float | None) -> str:
        return "-" if moment is None else f"{moment - self.started:.2f}s"


class EndpointsController:
    """Probe /readyz like a kubelet (new connection each time); keep the EndpointSlice in step."""

    def __init__(self, setup: Failover, client: Any, run: Run) -> None:
        self.replicas = [setup.a, setup.b]
        self.client = client
        self.run = run
        self.context = _probe_context(setup.ca_pem)
        self.stopped = asyncio.Event()

    async def _get(self, session: aiohttp.ClientSession, replica: Replica, path: str) -> tuple[int, str] | None:
        try:
            async with session.get(
                f"https://{replica.ip}:{PORT}{path}",
                ssl=self.context,
                server_hostname=SERVICE_HOST,
                timeout=aiohttp.ClientTimeout(total=1.0),
            ) as response:
                return response.status, await response.text()
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    async def metrics(self, session: aiohttp.ClientSession, replica: Replica) -> dict[str, float] | None:
        # /metrics has a plain-HTTP listener of its own, never the admission port.
        try:
            async with session.get(
                f"http://{replica.ip}:{METRICS_PORT}/metrics", timeout=aiohttp.ClientTimeout(total=1.0)
            ) as response:
                answer = response.status, await response.text()
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        if answer[0] != 200:
            return None
        replica.last_requests = _webhook_requests(answer[1])
        return replica.last_requests

    @staticmethod
    async def count_connections(replica: Replica) -> None:
        """Established connections to the replica's port (kube-apiserver's pools, our probes aside)."""
        proc = await asyncio.create_subprocess_exec(
            "ip",
            "netns",
            "exec",
            replica.netns.name,
            "ss",
            "-Htn",
            "state",
            "established",
            f"( sport = :{PORT} )",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        replica.connections.append((time.monotonic(), len(out.splitlines())))

    async def write_slice(self, why: str) -> None:
        endpoints = [_endpoint(r.ip, r.state == "ready") for r in self.replicas if r.state != "gone"]
        await self.client.patch(ENDPOINTSLICES, SLICE, {"endpoints": endpoints}, namespace=SERVICE_NAMESPACE)
        self.run.slice_writes.append((time.monotonic(), why))

    async def loop(self) -> None:
        connector = aiohttp.TCPConnector(force_close=True)  # probes never reuse a connection
        async with aiohttp.ClientSession(connector=connector) as session:
            while not self.stopped.is_set():
                for replica in self.replicas:
                    if replica.state == "gone":
                        continue
                    if replica.proc.poll() is not None:
                        replica.exited_at = replica.exited_at or time.monotonic()
                        if replica is self.replicas[0]:
                            self.run.b_at_a_exit = await self.metrics(session, self.replicas[1]) or {}
                        replica.state = "gone"
                        await self.write_slice(f"{replica.name} exited: removed")
                        continue
                    answer = await self._get(session, replica, "/readyz")
                    now = time.monotonic()
                    if answer is not None and answer[0] == 200:
                        continue
                    if answer is None:
                        replica.no_answer_at = replica.no_answer_at or now
                    elif answer[0] == 503:
                        replica.saw_503_at = replica.saw_503_at or now
                    if replica.state == "ready":
                        replica.state = "unready"
                        replica.unready_at = now
                        await self.write_slice(
                            f"{replica.name} answered {answer[0] if answer else 'nothing'}: not ready"
                        )
                    if answer is not None:
                        await self.metrics(session, replica)  # the drainer's count, as late as we can read it
                        await self.count_connections(replica)
                await asyncio.sleep(PROBE_INTERVAL)


async def _drive(setup: Failover) -> Run:
    run = Run()
    async with await connect(str(setup.plane.kubeconfig)) as client:
        # Warm-up: discovery of the new CRD, and both replicas answering, before the clock starts.
        began = time.monotonic()
        for legacy in (False, True, False, True):
            resource, body = _foo(99, int(legacy), legacy)
            deadline = time.monotonic() + WARM_UP_WITHIN
            while True:
                try:
                    await client.create(resource, body, namespace=FOOS_NAMESPACE, dry_run=True)
                    break
                except ApiError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        run.warmup_seconds = time.monotonic() - began

        controller = EndpointsController(setup, client, run)
        controller_task = asyncio.create_task(controller.loop())
        run.started = time.monotonic()
        deadline = run.started + LOAD_WITHIN
        stop = asyncio.Event()

        async def writer(worker: int) -> None:
            sent = 0
            while not stop.is_set():
                sent += 1
                legacy = sent % 2 == 0  # every other write is v1alpha1: /convert on the path too
                resource, body = _foo(worker, sent, legacy)
                try:
                    await client.create(resource, body, namespace=FOOS_NAMESPACE, dry_run=True)
                    run.outcomes["ok"] += 1
                except ApiError as err:
                    run.outcomes["failed"] += 1
                    run.failures.append((time.monotonic() - run.started, f"{err.status}: {err.message[:300]}"))

        async def until(what: str, condition: Callable[[], Awaitable[bool]]) -> None:
            while not await condition():
                assert time.monotonic() < deadline, f"{what} within {LOAD_WITHIN:.0f}s of load: {run.outcomes}"
                await asyncio.sleep(PROBE_INTERVAL)

        async def conduct() -> None:
            """SIGTERM A once the load runs through it; end the load once B has carried it alone."""
            try:
                async with aiohttp.ClientSession() as session:

                    async def a_serves() -> bool:
                        return sum((await controller.metrics(session, setup.a) or {}).values()) >= SERVED_BEFORE_SIGTERM

                    await until(f"A to answer {SERVED_BEFORE_SIGTERM} webhook requests", a_serves)
                    run.b_at_sigterm = await controller.metrics(session, setup.b) or {}
                    run.a_at_sigterm = await controller.metrics(session, setup.a) or {}
                await controller.count_connections(setup.a)
                setup.a.proc.send_signal(signal.SIGTERM)
                run.sigterm_at = time.monotonic()

                async def a_gone() -> bool:
                    return setup.a.state == "gone"

                await until("A to exit after SIGTERM", a_gone)
                enough = run.outcomes["ok"] + WRITES_AFTER_EXIT

                async def b_carried() -> bool:
                    return run.outcomes["ok"] >= enough

                await until(f"{WRITES_AFTER_EXIT} more writes answered after A's exit", b_carried)
            finally:
                stop.set()

        try:
            await asyncio.gather(conduct(), *(writer(i) for i in range(WRITERS)))
        finally:
            stop.set()
            run.ended = time.monotonic()
            controller.stopped.set()
            await controller_task
        async with aiohttp.ClientSession() as session:
            run.b_at_end = await controller.metrics(session, setup.b) or {}
    return run


def test_sigterm_one_replica_under_load_fails_no_request(failover: Failover) -> None:
    a, b = failover.a, failover.b
    run = asyncio.run(_drive(failover))
    a_exit_code = a.proc.wait(timeout=EXIT_WITHIN)
    a_exited_at = a.exited_at or time.monotonic()
    assert run.sigterm_at is not None

    sent = sum(run.outcomes.values())
    a_total, b_total = sum(a.last_requests.values()), sum(run.b_at_end.values())
    b_after_exit = b_total - sum(run.b_at_a_exit.values())
    print(
        f"\nfailover under load: {sent} dry-run creates sent by {WRITERS} writers in {run.ended - run.started:.0f}s "
        f"(warm-up {run.warmup_seconds:.1f}s): {run.outcomes['ok']} ok, {run.outcomes['failed']} failed"
    )
    print(
        f"  A: SIGTERM at {run.at(run.sigterm_at)}, /readyz 503 at {run.at(a.saw_503_at)}, no answer at "
        f"{run.at(a.no_answer_at)}, exited {a_exit_code} at {run.at(a_exited_at)} "
        f"({a_exited_at - run.sigterm_at:.2f}s after SIGTERM, drain {DRAIN_SECONDS:g}s)"
    )
    print(
        f"  webhook requests served — A: {a_total:.0f} {a.last_requests} (last read during its drain), "
        f"{a_total - sum(run.a_at_sigterm.values()):.0f} of them after SIGTERM"
    )
    print(
        f"  webhook requests served — B: {b_total:.0f} {run.b_at_end}; at A's SIGTERM "
        f"{sum(run.b_at_sigterm.values()):.0f}, at A's exit {sum(run.b_at_a_exit.values()):.0f}, "
        f"after A's exit {b_after_exit:.0f}"
    )
    print(
        "  A's established connections: "
        + ", ".join(f"{run.at(t)} {n}" for t, n in a.connections[:3])
        + " … "
        + ", ".join(f"{run.at(t)} {n}" for t, n in a.connections[-3:])
    )
    print("  EndpointSlice writes: " + "; ".join(f"{run.at(t)} {why}" for t, why in run.slice_writes))
    for moment, message in run.failures[:20]:
        print(f"  failure at {moment:.2f}s ({moment - (run.sigterm_at - run.started):+.2f}s from SIGTERM): {message}")

    assert run.outcomes["ok"] > 100, run.outcomes
    assert run.outcomes["failed"] == 0, f"{run.outcomes['failed']} of {sent} writes failed: {run.failures[:5]}"
    assert a_exit_code == 0, f"replica A exited {a_exit_code}; see {a.log_file}"
    assert a_exited_at - run.sigterm_at < EXIT_WITHIN, "replica A did not exit within its drain + shutdown timeout"
    assert a.saw_503_at is not None and a.saw_503_at < a_exited_at, "A's /readyz never answered 503 before exit"
    # Unready must show while A still serves, so that endpoints stop routing to it within its drain.
    assert a.saw_503_at - run.sigterm_at < DRAIN_SECONDS, "A turned unready only after its drain"
    assert b_after_exit > 0, "B served nothing after A exited"
    assert b.proc.poll() is None, "replica B died"
    for replica in (a, b):
        log = replica.log_file.read_text()
        assert "Traceback" not in log, f"{replica.name}: {log[-3000:]}"
