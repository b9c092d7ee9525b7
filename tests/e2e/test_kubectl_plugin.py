"""`kubectl foo` as a user runs it: kubectl finds `kubectl-foo` on PATH and runs it against the real plane.

The plugin is installed the way users install it (the console script in a bin directory on
PATH); every command here goes through the real kubectl binary's plugin lookup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from hack.cluster import KubectlError, LocalControlPlane
from hack.product import LocalProduct
from insights.manifests import APISERVICE_NAME
from tests.e2e.test_aggregated_api import Insights, available, insights  # noqa: F401 (fixtures)
from tests.e2e.waiting import wait_for

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl looks plugins up on PATH; the plane's kubectl runs with os.environ plus KUBECONFIG."""
    assert (BIN / "kubectl-foo").is_file(), "kubectl-foo is not installed (make venv)"
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def kubectl_foo(plane: LocalControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl foo ARGS`: kubectl refuses flags before a plugin's name, so the plane is named by
    $KUBECONFIG, which kubectl hands the plugin in its environment (as a user's shell would)."""
    result = subprocess.run(
        [str(plane.bin.kubectl), "foo", *args], capture_output=True, text=True, timeout=300, env=plane.env()
    )
    if check and result.returncode != 0:
        raise KubectlError(result.returncode, result.args, result.stdout, result.stderr)
    return result


def _foo(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {"name": name},
            "spec": {"deployment": {"name": f"{name}-nginx"}, "replicas": 1},
        }
    )


def test_kubectl_lists_the_plugin(foo_operator: LocalProduct) -> None:
    result = foo_operator.plane.kubectl("plugin", "list", check=False)
    assert str(BIN / "kubectl-foo") in result.stdout


def test_kubectl_foo_version_and_help(foo_operator: LocalProduct) -> None:
    assert kubectl_foo(foo_operator.plane, "--version").stdout.startswith("kubectl foo ")
    help_text = kubectl_foo(foo_operator.plane, "--help").stdout
    assert all(command in help_text for command in ("health", "migrate-storage", "certs"))


def test_kubectl_foo_certs_shows_when_each_trusted_ca_expires(foo_operator: LocalProduct) -> None:
    ca = x509.load_pem_x509_certificate(foo_operator.ca_pem)
    not_after = ca.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    subject = ca.subject.rfc4514_string().removeprefix("CN=")

    table = kubectl_foo(foo_operator.plane, "certs").stdout.splitlines()
    assert table[0].split()[:4] == ["OBJECT", "FIELD", "CA", "NOT"]
    rows = {line.split()[0]: line for line in table[1:]}
    for obj in (
        "MutatingWebhookConfiguration/",
        "ValidatingWebhookConfiguration/",
        "CustomResourceDefinition/foos.samplecontroller.k8s.io",
    ):
        row = next((line for key, line in rows.items() if key.startswith(obj)), None)
        assert row is not None, f"no row for {obj} in:\n" + "\n".join(table)
        assert subject in row and not_after in row

    listed = json.loads(kubectl_foo(foo_operator.plane, "certs", "-o", "json").stdout)
    crd = [r for r in listed if r["kind"] == "CustomResourceDefinition"]
    assert crd and crd[0]["field"] == "spec.conversion.webhook.clientConfig.caBundle"
    assert crd[0]["not_after"] == not_after and crd[0]["days_left"] > 300


def test_kubectl_foo_certs_includes_the_insights_apiservice(available: Insights) -> None:
    listed = json.loads(kubectl_foo(available.plane, "certs", "-o", "json").stdout)
    apiservice = [r for r in listed if r["kind"] == "APIService"]
    assert [r["name"] for r in apiservice] == [APISERVICE_NAME]
    ca = x509.load_pem_x509_certificate(available.ca_pem)
    assert apiservice[0]["not_after"] == ca.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_kubectl_foo_health_reads_foohealths_from_the_aggregated_api(available: Insights, namespace: str) -> None:
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("web"))
    table = wait_for(
        "kubectl foo health to list web",
        lambda: kubectl_foo(available.plane, "health", "-n", namespace).stdout.splitlines(),
    )
    assert table[0].split()[:3] == ["NAME", "HEALTH", "READY"]
    assert table[1].split()[0] == "web"
    one = json.loads(kubectl_foo(available.plane, "health", "web", "-n", namespace, "-o", "json").stdout)
    assert (one["kind"], one["metadata"]["name"]) == ("FooHealth", "web")
    wide = kubectl_foo(available.plane, "health", "web", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert "DEPLOYMENT" in wide[0] and "web-nginx" in wide[1]
    every = kubectl_foo(available.plane, "health", "-A").stdout.splitlines()
    assert every[0].startswith("NAMESPACE") and any(line.split()[:2] == [namespace, "web"] for line in every)


def test_kubectl_foo_health_of_a_missing_foo_is_kubectls_one_line(available: Insights, namespace: str) -> None:
    result = kubectl_foo(available.plane, "health", "nope", "-n", namespace, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Error from server (NotFound): ") and result.stderr.count("\n") == 1


def test_kubectl_foo_migrate_storage_is_foo_operator_migrate_storage(
    foo_operator: LocalProduct, namespace: str
) -> None:
    foo_operator.plane.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("migrated"))
    result = kubectl_foo(foo_operator.plane, "migrate-storage", check=False)
    assert result.returncode == 0, result.stderr
    assert "conversion webhook: answering" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("status.storedVersions: ")


def test_a_mistake_is_one_line_and_exit_2(foo_operator: LocalProduct) -> None:
    result = kubectl_foo(foo_operator.plane, "health", "-o", "xml", check=False)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
