"""Label and field selectors as kubectl sends them, and which representation an Accept header gets."""

from __future__ import annotations

import pytest

from insights.media import negotiate
from insights.selectors import SelectorError, field_selector, label_selector


def obj(labels: dict[str, str], name: str = "x", namespace: str = "ns") -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


@pytest.mark.parametrize("selector, labels, matches", [
    ("", {}, True),
    ("tier=web", {"tier": "web"}, True),
    ("tier==web", {"tier": "db"}, False),
    ("tier!=web", {}, True),
    ("tier!=web", {"tier": "web"}, False),
    ("tier", {"tier": ""}, True),
    ("!tier", {"tier": "web"}, False),
    ("tier in (web, db)", {"tier": "db"}, True),
    ("tier notin (web,db)", {"tier": "cache"}, True),
    ("tier notin (web,db)", {}, True),
    ("tier in (web),env=prod", {"tier": "web", "env": "dev"}, False),
    ("app.kubernetes.io/name=foo", {"app.kubernetes.io/name": "foo"}, True),
])
def test_label_selector(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert label_selector(selector)(obj(labels)) is matches


@pytest.mark.parametrize("selector", ["tier in web", "=web", "tier=a b", "tier in (a", "bad key!=x"])
def test_malformed_label_selectors_are_errors(selector: str) -> None:
    with pytest.raises(SelectorError):
        label_selector(selector)


def test_field_selector_on_name_and_namespace_and_the_pinned_name() -> None:
    matches, pinned = field_selector("metadata.name=x,metadata.namespace!=kube-system")
    assert pinned == "x"
    assert matches(obj({}, "x", "ns")) and not matches(obj({}, "y", "ns")) and not matches(obj({}, "x", "kube-system"))
    assert field_selector("")[1] is None
    with pytest.raises(SelectorError, match="field label not supported: status.health"):
        field_selector("status.health=Healthy")


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.mark.parametrize("accept, allowed, form", [
    ("", ("json", "table"), "json"),
    ("*/*", ("json", "table"), "json"),
    ("application/json", ("json", "table"), "json"),
    (f"{TABLE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", ("json", "table"), "table"),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", ("json", "table"), "json"),
    ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", ("json", "partial"), "partial"),
    ("application/yaml", ("json", "yaml"), "yaml"),
    ("application/vnd.kubernetes.protobuf,application/json", ("json",), "json"),
    ("application/vnd.kubernetes.protobuf", ("json", "yaml"), None),
    (f"{TABLE}", ("json", "yaml"), None),
    ("application/json;q=0.5,application/yaml", ("json", "yaml"), "yaml"),
    ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
     ("discovery-v2", "discovery-v2beta1", "json"), "discovery-v2"),
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
     ("discovery-v2", "discovery-v2beta1", "json"), "discovery-v2beta1"),
])
def test_negotiation(accept: str, allowed: tuple, form: str | None) -> None:  # type: ignore[type-arg]
    assert negotiate(accept, allowed) == form
