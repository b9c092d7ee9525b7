"""Kubernetes' rules for names and labels (k8s.io/apimachinery/pkg/util/validation), as Go words them.

Checked with character sets, never with backtracking regexes, so the cost is linear in the input
whatever a caller sends; lengths are counted in UTF-8 bytes, as Go's `len` counts them.
"""

from __future__ import annotations

_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER_ALNUM | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_QUALIFIED_CHARS = "".join(sorted(_ALNUM | set("-_.")))
_DNS1123_LABEL_CHARS = "".join(sorted(_LOWER_ALNUM | {"-"}))

QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
LABEL_VALUE_MAX_LENGTH = 63
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = rf"{DNS1123_LABEL_FMT}(\.{DNS1123_LABEL_FMT})*"
DNS1123_SUBDOMAIN_MAX_LENGTH = 253

_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)


def byte_length(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, spacing and all."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    listed = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {listed}regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _is_qualified(name: str) -> bool:
    """Matches QUALIFIED_NAME_FMT: alphanumeric at both ends, [-A-Za-z0-9_.] between."""
    return bool(name) and name[0] in _ALNUM and name[-1] in _ALNUM and not name.strip(_QUALIFIED_CHARS)


def _is_dns1123_subdomain(value: str) -> bool:
    """Matches DNS1123_SUBDOMAIN_FMT: dot-separated labels, each alphanumeric at both ends."""
    return all(
        label and label[0] in _LOWER_ALNUM and label[-1] in _LOWER_ALNUM and not label.strip(_DNS1123_LABEL_CHARS)
        for label in value.split(".")
    )


def dns1123_subdomain(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain: why ``value`` is not a DNS-1123 subdomain (empty when it is)."""
    errors = []
    if byte_length(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _is_dns1123_subdomain(value):
        errors.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def qualified_name(value: str) -> list[str]:
    """validation.IsQualifiedName (label keys): `[prefix/]name`, prefix a DNS-1123 subdomain."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(f"prefix part {message}" for message in dns1123_subdomain(prefix))
    else:
        return [
            f"a qualified name {regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, 'MyName', 'my.name', '123-abc')}"
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif byte_length(name) > QUALIFIED_NAME_MAX_LENGTH:
        errors.append(f"name part {max_len_error(QUALIFIED_NAME_MAX_LENGTH)}")
    if not _is_qualified(name):
        errors.append(
            f"name part {regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, 'MyName', 'my.name', '123-abc')}"
        )
    return errors


def label_value(value: str) -> list[str]:
    """validation.IsValidLabelValue: empty, or a qualified name part of at most 63 bytes."""
    errors = []
    if byte_length(value) > LABEL_VALUE_MAX_LENGTH:
        errors.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if value and not _is_qualified(value):
        errors.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def path_segment_name(name: str) -> list[str]:
    """path.IsValidPathSegmentName: whether ``name`` can stand in a URL path as an object's name."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]
