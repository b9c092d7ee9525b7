"""Secure `/metrics`: controller-runtime's WithAuthenticationAndAuthorization over real HTTPS.

The TokenReview and SubjectAccessReview are a seam here (two async functions standing in for the
apiserver); tests/e2e/test_metrics_auth.py asks the real kube-apiserver the same questions.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from certs.files import write_self_signed
from hack.cluster import free_port
from kube.client import ApiError
from serving.metricsauth import MetricsGuard, User, access_review, user_of
from serving.metricsserver import MetricsOptions, MetricsServer
from serving.tls import CertWatcher

TOKENS = {
    "reader-token": User("system:serviceaccount:monitoring:prometheus", groups=("system:serviceaccounts",)),
    "other-token": User("system:serviceaccount:default:nosy"),
}


class FakeCluster:
    """Answers TokenReviews from ``TOKENS`` and allows only the reader to get /metrics; counts calls."""

    def __init__(self) -> None:
        self.reviews: list[str] = []
        self.down = False

    async def authenticate(self, token: str) -> User | None:
        self.reviews.append("TokenReview")
        if self.down:
            raise ApiError(0, {"message": "connection refused"})
        return TOKENS.get(token)

    async def authorize(self, user: User, path: str, verb: str) -> bool:
        self.reviews.append("SubjectAccessReview")
        if self.down:
            raise ApiError(500, {"message": "etcdserver: leader changed (internal detail)"})
        return (user.name, path, verb) == ("system:serviceaccount:monitoring:prometheus", "/metrics", "get")


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
async def url(tmp_path: Path, cluster: FakeCluster) -> AsyncIterator[str]:
    registry = CollectorRegistry()
    Counter("foo_things", "things", registry=registry).inc()
    cert, key = write_self_signed(tmp_path)
    port = free_port()
    server = MetricsServer(
        MetricsOptions(host="127.0.0.1", port=port, secure=True),
        registry,
        guard=MetricsGuard(cluster.authenticate, cluster.authorize),
        certificate=CertWatcher(cert, key),
    )
    await server.start()
    try:
        yield f"https://127.0.0.1:{port}/metrics"
    finally:
        await server.stop()


async def _get(url: str, token: str | None = None) -> tuple[int, str, dict[str, object] | None]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # as Prometheus' insecure_skip_verify
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers, ssl=insecure) as response:
            body = await response.text()
            status = await response.json() if response.content_type == "application/json" else None
            return response.status, body, status


async def test_a_token_allowed_to_get_metrics_reads_them(url: str) -> None:
    code, body, _ = await _get(url, "reader-token")
    assert code == 200 and "foo_things_total 1.0" in body


async def test_no_token_is_401_as_a_status(url: str, cluster: FakeCluster) -> None:
    code, _, status = await _get(url)
    assert code == 401 and status is not None and (status["kind"], status["reason"]) == ("Status", "Unauthorized")
    assert cluster.reviews == [], "nothing to review without a token"


async def test_a_token_the_apiserver_does_not_know_is_401(url: str) -> None:
    code, body, status = await _get(url, "forged")
    assert code == 401 and status is not None and status["reason"] == "Unauthorized"
    assert "foo_things" not in body


async def test_a_valid_token_without_the_rbac_is_403(url: str) -> None:
    code, body, status = await _get(url, "other-token")
    assert code == 403 and status is not None and status["reason"] == "Forbidden"
    assert "system:serviceaccount:default:nosy" in str(status["message"]) and "foo_things" not in body


async def test_plain_http_is_not_answered_when_secure(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(url.replace("https://", "http://"), headers={"Authorization": "Bearer reader-token"}):
                pass


async def test_decisions_are_cached_so_a_scrape_costs_no_review_within_the_ttl(url: str, cluster: FakeCluster) -> None:
    for _ in range(3):
        assert (await _get(url, "reader-token"))[0] == 200
        assert (await _get(url, "other-token"))[0] == 403
    assert cluster.reviews == ["TokenReview", "SubjectAccessReview"] * 2


async def test_an_unreachable_apiserver_is_refused_and_its_words_stay_in_the_log(
    url: str, cluster: FakeCluster
) -> None:
    cluster.down = True
    assert (await _get(url, "reader-token"))[0] == 401
    cluster.down = False
    guard_authenticate_ok = await _get(url, "reader-token")
    assert guard_authenticate_ok[0] == 200, "a failed review is not cached"


async def test_a_failing_subject_access_review_is_503_without_the_apiservers_text(cluster: FakeCluster) -> None:
    async def authenticate(token: str) -> User | None:
        return TOKENS["reader-token"]

    cluster.down = True
    guard = MetricsGuard(authenticate, cluster.authorize)
    code, message = await guard.check("reader-token", "/metrics", "get")
    assert code == 503 and "etcdserver" not in message


def test_reviews_are_built_and_read_as_the_apiserver_writes_them() -> None:
    assert user_of({"status": {"authenticated": False}}) is None
    user = user_of(
        {
            "status": {
                "authenticated": True,
                "user": {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}},
            }
        }
    )
    assert user == User("u", "1", ("g",), {"k": ["v"]})
    assert access_review(user, "/metrics", "get")["spec"] == {
        "user": "u",
        "uid": "1",
        "groups": ["g"],
        "extra": {"k": ["v"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
