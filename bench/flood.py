"""Hostile flood: our webhook under 8 MiB adversarial bodies and slow senders, while real reviews flow.

    .venv/bin/python -m bench.flood [--seconds 30] [--adversaries 50] [--hostile-mib 8] [--slow 8] [--valid 4]
                                    [--memory-limit-mib 256]

One `python -m webhook` process (TLS on 127.0.0.1, pinned to core 0, `--memory-limit-mib` as the
chart sets it) receives at once, for a fixed time:

* ``--adversaries`` clients, each POSTing 8 MiB bodies of `{},` (an AdmissionReview or a
  ConversionReview padded with empty objects: 192 MiB each once parsed) again and again;
* ``--slow`` clients that declare an 8 MiB body and send it a byte a second, reconnecting when
  answered;
* ``--valid`` clients sending real admission and conversion reviews back to back, whose every
  answer is checked (status 200, the review's uid, allowed/converted as expected).

The server's RSS is sampled every 20 ms. Printed: RSS peak against the limit, valid p50/p99/max,
failed valid reviews, and what the hostile clients were answered. Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import ssl
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from attacks.foos import conversion_of, create_review, new_foo
from attacks.honest import ReviewTally, valid
from attacks.webhook import dense
from fooapi import LEGACY_API_VERSION

from . import servers
from .report import fmt, percentile, save, say, table

MiB = 1024 * 1024


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


async def hostile(
    session: aiohttp.ClientSession,
    url: str,
    bodies: list[tuple[str, bytes]],
    index: int,
    tally: ReviewTally,
    stop: asyncio.Event,
) -> None:
    path, body = bodies[index % len(bodies)]
    while not stop.is_set():
        try:
            async with session.post(
                url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=60),
            ) as response:
                await response.read()
                tally.hostile[f"{path} {response.status}"] += 1
        except (TimeoutError, aiohttp.ClientError) as err:
            tally.hostile[f"{path} {type(err).__name__}"] += 1
            await asyncio.sleep(0.05)


async def slow_sender(host: str, port: int, context: ssl.SSLContext, tally: ReviewTally, stop: asyncio.Event) -> None:
    """Declares 8 MiB, sends a byte a second; reconnects once answered."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
        except OSError:
            tally.slow["connect failed"] += 1
            await asyncio.sleep(0.5)
            continue
        writer.write(
            f"POST /convert HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {8 * MiB}\r\n\r\n{{".encode()
        )
        answer = asyncio.ensure_future(reader.readline())
        try:
            while not stop.is_set() and not answer.done():
                await asyncio.wait([answer], timeout=1.0)
                if not answer.done():
                    writer.write(b" ")
                    await writer.drain()
            if answer.done():
                line = answer.result().decode(errors="replace").split(" ")
                tally.slow[line[1] if len(line) > 1 else "closed"] += 1
        except (OSError, ssl.SSLError):
            tally.slow["reset"] += 1
        finally:
            answer.cancel()
            writer.close()


def _ms(seconds: float | None) -> float:
    return float("nan") if seconds is None else seconds * 1000


async def _hostile_side(url: str, context: ssl.SSLContext, args: argparse.Namespace, tally: ReviewTally) -> None:
    size = int(args.hostile_mib * MiB)
    bodies = [
        ("/validate-foo", dense(create_review(new_foo()), size)),
        ("/convert", dense(conversion_of(1, LEGACY_API_VERSION), size)),
    ]
    host, port = url.removeprefix("https://").split(":")
    stop = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0)) as session:
        tasks = [asyncio.create_task(hostile(session, url, bodies, i, tally, stop)) for i in range(args.adversaries)]
        tasks += [asyncio.create_task(slow_sender(host, int(port), context, tally, stop)) for _ in range(args.slow)]
        await asyncio.sleep(args.seconds)
        stop.set()
        _, pending = await asyncio.wait(tasks, timeout=20)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def _valid_side(url: str, context: ssl.SSLContext, args: argparse.Namespace, tally: ReviewTally) -> None:
    stop = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0)) as session:
        await asyncio.sleep(1.0)  # the flood first
        tasks = [asyncio.create_task(valid(session, url, i, tally, stop)) for i in range(args.valid)]
        await asyncio.sleep(args.seconds - 1.0)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


def _side(role: str, url: str, cert_dir: Path, args: argparse.Namespace, results: Connection) -> None:
    """One client process: the hostile clients and the valid ones never share a loop or a core's turn."""
    tally = ReviewTally()
    side = _hostile_side if role == "hostile" else _valid_side
    asyncio.run(side(url, servers.client_context(cert_dir), args, tally))
    results.send(tally)
    results.close()


def flood(url: str, pid: int, cert_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    baseline_kib = rss_kib(pid)[0]
    pipes = {role: context.Pipe(duplex=False) for role in ("hostile", "valid")}
    procs = [
        context.Process(target=_side, args=(role, url, cert_dir, args, send), name=f"flood-{role}")
        for role, (_, send) in pipes.items()
    ]
    started = time.monotonic()
    for proc in procs:
        proc.start()
    samples: list[int] = []
    while any(proc.is_alive() for proc in procs) and time.monotonic() - started < args.seconds + 60:
        samples.append(rss_kib(pid)[0])
        if all(receive.poll() for receive, _ in pipes.values()):
            break
        time.sleep(0.02)
    tallies = {role: receive.recv() for role, (receive, _) in pipes.items()}
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    _, hwm_kib = rss_kib(pid)
    latency = tallies["valid"].valid_latency
    failures = tallies["valid"].valid_failures
    return {
        "seconds": time.monotonic() - started,
        "memory_limit_mib": args.memory_limit_mib,
        "rss_idle_mib": baseline_kib / 1024,
        "rss_peak_mib": max(hwm_kib, *samples) / 1024,
        "valid": {
            "count": len(latency),
            "failed": len(failures),
            "failures": failures[:10],
            "p50_ms": _ms(percentile(latency, 50)),
            "p99_ms": _ms(percentile(latency, 99)),
            "max_ms": max(latency, default=float("nan")) * 1000,
        },
        "hostile_answers": dict(tallies["hostile"].hostile),
        "slow_answers": dict(tallies["hostile"].slow),
        "load_average_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--adversaries", type=int, default=50, help="clients sending 8 MiB dense bodies")
    parser.add_argument(
        "--hostile-mib",
        type=float,
        default=8.0,
        help="size of each dense body; about 1 is the largest the budget lets be parsed",
    )
    parser.add_argument("--slow", type=int, default=8, help="clients sending a byte a second")
    parser.add_argument("--valid", type=int, default=4, help="clients sending real reviews back to back")
    parser.add_argument("--memory-limit-mib", type=int, default=256, help="as the chart passes limits.memory")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="foo-flood-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        with servers.ours(cert_dir, args=["--memory-limit-mib", str(args.memory_limit_mib)]) as server:
            assert server.pid is not None
            say(
                f"flood: {args.adversaries} x {args.hostile_mib:g} MiB dense bodies, {args.slow} slow senders, {args.valid} valid "
                f"clients for {args.seconds:g}s against {server.url} (pid {server.pid})"
            )
            result = flood(server.url, server.pid, cert_dir, args)
    valid_ = result["valid"]
    print(
        table(
            ["RSS idle MiB", "RSS peak MiB", "limit MiB", "valid reviews", "failed", "p50 ms", "p99 ms", "max ms"],
            [
                [
                    fmt(result["rss_idle_mib"]),
                    fmt(result["rss_peak_mib"]),
                    result["memory_limit_mib"],
                    valid_["count"],
                    valid_["failed"],
                    fmt(valid_["p50_ms"]),
                    fmt(valid_["p99_ms"]),
                    fmt(valid_["max_ms"]),
                ]
            ],
        )
    )
    print(table(["hostile answer", "count"], sorted(result["hostile_answers"].items())))
    print(table(["slow sender answer", "count"], sorted(result["slow_answers"].items())))
    for failure in valid_["failures"]:
        print(f"failed valid review: {failure}")
    save("flood", {"settings": vars(args), **result})


if __name__ == "__main__":
    main()
