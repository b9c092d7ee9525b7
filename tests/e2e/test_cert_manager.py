"""certManager mode with real cert-manager: renewals of the serving certificate fail no request.

cert-manager's controller, webhook and cainjector (hack/cert-manager, built from its Go module)
run as processes against the plane, with its CRDs from the same module and its webhook registered
as its chart registers it (`webhook.url.host`: here the loopback process), its serving certificate
from the CA it keeps in a Secret, the caBundles from cainjector; so every Issuer and Certificate
the chart makes passes cert-manager's own validation. The chart runs in certManager mode on the
real node from the image built here. The serving certificate is renewed twice the
way `cmctl renew` does it (an Issuing condition on the Certificate's status) while Foo writes
(through the webhook pod), v1alpha1 Foo reads (conversion) and FooHealth reads (the insights pod,
through the APIService) run without pause. Every request must succeed, every caBundle must stay
the CA's, and the pods must end up serving each new certificate without a restart.

The node is machine-wide state: this module has a plane of its own, on the node's bridge.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from fooapi.crd import CRD_NAME
from hack.plane.binaries import BUILD_SCRIPT, cert_manager
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.node import RealNode, chart_values, plane_with_real_node
from hack.plane.pki import served_certificate
from hack.plane.procs import Component
from tests.e2e.load import Call, dry_run_foo_create, steady_requests
from tests.e2e.waiting import wait_for, wait_for_more

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "cm-foo-operator"
NAMESPACE = "foo-cm"
FOOS = "foo-cm-foos"
APISERVICE = "v1alpha1.insights.samplecontroller.k8s.io"
SERVING = f"{RELEASE}-webhook"  # the serving Certificate, its Secret is SERVING-tls
CA = f"{RELEASE}-webhook-ca"  # the CA Certificate and its Secret
SERVING_PORTS = {"webhook": 9443, "insights": 8443}
# cert-manager's own webhook as its chart names it: the CA Secret is `<webhook>-ca` in its namespace.
CM_NAMESPACE = "cert-manager"
CM_WEBHOOK = "cert-manager-webhook"


@dataclass
class Cluster:
    plane: LocalControlPlane
    node: RealNode

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def secret(self, name: str, key: str) -> bytes:
        return base64.b64decode(self.get("secret", name, "-n", NAMESPACE)["data"][key])

    def ca_bundles(self) -> dict[str, str]:
        """The caBundle of each of the four objects that carry one ('' while not injected)."""
        bundles = {}
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            for hook in self.get(kind, RELEASE)["webhooks"]:
                bundles[f"{kind}/{hook['name']}"] = hook["clientConfig"].get("caBundle", "")
        conversion = self.get("crd", CRD_NAME)["spec"]["conversion"]["webhook"]["clientConfig"]
        bundles["crd"] = conversion.get("caBundle", "")
        bundles["apiservice"] = self.get("apiservice", APISERVICE)["spec"].get("caBundle", "")
        return bundles

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.get("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        return {
            p["metadata"]["labels"]["app.kubernetes.io/component"]: p
            for p in items
            if p["metadata"]["labels"]["app.kubernetes.io/component"] in SERVING_PORTS
        }


def _build_cert_manager() -> None:
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "cert-manager"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(
            f"hack/build.sh cert-manager failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}", pytrace=False
        )


def _cert_manager_webhook_configurations(port: int) -> list[dict[str, Any]]:
    """The Validating- and MutatingWebhookConfiguration cert-manager's chart renders with
    `webhook.url.host=localhost:<port>` (the host its serving certificate names), caBundle from
    the webhook's CA Secret by cainjector."""

    def configuration(kind: str, path: str, rule: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {
                "name": CM_WEBHOOK,
                "annotations": {"cert-manager.io/inject-ca-from-secret": f"{CM_NAMESPACE}/{CM_WEBHOOK}-ca"},
            },
            "webhooks": [
                {
                    "name": "webhook.cert-manager.io",
                    "rules": [rule],
                    "admissionReviewVersions": ["v1"],
                    "matchPolicy": "Equivalent",
                    "timeoutSeconds": 30,
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "clientConfig": {"url": f"https://localhost:{port}{path}"},
                    **extra,
                }
            ],
        }

    validating_rule = {
        "apiGroups": ["cert-manager.io", "acme.cert-manager.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["*/*"],
    }
    mutating_rule = {
        "apiGroups": ["cert-manager.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["certificaterequests"],
    }
    # The chart's default values.webhook.validatingWebhookConfiguration.namespaceSelector.
    opt_out = {
        "namespaceSelector": {
            "matchExpressions": [{"key": "cert-manager.io/disable-validation", "operator": "NotIn", "values": ["true"]}]
        }
    }
    return [
        configuration("ValidatingWebhookConfiguration", "/validate", validating_rule, opt_out),
        configuration("MutatingWebhookConfiguration", "/mutate", mutating_rule, {}),
    ]


def _probe_issuer() -> str:
    """An Issuer to create with --dry-run=server: it passes only once cert-manager's webhook
    serves and cainjector has filled its caBundles (failurePolicy Fail refuses it until then)."""
    return json.dumps(
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": "probe", "namespace": CM_NAMESPACE},
            "spec": {"selfSigned": {}},
        }
    )


@pytest.fixture(scope="module")
def cluster(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _build_cert_manager()
    binaries = cert_manager()
    assert not binaries.missing(), (
        f"hack/build.sh cert-manager left no {binaries.missing()}: hack/plane/binaries.py disagrees"
    )
    workdir = tmp_path_factory.mktemp("cert-manager")
    began = time.monotonic()
    with plane_with_real_node(workdir, node_image["archive"]) as (plane, node):
        print(f"plane, real node and the image up in {time.monotonic() - began:.1f}s")
        plane.kubectl("apply", "--server-side", "-f", str(binaries.crds))
        plane.kubectl("wait", "--for=condition=Established", "-f", str(binaries.crds), "--timeout=60s")
        plane.kubectl("create", "namespace", CM_NAMESPACE)
        webhook_port = free_port()
        # Its chart's flags, less the in-cluster names: the one the API server dials here.
        webhook_flags = [
            f"--secure-port={webhook_port}",
            f"--dynamic-serving-ca-secret-namespace={CM_NAMESPACE}",
            f"--dynamic-serving-ca-secret-name={CM_WEBHOOK}-ca",
            "--dynamic-serving-dns-names=localhost",
            f"--healthz-port={free_port()}",
            "--metrics-listen-address=0",
        ]
        processes = {
            name: Component(
                f"cert-manager-{name}",
                [str(path), f"--kubeconfig={plane.kubeconfig}", "-v=2", *flags],
                plane.logs_dir / f"cert-manager-{name}.log",
            )
            for name, path, flags in (
                ("controller", binaries.controller, []),
                ("webhook", binaries.webhook, webhook_flags),
                ("cainjector", binaries.cainjector, []),
            )
        }
        for process in processes.values():
            process.start()
        try:
            for configuration in _cert_manager_webhook_configurations(webhook_port):
                plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(configuration))
            began = time.monotonic()
            wait_for(
                "cert-manager's webhook to admit (its CA Secret made, the caBundles injected)",
                lambda: plane.kubectl("create", "--dry-run=server", "-f", "-", input=_probe_issuer()),
                timeout=60,
                interval=0.5,
                server=processes["webhook"],
            )
            print(f"cert-manager's webhook admitting after {time.monotonic() - began:.1f}s")
            values = chart_values(node, node_image["ref"])
            values["tls"] = {"mode": "certManager"}
            values_file = workdir / "values.yaml"
            values_file.write_text(yaml.safe_dump(values))
            began = time.monotonic()
            plane.helm(
                "install",
                RELEASE,
                str(CHART),
                "-n",
                NAMESPACE,
                "--create-namespace",
                "-f",
                str(values_file),
                "--wait",
                "--timeout=180s",
                timeout=240,
            )
            print(f"helm install --wait (certificates from cert-manager): {time.monotonic() - began:.1f}s")
            # What a user waits for before reading FooHealths: --wait covers the pods, not the
            # aggregator's own discovery check of the insights Service.
            plane.kubectl("wait", "--for=condition=Available", f"apiservice/{APISERVICE}", "--timeout=60s", timeout=90)
            print(f"APIService Available {time.monotonic() - began:.1f}s after helm install began")
            plane.kubectl("create", "namespace", FOOS)
            yield Cluster(plane, node)
        finally:
            plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
            for process in processes.values():
                process.stop()


def _serves(ip: str, port: int, serial: int) -> bool:
    return served_certificate(ip, port).serial_number == serial


def _secret_serial(cluster: Cluster) -> int:
    return x509.load_pem_x509_certificate(cluster.secret(f"{SERVING}-tls", "tls.crt")).serial_number


def _new_serial(cluster: Cluster, seen: list[int]) -> int | None:
    serial = _secret_serial(cluster)
    return None if serial in seen else serial


def _injected(cluster: Cluster) -> dict[str, str] | None:
    """Every caBundle, once cainjector has filled all four."""
    bundles = cluster.ca_bundles()
    return bundles if all(bundles.values()) else None


def _renew(cluster: Cluster) -> None:
    """What `cmctl renew` does: mark the Certificate Issuing (reason ManuallyTriggered)."""
    condition = {
        "type": "Issuing",
        "status": "True",
        "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    cluster.plane.kubectl(
        "patch",
        "certificate",
        SERVING,
        "-n",
        NAMESPACE,
        "--subresource=status",
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/status/conditions/-", "value": condition}]),
    )


def _steady_load(plane: LocalControlPlane) -> contextlib.AbstractContextManager[tuple[Counter[str], list[str]]]:
    """A Foo create (dry run: the webhook pod's admission), a v1alpha1 list (its conversion), a
    FooHealth list (the insights pod), round after round until the block ends."""
    return steady_requests(
        plane,
        [
            dry_run_foo_create(FOOS),
            Call("v1alpha1 read", "GET", f"/apis/samplecontroller.k8s.io/v1alpha1/namespaces/{FOOS}/foos", 200),
            Call(
                "insights read",
                "GET",
                f"/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/{FOOS}/foohealths",
                200,
            ),
        ],
    )


def test_the_ca_chain_is_issued_and_every_ca_bundle_is_the_ca(cluster: Cluster) -> None:
    ca = cluster.secret(CA, "tls.crt")
    assert x509.load_pem_x509_certificate(ca).extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cluster.secret(f"{SERVING}-tls", "ca.crt") == ca, "the serving certificate is signed by the CA"
    bundles = wait_for("cainjector to fill all four caBundles", lambda: _injected(cluster), timeout=60)
    assert len(bundles) == 4
    for holder, bundle in bundles.items():
        assert base64.b64decode(bundle) == ca, holder


def test_two_renewals_under_load_fail_no_request_and_move_no_ca_bundle(cluster: Cluster) -> None:
    # Some stored Foos, so every v1alpha1 list goes through the webhook pod's conversion.
    for i in range(3):
        foo = {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {"name": f"stored-{i}"},
            "spec": {"deployment": {"name": f"stored-{i}"}},
        }
        cluster.plane.kubectl("apply", "-n", FOOS, "-f", "-", input=json.dumps(foo))
    bundles = wait_for("all four caBundles", lambda: _injected(cluster), timeout=60)
    pods = cluster.pods()
    assert set(pods) == set(SERVING_PORTS)
    addresses = {component: pod["status"]["podIP"] for component, pod in pods.items()}
    serials = [_secret_serial(cluster)]
    moved: list[int] = []
    with _steady_load(cluster.plane) as (outcomes, failures):
        wait_for_more("requests before the renewals", lambda: sum(outcomes.values()), 20)
        for renewal in (1, 2):
            began = time.monotonic()
            _renew(cluster)
            serial = wait_for(
                f"renewal {renewal} to reach the Secret", lambda: _new_serial(cluster, serials), timeout=60
            )
            serials.append(serial)
            issued = time.monotonic() - began
            for component, port in SERVING_PORTS.items():
                try:
                    wait_for(
                        f"the {component} pod to serve renewal {renewal}",
                        functools.partial(_serves, addresses[component], port, serial),
                        timeout=180,
                        interval=1,
                    )
                except AssertionError as err:
                    # Its log says whether the watcher saw the new files (one CI run met this once).
                    log = cluster.plane.kubectl(
                        "logs", "-n", NAMESPACE, pods[component]["metadata"]["name"], "--tail=40", check=False
                    ).stdout
                    raise AssertionError(f"{err}\n{component} pod's log:\n{log}") from None
            if cluster.ca_bundles() != bundles:
                moved.append(renewal)
            print(
                f"renewal {renewal}: in the Secret after {issued:.1f}s, served by both pods after "
                f"{time.monotonic() - began:.1f}s; caBundles unchanged: {renewal not in moved}"
            )
        wait_for_more("requests after the renewals", lambda: sum(outcomes.values()), 20)
    print(f"requests during two renewals: {dict(outcomes)}, failed: {len(failures)}")
    assert failures == [], (
        f"{len(failures)} requests failed ({sum(outcomes.values())} did not): {failures[:5]}\n"
        f"APIService conditions: {cluster.get('apiservice', APISERVICE)['status'].get('conditions')}"
    )
    assert min(outcomes.values()) >= 20, dict(outcomes)
    assert moved == [], f"renewals {moved} moved a caBundle"
    for component, pod in cluster.pods().items():
        assert pod["metadata"]["name"] == pods[component]["metadata"]["name"], f"the {component} pod was replaced"
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, f"the {component} pod restarted"


def test_cert_manager_own_webhook_denies_an_invalid_certificate_with_its_message(cluster: Cluster) -> None:
    # The CRD's schema requires an issuerRef, so the API server itself would refuse one without:
    # a Certificate that names nothing to certify passes the schema and only the webhook refuses it.
    nameless = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "names-nothing", "namespace": NAMESPACE},
        "spec": {"secretName": "names-nothing-tls", "issuerRef": {"name": f"{RELEASE}-ca"}},
    }
    refused = cluster.plane.kubectl("apply", "-f", "-", input=json.dumps(nameless), check=False)
    assert refused.returncode != 0, refused.stdout
    assert 'admission webhook "webhook.cert-manager.io" denied the request' in refused.stderr, refused.stderr
    assert "at least one of commonName" in refused.stderr, refused.stderr
    # What the chart made went through the same webhook and was admitted.
    for kind in ("issuer", "certificate"):
        assert cluster.get(kind, "-n", NAMESPACE)["items"], f"the chart made no {kind}"
