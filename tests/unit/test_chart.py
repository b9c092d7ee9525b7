"""The Helm chart as objects, and its values: lint is clean in every TLS mode, bad values fail clearly.

The top half is shared by tests/unit/test_chart_*.py: `helm template` (the project's own helm build)
parsed into dicts. Rendering is a subprocess of a Go binary, ~0.1 s; results are cached per set of
values. Tests that need helm skip, with the command to build it, when `hack/build.sh` has not run.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from certs.authority import new_ca
from hack.plane.binaries import find_binaries

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "foo-operator"
NAMESPACE = "foo-system"
SERVICE = "foo-operator-webhook"  # <fullname>-webhook, fullname = the release name here
TLS_SECRET = "foo-operator-webhook-tls"  # certManager and rotator modes
GENERATED_SECRET = "foo-operator-webhook-generated-tls"  # generated mode (a Secret's type never changes)
MODES = ("generated", "certManager", "existingSecret", "rotator")

Values = dict[str, Any]
Objects = list[dict[str, Any]]


def helm() -> Path:
    path = find_binaries().helm
    if not path.is_file():
        pytest.skip(f"helm is not built ({path}): run `bash hack/build.sh`")
    return path


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        env.pop("KUBECONFIG", None)  # `helm template` must not reach any cluster
        return subprocess.run([str(helm()), *args], capture_output=True, text=True, env=env, timeout=60)


def _values_args(values: Values | None, directory: str) -> list[str]:
    if not values:
        return []
    path = Path(directory) / "values.json"
    path.write_text(json.dumps(values))  # JSON is YAML
    return ["--values", str(path)]


def helm_with_values(command: str, values: Values | None, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chart-values-") as directory:
        return run_helm(command, *args, *_values_args(values, directory))


@functools.cache
def _render(values_json: str, release: str, namespace: str) -> str:
    result = helm_with_values(
        "template", json.loads(values_json) or None, release, str(CHART), "--namespace", namespace
    )
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return result.stdout


def render(values: Values | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE) -> Objects:
    """Every object `helm template` prints (tests included), in its order."""
    text = _render(json.dumps(values or {}, sort_keys=True), release, namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_error(values: Values) -> str:
    """stderr of a render that must fail."""
    result = helm_with_values("template", values, RELEASE, str(CHART), "--namespace", NAMESPACE)
    assert result.returncode != 0, "helm template accepted values it should refuse"
    return result.stderr


def mode_values(mode: str) -> Values:
    """Values that make `mode` complete (existingSecret needs a Secret name and a CA)."""
    values: Values = {"tls": {"mode": mode}}
    if mode == "existingSecret":
        values["tls"]["existingSecret"] = {"name": "my-webhook-tls", "caBundle": PEM_CA}
    return values


def find(objects: Objects, kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in matches]}"
    return matches[0]


def pod_specs(objects: Objects) -> dict[str, dict[str, Any]]:
    """Every pod spec the chart makes, by `<kind>/<name>`: Deployments', Jobs' and bare Pods'."""
    specs = {}
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            specs[f"{o['kind']}/{o['metadata']['name']}"] = o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            specs[f"Pod/{o['metadata']['name']}"] = o["spec"]
    return specs


def kinds(objects: Objects) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def ca_bundle_holders(objects: Objects) -> dict[str, dict[str, Any]]:
    """The four clientConfigs (or spec) a caBundle belongs in, by the kind that holds it."""
    return {
        "CustomResourceDefinition": find(objects, "CustomResourceDefinition")["spec"]["conversion"]["webhook"][
            "clientConfig"
        ],
        "MutatingWebhookConfiguration": find(objects, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"],
        "ValidatingWebhookConfiguration": find(objects, "ValidatingWebhookConfiguration")["webhooks"][0][
            "clientConfig"
        ],
        "APIService": find(objects, "APIService")["spec"],
    }


# existingSecret mode: the chart only checks for and base64-encodes the CA; it never parses it.
PEM_CA = new_ca("existing-secret-test-ca").cert_pem.decode()
PEM_CA_BASE64 = base64.b64encode(PEM_CA.strip().encode()).decode()


# ----------------------------------------------------------------------------- values
@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_strict_is_clean_in_every_tls_mode(mode: str) -> None:
    result = helm_with_values("lint", mode_values(mode), str(CHART), "--strict", "--namespace", "foo-system")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout
    assert "[INFO]" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"replicas": 0}}, "at '/webhook/replicas': minimum: got 0, want 1"),
        ({"webhook": {"replicas": "two"}}, "at '/webhook/replicas': got string, want integer"),
        ({"controller": {"replicas": 1.5}}, "at '/controller/replicas'"),
        (
            {"tls": {"mode": "selfmade"}},
            "at '/tls/mode': value must be one of 'generated', 'certManager', 'existingSecret', 'rotator'",
        ),
        ({"webhook": {"replics": 3}}, "at '/webhook': additional properties 'replics' not allowed"),
        ({"webhook": {"timeoutSeconds": 31}}, "at '/webhook/timeoutSeconds': maximum: got 31, want 30"),
        ({"webhook": {"failurePolicy": "fail"}}, "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
        ({"defaultImage": ""}, "at '/defaultImage': minLength: got 0, want 1"),
        ({"controller": {"watchNamespace": "Team_A"}}, "at '/controller/watchNamespace'"),
    ],
)
def test_bad_values_fail_the_install_naming_the_value(values: dict[str, Any], message: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error


def test_existing_secret_mode_says_everything_it_is_missing_at_once() -> None:
    error = render_error({"tls": {"mode": "existingSecret"}})
    assert "tls.mode=existingSecret needs tls.existingSecret.name" in error
    assert "and tls.existingSecret.caBundle" in error
    error = render_error({"tls": {"mode": "existingSecret", "existingSecret": {"name": "mine"}}})
    assert "tls.mode=existingSecret needs tls.existingSecret.caBundle" in error
    assert "existingSecret.name" not in error.split("needs", 1)[1]
