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
from dataclasses import dataclass
from typing import Any

from hack.cluster import LocalControlPlane
from kube.client import MAX_RETRIES, ApiError

# How long one request may take before it counts as failed: kube-apiserver's own limit
# (--request-timeout, 1 min), as a client with no timeout of its own, kubectl's default, sees it.
# A write calls two or three webhooks of up to 5 s each (the chart's timeoutSeconds) on the way.
REQUEST_TIMEOUT = 60.0


@dataclass(frozen=True)
class Call:
    """One request of the load: ``body(n)`` makes the n-th round's body (None: no body)."""

    what: str
    method: str
    path: str
    expected: int
    body: Callable[[int], dict[str, Any]] | None = None


def dry_run_foo_create(namespace: str) -> Call:
    """A Foo create with dryRun=All: all of admission (the webhook pod), nothing stored."""

    def foo(n: int) -> dict[str, Any]:
        return {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {"name": f"load-{n}"},
            "spec": {"deployment": {"name": f"load-{n}"}},
        }

    return Call("write", "POST", f"/apis/samplecontroller.k8s.io/v1/namespaces/{namespace}/foos?dryRun=All", 201, foo)


@contextlib.contextmanager
def steady_requests(plane: LocalControlPlane, calls: Sequence[Call]) -> Iterator[tuple[Counter[str], list[str]]]:
    """``calls`` one after another, round after round, until the block ends.

    Yields the answers as expected, counted by ``Call.what``, and one line per unexpected answer
    (status and the start of its body; status 0 when the connection failed).
    """
    stop = threading.Event()
    answered: Counter[str] = Counter()
    failures: list[str] = []

    def load() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            for call in calls:
                status, answer = _as_client_go_would(plane, call, n)
                if status == call.expected:
                    answered[call.what] += 1
                else:
                    failures.append(f"{call.what} {status}: {answer[:300]!r}")

    worker = threading.Thread(target=load, name="steady-load")
    worker.start()
    try:
        yield answered, failures
    finally:
        stop.set()
        worker.join(timeout=30)


def _as_client_go_would(plane: LocalControlPlane, call: Call, n: int) -> tuple[int, bytes]:
    """(status, body) of ``call``'s n-th request, tried again as client-go tries it again.

    client-go's REST client (and so kubectl and every controller) tries a request again when the
    answer says when to (a 429, or a 5xx, with Retry-After), up to ``MAX_RETRIES`` times:
    kube-apiserver answers 429 "storage is (re)initializing", retryAfterSeconds 1, while it
    rebuilds a CRD's storage after the CRD changed, as an upgrade of the chart changes it. A
    request that succeeds on such a retry succeeded for every client; one still refused failed.
    """
    status, answer = _send(plane, call, n)
    for _ in range(MAX_RETRIES):
        wait = _retry_after(status, answer)
        if wait is None:
            break
        time.sleep(wait)  # what the server asked for, as client-go waits it: not a test's guess
        status, answer = _send(plane, call, n)
    return status, answer


def _send(plane: LocalControlPlane, call: Call, n: int) -> tuple[int, bytes]:
    try:
        return plane.request(call.method, call.path, call.body(n) if call.body else None, timeout=REQUEST_TIMEOUT)
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
