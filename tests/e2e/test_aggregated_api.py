"""The aggregated API as a cluster user meets it: registered by APIService, reached through kube-apiserver.

The insights server runs in its own network namespace, like a pod on another node: kube-apiserver
reaches it through a selector-less Service whose endpoints name the namespace's address
(`--enable-aggregator-routing` dials endpoints), and it reaches kube-apiserver with a
ServiceAccount token, authorized only by the RBAC that `insights.manifests` builds.

A module importing the `insights` fixture may set INSIGHTS_FLAGS (more flags for the server) and
INSIGHTS_WATCH_NAMESPACE (the server watches that namespace alone, `--namespace`, with the
namespaced RBAC the chart gives then, under a ServiceAccount of its own so that no other module's
cluster-wide binding lends it more).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
import yaml

from certs.authority import issue_serving, new_ca, service_dns_names
from certs.files import write_serving_files
from hack.plane.cluster import LocalControlPlane
from hack.plane.netns import NetNamespace
from hack.plane.procs import Component
from hack.plane.product import LocalProduct
from insights.manifests import APISERVICE_NAME, aggregated_api_manifests
from tests.e2e.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
GROUP = "insights.samplecontroller.k8s.io"
SERVICE_NAMESPACE = "foo-insights-system"
SERVICE = "foo-insights"
SERVICE_ACCOUNT = "foo-operator"
PORT = 8443


@dataclass
class Insights:
    plane: LocalControlPlane
    netns: NetNamespace
    ca_pem: bytes
    workdir: Path
    server: Component

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, check=check, input=input)


def _service_objects(ns_ip: str) -> list[dict[str, Any]]:
    """A Service without selector and its endpoints, written by hand: the address is ours to give."""
    port = {"name": "https", "port": PORT, "protocol": "TCP"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": SERVICE_NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": PORT, "protocol": "TCP"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{SERVICE}-netns",
                "namespace": SERVICE_NAMESPACE,
                "labels": {
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "e2e.foo-operator",
                },
            },
            "addressType": "IPv4",
            "ports": [port],
            "endpoints": [{"addresses": [ns_ip], "conditions": {"ready": True}}],
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": SERVICE, "namespace": SERVICE_NAMESPACE},
            "subsets": [{"addresses": [{"ip": ns_ip}], "ports": [port]}],
        },
    ]


def _kubeconfig(plane: LocalControlPlane, token: str, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "plane", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": SERVICE_ACCOUNT}}],
        "current-context": "plane",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def insights(
    foo_operator: LocalProduct, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Insights]:
    plane = foo_operator.plane
    workdir = tmp_path_factory.mktemp("insights")
    watched: str | None = getattr(request.module, "INSIGHTS_WATCH_NAMESPACE", None)
    account = SERVICE_ACCOUNT if watched is None else f"{SERVICE_ACCOUNT}-one-namespace"
    plane.kubectl("create", "namespace", SERVICE_NAMESPACE, check=False)
    if watched is not None:
        plane.kubectl("create", "namespace", watched, check=False)
    plane.kubectl("create", "serviceaccount", account, "-n", SERVICE_NAMESPACE, check=False)
    token = plane.kubectl("create", "token", account, "-n", SERVICE_NAMESPACE, "--duration=2h").stdout.strip()
    kubeconfig = _kubeconfig(plane, token, workdir / "kubeconfig")

    suffix = os.getpid() % 200 + 20
    with NetNamespace(f"foo-insights-{os.getpid()}", ns_ip=f"10.213.{suffix}.2", host_ip=f"10.213.{suffix}.1") as netns:
        ca = new_ca("foo-insights-e2e-ca")
        serving = issue_serving(
            ca, common_name=SERVICE, dns_names=service_dns_names(SERVICE, SERVICE_NAMESPACE), ips=[netns.ns_ip]
        )
        write_serving_files(workdir / "certs", ca, serving, force=True)
        plane.apply(*_service_objects(netns.ns_ip), field_manager="e2e")
        plane.apply(
            *aggregated_api_manifests(
                namespace=SERVICE_NAMESPACE,
                service=SERVICE,
                service_account=account,
                ca_bundle=ca.cert_pem,
                name=account,
                watch_namespace=watched,
            ),
            field_manager="e2e",
        )

        netns.forward_host_port(plane.apiserver_port)
        argv = [
            sys.executable,
            "-m",
            "insights",
            "--cert-dir",
            str(workdir / "certs"),
            "--bind-address",
            netns.ns_ip,
            "--port",
            str(PORT),
            "--kubeconfig",
            str(kubeconfig),
            "--requestheader-ca-file",
            str(workdir / "requestheader-ca.crt"),
            "--log-level",
            "debug",
            # A module that imports this fixture may start its server with more flags.
            *getattr(request.module, "INSIGHTS_FLAGS", ()),
            *(("--namespace", watched) if watched is not None else ()),
        ]
        server = Component(
            "insights",
            ["ip", "netns", "exec", netns.name, *argv],
            plane.logs_dir / "insights.log",
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        started = time.monotonic()
        server.start()
        try:
            context = ssl.create_default_context(cadata=ca.cert_pem.decode())

            def ready() -> bool:
                try:
                    with urllib.request.urlopen(
                        f"https://{netns.ns_ip}:{PORT}/readyz", context=context, timeout=2
                    ) as response:
                        return bool(response.status == 200)
                except OSError:
                    return False

            wait_for("the insights server's /readyz inside the network namespace", ready, interval=0.05, server=server)
            print(f"insights server ready {time.monotonic() - started:.2f}s after start")
            yield Insights(plane=plane, netns=netns, ca_pem=ca.cert_pem, workdir=workdir, server=server)
        finally:
            server.stop()
            plane.kubectl("delete", "apiservice", APISERVICE_NAME, "--ignore-not-found", check=False)


def _available(insights: Insights) -> bool:
    result = insights.kubectl("get", "apiservice", APISERVICE_NAME, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def available(insights: Insights) -> Insights:
    began = time.monotonic()
    wait_for("the APIService to become Available", lambda: _available(insights), timeout=90, server=insights.server)
    print(f"APIService Available {time.monotonic() - began:.1f}s after the insights server was ready")
    return insights


def _foo(name: str, replicas: int = 2, labels: dict[str, str] | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"deployment": {"name": f"{name}-nginx"}, "replicas": replicas},
        }
    )


def _run_like_the_controller(insights: Insights, namespace: str, name: str, replicas: int) -> None:
    """What foo-operator's controller would do, written here so this test owns its timing."""
    foo = json.loads(insights.kubectl("get", "foo", name, "-n", namespace, "-o", "json").stdout)
    labels = {"app": "nginx", "controller": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{name}-nginx",
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "samplecontroller.k8s.io/v1",
                    "kind": "Foo",
                    "name": name,
                    "uid": foo["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
            },
        },
    }
    insights.plane.apply(deployment, field_manager="e2e")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "observedGeneration": foo["metadata"]["generation"],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "ReplicasAvailable",
                    "message": "",
                    "lastTransitionTime": now,
                    "observedGeneration": foo["metadata"]["generation"],
                }
            ],
        }
    }
    insights.kubectl(
        "patch", "foo", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


def _health(insights: Insights, namespace: str, name: str) -> dict[str, Any]:
    result = insights.kubectl("get", "foohealth", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


# ---- registration -----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_apiservice_becomes_available_and_kubectl_lists_both_resources(available: Insights) -> None:
    result = available.kubectl("api-resources", f"--api-group={GROUP}", "-o", "wide")
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(lines) == {"foohealths", "fooreviews"}
    assert "fh" in lines["foohealths"].split() and "get,list,watch" in lines["foohealths"]
    assert "create" in lines["fooreviews"]


# kube-apiserver's own aggregated discovery (one document for every group, APIServices' too):
# beta as v2beta1 and on by default from v1.27, GA as v2 from v1.30.
AGGREGATED_DISCOVERY = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
)


def _aggregated_discovery(plane: LocalControlPlane) -> dict[str, Any]:
    assert plane.pki is not None
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(plane.pki.cert_file("admin"), plane.pki.key_file("admin"))
    request = urllib.request.Request(f"{plane.server}/apis", headers={"Accept": AGGREGATED_DISCOVERY})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        document: dict[str, Any] = json.loads(response.read())
        return document


@pytest.mark.smoke
def test_kube_apiservers_aggregated_discovery_lists_our_group_and_resources(available: Insights) -> None:
    def our_resources() -> set[str]:
        document = _aggregated_discovery(available.plane)
        assert document["kind"] == "APIGroupDiscoveryList", document["kind"]
        return {
            r["resource"]
            for group in document["items"]
            if group["metadata"]["name"] == GROUP
            for version in group["versions"]
            if version["version"] == "v1alpha1"
            for r in version.get("resources") or []
        }

    wait_for(f"{GROUP} in kube-apiserver's aggregated discovery", lambda: bool(our_resources()), timeout=60)
    assert our_resources() == {"foohealths", "fooreviews"}


def test_kubectl_explain_reads_our_openapi(available: Insights) -> None:
    def explained() -> bool:
        return available.kubectl("explain", "foohealth.status.rollout", check=False).returncode == 0

    wait_for("kubectl explain foohealth (OpenAPI v3 aggregated)", explained, timeout=90)
    out = available.kubectl("explain", "foohealth").stdout
    assert "KIND:       FooHealth" in out and f"GROUP:      {GROUP}" in out
    assert "live health of one Foo" in out
    assert "Stalled (progress deadline exceeded)" in available.kubectl("explain", "foohealth.status.rollout").stdout


# ---- foohealths ---------------------------------------------------------------------------------------------


@pytest.mark.smoke
def test_kubectl_get_foohealths_shows_the_on_call_table(available: Insights, namespace: str) -> None:
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("web", replicas=2, labels={"tier": "front"}))
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("lonely", replicas=1))
    _run_like_the_controller(available, namespace, "web", 2)
    wait_for(
        "foohealth/web to be Healthy (kwok runs the Pods)",
        lambda: _health(available, namespace, "web").get("status", {}).get("health") == "Healthy",
        timeout=90,
    )

    table = available.kubectl("get", "foohealths", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "HEALTH",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "ROLLOUT",
        "LAST",
        "SYNC",
        "LAST",
        "ERROR",
        "AGE",
    ]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["web"][1:6] == ["Healthy", "2/2", "2", "2", "Complete"]
    assert rows["lonely"][1:6] == ["Unknown", "0/1", "0", "0", "Pending"]
    wide = available.kubectl("get", "fh", "web", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-5:] == ["DEPLOYMENT", "IMAGE", "RESTARTS", "SYNCED", "MESSAGE"]
    assert "web-nginx" in wide[1] and "nginx:latest" in wide[1]
    selected = available.kubectl("get", "foohealths", "-n", namespace, "-l", "tier=front", "-o", "name").stdout
    assert selected.split() == [f"foohealth.{GROUP}/web"]


def test_a_missing_foohealth_is_not_found(available: Insights, namespace: str) -> None:
    result = available.kubectl("get", "foohealth", "nope", "-n", namespace, check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == f'Error from server (NotFound): foohealths.{GROUP} "nope" not found'


def test_watch_reports_changes_of_the_underlying_objects(available: Insights, namespace: str) -> None:
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("watched", replicas=1))
    wait_for("foohealth/watched", lambda: bool(_health(available, namespace, "watched")))
    path = f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foohealths?watch=1&timeoutSeconds=20"
    watch = subprocess.Popen(
        [str(available.plane.bin.kubectl), f"--kubeconfig={available.plane.kubeconfig}", "get", "--raw", path],
        stdout=subprocess.PIPE,
        text=True,
        env=available.plane.env(),
    )
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())
        assert (first["type"], first["object"]["status"]["rollout"]) == ("ADDED", "Pending")
        _run_like_the_controller(available, namespace, "watched", 1)
        seen = []
        while not seen or seen[-1]["object"]["status"]["health"] != "Healthy":
            line = watch.stdout.readline()
            assert line, f"watch ended before the Foo turned Healthy: {[e['object']['status'] for e in seen]}"
            seen.append(json.loads(line))
        assert {e["type"] for e in seen} == {"MODIFIED"}
        available.kubectl("delete", "foo", "watched", "-n", namespace, "--wait=false")
        while (event := json.loads(watch.stdout.readline()))["type"] != "DELETED":
            pass
        assert event["object"]["metadata"]["name"] == "watched"
    finally:
        watch.kill()
        watch.wait()


# ---- fooreviews ------------------------------------------------------------------------------------------------


def _review(foo: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"apiVersion": f"{GROUP}/v1alpha1", "kind": "FooReview", "metadata": {"name": "check"}, "spec": {"object": foo}}
    )


@pytest.mark.smoke
def test_kubectl_create_fooreview_returns_the_verdict(available: Insights, namespace: str) -> None:
    good = {
        "apiVersion": "samplecontroller.k8s.io/v1alpha1",
        "kind": "Foo",
        "metadata": {"name": "good"},
        "spec": {"deploymentName": "good-nginx"},
    }
    out = available.kubectl("create", "-n", namespace, "-f", "-", "-o", "yaml", input=_review(good))
    verdict = yaml.safe_load(out.stdout)["status"]
    assert verdict["allowed"] is True
    assert verdict["object"]["spec"] == {"deployment": {"name": "good-nginx", "image": "nginx:latest"}, "replicas": 1}
    assert "deprecated" in verdict["warnings"][0]

    bad = {
        "apiVersion": "samplecontroller.k8s.io/v1",
        "kind": "Foo",
        "metadata": {"name": "bad"},
        "spec": {"deployment": {"name": "Bad_Name"}, "replicas": 11},
    }
    out = available.kubectl("create", "-n", namespace, "-f", "-", "-o", "yaml", input=_review(bad))
    verdict = yaml.safe_load(out.stdout)["status"]
    assert (verdict["allowed"], verdict["reason"]) == (False, "Invalid")
    assert [c["field"] for c in verdict["causes"]] == ["spec.deployment.name", "spec.replicas"]
    # The same Foo through the real admission chain is rejected for the same fields.
    real = available.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert "spec.deployment.name" in real.stderr and "spec.replicas" in real.stderr
    assert available.kubectl("get", "foo", "good", "-n", namespace, check=False).returncode != 0  # stored nothing


# ---- authentication and authorization ----------------------------------------------------------------------------


def test_calling_the_service_directly_without_the_front_proxy_certificate_is_unauthorized(available: Insights) -> None:
    (available.workdir / "ca.crt").write_bytes(available.ca_pem)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "direct",
                "cluster": {
                    "server": f"https://{available.netns.ns_ip}:{PORT}",
                    "certificate-authority": str(available.workdir / "ca.crt"),
                },
            }
        ],
        # A bearer token a kube-apiserver would accept means nothing here: only the aggregator's
        # client certificate makes the X-Remote-* headers trusted.
        "users": [{"name": "someone", "user": {"token": "not-a-front-proxy-certificate"}}],
        "contexts": [{"name": "direct", "context": {"cluster": "direct", "user": "someone"}}],
        "current-context": "direct",
    }
    (available.workdir / "direct.kubeconfig").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            str(available.plane.bin.kubectl),
            f"--kubeconfig={available.workdir / 'direct.kubeconfig'}",
            "get",
            "--raw",
            f"/apis/{GROUP}/v1alpha1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip() == "error: You must be logged in to the server (Unauthorized)"


def test_rbac_on_the_new_resources_reaches_users_through_view_and_edit(available: Insights, namespace: str) -> None:
    """kube-apiserver authorizes before it proxies, so these 403s are its own; our SubjectAccessReview then
    allows the same user (the next test shows ours refusing on its own)."""
    available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo("guarded"))
    denied = available.kubectl("get", "foohealths", "-n", namespace, "--as=bob", check=False)
    assert denied.returncode != 0
    assert denied.stderr.strip() == (
        f'Error from server (Forbidden): foohealths.{GROUP} is forbidden: User "bob" cannot list resource '
        f'"foohealths" in API group "{GROUP}" in the namespace "{namespace}"'
    )
    # `view` gains foohealths through the aggregate-to-view ClusterRole.
    available.kubectl("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", namespace)
    wait_for(
        "bob to be allowed (the view role aggregates foohealths)",
        lambda: available.kubectl("get", "foohealths", "-n", namespace, "--as=bob", check=False).returncode == 0,
        timeout=60,
    )
    out = available.kubectl("get", "foohealths", "-n", namespace, "--as=bob").stdout
    assert "guarded" in out

    # --validate=false: kubectl's client-side validation of a create-only kind wants to list CRDs,
    # which bob may not (kubernetes/kubernetes#116245); the server answers the same either way.
    def review_as_bob(*flags: str) -> subprocess.CompletedProcess[str]:
        foo = {"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "metadata": {"name": "x"}, "spec": {}}
        argv = ("create", "-n", namespace, "-f", "-", "--as=bob", "--validate=false", *flags)
        return available.kubectl(*argv, check=False, input=_review(foo))

    review = review_as_bob()
    assert review.stderr.strip() == (  # view does not include fooreviews; edit does
        f'Error from server (Forbidden): error when creating "STDIN": fooreviews.{GROUP} is forbidden: '
        f'User "bob" cannot create resource "fooreviews" in API group "{GROUP}" in the namespace "{namespace}"'
    )
    available.kubectl("create", "rolebinding", "bob-edit", "--clusterrole=edit", "--user=bob", "-n", namespace)

    def reviewed() -> bool:
        result = review_as_bob("-o", "json")
        return result.returncode == 0 and json.loads(result.stdout)["status"]["allowed"] is False

    wait_for("bob to be allowed to create fooreviews through edit", reviewed, timeout=60)


def test_our_own_subject_access_review_guards_requests_that_skip_the_apiserver(
    available: Insights, namespace: str
) -> None:
    """kube-apiserver authorizes before it proxies; we ask again, for anyone holding the front-proxy certificate."""
    pki = available.plane.pki
    assert pki is not None
    context = ssl.create_default_context(cadata=available.ca_pem.decode())
    context.check_hostname = False  # dialled by address, as the aggregator does with aggregator routing
    context.load_cert_chain(pki.cert_file("front-proxy-client"), pki.key_file("front-proxy-client"))

    def call(user: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"https://{available.netns.ns_ip}:{PORT}/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foohealths",
            headers={"X-Remote-User": user, "X-Remote-Group": "system:authenticated"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, body = call("carol")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'foohealths.{GROUP} is forbidden: User "carol" cannot list resource "foohealths" '
        f'in API group "{GROUP}" in the namespace "{namespace}"'
    )
    available.kubectl("create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol", "-n", namespace)
    wait_for(
        "carol's SubjectAccessReview to allow (after the 10 s denial cache)",
        lambda: call("carol")[0] == 200,
        timeout=60,
    )
    assert call("carol")[1]["kind"] == "FooHealthList"


# ---- hostile selectors ----------------------------------------------------------------------------------------

HOSTILE_SELECTORS = {
    # The worst inputs for the regex parser this server had: 11-18 s of CPU each (cubic backtracking).
    "a + 2,000 tabs + b": "a" + "\t" * 2000 + "b",
    "k in ( + 2,000 blanks + x": "k in (" + " " * 2000 + "x",
    # Longer than insights' 4,096-character cap, short enough for the request line to reach it.
    "a + 6,000 blanks": "a" + " " * 6000,
    "1 MiB": "a" * (1 << 20),
}


def _list_through_the_apiserver(plane: LocalControlPlane, namespace: str, selector: str) -> tuple[int, str, float]:
    """A list with this label selector, sent by an admin through kube-apiserver; (code, body, seconds)."""
    assert plane.pki is not None
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(plane.pki.cert_file("admin"), plane.pki.key_file("admin"))
    url = f"{plane.server}/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foohealths?labelSelector={quote_plus(selector)}"
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, context=context, timeout=30) as response:
            return response.status, response.read().decode(), time.monotonic() - began
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), time.monotonic() - began


def test_hostile_selectors_are_refused_at_once_while_foo_writes_keep_succeeding(
    available: Insights, namespace: str
) -> None:
    answers: dict[str, tuple[int, str, float]] = {}

    def hostile() -> None:
        for _ in range(3):
            for name, selector in HOSTILE_SELECTORS.items():
                answers[name] = _list_through_the_apiserver(available.plane, namespace, selector)

    attacker = threading.Thread(target=hostile)
    attacker.start()
    writes, failures = 0, []
    deadline = time.monotonic() + 120
    while (attacker.is_alive() or writes < 10) and time.monotonic() < deadline:
        # Through the admission webhooks (dry-run still calls them), as every Foo write in the cluster.
        result = available.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", check=False, input=_foo(f"write-{writes}")
        )
        writes += 1
        if result.returncode != 0:
            failures.append(result.stderr.strip())
    attacker.join(timeout=60)
    print(
        f"{writes} Foo writes while hostile selectors were sent; answers: "
        + ", ".join(f"{name}: {code} in {seconds:.2f}s" for name, (code, _, seconds) in answers.items())
    )
    assert not attacker.is_alive() and failures == []
    for name in ("a + 2,000 tabs + b", "k in ( + 2,000 blanks + x", "a + 6,000 blanks"):
        code, body, _ = answers[name]
        status = json.loads(body)
        assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest"), name
    assert json.loads(answers["a + 2,000 tabs + b"][1])["message"] == (
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    )
    assert json.loads(answers["a + 6,000 blanks"][1])["message"] == (
        "labelSelector is 6001 characters long; at most 4096 are accepted"
    )
    # kube-apiserver forwards a 1 MiB query (its header limit is 1 MiB plus slack); insights' HTTP
    # parser refuses a request line over 8 KiB before any handler runs: a plain-text 400, not a Status.
    code, body, _ = answers["1 MiB"]
    assert code == 400 and "Got more than 8190 bytes" in body


def test_a_user_allowed_one_name_lists_only_that_one_whatever_the_field_selector(
    available: Insights, namespace: str
) -> None:
    """RBAC resourceNames on a list: kube-apiserver and insights must read `metadata.name` from the
    same parse, or a selector one reads differently from the other lists objects the user may not see."""
    for name in ("allowed", "secret"):
        available.kubectl("apply", "-n", namespace, "-f", "-", input=_foo(name))
    wait_for(
        "both foohealths",
        lambda: bool(_health(available, namespace, "allowed")) and bool(_health(available, namespace, "secret")),
    )
    available.kubectl(
        "create",
        "role",
        "one-health",
        "-n",
        namespace,
        "--verb=list",
        f"--resource=foohealths.{GROUP}",
        "--resource-name=allowed",
    )
    available.kubectl("create", "rolebinding", "dana-one-health", "-n", namespace, "--role=one-health", "--user=dana")

    def listed(field_selector: str) -> tuple[int, list[str], str]:
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foohealths?fieldSelector={quote_plus(field_selector)}"
        result = available.kubectl("get", "--raw", path, "--as=dana", check=False)
        if result.returncode != 0:
            return result.returncode, [], result.stderr.strip()
        return 0, [i["metadata"]["name"] for i in json.loads(result.stdout)["items"]], ""

    wait_for(
        "dana's list of the one name to be allowed (RBAC, then our 10 s denial cache)",
        lambda: listed("metadata.name=allowed")[0] == 0,
        timeout=60,
    )
    assert listed("metadata.name=allowed")[1] == ["allowed"]
    code, _, error = listed("")
    assert code != 0 and "Forbidden" in error
    # Both apiservers read this as two terms (no parentheses in field selectors): the name is pinned
    # and applied. The regex filter read it as one namespace term and listed "secret" too.
    assert listed("metadata.namespace!=(,metadata.name=allowed")[1] == ["allowed"]
    # Does not parse ("y)" has no operator): no name pinned, so the whole list is asked about, and refused.
    code, _, error = listed("metadata.namespace!=(x,metadata.name=allowed,y)")
    assert code != 0 and "Forbidden" in error
