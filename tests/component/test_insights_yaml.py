"""YAML answers of the aggregated API: rendered off the event loop, refused when too large to render."""

from __future__ import annotations

import asyncio
import threading

import yaml  # type: ignore[import-untyped]

from insights.rendering import _RENDERER, YAML_LIMIT
from tests.component.test_insights_api import GV, Insights, insights, pki, review, view  # noqa: F401 (fixtures)

YAML_ACCEPT = {"Accept": "application/yaml", "Content-Type": "application/json"}


def _foo(annotation_bytes: int) -> dict[str, object]:
    return {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": "x", "annotations": {"example.com/notes": "n" * annotation_bytes}},
        "spec": {"deployment": {"name": "x-nginx"}},
    }


async def test_a_review_answer_asked_as_yaml_is_yaml_of_the_json_answer(insights: Insights) -> None:
    insights.rbac.allow("alice", "create", "fooreviews")
    status, json_answer = await insights.json(f"{GV}/namespaces/ns/fooreviews", method="POST", body=review(_foo(10)))
    status, headers, body = await insights.call(
        f"{GV}/namespaces/ns/fooreviews", method="POST", headers=YAML_ACCEPT, body=review(_foo(10))
    )
    assert status == 201 and headers["Content-Type"] == "application/yaml"
    assert yaml.safe_load(body) == json_answer


async def test_an_answer_too_large_to_render_as_yaml_is_a_406_status_suggesting_json(insights: Insights) -> None:
    # Before: a 1.6 MiB FooReview answered as YAML spent 18 s in yaml.safe_dump on the event loop.
    insights.rbac.allow("alice", "create", "fooreviews")
    status, _, body = await insights.call(
        f"{GV}/namespaces/ns/fooreviews", method="POST", headers=YAML_ACCEPT, body=review(_foo(YAML_LIMIT))
    )
    assert status == 406
    answer = yaml.safe_load(body)  # the Status itself is JSON, which YAML reads too
    assert answer["kind"] == "Status" and answer["reason"] == "NotAcceptable"
    assert "application/json" in answer["message"]
    status, answer = await insights.json(f"{GV}/namespaces/ns/fooreviews", method="POST", body=review(_foo(YAML_LIMIT)))
    assert status == 201 and answer["status"]["allowed"] is True


async def test_other_requests_are_answered_while_a_yaml_answer_waits_for_its_renderer(insights: Insights) -> None:
    # Hold the one rendering thread busy: the YAML answer waits for it, the event loop does not.
    insights.rbac.allow("alice", "create", "fooreviews")
    renderer_free = threading.Event()
    busy = _RENDERER.submit(renderer_free.wait)
    try:
        pending = asyncio.create_task(
            insights.call(f"{GV}/namespaces/ns/fooreviews", method="POST", headers=YAML_ACCEPT, body=review(_foo(10)))
        )
        for _ in range(3):
            status, discovery = await insights.json(GV, user="root", groups=("system:masters",))
            assert status == 200 and discovery["kind"] == "APIResourceList"
        assert not pending.done()
    finally:
        renderer_free.set()
    status, headers, body = await pending
    busy.result()
    assert status == 201 and yaml.safe_load(body)["status"]["allowed"] is True
