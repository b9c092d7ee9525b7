"""`kubectl get foohealths`: the meta.k8s.io/v1 Table of FooHealths, with ages as kubectl shows them."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, Literal

from apimachinery.objects import Object

IncludeObject = Literal["None", "Metadata", "Object"]

TABLE_API_VERSION = "meta.k8s.io/v1"
NONE = "<none>"


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: 45s, 5m30s, 3h, 2d4h, 1y10d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def age(value: Any, now: datetime.datetime, missing: str = "<unknown>") -> str:
    """A timestamp as the age kubectl prints (Kubernetes' translateTimestampSince)."""
    then = parse_time(value)
    if then is None:
        return missing
    return human_duration((now - then).total_seconds())


def _column(name: str, type_: str, description: str, priority: int = 0, format_: str = "") -> Object:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


COLUMNS: list[Object] = [
    _column("Name", "string", "Name of the Foo this health is about.", format_="name"),
    _column("Health", "string", "Healthy, Progressing, Degraded, Unavailable or Unknown."),
    _column("Ready", "string", "Ready replicas of the Deployment / replicas the Foo asks for."),
    _column("Up-to-date", "integer", "Replicas updated to the newest Deployment template."),
    _column("Available", "integer", "Available replicas of the Deployment."),
    _column(
        "Rollout", "string", "Rollout of the Deployment: Complete, Progressing, Stalled, Pending, Missing or NotOwned."
    ),
    _column("Last Sync", "string", "Time since the controller last synced the Foo successfully."),
    _column("Last Error", "string", "Reason of the most pressing current error, if any."),
    _column("Age", "date", "Time since the Foo was created."),
    _column("Deployment", "string", "Name of the Deployment the Foo owns.", priority=1),
    _column("Image", "string", "Container image the Foo asks for.", priority=1),
    _column("Restarts", "integer", "Container restarts summed over the Foo's Pods.", priority=1),
    _column("Synced", "string", "Whether the controller has acted on the Foo's latest generation.", priority=1),
    _column("Message", "string", "The most pressing current error, or the rollout state, in words.", priority=1),
]


def cells(health: Object, now: datetime.datetime) -> list[Any]:
    metadata, status = health.get("metadata", {}), health.get("status", {})
    error = status.get("lastError") or {}
    return [
        metadata.get("name", ""),
        status.get("health", "Unknown"),
        f"{status.get('readyReplicas', 0)}/{status.get('desiredReplicas', 0)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        status.get("rollout", ""),
        age(status.get("lastSyncTime"), now, missing=NONE),
        error.get("reason") or NONE,
        age(metadata.get("creationTimestamp"), now),
        status.get("deploymentName") or NONE,
        status.get("image") or NONE,
        status.get("pods", {}).get("restarts", 0),
        "True" if status.get("synced") else "False",
        error.get("message") or status.get("rolloutMessage", ""),
    ]


def _row_object(obj: Object, include: IncludeObject) -> Object | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": TABLE_API_VERSION, "metadata": obj.get("metadata", {})}


def row(obj: Object, now: datetime.datetime, include_object: IncludeObject = "Metadata") -> Object:
    """One TableRow: the cells, and the object as ``includeObject`` asks."""
    out: Object = {"cells": cells(obj, now)}
    embedded = _row_object(obj, include_object)
    if embedded is not None:
        out["object"] = embedded
    return out


def table_head(metadata: Object, *, headers: bool = True) -> Object:
    """A Table without its rows (a streamed list writes them after it)."""
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": metadata,
        "columnDefinitions": COLUMNS if headers else [],
    }


def table(
    objects: Iterable[Object],
    *,
    resource_version: str = "",
    include_object: IncludeObject = "Metadata",
    headers: bool = True,
    now: datetime.datetime | None = None,
) -> Object:
    """A Table of FooHealths; ``headers=False`` for every watch event after the first (as Kubernetes)."""
    now = now or datetime.datetime.now(datetime.UTC)
    metadata = {"resourceVersion": resource_version} if resource_version else {}
    out = table_head(metadata, headers=headers)
    out["rows"] = [row(obj, now, include_object) for obj in objects]
    return out
