"""A serving pair that is not valid now never replaces the one that is (issue 34: an expired pair
reloaded hot made every client refuse every handshake, and the log said INFO "loaded").

Real TLS on loopback: a client that verifies against the CA, as kube-apiserver does, shakes hands
with what the watcher serves before and after the files change.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from serving.tls import CLOCK_SKEW, CertWatcher, refused_reloads

NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    pem: bytes

    @classmethod
    def create(cls) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - 10 * DAY)
            .not_valid_after(NOW + 3650 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert.public_bytes(serialization.Encoding.PEM))

    def write_pair(self, directory: Path, *, starts: datetime.datetime, ends: datetime.datetime, cn: str) -> None:
        """A pair for localhost valid from ``starts`` to ``ends``, written as tls.crt and tls.key."""
        key = ec.generate_private_key(ec.SECP256R1())
        issuer = x509.load_pem_x509_certificate(self.pem).subject
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(starts)
            .not_valid_after(ends)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        (directory / "tls.key").write_bytes(key_pem)


@dataclass
class Served:
    """A TLS server on loopback whose context is the watcher's; ``served_cn`` shakes hands with it."""

    watcher: CertWatcher
    authority: Authority
    directory: Path
    port: int
    registry: CollectorRegistry

    async def served_cn(self, *, verify: bool = True) -> str:
        client = ssl.create_default_context(cadata=self.authority.pem.decode())
        if not verify:
            client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=client, server_hostname="localhost")
        try:
            peer = x509.load_der_x509_certificate(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
            return str(peer.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
        finally:
            writer.close()
            await writer.wait_closed()

    def refused(self, reason: str) -> float:
        value = self.registry.get_sample_value("foo_operator_certificate_reloads_refused_total", {"reason": reason})
        return value or 0.0


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    authority = Authority.create()
    directory = tmp_path / "pair"
    authority.write_pair(directory, starts=NOW - DAY, ends=NOW + 30 * DAY, cn="good")
    registry = CollectorRegistry()
    # The watcher's clock stands at NOW, which the pairs' dates are counted from, however long the session runs.
    watcher = CertWatcher(
        directory / "tls.crt", directory / "tls.key", on_refused=refused_reloads(registry), now=lambda: NOW
    )
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=watcher.server_context())
    watcher.describe()  # as ``watch`` does once the server listens
    try:
        yield Served(watcher, authority, directory, server.sockets[0].getsockname()[1], registry)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("starts", "ends", "reason"),
    [
        (NOW - 30 * DAY, NOW - DAY, "expired"),
        (NOW + DAY, NOW + 30 * DAY, "not_yet_valid"),
        (NOW + CLOCK_SKEW + datetime.timedelta(minutes=1), NOW + 30 * DAY, "not_yet_valid"),
    ],
)
async def test_a_pair_not_valid_now_is_refused_and_the_good_one_keeps_serving(
    served: Served, starts: datetime.datetime, ends: datetime.datetime, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await served.served_cn() == "good"
    served.authority.write_pair(served.directory, starts=starts, ends=ends, cn="bad")
    with caplog.at_level(logging.INFO, logger="serving.tls"):
        for _ in range(3):  # each look finds the same pair: one warning, one count
            assert served.watcher.reload() is False
    assert await served.served_cn() == "good", "clients still get a certificate they accept"
    assert served.watcher.loaded, "readiness stays true"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and getattr(warnings[0], "reason", None) == reason
    assert "serving certificate loaded" not in caplog.text
    assert served.refused(reason) == 1.0


async def test_a_pair_starting_within_the_clock_skew_is_taken(served: Served) -> None:
    """Our clock may be behind the issuer's: a client on its clock accepts it now."""
    served.authority.write_pair(served.directory, starts=NOW + datetime.timedelta(minutes=2), ends=NOW + DAY, cn="new")
    assert served.watcher.reload() is True
    assert await served.served_cn(verify=False) == "new"


async def test_a_pair_refused_as_not_yet_valid_is_taken_once_it_is(tmp_path: Path) -> None:
    authority = Authority.create()
    directory = tmp_path / "pair"
    authority.write_pair(directory, starts=NOW - DAY, ends=NOW + 30 * DAY, cn="good")
    clock = [NOW]
    watcher = CertWatcher(directory / "tls.crt", directory / "tls.key", now=lambda: clock[0])
    watcher.server_context()
    authority.write_pair(directory, starts=NOW + DAY, ends=NOW + 30 * DAY, cn="tomorrow")
    assert watcher.reload() is False
    clock[0] = NOW + DAY
    assert watcher.reload() is True


async def test_a_key_that_is_not_the_certificates_is_refused_with_its_reason(served: Served, tmp_path: Path) -> None:
    served.authority.write_pair(tmp_path / "other", starts=NOW - DAY, ends=NOW + DAY, cn="other")
    (served.directory / "tls.key").write_bytes((tmp_path / "other" / "tls.key").read_bytes())
    assert served.watcher.reload() is False
    assert await served.served_cn() == "good"
    assert served.refused("key_mismatch") == 1.0 and served.refused("expired") == 0.0


async def test_a_process_starts_with_the_pair_it_has_and_warns_when_it_is_not_valid_now(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority = Authority.create()
    authority.write_pair(tmp_path, starts=NOW - 30 * DAY, ends=NOW - DAY, cn="stale")
    watcher = CertWatcher(tmp_path / "tls.crt", tmp_path / "tls.key")
    watcher.server_context()  # no other pair to serve: it serves this one, as before
    with caplog.at_level(logging.INFO, logger="serving.tls"):
        watcher.describe()
    assert watcher.loaded
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "serving a certificate that is not valid now"
    ]
