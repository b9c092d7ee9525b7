"""Delegated authentication and authorization for `/metrics`, as controller-runtime's
`filters.WithAuthenticationAndAuthorization` does it.

The bearer token is checked with a TokenReview, then the user it names is authorized with a
SubjectAccessReview for the non-resource URL (`get` on `/metrics`). No token or a token the
apiserver does not accept: 401; not allowed: 403; both as a Kubernetes Status. Reasons from the
apiserver never reach the caller.

Anyone who reaches the port can make us ask the apiserver, so the asking is bounded: answers
are cached with kube-apiserver's own TTLs (a scrape every 15 s costs two small API calls every
2 minutes), in a space of fixed size that refused callers cannot take from admitted ones
(serving.reviewcache); at most a few reviews are under way at once (past them, a 429 at once);
and the reviews go through a client of their own (serving.metricsserver.guard_client), never the
connections a controller reconciles with.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from apimachinery.status import failure
from kube.accessreview import subject_access_review
from kube.client import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, ApiError, KubeClient

from .http import status_response
from .reviewcache import ReviewCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class User:
    """Who a TokenReview says the token belongs to."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


Authenticate = Callable[[str], Awaitable[User | None]]  # None: the token is not valid
Authorize = Callable[[User, str, str], Awaitable[bool]]  # (user, path, verb) -> allowed


def user_of(token_review: dict[str, Any]) -> User | None:
    """The user an answered TokenReview names, or None if it did not authenticate."""
    status = token_review.get("status") or {}
    if not status.get("authenticated"):
        return None
    user = status.get("user") or {}
    return User(
        name=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(user.get("groups") or ()),
        extra=dict(user.get("extra") or {}),
    )


def access_review(user: User, path: str, verb: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may ``verb`` the non-resource URL ``path``."""
    return subject_access_review(user, nonResourceAttributes={"path": path, "verb": verb})


def token_reviewer(client: KubeClient, timeout: float = 10.0) -> Authenticate:
    """Authenticate with a TokenReview (RBAC: create tokenreviews, part of system:auth-delegator)."""

    async def authenticate(token: str) -> User | None:
        review = {"apiVersion": TOKEN_REVIEWS.api_version, "kind": TOKEN_REVIEWS.kind, "spec": {"token": token}}
        return user_of(await client.request("POST", TOKEN_REVIEWS.path(), body=review, timeout=timeout))

    return authenticate


def access_reviewer(client: KubeClient, timeout: float = 10.0) -> Authorize:
    """Authorize with a SubjectAccessReview (RBAC: create subjectaccessreviews, system:auth-delegator)."""

    async def authorize(user: User, path: str, verb: str) -> bool:
        answer = await client.request(
            "POST", SUBJECT_ACCESS_REVIEWS.path(), body=access_review(user, path, verb), timeout=timeout
        )
        return bool((answer.get("status") or {}).get("allowed"))

    return authorize


def bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


# kube-apiserver's own TTLs: its webhook token authenticator keeps both answers for
# --authentication-token-webhook-cache-ttl (2m: tokencache.New(auth, false, ttl, ttl) in
# pkg/kubeapiserver/authenticator/config.go), its webhook authorizer an allowed one for 5m and a
# denied one for 30s (--authorization-webhook-cache-{authorized,unauthorized}-ttl). Neither
# keeps an error (cacheErrs false): the next request asks again.
TOKEN_TTL = 120.0
ALLOWED_TTL = 300.0
DENIED_TTL = 30.0
# Honest scrapers are a few Prometheus replicas, each with a token or two; the refused tier is the
# space a flood of refused tokens takes (a sha256 and a User or a verdict each: ~1 KiB at most).
GRANTED_CAP = 256
REFUSED_CAP = 4096
# Reviews asked at once, in all and per caller address: past them a caller is answered 429 at once
# (it would otherwise wait behind the flood, holding its connection); a cached answer needs none.
MAX_CHECKS = 8
MAX_CHECKS_PER_ADDRESS = 2


@dataclass
class MetricsGuard:
    """The authn/authz filter, as an aiohttp middleware over the metrics app.

    A token seen before is answered from ``serving.reviewcache`` (tokens are kept as their sha256,
    never as themselves); one not seen asks the apiserver, at most ``MAX_CHECKS`` at once.
    """

    authenticate: Authenticate
    authorize: Authorize
    clock: Callable[[], float] = time.monotonic
    max_checks: int = MAX_CHECKS
    max_checks_per_address: int = MAX_CHECKS_PER_ADDRESS
    _users: ReviewCache[User | None] = field(init=False)  # sha256(token) -> the TokenReview's user, None: refused
    _access: ReviewCache[bool] = field(init=False)  # (user, path, verb) -> the SubjectAccessReview's answer
    _checks: Counter[str] = field(default_factory=Counter)  # reviews under way, by caller address

    def __post_init__(self) -> None:
        self._users = ReviewCache(granted_cap=GRANTED_CAP, refused_cap=REFUSED_CAP, clock=self.clock)
        self._access = ReviewCache(granted_cap=GRANTED_CAP, refused_cap=REFUSED_CAP, clock=self.clock)

    @property
    def cached(self) -> int:
        """Answers held: at most twice GRANTED_CAP + REFUSED_CAP, whoever calls."""
        return len(self._users) + len(self._access)

    async def check(self, token: str | None, path: str, verb: str, address: str = "") -> tuple[int, str]:
        """(200, "") when the caller may ``verb`` ``path``; else the status and message to answer."""
        if token is None:
            return 401, "Unauthorized"
        token_key = hashlib.sha256(token.encode()).digest()
        user = self._users.get(token_key)
        access = None if user is None or user[0] is None else self._access.get(_access_key(user[0], path, verb))
        if user is not None and (user[0] is None or access is not None):
            return self._verdict(token_key, user[0], access)
        if sum(self._checks.values()) >= self.max_checks or self._checks[address] >= self.max_checks_per_address:
            return 429, "too many authentication checks under way; try again later"
        self._checks[address] += 1
        try:
            return await self._review(token, token_key, user, path, verb)
        finally:
            self._checks[address] -= 1
            if not self._checks[address]:
                del self._checks[address]

    async def _review(
        self, token: str, token_key: bytes, user: tuple[User | None] | None, path: str, verb: str
    ) -> tuple[int, str]:
        if user is None:
            try:
                user = (await self.authenticate(token),)
            except (ApiError, TimeoutError, OSError) as err:
                # As controller-runtime: a token that cannot be checked is not accepted.
                log.warning("TokenReview failed", extra={"error": str(err)})
                return 401, "Unauthorized"
            self._users.refused(token_key, user[0], TOKEN_TTL)  # promoted once its user is let in
            if user[0] is None:
                return 401, "Unauthorized"
        known = user[0]
        assert known is not None
        key = _access_key(known, path, verb)
        access = self._access.get(key)
        if access is None:
            try:
                allowed = await self.authorize(known, path, verb)
            except (ApiError, TimeoutError, OSError) as err:
                log.warning("SubjectAccessReview failed", extra={"error": str(err), "user": known.name})
                return 503, f"authorization for user {known.name} could not be checked; try again later"
            if allowed:
                self._access.granted(key, True, ALLOWED_TTL)
            else:
                self._access.refused(key, False, DENIED_TTL)
            access = (allowed,)
        return self._verdict(token_key, known, access)

    def _verdict(self, token_key: bytes, user: User | None, access: tuple[bool] | None) -> tuple[int, str]:
        if user is None:
            return 401, "Unauthorized"
        if access is None or not access[0]:
            return 403, f"Authorization denied for user {user.name}"
        self._users.promote(token_key)
        return 200, ""

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
        code, message = await self.check(bearer_token(request), request.path, verb, request.remote or "")
        if code != 200:
            response = status_response(failure(code, message))
            if code == 429:
                response.headers["Retry-After"] = "1"
            return response
        return await handler(request)


def _access_key(user: User, path: str, verb: str) -> tuple[Any, ...]:
    extra = tuple(sorted((key, tuple(values)) for key, values in user.extra.items()))
    return (user.name, user.uid, user.groups, extra, path, verb)
