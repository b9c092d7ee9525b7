"""Hostile callers of the insights API, through its real listener (serving.appserving over TLS).

Each test is an attack that once worked (issue #25, findings 10-15): heads that never end or
arrive slowly, many connections without a certificate, reviews larger than memory or nested
deeper than any renderer goes, clients that leave mid-body, watches without end.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from attacks.harness import begun_handshake
from attacks.objects import foo_v1
from certs.authority import KeyPair, issue_client, issue_serving, new_ca
from hack.plane.cluster import free_port
from insights import AggregatedConfig
from insights import api as insights_api
from insights.api import INSIGHTS
from insights.authn import RequestHeaderConfig, UserInfo
from insights.authz import Decision, RequestInfo
from insights.server import build_app
from insights.view import HealthView
from serving.appserving import API_PORT, AppListener
from serving.connections import ConnectionLimits
from serving.lifecycle import ServingOptions, serve_until_stopped
from serving.readiness import CERTIFICATE_LOADED, Readiness

from .handshakes import handshakes_held
from .waiting import until

REVIEWS = "/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/ns/fooreviews"
WATCH = "/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/ns/foohealths?watch=1"
FLOOD_ADDRESS = "127.0.0.2"  # loopback too: a second caller's own address
HANDSHAKES_HELD = API_PORT.max_handshakes
assert API_PORT.anonymous is not None
ANONYMOUS = API_PORT.anonymous


@dataclass
class Listener:
    """A running insights listener and the two kinds of caller: the aggregator (verified) and anyone."""

    port: int
    aggregator: ssl.SSLContext
    anonymous: ssl.SSLContext
    app: Any
    authorized: list[RequestInfo]  # every request let through (the rest is routed and read after)

    async def connect(self, *, verified: bool = True) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        context = self.aggregator if verified else self.anonymous
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=context)

    async def request(self, method: str, path: str, *, verified: bool = True, body: Any = None) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.request(
                method,
                f"https://127.0.0.1:{self.port}{path}",
                ssl=self.aggregator if verified else self.anonymous,
                headers={"X-Remote-User": "alice", "Content-Type": "application/json"},
                data=orjson.dumps(body) if body is not None else None,
                timeout=aiohttp.ClientTimeout(total=20),
            ) as response:
                text = await response.read()
                try:
                    return response.status, orjson.loads(text)
                except orjson.JSONDecodeError:
                    return response.status, text.decode()


Start = Callable[..., Awaitable[Listener]]


def _write_pair(directory: Path, name: str, pair: KeyPair) -> None:
    (directory / f"{name}.crt").write_bytes(pair.cert_pem)
    (directory / f"{name}.key").write_bytes(pair.key_pem)


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    serving_ca, front_proxy_ca = new_ca("serving-ca"), new_ca("front-proxy-ca")
    _write_pair(
        tmp_path, "tls", issue_serving(serving_ca, common_name="insights", dns_names=["localhost"], ips=["127.0.0.1"])
    )
    _write_pair(tmp_path, "aggregator", issue_client(front_proxy_ca, common_name="front-proxy-client"))
    client_ca_file = tmp_path / "front-proxy-ca.crt"
    client_ca_file.write_bytes(front_proxy_ca.cert_pem)
    anonymous = ssl.create_default_context(cadata=serving_ca.cert_pem.decode())
    aggregator = ssl.create_default_context(cadata=serving_ca.cert_pem.decode())
    aggregator.load_cert_chain(tmp_path / "aggregator.crt", tmp_path / "aggregator.key")
    stop = asyncio.Event()
    servers: list[asyncio.Task[None]] = []

    async def start_listener(limits: ConnectionLimits | None = None, **config: Any) -> Listener:
        options = ServingOptions(cert_dir=tmp_path, bind_address="127.0.0.1", port=free_port())
        watcher = options.certificate(client_ca_file=client_ca_file)
        readiness = Readiness(checks={CERTIFICATE_LOADED: lambda: watcher.loaded})
        authorized: list[RequestInfo] = []

        async def allow_all(user: UserInfo, info: RequestInfo) -> Decision:
            authorized.append(info)
            return Decision(True)

        app = build_app(
            AggregatedConfig(
                requestheader=RequestHeaderConfig(client_ca_pem=front_proxy_ca.cert_pem),
                authorizer=allow_all,
                view=HealthView.empty(instance=1),
                **config,
            ),
            readiness,
        )
        listener = AppListener(app) if limits is None else AppListener(app, limits)
        servers.append(asyncio.create_task(serve_until_stopped(listener, options, watcher, stop, name="insights")))
        await until("the listener serves", lambda: readiness.serving, timeout=10)
        return Listener(options.port, aggregator, anonymous, app, authorized)

    yield start_listener
    stop.set()
    await asyncio.wait_for(asyncio.gather(*servers), 20)


def _status_of(answer: bytes) -> int:
    """The status code of the first HTTP answer in ``answer`` (0 if there is none)."""
    head = answer.split(b"\r\n", 1)[0].split()
    return int(head[1]) if len(head) > 1 else 0


async def _until_closed(reader: asyncio.StreamReader, timeout: float = 15) -> bytes:
    return await asyncio.wait_for(reader.read(), timeout)


# ---- heads (findings 10 and 11) ---------------------------------------------------------------


async def test_a_head_that_never_ends_is_a_431_once_it_passes_the_limit(start: Start) -> None:
    # Before: 126 headers of 8 KiB each (under aiohttp's per-line limit) were held until the
    # idle timeout, 120 s; 200 such connections took the process to 601 MiB.
    listener = await start()
    reader, writer = await listener.connect()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        for i in range(100):
            writer.write(f"X-Padding-{i}: ".encode() + b"a" * 4000 + b"\r\n")
            await writer.drain()
    except ConnectionError:
        pass  # closed while we still wrote: what we want
    answer = await _until_closed(reader)
    writer.close()
    assert _status_of(answer) == 431
    assert b"request head is larger than 65536 bytes" in answer


async def test_a_request_line_too_long_is_the_parsers_400_however_it_arrives(start: Start) -> None:
    # Before: the answer raced. A 1 MiB request line read in pieces reached aiohttp's 8,190-byte
    # line limit first (400); read in one piece over 64 KiB it met the head limit first (431).
    listener = await start()
    for _ in range(5):
        reader, writer = await listener.connect()
        try:
            writer.write(b"GET /healthz?" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            pass  # closed while we still wrote
        answer = await _until_closed(reader)
        writer.close()
        assert _status_of(answer) == 400
        assert b"Got more than 8190 bytes" in answer


async def test_a_head_sent_slowly_by_a_client_without_certificate_is_a_408_within_seconds(start: Start) -> None:
    # Before: a half-sent head was held until the idle timeout (120 s from connect).
    listener = await start()
    reader, writer = await listener.connect(verified=False)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()

    async def trickle() -> None:
        try:
            while True:
                await asyncio.sleep(0.5)
                writer.write(b"X-A: b\r\n")
                await writer.drain()
        except ConnectionError:
            pass

    sender = asyncio.create_task(trickle())
    try:
        answer = await _until_closed(reader, timeout=12)
    finally:
        sender.cancel()
        writer.close()
    assert _status_of(answer) == 408
    assert b"request head not received within 5s" in answer


async def test_a_slow_head_from_the_aggregator_gets_its_own_deadline_from_the_first_byte(start: Start) -> None:
    listener = await start(replace(API_PORT, head_seconds=1.0))
    reader, writer = await listener.connect()
    writer.write(b"GET /healthz HTTP/1.1\r\n")
    await writer.drain()
    answer = await _until_closed(reader)
    writer.close()
    assert _status_of(answer) == 408


async def test_clients_without_certificate_cannot_crowd_out_a_probe(start: Start) -> None:
    # Before: every connection was kept, and one client could take every descriptor the
    # process had; now the oldest anonymous connection makes room for the newest.
    listener = await start()
    crowd = [await listener.connect(verified=False) for _ in range(70)]
    for _, writer in crowd:
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Never-Ends: ")
    status, text = await listener.request("GET", "/healthz", verified=False)
    assert (status, text) == (200, "ok")
    ends = await asyncio.gather(*(asyncio.wait_for(r.read(), 0.5) for r, _ in crowd), return_exceptions=True)
    for _, writer in crowd:
        writer.close()
    closed = [end for end in ends if end == b"" or isinstance(end, ConnectionResetError)]
    assert len(closed) >= 70 + 1 - ANONYMOUS.max_connections


async def _closed(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    """Whether the server closes the connection within ``timeout`` (after whatever it still sends)."""
    try:
        while await asyncio.wait_for(reader.read(65536), timeout):
            pass
    except ConnectionResetError:
        pass  # cut: closed without waiting for our TLS close
    except TimeoutError:
        return False
    return True


async def _watching(listener: Listener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await listener.connect()
    writer.write(f"GET {WATCH} HTTP/1.1\r\nHost: x\r\nX-Remote-User: alice\r\n\r\n".encode())
    assert _status_of(await asyncio.wait_for(reader.readline(), 5)) == 200
    return reader, writer


async def test_at_the_verified_cap_a_new_connection_closes_the_oldest_idle_one(start: Start) -> None:
    # Before: past the cap every new verified connection was closed at once. Users' watches through
    # kube-apiserver filled it, and its availability check, refused, made the aggregator answer 503
    # to every FooHealth read (the attack mix, once in CI).
    listener = await start(replace(API_PORT, max_connections=3))
    held = [await listener.connect() for _ in range(3)]
    status, _ = await listener.request("GET", "/healthz")
    assert status == 200
    assert await _closed(held[0][0])
    assert not await _closed(held[1][0], timeout=0.2)
    for _, writer in held:
        writer.close()


async def test_at_the_verified_cap_one_that_never_asked_anything_goes_before_a_pool(start: Start) -> None:
    listener = await start(replace(API_PORT, max_connections=3))
    pooled = await listener.connect()
    pooled[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _status_of(await asyncio.wait_for(pooled[0].readline(), 5)) == 200
    silent = [await listener.connect() for _ in range(2)]
    await asyncio.sleep(1.2)  # past their first-request grace
    status, _ = await listener.request("GET", "/healthz")
    assert status == 200
    assert await _closed(silent[0][0])
    assert not await _closed(pooled[0], timeout=0.2)
    for _, writer in [pooled, *silent]:
        writer.close()


async def test_at_the_verified_cap_with_none_idle_a_new_connection_closes_the_oldest_watch(start: Start) -> None:
    listener = await start(replace(API_PORT, max_connections=3))
    watches = [await _watching(listener) for _ in range(3)]
    status, _ = await listener.request("GET", "/healthz")
    assert status == 200
    assert await _closed(watches[0][0])
    assert not await _closed(watches[1][0], timeout=0.2)
    for _, writer in watches:
        writer.close()


async def test_at_the_verified_cap_a_new_connection_is_closed_when_every_one_is_mid_request(start: Start) -> None:
    listener = await start(replace(API_PORT, max_connections=3))
    held = [await listener.connect() for _ in range(3)]
    for _, writer in held:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a head under way: not idle
        await writer.drain()
    await asyncio.sleep(0.1)
    reader, writer = await listener.connect()
    assert await _closed(reader)
    for _, held_writer in [*held, (reader, writer)]:
        held_writer.close()


async def test_bare_tcp_connects_hold_at_most_the_handshake_cap_and_a_probe_is_answered(start: Start) -> None:
    # Before: a connection was counted only once its TLS handshake was over; bare TCP connects
    # each held an SSL object and its buffers for the 10 s handshake timeout, uncounted (with
    # 500 watches and 500 half-sent requests, /healthz took 7 s and 535 connects timed out).
    listener = await start()
    bare = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(200)]
    try:
        # Accepted after the two hundred (the kernel queues connects in order): all of them are in.
        status, text = await listener.request("GET", "/healthz", verified=False)
        assert (status, text) == (200, "ok")
        assert handshakes_held() <= API_PORT.max_handshakes
    finally:
        for _, writer in bare:
            writer.close()


async def _client_hello(port: int, context: ssl.SSLContext, source: str | None = None) -> Any:
    """A connection that has sent its ClientHello and nothing more: its TLS state and its streams."""
    tls, incoming, outgoing = begun_handshake(context)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    if source is not None:
        sock.bind((source, 0))
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(outgoing.read())
    await writer.drain()
    return tls, incoming, outgoing, reader, writer


async def test_a_flood_of_client_hellos_from_another_address_never_drops_a_handshake_under_way(
    start: Start,
) -> None:
    # Before: past 64 handshakes under way the oldest was dropped, whoever had sent it (the
    # attack mix's availability checks were reset so); now the flood's address makes room.
    listener = await start()
    anyone = ssl.create_default_context()
    flood = [await _client_hello(listener.port, anyone, FLOOD_ADDRESS) for _ in range(HANDSHAKES_HELD)]
    tls, incoming, outgoing, reader, writer = await _client_hello(listener.port, listener.aggregator)
    # As many again behind ours as the old cap: ours was the oldest by then, and dropped.
    flood += [await _client_hello(listener.port, anyone, FLOOD_ADDRESS) for _ in range(64)]
    # Ours goes on at once (within its turn: HANDSHAKE_TURN): the server's flight, then ours,
    # then a request on the finished connection.
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            if outgoing.pending:
                writer.write(outgoing.read())
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data, "the server dropped our handshake for the flood"
            incoming.write(data)
    tls.write(b"GET /healthz HTTP/1.1\r\nHost: insights\r\nConnection: close\r\n\r\n")
    writer.write(outgoing.read())
    answer = b""
    while b"\r\n" not in answer:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, f"the server closed our connection, having answered {answer!r}"
        incoming.write(data)
        try:
            answer += tls.read(65536)
        except ssl.SSLWantReadError:
            pass
    assert answer.startswith(b"HTTP/1.1 200")
    for *_, flood_writer in [*flood, (reader, writer)]:
        flood_writer.close()


# ---- FooReviews (findings 12 and 15) --------------------------------------------------------


def _foo_review(obj: Any, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "insights.samplecontroller.k8s.io/v1alpha1",
        "kind": "FooReview",
        "metadata": {"name": "r"},
        "spec": {"object": obj},
        **extra,
    }


async def test_a_review_that_would_not_fit_the_budget_is_a_413_before_it_is_parsed(start: Start) -> None:
    # Before: read with only the 8 MiB cap and parsed: a 2 MiB review peaked at 258 MiB.
    listener = await start()
    review = _foo_review(foo_v1("big", namespace="ns"), padding=[{}] * (700 * 1024))  # 2.1 MiB of `{},`
    status, body = await listener.request("POST", REVIEWS, body=review)
    assert status == 413, body
    assert "too large to review" in body["message"] and "--memory-limit-mib" in body["message"]
    assert listener.app[INSIGHTS].budget.in_use == 0


async def test_probes_are_answered_while_a_review_is_being_worked_on(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: parse, review and render ran on the event loop: an 8 MiB review stalled /healthz 5.8 s.
    listener = await start()
    working, healthz_answered, finished = threading.Event(), threading.Event(), threading.Event()
    real_review = insights_api.review

    def slow_review(*args: Any, **kwargs: Any) -> Any:
        working.set()
        healthz_answered.wait(10)  # on the loop this would block the probe it waits for
        finished.set()
        return real_review(*args, **kwargs)

    monkeypatch.setattr(insights_api, "review", slow_review)
    reviewing = asyncio.create_task(listener.request("POST", REVIEWS, body=_foo_review(foo_v1("a", namespace="ns"))))
    await until("the review started", working.is_set, timeout=10)
    assert await listener.request("GET", "/healthz", verified=False) == (200, "ok")
    assert not finished.is_set(), "the probe was answered only after the review"
    healthz_answered.set()
    status, _ = await reviewing
    assert status == 201


async def test_a_review_nested_deeper_than_the_limit_is_a_400_status(start: Start) -> None:
    # Before: 300 levels parsed (orjson reads 1,024) and failed rendering (it writes 255): a 500.
    listener = await start()
    foo = orjson.dumps(foo_v1("deep", namespace="ns"))
    deep = foo[:-1] + b',"extra":' + b'{"a":' * 300 + b'"leaf"' + b"}" * 300 + b"}"
    status, body = await listener.request("POST", REVIEWS, body=_foo_review(orjson.Fragment(deep)))
    assert status == 400, body
    assert body["message"] == "request body nests arrays and objects deeper than 128 levels"


async def test_a_client_that_leaves_mid_body_is_one_info_line_and_no_traceback(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: logged as an internal error with a traceback.
    caplog.set_level(logging.INFO)
    listener = await start()
    reader, writer = await listener.connect()
    writer.write(
        f"POST {REVIEWS} HTTP/1.1\r\nHost: x\r\nX-Remote-User: alice\r\nContent-Type: application/json\r\n"
        'Content-Length: 100000\r\n\r\n{"apiVersion": '.encode()
    )
    await writer.drain()
    await until("the body is being read", lambda: bool(listener.authorized))
    writer.transport.abort()
    await until("the line is logged", lambda: any("went away" in r.getMessage() for r in caplog.records))
    assert [r.getMessage() for r in caplog.records if "went away" in r.getMessage()] == [
        "client went away before it was answered"
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert listener.app[INSIGHTS].budget.in_use == 0


# ---- watches (finding 14) ---------------------------------------------------------------------


async def test_watches_past_the_cap_are_a_429_that_says_when_to_retry(start: Start) -> None:
    # Before: every watch was kept (~57 KiB and one descriptor each).
    listener = await start()
    listener.app[INSIGHTS].max_watches = 2
    async with aiohttp.ClientSession() as session:
        url = f"https://127.0.0.1:{listener.port}{WATCH}"
        headers = {"X-Remote-User": "alice"}
        held = [await session.get(url, ssl=listener.aggregator, headers=headers) for _ in range(2)]
        assert [r.status for r in held] == [200, 200]
        async with session.get(url, ssl=listener.aggregator, headers=headers) as third:
            assert third.status == 429
            body = await third.json()
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 1
        for response in held:
            response.close()
        await until("the watches end", lambda: listener.app[INSIGHTS].watches == 0)
        async with session.get(url, ssl=listener.aggregator, headers=headers) as again:
            assert again.status == 200
