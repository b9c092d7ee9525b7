"""Hostile HTTP on the admission port (serving.reviews): what a hand-written server owes.

Raw sockets, since a client library refuses to send most of these. Each answer is a Status,
and a request the server cannot read to its end closes the connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip

import orjson

from attacks.foos import admission_review
from attacks.objects import foo_v1
from serving.reviews.server import ADMISSION_PORT
from webhook.app import Settings

from .webhook_client import ServeWebhook

REVIEW = orjson.dumps(admission_review(foo_v1()))


def _post(path: str, body: bytes, *extra: str, version: str = "1.1") -> bytes:
    headers = "".join(f"{line}\r\n" for line in extra)
    return (
        f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


async def _exchange(port: int, data: bytes, *, read_until_closed: bool = True) -> bytes:
    """Send ``data``, return everything the server sends until it closes (or 10 s pass)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), timeout=10) if read_until_closed else b""
    finally:
        writer.close()


def _answers(stream: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP answers in ``stream``, in order: code, headers (lower-case names), body."""
    answers = []
    while stream:
        head, _, stream = stream.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict((name.lower(), value.strip()) for name, _, value in (line.partition(":") for line in lines[1:]))
        length = int(headers.get("content-length", "0"))
        answers.append((int(lines[0].split()[1]), headers, stream[:length]))
        stream = stream[length:]
    return answers


async def test_a_head_larger_than_the_limit_is_a_431_status_and_the_connection_closes(
    webhook_client: ServeWebhook,
) -> None:
    client = await webhook_client(Settings())
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Padding: " + b"a" * (100 * 1024) + b"\r\n\r\n"
    [(code, _, body)] = _answers(await _exchange(client.port, request))
    assert (
        code == 431
        and f"request head is larger than {ADMISSION_PORT.head_bytes} bytes" in orjson.loads(body)["message"]
    )


async def test_a_head_that_never_ends_is_a_431_status_not_memory(webhook_client: ServeWebhook) -> None:
    # One header without its end: llhttp holds its bytes, so the server counts what it fed.
    client = await webhook_client(Settings())
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nX-Padding: ")
    try:
        for _ in range(20):
            writer.write(b"a" * 8192)
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    assert _answers(answer)[0][0] == 431


async def test_a_head_sent_slowly_is_a_408_status_once_its_deadline_passes(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings(connections=dataclasses.replace(ADMISSION_PORT, head_seconds=0.3)))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"POST /validate-foo HTTP/1.1\r\nHost: x\r\n")
    try:
        answer = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    [(code, _, body)] = _answers(answer)
    assert code == 408 and orjson.loads(body)["reason"] == "Timeout"


async def test_content_length_with_transfer_encoding_is_a_400_status_and_closes(webhook_client: ServeWebhook) -> None:
    # Request smuggling: a proxy and this server could disagree on where the body ends.
    client = await webhook_client(Settings())
    request = (
        b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"
    )
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [400], "nothing after the ambiguous request is answered"
    assert orjson.loads(answers[0][2])["kind"] == "Status"


async def test_malformed_http_is_a_400_status(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    [(code, _, body)] = _answers(await _exchange(client.port, b"NOT HTTP AT ALL\r\n\r\n"))
    assert code == 400 and orjson.loads(body)["kind"] == "Status"


async def test_pipelined_requests_are_answered_in_order(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    denied = orjson.dumps(admission_review(foo_v1(replicas=11)))
    request = (
        _post("/validate-foo", REVIEW)
        + b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
        + _post("/validate-foo", denied)
        + _post("/nope", b"{}", "Connection: close")
    )
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [200, 200, 200, 404]
    assert orjson.loads(answers[0][2])["response"]["allowed"] is True
    assert answers[1][2] == b"ok"
    assert orjson.loads(answers[2][2])["response"]["allowed"] is False
    assert answers[3][1]["connection"] == "close"


async def test_an_http_1_0_request_is_answered_and_the_connection_closes(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    [(code, headers, body)] = _answers(await _exchange(client.port, _post("/validate-foo", REVIEW, version="1.0")))
    assert code == 200 and headers["connection"] == "close"
    assert orjson.loads(body)["response"]["allowed"] is True


async def test_expect_100_continue_is_answered_before_the_body_is_sent(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    head, body = _post("/validate-foo", REVIEW, "Expect: 100-continue").split(b"\r\n\r\n", 1)
    writer.write(head + b"\r\n\r\n")
    try:
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        writer.write(body)
        final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    finally:
        writer.close()
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert final.startswith(b"HTTP/1.1 200 ")


async def test_a_content_encoding_is_one_415_status_and_the_body_is_never_inflated(
    webhook_client: ServeWebhook,
) -> None:
    # Before: a gzip body was inflated up to /convert's 256 MiB limit before anything was charged
    # (one 260 KB request peaked at 553 MiB). kube-apiserver never compresses a review.
    client = await webhook_client(Settings())
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))
    request = _post("/convert", bomb, "Content-Encoding: gzip")
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [415]
    status = orjson.loads(answers[0][2])
    assert status["kind"] == "Status" and "Content-Encoding 'gzip' is not served here" in status["message"]
    assert answers[0][1]["connection"] == "close"
    assert client.webhook.budget.peak == 0, "nothing was read, so nothing was charged"


async def test_a_chunked_body_is_one_411_status_and_its_trailers_are_never_read(webhook_client: ServeWebhook) -> None:
    # Before: chunked trailers had no bound and a trailer could override the head's Content-Type
    # or Content-Encoding (8 floods reached 427 MiB).
    client = await webhook_client(Settings())
    request = (
        b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + b"X-Trailer: " + b"a" * 60_000 + b"\r\n"
    )
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [411]
    assert "send a Content-Length" in orjson.loads(answers[0][2])["message"]
    assert answers[0][1]["connection"] == "close"


async def test_a_post_without_content_length_is_a_411_status(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    request = b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n"
    [(code, headers, _)] = _answers(await _exchange(client.port, request))
    assert code == 411 and headers["connection"] == "close"


async def test_an_upgrade_is_answered_once_with_a_400_status_then_closed(webhook_client: ServeWebhook) -> None:
    # Before: the upgrade request was answered (404) and then refused (400): two answers.
    client = await webhook_client(Settings())
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [400]
    assert "upgrades and CONNECT are not served here" in orjson.loads(answers[0][2])["message"]


async def test_a_connect_is_answered_once_with_a_400_status_then_closed(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    request = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [400]
    assert answers[0][1]["connection"] == "close"


async def test_an_idle_connection_is_closed_after_the_keepalive(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings(connections=dataclasses.replace(ADMISSION_PORT, idle_seconds=0.3)))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answer = await asyncio.wait_for(reader.read(), timeout=10)  # returns once the server closes
    finally:
        writer.close()
    assert _answers(answer)[0][0] == 200


async def test_requests_before_malformed_bytes_are_answered_then_a_400_closes(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    request = _post("/validate-foo", REVIEW) + b"GET /readyz HTTP/1.1\r\n\r\n" + b"\x00garbage\r\n\r\n"
    answers = _answers(await _exchange(client.port, request))
    assert [code for code, _, _ in answers] == [200, 200, 400]
    assert "connection" not in answers[0][1] and answers[2][1]["connection"] == "close"
