"""What the aggregated API reads from the cluster: the front-proxy trust, RBAC answers, and the caches.

* ConfigMap kube-system/extension-apiserver-authentication, watched: each change updates the
  authenticator and rewrites the requestheader CA file the TLS layer asks client certificates
  against (the listener reloads it like its own certificate).
* SubjectAccessReviews for authorization.
* Informers on Foos (v1), Deployments, Pods labelled `controller` and Events about Foos, feeding
  the FooHealth view: each caches a bounded projection of what FooHealth reads (Foos and
  Deployments as ``fooapi.projections`` keeps them, Pods and Events below), at most
  EVENTS_PER_FOO Events per Foo.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apimachinery.objects import Object, mapping
from apimachinery.projection import MAX_MESSAGE, MAX_NAME, MAX_REASON, MAX_TOKEN, integers, pick
from certs.files import write_atomic
from fooapi import KIND
from fooapi.names import FOOS
from fooapi.projections import conditions, project_deployment, project_foo
from fooapi.views import POD_LABEL
from kube.client import CONFIG_MAPS, DEPLOYMENTS, EVENTS, PODS, SUBJECT_ACCESS_REVIEWS, KubeClient
from kube.informer import Informer, compact
from serving.budget import ByteBudget

from .authn import CONFIG_MAP_NAME, CONFIG_MAP_NAMESPACE, Authenticator, RequestHeaderConfig, UserInfo
from .authz import Authorizer, Decision, RequestInfo, decision_of, subject_access_review
from .view import BY_FOO, INDEXERS, HealthView

log = logging.getLogger(__name__)


def sar_authorizer(client: KubeClient, timeout: float = 10.0) -> Authorizer:
    """Ask the cluster with a SubjectAccessReview (needs RBAC: system:auth-delegator)."""

    async def authorize(user: UserInfo, info: RequestInfo) -> Decision:
        answer = await client.request(
            "POST", SUBJECT_ACCESS_REVIEWS.path(), body=subject_access_review(user, info), timeout=timeout
        )
        return decision_of(answer)

    return authorize


@dataclass
class RequestHeaderSource:
    """Keeps the authenticator (and the CA file) in step with extension-apiserver-authentication."""

    client: KubeClient
    authenticator: Authenticator
    ca_file: Path | None = None
    informer: Informer = field(init=False)

    def __post_init__(self) -> None:
        self.informer = Informer(
            self.client, CONFIG_MAPS, namespace=CONFIG_MAP_NAMESPACE, field_selector=f"metadata.name={CONFIG_MAP_NAME}"
        )
        self.informer.add_handler(self._changed, lambda old, new: self._changed(new), self._removed)

    def _changed(self, config_map: dict[str, Any]) -> None:
        try:
            config = RequestHeaderConfig.from_config_map_data(config_map.get("data") or {})
            if config is not None:
                config.authorities  # noqa: B018 (a property that parses) parse now: a bad bundle must not replace a good one
        except ValueError as err:
            log.error("ignoring %s/%s: %s", CONFIG_MAP_NAMESPACE, CONFIG_MAP_NAME, err)
            return
        if config is None:
            log.warning(
                "%s/%s has no requestheader-client-ca-file: the apiserver runs without front-proxy "
                "flags, so no request can be authenticated",
                CONFIG_MAP_NAMESPACE,
                CONFIG_MAP_NAME,
            )
        if self.authenticator.update(config):
            log.info(
                "requestheader configuration loaded",
                extra={"allowed_names": list(config.allowed_names) if config else None},
            )
            if config is not None and self.ca_file is not None:
                self.ca_file.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(self.ca_file, config.client_ca_pem)

    def _removed(self, config_map: dict[str, Any]) -> None:
        log.warning(
            "%s/%s was deleted: keeping the last requestheader configuration", CONFIG_MAP_NAMESPACE, CONFIG_MAP_NAME
        )


# What FooHealth reads of Pods and Events, each field bounded (apimachinery.projection): a Pod a
# tenant labelled `controller` or an Event about a Foo costs a constant, whatever it holds.
POD_IDENTITY = {"name": MAX_NAME, "namespace": MAX_NAME, "resourceVersion": MAX_TOKEN}
EVENT_IDENTITY = {**POD_IDENTITY, "creationTimestamp": MAX_TOKEN}
# Container statuses kept per Pod: the first ones, as the kubelet lists them, each waiting
# message (shown as a FooHealth's last error) cut shorter than an Event's.
MAX_CONTAINERS = 8
WAITING = {"reason": MAX_REASON, "message": MAX_MESSAGE // 4}
INVOLVED = {"apiVersion": MAX_NAME, "kind": MAX_NAME, "name": MAX_NAME, "namespace": MAX_NAME, "uid": MAX_TOKEN}
EVENT_FIELDS = {
    "type": MAX_TOKEN,
    "reason": MAX_REASON,
    "message": MAX_MESSAGE,
    "lastTimestamp": MAX_TOKEN,
    "firstTimestamp": MAX_TOKEN,
    "eventTime": MAX_TOKEN,
}
# Events kept per Foo: the newest (FooHealth reads the last sync and the newest Warning after it).
EVENTS_PER_FOO = 8


def cached_foo(foo: Object) -> Object:
    """A Foo as FooHealth reads it, with up to MAX_LABELS of its labels for label selectors."""
    projected: Object = compact(project_foo(foo, labels=True))
    return projected


def cached_deployment(deployment: Object) -> Object:
    projected: Object = compact(project_deployment(deployment))
    return projected


def cached_pod(pod: Object) -> Object:
    """What FooHealth reads of a Pod: the Foo it belongs to (its `controller` label), its phase, its
    Ready condition and its first containers' restarts and waiting reasons."""
    meta = mapping(pod.get("metadata"))
    status = mapping(pod.get("status"))
    listed = status.get("containerStatuses")
    containers = [
        {
            **pick(container, {"name": MAX_NAME}),
            **integers(container, ("restartCount",)),
            "state": {"waiting": pick(mapping(mapping(container).get("state")).get("waiting"), WAITING)},
        }
        for container in (listed if isinstance(listed, list) else ())[:MAX_CONTAINERS]
    ]
    projected: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**pick(meta, POD_IDENTITY), "labels": pick(meta.get("labels"), {POD_LABEL: MAX_NAME})},
        "status": {
            **pick(status, {"phase": MAX_TOKEN}),
            "conditions": conditions(status, ("Ready",), {"type": MAX_TOKEN, "status": MAX_TOKEN}),
            "containerStatuses": containers,
        },
    }
    kept: Object = compact(projected)
    return kept


def cached_event(event: Object) -> Object:
    """What FooHealth reads of an Event: what it is about, when, its type, reason and message."""
    projected: Object = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": pick(event.get("metadata"), EVENT_IDENTITY),
        "involvedObject": pick(event.get("involvedObject"), INVOLVED),
        **pick(event, EVENT_FIELDS),
    }
    series = pick(event.get("series"), {"lastObservedTime": MAX_TOKEN, "count": MAX_TOKEN})
    if series:
        projected["series"] = series
    kept: Object = compact(projected)
    return kept


def health_informers(client: KubeClient) -> dict[str, Informer]:
    return {
        "foos": Informer(client, FOOS, indexers=INDEXERS["foos"], transform=cached_foo),
        "deployments": Informer(client, DEPLOYMENTS, indexers=INDEXERS["deployments"], transform=cached_deployment),
        # Only Pods of Foo Deployments carry the label; everything else stays out of memory.
        "pods": Informer(client, PODS, label_selector=POD_LABEL, indexers=INDEXERS["pods"], transform=cached_pod),
        # Only Events about Foos (kube-apiserver selects core/v1 Events by involvedObject.kind).
        "events": Informer(
            client,
            EVENTS,
            field_selector=f"involvedObject.kind={KIND}",
            indexers=INDEXERS["events"],
            capacities={BY_FOO: EVENTS_PER_FOO},
            transform=cached_event,
        ),
    }


def health_view(
    informers: dict[str, Informer],
    *,
    history: int = 1024,
    history_window: float = 300.0,
    budget: ByteBudget | None = None,
) -> HealthView:
    view = HealthView(
        *(informers[k].store for k in ("foos", "deployments", "pods", "events")),
        history=history,
        history_window=history_window,
        budget=budget,
        synced=lambda: all(i.has_synced for i in informers.values()),
    )
    for kind, informer in informers.items():
        informer.add_handler(*view.handlers(kind))
    return view


async def start_all(informers: list[Informer], wait: float) -> None:
    """Start the informers and wait (bounded) for their first lists; a slow one only logs."""
    for informer in informers:
        informer.start()  # idempotent
    results = await asyncio.gather(*(i.wait_for_sync(wait) for i in informers))
    for informer, synced in zip(informers, results, strict=True):
        if not synced:
            log.warning("informer %s has not synced after %.0fs; still trying", informer.name, wait)
