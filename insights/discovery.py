"""Discovery documents: legacy (APIGroupList, APIGroup, APIResourceList) and aggregated v2."""

from __future__ import annotations

from apimachinery.objects import Object

from .resources import GROUP, GROUP_VERSION, RESOURCES, VERSION, Resource


def _version_ref() -> Object:
    return {"groupVersion": GROUP_VERSION, "version": VERSION}


def api_group() -> Object:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [_version_ref()],
        "preferredVersion": _version_ref(),
    }


def api_group_list() -> Object:
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def _short_names_and_categories(resource: Resource) -> Object:
    """What both discovery documents say of a resource only when it has any (kubectl reads both)."""
    out: Object = {}
    if resource.short_names:
        out["shortNames"] = list(resource.short_names)
    if resource.categories:
        out["categories"] = list(resource.categories)
    return out


def _api_resource(resource: Resource) -> Object:
    return {
        "name": resource.name,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resource.verbs),
        **_short_names_and_categories(resource),
    }


def api_resource_list() -> Object:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [_api_resource(r) for r in RESOURCES.values()],
    }


def _discovery_resource(resource: Resource) -> Object:
    return {
        "resource": resource.name,
        "responseKind": {"group": GROUP, "version": VERSION, "kind": resource.kind},
        "scope": "Namespaced" if resource.namespaced else "Cluster",
        "singularResource": resource.singular,
        "verbs": list(resource.verbs),
        **_short_names_and_categories(resource),
    }


def api_group_discovery_list(version: str = "v2") -> Object:
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": GROUP},
                "versions": [
                    {
                        "version": VERSION,
                        "resources": [_discovery_resource(r) for r in RESOURCES.values()],
                        "freshness": "Current",
                    }
                ],
            }
        ],
    }
