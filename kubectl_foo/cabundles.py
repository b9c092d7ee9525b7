"""Every caBundle that makes the apiserver trust foo-operator, and when each CA in it expires.

Pure: given the objects (webhook configurations, the Foo CRD, APIServices), ``bundles`` finds
the caBundles that concern foo-operator — by what they serve, not by a release's names — and
``rows`` reads the certificates in each. A bundle holds more than one CA while a rotation
overlaps the old and the new one, so each certificate is a row of its own.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from fooapi import GROUP
from insights.resources import GROUP as INSIGHTS_GROUP

Obj = Mapping[str, Any]
NONE = "<none>"


@dataclass(frozen=True)
class Bundle:
    """One caBundle: which object holds it, where in it, and its base64 PEM ("" when unset)."""

    kind: str
    name: str
    field: str
    ca_bundle: str


@dataclass(frozen=True)
class CaRow:
    kind: str
    name: str
    field: str
    subject: str
    not_after: str
    expires_in: str
    days_left: float | None

    def cells(self) -> list[str]:
        return [f"{self.kind}/{self.name}", self.field, self.subject, self.not_after, self.expires_in]


HEADERS = ("Object", "Field", "CA", "Not After", "Expires In")


def _about_foos(webhook: Obj) -> bool:
    return any(GROUP in (rule.get("apiGroups") or ()) for rule in webhook.get("rules") or ())


def webhook_bundles(kind: str, configurations: Iterable[Obj]) -> list[Bundle]:
    found = []
    for configuration in configurations:
        name = str((configuration.get("metadata") or {}).get("name"))
        for i, webhook in enumerate(configuration.get("webhooks") or ()):
            if _about_foos(webhook):
                found.append(
                    Bundle(
                        kind,
                        name,
                        f"webhooks[{i}] {webhook.get('name')}",
                        str((webhook.get("clientConfig") or {}).get("caBundle") or ""),
                    )
                )
    return found


def crd_bundles(crds: Iterable[Obj]) -> list[Bundle]:
    found = []
    for crd in crds:
        spec = crd.get("spec") or {}
        conversion = spec.get("conversion") or {}
        if spec.get("group") != GROUP or conversion.get("strategy") != "Webhook":
            continue
        config = (conversion.get("webhook") or {}).get("clientConfig") or {}
        found.append(
            Bundle(
                "CustomResourceDefinition",
                str((crd.get("metadata") or {}).get("name")),
                "spec.conversion.webhook.clientConfig.caBundle",
                str(config.get("caBundle") or ""),
            )
        )
    return found


def apiservice_bundles(apiservices: Iterable[Obj]) -> list[Bundle]:
    return [
        Bundle(
            "APIService",
            str((a.get("metadata") or {}).get("name")),
            "spec.caBundle",
            str((a.get("spec") or {}).get("caBundle") or ""),
        )
        for a in apiservices
        if (a.get("spec") or {}).get("group") == INSIGHTS_GROUP
    ]


def certificates(ca_bundle: str) -> list[x509.Certificate]:
    """The certificates of a base64 PEM bundle; ValueError when it is not one."""
    try:
        pem = base64.b64decode(ca_bundle, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    found = x509.load_pem_x509_certificates(pem)
    return found


def human_left(seconds: float) -> str:
    """'expired 3d ago', '12d', '9y' — the scale a person plans renewals on."""
    if seconds < 0:
        return f"expired {human_left(-seconds)} ago"
    days = seconds / 86400
    if days >= 730:
        return f"{int(days // 365)}y"
    if days >= 2:
        return f"{int(days)}d"
    hours = seconds / 3600
    return f"{int(hours)}h" if hours >= 1 else f"{int(seconds // 60)}m"


def _subject(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else certificate.subject.rfc4514_string()


def rows(bundles: Iterable[Bundle], now: datetime.datetime) -> list[CaRow]:
    out = []
    for bundle in bundles:
        where = (bundle.kind, bundle.name, bundle.field)
        if not bundle.ca_bundle:
            out.append(CaRow(*where, NONE, NONE, "no caBundle: the apiserver cannot verify the server", None))
            continue
        try:
            found = certificates(bundle.ca_bundle)
        except ValueError as err:
            out.append(CaRow(*where, NONE, NONE, f"unreadable caBundle: {err}", None))
            continue
        for certificate in found:
            left = (certificate.not_valid_after_utc - now).total_seconds()
            out.append(
                CaRow(
                    *where,
                    _subject(certificate),
                    certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    human_left(left),
                    left / 86400,
                )
            )
    return out
