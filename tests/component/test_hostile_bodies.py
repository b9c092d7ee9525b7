"""Hostile bodies over real HTTP: slow senders, dense JSON. Each test is an attack that once worked."""

from __future__ import annotations

import asyncio
import socket
import tracemalloc
from typing import Any

import orjson

from attacks.foos import admission_review, conversion_review
from attacks.objects import V1, V1ALPHA1, foo_v1, foo_v1alpha1
from fooapi.conversion import CONVERSION_ANNOTATION
from webhook.app import Settings

from .waiting import until
from .webhook_client import ServeWebhook


async def _slow_sender(
    host: str, port: int, path: str, declared: int
) -> tuple[asyncio.StreamReader, asyncio.Task[None]]:
    """A raw socket that sends its headers at once, then its body a byte at a time, forever."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n{{".encode()
    )
    await writer.drain()

    async def trickle() -> None:
        try:
            while True:
                await asyncio.sleep(0.5)
                writer.write(b" ")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return reader, asyncio.create_task(trickle())


async def test_clients_sending_a_byte_a_second_hold_no_conversion_slot(webhook_client: ServeWebhook) -> None:
    # Before: the slot was taken before the body was read, so four trickling clients held every
    # /convert slot and a real conversion was answered only once they had timed out.
    client = await webhook_client(Settings(max_conversions_in_flight=4, conversion_timeout=3.0))
    host, port = client.host, client.port
    senders = [await _slow_sender(host, port, "/convert", 10_000) for _ in range(4)]
    answered = [asyncio.create_task(reader.read(1)) for reader, _ in senders]
    try:
        await asyncio.sleep(0.2)  # every sender is inside the handler, reading
        response = await client.post(
            "/convert",
            data=orjson.dumps(conversion_review([foo_v1(f"foo-{i}") for i in range(3)], V1ALPHA1)),
            headers={"Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        assert (await response.json())["response"]["result"]["status"] == "Success"
        assert not any(task.done() for task in answered), "answered while the slow senders still wait"
    finally:
        for task in [*answered, *(task for _, task in senders)]:
            task.cancel()
        await asyncio.gather(*answered, *(task for _, task in senders), return_exceptions=True)


async def test_a_client_that_trickles_its_body_past_the_deadline_gets_a_408_status(
    webhook_client: ServeWebhook,
) -> None:
    client = await webhook_client(Settings(conversion_body_timeout=1.0))
    reader, task = await _slow_sender(client.host, client.port, "/convert", 10_000)
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        body = await asyncio.wait_for(reader.read(4096), timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert head.startswith(b"HTTP/1.1 408 ")
    status = orjson.loads(body)
    assert status["kind"] == "Status" and status["reason"] == "Timeout" and status["code"] == 408
    assert "not received within 1s" in status["message"]


async def test_a_client_that_stops_sending_gets_a_408_status(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings(body_idle_timeout=0.3))
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ")


def _dense(size: int) -> bytes:
    """An AdmissionReview padded with empty objects: 3 bytes each, 72 bytes each once parsed."""
    head = orjson.dumps(admission_review({"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo"}))
    return head[:-2] + b',"padding":[' + b"{}," * ((size - len(head)) // 3) + b"{}]}}"


async def test_a_body_of_empty_objects_is_refused_unparsed_with_a_413_status(webhook_client: ServeWebhook) -> None:
    # Before: 8 MiB of `{},` became 192 MiB of dicts; three at once passed the pod's 256Mi limit.
    client = await webhook_client(Settings())
    body = _dense(4 * 1024 * 1024)
    tracemalloc.start()
    try:
        response = await client.post("/validate-foo", data=body, headers={"Content-Type": "application/json"})
        status = await response.json()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status == 413 and status["reason"] == "RequestEntityTooLarge"
    assert "too many objects, arrays or values" in status["message"]
    # The client's copy of the body, the server's chunks and their join: no parsed tree.
    assert peak < 5 * len(body)


async def test_bodies_wait_for_the_budget_instead_of_exceeding_it(webhook_client: ServeWebhook) -> None:
    # A budget of about one dense body at a time: several at once are answered one after another
    # (each 413), never parsed, never holding more than the budget.
    client = await webhook_client(Settings(in_flight_budget=12 * 1024 * 1024))
    app = client.webhook
    body = _dense(2 * 1024 * 1024)
    responses = await asyncio.gather(
        *(client.post("/validate-foo", data=body, headers={"Content-Type": "application/json"}) for _ in range(6))
    )
    assert [r.status for r in responses] == [413] * 6
    assert app.budget.in_use == 0 and 4 * len(body) <= app.budget.peak <= app.budget.capacity


async def test_real_reviews_keep_being_allowed_while_dense_bodies_flood_the_budget(
    webhook_client: ServeWebhook,
) -> None:
    # bench/flood.py at a test's size: no timing, only that no real review fails and the budget holds.
    client = await webhook_client(Settings(in_flight_budget=16 * 1024 * 1024))
    app = client.webhook
    dense = _dense(2 * 1024 * 1024)
    real = orjson.dumps(admission_review(foo_v1()))
    headers = {"Content-Type": "application/json"}

    async def flood() -> list[int]:
        answers = []
        for _ in range(3):
            answers.append((await client.post("/validate-foo", data=dense, headers=headers)).status)
        return answers

    async def reviews() -> list[bool]:
        allowed = []
        for _ in range(20):
            response = await client.post("/validate-foo", data=real, headers=headers)
            allowed.append(response.status == 200 and (await response.json())["response"]["allowed"] is True)
        return allowed

    flooded, reviewed = await asyncio.gather(
        asyncio.gather(*(flood() for _ in range(5))), asyncio.gather(reviews(), reviews())
    )
    assert all(all(batch) for batch in reviewed)
    assert {status for batch in flooded for status in batch} <= {413, 429}
    assert app.budget.in_use == 0 and app.budget.peak <= app.budget.capacity


async def test_a_client_that_does_not_read_its_answer_is_cut_off_at_the_deadline(webhook_client: ServeWebhook) -> None:
    # The answer is written while its bytes are still charged; a client that leaves megabytes
    # unread in the send buffer is disconnected when the deadline passes instead of holding them.
    client = await webhook_client(Settings(conversion_timeout=3.0))
    app = client.webhook
    foos = [foo_v1(f"foo-{i}") for i in range(8)]
    for foo in foos:
        foo["metadata"]["annotations"] = {"example.com/blob": "x" * (1024 * 1024)}
    body = orjson.dumps(conversion_review(foos, V1ALPHA1))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that barely reads
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (client.host, client.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(
        b"POST /convert HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    await writer.drain()
    # Past the deadline, without reading: the server closes the connection before we read a byte.
    await until("the server to give up on the unread answer", lambda: not client.server.connections, timeout=30)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    declared = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    received = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ") and declared > 8 * 1024 * 1024
    assert len(received) < declared, "the server gave up on the answer and closed the connection"
    assert app.budget.in_use == 0


async def test_nesting_deeper_than_orjson_allows_is_a_400_status(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings())
    response = await client.post(
        "/validate-foo", data=b"[" * 1025 + b"]" * 1025, headers={"Content-Type": "application/json"}
    )
    status = await response.json()
    assert response.status == 400 and "deeper than 128 levels" in status["message"]


def _with_nested(review: dict[str, Any], depth: int, *, arrays: bool = False) -> bytes:
    """``review`` as JSON, its value "NESTED" replaced by objects (or arrays) nested ``depth``
    deep (orjson cannot write them)."""
    nested = b"[" * depth + b"]" * depth if arrays else b'{"a":' * depth + b'"x"' + b"}" * depth
    return orjson.dumps(review).replace(b'"NESTED"', nested)


async def test_an_invalid_value_nested_990_deep_is_a_400_status_not_a_500(webhook_client: ServeWebhook) -> None:
    # Before: the field error "spec: must be an object" rendered the value with json.dumps, which
    # recursed past its limit: a 500 with a traceback.
    client = await webhook_client(Settings())
    foo = foo_v1()
    foo["spec"] = "NESTED"
    body = _with_nested(admission_review(foo), 990, arrays=True)
    response = await client.post("/validate-foo", data=body, headers={"Content-Type": "application/json"})
    status = await response.json()
    assert response.status == 400 and status["kind"] == "Status" and "deeper than 128 levels" in status["message"]


async def test_a_conversion_object_nested_300_deep_is_a_400_status_not_a_500(webhook_client: ServeWebhook) -> None:
    # Before: orjson parsed it (up to 1,024 levels) but writes only 254: the answer was a 500.
    client = await webhook_client(Settings())
    foo = foo_v1()
    foo["spec"]["extra"] = "NESTED"
    body = _with_nested(conversion_review([foo], V1ALPHA1), 300)
    response = await client.post("/convert", data=body, headers={"Content-Type": "application/json"})
    status = await response.json()
    assert response.status == 400 and "deeper than 128 levels" in status["message"]


async def test_a_conversion_stash_nested_deep_is_a_failed_conversion_not_a_500(webhook_client: ServeWebhook) -> None:
    # Before: json.loads of the annotation recursed past its limit (a RecursionError): a 500.
    client = await webhook_client(Settings())
    foo = foo_v1alpha1()
    stash = "[" * 5000 + "]" * 5000
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: stash}
    body = orjson.dumps(conversion_review([foo], V1))
    response = await client.post("/convert", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 200, await response.text()
    result = (await response.json())["response"]["result"]
    assert result["status"] == "Failure"
    assert "nests deeper than 128 levels; remove it" in result["message"]


async def test_an_error_answer_does_not_grow_with_the_invalid_value_it_names(webhook_client: ServeWebhook) -> None:
    # Before: a 3 MiB invalid deployment name was repeated in every field error, in the message
    # and in each cause, escaped twice: a 36 MiB answer (12x the request).
    client = await webhook_client(Settings())
    foo = foo_v1(name="x" * 1024 * 1024)
    foo["spec"]["deployment"]["name"] = "\n" * (3 * 1024 * 1024)
    body = orjson.dumps(admission_review(foo))
    response = await client.post("/validate-foo", data=body, headers={"Content-Type": "application/json"})
    answer = await response.read()
    status = orjson.loads(answer)["response"]["status"]
    assert response.status == 200 and status["code"] == 422
    assert "more characters)" in status["message"]
    assert len(answer) < 16 * 1024
