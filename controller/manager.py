"""Runs the controller process: client, caches, probes, leader election, graceful shutdown.

Lifecycle: start caches and probes → (campaign for the Lease) → run workers while leading →
on SIGTERM/SIGINT stop taking work, let in-flight reconciles finish, release the Lease, exit 0.
Losing the Lease stops the workers and returns to campaigning; the caches stay warm.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

from certs.files import TLS_CERT, TLS_KEY
from kube.client import KubeClient
from kube.config import ClientSettings, connect
from kube.events import EventRecorder
from kube.leader import LeaderElector
from kube.metrics import REGISTRY, Metrics, metrics_for
from serving.lifecycle import stop_on_signals
from serving.metricsserver import MetricsServer, MetricsSetupError, delegating_guard, guard_client
from serving.probes import ProbeServer, ProbeSetupError
from serving.tls import CertWatcher, refused_reloads

from .controller import FooController
from .settings import Settings

log = logging.getLogger(__name__)

COMPONENT = "foo-controller"


async def _until(awaitable: Awaitable[object], stop: asyncio.Event) -> bool:
    """Await ``awaitable`` unless ``stop`` is set first; True if it finished."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False


async def run(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """The process: build its parts, start them, work (while leading) until stopped, stop them."""
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    client = await _client(settings)
    if client is None:
        return 1
    parts = _Parts.build(settings, client)
    try:
        if not await parts.start():
            return 1
        if await _caches_synced(parts.controller, settings, stop):
            await _work_until_stopped(parts, settings, stop)
    finally:
        await parts.stop()
    return 0


async def _client(settings: Settings) -> KubeClient | None:
    try:
        return await connect(
            settings.kubeconfig,
            settings=ClientSettings(
                qps=settings.qps, burst=settings.burst, user_agent=COMPONENT, field_manager=COMPONENT
            ),
        )
    except Exception as exc:  # no kubeconfig, no service account: nothing to retry
        log.error("cannot configure a Kubernetes client (%s): %s", settings.kubeconfig or "in-cluster", exc)
        return None


@dataclass
class _Parts:
    """What the process runs, in the order it starts them; ``stop`` takes them down in reverse."""

    settings: Settings
    client: KubeClient
    metrics: Metrics
    recorder: EventRecorder
    controller: FooController
    probes: ProbeServer | None
    elector: LeaderElector | None
    self_signed: tempfile.TemporaryDirectory[str] | None
    metrics_server: MetricsServer | None = None

    @classmethod
    def build(cls, settings: Settings, client: KubeClient) -> _Parts:
        metrics = metrics_for(REGISTRY)
        elector = (
            LeaderElector(
                client,
                namespace=settings.leader_elect_namespace,
                name=settings.leader_elect_name,
                identity=settings.identity,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
                metrics=metrics,
            )
            if settings.leader_elect
            else None
        )
        # Reconciles and Events write through the lease's fence; the elector itself and the
        # metrics guard's reviews use the plain client (same connections).
        writer = client.fenced(elector.check_write) if elector is not None else client
        recorder = EventRecorder(writer, COMPONENT, metrics=metrics)
        controller = FooController(
            writer,
            recorder,
            namespace=settings.namespace,
            workers=settings.workers,
            default_image=settings.default_image,
            metrics=metrics,
        )
        probes = (
            ProbeServer(
                lambda: (True, "ok") if controller.synced else (False, "caches not synced"),
                settings.health_host,
                settings.health_port,
            )
            if settings.health_port
            else None
        )
        self_signed = tempfile.TemporaryDirectory(prefix="foo-operator-metrics-") if settings.metrics.secure else None
        return cls(settings, client, metrics, recorder, controller, probes, elector, self_signed)

    async def start(self) -> bool:
        """Probes, metrics, events, informers; False when the probe or metrics listener cannot be set up."""
        if self.probes is not None:
            try:
                self.probes.start()
            except ProbeSetupError as err:
                log.error("%s", err)
                return False
        if self.settings.metrics.enabled:
            try:
                self.metrics_server = await _metrics_server(self.settings, self.self_signed)
                await self.metrics_server.start()
            except MetricsSetupError as err:
                log.error("%s", err)
                return False
        self.recorder.start()
        for informer in self.controller.informers:
            informer.start()
        return True

    async def stop(self) -> None:
        if self.elector is not None and self.elector.is_leader:
            await self.elector.release()
        for informer in self.controller.informers:
            await informer.stop()
        await self.recorder.stop(timeout=5.0)
        if self.probes is not None:
            await self.probes.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.self_signed is not None:
            self.self_signed.cleanup()  # the private key must not outlive the process
        await self.client.close()
        log.info("stopped")


async def _caches_synced(controller: FooController, settings: Settings, stop: asyncio.Event) -> bool:
    """Wait for every informer's first list; False if stopped first."""
    log.info(
        "waiting for caches (namespace %s, %d workers, qps %s, burst %s)",
        settings.namespace or "<all>",
        settings.workers,
        settings.qps,
        settings.burst,
    )
    synced = all(await asyncio.gather(*(_until(i.wait_for_sync(), stop) for i in controller.informers)))
    if synced:
        log.info(
            "caches synced: %d Foos, %d Deployments", len(controller.foos.store), len(controller.deployments.store)
        )
    return synced


async def _work_until_stopped(parts: _Parts, settings: Settings, stop: asyncio.Event) -> None:
    """Run the workers: while elected, or from now on when leader election is off."""
    if parts.elector is not None:
        await _lead_while_elected(parts.controller, parts.elector, stop, settings.shutdown_grace)
        return
    parts.controller.start_workers()
    await stop.wait()
    log.info("shutting down: finishing in-flight reconciles")
    await parts.controller.stop_workers(settings.shutdown_grace)


async def _metrics_server(settings: Settings, self_signed: tempfile.TemporaryDirectory[str] | None) -> MetricsServer:
    """Plain, or HTTPS behind TokenReview + SubjectAccessReview with the given or a self-signed pair.

    The reviews go through a client of their own: on the controller's, a flood of tokens at
    /metrics took its connections and rate from the reconciles (issue 34: a Foo 6 ms -> 1.76 s).
    """
    if not settings.metrics.secure:
        return MetricsServer(settings.metrics, REGISTRY)
    if settings.metrics_cert_dir is not None:
        cert_file, key_file = Path(settings.metrics_cert_dir) / TLS_CERT, Path(settings.metrics_cert_dir) / TLS_KEY
    else:
        from certs.files import write_self_signed  # cryptography, only for a pair made here

        assert self_signed is not None
        cert_file, key_file = write_self_signed(Path(self_signed.name))
    client = await guard_client(settings.kubeconfig, COMPONENT)
    return MetricsServer(
        settings.metrics,
        REGISTRY,
        guard=delegating_guard(client),
        certificate=CertWatcher(cert_file, key_file, on_refused=refused_reloads(REGISTRY)),
        owned_client=client,
    )


async def _lead_while_elected(
    controller: FooController, elector: LeaderElector, stop: asyncio.Event, grace: float
) -> None:
    log.info("campaigning for lease %s/%s as %s", elector.namespace, elector.name, elector.identity)
    while not stop.is_set():
        if not await _until(elector.acquire(), stop):
            return
        controller.start_workers()
        holding = asyncio.create_task(elector.hold(), name="lease-renewal")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({holding, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            stopping.cancel()
            holding.result()
            # Someone else may lead already: stop at once rather than race them.
            await controller.stop_workers(min(grace, elector.retry_period))
            log.warning("lost the lease; campaigning again")
            continue
        # Shutting down: keep renewing while in-flight reconciles finish, then hand over.
        log.info("shutting down: finishing in-flight reconciles, then releasing the lease")
        await controller.stop_workers(grace)
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        await elector.release()
        return
