"""Large FooHealth lists: the insights server's memory while it answers big Tables at once.

    .venv/bin/python -m bench.lists [--objects 1000] [--label-kib 8] [--concurrent 8] [--rounds 3]

One insights server (its own process, HTTPS on 127.0.0.1, a client certificate as the aggregator
presents) holds ``--objects`` FooHealths whose Foos carry ``--label-kib`` KiB of labels each.
``--concurrent`` clients then ask at once for the Table with ``includeObject=Object`` (what
`kubectl get foohealths` asks, with the objects), ``--rounds`` times; each answer is read as it
comes and thrown away. The server's RSS is sampled every 5 ms. Printed: RSS before, peak, and
the peak's growth, the answers' size and the time of each round (issue #25, finding 13).

Runs against any checkout that has insights.server.build_app (copy this file to measure an
older one). Loopback only; bounded by the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from .report import fmt, save, say, table

MiB = 1024 * 1024
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
PATH = "/apis/insights.samplecontroller.k8s.io/v1alpha1/foohealths?includeObject=Object"


def labels(i: int, kib: int) -> dict[str, str]:
    """About ``kib`` KiB of labels: 63-byte values under 40-byte keys."""
    return {f"bench.example.com/label-{i:05d}-{n:04d}": "v" * 63 for n in range(kib * 1024 // 110)}


def foo(i: int, kib: int) -> dict[str, Any]:
    return {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {
            "name": f"foo-{i:05d}",
            "namespace": "default",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels(i, kib),
        },
        "spec": {"deployment": {"name": f"foo-{i:05d}", "image": "nginx:1.27"}, "replicas": 1},
        "status": {"observedGeneration": 1},
    }


def serve(directory: Path, objects: int, kib: int) -> None:
    """The server side (a child process): fill a view, serve it, write the port, run until killed."""
    from aiohttp import web

    from certs.authority import issue_client, issue_serving, new_ca
    from insights import AggregatedConfig
    from insights.authn import RequestHeaderConfig, UserInfo
    from insights.authz import Decision, RequestInfo
    from insights.server import build_app
    from insights.view import HealthView

    async def allow(user: UserInfo, info: RequestInfo) -> Decision:
        return Decision(True)

    serving_ca, front_proxy = new_ca("bench-serving-ca"), new_ca("bench-front-proxy-ca")
    serving = issue_serving(serving_ca, common_name="insights", dns_names=["localhost"], ips=["127.0.0.1"])
    client = issue_client(front_proxy, common_name="front-proxy-client")
    for name, data in {
        "ca.crt": serving_ca.cert_pem,
        "tls.crt": serving.cert_pem,
        "tls.key": serving.key_pem,
        "client.crt": client.cert_pem,
        "client.key": client.key_pem,
    }.items():
        (directory / name).write_bytes(data)
    view = HealthView.empty(instance=1)
    on_add = view.handlers("foos")[0]
    for i in range(objects):
        obj = foo(i, kib)
        view.foos.put(f"default/{obj['metadata']['name']}", obj)
        on_add(obj)
    app = build_app(
        AggregatedConfig(
            requestheader=RequestHeaderConfig(
                client_ca_pem=front_proxy.cert_pem, allowed_names=("front-proxy-client",)
            ),
            authorizer=allow,
            view=view,
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    context.load_verify_locations(cadata=front_proxy.cert_pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL

    async def run() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        (directory / "port").write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(run())


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def one(session: aiohttp.ClientSession, url: str, context: ssl.SSLContext) -> tuple[int, int]:
    """One Table, read as it comes and dropped: (status, bytes)."""
    size = 0
    headers = {"Accept": TABLE, "X-Remote-User": "bench", "X-Remote-Group": "system:masters"}
    async with session.get(url, ssl=context, headers=headers) as response:
        async for chunk in response.content.iter_chunked(64 * 1024):
            size += len(chunk)
        return response.status, size


async def rounds(url: str, directory: Path, pid: int, concurrent: int, count: int) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    context.load_cert_chain(directory / "client.crt", directory / "client.key")
    before = rss(pid)
    peak = before
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, rss(pid))
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    times, answers = [], []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for _ in range(count):
            started = time.monotonic()
            answers += await asyncio.gather(*(one(session, url, context) for _ in range(concurrent)))
            times.append(time.monotonic() - started)
    stop.set()
    await sampler
    return {
        "rss_before_mib": before / MiB,
        "rss_peak_mib": peak / MiB,
        "growth_mib": (peak - before) / MiB,
        "answer_mib": max(size for _, size in answers) / MiB,
        "statuses": sorted({status for status, _ in answers}),
        "round_seconds": times,
    }


def measure(objects: int, kib: int, concurrent: int, count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lists-") as tmp:
        directory = Path(tmp)
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.lists", "--serve", tmp, "--objects", str(objects), "--label-kib", str(kib)],
            cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            deadline = time.monotonic() + 120
            while not (directory / "port").exists():
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the insights server did not start")
                time.sleep(0.05)
            url = f"https://127.0.0.1:{(directory / 'port').read_text()}{PATH}"
            return asyncio.run(rounds(url, directory, child.pid, concurrent, count))
        finally:
            child.kill()
            child.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.lists", description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--label-kib", type=int, default=8)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(Path(args.serve), args.objects, args.label_kib)
        return
    say(
        f"{args.concurrent} concurrent Tables (includeObject=Object) of {args.objects} FooHealths, {args.label_kib} KiB"
    )
    results = measure(args.objects, args.label_kib, args.concurrent, args.rounds)
    print(
        table(
            ["RSS before MiB", "RSS peak MiB", "growth MiB", "answer MiB", "statuses", "rounds s"],
            [
                [
                    fmt(results["rss_before_mib"]),
                    fmt(results["rss_peak_mib"]),
                    fmt(results["growth_mib"]),
                    fmt(results["answer_mib"]),
                    results["statuses"],
                    " ".join(fmt(t, 2) for t in results["round_seconds"]),
                ]
            ],
        )
    )
    save("lists", {"args": vars(args), "pid": os.getpid(), **results})


if __name__ == "__main__":
    main()
