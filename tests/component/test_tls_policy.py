"""Which handshakes the real server accepts: Kubernetes' secure TLS set, proven with real clients.

Each case is a client that offers exactly one TLS 1.2 suite (or only TLS 1.3) to the webhook
started by `serve()`; the server must refuse CBC, DHE and RSA key exchange and accept ECDHE with
an AEAD cipher, for RSA and ECDSA serving keys alike.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from hack.plane.cluster import free_port
from serving.tlspolicy import TLSPolicy, parse_tls_policy
from tests.component.certificates import serving_certificates
from webhook.app import Settings
from webhook.server import ServerOptions, serve

V12, V13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3


def _client(ca: Path, *, suite: str | None = None, version: ssl.TLSVersion = V12) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.minimum_version = context.maximum_version = version
    if suite is not None:
        # SECLEVEL 0 so that the client itself never vetoes a weak suite: the server must.
        context.set_ciphers(f"{suite}:@SECLEVEL=0")
    return context


async def _handshake(port: int, context: ssl.SSLContext) -> tuple[str, str] | None:
    """(version, suite) the server agreed to, or None when it refused the handshake."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    except (ssl.SSLError, ConnectionResetError):
        return None
    ssl_object = writer.get_extra_info("ssl_object")
    cipher = ssl_object.cipher()
    writer.close()
    try:
        await writer.wait_closed()
    except (ssl.SSLError, ConnectionResetError):
        pass
    return ssl_object.version(), cipher[0]


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    """Start the real webhook with a policy and a serving key type; yields (port, ca file)."""
    stops: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(policy: TLSPolicy = TLSPolicy(), key_type: str = "rsa") -> tuple[int, Path]:
        cert_dir = serving_certificates(tmp_path / f"{key_type}-{len(stops)}", "--key-type", key_type)
        port = free_port()
        stop = asyncio.Event()
        options = ServerOptions(cert_dir=cert_dir, bind_address="127.0.0.1", port=port, tls_policy=policy)
        stops.append((stop, asyncio.create_task(serve(options, Settings(), stop))))
        for _ in range(500):
            try:
                await _handshake(port, _client(cert_dir / "ca.crt", version=V13))
                return port, cert_dir / "ca.crt"
            except ConnectionRefusedError:  # not listening yet
                await asyncio.sleep(0.02)
        raise AssertionError("the webhook never served TLS")

    yield start
    for stop, task in stops:
        stop.set()
        await asyncio.wait_for(task, 10)


REFUSED_BY_DEFAULT = [
    ("rsa", "ECDHE-RSA-AES128-SHA256"),  # CBC
    ("rsa", "ECDHE-RSA-AES256-SHA384"),  # CBC
    ("rsa", "ECDHE-RSA-AES128-SHA"),  # CBC, SHA-1
    ("rsa", "DHE-RSA-AES128-GCM-SHA256"),  # DHE
    ("rsa", "DHE-RSA-AES256-GCM-SHA384"),  # DHE
    ("rsa", "AES128-GCM-SHA256"),  # RSA key exchange
    ("rsa", "AES256-SHA256"),  # RSA key exchange, CBC
    ("ecdsa", "ECDHE-ECDSA-AES128-SHA256"),  # CBC
    ("ecdsa", "ECDHE-ECDSA-AES256-SHA384"),  # CBC
]
ACCEPTED_BY_DEFAULT = [
    ("rsa", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("rsa", "ECDHE-RSA-AES256-GCM-SHA384"),
    ("rsa", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("ecdsa", "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ("ecdsa", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("ecdsa", "ECDHE-ECDSA-CHACHA20-POLY1305"),
]


@pytest.mark.parametrize(("key_type", "suite"), REFUSED_BY_DEFAULT, ids=[s for _, s in REFUSED_BY_DEFAULT])
async def test_a_tls12_client_offering_only_a_cbc_dhe_or_rsa_kex_suite_is_refused(
    webhook: Callable[..., object], key_type: str, suite: str
) -> None:
    port, ca = await webhook(key_type=key_type)  # type: ignore[misc]
    assert await _handshake(port, _client(ca, suite=suite)) is None


@pytest.mark.parametrize(("key_type", "suite"), ACCEPTED_BY_DEFAULT, ids=[s for _, s in ACCEPTED_BY_DEFAULT])
async def test_a_tls12_client_offering_ecdhe_with_an_aead_cipher_is_served(
    webhook: Callable[..., object], key_type: str, suite: str
) -> None:
    port, ca = await webhook(key_type=key_type)  # type: ignore[misc]
    assert await _handshake(port, _client(ca, suite=suite)) == ("TLSv1.2", suite)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
@pytest.mark.parametrize("key_type", ["rsa", "ecdsa"])
async def test_tls13_is_served_and_tls11_is_refused(webhook: Callable[..., object], key_type: str) -> None:
    port, ca = await webhook(key_type=key_type)  # type: ignore[misc]
    agreed = await _handshake(port, _client(ca, version=V13))
    assert agreed is not None and agreed[0] == "TLSv1.3"
    assert await _handshake(port, _client(ca, suite="ALL", version=ssl.TLSVersion.TLSv1_1)) is None


async def test_min_version_tls13_refuses_even_the_best_tls12_suite(webhook: Callable[..., object]) -> None:
    port, ca = await webhook(parse_tls_policy("VersionTLS13", ""))  # type: ignore[misc]
    assert await _handshake(port, _client(ca, suite="ECDHE-RSA-AES128-GCM-SHA256")) is None
    assert (await _handshake(port, _client(ca, version=V13)) or ("", ""))[0] == "TLSv1.3"


async def test_cipher_suites_flag_narrows_tls12_to_the_named_suites(webhook: Callable[..., object]) -> None:
    policy = parse_tls_policy("VersionTLS12", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256")
    port, ca = await webhook(policy)  # type: ignore[misc]
    assert await _handshake(port, _client(ca, suite="ECDHE-RSA-AES128-GCM-SHA256")) is None
    assert await _handshake(port, _client(ca, suite="ECDHE-RSA-AES256-GCM-SHA384")) == (
        "TLSv1.2",
        "ECDHE-RSA-AES256-GCM-SHA384",
    )
    assert await _handshake(port, _client(ca, version=V13)) is not None, "TLS 1.3 suites are always on"
