"""The chart as a user runs it: the image built here, real pods on a real kubelet, nothing played.

`helm install` with the locally built image (`image.pullPolicy: Never`, loaded into the node's
containerd; nothing is ever pulled) and the real node's taint tolerated through values: the
webhook, insights and controller pods run on the real node, the apiserver reaches them through
their Services (Service → EndpointSlice → pod IP, TLS checked against the chart's caBundle for
`<svc>.<ns>.svc`), the controller and the metrics authorizers reach the apiserver through
`kubernetes.default`, and pods resolve Service names through the plane's cluster DNS. The
Deployments Foos ask for land on the kwok node.

The install goes over a Foo CRD Helm does not own (sample-controller's, as a user switching
from it has): refused without `--take-ownership`, adopted with it. One release for the module;
tests that only read share it, each test makes the Foos it reads, and a test that uninstalls
leaves the next one a release installed again (`release`), so any one test runs alone.

The node is machine-wide state (bridge, node name, iptables), so this module has a plane of its
own, serving on the node's bridge; hack/plane/node.py puts the machine back afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from attacks.tenants import (
    Attack,
    FatDeployments,
    FatFoos,
    HonestTenant,
    Peaks,
    QuotaRefused,
    SharedDeployment,
    Tenants,
)
from certs.authority import issue_serving, new_ca, service_dns_names
from fooapi.crd import CRD_NAME, crd_manifest
from hack.plane.cluster import LocalControlPlane
from hack.plane.node import CLUSTER_DOMAIN, DNS_SERVICE_IP, RealNode, chart_values, dns_query, plane_with_real_node
from hack.plane.pki import KUBERNETES_SERVICE_IP, served_certificate
from kube.client import DEPLOYMENTS
from tests.e2e.load import dry_run_foo_create, steady_requests
from tests.e2e.podmemory import PodWorkingSet
from tests.e2e.storage import DONE_LINE, etcd_foos
from tests.e2e.uninstall import assert_only_the_kept_crd_is_left
from tests.e2e.waiting import wait_for, wait_for_more

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "real-foo-operator"
NAMESPACE = "foo-real"
FOOS = "foo-real-foos"
SERVICE = f"{RELEASE}-webhook"
TLS_SECRET = f"{RELEASE}-webhook-generated-tls"  # tls.mode generated
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
    refusal: str = ""  # what `helm install` said over the CRD it does not own, without --take-ownership
    notes: str = ""  # what `helm install` printed
    scraper_token: str = field(default="", repr=False)

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def installed(self) -> bool:
        return self.plane.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0

    def install(self, *extra: str) -> str:
        began = time.monotonic()
        out = self.plane.helm(
            "install",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "-f",
            str(self.values),
            "--wait",
            "--timeout=180s",
            *extra,
            timeout=240,
        ).stdout
        print(f"helm install --wait: {time.monotonic() - began:.1f}s")
        return out

    def pods(self, component: str | None = None, *, terminating: bool = False) -> list[dict[str, Any]]:
        """The release's pods (of one component), without those being deleted unless ``terminating``."""
        selector = f"app.kubernetes.io/instance={RELEASE}"
        if component:
            selector += f",app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.get("pods", "-n", NAMESPACE, "-l", selector)["items"]
        return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]

    def metrics_token(self) -> str:
        """A scraper's token: a ServiceAccount bound to the chart's metrics-reader ClusterRole."""
        if not self.scraper_token:
            self.plane.kubectl("create", "serviceaccount", "scraper", "-n", FOOS)
            self.plane.kubectl(
                "create",
                "clusterrolebinding",
                f"{RELEASE}-test-scraper",
                f"--clusterrole={RELEASE}-metrics-reader",
                f"--serviceaccount={FOOS}:scraper",
            )
            scraper = f"system:serviceaccount:{FOOS}:scraper"
            wait_for(
                "RBAC to let the scraper get /metrics",
                lambda: (
                    self.plane.kubectl(
                        "auth", "can-i", "get", "/metrics", f"--as={scraper}", check=False
                    ).stdout.strip()
                    == "yes"
                ),
            )
            self.scraper_token = self.plane.kubectl("create", "token", "scraper", "-n", FOOS).stdout.strip()
        return self.scraper_token

    def webhook_requests(self, path: str) -> float:
        """controller_runtime_webhook_requests_total for ``path``, summed over the webhook pods'
        secure /metrics ports (the pod IPs, on the node's bridge), with a scraper's token."""
        ca = base64.b64decode(self.get("secret", TLS_SECRET, "-n", NAMESPACE)["data"]["ca.crt"]).decode()
        context = ssl.create_default_context(cadata=ca)
        context.check_hostname = False  # the certificate names the Service, not the pod IP
        total = 0.0
        for pod in self.pods("webhook"):
            request = urllib.request.Request(
                f"https://{pod['status']['podIP']}:8080/metrics",
                headers={"Authorization": f"Bearer {self.metrics_token()}"},
            )
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                text = response.read().decode()
            for line in text.splitlines():
                if line.startswith("controller_runtime_webhook_requests_total{") and f'webhook="{path}"' in line:
                    total += float(line.rsplit(" ", 1)[1])
        return total


def _stand_in_for_sample_controllers_crd(plane: LocalControlPlane) -> None:
    """The Foo CRD as sample-controller's users have it: not Helm's, no conversion webhook."""
    crd = crd_manifest()
    crd["spec"]["conversion"] = {"strategy": "None"}
    plane.kubectl("create", "-f", "-", input=json.dumps(crd))


@pytest.fixture(scope="module")
def cluster(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("real-node")
    began = time.monotonic()
    with plane_with_real_node(workdir, node_image["archive"]) as (plane, node):
        print(f"plane, real node, cluster DNS and the image up in {time.monotonic() - began:.1f}s")
        values = workdir / "values.yaml"
        values_ = chart_values(node, node_image["ref"])
        values_["webhook"]["logLevel"] = "debug"  # one log line per admission decision
        values.write_text(yaml.safe_dump({**values_, "defaultImage": DEFAULT_IMAGE}))
        cluster = Cluster(plane, node, node_image["ref"], values)
        try:
            _stand_in_for_sample_controllers_crd(plane)
            refused = plane.helm(
                "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "-f", str(values), check=False
            )
            assert refused.returncode != 0, "helm installed over a CRD it does not own without --take-ownership"
            cluster.refusal = refused.stderr
            cluster.notes = cluster.install("--take-ownership")
            plane.kubectl("create", "namespace", FOOS)
            yield cluster
        finally:
            plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)


@pytest.fixture
def release(cluster: Cluster) -> Cluster:
    """The release, installed again if a test before this one uninstalled it."""
    if not cluster.installed():
        cluster.install("--take-ownership")
    return cluster


def ca_bundles(release: Cluster) -> dict[str, str]:
    """The caBundle of each of the four objects the apiserver reads one from."""
    crd = release.get("crd", CRD_NAME)
    mutating = release.get("mutatingwebhookconfiguration", RELEASE)
    validating = release.get("validatingwebhookconfiguration", RELEASE)
    apiservice = release.get("apiservice", APISERVICE)
    return {
        "crd": crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
        "mutating": mutating["webhooks"][0]["clientConfig"]["caBundle"],
        "validating": validating["webhooks"][0]["clientConfig"]["caBundle"],
        "apiservice": apiservice["spec"]["caBundle"],
    }


def foo_yaml(name: str, *, replicas: int | None = None) -> str:
    spec: dict[str, Any] = {"deployment": {"name": f"{name}-web"}}
    if replicas is not None:
        spec["replicas"] = replicas
    return yaml.safe_dump(
        {"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "metadata": {"name": name}, "spec": spec}
    )


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


# ----------------------------------------------------------------------------- install
def test_install_over_a_crd_helm_does_not_own_needs_take_ownership(release: Cluster) -> None:
    assert "exists and cannot be imported into the current release" in release.refusal
    assert "invalid ownership metadata" in release.refusal
    annotations = release.get("crd", CRD_NAME)["metadata"]["annotations"]
    assert (annotations["meta.helm.sh/release-name"], annotations["meta.helm.sh/release-namespace"]) == (
        RELEASE,
        NAMESPACE,
    )
    assert annotations["helm.sh/resource-policy"] == "keep"


def test_install_prints_notes_that_say_what_to_try(release: Cluster) -> None:
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{SERVICE}" in release.notes
    assert f"helm test {RELEASE} -n {NAMESPACE}" in release.notes


@pytest.mark.smoke
def test_every_chart_pod_runs_the_local_image_ready_on_the_real_node(release: Cluster) -> None:
    pods = release.pods()
    assert sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods) == sorted(COMPONENTS)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == release.node.name, name
        assert pod["spec"]["containers"][0]["image"] == release.image, name
        assert _ready(pod), name
        # The kubelet ran it: an IP on the node's bridge, a container ID from containerd.
        assert pod["status"]["podIP"].startswith("10.88."), name
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), name


def test_every_ca_bundle_holds_the_ca_of_the_generated_secret(release: Cluster) -> None:
    ca = release.get("secret", TLS_SECRET, "-n", NAMESPACE)["data"]["ca.crt"]
    assert set(ca_bundles(release).values()) == {ca}


# ----------------------------------------------------------------------------- cluster DNS
_RESOLVE = """
import socket
for name in NAMES:
    try:
        print(name, sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET)}))
    except OSError as err:
        print(name, "error", err.errno)
"""


def test_cluster_dns_resolves_service_names_from_a_pod_and_nothing_outside_the_cluster(release: Cluster) -> None:
    """Through the pod's resolv.conf (the kubelet's clusterDNS → the kube-dns Service → CoreDNS):
    `kubernetes.default` and `<svc>.<ns>.svc` resolve as in a real cluster; other names do not,
    and CoreDNS refuses them rather than asking anyone off this machine."""
    webhook_ip = release.get("service", SERVICE, "-n", NAMESPACE)["spec"]["clusterIP"]
    names = [
        "kubernetes.default",
        f"{SERVICE}.{NAMESPACE}.svc",
        f"{SERVICE}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}",
        "no-such-service.default.svc",
        "example.com",
    ]
    node = release.node
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "resolve", "namespace": FOOS},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [{"key": node.taint["key"], "operator": "Exists"}],
            "containers": [
                {
                    "name": "resolve",
                    "image": release.image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", f"NAMES = {names!r}\n{_RESOLVE}"],
                }
            ],
        },
    }
    release.plane.kubectl("delete", "pod", "resolve", "-n", FOOS, "--ignore-not-found", "--wait=true")
    release.plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_for(
        "the resolving pod to finish",
        lambda: release.get("pod", "resolve", "-n", FOOS)["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=60,
    )
    lines = release.plane.kubectl("logs", "-n", FOOS, "resolve").stdout.splitlines()
    answers = dict(line.split(" ", 1) for line in lines)
    assert answers == {
        "kubernetes.default": f"['{KUBERNETES_SERVICE_IP}']",
        f"{SERVICE}.{NAMESPACE}.svc": f"['{webhook_ip}']",
        f"{SERVICE}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}": f"['{webhook_ip}']",
        "no-such-service.default.svc": answers["no-such-service.default.svc"],
        "example.com": answers["example.com"],
    }, lines
    release.plane.kubectl("delete", "pod", "resolve", "-n", FOOS, "--wait=false")
    assert answers["no-such-service.default.svc"].startswith("error"), lines
    assert answers["example.com"].startswith("error"), lines
    configz = release.plane.kubectl("get", "--raw", f"/api/v1/nodes/{node.name}/proxy/configz").stdout
    assert DNS_SERVICE_IP in configz, "the kubelet was not given the kube-dns Service as clusterDNS"
    # Straight at CoreDNS: a name outside the cluster is REFUSED (5), one inside answers.
    assert dns_query(node.bridge.address, node.dns_port, "example.com")[0] == 5
    assert dns_query(node.bridge.address, node.dns_port, f"kubernetes.default.svc.{CLUSTER_DOMAIN}") == (
        0,
        [KUBERNETES_SERVICE_IP],
    )


def test_helm_test_passes_with_the_products_own_image_through_the_service_name(release: Cluster) -> None:
    # No --logs: the hook's delete policy removes a pod that succeeded before helm could read them.
    result = release.plane.helm("test", RELEASE, "-n", NAMESPACE, "--timeout=120s", timeout=180, check=False)
    if result.returncode != 0:  # a failed test pod stays: its own word on what went wrong
        logs = release.plane.kubectl("logs", "-n", NAMESPACE, f"{RELEASE}-test-readyz", check=False)
        raise AssertionError(f"helm test failed: {result.stderr}\n{logs.stdout}{logs.stderr}")
    assert f"TEST SUITE:     {RELEASE}-test-readyz" in result.stdout, result.stdout
    assert "Phase:          Succeeded" in result.stdout, result.stdout


# ----------------------------------------------------------------------------- admission, conversion
@pytest.mark.smoke
def test_an_invalid_foo_is_denied_by_the_webhook_pod(release: Cluster) -> None:
    # The mutating webhook refuses it (it runs before the CRD schema would), so no validate call.
    before = release.webhook_requests("/mutate-foo")
    result = release.plane.kubectl("apply", "-n", FOOS, "-f", "-", check=False, input=foo_yaml("too-many", replicas=11))
    assert result.returncode != 0
    assert result.stderr.strip() == (
        'The Foo "too-many" is invalid: spec.replicas: Invalid value: 11: must be less than or equal to 10'
    )
    # The metrics say the apiserver called the chart's Service; the pod's own log says it denied.
    assert release.webhook_requests("/mutate-foo") > before, "the apiserver did not call the chart's Service"
    (webhook,) = release.pods("webhook")

    def decisions() -> list[dict[str, Any]]:
        logs = release.plane.kubectl("logs", "-n", NAMESPACE, webhook["metadata"]["name"]).stdout
        lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        return [d for d in lines if d.get("object") == f"{FOOS}/too-many" and d.get("allowed") is False]

    wait_for("the webhook pod to log its denial", decisions)  # read through the kubelet


@pytest.mark.smoke
def test_a_valid_foo_is_defaulted_converted_and_reconciled_by_the_controller_pod(release: Cluster) -> None:
    plane = release.plane
    plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("plain"))
    foo = release.get("foos.v1.samplecontroller.k8s.io", "plain", "-n", FOOS)
    assert foo["spec"] == {"deployment": {"name": "plain-web", "image": DEFAULT_IMAGE}, "replicas": 1}

    def reconciled() -> dict[str, Any] | None:
        status: dict[str, Any] = release.get("foos.v1.samplecontroller.k8s.io", "plain", "-n", FOOS).get("status", {})
        return status if status.get("availableReplicas") == 1 else None

    wait_for("the controller pod to report the Foo available", reconciled)
    deployment = release.get("deployment", "plain-web", "-n", FOOS)
    assert deployment["metadata"]["ownerReferences"][0]["name"] == "plain"
    (pod,) = release.get("pods", "-n", FOOS, "-l", "controller=plain")["items"]
    assert pod["spec"]["nodeName"].startswith("kwok-node-"), "a Foo's Deployment must keep to the kwok nodes"


def test_conversion_goes_through_the_crds_service_reference(release: Cluster) -> None:
    crd = release.get("crd", CRD_NAME)
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "namespace": NAMESPACE,
        "name": SERVICE,
        "path": "/convert",
        "port": 443,
    }
    release.plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("old-style", replicas=3))
    before = release.webhook_requests("/convert")
    foo = release.get("foos.v1alpha1.samplecontroller.k8s.io", "old-style", "-n", FOOS)
    assert foo["apiVersion"] == "samplecontroller.k8s.io/v1alpha1"
    assert foo["spec"] == {"deploymentName": "old-style-web", "replicas": 3}
    assert release.webhook_requests("/convert") > before


@pytest.mark.smoke
def test_the_aggregated_api_becomes_available_and_serves_foohealths_from_the_insights_pod(release: Cluster) -> None:
    release.plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("healthy"))

    def available() -> bool:
        conditions = release.get("apiservice", APISERVICE)["status"].get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    wait_for(f"APIService {APISERVICE} Available", available)
    out = release.plane.kubectl("get", "--raw", "/apis/insights.samplecontroller.k8s.io/v1alpha1").stdout
    assert {r["name"] for r in json.loads(out)["resources"]} >= {"foohealths", "fooreviews"}
    # Served with the chart's RBAC only: SubjectAccessReviews (auth-delegator) and the caches.
    wait_for(
        "a FooHealth for the Foo just made",
        lambda: (
            "foohealth.insights.samplecontroller.k8s.io/healthy"
            in release.plane.kubectl("get", "foohealths", "-n", FOOS, "-o", "name").stdout.split()
        ),
    )


def test_the_pods_logs_come_from_the_real_kubelet(release: Cluster) -> None:
    for pod in release.pods():
        logs = release.plane.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout
        assert logs.strip(), f"kubectl logs {pod['metadata']['name']} gave nothing"


# ----------------------------------------------------------------------------- tenants (issue 34)
TENANT_A = "tenant-a"  # fat Foos and fat Deployments
TENANT_B = ("tenant-b-shared", "tenant-b-quota")  # one Deployment edited under many Foos; Foos a quota refuses
HONEST = "tenant-honest"
FAT_OBJECTS = 12  # of each kind, ~1.2 MiB as stored: each costs kube-apiserver a second or more of CPU
SHARED_FOOS = 200
REFUSED_FOOS = 100
POD_BOUND_MIB = 200  # each pod's working set, with the chart's limits.memory of 256Mi (issue 34)


def _replace_pod(release: Cluster, component: str) -> str:
    """Delete the component's pod; the uid of the one its ReplicaSet makes instead."""
    (old,) = release.pods(component)
    release.plane.kubectl("delete", "pod", old["metadata"]["name"], "-n", NAMESPACE, "--wait=false")
    uids = wait_for(
        f"a new {component} pod",
        lambda: [
            p["metadata"]["uid"] for p in release.pods(component) if p["metadata"]["uid"] != old["metadata"]["uid"]
        ],
        timeout=300,
    )
    return str(uids[0])


def _restarts(release: Cluster) -> dict[str, list[tuple[int, str]]]:
    """Each chart pod's containers: restart count and why the last one ended (OOMKilled, ...)."""
    return {
        pod["metadata"]["name"]: [
            (s["restartCount"], s.get("lastState", {}).get("terminated", {}).get("reason", ""))
            for s in pod["status"].get("containerStatuses") or []
        ]
        for pod in release.pods()
    }


def test_tenants_leave_every_pod_under_its_bound_and_an_honest_tenant_served(release: Cluster) -> None:
    """Issue 34's tenants, each with ordinary objects in namespaces of its own, against the chart's
    pods (limits.memory 256Mi): tenant A stores fat Foos and fat Deployments; tenant B has Foos
    naming one Deployment, which it scales once a second, and Foos whose Deployments a
    ResourceQuota refuses (the controller retries them). Meanwhile an honest tenant writes Foos one
    at a time, and each is served (its Deployment made, its status current) while the tenants still
    store. Then the controller and insights pods are replaced, and each new one lists all of it
    while tenant B goes on. Each pod's working set, sampled from its cgroup as the kubelet counts
    it, stays under 200 MiB, running and restarted; no container restarts or is OOM-killed; and
    the new pods serve the honest tenant (a Foo reconciled, the FooHealths answered)."""
    plane = release.plane
    readers = {c: PodWorkingSet(release.pods(c)[0]["metadata"]["uid"]) for c in COMPONENTS}
    idle = {c: read() for c, read in readers.items()}
    attacks: list[Attack] = [
        FatFoos(TENANT_A, FAT_OBJECTS),
        FatDeployments(TENANT_A, FAT_OBJECTS),
        shared := SharedDeployment(TENANT_B[0], SHARED_FOOS),
        QuotaRefused(TENANT_B[1], REFUSED_FOOS),
    ]
    tenants, honest = Tenants(plane, attacks), HonestTenant(HONEST)
    began = time.monotonic()
    try:
        asyncio.run(honest.write_while(plane, lambda: False, at_least=3))  # the idle baseline
        idle_latencies = list(honest.latencies)
        honest.forget()
        with Peaks(readers) as running:
            tenants.start()
            asyncio.run(honest.write_while(plane, lambda: not tenants.stored(), at_least=3))
            served_while_storing = len(honest.latencies)
            fat = [f"fat-foo-{i:03d}-nginx" for i in range(FAT_OBJECTS)]
            wait_for(
                "every fat Foo's Deployment",  # one small GET each: a list would carry the fat ones
                lambda: all(plane.get(DEPLOYMENTS.path(TENANT_A, name))[0] == 200 for name in fat),
                timeout=600,
                interval=2,
            )
        stored = time.monotonic()
        replaced = {c: _replace_pod(release, c) for c in ("controller", "insights")}
        with Peaks({c: PodWorkingSet(uid) for c, uid in replaced.items()}) as restarted:
            wait_for("the new pods Ready", lambda: all(_ready(p) for p in release.pods()), timeout=600)
            asyncio.run(honest.write_while(plane, lambda: False, at_least=1))
            wait_for(
                "the new insights pod to serve every honest Foo's health",
                lambda: (
                    len(plane.kubectl("get", "foohealths", "-n", HONEST, "-o", "name").stdout.split()) == honest.written
                ),
                timeout=300,
            )
        assert shared.edits > 0 and tenants.running(), f"tenant B stopped before the end: {tenants.errors}"
        tenants.stop()
        restarts = _restarts(release)
        print(
            f"tenants stored {tenants.stored_in} (s); {shared.edits} edits of the shared Deployment; "
            f"{time.monotonic() - stored:.0f}s for the restart\n"
            f"honest Foos served in {[round(s, 2) for s in honest.latencies]} s "
            f"(idle: {[round(s, 2) for s in idle_latencies]} s), "
            f"created in {[round(s, 2) for s in honest.created_in]} s "
            f"({served_while_storing} while the tenants stored, {honest.retries} creates retried)\n"
            f"working sets (MiB): idle {idle}, running {running.peaks}, restarted {restarted.peaks}"
        )
    finally:
        tenants.stop()
        namespaces = [TENANT_A, *TENANT_B, HONEST]
        plane.kubectl("delete", "namespace", *namespaces, "--ignore-not-found", "--wait=false")
        wait_for(
            "the tenants' namespaces to be gone",
            lambda: (
                not set(plane.kubectl("get", "namespaces", "-o", "name").stdout.split())
                & {f"namespace/{n}" for n in namespaces}
            ),
            timeout=900,
            interval=2,
        )
        print(f"the tenants' part took {time.monotonic() - began:.0f}s, their namespaces' deletion included")
    assert tenants.errors == []
    assert served_while_storing >= 3
    for component, peak in {**running.peaks, **{f"{c} restarted": v for c, v in restarted.peaks.items()}}.items():
        assert peak < POD_BOUND_MIB, f"{component}: working set peaked at {peak:.0f} MiB"
    assert all(count == 0 and not reason for statuses in restarts.values() for count, reason in statuses), restarts


# ----------------------------------------------------------------------------- upgrades, rotation
def _upgrade(release: Cluster, *settings: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm upgrade --reset-then-reuse-values` (docs/install.md's) of the release with ``settings``,
    waiting for its pods and hooks."""
    return release.plane.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--reset-then-reuse-values",
        *settings,
        "--wait",
        "--timeout=180s",
        timeout=240,
        check=check,
    )


def test_helm_upgrade_keeps_the_ca_and_certificate_and_rolls_the_webhook_pod_without_a_failed_write(
    release: Cluster,
) -> None:
    """Readiness, the Service's endpoints and the old pod's drain, all real: a steady stream of
    dry-run Foo creates through kube-apiserver sees no error while the webhook pod is replaced;
    the generated Secret and every caBundle are the same after the upgrade."""
    plane = release.plane
    (old,) = release.pods("webhook")
    secret_before = release.get("secret", TLS_SECRET, "-n", NAMESPACE)["data"]
    bundles_before = ca_bundles(release)
    with steady_requests(plane, [dry_run_foo_create(FOOS)]) as (outcomes, failures):
        wait_for_more("writes before the upgrade", lambda: outcomes["write"], 10)
        _upgrade(release, "--set-string", f"webhook.podAnnotations.rolled={time.time_ns()}")

        def replaced() -> bool:
            pods = release.pods("webhook")
            return len(pods) == 1 and pods[0]["metadata"]["name"] != old["metadata"]["name"]

        wait_for("the old webhook pod to drain and go", replaced)
        wait_for_more("writes after the rollout", lambda: outcomes["write"], 10)
    print(f"writes during the rollout: {dict(outcomes)}")
    assert failures == [], f"{len(failures)} writes failed ({outcomes['write']} did not): {failures[:5]}"
    assert outcomes["write"] >= 20, dict(outcomes)
    assert release.get("secret", TLS_SECRET, "-n", NAMESPACE)["data"] == secret_before, "the upgrade changed the Secret"
    assert ca_bundles(release) == bundles_before, "the upgrade changed a caBundle"
    (new,) = release.pods("webhook")
    assert new["spec"]["nodeName"] == release.node.name
    assert "rolled" in new["metadata"]["annotations"], "the upgrade did not apply"
    plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("after-upgrade"))


def _serving_issuer(ip: str, port: int) -> str:
    """The issuer CN of the certificate a pod serves right now."""
    names = served_certificate(ip, port).issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value)


def _set_ca_bundles(plane: LocalControlPlane, bundle: str) -> None:
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        plane.kubectl(
            "patch",
            kind,
            RELEASE,
            "--type=json",
            "-p",
            json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]),
        )
    plane.kubectl(
        "patch",
        "crd",
        CRD_NAME,
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": bundle}]),
    )
    plane.kubectl(
        "patch",
        "apiservice",
        APISERVICE,
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/caBundle", "value": bundle}]),
    )


def test_a_rotated_secret_reaches_the_pod_through_the_kubelet_without_restart_or_failed_write(release: Cluster) -> None:
    """A new CA and serving certificate written into the Secret (the caBundles trusting old and new
    first): the kubelet updates the pod's Secret volume, the webhook reloads it from disk, and no
    Foo write fails on the way; the pod is not restarted. Then the caBundles trust the new CA
    alone, as after any rotation: the release is consistent again for the tests after this one."""
    plane = release.plane
    (pod,) = release.pods("webhook")
    ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
    old_ca = base64.b64decode(release.get("secret", TLS_SECRET, "-n", NAMESPACE)["data"]["ca.crt"])
    ca = new_ca("rotated-by-e2e")
    names = [n for svc in (SERVICE, f"{RELEASE}-insights") for n in service_dns_names(svc, NAMESPACE)]
    serving = issue_serving(ca, common_name=SERVICE, dns_names=names)
    _set_ca_bundles(plane, base64.b64encode(old_ca + ca.cert_pem).decode())
    with steady_requests(plane, [dry_run_foo_create(FOOS)]) as (outcomes, failures):
        wait_for_more("writes before the rotation", lambda: outcomes["write"], 5)
        data = {"ca.crt": ca.cert_pem, "tls.crt": serving.cert_pem, "tls.key": serving.key_pem}
        plane.kubectl(
            "patch",
            "secret",
            TLS_SECRET,
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            json.dumps({"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}),
        )
        began = time.monotonic()
        wait_for(
            "the pod to serve the new certificate", lambda: _serving_issuer(ip, 9443) == "rotated-by-e2e", timeout=120
        )
        print(f"the pod served the rotated certificate {time.monotonic() - began:.1f}s after the Secret changed")
        wait_for_more("writes after the rotation", lambda: outcomes["write"], 5)
    print(f"writes during the rotation: {dict(outcomes)}")
    assert failures == [], f"{len(failures)} writes failed ({outcomes['write']} did not): {failures[:5]}"
    assert outcomes["write"] >= 10, dict(outcomes)
    (after,) = release.pods("webhook")
    assert after["metadata"]["name"] == name
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    # The insights pod serves the same Secret: let it have the new certificate before the
    # APIService trusts the new CA alone.
    (insights,) = release.pods("insights")
    wait_for(
        "the insights pod to serve the new certificate",
        lambda: _serving_issuer(insights["status"]["podIP"], 8443) == "rotated-by-e2e",
        timeout=120,
    )
    _set_ca_bundles(plane, base64.b64encode(ca.cert_pem).decode())


def _webhook_only_release(release: Cluster, name: str, namespace: str, tls_mode: str, **webhook: Any) -> list[str]:
    """`helm install` of a second release, the webhook alone (no CRD, APIService, insights or
    controller of its own: nothing of the first release's is touched), its pod on the real node;
    `webhook` adds to its webhook values. Returns the flags its upgrades repeat."""
    placement = chart_values(release.node, release.image)
    values = {
        "image": placement["image"],
        "tls": {"mode": tls_mode},
        "webhook": {**placement["webhook"], **webhook},
        "crd": {"install": False},
        "insights": {"enabled": False},
        "controller": {"enabled": False},
        "tests": {"enabled": False},
    }
    values_file = release.values.with_name(f"{name}-values.yaml")
    values_file.write_text(yaml.safe_dump(values))
    release.plane.helm(
        "install", name, str(CHART), "--namespace", namespace, "--create-namespace", "-f", str(values_file),
        "--wait", "--timeout=120s", timeout=180,
    )  # fmt: skip
    return ["--namespace", namespace]


def _uninstall_webhook_only_release(release: Cluster, name: str, namespace: str, *more_namespaces: str) -> None:
    release.plane.helm("uninstall", name, "--namespace", namespace, "--wait", "--timeout=60s", check=False)
    wait_for(f"{name}'s pods to be gone", lambda: not release.get("pods", "-n", namespace)["items"], timeout=60)
    release.plane.kubectl(
        "delete", "namespace", namespace, *more_namespaces, "--wait=false", "--ignore-not-found", check=False
    )


def _rotator_secret(release: Cluster, name: str, namespace: str) -> dict[str, str] | None:
    """The rotator's Secret data once it has written it and put its bundle in both caBundles."""
    data: dict[str, str] | None = release.get("secret", f"{name}-webhook-tls", "-n", namespace).get("data")
    bundles = {
        release.get(kind, name)["webhooks"][0]["clientConfig"].get("caBundle")
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
    }
    return data if data and bundles == {data["ca-bundle.crt"]} else None


def test_in_rotator_mode_helm_upgrade_keeps_what_the_service_wrote(release: Cluster) -> None:
    """A second release in rotator mode, its webhook pod on the real node: the service itself
    fills the chart's empty Secret and patches its caBundles; `helm upgrade` leaves both alone."""
    plane, name, namespace = release.plane, "rot-foo-operator", f"{NAMESPACE}-rotator"
    # Ignore: its webhooks see every Foo of the cluster, and it must not refuse the first release's.
    where = _webhook_only_release(release, name, namespace, "rotator", failurePolicy="Ignore", timeoutSeconds=1)
    try:
        data = wait_for(
            "the rotator in the webhook pod to fill the Secret and the caBundles",
            lambda: _rotator_secret(release, name, namespace),
            timeout=60,
        )
        plane.helm("upgrade", name, str(CHART), *where, "--reset-then-reuse-values", "--set", "webhook.logLevel=debug")
        assert release.get("secret", f"{name}-webhook-tls", "-n", namespace)["data"] == data
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            assert release.get(kind, name)["webhooks"][0]["clientConfig"]["caBundle"] == data["ca-bundle.crt"], kind
    finally:
        _uninstall_webhook_only_release(release, name, namespace)


def test_a_generated_release_switches_to_rotator_in_place(release: Cluster) -> None:
    """docs/install.md, "Switching the TLS mode": `helm upgrade --reset-then-reuse-values --set
    tls.mode=rotator` over a live generated release goes through (the generated Secret and the
    rotator's have different names, as a Secret's type cannot change), and afterwards the webhook
    pod serves the rotator's certificate, which every caBundle trusts. A second release, scoped by
    namespaceSelector to one namespace of its own, so its window of refused writes is its own."""
    plane, name, namespace = release.plane, "switch-foo-operator", f"{NAMESPACE}-switch"
    foos = f"{FOOS}-switch"
    plane.kubectl("create", "namespace", foos, check=False)
    plane.kubectl("label", "namespace", foos, "switch-test=true", "--overwrite")
    selector = {"matchLabels": {"switch-test": "true"}}
    where = _webhook_only_release(release, name, namespace, "generated", namespaceSelector=selector)
    try:
        generated = release.get("secret", f"{name}-webhook-generated-tls", "-n", namespace)
        assert generated["type"] == "kubernetes.io/tls"
        with steady_requests(plane, [dry_run_foo_create(foos)]) as (outcomes, failures):
            wait_for_more("writes through the generated release's webhook", lambda: outcomes["write"], 10)
            began = time.monotonic()
            plane.helm(
                "upgrade", name, str(CHART), *where, "--reset-then-reuse-values", "--set", "tls.mode=rotator",
                "--wait", "--timeout=120s", timeout=180,
            )  # fmt: skip
            print(f"helm upgrade to rotator: {time.monotonic() - began:.1f}s")
            data = wait_for(
                "the rotator to fill its Secret and both caBundles",
                lambda: _rotator_secret(release, name, namespace),
                timeout=60,
            )
            ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
            rotators_ca = str(ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
            (pod,) = [
                p
                for p in release.get("pods", "-n", namespace, "-l", "app.kubernetes.io/component=webhook")["items"]
                if not p["metadata"].get("deletionTimestamp")
            ]
            wait_for(
                "the webhook pod to serve the rotator's certificate",
                lambda: _serving_issuer(pod["status"]["podIP"], 9443) == rotators_ca,
                timeout=60,
            )
            window = len(failures)  # writes refused between the upgrade and the rotator's first round
            print(f"writes refused in the switch's window: {window}, {time.monotonic() - began:.1f}s after it began")
            wait_for_more("writes through the rotator release's webhook", lambda: outcomes["write"], 10)
        print(f"writes during the switch: {dict(outcomes)}; refused in the window: {window}: {failures[:3]}")
        assert failures[window:] == [], "a write failed after the rotator's certificate was served"
        assert release.get("secret", f"{name}-webhook-tls", "-n", namespace)["type"] == "Opaque"
        gone = plane.kubectl("get", "secret", f"{name}-webhook-generated-tls", "-n", namespace, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, "the generated Secret went with the switch"
    finally:
        _uninstall_webhook_only_release(release, name, namespace, foos)


# ----------------------------------------------------------------------------- migrate-storage hook
MIGRATE_STORAGE = f"{RELEASE}-migrate-storage"  # the hook Job, its ServiceAccount and RBAC
MIGRATED = "foo-real-migrated"  # the namespace of the Foos stored at v1alpha1 for the hook to re-write
STORED_AT = {"v1": "samplecontroller.k8s.io/v1", "v1alpha1": "samplecontroller.k8s.io/v1alpha1"}


def _store_foos_at(plane: LocalControlPlane, version: str) -> None:
    """Make ``version`` the CRD's storage version, as the switch from sample-controller does."""
    versions = json.loads(plane.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)["spec"]["versions"]
    patch = [
        {"op": "replace", "path": f"/spec/versions/{i}/storage", "value": v["name"] == version}
        for i, v in enumerate(versions)
    ]
    plane.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(patch))


def _settled(plane: LocalControlPlane, names: list[str], quiet: float = 3.0) -> bool:
    """Whether the controller has written each Foo's status for its generation and its pods, and
    nothing has changed any of the Foos for ``quiet`` seconds."""

    def versions() -> dict[str, str] | None:
        foos = json.loads(plane.kubectl("get", "foos", "-n", MIGRATED, "-o", "json").stdout)["items"]
        found = {foo["metadata"]["name"]: foo for foo in foos if foo["metadata"]["name"] in names}
        for foo in found.values():
            status = foo.get("status", {})
            if status.get("observedGeneration") != foo["metadata"]["generation"]:
                return None
            if status.get("replicas") != foo["spec"].get("replicas", 1):
                return None
        return {name: foo["metadata"]["resourceVersion"] for name, foo in found.items()}

    before = versions()
    if before is None or len(before) != len(names):
        return False
    time.sleep(quiet)
    return versions() == before


def _stored_versions(plane: LocalControlPlane) -> list[str]:
    crd = json.loads(plane.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    return list(crd["status"]["storedVersions"])


def _upgrade_with_the_hook(release: Cluster, *settings: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm upgrade` with the migrate-storage hook Job on (and ``settings``)."""
    return _upgrade(release, "--set", "migrateStorage.job.enabled=true", *settings, check=check)


def _hook_off(release: Cluster) -> None:
    """The release as the fixture made it, as far as the hook goes: off, default arguments."""
    _upgrade(
        release,
        "--set",
        "migrateStorage.job.enabled=false,migrateStorage.job.backoffLimit=6",
        "--set-json",
        "migrateStorage.job.extraArgs=[]",
    )


@contextlib.contextmanager
def _followed_logs(plane: LocalControlPlane, selector: str) -> Iterator[dict[str, str]]:
    """Each matching pod's whole log (pod name -> text), read with `kubectl logs -f` from the
    moment its container starts: Helm deletes a hook Job that succeeded, its pod with it, as soon
    as it sees it complete, so afterwards there is nothing left to read."""
    logs: dict[str, str] = {}
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            listed = plane.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json", check=False)
            for pod in json.loads(listed.stdout or '{"items": []}')["items"]:
                name = pod["metadata"]["name"]
                states = [status["state"] for status in pod["status"].get("containerStatuses") or []]
                if name in logs or not any("running" in state or "terminated" in state for state in states):
                    continue
                followed = plane.kubectl("logs", "-f", name, "-n", NAMESPACE, check=False, timeout=300)
                if followed.returncode == 0:
                    logs[name] = followed.stdout
            stop.wait(0.2)

    follower = threading.Thread(target=follow, name="hook-logs", daemon=True)
    follower.start()
    try:
        yield logs
    finally:
        stop.set()
        follower.join(timeout=60)


def test_the_migrate_storage_hook_job_rewrites_every_foo_at_v1_and_prunes_stored_versions(release: Cluster) -> None:
    """The hook Job runs on the real node from the product image after `helm upgrade`: the Foos
    stored at v1alpha1 are in etcd at v1 afterwards, status.storedVersions is [v1], its log ends
    with the summary, and Helm deleted the Job that succeeded."""
    plane = release.plane
    plane.kubectl("create", "namespace", MIGRATED, check=False)  # left by an earlier run of this test
    names = [f"stored-at-v1alpha1-{i}" for i in range(3)]
    for name in names:
        plane.kubectl("apply", "-n", MIGRATED, "-f", "-", input=foo_yaml(name))
    # The release's controller writes each new Foo's status as its Deployment makes pods. A write
    # after the storage version is back at v1 would store the Foo at v1 before the hook runs (it
    # did once: the hook found nothing to rewrite), so the Foos are stored at v1alpha1 only once
    # their status has stopped changing.
    # Pods made on the real node, then 3 quiet seconds: minutes only on a busy machine.
    wait_for("the controller to settle the Foos' status", lambda: _settled(plane, names), timeout=180, interval=1)
    _store_foos_at(plane, "v1alpha1")
    try:
        assert _stored_versions(plane) == ["v1", "v1alpha1"]

        def written_at_v1alpha1() -> bool:
            # The apiserver reloads a CRD's storage a moment after the CRD changes: write until
            # etcd shows every Foo at v1alpha1.
            for name in names:
                plane.kubectl("annotate", "foo", name, "-n", MIGRATED, f"e2e/written={time.time_ns()}", "--overwrite")
            stored = etcd_foos(plane, MIGRATED)
            return {stored[name][0] for name in names} == {STORED_AT["v1alpha1"]}

        wait_for("the Foos to be stored at v1alpha1", written_at_v1alpha1, interval=0.5)
    finally:
        _store_foos_at(plane, "v1")
    stored = etcd_foos(plane, MIGRATED)
    assert {stored[name][0] for name in names} == {STORED_AT["v1alpha1"]}, f"re-stored before the hook ran: {stored}"
    try:
        began = time.monotonic()
        with _followed_logs(plane, "app.kubernetes.io/component=migrate-storage") as logs:
            _upgrade_with_the_hook(release)
        print(f"helm upgrade with the migrate-storage hook: {time.monotonic() - began:.1f}s")
        assert _stored_versions(plane) == ["v1"]
        stored = etcd_foos(plane, MIGRATED)
        assert {stored[name][0] for name in names} == {STORED_AT["v1"]}, stored
        assert len(logs) == 1, f"one pod, one run: {logs}"
        (log,) = logs.values()
        print(f"the hook's log:\n{log}")
        done = DONE_LINE.search(log)
        assert done is not None, log
        counts = {k: int(v) for k, v in done.groupdict().items() if k != "seconds"}
        assert counts["rewritten"] >= len(names), counts
        assert counts["rewritten"] + counts["current"] == counts["total"], counts
        assert counts["failed"] == 0, counts
        assert log.splitlines()[-1] == "status.storedVersions: [v1, v1alpha1] -> [v1]"
        gone = plane.kubectl("get", "job", MIGRATE_STORAGE, "-n", NAMESPACE, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, "Helm kept the hook Job that succeeded"
    finally:
        _hook_off(release)


def test_a_failing_migrate_storage_hook_fails_helm_upgrade_after_its_backoff_and_stays_to_be_read(
    release: Cluster,
) -> None:
    """A hook run that cannot succeed (here: an argument the command refuses) is retried
    backoffLimit times; `helm upgrade` then fails naming the Job and why, and the failed Job and
    its pods stay, each log the command's one line."""
    plane = release.plane
    try:
        began = time.monotonic()
        failed = _upgrade_with_the_hook(
            release,
            "--set",
            "migrateStorage.job.backoffLimit=1",
            "--set-json",
            'migrateStorage.job.extraArgs=["--dry-run=everything"]',
            check=False,
        )
        print(f"helm upgrade with a failing hook: exit {failed.returncode} after {time.monotonic() - began:.1f}s")
        print(failed.stderr)
        assert failed.returncode != 0
        assert "post-upgrade hooks failed" in failed.stderr, failed.stderr
        assert f"job {MIGRATE_STORAGE} failed: BackoffLimitExceeded" in failed.stderr, failed.stderr
        job = release.get("job", MIGRATE_STORAGE, "-n", NAMESPACE)
        assert job["status"].get("failed") == 2, job["status"]  # the first run and one retry
        pods = release.get("pods", "-n", NAMESPACE, "-l", f"job-name={MIGRATE_STORAGE}")["items"]
        assert len(pods) == 2
        for pod in pods:
            assert pod["spec"]["nodeName"] == release.node.name
            log = plane.kubectl("logs", pod["metadata"]["name"], "-n", NAMESPACE).stdout
            assert log.strip() == (
                "foo-operator migrate-storage: error: argument --dry-run: invalid choice: 'everything' "
                "(choose from 'none', 'client', 'server') (see foo-operator migrate-storage --help)"
            ), log
    finally:
        _hook_off(release)
        # A failed hook's Job, ServiceAccount and RBAC stay until the next hook run replaces them.
        plane.kubectl("delete", "job,serviceaccount", MIGRATE_STORAGE, "-n", NAMESPACE, "--ignore-not-found")
        plane.kubectl("delete", "clusterrole,clusterrolebinding", MIGRATE_STORAGE, "--ignore-not-found")


# ----------------------------------------------------------------------------- uninstall
def test_helm_uninstall_removes_everything_but_the_kept_crd_and_its_foos(release: Cluster) -> None:
    plane = release.plane
    plane.kubectl("apply", "-n", FOOS, "-f", "-", input=foo_yaml("outlives-the-release"))
    said = plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=90s", timeout=120).stdout
    assert f"These resources were kept due to the resource policy:\n[CustomResourceDefinition] {CRD_NAME}" in said
    assert_only_the_kept_crd_is_left(plane, RELEASE, NAMESPACE)
    # Foos are stored at v1, so reading them needs no (now absent) conversion webhook.
    names = plane.kubectl("get", "foos.v1.samplecontroller.k8s.io", "-n", FOOS, "-o", "name").stdout.split()
    assert "foo.samplecontroller.k8s.io/outlives-the-release" in names
    # Each pod drains and exits on SIGTERM well within its grace period (the kubelet would
    # SIGKILL it at 30-40 s): gone, terminating ones included, in seconds.
    began = time.monotonic()
    wait_for("the chart's pods to be gone from the real node", lambda: not release.pods(terminating=True), timeout=60)
    print(f"the chart's pods were gone {time.monotonic() - began:.1f}s after helm uninstall returned")
