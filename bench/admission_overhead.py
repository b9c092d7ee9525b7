"""End-to-end admission overhead: Foo creates/s through kube-apiserver with our webhooks vs none.

    .venv/bin/python -m bench.admission_overhead [--creates 2000] [--concurrency 32]

A minimal plane (etcd + kube-apiserver) and our product (CRD + webhook service, registered as
the chart registers it). Three rounds of ``--creates`` new Foos from a bounded async client with
the admin certificate: webhooks registered, unregistered, registered again; the two registered
rounds bracket the bare one so a store that grows during the run favours neither side. Nothing is
pinned: apiserver, etcd, webhook and client share the machine as they would on a node.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from hack.product import LocalProduct

from . import servers
from .planes import AdminClient, plain_foo, plane
from .report import fmt, ratio, save, say, table


def _webhook_calls(product: LocalProduct) -> float:
    context = servers.client_context(product.cert_dir)
    return sum(servers.webhook_requests(product.url, context, e) for e in ("/mutate-foo", "/validate-foo"))


async def _round(
    client: AdminClient, product: LocalProduct, name: str, prefix: str, count: int, concurrency: int
) -> dict[str, Any]:
    before = _webhook_calls(product)
    outcome = await client.create_foos([plain_foo(i, prefix=prefix) for i in range(count)], concurrency=concurrency)
    calls = _webhook_calls(product) - before
    say(f"{name}: {outcome.per_second:,.0f} creates/s, {outcome.failed} failed, {calls:,.0f} webhook calls")
    if outcome.failed:
        say(f"  first failure: {outcome.first_error}")
    return {**outcome.summary(), "webhook_calls": int(calls)}


async def _wait_for_admission(client: AdminClient, product: LocalProduct, registered: bool) -> None:
    """Until a create does (or does not) reach the webhook: the apiserver's informer has caught up."""
    for attempt in range(100):
        before = _webhook_calls(product)
        await client.create_foos([plain_foo(attempt, prefix=f"probe-{int(registered)}-{int(time.time())}")])
        if (_webhook_calls(product) > before) == registered:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"admission never became {'registered' if registered else 'unregistered'}")


async def _run(product: LocalProduct, count: int, concurrency: int) -> dict[str, Any]:
    async with AdminClient(product.plane, connections=concurrency) as client:
        say("warm-up: 200 creates")
        await client.create_foos([plain_foo(i, prefix="warm") for i in range(200)], concurrency=concurrency)
        rounds = {"webhooks (1)": await _round(client, product, "webhooks registered", "a", count, concurrency)}
        product.unregister_admission()
        await _wait_for_admission(client, product, registered=False)
        rounds["none"] = await _round(client, product, "no webhooks", "b", count, concurrency)
        product.register()
        await _wait_for_admission(client, product, registered=True)
        rounds["webhooks (2)"] = await _round(client, product, "webhooks registered again", "c", count, concurrency)
        return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--creates", type=int, default=2000, help="Foos created per round")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    args = parser.parse_args(argv)

    with plane("admission-overhead") as p:
        product = LocalProduct(p)
        product.start()
        try:
            rounds = asyncio.run(_run(product, args.creates, args.concurrency))
        finally:
            product.stop()

    with_webhooks = statistics.mean([rounds["webhooks (1)"]["per_second"], rounds["webhooks (2)"]["per_second"]])
    bare = rounds["none"]["per_second"]
    print(f"\nFoo creates through kube-apiserver ({args.creates:,} per round, {args.concurrency} in flight)")
    print(
        table(
            ["round", "creates/s", "p50 ms", "p99 ms", "failed", "webhook calls"],
            [
                [name, r["per_second"], r["p50_ms"], r["p99_ms"], r["failed"], r["webhook_calls"]]
                for name, r in rounds.items()
            ],
        )
    )
    overhead = ratio(with_webhooks, bare)
    print(f"\nwith our webhooks / without: {fmt(overhead, 2)} of the creates/s ({with_webhooks:,.0f} vs {bare:,.0f})")
    path = save(
        "admission_overhead",
        {
            "settings": vars(args),
            "rounds": rounds,
            "creates_per_second_with_webhooks": with_webhooks,
            "creates_per_second_without": bare,
            "ratio": overhead,
        },
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
