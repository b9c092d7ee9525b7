"""The chart as a user runs it: the image built here, real pods on a real kubelet, nothing played.

`helm install` with the locally built image (`image.pullPolicy: Never`, loaded into the node's
containerd; nothing is ever pulled) and the real node's taint tolerated through values: the
webhook, insights and controller pods run on the real node, the apiserver reaches them through
their Services, the controller and the metrics authorizers reach the apiserver through
`kubernetes.default` (kube-proxy). The Deployments Foos ask for land on the kwok node.

The node is machine-wide state (bridge, node name, iptables), so this module has a plane of its
own, serving on the node's bridge; hack/node.py puts the machine back afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from certs.authority import issue_serving, new_ca, service_dns_names
from fooapi.crd import CRD_NAME
from tests.e2e.uninstall import assert_only_the_kept_crd_is_left
from tests.e2e.waiting import wait_for
from hack.cluster import LocalControlPlane
from hack.node import NodeBridge, RealNode, chart_values

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "real-foo-operator"
NAMESPACE = "foo-real"
FOOS = "foo-real-foos"
APISERVICE = "v1alpha1.insights.samplecontroller.k8s.io"
# Not nginx:latest: a Foo defaulted to this went through the chart's webhook pod.
DEFAULT_IMAGE = "registry.example/real-node-e2e/nginx:1.27"
COMPONENTS = ("webhook", "insights", "controller")


@dataclass
class Cluster:
    plane: LocalControlPlane
    node: RealNode
    image: str
    values: Path

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def installed(self) -> bool:
        return self.plane.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0

    def install(self) -> None:
        began = time.monotonic()
        self.plane.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
                        "-f", str(self.values), "--wait", "--timeout=180s", timeout=240)
        print(f"helm install --wait: {time.monotonic() - began:.1f}s")

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", NAMESPACE, "-l",
                                               f"app.kubernetes.io/instance={RELEASE}")["items"]
        return items


@pytest.fixture(scope="module")
def cluster(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("real-node")
    began = time.monotonic()
    with NodeBridge() as bridge, LocalControlPlane(workdir, address=bridge.address) as plane, \
            RealNode(plane, bridge) as node:
        print(f"plane and real node up in {time.monotonic() - began:.1f}s")
        node.load_image(node_image["archive"])
        values = workdir / "values.yaml"
        values_ = chart_values(node, node_image["ref"])
        values_["webhook"]["logLevel"] = "debug"  # one log line per admission decision
        values.write_text(yaml.safe_dump({**values_, "defaultImage": DEFAULT_IMAGE}))
        cluster = Cluster(plane, node, node_image["ref"], values)
        try:
            cluster.install()
            plane.kubectl("create", "namespace", FOOS)
            yield cluster
        finally:
            plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)


@pytest.fixture
def release(cluster: Cluster) -> Cluster:
    """The release, installed again if a test before this one uninstalled it."""
    if not cluster.installed():
        cluster.install()
    return cluster


def foo_yaml(name: str, *, replicas: int | None = None) -> str:
    spec: dict[str, Any] = {"deployment": {"name": f"{name}-web"}}
    if replicas is not None:
        spec["replicas"] = replicas
    return yaml.safe_dump({"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo",
                           "metadata": {"name": name}, "spec": spec})


def test_every_chart_pod_runs_the_local_image_ready_on_the_real_node(release: Cluster) -> None:
    pods = release.pods()
    assert sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods) == sorted(COMPONENTS)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == release.node.name, name
        assert pod["spec"]["containers"][0]["image"] == release.image, name
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]), name
        # The kubelet ran it: an IP on the node's bridge, a container ID from containerd.
        assert pod["status"]["podIP"].startswith("10.88."), name
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), name


def test_an_invalid_foo_is_denied_by_the_webhook_pod(release: Cluster) -> None:
    result = release.plane.kubectl("apply", "-n", FOOS, "-f", "-", check=False,
                                   input=foo_yaml("too-many", replicas=11))
    assert result.returncode != 0
    assert result.stderr.strip() == (
        'The Foo "too-many" is invalid: spec.replicas: Invalid value: 11: must be less than or equal to 10')
    # The pod's own word for it, read back through the real kubelet.
    (webhook,) = _webhook_pods(release)

    def decisions() -> list[dict[str, Any]]:
        logs = release.plane.kubectl("logs", "-n", NAMESPACE, webhook["metadata"]["name"]).stdout
        lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        return [d for d in lines if d.get("object") == f"{FOOS}/too-many" and d.get("allowed") is False]

    wait_for("the webhook pod to log its denial", decisions, timeout=20)


def test_a_valid_foo_is_defaulted_converted_and_reconciled_by_the_controller_pod(release: Cluster) -> None:
    plane = release.plane
    plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("plain"))
    foo = release.get("foos.v1.samplecontroller.k8s.io", "plain", "-n", FOOS)
    assert foo["spec"] == {"deployment": {"name": "plain-web", "image": DEFAULT_IMAGE}, "replicas": 1}
    old = release.get("foos.v1alpha1.samplecontroller.k8s.io", "plain", "-n", FOOS)
    assert old["apiVersion"] == "samplecontroller.k8s.io/v1alpha1"
    assert old["spec"]["deploymentName"] == "plain-web"
    assert old["spec"]["replicas"] == 1

    def reconciled() -> dict[str, Any] | None:
        status: dict[str, Any] = release.get("foos.v1.samplecontroller.k8s.io", "plain", "-n", FOOS).get("status", {})
        return status if status.get("availableReplicas") == 1 else None

    wait_for("the controller pod to report the Foo available", reconciled)
    deployment = release.get("deployment", "plain-web", "-n", FOOS)
    assert deployment["metadata"]["ownerReferences"][0]["name"] == "plain"
    (pod,) = release.get("pods", "-n", FOOS, "-l", "controller=plain")["items"]
    assert pod["spec"]["nodeName"].startswith("kwok-node-"), "a Foo's Deployment must keep to the kwok nodes"


def test_the_aggregated_api_is_served_by_the_insights_pod(release: Cluster) -> None:
    def available() -> bool:
        conditions = release.get("apiservice", APISERVICE)["status"].get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    wait_for(f"APIService {APISERVICE} Available", available)
    out = release.plane.kubectl("get", "--raw", "/apis/insights.samplecontroller.k8s.io/v1alpha1").stdout
    assert {r["name"] for r in json.loads(out)["resources"]} >= {"foohealths", "fooreviews"}


def test_helm_test_passes_with_the_products_own_image(release: Cluster) -> None:
    # No --logs: the hook's delete policy removes a pod that succeeded before helm could read them.
    result = release.plane.helm("test", RELEASE, "-n", NAMESPACE, "--timeout=120s", timeout=180)
    assert f"TEST SUITE:     {RELEASE}-test-readyz" in result.stdout, result.stdout
    assert "Phase:          Succeeded" in result.stdout, result.stdout


def test_the_pods_logs_come_from_the_real_kubelet(release: Cluster) -> None:
    (webhook,) = _webhook_pods(release)
    logs = release.plane.kubectl("logs", "-n", NAMESPACE, webhook["metadata"]["name"]).stdout
    assert logs.strip(), "kubectl logs gave nothing"


@contextlib.contextmanager
def _steady_writes(plane: LocalControlPlane) -> Iterator[tuple[Counter[int], list[str]]]:
    """Dry-run Foo creates through kube-apiserver, one after another, until the block ends."""
    stop = threading.Event()
    outcomes: Counter[int] = Counter()
    failures: list[str] = []

    def write() -> None:
        path = f"/apis/samplecontroller.k8s.io/v1/namespaces/{FOOS}/foos?dryRun=All"
        n = 0
        while not stop.is_set():
            n += 1
            foo = {"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "metadata": {"name": f"load-{n}"},
                   "spec": {"deployment": {"name": f"load-{n}"}}}
            try:
                status, body = plane.request("POST", path, foo)
            except OSError as err:
                status, body = 0, str(err).encode()
            outcomes[status] += 1
            if status != 201:
                failures.append(f"{status}: {body[:300]!r}")

    writer = threading.Thread(target=write, name="foo-writer")
    writer.start()
    try:
        yield outcomes, failures
    finally:
        stop.set()
        writer.join(timeout=30)


def _webhook_pods(release: Cluster) -> list[dict[str, Any]]:
    return [p for p in release.pods() if p["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook"]


def test_helm_upgrade_rolls_the_webhook_pod_without_a_failed_write(release: Cluster) -> None:
    """Readiness, the Service's endpoints and the old pod's drain, all real: a steady stream of
    dry-run Foo creates through kube-apiserver sees no error while the webhook pod is replaced."""
    plane = release.plane
    (old,) = _webhook_pods(release)
    secret = f"{RELEASE}-webhook-tls"
    data_before = release.get("secret", secret, "-n", NAMESPACE)["data"]
    with _steady_writes(plane) as (outcomes, failures):
        time.sleep(2)
        plane.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                   "--set-string", f"webhook.podAnnotations.rolled={time.time_ns()}", "--wait", "--timeout=180s",
                   timeout=240)

        def replaced() -> bool:
            pods = _webhook_pods(release)
            return len(pods) == 1 and pods[0]["metadata"]["name"] != old["metadata"]["name"]

        wait_for("the old webhook pod to drain and go", replaced)
        time.sleep(2)
    print(f"writes during the rollout: {dict(outcomes)}")
    assert failures == [], f"{len(failures)} of {sum(outcomes.values())} writes failed: {failures[:5]}"
    assert outcomes[201] >= 20, dict(outcomes)
    assert release.get("secret", secret, "-n", NAMESPACE)["data"] == data_before, "the upgrade changed the TLS Secret"
    (new,) = _webhook_pods(release)
    assert new["spec"]["nodeName"] == release.node.name
    assert "rolled" in new["metadata"]["annotations"], "the upgrade did not apply"


def _serving_issuer(ip: str, port: int) -> str:
    """The issuer CN of the certificate a pod serves right now."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection((ip, port), timeout=5)) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    names = x509.load_der_x509_certificate(der).issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value)


def test_a_rotated_secret_reaches_the_pod_through_the_kubelet_without_restart_or_failed_write(
        release: Cluster) -> None:
    """A new CA and serving certificate written into the Secret (the caBundles trusting old and new
    first): the kubelet updates the pod's Secret volume, the webhook reloads it from disk, and no
    Foo write fails on the way; the pod is not restarted."""
    plane = release.plane
    (pod,) = _webhook_pods(release)
    ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
    secret = f"{RELEASE}-webhook-tls"
    old_ca = base64.b64decode(release.get("secret", secret, "-n", NAMESPACE)["data"]["ca.crt"])
    ca = new_ca("rotated-by-e2e")
    names = [n for svc in (f"{RELEASE}-webhook", f"{RELEASE}-insights") for n in service_dns_names(svc, NAMESPACE)]
    serving = issue_serving(ca, common_name=f"{RELEASE}-webhook", dns_names=names)
    both = base64.b64encode(old_ca + ca.cert_pem).decode()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        plane.kubectl("patch", kind, RELEASE, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": both}]))
    plane.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": both}]))
    plane.kubectl("patch", "apiservice", APISERVICE, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/caBundle", "value": both}]))
    with _steady_writes(plane) as (outcomes, failures):
        time.sleep(1)
        data = {"ca.crt": ca.cert_pem, "tls.crt": serving.cert_pem, "tls.key": serving.key_pem}
        plane.kubectl("patch", "secret", secret, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(
            {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}))
        began = time.monotonic()
        wait_for("the pod to serve the new certificate", lambda: _serving_issuer(ip, 9443) == "rotated-by-e2e",
                 timeout=120)
        print(f"the pod served the rotated certificate {time.monotonic() - began:.1f}s after the Secret changed")
        time.sleep(2)
    print(f"writes during the rotation: {dict(outcomes)}")
    assert failures == [], f"{len(failures)} of {sum(outcomes.values())} writes failed: {failures[:5]}"
    assert outcomes[201] >= 10, dict(outcomes)
    (after,) = _webhook_pods(release)
    assert after["metadata"]["name"] == name
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0


def test_helm_uninstall_leaves_only_the_crd(release: Cluster) -> None:
    plane = release.plane
    plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=90s", timeout=120)
    assert_only_the_kept_crd_is_left(plane, RELEASE, NAMESPACE)
    wait_for("the chart's pods to be gone from the real node", lambda: not release.pods())
