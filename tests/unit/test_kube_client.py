"""kube.config and kube.client over real HTTP against a tiny stand-in apiserver (aiohttp)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from apimachinery.resources import Resource
from kube.client import DEPLOYMENTS, EVENTS, LEASES, MAX_RETRIES, ApiError, FencedWrite, KubeClient
from kube.config import ClientSettings, connect, load_configuration
from kube.kubeconfig import KubeconfigError

PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


def test_resource_paths_follow_the_api_layout() -> None:
    assert DEPLOYMENTS.path("ns", "web") == "/apis/apps/v1/namespaces/ns/deployments/web"
    assert DEPLOYMENTS.path() == "/apis/apps/v1/deployments"
    assert EVENTS.path("ns") == "/api/v1/namespaces/ns/events"
    assert Resource("samplecontroller.k8s.io", "v1", "foos").path("ns", "f", "status") == (
        "/apis/samplecontroller.k8s.io/v1/namespaces/ns/foos/f/status"
    )
    assert NODES.path("ignored", "n1") == "/api/v1/nodes/n1"
    assert LEASES.api_version == "coordination.k8s.io/v1" and PODS.api_version == "v1"


@pytest.mark.parametrize(
    ("status", "reason", "flags"),
    [
        (404, "NotFound", {"not_found"}),
        (409, "AlreadyExists", {"already_exists", "transient"}),
        (409, "Conflict", {"conflict", "transient"}),
        (410, "Expired", {"gone"}),
        (429, "TooManyRequests", {"transient"}),
        (500, "InternalError", {"transient"}),
        (0, "", {"transient"}),
        (422, "Invalid", set()),
    ],
)
def test_api_errors_classify_the_status(status: int, reason: str, flags: set[str]) -> None:
    error = ApiError(status, {"reason": reason} if reason else None)
    every = {"not_found", "already_exists", "conflict", "gone", "transient"}
    assert {flag for flag in every if getattr(error, flag)} == flags


def test_retry_after_comes_from_the_status_details() -> None:
    assert ApiError(429, {"details": {"retryAfterSeconds": 2}}).retry_after == 2.0
    assert ApiError(429, {}).retry_after is None


def write_kubeconfig(path: Path, server: str, token: str = "s3cret") -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }))  # fmt: skip
    return path


async def test_a_missing_kubeconfig_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="nope: no such file"):
        await load_configuration(str(tmp_path / "nope"))


async def test_kubeconfig_from_the_environment_is_used_when_no_flag_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", "https://10.0.0.1:6443")))
    configuration = await load_configuration()
    assert configuration.host == "https://10.0.0.1:6443"


class StandIn:
    """Records requests; answers with canned objects, a Status, or a watch stream."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any, Any]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, dict(request.query), request.headers.copy(), body))
        if "/busy-" in request.path:  # "busy-N[-h]": N answers of 503 first, with Retry-After unless -h
            [segment] = [part for part in request.path.split("/") if part.startswith("busy-")]
            busy, _, flag = segment.removeprefix("busy-").partition("-")
            if sum(1 for r in self.requests if r[1] == request.path) <= int(busy):
                status = {"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable", "code": 503}
                headers = {} if flag == "h" else {"Retry-After": "0"}
                return web.json_response(
                    {**status, "message": "apiserver is shutting down"}, status=503, headers=headers
                )
        if request.path.endswith("/missing"):
            status = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}
            return web.json_response(status, status=404)
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            for i in range(3):
                line = {"type": "ADDED", "object": {"metadata": {"name": f"d{i}", "resourceVersion": str(i)}}}
                await response.write(json.dumps(line).encode() + b"\n")
            await response.write(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n')
            return response
        return web.json_response({"kind": "Thing", "echo": body, "metadata": {"resourceVersion": "1"}})


@pytest.fixture
async def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[StandIn, KubeClient]]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = StandIn()
    runner = web.AppRunner(server.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    client = await connect(str(kubeconfig), settings=ClientSettings(qps=1000, burst=5, field_manager="tester"))
    try:
        yield server, client
    finally:
        await client.close()
        await runner.cleanup()


async def test_calls_carry_the_token_json_and_the_field_manager(standin: tuple[StandIn, KubeClient]) -> None:
    server, client = standin
    answer = await client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 2}}, namespace="ns", patch_type="strategic")
    assert answer["echo"] == {"spec": {"replicas": 2}}
    method, path, query, headers, _ = server.requests[-1]
    assert (method, path) == ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/web")
    assert headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert headers["authorization"] == "Bearer s3cret"
    assert query == {"fieldManager": "tester"}


async def test_a_status_answer_becomes_an_api_error(standin: tuple[StandIn, KubeClient]) -> None:
    _, client = standin
    with pytest.raises(ApiError) as caught:
        await client.get(DEPLOYMENTS, "missing", namespace="ns")
    assert caught.value.not_found and caught.value.message == "not found"


async def test_an_answer_with_retry_after_is_retried_as_client_go_does(standin: tuple[StandIn, KubeClient]) -> None:
    # Before: kube-apiserver's 503 "apiserver is shutting down" (a CRD's storage replaced as the
    # request came in: the rotator patches the CRD's caBundle) failed the call; client-go retries it.
    server, client = standin
    answer = await client.create(DEPLOYMENTS, {"metadata": {"name": "web"}}, namespace="busy-2")
    assert answer["echo"] == {"metadata": {"name": "web"}}
    assert [r[0] for r in server.requests] == ["POST"] * 3
    assert all(r[4] == {"metadata": {"name": "web"}} for r in server.requests)


async def test_without_retry_after_the_first_failure_is_the_answer(standin: tuple[StandIn, KubeClient]) -> None:
    server, client = standin
    with pytest.raises(ApiError) as caught:
        await client.get(DEPLOYMENTS, "busy-2-h", namespace="ns")
    assert caught.value.status == 503 and caught.value.retry_after is None
    assert len(server.requests) == 1


async def test_retries_stop_after_ten_as_client_go_stops(standin: tuple[StandIn, KubeClient]) -> None:
    server, client = standin
    with pytest.raises(ApiError) as caught:
        await client.get(DEPLOYMENTS, "busy-99", namespace="ns")
    assert caught.value.status == 503 and caught.value.retry_after == 0.0
    assert len(server.requests) == 1 + MAX_RETRIES


async def test_a_fenced_client_asks_the_fence_before_every_write_and_never_for_reads(
    standin: tuple[StandIn, KubeClient],
) -> None:
    server, client = standin
    asked: list[tuple[str, str]] = []

    def refuse(method: str, path: str) -> None:
        asked.append((method, path))
        raise FencedWrite("lease lost")

    fenced = client.fenced(refuse)
    writes = [
        fenced.create(DEPLOYMENTS, {"metadata": {"name": "web"}}, namespace="ns"),
        fenced.patch(DEPLOYMENTS, "web", {"spec": {}}, namespace="ns"),
        fenced.replace(DEPLOYMENTS, "web", {}, namespace="ns"),
        fenced.delete(DEPLOYMENTS, "web", namespace="ns"),
    ]
    for write in writes:
        with pytest.raises(FencedWrite):
            await write
    assert [method for method, _ in asked] == ["POST", "PATCH", "PUT", "DELETE"]
    assert server.requests == []  # nothing went on the wire
    await fenced.get(DEPLOYMENTS, "web", namespace="ns")
    await client.patch(DEPLOYMENTS, "web", {"spec": {}}, namespace="ns")  # the plain client is not fenced
    assert [r[0] for r in server.requests] == ["GET", "PATCH"] and len(asked) == 4


async def test_the_fence_is_asked_after_the_client_limiter_let_the_write_go(
    standin: tuple[StandIn, KubeClient],
) -> None:
    # A write that waited for the limiter past the lease's deadline must not go out.
    _, client = standin
    order: list[str] = []

    class Limiter:
        async def acquire(self) -> None:
            order.append("limiter")

    client.limiter = Limiter()  # type: ignore[assignment]
    await client.fenced(lambda method, path: order.append("fence")).patch(DEPLOYMENTS, "web", {}, namespace="ns")
    assert order == ["limiter", "fence", "fence"]  # and again once its connection is ready


async def test_a_write_is_fenced_again_once_its_connection_is_ready(standin: tuple[StandIn, KubeClient]) -> None:
    # A process frozen while its connection to the apiserver opened must not send, when it
    # wakes, what it judged before (tests/e2e/test_controller_fencing.py: 15 creates did).
    server, client = standin
    asked: list[str] = []

    def lost_while_connecting(method: str, path: str) -> None:
        asked.append(method)
        if len(asked) > 1:
            raise FencedWrite("lease lost while the connection opened")

    with pytest.raises(FencedWrite):
        await client.fenced(lost_while_connecting).patch(DEPLOYMENTS, "web", {}, namespace="ns")
    assert asked == ["PATCH", "PATCH"] and server.requests == []
    await client.get(DEPLOYMENTS, "web", namespace="ns")  # the unused connection went back to the pool
    assert [r[0] for r in server.requests] == ["GET"]


async def test_list_passes_paging_and_selectors(standin: tuple[StandIn, KubeClient]) -> None:
    server, client = standin
    await client.list(PODS, namespace="ns", label_selector="app=nginx", limit=500, continue_="tok")
    _, path, query, _, _ = server.requests[-1]
    assert path == "/api/v1/namespaces/ns/pods"
    assert query == {"labelSelector": "app=nginx", "limit": "500", "continue": "tok"}


async def test_watch_streams_events_line_by_line_with_bookmarks(standin: tuple[StandIn, KubeClient]) -> None:
    server, client = standin
    async with client.watch(DEPLOYMENTS, namespace="ns", resource_version="5", timeout_seconds=10) as events:
        seen = [event async for event in events]
    assert [e["type"] for e in seen] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    _, _, query, _, _ = server.requests[-1]
    assert query == {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": "5", "timeoutSeconds": "10"}


async def test_an_unreachable_apiserver_is_status_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")  # discard port: refused
    client = await connect(str(kubeconfig))
    try:
        with pytest.raises(ApiError) as caught:
            await client.get(DEPLOYMENTS, "web", namespace="ns")
        assert caught.value.status == 0 and caught.value.transient
    finally:
        await client.close()


async def test_the_client_side_limiter_spaces_calls_past_the_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = StandIn()
    runner = web.AppRunner(server.app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{runner.addresses[0][1]}")
    client = await connect(str(kubeconfig), settings=ClientSettings(qps=20, burst=2))
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.gather(*(client.get(DEPLOYMENTS, f"d{i}", namespace="ns") for i in range(6)))
        assert loop.time() - began >= 0.19  # 2 at once, then 4 more at 20 qps
    finally:
        await client.close()
        await runner.cleanup()
