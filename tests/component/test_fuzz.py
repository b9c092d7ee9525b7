"""Fuzzing the HTTP edge: whatever arrives, the answer is a review or a Status — never a 500.

Hypothesis generates wrongly typed fields, huge strings, deep nesting and unicode inside
otherwise plausible reviews, plus arbitrary JSON and bytes. FUZZ_EXAMPLES sets how many bodies
each target gets (CI keeps it small; `FUZZ_EXAMPLES=10000 make unit` for a real campaign).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attacks.foos import admission_review, conversion_review
from attacks.objects import foo_v1, foo_v1alpha1
from webhook.app import Settings, build_app

from .webhook_client import serve_webhook

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
fuzz_settings = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

Post = Callable[[str, bytes], tuple[int, Any]]


@pytest.fixture(scope="module")
def post() -> Iterator[Post]:
    """A synchronous poster into the real app over HTTP (hypothesis drives sync functions)."""
    loop = asyncio.new_event_loop()
    app = build_app(Settings(admission_body_limit=256 * 1024, conversion_body_limit=1024 * 1024))
    server, session = loop.run_until_complete(serve_webhook(app))

    async def _post(path: str, body: bytes) -> tuple[int, Any]:
        async with session.post(path, data=body, headers={"Content-Type": "application/json"}) as response:
            return response.status, orjson.loads(await response.read())

    yield lambda path, body: loop.run_until_complete(_post(path, body))
    loop.run_until_complete(session.close())
    loop.run_until_complete(server.stop(1.0))
    loop.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
odd_strings = st.one_of(st.text(max_size=30), st.just("x" * 70_000), st.just("\u202e\U0001f600\x00"))
odd_values = st.one_of(json_values, odd_strings, st.integers(min_value=-(2**70), max_value=2**70))


def _dumps(value: Any) -> bytes:
    # The stdlib encoder, because it writes what orjson refuses to (integers beyond 64 bits).
    return json.dumps(value).encode()


def _deep(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": [value]}
    return value


def _mutate(obj: Any, path: list[str], value: Any) -> Any:
    """``obj`` with the field at ``path`` replaced by ``value`` (creating dicts on the way)."""
    if not path:
        return value
    base = dict(obj) if isinstance(obj, dict) else {}
    base[path[0]] = _mutate(base.get(path[0]), path[1:], value)
    return base


ADMISSION_PATHS = [
    ["request", "uid"],
    ["request", "operation"],
    ["request", "kind"],
    ["request", "resource"],
    ["request", "requestKind"],
    ["request", "subResource"],
    ["request", "object"],
    ["request", "oldObject"],
    ["request", "object", "spec"],
    ["request", "object", "spec", "replicas"],
    ["request", "object", "apiVersion"],
    ["request", "object", "spec", "deployment"],
    ["request", "object", "spec", "deployment", "name"],
    ["request", "object", "spec", "deployment", "image"],
    ["request", "object", "metadata"],
    ["request"],
    [],
]
CONVERSION_PATHS = [
    ["request", "uid"],
    ["request", "desiredAPIVersion"],
    ["request", "objects"],
    ["request", "objects", "0"],
    ["request"],
    [],
]


def _well_formed(status: int, answer: Any, kind: str) -> None:
    assert status != 500, answer
    assert isinstance(answer, dict)
    if status == 200:
        assert answer["kind"] == kind and answer["response"]["uid"]
    else:
        assert answer["kind"] == "Status" and answer["code"] == status and answer["message"]


@fuzz_settings
@given(
    path=st.sampled_from(ADMISSION_PATHS),
    value=odd_values | st.just(_deep(300)),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
    endpoint=st.sampled_from(["/mutate-foo", "/validate-foo"]),
    version=st.sampled_from(["v1", "v1alpha1"]),
)
def test_admission_answers_every_mangled_review_without_a_500(
    post: Post, path: list[str], value: Any, operation: str, endpoint: str, version: str
) -> None:
    foo = foo_v1() if version == "v1" else foo_v1alpha1()
    review = admission_review(
        foo, operation=operation, old=foo if operation == "UPDATE" else None, request_version=version
    )
    body = _dumps(_mutate(review, path, value))
    _well_formed(*post(endpoint, body), kind="AdmissionReview")


@fuzz_settings
@given(
    path=st.sampled_from(CONVERSION_PATHS),
    value=odd_values,
    desired=st.sampled_from(["samplecontroller.k8s.io/v1", "samplecontroller.k8s.io/v1alpha1"]),
)
def test_conversion_answers_every_mangled_review_without_a_500(
    post: Post, path: list[str], value: Any, desired: str
) -> None:
    review = conversion_review([foo_v1(image="x"), foo_v1alpha1()], desired)
    if path[-1:] == ["0"]:
        review["request"]["objects"][0] = value
        body = _dumps(review)
    else:
        body = _dumps(_mutate(review, path, value))
    _well_formed(*post("/convert", body), kind="ConversionReview")


@fuzz_settings
@given(
    body=st.binary(max_size=300) | json_values.map(_dumps),
    endpoint=st.sampled_from(["/mutate-foo", "/validate-foo", "/convert"]),
)
def test_arbitrary_bodies_get_a_status_not_a_500(post: Post, body: bytes, endpoint: str) -> None:
    status, answer = post(endpoint, body)
    assert status in (400, 413) or answer.get("kind") in ("AdmissionReview", "ConversionReview")
    assert status != 500
