"""Admission throughput and latency: our webhook service vs controller-runtime (Go) and kopf.

    .venv/bin/python -m bench.admission [--seconds 10] [--connections 50] [--rate 1000] [--peers go,kopf]

Each server runs alone, pinned to core 0, over loopback TLS with the same certificates; wrk,
pinned to core 1, POSTs the same AdmissionReview (or one-object ConversionReview) for a fixed
time: once at a fixed offered rate (latency at a load every server can carry) and once at
saturation. Before loading, each server's answer is checked against ours, so all do the same work.
"""

from __future__ import annotations

import argparse
import base64
import json
import tempfile
from pathlib import Path
from typing import Any

from attacks.foos import conversion_of, create_review, dumps, new_foo
from fooapi import LEGACY_API_VERSION

from . import servers
from .load import LoadResult, cores, run_wrk
from .planes import apply_plain_crd, plane
from .report import fmt, ratio, save, say, table

ENDPOINTS = ("/validate-foo", "/mutate-foo", "/convert")


def bodies() -> dict[str, bytes]:
    """What the apiserver sends for `kubectl apply` of a new Foo: validate sees it defaulted."""
    return {
        "/validate-foo": dumps(create_review(new_foo(defaulted=True))),
        "/mutate-foo": dumps(create_review(new_foo())),
        "/convert": dumps(conversion_of(1, LEGACY_API_VERSION)),
    }


def _apply_patch(obj: Any, ops: list[dict[str, Any]]) -> Any:
    """Enough RFC 6902 (add, replace, remove on objects) to compare the effect of two patches."""
    obj = json.loads(json.dumps(obj))
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = obj
        for part in parents:
            target = target[part]
        if op["op"] in ("add", "replace"):
            target[last] = op["value"]
        elif op["op"] == "remove":
            del target[last]
    return obj


def answer(endpoint: str, request: bytes, status: int, body: bytes) -> Any:
    """What an answer means, independent of how a framework spells it."""
    if status != 200:
        return {"http": status}
    response = json.loads(body)["response"]
    if endpoint == "/convert":
        return {"result": response["result"]["status"], "objects": response["convertedObjects"]}
    meaning: dict[str, Any] = {"allowed": response["allowed"]}
    if response.get("patch"):
        obj = json.loads(request)["request"]["object"]
        meaning["patched"] = _apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    if not response["allowed"]:
        meaning["code"] = (response.get("status") or {}).get("code")
    return meaning


def measure(
    server: servers.Server, cert_dir: Path, args: argparse.Namespace, reference: dict[str, Any] | None
) -> dict[str, Any]:
    context = servers.client_context(cert_dir)
    results: dict[str, Any] = {}
    for endpoint, body in bodies().items():
        if endpoint not in server.endpoints:
            continue
        status, out = servers.request(server.url + endpoint, context, body=body)
        meaning = answer(endpoint, body, status, out)
        same = None if reference is None else meaning == reference[endpoint]["answer"]
        url = server.url + endpoint
        say(f"{server.name} {endpoint}: warm-up, {args.rate:g}/s for {args.seconds:g}s, then saturation")
        run_wrk(url, body, seconds=min(2.0, args.seconds), connections=args.connections)
        cpu, waited = server.cpu_seconds(), server.run_queue_seconds()
        fixed = run_wrk(url, body, seconds=args.seconds, connections=args.fixed_connections, rate=args.rate)
        cpu_fixed, cpu = server.cpu_seconds() - cpu, server.cpu_seconds()
        waited_fixed = server.run_queue_seconds() - waited
        saturated = run_wrk(url, body, seconds=args.seconds, connections=args.connections)
        cpu_saturated = server.cpu_seconds() - cpu
        results[endpoint] = {
            "answer": meaning,
            "same_answer_as_ours": same,
            "fixed_rate": fixed.as_dict(),
            "saturation": saturated.as_dict(),
            # Server CPU per request: what a busy machine disturbs least.
            "cpu_us_per_request_fixed": cpu_fixed / max(fixed.requests, 1) * 1e6,
            "cpu_us_per_request_saturation": cpu_saturated / max(saturated.requests, 1) * 1e6,
            # Server runnable but waiting for its (shared) core in the fixed-rate run: a fixed-rate
            # p99 of tens of ms with tens of ms of this per second is the machine's, not the server's.
            "run_queue_ms_per_s_fixed": waited_fixed * 1e3 / max(fixed.seconds, 1e-9),
        }
    return results


def _row(name: str, endpoint: str, r: dict[str, Any]) -> list[Any]:
    f, s = LoadResult(**r["fixed_rate"]), LoadResult(**r["saturation"])
    same = {None: "(ref)", True: "yes", False: "NO"}[r["same_answer_as_ours"]]
    return [
        name,
        endpoint,
        same,
        f.rps,
        f.p50_ms,
        f.p99_ms,
        f.p999_ms,
        r.get("run_queue_ms_per_s_fixed"),
        s.rps,
        s.p50_ms,
        s.p99_ms,
        s.p999_ms,
        r["cpu_us_per_request_saturation"],
        f.errors + s.errors,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load run")
    parser.add_argument("--connections", type=int, default=50, help="keep-alive connections at saturation")
    parser.add_argument("--rate", type=float, default=1000.0, help="offered requests/s of the fixed-rate run")
    parser.add_argument("--fixed-connections", type=int, default=20, help="connections of the fixed-rate run")
    parser.add_argument("--peers", default="go,kopf", help="comma-separated: go, kopf (empty: ours only)")
    args = parser.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]

    server_core, load_core = cores()
    say(f"server on core {server_core}, wrk on core {load_core}; {args.seconds:g}s per run")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="foo-bench-") as tmp:
        cert_dir = servers.serving_certs(Path(tmp) / "certs")
        with servers.ours(cert_dir) as server:
            results["ours"] = measure(server, cert_dir, args, None)
        if "go" in peers:
            with servers.go_peer(cert_dir) as server:
                results["go-controller-runtime"] = measure(server, cert_dir, args, results["ours"])
        if "kopf" in peers:
            # kopf scans the API before serving webhooks: give it a plane that serves the Foo CRD.
            with plane("admission-kopf") as p:
                apply_plain_crd(p)
                with servers.kopf_peer(cert_dir, p.kubeconfig) as server:
                    results["kopf"] = measure(server, cert_dir, args, results["ours"])

    rows = [_row(name, endpoint, r) for name, by_endpoint in results.items() for endpoint, r in by_endpoint.items()]
    print(
        f"\nAdmission over loopback TLS, server pinned to 1 core; fixed rate {args.rate:g}/s "
        f"({args.fixed_connections} conns), saturation {args.connections} conns, {args.seconds:g}s each"
    )
    print(
        table(
            [
                "server",
                "endpoint",
                "same",
                "fixed req/s",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "CPU wait ms/s",
                "sat req/s",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "CPU µs/req",
                "errors",
            ],
            rows,
        )
    )
    ratios = []
    for peer in results:
        if peer == "ours":
            continue
        for endpoint, theirs in results[peer].items():
            ours = results["ours"][endpoint]
            ratios.append(
                {
                    "peer": peer,
                    "endpoint": endpoint,
                    "saturation_rps": ratio(ours["saturation"]["rps"], theirs["saturation"]["rps"]),
                    "saturation_p99": ratio(ours["saturation"]["p99_ms"], theirs["saturation"]["p99_ms"]),
                    "fixed_rate_p99": ratio(ours["fixed_rate"]["p99_ms"], theirs["fixed_rate"]["p99_ms"]),
                    "cpu_per_request": ratio(
                        ours["cpu_us_per_request_saturation"], theirs["cpu_us_per_request_saturation"]
                    ),
                }
            )
    if ratios:
        print("\nOurs as a ratio to each peer (req/s: >1 is faster; p99 and CPU per request: <1 is better)")
        print(
            table(
                ["peer", "endpoint", "sat req/s ×", "sat p99 ×", "fixed-rate p99 ×", "CPU/req ×"],
                [
                    [
                        r["peer"],
                        r["endpoint"],
                        fmt(r["saturation_rps"], 2),
                        fmt(r["saturation_p99"], 2),
                        fmt(r["fixed_rate_p99"], 2),
                        fmt(r["cpu_per_request"], 2),
                    ]
                    for r in ratios
                ],
            )
        )
    path = save("admission", {"settings": vars(args), "results": results, "ratios": ratios})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
