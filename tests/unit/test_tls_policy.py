"""The TLS flags speak kube-apiserver's words and refuse anything but Kubernetes' secure set."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from insights.__main__ import main as insights_main
from serving.tlspolicy import SECURE_TLS12_SUITES, TLSPolicy, parse_tls_policy
from webhook.command import main as webhook_main


def test_defaults_are_tls12_and_every_ecdhe_aead_suite() -> None:
    policy = parse_tls_policy("VersionTLS12", "")
    assert policy == TLSPolicy()
    assert policy.min_version == ssl.TLSVersion.TLSv1_2
    assert all(name.startswith("TLS_ECDHE_") and ("GCM" in name or "CHACHA20" in name) for name in policy.tls12_suites)
    assert len(policy.tls12_suites) == 6


def test_iana_names_map_to_openssl_names_in_the_given_order() -> None:
    policy = parse_tls_policy(
        "VersionTLS12", " TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 ,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"
    )
    assert policy.tls12_suites == (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    policy.apply(context)
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"]


def test_every_default_suite_is_one_openssl_knows() -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    TLSPolicy().apply(context)
    names = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == set(SECURE_TLS12_SUITES.values())


def test_tls13_names_are_accepted_and_change_nothing_for_tls12() -> None:
    assert parse_tls_policy(
        "VersionTLS12", "TLS_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    ).tls12_suites == ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)
    assert parse_tls_policy("VersionTLS13", "TLS_AES_256_GCM_SHA384").min_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("version", "suites", "words"),
    [
        ("VersionTLS11", "", "--tls-min-version VersionTLS11 is insecure"),
        ("VersionTLS10", "", "--tls-min-version VersionTLS10 is insecure"),
        ("TLS12", "", "--tls-min-version 'TLS12' is unknown"),
        ("VersionTLS12", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA is insecure"),
        ("VersionTLS12", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "is insecure"),
        ("VersionTLS12", "TLS_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256 is insecure"),
        ("VersionTLS12", "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "is not a cipher suite this server knows"),
        ("VersionTLS12", "ECDHE-RSA-AES128-GCM-SHA256", "is not a cipher suite this server knows"),
        ("VersionTLS12", "TLS_AES_128_GCM_SHA256", "names no TLS 1.2 suite"),
    ],
)
def test_unknown_or_insecure_values_are_refused_in_one_line(version: str, suites: str, words: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_tls_policy(version, suites)
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("main", [webhook_main, insights_main], ids=["webhook", "insights"])
@pytest.mark.parametrize(
    "flags",
    [
        ["--tls-cipher-suites", "TLS_RSA_WITH_AES_256_CBC_SHA"],
        ["--tls-min-version", "VersionTLS10"],
        ["--tls-cipher-suites", "TLS_NOPE"],
    ],
)
def test_servers_exit_2_with_one_line_on_a_bad_tls_flag(
    main: object, flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert_dir = tmp_path
    (cert_dir / "tls.crt").write_text("x")
    (cert_dir / "tls.key").write_text("x")
    assert main(["--cert-dir", str(cert_dir), *flags]) == 2  # type: ignore[operator]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tls-" in err, err
