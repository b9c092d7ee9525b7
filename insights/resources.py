"""What insights.samplecontroller.k8s.io/v1alpha1 serves: one description per resource.

Discovery, OpenAPI, request parsing and error messages all read these, so a resource is
described once.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "insights.samplecontroller.k8s.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
# The aggregator orders groups by this, then versions by versionPriority; values like
# metrics-server's (a group that should sort after the built-in ones).
GROUP_PRIORITY_MINIMUM = 1000
VERSION_PRIORITY = 15


@dataclass(frozen=True)
class Resource:
    name: str  # plural, as in URLs and RBAC rules
    singular: str
    kind: str
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    namespaced: bool = True

    @property
    def qualified(self) -> str:
        """`foohealths.insights.samplecontroller.k8s.io`, as Kubernetes names a resource in errors."""
        return f"{self.name}.{GROUP}"


CATEGORY = "foo-operator"

FOO_HEALTHS = Resource(
    name="foohealths",
    singular="foohealth",
    kind="FooHealth",
    verbs=("get", "list", "watch"),
    short_names=("fh",),
    categories=(CATEGORY,),
)
FOO_REVIEWS = Resource(
    name="fooreviews",
    singular="fooreview",
    kind="FooReview",
    verbs=("create",),
    categories=(),
)

RESOURCES: dict[str, Resource] = {r.name: r for r in (FOO_HEALTHS, FOO_REVIEWS)}
