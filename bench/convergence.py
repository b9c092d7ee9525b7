"""Controller convergence: 1,000 new Foos until every Deployment exists with the right spec and every
Foo's status is up to date — ours vs the Go sample-controller, each on its own plane — then our
controller's RSS with 10,000 Foos cached and the writes it makes in a quiet window.

    .venv/bin/python -m bench.convergence [--foos 1000] [--rss-foos 10000] [--quiet-seconds 60]
                                          [--peer-timeout 900] [--no-peer]

Planes are minimal (etcd + kube-apiserver, no kube-controller-manager): Deployments are stored
but never roll out, so what is measured is the controllers' own work, not pod scheduling. Each
plane writes an audit log of write verbs; writes are counted from it by user agent. The
baseline is the time `kubectl create -f` takes for 1,000 Deployments on the same plane.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.audit import WriteAudit
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.procs import Component, wait_until
from hack.plane.product import LocalProduct

from .planes import plane
from .report import LOGS_DIR, REPO, RESULTS_DIR, fmt, ratio, save, say, table
from .servers import process_cpu_seconds

OUR_USER_AGENT = "foo-controller"
PEER_USER_AGENT = "sample-controller"
GROUP_PATH = "/apis/samplecontroller.k8s.io"


class Audit(WriteAudit):
    """The write verbs the apiserver audited, read from a mark on (hack.plane.audit)."""

    def __init__(self, name: str) -> None:
        super().__init__(RESULTS_DIR / "planes" / f"{name}-audit")

    def writes_since(self, mark: int, user_agent: str) -> Counter[str]:
        """Writes by ``user_agent`` (prefix) since ``mark``, counted by 'verb resource[/sub]'."""
        return Counter(
            f"{write.verb} {write.resource}" for write in self.writes(mark) if write.user_agent.startswith(user_agent)
        )


def _rss_mib(pid: int | None) -> tuple[float | None, float | None]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    if pid is None:
        return None, None
    values: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    except OSError:
        return None, None
    return values.get("VmRSS"), values.get("VmHWM")


def _cpu_seconds(pid: int | None) -> float | None:
    seconds = process_cpu_seconds(pid)
    return None if seconds != seconds else seconds  # NaN: the process is gone


def plane_pids(p: LocalControlPlane) -> dict[str, int | None]:
    """etcd's and kube-apiserver's process ids: the plane's share of the cores."""
    return {name: p.component_pid(name) for name in ("etcd", "kube-apiserver")}


class CPUAccount:
    """CPU seconds each process spent from ``start`` on: where a run's cores went."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self.before: dict[str, float | None] = {}
        self.bench_before = 0.0

    def start(self) -> None:
        self.before = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        self.bench_before = time.process_time()

    def spent(self) -> dict[str, float | None]:
        spent: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            before, after = self.before.get(name), _cpu_seconds(pid)
            spent[name] = None if before is None or after is None else round(after - before, 2)
        spent["bench client"] = round(time.process_time() - self.bench_before, 2)
        return spent


# ---------------------------------------------------------------------------- what "converged" means
def _image(deployment: dict[str, Any]) -> str | None:
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    return containers[0].get("image") if containers else None


def _owned_by(deployment: dict[str, Any], foo: dict[str, Any]) -> bool:
    return any(
        ref.get("uid") == foo["metadata"]["uid"] and ref.get("controller")
        for ref in deployment["metadata"].get("ownerReferences") or []
    )


def ours_converged(foo: dict[str, Any], deployments: dict[str, dict[str, Any]]) -> bool:
    spec = foo.get("spec") or {}
    want = spec.get("deployment") or {}
    d = deployments.get(want.get("name", ""))
    return (
        d is not None
        and _owned_by(d, foo)
        and d["spec"].get("replicas") == spec.get("replicas", 1)
        and _image(d) == want.get("image", "nginx:latest")
        and (foo.get("status") or {}).get("observedGeneration") == foo["metadata"].get("generation")
    )


def peer_converged(foo: dict[str, Any], deployments: dict[str, dict[str, Any]]) -> bool:
    spec = foo.get("spec") or {}
    d = deployments.get(spec.get("deploymentName", ""))
    return (
        d is not None
        and _owned_by(d, foo)
        and d["spec"].get("replicas") == spec.get("replicas")
        and _image(d) == "nginx:latest"
        and (foo.get("status") or {}).get("availableReplicas") == (d.get("status") or {}).get("availableReplicas", 0)
    )


async def _converged_count(client: AdminClient, version: str, check: Callable[..., bool]) -> tuple[int, int]:
    status, body = await client.request("GET", "/apis/apps/v1/namespaces/default/deployments")
    deployments = {d["metadata"]["name"]: d for d in json.loads(body)["items"]} if status == 200 else {}
    status, body = await client.request("GET", f"{GROUP_PATH}/{version}/namespaces/default/foos")
    foos = json.loads(body)["items"] if status == 200 else []
    return sum(1 for foo in foos if check(foo, deployments)), len(foos)


async def converge(
    p: LocalControlPlane,
    foos: list[dict[str, Any]],
    version: str,
    check: Callable[..., bool],
    *,
    expected: int,
    timeout: float,
    interval: float = 0.5,
) -> dict[str, Any]:
    """Create ``foos`` and wait until ``expected`` Foos have converged; times from the first create."""
    async with AdminClient(p, connections=32) as client:
        started = time.perf_counter()
        created = await client.create_foos(foos, concurrency=32)
        creates_done = time.perf_counter() - started
        if created.failed:
            raise RuntimeError(f"creating Foos failed {created.failed} times: {created.first_error}")
        converged, total = 0, 0
        last_report = 0.0
        while time.perf_counter() - started < timeout:
            converged, total = await _converged_count(client, version, check)
            if converged >= expected:
                break
            if time.perf_counter() - last_report > 30:
                say(f"  {converged:,}/{expected:,} converged after {time.perf_counter() - started:.0f}s")
                last_report = time.perf_counter()
            await asyncio.sleep(interval)
        elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed if converged >= expected else None,
        "waited_seconds": elapsed,
        "converged": converged,
        "expected": expected,
        "creates_seconds": creates_done,
        "creates_per_second": created.per_second,
    }


# ---------------------------------------------------------------------------- kubectl baseline
def kubectl_baseline(p: LocalControlPlane, count: int) -> float:
    """Seconds `kubectl create -f` takes for ``count`` Deployments (as our controller would write them)."""
    p.kubectl("create", "namespace", "kubectl-baseline")
    items = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"base-{i:05d}", "namespace": "kubectl-baseline"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "nginx", "controller": f"base-{i:05d}"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx", "controller": f"base-{i:05d}"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
                },
            },
        }
        for i in range(count)
    ]
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    started = time.perf_counter()
    p.kubectl("create", "-f", "-", "-o", "name", input=document, timeout=1800)
    return time.perf_counter() - started


def quiet_window(audit: Audit, pid: int | None, user_agent: str, seconds: float) -> dict[str, Any]:
    time.sleep(5)  # let the last status writes and events land
    mark = audit.mark()
    cpu_before = _cpu_seconds(pid)
    say(f"quiet window: {seconds:g}s")
    time.sleep(seconds)
    writes = audit.writes_since(mark, user_agent)
    rss, peak = _rss_mib(pid)
    cpu_after = _cpu_seconds(pid)
    return {
        "seconds": seconds,
        "writes": sum(writes.values()),
        "writes_by_kind": dict(writes),
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "cpu_seconds": None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
    }


# ---------------------------------------------------------------------------- the two runs
def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    audit = Audit("convergence-ours")
    with plane("convergence-ours", apiserver_args=audit.apiserver_args()) as p:
        product = LocalProduct(p)
        product.start()
        result: dict[str, Any] = {}
        try:
            say(f"kubectl baseline: {args.foos:,} Deployments")
            result["kubectl_seconds"] = kubectl_baseline(p, args.foos)
            health = free_port()
            controller = Component(
                "bench-controller",
                [
                    sys.executable,
                    "-m",
                    "controller",
                    "--kubeconfig",
                    str(p.kubeconfig),
                    "--health-probe-bind-address",
                    f"127.0.0.1:{health}",
                    "--metrics-bind-address",
                    f"127.0.0.1:{free_port()}",
                ],
                LOGS_DIR / "controller.log",
            )
            controller.start()
            try:

                def synced() -> bool:
                    with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1) as r:
                        return bool(r.status == 200)

                wait_until("our controller's caches synced", synced, timeout=60, watch=[controller])
                say(f"ours: {args.foos:,} Foos")
                mark = audit.mark()
                webhook_pid = product.webhook.pid if product.webhook is not None else None
                cpu = CPUAccount({**plane_pids(p), "webhook": webhook_pid, "controller": controller.pid})
                cpu.start()
                result["convergence"] = asyncio.run(
                    converge(
                        p,
                        [plain_foo(i) for i in range(args.foos)],
                        "v1",
                        ours_converged,
                        expected=args.foos,
                        timeout=args.peer_timeout,
                    )
                )
                result["convergence"]["cpu_seconds"] = cpu.spent()
                result["convergence"]["writes"] = dict(audit.writes_since(mark, OUR_USER_AGENT))
                result["rss_mib_at_foos"] = _rss_mib(controller.pid)[0]
                if args.rss_foos > args.foos:
                    say(f"ours: {args.rss_foos - args.foos:,} more Foos, to {args.rss_foos:,}")
                    result["steady"] = asyncio.run(
                        converge(
                            p,
                            [plain_foo(i, prefix="more") for i in range(args.rss_foos - args.foos)],
                            "v1",
                            ours_converged,
                            expected=args.rss_foos,
                            timeout=args.peer_timeout,
                            interval=2.0,
                        )
                    )
                result["quiet"] = quiet_window(audit, controller.pid, OUR_USER_AGENT, args.quiet_seconds)
                result["quiet"]["foos"] = max(args.rss_foos, args.foos)
                controller.check_alive()
            finally:
                controller.stop()
        finally:
            product.stop()
    return result


def run_peer(args: argparse.Namespace) -> dict[str, Any]:
    from hack.plane.binaries import find_binaries

    binaries = find_binaries()
    if binaries.missing("sample_controller", "sample_controller_crd"):
        say("building the Go sample-controller (bash hack/build.sh sample-controller)")
        subprocess.run(["bash", str(REPO / "hack" / "build.sh"), "sample-controller"], cwd=REPO, check=True)
        binaries = find_binaries()
    audit = Audit("convergence-sample-controller")
    result: dict[str, Any] = {}
    with plane("convergence-sample-controller", apiserver_args=audit.apiserver_args()) as p:
        p.kubectl("apply", "-f", str(binaries.sample_controller_crd))
        p.kubectl("wait", "--for=condition=Established", "crd/foos.samplecontroller.k8s.io", "--timeout=60s")
        say(f"kubectl baseline: {args.foos:,} Deployments")
        result["kubectl_seconds"] = kubectl_baseline(p, args.foos)
        log = LOGS_DIR / "sample-controller.log"
        log.unlink(missing_ok=True)
        controller = Component(
            "bench-sample-controller", [binaries.sample_controller, f"--kubeconfig={p.kubeconfig}"], log
        )
        controller.start()
        try:
            wait_until(
                "sample-controller's workers",
                lambda: "Started workers" in log.read_text(errors="replace"),
                timeout=60,
                watch=[controller],
            )
            say(
                f"sample-controller: {args.foos:,} Foos (its client allows 5 requests/s; "
                f"giving up after {args.peer_timeout:g}s)"
            )
            mark = audit.mark()
            cpu = CPUAccount({**plane_pids(p), "sample-controller": controller.pid})
            cpu.start()
            foos = [plain_foo(i, version="v1alpha1") for i in range(args.foos)]
            result["convergence"] = asyncio.run(
                converge(
                    p, foos, "v1alpha1", peer_converged, expected=args.foos, timeout=args.peer_timeout, interval=1.0
                )
            )
            result["convergence"]["cpu_seconds"] = cpu.spent()
            result["convergence"]["writes"] = dict(audit.writes_since(mark, PEER_USER_AGENT))
            if result["convergence"]["seconds"] is not None:
                result["quiet"] = quiet_window(audit, controller.pid, PEER_USER_AGENT, args.quiet_seconds)
                result["quiet"]["foos"] = args.foos
        finally:
            controller.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.convergence", description=__doc__.split("\n")[0])
    parser.add_argument("--foos", type=int, default=1000)
    parser.add_argument("--rss-foos", type=int, default=10_000, help="Foos in our controller's cache for RSS")
    parser.add_argument("--quiet-seconds", type=float, default=60.0, help="length of the quiet window")
    parser.add_argument("--peer-timeout", type=float, default=900.0, help="give up waiting after this long")
    parser.add_argument("--no-peer", action="store_true", help="skip the Go sample-controller")
    args = parser.parse_args(argv)

    results = {"ours": run_ours(args)}
    if not args.no_peer:
        results["sample-controller"] = run_peer(args)

    rows = []
    for name, r in results.items():
        c = r["convergence"]
        rows.append(
            [
                name,
                c["seconds"]
                if c["seconds"] is not None
                else f">{c['waited_seconds']:.0f} ({c['converged']}/{c['expected']})",
                c["creates_seconds"],
                r["kubectl_seconds"],
                fmt(ratio(c["seconds"], r["kubectl_seconds"]), 2),
                sum(c["writes"].values()),
                (r.get("quiet") or {}).get("writes"),
                (r.get("quiet") or {}).get("rss_mib"),
                (r.get("quiet") or {}).get("foos"),
            ]
        )
    print(f"\n{args.foos:,} new Foos until every Deployment and status is right (minimal planes, no pods)")
    print(
        table(
            [
                "controller",
                "converged s",
                "creates s",
                f"kubectl {args.foos:,} Deployments s",
                "× kubectl",
                "writes to converge",
                f"writes in {args.quiet_seconds:g}s quiet",
                "RSS MiB",
                "Foos cached",
            ],
            rows,
        )
    )
    for name, r in results.items():
        spent = r["convergence"].get("cpu_seconds") or {}
        parts = ", ".join(f"{who} {fmt(seconds, 1)}" for who, seconds in spent.items())
        available = (os.cpu_count() or 1) * r["convergence"]["waited_seconds"]
        print(f"{name}: CPU seconds while converging ({available:.0f} on every core): {parts}")
    ours = results["ours"]["convergence"]["seconds"]
    peer = results.get("sample-controller", {}).get("convergence", {})
    peer_seconds = peer.get("seconds") or (peer.get("waited_seconds") if peer else None)
    vs_peer = ratio(ours, peer_seconds)
    if peer:
        bound = "" if peer.get("seconds") else " (at most: the peer had not converged)"
        print(f"\nours / sample-controller convergence time: {fmt(vs_peer, 3)}{bound}")
    quiet = results["ours"].get("quiet", {})
    print(
        f"ours with {quiet.get('foos', 0):,} Foos: RSS {fmt(quiet.get('rss_mib'))} MiB "
        f"(peak {fmt(quiet.get('peak_rss_mib'))}), {quiet.get('writes')} writes and "
        f"{fmt(quiet.get('cpu_seconds'), 2)} CPU s in a {args.quiet_seconds:g}s quiet window "
        f"{quiet.get('writes_by_kind') or ''}"
    )
    path = save("convergence", {"settings": vars(args), "results": results, "ratio_to_sample_controller": vs_peer})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
