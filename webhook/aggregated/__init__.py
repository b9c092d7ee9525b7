"""The aggregated API insights.samplecontroller.k8s.io/v1alpha1 (FooReview, FooHealth) on the webhook app.

One call wires it: ``setup_aggregated_api(app, AggregatedConfig(...))`` adds the routes (`/apis`,
`/apis/...`, `/openapi/...`) and a lifecycle that connects to the cluster at startup (front-proxy
trust, SubjectAccessReviews, informers) and lets go at shutdown. Anything given in the config
(``requestheader``, ``authorizer``, ``view``) is used as is instead of being fetched.

Importing this package is cheap; the Kubernetes client is imported by ``setup_aggregated_api``.
"""

from __future__ import annotations

from aiohttp import web

from .config import AggregatedConfig

__all__ = ["AggregatedConfig", "setup_aggregated_api"]


def setup_aggregated_api(app: web.Application, config: AggregatedConfig) -> None:
    """Serve insights.samplecontroller.k8s.io from ``app`` (call before the app starts)."""
    from .wiring import setup

    setup(app, config)
