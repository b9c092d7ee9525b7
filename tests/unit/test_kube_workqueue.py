"""kube.workqueue and kube.ratelimit: client-go's queue semantics, on the real event loop and a fake clock.

No test sleeps: delays run on ``tests.clock.FakeClock`` and workers are let run with ``settle``.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from kube.metrics import metrics_for
from kube.ratelimit import (
    ItemExponentialFailureRateLimiter,
    RateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)
from kube.workqueue import ShutDown, WorkQueue
from tests.clock import FakeClock


async def settle() -> None:
    """Let every ready task run until it waits on something (a few loop turns, no time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


def queue_on(clock: FakeClock, rate_limiter: RateLimiter | None = None) -> WorkQueue[str]:
    return WorkQueue("t", rate_limiter=rate_limiter, clock=clock, timers=clock)


def namespace(key: str) -> str:
    return key.partition("/")[0]


def fair_queue() -> WorkQueue[str]:
    return WorkQueue("t", flow_of=namespace)


# ---- rate limiters ---------------------------------------------------------------------------


def test_item_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("k") for _ in range(22)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655 s
    assert delays[18:] == [1000.0] * 4
    assert limiter.num_requeues("k") == 22


def test_item_backoff_survives_a_huge_number_of_failures() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(2000):
        delay = limiter.when("k")
    assert delay == 1000.0


def test_forget_restarts_backoff_from_the_base_delay() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(5):
        limiter.when("k")
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    assert limiter.when("k") == 0.005


def test_backoff_is_per_item() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(5):
        limiter.when("a")
    assert limiter.when("b") == 0.005


def test_token_bucket_allows_the_burst_then_spaces_callers_by_one_over_qps() -> None:
    clock = FakeClock(1000.0)
    bucket = TokenBucket(10, 100, clock=clock)
    assert [bucket.reserve() for _ in range(100)] == [0.0] * 100
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.now += 10  # refills 100 tokens, minus the 3 borrowed
    assert bucket.reserve() == 0.0


def test_token_bucket_try_take_never_borrows() -> None:
    clock = FakeClock(1000.0)
    bucket = TokenBucket(1, 2, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]
    clock.now += 1
    assert bucket.try_take() is True


def test_token_bucket_with_zero_qps_is_unlimited() -> None:
    bucket = TokenBucket(0, 0)
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


def test_a_thousand_failures_elsewhere_never_delay_a_first_retry() -> None:
    # Issue 34: 1,000 Foos refused by a ResourceQuota made another tenant's first retry wait 99 s
    # in client-go's shared 10 qps bucket, which hands out slots in the future.
    limiter = default_controller_rate_limiter()
    for i in range(1000):
        for _ in range(3):
            limiter.when(f"tenant-a/foo-{i}")
    assert limiter.when("tenant-b/lone") == 0.005


def test_retry_state_goes_with_the_items_that_made_it() -> None:
    # A deleted namespace's Foos reconcile once more ("Foo is gone") and are forgotten: no debt stays.
    limiter = default_controller_rate_limiter()
    doomed = [f"deleted-ns/foo-{i}" for i in range(1500)]
    for key in doomed:
        limiter.when(key)
        limiter.when(key)
    for key in doomed:
        limiter.forget(key)
    assert all(limiter.num_requeues(key) == 0 for key in doomed)
    assert limiter.when("other-ns/foo") == 0.005
    assert limiter.when(doomed[0]) == 0.005


@given(st.lists(st.sampled_from("abc"), max_size=60))
def test_item_backoff_never_exceeds_its_cap(items: list[str]) -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    assert all(0.005 <= limiter.when(i) <= 1000.0 for i in items)


# ---- the queue -------------------------------------------------------------------------------


async def test_an_item_added_twice_is_handed_out_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_an_item_is_never_processed_by_two_workers_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    first = await queue.get()
    queue.add("a")  # changed again while a worker holds it
    assert len(queue) == 0  # ... so it waits for done(), not for a second worker
    second_worker = asyncio.create_task(queue.get())
    await settle()
    assert not second_worker.done()
    queue.done(first)
    assert await asyncio.wait_for(second_worker, 1) == "a"


async def test_re_adds_while_processing_collapse_into_one() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    item = await queue.get()
    for _ in range(5):
        queue.add("a")
    queue.done(item)
    assert len(queue) == 1


async def test_concurrent_workers_never_overlap_on_a_key() -> None:
    queue: WorkQueue[int] = WorkQueue("t")
    active: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []

    async def worker() -> None:
        while True:
            try:
                item = await queue.get()
            except ShutDown:
                return
            if item in active:
                overlaps.append(item)
            active.add(item)
            await asyncio.sleep(0)  # another worker runs while this one holds the item
            if len(processed) < 200:
                queue.add(item)  # keep re-adding while processing
            processed.append(item)
            active.discard(item)
            queue.done(item)

    for i in range(5):
        queue.add(i)
    workers = [asyncio.create_task(worker()) for _ in range(8)]
    while len(processed) < 200:
        await asyncio.sleep(0)
    queue.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), 5)
    assert overlaps == []


async def test_add_after_delays_the_add_and_an_earlier_pending_time_wins() -> None:
    clock = FakeClock(1000.0)
    queue = queue_on(clock)
    queue.add_after("a", 5)
    queue.add_after("a", 10)  # later than what is pending: ignored
    assert len(queue) == 0 and queue.delayed == 1
    clock.step(4.9)
    assert len(queue) == 0
    clock.step(0.1)
    assert len(queue) == 1 and queue.delayed == 0
    assert await queue.get() == "a"
    queue.add_after("b", 10)
    queue.add_after("b", 1)  # sooner: replaces the pending one
    clock.step(1)
    assert len(queue) == 1 and queue.delayed == 0 and clock.pending == 0
    assert await queue.get() == "b"


async def test_add_after_with_no_delay_adds_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add_after("a", 0)
    assert len(queue) == 1


async def test_add_rate_limited_backs_off_and_forget_resets() -> None:
    clock = FakeClock(1000.0)
    queue = queue_on(clock, rate_limiter=ItemExponentialFailureRateLimiter(1, 100))
    queue.add_rate_limited("a")  # due in 1 s
    queue.add_rate_limited("a")  # due in 2 s: the pending earlier add wins
    assert queue.num_requeues("a") == 2
    clock.step(1)
    assert await queue.get() == "a"
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_shutdown_refuses_adds_and_wakes_idle_workers() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    idle = asyncio.create_task(queue.get())
    await settle()
    queue.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(idle, 1)
    queue.add("a")
    queue.add_after("b", 0.001)
    assert len(queue) == 0 and queue.delayed == 0


async def test_shutdown_still_hands_out_queued_items_like_client_go() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    queue.shutdown()
    assert await queue.get() == "a"
    with pytest.raises(ShutDown):
        await queue.get()


async def test_shutdown_discarding_queued_items_keeps_in_flight_ones_to_finish() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    for item in "abc":
        queue.add(item)
    in_flight = await queue.get()
    queue.add(in_flight)  # a re-add during processing must not come back after shutdown
    queue.add_after("later", 5)
    queue.shutdown(discard_queued=True)
    with pytest.raises(ShutDown):
        await queue.get()
    assert not await queue.drain(timeout=0.01)  # "a" is still being processed
    queue.done(in_flight)
    assert await queue.drain(timeout=1)
    assert len(queue) == 0 and queue.delayed == 0


async def test_drain_waits_for_in_flight_items() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    item = await queue.get()
    queue.shutdown()
    drained = asyncio.create_task(queue.drain())
    await settle()
    assert not drained.done()
    queue.done(item)
    assert await asyncio.wait_for(drained, 1) is True


async def test_a_cancelled_getter_does_not_swallow_an_item() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")
    first.cancel()  # woken for "a" but cancelled before it ran
    assert await asyncio.wait_for(second, 1) == "a"


# ---- fairness between flows (namespaces) -----------------------------------------------------


async def test_a_lone_namespace_waits_for_one_item_of_a_busy_one_not_all_of_them() -> None:
    # Issue 34: 5,000 Foos in one namespace, then one elsewhere: FIFO served it 5,001st (13.9 s).
    queue = fair_queue()
    for i in range(5000):
        queue.add(f"tenant-a/foo-{i}")
    queue.add("tenant-b/lone")
    served = [await queue.get() for _ in range(2)]
    assert served == ["tenant-a/foo-0", "tenant-b/lone"]


async def test_namespaces_are_served_round_robin_each_in_its_own_order() -> None:
    queue = fair_queue()
    for key in ["a/1", "a/2", "a/3", "b/1", "c/1", "b/2"]:
        queue.add(key)
    assert [await queue.get() for _ in range(6)] == ["a/1", "b/1", "c/1", "a/2", "b/2", "a/3"]


async def test_a_namespace_with_nothing_queued_keeps_no_line() -> None:
    queue = fair_queue()
    for i in range(100):
        queue.add(f"deleted/foo-{i}")
    queue.add("kept/foo")
    assert queue.flows == 2
    for _ in range(101):
        queue.done(await queue.get())
    assert queue.flows == 0 and len(queue) == 0


async def test_fair_lines_keep_the_queues_semantics() -> None:
    queue = fair_queue()
    queue.add("a/x")
    queue.add("a/x")  # deduplicated
    queue.add("b/y")
    item = await queue.get()
    queue.add(item)  # re-added while processing: waits for done
    assert len(queue) == 1 and queue.flows == 1
    queue.done(item)
    assert len(queue) == 2
    assert {await queue.get(), await queue.get()} == {"a/x", "b/y"}
    queue.shutdown(discard_queued=True)
    assert queue.flows == 0


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 30)), max_size=120))
def test_no_namespace_is_served_twice_while_another_waits(adds: list[tuple[str, int]]) -> None:
    async def served_in_order() -> list[str]:
        queue = fair_queue()
        for flow, n in adds:
            queue.add(f"{flow}/{n}")
        order = []
        while len(queue):
            item = await queue.get()
            queue.done(item)
            order.append(item)
        return order

    order = asyncio.run(served_in_order())
    assert sorted(order) == sorted({f"{flow}/{n}" for flow, n in adds})  # each once
    remaining = {flow: sum(1 for key in order if namespace(key) == flow) for flow in "abcd"}
    served = dict.fromkeys("abcd", 0)
    for key in order:
        flow = namespace(key)
        # Every flow that still has items was served as often as this one, or once less.
        assert all(served[flow] <= served[other] for other in "abcd" if remaining[other] > 0)
        served[flow] += 1
        remaining[flow] -= 1


async def test_queue_metrics_are_named_like_client_go() -> None:
    registry = CollectorRegistry()
    queue: WorkQueue[str] = WorkQueue("foo", metrics=metrics_for(registry))
    queue.add("a")
    queue.add("a")
    queue.add("b")
    item = await queue.get()
    queue.done(item)
    queue.add_rate_limited("a")

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, {"name": "foo"})

    assert value("workqueue_adds_total") == 3
    assert value("workqueue_depth") == 1
    assert value("workqueue_retries_total") == 1
    assert value("workqueue_queue_duration_seconds_count") == 1
    assert value("workqueue_work_duration_seconds_count") == 1
