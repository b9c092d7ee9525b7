"""Run the aggregated API over TLS (serving.lifecycle): its own process, its own listener."""

from __future__ import annotations

import asyncio

from aiohttp import web

from apimachinery.admission import REVIEW_BODY_LIMIT
from kube.metrics import REGISTRY
from serving.appserving import AppListener, serving_app
from serving.lifecycle import ServingOptions, serve_until_stopped, serving_metrics, stop_on_signals
from serving.readiness import CERTIFICATE_LOADED, Readiness
from serving.tls import refused_reloads

from . import setup_aggregated_api
from .config import AggregatedConfig


def build_app(config: AggregatedConfig, readiness: Readiness | None = None) -> web.Application:
    # FooReviews are the only bodies this server reads.
    app = serving_app(readiness or Readiness(serving=True), client_max_size=REVIEW_BODY_LIMIT)
    setup_aggregated_api(app, config)
    return app


async def serve(options: ServingOptions, config: AggregatedConfig, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then drain and return.

    The listener asks every client for a certificate signed by the front-proxy CA (written to
    ``config.requestheader_ca_file`` from kube-system/extension-apiserver-authentication).
    """
    # A pair that does not load is said now, naming its file, not after the cluster answered (the
    # startup below waits up to its sync timeout for an apiserver that may not answer). Checked,
    # not loaded into the watcher: it must first load once the listener wrote the client CA file.
    options.check_pair()
    watcher = options.certificate(client_ca_file=config.requestheader_ca_file, on_refused=refused_reloads(REGISTRY))
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    app = build_app(config, Readiness(checks={CERTIFICATE_LOADED: lambda: watcher.loaded}))
    # The toolkit's registry: the informers' watch restarts and the event counters land there.
    metrics = await serving_metrics(options, REGISTRY, kubeconfig=config.kubeconfig, name="insights")
    await serve_until_stopped(AppListener(app), options, watcher, stop, name="insights", metrics=metrics)
