"""Wiring: the aggregated API's routes on the insights process's aiohttp app, and a lifecycle that
connects to the cluster at startup."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from kube.client import KubeClient
from kube.config import ClientSettings, connect
from kube.informer import Informer
from serving.budget import ByteBudget

from .api import INSIGHTS, Insights, handle, review_budget
from .authn import Authenticator, UserInfo
from .authz import CachingAuthorizer, Decision, RequestInfo
from .cluster import RequestHeaderSource, health_informers, health_view, sar_authorizer, start_all
from .config import AggregatedConfig
from .view import HealthView

log = logging.getLogger(__name__)


class ClusterConfigError(Exception):
    """The cluster's configuration does not load (no kubeconfig, a wrong path): the process's one
    line and exit 1, as the webhook says it, not a traceback out of aiohttp's startup."""


async def _not_connected(user: UserInfo, info: RequestInfo) -> Decision:
    raise RuntimeError("not connected to the cluster yet")


def setup(app: web.Application, config: AggregatedConfig) -> None:
    """Serve insights.samplecontroller.k8s.io from ``app`` (before it starts)."""
    insights = Insights(
        authenticator=Authenticator(config.requestheader),
        authorizer=CachingAuthorizer(
            config.authorizer or _not_connected,
            allowed_ttl=config.authorization_allowed_ttl,
            denied_ttl=config.authorization_denied_ttl,
        ),
        view=config.view or HealthView.empty(synced=lambda: False),
        default_image=config.default_image,
        watch_timeout=config.watch_timeout,
        bookmark_interval=config.bookmark_interval,
        budget=ByteBudget(review_budget(config.memory_limit_mib)),
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


def _cluster_lifecycle(config: AggregatedConfig) -> Callable[[web.Application], AsyncIterator[None]]:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        insights = app[INSIGHTS]
        try:
            client: KubeClient = await connect(
                config.kubeconfig, settings=ClientSettings(user_agent="foo-operator-insights")
            )
        except Exception as err:
            raise ClusterConfigError(f"cannot load the cluster configuration: {err}") from err
        informers: list[Informer] = []
        try:
            if config.requestheader is None:
                source = RequestHeaderSource(client, insights.authenticator, config.requestheader_ca_file)
                informers.append(source.informer)
            if config.authorizer is None:
                insights.authorizer = CachingAuthorizer(
                    sar_authorizer(client),
                    allowed_ttl=config.authorization_allowed_ttl,
                    denied_ttl=config.authorization_denied_ttl,
                )
            if config.view is None:
                by_kind = health_informers(client, config.namespace)
                insights.view = health_view(
                    by_kind, history=config.history, history_window=config.history_window, budget=insights.budget
                )
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
