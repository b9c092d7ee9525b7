"""Content negotiation: which representation of an answer the client's Accept header asks for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from apimachinery.bodies import JSON

Form = Literal["json", "yaml", "table", "partial", "discovery-v2", "discovery-v2beta1"]

YAML = "application/yaml"
TABLE = f"{JSON};as=Table;v=v1;g=meta.k8s.io"
ACCEPTED = f"{JSON}, {YAML}, {TABLE}"
# Aggregated discovery, by apidiscovery.k8s.io version: the aggregator asks /apis for it and falls
# back to legacy discovery when the answer lacks these parameters. v2beta1 is the same document
# under an older name.
DISCOVERY_FORMS: dict[str, Form] = {"v2": "discovery-v2", "v2beta1": "discovery-v2beta1"}
DISCOVERY_VERSIONS: dict[Form, str] = {form: version for version, form in DISCOVERY_FORMS.items()}


def aggregated_discovery_type(version: str) -> str:
    return f"{JSON};g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"


@dataclass(frozen=True)
class MediaRange:
    type: str
    params: dict[str, str]
    quality: float


def parse_accept(header: str) -> list[MediaRange]:
    """Media ranges in the client's order of preference (by q, then as written)."""
    ranges = []
    for position, item in enumerate(header.split(",")):
        item = item.strip()
        if not item:
            continue
        type_, *raw_params = (p.strip() for p in item.split(";"))
        params: dict[str, str] = {}
        for raw in raw_params:
            key, _, value = raw.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(params.pop("q", "1"))
        except ValueError:
            quality = 1.0
        ranges.append((-quality, position, MediaRange(type_.lower(), params, quality)))
    return [r for _, _, r in sorted(ranges, key=lambda t: (t[0], t[1])) if r.quality > 0]


def _form_of(media: MediaRange, allowed: tuple[Form, ...]) -> Form | None:
    as_ = media.params.get("as")
    if media.type in ("*/*", "application/*") and not as_:
        return "json" if "json" in allowed else None
    if media.type in (YAML, "text/yaml") and not as_:
        return "yaml" if "yaml" in allowed else None
    if media.type != JSON:
        return None
    if as_ is None:
        return "json" if "json" in allowed else None
    group, version = media.params.get("g"), media.params.get("v")
    if as_ == "Table" and group == "meta.k8s.io" and version == "v1":
        form: Form = "table"
    elif as_ in ("PartialObjectMetadata", "PartialObjectMetadataList") and group == "meta.k8s.io" and version == "v1":
        form = "partial"
    elif as_ == "APIGroupDiscoveryList" and group == "apidiscovery.k8s.io" and version in DISCOVERY_FORMS:
        form = DISCOVERY_FORMS[version]
    else:
        return None
    return form if form in allowed else None


def negotiate(accept: str, allowed: tuple[Form, ...]) -> Form | None:
    """The first form the client accepts that we can give; no Accept at all means JSON."""
    if not accept.strip():
        return "json" if "json" in allowed else allowed[0]
    for media in parse_accept(accept):
        form = _form_of(media, allowed)
        if form is not None:
            return form
    return None
