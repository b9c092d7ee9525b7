"""The aggregated API insights.samplecontroller.k8s.io/v1alpha1 (FooReview, FooHealth) on the webhook app.

One call wires it: ``setup_aggregated_api(app, AggregatedConfig(...))`` adds the routes (`/apis`,
`/apis/...`, `/openapi/...`) and a lifecycle that connects to the cluster at startup (front-proxy
trust, SubjectAccessReviews, informers) and lets go at shutdown. Anything given in the config
(``requestheader``, ``authorizer``, ``view``) is used as is instead of being fetched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from fooapi import DEFAULT_IMAGE
from kube.client import KubeClient
from kube.config import ClientSettings, connect
from kube.informer import Informer

from .api import INSIGHTS, Insights, handle
from .authn import Authenticator, RequestHeaderConfig, UserInfo
from .authz import Authorizer, CachingAuthorizer, Decision, RequestInfo
from .cluster import RequestHeaderSource, health_informers, health_view, sar_authorizer, start_all
from .view import HealthView

log = logging.getLogger("webhook.aggregated")

__all__ = ["AggregatedConfig", "RequestHeaderConfig", "HealthView", "setup_aggregated_api"]


@dataclass(frozen=True)
class AggregatedConfig:
    default_image: str = DEFAULT_IMAGE
    # Where to reach the cluster: a kubeconfig path, or None for the pod's service account.
    kubeconfig: str | None = None
    # The requestheader CA is written here; give the same path to the TLS layer
    # (ServerOptions.client_ca_file) so the listener asks clients for a certificate.
    requestheader_ca_file: Path | None = None
    authorization_allowed_ttl: float = 10.0
    authorization_denied_ttl: float = 10.0
    watch_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    history: int = 1024
    # How long startup waits for the ConfigMap before serving anyway (the caches sync meanwhile;
    # foohealths answer 503 until they have).
    sync_timeout: float = 10.0
    # Given, these are used as they are and nothing is fetched from the cluster for them.
    requestheader: RequestHeaderConfig | None = None
    authorizer: Authorizer | None = None
    view: HealthView | None = None

    @property
    def needs_cluster(self) -> bool:
        return self.requestheader is None or self.authorizer is None or self.view is None


async def _not_connected(user: UserInfo, info: RequestInfo) -> Decision:
    raise RuntimeError("not connected to the cluster yet")


def setup_aggregated_api(app: web.Application, config: AggregatedConfig) -> None:
    """Serve insights.samplecontroller.k8s.io from ``app`` (before it starts)."""
    insights = Insights(
        authenticator=Authenticator(config.requestheader),
        authorizer=CachingAuthorizer(config.authorizer or _not_connected,
                                     allowed_ttl=config.authorization_allowed_ttl,
                                     denied_ttl=config.authorization_denied_ttl),
        view=config.view or HealthView.empty(synced=lambda: False),
        default_image=config.default_image,
        watch_timeout=config.watch_timeout,
        bookmark_interval=config.bookmark_interval,
    )
    app[INSIGHTS] = insights
    for path in ("/apis", "/apis/{tail:.*}", "/openapi/v2", "/openapi/v3", "/openapi/v3/{tail:.*}"):
        app.router.add_route("*", path, handle)
    app.on_shutdown.append(_end_watches)
    if config.needs_cluster:
        app.cleanup_ctx.append(_cluster_lifecycle(config))


async def _end_watches(app: web.Application) -> None:
    # Before the server waits for in-flight handlers: a watch would otherwise hold it for minutes.
    app[INSIGHTS].view.close()


def _cluster_lifecycle(config: AggregatedConfig):  # type: ignore[no-untyped-def]
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        insights = app[INSIGHTS]
        client: KubeClient = await connect(config.kubeconfig,
                                           settings=ClientSettings(user_agent="foo-operator-webhook/aggregated"))
        informers: list[Informer] = []
        try:
            if config.requestheader is None:
                source = RequestHeaderSource(client, insights.authenticator, config.requestheader_ca_file)
                informers.append(source.informer)
                source.informer.start()
            if config.authorizer is None:
                insights.authorizer = CachingAuthorizer(sar_authorizer(client),
                                                        allowed_ttl=config.authorization_allowed_ttl,
                                                        denied_ttl=config.authorization_denied_ttl)
            if config.view is None:
                by_kind = health_informers(client)
                insights.view = health_view(by_kind, history=config.history)
                informers += by_kind.values()
            for informer in informers:
                informer.start()
            if config.requestheader is None:
                # Waited for: the TLS listener is built after startup and must find the
                # requestheader CA file to ask clients for certificates at all.
                await start_all(informers[:1], config.sync_timeout)
            yield
        finally:
            insights.view.close()
            for informer in informers:
                await informer.stop()
            await client.close()

    return lifecycle
