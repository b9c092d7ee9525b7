"""Secure /metrics against the real kube-apiserver: ServiceAccount tokens, TokenReview, RBAC.

A ServiceAccount bound to a ClusterRole with `nonResourceURLs: ["/metrics"]` reads the metrics
(200); another ServiceAccount's valid token is refused (403); no token, or a made-up one, is 401.
The webhook and the controller run as local processes with `--metrics-secure`, asking the plane.
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs.__main__ import main as certs_main
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.procs import Component, wait_until
from hack.plane.product import webhook_args

REPO = Path(__file__).resolve().parents[2]


def _get(url: str, context: ssl.SSLContext, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def accounts(control_plane: LocalControlPlane, namespace: str) -> Iterator[dict[str, str]]:
    """Tokens of two ServiceAccounts: `scraper` may get /metrics (ClusterRole + binding), `nosy` not."""
    role = f"{namespace}-metrics-reader"
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper", "namespace": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nosy", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
        },
    ]
    control_plane.apply(*manifests)
    scraper = f"system:serviceaccount:{namespace}:scraper"

    def rbac_allows_the_scraper() -> bool:
        result = control_plane.kubectl("auth", "can-i", "get", "/metrics", f"--as={scraper}", check=False)
        return result.stdout.strip() == "yes"

    # Asked before RBAC's cache has the binding, a 403 would be cached for 10 s.
    wait_until("RBAC to allow the scraper", rbac_allows_the_scraper, timeout=30)
    tokens = {
        name: control_plane.kubectl("create", "token", name, "-n", namespace).stdout.strip()
        for name in ("scraper", "nosy")
    }
    yield tokens
    control_plane.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found", check=False)


def _process(kind: str, plane: LocalControlPlane, namespace: str, cert_dir: Path, metrics_port: int) -> list[str]:
    if kind == "webhook":
        return [
            sys.executable,
            "-m",
            "webhook",
            *webhook_args(cert_dir, free_port(), metrics=f"127.0.0.1:{metrics_port}"),
            "--kubeconfig",
            str(plane.kubeconfig),
            "--metrics-secure",
        ]
    # Only its own (empty) namespace, no leader election: it touches nothing another test owns.
    return [
        sys.executable,
        "-m",
        "controller",
        "--kubeconfig",
        str(plane.kubeconfig),
        "--namespace",
        namespace,
        "--metrics-secure",
        "--metrics-cert-dir",
        str(cert_dir),
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address",
        f"127.0.0.1:{free_port()}",
    ]


@pytest.mark.parametrize("kind", ["webhook", "controller"])
def test_rbac_decides_who_reads_metrics(
    control_plane: LocalControlPlane, namespace: str, accounts: dict[str, str], tmp_path: Path, kind: str
) -> None:
    cert_dir = tmp_path / "certs"
    assert (
        certs_main(
            ["generate", "--service", "metrics", "--namespace", namespace, "--out", str(cert_dir), "--ip", "127.0.0.1"]
        )
        == 0
    )
    port = free_port()
    process = Component(
        f"{kind}-secure-metrics",
        _process(kind, control_plane, namespace, cert_dir, port),
        control_plane.logs_dir / f"{kind}-secure-metrics-{namespace}.log",
    )
    process.start()
    try:
        url = f"https://127.0.0.1:{port}/metrics"
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))

        def listening() -> bool:
            try:
                return _get(url, context)[0] == 401
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_until(f"the {kind}'s secure metrics", listening, timeout=30, watch=[process])

        code, body = _get(url, context, accounts["scraper"])
        assert code == 200, body
        assert f"# HELP controller_runtime_{'webhook' if kind == 'webhook' else 'reconcile'}" in body

        code, body = _get(url, context, accounts["nosy"])
        status = json.loads(body)
        assert (code, status["kind"], status["reason"]) == (403, "Status", "Forbidden")
        assert f"system:serviceaccount:{namespace}:nosy" in status["message"]

        for token in (None, accounts["scraper"][:-4] + "AAAA", "not-a-token"):
            code, body = _get(url, context, token)
            assert (code, json.loads(body)["reason"]) == (401, "Unauthorized"), token

        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        process.stop()
