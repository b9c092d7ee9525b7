"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

A candidate judges a lease expired on its *own* monotonic clock, counted from when it last saw
the lease record change — never by comparing ``renewTime`` with its wall clock, since clocks
skew. A leader that cannot renew within the renew deadline stops leading; on shutdown it
releases the lease (empty ``holderIdentity``) so a successor need not wait for expiry.
The decisions are pure functions (``observe``, ``can_acquire``, ``next_record``); the
``LeaderElector`` only adds the apiserver calls and the timing loop around them.

Fencing: no other candidate can take the lease before ``lease_duration`` has passed since it
*saw* our last renewal, which it cannot see before we sent it. So ``check_write`` lets a write
go only within ``renew_deadline`` of the moment our last successful renewal was *sent* (not
answered): a leader frozen (SIGSTOP, a stalled VM, a long GC) or cut off past that writes
nothing, whatever its workers were doing, and the margin up to the lease duration covers a
write that was checked just before the deadline and is still on its way.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from .client import LEASES, ApiError, FencedWrite, KubeClient
from .metrics import Metrics
from .ratelimit import Clock

log = logging.getLogger(__name__)

WallClock = Callable[[], datetime]


def _boot_time() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# The lease's clock: monotonic, and on Linux counting time the machine was suspended too
# (CLOCK_BOOTTIME). CLOCK_MONOTONIC stops while a VM or laptop sleeps, and a leader woken from
# that would think its lease young while the other replicas, awake all along, took it over.
lease_clock: Clock = _boot_time if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime on the wire: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The part of a Lease's spec that elections read and write."""

    holder: str = ""
    lease_duration: int = 15
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: dict[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


@dataclass(frozen=True)
class Observation:
    """The record we last saw and when (our monotonic clock) we saw it change."""

    record: LeaseRecord
    at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """Remember ``record``; the clock restarts only when the record is different from before."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def can_acquire(observation: Observation | None, identity: str, now: float) -> bool:
    """May ``identity`` write itself into the lease now?

    Yes if nobody holds it, we hold it, or the holder has not changed the record for a whole
    lease duration as measured on our own clock.
    """
    if observation is None:
        return True
    record = observation.record
    if not record.holder or record.holder == identity:
        return True
    return now >= observation.at + record.lease_duration


def next_record(current: LeaseRecord | None, identity: str, lease_duration: int, now: datetime) -> LeaseRecord:
    """The record to write to acquire or renew: a renewal keeps acquireTime and the transition count."""
    stamp = micro_time(now)
    if current is not None and current.holder == identity:
        return replace(current, lease_duration=lease_duration, renew_time=stamp)
    transitions = 0 if current is None else current.transitions + 1
    return LeaseRecord(identity, lease_duration, stamp, stamp, transitions)


def released_record(current: LeaseRecord, now: datetime) -> LeaseRecord:
    """What a leader writes when it steps down: no holder, so anyone may take over at once."""
    stamp = micro_time(now)
    return LeaseRecord("", 1, stamp, stamp, current.transitions)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns for one Lease: ``acquire`` → ``hold`` (renews until lost or stopped) → ``release``."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        metrics: Metrics | None = None,
        clock: Clock = lease_clock,
        wall_clock: WallClock = _utcnow,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.metrics = metrics
        self._clock = clock
        self._wall_clock = wall_clock
        self._observation: Observation | None = None
        self._lease: dict[str, Any] | None = None  # the last Lease object we read or wrote
        self._leader = False
        self._renewed_at = float("-inf")  # when the last successful acquire/renew was *sent*
        self._set_gauge()

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def write_deadline(self) -> float:
        """Until when (on ``clock``) this replica may write: renew deadline after its last renewal was sent."""
        return self._renewed_at + self.renew_deadline

    def check_write(self, method: str = "", path: str = "") -> None:
        """The write fence (``KubeClient.fenced``): raise ``FencedWrite`` unless we surely lead."""
        if not self._leader:
            raise FencedWrite(f"{self.identity} does not hold lease {self.namespace}/{self.name}")
        late = self._clock() - self.write_deadline
        if late >= 0:
            raise FencedWrite(
                f"lease {self.namespace}/{self.name} was last renewed {late + self.renew_deadline:.1f}s ago"
                f" (renew deadline {self.renew_deadline:.0f}s): another replica may lead"
            )

    @property
    def holder(self) -> str:
        """Who we last saw holding the lease ('' if nobody or unknown)."""
        return self._observation.record.holder if self._observation else ""

    def _set_gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.leader_election_master_status.labels(self.name).set(1 if self._leader else 0)

    def _become(self, leader: bool, *, stepping_down: bool = False) -> None:
        if leader != self._leader:
            self._leader = leader
            self._set_gauge()
            if leader:
                log.info("lease %s/%s: %s became the leader", self.namespace, self.name, self.identity)
            elif not stepping_down:
                log.warning("lease %s/%s: %s stopped leading", self.namespace, self.name, self.identity)

    async def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); True if we hold the lease afterwards."""
        timeout = self.renew_deadline if timeout is None else max(0.1, timeout)
        seconds = max(1, round(self.lease_duration))
        attempt = self._clock()  # the lease we may win runs, for others, from no earlier than now
        try:
            lease = await self.client.request("GET", LEASES.path(self.namespace, self.name), timeout=timeout)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("lease %s/%s: cannot read: %s", self.namespace, self.name, exc)
                return False
            record = next_record(None, self.identity, seconds, self._wall_clock())
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.to_spec(),
            }
            try:
                self._lease = await self.client.request("POST", LEASES.path(self.namespace), body=body, timeout=timeout)
            except ApiError as create_exc:
                log.info("lease %s/%s: cannot create: %s", self.namespace, self.name, create_exc)
                return False
            self._observation = Observation(record, self._clock())
            self._renewed_at = attempt
            return True

        self._lease = lease
        record = LeaseRecord.from_spec(lease.get("spec"))
        now = self._clock()
        self._observation = observe(self._observation, record, now)
        if not can_acquire(self._observation, self.identity, now):
            return False
        wanted = next_record(record, self.identity, seconds, self._wall_clock())
        body = {**lease, "spec": {**(lease.get("spec") or {}), **wanted.to_spec()}}
        try:
            self._lease = await self.client.request(
                "PUT", LEASES.path(self.namespace, self.name), body=body, timeout=timeout
            )
        except ApiError as exc:
            log.info("lease %s/%s: cannot update: %s", self.namespace, self.name, exc)
            return False
        self._observation = Observation(wanted, self._clock())
        self._renewed_at = attempt
        return True

    async def acquire(self) -> None:
        """Block until we lead (retrying every retry period, with jitter). Cancel to give up."""
        while True:
            if await self.try_acquire_or_renew():
                self._become(True)
                return
            if self.holder and self.holder != self.identity:
                log.debug("lease %s/%s: held by %s", self.namespace, self.name, self.holder)
            await asyncio.sleep(self._retry_delay())

    def _retry_delay(self) -> float:
        """client-go's jittered retry period, cut short to wake exactly when the lease expires."""
        delay = self.retry_period * (1 + random.random() * 1.2)
        observation = self._observation
        if observation is not None and observation.record.holder not in ("", self.identity):
            until_expiry = observation.at + observation.record.lease_duration - self._clock()
            if 0 <= until_expiry < delay:
                delay = until_expiry + 0.01
        return delay

    async def hold(self) -> None:
        """Renew every retry period; return when a renewal has failed for the renew deadline.

        Returns immediately if we do not lead. Cancel it to stop renewing (then ``release``).
        The deadline counts from when the last successful renewal was sent, as ``check_write``'s.
        """
        while self._leader:
            await asyncio.sleep(self.retry_period)
            remaining = self.write_deadline - self._clock()
            if remaining > 0 and await self.try_acquire_or_renew(timeout=remaining):
                continue
            if self._clock() >= self.write_deadline or self.holder not in ("", self.identity):
                log.warning(
                    "lease %s/%s: could not renew within %.0fs (holder now %r)",
                    self.namespace,
                    self.name,
                    self.renew_deadline,
                    self.holder,
                )
                self._become(False)

    async def release(self, timeout: float = 5.0) -> bool:
        """Step down: clear holderIdentity so a successor takes over without waiting for expiry."""
        if not self._leader or self._lease is None or self._observation is None:
            self._become(False)
            return False
        record = released_record(self._observation.record, self._wall_clock())
        body = {**self._lease, "spec": {**(self._lease.get("spec") or {}), **record.to_spec()}}
        self._become(False, stepping_down=True)
        try:
            self._lease = await self.client.request(
                "PUT", LEASES.path(self.namespace, self.name), body=body, timeout=timeout
            )
        except ApiError as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
        self._observation = Observation(record, self._clock())
        log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        return True
