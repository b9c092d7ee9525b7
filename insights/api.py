"""The HTTP face of insights.samplecontroller.k8s.io: authenticate, authorize, route, negotiate, answer.

Order as in kube-apiserver: authentication (401), then authorization of resource requests
(403), then routing (404/405), then content negotiation (406). Discovery and OpenAPI are open
to every authenticated user, as `system:discovery` makes them in a cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from aiohttp import web
from aiohttp.payload import Payload

from apimachinery.admission import REVIEW_BODY_LIMIT
from apimachinery.bodies import JSON, BodyDeadlines, StatusError, body_too_large
from apimachinery.objects import Object
from apimachinery.status import NOT_ALLOWED, NOT_FOUND, failure
from serving.appserving import long_running
from serving.budget import ByteBudget, NeverFits, budget_for_memory_limit, parse_cost, parse_paused
from serving.http import GROWTH_STEP, check_json_content_type, read_body

from . import discovery, listing, openapi
from .authn import Authenticator, Unauthenticated, UserInfo
from .authz import Authorizer, RequestInfo, forbidden, request_info
from .listing import page, reached, resolve
from .listoptions import OptionsError, get_read, list_options, watch_read
from .media import (
    ACCEPTED,
    DISCOVERY_FORMS,
    DISCOVERY_VERSIONS,
    TABLE,
    YAML,
    Form,
    aggregated_discovery_type,
    negotiate,
)
from .rendering import YAML_LIMIT, yaml_body, yaml_document
from .resources import FOO_HEALTHS, FOO_REVIEWS, GROUP, GROUP_VERSION, RESOURCES, VERSION, Resource
from .review import ReviewError, review
from .selectors import SelectorError, Selectors
from .table import IncludeObject, row, table, table_head
from .view import HealthView
from .watch import Render, WatchOptions, serve_watch

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a FooReview holds at once, as measured (bench/README.md): its raw bytes
# twice (the chunks and their join), up to three trees the size of its parsed body (the body,
# its conversion to v1, the defaulted copy), and its answer, which repeats the Foo twice (spec
# and status.object) and is copied once more into the transport's buffer.
RAW_COPIES = 2
REVIEW_TREES = 3
ANSWER_COPIES = 4
# What the insights process needs besides reviews: its idle size (interpreter, aiohttp, uvloop,
# the Kubernetes client, TLS) plus room for the informer caches and lists (bench/README,
# "Figures moved from docstrings").
INSIGHTS_RESERVED_MIB = 128
# What a watch holds (its task, subscription queue, TLS and write buffers; bench/README) times
# this is bounded; past it a new watch is a 429 and the client (a reflector) retries.
MAX_WATCHES = 100
# Two threads: reviews queue (each holding its charge) rather than all take turns at the GIL
# with the loop, which keeps answering probes and watches between their slices.
_REVIEWERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="review")


def review_budget(memory_limit_mib: int) -> int:
    """FooReviews in progress may hold what the process does not need itself, by the webhook's rule
    (serving.budget): 64 MiB of 256 MiB."""
    return budget_for_memory_limit(memory_limit_mib, reserved_mib=INSIGHTS_RESERVED_MIB)


def review_cost(body: bytes) -> int:
    """An upper bound of the bytes reviewing ``body`` holds, until its answer is written."""
    return (RAW_COPIES + ANSWER_COPIES) * len(body) + REVIEW_TREES * parse_cost(body)


@dataclass
class Insights:
    """Everything the handlers need; one per application."""

    authenticator: Authenticator
    authorizer: Authorizer
    view: HealthView
    default_image: str
    review_body_limit: int = REVIEW_BODY_LIMIT
    # kube-apiserver ends a watch after a random time in [min-request-timeout, 2×] (default 30 min).
    watch_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    # How often an idle watch checks whether its client is still there.
    idle_check: float = 2.0
    # Every byte a caller makes the process hold (FooReviews, the FooHealth history) is charged here
    # before it is held; wiring gives it the share of --memory-limit-mib that api.review_budget says.
    budget: ByteBudget = field(default_factory=lambda: ByteBudget(review_budget(256)))
    body_deadlines: BodyDeadlines = BodyDeadlines()
    max_watches: int = MAX_WATCHES
    watches: int = 0


INSIGHTS = web.AppKey("insights", Insights)

AUTHORIZATION_FAILED = "Internal error occurred: the request could not be authorized; see the server's log"


def _fail(code: int, message: str, **kwargs: Any) -> StatusError:
    return StatusError(failure(code, message, **kwargs))


def _rendered(body: Any, form: Form) -> tuple[bytes | Payload, str]:
    """``body`` in ``form``: its bytes and their Content-Type."""
    if form == "yaml":
        return yaml_body(body), YAML
    if form in DISCOVERY_VERSIONS:
        return orjson.dumps(body), aggregated_discovery_type(DISCOVERY_VERSIONS[form])
    return orjson.dumps(body), TABLE if form == "table" else JSON


def _render(body: Any, form: Form, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data, content_type = _rendered(body, form)
    return web.Response(body=data, status=status, headers={"Content-Type": content_type, **(headers or {})})


def _form(request: web.Request, allowed: tuple[Form, ...]) -> Form:
    form = negotiate(request.headers.get("Accept", ""), allowed)
    if form is None:
        raise _fail(406, f"only the following media types are accepted: {ACCEPTED}")
    return form


# ---- authentication and authorization ------------------------------------------------------------


def _peer_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der or None


def authenticate(request: web.Request, insights: Insights) -> UserInfo:
    result = insights.authenticator.authenticate(_peer_certificate(request), request.headers)
    if isinstance(result, Unauthenticated):
        log.info(
            "unauthenticated request", extra={"path": request.path, "remote": request.remote, "reason": result.reason}
        )
        raise _fail(401, "Unauthorized")
    return result


async def authorize(user: UserInfo, info: RequestInfo, insights: Insights) -> None:
    try:
        decision = await insights.authorizer(user, info)
    except Exception as err:  # the SubjectAccessReview itself failed: not the user's fault
        # 500, as kube-apiserver's WithAuthorization answers an authorizer error. Unlike its plain-text
        # InternalError, the caller gets no detail: the error may carry the apiserver's response,
        # addresses or headers. The log has it.
        log.warning("authorization failed", extra={"user": user.name, "path": info.path, "error": repr(err)})
        raise _fail(500, AUTHORIZATION_FAILED) from None
    if not decision.allowed:
        log.info(
            "forbidden",
            extra={
                "user": user.name,
                "verb": info.verb,
                "resource": info.resource,
                "namespace": info.namespace,
                "object": info.name,
            },
        )
        raise StatusError(forbidden(user, info, decision.reason))


# ---- the one entry point -----------------------------------------------------------------------------


async def handle(request: web.Request) -> web.StreamResponse:
    insights = request.app[INSIGHTS]
    user = authenticate(request, insights)
    info = request_info(request.method, request.path, request.query)
    if info.resource_request:
        await authorize(user, info, insights)
        return await _resource(request, insights, info)
    return _non_resource(request)


def _non_resource(request: web.Request) -> web.StreamResponse:
    parts = [p for p in request.path.strip("/").split("/") if p]
    if request.method not in ("GET", "HEAD"):
        raise _fail(405, NOT_ALLOWED)
    if parts == ["apis"]:
        form = _form(request, (*DISCOVERY_FORMS.values(), "json", "yaml"))
        if form in DISCOVERY_VERSIONS:
            return _render(discovery.api_group_discovery_list(DISCOVERY_VERSIONS[form]), form)
        return _render(discovery.api_group_list(), form)
    if parts == ["apis", GROUP]:
        return _render(discovery.api_group(), _form(request, ("json", "yaml")))
    if parts == ["apis", GROUP, VERSION]:
        return _render(discovery.api_resource_list(), _form(request, ("json", "yaml")))
    if parts == ["openapi", "v2"]:
        return _document(request, openapi.openapi_v2())
    if parts == ["openapi", "v3"]:
        return web.Response(body=orjson.dumps(openapi.openapi_v3_index()), headers={"Content-Type": JSON})
    if parts == ["openapi", "v3", *openapi.V3_PATH.split("/")]:
        return _document(request, openapi.openapi_v3_group_version(), immutable="hash" in request.query)
    raise _fail(404, NOT_FOUND)


def _document(request: web.Request, document: bytes, immutable: bool = False) -> web.Response:
    etag = f'"{openapi.etag(document)}"'
    headers = {
        "ETag": etag,
        "Content-Type": JSON,
        "Cache-Control": "public, immutable" if immutable else "no-cache, private",
    }
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    return web.Response(body=document, headers=headers)


async def _resource(request: web.Request, insights: Insights, info: RequestInfo) -> web.StreamResponse:
    resource = RESOURCES.get(info.resource)
    if (
        info.api_group != GROUP
        or info.api_version != VERSION
        or resource is None
        or info.subresource
        or info.extra_parts
    ):
        raise _fail(404, NOT_FOUND)
    if resource is FOO_REVIEWS:
        if not info.namespace:
            raise _fail(404, NOT_FOUND)
        if request.method != "POST" or info.path_name:
            raise _fail(405, NOT_ALLOWED)
        return await _create_review(request, insights, info.namespace)
    if request.method not in ("GET", "HEAD"):
        raise _fail(405, NOT_ALLOWED)
    if info.path_name:
        if not info.namespace or info.verb != "get":
            raise _fail(404, NOT_FOUND)
        return await _get_health(request, insights, resource, info.namespace, info.path_name)
    return await _list_or_watch(request, insights, info)


# ---- fooreviews ----------------------------------------------------------------------------------------


async def _create_review(request: web.Request, insights: Insights, namespace: str) -> web.StreamResponse:
    """A FooReview answered within the budget: its bytes charged before they are read, its
    parsed trees before they are built, its answer until it is written; the work off the loop."""
    form = _form(request, ("json", "yaml"))
    check_json_content_type(request)
    limit, declared = insights.review_body_limit, request.content_length
    if declared is not None and declared > limit:
        raise body_too_large(limit)
    try:
        # Twice what arrives: the chunks and their join.
        async with insights.budget.reserve(RAW_COPIES * declared if declared else GROWTH_STEP) as reservation:
            body = await read_body(request, limit, deadlines=insights.body_deadlines, reservation=reservation)
            await reservation.resize(review_cost(body))
            # Parsing, reviewing and rendering are CPU work of up to seconds: in a thread, so the
            # loop goes on answering probes and watches meanwhile.
            data, content_type = await asyncio.get_running_loop().run_in_executor(
                _REVIEWERS, _review_rendered, body, namespace, insights.default_image, form
            )
            del body
            response = web.Response(body=data, status=201, headers={"Content-Type": content_type})
            await response.prepare(request)
            await response.write_eof()  # written (into the transport) before the bytes are given back
            return response
    except NeverFits as err:
        raise _fail(
            413,
            f"request body is too large to review: it needs {err.wanted} bytes of the {err.largest} the "
            "server may hold for reviews (it follows --memory-limit-mib)",
        ) from None


def _review_rendered(body: bytes, namespace: str, default_image: str, form: Form) -> tuple[bytes | Payload, str]:
    try:
        answer = review(parse_paused(body), namespace, default_image=default_image)
    except ReviewError as err:
        raise StatusError(err.status) from None
    return _rendered(answer, form)


# ---- foohealths: get, list, watch -------------------------------------------------------------------------


def _require_synced(insights: Insights) -> None:
    if not insights.view.synced:
        raise StatusError(
            failure(
                503,
                "foohealths are not available yet: the Foo, Deployment and Pod caches are still syncing",
                details={"retryAfterSeconds": 1},
            )
        )


async def _get_health(
    request: web.Request, insights: Insights, resource: Resource, namespace: str, name: str
) -> web.StreamResponse:
    form = _form(request, ("json", "yaml", "table", "partial"))
    read = _options(get_read, request.query)
    _require_synced(insights)
    await reached(insights.view, read.resource_version)
    health = insights.view.get(namespace, name)
    if health is None:
        raise _fail(
            404,
            f'{resource.qualified} "{name}" not found',
            details={"name": name, "group": GROUP, "kind": resource.name},
        )
    return _one(health, form, request)


def _options(parse: Callable[[Mapping[str, str]], T], query: Mapping[str, str]) -> T:
    """A read's options, or the Status apimachinery answers for them (before any head is sent)."""
    try:
        return parse(query)
    except OptionsError as err:
        raise StatusError(err.status) from None


def _include_object(request: web.Request) -> IncludeObject:
    value = request.query.get("includeObject", "Metadata")
    if value not in ("None", "Metadata", "Object"):
        raise _fail(400, f'includeObject: unsupported value "{value}": supported values are None, Metadata, Object')
    return value  # type: ignore[return-value]


def _partial(obj: Object) -> Object:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def _one(health: Object, form: Form, request: web.Request) -> web.Response:
    if form == "table":
        return _render(
            table(
                [health],
                resource_version=health["metadata"].get("resourceVersion", ""),
                include_object=_include_object(request),
            ),
            form,
        )
    return _render(_partial(health) if form == "partial" else health, form)


@dataclass(frozen=True)
class _Filter:
    namespace: str
    selectors: Selectors

    def __call__(self, obj: Object) -> bool:
        meta = obj["metadata"]
        return (not self.namespace or meta.get("namespace") == self.namespace) and self.selectors.matches(obj)


def _filter(info: RequestInfo) -> _Filter:
    """The selectors request_info parsed (and authorization saw), or the 400 they earn."""
    if info.selector_error:
        raise _fail(400, info.selector_error)
    try:
        info.selectors.check_fields()
    except SelectorError as err:
        raise _fail(400, str(err)) from None
    return _Filter(info.namespace, info.selectors)


async def _list_or_watch(request: web.Request, insights: Insights, info: RequestInfo) -> web.StreamResponse:
    watch = info.verb == "watch"
    form = _form(request, ("json", "table", "partial") if watch else ("json", "yaml", "table", "partial"))
    matches = _filter(info)
    if watch:
        options = _watch_options(request, insights, form)
        _require_synced(insights)
        return await _watch(request, insights, matches, form, options)
    return await _list(request, insights, info, form, matches)


async def _list(
    request: web.Request, insights: Insights, info: RequestInfo, form: Form, matches: _Filter
) -> web.StreamResponse:
    """Every check first (options, then the state asked for), then the page, streamed."""
    options = _options(list_options, request.query)
    include = _include_object(request) if form == "table" else "Metadata"
    _require_synced(insights)
    state, version = await resolve(insights.view, options)
    listed = page(
        state,
        version,
        options,
        namespace=info.namespace,
        matches=None if matches.selectors.empty else matches.selectors.matches,
    )
    head: Object
    render: Callable[[Object], Object]
    if form == "table":
        now = datetime.datetime.now(datetime.UTC)
        head, key, render = table_head(listed.metadata), "rows", lambda obj: row(obj, now, include)
    elif form == "partial":
        head = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": listed.metadata}
        key, render = "items", _partial
    else:
        head = {"kind": f"{FOO_HEALTHS.kind}List", "apiVersion": GROUP_VERSION, "metadata": listed.metadata}
        key, render = "items", _same
    if form == "yaml":
        document = await listing.document(head, key, listed.items, render, YAML_LIMIT)
        return web.Response(body=yaml_document(document), headers={"Content-Type": YAML})
    return await listing.write(request, head, key, listed.items, render, TABLE if form == "table" else JSON)


def _same(obj: Object) -> Object:
    return obj


# ---- watch -----------------------------------------------------------------------------------------------


def _watch_options(request: web.Request, insights: Insights, form: Form) -> WatchOptions:
    query = request.query
    read = _options(watch_read, query)  # the one resourceVersion parser, before the head is sent
    send_initial = query.get("sendInitialEvents") in ("1", "true", "True")
    try:
        timeout = (
            float(query["timeoutSeconds"])
            if "timeoutSeconds" in query
            else random.uniform(insights.watch_timeout, 2 * insights.watch_timeout)
        )
    except ValueError:
        raise _fail(400, "timeoutSeconds must be a number") from None
    return WatchOptions(
        since=None if send_initial or read.resource_version == 0 else str(read.resource_version),
        initial_events_end=send_initial,
        # Table watches are for people; bookmarks would only be noise in them.
        bookmarks=query.get("allowWatchBookmarks") in ("1", "true", "True") and form != "table",
        timeout=timeout,
        bookmark_interval=insights.bookmark_interval,
        idle_check=insights.idle_check,
        metadata_only=form == "partial",
    )


def _watch_render(request: web.Request, form: Form) -> Render:
    if form == "table":
        include = _include_object(request)
        return lambda obj, first: table(
            [obj], resource_version=obj["metadata"].get("resourceVersion", ""), include_object=include, headers=first
        )
    if form == "partial":
        return lambda obj, first: _partial(obj)
    return lambda obj, first: obj


async def _watch(
    request: web.Request, insights: Insights, matches: _Filter, form: Form, options: WatchOptions
) -> web.StreamResponse:
    if insights.watches >= insights.max_watches:
        raise _fail(
            429,
            f"too many watches in progress (at most {insights.max_watches}); retry later",
            details={"retryAfterSeconds": 1},
        )
    insights.watches += 1
    try:
        with long_running(request):
            return await serve_watch(request, insights.view, matches, _watch_render(request, form), options)
    finally:
        insights.watches -= 1
