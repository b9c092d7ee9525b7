"""Front-proxy authentication decisions: which certificate and headers make a user, and which make 401."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from multidict import CIMultiDict, CIMultiDictProxy

from certs.authority import KeyPair, issue_client, issue_serving, new_ca
from insights.authn import Authenticator, RequestHeaderConfig, Unauthenticated, UserInfo
from insights.cluster import RequestHeaderSource

FRONT_PROXY_CA = new_ca("front-proxy-ca")
OTHER_CA = new_ca("other-ca")


def der(pair: KeyPair) -> bytes:
    return pair.certificate.public_bytes(serialization.Encoding.DER)


def headers(*items: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(items))


CONFIG = RequestHeaderConfig(client_ca_pem=FRONT_PROXY_CA.cert_pem, allowed_names=("front-proxy-client",))
AGGREGATOR = der(issue_client(FRONT_PROXY_CA, common_name="front-proxy-client"))
ALICE = headers(("X-Remote-User", "alice"), ("X-Remote-Group", "dev"), ("X-Remote-Group", "system:authenticated"))


def test_the_aggregator_certificate_makes_the_header_user() -> None:
    user = Authenticator(CONFIG).authenticate(AGGREGATOR, ALICE)
    assert user == UserInfo(name="alice", groups=("dev", "system:authenticated"), extra={})


def _client_cert(not_before: datetime.timedelta, not_after: datetime.timedelta) -> bytes:
    """The aggregator's certificate, valid from now + not_before to now + not_after."""
    now = datetime.datetime.now(datetime.UTC)
    valid = issue_client(FRONT_PROXY_CA, common_name="front-proxy-client").certificate
    builder = (
        x509.CertificateBuilder()
        .subject_name(valid.subject)
        .issuer_name(FRONT_PROXY_CA.certificate.subject)
        .public_key(valid.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .not_valid_before(now + not_before)
        .not_valid_after(now + not_after)
    )
    return builder.sign(FRONT_PROXY_CA.private_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def _expired_client_cert() -> bytes:
    return _client_cert(datetime.timedelta(days=-10), datetime.timedelta(days=-1))


@pytest.mark.parametrize(
    "why, config, peer, sent, reason_part",
    [
        ("no configuration read yet", None, AGGREGATOR, ALICE, "no requestheader configuration"),
        ("no client certificate", CONFIG, None, ALICE, "no client certificate"),
        (
            "certificate from another CA",
            CONFIG,
            der(issue_client(OTHER_CA, common_name="front-proxy-client")),
            ALICE,
            "not signed by the requestheader CA",
        ),
        (
            "CN not in requestheader-allowed-names",
            CONFIG,
            der(issue_client(FRONT_PROXY_CA, common_name="mallory")),
            ALICE,
            "not in requestheader-allowed-names",
        ),
        (
            "a serving certificate is not for client auth",
            CONFIG,
            der(issue_serving(FRONT_PROXY_CA, common_name="front-proxy-client", dns_names=["x"])),
            ALICE,
            "not for client authentication",
        ),
        ("expired certificate", CONFIG, _expired_client_cert(), ALICE, "expired"),
        ("no X-Remote-User", CONFIG, AGGREGATOR, headers(("X-Remote-Group", "system:masters")), "no username"),
        ("empty X-Remote-User", CONFIG, AGGREGATOR, headers(("X-Remote-User", "")), "no username"),
        ("garbage instead of a certificate", CONFIG, b"\x00not der", ALICE, "does not parse"),
    ],
)
def test_unauthenticated(
    why: str, config: RequestHeaderConfig | None, peer: bytes | None, sent: CIMultiDictProxy[str], reason_part: str
) -> None:
    result = Authenticator(config).authenticate(peer, sent)
    assert isinstance(result, Unauthenticated), why
    assert reason_part in result.reason


def test_empty_allowed_names_accept_any_cn_from_the_ca() -> None:
    config = RequestHeaderConfig(client_ca_pem=FRONT_PROXY_CA.cert_pem)
    peer = der(issue_client(FRONT_PROXY_CA, common_name="anything"))
    assert Authenticator(config).authenticate(peer, ALICE) == UserInfo("alice", ("dev", "system:authenticated"))


def test_extra_headers_are_lower_cased_and_unescaped_and_uid_is_read() -> None:
    config = RequestHeaderConfig(client_ca_pem=FRONT_PROXY_CA.cert_pem, uid_headers=("X-Remote-Uid",))
    sent = headers(
        ("X-Remote-User", "alice"),
        ("X-Remote-Extra-Scopes", "view"),
        ("x-remote-extra-scopes", "edit"),
        ("X-Remote-Extra-Example.org%2Fteam", "a"),
        ("X-Remote-Uid", "1234"),
    )
    user = Authenticator(config).authenticate(AGGREGATOR, sent)
    assert isinstance(user, UserInfo)
    assert dict(user.extra) == {"scopes": ("view", "edit"), "example.org/team": ("a",)}
    assert user.uid == "1234"


def test_configured_header_names_replace_the_defaults() -> None:
    config = RequestHeaderConfig(
        client_ca_pem=FRONT_PROXY_CA.cert_pem,
        username_headers=("X-User",),
        group_headers=("X-Groups",),
        extra_headers_prefixes=("X-Extra-",),
    )
    sent = headers(("X-Remote-User", "ignored"), ("X-User", "bob"), ("X-Groups", "g"), ("X-Extra-K", "v"))
    assert Authenticator(config).authenticate(AGGREGATOR, sent) == UserInfo("bob", ("g",), {"k": ("v",)})


def test_config_map_data_is_read_like_kube_apiserver_writes_it() -> None:
    data = {
        "client-ca-file": OTHER_CA.cert_pem.decode(),
        "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
        "requestheader-allowed-names": json.dumps(["front-proxy-client"]),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
    }
    config = RequestHeaderConfig.from_config_map_data(data)
    assert config == CONFIG
    assert RequestHeaderConfig.from_config_map_data({"client-ca-file": "x"}) is None
    with pytest.raises(ValueError):
        RequestHeaderConfig.from_config_map_data({**data, "requestheader-allowed-names": "front-proxy-client"})


def test_a_new_configuration_takes_effect_at_once() -> None:
    authenticator = Authenticator(CONFIG)
    assert isinstance(authenticator.authenticate(AGGREGATOR, ALICE), UserInfo)
    assert authenticator.update(RequestHeaderConfig(client_ca_pem=OTHER_CA.cert_pem)) is True
    assert isinstance(authenticator.authenticate(AGGREGATOR, ALICE), Unauthenticated)
    assert authenticator.update(RequestHeaderConfig(client_ca_pem=OTHER_CA.cert_pem)) is False


def test_a_bundle_of_several_cas_trusts_each() -> None:
    config = RequestHeaderConfig(client_ca_pem=OTHER_CA.cert_pem + FRONT_PROXY_CA.cert_pem)
    assert isinstance(Authenticator(config).authenticate(AGGREGATOR, ALICE), UserInfo)


def test_the_config_map_source_updates_the_authenticator_and_the_tls_ca_file(tmp_path: Path) -> None:
    authenticator = Authenticator()
    source = RequestHeaderSource(
        client=None,
        authenticator=authenticator,  # type: ignore[arg-type]
        ca_file=tmp_path / "ca" / "requestheader-ca.crt",
    )
    data = {
        "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
    }
    source._changed({"data": data})
    assert authenticator.config == CONFIG
    assert (tmp_path / "ca" / "requestheader-ca.crt").read_bytes() == FRONT_PROXY_CA.cert_pem
    source._changed({"data": {**data, "requestheader-client-ca-file": "not a certificate"}})
    assert authenticator.config == CONFIG  # a broken bundle never replaces a good one
    source._changed({"data": {**data, "requestheader-client-ca-file": OTHER_CA.cert_pem.decode()}})
    assert (tmp_path / "ca" / "requestheader-ca.crt").read_bytes() == OTHER_CA.cert_pem


def test_a_trusted_certificates_verdict_ends_at_its_not_after_on_a_kept_alive_connection() -> None:
    # A kept-alive connection presents the same certificate on every request, for as long as it
    # lives: the cached "trusted" must not outlive the certificate.
    now = datetime.datetime.now(datetime.UTC)
    peer = _client_cert(datetime.timedelta(minutes=-1), datetime.timedelta(seconds=30))
    clock = [now]
    authenticator = Authenticator(CONFIG, clock=lambda: clock[0])
    assert isinstance(authenticator.authenticate(peer, ALICE), UserInfo)
    clock[0] = now + datetime.timedelta(seconds=29)
    assert isinstance(authenticator.authenticate(peer, ALICE), UserInfo)
    clock[0] = now + datetime.timedelta(seconds=31)
    refused = authenticator.authenticate(peer, ALICE)
    assert isinstance(refused, Unauthenticated) and "expired" in refused.reason


def test_a_certificate_not_yet_valid_is_trusted_once_it_is() -> None:
    now = datetime.datetime.now(datetime.UTC)
    peer = _client_cert(datetime.timedelta(seconds=10), datetime.timedelta(hours=1))
    clock = [now]
    authenticator = Authenticator(CONFIG, clock=lambda: clock[0])
    assert isinstance(authenticator.authenticate(peer, ALICE), Unauthenticated)
    clock[0] = now + datetime.timedelta(seconds=11)
    assert isinstance(authenticator.authenticate(peer, ALICE), UserInfo)
