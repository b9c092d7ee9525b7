"""The webhook service over real HTTP (serving.reviews, an aiohttp client): given this review, the service answers this."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from attacks.foos import admission_review, conversion_review
from attacks.objects import V1, V1ALPHA1, foo_v1, foo_v1alpha1
from fooapi.conversion import CONVERSION_ANNOTATION
from serving.metricsserver import metrics_app
from tests.component.reviews import decoded_patch
from webhook.app import Settings

from .webhook_client import Client, ServeWebhook


@pytest.fixture
async def client(webhook_client: ServeWebhook) -> Client:
    return await webhook_client(Settings(admission_body_limit=64 * 1024, conversion_body_limit=1024 * 1024))


async def post(client: Client, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    response = await client.post(path, json=body)
    return response.status, await response.json()


# --- /mutate-foo ------------------------------------------------------------------------------


async def test_mutate_fills_image_and_replicas_with_the_smallest_patch(client: Client) -> None:
    status, review = await post(client, "/mutate-foo", admission_review(foo_v1(replicas=None)))
    response = review["response"]
    assert status == 200 and response["uid"] == "uid-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert decoded_patch(response) == [
        {"op": "add", "path": "/spec/deployment/image", "value": "nginx:latest"},
        {"op": "add", "path": "/spec/replicas", "value": 1},
    ]


async def test_mutate_sends_no_patch_when_nothing_changes(client: Client) -> None:
    _, review = await post(client, "/mutate-foo", admission_review(foo_v1(image="nginx:1", replicas=2)))
    assert review["response"] == {"uid": "uid-1", "allowed": True}


async def test_mutate_works_for_v1alpha1_objects(client: Client) -> None:
    _, review = await post(client, "/mutate-foo", admission_review(foo_v1alpha1(replicas=None), version="v1alpha1"))
    assert decoded_patch(review["response"]) == [{"op": "add", "path": "/spec/replicas", "value": 1}]


async def test_mutate_allows_delete_without_looking(client: Client) -> None:
    _, review = await post(client, "/mutate-foo", admission_review(None, operation="DELETE", old=foo_v1()))
    assert review["response"]["allowed"] is True


# The CRD schema holds the bounds too, and the apiserver checks it after mutating webhooks but
# before validating ones: the mutating webhook refuses first, so users read our words.
@pytest.mark.parametrize(
    "body",
    [
        admission_review(foo_v1(replicas=11)),
        admission_review(foo_v1(deployment="b"), operation="UPDATE", old=foo_v1(deployment="a")),
        admission_review(foo_v1(deployment=None, replicas=0), request_version="v1alpha1"),
    ],
)
async def test_mutate_refuses_what_validate_refuses_with_the_same_status(client: Client, body: Any) -> None:
    _, mutated = await post(client, "/mutate-foo", body)
    _, validated = await post(client, "/validate-foo", body)
    assert mutated["response"]["allowed"] is False and mutated["response"]["status"]["code"] == 422
    assert mutated["response"] == validated["response"]


async def test_mutate_refuses_an_out_of_bounds_scale_and_patches_none(client: Client) -> None:
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "example"}, "spec": {"replicas": 30}}
    body = admission_review(scale, operation="UPDATE", old=scale, sub_resource="scale", kind="Scale")
    _, review = await post(client, "/mutate-foo", body)
    assert review["response"]["allowed"] is False and "patch" not in review["response"]
    assert review["response"]["status"]["details"]["causes"][0]["field"] == "spec.replicas"
    within = {**scale, "spec": {"replicas": 3}}
    _, review = await post(
        client,
        "/mutate-foo",
        admission_review(within, operation="UPDATE", old=scale, sub_resource="scale", kind="Scale"),
    )
    assert review["response"] == {"uid": "uid-1", "allowed": True}


# --- /validate-foo ----------------------------------------------------------------------------


async def test_replicas_above_ten_is_denied_with_field_cause(client: Client) -> None:
    status, review = await post(client, "/validate-foo", admission_review(foo_v1(replicas=11)))
    response = review["response"]
    assert status == 200 and response["allowed"] is False
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    assert response["status"]["message"] == (
        'Foo.samplecontroller.k8s.io "example" is invalid: spec.replicas: Invalid value: 11: '
        "must be less than or equal to 10"
    )
    assert response["status"]["details"] == {
        "name": "example",
        "group": "samplecontroller.k8s.io",
        "kind": "Foo",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 11: must be less than or equal to 10",
                "field": "spec.replicas",
            }
        ],
    }


async def test_v1alpha1_request_gets_v1alpha1_field_paths_and_a_deprecation_warning(client: Client) -> None:
    # matchPolicy Equivalent: the apiserver sends v1, but the user wrote v1alpha1.
    review_body = admission_review(foo_v1(deployment=None), request_version="v1alpha1")
    _, review = await post(client, "/validate-foo", review_body)
    response = review["response"]
    assert [c["field"] for c in response["status"]["details"]["causes"]] == ["spec.deploymentName"]
    assert response["warnings"] == [
        "samplecontroller.k8s.io/v1alpha1 Foo is deprecated; use samplecontroller.k8s.io/v1 Foo"
    ]


async def test_renaming_the_deployment_on_update_is_denied(client: Client) -> None:
    body = admission_review(foo_v1(deployment="b"), operation="UPDATE", old=foo_v1(deployment="a"))
    _, review = await post(client, "/validate-foo", body)
    assert review["response"]["status"]["details"]["causes"][0]["message"] == 'Invalid value: "b": field is immutable'


async def test_a_valid_foo_is_allowed(client: Client) -> None:
    _, review = await post(client, "/validate-foo", admission_review(foo_v1()))
    assert review["response"] == {"uid": "uid-1", "allowed": True}


async def test_scaling_past_ten_through_the_scale_subresource_is_denied(client: Client) -> None:
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "example"}, "spec": {"replicas": 30}}
    body = admission_review(scale, operation="UPDATE", old=scale, sub_resource="scale", kind="Scale")
    _, review = await post(client, "/validate-foo", body)
    assert review["response"]["status"]["details"]["causes"][0]["field"] == "spec.replicas"


async def test_a_review_for_another_resource_is_denied_with_a_clear_message(client: Client) -> None:
    body = admission_review({"kind": "Deployment"}, group="apps", resource="deployments", kind="Deployment")
    _, review = await post(client, "/validate-foo", body)
    assert review["response"]["allowed"] is False
    assert (
        "this webhook admits foos.samplecontroller.k8s.io, not deployments.apps"
        in review["response"]["status"]["message"]
    )


async def test_an_object_that_is_not_a_foo_is_denied_not_crashed_on(client: Client) -> None:
    _, review = await post(client, "/mutate-foo", admission_review(["not", "an", "object"]))
    assert review["response"]["allowed"] is False and review["response"]["status"]["code"] == 400


# --- malformed calls: 400/413/415 with a Status, never a 500 ----------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "AdmissionReview"}, "expected kind AdmissionReview of apiVersion admission.k8s.io/v1"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "expected kind"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "has no request"),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}},
            "request.uid is missing",
        ),
        ([1, 2], "must be a JSON object"),
    ],
)
@pytest.mark.parametrize("path", ["/mutate-foo", "/validate-foo"])
async def test_malformed_admission_call_is_a_400_status(client: Client, path: str, body: Any, message: str) -> None:
    status, answer = await post(client, path, body)
    assert status == 400 and answer["kind"] == "Status" and answer["reason"] == "BadRequest"
    assert message in answer["message"]


async def test_body_that_is_not_json_is_a_400_status(client: Client) -> None:
    response = await client.post("/validate-foo", data=b"{nope", headers={"Content-Type": "application/json"})
    assert response.status == 400 and "not valid JSON" in (await response.json())["message"]


async def test_body_over_the_limit_is_a_413_status(client: Client) -> None:
    huge = admission_review(foo_v1(image="x" * 100_000))
    status, answer = await post(client, "/validate-foo", huge)
    assert status == 413 and answer["reason"] == "RequestEntityTooLarge"


async def test_wrong_content_type_is_a_415_status(client: Client) -> None:
    response = await client.post("/validate-foo", data=b"x", headers={"Content-Type": "text/plain"})
    assert response.status == 415 and (await response.json())["kind"] == "Status"


async def test_unknown_path_and_wrong_method_are_statuses(client: Client) -> None:
    assert (await client.get("/nope")).status == 404
    response = await client.get("/mutate-foo")
    assert response.status == 405 and (await response.json())["reason"] == "MethodNotAllowed"


# --- /convert --------------------------------------------------------------------------------


async def test_convert_keeps_order_and_count_and_sets_the_desired_version(client: Client) -> None:
    objects = [foo_v1alpha1(f"foo-{i}") for i in range(5)]
    status, answer = await post(client, "/convert", conversion_review(objects, V1))
    response = answer["response"]
    assert status == 200 and response["uid"] == "conv-1" and response["result"] == {"status": "Success"}
    assert [o["metadata"]["name"] for o in response["convertedObjects"]] == [f"foo-{i}" for i in range(5)]
    assert {o["apiVersion"] for o in response["convertedObjects"]} == {V1}


async def test_convert_failure_names_the_object_and_is_not_a_500(client: Client) -> None:
    objects = [foo_v1(), {"apiVersion": V1, "kind": "Bar", "metadata": {"name": "odd", "namespace": "ns"}}]
    status, answer = await post(client, "/convert", conversion_review(objects, V1ALPHA1))
    assert status == 200
    assert answer["response"]["result"] == {
        "status": "Failure",
        "message": "object 1 (ns/odd): kind must be Foo, got 'Bar'",
    }


async def test_convert_of_a_hostile_annotation_is_a_failure_with_a_message_not_a_500(client: Client) -> None:
    # 100,000 unclosed brackets: json.loads recursed, and the review was answered 500 "internal error".
    foo = foo_v1alpha1()
    foo["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "[" * 100_000}
    status, answer = await post(client, "/convert", conversion_review([foo], V1))
    assert status == 200
    assert answer["response"]["result"] == {
        "status": "Failure",
        "message": f"object 0 (default/example): annotation {CONVERSION_ANNOTATION} is not valid JSON; remove it",
    }


@pytest.mark.parametrize(
    ("objects", "desired", "message"),
    [
        ([foo_v1()], "samplecontroller.k8s.io/v9", "cannot convert to"),
        ("nope", V1, "request.objects must be a list"),
        ([1], V1, "object 0: must be a JSON object"),
    ],
)
async def test_convert_bad_requests_fail_with_a_message(
    client: Client, objects: Any, desired: str, message: str
) -> None:
    _, answer = await post(client, "/convert", conversion_review(objects, desired))
    assert answer["response"]["result"]["status"] == "Failure" and message in answer["response"]["result"]["message"]


async def test_convert_without_uid_is_a_400(client: Client) -> None:
    status, answer = await post(
        client,
        "/convert",
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"objects": []}},
    )
    assert status == 400 and "uid" in answer["message"]


# --- draining ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body",
    [
        ("/mutate-foo", admission_review(foo_v1())),
        ("/validate-foo", admission_review(foo_v1())),
        ("/convert", conversion_review([foo_v1alpha1()], V1)),
        ("/healthz", None),
    ],
)
async def test_a_draining_server_tells_the_client_to_close_in_the_answer_itself(
    client: Client, path: str, body: Any
) -> None:
    # The headers must say it: a connection the client believes is kept alive, closed by us
    # afterwards, is one Go reuses for its next POST and loses ("server closed idle connection").
    client.webhook.readiness.draining = True
    response = await (client.post(path, json=body) if body is not None else client.get(path))
    assert response.status == 200
    assert response.headers.get("Connection", "").lower() == "close"


async def test_a_serving_server_keeps_connections_alive(client: Client) -> None:
    response = await client.post("/validate-foo", json=admission_review(foo_v1()))
    assert response.status == 200 and response.headers.get("Connection", "").lower() != "close"


# --- health and metrics ----------------------------------------------------------------------


async def test_health_endpoints_answer(client: Client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_metrics_are_not_served_on_the_admission_port(client: Client) -> None:
    response = await client.get("/metrics")
    assert response.status == 404 and (await response.json())["kind"] == "Status"


async def test_metrics_are_named_like_controller_runtime(client: Client, aiohttp_client: Any) -> None:
    await post(client, "/validate-foo", admission_review(foo_v1()))
    metrics = await aiohttp_client(metrics_app(client.webhook.metrics.registry))
    text = await (await metrics.get("/metrics")).text()
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/validate-foo"} 1.0' in text
    assert "controller_runtime_webhook_latency_seconds_bucket" in text


async def test_a_client_that_never_finishes_its_body_gets_a_408_not_a_hang(webhook_client: ServeWebhook) -> None:
    client = await webhook_client(Settings(admission_timeout=0.3))
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        b"POST /validate-foo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 32\r\n\r\n{"apiVersion":'
    )
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        body = await asyncio.wait_for(reader.read(4096), timeout=10)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ") and orjson.loads(body)["reason"] == "Timeout"


# --- bodies that arrive whole (the path without timers) --------------------------------------
