"""kube.informer (list + watch into an indexed cache) and kube.recent, against a scripted apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from apimachinery.objects import Object, ObjectView
from kube.client import DEPLOYMENTS, ApiError
from kube.informer import Backoff, Informer, Store, object_key
from kube.recent import RecentWrites


def controller_uid_index(obj: Object) -> list[str]:
    """An index function as a caller writes one: the uid of the object's controller."""
    ref = ObjectView(obj).controller_reference
    return [str(ref["uid"])] if ref and ref.get("uid") else []


def namespace_index(obj: Object) -> list[str]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [namespace] if namespace else []


def obj(name: str, rv: int, namespace: str = "ns", owner: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": str(rv), "managedFields": [{}]}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "Foo", "name": "f"}]
    return {"metadata": meta, **extra}


class ScriptedApi:
    """Serves lists from ``objects`` (paged) and watches from queues the test feeds."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.list_rv = "100"
        self.lists: list[dict[str, Any]] = []
        self.watches: list[str | None] = []
        self.streams: asyncio.Queue[asyncio.Queue[Any]] = asyncio.Queue()
        self.expired: set[str] = set()
        self.fail_lists = 0

    async def list_page(self, resource: Any, project: Any, **query: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.lists.append(query)
        if self.fail_lists:
            self.fail_lists -= 1
            raise ApiError(503, {"reason": "ServiceUnavailable"})
        items = sorted(self.objects.values(), key=object_key)
        start = int(query.get("continue_") or 0)
        page = items[start : start + query["limit"]]
        more = start + query["limit"] < len(items)
        meta = {"continue": str(start + query["limit"])} if more else {"resourceVersion": self.list_rv}
        return [project(dict(item, metadata=dict(item["metadata"]))) for item in page], meta

    @asynccontextmanager
    async def watch(
        self, resource: Any, *, resource_version: str | None = None, **_: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        self.watches.append(resource_version)
        if resource_version in self.expired:
            raise ApiError(410, {"reason": "Expired", "code": 410})
        stream = await self.streams.get()

        async def events() -> AsyncIterator[dict[str, Any]]:
            while True:
                item = await stream.get()
                if item is None:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item

        yield events()

    def feed(self, *events: Any) -> asyncio.Queue[Any]:
        stream: asyncio.Queue[Any] = asyncio.Queue()
        for event in events:
            stream.put_nowait(event)
        self.streams.put_nowait(stream)
        return stream


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def add(self, o: dict[str, Any]) -> None:
        self.seen.append(("add", o["metadata"]["name"]))

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen.append(("update", new["metadata"]["name"]))

    def delete(self, o: dict[str, Any]) -> None:
        self.seen.append(("delete", o["metadata"]["name"]))


async def until(predicate: Any, timeout: float = 2.0) -> None:
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(wait(), timeout)


@pytest.fixture
def api() -> ScriptedApi:
    return ScriptedApi()


def informer(api: ScriptedApi, **kwargs: Any) -> tuple[Informer, Recorder]:
    inf = Informer(api, DEPLOYMENTS, page_size=2, backoff=Backoff(0.01, 0.05), **kwargs)  # type: ignore[arg-type]
    rec = Recorder()
    inf.add_handler(rec.add, rec.update, rec.delete)
    return inf, rec


async def test_initial_list_is_paged_fills_the_cache_and_announces_adds(api: ScriptedApi) -> None:
    for i in range(5):
        api.objects[f"ns/d{i}"] = obj(f"d{i}", 10 + i)
    inf, rec = informer(api)
    inf.start()
    try:
        assert await inf.wait_for_sync(timeout=2)
        assert len(api.lists) == 3  # 5 objects, pages of 2
        assert sorted(inf.store.keys()) == [f"ns/d{i}" for i in range(5)]
        assert sorted(rec.seen) == [("add", f"d{i}") for i in range(5)]
        cached = inf.store.get("ns/d0")
        assert cached is not None
        assert cached["apiVersion"] == "apps/v1" and cached["kind"] == "Deployment"
        assert "managedFields" not in cached["metadata"]  # stripped to save memory
        assert inf.resource_version == "100"
    finally:
        await inf.stop()


async def test_watch_resumes_from_the_last_resource_version_including_bookmarks(api: ScriptedApi) -> None:
    inf, rec = informer(api)
    api.feed(
        {"type": "ADDED", "object": obj("a", 101)},
        {"type": "MODIFIED", "object": obj("a", 102)},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}},
        None,  # the server closes the watch
    )
    second = api.feed({"type": "DELETED", "object": obj("a", 151)})
    inf.start()
    try:
        await until(lambda: ("delete", "a") in rec.seen)
        assert rec.seen == [("add", "a"), ("update", "a"), ("delete", "a")]
        assert api.watches[:2] == ["100", "150"]
        assert len(api.lists) == 1  # a closed watch is resumed, not relisted
        assert inf.store.get("ns/a") is None
        second.put_nowait(None)
    finally:
        await inf.stop()


async def test_gone_relists_and_reconciles_the_cache_against_the_fresh_list(api: ScriptedApi) -> None:
    api.objects = {"ns/keep": obj("keep", 1), "ns/change": obj("change", 2), "ns/vanish": obj("vanish", 3)}
    inf, rec = informer(api)
    inf.start()
    try:
        await inf.wait_for_sync(timeout=2)
        rec.seen.clear()
        # Meanwhile, on the server: one changed, one deleted, one created, and our RV expired.
        api.objects = {"ns/keep": obj("keep", 1), "ns/change": obj("change", 20), "ns/new": obj("new", 21)}
        api.list_rv = "200"
        api.feed(
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
        )
        await until(lambda: len(api.lists) >= 2 and len(rec.seen) == 3)
        assert sorted(rec.seen) == [("add", "new"), ("delete", "vanish"), ("update", "change")]
        assert sorted(inf.store.keys()) == ["ns/change", "ns/keep", "ns/new"]
        assert inf.resource_version == "200"
    finally:
        await inf.stop()


async def test_a_410_answer_to_the_watch_request_also_relists(api: ScriptedApi) -> None:
    api.expired.add("100")
    inf, _ = informer(api)
    inf.start()
    try:
        await until(lambda: len(api.lists) >= 2)
    finally:
        await inf.stop()


async def test_errors_back_off_and_keep_the_cache(api: ScriptedApi) -> None:
    api.objects = {"ns/a": obj("a", 1)}
    api.fail_lists = 2
    inf, _ = informer(api)
    inf.start()
    try:
        assert await inf.wait_for_sync(timeout=2)
        assert len(api.lists) == 3
        api.feed(ApiError(0, {"message": "connection reset"}))
        api.feed(None)
        await until(lambda: len(api.watches) >= 3)
        assert api.watches[:2] == ["100", "100"]  # resumed from the same point, no relist
        assert len(api.lists) == 3
        assert inf.store.get("ns/a") is not None
    finally:
        await inf.stop()


async def test_a_handler_added_after_sync_hears_about_every_cached_object(api: ScriptedApi) -> None:
    api.objects = {"ns/a": obj("a", 1), "ns/b": obj("b", 2)}
    inf, _ = informer(api)
    inf.start()
    try:
        await inf.wait_for_sync(timeout=2)
        late = Recorder()
        inf.add_handler(late.add)
        assert sorted(late.seen) == [("add", "a"), ("add", "b")]
    finally:
        await inf.stop()


async def test_a_failing_handler_does_not_stop_the_others(api: ScriptedApi) -> None:
    api.objects = {"ns/a": obj("a", 1)}
    inf = Informer(api, DEPLOYMENTS)  # type: ignore[arg-type]

    def broken(_: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    rec = Recorder()
    inf.add_handler(broken)
    inf.add_handler(rec.add)
    inf.start()
    try:
        await inf.wait_for_sync(timeout=2)
        assert rec.seen == [("add", "a")]
    finally:
        await inf.stop()


async def test_wait_for_sync_times_out_when_the_apiserver_never_answers(api: ScriptedApi) -> None:
    api.fail_lists = 10**6
    inf, _ = informer(api)
    inf.start()
    try:
        assert not await inf.wait_for_sync(timeout=0.05)
    finally:
        await inf.stop()


def test_store_indexes_follow_updates_and_deletes() -> None:
    store = Store({"owner": controller_uid_index, "namespace": namespace_index})
    store.put("ns/a", obj("a", 1, owner="u1"))
    store.put("ns/b", obj("b", 1, owner="u1"))
    store.put("other/c", obj("c", 1, namespace="other", owner="u2"))
    assert store.index_keys("owner", "u1") == {"ns/a", "ns/b"}
    store.put("ns/a", obj("a", 2, owner="u2"))  # adopted by another controller
    assert store.index_keys("owner", "u1") == {"ns/b"}
    assert store.index_keys("owner", "u2") == {"ns/a", "other/c"}
    store.remove("ns/b")
    assert store.index_keys("owner", "u1") == set()
    assert [o["metadata"]["name"] for o in store.by_index("namespace", "other")] == ["c"]
    assert len(store) == 2 and "ns/a" in store


def test_object_keys_are_namespace_slash_name_or_just_name() -> None:
    assert object_key(obj("a", 1)) == "ns/a"
    assert object_key({"metadata": {"name": "cluster-wide"}}) == "cluster-wide"


# ---- reading our own writes ------------------------------------------------------------------


def test_recent_write_covers_a_cache_that_has_not_seen_our_create_yet() -> None:
    recent = RecentWrites()
    created = obj("d", 5)
    recent.remember("ns/d", None, created)
    assert recent.resolve("ns/d", None) is created
    recent.observe("ns/d", obj("d", 5))  # the informer delivered it
    assert recent.resolve("ns/d", None) is None and len(recent) == 0


def test_recent_write_covers_a_cache_still_showing_the_state_we_patched() -> None:
    recent = RecentWrites()
    before, after = obj("d", 5), obj("d", 6)
    recent.remember("ns/d", before, after)
    assert recent.resolve("ns/d", before) is after
    newer = obj("d", 7)  # someone changed it again after us: the cache is the truth
    assert recent.resolve("ns/d", newer) is newer


def test_recent_writes_cover_a_cache_two_of_our_writes_behind() -> None:
    """A watch that lags (kube-apiserver busy with another tenant's fat Foos) still shows the Foo
    from before our first status write when we write the second, judged from the first: the cache
    is older than the second write's ``before``, and is still ours to cover (bench.tenants: an
    honest Foo's status write met 409 nine times in a row until the watch caught up)."""
    recent = RecentWrites()
    stored, first, second = obj("f", 5), obj("f", 6), obj("f", 7)
    recent.remember("ns/f", stored, first)
    assert recent.resolve("ns/f", stored) is first
    recent.remember("ns/f", first, second, cached=stored)
    assert recent.resolve("ns/f", stored) is second
    assert recent.observe("ns/f", first, stored), "our first write coming back needs no look"
    assert recent.resolve("ns/f", first) is second
    assert recent.observe("ns/f", second, first) and len(recent) == 0


def test_a_chain_of_our_writes_is_remembered_up_to_a_bound() -> None:
    recent = RecentWrites()
    versions = [obj("f", rv) for rv in range(1, 20)]
    for before, written in zip(versions, versions[1:], strict=False):
        recent.remember("ns/f", before, written, cached=versions[0])
    assert recent.resolve("ns/f", versions[-2]) is versions[-1]
    assert recent.resolve("ns/f", versions[0]) is versions[0], "too far behind: the cache, and a 409 tells"


def test_recent_write_is_dropped_on_delete_and_after_its_ttl() -> None:
    now = [0.0]
    recent = RecentWrites(ttl=10, clock=lambda: now[0])
    recent.remember("ns/d", None, obj("d", 5))
    recent.forget("ns/d")
    assert recent.resolve("ns/d", None) is None
    recent.remember("ns/e", None, obj("e", 5))
    now[0] = 10
    assert recent.resolve("ns/e", None) is None


def test_compact_keeps_the_value_and_shares_strings() -> None:
    from kube.informer import compact

    a = compact(json_loads('{"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "n": 1}'))
    b = compact(json_loads('{"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "n": 1}'))
    assert a == b == {"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "n": 1}
    assert a["status"]["conditions"][0]["status"] is b["status"]["conditions"][0]["status"]
    assert next(iter(a)) is next(iter(b))


def json_loads(text: str) -> Any:
    import json

    return json.loads(text)


def test_a_write_the_cache_already_shows_is_not_remembered() -> None:
    recent = RecentWrites()
    written = obj("d", 5)
    recent.remember("ns/d", None, written, cached=obj("d", 5))  # the watch was faster than the answer
    assert len(recent) == 0


def test_expired_entries_are_swept_out_as_new_ones_arrive() -> None:
    now = [0.0]
    recent = RecentWrites(ttl=1, clock=lambda: now[0])
    for i in range(1024):
        recent.remember(f"ns/d{i}", None, obj(f"d{i}", i))
    now[0] = 2
    recent.remember("ns/fresh", None, obj("fresh", 1))
    assert len(recent) == 1


def test_an_index_capacity_drops_the_objects_put_longest_ago() -> None:
    store = Store({"owner": controller_uid_index}, capacities={"owner": 2})
    for i in range(4):
        store.put(f"ns/d{i}", obj(f"d{i}", i, owner="a"))
    store.put("ns/d2", obj("d2", 9, owner="a"))  # put again: now the newest
    store.put("ns/x", obj("x", 1, owner="b"))
    assert sorted(store.keys()) == ["ns/d2", "ns/d3", "ns/x"]
    assert store.index_keys("owner", "a") == {"ns/d2", "ns/d3"} and store.dropped == 2
    with pytest.raises(ValueError, match="capacities for indexes that do not exist"):
        Store({}, capacities={"owner": 1})
