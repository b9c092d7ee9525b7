"""The callers an attack must not hurt: kube-apiserver's requests and the kubelet's probes.

The webhook's honest callers are ``valid``'s (admission and conversion reviews, every answer
checked); insights' are the aggregator's (FooHealth list, get and Table, FooReview creates, with
the front-proxy certificate). The probe opens a new TLS connection for each /healthz, as the
kubelet does, and gives up after 5 s (a failure the kubelet would count).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from fooapi import LEGACY_API_VERSION

from .foos import conversion_of, create_review, new_foo
from .harness import Target, close, open_tcp, open_tls
from .insights import FOOHEALTHS, FOOREVIEWS, TABLE, foo_review

PROBE_TIMEOUT = 5.0
# The chart's webhook timeoutSeconds: kube-apiserver gives up on a review after it.
REVIEW_TIMEOUT = 5.0
PROBE_INTERVAL = 0.25
# kube-aggregator's availability check of an APIService (remote_available_controller.go): five GETs
# of the group-version at once, each with a 5 s timeout; the APIService stays Available if one is
# answered 2xx or 3xx. When all five fail, the aggregator answers 503 to every read until a check
# passes again. Here one check a second (kube-aggregator checks on every change and resync).
CHECK_ATTEMPTS = 5
CHECK_TIMEOUT = 5.0
CHECK_INTERVAL = 1.0
CHECKED_PATH = "/apis/insights.samplecontroller.k8s.io/v1alpha1"
# FooHealths carrying this label are the ones honest lists select: a list of the attack's 1,000
# heavy FooHealths would be the attack itself.
HONEST_LABEL = ("honest", "yes")


@dataclass
class ReviewTally:
    """What the honest review callers met (bench.flood adds what its hostile and slow clients were answered)."""

    valid_latency: list[float] = field(default_factory=list)
    valid_failures: list[str] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)
    slow: Counter[str] = field(default_factory=Counter)


def _check(path: str, status: int, answer: Any) -> str | None:
    if status != 200:
        return f"{path}: HTTP {status}: {str(answer)[:200]}"
    response = answer.get("response", {})
    if path == "/convert":
        if response.get("result", {}).get("status") != "Success" or len(response.get("convertedObjects", [])) != 2:
            return f"{path}: unexpected answer {str(answer)[:200]}"
    elif response.get("uid") != "705ab4f5-6393-11e8-b7cc-42010a800002" or response.get("allowed") is not True:
        return f"{path}: unexpected answer {str(answer)[:200]}"
    return None


async def valid(
    session: aiohttp.ClientSession, url: str, index: int, tally: ReviewTally, stop: asyncio.Event, timeout: float = 30.0
) -> None:
    bodies = [
        ("/validate-foo", orjson.dumps(create_review(new_foo(defaulted=True)))),
        ("/mutate-foo", orjson.dumps(create_review(new_foo()))),
        ("/convert", orjson.dumps(conversion_of(2, LEGACY_API_VERSION))),
    ]
    turn = index
    while not stop.is_set():
        path, body = bodies[turn % len(bodies)]
        turn += 1
        started = time.perf_counter()
        try:
            async with session.post(
                url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                answer = await response.json(content_type=None)
                problem = _check(path, response.status, answer)
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            problem = f"{path}: {type(err).__name__}: {err}"
        tally.valid_latency.append(time.perf_counter() - started)
        if problem:
            tally.valid_failures.append(problem)
        await asyncio.sleep(0.01)


@dataclass
class Honest:
    latency: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    server_errors: int = 0
    # The aggregator's availability checks (insights only): how many, and every failed attempt.
    checks: int = 0
    checks_failed: int = 0
    attempts_failed: list[str] = field(default_factory=list)
    # Seconds each answered attempt spent connecting (TCP), in the TLS handshake, and on its answer.
    check_phases: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Probes:
    latency: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # The kubelet acts on failures in a row (the chart's failureThreshold: 2 for readiness).
    failed_in_a_row: int = 0
    most_failed_in_a_row: int = 0


async def probe(target: Target, probes: Probes, stop: asyncio.Event) -> None:
    """What the kubelet asks, on a new connection every PROBE_INTERVAL; latency until the status
    line. With a probe port (``--health-probe-bind-address``, the chart's): GET /readyz there in
    plain HTTP, as the readiness probe does; else GET /healthz on the serving port over TLS."""
    path = "/readyz" if target.probe_port else "/healthz"
    request = f"GET {path} HTTP/1.1\r\nHost: {target.host}\r\nConnection: close\r\n\r\n".encode()
    while not stop.is_set():
        began = time.perf_counter()
        problem = ""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                if target.probe_port:
                    reader, writer = await asyncio.open_connection(target.host, target.probe_port)
                else:
                    reader, writer = await open_tls(target, timeout=PROBE_TIMEOUT)
                try:
                    writer.write(request)
                    line = await reader.readline()
                finally:
                    await close(writer)
            if not line.startswith(b"HTTP/1.1 200"):
                problem = f"answered {line[:60]!r}"
        except TimeoutError:
            problem = f"no answer within {PROBE_TIMEOUT:g}s"
        except (OSError, ssl.SSLError) as err:
            problem = f"{type(err).__name__}: {err}"
        probes.latency.append(time.perf_counter() - began)
        if problem:
            probes.failures.append(f"{time.strftime('%H:%M:%S')} {problem}")
            probes.failed_in_a_row += 1
            probes.most_failed_in_a_row = max(probes.most_failed_in_a_row, probes.failed_in_a_row)
        else:
            probes.failed_in_a_row = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PROBE_INTERVAL):
                await stop.wait()


def _check_insights(kind: str, status: int, answer: Any) -> str | None:
    if kind == "review":
        if status != 201 or answer.get("status", {}).get("allowed") is not True:
            return f"FooReview create: HTTP {status}: {str(answer)[:200]}"
        return None
    if status != 200:
        return f"{kind}: HTTP {status}: {str(answer)[:200]}"
    expected = {"list": "FooHealthList", "get": "FooHealth", "table": "Table"}[kind]
    if answer.get("kind") != expected or (kind != "get" and not (answer.get("items") or answer.get("rows"))):
        return f"{kind}: unexpected answer {str(answer)[:200]}"
    return None


async def honest_insights(
    session: aiohttp.ClientSession, target: Target, index: int, honest: Honest, stop: asyncio.Event
) -> None:
    selector = f"labelSelector={HONEST_LABEL[0]}%3D{HONEST_LABEL[1]}"
    calls: list[tuple[str, str, str, bytes | None, str]] = [
        ("list", "GET", f"{FOOHEALTHS}?{selector}", None, "application/json"),
        ("get", "GET", f"{FOOHEALTHS}/honest-00000", None, "application/json"),
        ("table", "GET", f"{FOOHEALTHS}?{selector}", None, TABLE),
        ("review", "POST", FOOREVIEWS, orjson.dumps(foo_review(new_foo())), "application/json"),
    ]
    headers = dict(target.user_headers)
    turn = index
    while not stop.is_set():
        kind, method, path, body, accept = calls[turn % len(calls)]
        turn += 1
        began = time.perf_counter()
        try:
            async with session.request(
                method,
                target.url + path,
                data=body,
                headers={**headers, "Accept": accept, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response:
                answer = await response.json(content_type=None)
                status = response.status
                problem = _check_insights(kind, status, answer)
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            status, problem = 0, f"{kind}: {type(err).__name__}: {err}"
        honest.latency.append(time.perf_counter() - began)
        honest.server_errors += status >= 500
        if problem:
            honest.failures.append(problem)
        await asyncio.sleep(0.02)


async def availability_checks(target: Target, honest: Honest, stop: asyncio.Event) -> None:
    """The aggregator's availability check, once every CHECK_INTERVAL: CHECK_ATTEMPTS GETs at once,
    each on a new connection with the front-proxy certificate; failed when every attempt fails."""
    head = f"GET {CHECKED_PATH} HTTP/1.1\r\nHost: {target.host}\r\n".encode()
    user = b"X-Remote-User: system:kube-aggregator\r\nX-Remote-Group: system:masters\r\n"
    request = head + user + b"Connection: close\r\n\r\n"

    async def attempt() -> str:
        began = time.perf_counter()
        took: dict[str, float] = {}
        phase = "connect"
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                sock = await open_tcp(target, CHECK_TIMEOUT)
                took[phase], phase = time.perf_counter() - began, "handshake"
                context = target.client_context or target.context
                reader, writer = await asyncio.open_connection(sock=sock, ssl=context, server_hostname=target.host)
                took[phase], phase = time.perf_counter() - began - sum(took.values()), "answer"
                try:
                    writer.write(request)
                    line = await reader.readline()
                finally:
                    await close(writer)
                took[phase] = time.perf_counter() - began - sum(took.values())
        except TimeoutError:
            return f"no answer within {CHECK_TIMEOUT:g}s (in the {phase})"
        except (OSError, ssl.SSLError) as err:
            return f"{type(err).__name__} in the {phase} after {time.perf_counter() - began:.2f}s: {err}"
        if line[9:10] not in (b"2", b"3"):
            return f"answered {line[:40]!r}"
        for name, seconds in took.items():
            honest.check_phases.setdefault(name, []).append(seconds)
        return ""

    while not stop.is_set():
        problems = [p for p in await asyncio.gather(*(attempt() for _ in range(CHECK_ATTEMPTS))) if p]
        honest.checks += 1
        honest.attempts_failed += [f"{time.strftime('%H:%M:%S')} {p}" for p in problems]
        if len(problems) == CHECK_ATTEMPTS:
            honest.checks_failed += 1
            honest.failures.append(f"availability check: all {CHECK_ATTEMPTS} attempts failed: {problems[0]}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CHECK_INTERVAL):
                await stop.wait()


async def honest_reviews(
    session: aiohttp.ClientSession, target: Target, index: int, honest: Honest, stop: asyncio.Event
) -> None:
    """The webhook's honest callers: ``valid``'s checked reviews, tallied as ours."""
    tally = ReviewTally()
    await valid(session, target.url, index, tally, stop, timeout=REVIEW_TIMEOUT)
    honest.latency += tally.valid_latency
    honest.failures += tally.valid_failures
    honest.server_errors += sum(" HTTP 5" in failure for failure in tally.valid_failures)


async def run_honest(target: Target, server: str, clients: int, seconds: float) -> Honest:
    """``clients`` honest callers of ``server`` for ``seconds``."""
    honest = Honest()
    stop = asyncio.Event()
    context = target.client_context or target.context
    caller = honest_insights if server == "insights" else honest_reviews
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0)) as session:
        tasks = [asyncio.create_task(caller(session, target, i, honest, stop)) for i in range(clients)]
        if server == "insights":
            tasks.append(asyncio.create_task(availability_checks(target, honest, stop)))
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
    return honest


async def run_probe(target: Target, seconds: float) -> Probes:
    probes = Probes()
    stop = asyncio.Event()
    task = asyncio.create_task(probe(target, probes, stop))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return probes
