"""Serving certificates: load at start, watch the files, swap the TLS context atomically.

Like controller-runtime's certwatcher: a new pair is used for new connections without a
restart; a broken pair (half-written, mismatched) keeps the old one and says why in the log.
The swap uses the SNI callback, which OpenSSL calls on every handshake, to hand each new
connection the newest context.

A pair replaces the one in use only if it is valid now: OpenSSL loads an expired certificate, or
one not valid yet, without a word, and every client would then refuse every handshake. So a new
pair that has expired, is not valid for another 5 minutes (more than the clock skew our own
certificates allow for: they start 5 minutes back), does not match its key or does not load is
refused: the last good pair keeps serving, readiness stays true, a WARNING says why, and
``foo_operator_certificate_reloads_refused_total{reason}`` counts it (once per pair on disk, not
once per look). The pair a process starts with is taken as it is (a process with no other
serves it, a WARNING says so when it is not valid now); one that does not load stops the start.

cryptography is imported only to describe a certificate (its subject and expiry, for the log and
a metric): OpenSSL alone loads and checks the pair, and importing cryptography is a
noticeable part of a start, so the pair a server starts with is described once it listens.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import ssl
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .tlspolicy import TLSPolicy

if TYPE_CHECKING:
    from cryptography import x509
    from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

# Why a new pair was not taken: the label of the refused-reloads counter.
RefusedReason = Literal["unreadable", "key_mismatch", "expired", "not_yet_valid"]
REFUSED_REASONS: tuple[RefusedReason, ...] = ("unreadable", "key_mismatch", "expired", "not_yet_valid")
# How far ahead of our clock a new certificate may start: the skew kube-apiserver's and our own
# certificates allow for (certs.authority starts them 5 minutes back).
CLOCK_SKEW = datetime.timedelta(minutes=5)


class CertificateFilesError(ValueError):
    """The serving pair does not load; the message names the file and what is wrong with it."""

    def __init__(self, message: str, reason: RefusedReason = "unreadable") -> None:
        super().__init__(message)
        self.reason: RefusedReason = reason


def _server_context(cert_file: Path, key_file: Path, policy: TLSPolicy) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # Python's default list still offers CBC and DHE suites for TLS 1.2: the policy narrows it.
    policy.apply(context)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as err:
        reason: RefusedReason = "key_mismatch" if err.reason == "KEY_VALUES_MISMATCH" else "unreadable"
        raise CertificateFilesError(_why_the_pair_does_not_load(cert_file, key_file, err), reason) from err
    return context


def not_valid_now(certificate_pem: bytes, now: datetime.datetime) -> CertificateFilesError | None:
    """Why the first certificate of ``certificate_pem`` is not valid at ``now`` (give or take
    CLOCK_SKEW for one that starts later), or None when it is. Imports cryptography."""
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
    except ValueError as err:
        return CertificateFilesError(f"the certificate cannot be read: {err}")
    starts, ends = certificate.not_valid_before_utc, certificate.not_valid_after_utc
    if now > ends:
        return CertificateFilesError(f"the certificate expired at {ends.isoformat()}", "expired")
    if now + CLOCK_SKEW < starts:
        return CertificateFilesError(f"the certificate is not valid until {starts.isoformat()}", "not_yet_valid")
    return None


_REFUSED_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def refused_reloads(registry: CollectorRegistry) -> Callable[[RefusedReason], None]:
    """``on_refused`` for a CertWatcher: counts refused pairs by reason in ``registry`` (each
    reason's series there from the start, at 0, so an alert's rate() has something to read)."""
    counter = _REFUSED_BY_REGISTRY.get(registry)
    if counter is None:
        from prometheus_client import Counter

        counter = _REFUSED_BY_REGISTRY[registry] = Counter(
            "foo_operator_certificate_reloads_refused_total",
            "Serving certificate pairs found on disk and not taken, by reason: unreadable, key_mismatch, "
            "expired or not_yet_valid. The pair in use keeps serving.",
            ["reason"],
            registry=registry,
        )
        for reason in REFUSED_REASONS:
            counter.labels(reason)
    return lambda reason: counter.labels(reason).inc()


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
        on_refused: Callable[[RefusedReason], None] | None = None,
        policy: TLSPolicy = TLSPolicy(),
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.policy = policy
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._on_load = on_load
        self._on_refused = on_refused
        self._now = now
        self._fingerprint = b""
        self._refused: tuple[bytes, RefusedReason] | None = None  # the pair on disk last refused, and why
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
        """Use the files if they changed and hold a pair valid now (OpenSSL checks the pair, we
        the dates); the description waits. At start, any pair that loads."""
        fingerprint = b""
        try:
            fingerprint = self._read_fingerprint()
            if fingerprint == self._fingerprint:
                return False
            certificate_pem = self.cert_file.read_bytes()
            context = self._build()
            plain = context if self.client_ca_file is None else self._build(client_ca=False)
            if self._current is not None:
                invalid = not_valid_now(certificate_pem, self._now())
                if invalid is not None:
                    raise invalid
        except (OSError, ssl.SSLError, ValueError) as err:
            if self._current is None:
                raise
            self._refuse(fingerprint, err)
            return False
        self._current, self._current_plain = context, plain
        self._fingerprint = fingerprint
        self._refused = None
        self._undescribed = certificate_pem
        return True

    def _refuse(self, fingerprint: bytes, err: Exception) -> None:
        """Keep the pair in use; say why once per pair on disk (a pair not valid yet is looked at
        again each round, and taken once it is)."""
        reason: RefusedReason = err.reason if isinstance(err, CertificateFilesError) else "unreadable"
        if self._refused == (fingerprint, reason):
            return
        self._refused = (fingerprint, reason)
        log.warning(
            "keeping the current serving certificate: the new pair is not taken",
            extra={"reason": reason, "error": str(err), "cert_file": str(self.cert_file)},
        )
        if self._on_refused is not None:
            self._on_refused(reason)

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
        described = {
            "subject": certificate.subject.rfc4514_string(),
            "not_after": certificate.not_valid_after_utc.isoformat(),
        }
        invalid = not_valid_now(certificate_pem, self._now())
        if invalid is None:
            log.info("serving certificate loaded", extra=described)
        else:  # only the pair a process started with: no other is taken unless valid now
            log.warning("serving a certificate that is not valid now", extra={**described, "error": str(invalid)})
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
