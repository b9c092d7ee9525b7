"""kube.events: repeats aggregate into one Event, each object has a budget, writes never block."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from kube.client import ApiError
from kube.events import EventCorrelator, EventRecorder
from kube.metrics import metrics_for
from tests.clock import FakeClock

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
FOO = {
    "apiVersion": "samplecontroller.k8s.io/v1",
    "kind": "Foo",
    "metadata": {"name": "example", "namespace": "demo", "uid": "uid-1", "resourceVersion": "10"},
}


def other(name: str) -> dict[str, Any]:
    return {**FOO, "metadata": {**FOO["metadata"], "name": name, "uid": f"uid-{name}"}}


def test_a_first_occurrence_creates_an_event_like_client_gos_recorder() -> None:
    write = EventCorrelator("foo-controller", "host-1").correlate(
        FOO, "Normal", "Synced", "Foo synced successfully", NOW
    )
    assert write is not None and write.action == "create"
    body = write.body
    assert body["metadata"]["namespace"] == "demo"
    assert body["metadata"]["name"].startswith("example.")
    assert body["involvedObject"] == {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "name": "example",
        "namespace": "demo",
        "uid": "uid-1",
        "resourceVersion": "10",
    }
    assert (body["type"], body["reason"], body["message"]) == ("Normal", "Synced", "Foo synced successfully")
    assert body["source"] == {"component": "foo-controller", "host": "host-1"}
    assert body["count"] == 1
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2025-01-01T12:00:00Z"


def test_a_repeat_patches_count_and_last_timestamp_of_the_same_event() -> None:
    correlator = EventCorrelator("c", "h")
    created = correlator.correlate(FOO, "Warning", "ErrResourceExists", "m", NOW)
    # A newer resourceVersion of the same object is still the same event.
    newer = {**FOO, "metadata": {**FOO["metadata"], "resourceVersion": "11"}}
    repeat = correlator.correlate(newer, "Warning", "ErrResourceExists", "m", NOW + timedelta(seconds=30))
    assert created is not None and repeat is not None
    assert repeat.action == "patch"
    assert (repeat.namespace, repeat.name) == ("demo", created.name)
    assert repeat.body == {"count": 2, "lastTimestamp": "2025-01-01T12:00:30Z"}


def test_a_different_message_reason_type_or_object_is_a_different_event() -> None:
    correlator = EventCorrelator("c", "h")
    correlator.correlate(FOO, "Warning", "R", "m", NOW)
    variants = [
        (FOO, "Warning", "R", "other message"),
        (FOO, "Warning", "Other", "m"),
        (FOO, "Normal", "R", "m"),
        (other("second"), "Warning", "R", "m"),
    ]
    for obj, type_, reason, message in variants:
        write = correlator.correlate(obj, type_, reason, message, NOW)  # type: ignore[arg-type]
        assert write is not None and write.action == "create"


def test_a_hot_loop_cannot_flood_the_apiserver_per_object_budget() -> None:
    clock = FakeClock()
    correlator = EventCorrelator("c", "h", burst=25, refill_seconds=300, clock=clock)
    writes = [correlator.correlate(FOO, "Warning", "R", f"attempt {i}", NOW) for i in range(1000)]
    assert sum(w is not None for w in writes) == 25
    # Another object has its own budget.
    assert correlator.correlate(other("second"), "Warning", "R", "m", NOW) is not None
    # The budget refills one event per five minutes.
    clock.now += 300
    assert correlator.correlate(FOO, "Warning", "R", "later", NOW) is not None
    assert correlator.correlate(FOO, "Warning", "R", "later", NOW) is None


def test_more_objects_than_the_cache_never_buy_a_fresh_burst() -> None:
    # Issue 34: client-go's LRUs (4,096 keys) forget a spent budget before the object comes back,
    # so 5,000 objects with an event each a second made 401 new Events a second. Scaled down:
    # 150 objects, a cache of 100, 30 seconds.
    clock = FakeClock()
    correlator = EventCorrelator("c", "h", cache_size=100, clock=clock)
    creates_per_second = []
    for _ in range(30):
        writes = [correlator.correlate(other(f"o{i}"), "Warning", "R", "m", NOW) for i in range(150)]
        creates_per_second.append(sum(w is not None and w.action == "create" for w in writes))
        clock.step(1)
    assert creates_per_second[0] <= 100 + 25  # first occurrences: the cached ones, and the overflow's burst
    assert sum(creates_per_second[1:]) <= 29  # then one a second for everything beyond the cache
    assert len(correlator) == 100


def test_a_record_makes_room_only_once_its_budget_has_refilled() -> None:
    clock = FakeClock()
    correlator = EventCorrelator("c", "h", cache_size=2, clock=clock)
    for name in ("a", "b"):
        assert correlator.correlate(other(name), "Normal", "R", "m", NOW) is not None
    correlator.correlate(other("c"), "Normal", "R", "m", NOW)  # through the overflow, not kept
    clock.step(299)
    assert len(correlator) == 2
    written = correlator.correlate(other("c"), "Normal", "R", "m", NOW)
    assert written is not None and written.action == "create"  # overflow: nothing was remembered
    clock.step(1)  # a's and b's single event refilled: a record may go
    correlator.correlate(other("c"), "Normal", "R", "m", NOW)
    repeat = correlator.correlate(other("c"), "Normal", "R", "m", NOW)
    assert repeat is not None and repeat.action == "patch" and len(correlator) == 2


def test_ten_distinct_messages_about_one_thing_become_one_combined_event() -> None:
    clock = FakeClock()
    correlator = EventCorrelator("c", "h", clock=clock)
    writes = [correlator.correlate(FOO, "Warning", "InvalidSpec", f"replicas {i}", NOW) for i in range(12)]
    assert [w.action for w in writes if w] == ["create"] * 10 + ["patch"] * 2
    combined = writes[9]
    assert combined is not None
    assert combined.body["message"] == "(combined from similar events): replicas 9"
    assert writes[11] is not None and writes[11].name == combined.name
    assert writes[11].body == {
        "count": 3,
        "lastTimestamp": "2025-01-01T12:00:00Z",
        "message": "(combined from similar events): replicas 11",
    }
    assert correlator.correlate(FOO, "Warning", "InvalidSpec", "replicas 3", NOW).action == "patch"  # type: ignore[union-attr]
    clock.step(601)  # ten quiet minutes: messages are told apart again
    fresh = correlator.correlate(FOO, "Warning", "InvalidSpec", "replicas 99", NOW)
    assert fresh is not None and fresh.body.get("message") == "replicas 99"


def test_occurrences_held_back_are_counted_in_the_next_patch() -> None:
    clock = FakeClock()
    correlator = EventCorrelator("c", "h", clock=clock)
    writes = [correlator.correlate(FOO, "Normal", "Synced", "m", NOW) for _ in range(40)]
    assert sum(w is not None for w in writes) == 25
    clock.step(300)
    later = correlator.correlate(FOO, "Normal", "Synced", "m", NOW)
    assert later is not None and later.body["count"] == 41


class EventApi:
    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []

    async def create(self, resource: Any, body: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append("create")
        self.events[(namespace or "", body["metadata"]["name"])] = dict(body)
        return body

    async def patch(
        self, resource: Any, name: str, patch: dict[str, Any], *, namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append("patch")
        event = self.events.get((namespace or "", name))
        if event is None:
            raise ApiError(404, {"reason": "NotFound"})
        event.update(patch)
        return event


async def test_recorder_writes_in_the_background_and_aggregates_on_the_server() -> None:
    api = EventApi()
    registry = CollectorRegistry()
    recorder = EventRecorder(api, "foo-controller", host="h", metrics=metrics_for(registry))  # type: ignore[arg-type]
    recorder.start()
    for _ in range(3):
        recorder.event(FOO, "Normal", "Synced", "Foo synced successfully")
    assert await recorder.flush(timeout=2)
    await recorder.stop()
    assert api.calls == ["create", "patch", "patch"]
    (event,) = api.events.values()
    assert event["count"] == 3
    assert registry.get_sample_value("kube_events_total", {"outcome": "created"}) == 1
    assert registry.get_sample_value("kube_events_total", {"outcome": "patched"}) == 2


async def test_a_repeat_of_an_expired_event_creates_a_new_one() -> None:
    api = EventApi()
    recorder = EventRecorder(api, "c", host="h")  # type: ignore[arg-type]
    recorder.start()
    recorder.event(FOO, "Warning", "R", "m")
    await recorder.flush(timeout=2)
    api.events.clear()  # the apiserver's event TTL passed
    recorder.event(FOO, "Warning", "R", "m")
    await recorder.flush(timeout=2)
    await recorder.stop()
    assert api.calls == ["create", "patch", "create"]
    (event,) = api.events.values()
    assert event["count"] == 1


async def test_recording_never_waits_for_the_apiserver() -> None:
    class SlowApi(EventApi):
        async def create(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            await asyncio.sleep(10)
            raise AssertionError("unreachable")

    recorder = EventRecorder(SlowApi(), "c", host="h", max_pending=2)  # type: ignore[arg-type]
    recorder.start()
    for i in range(5):
        recorder.event(other(f"o{i}"), "Normal", "R", "m")  # returns at once; overflow is dropped
    assert not await recorder.flush(timeout=0.05)
    await recorder.stop(timeout=0.05)


async def test_concurrent_writers_never_patch_an_event_before_it_exists() -> None:
    class SlowCreates(EventApi):
        async def create(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            await asyncio.sleep(0.02)
            return await super().create(*args, **kwargs)

    api = SlowCreates()
    recorder = EventRecorder(api, "c", host="h", writers=3)  # type: ignore[arg-type]
    recorder.start()
    for _ in range(3):
        for i in range(6):
            recorder.event(other(f"o{i}"), "Normal", "R", "m")
    assert await recorder.flush(timeout=5)
    await recorder.stop()
    assert api.calls.count("create") == 6  # no patch hit a missing event and re-created it
    assert sorted(e["count"] for e in api.events.values()) == [3] * 6
