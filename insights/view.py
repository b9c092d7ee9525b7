"""The live FooHealths: recomputed when a Foo, Deployment, Pod or Event changes, with a history.

Reads the informer stores (``kube.informer.Store``) and is told about changes through informer
handlers. Each change that alters a FooHealth gets the next resourceVersion and goes into a
bounded history, so a watch can resume from a recent version and a list can be answered as it
was at a recent version (``snapshot``: resourceVersionMatch=Exact, and every page of a paged
list). An older (or another replica's) version answers 410 Expired and the client relists, as
with any apiserver's watch cache.

The history is held by count (``history``), by age (``history_window``) and by bytes: each
change is charged to the byte budget for the state it replaced (the only thing it alone keeps
alive); past a quarter of the budget, or when the budget has no room, the oldest changes go first.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from apimachinery.objects import Object, ObjectView, namespaced_key
from fooapi import KIND
from fooapi.views import BY_DEPLOYMENT, deployment_index, pod_foo_index
from kube.informer import Store, object_key
from kube.ratelimit import Clock
from serving.budget import ByteBudget, Reservation, parse_cost

from .health import foo_health

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

# Index names on the stores the view reads.
# Index names on the Pod and Event stores (the Foo store's, BY_DEPLOYMENT, is fooapi's).
BY_FOO = "foo"  # Pods by the Foo that labelled them; Events by "<ns>/<involvedObject.name>" for kind Foo


def event_foo_index(event: Object) -> list[str]:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    if not isinstance(involved, dict) or involved.get("kind") != KIND or not involved.get("name"):
        return []
    namespace = involved.get("namespace") or ObjectView(event).namespace
    return [namespaced_key(namespace, involved["name"])]


INDEXERS: dict[str, dict[str, Callable[[Object], list[str]]]] = {
    "foos": {BY_DEPLOYMENT: deployment_index},
    "deployments": {},
    "pods": {BY_FOO: pod_foo_index},
    "events": {BY_FOO: event_foo_index},
}


@dataclass(frozen=True)
class Change:
    """One FooHealth change. ``old`` is None for ADDED; for DELETED ``new`` is the last state at
    the deletion's resourceVersion (what a DELETED watch event carries)."""

    resource_version: int
    type: EventType
    old: Object | None
    new: Object
    at: float = 0.0  # when (the view's clock), for the history's window
    cost: int = 0  # bytes charged to the budget while the history holds it

    @property
    def key(self) -> str:
        return object_key(self.new)


# The history may hold at most this fraction (1/HISTORY_SHARE) of the budget, so that requests
# (FooReview bodies, answers) always find most of it free.
HISTORY_SHARE = 4

# What one history entry costs besides the state it replaced: the Change, its slot, the DELETED copy.
CHANGE_OVERHEAD = 512


def change_cost(old: Object | None) -> int:
    """An upper bound of the memory the replaced state holds (its parse cost, as for a body)."""
    return CHANGE_OVERHEAD + (parse_cost(orjson.dumps(old)) if old is not None else 0)


class Expired(Exception):
    """The asked-for resourceVersion is not in the history (too old, or from another replica)."""

    def __init__(self, asked: str, oldest: int) -> None:
        super().__init__(f"too old resource version: {asked} ({oldest})")


@dataclass(eq=False)
class Subscription:
    """One watcher's queue of changes; closed (``None`` queued) on overflow or shutdown."""

    queue: asyncio.Queue[Change | None] = field(default_factory=lambda: asyncio.Queue(maxsize=4096))
    closed: bool = False
    overflowed: bool = False

    def offer(self, change: Change | None) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(change)
        except asyncio.QueueFull:
            self.overflowed = True
            self.close()
            return
        if change is None:
            self.closed = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            while self.queue.full():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


def _without_version(health: Object) -> Object:
    meta = {k: v for k, v in health["metadata"].items() if k != "resourceVersion"}
    return {**health, "metadata": meta}


class HealthView:
    def __init__(
        self,
        foos: Store,
        deployments: Store,
        pods: Store,
        events: Store,
        *,
        history: int = 1024,
        history_window: float = 300.0,
        budget: ByteBudget | None = None,
        clock: Clock = time.monotonic,
        instance: int | None = None,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self.foos, self.deployments, self.pods, self.events = foos, deployments, pods, events
        self._healths: dict[str, Object] = {}
        self._history: deque[Change] = deque()
        self.history_limit = history
        self.history_window = history_window
        self._clock = clock
        # With no budget of its own (tests), the history is bounded by count and age alone.
        self._reservation = Reservation(budget or ByteBudget(1 << 62))
        self._history_bytes = 0
        self._changed = asyncio.Event()
        self._subscribers: set[Subscription] = set()
        self._synced = synced
        # resourceVersions are "<instance><counter>": another replica's (or an earlier process's)
        # version never falls inside this one's history, so resuming from it relists.
        self._base = (instance if instance is not None else random.randint(10_000, 99_999)) * 10**12
        self._counter = self._base
        for key in foos.keys():
            self._recompute(key)

    @classmethod
    def empty(cls, **kwargs: Any) -> HealthView:
        """A view over fresh stores with the indexes it needs (tests, and before informers exist)."""
        return cls(*(Store(INDEXERS[name]) for name in ("foos", "deployments", "pods", "events")), **kwargs)

    # ---- reading -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced()

    @property
    def resource_version(self) -> str:
        return str(self._counter)

    @property
    def version(self) -> int:
        return self._counter

    @property
    def oldest(self) -> int:
        """The oldest version whose state ``snapshot`` can still give (the state before the first change held)."""
        self._trim()
        return self._history[0].resource_version - 1 if self._history else self._counter

    @property
    def history_bytes(self) -> int:
        """What the history holds, as charged to the budget."""
        return self._history_bytes

    def snapshot(self, resource_version: int) -> Mapping[str, Object] | None:
        """The FooHealths by key as they were at ``resource_version`` (at most the current one),
        or None when that state is no longer held: the current state with the newer changes undone.
        Read it before awaiting anything: at the current version it is the live state itself."""
        if not self.oldest <= resource_version <= self._counter:
            return None
        if resource_version == self._counter:
            return self._healths
        state = dict(self._healths)
        for change in reversed(self._history):
            if change.resource_version <= resource_version:
                break
            if change.old is None:
                state.pop(change.key, None)
            else:
                state[change.key] = change.old
        return state

    async def wait_for(self, resource_version: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the view has reached ``resource_version``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._counter < resource_version:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return self._counter >= resource_version
        return True

    @property
    def current(self) -> Mapping[str, Object]:
        """The FooHealths by key ("<namespace>/<name>"), as they are now; read-only."""
        return self._healths

    def get(self, namespace: str, name: str) -> Object | None:
        return self._healths.get(f"{namespace}/{name}")

    def healths(self, namespace: str | None = None) -> list[Object]:
        """FooHealths sorted by namespace then name (the order `kubectl get` shows)."""
        keys = sorted(self._healths)
        if namespace:
            prefix = namespace + "/"
            keys = [k for k in keys if k.startswith(prefix)]
        return [self._healths[k] for k in keys]

    # ---- being told what changed ------------------------------------------------------------------

    def handlers(
        self, kind: str
    ) -> tuple[Callable[[Object], None], Callable[[Object, Object], None], Callable[[Object], None]]:
        """(on_add, on_update, on_delete) for the informer of ``kind`` (foos, deployments, pods, events)."""
        affected = {
            "foos": self._foo_keys,
            "deployments": self._deployment_foo_keys,
            "pods": self._pod_foo_keys,
            "events": self._event_foo_keys,
        }[kind]

        def changed(*objects: Object) -> None:
            keys: set[str] = set()
            for obj in objects:
                keys.update(affected(obj))
            for key in sorted(keys):
                self._recompute(key)

        return changed, changed, changed

    def _foo_keys(self, foo: Object) -> list[str]:
        return [object_key(foo)]

    def _deployment_foo_keys(self, deployment: Object) -> set[str]:
        return self.foos.index_keys(BY_DEPLOYMENT, object_key(deployment))

    def _pod_foo_keys(self, pod: Object) -> list[str]:
        return pod_foo_index(pod)

    def _event_foo_keys(self, event: Object) -> list[str]:
        return event_foo_index(event)

    def _recompute(self, key: str) -> None:
        old = self._healths.get(key)
        foo = self.foos.get(key)
        if foo is None:
            if old is not None:
                del self._healths[key]
                self._publish("DELETED", old, {**old, "metadata": {**old["metadata"], "resourceVersion": self._next()}})
            return
        deployment_key = next(iter(deployment_index(foo)), None)
        deployment = self.deployments.get(deployment_key) if deployment_key else None
        health = foo_health(foo, deployment, self.pods.by_index(BY_FOO, key), self.events.by_index(BY_FOO, key))
        if old is not None and _without_version(old) == health:
            return
        health["metadata"]["resourceVersion"] = self._next()
        self._healths[key] = health
        self._publish("ADDED" if old is None else "MODIFIED", old, health)

    def _next(self) -> str:
        self._counter += 1
        return str(self._counter)

    def _publish(self, type_: EventType, old: Object | None, new: Object) -> None:
        change = Change(self._counter, type_, old, new, self._clock(), change_cost(old))
        self._history.append(change)
        self._history_bytes += change.cost
        self._trim()
        self._changed.set()
        self._changed = asyncio.Event()
        for subscriber in list(self._subscribers):
            subscriber.offer(change)
            if subscriber.closed:
                self._subscribers.discard(subscriber)

    def _trim(self) -> None:
        """Drop the oldest changes past the count, past the window, or while the budget has no room."""
        too_old = self._clock() - self.history_window
        history = self._history
        while history and (
            len(history) > self.history_limit
            or history[0].at < too_old
            or self._history_bytes > self._reservation.budget.capacity // HISTORY_SHARE
            or not self._reservation.try_resize(self._history_bytes)
        ):
            self._history_bytes -= history.popleft().cost
        self._reservation.try_resize(self._history_bytes)  # gives back what was dropped

    # ---- watching ------------------------------------------------------------------------------

    def subscribe(self, resource_version: str | None) -> tuple[list[Change], Subscription]:
        """Changes since ``resource_version`` (all objects as ADDED when None) and a live queue after them.

        Done without awaiting, so nothing can happen between the replay and the subscription.
        """
        if resource_version is None:
            replay = [Change(self._counter, "ADDED", None, h) for h in self.healths()]
        else:
            asked = int(resource_version)
            oldest = self.oldest
            if not oldest <= asked <= self._counter:
                raise Expired(resource_version, oldest)
            replay = [c for c in self._history if c.resource_version > asked]
        subscription = Subscription()
        self._subscribers.add(subscription)
        return replay, subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)
        subscription.close()

    def close(self) -> None:
        """End every watch (shutdown): each watcher sees its queue close and returns."""
        for subscriber in list(self._subscribers):
            subscriber.close()
        self._subscribers.clear()
