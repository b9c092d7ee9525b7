"""Authorization: what a request asks to do (Kubernetes' RequestInfo), and whether the cluster allows it.

Every resource request is put to the cluster as a SubjectAccessReview (authorization.k8s.io/v1),
so RBAC on `foohealths`/`fooreviews` works as for any built-in resource. Decisions are cached
briefly (10 s, as an extension apiserver's delegating authorizer does) and identical concurrent
questions share one review.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apimachinery.labels import parse_int64
from apimachinery.status import Status, failure
from kube.accessreview import subject_access_review as review_of

from .authn import UserInfo
from .selectors import SelectorError, Selectors, parse_selectors

_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestInfo:
    """What a request is about, parsed from its method, path and query alone."""

    path: str
    verb: str
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""  # what authorization is asked about: the path's name, or one pinned by fieldSelector
    path_name: str = ""  # the name in the URL path ("" for a collection)
    extra_parts: tuple[str, ...] = ()
    # A list's or watch's selectors, parsed once: the filter applies what authorization was asked
    # about. Not part of the question itself (equality, the decision cache key).
    selectors: Selectors = field(default_factory=Selectors, compare=False)
    selector_error: str = field(default="", compare=False)  # why they do not parse: a 400 once authorized


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """Kubernetes' RequestInfoFactory for `/apis/<group>/<version>/...`; anything else is non-resource."""
    verb = _VERBS.get(method.upper(), method.lower())
    parts = [p for p in path.strip("/").split("/") if p != ""] if path.strip("/") else []
    if len(parts) < 4 or parts[0] != "apis":
        return RequestInfo(path=path, verb=verb)
    group, version, rest = parts[1], parts[2], parts[3:]
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
        if not rest:
            return RequestInfo(path=path, verb=verb)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2:
            rest = rest[2:]
    name = path_name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    selectors, selector_error = Selectors(), ""
    if not name and verb in ("get", "watch"):  # a collection read: list, ?watch=1, or the /watch/ path
        try:
            selectors = parse_selectors(query.get("labelSelector", ""), query.get("fieldSelector", ""))
        except SelectorError as err:
            selector_error = str(err)
    if not name and verb == "get":
        verb = "watch" if _query_bool(query.get("watch")) else "list"
        # As RequestInfoFactory: only a list or watch by query (not the /watch/ path) pins a name, and
        # only when the whole query decodes as ListOptions.
        if not selector_error and _int64_or_absent(query, "limit") and _int64_or_absent(query, "timeoutSeconds"):
            name = selectors.pinned_name()
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(
        path=path,
        verb=verb,
        resource_request=True,
        api_group=group,
        api_version=version,
        namespace=namespace,
        resource=rest[0],
        subresource=subresource,
        name=name,
        path_name=path_name,
        extra_parts=tuple(rest[3:]),
        selectors=selectors,
        selector_error=selector_error,
    )


def _query_bool(value: str | None) -> bool:
    """runtime.Convert_Slice_string_To_bool: present and neither "0" nor "false" (any case) is true."""
    return value is not None and value != "0" and value.lower() != "false"


def _int64_or_absent(query: Mapping[str, str], key: str) -> bool:
    return key not in query or parse_int64(query[key]) is not None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


# The injected authorizer: SubjectAccessReview in production, a function in tests.
Authorizer = Callable[[UserInfo, RequestInfo], Awaitable[Decision]]


def subject_access_review(user: UserInfo, info: RequestInfo) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may do ``info``."""
    if info.resource_request:
        attributes = {
            "namespace": info.namespace,
            "verb": info.verb,
            "group": info.api_group,
            "version": info.api_version,
            "resource": info.resource,
            "subresource": info.subresource,
            "name": info.name,
        }
        return review_of(user, resourceAttributes={k: v for k, v in attributes.items() if v})
    return review_of(user, nonResourceAttributes={"path": info.path, "verb": info.verb})


def decision_of(review: Mapping[str, Any]) -> Decision:
    status = review.get("status") or {}
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return Decision(allowed=status.get("allowed") is True and status.get("denied") is not True, reason=reason)


def forbidden(user: UserInfo, info: RequestInfo, reason: str = "") -> Status:
    """403 worded exactly like kube-apiserver's (responsewriters.Forbidden + apierrors.NewForbidden)."""
    if info.resource_request:
        resource = info.resource + (f"/{info.subresource}" if info.subresource else "")
        scope = f"in the namespace {json.dumps(info.namespace)}" if info.namespace else "at the cluster scope"
        why = (
            f"User {json.dumps(user.name)} cannot {info.verb} resource {json.dumps(resource)} "
            f"in API group {json.dumps(info.api_group)} {scope}"
        )
    else:
        why = f"User {json.dumps(user.name)} cannot {info.verb} path {json.dumps(info.path)}"
    if reason:
        why = f"{why}: {reason}"
    if not info.resource_request:
        return failure(403, f"forbidden: {why}", details={})
    qualified = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    subject = f"{qualified} {json.dumps(info.name)}" if info.name else qualified
    return failure(
        403,
        f"{subject} is forbidden: {why}",
        details={"name": info.name, "group": info.api_group, "kind": info.resource},
    )


class CachingAuthorizer:
    """Remembers decisions for a short while and coalesces identical questions in flight."""

    def __init__(
        self,
        authorize: Authorizer,
        *,
        allowed_ttl: float = 10.0,
        denied_ttl: float = 10.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authorize = authorize
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._max_entries = max_entries
        self._clock = clock
        self._decisions: dict[tuple[Any, ...], tuple[float, Decision]] = {}
        self._in_flight: dict[tuple[Any, ...], asyncio.Future[Decision]] = {}
        self.reviews = 0  # how many questions reached the real authorizer

    async def __call__(self, user: UserInfo, info: RequestInfo) -> Decision:
        key = (user.key(), info)
        cached = self._decisions.get(key)
        now = self._clock()
        if cached is not None and cached[0] > now:
            return cached[1]
        review = self._in_flight.get(key)
        if review is None:
            # Its own task: a caller that goes away does not cancel the answer others wait for.
            review = asyncio.ensure_future(self._review(key, user, info))
            self._in_flight[key] = review
        return await asyncio.shield(review)

    async def _review(self, key: tuple[Any, ...], user: UserInfo, info: RequestInfo) -> Decision:
        try:
            self.reviews += 1
            decision = await self._authorize(user, info)
        finally:
            self._in_flight.pop(key, None)
        now = self._clock()
        if len(self._decisions) >= self._max_entries:
            self._evict(now)
        ttl = self._allowed_ttl if decision.allowed else self._denied_ttl
        if ttl > 0:
            self._decisions[key] = (now + ttl, decision)
        return decision

    def _evict(self, now: float) -> None:
        self._decisions = {k: v for k, v in self._decisions.items() if v[0] > now}
        if len(self._decisions) >= self._max_entries:
            self._decisions.clear()
