"""FooHealth lists over real HTTPS: resourceVersion, resourceVersionMatch, limit and continue as
kube-apiserver answers them, invalid values refused before any head, and lists never built whole."""

from __future__ import annotations

import base64
import tracemalloc
from typing import Any

import orjson
import pytest

from insights import listing
from insights.view import HealthView
from tests.component.test_insights_api import (  # noqa: F401 (fixtures)
    GV,
    TABLE,
    Insights,
    add,
    insights,
    pki,
    ready_foo,
    remove,
    view,
)

LIST = f"{GV}/namespaces/ns/foohealths"


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


@pytest.fixture
def reader(insights: Insights) -> Insights:
    for verb in ("get", "list", "watch"):
        insights.rbac.allow("alice", verb, "foohealths")
    return insights


async def test_exact_list_is_the_state_at_that_version_after_a_change(reader: Insights, view: HealthView) -> None:
    add(view, ready_foo("a", replicas=1))
    _, before = await reader.json(LIST)
    add(view, ready_foo("a", replicas=5), ready_foo("b"))
    rv = before["metadata"]["resourceVersion"]
    status, exact = await reader.json(f"{LIST}?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert status == 200
    assert exact["metadata"]["resourceVersion"] == rv
    assert exact["items"] == before["items"]
    _, now = await reader.json(f"{LIST}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan")
    assert names(now) == ["a", "b"] and now["items"][0]["status"]["desiredReplicas"] == 5
    assert int(now["metadata"]["resourceVersion"]) > int(rv)


async def test_exact_list_at_a_version_no_longer_held_is_410_expired(reader: Insights, view: HealthView) -> None:
    view.history_limit = 2
    add(view, ready_foo("a"))
    _, before = await reader.json(LIST)
    add(view, *(ready_foo(f"b{i}") for i in range(3)))
    rv = before["metadata"]["resourceVersion"]
    status, body = await reader.json(f"{LIST}?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert (status, body["reason"], body["message"]) == (410, "Expired", listing.EXPIRED)


async def test_a_version_with_a_limit_is_read_exactly_as_kube_apiserver_reads_it(
    reader: Insights, view: HealthView
) -> None:
    add(view, ready_foo("a"))
    _, before = await reader.json(LIST)
    add(view, ready_foo("b"))
    rv = before["metadata"]["resourceVersion"]
    _, paged = await reader.json(f"{LIST}?resourceVersion={rv}&limit=10")
    assert (names(paged), paged["metadata"]["resourceVersion"]) == (["a"], rv)
    _, unpaged = await reader.json(f"{LIST}?resourceVersion={rv}")
    assert names(unpaged) == ["a", "b"]


async def test_match_without_resource_version_is_422_in_apimachinerys_words(reader: Insights) -> None:
    status, body = await reader.json(f"{LIST}?resourceVersionMatch=NotOlderThan")
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden unless resourceVersion is provided"
    )
    assert body["details"] == {
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                "field": "resourceVersionMatch",
            }
        ],
    }


async def test_a_version_the_server_has_not_reached_waits_then_is_504_too_large(
    reader: Insights, view: HealthView
) -> None:
    add(view, ready_foo("a"))
    current = view.version
    asked = current + 1000
    for path in (f"{LIST}?resourceVersion={asked}", f"{LIST}/a?resourceVersion={asked}"):
        status, body = await reader.json(path)
        assert (status, body["reason"], body["message"]) == (
            504,
            "Timeout",
            f"Timeout: Too large resource version: {asked}, current: {current}",
        )
        assert body["details"] == {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }


async def test_pages_come_from_the_first_pages_snapshot(reader: Insights, view: HealthView) -> None:
    add(view, *(ready_foo(f"f{i}") for i in (0, 2, 4)))
    _, first = await reader.json(f"{LIST}?limit=2")
    assert names(first) == ["f0", "f2"]
    assert first["metadata"]["remainingItemCount"] == 1
    add(view, ready_foo("f3"))  # created between the pages
    remove(view, ready_foo("f4"))  # and deleted
    _, second = await reader.json(f"{LIST}?limit=2&continue={first['metadata']['continue']}")
    assert names(second) == ["f4"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert "continue" not in second["metadata"] and "remainingItemCount" not in second["metadata"]


async def test_selected_pages_say_no_remaining_count(reader: Insights, view: HealthView) -> None:
    add(view, *(ready_foo(f"f{i}", labels={"t": "x"}) for i in range(3)))
    _, first = await reader.json(f"{LIST}?limit=1&labelSelector=t%3Dx")
    assert names(first) == ["f0"] and first["metadata"]["continue"]
    assert "remainingItemCount" not in first["metadata"]


async def test_a_continue_token_whose_snapshot_is_gone_is_410_with_a_token_for_the_rest(
    reader: Insights, view: HealthView
) -> None:
    view.history_limit = 2
    add(view, *(ready_foo(f"f{i}") for i in range(3)))
    _, first = await reader.json(f"{LIST}?limit=1")
    add(view, *(ready_foo(f"g{i}") for i in range(3)))
    status, body = await reader.json(f"{LIST}?limit=1&continue={first['metadata']['continue']}")
    assert (status, body["reason"], body["message"]) == (410, "Expired", listing.CONTINUE_EXPIRED)
    _, rest = await reader.json(f"{LIST}?continue={body['metadata']['continue']}")
    assert names(rest) == ["f1", "f2", "g0", "g1", "g2"]
    assert rest["metadata"]["resourceVersion"] == str(view.version)


def _token(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(data)).decode().rstrip("=")


@pytest.mark.parametrize(
    "query, code, message",
    [
        ("resourceVersion=abc", 400, 'parsing "abc": invalid syntax'),
        ("resourceVersion=%C2%B2", 400, 'parsing "²": invalid syntax'),  # ² is str.isdigit()
        ("resourceVersion=%D9%A3", 400, 'parsing "٣": invalid syntax'),  # ٣ is int() 3
        ("resourceVersion=-1", 400, 'parsing "-1": invalid syntax'),
        ("resourceVersion=18446744073709551616", 400, 'parsing "18446744073709551616": value out of range'),
        ("limit=abc", 400, 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("continue=%25%25%25", 400, "continue key is not valid: illegal base64 data at input byte 0"),
        ("continue=" + _token({"v": "v2", "rv": 1, "start": "a"}), 400, "server does not recognize"),
        ("continue=" + _token({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"}), 400, "incorrect encoded start"),
        (
            "continue=" + _token({"v": "meta.k8s.io/v1", "rv": 5, "start": "a"}) + "&resourceVersion=5",
            400,
            "specifying resource version is not allowed when using continue",
        ),
        ("resourceVersion=1&resourceVersionMatch=Newest", 422, 'Unsupported value: "Newest"'),
        ("resourceVersion=0&resourceVersionMatch=Exact", 422, 'resourceVersionMatch "exact" is forbidden'),
        ("continue=x&resourceVersionMatch=Exact", 422, "resourceVersionMatch is forbidden when continue is provided"),
    ],
)
async def test_invalid_list_options_are_refused_in_apimachinerys_words(
    reader: Insights, view: HealthView, query: str, code: int, message: str
) -> None:
    add(view, ready_foo("a"))
    status, headers, body = await reader.call(f"{LIST}?{query}")
    document = orjson.loads(body)
    assert (status, document["kind"], document["code"]) == (code, "Status", code)
    assert message in document["message"]
    assert "chunked" not in headers.get("Transfer-Encoding", "")


@pytest.mark.parametrize("rv", ["%C2%B2", "%D9%A3", "abc"])
@pytest.mark.parametrize("path", [LIST, f"{LIST}/a", f"{LIST}?watch=1"])
async def test_resource_versions_that_are_not_ascii_digits_are_400_before_any_head(
    reader: Insights, view: HealthView, path: str, rv: str
) -> None:
    add(view, ready_foo("a"))
    separator = "&" if "?" in path else "?"
    status, _, body = await reader.call(f"{path}{separator}resourceVersion={rv}")
    document = orjson.loads(body)
    assert (status, document["reason"]) == (400, "BadRequest")
    assert document["message"].startswith("invalid resource version: resourceVersion: Invalid value: ")


async def test_tables_are_paged_the_same_way(reader: Insights, view: HealthView) -> None:
    add(view, *(ready_foo(f"f{i}") for i in range(3)))
    status, _, body = await reader.call(f"{LIST}?limit=2", headers={"Accept": TABLE})
    table = orjson.loads(body)
    assert status == 200 and [r["cells"][0] for r in table["rows"]] == ["f0", "f1"]
    assert table["metadata"]["remainingItemCount"] == 1 and table["columnDefinitions"]


async def test_a_large_table_is_streamed_not_built_whole(reader: Insights, view: HealthView) -> None:
    """Issue #25 finding 13: the whole answer was built (and copied) per request."""
    labels = {f"example.com/k{n:04d}": "v" * 63 for n in range(70)}  # ~8 KiB
    add(view, *(ready_foo(f"f{i:04d}", labels=labels) for i in range(600)))
    assert reader.session is not None
    await reader.call(f"{LIST}/f0000")  # the TLS connection's own buffers are made before measuring
    tracemalloc.start()
    try:
        size = 0
        async with reader.session.get(
            f"{reader.url}{LIST}?includeObject=Object",
            ssl=reader.contexts["aggregator"],
            headers={"Accept": TABLE, "X-Remote-User": "alice"},
        ) as response:
            async for chunk in response.content.iter_chunked(16 * 1024):
                size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status == 200 and size > 4_000_000
    assert peak < size / 4, f"{peak} bytes allocated at once for a {size}-byte answer"


async def test_a_head_request_on_a_list_gets_the_head_alone(reader: Insights, view: HealthView) -> None:
    add(view, ready_foo("a"))
    status, headers, body = await reader.call(LIST, method="HEAD")
    assert (status, headers["Content-Type"], body) == (200, "application/json", b"")
