"""The live FooHealths: recomputed when a Foo, Deployment, Pod or Event changes, with a watch history.

Reads the informer stores (``kube.informer.Store``) and is told about changes through informer
handlers. Each change that alters a FooHealth gets the next resourceVersion and goes into a
bounded history, so a watch can resume from a recent version; an older (or another replica's)
version answers 410 Expired and the client relists, as with any apiserver's watch cache.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fooapi import KIND
from fooapi.views import BY_DEPLOYMENT, Object, ObjectView, deployment_index, namespaced_key, pod_foo_index
from kube.informer import Store, object_key

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
        instance: int | None = None,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self.foos, self.deployments, self.pods, self.events = foos, deployments, pods, events
        self._healths: dict[str, Object] = {}
        self._history: deque[Change] = deque(maxlen=history)
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
        change = Change(self._counter, type_, old, new)
        self._history.append(change)
        for subscriber in list(self._subscribers):
            subscriber.offer(change)
            if subscriber.closed:
                self._subscribers.discard(subscriber)

    # ---- watching ------------------------------------------------------------------------------

    def subscribe(self, resource_version: str | None) -> tuple[list[Change], Subscription]:
        """Changes since ``resource_version`` (all objects as ADDED when None) and a live queue after them.

        Done without awaiting, so nothing can happen between the replay and the subscription.
        """
        if resource_version is None:
            replay = [Change(self._counter, "ADDED", None, h) for h in self.healths()]
        else:
            asked = int(resource_version)
            oldest = self._history[0].resource_version - 1 if self._history else self._counter
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
