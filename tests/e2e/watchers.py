"""FooHealth watchers as client-go's reflector runs them, and client-go's own.

``Watchers`` are ``kube.informer.Informer``s in an event loop of their own (list, watch from the
last resourceVersion, resume a watch the server closed, relist on 410 Gone, back off after other
errors); ``ClientGoWatchers`` are client-go informers, a hack/list-rules --watch process each.
Both go through kube-apiserver and its aggregator, so a test can disrupt the insights pods under
open watches and then read what each watcher went through and whether its cache came back to the
truth; and the APIService's Available condition, sampled meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from prometheus_client import CollectorRegistry

from apimachinery.resources import Resource
from hack.plane.binaries import list_rules
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


@dataclass
class ClientGoWatcher:
    """What one client-go informer has printed so far (hack/list-rules/watch.go's JSON lines)."""

    names: set[str] = field(default_factory=set)  # its cache: ADDED less DELETED
    lists: int = 0  # list requests answered 200: the first and every relist
    refused: int = 0  # list or watch requests not answered 200 (a 410 among them)
    watches: int = 0  # watch requests answered 200: the first, each resumed one, each after a relist
    ended: list[str] = field(default_factory=list)  # how each watch stream ended
    expired: int = 0  # watches the reflector's error handler was told ended in 410 Expired/Gone
    errors: list[str] = field(default_factory=list)  # every watch error, as the handler got it
    version: str = ""  # the last resourceVersion it watched from or was sent
    synced: bool = False

    def take(self, line: dict[str, Any]) -> None:
        if "event" in line:
            self.version = line["resourceVersion"]
            (self.names.discard if line["event"] == "DELETED" else self.names.add)(line["name"])
        elif "request" in line and line["status"] != 200:
            self.refused += 1
        elif line.get("request") == "list":
            self.lists += 1
        elif line.get("request") == "watch":
            self.watches += 1
            self.version = line["resourceVersion"]
        elif "watchEnded" in line:
            self.ended.append(line["watchEnded"])
        elif "watchError" in line:
            self.errors.append(line["watchError"])
            self.expired += bool(line["expired"])
        elif line.get("synced"):
            self.synced = True


class ClientGoWatchers:
    """``count`` client-go informers of ``namespace``'s FooHealths (`list-rules --watch`, a
    process each, with connections of its own), running until the block ends; their stderr
    (client-go's log) under ``logs``."""

    def __init__(self, kubeconfig: Path, namespace: str, count: int, logs: Path) -> None:
        self.argv = [str(list_rules()), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}", "--watch"]
        self.count = count
        self.logs = logs
        self.watchers: list[ClientGoWatcher] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __enter__(self) -> ClientGoWatchers:
        for _ in range(self.count):
            self.add()
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.terminate()  # SIGTERM: the program stops its informer and exits
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in self._readers:
            reader.join(timeout=30)

    def add(self) -> None:
        """One more watcher."""
        watcher = ClientGoWatcher()
        stderr = (self.logs / f"client-go-watcher-{len(self._procs)}.log").open("wb")
        with stderr:
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
        assert proc.stdout is not None
        reader = threading.Thread(target=self._read, args=(proc.stdout, watcher), name="client-go-watcher", daemon=True)
        with self._lock:
            self.watchers.append(watcher)
        self._procs.append(proc)
        self._readers.append(reader)
        reader.start()

    def _read(self, stdout: IO[bytes], watcher: ClientGoWatcher) -> None:
        for raw in stdout:
            line = json.loads(raw)
            with self._lock:
                watcher.take(line)

    def _each(self, read: Callable[[ClientGoWatcher], T]) -> list[T]:
        with self._lock:
            return [read(watcher) for watcher in self.watchers]

    def versions(self) -> list[str]:
        return self._each(lambda w: w.version)

    def caches(self) -> list[set[str]]:
        return self._each(lambda w: set(w.names))

    def counts(self) -> list[dict[str, int]]:
        """Each watcher's lists, watches, refused requests, ended streams and 410s so far."""
        return self._each(
            lambda w: {
                "lists": w.lists,
                "watches": w.watches,
                "refused": w.refused,
                "ended": len(w.ended),
                "expired": w.expired,
            }
        )

    def errors(self) -> list[list[str]]:
        """How each watcher's watches ended, and the watch errors its reflector reported."""
        return self._each(lambda w: [*w.ended, *w.errors])

    def exited(self) -> list[int | None]:
        """Each process's exit code, None while it runs: every one should run until the block ends."""
        return [proc.poll() for proc in self._procs]


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
