"""The live FooHealth view: which changes move which health, and what a watcher resuming from a version sees."""

from __future__ import annotations

from typing import Any

import pytest

from attacks.objects import deployment, foo_v1
from insights.view import Expired, HealthView


def watched_foo(
    name: str,
    namespace: str = "ns",
    *,
    deployment: str | None = None,
    labels: dict[str, str] | None = None,
    replicas: int = 1,
) -> dict[str, Any]:
    return foo_v1(
        name,
        namespace=namespace,
        deployment=deployment or f"{name}-nginx",
        replicas=replicas,
        uid=f"uid-{name}",
        labels=labels or {},
        status={"observedGeneration": 0},
    )


def owned_deployment(name: str, owner: str, namespace: str = "ns", available: int = 1) -> dict[str, Any]:
    """Deployment ``name`` controlled by the Foo ``owner`` (as ``watched_foo`` builds it)."""
    return deployment(
        name,
        namespace=namespace,
        owner=watched_foo(owner, namespace),
        status={"replicas": 1, "updatedReplicas": 1, "readyReplicas": available, "availableReplicas": available},
    )


def pod(name: str, controller: str, namespace: str = "ns", restarts: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"controller": controller}},
        "status": {"phase": "Running", "containerStatuses": [{"name": "nginx", "restartCount": restarts}]},
    }


def event(name: str, foo_name: str, reason: str, namespace: str = "ns") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Foo", "name": foo_name, "namespace": namespace},
        "type": "Warning",
        "reason": reason,
        "message": reason,
        "lastTimestamp": "2025-01-01T00:00:00Z",
    }


STORES = {"Foo": "foos", "Deployment": "deployments", "Pod": "pods", "Event": "events"}


def put(view: HealthView, obj: dict[str, Any]) -> None:
    kind = STORES[obj["kind"]]
    store = getattr(view, kind)
    old = store.put(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", obj)
    on_add, on_update, _ = view.handlers(kind)
    on_add(obj) if old is None else on_update(old, obj)


def delete(view: HealthView, obj: dict[str, Any]) -> None:
    kind = STORES[obj["kind"]]
    getattr(view, kind).remove(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
    view.handlers(kind)[2](obj)


@pytest.fixture
def view() -> HealthView:
    return HealthView.empty(instance=7, history=8)


def changes(view: HealthView, since: str) -> list[tuple[str, str]]:
    replay, subscription = view.subscribe(since)
    view.unsubscribe(subscription)
    return [(c.type, c.new["metadata"]["name"]) for c in replay]


def test_each_underlying_kind_moves_the_right_health(view: HealthView) -> None:
    put(view, watched_foo("a"))
    put(view, watched_foo("b"))
    start = view.resource_version
    put(view, owned_deployment("a-nginx", owner="a"))
    put(view, pod("a-1", controller="a", restarts=3))
    put(view, event("a.1", "a", "ErrResourceExists"))
    put(view, pod("unrelated", controller="nobody"))
    assert changes(view, start) == [("MODIFIED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a")]
    health = view.get("ns", "a")
    assert health is not None and health["status"]["pods"]["restarts"] == 3
    assert health["status"]["lastError"]["reason"] == "ErrResourceExists"


def test_a_deployment_found_by_name_counts_even_before_it_is_owned(view: HealthView) -> None:
    put(view, owned_deployment("shared", owner="someone-else"))
    put(view, watched_foo("a", deployment="shared"))
    health = view.get("ns", "a")
    assert health is not None and health["status"]["rollout"] == "NotOwned"


def test_a_change_that_does_not_change_the_health_is_not_an_event(view: HealthView) -> None:
    put(view, watched_foo("a"))
    before = view.resource_version
    put(view, {**watched_foo("a"), "metadata": {**watched_foo("a")["metadata"], "resourceVersion": "999"}})
    assert view.resource_version == before and changes(view, before) == []


def test_deleting_the_foo_deletes_its_health(view: HealthView) -> None:
    put(view, watched_foo("a"))
    start = view.resource_version
    delete(view, watched_foo("a"))
    assert view.get("ns", "a") is None
    assert changes(view, start) == [("DELETED", "a")]
    replay, _ = view.subscribe(start)
    assert int(replay[0].new["metadata"]["resourceVersion"]) == int(start) + 1


def test_listing_is_sorted_and_filters_by_namespace(view: HealthView) -> None:
    for obj in (watched_foo("b"), watched_foo("a"), watched_foo("c", "other")):
        put(view, obj)
    assert [(h["metadata"]["namespace"], h["metadata"]["name"]) for h in view.healths()] == [
        ("ns", "a"),
        ("ns", "b"),
        ("other", "c"),
    ]
    assert [h["metadata"]["name"] for h in view.healths("other")] == ["c"]


def test_watch_from_nothing_starts_with_every_health_as_added(view: HealthView) -> None:
    put(view, watched_foo("a"))
    put(view, watched_foo("b"))
    replay, _ = view.subscribe(None)
    assert [(c.type, c.new["metadata"]["name"]) for c in replay] == [("ADDED", "a"), ("ADDED", "b")]


def test_versions_outside_the_history_expire(view: HealthView) -> None:
    for i in range(20):  # history keeps 8 changes
        put(view, watched_foo(f"f{i:02}"))
    current = int(view.resource_version)
    assert len(changes(view, str(current - 8))) == 8
    with pytest.raises(Expired):
        view.subscribe(str(current - 9))
    with pytest.raises(Expired):
        view.subscribe(str(current + 1))  # from the future, or from another replica
    with pytest.raises(Expired):
        view.subscribe("123")


def test_resource_versions_of_two_views_never_overlap() -> None:
    first, second = HealthView.empty(instance=1), HealthView.empty(instance=2)
    put(first, watched_foo("a"))
    with pytest.raises(Expired):
        second.subscribe(first.resource_version)


async def test_subscribers_get_live_changes_and_close_ends_them(view: HealthView) -> None:
    _, subscription = view.subscribe(view.resource_version)
    put(view, watched_foo("a"))
    change = subscription.queue.get_nowait()
    assert change is not None and change.type == "ADDED"
    view.close()
    assert subscription.queue.get_nowait() is None


async def test_a_watcher_that_falls_behind_is_closed_not_grown(view: HealthView) -> None:
    _, subscription = view.subscribe(view.resource_version)
    for i in range(subscription.queue.maxsize + 5):
        put(view, watched_foo("a", replicas=i % 10 + 1))
    assert subscription.overflowed and subscription.closed
    drained = []
    while not subscription.queue.empty():
        drained.append(subscription.queue.get_nowait())
    assert drained[-1] is None
