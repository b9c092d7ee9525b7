"""Issue #25's attacks on the insights server (findings 10-14), each measured alone: RSS and /healthz.

    .venv/bin/python -m bench.insights_attack [--tree DIR] [--only heads,...] [--memory-limit-mib 256]

One insights process (the real listener, `insights.server.serve`, on uvloop as `python -m insights`
runs it) on 127.0.0.1 with a static configuration in place of a cluster: a front-proxy CA, an
authorizer that allows everything, an empty synced view. ``--tree`` runs the server from another
checkout (say a worktree of main) while the attacks stay the same, so a number before and after a
fix comes from one script. Each attack is a function of (port, certificates) that the attack mix
(bench.flood's siblings) can reuse:

* ``half_sent_heads``: connections without a certificate that send 126 headers of 8 KiB and never
  end them (finding 10); then how many are still open 12 s later (finding 14).
* ``oversized_heads``: bursts of 40 connections each sending 1,000 headers of 8 KiB (finding 11).
* ``big_reviews``: FooReviews of 2 and 8 MiB, a string-heavy and a dense one, three at once (finding 12).
* ``many_watches``: 1,000 watches from the aggregator (finding 14).

Printed per attack: peak RSS, RSS after the attack's connections closed, the slowest /healthz
(a fresh connection without certificate every 100 ms, as the kubelet probes), and what the
attackers were answered. Loopback only; every attack is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson

from certs.authority import issue_client, new_ca
from hack.cluster import free_port
from kube.limits import raise_open_file_limit

from .flood import rss_kib
from .report import say, table
from .servers import serving_certs

MiB = 1024 * 1024
REVIEWS = "/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/ns/fooreviews"
WATCH = "/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/ns/foohealths?watch=1&timeoutSeconds=60"

# Run in the tree under test: what `python -m insights` does, with the cluster replaced by constants.
_SERVER = """
import asyncio, gc, sys
from pathlib import Path
from insights.authn import RequestHeaderConfig
from insights.authz import Decision
from insights.config import AggregatedConfig
from insights.server import serve
from insights.view import HealthView
from kube.serving import ServingOptions
try:
    from kube.limits import bound_allocator, raise_open_file_limit
    raise_open_file_limit(); bound_allocator()
except ImportError:
    pass

async def allow(user, info):
    return Decision(True)

cert_dir, port, limit = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ca = cert_dir / "front-proxy-ca.crt"
extra = {"memory_limit_mib": limit} if "memory_limit_mib" in AggregatedConfig.__dataclass_fields__ else {}
config = AggregatedConfig(requestheader=RequestHeaderConfig(client_ca_pem=ca.read_bytes()), authorizer=allow,
                          view=HealthView.empty(instance=1), requestheader_ca_file=ca, **extra)
options = ServingOptions(cert_dir=cert_dir, bind_address="127.0.0.1", port=port)
gc.freeze()
import uvloop
uvloop.run(serve(options, config))
"""


@dataclass
class Target:
    """A running insights process and the two kinds of client: the aggregator and anyone."""

    port: int
    pid: int
    aggregator: ssl.SSLContext
    anonymous: ssl.SSLContext

    async def connect(self, *, verified: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        context = self.aggregator if verified else self.anonymous
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=context)


@dataclass
class Outcome:
    peak_mib: float = 0.0
    after_mib: float = 0.0
    healthz_max_ms: float = 0.0
    healthz_failed: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    note: str = ""


def start_server(tree: Path, cert_dir: Path, memory_limit_mib: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(cert_dir), str(port), str(memory_limit_mib)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(cert_dir / "server.log", "ab"),  # noqa: SIM115 (the process owns it)
    )
    return process, port


def certificates(cert_dir: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    serving_certs(cert_dir)
    front_proxy = new_ca("front-proxy-ca")
    client = issue_client(front_proxy, common_name="front-proxy-client")
    (cert_dir / "front-proxy-ca.crt").write_bytes(front_proxy.cert_pem)
    (cert_dir / "aggregator.crt").write_bytes(client.cert_pem)
    (cert_dir / "aggregator.key").write_bytes(client.key_pem)
    anonymous = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    aggregator = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    aggregator.load_cert_chain(cert_dir / "aggregator.crt", cert_dir / "aggregator.key")
    return aggregator, anonymous


async def _healthz(target: Target) -> float | None:
    """Seconds a fresh probe (no certificate, new connection) takes to get its 200; None if it does not."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(target.connect(verified=False), 10)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    except (OSError, TimeoutError):
        return None
    return time.perf_counter() - started if answer.startswith(b"HTTP/1.1 200") else None


def _probe_process(port: int, cafile: str, stop: Any, results: Connection) -> None:
    """The kubelet's side, in a process of its own: the attackers' own work must not delay it."""
    target = Target(port, 0, ssl.create_default_context(), ssl.create_default_context(cafile=cafile))

    async def probe() -> tuple[float, int]:
        slowest, failed = 0.0, 0
        while not stop.is_set():
            took = await _healthz(target)
            if took is None:
                failed += 1
            else:
                slowest = max(slowest, took)
            await asyncio.sleep(0.1)
        return slowest, failed

    results.send(asyncio.run(probe()))


async def measured(target: Target, attack: Callable[[Target, Outcome], Awaitable[None]], cafile: Path) -> Outcome:
    """Run ``attack`` while sampling RSS every 20 ms and probing /healthz every 100 ms (another process)."""
    outcome = Outcome()
    done = asyncio.Event()
    stop = multiprocessing.Event()
    receiving, sending = multiprocessing.Pipe(duplex=False)
    prober = multiprocessing.Process(target=_probe_process, args=(target.port, str(cafile), stop, sending))
    prober.start()

    async def sample() -> None:
        while not done.is_set():
            outcome.peak_mib = max(outcome.peak_mib, rss_kib(target.pid)[0] / 1024)
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        await attack(target, outcome)
    finally:
        await asyncio.sleep(1.0)  # the server notices the closed connections
        done.set()
        stop.set()
        await sampler
        slowest, outcome.healthz_failed = await asyncio.to_thread(receiving.recv)
        outcome.healthz_max_ms = slowest * 1000
        prober.join(10)
    outcome.after_mib = rss_kib(target.pid)[0] / 1024
    return outcome


async def _read_answer(reader: asyncio.StreamReader, timeout: float) -> str:
    try:
        answer = await asyncio.wait_for(reader.read(200), timeout)
    except TimeoutError:
        return "no answer"
    except OSError as err:
        return type(err).__name__
    return answer.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"


async def _open(
    target: Target, outcome: Outcome, count: int, head: bytes, *, verified: bool
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``count`` connections, each sent ``head``; a connection refused is counted in the answers."""
    held = []
    for _ in range(count):
        try:
            reader, writer = await target.connect(verified=verified)
        except OSError as err:
            outcome.answers[f"connect {type(err).__name__}"] += 1
            continue
        writer.write(head)
        held.append((reader, writer))
    return held


async def half_sent_heads(target: Target, outcome: Outcome, connections: int = 200, headers: int = 126) -> None:
    """Finding 10 and 14: heads that never end, from clients without a certificate; held 12 s."""
    padding = b"".join(f"X-Pad-{i}: ".encode() + b"a" * 8000 + b"\r\n" for i in range(headers))
    held = await _open(target, outcome, connections, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + padding, verified=False)
    await asyncio.gather(*(_drain(w) for _, w in held))
    answers = await asyncio.gather(*(_read_answer(r, 12) for r, _ in held))
    outcome.answers.update(answers)
    outcome.note = f"{answers.count('no answer')} of {len(held)} still open after 12 s"
    for _, writer in held:
        writer.close()


async def _drain(writer: asyncio.StreamWriter) -> None:
    try:
        await asyncio.wait_for(writer.drain(), 10)
    except (OSError, TimeoutError):
        pass


async def oversized_heads(
    target: Target, outcome: Outcome, rounds: int = 3, connections: int = 40, headers: int = 1000
) -> None:
    """Finding 11: bursts of heads of 1,000 headers of 8 KiB, refused by the server."""
    line = b"X-Pad: " + b"a" * 8000 + b"\r\n"

    async def one() -> str:
        try:
            reader, writer = await target.connect(verified=False)
        except OSError as err:
            return f"connect {type(err).__name__}"
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for _ in range(headers):
                writer.write(line)
                if writer.transport.is_closing():
                    break
            writer.write(b"\r\n")
            await _drain(writer)
            return await _read_answer(reader, 15)
        finally:
            writer.close()

    for _ in range(rounds):
        outcome.answers.update(await asyncio.gather(*(one() for _ in range(connections))))


def _review(size: int, dense: bool) -> bytes:
    foo: dict[str, Any] = {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": "big", "namespace": "ns"},
        "spec": {"replicas": 1, "deployment": {"name": "big-nginx"}},
    }
    review = {
        "apiVersion": "insights.samplecontroller.k8s.io/v1alpha1",
        "kind": "FooReview",
        "metadata": {"name": "r"},
        "spec": {"object": foo},
    }
    head = orjson.dumps(review)
    if dense:  # a list of empty objects: the most tree per byte
        return head[:-1] + b',"padding":[' + b"{}," * ((size - len(head) - 14) // 3) + b"{}]}"
    foo["metadata"]["annotations"] = {"a": "x" * (size - len(head) - 40)}
    return orjson.dumps(review)


async def _post_review(target: Target, body: bytes) -> str:
    try:
        reader, writer = await target.connect(verified=True)
    except OSError as err:
        return f"connect {type(err).__name__}"
    writer.write(
        f"POST {REVIEWS} HTTP/1.1\r\nHost: x\r\nX-Remote-User: alice\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await _drain(writer)
    answer = await _read_answer(reader, 60)
    writer.close()
    return answer


async def big_reviews(target: Target, outcome: Outcome) -> None:
    """Finding 12: one 2 MiB review, one 8 MiB, three 8 MiB at once; string-heavy and dense."""
    for dense in (False, True):
        kind = "dense" if dense else "string"
        for size, at_once in ((2 * MiB, 1), (8 * MiB, 1), (8 * MiB, 3)):
            body = _review(size, dense)
            answers = await asyncio.gather(*(_post_review(target, body) for _ in range(at_once)))
            outcome.answers.update(f"{kind} {size // MiB}MiBx{at_once}: {a}" for a in answers)


async def many_watches(target: Target, outcome: Outcome, count: int = 1000) -> None:
    """Finding 14: 1,000 watches from the aggregator, held 5 s."""
    head = f"GET {WATCH} HTTP/1.1\r\nHost: x\r\nX-Remote-User: alice\r\n\r\n".encode()
    held = await _open(target, outcome, count, head, verified=True)
    answers = await asyncio.gather(*(_read_answer(r, 10) for r, _ in held))
    outcome.answers.update(answers)
    await asyncio.sleep(5)
    for _, writer in held:
        writer.close()


async def _until_serving(target: Target, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait for the server's first /healthz (imports take seconds on a loaded machine)."""
    end = time.monotonic() + timeout
    while await _healthz(target) is None:
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"the insights server did not serve within {timeout:g}s (exit {process.poll()})")
        await asyncio.sleep(0.1)


ATTACKS: dict[str, Callable[[Target, Outcome], Awaitable[None]]] = {
    "half_sent_heads": half_sent_heads,
    "oversized_heads": oversized_heads,
    "big_reviews": big_reviews,
    "many_watches": many_watches,
}


def _quiet_client_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Our attackers' TLS connections cut by the server while they write: asyncio (3.11) then
    # fails inside its own callback. The client's noise, not the server's; counted in the answers.
    if not isinstance(context.get("exception"), (AttributeError, ConnectionError)):
        loop.default_exception_handler(context)


async def run(tree: Path, names: list[str], memory_limit_mib: int) -> dict[str, Any]:
    raise_open_file_limit()
    asyncio.get_running_loop().set_exception_handler(_quiet_client_errors)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp)
        aggregator, anonymous = certificates(cert_dir)
        for name in names:
            process, port = start_server(tree, cert_dir, memory_limit_mib)
            try:
                target = Target(port, process.pid, aggregator, anonymous)
                await _until_serving(target, process)
                idle = rss_kib(process.pid)[0] / 1024
                outcome = await measured(target, ATTACKS[name], cert_dir / "ca.crt")
                results[name] = {"idle_mib": round(idle, 1), **outcome.__dict__, "answers": dict(outcome.answers)}
            finally:
                process.terminate()
                process.wait(20)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.insights_attack", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="checkout whose insights server is attacked")
    parser.add_argument("--only", default=",".join(ATTACKS), help=f"comma-separated, of {', '.join(ATTACKS)}")
    parser.add_argument("--memory-limit-mib", type=int, default=256, help="as the chart passes limits.memory")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.tree.resolve(), args.only.split(","), args.memory_limit_mib))
    rows = [
        [
            name,
            r["idle_mib"],
            round(r["peak_mib"], 1),
            round(r["after_mib"], 1),
            round(r["healthz_max_ms"], 1),
            r["healthz_failed"],
            r["note"],
        ]
        for name, r in results.items()
    ]
    print(table(["attack", "idle MiB", "peak MiB", "after MiB", "/healthz max ms", "probes failed", "note"], rows))
    for name, r in results.items():
        say(f"{name}: " + ", ".join(f"{k} x{v}" for k, v in sorted(r["answers"].items())))


if __name__ == "__main__":
    main()
