"""A tiny certificate authority: make a CA, then serving and client certificates signed by it.

Pure computation over ``cryptography``; writing files or Secrets lives elsewhere.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ecdsa", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Clocks of the apiserver and of this process may disagree a little; backdating avoids
# "certificate is not yet valid" right after generation.
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    @cached_property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @cached_property
    def private_key(self) -> PrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
            raise ValueError("only ECDSA and RSA keys are supported")
        return key

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc


def _new_key(key_type: KeyType) -> PrivateKey:
    if key_type == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key type {key_type!r}: use 'ecdsa' or 'rsa'")


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate_private_key(key_type: KeyType = "ecdsa") -> bytes:
    """A new private key as PEM (e.g. for service-account token signing)."""
    return _key_pem(_new_key(key_type))


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object, days: int) -> x509.CertificateBuilder:
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(*, signs_certificates: bool, enciphers_keys: bool) -> x509.KeyUsage:
    """Digital signatures always; certificate and CRL signing for a CA; key encipherment for RSA TLS."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=enciphers_keys,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(common_name: str, *, days: int = 3650, key_type: KeyType = "ecdsa") -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _new_key(key_type)
    name = _name(common_name)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True, enciphers_keys=False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    days: int,
    key_type: KeyType,
    san: x509.SubjectAlternativeName | None = None,
) -> KeyPair:
    key = _new_key(key_type)
    # RSA keys need key_encipherment for TLS key exchange; ECDSA keys do not.
    encipherment = key_type == "rsa"
    builder = (
        _builder(subject, ca.certificate.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False, enciphers_keys=encipherment), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.certificate.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(ca.private_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving(
    ca: KeyPair,
    *,
    common_name: str,
    dns_names: Sequence[str],
    ips: Sequence[str] = (),
    days: int = 365,
    key_type: KeyType = "ecdsa",
) -> KeyPair:
    """A TLS server certificate for the given DNS names and IP addresses."""
    if not dns_names and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    try:
        addresses = [ipaddress.ip_address(ip) for ip in ips]
    except ValueError as err:
        raise ValueError(f"not an IP address: {err}") from None
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    names += [x509.IPAddress(a) for a in addresses]
    return _leaf(
        ca,
        _name(common_name),
        ExtendedKeyUsageOID.SERVER_AUTH,
        days,
        key_type,
        x509.SubjectAlternativeName(names),
    )


def issue_client(
    ca: KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    days: int = 365,
    key_type: KeyType = "ecdsa",
) -> KeyPair:
    """A TLS client certificate; Kubernetes reads CN as the user and O as the groups."""
    return _leaf(ca, _name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH, days, key_type)


def self_signed(host: str, *, days: int = 365, key_type: KeyType = "ecdsa") -> KeyPair:
    """A self-signed serving pair for ``host``, as controller-runtime makes for secure metrics when
    given no certificate: callers authenticate with tokens, not by this identity."""
    key = _new_key(key_type)
    name = _name(host)
    cert = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_dns_names(service: str, namespace: str) -> list[str]:
    """Every name a Service is dialled by, in the order Kubernetes documents them."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]
