"""/healthz, /readyz and /metrics on a small aiohttp server (one port each, or one for all)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from kube.metrics import metrics_handler


def _probe(check: Callable[[], bool], failing: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        if check():
            return web.Response(text="ok")
        return web.Response(status=503, text=failing)

    return handle


class HealthServer:
    """Serves the probes on ``health_port`` and the metrics on ``metrics_port`` (0 turns one off)."""

    def __init__(
        self,
        *,
        ready: Callable[[], bool],
        registry: CollectorRegistry,
        host: str = "0.0.0.0",
        health_port: int = 8081,
        metrics_port: int = 8080,
    ) -> None:
        self.host = host
        self._apps: dict[int, web.Application] = {}
        if health_port:
            app = self._apps.setdefault(health_port, web.Application())
            app.router.add_get("/healthz", _probe(lambda: True, "not alive"))
            app.router.add_get("/readyz", _probe(ready, "caches not synced"))
        if metrics_port:
            app = self._apps.setdefault(metrics_port, web.Application())
            app.router.add_get("/metrics", metrics_handler(registry))
        self._runners: list[web.AppRunner] = []

    async def start(self) -> None:
        for port, app in self._apps.items():
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
            await runner.setup()
            await web.TCPSite(runner, self.host, port).start()
            self._runners.append(runner)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
