"""Serving certificates: load at start, watch the files, swap the TLS context atomically.

Like controller-runtime's certwatcher: a new pair is used for new connections without a
restart; a broken pair (half-written, mismatched) keeps the old one and says why in the log.
The swap uses the SNI callback, which OpenSSL calls on every handshake, to hand each new
connection the newest context.

cryptography is imported only to describe a certificate (its subject and expiry, for the log and
a metric): OpenSSL alone loads and checks the pair, and importing cryptography is a
noticeable part of a start, so the pair a server starts with is described once it listens.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .tlspolicy import TLSPolicy

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger(__name__)

# The names of a serving pair and its CA: the data keys of a kubernetes.io/tls Secret, so the files
# a mounted Secret gives, what `foo-operator-certs generate` writes and what every server reads.
CA_CERT, TLS_CERT, TLS_KEY = "ca.crt", "tls.crt", "tls.key"


class CertificateFilesError(ValueError):
    """The serving pair does not load; the message names the file and what is wrong with it."""


def _server_context(cert_file: Path, key_file: Path, policy: TLSPolicy) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # Python's default list still offers CBC and DHE suites for TLS 1.2: the policy narrows it.
    policy.apply(context)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as err:
        raise CertificateFilesError(_why_the_pair_does_not_load(cert_file, key_file, err)) from err
    return context


def check_pair(cert_file: Path, key_file: Path, policy: TLSPolicy) -> None:
    """Load the pair once and keep nothing: CertificateFilesError, naming the file at fault, if
    it does not load."""
    _server_context(cert_file, key_file, policy)


def _why_the_pair_does_not_load(cert_file: Path, key_file: Path, err: ssl.SSLError) -> str:
    """OpenSSL's answer ("[SSL] PEM lib") names neither file: find the one at fault."""
    try:
        ssl.create_default_context(cadata=cert_file.read_text(errors="replace"))
    except (ssl.SSLError, ValueError, OSError):
        return f"{cert_file}: not a PEM certificate (no readable -----BEGIN CERTIFICATE----- block)"
    key = key_file.read_bytes() if key_file.is_file() else b""
    if b"-----BEGIN" not in key or b"PRIVATE KEY-----" not in key:
        return f"{key_file}: not a PEM private key (no -----BEGIN ... PRIVATE KEY----- block)"
    if err.reason == "KEY_VALUES_MISMATCH":
        return f"{key_file} is not the private key of the certificate in {cert_file} (KEY_VALUES_MISMATCH)"
    return f"{cert_file} and {key_file} do not load as a pair: {err.reason or err}"


class CertWatcher:
    """Holds the current serving context for ``cert_file``/``key_file`` and reloads on change.

    One watcher per pair hands out both contexts a process serves it with: the serving port's
    (asking for client certificates when ``client_ca_file`` is given) and the metrics port's
    (never asking), so the files are read and checked once, not once per port.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        client_ca_file: Path | None = None,
        on_load: Callable[[x509.Certificate], None] | None = None,
        policy: TLSPolicy = TLSPolicy(),
    ) -> None:
        self.policy = policy
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._on_load = on_load
        self._fingerprint = b""
        self._current: ssl.SSLContext | None = None
        self._current_plain: ssl.SSLContext | None = None  # the same pair, asking for no client certificate
        self._undescribed: bytes | None = None  # the PEM of a pair loaded but not yet described

    @property
    def loaded(self) -> bool:
        return self._current is not None

    def _read_fingerprint(self) -> bytes:
        digest = hashlib.sha256(self.cert_file.read_bytes())
        digest.update(self.key_file.read_bytes())
        if self.client_ca_file is not None and self.client_ca_file.exists():
            digest.update(self.client_ca_file.read_bytes())
        return digest.digest()

    def _build(self, *, client_ca: bool = True) -> ssl.SSLContext:
        context = _server_context(self.cert_file, self.key_file, self.policy)
        if client_ca and self.client_ca_file is not None:
            # Ask for (not require) a client certificate: the aggregated API decides per request.
            # Ask even before the CA file exists, so a listener built early still asks later on.
            if self.client_ca_file.exists():
                context.load_verify_locations(self.client_ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL
        return context

    def reload(self) -> bool:
        """Load the files if they changed; True when a new pair is now in use.

        The pair in use is described if it has not been yet, changed or not: a description that
        failed once (its log line, ``on_load``'s expiry metric) is tried again next round.
        """
        changed = self._load()
        self.describe()
        return changed

    def _load(self) -> bool:
        """Use the files if they changed (OpenSSL checks the pair); the description waits."""
        try:
            fingerprint = self._read_fingerprint()
            if fingerprint == self._fingerprint:
                return False
            certificate_pem = self.cert_file.read_bytes()
            context = self._build()
            plain = context if self.client_ca_file is None else self._build(client_ca=False)
        except (OSError, ssl.SSLError, ValueError) as err:
            if self._current is None:
                raise
            log.warning("keeping the current certificate: the new files do not load", extra={"error": str(err)})
            return False
        self._current, self._current_plain = context, plain
        self._fingerprint = fingerprint
        self._undescribed = certificate_pem
        return True

    def describe(self) -> None:
        """Log the subject and expiry of the pair in use and hand it to ``on_load``, once per pair."""
        certificate_pem = self._undescribed
        if certificate_pem is None:
            return
        from cryptography import x509

        try:
            certificate = x509.load_pem_x509_certificate(certificate_pem)
        except ValueError as err:  # OpenSSL took it; a certificate cryptography cannot read still serves
            self._described(certificate_pem)
            log.warning("serving certificate loaded, but cannot be described", extra={"error": str(err)})
            return
        self._described(certificate_pem)
        log.info(
            "serving certificate loaded",
            extra={
                "subject": certificate.subject.rfc4514_string(),
                "not_after": certificate.not_valid_after_utc.isoformat(),
            },
        )
        if self._on_load is not None:
            self._on_load(certificate)

    def _described(self, certificate_pem: bytes) -> None:
        # Cleared only if no newer pair came meanwhile (the first description runs in a thread).
        if self._undescribed is certificate_pem:
            self._undescribed = None

    def server_context(self, *, client_ca: bool = True) -> ssl.SSLContext:
        """The context to give a server once; it hands each handshake the newest pair.

        ``client_ca=False``: one that never asks for a client certificate, for the metrics port
        beside a serving port that does (Prometheus presents none, or one of its own CA).
        """
        if self._current is None:
            self._load()  # described by ``watch``, once the server listens
        base = self._build(client_ca=client_ca)

        def pick(ssl_object: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
            current = self._current if client_ca else self._current_plain
            if current is not None:
                ssl_object.context = current

        base.sni_callback = pick
        return base

    async def watch(self, interval: float = 5.0) -> None:
        """Describe the pair in use, then poll the files forever (cancel to stop); cheap: a hash
        of three small files. The first description runs in a thread: it imports cryptography."""
        describing = asyncio.ensure_future(asyncio.to_thread(self.describe))
        try:
            await asyncio.shield(describing)
        except Exception:
            # Only the log line and the expiry metric are lost; the pair itself serves.
            log.exception("cannot describe the serving certificate; still watching its files")
        finally:
            if not describing.done():  # cancelled meanwhile: no thread outlives the server that started it
                await asyncio.wait([describing])
        while True:
            await asyncio.sleep(interval)
            try:
                self.reload()
            except Exception:
                # A watcher that stopped here would leave the process serving a pair that expires,
                # with nothing in the log after this line: say so and look again next round.
                log.exception("reloading the serving certificate failed; retrying", extra={"interval": interval})
