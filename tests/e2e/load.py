"""A steady load through kube-apiserver while something changes under it (an upgrade, a Secret
rotation, a certificate renewal): every answer counted, every unexpected one kept."""

from __future__ import annotations

import contextlib
import http.client
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hack.cluster import LocalControlPlane


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
                try:
                    status, answer = plane.request(call.method, call.path, call.body(n) if call.body else None)
                except (OSError, http.client.HTTPException) as err:  # e.g. a body cut off as a pod died
                    status, answer = 0, f"{type(err).__name__}: {err}".encode()
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
