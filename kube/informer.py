"""List + watch one resource into an indexed local cache and tell handlers what changed.

client-go's SharedIndexInformer, dict-based: list (paged) then watch with bookmarks from the
last resourceVersion; a closed watch resumes where it stopped, 410 Gone relists and reconciles
the cache against the fresh list (emitting adds, updates and deletes), other errors back off.
Handlers are plain callbacks on the event loop and must be quick (enqueue a key, nothing more).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from apimachinery.objects import Object
from apimachinery.resources import Resource

from .client import ApiError, KubeClient
from .metrics import Metrics

log = logging.getLogger(__name__)

IndexFunc = Callable[[Object], Iterable[str]]
AddHandler = Callable[[Object], None]
UpdateHandler = Callable[[Object, Object], None]
DeleteHandler = Callable[[Object], None]


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (client-go's MetaNamespaceKey)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def split_key(key: str) -> tuple[str | None, str]:
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, key)


def compact(value: Any) -> Any:
    """The same JSON value with its keys and short strings interned.

    Ten thousand cached objects repeat the same keys and many values ("True", a namespace, a
    reason); sharing one copy of each roughly halves a dict-based cache. Use after a projection.
    """
    if isinstance(value, dict):
        return {sys.intern(k): compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    if isinstance(value, str) and len(value) <= 64:
        return sys.intern(value)
    return value


def strip_managed_fields(obj: Object) -> Object:
    """Default transform: managedFields are half of an object's size and no controller reads them."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Store:
    """The informer's cache: objects by key, plus secondary indexes computed by index functions.

    ``capacities`` bounds how many objects one value of an index may gather (Events per Foo):
    putting one more drops the one put longest ago, so a flood about one thing costs that thing
    its oldest entries and nothing else.
    """

    def __init__(
        self, indexers: Mapping[str, IndexFunc] | None = None, capacities: Mapping[str, int] | None = None
    ) -> None:
        self._items: dict[str, Object] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        # Each value's keys in the order they were put (a dict as an ordered set).
        self._indices: dict[str, dict[str, dict[str, None]]] = {name: {} for name in self._indexers}
        self._capacities = dict(capacities or {})
        unknown = set(self._capacities) - set(self._indexers)
        if unknown:
            raise ValueError(f"capacities for indexes that do not exist: {sorted(unknown)}")
        self.dropped = 0  # objects dropped to keep an index value within its capacity

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str) -> Object | None:
        """The cached object; treat it as read-only (copy before changing anything)."""
        return self._items.get(key)

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def list(self) -> builtins.list[Object]:
        return list(self._items.values())

    def index_keys(self, index: str, value: str) -> set[str]:
        return set(self._indices[index].get(value, ()))

    def by_index(self, index: str, value: str) -> builtins.list[Object]:
        return [self._items[key] for key in self._indices[index].get(value, ())]

    def _unindex(self, key: str, obj: Object) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[value]

    def _index(self, key: str, obj: Object) -> builtins.list[str]:
        """Index ``obj``; answers the keys past an index value's capacity, oldest first."""
        over: builtins.list[str] = []
        for name, func in self._indexers.items():
            index = self._indices[name]
            capacity = self._capacities.get(name)
            for value in func(obj):
                keys = index.setdefault(value, {})
                keys[key] = None
                if capacity is not None and len(keys) > capacity:
                    over.extend(list(keys)[: len(keys) - capacity])
        return over

    def put(self, key: str, obj: Object) -> Object | None:
        """Insert or replace; answers the previous object."""
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        for oldest in self._index(key, obj):
            if self.remove(oldest) is not None:
                self.dropped += 1
        return old

    def remove(self, key: str) -> Object | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Backoff:
    """Exponential backoff with jitter between failed list/watch attempts (client-go: 800 ms → 30 s)."""

    def __init__(self, initial: float = 0.8, maximum: float = 30.0, factor: float = 2.0, jitter: float = 1.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._current = initial

    def next(self) -> float:
        delay = self._current
        self._current = min(self.maximum, self._current * self.factor)
        return delay * (1 + random.random() * self.jitter) if self.jitter else delay

    def reset(self) -> None:
        self._current = self.initial


class Informer:
    """Keeps ``store`` in step with the apiserver for one resource (optionally one namespace)."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        capacities: Mapping[str, int] | None = None,
        transform: Callable[[Object], Object] | None = strip_managed_fields,
        page_size: int = 500,
        watch_timeout: int = 300,
        list_timeout: float = 60.0,
        resync_period: float | None = None,
        backoff: Backoff | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store = Store(indexers, capacities)
        self.transform = transform
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.list_timeout = list_timeout
        self.resync_period = resync_period
        self.backoff = backoff or Backoff()
        self.metrics = metrics
        self.name = resource.plural if resource.group == "" else f"{resource.plural}.{resource.group}"
        self.resource_version = ""
        self.lists = 0  # how many full lists this informer made (initial + relists)
        self._handlers: list[tuple[AddHandler | None, UpdateHandler | None, DeleteHandler | None]] = []
        self._synced = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- public surface ----------------------------------------------------------------------

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Callbacks for changes; a handler added after sync is told about every cached object."""
        self._handlers.append((on_add, on_update, on_delete))
        if self.has_synced and on_add is not None:
            for obj in self.store.list():
                self._call(on_add, obj)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache; False if ``timeout`` passed first."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def start(self) -> None:
        """Start listing and watching in background tasks this informer owns (idempotent)."""
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self.run(), name=f"informer:{self.name}"))
        if self.resync_period:
            self._tasks.append(asyncio.create_task(self._resync_loop(), name=f"resync:{self.name}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()

    # ---- list and watch ----------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever; relist on 410 Gone; back off on errors."""
        need_list = True
        expired_in_a_row = 0
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    self.backoff.reset()
                started = time.monotonic()
                delivered = await self._watch()
            except ApiError as exc:
                if exc.gone:
                    log.info("informer %s: resourceVersion %s expired, relisting", self.name, self.resource_version)
                    self._count_restart("expired")
                    need_list = True
                    expired_in_a_row += 1
                    if expired_in_a_row > 1:  # a fresh list expiring at once: do not spin on it
                        await asyncio.sleep(self.backoff.next())
                    continue
                log.warning("informer %s: %s", self.name, exc)
                self._count_restart("error")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("informer %s: unexpected failure, relisting", self.name)
                self._count_restart("error")
                need_list = True
            else:
                expired_in_a_row = 0
                self._count_restart("closed")
                if delivered or time.monotonic() - started > 1.0:
                    self.backoff.reset()
                    continue  # the server ended a healthy watch (its timeout): resume at once
            await asyncio.sleep(self.backoff.next())

    def _count_restart(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.watch_restarts_total.labels(self.name, reason).inc()

    def _prepare(self, obj: Object) -> Object:
        obj.setdefault("apiVersion", self.resource.api_version)
        if self.resource.kind:
            obj.setdefault("kind", self.resource.kind)
        return self.transform(obj) if self.transform is not None else obj

    async def _list(self) -> None:
        """A paged list, each object projected (``transform``) as it is decoded: a page of large
        objects is never held whole, so a relist peaks where the cache itself does."""
        fresh: dict[str, Object] = {}
        continue_token: str | None = None
        while True:
            items, meta = await self.client.list_page(
                self.resource,
                self._prepare,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_=continue_token,
                timeout=self.list_timeout,
            )
            for obj in items:
                fresh[object_key(obj)] = obj
            continue_token = meta.get("continue") or None
            if not continue_token:
                self.resource_version = str(meta.get("resourceVersion") or "")
                break
        self.lists += 1
        self._replace(fresh)
        if not self.has_synced:
            log.info(
                "informer %s: synced %d objects at resourceVersion %s", self.name, len(fresh), self.resource_version
            )
        self._synced.set()

    def _replace(self, fresh: dict[str, Object]) -> None:
        """Make the cache equal ``fresh``, telling handlers about each difference."""
        for key in self.store.keys():
            if key not in fresh:
                old = self.store.remove(key)
                if old is not None:
                    self._notify_delete(old)
        for key, obj in fresh.items():
            old = self.store.put(key, obj)
            if old is None:
                self._notify_add(obj)
            elif _resource_version(old) != _resource_version(obj):
                self._notify_update(old, obj)

    async def _watch(self) -> bool:
        """One watch until the server closes it; True if it delivered anything."""
        delivered = False
        timeout = random.randint(self.watch_timeout, 2 * self.watch_timeout)
        async with self.client.watch(
            self.resource,
            namespace=self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
        ) as events:
            async for event in events:
                delivered = True
                self._apply(event)
        return delivered

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            code = obj.get("code")
            raise ApiError(
                int(code) if isinstance(code, int) else 500,
                obj,
                method="WATCH",
                path=self.resource.path(self.namespace),
            )
        rv = _resource_version(obj)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        obj = self._prepare(obj)
        key = object_key(obj)
        if kind in ("ADDED", "MODIFIED"):
            old = self.store.put(key, obj)
            if old is None:
                self._notify_add(obj)
            else:
                self._notify_update(old, obj)
        elif kind == "DELETED":
            self.store.remove(key)
            self._notify_delete(obj)
        if rv:
            self.resource_version = rv

    # ---- handlers ----------------------------------------------------------------------------

    def _call(self, handler: Callable[..., None], *args: Object) -> None:
        try:
            handler(*args)
        except Exception:
            log.exception("informer %s: handler %r failed", self.name, handler)

    def _notify_add(self, obj: Object) -> None:
        for on_add, _, _ in self._handlers:
            if on_add is not None:
                self._call(on_add, obj)

    def _notify_update(self, old: Object, new: Object) -> None:
        for _, on_update, _ in self._handlers:
            if on_update is not None:
                self._call(on_update, old, new)

    def _notify_delete(self, obj: Object) -> None:
        for _, _, on_delete in self._handlers:
            if on_delete is not None:
                self._call(on_delete, obj)

    async def _resync_loop(self) -> None:
        """Re-deliver every cached object as an update now and then (client-go's resync)."""
        assert self.resync_period
        while True:
            await asyncio.sleep(self.resync_period)
            if self.has_synced:
                for obj in self.store.list():
                    self._notify_update(obj, obj)
