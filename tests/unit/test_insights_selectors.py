"""Label and field selectors read as apimachinery reads them, and which representation an Accept header gets."""

from __future__ import annotations

import time

import pytest

from apimachinery.fields import parse_field_selector
from apimachinery.labels import parse_label_selector, tokens
from insights.media import negotiate
from insights.selectors import MAX_SELECTOR_LENGTH, SelectorError, parse_selectors


def obj(labels: dict[str, str], name: str = "x", namespace: str = "ns") -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


@pytest.mark.parametrize(
    "selector, labels, matches",
    [
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
        ("tier=", {"tier": ""}, True),
        ("tier in ()", {"tier": ""}, True),
        ("tier in (in, notin)", {"tier": "notin"}, True),
        ("size>5", {"size": "10"}, True),
        ("size>5", {"size": "5"}, False),
        ("size<5", {"size": "007"}, False),
        ("size<5", {"size": "x"}, False),
        ("size<5", {}, False),
        ("tier\t=\nweb", {"tier": "web"}, True),
    ],
)
def test_label_selector_matches_as_apimachinery(selector: str, labels: dict[str, str], matches: bool) -> None:
    selector = selector.replace("\\t", "\t").replace("\\n", "\n")
    assert parse_selectors(selector).matches(obj(labels)) is matches


@pytest.mark.parametrize(
    "selector, message",
    [
        ("tier in web", "unable to parse requirement: found 'web' expected: '('"),
        ("=web", "found '=', expected: !, identifier, or 'end of string'"),
        ("tier=a b", "found 'b', expected: ',' or 'end of string'"),
        ("tier in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("tier,", "found '', expected: identifier after ','"),
        ("tier gt 5", "unable to parse requirement: found 'gt', expected: in, notin, =, ==, !=, gt, lt"),
        (
            "size>five",
            "unable to parse requirement: values[0]: Invalid value: \"five\": for 'Gt', 'Lt' operators, "
            "the value must be an integer",
        ),
        ("bad key!=x", "unable to parse requirement: found 'key', expected: in, notin, =, ==, !=, gt, lt"),
        ("-bad=x", 'unable to parse requirement: <nil>: Invalid value: "-bad": name part must consist of'),
        ("a/b/c", 'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name must consist'),
        ("tier=-web", 'unable to parse requirement: values[0][tier]: Invalid value: "-web": a valid label must be'),
    ],
)
def test_malformed_label_selectors_fail_with_apimachinerys_words(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selectors(selector)
    assert str(caught.value).startswith(message)


def test_a_nul_ends_the_selector_where_a_token_would_start_as_in_go() -> None:
    # Go's lexer reads a NUL byte as the end of the string; what follows is never looked at.
    assert parse_label_selector("a \0 !!garbage((") == parse_label_selector("a")
    assert parse_label_selector("a=b\0,c") == parse_label_selector("a=b,c")


HOSTILE = {
    "k in ( + 2,000 spaces": "k in (" + " " * 2000,
    "k in ( + 2,000 spaces + x": "k in (" + " " * 2000 + "x",
    "k in ( + 2,000 spaces + ,": "k in (" + " " * 2000 + ",",
    "a + 2,000 tabs + b": "a" + "\t" * 2000 + "b",
    "2,000 x (": "k in " + "(" * 2000,
}


@pytest.mark.parametrize("selector", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_label_selectors_are_refused_in_linear_time(selector: str) -> None:
    # The regex parser this replaces spent 11-18 s of CPU on each of these; the bound is
    # CPU time of this process (not wall time), generous enough for any machine.
    start = time.process_time()
    with pytest.raises(SelectorError):
        parse_selectors(selector)
    assert time.process_time() - start < 1.0
    assert len(tokens(selector)) <= len(selector) + 1  # each token consumes at least one character


def test_selectors_longer_than_the_cap_are_refused_before_parsing() -> None:
    assert parse_selectors("a" + " " * (MAX_SELECTOR_LENGTH - 1)) == parse_selectors("a")
    with pytest.raises(
        SelectorError,
        match=f"labelSelector is {MAX_SELECTOR_LENGTH + 1} characters long; at most {MAX_SELECTOR_LENGTH} are accepted",
    ):
        parse_selectors("a" + " " * MAX_SELECTOR_LENGTH)
    with pytest.raises(SelectorError, match="fieldSelector is 1048576 characters long"):
        parse_selectors("", "x" * (1 << 20))


def test_field_selector_on_name_and_namespace_and_the_pinned_name() -> None:
    selectors = parse_selectors("", "metadata.name=x,metadata.namespace!=kube-system")
    assert selectors.pinned_name() == "x"
    assert selectors.matches(obj({}, "x", "ns")) and not selectors.matches(obj({}, "y", "ns"))
    assert not selectors.matches(obj({}, "x", "kube-system"))
    assert parse_selectors().pinned_name() == ""
    with pytest.raises(
        SelectorError, match='"status.health" is not a known field selector: only "metadata.name", "metadata.namespace"'
    ):
        parse_selectors("", "status.health=Healthy").check_fields()


@pytest.mark.parametrize(
    "selector, requirements",
    [
        ("metadata.name==x", [("metadata.name", "=", "x")]),
        ("metadata.name = x", [("metadata.name ", "=", " x")]),  # no blank is trimmed
        ("b!=1,,a=2,", [("a", "=", "2"), ("b", "!=", "1")]),  # terms sorted, empty ones skipped
        ("a=x\\,y\\=z\\\\", [("a", "=", "x,y=z\\")]),
        ("a\\,b=c", [("a\\,b", "=", "c")]),  # an escaped comma does not split; the field keeps it
        ("=,!=", []),  # an empty field with an empty value selects nothing away
        ("a!==b", None),
    ],
)
def test_field_selector_terms_as_apimachinery_splits_them(
    selector: str, requirements: list[tuple[str, str, str]] | None
) -> None:
    if requirements is None:
        with pytest.raises(SelectorError, match="unescaped character in value: 61"):
            parse_field_selector(selector)
        return
    parsed = parse_field_selector(selector)
    assert [(r.field, r.operator, r.value) for r in parsed.requirements] == requirements


@pytest.mark.parametrize(
    "selector, name",
    [
        ("metadata.name=a,metadata.name=b", "a"),  # the first in sorted order, as RequiresExactMatch
        ("metadata.name!=a", ""),
        ("metadata.name=a/b", ""),  # not a valid path segment: RequestInfo pins nothing
        ("metadata.name=..", ""),
        ("metadata.name=%41", ""),
        ("metadata.namespace!=(,metadata.name=allowed", "allowed"),
    ],
)
def test_the_pinned_name_is_what_request_info_would_pin(selector: str, name: str) -> None:
    assert parse_selectors("", selector).pinned_name() == name


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.mark.parametrize(
    "accept, allowed, form",
    [
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
        (
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
            ("discovery-v2", "discovery-v2beta1", "json"),
            "discovery-v2",
        ),
        (
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            ("discovery-v2", "discovery-v2beta1", "json"),
            "discovery-v2beta1",
        ),
    ],
)
def test_negotiation(accept: str, allowed: tuple, form: str | None) -> None:  # type: ignore[type-arg]
    assert negotiate(accept, allowed) == form
