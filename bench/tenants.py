"""The honest tenant's latency and the components' memory under each tenant attack, as ratios to the idle run.

    .venv/bin/python -m bench.tenants [--fat 40] [--shared 1000] [--refused 500] [--honest 10] [--runs NAME,...]

One plane (etcd, kube-apiserver, kube-controller-manager, kwok) and the whole product on loopback
as `make run` starts it: the webhook (admission and conversion), insights (registered as the
APIService) and the controller, all three started afresh for each run so that each process's
peak RSS (VmHWM) is that run's. The runs (issue 34; attacks.tenants has the attacks):

* ``idle``: the honest tenant alone;
* ``fat-foos``, ``fat-deployments``: a tenant stores ``--fat`` Foos, or Deployments no Foo
  controls, of ~1.2 MiB each as stored (9,000 labels, a 200 KiB annotation);
* ``shared``: ``--shared`` Foos name one Deployment, which the tenant scales once a second;
* ``refused``: ``--refused`` Foos whose Deployments a ResourceQuota refuses (the controller retries);
* ``all``: all four at once; ``restarted``: the controller and insights started again with
  everything ``all`` stored (each lists it all), while the shared Deployment is still edited.

Through each run the honest tenant writes ordinary Foos one at a time in a namespace of its own
(one unmeasured first, then at least ``--honest``, and on while the tenants still store), each
timed from its create until its Deployment exists and its status is current. Printed: the honest
tenant's p50 and slowest, and each process's peak RSS, each beside its ratio to the idle run.
A run's namespaces are deleted before the next (``all`` keeps them for ``restarted``).
Loopback only; every run ends once the honest tenant has written its Foos and the tenants have stored theirs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from attacks.tenants import (
    Attack,
    FatDeployments,
    FatFoos,
    HonestTenant,
    QuotaRefused,
    SharedDeployment,
    Tenants,
)
from hack.plane.cluster import LocalControlPlane
from hack.plane.procs import wait_until
from hack.plane.product import LocalProduct

from .planes import plane
from .report import fmt, percentile, ratio, save, say, table

PROCESSES = ("controller", "insights", "webhook")
RUNS = ("idle", "fat-foos", "fat-deployments", "shared", "refused", "all", "restarted")


def attacks_of(run: str, args: argparse.Namespace) -> list[Attack]:
    """The attacks of ``run``, each in a namespace named after it."""
    every: dict[str, tuple[Callable[[str, int], Attack], int]] = {
        "fat-foos": (FatFoos, args.fat),
        "fat-deployments": (FatDeployments, args.fat),
        "shared": (SharedDeployment, args.shared),
        "refused": (QuotaRefused, args.refused),
    }
    chosen = every if run in ("all", "restarted") else {run: every[run]} if run in every else {}
    # An attack of 0 objects is none: `--fat 500 --shared 0` runs the fat ones alone.
    return [attack(namespace, count) for namespace, (attack, count) in chosen.items() if count]


def peak_rss_mib(pid: int | None) -> float | None:
    """VmHWM of ``pid``: its resident size at its highest so far."""
    if pid is None:
        return None
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def controller_ready(product: LocalProduct) -> bool:
    """The controller's caches have synced (its /readyz)."""
    status, _ = _http_get(f"http://127.0.0.1:{product.controller_health_port}/readyz")
    return status == 200


def _http_get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status, response.read()


def start_processes(product: LocalProduct, *, webhook: bool) -> None:
    """(Re)start the controller and insights (and the webhook), and wait until they serve."""
    for component in (product.controller, product.insights, *((product.webhook,) if webhook else ())):
        if component is not None:
            component.stop()
    if webhook:
        product.start_webhook()
    product.start_insights()
    product.start_controller()
    assert product.controller is not None
    wait_until(
        "the controller's caches synced", lambda: controller_ready(product), timeout=600, watch=[product.controller]
    )


def delete_namespaces(p: LocalControlPlane, names: list[str]) -> None:
    if not names:
        return
    p.kubectl("delete", "namespace", *names, "--ignore-not-found", "--wait=false")

    def gone() -> bool:
        existing = set(p.kubectl("get", "namespaces", "-o", "name").stdout.split())
        return not existing & {f"namespace/{name}" for name in names}

    wait_until("the run's namespaces to be gone", gone, timeout=900, interval=1)


def one_run(p: LocalControlPlane, product: LocalProduct, run: str, args: argparse.Namespace) -> dict[str, Any]:
    start_processes(product, webhook=run != "restarted")
    attacks = [] if run == "restarted" else attacks_of(run, args)
    if run == "restarted":  # what `all` stored is still there; its edits go on
        attacks = [SharedDeployment("shared", args.shared)] if args.shared else []
    honest = HonestTenant(f"honest-{run}")
    tenants = Tenants(p, attacks).start()
    began = time.monotonic()
    try:
        asyncio.run(honest.write_while(p, lambda: False, at_least=1))  # the namespace, a warm connection
        honest.forget()
        asyncio.run(honest.write_while(p, lambda: not tenants.stored(), at_least=args.honest))
    finally:
        tenants.stop()
    if tenants.errors:
        raise RuntimeError(f"{run}: {'; '.join(tenants.errors)}")
    took = time.monotonic() - began
    for component in (product.controller, product.insights, product.webhook):
        assert component is not None
        component.check_alive()
    result = {
        "run": run,
        "seconds": took,
        "stored_in": tenants.stored_in,
        "honest_seconds": honest.latencies,
        "honest_retries": honest.retries,
        # `restarted` does not start the webhook afresh: its peak would be `all`'s, so it has none.
        "peak_rss_mib": {
            name: None if run == "restarted" and name == "webhook" else peak_rss_mib(getattr(product, name).pid)
            for name in PROCESSES
        },
    }
    say(
        f"{run}: {fmt(took)} s, honest p50 {fmt(percentile(honest.latencies, 50), 3)} s, peaks {result['peak_rss_mib']}"
    )
    if run != "all":  # `restarted` reads what `all` stored
        delete_namespaces(
            p,
            sorted({a.namespace for a in attacks_of("all" if run == "restarted" else run, args)} | {honest.namespace}),
        )
    return result


def report(results: list[dict[str, Any]]) -> str:
    idle = results[0]
    idle_p50 = percentile(idle["honest_seconds"], 50)
    rows = []
    for r in results:
        p50 = percentile(r["honest_seconds"], 50)
        row: list[Any] = [r["run"], fmt(p50 * 1000 if p50 else None, 0), fmt(ratio(p50, idle_p50), 1)]
        row.append(fmt(max(r["honest_seconds"]) * 1000 if r["honest_seconds"] else None, 0))
        for name in PROCESSES:
            peak = r["peak_rss_mib"][name]
            row += [fmt(peak, 0), fmt(ratio(peak, idle["peak_rss_mib"][name]), 2)]
        rows.append(row)
    headers = ["run", "honest p50 ms", "× idle", "slowest ms"]
    for name in PROCESSES:
        headers += [f"{name} MiB", "× idle"]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.tenants", description=__doc__.split("\n")[0])
    parser.add_argument("--fat", type=int, default=40, help="fat Foos, and as many fat Deployments")
    parser.add_argument("--shared", type=int, default=1000, help="Foos naming one Deployment")
    parser.add_argument("--refused", type=int, default=500, help="Foos whose Deployments a ResourceQuota refuses")
    parser.add_argument("--honest", type=int, default=10, help="honest Foos per run, at least")
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"which runs, in order, from {','.join(RUNS)} (idle first)"
    )
    args = parser.parse_args(argv)
    runs = ["idle", *(r for r in args.runs.split(",") if r and r != "idle")]
    unknown = [r for r in runs if r not in RUNS]
    if unknown or ("restarted" in runs and "all" not in runs):
        parser.error(f"runs are {', '.join(RUNS)}; restarted needs all before it")
    results = []
    with plane("tenants", minimal=False, aggregator_routing=False) as p:
        with LocalProduct(p, controller=True, insights=True) as product:
            for run in runs:
                results.append(one_run(p, product, run, args))
    print(table_title(args))
    print(report(results))
    save("tenants", {"args": vars(args), "runs": results})


def table_title(args: argparse.Namespace) -> str:
    return (
        f"honest tenant's Foo create → Deployment and status current; peak RSS (VmHWM) of each process; "
        f"{args.fat} fat Foos / Deployments, {args.shared} Foos on one Deployment, {args.refused} refused"
    )


if __name__ == "__main__":
    main()
