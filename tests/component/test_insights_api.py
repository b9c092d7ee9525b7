"""The aggregated API over real HTTPS, called the way kube-apiserver's aggregator calls it.

The server asks for client certificates against two CAs (the front-proxy CA and another one, as
during a rotation), while the requestheader configuration trusts only the front-proxy CA: so a
certificate of the other CA completes the handshake and must still be refused per request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from attacks.objects import deployment_of, foo_v1
from certs.authority import KeyPair, issue_client, issue_serving, new_ca
from insights import AggregatedConfig
from insights.authn import RequestHeaderConfig, UserInfo
from insights.authz import Decision, RequestInfo
from insights.server import build_app
from insights.view import HealthView

GV = "/apis/insights.samplecontroller.k8s.io/v1alpha1"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
NOW = datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Pki:
    serving_ca: KeyPair
    serving: KeyPair
    front_proxy_ca: KeyPair
    other_ca: KeyPair
    identities: dict[str, KeyPair]


@pytest.fixture(scope="module")
def pki() -> Pki:
    serving_ca, front_proxy_ca, other_ca = new_ca("serving-ca"), new_ca("front-proxy-ca"), new_ca("other-ca")
    return Pki(
        serving_ca=serving_ca,
        serving=issue_serving(serving_ca, common_name="insights", dns_names=["localhost"], ips=["127.0.0.1"]),
        front_proxy_ca=front_proxy_ca,
        other_ca=other_ca,
        identities={
            "aggregator": issue_client(front_proxy_ca, common_name="front-proxy-client"),
            "not-allowed-cn": issue_client(front_proxy_ca, common_name="someone-else"),
            "other-ca": issue_client(other_ca, common_name="front-proxy-client"),
        },
    )


def ts(seconds_ago: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_foo(
    name: str,
    namespace: str = "ns",
    *,
    replicas: int = 2,
    labels: dict[str, str] | None = None,
    generation: int = 1,
    observed: int | None = 1,
    uid: str | None = None,
) -> dict[str, Any]:
    """A Foo made ten minutes ago; with ``observed``, its controller reported it Ready two minutes ago."""
    status: dict[str, Any] = {}
    if observed is not None:
        status = {
            "observedGeneration": observed,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "ReplicasAvailable",
                    "message": "",
                    "lastTransitionTime": ts(120),
                }
            ],
        }
    built = foo_v1(
        name,
        namespace=namespace,
        image="nginx:1.27",
        replicas=replicas,
        uid=uid or f"uid-{name}",
        generation=generation,
        labels=labels or {},
        status=status,
    )
    built["metadata"]["creationTimestamp"] = ts(600)
    return built


def rolled_out(foo: dict[str, Any], *, available: int | None = None) -> dict[str, Any]:
    """The Deployment of ``foo``, rolled out, with ``available`` of its replicas available (all by default)."""
    replicas = foo["spec"]["replicas"]
    available = replicas if available is None else available
    return deployment_of(
        foo,
        generation=1,
        status={
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": available,
            "availableReplicas": available,
        },
    )


class FakeRbac:
    """SubjectAccessReview stand-in: (user, verb, resource, namespace, name) rules; name "" is any name.

    As RBAC's `resourceNames`: a rule naming objects allows a request only about one of them, so a
    list is allowed by it only when a field selector pins that name.
    """

    def __init__(self) -> None:
        self.allowed: set[tuple[str, str, str, str, str]] = set()
        self.asked: list[tuple[UserInfo, RequestInfo]] = []
        self.broken: Exception | None = None  # the SubjectAccessReview itself fails with this

    def allow(self, user: str, verb: str, resource: str, namespace: str = "ns", name: str = "") -> None:
        self.allowed.add((user, verb, resource, namespace, name))

    async def __call__(self, user: UserInfo, info: RequestInfo) -> Decision:
        self.asked.append((user, info))
        if self.broken is not None:
            raise self.broken
        if "system:masters" in user.groups:
            return Decision(True)
        rule = (user.name, info.verb, info.resource, info.namespace)
        return Decision((*rule, "") in self.allowed or bool(info.name) and (*rule, info.name) in self.allowed)


@dataclass
class Insights:
    """A running server and a caller that presents a chosen certificate and user headers."""

    url: str
    view: HealthView
    rbac: FakeRbac
    contexts: dict[str | None, ssl.SSLContext] = field(default_factory=dict)
    session: aiohttp.ClientSession | None = None

    async def call(
        self,
        path: str,
        *,
        method: str = "GET",
        cert: str | None = "aggregator",
        user: str | None = "alice",
        groups: tuple[str, ...] = ("system:authenticated",),
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, CIMultiDict[str], bytes]:
        sent = dict(headers or {})
        if user is not None:
            sent["X-Remote-User"] = user
        assert self.session is not None
        all_headers = [*sent.items(), *(("X-Remote-Group", g) for g in groups)]
        async with self.session.request(
            method,
            self.url + path,
            ssl=self.contexts[cert],
            headers=all_headers,
            data=orjson.dumps(body) if body is not None else None,
        ) as response:
            return response.status, CIMultiDict(response.headers), await response.read()

    async def json(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = await self.call(path, **kwargs)
        return status, orjson.loads(body)


def _client_context(pki: Pki, identity: str | None, tmp: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pki.serving_ca.cert_pem.decode())
    if identity is not None:
        pair = pki.identities[identity]
        (tmp / f"{identity}.crt").write_bytes(pair.cert_pem)
        (tmp / f"{identity}.key").write_bytes(pair.key_pem)
        context.load_cert_chain(tmp / f"{identity}.crt", tmp / f"{identity}.key")
    return context


@pytest.fixture
def view() -> HealthView:
    return HealthView.empty(instance=1)


@pytest.fixture
async def insights(
    pki: Pki, view: HealthView, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[Insights]:
    caplog.set_level(logging.DEBUG, logger="insights")  # every log call runs, as in production
    rbac = FakeRbac()
    app = build_app(
        AggregatedConfig(
            requestheader=RequestHeaderConfig(
                client_ca_pem=pki.front_proxy_ca.cert_pem, allowed_names=("front-proxy-client",)
            ),
            authorizer=rbac,
            view=view,
            bookmark_interval=0.2,
            authorization_allowed_ttl=0,
            authorization_denied_ttl=0,
        )
    )
    (tmp_path / "tls.crt").write_bytes(pki.serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(pki.serving.key_pem)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server_context.load_verify_locations(cadata=(pki.front_proxy_ca.cert_pem + pki.other_ca.cert_pem).decode())
    server_context.verify_mode = ssl.CERT_OPTIONAL
    server = TestServer(app)
    await server.start_server(ssl=server_context)
    client = Insights(url=f"https://127.0.0.1:{server.port}", view=view, rbac=rbac)
    client.contexts = {name: _client_context(pki, name, tmp_path) for name in (None, *pki.identities)}
    async with aiohttp.ClientSession() as session:
        client.session = session
        yield client
    await server.close()


def add(view: HealthView, *objects: dict[str, Any]) -> None:
    """Put objects into the view's stores and tell it, as the informers would."""
    stores = {
        "Foo": ("foos", view.foos),
        "Deployment": ("deployments", view.deployments),
        "Pod": ("pods", view.pods),
        "Event": ("events", view.events),
    }
    for obj in objects:
        kind, store = stores[obj["kind"]]
        meta = obj["metadata"]
        old = store.put(f"{meta['namespace']}/{meta['name']}", obj)
        on_add, on_update, _ = view.handlers(kind)
        on_add(obj) if old is None else on_update(old, obj)


def remove(view: HealthView, obj: dict[str, Any]) -> None:
    kind, store = {"Foo": ("foos", view.foos), "Deployment": ("deployments", view.deployments)}[obj["kind"]]
    store.remove(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
    view.handlers(kind)[2](obj)


Call = Callable[..., Any]


# ---- authentication -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cert, user",
    [
        (None, "alice"),  # no client certificate at all (kubectl straight to the service)
        ("other-ca", "alice"),  # a certificate the TLS layer took, from a CA requestheader does not trust
        ("not-allowed-cn", "alice"),  # the right CA, but a CN outside requestheader-allowed-names
        ("aggregator", None),  # the aggregator's certificate without X-Remote-User
    ],
)
async def test_requests_without_front_proxy_identity_are_unauthorized(
    insights: Insights, cert: str | None, user: str | None
) -> None:
    for path in ("/apis", f"{GV}/namespaces/ns/foohealths", "/openapi/v2"):
        status, body = await insights.json(path, cert=cert, user=user)
        assert (status, body["reason"], body["message"], body["kind"]) == (
            401,
            "Unauthorized",
            "Unauthorized",
            "Status",
        )
    assert insights.rbac.asked == []


async def test_user_groups_and_extra_come_from_the_headers(insights: Insights) -> None:
    insights.rbac.allow("alice", "list", "foohealths")
    status, _ = await insights.json(
        f"{GV}/namespaces/ns/foohealths",
        groups=("dev", "system:authenticated"),
        headers={"X-Remote-Extra-Scopes": "a", "X-Remote-Extra-Example.com%2fteam": "b"},
    )
    assert status == 200
    user, info = insights.rbac.asked[-1]
    assert (user.name, user.groups) == ("alice", ("dev", "system:authenticated"))
    assert dict(user.extra) == {"scopes": ("a",), "example.com/team": ("b",)}
    assert (info.verb, info.resource, info.namespace, info.api_group) == (
        "list",
        "foohealths",
        "ns",
        "insights.samplecontroller.k8s.io",
    )


# ---- authorization --------------------------------------------------------------------------------------


async def test_user_without_rbac_is_forbidden_in_kubernetes_words(insights: Insights, view: HealthView) -> None:
    add(view, ready_foo("x"))
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths/x", user="bob")
    assert status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'foohealths.insights.samplecontroller.k8s.io "x" is forbidden: User "bob" cannot get resource "foohealths" '
        'in API group "insights.samplecontroller.k8s.io" in the namespace "ns"'
    )
    assert body["details"] == {"name": "x", "group": "insights.samplecontroller.k8s.io", "kind": "foohealths"}
    insights.rbac.allow("bob", "get", "foohealths")
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths/x", user="bob")
    assert (status, body["kind"]) == (200, "FooHealth")


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


@pytest.mark.parametrize(
    "field_selector, status, listed, asked_about",
    [
        ("", 403, None, ""),
        ("metadata.name=allowed", 200, ["allowed"], "allowed"),
        ("metadata.name==allowed", 200, ["allowed"], "allowed"),
        # Parses as apimachinery parses it (no parentheses in field selectors): two terms, the name pinned.
        ("metadata.namespace!=(,metadata.name=allowed", 200, ["allowed"], "allowed"),
        # Does not parse ("y)" has no operator): nothing pinned, so the SubjectAccessReview is about every name.
        ("metadata.namespace!=(x,metadata.name=allowed,y)", 403, None, ""),
        ("metadata.name=allowed,metadata.name=secret", 200, [], "allowed"),
        ("metadata.name=allowed\\,x", 403, None, "allowed,x"),
        ("metadata.name!=allowed", 403, None, ""),
    ],
)
async def test_a_user_allowed_one_name_lists_that_one_only_whatever_the_field_selector(
    insights: Insights, view: HealthView, field_selector: str, status: int, listed: list[str] | None, asked_about: str
) -> None:
    add(view, ready_foo("allowed"), ready_foo("secret"))
    insights.rbac.allow("bob", "list", "foohealths", name="allowed")
    got, body = await insights.json(
        f"{GV}/namespaces/ns/foohealths?fieldSelector={quote(field_selector, safe='')}", user="bob"
    )
    assert got == status, body
    if listed is not None:
        assert names(body) == listed
    else:
        assert body["reason"] == "Forbidden"
    assert insights.rbac.asked[-1][1].name == asked_about


async def test_a_failed_subject_access_review_is_a_500_that_tells_the_caller_nothing_of_why(
    insights: Insights, caplog: pytest.LogCaptureFixture
) -> None:
    insights.rbac.broken = RuntimeError(
        "POST https://10.96.0.1:443/apis/authorization.k8s.io/v1/subjectaccessreviews: "
        "503 etcdserver: leader changed, Audit-Id: 1f2e"
    )
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths", user="bob")
    assert (status, body["kind"], body["reason"]) == (500, "Status", "InternalError")
    assert body["message"] == "Internal error occurred: the request could not be authorized; see the server's log"
    [logged] = [r for r in caplog.records if r.getMessage() == "authorization failed"]
    assert "leader changed" in logged.error  # type: ignore[attr-defined]


async def test_listing_across_namespaces_is_authorized_at_cluster_scope(insights: Insights) -> None:
    status, body = await insights.json(f"{GV}/foohealths", user="bob")
    assert status == 403
    assert body["message"].endswith(
        'cannot list resource "foohealths" in API group "insights.samplecontroller.k8s.io" at the cluster scope'
    )


async def test_discovery_and_openapi_need_authentication_only(insights: Insights) -> None:
    for path in (
        "/apis",
        "/apis/insights.samplecontroller.k8s.io",
        GV,
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/apis/insights.samplecontroller.k8s.io/v1alpha1",
    ):
        status, _, _ = await insights.call(path, user="system:kube-aggregator", groups=("system:masters",))
        assert status == 200, path
        status, _, _ = await insights.call(path, user="nobody-with-rbac", groups=())
        assert status == 200, path
    assert insights.rbac.asked == []


async def test_unsupported_verbs_are_method_not_allowed_after_authorization(insights: Insights) -> None:
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths/x", method="DELETE", user="bob")
    assert (status, body["reason"]) == (403, "Forbidden")
    insights.rbac.allow("bob", "delete", "foohealths")
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths/x", method="DELETE", user="bob")
    assert (status, body["reason"], body["code"]) == (405, "MethodNotAllowed", 405)
    status, body = await insights.json(f"{GV}/namespaces/ns/fooreviews", user="root", groups=("system:masters",))
    assert (status, body["reason"]) == (405, "MethodNotAllowed")


async def test_unknown_resources_are_not_found(insights: Insights) -> None:
    for path in (
        f"{GV}/namespaces/ns/bars",
        f"{GV}/namespaces/ns/foohealths/x/status",
        "/apis/other.group",
        "/apis/insights.samplecontroller.k8s.io/v9",
    ):
        status, body = await insights.json(path, user="root", groups=("system:masters",))
        assert (status, body["reason"]) == (404, "NotFound"), path


# ---- discovery and OpenAPI ----------------------------------------------------------------------------------


async def test_legacy_discovery_lists_both_resources(insights: Insights) -> None:
    status, groups = await insights.json("/apis")
    assert status == 200 and groups["kind"] == "APIGroupList"
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "insights.samplecontroller.k8s.io/v1alpha1"
    status, resources = await insights.json(GV)
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["foohealths"]["verbs"] == ["get", "list", "watch"] and by_name["foohealths"]["namespaced"]
    assert by_name["fooreviews"] == {
        "name": "fooreviews",
        "singularName": "fooreview",
        "namespaced": True,
        "kind": "FooReview",
        "verbs": ["create"],
    }


async def test_aggregated_discovery_v2_answers_with_its_media_type(insights: Insights) -> None:
    accept = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    )
    status, headers, body = await insights.call("/apis", headers={"Accept": accept})
    assert status == 200
    assert headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    document = orjson.loads(body)
    assert document["kind"] == "APIGroupDiscoveryList" and document["apiVersion"] == "apidiscovery.k8s.io/v2"
    version = document["items"][0]["versions"][0]
    assert {r["resource"]: r["scope"] for r in version["resources"]} == {
        "foohealths": "Namespaced",
        "fooreviews": "Namespaced",
    }


async def test_openapi_v3_index_points_at_a_content_addressed_document(insights: Insights) -> None:
    _, index = await insights.json("/openapi/v3")
    url = index["paths"]["apis/insights.samplecontroller.k8s.io/v1alpha1"]["serverRelativeURL"]
    status, headers, body = await insights.call(url)
    assert status == 200 and "immutable" in headers["Cache-Control"]
    schemas = orjson.loads(body)["components"]["schemas"]
    health = schemas["io.k8s.samplecontroller.insights.v1alpha1.FooHealth"]
    assert health["x-kubernetes-group-version-kind"] == [
        {"group": "insights.samplecontroller.k8s.io", "version": "v1alpha1", "kind": "FooHealth"}
    ]
    status, _, _ = await insights.call(url, headers={"If-None-Match": headers["ETag"]})
    assert status == 304


# ---- foohealths ---------------------------------------------------------------------------------------------


async def test_get_returns_the_live_health_and_404_names_the_missing_one(insights: Insights, view: HealthView) -> None:
    foo_obj = ready_foo("web", replicas=3)
    add(view, foo_obj, rolled_out(foo_obj, available=3))
    insights.rbac.allow("alice", "get", "foohealths")
    status, health = await insights.json(f"{GV}/namespaces/ns/foohealths/web")
    assert status == 200
    assert health["status"]["health"] == "Healthy"
    assert health["status"]["availableReplicas"] == 3
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths/nope")
    assert status == 404
    assert body["message"] == 'foohealths.insights.samplecontroller.k8s.io "nope" not found'
    assert body["details"] == {"name": "nope", "group": "insights.samplecontroller.k8s.io", "kind": "foohealths"}


async def test_list_filters_by_namespace_and_label_selector(insights: Insights, view: HealthView) -> None:
    add(
        view,
        ready_foo("a", labels={"tier": "web"}),
        ready_foo("b", labels={"tier": "db"}),
        ready_foo("c", "other", labels={"tier": "web"}),
    )
    insights.rbac.allow("alice", "list", "foohealths")
    insights.rbac.allow("alice", "list", "foohealths", "")
    _, items = await insights.json(f"{GV}/namespaces/ns/foohealths")
    assert [i["metadata"]["name"] for i in items["items"]] == ["a", "b"]
    assert items["kind"] == "FooHealthList" and items["metadata"]["resourceVersion"]
    _, items = await insights.json(f"{GV}/foohealths?labelSelector=tier%3Dweb")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items["items"]] == [
        ("ns", "a"),
        ("other", "c"),
    ]
    status, body = await insights.json(f"{GV}/foohealths?labelSelector=tier%20in%20web")
    assert (status, body["reason"]) == (400, "BadRequest")


@pytest.mark.parametrize(
    "query, message",
    [
        (
            "labelSelector=a" + "%09" * 2000 + "b",
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("labelSelector=k+in+(" + "+" * 2000 + "x", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("labelSelector=a" + "+" * 4096, "labelSelector is 4097 characters long; at most 4096 are accepted"),
        (
            "fieldSelector=status.health%3DHealthy",
            '"status.health" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        ("fieldSelector=metadata.name%3Da%3Db", "invalid field selector: unescaped character in value: 61"),
    ],
)
async def test_selectors_that_do_not_parse_are_bad_requests_in_apimachinerys_words(
    insights: Insights, query: str, message: str
) -> None:
    insights.rbac.allow("alice", "list", "foohealths")
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths?{query}")
    assert (status, body["kind"], body["reason"], body["message"]) == (400, "Status", "BadRequest", message)


async def test_list_pages_with_limit_and_continue(insights: Insights, view: HealthView) -> None:
    add(view, *(ready_foo(f"f{i}") for i in range(5)))
    insights.rbac.allow("alice", "list", "foohealths")
    _, page = await insights.json(f"{GV}/namespaces/ns/foohealths?limit=2")
    names = [i["metadata"]["name"] for i in page["items"]]
    while page["metadata"].get("continue"):
        _, page = await insights.json(f"{GV}/namespaces/ns/foohealths?limit=2&continue={page['metadata']['continue']}")
        names += [i["metadata"]["name"] for i in page["items"]]
    assert names == ["f0", "f1", "f2", "f3", "f4"]


async def test_table_has_on_call_columns_and_wide_ones_at_priority_one(insights: Insights, view: HealthView) -> None:
    foo_obj = ready_foo("web", replicas=3)
    add(view, foo_obj, rolled_out(foo_obj, available=1))
    insights.rbac.allow("alice", "list", "foohealths")
    status, headers, body = await insights.call(
        f"{GV}/namespaces/ns/foohealths", headers={"Accept": f"{TABLE},application/json"}
    )
    assert status == 200 and headers["Content-Type"] == TABLE
    document = orjson.loads(body)
    assert document["kind"] == "Table"
    columns = {c["name"]: c["priority"] for c in document["columnDefinitions"]}
    assert [n for n, p in columns.items() if p == 0] == [
        "Name",
        "Health",
        "Ready",
        "Up-to-date",
        "Available",
        "Rollout",
        "Last Sync",
        "Last Error",
        "Age",
    ]
    assert {"Deployment", "Image", "Restarts", "Message"} <= {n for n, p in columns.items() if p == 1}
    row = document["rows"][0]
    assert row["cells"][:6] == ["web", "Progressing", "1/3", 3, 1, "Progressing"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "web"


async def test_unsupported_accept_is_not_acceptable(insights: Insights) -> None:
    insights.rbac.allow("alice", "list", "foohealths")
    status, body = await insights.json(
        f"{GV}/namespaces/ns/foohealths", headers={"Accept": "application/vnd.kubernetes.protobuf"}
    )
    assert (status, body["reason"]) == (406, "NotAcceptable")


async def test_foohealths_are_unavailable_until_the_caches_sync(insights: Insights, view: HealthView) -> None:
    view._synced = lambda: False  # noqa: SLF001 - the informers' "not yet" as the view sees it
    insights.rbac.allow("alice", "list", "foohealths")
    status, body = await insights.json(f"{GV}/namespaces/ns/foohealths")
    assert (status, body["reason"]) == (503, "ServiceUnavailable")


# ---- watch ------------------------------------------------------------------------------------------------------


async def _read_events(response: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    events = []
    while len(events) < count:
        line = await asyncio.wait_for(response.content.readline(), 5)
        assert line, f"stream ended after {events}"
        events.append(orjson.loads(line))
    return events


async def _watch(insights: Insights, query: str, headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
    assert insights.session is not None
    return await insights.session.get(
        f"{insights.url}{GV}/namespaces/ns/foohealths?watch=1&{query}",
        ssl=insights.contexts["aggregator"],
        headers={"X-Remote-User": "alice", **(headers or {})},
    )


async def test_watch_streams_added_modified_deleted_as_the_cluster_changes(
    insights: Insights, view: HealthView
) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    foo_obj = ready_foo("web", replicas=2)
    add(view, foo_obj)
    response = await _watch(insights, "")
    try:
        assert response.status == 200
        [added] = await _read_events(response, 1)
        assert added["type"] == "ADDED" and added["object"]["status"]["rollout"] == "Missing"
        add(view, rolled_out(foo_obj, available=2))
        [modified] = await _read_events(response, 1)
        assert modified["type"] == "MODIFIED" and modified["object"]["status"]["health"] == "Healthy"
        assert int(modified["object"]["metadata"]["resourceVersion"]) > int(
            added["object"]["metadata"]["resourceVersion"]
        )
        remove(view, foo_obj)
        [deleted] = await _read_events(response, 1)
        assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["name"] == "web"
    finally:
        response.close()


async def test_watch_resumes_from_a_resource_version_and_old_ones_expire(insights: Insights, view: HealthView) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    insights.rbac.allow("alice", "list", "foohealths")
    add(view, ready_foo("a"))
    _, listed = await insights.json(f"{GV}/namespaces/ns/foohealths")
    add(view, ready_foo("b"))
    response = await _watch(insights, f"resourceVersion={listed['metadata']['resourceVersion']}")
    try:
        [event] = await _read_events(response, 1)
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
    finally:
        response.close()
    response = await _watch(insights, "resourceVersion=1")
    try:
        [event] = await _read_events(response, 1)
        assert event["type"] == "ERROR"
        assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    finally:
        response.close()


async def test_watch_label_selector_turns_leaving_objects_into_deletions(insights: Insights, view: HealthView) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    add(view, ready_foo("a", labels={"team": "x"}))
    response = await _watch(insights, "labelSelector=team%3Dx")
    try:
        assert (await _read_events(response, 1))[0]["type"] == "ADDED"
        add(view, ready_foo("a", labels={"team": "y"}))
        [event] = await _read_events(response, 1)
        assert event["type"] == "DELETED"
    finally:
        response.close()


async def test_watch_sends_bookmarks_and_the_initial_events_end_marker(insights: Insights, view: HealthView) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    add(view, ready_foo("a"))
    response = await _watch(
        insights, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    )
    try:
        added, end, idle = await _read_events(response, 3)
        assert added["type"] == "ADDED"
        assert end["type"] == "BOOKMARK"
        assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert idle["type"] == "BOOKMARK"
    finally:
        response.close()


async def test_a_metadata_watch_gets_its_bookmarks_as_partial_object_metadata(
    insights: Insights, view: HealthView
) -> None:
    # client-go's metadata informer decodes every watch object as PartialObjectMetadata: a
    # FooHealth-kind bookmark made its reflector give up the watch-list stream (hack/list-rules).
    insights.rbac.allow("alice", "watch", "foohealths")
    add(view, ready_foo("a"))
    response = await _watch(
        insights,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        headers={"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"},
    )
    try:
        added, end = await _read_events(response, 2)
        assert added["object"]["kind"] == "PartialObjectMetadata"
        assert end["type"] == "BOOKMARK"
        assert (end["object"]["kind"], end["object"]["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
        assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    finally:
        response.close()


async def test_watch_as_table_sends_column_definitions_only_first(insights: Insights, view: HealthView) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    add(view, ready_foo("a"), ready_foo("b"))
    response = await _watch(insights, "", headers={"Accept": TABLE})
    try:
        first, second = await _read_events(response, 2)
        assert first["object"]["kind"] == "Table" and first["object"]["columnDefinitions"]
        assert second["object"]["columnDefinitions"] == []
        assert second["object"]["rows"][0]["cells"][0] == "b"
    finally:
        response.close()


async def test_watch_ends_when_its_timeout_passes(insights: Insights) -> None:
    insights.rbac.allow("alice", "watch", "foohealths")
    response = await _watch(insights, "timeoutSeconds=1")
    try:
        assert await asyncio.wait_for(response.content.read(), 5) == b""
    finally:
        response.close()


# ---- fooreviews --------------------------------------------------------------------------------------------------


def review(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "insights.samplecontroller.k8s.io/v1alpha1",
        "kind": "FooReview",
        "metadata": {"name": "check"},
        "spec": {"object": obj, **spec},
    }


async def test_review_of_a_good_v1alpha1_foo_returns_the_defaulted_v1_object(insights: Insights) -> None:
    insights.rbac.allow("alice", "create", "fooreviews")
    good = {
        "apiVersion": "samplecontroller.k8s.io/v1alpha1",
        "kind": "Foo",
        "metadata": {"name": "x"},
        "spec": {"deploymentName": "x-nginx"},
    }
    status, answer = await insights.json(f"{GV}/namespaces/ns/fooreviews", method="POST", body=review(good))
    assert status == 201
    verdict = answer["status"]
    assert verdict["allowed"] is True
    assert verdict["object"]["apiVersion"] == "samplecontroller.k8s.io/v1"
    assert verdict["object"]["spec"] == {"deployment": {"name": "x-nginx", "image": "nginx:latest"}, "replicas": 1}
    assert verdict["warnings"] == [
        "samplecontroller.k8s.io/v1alpha1 Foo is deprecated; use samplecontroller.k8s.io/v1 Foo"
    ]
    assert answer["metadata"]["namespace"] == "ns" and answer["spec"]["object"] == good


async def test_review_of_a_bad_foo_lists_every_field_error(insights: Insights) -> None:
    insights.rbac.allow("alice", "create", "fooreviews")
    bad = {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": "x"},
        "spec": {"replicas": 11},
    }
    status, answer = await insights.json(f"{GV}/namespaces/ns/fooreviews", method="POST", body=review(bad))
    assert status == 201
    verdict = answer["status"]
    assert (verdict["allowed"], verdict["code"], verdict["reason"]) == (False, 422, "Invalid")
    assert [c["field"] for c in verdict["causes"]] == ["spec.deployment.name", "spec.replicas"]


async def test_malformed_reviews_are_bad_requests(insights: Insights) -> None:
    insights.rbac.allow("alice", "create", "fooreviews")
    status, _, body = await insights.call(
        f"{GV}/namespaces/ns/fooreviews", method="POST", headers={"Content-Type": "application/json"}, body=None
    )
    assert status == 400
    status, answer = await insights.json(
        f"{GV}/namespaces/ns/fooreviews", method="POST", body={"apiVersion": "v1", "kind": "Pod"}
    )
    assert (status, answer["reason"]) == (400, "BadRequest")
    status, answer = await insights.json(
        f"{GV}/namespaces/ns/fooreviews", method="POST", body={**review({}), "spec": {}}
    )
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["details"]["causes"][0]["field"] == "spec.object"
