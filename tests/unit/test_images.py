"""Image references: distribution/reference's grammar (v0.6.0), its own examples, and no text that could
forge a log line or drive a terminal."""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attacks.objects import foo_v1
from controller.settings import parse as parse_controller_flags
from fooapi import validate
from fooapi.crd import openapi_schema
from fooapi.images import MAX_LENGTH, REFERENCE, REFERENCE_PATTERN, image_reference, reference_errors
from fooapi.models import FooV1

DIGEST = "sha256:" + "f" * 64

# From distribution/reference v0.6.0's reference_test.go (TestReferenceParse), each one it accepts.
ACCEPTED = [
    "test_com",
    "test.com:tag",
    "test.com:5000",
    "test.com/repo:tag",
    "test:5000/repo",
    "test:5000/repo:tag",
    f"test:5000/repo@{DIGEST}",
    f"test:5000/repo:tag@{DIGEST}",
    "lowercase:Uppercase",
    "a/" * 127 + "a:tag-puts-this-over-max",
    "sub-dom1.foo.com/bar/baz/quux",
    "sub-dom1.foo.com/bar/baz/quux:some-long-tag",
    "b.gcr.io/test.example.com/my-app:test.example.com",
    "xn--n3h.com/myimage:xn--n3h.com",
    "xn--7o8h.com/myimage:xn--7o8h.com@sha512:" + "f" * 128,
    "foo_bar.com:8080",
    "foo/foo_bar.com:8080",
    "192.168.1.1",
    "192.168.1.1:tag",
    "192.168.1.1:5000",
    "192.168.1.1/repo",
    "192.168.1.1:5000/repo",
    "192.168.1.1:5000/repo:5050",
    "[2001:db8::1]/repo",
    "[2001:db8:1:2:3:4:5:6]/repo:tag",
    "[2001:db8::1]:5000/repo",
    "[2001:db8::1]:5000/repo:tag",
    f"[2001:db8::1]:5000/repo@{DIGEST}",
    f"[2001:db8::1]:5000/repo:tag@{DIGEST}",
    "[2001:db8::]:5000/repo",
    "[::1]:5000/repo",
    "example.com/" + "a" * 243 + ":tag",  # a name of 255 characters
    # and what Foos name every day
    "nginx:latest",
    "nginx:1.27",
    "docker.io/library/nginx:1.27-alpine",
    "a__b/c---d/e.f",
]

# The same file's refusals, with the error Parse gives (go-digest's for the digests).
REFUSED = [
    (":justtag", "invalid reference format"),
    (f"@{DIGEST}", "invalid reference format"),
    ("repo@sha256:" + "f" * 34, "invalid checksum digest length"),
    ("validname@invaliddigest:" + "f" * 64, "unsupported digest algorithm"),
    ("Uppercase:tag", "repository name must be lowercase"),
    ("test:5000/Uppercase/lowercase:tag", "repository name must be lowercase"),
    ("domain/" + "a" * 256 + ":tag", "repository name must not be more than 255 characters"),
    ("aa/asdf$$^/aa", "invalid reference format"),
    ("[2001:db8::1]", "invalid reference format"),
    ("[2001:db8::1]:5000", "invalid reference format"),
    ("[2001:db8::1]:tag", "invalid reference format"),
    ("[fe80::1%eth0]:5000/repo", "invalid reference format"),
    ("[fe80::1%@invalidzone]:5000/repo", "invalid reference format"),
    # ParseNormalizedNamed, which the kubelet uses
    ("f" * 64, "cannot specify 64-byte hexadecimal strings"),
]

# What a tenant put into an image to reach logs and terminals (issue 34), and plain mistakes.
HOSTILE = [
    " nginx:latest ",
    "nginx:latest\n2026-11-23T12:00:00Z INFO controller: forged line",
    "nginx\r",
    "nginx:latest\x1b]52;c;ZWNobyBoaQ==\x07",
    "\x1b[2J\x1b[H",
    "nginx:\u202elatest",
    "nginx:latest\x00",
    "nginx latest",
    "nginx:lat\u0435st",  # a Cyrillic e
    "nginx:" + "a" * 129,
    "a" * (MAX_LENGTH + 1),
]


@pytest.mark.parametrize("image", ACCEPTED)
def test_references_distribution_accepts_are_accepted(image: str) -> None:
    assert reference_errors(image) == ()


@pytest.mark.parametrize(("image", "error"), REFUSED)
def test_references_distribution_refuses_are_refused_with_its_reason(image: str, error: str) -> None:
    errors = reference_errors(image)
    assert len(errors) == 1 and error in errors[0]


@pytest.mark.parametrize("image", HOSTILE)
def test_whitespace_and_control_characters_are_not_an_image(image: str) -> None:
    assert reference_errors(image)


def test_a_foo_whose_image_forges_a_log_line_is_invalid_with_the_value_escaped() -> None:
    errors = validate(foo_v1(image="nginx:latest\n2026-11-23T12:00:00Z INFO forged \x1b[2J"))
    assert [(e.type.value, e.field) for e in errors] == [("FieldValueInvalid", "spec.deployment.image")]
    assert "\n" not in str(errors[0]) and "\x1b" not in str(errors[0])


def _go_grammar() -> re.Pattern[str]:
    """distribution/reference v0.6.0's regexp.go, term for term (\\w made ASCII as Go's is): the oracle."""
    alphanumeric, separator = "[a-z0-9]+", "(?:[._]|__|[-]+)"
    component = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
    host = rf"(?:{component}(?:\.{component})*|\[(?:[a-fA-F0-9:]+)\])"
    path = f"{alphanumeric}(?:{separator}{alphanumeric})*"
    name = f"(?:{host}(?::[0-9]+)?/)?{path}(?:/{path})*"
    digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
    return re.compile(rf"({name})(?::([\w][\w.-]{{0,127}}))?(?:@({digest}))?", re.ASCII)


GO_GRAMMAR = _go_grammar()
PLAIN = re.compile(REFERENCE_PATTERN)
pieces = st.lists(
    st.sampled_from(["a", "Z", "0", "9", "f", ".", "_", "__", "-", "--", "/", ":", "@", "[", "]", "1:2", "sha256:"]),
    max_size=14,
)


@given(pieces, st.booleans())
def test_our_expressions_accept_what_distributions_own_accepts(parts: list[str], with_digest: bool) -> None:
    text = "".join(parts) + ("@sha256:" + "f" * 32 if with_digest else "")
    expected = GO_GRAMMAR.fullmatch(text) is not None
    assert (PLAIN.match(text) is not None) == expected, "the CRD schema's pattern"
    assert (REFERENCE.fullmatch(text) is not None) == expected, "the webhook's expression"
    if not expected:
        assert reference_errors(text)


def test_the_crd_schema_holds_the_same_pattern_and_length() -> None:
    image = openapi_schema(FooV1)["properties"]["spec"]["properties"]["deployment"]["properties"]["image"]
    assert (image["pattern"], image["maxLength"]) == (REFERENCE_PATTERN, MAX_LENGTH)


def test_a_default_image_outside_the_grammar_is_a_usage_error_at_start() -> None:
    assert image_reference("registry.example.com/nginx:1.27") == "registry.example.com/nginx:1.27"
    with pytest.raises(argparse.ArgumentTypeError, match="is not an image reference"):
        image_reference("nginx:latest\n")
    with pytest.raises(SystemExit) as exited:
        parse_controller_flags(["--default-image", " nginx"])
    assert exited.value.code == 2
