"""What a request asks to do, the SubjectAccessReview that asks the cluster, the 403 it earns, the cache."""

from __future__ import annotations

import asyncio

import pytest

from insights.authn import UserInfo
from insights.authz import (
    CachingAuthorizer,
    Decision,
    RequestInfo,
    decision_of,
    forbidden,
    request_info,
    subject_access_review,
)
from insights.cluster import sar_authorizer
from tests.clock import FakeClock

G = "insights.samplecontroller.k8s.io"
GV = f"/apis/{G}/v1alpha1"
BOB = UserInfo("bob", ("dev", "system:authenticated"), {"scopes": ("a", "b")}, uid="42")


@pytest.mark.parametrize(
    "method, path, query, expected",
    [
        ("GET", f"{GV}/namespaces/ns/foohealths/x", {}, ("get", "ns", "foohealths", "x", "x", "")),
        ("GET", f"{GV}/namespaces/ns/foohealths", {}, ("list", "ns", "foohealths", "", "", "")),
        ("GET", f"{GV}/namespaces/ns/foohealths", {"watch": "true"}, ("watch", "ns", "foohealths", "", "", "")),
        (
            "GET",
            f"{GV}/namespaces/ns/foohealths",
            {"watch": "1", "fieldSelector": "metadata.name=x"},
            ("watch", "ns", "foohealths", "x", "", ""),
        ),
        ("GET", f"{GV}/foohealths", {}, ("list", "", "foohealths", "", "", "")),
        ("GET", f"{GV}/watch/namespaces/ns/foohealths", {}, ("watch", "ns", "foohealths", "", "", "")),
        ("POST", f"{GV}/namespaces/ns/fooreviews", {}, ("create", "ns", "fooreviews", "", "", "")),
        ("DELETE", f"{GV}/namespaces/ns/foohealths/x", {}, ("delete", "ns", "foohealths", "x", "x", "")),
        ("DELETE", f"{GV}/namespaces/ns/foohealths", {}, ("deletecollection", "ns", "foohealths", "", "", "")),
        ("PATCH", f"{GV}/namespaces/ns/foohealths/x/status", {}, ("patch", "ns", "foohealths", "x", "x", "status")),
        ("PUT", f"{GV}/namespaces/ns/foohealths/x", {}, ("update", "ns", "foohealths", "x", "x", "")),
    ],
)
def test_resource_requests_are_parsed_like_kube_apiserver(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    info = request_info(method, path, query)
    assert info.resource_request and (info.api_group, info.api_version) == (G, "v1alpha1")
    assert (info.verb, info.namespace, info.resource, info.name, info.path_name, info.subresource) == expected


@pytest.mark.parametrize("path", ["/apis", f"/apis/{G}", GV, "/openapi/v2", "/openapi/v3/apis/x/v1", "/healthz"])
def test_discovery_and_openapi_are_non_resource_requests(path: str) -> None:
    info = request_info("GET", path, {})
    assert not info.resource_request and info.verb == "get" and info.path == path


def test_the_review_carries_user_groups_extra_uid_and_the_attributes() -> None:
    review = subject_access_review(BOB, request_info("GET", f"{GV}/namespaces/ns/foohealths/x", {}))
    assert review == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "bob",
            "groups": ["dev", "system:authenticated"],
            "extra": {"scopes": ["a", "b"]},
            "uid": "42",
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": G,
                "version": "v1alpha1",
                "resource": "foohealths",
                "name": "x",
            },
        },
    }
    review = subject_access_review(UserInfo("carol"), request_info("GET", "/openapi/v2", {}))
    assert review["spec"] == {
        "user": "carol",
        "groups": [],
        "nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"},
    }


@pytest.mark.parametrize(
    "status, decision",
    [
        ({"allowed": True}, Decision(True)),
        ({"allowed": False}, Decision(False)),
        ({"allowed": False, "reason": "no RBAC policy matched"}, Decision(False, "no RBAC policy matched")),
        ({"allowed": True, "denied": True}, Decision(False)),
        ({}, Decision(False)),
    ],
)
def test_decision_of_a_review(status: dict[str, object], decision: Decision) -> None:
    assert decision_of({"status": status}) == decision


@pytest.mark.parametrize(
    "method, path, query, message",
    [
        (
            "GET",
            f"{GV}/namespaces/ns/foohealths/x",
            {},
            f'foohealths.{G} "x" is forbidden: User "bob" cannot get resource "foohealths" in API group "{G}" '
            f'in the namespace "ns"',
        ),
        (
            "GET",
            f"{GV}/namespaces/ns/foohealths",
            {},
            f'foohealths.{G} is forbidden: User "bob" cannot list resource "foohealths" in API group "{G}" '
            f'in the namespace "ns"',
        ),
        (
            "GET",
            f"{GV}/foohealths",
            {"watch": "1"},
            f'foohealths.{G} is forbidden: User "bob" cannot watch resource "foohealths" in API group "{G}" '
            f"at the cluster scope",
        ),
        (
            "PATCH",
            f"{GV}/namespaces/ns/foohealths/x/status",
            {},
            f'foohealths.{G} "x" is forbidden: User "bob" cannot patch resource "foohealths/status" in API group "{G}" '
            f'in the namespace "ns"',
        ),
        ("POST", "/openapi/v2", {}, 'forbidden: User "bob" cannot create path "/openapi/v2"'),
    ],
)
def test_forbidden_reads_like_kube_apiserver(method: str, path: str, query: dict[str, str], message: str) -> None:
    status = forbidden(BOB, request_info(method, path, query))
    assert (status["code"], status["reason"], status["message"]) == (403, "Forbidden", message)


def test_forbidden_appends_the_authorizers_reason() -> None:
    status = forbidden(BOB, request_info("GET", f"{GV}/namespaces/ns/foohealths/x", {}), "denied by policy")
    assert status["message"].endswith('in the namespace "ns": denied by policy')
    assert status["details"] == {"name": "x", "group": G, "kind": "foohealths"}


async def test_decisions_are_cached_for_their_ttl_then_asked_again() -> None:
    clock, asked = FakeClock(100.0), []

    async def authorize(user: UserInfo, info: RequestInfo) -> Decision:
        asked.append(info.verb)
        return Decision(info.verb == "get")

    cached = CachingAuthorizer(authorize, allowed_ttl=10, denied_ttl=5, clock=clock)
    get = request_info("GET", f"{GV}/namespaces/ns/foohealths/x", {})
    listing = request_info("GET", f"{GV}/namespaces/ns/foohealths", {})
    assert (await cached(BOB, get)).allowed and not (await cached(BOB, listing)).allowed
    await cached(BOB, get), await cached(BOB, listing)
    assert asked == ["get", "list"]
    clock.now += 6  # the denial expired, the permission not yet
    await cached(BOB, get), await cached(BOB, listing)
    assert asked == ["get", "list", "list"]
    await cached(UserInfo("bob", ("other",)), get)  # another identity is another question
    assert asked == ["get", "list", "list", "get"]


async def test_identical_questions_in_flight_share_one_review() -> None:
    release = asyncio.Event()
    calls = 0

    async def authorize(user: UserInfo, info: RequestInfo) -> Decision:
        nonlocal calls
        calls += 1
        await release.wait()
        return Decision(True)

    cached = CachingAuthorizer(authorize)
    info = request_info("GET", f"{GV}/namespaces/ns/foohealths", {})
    waiting = [asyncio.ensure_future(cached(BOB, info)) for _ in range(20)]
    await asyncio.sleep(0)
    release.set()
    assert all(d.allowed for d in await asyncio.gather(*waiting))
    assert calls == 1


async def test_a_failed_review_is_not_cached() -> None:
    answers: list[Decision | Exception] = [RuntimeError("apiserver unreachable"), Decision(True)]

    async def authorize(user: UserInfo, info: RequestInfo) -> Decision:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cached = CachingAuthorizer(authorize)
    info = request_info("GET", f"{GV}/namespaces/ns/foohealths", {})
    with pytest.raises(RuntimeError):
        await cached(BOB, info)
    assert (await cached(BOB, info)).allowed


async def test_the_real_authorizer_posts_a_subject_access_review() -> None:
    sent: list[tuple[str, str, dict[str, object]]] = []

    class Client:
        async def request(
            self, method: str, path: str, *, body: dict[str, object], timeout: float
        ) -> dict[str, object]:
            sent.append((method, path, body))
            return {**body, "status": {"allowed": False, "reason": "no binding"}}

    authorize = sar_authorizer(Client())  # type: ignore[arg-type]
    info = request_info("GET", f"{GV}/namespaces/ns/foohealths", {})
    assert await authorize(BOB, info) == Decision(False, "no binding")
    [(method, path, body)] = sent
    assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
    assert body == subject_access_review(BOB, info)


@pytest.mark.parametrize(
    "query, verb, name",
    [
        ({"fieldSelector": "metadata.name=x"}, "list", "x"),
        ({"fieldSelector": "metadata.name==x", "watch": "yes"}, "watch", "x"),  # any value but 0/false is true
        ({"fieldSelector": "metadata.name=x", "watch": "False"}, "list", "x"),
        ({"fieldSelector": "metadata.name!=x"}, "list", ""),
        ({"fieldSelector": "metadata.name=a/b"}, "list", ""),  # not a valid path segment
        ({"fieldSelector": "metadata.name=x\\,y"}, "list", "x,y"),
        # apimachinery splits on unescaped commas only, parentheses mean nothing: the name is pinned...
        ({"fieldSelector": "metadata.namespace!=(,metadata.name=allowed"}, "list", "allowed"),
        # ...and a term without an operator makes the selector fail, so nothing is pinned.
        ({"fieldSelector": "metadata.namespace!=(x,metadata.name=allowed,y)"}, "list", ""),
        # Anything that does not decode as ListOptions pins nothing, as in RequestInfoFactory.
        ({"fieldSelector": "metadata.name=x", "labelSelector": "a in ("}, "list", ""),
        ({"fieldSelector": "metadata.name=x", "limit": "ten"}, "list", ""),
        ({"fieldSelector": "metadata.name=x", "timeoutSeconds": "1.5"}, "list", ""),
    ],
)
def test_a_list_is_about_the_name_its_field_selector_pins_as_kube_apiserver_reads_it(
    query: dict[str, str], verb: str, name: str
) -> None:
    info = request_info("GET", f"{GV}/namespaces/ns/foohealths", query)
    assert (info.verb, info.name, info.path_name) == (verb, name, "")


def test_the_filter_applies_the_very_requirement_authorization_was_asked_about() -> None:
    info = request_info(
        "GET", f"{GV}/namespaces/ns/foohealths", {"fieldSelector": "metadata.namespace!=(,metadata.name=allowed"}
    )
    assert info.name == "allowed"
    assert info.selectors.matches({"metadata": {"name": "allowed", "namespace": "ns"}})
    assert not info.selectors.matches({"metadata": {"name": "secret", "namespace": "ns"}})


def test_a_selector_that_does_not_parse_is_kept_as_the_400_it_earns_after_authorization() -> None:
    info = request_info("GET", f"{GV}/namespaces/ns/foohealths", {"labelSelector": "a" + "\t" * 2000 + "b"})
    assert (info.verb, info.name) == ("list", "")
    assert info.selector_error == "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"


def test_selectors_do_not_split_the_authorization_cache() -> None:
    plain = request_info("GET", f"{GV}/namespaces/ns/foohealths", {})
    selected = request_info("GET", f"{GV}/namespaces/ns/foohealths", {"labelSelector": "tier=web"})
    assert plain == selected and hash(plain) == hash(selected)


def test_a_watch_by_path_is_filtered_by_its_selectors_but_pins_no_name_as_in_kube_apiserver() -> None:
    info = request_info(
        "GET", f"{GV}/watch/namespaces/ns/foohealths", {"labelSelector": "tier=web", "fieldSelector": "metadata.name=x"}
    )
    assert (info.verb, info.name) == ("watch", "")
    assert info.selectors.matches({"metadata": {"name": "x", "namespace": "ns", "labels": {"tier": "web"}}})
    assert not info.selectors.matches({"metadata": {"name": "x", "namespace": "ns", "labels": {"tier": "db"}}})
