"""The real server over TLS with certificates from `certs`, verified against the generated CA."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from hack.cluster import free_port
from tests.component.certificates import serving_certificates
from tests.component.reviews import admission_review
from tests.objects import foo_v1
from webhook.app import Settings
from webhook.server import ServerOptions, serve


async def _wait_ready(url: str, context: ssl.SSLContext) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(url + "/readyz", ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectorError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("webhook never became ready")


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    return serving_certificates(tmp_path)


@pytest.fixture
async def server_url(cert_dir: Path) -> AsyncIterator[str]:
    """The real server (serve()) on a free port, ready, reloading certificates every 0.1 s."""
    port = free_port()
    stop = asyncio.Event()
    options = ServerOptions(cert_dir=cert_dir, bind_address="127.0.0.1", port=port, cert_reload_interval=0.1)
    server = asyncio.create_task(serve(options, Settings(), stop))
    try:
        await _wait_ready(f"https://127.0.0.1:{port}", ssl.create_default_context(cafile=str(cert_dir / "ca.crt")))
        yield f"https://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)


async def test_webhook_serves_https_verified_against_the_generated_ca(cert_dir: Path, server_url: str) -> None:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    by_name = server_url.replace("127.0.0.1", "localhost")
    await _wait_ready(by_name, context)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{by_name}/validate-foo", json=admission_review(foo_v1(replicas=11)), ssl=context
        ) as response:
            review = await response.json()
    assert review["response"]["status"]["reason"] == "Invalid"


async def test_a_client_that_does_not_trust_the_ca_is_refused(server_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"{server_url}/healthz", ssl=ssl.create_default_context())


async def test_new_certificates_are_served_without_a_restart(cert_dir: Path, server_url: str) -> None:
    serving_certificates(cert_dir, "--force")
    new_context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    await asyncio.sleep(0.5)
    await _wait_ready(server_url, new_context)
