"""The Foo API: types, defaulting, validation and conversion. Pure: no I/O, no asyncio."""

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
MIN_REPLICAS = 1
MAX_REPLICAS = 10

# The pure API, re-exported so callers write ``fooapi.validate(...)``.
from .conversion import ConversionError, convert  # noqa: E402
from .defaults import DEFAULT_IMAGE, default  # noqa: E402
from .errors import FieldError  # noqa: E402
from .validation import validate  # noqa: E402

__all__ = [
    "API_VERSIONS", "DEFAULT_IMAGE", "GROUP", "HUB_API_VERSION", "KIND", "LEGACY_API_VERSION", "PLURAL",
    "ConversionError", "FieldError", "convert", "default", "validate",
]
