"""End to end admission: Foo creates through kube-apiserver with our webhooks, the Go peer's, or none.

    .venv/bin/python -m bench.admission_overhead [--creates 2000] [--concurrency 32] [--sequential 200]
                                                 [--kubectl 10] [--cycles 1] [--go-http1]

A minimal plane (etcd + kube-apiserver), our product (CRD + webhook service, registered as the
chart registers it) and the Go controller-runtime peer serving the same certificates. Three states:
our webhooks registered; the Go peer's registered the same way (the same configurations and the
CRD's conversion webhook, only the URL differs); none. Each state's round is ``--creates`` new
Foos from a bounded async client (creates/s), then ``--sequential`` creates one at a time (the round
trip one create waits for), then ``--kubectl`` real `kubectl apply -f` of one Foo each (what a user
feels, process start included). States run ours, Go, none, none, Go, ours (``--cycles`` times), so
each is as often early as late while the store grows. ``--go-http1`` adds a fourth state, the Go
peer offering only HTTP/1.1 as ours does (ours, Go, Go over HTTP/1.1, none, and back): kube-apiserver
offers HTTP/2 to a webhook at a loopback URL only, so this is the Go peer as a cluster reaches it
through a Service. Nothing is pinned: apiserver, etcd, the
webhooks and the client share the machine as they would on a node.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.cluster import LocalControlPlane
from hack.plane.product import LocalProduct

from . import servers
from .planes import plane
from .report import fmt, percentile, ratio, save, say, table

STATES = ("ours", "go", "none")
# With --go-http1, the Go peer once more, offering only HTTP/1.1 as ours does (kube-apiserver offers
# h2 to a webhook at a loopback URL, and only HTTP/1.1 to one behind a Service or any other host).
STATES_WITH_GO_HTTP1 = ("ours", "go", "go-http1", "none")
STATE_NAMES = {
    "ours": "our webhooks",
    "go": "Go peer's webhooks",
    "go-http1": "Go peer's over HTTP/1.1",
    "none": "no webhooks",
}
# A probe Foo carries this many bytes of annotation, so a server that was sent it has read at
# least that much: far above what the Go peer reads on its own (its certificate files).
PROBE_BYTES = 32 * 1024


def round_order(cycles: int, states: tuple[str, ...] = STATES) -> list[str]:
    """ours, go, none, none, go, ours per cycle: every state as often early as late."""
    return (list(states) + list(reversed(states))) * cycles


def pooled(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each state's rounds together: mean creates/s, percentiles over every sequential create and
    every `kubectl apply` of that state."""
    result: dict[str, dict[str, Any]] = {}
    for state in STATES_WITH_GO_HTTP1:
        mine = [r for r in rounds if r["state"] == state]
        if not mine:
            continue
        sequential = [ms for r in mine for ms in r["sequential_ms"]]
        kubectl = [ms for r in mine for ms in r["kubectl_ms"]]
        result[state] = {
            "creates_per_second": statistics.mean(r["creates_per_second"] for r in mine),
            "create_p50_ms": percentile(sequential, 50),
            "create_p99_ms": percentile(sequential, 99),
            "kubectl_p50_ms": percentile(kubectl, 50),
            "kubectl_p99_ms": percentile(kubectl, 99),
            "failed": sum(r["failed"] for r in mine),
        }
    return result


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def added_latency(states: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """What registering each side's webhooks adds to one create: its percentiles minus none's."""
    none = states.get("none", {})
    return {
        side: {
            key: _minus(states[side].get(key), none.get(key))
            for key in ("create_p50_ms", "create_p99_ms", "kubectl_p50_ms", "kubectl_p99_ms")
        }
        for side in states
        if side != "none"
    }


class Sides:
    """Our product and the Go peer (one server per Go state) on one plane; which of them kube-apiserver
    calls, and proof of it."""

    def __init__(self, product: LocalProduct, gos: dict[str, servers.Server]) -> None:
        self.product = product
        self.gos = gos

    def our_calls(self) -> dict[str, float]:
        return {e: servers.webhook_requests(self.product.metrics_url, e) for e in ("/mutate-foo", "/validate-foo")}

    def register(self, state: str) -> None:
        if state == "none":
            self.product.unregister_admission()
        else:
            self.product.register(self.gos[state].url if state in self.gos else None)

    async def wait_for(self, client: AdminClient, state: str) -> None:
        """Until a create reaches exactly the side ``state`` names (the apiserver's informers caught up
        with the configurations, and with the CRD's new storage when its conversion URL changed)."""
        annotation = {"bench/padding": "x" * PROBE_BYTES}
        for attempt in range(300):
            ours = self.our_calls()
            go_read = {name: servers.process_bytes_read(go.pid) for name, go in self.gos.items()}
            probe = plain_foo(attempt, prefix=f"probe-{state}-{int(time.time())}")
            probe["metadata"]["annotations"] = annotation
            outcome = await client.create_foos([probe])
            after = self.our_calls()
            for name, go in self.gos.items():
                go_read[name] = servers.process_bytes_read(go.pid) - go_read[name]
            # Reached means both webhooks (mutate, then validate) saw the probe; missed, neither did.
            ours_right = all((after[e] > ours[e]) if state == "ours" else (after[e] == ours[e]) for e in ours)
            gos_right = all(
                read >= 2 * PROBE_BYTES if name == state else read < PROBE_BYTES for name, read in go_read.items()
            )
            if not outcome.failed and ours_right and gos_right:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"kube-apiserver never called {STATE_NAMES[state]} alone")


def _kubectl_applies(p: LocalControlPlane, prefix: str, count: int, workdir: Path) -> list[float]:
    """`kubectl apply -f foo.json` of ``count`` new Foos, one process each: milliseconds per apply."""
    times = []
    for i in range(count):
        path = workdir / f"{prefix}-{i}.json"
        path.write_text(json.dumps(plain_foo(i, prefix=prefix)))
        started = time.perf_counter()
        p.kubectl("apply", "-f", str(path))
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _round(
    client: AdminClient, sides: Sides, state: str, index: int, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    prefix = f"{state}-{index}"
    calls = sum(sides.our_calls().values())
    burst = await client.create_foos(
        [plain_foo(i, prefix=f"{prefix}-b") for i in range(args.creates)], concurrency=args.concurrency
    )
    sequential = await client.create_foos(
        [plain_foo(i, prefix=f"{prefix}-s") for i in range(args.sequential)], concurrency=1
    )
    kubectl = _kubectl_applies(sides.product.plane, f"{prefix}-k", args.kubectl, workdir)
    calls = sum(sides.our_calls().values()) - calls
    sequential_ms = [s * 1000 for s in sequential.latencies]
    say(
        f"{STATE_NAMES[state]}: {burst.per_second:,.0f} creates/s, one create p50 {fmt(percentile(sequential_ms, 50))} ms"
        f" p99 {fmt(percentile(sequential_ms, 99))} ms, kubectl apply p50 {fmt(percentile(kubectl, 50))} ms,"
        f" {burst.failed + sequential.failed} failed, {calls:,.0f} calls to ours"
    )
    if burst.failed or sequential.failed:
        say(f"  first failure: {burst.first_error or sequential.first_error}")
    return {
        "state": state,
        "creates_per_second": burst.per_second,
        "burst": {
            "done": burst.done,
            "failed": burst.failed,
            "seconds": burst.seconds,
            "per_second": burst.per_second,
            "p50_ms": percentile([s * 1000 for s in burst.latencies], 50),
            "p99_ms": percentile([s * 1000 for s in burst.latencies], 99),
            "first_error": burst.first_error,
        },
        "sequential_ms": sequential_ms,
        "kubectl_ms": kubectl,
        "failed": burst.failed + sequential.failed,
        "our_webhook_calls": int(calls),
    }


async def _run(sides: Sides, args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    async with AdminClient(sides.product.plane, connections=args.concurrency) as client:
        say("warm-up: 200 creates through each side")
        rounds: list[dict[str, Any]] = []
        for state in (*sides.gos, "ours"):
            sides.register(state)
            await sides.wait_for(client, state)
            await client.create_foos(
                [plain_foo(i, prefix=f"warm-{state}") for i in range(200)], concurrency=args.concurrency
            )
        for index, state in enumerate(round_order(args.cycles, states_of(args))):
            if index == 0 or rounds[-1]["state"] != state:
                sides.register(state)
                await sides.wait_for(client, state)
            rounds.append(await _round(client, sides, state, index, args, workdir))
        return rounds


def states_of(args: argparse.Namespace) -> tuple[str, ...]:
    return STATES_WITH_GO_HTTP1 if args.go_http1 else STATES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--creates", type=int, default=2000, help="Foos created concurrently per round")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--sequential", type=int, default=200, help="Foos created one at a time per round")
    parser.add_argument("--kubectl", type=int, default=10, help="`kubectl apply -f` of one Foo, per round")
    parser.add_argument("--cycles", type=int, default=1, help="times the order ours, Go, none, none, Go, ours runs")
    parser.add_argument(
        "--go-http1",
        action="store_true",
        help="also the Go peer offering only HTTP/1.1 (ours, Go, Go over HTTP/1.1, none, then back)",
    )
    args = parser.parse_args(argv)

    with plane("admission-overhead") as p, tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        product = LocalProduct(p)
        product.start()
        try:
            with ExitStack() as stack:
                gos = {"go": stack.enter_context(servers.go_peer(product.cert_dir, pin=False))}
                if args.go_http1:
                    gos["go-http1"] = stack.enter_context(servers.go_peer(product.cert_dir, pin=False, http1=True))
                rounds = asyncio.run(_run(Sides(product, gos), args, Path(tmp)))
        finally:
            product.stop()

    states = pooled(rounds)
    added = added_latency(states)
    print(
        f"\nFoo creates through kube-apiserver: {args.creates:,} per round with {args.concurrency} in flight, "
        f"{args.sequential} one at a time, {args.kubectl} × kubectl apply"
    )
    print(
        table(
            ["round", "creates/s", "one create p50 ms", "p99 ms", "kubectl apply p50 ms", "failed", "calls to ours"],
            [
                [
                    STATE_NAMES[r["state"]],
                    r["creates_per_second"],
                    percentile(r["sequential_ms"], 50),
                    percentile(r["sequential_ms"], 99),
                    percentile(r["kubectl_ms"], 50),
                    r["failed"],
                    r["our_webhook_calls"],
                ]
                for r in rounds
            ],
        )
    )
    print("\nAdded by the webhooks to one create (each side minus no webhooks; rounds pooled)")
    print(
        table(
            ["webhooks", "creates/s", "one create p50 +ms", "p99 +ms", "kubectl apply p50 +ms", "p99 +ms"],
            [
                [
                    STATE_NAMES[side],
                    states[side]["creates_per_second"],
                    fmt(a["create_p50_ms"], 2),
                    fmt(a["create_p99_ms"], 2),
                    fmt(a["kubectl_p50_ms"], 2),
                    fmt(a["kubectl_p99_ms"], 2),
                ]
                for side, a in added.items()
            ],
        )
    )
    per_second = {state: s["creates_per_second"] for state, s in states.items()}
    ours_to_go = ratio(per_second.get("ours"), per_second.get("go"))
    ours_to_go_http1 = ratio(per_second.get("ours"), per_second.get("go-http1"))
    print(
        f"\ncreates/s, ours ÷ Go: {fmt(ours_to_go, 2)}; ours ÷ none: {fmt(ratio(per_second.get('ours'), per_second.get('none')), 2)};"
        f" Go ÷ none: {fmt(ratio(per_second.get('go'), per_second.get('none')), 2)}"
        + (
            f"; ours ÷ Go over HTTP/1.1: {fmt(ours_to_go_http1, 2)}; Go over HTTP/1.1 ÷ Go: "
            f"{fmt(ratio(per_second.get('go-http1'), per_second.get('go')), 2)}"
            if args.go_http1
            else ""
        )
    )
    path = save(
        "admission_overhead",
        {
            "settings": vars(args),
            "order": round_order(args.cycles, states_of(args)),
            "rounds": rounds,
            "states": states,
            "added_latency_ms": added,
            "creates_per_second": per_second,
            "ratio_ours_to_go": ours_to_go,
            "ratio_ours_to_go_http1": ours_to_go_http1,
            "ratio_ours_to_none": ratio(per_second.get("ours"), per_second.get("none")),
        },
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
