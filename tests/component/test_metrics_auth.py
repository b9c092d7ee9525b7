"""Secure `/metrics`: controller-runtime's WithAuthenticationAndAuthorization over real HTTPS.

The TokenReview and SubjectAccessReview are a seam here (two async functions standing in for the
apiserver); tests/e2e/test_metrics_auth.py asks the real kube-apiserver the same questions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from certs.files import write_self_signed
from hack.plane.cluster import free_port
from kube.client import ApiError
from serving.metricsauth import (
    ALLOWED_TTL,
    DENIED_TTL,
    GRANTED_CAP,
    MAX_CHECKS,
    MAX_CHECKS_PER_ADDRESS,
    REFUSED_CAP,
    TOKEN_TTL,
    MetricsGuard,
    User,
    access_review,
    user_of,
)
from serving.metricsserver import MetricsOptions, MetricsServer
from serving.tls import CertWatcher
from tests.clock import FakeClock

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


@contextlib.asynccontextmanager
async def guarded_metrics(tmp_path: Path, cluster: FakeCluster) -> AsyncIterator[str]:
    """A secure metrics listener asking ``cluster``; its URL."""
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


@pytest.fixture
async def url(tmp_path: Path, cluster: FakeCluster) -> AsyncIterator[str]:
    async with guarded_metrics(tmp_path, cluster) as url:
        yield url


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


# --- a hostile caller at /metrics (issue 34: 12,189 TokenReviews in 20 s on the controller's client) ---


class SlowCluster(FakeCluster):
    """Reviews that wait until the test lets them answer: the apiserver under a flood."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.under_way = 0
        self.most_under_way = 0

    async def authenticate(self, token: str) -> User | None:
        self.under_way += 1
        self.most_under_way = max(self.most_under_way, self.under_way)
        try:
            await self.answer.wait()
            return await super().authenticate(token)
        finally:
            self.under_way -= 1


async def test_reviews_under_way_are_bounded_and_the_rest_are_429_at_once() -> None:
    cluster = SlowCluster()
    guard = MetricsGuard(cluster.authenticate, cluster.authorize)
    checks = [
        asyncio.ensure_future(guard.check(f"random-{i}", "/metrics", "get", f"10.0.0.{i % 50}")) for i in range(400)
    ]
    await asyncio.sleep(0)  # every check has started: those past the bound are answered already
    refused = [c.result() for c in checks if c.done()]
    assert cluster.most_under_way == MAX_CHECKS and len(refused) == 400 - MAX_CHECKS
    assert {code for code, _ in refused} == {429}
    cluster.answer.set()
    assert {code for code, _ in await asyncio.gather(*checks)} == {401, 429}


async def test_one_address_takes_at_most_its_share_of_the_reviews() -> None:
    cluster = SlowCluster()
    guard = MetricsGuard(cluster.authenticate, cluster.authorize)
    flood = [asyncio.ensure_future(guard.check(f"random-{i}", "/metrics", "get", "10.0.0.1")) for i in range(50)]
    honest = asyncio.ensure_future(guard.check("reader-token", "/metrics", "get", "10.0.0.2"))
    await asyncio.sleep(0)
    assert cluster.most_under_way == MAX_CHECKS_PER_ADDRESS + 1 and not honest.done()
    cluster.answer.set()
    assert (await honest)[0] == 200
    await asyncio.gather(*flood)


async def test_a_flood_of_refused_tokens_never_evicts_an_admitted_one(cluster: FakeCluster) -> None:
    guard = MetricsGuard(cluster.authenticate, cluster.authorize)
    assert (await guard.check("reader-token", "/metrics", "get"))[0] == 200
    for i in range(20_000):  # each from an address of its own: the cache, not the in-flight bound, is tested
        assert (await guard.check(f"random-{i}", "/metrics", "get", f"a{i}"))[0] == 401
    for i in range(1_000):  # a tenant's many valid tokens, each refused by the SubjectAccessReview
        TOKENS[f"tenant-{i}"] = User(f"system:serviceaccount:tenant:sa-{i}")
    try:
        for i in range(1_000):
            assert (await guard.check(f"tenant-{i}", "/metrics", "get", f"t{i}"))[0] == 403
    finally:
        for i in range(1_000):
            del TOKENS[f"tenant-{i}"]
    reviews = len(cluster.reviews)
    assert (await guard.check("reader-token", "/metrics", "get"))[0] == 200
    assert len(cluster.reviews) == reviews, "the admitted token is still answered from the cache"
    assert guard.cached <= 2 * (GRANTED_CAP + REFUSED_CAP)


async def test_answers_live_as_long_as_kube_apiservers_webhook_caches_keep_them(cluster: FakeCluster) -> None:
    clock = FakeClock()
    guard = MetricsGuard(cluster.authenticate, cluster.authorize, clock=clock)
    for token in ("reader-token", "other-token", "forged"):
        await guard.check(token, "/metrics", "get")
    assert len(cluster.reviews) == 5  # two TokenReviews and SubjectAccessReviews, one TokenReview
    clock.step(DENIED_TTL + 1)  # a denial is asked again after 30 s; the rest stand
    for token in ("reader-token", "other-token", "forged"):
        await guard.check(token, "/metrics", "get")
    assert cluster.reviews[5:] == ["SubjectAccessReview"]
    clock.step(TOKEN_TTL)  # past 2 minutes every TokenReview is asked again, a failed one too
    for token in ("reader-token", "other-token", "forged"):
        await guard.check(token, "/metrics", "get")
    assert cluster.reviews[6:] == ["TokenReview", "TokenReview", "SubjectAccessReview", "TokenReview"]
    assert TOKEN_TTL == 120 and (ALLOWED_TTL, DENIED_TTL) == (300, 30)


async def test_a_flood_answered_429_says_so_as_a_status_with_retry_after(tmp_path: Path) -> None:
    cluster = SlowCluster()
    async with guarded_metrics(tmp_path, cluster) as url:
        held = [asyncio.ensure_future(_get(url, f"random-{i}")) for i in range(MAX_CHECKS_PER_ADDRESS)]
        await wait_for_condition(lambda: cluster.under_way == MAX_CHECKS_PER_ADDRESS)
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers={"Authorization": "Bearer one-more"}, ssl=insecure) as response:
                status = await response.json()
                assert (response.status, response.headers.get("Retry-After")) == (429, "1")
        assert (status["kind"], status["reason"]) == ("Status", "TooManyRequests")
        cluster.answer.set()
        await asyncio.gather(*held)


async def wait_for_condition(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)
