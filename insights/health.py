"""FooHealth: what an on-call person wants to know about one Foo, computed from plain objects.

Pure: given a v1 Foo, its Deployment (or None), the Pods labelled ``controller=<foo>`` and the
Events about the Foo, ``foo_health`` returns the FooHealth object. Times stay timestamps here;
ages are rendered when a table is printed, so an object only changes when the cluster does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from apimachinery.objects import Object, ObjectView, integer
from fooapi.views import DeploymentView, FooView

from .resources import FOO_HEALTHS, GROUP, GROUP_VERSION

Health = Literal["Healthy", "Progressing", "Degraded", "Unavailable", "Unknown"]
Rollout = Literal["Complete", "Progressing", "Stalled", "Pending", "Missing", "NotOwned"]

# On a FooHealth whose Foo has more labels than the cache keeps: how many were not kept.
LABELS_NOT_KEPT = f"{GROUP}/labels-not-kept"

# The Deployment condition reason `kubectl rollout status` treats as a failed rollout.
PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
# Ready=False reasons of the controller that mean "still rolling out": the rollout state says
# that already; a stuck rollout shows up as Stalled.
_PROGRESS_REASONS = {"ReplicasUnavailable"}
# Container waiting reasons that mean "this will not fix itself soon".
_BAD_WAITING = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


def _dict(value: Any) -> Object:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def event_time(event: Object) -> str:
    """When an Event last happened, whichever of its time fields the writer filled (RFC 3339)."""
    series = _dict(event.get("series"))
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        _dict(event.get("metadata")).get("creationTimestamp"),
    ):
        if isinstance(value, str) and value:
            return value
    return ""


def _condition(conditions: Any, type_: str) -> Object | None:
    for condition in _list(conditions):
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


@dataclass(frozen=True)
class _Rollout:
    state: Rollout
    message: str


def rollout(foo: Object, deployment: Object | None, deployment_name: str) -> _Rollout:
    """The Deployment's rollout as `kubectl rollout status` judges it, plus the Foo-level cases."""
    if deployment is None:
        if "observedGeneration" not in _dict(foo.get("status")):
            return _Rollout("Pending", f'waiting for the controller to create Deployment "{deployment_name}"')
        return _Rollout("Missing", f'Deployment "{deployment_name}" does not exist')
    view = DeploymentView(deployment)
    if not view.controlled_by(FooView(foo)):
        return _Rollout("NotOwned", f'Resource "{deployment_name}" already exists and is not managed by Foo')
    if (view.generation or 0) > view.observed_generation:
        return _Rollout("Pending", "waiting for the Deployment spec update to be observed")
    progressing = view.condition("Progressing")
    if progressing is not None and progressing.get("reason") == PROGRESS_DEADLINE_EXCEEDED:
        return _Rollout("Stalled", f'Deployment "{deployment_name}" exceeded its progress deadline')
    wanted = view.replicas
    replicas, updated, available = view.status_replicas, view.updated_replicas, view.available_replicas
    if updated < wanted:
        return _Rollout("Progressing", f"{updated} out of {wanted} new replicas have been updated")
    if replicas > updated:
        return _Rollout("Progressing", f"{replicas - updated} old replicas are pending termination")
    if available < updated:
        return _Rollout("Progressing", f"{available} of {updated} updated replicas are available")
    return _Rollout("Complete", f'Deployment "{deployment_name}" successfully rolled out')


def _pod_summary(pods: list[Object]) -> tuple[Object, Object | None]:
    """Counts over the Pods, and the first container stuck for a reason that needs a human."""
    ready = pending = failed = restarts = 0
    stuck: Object | None = None
    for pod in sorted(pods, key=lambda p: ObjectView(p).name):
        status = _dict(pod.get("status"))
        phase = status.get("phase")
        pending += phase == "Pending"
        failed += phase == "Failed"
        condition = _condition(status.get("conditions"), "Ready")
        ready += condition is not None and condition.get("status") == "True"
        for container in _list(status.get("containerStatuses")):
            container = _dict(container)
            restarts += integer(container.get("restartCount"))
            waiting = _dict(_dict(container.get("state")).get("waiting"))
            if stuck is None and waiting.get("reason") in _BAD_WAITING:
                name = ObjectView(pod).name
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                stuck = {
                    "reason": waiting["reason"],
                    "source": "Pod",
                    "message": f"pod {name}: container {container.get('name', '')}: {waiting['reason']}{detail}",
                }
    summary = {"total": len(pods), "ready": ready, "pending": pending, "failed": failed, "restarts": restarts}
    return summary, stuck


def _last_sync(foo: Object, events: list[Object]) -> str:
    """The newest sign of a successful sync: a Synced event, or the time Ready turned True."""
    times = [event_time(e) for e in events if e.get("type") != "Warning" and e.get("reason") == "Synced"]
    ready = _condition(_dict(foo.get("status")).get("conditions"), "Ready")
    if ready is not None and ready.get("status") == "True" and isinstance(ready.get("lastTransitionTime"), str):
        times.append(ready["lastTransitionTime"])
    # RFC 3339 UTC timestamps of the same shape sort as strings.
    return max((t for t in times if t), default="")


def _last_error(
    foo: Object,
    deployment: Object | None,
    rollout_: _Rollout,
    stuck: Object | None,
    events: list[Object],
    last_sync: str,
) -> Object | None:
    """The most pressing current error, or the newest Warning event not followed by a good sync."""
    if rollout_.state == "NotOwned":
        return {"reason": "ErrResourceExists", "message": rollout_.message, "source": "Deployment"}
    ready = _condition(_dict(foo.get("status")).get("conditions"), "Ready")
    if ready is not None and ready.get("status") == "False" and ready.get("reason") not in _PROGRESS_REASONS:
        return {
            "reason": str(ready.get("reason", "")),
            "message": str(ready.get("message", "")),
            "source": "Foo",
            "time": str(ready.get("lastTransitionTime", "")),
        }
    if deployment is not None:
        failure = DeploymentView(deployment).condition("ReplicaFailure")
        if failure is not None and failure.get("status") == "True":
            return {
                "reason": str(failure.get("reason", "ReplicaFailure")),
                "message": str(failure.get("message", "")),
                "source": "Deployment",
                "time": str(failure.get("lastTransitionTime", "")),
            }
        if rollout_.state == "Stalled":
            progressing = DeploymentView(deployment).condition("Progressing") or {}
            return {
                "reason": PROGRESS_DEADLINE_EXCEEDED,
                "message": str(progressing.get("message", rollout_.message)),
                "source": "Deployment",
                "time": str(progressing.get("lastUpdateTime", "")),
            }
    if stuck is not None:
        return stuck
    warnings = [e for e in events if e.get("type") == "Warning" and event_time(e) > last_sync]
    if warnings:
        newest = max(warnings, key=event_time)
        return {
            "reason": str(newest.get("reason", "")),
            "message": str(newest.get("message", "")),
            "source": "Event",
            "time": event_time(newest),
        }
    return None


def _health(desired: int, available: int, synced: bool, rollout_: _Rollout, error: Object | None) -> Health:
    if rollout_.state in ("Missing", "NotOwned") or (desired > 0 and available == 0 and rollout_.state != "Pending"):
        return "Unavailable"
    if rollout_.state == "Pending":
        return "Unknown" if error is None else "Degraded"
    if error is not None or rollout_.state == "Stalled":
        return "Degraded"
    if rollout_.state == "Progressing" or not synced or available < desired:
        return "Progressing"
    return "Healthy"


def _matching_events(foo: Object, events: Iterable[Object]) -> list[Object]:
    """Events about this Foo; an event about an older Foo of the same name is not this one's."""
    uid = FooView(foo).uid
    out = []
    for event in events:
        involved = _dict(event.get("involvedObject") or event.get("regarding"))
        if uid and involved.get("uid") and involved.get("uid") != uid:
            continue
        out.append(event)
    return out


def foo_health(
    foo: Object,
    deployment: Object | None,
    pods: Iterable[Object],
    events: Iterable[Object],
    *,
    resource_version: str = "",
) -> Object:
    """The FooHealth of a v1 Foo."""
    view = FooView(foo)
    metadata, status = view.metadata, view.status
    deployment_name = view.deployment_name or ""
    desired = view.replicas
    foo_events = _matching_events(foo, events)
    owned = deployment is not None and DeploymentView(deployment).controlled_by(view)
    counts = DeploymentView(deployment if owned and deployment is not None else {})
    pod_list = list(pods) if owned else []
    pod_summary, stuck = _pod_summary(pod_list)
    rollout_ = rollout(foo, deployment, deployment_name)
    generation = view.generation or 0
    observed = integer(status.get("observedGeneration"), 0)
    synced = "observedGeneration" in status and observed >= generation
    last_sync = _last_sync(foo, foo_events)
    error = _last_error(foo, deployment, rollout_, stuck, foo_events, last_sync)
    available = counts.available_replicas
    health_status: Object = {
        "health": _health(desired, available, synced, rollout_, error),
        "deploymentName": deployment_name,
        "image": view.image or "",
        "desiredReplicas": desired,
        "replicas": counts.status_replicas,
        "updatedReplicas": counts.updated_replicas,
        "readyReplicas": counts.ready_replicas,
        "availableReplicas": available,
        "rollout": rollout_.state,
        "rolloutMessage": rollout_.message,
        "synced": synced,
        "generation": generation,
        "observedGeneration": observed,
        "pods": pod_summary,
    }
    if last_sync:
        health_status["lastSyncTime"] = last_sync
    if error is not None:
        health_status["lastError"] = {k: v for k, v in error.items() if v != ""}
    out_meta: Object = {"name": view.name, "namespace": view.namespace}
    for key in ("creationTimestamp", "labels"):
        if metadata.get(key):
            out_meta[key] = metadata[key]
    if view.labels_dropped:
        # The cache keeps a Foo's first labels only (fooapi.projections): say that label
        # selectors on this FooHealth see those, not the rest.
        out_meta["annotations"] = {LABELS_NOT_KEPT: str(view.labels_dropped)}
    if resource_version:
        out_meta["resourceVersion"] = resource_version
    return {"apiVersion": GROUP_VERSION, "kind": FOO_HEALTHS.kind, "metadata": out_meta, "status": health_status}
