"""Container image references as the Kubernetes tooling reads them: distribution/reference's grammar.

The kubelet and containerd parse an image with github.com/distribution/reference (v0.6.0 here):
``[host[:port]/]path[:tag][@digest]``, lower-case path components, a tag of at most 128 word
characters, a digest of a known algorithm. A Foo's image is written into a Deployment and into
logs and terminals, so nothing outside that grammar is taken: no whitespace, no control
character, no escape sequence.

The grammar is written once (``_grammar``) and compiled twice: plain, as the CRD schema's
``pattern`` for Go's RE2 (linear by construction), and with possessive repetitions for Python's
backtracking engine, which otherwise retried every split of a long run of letters.
"""

from __future__ import annotations

import argparse
import functools
import re

NAME_MAX_LENGTH = 255  # reference.RepositoryNameTotalLengthMax
TAG_MAX_LENGTH = 128
# go-digest's registered algorithms and the length of their lower-case hex encoding.
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
# The longest reference the rules below take: a name, a tag and a sha512 digest. Longer ones are
# refused before the expression runs, which bounds its work (~0.1 ms at worst, 2 µs for nginx:1.27).
MAX_LENGTH = NAME_MAX_LENGTH + 1 + TAG_MAX_LENGTH + len("@sha512:") + _DIGEST_LENGTHS["sha512"]


def _grammar(possessive: str) -> str:
    """The reference grammar; ``possessive`` "+" makes every repetition possessive (Python),
    "" leaves the plain form RE2 takes. Either way the same language: each repetition here is
    followed by a character it cannot match, so giving some of it back never helps a match.
    """
    p = possessive
    alphanumeric = f"[a-z0-9]+{p}"
    separator = f"(?:[._]|__|-+{p})"
    # [a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9], spelled so that no dash run can end it.
    domain_component = f"[a-zA-Z0-9]+{p}(?:-+{p}[a-zA-Z0-9]+{p})*{p}"
    domain = rf"(?:{domain_component}(?:\.{domain_component})*{p}|\[[a-fA-F0-9:]+{p}\])(?::[0-9]+{p})?"
    path_component = f"{alphanumeric}(?:{separator}{alphanumeric})*{p}"
    name = f"(?:{domain}/)?{path_component}(?:/{path_component})*{p}"
    # Go's \w is ASCII; spelled out so that Python (Unicode \w) and RE2 agree.
    tag = f"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{TAG_MAX_LENGTH - 1}}}{p}"
    digest = f"[A-Za-z][A-Za-z0-9]*{p}(?:[-_+.][A-Za-z][A-Za-z0-9]*{p})*{p}:[0-9a-fA-F]{{32,}}{p}"
    return f"({name})(?::{tag})?(?:@({digest}))?"


# The CRD schema's pattern: RE2 anchors ($ is the end of the text there; Python's would let a
# trailing newline through, so Python uses fullmatch instead).
REFERENCE_PATTERN = f"^{_grammar('')}$"
REFERENCE = re.compile(_grammar("+"))  # groups: the name, the digest

_IDENTIFIER = re.compile("[a-f0-9]{64}")

EXAMPLE = "nginx:1.27, registry.example.com:5000/team/app:v2 or app@sha256:<64 hex digits>"


def reference_errors(image: str) -> tuple[str, ...]:
    """Why ``image`` is not an image reference the kubelet would parse (empty when it is).

    The messages are reference.ParseNormalizedNamed's and go-digest's, so they read as
    ``kubectl describe pod`` would show a failed pull.
    """
    if len(image) > MAX_LENGTH:
        return (f"must be no more than {MAX_LENGTH} characters (a name, a tag and a digest at their longest)",)
    return _errors_of(image)


# Remembered for the last 1,024 images (at most MAX_LENGTH characters each: ~0.5 MiB): admission
# asks about the same few images on every write, and the lookup is a tenth of the expression's
# cost; a flood of new ones costs each its match, as it would anyway.
@functools.lru_cache(maxsize=1024)
def _errors_of(image: str) -> tuple[str, ...]:
    match = REFERENCE.fullmatch(image)
    if match is None:
        lower = image.lower()
        if lower != image and REFERENCE.fullmatch(lower) is not None:
            return ("invalid reference format: repository name must be lowercase",)
        return (f"invalid reference format: must be [host[:port]/]name[:tag][@digest], e.g. {EXAMPLE}",)
    if len(match[1]) > NAME_MAX_LENGTH:
        return (f"repository name must not be more than {NAME_MAX_LENGTH} characters",)
    if _IDENTIFIER.fullmatch(image):
        return (f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings",)
    digest = match[2]
    if digest is not None:
        algorithm, _, encoded = digest.partition(":")
        length = _DIGEST_LENGTHS.get(algorithm)
        if length is None:
            return (f"unsupported digest algorithm {algorithm!r}: must be one of {', '.join(_DIGEST_LENGTHS)}",)
        if len(encoded) != length:
            return (f"invalid checksum digest length: {algorithm} has {length} hex digits",)
        if encoded != encoded.lower():
            return ("invalid checksum digest format: hex digits must be lower case",)
    return ()


def image_reference(value: str) -> str:
    """argparse's ``type`` for ``--default-image``: a default the rules would refuse is a usage
    error at start, not a refusal of every Foo that names no image."""
    errors = reference_errors(value)
    if errors:
        raise argparse.ArgumentTypeError(f"{value!r} is not an image reference: {errors[0]}")
    return value
