"""A list or watch request's selectors, parsed once: what authorization pins and what the filter applies.

Both come from this one parse, so the name a SubjectAccessReview is asked about is the very
`metadata.name` requirement the filter enforces. The grammar is apimachinery's (labels.py,
fields.py), linear in the input; the length cap bounds the work per request whatever the
front door lets through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from apimachinery import name_rules
from apimachinery.fields import FieldSelector, parse_field_selector
from apimachinery.labels import LabelSelector, SelectorError, go_quote, parse_label_selector
from apimachinery.objects import Object, ObjectView

__all__ = ["MAX_SELECTOR_LENGTH", "SelectorError", "Selectors", "parse_selectors"]

# kube-apiserver has no cap of its own (Go's 1 MiB header limit bounds it); our HTTP parser stops a
# request line at 8 KiB. 4 KiB per selector is far above what people and controllers send (label
# keys and values are at most 317 and 63 bytes) and leaves room in that line for the rest of the query.
MAX_SELECTOR_LENGTH = 4096

# The fields every apiserver supports for every resource.
FIELDS: dict[str, Callable[[Object], str]] = {
    "metadata.name": lambda o: ObjectView(o).name,
    "metadata.namespace": lambda o: ObjectView(o).namespace,
}


@dataclass(frozen=True)
class Selectors:
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    @property
    def empty(self) -> bool:
        """Selects everything (kube-apiserver's Predicate.Empty: a list may then count what remains)."""
        return not self.labels.requirements and not self.fields.requirements

    def pinned_name(self) -> str:
        """The name a list or watch is about, as RequestInfo reads it: `metadata.name=x`, x a valid path segment."""
        name = self.fields.requires_exact_match("metadata.name")
        return name if name is not None and not name_rules.path_segment_name(name) else ""

    def check_fields(self) -> None:
        """The field label conversion of an apiserver built on k8s.io/apiserver for a kind that
        registers none (runtime.DefaultMetaV1FieldSelectorConversion): only the two metadata fields."""
        for requirement in self.fields.requirements:
            if requirement.field not in FIELDS:
                raise SelectorError(
                    f"{go_quote(requirement.field)} is not a known field selector: "
                    f'only "metadata.name", "metadata.namespace"'
                )

    def matches(self, obj: Object) -> bool:
        labels = ObjectView(obj).labels
        return self.labels.matches(labels) and all(
            (FIELDS.get(r.field, _unknown)(obj) == r.value) is (r.operator == "=") for r in self.fields.requirements
        )


def _unknown(obj: Object) -> str:
    return ""  # fields.Set.Get of a field the object does not have


def _capped(name: str, selector: str) -> str:
    if len(selector) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"{name} is {len(selector)} characters long; at most {MAX_SELECTOR_LENGTH} are accepted")
    return selector


def parse_selectors(label_selector: str = "", field_selector: str = "") -> Selectors:
    """Both selectors of a request, in the order ListOptions decodes them (labels first)."""
    labels = parse_label_selector(_capped("labelSelector", label_selector))
    fields = parse_field_selector(_capped("fieldSelector", field_selector))
    return Selectors(labels, fields)
