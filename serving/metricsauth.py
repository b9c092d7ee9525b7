"""Delegated authentication and authorization for `/metrics`, as controller-runtime's
`filters.WithAuthenticationAndAuthorization` does it.

The bearer token is checked with a TokenReview, then the user it names is authorized with a
SubjectAccessReview for the non-resource URL (`get` on `/metrics`). No token or a token the
apiserver does not accept: 401; not allowed: 403; both as a Kubernetes Status. Decisions are
cached for a few seconds (kube-apiserver's delegating defaults: 10 s) so a scrape every 15 s
costs at most two small API calls, and reasons from the apiserver never reach the caller.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from apimachinery.status import failure
from kube.accessreview import subject_access_review
from kube.client import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, ApiError, KubeClient

from .http import status_response

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


@dataclass
class MetricsGuard:
    """The authn/authz filter, as an aiohttp middleware over the metrics app."""

    authenticate: Authenticate
    authorize: Authorize
    ttl: float = 10.0
    max_entries: int = 1024
    clock: Callable[[], float] = time.monotonic
    # sha256(token), path, verb -> (HTTP status to answer, until when); tokens are never kept.
    _decisions: dict[tuple[bytes, str, str], tuple[int, str, float]] = field(default_factory=dict)

    async def _decide(self, token: str, path: str, verb: str) -> tuple[int, str, bool]:
        """(HTTP status, message, whether the apiserver answered and the decision may be cached)."""
        try:
            user = await self.authenticate(token)
        except (ApiError, TimeoutError, OSError) as err:
            # As controller-runtime: a token that cannot be checked is not accepted.
            log.warning("TokenReview failed", extra={"error": str(err)})
            return 401, "Unauthorized", False
        if user is None:
            return 401, "Unauthorized", True
        try:
            allowed = await self.authorize(user, path, verb)
        except (ApiError, TimeoutError, OSError) as err:
            log.warning("SubjectAccessReview failed", extra={"error": str(err), "user": user.name})
            return 503, f"authorization for user {user.name} could not be checked; try again later", False
        if not allowed:
            return 403, f"Authorization denied for user {user.name}", True
        return 200, "", True

    async def check(self, token: str | None, path: str, verb: str) -> tuple[int, str]:
        """(200, "") when the caller may ``verb`` ``path``; else the status and message to answer."""
        if token is None:
            return 401, "Unauthorized"
        key = (hashlib.sha256(token.encode()).digest(), path, verb)
        now = self.clock()
        cached = self._decisions.get(key)
        if cached is not None and cached[2] > now:
            return cached[0], cached[1]
        code, message, answered = await self._decide(token, path, verb)
        if answered:  # an unanswered review is asked again next time
            self._decisions.pop(key, None)
            if len(self._decisions) >= self.max_entries:
                self._decisions.pop(next(iter(self._decisions)))
            self._decisions[key] = (code, message, now + self.ttl)
        return code, message

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
        code, message = await self.check(bearer_token(request), request.path, verb)
        if code != 200:
            return status_response(failure(code, message))
        return await handler(request)
