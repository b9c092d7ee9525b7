"""The aggregated API insights.samplecontroller.k8s.io/v1alpha1 (FooReview, FooHealth), a server of its own.

It runs in its own process and Deployment (`python -m insights`, `foo-operator-insights`), so
nothing an API caller does — a slow watch, a huge list, a hostile selector — can delay an
admission or conversion answer of the webhook service.

``setup_aggregated_api(app, AggregatedConfig(...))`` adds the routes (`/apis`, `/apis/...`,
`/openapi/...`) and a lifecycle that connects to the cluster at startup (front-proxy trust,
SubjectAccessReviews, informers) and lets go at shutdown. Anything given in the config
(``requestheader``, ``authorizer``, ``view``) is used as is instead of being fetched.
"""

from __future__ import annotations

from aiohttp import web

from .config import AggregatedConfig

__all__ = ["AggregatedConfig", "setup_aggregated_api"]


def setup_aggregated_api(app: web.Application, config: AggregatedConfig) -> None:
    """Serve insights.samplecontroller.k8s.io from ``app`` (call before the app starts)."""
    from .wiring import setup

    setup(app, config)
