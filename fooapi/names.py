"""The names of the Foo API (group, kind, resource, versions, the CRD's name), where Foos live on
the apiserver, and its replica and image bounds."""

from __future__ import annotations

from apimachinery.resources import Resource

GROUP = "samplecontroller.k8s.io"
KIND = "Foo"
PLURAL = "foos"
SINGULAR = "foo"
SHORT_NAMES = ["foo"]
HUB_VERSION = "v1"
LEGACY_VERSION = "v1alpha1"
VERSIONS = (LEGACY_VERSION, HUB_VERSION)
HUB_API_VERSION = f"{GROUP}/{HUB_VERSION}"
LEGACY_API_VERSION = f"{GROUP}/{LEGACY_VERSION}"
API_VERSIONS = (LEGACY_API_VERSION, HUB_API_VERSION)
# "foos.samplecontroller.k8s.io": how Kubernetes names the resource (admission requests, errors)
# and so the name its CRD must have.
CRD_NAME = f"{PLURAL}.{GROUP}"
MIN_REPLICAS = 1
MAX_REPLICAS = 10


def foos_at(version: str) -> Resource:
    """Foos as served at ``version`` (each stored version is rewritten through its own)."""
    return Resource(GROUP, version, PLURAL, KIND)


FOOS = foos_at(HUB_VERSION)
