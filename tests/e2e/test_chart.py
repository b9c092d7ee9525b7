"""The Helm chart on the real control plane: rendered objects the apiserver accepts, and a real
`helm install` / `upgrade` / `uninstall` with the webhook serving behind the chart's own Service.

There is no kubelet (kwok fakes the pods), so the test plays the webhook pod's and the insights
pod's part: it reads the Secret the chart generated, and runs `python -m webhook` and
`python -m insights` with their Deployments' own arguments, each in a network namespace that
holds the IP kwok gave its pod. The apiserver then reaches it exactly as
in a cluster: Service → EndpointSlice → pod IP, TLS checked against the chart's caBundle for
`<svc>.<ns>.svc`.

The control plane is shared with the other e2e modules, whose `foo_operator` fixture may already
have registered the Foo CRD: the chart takes it over (`--take-ownership`, as over
sample-controller's CRD) and the module puts it back as it found it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fooapi.crd import CRD_NAME, crd_manifest
from tests.e2e.uninstall import assert_only_the_kept_crd_is_left
from tests.e2e.waiting import wait_for
from hack.cluster import LocalControlPlane
from hack.netns import NetNamespace

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "e2e-foo-operator"  # contains the chart name, so it is also the fullname
NAMESPACE = "foo-chart-e2e"
FOOS_NAMESPACE = "foo-chart-e2e-foos"
SERVICE = f"{RELEASE}-webhook"
INSIGHTS = f"{RELEASE}-insights"
TLS_SECRET = f"{RELEASE}-webhook-tls"
APISERVICE = "v1alpha1.insights.samplecontroller.k8s.io"
# Not nginx:latest: a Foo defaulted to this image went through the chart's webhook, not another.
DEFAULT_IMAGE = "registry.example/chart-e2e/nginx:1.27"
# The host end of each veth pair; the pod end gets the pod's IP.
HOST_IPS = {"webhook": "10.213.7.1", "insights": "10.213.8.1", "upgraded-webhook": "10.213.9.1"}
HELM_OWNERSHIP = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")


def get_json(plane: LocalControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json").stdout)


def foo_yaml(name: str, *, replicas: int | None = 2, image: str | None = None) -> str:
    deployment = {"name": f"{name}-web", **({"image": image} if image else {})}
    spec: dict[str, Any] = {"deployment": deployment}
    if replicas is not None:
        spec["replicas"] = replicas
    return yaml.safe_dump({"apiVersion": "samplecontroller.k8s.io/v1", "kind": "Foo", "metadata": {"name": name},
                           "spec": spec})


def ca_bundles(plane: LocalControlPlane) -> dict[str, str]:
    """The caBundle of each of the four objects the apiserver reads one from."""
    crd = get_json(plane, "crd", CRD_NAME)
    mutating = get_json(plane, "mutatingwebhookconfiguration", RELEASE)
    validating = get_json(plane, "validatingwebhookconfiguration", RELEASE)
    apiservice = get_json(plane, "apiservice", APISERVICE)
    return {
        "crd": crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
        "mutating": mutating["webhooks"][0]["clientConfig"]["caBundle"],
        "validating": validating["webhooks"][0]["clientConfig"]["caBundle"],
        "apiservice": apiservice["spec"]["caBundle"],
    }


# ----------------------------------------------------------------------------- rendered objects
def render(*args: str, release: str = "dry-run") -> list[dict[str, Any]]:
    from hack.binaries import find_binaries

    out = subprocess.run([str(find_binaries().helm), "template", release, str(CHART), *args],
                         capture_output=True, text=True, timeout=60, check=True, env={**os.environ, "KUBECONFIG": ""})
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def server_dry_run(plane: LocalControlPlane, docs: list[dict[str, Any]]) -> str:
    """Create (or, for what exists, replace) every object with --dry-run=server; returns stderr.

    Not `apply`: the session's Foo CRD may carry a `url` clientConfig from another manager, and
    merging the chart's `service` into it would make an object neither would write.
    """
    listing = {"apiVersion": "v1", "kind": "List", "items": docs}
    existing = json.loads(plane.kubectl("get", "--ignore-not-found", "-o", "json", "-f", "-",
                                        input=json.dumps(listing)).stdout or '{"items": []}')
    present = {(o["kind"], o["metadata"]["name"]) for o in existing.get("items", [])}
    new = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in present]
    old = [d for d in docs if (d["kind"], d["metadata"]["name"]) in present]
    stderr = ""
    for verb, items in (("create", new), ("replace", old)):
        if items:
            result = plane.kubectl(verb, "--dry-run=server", "-f", "-",
                                   input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
            stderr += result.stderr
    return stderr


@pytest.fixture(scope="module")
def restricted_namespace(control_plane: LocalControlPlane) -> Iterator[str]:
    """A namespace enforcing the `restricted` Pod Security Standard: hardened pods or nothing."""
    name = f"foo-chart-dry-run-{os.getpid() % 10000}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted",
                          "pod-security.kubernetes.io/warn=restricted")
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("mode", [pytest.param("generated", marks=pytest.mark.smoke), "certManager", "existingSecret",
                                  "rotator"])
def test_rendered_chart_passes_server_side_dry_run_in_every_tls_mode(
        control_plane: LocalControlPlane, restricted_namespace: str, mode: str) -> None:
    args = ["--namespace", restricted_namespace, "--set", f"tls.mode={mode}"]
    if mode == "existingSecret":
        args += ["--set", "tls.existingSecret.name=my-tls", "--set-file",
                 f"tls.existingSecret.caBundle={control_plane.ca_file}"]
    docs = render(*args)
    # cert-manager's kinds need cert-manager's CRDs, which this plane does not have.
    checked = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
    if mode == "certManager":
        assert {d["kind"] for d in docs} - {d["kind"] for d in checked} == {"Issuer", "Certificate"}
    stderr = server_dry_run(control_plane, checked)
    assert "Warning" not in stderr, stderr  # e.g. "would violate PodSecurity restricted"


# ----------------------------------------------------------------------------- a real install
@dataclass
class Release:
    plane: LocalControlPlane
    pod_ip: str
    cert_dir: Path
    refusal: str  # what `helm install` said over the existing CRD without --take-ownership
    workdir: Path
    stack: contextlib.ExitStack  # the played pods' network namespaces, closed by the fixture
    webhook: subprocess.Popen[bytes] | None = None
    insights: subprocess.Popen[bytes] | None = None
    installed: bool = True
    notes: str = ""
    scraper_token: str = ""

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.plane.helm(*args, "--namespace", NAMESPACE, check=check)

    def metrics_token(self) -> str:
        """A scraper's token: a ServiceAccount bound to the chart's metrics-reader ClusterRole."""
        if not self.scraper_token:
            self.plane.kubectl("create", "serviceaccount", "scraper", "-n", NAMESPACE)
            self.plane.kubectl("create", "clusterrolebinding", f"{RELEASE}-test-scraper",
                               f"--clusterrole={RELEASE}-metrics-reader", f"--serviceaccount={NAMESPACE}:scraper")
            scraper = f"system:serviceaccount:{NAMESPACE}:scraper"
            wait_for("RBAC to let the scraper get /metrics", lambda: self.plane.kubectl(
                "auth", "can-i", "get", "/metrics", f"--as={scraper}", check=False).stdout.strip() == "yes")
            self.scraper_token = self.plane.kubectl("create", "token", "scraper", "-n", NAMESPACE).stdout.strip()
        return self.scraper_token

    def webhook_requests(self, path: str) -> float:
        """controller_runtime_webhook_requests_total for ``path``, read from the pod's secure /metrics port."""
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        context.check_hostname = False  # the certificate names the Service, not the pod IP
        request = urllib.request.Request(f"https://{self.pod_ip}:8080/metrics",
                                         headers={"Authorization": f"Bearer {self.metrics_token()}"})
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("controller_runtime_webhook_requests_total{") and f'webhook="{path}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total


def _pod_ip(plane: LocalControlPlane, component: str) -> str | None:
    pods = get_json(plane, "pods", "-n", NAMESPACE, "-l",
                    f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}")["items"]
    ready = [p for p in pods if p["status"].get("podIP") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    return ready[0]["status"]["podIP"] if len(pods) == 1 and ready else None


def _endpoint_ready(plane: LocalControlPlane, service: str, ip: str) -> bool:
    slices = get_json(plane, "endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={service}")
    return any(ip in e["addresses"] and e.get("conditions", {}).get("ready")
               for s in slices["items"] for e in s.get("endpoints") or [])


def _take_back_crd(plane: LocalControlPlane, before: dict[str, Any] | None) -> None:
    """Leave the CRD as the module found it: someone else's (conversion and schemas restored) or absent."""
    if before is None:
        plane.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false", check=False)
        return
    metadata = {"annotations": {k: None for k in (*HELM_OWNERSHIP, "helm.sh/resource-policy")},
                "labels": {k: None for k in get_json(plane, "crd", CRD_NAME)["metadata"].get("labels", {})
                           if k not in before["metadata"].get("labels", {})}}
    # The versions too: their schema defaults the image to the chart's defaultImage.
    patch = [{"op": "replace", "path": "/spec/conversion", "value": before["spec"]["conversion"]},
             {"op": "replace", "path": "/spec/versions", "value": before["spec"]["versions"]}]
    plane.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(patch), check=False)
    plane.kubectl("patch", "crd", CRD_NAME, "--type=merge", "-p", json.dumps({"metadata": metadata}), check=False)


def _kubeconfig_for_service_account(plane: LocalControlPlane, account: str, path: Path) -> Path:
    """A pod's identity: its ServiceAccount's token, so the chart's RBAC is what counts."""
    token = plane.kubectl("create", "token", account, "-n", NAMESPACE, "--duration=1h").stdout.strip()
    ca = base64.b64encode(plane.ca_file.read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "webhook",
        "clusters": [{"name": "local", "cluster": {"server": plane.server, "certificate-authority-data": ca}}],
        "users": [{"name": "webhook", "user": {"token": token}}],
        "contexts": [{"name": "webhook", "context": {"cluster": "local", "user": "webhook"}}],
    }))
    return path


def _play_the_pod(release: Release, component: str, netns: NetNamespace, pod_ip: str,
                  workdir: Path) -> subprocess.Popen[bytes]:
    """`python -m <component>` with the live Deployment's arguments, its Secret as files, in the pod's netns."""
    plane = release.plane
    secret = get_json(plane, "secret", TLS_SECRET, "-n", NAMESPACE)
    release.cert_dir.mkdir(parents=True, exist_ok=True)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (release.cert_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
    name = f"{RELEASE}-{component}"
    deployment = get_json(plane, "deployment", name, "-n", NAMESPACE)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The pod's paths, moved into this test's directory.
    moved = {"--cert-dir": release.cert_dir, "--requestheader-ca-file": workdir / "requestheader-ca.crt"}
    args = [f"{a.split('=', 1)[0]}={moved[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in moved else a
            for a in container["args"]]
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE}
    if pod.get("automountServiceAccountToken"):
        # In a pod this would be the in-cluster config; here the same identity through a kubeconfig.
        netns.forward_host_port(plane.apiserver_port)
        kubeconfig = _kubeconfig_for_service_account(plane, pod["serviceAccountName"], workdir / f"{component}.kubeconfig")
        args.append(f"--kubeconfig={kubeconfig}")
        env["KUBECONFIG"] = str(kubeconfig)
    log = open(plane.logs_dir / f"chart-{component}.log", "ab")  # noqa: SIM115 - the process owns it
    process = netns.popen([sys.executable, "-m", component, *args],
                          stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
    context = ssl.create_default_context(cafile=str(release.cert_dir / "ca.crt"))
    context.check_hostname = False
    port = container["ports"][0]["containerPort"]

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{component} exited {process.returncode}; see {plane.logs_dir}/chart-{component}.log")
        try:
            with urllib.request.urlopen(f"https://{pod_ip}:{port}/readyz", context=context, timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    wait_for(f"{component}'s /readyz at the pod IP", ready, timeout=30)
    return process


def _stand_in_for_sample_controllers_crd(plane: LocalControlPlane) -> dict[str, Any] | None:
    """Make the Foo CRD look like sample-controller's (not Helm's, no conversion webhook); return what was there.

    Helm's take-ownership patch only adds and changes fields: over a CRD that converts through a
    `url` (the other modules' registration) it would leave `url` next to the chart's `service`,
    which the apiserver refuses. sample-controller's CRD has no conversion webhook at all.
    """
    found = plane.kubectl("get", "crd", CRD_NAME, "-o", "json", "--ignore-not-found").stdout
    if not found.strip():
        plane.kubectl("create", "-f", "-", input=json.dumps(crd_manifest()))
        return None
    before: dict[str, Any] = json.loads(found)
    patch = [{"op": "replace", "path": "/spec/conversion", "value": {"strategy": "None"}}]
    plane.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(patch))
    return before


@pytest.fixture(scope="module")
def release(control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    plane = control_plane
    workdir = tmp_path_factory.mktemp("chart")
    crd_before = _stand_in_for_sample_controllers_crd(plane)
    stack = contextlib.ExitStack()
    release = Release(plane, pod_ip="", cert_dir=workdir / "certs", refusal="", workdir=workdir, stack=stack)
    install = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
               "--set", "webhook.replicas=1", "--set", "insights.replicas=1", "--set", f"defaultImage={DEFAULT_IMAGE}"]
    try:
        refused = plane.helm(*install, check=False)
        assert refused.returncode != 0, "helm installed over a CRD it does not own without --take-ownership"
        release.refusal = refused.stderr
        began = time.monotonic()
        release.notes = plane.helm(*install, "--take-ownership").stdout
        print(f"helm install took {time.monotonic() - began:.1f}s")
        plane.kubectl("create", "namespace", FOOS_NAMESPACE)
        for component, service in (("webhook", SERVICE), ("insights", INSIGHTS)):
            pod_ip = wait_for(f"the {component} pod's IP (kwok)", lambda: _pod_ip(plane, component))
            wait_for(f"{pod_ip} ready in {service}'s EndpointSlice", lambda: _endpoint_ready(plane, service, pod_ip))
            netns = stack.enter_context(NetNamespace(f"foo{component[:3]}{os.getpid() % 100000}", ns_ip=pod_ip,
                                                     host_ip=HOST_IPS[component]))
            process = _play_the_pod(release, component, netns, pod_ip, workdir)
            if component == "webhook":
                release.pod_ip, release.webhook = pod_ip, process
            else:
                release.insights = process
        yield release
    finally:
        stack.close()
        # Also after a failed install: its webhook configurations would fail every Foo write.
        if release.installed:
            release.helm("uninstall", RELEASE, "--wait", "--timeout=60s", check=False)
        plane.kubectl("delete", "namespace", NAMESPACE, FOOS_NAMESPACE, "--wait=false", "--ignore-not-found",
                      check=False)
        plane.kubectl("delete", "clusterrolebinding", f"{RELEASE}-test-scraper", "--ignore-not-found", check=False)
        _take_back_crd(plane, crd_before)


@pytest.mark.smoke
def test_install_over_a_crd_helm_does_not_own_needs_take_ownership(release: Release) -> None:
    assert "exists and cannot be imported into the current release" in release.refusal
    assert "invalid ownership metadata" in release.refusal
    annotations = get_json(release.plane, "crd", CRD_NAME)["metadata"]["annotations"]
    assert (annotations["meta.helm.sh/release-name"], annotations["meta.helm.sh/release-namespace"]) == (
        RELEASE, NAMESPACE)
    assert annotations["helm.sh/resource-policy"] == "keep"


def test_install_prints_notes_that_say_what_to_try(release: Release) -> None:
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{SERVICE}" in release.notes
    assert f"helm test {RELEASE} -n {NAMESPACE}" in release.notes


@pytest.mark.smoke
def test_every_ca_bundle_holds_the_ca_of_the_generated_secret(release: Release) -> None:
    ca = get_json(release.plane, "secret", TLS_SECRET, "-n", NAMESPACE)["data"]["ca.crt"]
    assert set(ca_bundles(release.plane).values()) == {ca}


@pytest.mark.smoke
def test_an_invalid_foo_is_rejected_by_the_charts_webhook(release: Release) -> None:
    # The mutating webhook refuses it (it runs before the CRD schema would), so no validate call.
    before = release.webhook_requests("/mutate-foo")
    result = release.plane.kubectl("apply", "-n", FOOS_NAMESPACE, "-f", "-", check=False,
                                   input=foo_yaml("too-many", replicas=11))
    assert result.returncode != 0
    assert result.stderr.strip() == (
        'The Foo "too-many" is invalid: spec.replicas: Invalid value: 11: must be less than or equal to 10')
    assert release.webhook_requests("/mutate-foo") > before, "the apiserver did not call the chart's Service"


@pytest.mark.smoke
def test_a_valid_foo_comes_back_defaulted_with_the_charts_default_image(release: Release) -> None:
    release.plane.kubectl("apply", "-n", FOOS_NAMESPACE, "-f", "-", input=foo_yaml("plain", replicas=None))
    foo = get_json(release.plane, "foos.v1.samplecontroller.k8s.io", "plain", "-n", FOOS_NAMESPACE)
    assert foo["spec"] == {"deployment": {"name": "plain-web", "image": DEFAULT_IMAGE}, "replicas": 1}


@pytest.mark.smoke
def test_conversion_goes_through_the_crds_service_reference(release: Release) -> None:
    crd = get_json(release.plane, "crd", CRD_NAME)
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "namespace": NAMESPACE, "name": SERVICE, "path": "/convert", "port": 443}
    release.plane.kubectl("apply", "-n", FOOS_NAMESPACE, "-f", "-", input=foo_yaml("old-style", replicas=3))
    before = release.webhook_requests("/convert")
    foo = get_json(release.plane, "foos.v1alpha1.samplecontroller.k8s.io", "old-style", "-n", FOOS_NAMESPACE)
    assert foo["apiVersion"] == "samplecontroller.k8s.io/v1alpha1"
    assert foo["spec"] == {"deploymentName": "old-style-web", "replicas": 3}
    assert release.webhook_requests("/convert") > before


@pytest.mark.smoke
def test_the_aggregated_api_becomes_available_and_serves_foohealths(release: Release) -> None:
    def available() -> bool:
        conditions = get_json(release.plane, "apiservice", APISERVICE)["status"].get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    wait_for(f"APIService {APISERVICE} Available", available, timeout=60)
    out = release.plane.kubectl("get", "--raw", "/apis/insights.samplecontroller.k8s.io/v1alpha1").stdout
    assert {r["name"] for r in json.loads(out)["resources"]} >= {"foohealths", "fooreviews"}
    # Served with the chart's RBAC only: SubjectAccessReviews (auth-delegator) and the caches.
    names = release.plane.kubectl("get", "foohealths", "-n", FOOS_NAMESPACE, "-o", "name").stdout.split()
    assert {n.rsplit("/", 1)[1] for n in names} >= {"plain", "old-style"}


@pytest.mark.smoke
def test_helm_upgrade_keeps_the_ca_and_certificate(release: Release) -> None:
    plane = release.plane
    secret_before = get_json(plane, "secret", TLS_SECRET, "-n", NAMESPACE)["data"]
    bundles_before = ca_bundles(plane)
    release.helm("upgrade", RELEASE, str(CHART), "--reuse-values", "--set", "webhook.logLevel=debug")
    args = get_json(plane, "deployment", SERVICE, "-n", NAMESPACE)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args, "the upgrade did not apply"
    assert get_json(plane, "secret", TLS_SECRET, "-n", NAMESPACE)["data"] == secret_before
    assert ca_bundles(plane) == bundles_before
    # The new pod template rolls out a new pod at a new IP (kwok makes it Ready at once, and how
    # soon the Service's endpoints move to it differs between Kubernetes versions): play it too,
    # from the same Secret. Whichever pod the apiserver dials, it trusts the certificate.
    old_ip = release.pod_ip
    new_ip = wait_for("the upgraded webhook pod alone in the rollout",
                      lambda: (ip := _pod_ip(plane, "webhook")) != old_ip and ip)
    wait_for(f"{new_ip} ready in {SERVICE}'s EndpointSlice", lambda: _endpoint_ready(plane, SERVICE, new_ip))
    netns = release.stack.enter_context(NetNamespace(f"foowup{os.getpid() % 100000}", ns_ip=new_ip,
                                                     host_ip=HOST_IPS["upgraded-webhook"]))
    release.webhook, release.pod_ip = _play_the_pod(release, "webhook", netns, new_ip, release.workdir), new_ip
    plane.kubectl("apply", "-n", FOOS_NAMESPACE, "-f", "-", input=foo_yaml("after-upgrade"))


def test_in_rotator_mode_helm_upgrade_keeps_what_the_service_wrote(release: Release) -> None:
    """The chart's empty Secret and absent caBundles leave the rotator's writes alone on upgrade."""
    plane, name, namespace = release.plane, "rot-foo-operator", f"{NAMESPACE}-rotator"
    # A second release beside the first: no CRD or APIService of its own, and admission that
    # cannot get in anyone's way while nothing serves it.
    values = ["--set", "tls.mode=rotator", "--set", "crd.install=false", "--set", "insights.enabled=false",
              "--set", "controller.enabled=false", "--set", "webhook.failurePolicy=Ignore",
              "--set", "webhook.timeoutSeconds=1", "--set", "tests.enabled=false"]
    plane.helm("install", name, str(CHART), "--namespace", namespace, "--create-namespace", *values)
    try:
        secret = f"{name}-webhook-tls"
        assert "data" not in get_json(plane, "secret", secret, "-n", namespace)
        # What the rotator does: fill the Secret, put its CA into the caBundles.
        written = {k: base64.b64encode(f"rotated {k}".encode()).decode() for k in ("ca.crt", "tls.crt", "tls.key")}
        plane.kubectl("patch", "secret", secret, "-n", namespace, "--type=merge", "-p", json.dumps({"data": written}))
        bundle = base64.b64encode(release.plane.ca_file.read_bytes()).decode()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            plane.kubectl("patch", kind, name, "--type=json", "-p", json.dumps(
                [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]))
        plane.helm("upgrade", name, str(CHART), "--namespace", namespace, "--reuse-values",
                   "--set", "webhook.logLevel=debug")
        assert get_json(plane, "secret", secret, "-n", namespace)["data"] == written
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            assert get_json(plane, kind, name)["webhooks"][0]["clientConfig"]["caBundle"] == bundle, kind
    finally:
        plane.helm("uninstall", name, "--namespace", namespace, "--wait", "--timeout=60s", check=False)
        plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


@pytest.mark.smoke
def test_helm_uninstall_removes_everything_but_the_kept_crd_and_its_foos(release: Release) -> None:
    plane = release.plane
    said = release.helm("uninstall", RELEASE, "--wait", "--timeout=60s").stdout
    release.installed = False
    assert f"These resources were kept due to the resource policy:\n[CustomResourceDefinition] {CRD_NAME}" in said
    assert_only_the_kept_crd_is_left(plane, RELEASE, NAMESPACE)
    # Foos are stored at v1, so reading them needs no (now absent) conversion webhook.
    names = plane.kubectl("get", "foos.v1.samplecontroller.k8s.io", "-n", FOOS_NAMESPACE, "-o", "name").stdout.split()
    assert sorted(names) == sorted(f"foo.samplecontroller.k8s.io/{n}" for n in ("after-upgrade", "old-style", "plain"))

