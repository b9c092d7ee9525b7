"""Certificate rotation as pure decisions: given what the Secret holds and the time, what next.

A CA change is done in three steps so that no client ever meets an unknown CA:

1. *trust*: a new CA joins the bundle (old + new) that every caBundle carries; serving is unchanged;
2. *switch* (one ``overlap`` later, once every apiserver trusts both): serving certificates are
   issued by the new CA;
3. *retire* (another ``overlap`` later, once every replica serves the new certificate): the old CA
   leaves the bundle.

A serving certificate near its end is simply re-issued by the current CA. The state lives in one
Secret (``SecretState``); ``next_state`` returns the next state or None when nothing is due.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from .authority import KeyPair, issue_serving, new_ca
from .files import CA_CERT, TLS_CERT, TLS_KEY
from .policy import RotationPolicy

# Secret data keys: the kubernetes.io/tls ones (files.py) and these, which only the rotator keeps.
CA_KEY = "ca.key"
NEXT_CA_CERT, NEXT_CA_KEY, CA_BUNDLE = "next-ca.crt", "next-ca.key", "ca-bundle.crt"
CHANGED_AT = "bundle-changed-at"  # when the bundle or the issuing CA last changed (ISO 8601)


@dataclass(frozen=True)
class SecretState:
    ca: KeyPair | None = None
    serving: KeyPair | None = None
    next_ca: KeyPair | None = None
    bundle: tuple[bytes, ...] = ()  # PEM CAs every client must trust
    changed_at: datetime.datetime | None = None
    step: str = field(default="", compare=False)  # what the last transition did, for the log

    @property
    def bundle_pem(self) -> bytes:
        return b"".join(self.bundle)

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> SecretState:
        """Read base64 Secret data; anything missing or unreadable counts as absent."""
        raw = {k: base64.b64decode(v) for k, v in (data or {}).items() if isinstance(v, str)}

        def pair(cert: str, key: str) -> KeyPair | None:
            if not raw.get(cert) or not raw.get(key):
                return None
            candidate = KeyPair(raw[cert], raw[key])
            try:
                candidate.certificate, candidate.private_key  # noqa: B018 - parse now, not later
            except ValueError:
                return None
            return candidate

        changed_at = None
        if raw.get(CHANGED_AT):
            try:
                changed_at = datetime.datetime.fromisoformat(raw[CHANGED_AT].decode())
            except ValueError:
                changed_at = None
        return cls(
            ca=pair(CA_CERT, CA_KEY),
            serving=pair(TLS_CERT, TLS_KEY),
            next_ca=pair(NEXT_CA_CERT, NEXT_CA_KEY),
            bundle=tuple(split_pem(raw.get(CA_BUNDLE, b""))),
            changed_at=changed_at,
        )

    def to_secret_data(self) -> dict[str, str]:
        data: dict[str, bytes] = {}
        if self.ca:
            data[CA_CERT], data[CA_KEY] = self.ca.cert_pem, self.ca.key_pem
        if self.serving:
            data[TLS_CERT], data[TLS_KEY] = self.serving.cert_pem, self.serving.key_pem
        if self.next_ca:
            data[NEXT_CA_CERT], data[NEXT_CA_KEY] = self.next_ca.cert_pem, self.next_ca.key_pem
        if self.bundle:
            data[CA_BUNDLE] = self.bundle_pem
        if self.changed_at:
            data[CHANGED_AT] = self.changed_at.isoformat().encode()
        return {k: base64.b64encode(v).decode() for k, v in data.items()}


def split_pem(bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each as its own PEM block."""
    end = b"-----END CERTIFICATE-----"
    return [block.strip() + b"\n" + end + b"\n" for block in bundle.split(end) if block.strip()]


def _needs_renewal(certificate: x509.Certificate, now: datetime.datetime, fraction: float) -> bool:
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    return certificate.not_valid_after_utc - now < lifetime * fraction


def _dns_names(certificate: x509.Certificate) -> list[str]:
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(san.get_values_for_type(x509.DNSName))


def _issued_by(serving: KeyPair, ca: KeyPair) -> bool:
    try:
        serving.certificate.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _ips(certificate: x509.Certificate) -> list[str]:
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]


def next_state(
    state: SecretState,
    now: datetime.datetime,
    dns_names: Sequence[str],
    policy: RotationPolicy = RotationPolicy(),
    *,
    ips: Sequence[str] = (),
    ca_name: str = "foo-operator-ca",
) -> SecretState | None:
    """The state to write next, or None when everything is current."""
    days = max(1, policy.serving_validity.days)

    def serve_from(ca: KeyPair) -> KeyPair:
        return issue_serving(ca, common_name=dns_names[0], dns_names=dns_names, ips=ips, days=days)

    def names_differ(serving: KeyPair) -> bool:
        return sorted(_dns_names(serving.certificate)) != sorted(dns_names) or sorted(
            _ips(serving.certificate)
        ) != sorted(ips)

    waited = state.changed_at is None or now - state.changed_at >= policy.overlap
    if state.ca is None:
        ca = new_ca(ca_name, days=max(1, policy.ca_validity.days))
        return SecretState(ca=ca, serving=serve_from(ca), bundle=(ca.cert_pem,), changed_at=now, step="created")
    if state.next_ca is not None:
        if not waited:
            return None
        # Step 2: every apiserver trusts the new CA by now; serve from it.
        return SecretState(
            ca=state.next_ca,
            serving=serve_from(state.next_ca),
            bundle=state.bundle,
            changed_at=now,
            step="switched serving to the new CA",
        )
    if len(state.bundle) > 1 and waited:
        # Step 3: every replica serves from the new CA by now; stop trusting the old one.
        return replace(state, bundle=(state.ca.cert_pem,), changed_at=now, step="retired the old CA")
    if _needs_renewal(state.ca.certificate, now, policy.renew_fraction) and len(state.bundle) == 1:
        # Step 1: trust a new CA alongside the current one.
        next_ca = new_ca(ca_name, days=max(1, policy.ca_validity.days))
        return replace(
            state,
            next_ca=next_ca,
            bundle=(state.ca.cert_pem, next_ca.cert_pem),
            changed_at=now,
            step="trusting a new CA",
        )
    if state.ca.cert_pem not in state.bundle:
        return replace(state, bundle=(*state.bundle, state.ca.cert_pem), changed_at=now, step="repaired the bundle")
    serving = state.serving
    if (
        serving is None
        or not _issued_by(serving, state.ca)
        or names_differ(serving)
        or _needs_renewal(serving.certificate, now, policy.renew_fraction)
    ):
        return replace(state, serving=serve_from(state.ca), step="renewed the serving certificate")
    return None
