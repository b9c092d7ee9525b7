"""What the aggregated API reads from the cluster: the front-proxy trust, RBAC answers, and the caches.

* ConfigMap kube-system/extension-apiserver-authentication, watched: each change updates the
  authenticator and rewrites the requestheader CA file the TLS layer asks client certificates
  against (the listener reloads it like its own certificate).
* SubjectAccessReviews for authorization.
* Informers on Foos (v1), Deployments, Pods labelled `controller` and Events about Foos, feeding
  the FooHealth view: in every namespace, or in the one the controller watches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apimachinery.objects import Object
from certs.files import write_atomic
from fooapi import KIND
from fooapi.names import FOOS
from fooapi.views import POD_LABEL, DeploymentView
from kube.client import CONFIG_MAPS, DEPLOYMENTS, EVENTS, PODS, SUBJECT_ACCESS_REVIEWS, KubeClient
from kube.informer import Informer
from serving.budget import ByteBudget

from .authn import CONFIG_MAP_NAME, CONFIG_MAP_NAMESPACE, Authenticator, RequestHeaderConfig, UserInfo
from .authz import Authorizer, Decision, RequestInfo, decision_of, subject_access_review
from .view import INDEXERS, HealthView

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


_META = ("name", "namespace", "uid", "resourceVersion", "generation", "labels", "ownerReferences", "creationTimestamp")


def _keep(obj: Mapping[str, Any], fields: tuple[str, ...]) -> Object:
    return {k: obj[k] for k in fields if k in obj}


def _typed(obj: Object) -> Object:
    return _keep(obj, ("apiVersion", "kind"))


def slim_deployment(deployment: Object) -> Object:
    """What FooHealth reads of a Deployment; the Pod template and the rest stay out of memory."""
    view = DeploymentView(deployment)
    return {
        **_typed(deployment),
        "metadata": _keep(view.metadata, _META),
        "spec": _keep(view.spec, ("replicas",)),
        "status": dict(view.status),
    }


def slim_pod(pod: Object) -> Object:
    status = pod.get("status") or {}
    containers = [
        {
            "name": c.get("name"),
            "restartCount": c.get("restartCount", 0),
            "state": _keep(c.get("state") or {}, ("waiting",)),
        }
        for c in status.get("containerStatuses") or ()
    ]
    return {
        **_typed(pod),
        "metadata": _keep(pod.get("metadata") or {}, _META),
        "status": {**_keep(status, ("phase", "conditions")), "containerStatuses": containers},
    }


def slim_event(event: Object) -> Object:
    return _keep(
        event,
        (
            "apiVersion",
            "kind",
            "involvedObject",
            "regarding",
            "type",
            "reason",
            "message",
            "lastTimestamp",
            "firstTimestamp",
            "eventTime",
            "series",
        ),
    ) | {"metadata": _keep(event.get("metadata") or {}, _META)}


def health_informers(client: KubeClient, namespace: str | None = None) -> dict[str, Informer]:
    """The view's four informers, over every namespace or over ``namespace`` alone."""
    return {
        "foos": Informer(client, FOOS, namespace=namespace, indexers=INDEXERS["foos"]),
        "deployments": Informer(
            client, DEPLOYMENTS, namespace=namespace, indexers=INDEXERS["deployments"], transform=slim_deployment
        ),
        # Only Pods of Foo Deployments carry the label; everything else stays out of memory.
        "pods": Informer(
            client, PODS, namespace=namespace, label_selector=POD_LABEL, indexers=INDEXERS["pods"], transform=slim_pod
        ),
        "events": Informer(
            client,
            EVENTS,
            namespace=namespace,
            field_selector=f"involvedObject.kind={KIND}",
            indexers=INDEXERS["events"],
            transform=slim_event,
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
