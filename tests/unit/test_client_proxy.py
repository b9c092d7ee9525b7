"""The API client finds its proxy the way client-go does: once, from the kubeconfig or the environment.

Given this server and this environment, the client goes through this proxy (or none); and it
does not look at the environment or ~/.netrc again on every request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube.config import load_api_client, proxy_from_environment

SERVER = "https://10.0.0.9:6443"


@pytest.mark.parametrize(
    ("environ", "proxy"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ({"https_proxy": "http://lower:3128", "HTTPS_PROXY": "http://upper:3128"}, "http://lower:3128"),
        ({"HTTP_PROXY": "http://plain:3128"}, None),  # an https server takes only the https proxy
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.9"}, None),
        ({"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "example.com,10.0.0.9"}, None),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "*"}, None),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.8"}, "http://proxy:3128"),
    ],
)
def test_the_environment_names_the_proxy_unless_no_proxy_exempts_the_server(
    environ: dict[str, str], proxy: str | None
) -> None:
    assert proxy_from_environment(SERVER, environ) == proxy


def test_a_domain_in_no_proxy_exempts_its_hosts() -> None:
    environ = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".cluster.local"}
    assert proxy_from_environment("https://kubernetes.default.svc.cluster.local:443", environ) is None
    assert proxy_from_environment("https://api.example.com", environ) == "http://proxy:3128"


def test_a_plain_http_server_takes_the_http_proxy() -> None:
    assert proxy_from_environment("http://127.0.0.1:8080", {"HTTP_PROXY": "http://plain:3128"}) == "http://plain:3128"


def _kubeconfig(path: Path, cluster: dict[str, str]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


async def test_requests_do_not_read_the_environment_or_netrc_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiohttp's trust_env looked up proxies and ~/.netrc in a thread on every request (~30% of
    # the controller's CPU); the proxy is now resolved once, when the client is made.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    api = await load_api_client(
        _kubeconfig(tmp_path / "config", {"server": SERVER, "insecure-skip-tls-verify": "true"})
    )
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.proxy == "http://proxy:3128"
    finally:
        await api.close()


async def test_a_kubeconfig_proxy_url_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env:3128")
    cluster = {"server": SERVER, "insecure-skip-tls-verify": "true", "proxy-url": "http://kubeconfig:3128"}
    api = await load_api_client(_kubeconfig(tmp_path / "config", cluster))
    try:
        assert api.rest_client.proxy == "http://kubeconfig:3128"
    finally:
        await api.close()
