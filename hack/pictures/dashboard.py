"""`make dashboard`: a picture of the chart's Grafana dashboard, drawn from a real run.

    .venv/bin/python -m hack.pictures.dashboard [--seconds 150] [--scrape-interval 2] [--out docs/images/dashboard.svg]

Starts the local plane (hack/plane/cluster.py) and the product on loopback as `make run` does: the
webhook, the controller (leader-elected) and the insights server, each with secure /metrics as the
chart's default has it. A Prometheus server built from the same module as promtool (`bash
hack/build.sh prometheus`) scrapes the three with a ServiceAccount token that the chart's
`metrics-reader` rules allow, labelled as a ServiceMonitor would label them (job, namespace, pod).
Then a bounded Foo load goes through kube-apiserver (creates at v1 and v1alpha1, scales, denied
Foos, reads at v1alpha1, deletes): the webhooks, conversion and the controller all work. Each
panel's queries are evaluated with /api/v1/query_range over the run and drawn where the grid puts
them. One line per panel (series count); exit 1 if a panel is empty without a known reason.
Needs the `[docs]` extra (matplotlib). Loopback only; nothing is pulled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hack.pictures.grafana import Panel, Series, load_panels, matrix_series, query_range_url, substitute, variables
from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.binaries import MissingBinaryError, find_binaries
from hack.plane.cluster import KubectlError, LocalControlPlane, free_port
from hack.plane.procs import Component, ComponentError, wait_until
from hack.plane.product import OWN_NAMESPACE, REPO, LocalProduct

# Run as `python -m hack.pictures.dashboard`, where __name__ is "__main__": the rule (getLogger(__name__)) names it by hand.
log = logging.getLogger("hack.pictures.dashboard")

LOAD_NAMESPACE = "dashboard-load"
SCRAPER = "prometheus"  # the ServiceAccount Prometheus scrapes as, in the release namespace
# Panels that a short healthy run leaves empty, and why: said in the picture instead of data.
EMPTY_FOR_A_REASON = {
    "Server errors (5xx share)": "no 5xx answer in the run (a denial is a 200 with allowed: false)",
    "Informer watch restarts": "no watch ended in the run: the informers ask for 5-10 min watches",
}
# A Deployment no Foo owns: each round one Foo names it, and the controller refuses to adopt it
# (ErrResourceExists, as sample-controller does): the "Reconcile errors" panel shows real errors.
NOT_OURS = "not-ours"
CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Target:
    """One process Prometheus scrapes, labelled as the chart's ServiceMonitor would label it."""

    component: str  # webhook, insights, controller
    port: int
    ca_file: Path | None  # None: a self-signed certificate, not verified (the chart's default tlsConfig)

    @property
    def job(self) -> str:
        return f"foo-operator-{self.component}-metrics"  # the metrics Service's name: the job


def prometheus_config(targets: list[Target], token_file: Path, scrape_interval: float) -> dict[str, Any]:
    """prometheus.yml: one job per process over HTTPS with the scraper's bearer token."""
    interval = f"{scrape_interval:g}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": target.job,
                "scheme": "https",
                "authorization": {"credentials_file": str(token_file)},
                "tls_config": {"ca_file": str(target.ca_file)} if target.ca_file else {"insecure_skip_verify": True},
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{target.port}"],
                        "labels": {"namespace": OWN_NAMESPACE, "pod": f"foo-operator-{target.component}-0"},
                    }
                ],
            }
            for target in targets
        ],
    }


# -- the run ---------------------------------------------------------------------------------
def scraper_token(plane: LocalControlPlane) -> str:
    """A token of a ServiceAccount allowed `get` on /metrics, as the chart's metrics-reader role allows."""
    role = "foo-operator-dashboard-metrics-reader"
    plane.kubectl("create", "namespace", OWN_NAMESPACE, check=False)
    plane.kubectl("create", "serviceaccount", SCRAPER, "-n", OWN_NAMESPACE)
    plane.kubectl("create", "clusterrole", role, "--verb=get", "--non-resource-url=/metrics")
    plane.kubectl(
        "create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={OWN_NAMESPACE}:{SCRAPER}"
    )
    who = f"--as=system:serviceaccount:{OWN_NAMESPACE}:{SCRAPER}"
    wait_until(
        "RBAC to allow the scraper",
        lambda: plane.kubectl("auth", "can-i", "get", "/metrics", who, check=False).stdout.strip() == "yes",
        timeout=30,
    )
    return plane.kubectl("create", "token", SCRAPER, "-n", OWN_NAMESPACE, "--duration=2h").stdout.strip()


@contextlib.contextmanager
def insights(plane: LocalControlPlane, cert_dir: Path, metrics_port: int) -> Iterator[Component]:
    """The aggregated API server as a process (only its /metrics is read here)."""
    process = Component(
        "insights",
        [
            sys.executable,
            "-m",
            "insights",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--cert-dir",
            str(cert_dir),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
            "--metrics-secure",
        ],  # fmt: skip
        plane.logs_dir / "insights.log",
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def prometheus(workdir: Path, config: dict[str, Any], port: int, logs: Path) -> Iterator[str]:
    """Prometheus on loopback with ``config``; yields its base URL once it is ready."""
    binaries = find_binaries()
    binaries.require("prometheus")
    shutil.rmtree(workdir / "data", ignore_errors=True)  # this run's samples only
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(json.dumps(config, indent=2))  # JSON is YAML: Prometheus reads it as is
    process = Component(
        "prometheus",
        [
            str(binaries.prometheus),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d",
        ],  # fmt: skip
        logs / "prometheus.log",
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("Prometheus to be ready", lambda: _get(url + "/-/ready")[0] == 200, timeout=60, watch=[process])
        yield url
    finally:
        process.stop()


def _get(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        return response.status, json.loads(body) if body.startswith(b"{") else body


def all_targets_up(url: str, count: int) -> bool:
    _, answer = _get(url + "/api/v1/targets?state=active")
    health = [t["health"] for t in answer["data"]["activeTargets"]]
    return len(health) == count and all(h == "up" for h in health)


async def load(plane: LocalControlPlane, seconds: float) -> dict[str, int]:
    """Rounds of Foo traffic through kube-apiserver until ``seconds`` have passed; counts by kind."""
    counts = {"created": 0, "scaled": 0, "denied": 0, "read v1alpha1": 0, "deleted": 0, "unexpected": 0}
    base = f"/apis/samplecontroller.k8s.io/{{}}/namespaces/{LOAD_NAMESPACE}/foos"
    deadline = time.monotonic() + seconds
    round_ = 0
    async with AdminClient(plane, connections=8, user_agent="foo-operator-dashboard") as client:

        def scale(name: str) -> Any:
            async def call() -> tuple[int, bytes]:
                """Read, change replicas, write back (an UPDATE); again on a conflict with the
                controller's status writes, as client-go's RetryOnConflict does."""
                for _ in range(CONFLICT_RETRIES):
                    status, raw = await client.request("GET", f"{base.format('v1')}/{name}")
                    if status != 200:
                        return status, raw
                    foo = json.loads(raw)
                    foo["spec"]["replicas"] = 2
                    status, raw = await client.request("PUT", f"{base.format('v1')}/{name}", foo)
                    if status != 409:
                        break
                return status, raw

            return call

        def request(method: str, path: str, body: Any = None) -> Any:
            return lambda: client.request(method, path, body)

        while time.monotonic() < deadline:
            round_ += 1
            batch = range(round_ * 100, round_ * 100 + 10)
            current = [plain_foo(i, prefix="now", namespace=LOAD_NAMESPACE) for i in batch]
            legacy = [plain_foo(i, prefix="old", version="v1alpha1", namespace=LOAD_NAMESPACE) for i in batch]
            denied = [{**foo, "spec": {**foo["spec"], "replicas": 11}} for foo in current[:3]]
            clash = plain_foo(round_, prefix="clash", namespace=LOAD_NAMESPACE)
            clash["spec"]["deployment"]["name"] = NOT_OURS
            steps: list[tuple[str, list[Any], tuple[int, ...]]] = [
                ("created", [request("POST", base.format("v1"), foo) for foo in current], (201,)),
                ("created", [request("POST", base.format("v1alpha1"), foo) for foo in legacy], (201,)),
                ("created", [request("POST", base.format("v1"), clash)], (201,)),
                ("denied", [request("POST", base.format("v1"), foo) for foo in denied], (422,)),
                ("scaled", [scale(foo["metadata"]["name"]) for foo in current], (200,)),
                ("read v1alpha1", [request("GET", base.format("v1alpha1"))], (200,)),
                ("deleted", [request("DELETE", f"{base.format('v1')}/{foo['metadata']['name']}") for foo in [*current, *legacy, clash]], (200,)),
            ]  # fmt: skip
            for what, calls, ok in steps:
                outcome = await client.many(calls, concurrency=4, ok=ok)
                counts[what] += outcome.done
                if outcome.failed:
                    counts["unexpected"] += outcome.failed
                    log.warning("%s: %d unexpected answers, first: %s", what, outcome.failed, outcome.first_error)
            await asyncio.sleep(0.2)  # a steady rate, not a flood: the panels show a working system
    return counts


def evaluate(url: str, panel: Panel, start: float, end: float, step: float, scrape_interval: float) -> list[Series]:
    values = variables(OWN_NAMESPACE, step, scrape_interval)
    series: list[Series] = []
    for target in panel.targets:
        _, answer = _get(query_range_url(url, substitute(target.expr, values), start, end, step))
        series.extend(matrix_series(answer, target.legend))
    return series


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.machine(),
    )
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}"


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "")


def missing_prerequisite() -> str | None:
    """What stops a run before it starts (rather than after minutes of load), in one line."""
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed: pip install -e '.[docs]' (make dashboard does)"
    try:
        find_binaries().require("prometheus")
    except MissingBinaryError as err:
        return str(err)
    return None


def run(args: argparse.Namespace) -> int:
    panels = load_panels()
    ports = {"webhook": 0, "insights": free_port(), "controller": free_port(), "prometheus": free_port()}
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(LocalControlPlane(args.workdir / "plane"))
        token = scraper_token(plane)
        plane.kubectl("create", "namespace", LOAD_NAMESPACE)
        plane.kubectl("create", "deployment", NOT_OURS, "--image=nginx", "-n", LOAD_NAMESPACE)
        product = LocalProduct(
            plane,
            controller=True,
            webhook_args=["--kubeconfig", str(plane.kubeconfig), "--metrics-secure"],
            # Later flags win: these replace the product's own free --metrics-bind-address.
            controller_args=[
                "--metrics-secure",
                "--metrics-bind-address",
                f"127.0.0.1:{ports['controller']}",
                "--leader-elect",
                "--leader-elect-namespace",
                OWN_NAMESPACE,
            ],
        )
        stack.enter_context(product)
        ports["webhook"] = product.metrics_port
        stack.enter_context(insights(plane, product.cert_dir, ports["insights"]))
        token_file = args.workdir / "prometheus" / "token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.touch(0o600)
        stack.callback(token_file.unlink, missing_ok=True)  # the token must not outlive the run
        token_file.write_text(token)
        ca = product.cert_dir / "ca.crt"
        targets = [Target("webhook", ports["webhook"], ca), Target("insights", ports["insights"], ca)]
        targets.append(Target("controller", ports["controller"], None))
        config = prometheus_config(targets, token_file, args.scrape_interval)
        url = stack.enter_context(prometheus(args.workdir / "prometheus", config, ports["prometheus"], plane.logs_dir))
        wait_until("every target to be scraped", lambda: all_targets_up(url, len(targets)), timeout=60)

        start = time.time()
        log.info("load for %ds through kube-apiserver", args.seconds)
        counts = asyncio.run(load(plane, args.seconds))
        time.sleep(2 * args.scrape_interval)  # the last rounds' samples scraped
        end = time.time()
        log.info("load done: %s", ", ".join(f"{n} {what}" for what, n in counts.items()))

        step = max(args.scrape_interval, (end - start) / 200)
        data: dict[str, list[Series]] = {}
        unexplained = []
        for panel in panels:
            if panel.is_row:
                continue
            data[panel.title] = evaluate(url, panel, start, end, step, args.scrape_interval)
            count = len(data[panel.title])
            reason = EMPTY_FOR_A_REASON.get(panel.title, "") if not count else ""
            print(f"{panel.title:40} {count:3d} series{'  (empty: ' + reason + ')' if reason else ''}")
            if not count and not reason:
                unexplained.append(panel.title)

    busy = os.getloadavg()[1]  # the machine may be shared: latencies read differently on a busy one
    caption = (
        f"foo-operator's Grafana dashboard: {args.seconds:.0f} s of Foo load on a local plane (Kubernetes "
        f"{plane.version}), scraped every {args.scrape_interval:g} s; commit {commit()}, {machine()}, "
        f"load average {busy:.1f} during the run; "
        "made by `make dashboard`. "
        + " ".join(f"{title}: {why}." for title, why in EMPTY_FOR_A_REASON.items() if not data.get(title))
    )
    saved = {
        "start": start,
        "caption": caption,
        "data": {title: [asdict(s) for s in found] for title, found in data.items()},
    }
    (args.workdir / "run.json").write_text(json.dumps(saved))
    draw(args.workdir / "run.json", args.out)
    if unexplained:
        print(f"make dashboard: empty panels: {', '.join(unexplained)}", file=sys.stderr)
        return 1
    return 0


def draw(saved: Path, out: Path) -> None:
    """The picture from a run's saved series (``--redraw`` draws again without a new run)."""
    from hack.pictures.dashboard_render import render  # matplotlib: the [docs] extra, needed here only

    run = json.loads(saved.read_text())
    data = {
        title: [Series(s["name"], tuple(s["times"]), tuple(s["values"])) for s in found]
        for title, found in run["data"].items()
    }
    render(load_panels(), data, EMPTY_FOR_A_REASON, run["start"], out, run["caption"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="how long the load runs (default: 150)")
    parser.add_argument("--scrape-interval", type=float, default=2.0, help="seconds between scrapes (default: 2)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "dashboard.svg", help="the picture")
    parser.add_argument("--workdir", type=Path, default=REPO / ".local" / "dashboard", help="plane, Prometheus, logs")
    parser.add_argument("--redraw", action="store_true", help="draw the last run's series again (no new run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="==> %(message)s", stream=sys.stderr)
    problem = missing_prerequisite()
    if problem:
        print(f"make dashboard: {problem}", file=sys.stderr)
        return 1
    try:
        if args.redraw:
            draw(args.workdir / "run.json", args.out)
            return 0
        return run(args)
    except (ComponentError, MissingBinaryError, KubectlError, OSError) as err:
        print(f"make dashboard: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
