"""The metrics listener every process runs beside its main port, like controller-runtime's.

`/metrics` never shares a port with admission, conversion or the aggregated API: its own
address (`--metrics-bind-address`, `0` turns it off), plain HTTP, or with `--metrics-secure`
HTTPS plus TokenReview + SubjectAccessReview (serving.metricsauth) — controller-runtime's
`WithAuthenticationAndAuthorization`. One handler (kube.metrics.metrics_handler) serves it.

aiohttp is imported only when the listener starts serving, and then off the event loop:
importing it is the heaviest part of a start (its client side builds two verifying
SSLContexts at import), which a webhook whose admission port needs no aiohttp would
otherwise pay before it is ready, or stall its reviews for after. ``MetricsServer.bind`` takes the port without it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web
    from prometheus_client import CollectorRegistry

    from kube.client import KubeClient

    from .metricsauth import MetricsGuard
    from .tls import CertWatcher

log = logging.getLogger(__name__)

# As aiohttp's TCPSite: what the kernel queues for us between bind() and start().
BACKLOG = 128


class MetricsSetupError(Exception):
    """The metrics listener cannot start (port taken, no cluster credentials): one line for the user."""


@dataclass(frozen=True)
class MetricsOptions:
    """Where `/metrics` listens (``port`` 0: nowhere) and whether callers must prove who they are."""

    host: str | None = None  # None: every interface, as Go's ":8080"
    port: int = 8080
    secure: bool = False
    reuse_port: bool = False  # one listener per worker process on the same port

    @property
    def enabled(self) -> bool:
        return self.port != 0

    @property
    def address(self) -> str:
        return f"{self.host or ''}:{self.port}"


def metrics_app(registry: CollectorRegistry, guard: MetricsGuard | None = None) -> web.Application:
    """The `/metrics` app, behind ``guard`` when one is given."""
    from aiohttp import web

    from kube.metrics import metrics_handler

    app = web.Application(middlewares=[guard.middleware] if guard is not None else [])
    app.router.add_get("/metrics", metrics_handler(registry))
    return app


class MetricsServer:
    """Serves ``registry`` on ``options``' address until stopped; HTTPS and guarded when secure.

    Secure, it serves ``certificate`` and watches its files; or, given none, the pair of the
    listener it runs beside, handed over by ``serve_with`` and kept current by that listener's
    watcher, so one watcher reads the pair both ports serve.

    ``bind`` takes the port at once, synchronously and without aiohttp, so that a port already
    in use is a MetricsSetupError before the process says it is ready; ``start`` serves the
    bound sockets (binding them first if ``bind`` was not called), importing aiohttp in a
    thread when nothing has imported it yet.
    """

    def __init__(
        self,
        options: MetricsOptions,
        registry: CollectorRegistry,
        *,
        guard: MetricsGuard | None = None,
        certificate: CertWatcher | None = None,
        owned_client: KubeClient | None = None,
    ) -> None:
        if options.secure and guard is None:
            raise ValueError("secure metrics need a guard")
        self.options = options
        self._registry = registry
        self._guard = guard if options.secure else None
        self._certificate = certificate if options.secure else None
        self._watches_certificate = True
        self._owned_client = owned_client
        self._sockets: list[socket.socket] = []
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None

    def serve_with(self, certificate: CertWatcher) -> None:
        """Serve the pair ``certificate`` watches, which its owner keeps current, when given none of
        its own: no second watcher over the same files."""
        if self.options.secure and self._certificate is None:
            self._certificate = certificate
            self._watches_certificate = False

    @property
    def bound(self) -> bool:
        return bool(self._sockets)

    def bind(self) -> None:
        """Take the port now (listening: the kernel queues scrapes until ``start``); MetricsSetupError if it cannot."""
        if self._sockets:
            return
        try:
            self._sockets = listening_sockets(self.options.host, self.options.port, reuse_port=self.options.reuse_port)
        except OSError as err:
            raise MetricsSetupError(f"cannot serve metrics on {self.options.address}: {err.strerror or err}") from err

    async def start(self, reload_interval: float = 5.0) -> None:
        if self.options.secure and self._certificate is None:
            raise ValueError("secure metrics need a serving certificate (given, or handed over by serve_with)")
        self.bind()
        if "aiohttp.web" not in sys.modules:
            # In the loop's thread the import would hold every review until it is done; in a
            # thread of its own the loop keeps its turns (the interpreter switches every 5 ms).
            await asyncio.to_thread(importlib.import_module, "aiohttp.web")
        from aiohttp import web

        runner = web.AppRunner(
            metrics_app(self._registry, self._guard), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await runner.setup()
        self._runner = runner
        context = self._certificate.server_context(client_ca=False) if self._certificate is not None else None
        for sock in self._sockets:
            await web.SockSite(runner, sock, ssl_context=context).start()
        if self._certificate is not None and self._watches_certificate:
            self._watch = asyncio.create_task(self._certificate.watch(reload_interval), name="metrics-cert-watcher")
        log.info("serving metrics", extra={"address": self.options.address, "secure": self.options.secure})

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()  # the loop's servers own the sockets they serve, and close them
            self._runner = None
        for sock in self._sockets:  # any bound but never served (stopped before or while starting)
            sock.close()  # a socket the loop already closed: nothing happens
        self._sockets = []
        if self._owned_client is not None:
            await self._owned_client.close()


def listening_sockets(host: str | None, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """Listening sockets for ``host`` (None: every interface) the way asyncio's ``create_server``
    makes them: one per address ``host`` resolves to (families the kernel lacks skipped),
    SO_REUSEADDR, IPv6 ones IPv6-only.

    OSError (the first one met, every socket made so far closed) when an address cannot be bound.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this kernel lacks (IPv6 turned off): asyncio skips it too
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"no address of {host or 'every interface'} can be listened on here")
    return sockets


def delegating_guard(client: KubeClient) -> MetricsGuard:
    """TokenReview + SubjectAccessReview through ``client`` (RBAC: system:auth-delegator): the
    guard's own (``guard_client``), so a flood of tokens at /metrics never waits for, or holds up,
    the connections the process does its work with."""
    from .metricsauth import MetricsGuard, access_reviewer, token_reviewer

    return MetricsGuard(authenticate=token_reviewer(client), authorize=access_reviewer(client))


async def guard_client(kubeconfig: str | None, user_agent: str) -> KubeClient:
    """The metrics guard's own client: a connection pool as large as the reviews it may have under
    way and a rate of its own (20 reviews/s, bursts of 40: a flood of unknown tokens asks the
    apiserver no faster, and each honest scraper asks twice every 2 minutes).
    MetricsSetupError, one line, when there are no credentials."""
    from kube.config import ClientSettings, connect

    from .metricsauth import MAX_CHECKS

    settings = ClientSettings(qps=20.0, burst=40, timeout=10.0, max_connections=MAX_CHECKS, user_agent=user_agent)
    try:
        return await connect(kubeconfig, settings=settings)
    except Exception as err:  # kubernetes_asyncio's config errors have no common base
        raise MetricsSetupError(
            f"--metrics-secure needs cluster credentials for TokenReviews and SubjectAccessReviews: {err}"
        ) from err


async def metrics_server(
    options: MetricsOptions,
    registry: CollectorRegistry,
    *,
    certificate: CertWatcher | None,
    kubeconfig: str | None,
    user_agent: str,
) -> MetricsServer | None:
    """The metrics server a TLS process runs (None when turned off); connects to the cluster only
    when secure, so a webhook without `--metrics-secure` still needs no Kubernetes credentials.
    ``certificate`` None: the listener's pair, handed over with ``MetricsServer.serve_with``."""
    if not options.enabled:
        return None
    if not options.secure:
        return MetricsServer(options, registry)
    client = await guard_client(kubeconfig, user_agent)
    return MetricsServer(
        options, registry, guard=delegating_guard(client), certificate=certificate, owned_client=client
    )
