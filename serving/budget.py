"""The in-flight memory budget: request bodies may only be read and parsed while their bytes fit.

Admission and conversion are unauthenticated by nature (any pod can call them), so the memory a
process spends on request bodies is bounded by design: every request reserves what it will cost
before it reads (raw bytes) and before it parses (the parsed tree, estimated from the body's
shape), and gives it back once answered. Requests that do not fit wait; a body that could never
fit is refused at once with a 413 Status.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from apimachinery.bodies import parse_json

from .cgroups import CGROUP_ROOT, MemoryCgroup, memory_cgroup
from .limits import give_back_freed_memory

MiB = 1024 * 1024

# What one serving process needs besides what the budget charges: an idle worker's own memory
# (interpreter, pydantic, prometheus, TLS) and what its connections may hold uncharged, times the
# connection cap (serving.reviews.server.ADMISSION_PORT): the head llhttp keeps, TLS state and the
# ciphertext it has read ahead, the write buffers a client that does not read leaves full, and
# what the allocator keeps between two trims. 48 was the sum of those at their worst on paper;
# the attack mix on the real node measured the process at its idle size plus its budget plus
# a margin under this (bench/README, "Figures moved from docstrings").
RESERVED_MIB = 80

# Upper bounds of what orjson.loads allocates, per body byte and per token, from CPython's object
# sizes: an empty dict or list costs 64 bytes (+8 for the slot that holds it); a value after ','
# is at most a short str (49 bytes + its text, counted per byte) or a float (24) plus its slot; a
# key before ':' is at most a str of its own (orjson shares only keys it has cached) plus a dict
# entry with the table's slack, and the first key of a dict also pays for the dict's key table
# (a dict with one key: 184 bytes). Checked against measured parses of hostile shapes
# (tests/unit/test_budget.py: `{},` allocates 24x its size, `{"a":"b"},` 24x, one-key dicts
# nested 1,000 deep 31x, `"a",` 14.5x, unique keys ...): the estimate is never below the
# measurement (closest: 1.08x, the deep one-key dicts). A real ConversionReview of Foos, whose
# keys orjson shares, parses to 4.0x its size and is estimated at 10.6x: the price of a bound that
# no body can beat. The chart README says how many stored Foos one review may carry at 256Mi.
COST_PER_BYTE = 1
COST_PER_CONTAINER = 96  # per '{' or '['
COST_PER_VALUE = 64  # per ','
COST_PER_KEY = 96  # per ':'
# parse_cost counts '{', '[' and ':' together: they must cost the same.
assert COST_PER_CONTAINER == COST_PER_KEY


# Every byte but ``{``, ``[``, ``,`` and ``:``: deleting them leaves what the costs count.
_NOT_STRUCTURAL = bytes(byte for byte in range(256) if byte not in b"{[,:")


def body_shape(body: bytes) -> tuple[int, int]:
    """(``parse_cost(body)``, how many arrays and objects ``body`` opens: a bound of its depth).

    One pass over the body keeps only its ``{``, ``[``, ``,`` and ``:`` (a few percent of a
    real review), and the counts are taken on that, not on the whole body twice (bench/README,
    "Figures moved from docstrings").
    """
    structural = body.translate(None, _NOT_STRUCTURAL)
    commas = structural.count(b",")
    opens = len(structural) - commas - structural.count(b":")
    cost = COST_PER_BYTE * len(body) + COST_PER_CONTAINER * (len(structural) - commas) + COST_PER_VALUE * commas
    return cost, opens


def parse_cost(body: bytes) -> int:
    """An upper bound of the memory ``orjson.loads(body)`` allocates, from its byte counts.

    Braces, commas and colons inside strings are counted too, which only overestimates.
    Hostile bodies are so refused without being parsed.
    """
    return body_shape(body)[0]


def parse_charge(body: bytes) -> tuple[int, int]:
    """What a body costs from its parse (apimachinery.bodies.parse_json) until its tree is freed,
    and how many arrays and objects it opens (parse_json measures no depth when that is few).

    The cost: the body itself, and the larger of its tree with the text orjson writes of it to
    measure its depth (``parse_cost`` covers both: tests/unit/test_budget.py) and the two working
    copies of the scan of a body orjson refuses (apimachinery.nesting: at most twice its size; a
    body of strings has a small tree).
    """
    cost, opens = body_shape(body)
    return len(body) + max(cost, 2 * len(body)), opens


# Bodies from this size on are parsed with the cyclic collector paused (and the admission port keeps
# it paused until the answer is written: serving.reviews.endpoint); below it, too few containers
# to be worth the pause's own cost.
PAUSE_GC_FROM = 64 * 1024


def parse_paused(body: bytes) -> Any:
    """``body`` parsed (apimachinery.bodies.parse_json), a large one with the cyclic collector paused.

    Parsing a large ConversionReview allocates hundreds of thousands of containers; the collector
    would walk them again and again, making the parse several times slower. JSON trees have
    no cycles, so reference counting frees them all; the collector runs again afterwards.
    """
    if len(body) < PAUSE_GC_FROM or not gc.isenabled():
        return parse_json(body)
    gc.disable()
    try:
        return parse_json(body)
    finally:
        gc.enable()


# The least body budget `--workers auto` leaves each worker: an update of two 3 MiB objects
# (18 MiB charged at most) and a ConversionReview of a few thousand Foos fit.
WORKER_BUDGET_MIB = 64

# What a pod holds once, shared by its workers, when its processes talk to kube-apiserver
# (`--metrics-secure`'s TokenReviews, `--cert-rotation`): kubernetes_asyncio's client and its
# models, imported by the supervisor before it forks (webhook.command.import_what_workers_share).
# Imported after the fork instead, each worker held it again, more than RESERVED_MIB.
CLIENT_MIB = 48


def pod_headroom_mib(limit_mib: int) -> int:
    """What of the container's limit no serving process plans for: the supervisor of `--workers N`,
    the allocator's fragmentation after large bodies, the kernel's socket buffers, and the margin
    that keeps a pod whose every budget is full at three quarters of its limit. With an eighth,
    two workers at their budgets took the chart's pod to within a few MiB of its limit on the real
    node (issue 25); with none, one worker at its budget plus anything unplanned put it over, and
    the OOM killer took every worker (bench/README, "Figures moved from docstrings")."""
    return max(limit_mib // 4, 16)


def budget_for_memory_limit(
    limit_mib: int, processes: int = 1, *, shared_mib: int = 0, reserved_mib: int = RESERVED_MIB
) -> int:
    """What callers may make each of ``processes`` serving processes hold (bytes) in a container
    that may use ``limit_mib`` MiB, ``shared_mib`` of it held once for all of them (CLIENT_MIB):
    what is left after the pod's headroom, the shared part and each one's own ``reserved_mib``,
    split evenly; at least 16 MiB. The one rule of every server: the webhook at 256 MiB, 112 MiB
    for one process, 64 with the client; insights (insights.api.INSIGHTS_RESERVED_MIB), 64."""
    usable = limit_mib - pod_headroom_mib(limit_mib) - shared_mib
    return max((usable - reserved_mib * processes) // processes, 16) * MiB


def processes_memory_feeds(limit_mib: int, *, shared_mib: int = 0) -> int:
    """How many serving processes ``limit_mib`` MiB holds, each with its needs and WORKER_BUDGET_MIB,
    beside ``shared_mib`` held once."""
    usable = limit_mib - pod_headroom_mib(limit_mib) - shared_mib
    return max(1, usable // (RESERVED_MIB + WORKER_BUDGET_MIB))


# How long a large charge that fits the budget but not the pod's memory waits before it looks again:
# what holds that memory (answers being written, freed pages not yet given back) goes on its own,
# and no release of the budget says when.
POD_POLL_SECONDS = 0.05
# At most this often a charge refused for the pod's memory first gives freed heap pages back.
POD_TRIM_SECONDS = 1.0


class PodMemory:
    """The pod's memory as its cgroup counts it, against the ceiling the budget plans under.

    The budget counts what requests hold; the cgroup counts everything: the other workers, what
    the allocator keeps after a burst, buffers no charge covers. Before a large charge is granted
    the pod's working set must leave room for it under the ceiling (the limit less its headroom),
    so what the plan missed makes large bodies wait (then time out) instead of taking the pod
    past its limit. Under the webhook's attack mix on one process with a 144 MiB budget, the
    cgroup reached its 256 MiB and the process was OOM-killed in two of four runs
    (bench/README.md, "Attack mix"). Readings are kept ``max_age`` seconds: a few per body.
    """

    def __init__(self, cgroup: MemoryCgroup, ceiling: int, *, max_age: float = 0.01) -> None:
        self.cgroup = cgroup
        self.ceiling = ceiling
        self.max_age = max_age
        self._read_at = -1.0
        self._room = ceiling
        self._trimmed_at = -POD_TRIM_SECONDS

    @classmethod
    def of_this_process(
        cls, limit_mib: int, root: Path = CGROUP_ROOT, proc_self_cgroup: str | None = None
    ) -> PodMemory | None:
        """The check for a process whose cgroup is the container ``limit_mib`` was planned for;
        None where its cgroup has no limit or a larger one (a shell's or a test runner's
        cgroup, which holds more than this pod), or cannot be read."""
        cgroup = memory_cgroup(root, proc_self_cgroup)
        limit = cgroup.limit() if cgroup is not None else None
        if cgroup is None or limit is None or limit > (limit_mib + 1) * MiB:
            return None
        return cls(cgroup, limit - pod_headroom_mib(limit // MiB) * MiB)

    def room(self) -> int:
        """Bytes the pod may still grow by under the ceiling (as of at most ``max_age`` ago)."""
        now = time.monotonic()
        if now - self._read_at >= self.max_age:
            working_set = self.cgroup.working_set()
            self._room = self.ceiling if working_set is None else self.ceiling - working_set
            self._read_at = now
        return self._room

    def has_room(self, amount: int) -> bool:
        if amount <= self.room():
            return True
        now = time.monotonic()
        if now - self._trimmed_at >= POD_TRIM_SECONDS:  # what was freed may still count
            self._trimmed_at = now
            # In a thread (serving.limits): a trim can take hundreds of ms, every probe's wait too
            # on the loop. The charge looks again after POD_POLL_SECONDS.
            asyncio.get_running_loop().run_in_executor(None, give_back_freed_memory)
            self._read_at = -1.0
        return False


class NeverFits(Exception):
    """The reservation is larger than the budget could ever grant."""

    def __init__(self, wanted: int, largest: int) -> None:
        super().__init__(f"needs {wanted} bytes of a budget that grants at most {largest}")
        self.wanted = wanted
        self.largest = largest


class ByteBudget:
    """An async semaphore counted in bytes.

    A request takes what fits; nothing queues in order, so a small review never waits behind a
    large body that is waiting for room. The last ``headroom`` bytes are kept for small charges
    (every real admission review is a few KiB), so a flood of large bodies cannot starve them.
    """

    def __init__(
        self, capacity: int, *, headroom: int | None = None, small: int | None = None, pod: PodMemory | None = None
    ) -> None:
        self.capacity = capacity
        self.pod = pod
        self.headroom = capacity // 32 if headroom is None else headroom
        self.small = max(self.headroom // 8, 1) if small is None else small
        self.in_use = 0
        self.peak = 0  # the most ever held at once: what tests and the flood bench check
        self._waiters: list[asyncio.Future[None]] = []

    def largest(self, wanted: int) -> int:
        """The most a charge of this size may hold: small ones may use the headroom too."""
        return self.capacity if wanted <= self.small else self.capacity - self.headroom

    def _fits(self, extra: int, total: int) -> bool:
        return self.in_use + extra <= self.largest(total) and self._pod_has_room(extra, total)

    def _pod_has_room(self, extra: int, total: int) -> bool:
        # Small charges (every real admission review) never read the cgroup: they are the fast path.
        return self.pod is None or total <= self.small or self.pod.has_room(extra)

    async def _take(self, extra: int, total: int) -> None:
        if total > self.largest(total):
            raise NeverFits(total, self.largest(total))
        while not self._fits(extra, total):
            if self.in_use + extra <= self.largest(total):  # the budget has room, the pod not yet
                await asyncio.sleep(POD_POLL_SECONDS)
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self._add(extra)

    def _add(self, amount: int) -> None:
        self.in_use += amount
        if self.in_use > self.peak:
            self.peak = self.in_use

    def _give(self, amount: int) -> None:
        self.in_use -= amount
        if not self._waiters:  # the usual case: a new empty list per review was most of its cost
            return
        # Every waiter looks again: any of them may fit now, whatever its place in the line.
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    @asynccontextmanager
    async def reserve(self, amount: int) -> AsyncIterator[Reservation]:
        """Hold ``amount`` bytes (waiting for room) until the block ends; NeverFits if it never could."""
        reservation = Reservation(self)
        await reservation.resize(amount)
        try:
            yield reservation
        finally:
            reservation.release()


class Reservation:
    """Bytes held in a ByteBudget by one request; grows (waiting) or shrinks as it learns its cost."""

    __slots__ = ("budget", "held")  # one per review

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.held = 0

    async def resize(self, amount: int) -> None:
        if amount == self.held:
            return
        if amount < self.held:
            self.budget._give(self.held - amount)
        else:
            await self.budget._take(amount - self.held, amount)
        self.held = amount

    def try_resize(self, amount: int) -> bool:
        """Grow without waiting (a body still being read must not sit on its bytes); False if no room."""
        if amount > self.held and not self.budget._fits(amount - self.held, amount):
            return False
        if amount <= self.held:
            self.budget._give(self.held - amount)
        else:
            self.budget._add(amount - self.held)
        self.held = amount
        return True

    def force(self, amount: int) -> None:
        """Hold ``amount`` bytes that are held already, room or not (bytes a read brought, an
        answer made): the budget's count stays true, and other charges wait until they go."""
        if amount < self.held:
            self.budget._give(self.held - amount)
        else:
            self.budget._add(amount - self.held)
        self.held = amount

    def release(self) -> None:
        if self.held:
            self.budget._give(self.held)
            self.held = 0
