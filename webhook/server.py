"""Run the webhook app over TLS (serving.reviews, with serving.lifecycle's lifecycle), with the optional certificate rotator.

As one of several workers (serving.workers) the process also shares its ports, reports its
metrics through prometheus-client's multiprocess files and is ready only when every worker
serves. With ``--cert-rotation`` only worker 0 runs the rotator: the Lease already lets one
process in the Deployment write the Secret, and N workers each holding a Kubernetes client,
a lease loop and a rotation round every 30 s would only compete for it. The others watch the
files worker 0 writes into the shared certificate directory (CertWatcher, at least every
rotation round), well inside the rotation's overlap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from certs.policy import RotationPolicy
from serving.lifecycle import ServingOptions, serve_until_stopped, serving_metrics, stop_on_signals
from serving.readiness import CERTIFICATE_LOADED, Readiness
from serving.reviews.server import ReviewServer
from serving.tls import CertWatcher, refused_reloads
from serving.workermetrics import count_gc_in_files, multiprocess_registry
from serving.workers import Worker

from .app import Settings, build_app
from .metrics import WebhookMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RotationOptions:
    """--cert-rotation: the service keeps its own CA and serving certificate in a Secret."""

    namespace: str
    secret_name: str
    dns_names: tuple[str, ...]
    ips: tuple[str, ...] = ()
    kubeconfig: str | None = None
    mutating: str | None = None
    validating: str | None = None
    crd: str | None = None
    apiservice: str | None = None
    lease_name: str = "foo-operator-cert-rotator"
    interval: float = 30.0
    policy: RotationPolicy = RotationPolicy()


@dataclass(frozen=True)
class ServerOptions(ServingOptions):
    rotation: RotationOptions | None = None
    kubeconfig: str | None = None  # for --metrics-secure's reviews (rotation has its own)
    worker: Worker | None = None  # one of several processes (--workers N); None: the only one


async def serve(options: ServerOptions, settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then drain and return. In three steps:
    the metrics and the certificate watcher; the serving pair on disk; the app on its listener."""
    worker = options.worker
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    # A worker's values go to the shared files; the registry it serves reads every worker's.
    metrics = WebhookMetrics.create(CollectorRegistry() if worker is not None else None)
    watcher = options.certificate(
        options.client_ca_file,
        on_load=lambda cert: metrics.certificate_expiry.set(cert.not_valid_after_utc.timestamp()),
        on_refused=refused_reloads(metrics.registry),
    )
    rotation = await _start_rotation(options, watcher) if _rotates_here(options) else None
    try:
        paired = await _serving_pair(options, rotation, stop)
        if paired is None:
            return  # stopped, or the rotator died, before the pair was written
        options = paired
        readiness = Readiness(
            checks={CERTIFICATE_LOADED: lambda: watcher.loaded},
            announce=worker.announce if worker is not None else None,
            shared=worker.readiness if worker is not None else None,
        )
        app = build_app(settings, readiness=readiness, webhook_metrics=metrics)
        served = metrics.registry
        if worker is not None:
            count_gc_in_files()
            served = multiprocess_registry(worker.pids)
        kubeconfig = options.rotation.kubeconfig if options.rotation else options.kubeconfig
        metrics_server = await serving_metrics(options, served, name="webhook", kubeconfig=kubeconfig)
        await serve_until_stopped(
            ReviewServer(app.reviews),
            options,
            watcher,
            stop,
            name="webhook",
            background=rotation.tasks if rotation else [],
            metrics=metrics_server,
        )
    finally:
        if rotation is not None:
            await rotation.close()


def _rotates_here(options: ServerOptions) -> bool:
    """With --cert-rotation, the only process or worker 0 runs the rotator."""
    return options.rotation is not None and (options.worker is None or options.worker.first)


async def _serving_pair(
    options: ServerOptions, rotation: _Rotation | None, stop: asyncio.Event
) -> ServerOptions | None:
    """Wait for the serving pair: files given (at once), written by this process's rotator, or
    by worker 0's. The options to serve with; None if ``stop`` (or the rotator's end) came first."""
    if options.rotation is None:
        return options
    if rotation is not None:
        return options if await rotation.wrote_files(stop) else None
    if not await _files_written(options, stop):
        return None
    # Worker 0 writes new files every rotation round; the others must read them as often,
    # as other replicas' rotators do, for the overlap to cover them.
    return dataclasses.replace(
        options, cert_reload_interval=min(options.cert_reload_interval, options.rotation.interval)
    )


async def _files_written(options: ServerOptions, stop: asyncio.Event, poll: float = 0.1) -> bool:
    """A worker other than the rotator's waits for the serving pair it writes; False if stopped first."""
    pair = (options.cert_dir / options.cert_name, options.cert_dir / options.key_name)
    while not all(path.is_file() for path in pair):
        try:
            await asyncio.wait_for(stop.wait(), poll)
            return False
        except TimeoutError:
            pass
    return True


@dataclass
class _Rotation:
    """The running certificate rotator (--cert-rotation) and the client it writes with."""

    rotator: Any
    client: Any
    secret: str
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def wrote_files(self, stop: asyncio.Event) -> bool:
        """Wait until the rotator has written the serving pair; False if stopped or it died first."""
        log.info("waiting for the certificate Secret", extra={"secret": self.secret})
        if await _first_of(self.rotator.files_ready.wait(), stop.wait(), *self.tasks):
            return True
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error("certificate rotation stopped", exc_info=task.exception())
        return False

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.close()


async def _start_rotation(options: ServerOptions, watcher: CertWatcher) -> _Rotation:
    """The Secret-backed rotator with a lease, so only one replica writes. Imported lazily: the
    Kubernetes client costs start-up time that a plain file-based webhook does not need."""
    from certs.rotator import BundleTargets, Rotator
    from kube.config import ClientSettings, connect
    from kube.leader import LeaderElector

    rotation = options.rotation
    assert rotation is not None
    client = await connect(rotation.kubeconfig, settings=ClientSettings(user_agent="foo-operator-webhook"))
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(client, namespace=rotation.namespace, name=rotation.lease_name, identity=identity)
    rotator = Rotator(
        client,
        namespace=rotation.namespace,
        secret_name=rotation.secret_name,
        dns_names=rotation.dns_names,
        ips=rotation.ips,
        cert_dir=options.cert_dir,
        policy=rotation.policy,
        interval=rotation.interval,
        elector=elector,
        on_files_written=watcher.reload,
        targets=BundleTargets(
            mutating=rotation.mutating, validating=rotation.validating, crd=rotation.crd, apiservice=rotation.apiservice
        ),
    )
    secret = f"{rotation.namespace}/{rotation.secret_name}"
    return _Rotation(rotator, client, secret, [asyncio.create_task(rotator.run(), name="cert-rotator")])


async def _first_of(ready: Any, stopped: Any, *tasks: asyncio.Task[None]) -> bool:
    """Wait for ``ready``; False if ``stopped`` came first or a background task ended."""
    waiting = [asyncio.ensure_future(ready), asyncio.ensure_future(stopped)]
    done, _ = await asyncio.wait([*waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for future in waiting:
        future.cancel()
    return waiting[0] in done
