"""Attack mix (issue #25): every attack at once on each server, while honest callers and probes run.

    .venv/bin/python -m bench.attack_mix [--seconds 30] [--server webhook|insights|both]
                                         [--findings 1,3,...] [--each] [--foos 1000]
                                         [--workers auto] [--source DIR]
                                         [--probes-on-the-serving-port]

Each server runs as the chart runs it (limits.memory 256Mi; the webhook with `--workers auto`
on 2 CPUs, which the memory plan makes one process at 256Mi; the soft RLIMIT_NOFILE a container
starts with, 1024), on 127.0.0.1. Insights needs a kube-apiserver: a minimal plane with the Foo CRD and
``--foos`` Foos with 8 KiB of labels each (and five small ones the honest lists select).

For ``--seconds``, three client processes: the attacks of the chosen findings (attacks.webhook,
attacks.insights), honest callers (attacks.honest), and the kubelet's probe (/readyz on the
probe port, as the chart runs it). Reported per run:
peak memory of the server's whole process tree (RSS summed, sampled every 50 ms) against 200 MiB
and the limit, probe latency (max must be < 1 s: the kubelet's timeout), failed honest requests, 5xx answers to
anyone, tracebacks in the server's log since it started, and workers replaced. With ``--each``,
every finding first runs alone on a fresh server (its own peak), then all of them together.
``--source`` runs the servers from another checkout's sources (a worktree of main before a fix,
say) while the attacks and the measuring stay this checkout's: before and after from one script.
Numbers, never pass/fail: bench/README.md ("Attack mix (issue #25)") has the measurements.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attacks.clients import ATTACKS, Clients, create_foos, insights_target
from attacks.harness import Tally, Target
from attacks.honest import CHECK_ATTEMPTS, Honest, Probes
from attacks.insights import FOOHEALTHS
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.procs import wait_until

from . import memcg, proctree, servers
from .planes import apply_plain_crd, plane
from .report import fmt, percentile, save, say, table

BOUND_MIB = 200
HEALTHZ_BOUND_S = 1.0
CONTAINER_NOFILE = "1024:20000"  # a container's soft limit; the hard one is this machine's


@dataclass
class Run:
    server: str
    findings: tuple[int, ...]
    seconds: float
    peak_mib: float
    peak_at_s: float  # after the attack began: past ``seconds``, the peak came as the attackers left
    idle_mib: float
    processes_seen: int
    workers_replaced: int
    alive: bool
    honest: Honest
    probes: Probes
    tallies: dict[int, Tally]
    tracebacks: list[str]
    oom_kills: int | None  # None: no memory cgroup here, the server ran unlimited
    cgroup_peak_mib: float | None

    def healthz_max_s(self) -> float:
        return max(self.probes.latency, default=float("nan"))

    def server_errors(self) -> int:
        return self.honest.server_errors + sum(t.server_errors() for t in self.tallies.values())

    def summary(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "findings": list(self.findings),
            "seconds": self.seconds,
            "peak_mib": self.peak_mib,
            "peak_at_s": self.peak_at_s,
            "idle_mib": self.idle_mib,
            "processes_seen": self.processes_seen,
            "workers_replaced": self.workers_replaced,
            "alive_after": self.alive,
            "oom_kills": self.oom_kills,
            "cgroup_peak_mib": self.cgroup_peak_mib,
            "healthz": {
                "count": len(self.probes.latency),
                "failed": len(self.probes.failures),
                "failures": self.probes.failures[:10],
                "p50_s": percentile(self.probes.latency, 50),
                "max_s": self.healthz_max_s(),
            },
            "honest": {
                "count": len(self.honest.latency),
                "failed": len(self.honest.failures),
                "failures": self.honest.failures[:10],
                "p99_s": percentile(self.honest.latency, 99),
                "availability_checks": self.honest.checks,
                "availability_checks_failed": self.honest.checks_failed,
                "check_attempts_failed": len(self.honest.attempts_failed),
                "check_phases_p50_s": {k: percentile(v, 50) for k, v in self.honest.check_phases.items()},
                "check_phases_max_s": {k: max(v) for k, v in self.honest.check_phases.items()},
                "check_attempt_failures": self.honest.attempts_failed[:10],
            },
            "server_errors": self.server_errors(),
            "tracebacks": len(self.tracebacks),
            "first_traceback": self.tracebacks[0] if self.tracebacks else "",
            "attacks": {n: {"answers": dict(t.answers), "notes": dict(t.notes)} for n, t in self.tallies.items()},
        }


# ---- one run ------------------------------------------------------------------------------------------


def _tracebacks(log: Path) -> list[str]:
    """Every traceback the server logged since its latest start (Component marks each with '==>')."""
    text = log.read_text(errors="replace")
    text = text[text.rfind("\n==> ") + 1 :]
    found = []
    for part in text.split("Traceback (most recent call last)")[1:]:
        found.append("Traceback" + part[:1200])
    return found


def measure(
    server_name: str,
    started_server: tuple[servers.Server, Target, memcg.MemoryCgroup | None],
    findings: tuple[int, ...],
    args: argparse.Namespace,
) -> Run:
    server, target, cgroup = started_server
    assert server.pid is not None
    root = server.pid
    pids = proctree.tree(root)
    idle = proctree.rss_mib(pids)
    first = set(pids)
    seen = set(pids)
    clients = Clients(server_name, target, findings, args.seconds, args.honest, args.attackers_from or None)
    say(f"{server_name}: findings {','.join(map(str, findings))} for {args.seconds:g}s (idle {idle:.0f} MiB)")
    started = time.monotonic()
    clients.start()
    peak, peak_at = idle, 0.0
    refreshed = 0.0
    while time.monotonic() - started < args.seconds + 40 and not clients.finished():
        if time.monotonic() - refreshed > 0.5:
            pids = proctree.tree(root) if server.component.running() else set()
            seen |= pids
            refreshed = time.monotonic()
        if (now := proctree.rss_mib(pids)) > peak:
            peak, peak_at = now, time.monotonic() - started
        time.sleep(0.05)
    tallies, honest, probes = clients.results()
    return Run(
        server=server_name,
        findings=findings,
        seconds=time.monotonic() - started,
        peak_mib=peak,
        peak_at_s=peak_at,
        idle_mib=idle,
        processes_seen=len(seen),
        workers_replaced=len(seen - first),
        alive=server.component.running(),
        honest=honest,
        probes=probes,
        tallies=tallies,
        tracebacks=_tracebacks(server.component.log_file),
        oom_kills=cgroup.oom_kills() if cgroup else None,
        cgroup_peak_mib=cgroup.peak_mib() if cgroup else None,
    )


# ---- the servers, as the chart runs them ---------------------------------------------------------------


@contextmanager
def webhook(
    cert_dir: Path, args: argparse.Namespace
) -> Iterator[tuple[servers.Server, Target, memcg.MemoryCgroup | None]]:
    probe_port = None if args.probes_on_the_serving_port else free_port()
    chart_args = [
        "--workers", args.workers, "--memory-limit-mib", str(args.memory_limit_mib), "--drain-seconds", "5",
        "--admission-timeout-seconds", "5", "--log-level", "info", "--log-format", "json",
        "--tls-min-version", "VersionTLS12", *_probe_flag(probe_port),
    ]  # fmt: skip
    with memcg.limited("foo-attack-mix-webhook", args.memory_limit_mib) as cgroup:
        launcher = [
            *(cgroup.launcher() if cgroup else []),
            "taskset",
            "-c",
            "0,1",
            "prlimit",
            f"--nofile={CONTAINER_NOFILE}",
        ]
        with servers.ours(
            cert_dir, args=chart_args, pin=False, launcher=launcher, env=source_env(args.source)
        ) as server:
            port = int(server.url.rsplit(":", 1)[1])
            target = Target("127.0.0.1", port, servers.client_context(cert_dir), probe_port=probe_port)
            yield server, target, cgroup


def _probe_flag(probe_port: int | None) -> list[str]:
    """The chart's probe port (serving.probes) on loopback; none: probes go to the serving port."""
    return [] if probe_port is None else ["--health-probe-bind-address", f"127.0.0.1:{probe_port}"]


def source_env(source: Path | None) -> dict[str, str] | None:
    """The environment that runs a server from ``source``'s packages instead of this checkout's
    (None: this checkout, the environment as it is). PYTHONSAFEPATH: `-m webhook` must not find
    the working directory's packages first."""
    if source is None:
        return None
    return {**os.environ, "PYTHONPATH": str(source.resolve()), "PYTHONSAFEPATH": "1"}


@contextmanager
def insights(
    p: LocalControlPlane, cert_dir: Path, args: argparse.Namespace
) -> Iterator[tuple[servers.Server, Target, memcg.MemoryCgroup | None]]:
    port, probe_port = free_port(), None if args.probes_on_the_serving_port else free_port()
    argv = [
        "prlimit", f"--nofile={CONTAINER_NOFILE}", sys.executable, "-m", "insights",
        "--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(port),
        "--kubeconfig", str(p.kubeconfig), "--requestheader-ca-file", str(cert_dir / "requestheader-ca.crt"),
        "--drain-seconds", "5", "--log-level", "info", "--log-format", "json", "--metrics-bind-address", "0",
        "--tls-min-version", "VersionTLS12", *_probe_flag(probe_port),
    ]  # fmt: skip
    with memcg.limited("foo-attack-mix-insights", args.memory_limit_mib) as cgroup:
        launched = [*(cgroup.launcher() if cgroup else []), *argv]
        with servers.start("insights", launched, cert_dir, port, env=source_env(args.source)) as server:
            target = insights_target("127.0.0.1", port, servers.client_context(cert_dir), p, probe_port)
            # /readyz says 200 before the caches have synced (FooHealths answer 503 until then).
            wait_until("FooHealths served", lambda: foohealths_served(target), timeout=120, interval=0.5)
            yield server, target, cgroup


def foohealths_served(target: Target) -> bool:
    """Whether insights answers a FooHealth list (its caches have synced)."""
    assert target.client_context is not None
    request = urllib.request.Request(target.url + FOOHEALTHS + "?limit=1", headers=dict(target.user_headers))
    try:
        with urllib.request.urlopen(request, context=target.client_context, timeout=10) as response:
            return bool(response.status == 200)
    except OSError:
        return False


# ---- the CLI --------------------------------------------------------------------------------------------


Starter = Callable[[], Any]


def _runs(findings: tuple[int, ...], each: bool) -> list[tuple[int, ...]]:
    return [(n,) for n in findings] + [findings] if each and len(findings) > 1 else [findings]


def _verdict(peak_mib: float, limit_mib: int) -> str:
    return "yes" if peak_mib < BOUND_MIB else f"NO (> {BOUND_MIB})" if peak_mib < limit_mib else f"NO (> {limit_mib})"


def _print(runs: list[Run], limit_mib: int) -> None:
    """One row per run. The bound is judged on the cgroup's peak where there is one: what the pod's
    limit charges (the RSS sum counts pages the workers share with the supervisor once each)."""
    rows = [
        [
            r.server,
            ",".join(map(str, r.findings)) if len(r.findings) < 4 else "all",
            fmt(r.idle_mib),
            fmt(r.peak_mib),
            "-" if r.cgroup_peak_mib is None else fmt(r.cgroup_peak_mib),
            _verdict(r.peak_mib if r.cgroup_peak_mib is None else r.cgroup_peak_mib, limit_mib),
            fmt(r.healthz_max_s()),
            len(r.probes.failures),
            f"{len(r.honest.failures)}/{len(r.honest.latency)}",
            r.server_errors(),
            len(r.tracebacks),
            r.workers_replaced,
            "-" if r.oom_kills is None else r.oom_kills,
            "yes" if r.alive else "NO",
        ]
        for r in runs
    ]
    headers = ["server", "findings", "RSS idle", "RSS peak", "cgroup peak", "< 200", "healthz max s", "probe fails"]
    print(table([*headers, "honest failed", "5xx", "tracebacks", "workers replaced", "OOM kills", "alive"], rows))
    for r in runs:
        for n, tally in sorted(r.tallies.items()):
            answers = ", ".join(f"{k}: {v}" for k, v in sorted(tally.answers.items()))
            notes = ", ".join(f"{k}: {v}" for k, v in sorted(tally.notes.items()))
            print(f"  {r.server} #{n} ({','.join(map(str, r.findings))}): {answers}" + (f" | {notes}" if notes else ""))
        if r.honest.checks:
            print(
                f"  {r.server} availability checks: {r.honest.checks_failed} of {r.honest.checks} failed, "
                f"{len(r.honest.attempts_failed)} of {r.honest.checks * CHECK_ATTEMPTS} attempts failed; "
                + ", ".join(
                    f"{phase} p50 {fmt(percentile(seconds, 50))} s max {fmt(max(seconds))} s"
                    for phase, seconds in r.honest.check_phases.items()
                )
            )
            for failure in r.honest.attempts_failed[:5]:
                print(f"  {r.server} check attempt failed: {failure}")
        for failure in r.honest.failures[:3] + r.probes.failures[:3]:
            print(f"  {r.server} failure: {failure}")
        if r.tracebacks:
            print(f"  {r.server} first traceback: {r.tracebacks[0][-600:]}")


def _findings(text: str, server: str) -> tuple[int, ...]:
    wanted = {int(n) for n in text.split(",")} if text else set(ATTACKS[server])
    return tuple(sorted(wanted & set(ATTACKS[server])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attack_mix", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="of attack, per run")
    parser.add_argument("--server", choices=("webhook", "insights", "both"), default="both")
    parser.add_argument("--findings", default="", help="comma-separated finding numbers (default: all)")
    parser.add_argument("--each", action="store_true", help="each finding alone first, then all together")
    parser.add_argument("--foos", type=int, default=1000, help="Foos with 8 KiB of labels for insights")
    parser.add_argument("--honest", type=int, default=4, help="honest clients")
    parser.add_argument(
        "--attackers-from",
        default="127.0.0.2",
        help="the address the attacks come from, as a pod's own (empty: the honest callers' own, 127.0.0.1)",
    )
    parser.add_argument("--memory-limit-mib", type=int, default=256, help="as the chart passes limits.memory")
    parser.add_argument("--workers", default="auto", help="the webhook's --workers (auto: as the chart runs it)")
    parser.add_argument(
        "--source", type=Path, help="run the servers from this checkout's sources (e.g. a worktree of main)"
    )
    parser.add_argument(
        "--probes-on-the-serving-port",
        action="store_true",
        help="probe /healthz on the TLS port, as before --health-probe-bind-address (a --source that lacks it)",
    )
    args = parser.parse_args(argv)
    # SIGTERM (timeout, a CI stop) unwinds like Ctrl-C: servers stopped, memory cgroups removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="foo-attack-mix-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp))
        if args.server in ("webhook", "both") and (findings := _findings(args.findings, "webhook")):
            for chosen in _runs(findings, args.each):
                with webhook(cert_dir, args) as started:
                    runs.append(measure("webhook", started, chosen, args))
                _keep(runs, args)
        if args.server in ("insights", "both") and (findings := _findings(args.findings, "insights")):
            with plane("attack-mix") as p:
                apply_plain_crd(p)
                say(f"creating {args.foos} Foos with 8 KiB of labels each")
                create_foos(p, args.foos)
                for chosen in _runs(findings, args.each):
                    with insights(p, cert_dir, args) as started:
                        runs.append(measure("insights", started, chosen, args))
                    _keep(runs, args)
    _print(runs, args.memory_limit_mib)


def _keep(runs: list[Run], args: argparse.Namespace) -> None:
    """Save after every run: a long --each loses nothing to a later failure."""
    latest = runs[-1]
    say(
        f"{latest.server} {','.join(map(str, latest.findings))}: peak {latest.peak_mib:.0f} MiB "
        f"at {latest.peak_at_s:.0f}s, OOM kills {latest.oom_kills}, "
        f"/healthz max {latest.healthz_max_s():.2f}s, honest failed {len(latest.honest.failures)}"
    )
    save("attack_mix", {"settings": vars(args), "runs": [r.summary() for r in runs]})


if __name__ == "__main__":
    main()
