"""What registers the aggregated API and what it publishes about itself: APIService, RBAC, discovery, OpenAPI."""

from __future__ import annotations

import base64

import orjson

from insights import discovery, openapi
from insights.manifests import aggregated_api_manifests

G = "insights.samplecontroller.k8s.io"
MANIFESTS = aggregated_api_manifests(
    namespace="foo-system",
    service="foo-operator-webhook",
    service_account="foo-operator",
    ca_bundle=b"-----BEGIN CERTIFICATE-----\n",
)


def by_kind(kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [m for m in MANIFESTS if m["kind"] == kind]


def test_apiservice_points_at_the_service_with_the_ca_bundle() -> None:
    [service] = by_kind("APIService")
    assert service["metadata"]["name"] == f"v1alpha1.{G}"
    assert service["spec"]["group"] == G and service["spec"]["version"] == "v1alpha1"
    assert service["spec"]["service"] == {"namespace": "foo-system", "name": "foo-operator-webhook", "port": 443}
    assert base64.b64decode(service["spec"]["caBundle"]) == b"-----BEGIN CERTIFICATE-----\n"
    assert service["spec"]["groupPriorityMinimum"] > 0 and service["spec"]["versionPriority"] > 0
    assert "insecureSkipTLSVerify" not in service["spec"]
    assert MANIFESTS[-1] is service  # RBAC exists before the API goes live


def test_the_service_account_may_delegate_authn_and_read_the_front_proxy_trust() -> None:
    refs = {(m["kind"], m["roleRef"]["name"], m["metadata"].get("namespace")) for m in MANIFESTS if "roleRef" in m}
    assert ("ClusterRoleBinding", "system:auth-delegator", None) in refs
    assert ("RoleBinding", "extension-apiserver-authentication-reader", "kube-system") in refs
    subjects = {s["name"] for m in MANIFESTS if "subjects" in m for s in m["subjects"]}
    assert subjects == {"foo-operator"}


def test_the_service_lists_and_watches_what_foohealth_is_computed_from_and_writes_nothing() -> None:
    [reader] = [m for m in by_kind("ClusterRole") if m["metadata"]["name"].endswith("insights-reader")]
    granted = {(g, r) for rule in reader["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {("samplecontroller.k8s.io", "foos"), ("apps", "deployments"), ("", "pods"), ("", "events")}
    # list and watch only: the informers never GET one object.
    assert {v for rule in reader["rules"] for v in rule["verbs"]} == {"list", "watch"}


def test_view_gains_foohealths_and_edit_gains_fooreviews() -> None:
    roles = {m["metadata"]["name"]: m for m in by_kind("ClusterRole")}
    view = next(
        r for r in roles.values() if r["metadata"].get("labels", {}).get("rbac.authorization.k8s.io/aggregate-to-view")
    )
    edit = next(
        r for r in roles.values() if r["metadata"].get("labels", {}).get("rbac.authorization.k8s.io/aggregate-to-edit")
    )
    assert view["rules"] == [{"apiGroups": [G], "resources": ["foohealths"], "verbs": ["get", "list", "watch"]}]
    assert edit["rules"] == [{"apiGroups": [G], "resources": ["fooreviews"], "verbs": ["create"]}]


def test_discovery_documents_agree_on_the_resources() -> None:
    legacy = {r["name"]: r for r in discovery.api_resource_list()["resources"]}
    [group] = discovery.api_group_discovery_list()["items"]
    aggregated = {r["resource"]: r for r in group["versions"][0]["resources"]}
    assert set(legacy) == set(aggregated) == {"foohealths", "fooreviews"}
    for name, resource in legacy.items():
        assert resource["verbs"] == aggregated[name]["verbs"]
        assert resource["kind"] == aggregated[name]["responseKind"]["kind"]
        assert resource["singularName"] == aggregated[name]["singularResource"]
    assert discovery.api_group_list()["groups"][0]["name"] == G


def test_openapi_documents_name_each_kind_for_kubectl() -> None:
    v2 = orjson.loads(openapi.openapi_v2())
    v3 = orjson.loads(openapi.openapi_v3_group_version())
    for kind in ("FooHealth", "FooHealthList", "FooReview"):
        name = f"io.k8s.samplecontroller.insights.v1alpha1.{kind}"
        gvk = [{"group": G, "version": "v1alpha1", "kind": kind}]
        assert v2["definitions"][name]["x-kubernetes-group-version-kind"] == gvk
        assert v3["components"]["schemas"][name]["x-kubernetes-group-version-kind"] == gvk
    refs = [value for value in _walk(v3) if isinstance(value, str) and value.startswith("#/")]
    assert refs and all(
        r.startswith("#/components/schemas/") and r.rsplit("/", 1)[1] in v3["components"]["schemas"] for r in refs
    )
    assert all(r.startswith("#/definitions/") for r in _walk(v2) if isinstance(r, str) and r.startswith("#/"))


def test_the_v3_index_url_changes_with_the_document() -> None:
    url = openapi.openapi_v3_index()["paths"][f"apis/{G}/v1alpha1"]["serverRelativeURL"]
    assert url == f"/openapi/v3/apis/{G}/v1alpha1?hash={openapi.etag(openapi.openapi_v3_group_version())}"


def _walk(node: object) -> list[object]:
    if isinstance(node, dict):
        return [v for value in node.values() for v in [value, *_walk(value)]]
    if isinstance(node, list):
        return [v for value in node for v in [value, *_walk(value)]]
    return []


def test_watching_one_namespace_grants_read_there_alone() -> None:
    manifests = aggregated_api_manifests(
        namespace="foo-system",
        service="foo-operator-insights",
        service_account="foo-operator",
        ca_bundle=b"-----BEGIN CERTIFICATE-----\n",
        watch_namespace="team-a",
    )
    readers = [m for m in manifests if m["metadata"]["name"].endswith("insights-reader")]
    assert sorted((m["kind"], m["metadata"].get("namespace")) for m in readers) == [
        ("Role", "team-a"),
        ("RoleBinding", "team-a"),
    ]
    (binding,) = (m for m in readers if m["kind"] == "RoleBinding")
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "foo-operator", "namespace": "foo-system"}]
