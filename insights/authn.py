"""Front-proxy authentication: trust X-Remote-* headers only from the aggregator's client certificate.

Like a Kubernetes extension apiserver's requestheader authenticator: the configuration comes
from ConfigMap `kube-system/extension-apiserver-authentication` (written by kube-apiserver from
its `--requestheader-*` flags); a request is authenticated when its TLS client certificate was
issued by a CA in `requestheader-client-ca-file`, is valid now, is for client auth, and has a CN
in `requestheader-allowed-names` (empty = any). The user is then read from the headers.

The TLS layer has already checked the chain against the same CA bundle (Python's ssl cannot ask
for a certificate without verifying it); the check here is per request and uses the *current*
configuration, so a CA removed from the ConfigMap stops working before the listener reloads.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from multidict import CIMultiDictProxy

log = logging.getLogger(__name__)

CONFIG_MAP_NAMESPACE = "kube-system"
CONFIG_MAP_NAME = "extension-apiserver-authentication"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    uid: str = ""

    def key(self) -> tuple[Any, ...]:
        """Hashable identity, for caching authorization decisions."""
        return self.name, self.uid, self.groups, tuple(sorted(self.extra.items()))


@dataclass(frozen=True)
class Unauthenticated:
    """Why a request is not authenticated: logged, never sent (Kubernetes says only "Unauthorized")."""

    reason: str


def _json_list(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None or value == "":
        return default
    parsed = json.loads(value)
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise ValueError(f"expected a JSON array of strings, got {value!r}")
    return tuple(parsed)


@dataclass(frozen=True)
class RequestHeaderConfig:
    """The `requestheader-*` part of extension-apiserver-authentication."""

    client_ca_pem: bytes
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    uid_headers: tuple[str, ...] = ()

    @classmethod
    def from_config_map_data(cls, data: Mapping[str, str]) -> RequestHeaderConfig | None:
        """None when the apiserver runs without front-proxy flags (nothing to trust)."""
        ca = data.get("requestheader-client-ca-file")
        if not ca:
            return None
        return cls(
            client_ca_pem=ca.encode(),
            allowed_names=_json_list(data.get("requestheader-allowed-names"), ()),
            username_headers=_json_list(data.get("requestheader-username-headers"), ("X-Remote-User",)),
            group_headers=_json_list(data.get("requestheader-group-headers"), ("X-Remote-Group",)),
            extra_headers_prefixes=_json_list(data.get("requestheader-extra-headers-prefix"), ("X-Remote-Extra-",)),
            uid_headers=_json_list(data.get("requestheader-uid-headers"), ()),
        )

    @cached_property
    def authorities(self) -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates(self.client_ca_pem)


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Authenticator:
    """Holds the current RequestHeaderConfig (swapped when the ConfigMap changes)."""

    def __init__(
        self, config: RequestHeaderConfig | None = None, *, clock: Callable[[], datetime.datetime] = _utc_now
    ) -> None:
        self._config = config
        self._clock = clock
        # peer DER → (why it is refused, None when trusted; until when that verdict holds). A kept-alive
        # connection presents the same certificate for hours: trust must end at its notAfter.
        self._verified: dict[bytes, tuple[str | None, datetime.datetime | None]] = {}

    @property
    def config(self) -> RequestHeaderConfig | None:
        return self._config

    def update(self, config: RequestHeaderConfig | None) -> bool:
        """Use ``config`` from now on; True if it differs from the current one."""
        if config == self._config:
            return False
        self._config = config
        self._verified.clear()
        return True

    def _certificate_problem(self, der: bytes, config: RequestHeaderConfig) -> str | None:
        now = self._clock()
        cached = self._verified.get(der)
        if cached is not None and (cached[1] is None or now <= cached[1]):
            return cached[0]
        problem, not_after = _certificate_problem(der, config, now)
        if len(self._verified) > 1024:
            self._verified.clear()
        if problem is None:
            self._verified[der] = (None, not_after)
        elif "expired" not in problem:  # a refusal for anything but time stands until the configuration changes
            self._verified[der] = (problem, None)
        return problem

    def authenticate(self, peer_der: bytes | None, headers: CIMultiDictProxy[str]) -> UserInfo | Unauthenticated:
        config = self._config
        if config is None:
            return Unauthenticated("no requestheader configuration (extension-apiserver-authentication) yet")
        if peer_der is None:
            return Unauthenticated("no client certificate")
        problem = self._certificate_problem(peer_der, config)
        if problem is not None:
            return Unauthenticated(problem)
        return user_from_headers(headers, config)


def _certificate_problem(
    der: bytes, config: RequestHeaderConfig, now: datetime.datetime
) -> tuple[str | None, datetime.datetime | None]:
    """Why the certificate is not the aggregator's (None if it is), and its notAfter."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return "client certificate does not parse", None
    return _problem(cert, config, now), cert.not_valid_after_utc


def _problem(cert: x509.Certificate, config: RequestHeaderConfig, now: datetime.datetime) -> str | None:
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return "client certificate has expired or is not yet valid"
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in usages:
            return "client certificate is not for client authentication"
    except x509.ExtensionNotFound:
        pass
    for authority in config.authorities:
        try:
            cert.verify_directly_issued_by(authority)
            break
        except (InvalidSignature, ValueError, TypeError):  # not this CA (name, key type or signature)
            continue
    else:
        return f"client certificate {_common_name(cert)!r} is not signed by the requestheader CA"
    if config.allowed_names and _common_name(cert) not in config.allowed_names:
        return f"client certificate CN {_common_name(cert)!r} is not in requestheader-allowed-names"
    return None


def user_from_headers(headers: CIMultiDictProxy[str], config: RequestHeaderConfig) -> UserInfo | Unauthenticated:
    name = next((v for h in config.username_headers for v in headers.getall(h, []) if v), "")
    if not name:
        return Unauthenticated(f"no username in {', '.join(config.username_headers)}")
    groups = tuple(v for h in config.group_headers for v in headers.getall(h, []))
    extra: dict[str, list[str]] = {}
    prefixes = [p.lower() for p in config.extra_headers_prefixes]
    for header, value in headers.items():
        lowered = header.lower()
        for prefix in prefixes:
            if lowered.startswith(prefix) and len(lowered) > len(prefix):
                # Keys are lower-cased and percent-decoded, as Kubernetes does (keys may hold '/').
                extra.setdefault(unquote(lowered[len(prefix) :]), []).append(value)
                break
    uid = next((v for h in config.uid_headers for v in headers.getall(h, []) if v), "")
    return UserInfo(name=name, groups=groups, extra={k: tuple(v) for k, v in extra.items()}, uid=uid)
