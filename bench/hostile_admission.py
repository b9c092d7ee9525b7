"""Issue 25's attacks on the admission port, one at a time: each one's peak memory, answers and /healthz.

    .venv/bin/python -m bench.hostile_admission [--only NAME ...] [--workers N] [--memory-limit-mib 256]
                                                [--source DIR]

Starts `python -m webhook` (TLS on 127.0.0.1, `--memory-limit-mib` as the chart passes it) from
this checkout, or from ``--source`` (another checkout's sources, e.g. main's, to measure before a
fix), runs each attack against it, and prints per attack: the peak memory of the pod (the PSS of
the supervisor and every worker, summed, sampled every 50 ms), the most /healthz took on a new
connection meanwhile (polled every 100 ms), and what the attacker was answered. Each attack is a
coroutine of its own (``ATTACKS``), so bench.flood's mix can run them together. Loopback only;
every attack stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing
import os
import socket
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import orjson

from fooapi import LEGACY_API_VERSION

from . import servers
from .foos import conversion_of, create_review, new_foo
from .report import fmt, save, say, table

MiB = 1024 * 1024


@dataclass
class Target:
    """Where the attacks go."""

    host: str
    port: int
    cafile: Path

    @property
    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))


@dataclass
class Outcome:
    """What an attack was answered: status codes (or how the connection ended) and answer sizes."""

    answers: Counter[str] = field(default_factory=Counter)
    largest_answer: int = 0

    def saw(self, head: bytes, size: int = 0) -> None:
        line = head.split(b"\r\n", 1)[0].split(b" ")
        self.answers[line[1].decode() if len(line) > 1 else "closed"] += 1
        self.largest_answer = max(self.largest_answer, size)


async def _open(target: Target, *, rcvbuf: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TLS connection; ``rcvbuf``: a client that does not read, with a small receive buffer and
    a reader that stops taking bytes from the socket once it holds a few KiB."""
    if rcvbuf is None:
        return await asyncio.open_connection(target.host, target.port, ssl=target.context, limit=64 * MiB)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (target.host, target.port))
    return await asyncio.open_connection(sock=sock, ssl=target.context, server_hostname=target.host, limit=rcvbuf)


def _post_head(path: str, length: int, *extra: str) -> bytes:
    headers = "".join(f"{line}\r\n" for line in extra)
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n{headers}\r\n"
    ).encode()


async def _answer(reader: asyncio.StreamReader, outcome: Outcome, timeout: float = 60.0) -> None:
    """Read one answer (head and body) into ``outcome``; a closed connection counts as such."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]) if b"ength:" in head else 0
        await asyncio.wait_for(reader.readexactly(length), timeout)
        outcome.saw(head, length)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, TimeoutError):
        outcome.answers["closed"] += 1


async def _connected(
    target: Target, outcome: Outcome, *, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A new connection, or None (counted) if the server refused it."""
    try:
        return await _open(target, rcvbuf=rcvbuf)
    except OSError:
        outcome.answers["connect refused"] += 1
        return None


async def _exchange(target: Target, data: bytes, outcome: Outcome, *, look_for_more: bool = False) -> None:
    """Send ``data`` on a new connection and read its answer; ``look_for_more``: and count a
    second answer if one arrives within 2 s (finding 8)."""
    streams = await _connected(target, outcome)
    if streams is None:
        return
    reader, writer = streams
    try:
        writer.write(data)
        await _answer(reader, outcome)
        if look_for_more:
            more = await asyncio.wait_for(reader.read(4096), 2.0)
            if more:
                outcome.answers["second answer"] += 1
    except (ConnectionError, ssl.SSLError, TimeoutError):
        pass
    finally:
        writer.close()


# ---- the attacks ------------------------------------------------------------------------------


async def gzip_bomb(target: Target, outcome: Outcome, *, count: int = 1, inflated_mib: int = 256) -> None:
    """Finding 1: a ~260 KB gzip body that inflates to /convert's 256 MiB limit."""
    bomb = gzip.compress(b" " * (inflated_mib * MiB))
    request = _post_head("/convert", len(bomb), "Content-Encoding: gzip") + bomb
    await asyncio.gather(*(_exchange(target, request, outcome) for _ in range(count)))


async def non_readers(
    target: Target, outcome: Outcome, *, count: int = 4, mib: int = 3, waves: int = 2, hold: float = 30.0
) -> None:
    """Finding 3: conversions of ``mib`` MiB whose answers the client never reads (tiny receive
    buffer), held ``hold`` seconds; then a second wave."""
    foos = [new_foo(i) for i in range(mib)]
    for foo in foos:
        foo["metadata"]["annotations"] = {"example.com/blob": "x" * (MiB - 1024)}
    body = orjson.dumps(conversion_of_objects(foos))

    async def one() -> None:
        streams = await _connected(target, outcome, rcvbuf=4096)
        if streams is None:
            return
        reader, writer = streams
        writer.write(_post_head("/convert", len(body)) + body)
        await asyncio.sleep(hold)
        await _answer(reader, outcome, timeout=5)
        writer.close()

    for _ in range(waves):
        await asyncio.gather(*(one() for _ in range(count)))


def conversion_of_objects(objects: list[dict[str, Any]]) -> dict[str, Any]:
    review = conversion_of(1, LEGACY_API_VERSION)
    review["request"]["objects"] = objects
    return review


async def amplified_error(target: Target, outcome: Outcome, *, mib: int = 3) -> None:
    """Finding 4: an invalid deployment name of ``mib`` MiB, shown in every field error."""
    foo = new_foo()
    foo["spec"]["deployment"] = {"name": "\n" * (mib * MiB)}
    body = orjson.dumps(create_review(foo))
    await _exchange(target, _post_head("/validate-foo", len(body)) + body, outcome)


async def _hold(target: Target, outcome: Outcome, *, count: int, send: bytes, hold: float) -> None:
    """``count`` connections that each send ``send`` and then nothing, held ``hold`` seconds."""
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(count):
            try:
                _, writer = await asyncio.wait_for(_open(target), 5)
            except (OSError, TimeoutError, ssl.SSLError):
                outcome.answers["connect refused"] += 1
                continue
            writer.write(send)
            writers.append(writer)
        outcome.answers["connections held"] += len(writers)
        await asyncio.sleep(hold)
    finally:
        for writer in writers:
            writer.close()


async def waiting_bodies(
    target: Target, outcome: Outcome, *, connections: int = 300, sent_kib: int = 512, hold: float = 8.0
) -> None:
    """Finding 5: connections that declare an 8 MiB body, send ``sent_kib`` of it at once and stop,
    while two 8 MiB bodies that trickle hold the budget."""
    declared = 8 * MiB

    async def flood() -> None:
        await asyncio.sleep(0.5)  # the budget is held first
        waiting = _post_head("/convert", declared) + b" " * (sent_kib * 1024)
        await _hold(target, outcome, count=connections, send=waiting, hold=hold)

    holders = _hold(target, outcome, count=2, send=_post_head("/convert", declared) + b"[", hold=hold + 0.5)
    await asyncio.gather(holders, flood())


async def idle_connections(target: Target, outcome: Outcome, *, connections: int = 1100, hold: float = 5.0) -> None:
    """Finding 6: as many idle TLS connections as the server lets one client open."""
    await _hold(target, outcome, count=connections, send=b"", hold=hold)


async def chunked_trailers(target: Target, outcome: Outcome, *, floods: int = 8, trailer_mib: int = 16) -> None:
    """Finding 7: chunked bodies followed by ``trailer_mib`` MiB of trailer fields."""

    async def one() -> None:
        streams = await _connected(target, outcome)
        if streams is None:
            return
        reader, writer = streams
        try:
            writer.write(
                b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
            )
            line = b"X-T: " + b"a" * 4000 + b"\r\n"
            for _ in range(trailer_mib * MiB // len(line)):
                writer.write(line)
                await writer.drain()
                if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
                    break  # answered: the server stopped reading
            writer.write(b"\r\n")
            await _answer(reader, outcome, timeout=30)
        except (ConnectionError, ssl.SSLError):
            outcome.answers["closed"] += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(floods)))


async def upgrades(target: Target, outcome: Outcome) -> None:
    """Finding 8: an Upgrade and a CONNECT, each answered once?"""
    await _exchange(
        target,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        outcome,
        look_for_more=True,
    )
    await _exchange(
        target, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", outcome, look_for_more=True
    )


async def deep_nesting(target: Target, outcome: Outcome) -> None:
    """Finding 9: a value 990 deep in a review, a nested stash, a /convert object 300 deep."""

    def nested(review: dict[str, Any], depth: int, opening: bytes = b'{"a":', closing: bytes = b"}") -> bytes:
        inner = b'"x"' if opening.startswith(b"{") else b""
        return orjson.dumps(review).replace(b'"NESTED"', opening * depth + inner + closing * depth)

    foo = new_foo()
    foo["spec"] = "NESTED"  # rendered in "spec: must be an object"
    deep_value = nested(create_review(foo), 990, b"[", b"]")
    stashed = conversion_of(1, LEGACY_API_VERSION)
    stashed["request"]["desiredAPIVersion"] = "samplecontroller.k8s.io/v1"
    obj = stashed["request"]["objects"][0]
    obj["apiVersion"] = LEGACY_API_VERSION
    obj.setdefault("metadata", {})["annotations"] = {"samplecontroller.k8s.io/conversion-data": "[" * 5000 + "]" * 5000}
    deep_convert = conversion_of(1, LEGACY_API_VERSION)
    deep_convert["request"]["objects"][0]["spec"]["extra"] = "NESTED"
    for path, body in (
        ("/validate-foo", deep_value),
        ("/convert", orjson.dumps(stashed)),
        ("/convert", nested(deep_convert, 300)),
    ):
        await _exchange(target, _post_head(path, len(body)) + body, outcome)


Attack = Callable[[Target, Outcome], Awaitable[None]]
ATTACKS: dict[str, Attack] = {
    "1-gzip-bomb": gzip_bomb,
    "3-tls-non-readers": non_readers,
    "4-amplified-error": amplified_error,
    "5-waiting-bodies": waiting_bodies,
    "6-idle-connections": idle_connections,
    "7-chunked-trailers": chunked_trailers,
    "8-upgrades": upgrades,
    "9-deep-nesting": deep_nesting,
}


# ---- measuring ---------------------------------------------------------------------------------


def pod_pids(pid: int) -> list[int]:
    """``pid`` and its children (the workers of ``--workers N``)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(child) for child in children)]


def pod_pss_kib(pid: int) -> int:
    """The memory of ``pid`` and its children, shared pages counted once (PSS, KiB)."""
    total = 0
    for one in pod_pids(pid):
        try:
            for line in Path(f"/proc/{one}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def _poll_healthz(target: Target, stop: EventType, results: Connection) -> None:
    """In a process of its own (the attacker's CPU work must not delay it): GET /healthz on a new
    connection every 100 ms until ``stop``; sends the latencies and how many failed."""

    async def poll() -> tuple[list[float], int]:
        latencies: list[float] = []
        failed = 0
        while not stop.is_set():
            started = time.perf_counter()
            outcome = Outcome()
            try:
                await asyncio.wait_for(
                    _exchange(target, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", outcome),
                    30,
                )
            except TimeoutError:
                pass
            latencies.append(time.perf_counter() - started)
            failed += outcome.answers.get("200", 0) == 0
            await asyncio.sleep(0.1)
        return latencies, failed

    results.send(asyncio.run(poll()))
    results.close()


async def _sample(pid: int, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak.append(pod_pss_kib(pid))
        await asyncio.sleep(0.05)


async def measure(name: str, attack: Attack, target: Target, pid: int) -> dict[str, Any]:
    """Run ``attack`` once while sampling the pod's memory and /healthz; its numbers."""
    idle = pod_pss_kib(pid)
    stop = asyncio.Event()
    samples: list[int] = []
    outcome = Outcome()
    forked = multiprocessing.get_context("fork")
    polling_stop = forked.Event()
    receive, send = forked.Pipe(duplex=False)
    poller = forked.Process(target=_poll_healthz, args=(target, polling_stop, send), name="healthz-poller")
    poller.start()
    watchers = [asyncio.create_task(_sample(pid, stop, samples))]
    started = time.monotonic()
    try:
        await asyncio.wait_for(attack(target, outcome), 180)
    except TimeoutError:
        outcome.answers["attack timed out"] += 1
    except Exception as err:  # the attacker's own failure: reported, the next attack still runs
        outcome.answers[f"attack failed: {type(err).__name__}: {err}"[:120]] += 1
    stop.set()
    polling_stop.set()
    await asyncio.gather(*watchers, return_exceptions=True)
    latency, healthz_failed = await asyncio.to_thread(receive.recv)
    poller.join(timeout=10)
    return {
        "attack": name,
        "seconds": time.monotonic() - started,
        "idle_mib": idle / 1024,
        "peak_mib": max(samples, default=idle) / 1024,
        "healthz_max_ms": max(latency, default=float("nan")) * 1000,
        "healthz_failed": healthz_failed,
        "answers": dict(outcome.answers),
        "largest_answer_mib": outcome.largest_answer / MiB,
        "alive": os.path.exists(f"/proc/{pid}"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_admission", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(ATTACKS), help="run only these (repeatable)")
    parser.add_argument("--workers", default="1", help="--workers of the webhook (auto: as the chart runs it)")
    parser.add_argument("--memory-limit-mib", type=int, default=256, help="as the chart passes limits.memory")
    parser.add_argument("--source", type=Path, help="run the webhook from this checkout's sources (PYTHONPATH)")
    args = parser.parse_args(argv)
    names = args.only or list(ATTACKS)
    # PYTHONSAFEPATH: `-m webhook` must not find this checkout first through the working directory.
    source_env = {"PYTHONPATH": str(args.source.resolve()) if args.source else "", "PYTHONSAFEPATH": "1"}
    env = {**os.environ, **source_env} if args.source else None
    results = []
    with tempfile.TemporaryDirectory(prefix="foo-hostile-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        flags = ["--memory-limit-mib", str(args.memory_limit_mib), "--workers", str(args.workers)]
        for name in names:  # each against a fresh process: what one attack left cannot count for the next
            with servers.ours(cert_dir, args=flags, env=env, pin=False) as server:
                assert server.pid is not None
                say(f"attack {name} on pid {server.pid}")
                port = int(server.url.rsplit(":", 1)[1])
                target = Target("127.0.0.1", port, cert_dir / "ca.crt")
                results.append(asyncio.run(measure(name, ATTACKS[name], target, server.pid)))
    print(
        table(
            ["attack", "idle MiB", "peak MiB", "/healthz max ms", "/healthz failed", "largest answer MiB", "answers"],
            [
                [
                    r["attack"],
                    fmt(r["idle_mib"]),
                    fmt(r["peak_mib"]),
                    fmt(r["healthz_max_ms"]),
                    r["healthz_failed"],
                    fmt(r["largest_answer_mib"]),
                    " ".join(f"{k}:{v}" for k, v in sorted(r["answers"].items())),
                ]
                for r in results
            ],
        )
    )
    save("hostile_admission", {"settings": {**vars(args), "source": str(args.source)}, "results": results})


if __name__ == "__main__":
    main()
