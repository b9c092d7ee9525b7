"""serving.lifecycle's start-up order: what a listener's own start-up writes, its TLS context serves.

The insights API learns the front-proxy CA from the cluster during its start-up and writes it to
the file its listener verifies client certificates with. A context built before that start-up
ran would refuse the aggregator's handshakes until the watcher's next round; kube-apiserver then
marks the APIService unavailable and backs off, so `kubectl get foohealths` answered 503 for
seconds after a pod that reported ready (seen in the cert-manager e2e under load).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
from aiohttp import web

from certs.authority import issue_client, issue_serving, new_ca
from hack.plane.cluster import free_port
from serving.appserving import AppListener, serving_app
from serving.lifecycle import ServingOptions, serve_until_stopped
from serving.readiness import CERTIFICATE_LOADED, Readiness

from .waiting import until


async def test_a_client_ca_written_during_start_up_verifies_the_first_client(tmp_path: Path) -> None:
    serving_ca, front_proxy_ca = new_ca("serving-ca"), new_ca("front-proxy-ca")
    serving = issue_serving(serving_ca, common_name="insights", dns_names=["localhost"], ips=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    client_ca_file = tmp_path / "requestheader" / "ca.crt"  # absent until start-up writes it

    async def learn_the_front_proxy_ca(app: web.Application) -> None:
        client_ca_file.parent.mkdir()
        client_ca_file.write_bytes(front_proxy_ca.cert_pem)

    watcher = ServingOptions(cert_dir=tmp_path).certificate(client_ca_file=client_ca_file)
    readiness = Readiness(checks={CERTIFICATE_LOADED: lambda: watcher.loaded})
    app = serving_app(readiness)
    app.on_startup.append(learn_the_front_proxy_ca)
    # No second look at the files during the test: the first context must already hold the CA.
    port = free_port()
    options = ServingOptions(cert_dir=tmp_path, bind_address="127.0.0.1", port=port, cert_reload_interval=3600)
    stop = asyncio.Event()
    server = asyncio.create_task(serve_until_stopped(AppListener(app), options, watcher, stop, name="insights"))

    aggregator = issue_client(front_proxy_ca, common_name="front-proxy-client")
    (tmp_path / "client.crt").write_bytes(aggregator.cert_pem)
    (tmp_path / "client.key").write_bytes(aggregator.key_pem)
    client = ssl.create_default_context(cadata=serving_ca.cert_pem.decode())
    client.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
    try:
        async with aiohttp.ClientSession() as session:
            await until("the listener serves", lambda: readiness.serving, timeout=60)
            async with session.get(f"https://127.0.0.1:{port}/readyz", ssl=client) as response:
                assert (response.status, await response.text()) == (200, "ok")
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)
