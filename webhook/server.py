"""Run the app over TLS with certificate reload, readiness and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from .app import Readiness, Settings, build_app
from .metrics import WebhookMetrics
from .tls import CertWatcher

log = logging.getLogger("webhook")


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


async def serve(options: ServerOptions, settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then drain and return."""
    metrics = WebhookMetrics.create()
    watcher = CertWatcher(
        options.cert_dir / options.cert_name,
        options.cert_dir / options.key_name,
        client_ca_file=options.client_ca_file,
        on_load=lambda cert: metrics.certificate_expiry.set(cert.not_valid_after_utc.timestamp()),
    )
    readiness = Readiness(checks=[lambda: watcher.loaded])
    app = build_app(settings, readiness=readiness, webhook_metrics=metrics)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=options.shutdown_timeout,
                           access_log=logging.getLogger("aiohttp.access"))
    await runner.setup()
    site = web.TCPSite(runner, options.bind_address, options.port, ssl_context=watcher.server_context(),
                       backlog=1024, reuse_address=True)
    await site.start()
    readiness.serving = True
    log.info("serving", extra={"address": f"{options.bind_address}:{options.port}", "cert_dir": str(options.cert_dir)})

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass  # not the main thread (tests): the caller sets ``stop`` itself
    watch = asyncio.create_task(watcher.watch(options.cert_reload_interval), name="cert-watcher")
    try:
        await stop.wait()
    finally:
        readiness.draining = True
        log.info("shutting down: not ready, draining", extra={"drain_seconds": options.drain_seconds})
        if options.drain_seconds > 0:
            await asyncio.sleep(options.drain_seconds)
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await runner.cleanup()
        log.info("stopped")
