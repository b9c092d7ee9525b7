"""Run the app over TLS with certificate reload, readiness and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from certs.rotation import RotationPolicy

from .aggregated import AggregatedConfig, setup_aggregated_api
from .app import Readiness, Settings, build_app
from .metrics import WebhookMetrics
from .tls import CertWatcher

log = logging.getLogger("webhook")

KEEPALIVE_SECONDS = 120.0


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
class ServerOptions:
    cert_dir: Path
    cert_name: str = "tls.crt"
    key_name: str = "tls.key"
    client_ca_file: Path | None = None
    bind_address: str = "0.0.0.0"
    port: int = 9443
    cert_reload_interval: float = 5.0
    # Time between "not ready" and closing the listener, so endpoints stop routing to us first.
    drain_seconds: float = 0.0
    # How long in-flight requests may take to finish once the listener is closed.
    shutdown_timeout: float = 10.0
    rotation: RotationOptions | None = None
    aggregated: AggregatedConfig | None = None


async def serve(options: ServerOptions, settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then drain and return."""
    metrics = WebhookMetrics.create()
    watcher = CertWatcher(
        options.cert_dir / options.cert_name,
        options.cert_dir / options.key_name,
        client_ca_file=options.client_ca_file or (options.aggregated.requestheader_ca_file if options.aggregated else None),
        on_load=lambda cert: metrics.certificate_expiry.set(cert.not_valid_after_utc.timestamp()),
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass  # not the main thread (tests): the caller sets ``stop`` itself
    readiness = Readiness(checks=[lambda: watcher.loaded])
    background: list[asyncio.Task[None]] = []
    closers: list[Any] = []
    if options.rotation is not None:
        rotator, client = await _start_rotator(options, watcher)
        closers.append(client)
        background.append(asyncio.create_task(rotator.run(), name="cert-rotator"))
        log.info("waiting for the certificate Secret", extra={"secret": f"{options.rotation.namespace}/{options.rotation.secret_name}"})
        if not await _first_of(rotator.files_ready.wait(), stop.wait(), *background):
            for task in background:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error("certificate rotation stopped", exc_info=task.exception())
                task.cancel()
            for client in closers:
                await client.close()
            return
    app = build_app(settings, readiness=readiness, webhook_metrics=metrics)
    if options.aggregated is not None:
        setup_aggregated_api(app, options.aggregated)
    # keepalive_timeout above the apiserver's 90 s idle timeout: the client, not us, retires an
    # idle connection, so it never writes a request onto one we are closing (a lost POST).
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=options.shutdown_timeout,
                           access_log=logging.getLogger("aiohttp.access"), keepalive_timeout=KEEPALIVE_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, options.bind_address, options.port, ssl_context=watcher.server_context(),
                       backlog=1024, reuse_address=True)
    await site.start()
    readiness.serving = True
    log.info("serving", extra={"address": f"{options.bind_address}:{options.port}", "cert_dir": str(options.cert_dir)})

    background.append(asyncio.create_task(watcher.watch(options.cert_reload_interval), name="cert-watcher"))
    try:
        await stop.wait()
    finally:
        readiness.draining = True
        log.info("shutting down: not ready, draining", extra={"drain_seconds": options.drain_seconds})
        if options.drain_seconds > 0:
            await asyncio.sleep(options.drain_seconds)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await runner.cleanup()
        for client in closers:
            await client.close()
        log.info("stopped")


async def _start_rotator(options: ServerOptions, watcher: CertWatcher) -> tuple[Any, Any]:
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
        client, namespace=rotation.namespace, secret_name=rotation.secret_name, dns_names=rotation.dns_names,
        ips=rotation.ips, cert_dir=options.cert_dir, policy=rotation.policy, interval=rotation.interval,
        elector=elector, on_files_written=watcher.reload,
        targets=BundleTargets(mutating=rotation.mutating, validating=rotation.validating, crd=rotation.crd,
                              apiservice=rotation.apiservice),
    )
    return rotator, client


async def _first_of(ready: Any, stopped: Any, *tasks: asyncio.Task[None]) -> bool:
    """Wait for ``ready``; False if ``stopped`` came first or a background task ended."""
    waiting = [asyncio.ensure_future(ready), asyncio.ensure_future(stopped)]
    done, _ = await asyncio.wait([*waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for future in waiting:
        future.cancel()
    return waiting[0] in done
