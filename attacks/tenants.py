"""What a tenant with ordinary rights in its own namespace does to the controller and insights
(issue 34), and the honest tenant it must not starve.

Each attack has a namespace of its own and runs on one event loop in a thread (``Tenants``)
until stopped: it stores what it stores once, and an attack that keeps acting (edits) goes on
until the end. ``HonestTenant`` writes one ordinary Foo at a time in a namespace of its own and
times each from its create until its Deployment exists and its status is current. ``Peaks``
samples readings (a process's RSS, a container's working set) in a thread and keeps each one's
highest. bench.tenants runs them on loopback, tests/e2e/test_real_node.py against the chart's pods.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from fooapi.names import FOOS
from hack.plane.adminclient import AdminClient
from hack.plane.cluster import LocalControlPlane
from kube.client import DEPLOYMENTS

from .objects import fat_deployment, fat_foo, foo_v1

NAMESPACES = "/api/v1/namespaces"
QUOTAS = "resourcequotas"
# How long one honest Foo may take to be served before the tenant gives up on it: generous on
# purpose, a wait for a condition, not a bound on the time.
SERVED_WITHIN = 300.0


def path_of(obj: Mapping[str, Any]) -> str:
    """Where ``obj`` (a Foo or a Deployment) is created."""
    resource = FOOS if obj["kind"] == "Foo" else DEPLOYMENTS
    return resource.path(obj["metadata"]["namespace"])


async def create_all(client: AdminClient, objects: list[dict[str, Any]], *, at_once: int = 2, tries: int = 3) -> None:
    """Create every one of ``objects``, ``at_once`` at a time; each must be accepted (201).

    A fat Foo costs kube-apiserver a second or more of CPU (its managedFields name every label),
    so a write may wait past kube-apiserver's own request deadline before it reaches admission
    (a 500 "failed calling webhook ... context deadline exceeded"; bench/README.md, "Tenants"):
    such a write is tried again, and a 409 AlreadyExists then means the first try landed."""

    async def create(obj: dict[str, Any]) -> tuple[int, bytes]:
        for _ in range(tries):
            status, body = await client.request("POST", path_of(obj), obj)
            if status == 409 and b"AlreadyExists" in body:
                return 201, body
            if status == 201 or status < 500:
                break
        return status, body

    calls: list[Callable[[], Awaitable[tuple[int, bytes]]]] = [functools.partial(create, obj) for obj in objects]
    outcome = await client.many(calls, concurrency=at_once, ok=(201,))
    if outcome.failed:
        raise RuntimeError(f"{outcome.failed} of {len(objects)} refused: {outcome.first_error}")


def store(plane: LocalControlPlane, objects: list[dict[str, Any]], *, at_once: int = 2, tries: int = 3) -> None:
    """``create_all`` on a client of its own."""

    async def run() -> None:
        async with AdminClient(plane, connections=at_once) as client:
            await create_all(client, objects, at_once=at_once, tries=tries)

    asyncio.run(run())


async def create_namespace(client: AdminClient, name: str) -> None:
    status, body = await client.request(
        "POST", NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    if status not in (201, 409):
        raise RuntimeError(f"namespace {name}: HTTP {status}: {body[:300]!r}")


class Attack(Protocol):
    """One tenant's doing, in ``namespace``: ``run`` until it has done it, or until ``stop``,
    calling ``stored()`` once what it stores is stored (what it keeps doing goes on)."""

    name: str
    namespace: str

    async def run(self, client: AdminClient, stop: asyncio.Event, stored: Callable[[], None]) -> None: ...


@dataclass
class FatFoos:
    """Foos of ~1.2 MiB as stored (9,000 labels, a 200 KiB annotation), each naming a Deployment of its own."""

    namespace: str
    count: int
    name: str = "fat Foos"

    async def run(self, client: AdminClient, stop: asyncio.Event, stored: Callable[[], None]) -> None:
        await create_all(client, [fat_foo(f"fat-foo-{i:03d}", namespace=self.namespace) for i in range(self.count)])
        stored()


@dataclass
class FatDeployments:
    """Deployments of ~1.2 MiB as stored that no Foo controls: no Foo rights needed."""

    namespace: str
    count: int
    name: str = "fat Deployments"

    async def run(self, client: AdminClient, stop: asyncio.Event, stored: Callable[[], None]) -> None:
        objects = [fat_deployment(f"fat-deployment-{i:03d}", namespace=self.namespace) for i in range(self.count)]
        await create_all(client, objects)
        stored()


@dataclass
class SharedDeployment:
    """``count`` Foos naming one Deployment (the first Foo's), which the tenant scales once every
    ``interval`` seconds: each edit is drift the owner reverts, and before issue 34 it
    reconciled every Foo naming the Deployment, each refused with a Warning Event."""

    namespace: str
    count: int
    interval: float = 1.0
    name: str = "Foos naming one Deployment, edited"
    edits: int = 0

    async def run(self, client: AdminClient, stop: asyncio.Event, stored: Callable[[], None]) -> None:
        foos = [
            foo_v1(f"shared-{i:04d}", namespace=self.namespace, deployment="shared", replicas=1)
            for i in range(self.count)
        ]
        await create_all(client, foos[:1])
        scale = DEPLOYMENTS.path(self.namespace, "shared", "scale")
        while (await client.request("GET", scale))[0] != 200:
            if stop.is_set():
                return
            await asyncio.sleep(0.2)
        await create_all(client, foos[1:], at_once=8)
        stored()
        while not stop.is_set():
            body = {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {"name": "shared", "namespace": self.namespace},
                "spec": {"replicas": 2 + self.edits % 2},
            }
            status, answer = await client.request("PUT", scale, body)
            if status not in (200, 409):  # 409: the owner's revert got in first
                raise RuntimeError(f"scaling the shared Deployment: HTTP {status}: {answer[:300]!r}")
            self.edits += 1
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                pass


@dataclass
class QuotaRefused:
    """``count`` Foos whose Deployments a ResourceQuota refuses (403 Forbidden, exceeded quota):
    the controller retries each until the quota lets it, or the Foo is gone."""

    namespace: str
    count: int
    name: str = "Foos a ResourceQuota refuses"

    async def run(self, client: AdminClient, stop: asyncio.Event, stored: Callable[[], None]) -> None:
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-deployments", "namespace": self.namespace},
            "spec": {"hard": {"count/deployments.apps": "0"}},
        }
        status, body = await client.request("POST", f"{NAMESPACES}/{self.namespace}/{QUOTAS}", quota)
        if status not in (201, 409):
            raise RuntimeError(f"the ResourceQuota: HTTP {status}: {body[:300]!r}")
        foos = [foo_v1(f"refused-{i:04d}", namespace=self.namespace, replicas=1) for i in range(self.count)]
        await create_all(client, foos, at_once=8)
        stored()


class Tenants:
    """``attacks`` on one event loop in a thread: each in its namespace, all at once, until ``stop``."""

    def __init__(self, plane: LocalControlPlane, attacks: list[Attack]) -> None:
        self.plane = plane
        self.attacks = attacks
        self.stored_in: dict[str, float] = {}  # attack name -> seconds until what it stores was stored
        self.errors: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="tenants", daemon=True)
        self._started = threading.Event()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        async with AdminClient(self.plane, connections=32, user_agent="tenant") as client:
            for namespace in sorted({attack.namespace for attack in self.attacks}):
                await create_namespace(client, namespace)
            await asyncio.gather(*(self._run(client, attack) for attack in self.attacks))

    async def _run(self, client: AdminClient, attack: Attack) -> None:
        assert self._stop is not None
        began = time.monotonic()

        def stored() -> None:
            self.stored_in.setdefault(attack.name, time.monotonic() - began)

        try:
            await attack.run(client, self._stop, stored)
        except Exception as err:  # reported by stop(): one failed attack must not hide the others
            self.errors.append(f"{attack.name}: {type(err).__name__}: {err}")

    def start(self) -> Tenants:
        self._thread.start()
        self._started.wait()
        return self

    def stored(self) -> bool:
        """Whether every attack has done what it does once (the edits may go on)."""
        return len(self.stored_in) == len(self.attacks) or bool(self.errors)

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop what still acts (again: nothing). ``errors`` says what an attack could not do."""
        if self._thread.is_alive() and self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=300)


@dataclass
class HonestTenant:
    """Ordinary Foos in ``namespace``, one at a time: each timed from its create until its
    Deployment exists and its status is current (``observedGeneration`` is its generation)."""

    namespace: str
    latencies: list[float] = field(default_factory=list)
    created_in: list[float] = field(default_factory=list)  # of each latency, until its create was answered
    retries: int = 0  # creates tried again after a 5xx: kube-apiserver's, not the Foo's
    written: int = 0

    def forget(self) -> None:
        """Drop what was measured so far (a warm-up's)."""
        self.latencies.clear()
        self.created_in.clear()
        self.retries = 0

    async def write_one(self, client: AdminClient) -> float:
        name = f"honest-{self.written:04d}"
        self.written += 1
        foo = foo_v1(name, namespace=self.namespace, replicas=1)
        began = time.monotonic()
        deadline = began + SERVED_WITHIN
        while True:
            status, body = await client.request("POST", FOOS.path(self.namespace), foo)
            if status == 201 or (status == 409 and b"AlreadyExists" in body):
                break
            if status < 500 or time.monotonic() > deadline:
                raise RuntimeError(f"the honest Foo {name}: HTTP {status}: {body[:300]!r}")
            self.retries += 1
        self.created_in.append(time.monotonic() - began)
        while not await self.served(client, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the honest Foo {name} was not served within {SERVED_WITHIN:.0f}s")
            await asyncio.sleep(0.05)
        took = time.monotonic() - began
        self.latencies.append(took)
        return took

    async def served(self, client: AdminClient, name: str) -> bool:
        status, body = await client.request("GET", FOOS.path(self.namespace, name))
        if status != 200:
            return False
        foo = orjson.loads(body)
        if foo.get("status", {}).get("observedGeneration") != foo["metadata"]["generation"]:
            return False
        deployment = foo["spec"]["deployment"]["name"]
        return (await client.request("GET", DEPLOYMENTS.path(self.namespace, deployment)))[0] == 200

    async def write_while(self, plane: LocalControlPlane, going: Callable[[], bool], *, at_least: int = 1) -> None:
        """Honest Foos one after another while ``going()``, and at least ``at_least`` of them."""
        async with AdminClient(plane, connections=2, user_agent="honest-tenant") as client:
            await create_namespace(client, self.namespace)
            written = 0
            while written < at_least or going():
                await self.write_one(client)
                written += 1


class Peaks:
    """Each reading's highest value, sampled every ``interval`` seconds in a thread.

    A reader answers None while there is nothing to read (a container not started yet, or
    replaced): that sample is skipped."""

    def __init__(self, readers: Mapping[str, Callable[[], float | None]], interval: float = 0.1) -> None:
        self.readers = dict(readers)
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peaks", daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        for name, read in self.readers.items():
            try:
                value = read()
            except OSError:
                value = None
            if value is not None and value > self.peaks.get(name, 0.0):
                self.peaks[name] = value

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
