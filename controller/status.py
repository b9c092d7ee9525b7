"""The status a Foo should show, computed from the Foo and its Deployment. Pure.

Conditions follow metav1.Condition rules (apimachinery's ``meta.SetStatusCondition``):
``lastTransitionTime`` moves only when a condition's status changes, so recomputing an
unchanged world yields an identical status and the controller writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apimachinery.objects import Object
from apimachinery.projection import MAX_MESSAGE, MAX_REASON
from fooapi.views import DeploymentView, FooView

READY = "Ready"
PROGRESSING = "Progressing"
STATUS_FIELDS = ("observedGeneration", "replicas", "readyReplicas", "availableReplicas", "conditions")


@dataclass(frozen=True)
class Problem:
    """Why the Foo cannot have its Deployment (e.g. ErrResourceExists), shown in its conditions."""

    reason: str
    message: str


def _condition(type_: str, status: str, reason: str, message: str, generation: int | None) -> Object:
    # Cut as the caches cut them (fooapi.projections), so the status read back equals the one written.
    condition: Object = {
        "type": type_,
        "status": status,
        "reason": reason[:MAX_REASON],
        "message": message[:MAX_MESSAGE],
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def merge_conditions(current: list[Object] | None, wanted: list[Object], now: str) -> list[Object]:
    """``wanted`` with lastTransitionTime kept from ``current`` where the status did not change."""
    before = {c.get("type"): c for c in current or () if isinstance(c, dict)}
    out = []
    for condition in wanted:
        old = before.get(condition["type"])
        moved = old is None or old.get("status") != condition["status"] or not old.get("lastTransitionTime")
        out.append({**condition, "lastTransitionTime": now if moved else old["lastTransitionTime"]})  # type: ignore[index]
    return out


def progressing_condition(deployment: Mapping[str, Any], generation: int | None) -> Object:
    """The Deployment's own Progressing condition, carried over (Unknown until it reports one)."""
    condition = DeploymentView(deployment).condition(PROGRESSING)
    if condition is not None:
        return _condition(
            PROGRESSING,
            str(condition.get("status") or "Unknown"),
            str(condition.get("reason") or "Unknown"),
            str(condition.get("message") or ""),
            generation,
        )
    return _condition(
        PROGRESSING, "Unknown", "DeploymentPending", "The Deployment has not reported progress yet", generation
    )


def desired_status(
    foo: Mapping[str, Any],
    deployment: Mapping[str, Any] | None,
    *,
    now: str,
    problem: Problem | None = None,
) -> Object:
    """The Foo's status: replica counts from its Deployment, Ready = available >= desired.

    With a ``problem`` (no Deployment of ours to report on) counts are zero and both
    conditions are False for the problem's reason.
    """
    view = FooView(foo)
    generation = view.generation
    current = view.status
    if problem is not None or deployment is None:
        problem = problem or Problem("DeploymentMissing", "The Deployment does not exist yet")
        conditions = [
            _condition(READY, "False", problem.reason, problem.message, generation),
            _condition(PROGRESSING, "False", problem.reason, problem.message, generation),
        ]
        counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
    else:
        observed = DeploymentView(deployment)
        counts = {
            "replicas": observed.status_replicas,
            "readyReplicas": observed.ready_replicas,
            "availableReplicas": observed.available_replicas,
        }
        desired = view.replicas
        available = counts["availableReplicas"]
        message = f"{available}/{desired} replicas available"
        ready = (
            _condition(READY, "True", "ReplicasAvailable", message, generation)
            if available >= desired
            else _condition(READY, "False", "ReplicasUnavailable", message, generation)
        )
        conditions = [ready, progressing_condition(deployment, generation)]
    status: Object = {
        "observedGeneration": generation,
        **counts,
        "conditions": merge_conditions(current.get("conditions"), conditions, now),
    }
    if generation is None:
        del status["observedGeneration"]
    return status


def status_changed(foo: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Would writing ``status`` change the Foo? (Only the fields the controller owns count.)"""
    current = FooView(foo).status
    return any(current.get(field) != status.get(field) for field in STATUS_FIELDS if field in status)
