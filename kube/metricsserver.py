"""The metrics listener every process runs beside its main port, like controller-runtime's.

`/metrics` never shares a port with admission, conversion or the aggregated API: its own
address (`--metrics-bind-address`, `0` turns it off), plain HTTP, or with `--metrics-secure`
HTTPS plus TokenReview + SubjectAccessReview (kube.metricsauth) — controller-runtime's
`WithAuthenticationAndAuthorization`. One handler (kube.metrics.metrics_handler) serves it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from .client import KubeClient
from .metrics import metrics_handler
from .metricsauth import MetricsGuard, access_reviewer, token_reviewer
from .tls import CertWatcher

log = logging.getLogger(__name__)


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


def parse_bind_address(text: str, flag: str = "--metrics-bind-address") -> tuple[str | None, int]:
    """controller-runtime's form: ``host:port``, ``:port`` (every interface) or ``0`` (off).

    ValueError with one line when it is none of them.
    """
    if text.strip() == "0":
        return None, 0
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{flag} {text!r} is not host:port, :port or 0")
    host = host.removeprefix("[").removesuffix("]")
    return host or None, int(port_text)


def metrics_app(registry: CollectorRegistry, guard: MetricsGuard | None = None) -> web.Application:
    """The `/metrics` app, behind ``guard`` when one is given."""
    app = web.Application(middlewares=[guard.middleware] if guard is not None else [])
    app.router.add_get("/metrics", metrics_handler(registry))
    return app


class MetricsServer:
    """Serves ``registry`` on ``options``' address until stopped; HTTPS and guarded when secure."""

    def __init__(
        self,
        options: MetricsOptions,
        registry: CollectorRegistry,
        *,
        guard: MetricsGuard | None = None,
        certificate: CertWatcher | None = None,
        owned_client: KubeClient | None = None,
    ) -> None:
        if options.secure and (guard is None or certificate is None):
            raise ValueError("secure metrics need a guard and a serving certificate")
        self.options = options
        self._app = metrics_app(registry, guard if options.secure else None)
        self._certificate = certificate if options.secure else None
        self._owned_client = owned_client
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self, reload_interval: float = 5.0) -> None:
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._runner = runner
        context = self._certificate.server_context() if self._certificate is not None else None
        try:
            await web.TCPSite(
                runner,
                self.options.host,
                self.options.port,
                ssl_context=context,
                reuse_address=True,
                reuse_port=self.options.reuse_port or None,
            ).start()
        except OSError as err:
            raise MetricsSetupError(f"cannot serve metrics on {self.options.address}: {err.strerror or err}") from err
        if self._certificate is not None:
            self._watch = asyncio.create_task(self._certificate.watch(reload_interval), name="metrics-cert-watcher")
        log.info("serving metrics", extra={"address": self.options.address, "secure": self.options.secure})

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._owned_client is not None:
            await self._owned_client.close()


def delegating_guard(client: KubeClient) -> MetricsGuard:
    """TokenReview + SubjectAccessReview through ``client`` (RBAC: system:auth-delegator)."""
    return MetricsGuard(authenticate=token_reviewer(client), authorize=access_reviewer(client))


async def metrics_server(
    options: MetricsOptions,
    registry: CollectorRegistry,
    *,
    certificate: CertWatcher | None,
    kubeconfig: str | None,
    user_agent: str,
) -> MetricsServer | None:
    """The metrics server a TLS process runs (None when turned off); connects to the cluster only
    when secure, so a webhook without `--metrics-secure` still needs no Kubernetes credentials."""
    if not options.enabled:
        return None
    if not options.secure:
        return MetricsServer(options, registry)
    from .config import ClientSettings, connect

    try:
        client = await connect(kubeconfig, settings=ClientSettings(user_agent=user_agent))
    except Exception as err:  # kubernetes_asyncio's config errors have no common base
        raise MetricsSetupError(
            f"--metrics-secure needs cluster credentials for TokenReviews and SubjectAccessReviews: {err}"
        ) from err
    return MetricsServer(
        options, registry, guard=delegating_guard(client), certificate=certificate, owned_client=client
    )
