"""Conversion: one ConversionReview of 10,000 Foos over HTTPS, and lists through a real kube-apiserver.

    .venv/bin/python -m bench.conversion [--objects 10000] [--repeat 5] [--no-apiserver]

Direct: the same review (10,000 stored v1 Foos to v1alpha1, and 10,000 v1alpha1 Foos to v1)
POSTed to our /convert and to the Go peer's, server pinned to core 0 and this client to core 1;
median of ``--repeat`` runs, request already encoded, answer read whole (not parsed).

Through kube-apiserver: a minimal plane with the watch cache off (so every list reads etcd and
converts every object instead of answering from a per-version cache), our webhook registered as
the CRD's conversion webhook, 10,000 v1 Foos stored; the same list at v1alpha1 and at v1 —
the difference is what conversion costs. The Go peer gets the same CRD with only the URL changed,
and the two sides alternate run by run. kube-apiserver sends one ConversionReview per object it
reads from etcd (the etcd3 store decodes, and so converts, each list item alone): the benchmark
counts them on our metrics listener, and reports Foos/s converted, ours ÷ Go.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import tempfile
import time
import urllib.parse
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attacks.foos import conversion_of, dumps
from fooapi import HUB_API_VERSION, LEGACY_API_VERSION
from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.product import LocalProduct

from . import servers
from .load import cores
from .planes import apply, plane
from .profile import profile_table, start_py_spy, stop_py_spy
from .report import fmt, ratio, save, say, table


def _pin_self_to_load_core() -> None:
    _, load_core = cores()
    if load_core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(load_core)})


def direct(server: servers.Server, cert_dir: Path, body: bytes, count: int, repeat: int) -> dict[str, Any]:
    context = servers.client_context(cert_dir)
    times = []
    cpu = 0.0
    for run in range(repeat + 1):  # the first is a warm-up
        if run == 1:
            cpu = server.cpu_seconds()
        started = time.perf_counter()
        status, out = servers.request(server.url + "/convert", context, body=body, timeout=120)
        times.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"{server.name} /convert: HTTP {status}: {out[:300]!r}")
    answer = json.loads(out)["response"]
    if answer["result"]["status"] != "Success" or len(answer["convertedObjects"]) != count:
        raise RuntimeError(f"{server.name} /convert did not convert {count} objects: {answer['result']}")
    cpu_per_review = (server.cpu_seconds() - cpu) / repeat
    median = statistics.median(times[1:])
    return {
        "seconds": median,
        "server_cpu_seconds": cpu_per_review,
        "min_seconds": min(times[1:]),
        "objects_per_second": count / median,
        "request_bytes": len(body),
        "response_bytes": len(out),
        "runs": times[1:],
    }


def list_rates(count: int, v1alpha1_seconds: float, v1_seconds: float) -> dict[str, float | None]:
    """Foos/s of a list read at v1alpha1 (every object converted, one review each) and of the
    conversion alone: the list at v1alpha1 minus the same list at v1 (no conversion). None when the
    difference is lost in noise (not positive)."""
    converting = v1alpha1_seconds - v1_seconds
    return {
        "list_v1alpha1_foos_per_second": count / v1alpha1_seconds if v1alpha1_seconds > 0 else None,
        "conversion_foos_per_second": count / converting if converting > 0 else None,
    }


def side_summary(count: int, lists: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians over one side's timed lists (``count`` Foos each, at v1alpha1 and at v1): the lists'
    times, what the conversion adds per review (time; the webhook's CPU; kube-apiserver's CPU above the
    same list at v1) and the most connections one list at v1alpha1 used and opened."""

    def median(version: str, key: str) -> float:
        return statistics.median(m[key] for m in lists[version])

    alpha, hub = median("v1alpha1", "seconds"), median("v1", "seconds")
    converting = lists["v1alpha1"]
    return {
        "list_v1alpha1_seconds": alpha,
        "list_v1_seconds": hub,
        "conversion_seconds": alpha - hub,
        **list_rates(count, alpha, hub),
        "ms_per_review": (alpha - hub) * 1000 / count,
        "webhook_cpu_us_per_review": median("v1alpha1", "webhook_cpu_seconds") * 1e6 / count,
        "apiserver_cpu_us_per_review": (
            median("v1alpha1", "apiserver_cpu_seconds") - median("v1", "apiserver_cpu_seconds")
        )
        * 1e6
        / count,
        "connections": max(int(m["connections"]) for m in converting),
        "connections_opened": max(int(m["connections_opened"]) for m in converting),
        "lists": lists,
    }


@dataclass
class Side:
    """One conversion webhook kube-apiserver can be pointed at: its URL, the port connections to it are
    counted on, and its process (for the profiler)."""

    name: str
    url: str
    pid: int | None

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port or 443


class ConnectionWatch:
    """The TCP connections to one port while something runs: sampled every ``interval`` seconds and
    once more at the end (a connection closed in between is still there, in TIME_WAIT)."""

    def __init__(self, port: int, interval: float = 0.1) -> None:
        self.port = port
        self.interval = interval
        self.before: set[int] = set()
        self.seen: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.seen |= servers.connections_to(self.port)
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> ConnectionWatch:
        self.before = servers.connections_to(self.port)
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        self.seen |= servers.connections_to(self.port)

    def counts(self) -> dict[str, int]:
        """Connections used (every one seen) and opened (not there before) while watched."""
        return {"connections": len(self.seen), "connections_opened": len(self.seen - self.before)}


async def _seed_and_list(
    product: LocalProduct, count: int, repeat: int, sides: list[Side], profile_out: Path | None
) -> dict[str, Any]:
    async with AdminClient(product.plane, connections=32) as client:
        say(f"storing {count:,} v1 Foos (admission webhooks unregistered for the seeding)")
        product.unregister_admission()
        seeded = await client.create_foos([plain_foo(i) for i in range(count)], concurrency=32)
        if seeded.failed:
            raise RuntimeError(f"seeding failed {seeded.failed} times: {seeded.first_error}")

        async def list_at(version: str) -> float:
            started = time.perf_counter()
            status, body = await client.request("GET", f"/apis/samplecontroller.k8s.io/{version}/foos")
            elapsed = time.perf_counter() - started
            if status != 200:
                raise RuntimeError(f"list at {version}: HTTP {status}: {body[:300]!r}")
            items = json.loads(body)["items"]
            if len(items) != count or items[0]["apiVersion"] != f"samplecontroller.k8s.io/{version}":
                raise RuntimeError(f"list at {version} returned {len(items)} items")
            return elapsed

        async def use(side: Side) -> None:
            """Point the CRD's conversion webhook at ``side`` (same CRD, only the URL differs) and wait
            until reading one Foo at v1alpha1 reaches it: the apiserver rebuilds the CRD's storage
            when its conversion client config changes."""
            apply(product.plane, product.manifests(side.url)[0])
            for _ in range(300):
                before = servers.webhook_requests(product.metrics_url, "/convert")
                status, _ = await client.request("GET", f"/apis/{LEGACY_API_VERSION}/namespaces/default/foos/foo-00000")
                reached_ours = servers.webhook_requests(product.metrics_url, "/convert") > before
                if status == 200 and reached_ours == (side.name == "ours"):
                    return
                await asyncio.sleep(0.1)
            raise RuntimeError(f"kube-apiserver never called {side.name}'s /convert")

        apiserver_pid = product.plane.component_pid("kube-apiserver")
        names = [side.name for side in sides]
        lists: dict[str, dict[str, list[dict[str, float]]]] = {name: {"v1alpha1": [], "v1": []} for name in names}
        profile: dict[str, Any] = {}
        reviews = 0.0
        # Run 0 warms up (connections, code paths) and counts the reviews one list costs our webhook;
        # the sides alternate run by run so neither gets the quieter moments of a shared machine.
        for run in range(repeat + 1):
            for side in sides:
                await use(side)
                before = servers.webhook_requests(product.metrics_url, "/convert")
                for version in ("v1alpha1", "v1"):
                    sampler = None
                    if profile_out and run == 1 and version == "v1alpha1" and side.name == "ours" and side.pid:
                        sampler = start_py_spy(side.pid, profile_out)
                    cpu = servers.process_cpu_seconds(side.pid), servers.process_cpu_seconds(apiserver_pid)
                    async with ConnectionWatch(side.port) as watch:
                        seconds = await list_at(version)
                    measured = {
                        "seconds": seconds,
                        "webhook_cpu_seconds": servers.process_cpu_seconds(side.pid) - cpu[0],
                        "apiserver_cpu_seconds": servers.process_cpu_seconds(apiserver_pid) - cpu[1],
                        **watch.counts(),
                    }
                    if sampler is not None and profile_out:
                        profile = stop_py_spy(sampler, profile_out, top=20)
                    if run:
                        lists[side.name][version].append(measured)
                if run == 0 and side.name == "ours":
                    reviews = servers.webhook_requests(product.metrics_url, "/convert") - before

        result: dict[str, Any] = {"seed_creates_per_second": seeded.per_second, "sides": names}
        for name in names:
            result[name] = {
                **side_summary(count, lists[name]),
                "our_reviews_per_list": reviews if name == "ours" else None,
            }
            say(f"{name}: {result[name]}")
        for peer, key in (
            (servers.GO_PEER, "conversion_rate_ours_to_go"),
            (servers.GO_PEER_HTTP1, "conversion_rate_ours_to_go_http1"),
        ):
            if peer in result:
                result[key] = ratio(
                    result["ours"]["conversion_foos_per_second"], result[peer]["conversion_foos_per_second"]
                )
        if profile:
            result["ours_profile"] = profile
        return result


def through_apiserver(count: int, repeat: int, with_go: bool, go_http1: bool, profile: bool) -> dict[str, Any]:
    with plane("conversion", apiserver_args=["--watch-cache=false"]) as p, ExitStack() as stack:
        product = LocalProduct(p)
        product.start()
        stack.callback(product.stop)
        sides = [Side("ours", product.url, product.webhook.pid if product.webhook else None)]
        for wanted, http1 in ((with_go, False), (with_go and go_http1, True)):
            if wanted:
                go = stack.enter_context(servers.go_peer(product.cert_dir, pin=False, http1=http1))
                sides.append(Side(go.name, go.url, go.pid))
        profile_out = None
        if profile:
            profile_out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="foo-bench-"))) / "ours.txt"
        return asyncio.run(_seed_and_list(product, count, repeat, sides, profile_out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conversion", description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (median reported)")
    parser.add_argument("--no-go", action="store_true", help="skip the Go peer")
    parser.add_argument("--no-apiserver", action="store_true", help="skip the lists through kube-apiserver")
    parser.add_argument(
        "--list-runs",
        type=int,
        help="timed lists per side through kube-apiserver (default: half of --repeat, at least 3)",
    )
    parser.add_argument(
        "--go-http1",
        action="store_true",
        help="through kube-apiserver, also the Go peer offering only HTTP/1.1 (as kube-apiserver speaks to a"
        " webhook behind a Service, and as it speaks to ours)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on our webhook during one list at v1alpha1 through kube-apiserver",
    )
    args = parser.parse_args(argv)

    cases = {"to v1alpha1": LEGACY_API_VERSION, "to v1": HUB_API_VERSION}
    direct_results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        reviews = {case: dumps(conversion_of(args.objects, desired)) for case, desired in cases.items()}
        starters = [functools.partial(servers.ours, args=servers.ROOM_FOR_BIG_REVIEWS)]
        starters += [] if args.no_go else [servers.go_peer]
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        for start in starters:
            with start(cert_dir) as server:
                _pin_self_to_load_core()
                try:
                    for case, body in reviews.items():
                        say(f"{server.name}: one review of {args.objects:,} Foos {case}")
                        direct_results.setdefault(server.name, {})[case] = direct(
                            server, cert_dir, body, args.objects, args.repeat
                        )
                finally:
                    if affinity is not None:
                        os.sched_setaffinity(0, affinity)

    rows = []
    for name, by_case in direct_results.items():
        for case, r in by_case.items():
            ours = direct_results["ours"][case]
            rows.append(
                [
                    name,
                    case,
                    r["seconds"] * 1000,
                    r["objects_per_second"],
                    r["server_cpu_seconds"] * 1000,
                    r["request_bytes"] / 1e6,
                    fmt(ratio(ours["seconds"], r["seconds"]), 2) if name != "ours" else "(ref)",
                    fmt(ratio(ours["server_cpu_seconds"], r["server_cpu_seconds"]), 2) if name != "ours" else "(ref)",
                ]
            )
    print(f"\nOne ConversionReview of {args.objects:,} Foos over HTTPS, server on 1 core (median of {args.repeat})")
    print(
        table(["server", "case", "ms", "objects/s", "server CPU ms", "request MB", "ours time ×", "ours CPU ×"], rows)
    )

    apiserver: dict[str, Any] = {}
    if not args.no_apiserver:
        apiserver = through_apiserver(
            args.objects, args.list_runs or max(3, args.repeat // 2 + 1), not args.no_go, args.go_http1, args.profile
        )
        rows = []
        for name in apiserver["sides"]:
            r = apiserver[name]
            rows.append(
                [
                    name,
                    r["list_v1_seconds"] * 1000,
                    r["list_v1alpha1_seconds"] * 1000,
                    r["conversion_foos_per_second"],
                    fmt(r["ms_per_review"], 2),
                    r["webhook_cpu_us_per_review"],
                    r["apiserver_cpu_us_per_review"],
                    r["connections"],
                    r["connections_opened"],
                    r["our_reviews_per_list"],
                ]
            )
        print(
            f"\nkube-apiserver list of {args.objects:,} stored v1 Foos (watch cache off; "
            f"seeded at {apiserver['seed_creates_per_second']:,.0f} creates/s)"
        )
        print(
            table(
                [
                    "conversion webhook",
                    "list at v1 ms",
                    "list at v1alpha1 ms",
                    "Foos/s converted",
                    "ms per review",
                    "webhook CPU µs/review",
                    "apiserver CPU µs/review",
                    "connections",
                    "opened",
                    "reviews per list",
                ],
                rows,
            )
        )
        print(
            "\nkube-apiserver sends one ConversionReview per object read from etcd; Foos/s converted, "
            f"ours ÷ Go: {fmt(apiserver.get('conversion_rate_ours_to_go'), 2)}"
            + (
                f"; ours ÷ Go over HTTP/1.1: {fmt(apiserver['conversion_rate_ours_to_go_http1'], 2)}"
                if "conversion_rate_ours_to_go_http1" in apiserver
                else ""
            )
            + "\nconnections: most seen to the webhook's port during one list at v1alpha1 (opened: not there before it)"
        )
        if "ours_profile" in apiserver:
            print(f"\nour webhook during one list at v1alpha1 (py-spy, {apiserver['ours_profile']['samples']} samples)")
            print(profile_table(apiserver["ours_profile"]))
    path = save("conversion", {"settings": vars(args), "direct": direct_results, "apiserver": apiserver})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
