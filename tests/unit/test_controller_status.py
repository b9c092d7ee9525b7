"""controller.status: what a Foo's status should say, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from attacks.objects import deployment, foo_v1
from controller.status import Problem, desired_status, merge_conditions, status_changed

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:05:00Z"


def counted_foo(replicas: int = 3, generation: int = 2, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return foo_v1("f", deployment="web", replicas=replicas, uid="u", generation=generation, status=status)


def rollout(
    replicas: int = 3, ready: int = 3, available: int = 3, progressing: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The Deployment web of ``counted_foo`` at one moment of its rollout."""
    status: dict[str, Any] = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": available}
    if progressing is not None:
        status["conditions"] = [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "ok"},
            {"type": "Progressing", "status": progressing[0], "reason": progressing[1], "message": "rs progress"},
        ]
    return deployment("web", replicas=replicas, status=status)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


@pytest.mark.parametrize(
    ("the_foo", "the_deployment", "counts", "expected"),
    [
        (
            counted_foo(3),
            rollout(3, 3, 3, ("True", "NewReplicaSetAvailable")),
            (3, 3, 3),
            {"Ready": ("True", "ReplicasAvailable"), "Progressing": ("True", "NewReplicaSetAvailable")},
        ),
        (
            counted_foo(3),
            rollout(3, 1, 1, ("True", "ReplicaSetUpdated")),
            (3, 1, 1),
            {"Ready": ("False", "ReplicasUnavailable"), "Progressing": ("True", "ReplicaSetUpdated")},
        ),
        (  # scaled down: more available than desired is still ready
            counted_foo(1),
            rollout(3, 3, 3, ("True", "NewReplicaSetAvailable")),
            (3, 3, 3),
            {"Ready": ("True", "ReplicasAvailable"), "Progressing": ("True", "NewReplicaSetAvailable")},
        ),
        (  # just created: the Deployment controller has not reported anything yet
            counted_foo(2),
            {"metadata": {"name": "web"}, "spec": {"replicas": 2}},
            (0, 0, 0),
            {"Ready": ("False", "ReplicasUnavailable"), "Progressing": ("Unknown", "DeploymentPending")},
        ),
        (
            counted_foo(2),
            rollout(2, 0, 0, ("False", "ProgressDeadlineExceeded")),
            (2, 0, 0),
            {"Ready": ("False", "ReplicasUnavailable"), "Progressing": ("False", "ProgressDeadlineExceeded")},
        ),
    ],
    ids=["rolled-out", "rolling", "scaled-down", "just-created", "stuck"],
)
def test_status_reports_the_deployments_counts_and_ready_is_available_at_least_desired(
    the_foo: dict[str, Any], the_deployment: dict[str, Any], counts: tuple[int, int, int], expected: dict[str, Any]
) -> None:
    status = desired_status(the_foo, the_deployment, now=T0)
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == counts
    assert status["observedGeneration"] == 2
    assert conditions(status) == expected
    assert all(c["observedGeneration"] == 2 and c["lastTransitionTime"] == T0 for c in status["conditions"])


def test_ready_message_says_how_many_replicas_are_available() -> None:
    status = desired_status(counted_foo(3), rollout(3, 2, 2), now=T0)
    assert status["conditions"][0]["message"] == "2/3 replicas available"


def test_a_foreign_deployment_shows_as_err_resource_exists_with_zero_counts() -> None:
    problem = Problem("ErrResourceExists", 'Resource "web" already exists and is not managed by Foo')
    status = desired_status(counted_foo(), None, now=T0, problem=problem)
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (0, 0, 0)
    assert conditions(status) == {
        "Ready": ("False", "ErrResourceExists"),
        "Progressing": ("False", "ErrResourceExists"),
    }
    assert status["conditions"][0]["message"] == 'Resource "web" already exists and is not managed by Foo'


def test_recomputing_an_unchanged_world_changes_nothing() -> None:
    first = desired_status(counted_foo(), rollout(progressing=("True", "NewReplicaSetAvailable")), now=T0)
    again = desired_status(counted_foo(status=first), rollout(progressing=("True", "NewReplicaSetAvailable")), now=T1)
    assert again == first
    assert not status_changed(counted_foo(status=first), again)


def test_last_transition_time_moves_only_when_a_conditions_status_changes() -> None:
    rolling = desired_status(counted_foo(), rollout(3, 1, 1, ("True", "ReplicaSetUpdated")), now=T0)
    done = desired_status(counted_foo(status=rolling), rollout(3, 3, 3, ("True", "NewReplicaSetAvailable")), now=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in done["conditions"]}
    assert times == {"Ready": T1, "Progressing": T0}  # Progressing stayed True (only its reason moved)


@pytest.mark.parametrize(
    ("change", "changed"),
    [
        ({}, False),
        ({"observedGeneration": 1}, True),
        ({"availableReplicas": 2}, True),
        ({"conditions": []}, True),
        ({"someoneElses": "field"}, False),  # not ours to compare
    ],
    ids=["same", "generation", "counts", "conditions", "foreign-field"],
)
def test_status_changed_compares_only_the_fields_the_controller_owns(change: dict[str, Any], changed: bool) -> None:
    wanted = desired_status(counted_foo(), rollout(), now=T0)
    current = {**wanted, **change}
    assert status_changed(counted_foo(status=current), wanted) is changed


def test_a_foo_without_status_needs_one() -> None:
    assert status_changed(counted_foo(), desired_status(counted_foo(), rollout(), now=T0))


def test_merge_conditions_fills_a_missing_transition_time() -> None:
    current = [{"type": "Ready", "status": "True", "reason": "x", "message": ""}]
    wanted = [{"type": "Ready", "status": "True", "reason": "x", "message": ""}]
    assert merge_conditions(current, wanted, T1)[0]["lastTransitionTime"] == T1
