"""FooHealth watchers as client-go's reflector runs them, in an event loop of their own.

Each is a ``kube.informer.Informer`` (list, watch from the last resourceVersion, resume a watch
the server closed, relist on 410 Gone, back off after other errors) through kube-apiserver and
its aggregator, so a test can disrupt the insights pods under open watches and then read what
each watcher went through and whether its cache came back to the truth; and the APIService's
Available condition, sampled meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from prometheus_client import CollectorRegistry

from apimachinery.resources import Resource
from hack.plane.cluster import LocalControlPlane
from kube.client import KubeClient
from kube.config import connect
from kube.informer import Informer
from kube.metrics import Metrics
from tests.e2e.load import running

APISERVICE = "v1alpha1.insights.samplecontroller.k8s.io"
FOO_HEALTHS = Resource("insights.samplecontroller.k8s.io", "v1alpha1", "foohealths", "FooHealth")
RESTARTS = ("closed", "expired", "error")  # kube.informer's reasons: resumed, relisted, backed off
T = TypeVar("T")


class _Unexpected(logging.Handler):
    """The informers' ERROR records: an exception no reflector should meet."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class Watchers:
    """``count`` informers of ``namespace``'s FooHealths, running until the block ends."""

    def __init__(self, kubeconfig: Path, namespace: str, count: int) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.count = count
        self.informers: list[Informer] = []
        self.registries: list[CollectorRegistry] = []
        self.unexpected = _Unexpected()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: KubeClient | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="foohealth-watchers")

    def __enter__(self) -> Watchers:
        logging.getLogger("kube.informer").addHandler(self.unexpected)
        self._thread.start()
        self._started.wait(timeout=60)
        if self._failed is not None or self._loop is None:
            self.__exit__()
            raise RuntimeError(f"the watchers did not start: {self._failed!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)
        logging.getLogger("kube.informer").removeHandler(self.unexpected)

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as err:  # told to __enter__, which raises it in the test's thread
            self._failed = err
            self._started.set()

    async def _watch(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with await connect(str(self.kubeconfig)) as client:
            self._client = client
            for _ in range(self.count):
                self._start_one()
            self._started.set()
            try:
                await self._stop.wait()
            finally:
                for informer in self.informers:
                    await informer.stop()

    def _start_one(self) -> None:
        assert self._client is not None
        registry = CollectorRegistry()
        informer = Informer(self._client, FOO_HEALTHS, namespace=self.namespace, metrics=Metrics(registry))
        informer.start()
        self.informers.append(informer)
        self.registries.append(registry)

    def add(self) -> None:
        """One more watcher."""
        self._in_loop(self._start_one)

    def _in_loop(self, read: Callable[[], T]) -> T:
        """``read()`` run on the watchers' loop, between two of their steps."""

        async def call() -> T:
            return read()

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)

    def versions(self) -> list[str]:
        """Each watcher's resourceVersion: the last it listed at or was sent."""
        return self._in_loop(lambda: [informer.resource_version for informer in self.informers])

    def caches(self) -> list[set[str]]:
        """The FooHealth names in each watcher's cache."""
        return self._in_loop(lambda: [{key.split("/", 1)[1] for key in i.store.keys()} for i in self.informers])

    def lists(self) -> list[int]:
        """How many lists each watcher has made (the first and every relist)."""
        return self._in_loop(lambda: [informer.lists for informer in self.informers])

    def restarts(self) -> list[dict[str, int]]:
        """Each watcher's watch restarts by reason (closed: resumed; expired: 410, relisted; error)."""

        def read() -> list[dict[str, int]]:
            return [
                {
                    reason: int(
                        registry.get_sample_value(
                            "informer_watch_restarts_total", {"resource": informer.name, "reason": reason}
                        )
                        or 0
                    )
                    for reason in RESTARTS
                }
                for informer, registry in zip(self.informers, self.registries, strict=True)
            ]

        return self._in_loop(read)


def instance(resource_version: str) -> str:
    """The insights process a FooHealth resourceVersion comes from: its digits before the last 12
    (insights.view: "<instance><counter>"), "" for none yet."""
    return resource_version[:-12]


def totals(restarts: list[dict[str, int]]) -> dict[str, int]:
    return {reason: sum(r[reason] for r in restarts) for reason in RESTARTS}


@contextlib.contextmanager
def availability(plane: LocalControlPlane) -> Iterator[list[tuple[float, bool]]]:
    """The APIService's Available condition, read every 0.2 s until the block ends: each change,
    (when, available), the first reading included."""
    changes: list[tuple[float, bool]] = []

    def sample(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                status, body = plane.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
            except OSError:  # kube-apiserver itself is down: no reading, not a change
                stop.wait(0.2)
                continue
            conditions = json.loads(body).get("status", {}).get("conditions", []) if status == 200 else []
            available = any(c["type"] == "Available" and c["status"] == "True" for c in conditions)
            if not changes or changes[-1][1] != available:
                changes.append((time.monotonic(), available))
            stop.wait(0.2)

    with running("apiservice-availability", sample):
        yield changes


def unavailable_seconds(changes: list[tuple[float, bool]], since: float) -> float:
    """How long the APIService was not Available after ``since`` (to its last reading if never back)."""
    total, down_at = 0.0, None
    for moment, available in changes:
        if not available and down_at is None:
            down_at = max(moment, since)
        elif available and down_at is not None:
            total += moment - down_at
            down_at = None
    return total + (time.monotonic() - down_at if down_at is not None else 0.0)
