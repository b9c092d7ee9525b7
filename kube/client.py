"""A thin JSON client over kubernetes_asyncio's ApiClient: raw paths, dicts in and out.

kubernetes_asyncio brings the config loading, TLS and auth (tokens, exec plugins, in-cluster
token refresh); we skip its typed models, which cost more than they give a controller. Every call
passes the client-side QPS limiter and has a timeout; every failure is an ``ApiError``. The
resources more than one process reads or writes are named here, once.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import copy
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import aiohttp

from apimachinery.bodies import JSON
from apimachinery.listdecode import ListDecodeError, ListDecoder
from apimachinery.objects import Object
from apimachinery.resources import Resource

from .ratelimit import TokenBucket

if TYPE_CHECKING:
    # Only a type here: importing kubernetes_asyncio is a large share of a start that a webhook
    # without --metrics-secure or --cert-rotation never needs (kube.config imports it when used).
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)

T = TypeVar("T")
# What a caller keeps of an object it reads: applied as each one is decoded (kube.informer's transform).
Projection = Callable[[Object], Object]

PatchType = Literal["merge", "strategic", "json", "apply"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",  # JSON is YAML
}


# The resources more than one process reads or writes, each named once.
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
PODS = Resource("", "v1", "pods", "Pod")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
# Create-only reviews: delegated authentication and authorization (system:auth-delegator).
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)


class ApiError(Exception):
    """A failed call: the apiserver's Status, or status 0 when it could not be reached."""

    def __init__(
        self,
        status: int,
        body: Mapping[str, Any] | None = None,
        *,
        method: str = "",
        path: str = "",
        server: str = "",
        retry_after_header: float | None = None,
    ) -> None:
        self.status = status
        self.retry_after_header = retry_after_header  # the answer's Retry-After, in seconds
        self.server = server  # the apiserver's URL: what a user checks first when there was no answer
        self.body: dict[str, Any] = dict(body or {})
        self.method = method
        self.path = path
        self.reason: str = str(self.body.get("reason") or ("ServerUnreachable" if status == 0 else "Unknown"))
        self.message: str = str(self.body.get("message") or "")
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}".strip())

    @property
    def details(self) -> dict[str, Any]:
        details = self.body.get("details")
        return details if isinstance(details, dict) else {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def object_not_found(self) -> bool:
        """404 for the object itself (details name it), not for its resource: a resource the
        apiserver does not serve right now (a CRD's handler being rebuilt after an update, say)
        answers 404 too, with no details."""
        return self.not_found and bool(self.details.get("name"))

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        """An optimistic-concurrency conflict (stale resourceVersion): retry from fresh state."""
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        """410 Gone / Expired: the resourceVersion is too old to watch from; relist."""
        return self.status == 410

    @property
    def transient(self) -> bool:
        """Worth retrying as is: unreachable, throttled, conflicting or a server-side failure."""
        return self.status in (0, 409, 429) or self.status >= 500

    @property
    def retry_after(self) -> float | None:
        """How long the server asked us to wait: its Status's retryAfterSeconds, else its Retry-After header."""
        seconds = self.details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and seconds > 0:
            return float(seconds)
        return self.retry_after_header


def retry_after_header(response: aiohttp.ClientResponse) -> float | None:
    """The Retry-After header of a 429 or 5xx answer, in whole seconds (as client-go reads it)."""
    if response.status != 429 and response.status < 500:
        return None
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None


def _json_answer(raw: bytes) -> Any:
    """An answer's JSON, or a Status-like message for one that is not (a proxy's HTML page)."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw[:500].decode("utf-8", "replace")}


def _list_query(
    label_selector: str | None, field_selector: str | None, limit: int | None, continue_: str | None
) -> dict[str, Any]:
    return {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit, "continue": continue_}


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        if value is None:
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def no_answer(err: ApiError) -> str:
    """Every command's words for a call that got no answer (``status == 0``): the URL, then why."""
    return f"cannot reach the apiserver at {err.server or 'the configured address'}: {' '.join(err.message.split())}"


# client-go's rest client: how many times an answer with Retry-After is retried.
MAX_RETRIES = 10

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class FencedWrite(Exception):
    """A write the client's fence refused before it went on the wire (e.g. the lease may be lost)."""


# Called right before a write is sent; raises FencedWrite to refuse it.
WriteFence = Callable[[str, str], None]

# The fence of the write this task is sending, for ``FencedConnector`` (None: a read, or unfenced).
_SENDING_FENCE: contextvars.ContextVar[WriteFence | None] = contextvars.ContextVar("sending_fence", default=None)


class FencedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, asking a write's fence again once its connection is ready.

    ``KubeClient`` asks the fence before the request goes to aiohttp, which then opens a
    connection when none is free: a TCP and TLS handshake, long enough for a process frozen in
    it (SIGSTOP, a paused VM) to wake after another replica took the lease, and send what it had
    judged before it froze (15 Deployment creates, one per waiting worker, in
    tests/e2e/test_controller_fencing.py). Asked here, the next thing after the fence is writing
    the request, with no wait between.
    """

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[aiohttp.tracing.Trace], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        fence = _SENDING_FENCE.get()
        if fence is not None:
            try:
                fence(req.method, req.url.path)
            except BaseException:
                connection.release()  # unused: back to the pool
                raise
        return connection


class KubeClient:
    """JSON calls against the apiserver an ``ApiClient`` is configured for."""

    def __init__(
        self,
        api: ApiClient,
        *,
        limiter: TokenBucket | None = None,
        timeout: float = 30.0,
        field_manager: str | None = None,
    ) -> None:
        self.api = api
        self.limiter = limiter
        self.timeout = timeout
        self.field_manager = field_manager
        self.fence: WriteFence | None = None

    def fenced(self, fence: WriteFence) -> KubeClient:
        """This client (same connections and limiter) with every write passing ``fence`` first.

        The one choke point for "may this process still write": the fence is asked after the
        client-side limiter, right before the request is handed to the connection, so no write
        that waited in line can slip past it. Reads are never fenced.
        """
        clone = copy.copy(self)
        clone.fence = fence
        return clone

    async def close(self) -> None:
        await self.api.close()

    def _no_answer(self, exc: BaseException, method: str, path: str) -> ApiError:
        server = str(self.api.configuration.host or "")
        return ApiError(0, {"message": f"{type(exc).__name__}: {exc}"}, method=method, path=path, server=server)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        if self.limiter is not None:
            await self.limiter.acquire()
        fence = self.fence if method in WRITE_METHODS else None
        if fence is not None:
            fence(method, path)
        sending = _SENDING_FENCE.set(fence)  # and again once the connection is ready (FencedConnector)
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=_query(query),
                header_params={"Content-Type": content_type, "Accept": JSON},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise self._no_answer(exc, method, path) from exc
        finally:
            _SENDING_FENCE.reset(sending)
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
        project: Projection | None = None,
    ) -> dict[str, Any]:
        """One call; the decoded JSON answer, or ``ApiError`` with the apiserver's Status.

        ``project`` turns the answer into what the caller keeps before anything else is decoded,
        so an answer a tenant made large lives only until it is projected.

        As client-go's rest client does, an answer of 429 or 5xx with a Retry-After header (the
        apiserver did not act on the request: API Priority and Fairness throttling it, a CRD's
        storage being replaced as it came in) is retried after the seconds it says, up to
        ``MAX_RETRIES`` times, and never waiting past the call's timeout in all."""

        async def decode(response: aiohttp.ClientResponse) -> dict[str, Any]:
            data = _json_answer(await self._read(response, method, path))
            answer = data if isinstance(data, dict) else {"items": data}
            return project(answer) if project is not None else answer

        return await self._exchange(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout, decode=decode
        )

    async def _read(self, response: aiohttp.ClientResponse, method: str, path: str) -> bytes:
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise self._no_answer(exc, method, path) from exc

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        decode: Callable[[aiohttp.ClientResponse], Awaitable[T]],
    ) -> T:
        """Send, retry as the server asks, and hand a 2xx answer to ``decode`` (which reads it)."""
        seconds = self.timeout if timeout is None else timeout
        client_timeout = aiohttp.ClientTimeout(total=seconds)
        waited, attempt = 0.0, 0
        while True:
            response = await self._send(
                method, path, query=query, body=body, content_type=content_type, timeout=client_timeout
            )
            try:
                if 200 <= response.status < 300:
                    return await decode(response)
                data = _json_answer(await self._read(response, method, path))
            finally:
                response.release()
            wait = retry_after_header(response)
            error = ApiError(
                response.status,
                data if isinstance(data, dict) else None,
                method=method,
                path=path,
                retry_after_header=wait,
            )
            if wait is None or attempt == MAX_RETRIES or waited + wait > seconds:
                raise error
            log.debug(
                "retrying as the apiserver asked", extra={"attempt": attempt + 1, "after": wait, "error": str(error)}
            )
            await asyncio.sleep(wait)
            waited, attempt = waited + wait, attempt + 1

    def _write_query(self, dry_run: bool = False) -> dict[str, Any]:
        return {"fieldManager": self.field_manager, "dryRun": "All" if dry_run else None}

    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        return await self.request("GET", resource.path(namespace, name, subresource))

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        query = _list_query(label_selector, field_selector, limit, continue_) | {"resourceVersion": resource_version}
        return await self.request("GET", resource.path(namespace), query=query, timeout=timeout)

    async def list_page(
        self,
        resource: Resource,
        project: Projection,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        timeout: float | None = None,
    ) -> tuple[builtins.list[Object], Object]:
        """One page of a list, each item ``project``ed as soon as it is decoded (``apimachinery.listdecode``):
        (the projections, the list's ``metadata``). The page is never held whole, raw or decoded."""
        path = resource.path(namespace)
        query = _list_query(label_selector, field_selector, limit, continue_)

        async def decode(response: aiohttp.ClientResponse) -> tuple[builtins.list[Object], Object]:
            decoder = ListDecoder()
            items: builtins.list[Object] = []
            try:
                async for chunk in response.content.iter_any():
                    items.extend(project(item) for item in decoder.feed(chunk))
                items.extend(project(item) for item in decoder.feed(b"", end=True))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise self._no_answer(exc, "GET", path) from exc
            except ListDecodeError as exc:
                raise ApiError(500, {"reason": "InternalError", "message": str(exc)}, method="GET", path=path) from exc
            metadata = decoder.head.get("metadata")
            return items, metadata if isinstance(metadata, dict) else {}

        return await self._exchange(
            "GET", path, query=query, body=None, content_type=JSON, timeout=timeout, decode=decode
        )

    async def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        project: Projection | None = None,
    ) -> dict[str, Any]:
        return await self.request(
            "POST", resource.path(namespace), query=self._write_query(dry_run), body=body, project=project
        )

    async def replace(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        timeout: float | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        return await self.request(
            "PUT",
            resource.path(namespace, name, subresource),
            query=self._write_query(dry_run),
            body=body,
            timeout=timeout,
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
        force: bool | None = None,
        timeout: float | None = None,
        project: Projection | None = None,
    ) -> dict[str, Any]:
        query = self._write_query()
        if patch_type == "apply":
            query["force"] = force
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            query=query,
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
            timeout=timeout,
            project=project,
        )

    async def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self.request("DELETE", resource.path(namespace, name), body=body)

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A watch stream of ``{"type", "object"}`` events; ends when the server closes it.

        The server closes after ``timeout_seconds``; the socket read timeout sits a little
        past that (bookmarks arrive well inside it), so a silently dead connection is noticed.
        """
        path = resource.path(namespace)
        query = {
            "watch": True,
            "allowWatchBookmarks": allow_bookmarks,
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": timeout_seconds,
        }
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeout, sock_connect=self.timeout, sock_read=timeout_seconds + 30
        )
        response = await self._send("GET", path, query=query, body=None, content_type=JSON, timeout=timeout)
        try:
            if not 200 <= response.status < 300:
                data = _json_answer(await response.read())
                raise ApiError(response.status, data if isinstance(data, dict) else None, method="WATCH", path=path)
            yield self._events(response, path)
        finally:
            response.close()

    @staticmethod
    async def _events(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[dict[str, Any]]:
        try:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if isinstance(event, dict):
                    yield event
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise ApiError(0, {"message": f"{type(exc).__name__}: {exc}"}, method="WATCH", path=path) from exc
