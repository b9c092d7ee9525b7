"""The local plane's admin as a fast async client: Foos as a user writes them, sent many at a time.

What the demo's traffic (hack.pictures.dashboard) and the benchmarks that write through kube-apiserver
(bench/) send with: aiohttp with the plane's admin client certificate, no client-side rate limit,
bounded concurrency.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .cluster import LocalControlPlane


@dataclass
class Outcome:
    """What ``AdminClient.many`` did: calls answered as hoped, the others, the time, the first
    failure and each call's latency (seconds)."""

    done: int
    failed: int
    seconds: float
    first_error: str = ""
    latencies: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


class AdminClient:
    """aiohttp with the plane's admin client certificate: no client-side rate limit, bounded concurrency."""

    def __init__(self, p: LocalControlPlane, *, connections: int = 32, user_agent: str = "foo-operator-bench") -> None:
        assert p.pki is not None
        context = ssl.create_default_context(cafile=str(p.pki.ca_file))
        context.load_cert_chain(p.pki.cert_file("admin"), p.pki.key_file("admin"))
        self.server = p.server
        self._connector = aiohttp.TCPConnector(ssl=context, limit=connections)
        self.session = aiohttp.ClientSession(
            connector=self._connector,
            timeout=aiohttp.ClientTimeout(total=300),
            headers={"User-Agent": user_agent, "Accept": "application/json"},
        )

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self.session.request(method, self.server + path, data=data, headers=headers) as response:
            return response.status, await response.read()

    async def many(
        self,
        calls: list[Callable[[], Awaitable[tuple[int, bytes]]]],
        *,
        concurrency: int,
        ok: tuple[int, ...] = (200, 201),
    ) -> Outcome:
        """Run ``calls`` with at most ``concurrency`` in flight; count successes and failures."""
        queue: asyncio.Queue[Callable[[], Awaitable[tuple[int, bytes]]]] = asyncio.Queue()
        for call in calls:
            queue.put_nowait(call)
        result = Outcome(0, 0, 0.0)

        async def worker() -> None:
            while not queue.empty():
                call = queue.get_nowait()
                began = time.perf_counter()
                try:
                    status, body = await call()
                except (TimeoutError, aiohttp.ClientError) as err:
                    status, body = 0, str(err).encode()
                result.latencies.append(time.perf_counter() - began)
                if status in ok:
                    result.done += 1
                else:
                    result.failed += 1
                    result.first_error = result.first_error or f"HTTP {status}: {body[:300]!r}"

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
        return result

    async def create_foos(self, foos: list[dict[str, Any]], *, concurrency: int = 32) -> Outcome:
        def call(foo: dict[str, Any]) -> Callable[[], Awaitable[tuple[int, bytes]]]:
            namespace = foo["metadata"].get("namespace", "default")
            version = foo["apiVersion"].rpartition("/")[2]
            path = f"/apis/samplecontroller.k8s.io/{version}/namespaces/{namespace}/foos"
            return lambda: self.request("POST", path, foo)

        return await self.many([call(foo) for foo in foos], concurrency=concurrency)


def plain_foo(i: int, *, prefix: str = "foo", version: str = "v1", namespace: str = "default") -> dict[str, Any]:
    """A Foo as a user writes it (no image, no replicas: the webhook or the apiserver fills them)."""
    name = f"{prefix}-{i:05d}"
    spec: dict[str, Any] = (
        {"deployment": {"name": name}} if version == "v1" else {"deploymentName": name, "replicas": 1}
    )
    return {
        "apiVersion": f"samplecontroller.k8s.io/{version}",
        "kind": "Foo",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
