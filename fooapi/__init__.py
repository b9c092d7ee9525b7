"""The Foo API: types, defaulting, validation, conversion, the admission rules and the views code
reads Foos through, on top of apimachinery. Pure: no I/O, no asyncio."""

from .conversion import ConversionError, convert
from .defaults import DEFAULT_IMAGE, default
from .names import (
    API_VERSIONS,
    CRD_NAME,
    GROUP,
    HUB_API_VERSION,
    HUB_VERSION,
    KIND,
    LEGACY_API_VERSION,
    LEGACY_VERSION,
    MAX_REPLICAS,
    MIN_REPLICAS,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSIONS,
)
from .validation import validate

__all__ = [
    "API_VERSIONS",
    "CRD_NAME",
    "DEFAULT_IMAGE",
    "GROUP",
    "HUB_API_VERSION",
    "HUB_VERSION",
    "KIND",
    "LEGACY_API_VERSION",
    "LEGACY_VERSION",
    "MAX_REPLICAS",
    "MIN_REPLICAS",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSIONS",
    "ConversionError",
    "convert",
    "default",
    "validate",
]
