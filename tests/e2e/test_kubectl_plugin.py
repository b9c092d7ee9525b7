"""`kubectl foo-operator` as a user runs it: kubectl finds `kubectl-foo_operator` on PATH and runs it
against the real plane.

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

from hack.plane.cluster import KubectlError, LocalControlPlane
from hack.plane.product import LocalProduct
from insights.manifests import APISERVICE_NAME
from tests.e2e.test_aggregated_api import Insights, available, insights  # noqa: F401 (fixtures)
from tests.e2e.waiting import wait_for

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl looks plugins up on PATH; the plane's kubectl runs with os.environ plus KUBECONFIG."""
    assert (BIN / "kubectl-foo_operator").is_file(), "kubectl-foo_operator is not installed (make venv)"
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def kubectl_foo(plane: LocalControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl foo-operator ARGS`: kubectl refuses flags before a plugin's name, so the plane is named by
    $KUBECONFIG, which kubectl hands the plugin in its environment (as a user's shell would)."""
    result = subprocess.run(
        [str(plane.bin.kubectl), "foo-operator", *args], capture_output=True, text=True, timeout=300, env=plane.env()
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
    assert str(BIN / "kubectl-foo_operator") in result.stdout


def test_kubectl_foo_version_and_help(foo_operator: LocalProduct) -> None:
    assert kubectl_foo(foo_operator.plane, "--version").stdout.startswith("kubectl foo-operator ")
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
        "kubectl foo-operator health to list web",
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


def _labelled_foo(name: str, labels: dict[str, str]) -> str:
    document = yaml.safe_load(_foo(name))
    document["metadata"]["labels"] = labels
    return yaml.safe_dump(document)


def test_kubectl_foo_health_takes_kubectls_selection_and_output_flags(available: Insights, namespace: str) -> None:
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_labelled_foo("front", {"tier": "web"}))
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_labelled_foo("back", {"tier": "db"}))
    plane = available.plane

    def names(*flags: str) -> list[str]:
        return kubectl_foo(plane, "health", "-n", namespace, *flags).stdout.split()

    wait_for("both FooHealths", lambda: sorted(names("-o", "jsonpath={.items[*].metadata.name}")) == ["back", "front"])
    assert names("-l", "tier=web", "-o", "name") == ["foohealth.insights.samplecontroller.k8s.io/front"]
    assert names("--selector", "tier in (db)", "-o", "jsonpath={.items[*].metadata.name}") == ["back"]
    ranged = kubectl_foo(
        plane, "health", "-n", namespace, "-l", "tier", "-o", 'jsonpath={range .items[*]}{.metadata.name}{"\\n"}{end}'
    )
    assert sorted(ranged.stdout.splitlines()) == ["back", "front"]
    columns = kubectl_foo(
        plane,
        "health",
        "-n",
        namespace,
        "-l",
        "tier=web",
        "-o",
        "custom-columns=FOO:.metadata.name,TIER:.metadata.labels.tier",
    ).stdout.splitlines()
    assert [line.split() for line in columns] == [["FOO", "TIER"], ["front", "web"]]
    assert names("-l", "tier=web", "--request-timeout", "20s", "-o", "name") == [
        "foohealth.insights.samplecontroller.k8s.io/front"
    ]


def test_kubectl_foo_impersonates_with_as_and_as_group(available: Insights, namespace: str) -> None:
    plane = available.plane
    denied = kubectl_foo(plane, "health", "-n", namespace, "--as", "jane", check=False)
    assert denied.returncode == 1 and denied.stderr.startswith("Error from server (Forbidden): ")
    assert '"jane"' in denied.stderr and denied.stderr.count("\n") == 1
    allowed = kubectl_foo(plane, "health", "-n", namespace, "--as", "jane", "--as-group", "system:masters")
    assert allowed.returncode == 0, allowed.stderr
    # kubectl's own answer to the same impersonation, for comparison: refused the same way.
    own = plane.kubectl("get", "foos", "-n", namespace, "--as", "jane", check=False)
    assert own.returncode == 1 and own.stderr.startswith("Error from server (Forbidden): ")


def test_kubectl_completes_the_plugin_through_its_completion_command(foo_operator: LocalProduct) -> None:
    assert (BIN / "kubectl_complete-foo_operator").is_file(), "kubectl_complete-foo_operator is not installed"
    plane = foo_operator.plane

    def complete(*words: str) -> list[str]:
        # kubectl registers plugins for completion only when __complete is its first argument, so
        # the plane is named by $KUBECONFIG (as in a user's shell), not by --kubeconfig before it.
        argv = [str(plane.bin.kubectl), "__complete", "foo-operator", *words]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=plane.env(), check=True)
        return result.stdout.splitlines()

    assert complete("he") == ["health", ":4"]
    assert complete("health", "-o", "js") == ["json", "jsonpath=", ":4"]
    assert complete("health", "--sel") == ["--selector", ":4"]
    contexts = plane.kubectl("config", "get-contexts", "-o", "name").stdout.split()
    assert complete("certs", "--context", "") == [*sorted(contexts), ":4"]


@pytest.mark.parametrize(
    "args",
    [
        ["certs", "--context", "nope"],
        # kubectl's global flags go anywhere, before a plugin's own command too.
        ["--context", "nope", "health"],
        ["migrate-storage", "--context=nope"],
    ],
    ids=["after-the-command", "before-the-command", "migrate-storage"],
)
def test_a_wrong_context_is_said_as_kubectl_says_it(foo_operator: LocalProduct, args: list[str]) -> None:
    plane = foo_operator.plane
    own = plane.kubectl("get", "pods", "--context", "nope", check=False)
    ours = kubectl_foo(plane, *args, check=False)
    assert ours.returncode == own.returncode == 1
    assert ours.stderr == own.stderr == "Error in configuration: context was not found for specified context: nope\n"


def test_an_unreachable_server_is_one_line_with_its_url_from_every_command(
    foo_operator: LocalProduct, tmp_path: Path
) -> None:
    config = tmp_path / "unreachable"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    plane = foo_operator.plane
    lines = []
    for command in (["health"], ["migrate-storage"]):
        result = kubectl_foo(plane, *command, "--kubeconfig", str(config), check=False)
        assert result.returncode == 1
        lines.append(result.stderr.strip().splitlines()[-1])
    assert all(line.startswith("error: cannot reach the apiserver at https://127.0.0.1:9: ") for line in lines), lines
