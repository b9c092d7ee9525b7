"""The certs CLI: files, names, modes, and one clear line on bad arguments."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from certs.__main__ import main
from certs.authority import issue_client, issue_serving, new_ca


def test_generate_writes_ca_cert_and_private_key_readable_only_by_owner(tmp_path: Path) -> None:
    assert main(["generate", "--service", "foo", "--namespace", "ops", "--out", str(tmp_path), "--ip", "10.0.0.1"]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"ca.crt", "tls.crt", "tls.key"}
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "foo",
        "foo.ops",
        "foo.ops.svc",
        "foo.ops.svc.cluster.local",
        "localhost",
    ]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]


def test_generate_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["generate", "--service", "foo", "--namespace", "ops", "--out", str(tmp_path)]
    assert main(args) == 0
    assert main(args) == 1
    assert "already exists (use --force to overwrite)" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ip", "999.1.1.1"], "is not an IP address"),
        (["--days", "0"], "--days must be from 1"),
        (["--service", "Bad_Name"], "is not a DNS-1123 label"),
    ],
)
def test_bad_arguments_get_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--service", "foo", "--namespace", "ops", "--out", str(tmp_path), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_serving_and_client_certificates_chain_to_the_ca(key_type: str) -> None:
    ca = new_ca("test-ca", key_type=key_type)  # type: ignore[arg-type]
    serving = issue_serving(ca, common_name="svc", dns_names=["svc"], key_type=key_type)  # type: ignore[arg-type]
    client = issue_client(ca, common_name="admin", organizations=["system:masters"])
    for leaf in (serving, client):
        leaf.certificate.verify_directly_issued_by(ca.certificate)
    assert client.certificate.subject.rfc4514_string() == "CN=admin,O=system:masters"
