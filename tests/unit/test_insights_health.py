"""FooHealth computed from plain objects: given the Foo, its Deployment, Pods and Events, this is its health."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from apimachinery.projection import MAX_LABELS
from attacks.objects import deployment, fat_metadata, foo_v1
from insights.cluster import EVENTS_PER_FOO, cached_deployment, cached_event, cached_foo, cached_pod, health_informers
from insights.health import event_time, foo_health

UID = "uid-web"


def shop_foo(
    *,
    replicas: int = 3,
    generation: int = 2,
    observed: int | None = 2,
    ready: str | None = "True",
    ready_reason: str = "ReplicasAvailable",
    ready_message: str = "",
    ready_at: str = "2025-01-01T10:00:00Z",
    image: str = "nginx:1.27",
) -> dict[str, Any]:
    """The Foo shop/web with the status its controller last wrote."""
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if ready is not None:
        status["conditions"] = [
            {
                "type": "Ready",
                "status": ready,
                "reason": ready_reason,
                "message": ready_message,
                "lastTransitionTime": ready_at,
            }
        ]
    built = foo_v1(
        "web",
        namespace="shop",
        image=image,
        replicas=replicas,
        uid=UID,
        generation=generation,
        labels={"team": "a"},
        status=status,
    )
    built["metadata"]["creationTimestamp"] = "2025-01-01T09:00:00Z"
    return built


def web_deployment(
    *,
    replicas: int = 3,
    updated: int = 3,
    ready: int = 3,
    available: int = 3,
    total: int | None = None,
    generation: int = 5,
    observed: int = 5,
    owner_uid: str | None = UID,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """shop/web-nginx mid-rollout as the test says, controlled by the Foo with ``owner_uid`` (None: by nobody)."""
    owner = foo_v1("web", namespace="shop", uid=owner_uid) if owner_uid is not None else None
    return deployment(
        "web-nginx",
        namespace="shop",
        owner=owner,
        replicas=replicas,
        generation=generation,
        status={
            "observedGeneration": observed,
            "replicas": replicas if total is None else total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "conditions": conditions or [],
        },
    )


def pod(
    name: str, *, ready: bool = True, phase: str = "Running", restarts: int = 0, waiting: str | None = None
) -> dict[str, Any]:
    state = (
        {"waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}}
        if waiting
        else {"running": {}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"controller": "web"}},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "nginx", "restartCount": restarts, "state": state}],
        },
    }


def event(
    reason: str, *, type_: str = "Normal", at: str = "2025-01-01T10:05:00Z", message: str = "", uid: str = UID
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"web.{reason}", "namespace": "shop"},
        "involvedObject": {"kind": "Foo", "name": "web", "namespace": "shop", "uid": uid},
        "type": type_,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
    }


THREE_PODS = [pod("web-1"), pod("web-2"), pod("web-3")]


CASES = [
    (
        "rolled out and synced",
        (shop_foo(), web_deployment(), THREE_PODS, []),
        {"health": "Healthy", "rollout": "Complete", "readyReplicas": 3, "availableReplicas": 3, "synced": True},
    ),
    (
        "controller has not seen the Foo yet",
        (shop_foo(observed=None, ready=None), None, [], []),
        {"health": "Unknown", "rollout": "Pending", "synced": False, "availableReplicas": 0},
    ),
    (
        "Deployment deleted behind the controller's back",
        (shop_foo(), None, [], []),
        {"health": "Unavailable", "rollout": "Missing"},
    ),
    (
        "a Deployment of that name belongs to someone else",
        (shop_foo(), web_deployment(owner_uid=None), THREE_PODS, []),
        {
            "health": "Unavailable",
            "rollout": "NotOwned",
            "availableReplicas": 0,
            "lastError": {
                "reason": "ErrResourceExists",
                "source": "Deployment",
                "message": 'Resource "web-nginx" already exists and is not managed by Foo',
            },
        },
    ),
    (
        "new replicas still coming",
        (shop_foo(), web_deployment(updated=1, ready=2, available=2), THREE_PODS, []),
        {
            "health": "Progressing",
            "rollout": "Progressing",
            "rolloutMessage": "1 out of 3 new replicas have been updated",
        },
    ),
    (
        "old replicas pending termination",
        (shop_foo(), web_deployment(total=4), THREE_PODS, []),
        {"rollout": "Progressing", "rolloutMessage": "1 old replicas are pending termination"},
    ),
    (
        "updated but not yet available",
        (shop_foo(), web_deployment(available=2), THREE_PODS, []),
        {"rollout": "Progressing", "rolloutMessage": "2 of 3 updated replicas are available"},
    ),
    (
        "Deployment spec change not observed yet",
        (shop_foo(), web_deployment(generation=6, observed=5), THREE_PODS, []),
        {"rollout": "Pending", "rolloutMessage": "waiting for the Deployment spec update to be observed"},
    ),
    (
        "progress deadline exceeded",
        (
            shop_foo(),
            web_deployment(
                available=1,
                conditions=[
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": 'ReplicaSet "web-nginx-x" has timed out progressing.',
                        "lastUpdateTime": "2025-01-01T10:10:00Z",
                    }
                ],
            ),
            THREE_PODS,
            [],
        ),
        {
            "health": "Degraded",
            "rollout": "Stalled",
            "lastError": {
                "reason": "ProgressDeadlineExceeded",
                "source": "Deployment",
                "time": "2025-01-01T10:10:00Z",
                "message": 'ReplicaSet "web-nginx-x" has timed out progressing.',
            },
        },
    ),
    (
        "quota stops the ReplicaSet",
        (
            shop_foo(),
            web_deployment(
                available=2,
                updated=2,
                conditions=[
                    {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}
                ],
            ),
            THREE_PODS,
            [],
        ),
        {
            "health": "Degraded",
            "lastError": {"reason": "FailedCreate", "message": "exceeded quota", "source": "Deployment"},
        },
    ),
    (
        "a container crash-loops",
        (
            shop_foo(),
            web_deployment(available=2, ready=2),
            [pod("web-1"), pod("web-2", ready=False, restarts=7, waiting="CrashLoopBackOff"), pod("web-3")],
            [],
        ),
        {
            "health": "Degraded",
            "pods": {"total": 3, "ready": 2, "pending": 0, "failed": 0, "restarts": 7},
            "lastError": {
                "reason": "CrashLoopBackOff",
                "source": "Pod",
                "message": "pod web-2: container nginx: CrashLoopBackOff: back-off 5m0s restarting failed container",
            },
        },
    ),
    (
        "Ready=False from the controller is the error",
        (
            shop_foo(
                ready="False", ready_reason="DeploymentRejected", ready_message="Deployment shop/web-nginx rejected"
            ),
            web_deployment(),
            THREE_PODS,
            [],
        ),
        {
            "health": "Degraded",
            "lastError": {
                "reason": "DeploymentRejected",
                "source": "Foo",
                "message": "Deployment shop/web-nginx rejected",
                "time": "2025-01-01T10:00:00Z",
            },
        },
    ),
    (
        "Ready=False while replicas are still coming is progress, not an error",
        (
            shop_foo(ready="False", ready_reason="ReplicasUnavailable", ready_message="1/3 replicas available"),
            web_deployment(available=1, updated=3),
            THREE_PODS,
            [],
        ),
        {"health": "Progressing", "lastError": None},
    ),
    (
        "a Warning after the last good sync is the last error",
        (
            shop_foo(),
            web_deployment(),
            THREE_PODS,
            [
                event("Synced", at="2025-01-01T10:05:00Z"),
                event(
                    "ErrResourceExists",
                    type_="Warning",
                    at="2025-01-01T10:06:00Z",
                    message='Resource "web-nginx" already exists',
                ),
            ],
        ),
        {
            "health": "Degraded",
            "lastSyncTime": "2025-01-01T10:05:00Z",
            "lastError": {
                "reason": "ErrResourceExists",
                "source": "Event",
                "time": "2025-01-01T10:06:00Z",
                "message": 'Resource "web-nginx" already exists',
            },
        },
    ),
    (
        "a Warning before the last good sync is history",
        (
            shop_foo(),
            web_deployment(),
            THREE_PODS,
            [
                event("ErrResourceExists", type_="Warning", at="2025-01-01T10:04:00Z"),
                event("Synced", at="2025-01-01T10:05:00Z"),
            ],
        ),
        {"health": "Healthy", "lastSyncTime": "2025-01-01T10:05:00Z"},
    ),
    (
        "events about an earlier Foo of the same name are ignored",
        (
            shop_foo(),
            web_deployment(),
            THREE_PODS,
            [event("ErrResourceExists", type_="Warning", at="2030-01-01T00:00:00Z", uid="uid-of-a-deleted-foo")],
        ),
        {"health": "Healthy", "lastSyncTime": "2025-01-01T10:00:00Z"},
    ),
    (
        "a new generation the controller has not acted on",
        (shop_foo(generation=3, observed=2), web_deployment(), THREE_PODS, []),
        {"health": "Progressing", "synced": False, "generation": 3, "observedGeneration": 2},
    ),
    (
        "replicas defaulted when the Foo leaves them out",
        ({**shop_foo(), "spec": {"deployment": {"name": "web-nginx"}}}, None, [], []),
        {"desiredReplicas": 1, "image": "", "deploymentName": "web-nginx"},
    ),
]


@pytest.mark.parametrize("name, inputs, expected", CASES)
def test_health_of_a_foo(name: str, inputs: tuple[Any, ...], expected: dict[str, Any]) -> None:
    status = foo_health(*inputs)["status"]
    assert {k: status.get(k) for k in expected} == expected, name


@pytest.mark.parametrize("name, inputs, expected", CASES)
def test_the_projections_the_informers_keep_give_the_same_health(
    name: str, inputs: tuple[Any, ...], expected: dict[str, Any]
) -> None:
    foo_obj, deployment_obj, pods, events = inputs
    cached = (
        cached_foo(copy.deepcopy(foo_obj)),
        cached_deployment(deployment_obj) if deployment_obj else None,
        [cached_pod(p) for p in pods],
        [cached_event(e) for e in events],
    )
    assert foo_health(*cached) == foo_health(*inputs), name


def test_health_has_the_foos_identity_and_labels_for_selectors() -> None:
    health = foo_health(shop_foo(), web_deployment(), THREE_PODS, [], resource_version="42")
    assert health["apiVersion"] == "insights.samplecontroller.k8s.io/v1alpha1" and health["kind"] == "FooHealth"
    assert health["metadata"] == {
        "name": "web",
        "namespace": "shop",
        "creationTimestamp": "2025-01-01T09:00:00Z",
        "labels": {"team": "a"},
        "resourceVersion": "42",
    }


def test_health_does_not_change_its_inputs() -> None:
    inputs = (shop_foo(), web_deployment(available=1), [pod("web-1", waiting="ImagePullBackOff")], [event("Synced")])
    before = copy.deepcopy(inputs)
    foo_health(*inputs)
    assert inputs == before


def test_the_same_inputs_give_the_same_health() -> None:
    inputs = (shop_foo(), web_deployment(), THREE_PODS, [event("Synced")])
    assert foo_health(*inputs) == foo_health(*copy.deepcopy(inputs))


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"lastTimestamp": "2025-01-01T00:00:02Z", "eventTime": "2025-01-01T00:00:01Z"}, "2025-01-01T00:00:02Z"),
        ({"eventTime": "2025-01-01T00:00:01.000000Z"}, "2025-01-01T00:00:01.000000Z"),
        (
            {"series": {"lastObservedTime": "2025-01-01T00:00:03Z"}, "eventTime": "2025-01-01T00:00:01Z"},
            "2025-01-01T00:00:03Z",
        ),
        ({"metadata": {"creationTimestamp": "2025-01-01T00:00:04Z"}}, "2025-01-01T00:00:04Z"),
        ({}, ""),
    ],
)
def test_event_time_uses_whichever_field_the_writer_filled(fields: dict[str, Any], expected: str) -> None:
    assert event_time(fields) == expected


# ---- what a tenant can make insights cache (issue #34) ------------------------------------------


def test_a_foo_with_more_labels_than_the_cache_keeps_says_so_on_its_health() -> None:
    foo = shop_foo()
    foo["metadata"]["labels"] = {**fat_metadata(labels=100)["labels"], "team": "a"}
    health = foo_health(cached_foo(foo), None, [], [])
    assert len(health["metadata"]["labels"]) == MAX_LABELS
    assert health["metadata"]["annotations"] == {"insights.samplecontroller.k8s.io/labels-not-kept": "69"}
    assert "annotations" not in foo_health(cached_foo(shop_foo()), None, [], [])["metadata"]


def test_a_fat_pod_and_a_fat_event_are_cached_in_a_bounded_size() -> None:
    fat_pod = pod("web-1", waiting="CrashLoopBackOff")
    fat_pod["metadata"].update(fat_metadata(labels=5_000, annotation_bytes=100_000, owner_references=1_000))
    fat_pod["metadata"]["labels"]["controller"] = "web"
    fat_pod["status"]["containerStatuses"] *= 1_000
    fat_pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = "m" * 100_000
    fat_event = event("ErrResourceExists", type_="Warning", message="m" * 100_000)
    fat_event["metadata"].update(fat_metadata(labels=5_000, annotation_bytes=100_000))
    for fat, bound in ((fat_pod, 8 * 1024), (fat_event, 4 * 1024)):
        assert len(orjson.dumps(fat)) > 500_000
        assert len(orjson.dumps(cached_pod(fat) if fat is fat_pod else cached_event(fat))) < bound
    assert cached_pod(fat_pod)["metadata"]["labels"] == {"controller": "web"}
    health = foo_health(shop_foo(), web_deployment(), [cached_pod(fat_pod)], [cached_event(fat_event)])
    assert health["status"]["lastError"]["reason"] == "CrashLoopBackOff"


def test_the_event_cache_keeps_the_newest_events_of_each_foo() -> None:
    store = health_informers(None)["events"].store  # type: ignore[arg-type]
    for i in range(3 * EVENTS_PER_FOO):
        late = event("Synced", at=f"2025-01-01T10:{i:02d}:00Z")
        late["metadata"]["name"] = f"web.{i:04x}"
        store.put(f"shop/web.{i:04x}", cached_event(late))
    other = event("Synced")
    other["involvedObject"]["name"] = other["metadata"]["name"] = "db"
    store.put("shop/db", cached_event(other))
    kept = sorted(store.keys())
    assert kept == ["shop/db", *(f"shop/web.{i:04x}" for i in range(2 * EVENTS_PER_FOO, 3 * EVENTS_PER_FOO))]
