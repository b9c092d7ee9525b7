"""/healthz and /readyz on a small plain-HTTP aiohttp server: the kubelet probes it from the node.

`/metrics` has a listener of its own (kube.metricsserver), so it can be loopback-only or secure
while the probes stay reachable.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler


def _probe(check: Callable[[], bool], failing: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        if check():
            return web.Response(text="ok")
        return web.Response(status=503, text=failing)

    return handle


class HealthServer:
    """Serves the probes on ``host``:``port`` (port 0 turns it off)."""

    def __init__(self, *, ready: Callable[[], bool], host: str | None = None, port: int = 8081) -> None:
        self.host = host
        self.port = port
        self._app = web.Application()
        self._app.router.add_get("/healthz", _probe(lambda: True, "not alive"))
        self._app.router.add_get("/readyz", _probe(ready, "caches not synced"))
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if not self.port:
            return
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, self.host, self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
