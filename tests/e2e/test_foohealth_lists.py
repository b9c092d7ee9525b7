"""FooHealth lists through kube-apiserver, each rule next to kube-apiserver's own answer for ConfigMaps.

resourceVersion (unset, "0", R, R in the future), resourceVersionMatch (Exact, NotOlderThan,
missing its resourceVersion), limit and continue (one snapshot per list, remainingItemCount, a
token whose snapshot is gone) and invalid values: the same request goes to the configmaps of
the namespace and to its foohealths, and the answers must agree. The insights server keeps its
history 5 s here (`--list-history-seconds`), so what expires does so within a test.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from insights import listing
from tests.e2e.test_aggregated_api import GROUP, Insights, _foo, available, insights  # noqa: F401 (fixtures)
from tests.e2e.waiting import wait_for

HISTORY_SECONDS = 5
INSIGHTS_FLAGS = ("--list-history-seconds", str(HISTORY_SECONDS))


def _get(insights: Insights, path: str) -> tuple[int, dict[str, Any]]:
    status, body = insights.plane.get(path)
    return status, json.loads(body)


def _foohealths(namespace: str) -> str:
    return f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foohealths"


def _configmaps(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def _names(body: dict[str, Any]) -> list[str]:
    """The names listed, without the ConfigMap every namespace gets."""
    return [item["metadata"]["name"] for item in body["items"] if item["metadata"]["name"] != "kube-root-ca.crt"]


def _add(insights: Insights, namespace: str, *names: str) -> None:
    """A Foo and a ConfigMap of each name; returns once both lists show them."""
    for name in names:
        insights.kubectl("apply", "-n", namespace, "-f", "-", input=_foo(name, replicas=1))
        insights.kubectl("create", "configmap", name, "-n", namespace)
    for path in (_foohealths(namespace), _configmaps(namespace)):
        wait_for(
            f"{', '.join(names)} in {path}",
            lambda path=path: set(names) <= set(_names(_get(insights, path)[1])),  # type: ignore[misc]
        )


def _both(insights: Insights, namespace: str, query: str) -> tuple[tuple[int, dict[str, Any]], ...]:
    return tuple(_get(insights, f"{path}?{query}") for path in (_configmaps(namespace), _foohealths(namespace)))


def _answer(status: int, body: dict[str, Any]) -> tuple[int, str, str]:
    return status, body.get("reason", ""), body.get("message", "")


@pytest.mark.parametrize(
    "query",
    [
        "resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Newest",
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersion=abc",
        "resourceVersion=%C2%B2",  # ², a digit to Python's str.isdigit
        "resourceVersion=%D9%A3",  # ٣, 3 to Python's int
        "resourceVersion=-1",
        "resourceVersion=18446744073709551616",
        "sendInitialEvents=true",
        "limit=abc",
        "continue=not-a-token",
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NSwic3RhcnQiOiJhIn0&resourceVersion=5",
    ],
)
def test_invalid_list_options_are_answered_as_kube_apiserver_answers_them(
    available: Insights, namespace: str, query: str
) -> None:
    theirs, ours = _both(available, namespace, query)
    assert _answer(*ours)[:2] == _answer(*theirs)[:2] and ours[0] in (400, 422)
    if query.startswith("continue=not-a-token"):  # the detail is Go's JSON decoder's own words
        prefix = "invalid continue token: continue key is not valid: "
        assert ours[1]["message"].startswith(prefix) and theirs[1]["message"].startswith(prefix)
    else:
        assert ours[1]["message"] == theirs[1]["message"]


@pytest.mark.parametrize("rv", ["abc", "%C2%B2", "%D9%A3"])
def test_a_get_with_a_resource_version_that_is_not_digits_is_refused(
    available: Insights, namespace: str, rv: str
) -> None:
    _add(available, namespace, "one")
    status, body = _get(available, f"{_foohealths(namespace)}/one?resourceVersion={rv}")
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith("invalid resource version: resourceVersion: Invalid value: ")


def test_an_exact_list_is_the_state_at_its_version(available: Insights, namespace: str) -> None:
    _add(available, namespace, "a")
    before = {path: _get(available, path)[1] for path in (_configmaps(namespace), _foohealths(namespace))}
    _add(available, namespace, "b")
    for path, listed in before.items():
        rv = listed["metadata"]["resourceVersion"]
        status, exact = _get(available, f"{path}?resourceVersion={rv}&resourceVersionMatch=Exact")
        assert (status, _names(exact), exact["metadata"]["resourceVersion"]) == (200, ["a"], rv), path
        _, newer = _get(available, f"{path}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan")
        assert _names(newer) == ["a", "b"], path
        _, paged = _get(available, f"{path}?resourceVersion={rv}&limit=10")  # a version with a limit is exact
        assert _names(paged) == ["a"], path


def test_a_version_not_reached_yet_is_504_too_large_after_a_wait(available: Insights, namespace: str) -> None:
    for path in (_configmaps(namespace), _foohealths(namespace)):
        rv = int(_get(available, path)[1]["metadata"]["resourceVersion"]) + 1_000_000
        began = time.monotonic()
        status, body = _get(available, f"{path}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan")
        assert (status, body["reason"]) == (504, "Timeout"), path
        assert body["message"].startswith(f"Timeout: Too large resource version: {rv}, current: "), path
        assert [c["reason"] for c in body["details"]["causes"]] == ["ResourceVersionTooLarge"], path
        assert body["details"]["retryAfterSeconds"] == 1, path
        assert time.monotonic() - began >= 2.5, path  # it waited for the version first


def test_every_page_comes_from_the_first_pages_snapshot(available: Insights, namespace: str) -> None:
    _add(available, namespace, "a", "c", "e")
    paths = (_configmaps(namespace), _foohealths(namespace))
    first = {path: _get(available, f"{path}?limit=2")[1] for path in paths}
    _add(available, namespace, "d")  # created between the pages
    for path, page in first.items():
        assert page["metadata"]["continue"] and page["metadata"]["remainingItemCount"] >= 1, path
        _, rest = _get(available, f"{path}?limit=10&continue={page['metadata']['continue']}")
        assert rest["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"], path
        assert sorted(_names(page) + _names(rest)) == ["a", "c", "e"], path
        assert "remainingItemCount" not in rest["metadata"], path


def test_a_continue_token_whose_snapshot_is_gone_is_410_with_a_token_for_the_rest(
    available: Insights, namespace: str
) -> None:
    _add(available, namespace, "a", "b")
    _, first = _get(available, f"{_foohealths(namespace)}?limit=1")
    rv = first["metadata"]["resourceVersion"]
    _add(available, namespace, "c")

    def gone() -> tuple[int, dict[str, Any]] | None:
        answer = _get(available, f"{_foohealths(namespace)}?limit=1&continue={first['metadata']['continue']}")
        return answer if answer[0] == 410 else None

    status, body = wait_for(f"the snapshot at {rv} to be dropped ({HISTORY_SECONDS} s)", gone, timeout=60)
    assert (body["reason"], body["message"]) == ("Expired", listing.CONTINUE_EXPIRED)
    _, rest = _get(available, f"{_foohealths(namespace)}?continue={body['metadata']['continue']}")
    assert _names(rest) == ["b", "c"]
    status, body = _get(available, f"{_foohealths(namespace)}?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert (status, body["reason"], body["message"]) == (410, "Expired", listing.EXPIRED)


def test_kubectl_pages_a_table_in_chunks(available: Insights, namespace: str) -> None:
    _add(available, namespace, "a", "b", "c")
    out = available.kubectl("get", "foohealths", "-n", namespace, "--chunk-size=1", "-o", "name").stdout
    assert out.split() == [f"foohealth.{GROUP}/{n}" for n in ("a", "b", "c")]
    table = available.kubectl("get", "foohealths", "-n", namespace, "--chunk-size=2").stdout.splitlines()
    assert [line.split()[0] for line in table if not line.startswith("NAME")] == ["a", "b", "c"]
