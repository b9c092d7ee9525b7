"""A steady load through kube-apiserver while something changes under it (an upgrade, a Secret
rotation, a certificate renewal): every answer counted, every unexpected one kept."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hack.plane.cluster import LocalControlPlane
from kube.client import MAX_RETRIES, ApiError

# How long one request may take before it counts as failed: kube-apiserver's own limit
# (--request-timeout, 1 min), as a client-go client with no timeout of its own, or kubectl by
# default, sees it: kube-apiserver's 504, not a slow machine, is the failure. A write calls two or
# three webhooks of up to 5 s each (the chart's timeoutSeconds) on the way.
CLIENT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Call:
    """One request of the load: ``body(n)`` makes the n-th round's body (None: no body)."""

    what: str
    method: str
    path: str
    expected: int
    body: Callable[[int], dict[str, Any]] | None = None


def foo_create(namespace: str, *, dry_run: bool = True) -> Call:
    """A v1 Foo create, ``load-<n>``: all of admission (the webhook pods); stored unless a dry run,
    and then the controller makes its Deployment ``load-<n>``."""

    def foo(n: int) -> dict[str, Any]:
        return {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {"name": f"load-{n}"},
            "spec": {"deployment": {"name": f"load-{n}"}},
        }

    query = "?dryRun=All" if dry_run else ""
    return Call("write", "POST", f"/apis/samplecontroller.k8s.io/v1/namespaces/{namespace}/foos{query}", 201, foo)


def dry_run_foo_create(namespace: str) -> Call:
    """A Foo create with dryRun=All: all of admission (the webhook pod), nothing stored."""
    return foo_create(namespace, dry_run=True)


def reads(namespace: str) -> list[Call]:
    """A page of the namespace's Foos at v1alpha1 (each one through the conversion webhook) and
    of its FooHealths (the aggregated API, the insights pods)."""
    return [
        Call(
            "read-v1alpha1", "GET", f"/apis/samplecontroller.k8s.io/v1alpha1/namespaces/{namespace}/foos?limit=20", 200
        ),
        Call(
            "read-foohealths",
            "GET",
            f"/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/{namespace}/foohealths?limit=20",
            200,
        ),
    ]


@dataclass
class Answers:
    """What a steady load has been answered so far."""

    answered: Counter[str] = field(default_factory=Counter)  # as expected, by Call.what
    failures: list[str] = field(default_factory=list)  # one line per unexpected answer
    failed_at: list[float] = field(default_factory=list)  # time.monotonic() of each, in step
    failed_rounds: dict[str, set[int]] = field(default_factory=dict)  # by Call.what: the n of each
    rounds: int = 0  # begun
    spans: list[tuple[float, float, bool]] = field(default_factory=list)  # (began, ended, as expected) of each
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # the senders share this

    def requests(self) -> int:
        return sum(self.answered.values()) + len(self.failures)

    def count(self, call: Call, n: int | None, began: float, status: int, answer: bytes) -> None:
        """One request's answer; ``n``: its round (None: a reader's, which no round counts)."""
        ended, expected = time.monotonic(), status == call.expected
        with self.lock:
            self.spans.append((began, ended, expected))
            if expected:
                self.answered[call.what] += 1
                return
            self.failures.append(f"{call.what} {status}: {answer[:400]!r}")
            self.failed_at.append(ended)
            if n is not None:
                self.failed_rounds.setdefault(call.what, set()).add(n)

    def in_flight(self, moment: float) -> tuple[int, int]:
        """How many requests were in flight at ``moment`` (sent, not yet answered), and how many of them failed."""
        with self.lock:
            held = [expected for began, ended, expected in self.spans if began <= moment < ended]
        return len(held), held.count(False)

    def acknowledged(self, what: str) -> set[int]:
        """The rounds whose ``what`` call was answered as expected."""
        return set(range(1, self.rounds + 1)) - self.failed_rounds.get(what, set())


@contextlib.contextmanager
def steady_requests(plane: LocalControlPlane, calls: Sequence[Call]) -> Iterator[tuple[Counter[str], list[str]]]:
    """``calls`` one after another, round after round, until the block ends.

    Yields the answers as expected, counted by ``Call.what``, and one line per unexpected answer
    (status and the start of its body; status 0 when the connection failed).
    """
    with steady_load(plane, calls) as answers:
        yield answers.answered, answers.failures


@contextlib.contextmanager
def steady_load(
    plane: LocalControlPlane,
    calls: Sequence[Call],
    *,
    period: float = 0.0,
    timeout: float = CLIENT_TIMEOUT,
    readers: Sequence[Call] = (),
    senders: int = 0,
) -> Iterator[Answers]:
    """``calls`` one after another, a round at most every ``period`` seconds, until the block ends;
    every answer counted in the ``Answers`` yielded (the last round is finished before it ends). A
    request not answered within ``timeout`` seconds failed.

    Beside it, ``senders`` threads send ``readers`` (reads: no round counts them) one after
    another with no pause, so that at any moment that many requests are in flight: one sender
    alone leaves a request in flight at a kill only by chance."""
    answers = Answers()

    def send(call: Call, n: int | None) -> bool:
        began = time.monotonic()
        status, answer = _as_client_go_would(plane, call, n or 0, timeout)
        answers.count(call, n, began, status, answer)
        return status == call.expected

    def load(stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            answers.rounds = n
            began = time.monotonic()
            for call in calls:
                send(call, n)
            stop.wait(began + period - time.monotonic())  # a steady rate, not a catch-up burst

    def read(stop: threading.Event) -> None:
        while not stop.is_set():
            for call in readers:
                if not send(call, None):
                    stop.wait(period)  # refused at once (kube-apiserver down): no faster than the load

    with contextlib.ExitStack() as stack:
        stack.enter_context(running("steady-load", load))
        for i in range(senders):
            stack.enter_context(running(f"steady-reader-{i}", read))
        yield answers


@contextlib.contextmanager
def running(name: str, body: Callable[[threading.Event], None]) -> Iterator[None]:
    """``body(stop)`` in a thread of its own while the block runs; it is to return once ``stop`` is set."""
    stop = threading.Event()
    worker = threading.Thread(target=body, args=(stop,), name=name)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=2 * CLIENT_TIMEOUT)  # past any request under way


def _as_client_go_would(plane: LocalControlPlane, call: Call, n: int, timeout: float) -> tuple[int, bytes]:
    """(status, body) of ``call``'s n-th request, tried again as client-go tries it again.

    client-go's REST client (and so kubectl and every controller) tries a request again when the
    answer says when to (a 429, or a 5xx, with Retry-After), up to ``MAX_RETRIES`` times:
    kube-apiserver answers 429 "storage is (re)initializing", retryAfterSeconds 1, while it
    rebuilds a CRD's storage after the CRD changed, as an upgrade of the chart changes it. A
    request that succeeds on such a retry succeeded for every client; one still refused failed.
    """
    status, answer = _send(plane, call, n, timeout)
    for _ in range(MAX_RETRIES):
        wait = _retry_after(status, answer)
        if wait is None:
            break
        time.sleep(wait)  # what the server asked for, as client-go waits it: not a test's guess
        status, answer = _send(plane, call, n, timeout)
    return status, answer


def _send(plane: LocalControlPlane, call: Call, n: int, timeout: float) -> tuple[int, bytes]:
    try:
        return plane.request(call.method, call.path, call.body(n) if call.body else None, timeout=timeout)
    except (OSError, http.client.HTTPException) as err:  # e.g. a body cut off as a pod died
        return 0, f"{type(err).__name__}: {err}".encode()


def _retry_after(status: int, answer: bytes) -> float | None:
    """The wait a 429 or 5xx Status asks for (kube.client's reading of it), if it asks."""
    if status != 429 and status < 500:
        return None
    try:
        body = json.loads(answer)
    except ValueError:
        return None
    return ApiError(status, body).retry_after if isinstance(body, dict) else None
