"""kube.leader: the decisions as pure functions, then the elector against an in-memory Lease API."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, FencedWrite
from kube.leader import (
    LeaderElector,
    LeaseRecord,
    Observation,
    can_acquire,
    micro_time,
    next_record,
    observe,
    released_record,
)
from kube.metrics import metrics_for
from tests.clock import FakeClock

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


# ---- pure decisions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observation", "now", "allowed"),
    [
        (None, 0.0, True),  # no lease yet
        (Observation(LeaseRecord(""), 100.0), 100.0, True),  # released
        (Observation(LeaseRecord("me"), 100.0), 100.0, True),  # ours: renew
        (Observation(LeaseRecord("them", 15), 100.0), 114.9, False),  # theirs, fresh
        (Observation(LeaseRecord("them", 15), 100.0), 115.0, True),  # theirs, unchanged for 15 s
    ],
    ids=["no-lease", "released", "ours", "theirs-fresh", "theirs-expired"],
)
def test_can_acquire(observation: Observation | None, now: float, allowed: bool) -> None:
    assert can_acquire(observation, "me", now) is allowed


def test_expiry_is_judged_on_our_clock_never_by_renew_time() -> None:
    # The holder's clock is an hour behind: its renewTime looks ancient, but it renewed just now.
    stale_looking = LeaseRecord("them", 15, renew_time=micro_time(NOW - timedelta(hours=1)))
    seen = observe(None, stale_looking, now=500.0)
    assert not can_acquire(seen, "me", now=501.0)
    # And a renewTime from the future does not keep a dead holder alive past its duration.
    future_looking = LeaseRecord("them", 15, renew_time=micro_time(NOW + timedelta(hours=1)))
    seen = observe(None, future_looking, now=500.0)
    assert can_acquire(observe(seen, future_looking, now=515.0), "me", now=515.0)


def test_the_expiry_clock_restarts_only_when_the_record_changes() -> None:
    record = LeaseRecord("them", 15, renew_time="t1")
    first = observe(None, record, now=10.0)
    assert observe(first, record, now=20.0).at == 10.0  # same record: keep counting
    renewed = LeaseRecord("them", 15, renew_time="t2")
    assert observe(first, renewed, now=20.0).at == 20.0


def test_taking_over_counts_a_transition_and_renewing_keeps_acquire_time() -> None:
    theirs = LeaseRecord("them", 15, "a", "r", transitions=4)
    taken = next_record(theirs, "me", 15, NOW)
    assert (taken.holder, taken.transitions) == ("me", 5)
    assert taken.acquire_time == taken.renew_time == "2025-01-01T12:00:00.000000Z"
    renewed = next_record(taken, "me", 15, NOW + timedelta(seconds=2))
    assert renewed.acquire_time == taken.acquire_time
    assert renewed.renew_time == "2025-01-01T12:00:02.000000Z"
    assert renewed.transitions == 5


def test_first_holder_starts_at_zero_transitions() -> None:
    assert next_record(None, "me", 15, NOW).transitions == 0


def test_release_clears_the_holder_and_keeps_the_transition_count() -> None:
    released = released_record(LeaseRecord("me", 15, "a", "r", 3), NOW)
    assert released.holder == "" and released.transitions == 3 and released.lease_duration == 1


def test_lease_record_round_trips_through_a_lease_spec() -> None:
    record = LeaseRecord("me", 15, "a", "r", 2)
    assert LeaseRecord.from_spec(record.to_spec()) == record
    assert record.to_spec() == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "a",
        "renewTime": "r",
        "leaseTransitions": 2,
    }


# ---- the elector against an in-memory Lease API ----------------------------------------------


class LeaseApi:
    """Just enough of the apiserver for one Lease: GET, POST, PUT with resourceVersion checks."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.writes = 0

    async def request(
        self, method: str, path: str, *, body: Any = None, timeout: float | None = None, **_: Any
    ) -> dict[str, Any]:
        if self.down:
            raise ApiError(0, {"message": "connection refused"}, method=method, path=path)
        if method == "GET":
            if self.lease is None:
                raise ApiError(404, {"reason": "NotFound"})
            return copy.deepcopy(self.lease)
        if method == "POST":
            if self.lease is not None:
                raise ApiError(409, {"reason": "AlreadyExists"})
            return self._store(body)
        if method == "PUT":
            assert self.lease is not None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise ApiError(409, {"reason": "Conflict"})
            return self._store(body)
        raise AssertionError(method)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    @property
    def holder(self) -> str:
        return "" if self.lease is None else self.lease["spec"]["holderIdentity"]


def elector(api: LeaseApi, identity: str, clock: FakeClock, **kwargs: Any) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]
        namespace="ns",
        name="lock",
        identity=identity,
        clock=clock,
        wall_clock=lambda: NOW + timedelta(seconds=clock.now),
        **kwargs,
    )


async def test_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a.try_acquire_or_renew()
    assert api.holder == "a"
    assert not await b.try_acquire_or_renew()
    assert b.holder == "a"


async def test_a_silent_holder_is_replaced_after_a_lease_duration_on_the_candidates_clock() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b starts counting now
    clock.now = 14.9
    assert not await b.try_acquire_or_renew()
    clock.now = 15.0
    assert await b.try_acquire_or_renew()
    assert api.holder == "b"
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 1


async def test_a_renewing_holder_is_never_replaced() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.try_acquire_or_renew()
    for _ in range(20):
        clock.now += 2
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()


async def test_release_lets_the_next_candidate_in_at_once() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.acquire()
    assert a.is_leader
    assert not await b.try_acquire_or_renew()
    assert await a.release()
    assert api.holder == "" and not a.is_leader
    assert await b.try_acquire_or_renew()


async def test_hold_gives_up_after_the_renew_deadline_when_the_apiserver_is_gone() -> None:
    api = LeaseApi()
    registry = CollectorRegistry()
    a = LeaderElector(
        api,  # type: ignore[arg-type]
        namespace="ns",
        name="lock",
        identity="a",
        lease_duration=0.6,
        renew_deadline=0.4,
        retry_period=0.1,
        metrics=metrics_for(registry),
    )
    await a.acquire()
    assert registry.get_sample_value("leader_election_master_status", {"name": "lock"}) == 1
    api.down = True
    await asyncio.wait_for(a.hold(), 2)
    assert not a.is_leader
    assert registry.get_sample_value("leader_election_master_status", {"name": "lock"}) == 0


async def test_hold_stops_at_once_when_someone_else_took_the_lease() -> None:
    api = LeaseApi()
    a = LeaderElector(
        api,
        namespace="ns",
        name="lock",
        identity="a",  # type: ignore[arg-type]
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.05,
    )
    await a.acquire()
    assert api.lease is not None
    api.lease["spec"]["holderIdentity"] = "usurper"
    await asyncio.wait_for(a.hold(), 1)
    assert not a.is_leader


async def test_elector_refuses_inconsistent_timings() -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            LeaseApi(),
            namespace="n",
            name="l",
            identity="i",  # type: ignore[arg-type]
            lease_duration=10,
            renew_deadline=10,
            retry_period=2,
        )


async def test_a_candidate_wakes_up_right_when_the_observed_lease_expires() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.try_acquire_or_renew()
    await b.try_acquire_or_renew()  # b saw a's record at t=0
    clock.now = 14.0
    assert b._retry_delay() == pytest.approx(1.01)  # not a whole jittered retry period later
    clock.now = 5.0
    assert 2.0 <= b._retry_delay() <= 4.4


# ---- the write fence: nothing is written once another replica may lead -------------------------


class SlowLeaseApi(LeaseApi):
    """Writes that take ``seconds`` of the fake clock to be answered (the apiserver applied them at once)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = await super().request(method, path, **kwargs)
        if method != "GET":
            self.clock.step(self.seconds)
        return answer


async def test_writes_are_fenced_a_renew_deadline_after_the_renewal_was_sent_not_answered() -> None:
    clock = FakeClock()
    api = SlowLeaseApi(clock, seconds=3)
    a = elector(api, "a", clock)  # lease 15 s, renew deadline 10 s
    await a.acquire()  # sent at 0, answered at 3: the others count from no earlier than 0
    a.check_write()
    clock.now = 9.9
    a.check_write()
    clock.now = 10.0
    with pytest.raises(FencedWrite, match="last renewed 10.0s ago"):
        a.check_write()
    clock.now = 8.0
    assert await a.try_acquire_or_renew()  # sent at 8, answered at 11
    clock.now = 17.9
    a.check_write()
    clock.now = 18.0
    with pytest.raises(FencedWrite):
        a.check_write()


async def test_a_leader_frozen_past_its_deadline_is_fenced_before_it_notices() -> None:
    # Issue 34: a leader paused (SIGSTOP) past its lease wrote 32-56 times after the new leader
    # took over: its workers ran before its renewal loop noticed anything.
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.acquire()
    await b.try_acquire_or_renew()
    clock.step(16)  # a is frozen; b takes over
    assert await b.try_acquire_or_renew()
    assert a.is_leader  # a has not run since: it still thinks it leads...
    with pytest.raises(FencedWrite):  # ...but may not write
        a.check_write()


async def test_a_replica_that_does_not_lead_is_fenced() -> None:
    api, clock = LeaseApi(), FakeClock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a.acquire()
    assert not await b.try_acquire_or_renew()
    with pytest.raises(FencedWrite, match="b does not hold lease ns/lock"):
        b.check_write()
    await a.release()
    with pytest.raises(FencedWrite):
        a.check_write()
