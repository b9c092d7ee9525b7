"""The aiohttp side of serving.lifecycle: the insights API's edge (drain, Status errors), probes and Listener."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from ssl import SSLContext

from aiohttp import hdrs, web

from apimachinery.bodies import StatusError
from apimachinery.status import NOT_ALLOWED, NOT_FOUND, failure

from .connections import ConnectionGuard, ConnectionLimits, GuardedSite
from .http import status_response
from .readiness import Readiness
from .tlsupgrade import KEEPALIVE_SECONDS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


READINESS = web.AppKey("readiness", Readiness)


@web.middleware
async def status_edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as a Kubernetes Status; nothing leaves as a traceback."""
    try:
        return await handler(request)
    except StatusError as err:
        return status_response(err.status)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        message = {404: NOT_FOUND, 405: NOT_ALLOWED}.get(err.status, err.reason)
        return status_response(failure(err.status, message))
    except ConnectionError:
        if request.transport is not None and not request.transport.is_closing():
            log.exception("internal error serving %s %s", request.method, request.path)
            return status_response(failure(500, "internal error; see the server's log"))
        # The client closed its connection mid-request (mid-body, or while it was worked on): nothing is broken.
        log.info(
            "client went away before it was answered",
            extra={"method": request.method, "path": request.path, "remote": request.remote},
        )
        return status_response(failure(400, "the client went away"))  # never written: aiohttp drops it
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        return status_response(failure(500, "internal error; see the server's log"))


async def close_while_draining(request: web.Request, response: web.StreamResponse) -> None:
    """Once shutting down, every answer says `Connection: close` in its own headers.

    Clients keep HTTP/1.1 connections alive and reuse them without looking at endpoints again,
    so the apiserver keeps sending to a replica that is no longer in the EndpointSlice until
    the connection closes. Closed by the server at the end of the drain, one in use loses its
    request: Go does not retry a POST written onto a reused connection that then hits EOF. Told
    to close by a response, the client retires the connection itself and dials a ready replica.

    An `on_response_prepare` hook, not a middleware: handlers that write their answer themselves
    (a watch streams its events) send headers before any middleware sees the response, and a
    close decided after the headers left is exactly the race above — the client pools a
    connection we then close. The header is set by hand as well: aiohttp computes its own
    Connection header before it runs this hook.
    """
    if request.app[READINESS].draining:
        response.force_close()
        response.headers[hdrs.CONNECTION] = "close"


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.StreamResponse:
    ready, why = request.app[READINESS].ready()
    return web.Response(text=why, status=200 if ready else 503)


def serving_app(readiness: Readiness, *, client_max_size: int = 1024 * 1024) -> web.Application:
    """An app with the shared edge (drain, Status errors) and the probes; callers add routes."""
    app = web.Application(middlewares=[status_edge], client_max_size=client_max_size)
    app.on_response_prepare.append(close_while_draining)
    app[READINESS] = readiness
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class AppListener:
    """An aiohttp app as a Listener (the insights API); its connections are bounded (serving.connections)."""

    def __init__(self, app: web.Application, limits: ConnectionLimits | None = None) -> None:
        self.app = app
        self.readiness = app[READINESS]
        self.runner: web.AppRunner | None = None
        self.guard = ConnectionGuard(limits)

    async def prepare(self) -> None:
        """The app's start-up (``on_startup``, ``cleanup_ctx``): the insights API connects there."""
        self.runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=logging.getLogger("aiohttp.access"),
            keepalive_timeout=KEEPALIVE_SECONDS,
        )
        await self.runner.setup()

    async def start(self, host: str, port: int, *, ssl: SSLContext, reuse_port: bool, backlog: int) -> None:
        assert self.runner is not None, "prepare() first: the TLS context is built after it"
        site = GuardedSite(
            self.runner,
            host,
            port,
            self.guard,
            ssl_context=ssl,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )
        await site.start()

    async def stop(self, timeout: float) -> None:
        if self.runner is not None:
            self.runner._shutdown_timeout = timeout  # what AppRunner(shutdown_timeout=) sets, now deprecated
            await self.runner.cleanup()
