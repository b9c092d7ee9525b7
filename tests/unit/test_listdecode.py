"""apimachinery.listdecode and the informer's paged list: items decoded one at a time as the body streams,
so a page of a tenant's large objects is never held whole (issue #34)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from apimachinery import listdecode
from apimachinery.listdecode import ListDecodeError, ListDecoder
from attacks.objects import fat_deployment
from kube.client import DEPLOYMENTS, ApiError, KubeClient
from kube.config import ClientSettings, connect
from kube.informer import Informer
from tests.unit.test_kube_client import write_kubeconfig


def decode(body: bytes, chunk: int) -> tuple[list[Any], dict[str, Any]]:
    decoder = ListDecoder()
    items = [item for at in range(0, len(body), chunk) for item in decoder.feed(body[at : at + chunk])]
    items += decoder.feed(b"", end=True)
    return items, decoder.head


LISTS = [
    # A CRD's list as kube-apiserver writes it (keys sorted: items before metadata) ...
    b'{"apiVersion":"samplecontroller.k8s.io/v1","items":[{"a":1},{"b":"\\u00e9\xc3\xa9 \\" ]}"}],'
    b'"kind":"FooList","metadata":{"continue":"","resourceVersion":"12","remainingItemCount":3}}',
    # ... a built-in kind's (metadata first), and whitespace where JSON allows it.
    b' {"kind" : "DeploymentList", "metadata" : {"resourceVersion":"7"} ,\n "items" : [ ] , "n":-1.5e3 } ',
]


@pytest.mark.parametrize("body", LISTS)
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 16])
def test_items_and_the_list_come_out_as_a_whole_parse_gives_them_at_any_chunk_size(body: bytes, chunk: int) -> None:
    whole = json.loads(body)
    items, head = decode(body, chunk)
    assert items == whole.pop("items")
    assert head == whole


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[1]", r"'\[' at character 0 where '\{' belongs"),
        (b'{"items":[1]}', "item 0 of the list answer is not a JSON object"),
        (b'{"items":[{}', "ended before its JSON object did"),
        (b'{"items":[{}]} x', "text after its JSON object"),
        (b'{"kind":tru}', "not JSON"),
        (b'{"kind":"a" "b":1}', "where ',' belongs"),
    ],
)
def test_a_broken_list_is_a_clear_error(body: bytes, error: str) -> None:
    with pytest.raises(ListDecodeError, match=error):
        decode(body, 3)


def test_an_item_that_never_ends_is_an_error_not_a_growing_buffer() -> None:
    decoder = ListDecoder(max_item_characters=1000)
    with pytest.raises(ListDecodeError, match="runs past 1000 characters"):
        for at in range(100):
            list(decoder.feed(b'{"items":[{"a":"' if at == 0 else b"x" * 100))


def test_an_item_is_decoded_a_bounded_number_of_times_however_many_chunks_it_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    item = json.dumps({"labels": {f"k{i}": "v" * 40 for i in range(20_000)}}).encode()
    body = b'{"items":[' + item + b"]}"
    tries = 0
    decode_value = listdecode._decode_value

    def counted(text: str, at: int) -> Any:
        nonlocal tries
        tries += 1
        return decode_value(text, at)

    monkeypatch.setattr(listdecode, "_decode_value", counted)
    decoder = ListDecoder()
    items = [i for at in range(0, len(body), 1024) for i in decoder.feed(body[at : at + 1024])]
    items += decoder.feed(b"", end=True)
    assert len(items) == 1 and len(body) // 1024 > 900
    assert tries < 20  # a try per doubling of what arrived, not one per chunk


# ---- the informer's list against a server that streams fat objects -----------------------------

FAT_ITEMS = 16


@pytest.fixture(scope="module")
def fat_page() -> bytes:
    """A page of FAT_ITEMS Deployments of ~0.8 MiB each, as kube-apiserver writes a built-in list."""
    items = [fat_deployment(f"fat-{i}", namespace="tenant") for i in range(FAT_ITEMS)]
    for i, item in enumerate(items):
        item["metadata"]["resourceVersion"] = str(100 + i)
    return json.dumps(
        {"kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "200"}, "items": items}
    ).encode()


@pytest.fixture
async def streaming_apiserver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fat_page: bytes
) -> AsyncIterator[KubeClient]:
    """Answers every list with ``fat_page``, 64 KiB at a time, and every watch with an empty stream."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if request.query.get("watch") != "true":
            view = memoryview(fat_page)
            for at in range(0, len(view), 1 << 16):
                await response.write(view[at : at + (1 << 16)])
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{runner.addresses[0][1]}")
    client = await connect(str(kubeconfig), settings=ClientSettings())
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


def one_item_parsed(page: bytes) -> int:
    """What decoding one item of the page takes at its peak (its text and its objects)."""
    item = json.dumps(json.loads(page)["items"][0])
    gc.collect()
    tracemalloc.start()
    json.loads(item)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def only_names(deployment: dict[str, Any]) -> dict[str, Any]:
    meta = deployment["metadata"]
    return {
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "resourceVersion": meta["resourceVersion"]}
    }


async def test_a_relist_of_fat_objects_holds_about_one_item_at_a_time(
    streaming_apiserver: KubeClient, fat_page: bytes
) -> None:
    # Before: the page was read and parsed whole: 16 items of 0.8 MiB peaked at ~16 times one item
    # (and 500 at 500 times: the restarted controller's crash loop of issue #34).
    one = one_item_parsed(fat_page)
    informer = Informer(streaming_apiserver, DEPLOYMENTS, transform=only_names, page_size=500)
    gc.collect()
    tracemalloc.start()
    try:
        informer.start()
        assert await informer.wait_for_sync(timeout=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await informer.stop()
    assert len(informer.store) == FAT_ITEMS
    # One item decoded, its text (up to twice, while a try waits for it to double), the read
    # buffers of aiohttp (4 MiB with kube.config's read_bufsize) and the client's own state.
    assert peak < 3 * one + 8 * 2**20, f"peak {peak / 2**20:.1f} MiB, one item {one / 2**20:.1f} MiB"
    assert peak < len(fat_page)  # less than the page's bytes alone, let alone parsed


async def test_a_list_answer_that_is_not_a_list_is_an_api_error_the_informer_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    async def cut_short(request: web.Request) -> web.Response:
        return web.Response(text='{"items":[{"a"')

    app = web.Application()
    app.router.add_get("/{tail:.*}", cut_short)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{runner.addresses[0][1]}")
    client = await connect(str(kubeconfig), settings=ClientSettings())
    try:
        with pytest.raises(ApiError, match="the list answer is not JSON") as caught:
            await client.list_page(DEPLOYMENTS, dict, limit=1)
        assert caught.value.transient
    finally:
        await client.close()
        await runner.cleanup()
