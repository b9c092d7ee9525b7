"""A release as users get it: built by `hack/release/pipeline.py`, pushed to a registry, verified, installed,
upgraded, rolled back and installed again from there, on the real node — the docs' commands as
written (tests/docs.py), where they say to run them.

The registry is CNCF distribution (Debian's docker-registry) on loopback with TLS from a CA of its
own (hack/plane/registry.py), standing in for ghcr.io: the releases are pushed to it exactly as the
release workflow pushes them (`hack.release.pipeline.push`: image and chart signed, the SBOM attached as an
attestation), under `<registry>/foo-operator`, and the GitHub release's files are served on
loopback too (tests/e2e/downloads.py). `where_users_get_it` is the one change made to the docs'
text: those two addresses. The node's containerd pulls the image itself (nothing is loaded
beforehand), from the registry by its own name and, for the chart's default `ghcr.io/...`
image, through a mirror entry that sends ghcr.io there; every other registry still leads nowhere.
Signatures are made with a cosign key pair made for this module and no transparency log (nothing
leaves the machine), so the docs' `--insecure-ignore-tlog` commands are the ones run here.

0.1.0 is built from its commit (hack.release.pipeline.PAST_RELEASES) with today's tools; the upgrade to
this checkout's version (docs/install.md's `helm upgrade --reset-then-reuse-values`, as written)
and the rollback run under load through kube-apiserver: Foo writes at both versions, v1alpha1
reads (the conversion webhook) and FooHealth reads (the aggregated API).

One journey (`story`): each step stands on the one before, in file order.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.plane.binaries import BUILD_SCRIPT, cache_dir, find_binaries, policy_tester, versions
from hack.plane.node import RealNode, chart_values, plane_with_real_node
from hack.plane.registry import LocalRegistry
from hack.release.pipeline import CHECKSUMS, NAME, PAST_RELEASES, build, cosign, project_version, push, sha256
from tests.docs import REPO_ROOT, DocSession, path_with
from tests.e2e.downloads import Downloads
from tests.e2e.load import Call, dry_run_foo_create, steady_requests
from tests.e2e.waiting import wait_for, wait_for_more

pytestmark = pytest.mark.story

PREVIOUS, CURRENT = "0.1.0", project_version()
ORG = "foo-operator"  # the path under the registry host, as in ghcr.io/foo-operator
RELEASE = "foo-operator"
NAMESPACE = "foo-system"
FOOS = "release-foos"
COMPONENTS = ("webhook", "insights", "controller")
GROUP = "samplecontroller.k8s.io"
NO_EGRESS = {"HTTPS_PROXY": "http://127.0.0.1:1", "HTTP_PROXY": "http://127.0.0.1:1", "NO_PROXY": ""}
# The published names, as the docs and the chart's defaults spell them.
PUBLISHED_IMAGE = f"ghcr.io/{ORG}/{NAME}"
# sigstore policy-controller's policies for the image, as users apply them (docs/install.md).
POLICY = "docs/policies/sigstore-policy-controller.yaml"


@dataclass
class Releases:
    """Both releases built, and the key pair they are signed with."""

    key: Path
    public_key: Path
    dists: dict[str, Path]
    digests: dict[str, str]

    def assets(self, version: str) -> Path:
        return self.dists[version] / "assets"


@pytest.fixture(scope="module")
def releases(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Releases:
    subprocess.run(["bash", str(BUILD_SCRIPT), "cosign", "krew"], check=True, capture_output=True, timeout=3600)
    workdir = tmp_path_factory.mktemp("releases")
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    subprocess.run(
        [cosign(), "generate-key-pair", "--output-key-prefix", workdir / "cosign"],
        check=True,
        capture_output=True,
        env=env,
        cwd=workdir,
    )
    dists, digests = {}, {}
    for version, commit in ((PREVIOUS, PAST_RELEASES[PREVIOUS]), (CURRENT, None)):
        began = time.monotonic()
        # allow_dirty: a developer's checkout; CI's is clean.
        made = build(
            workdir / version,
            key=workdir / "cosign.key",
            commit=commit,
            allow_dirty=True,
            tlog=False,
            plugin_platforms=(("linux", "amd64"),),  # the one that runs here; the workflow builds all four
        )
        print(f"release {version} built in {time.monotonic() - began:.1f}s, image {made.image_digest}")
        dists[version], digests[version] = made.dist, made.image_digest
    return Releases(workdir / "cosign.key", workdir / "cosign.pub", dists, digests)


@dataclass
class Installation:
    plane: Any
    node: RealNode
    registry: LocalRegistry
    releases: Releases
    values: Path
    workdir: Path
    downloads: Downloads

    def where_users_get_it(self) -> dict[str, str]:
        """The one change to the docs' text: ghcr.io is the registry on loopback, GitHub the file server."""
        return {
            "https://raw.githubusercontent.com/foo-operator/foo-operator/main/": f"{self.downloads.url}/raw/",
            "https://github.com/foo-operator/foo-operator/releases/": f"{self.downloads.url}/releases/",
            f"ghcr.io/{ORG}/": f"{self.registry.host}/{ORG}/",
        }

    def user(self, name: str, version: str = CURRENT) -> DocSession:
        """A user's shell in a directory of its own: the plane's kubectl, helm and cosign on PATH, the
        registry's CA trusted (Go's SSL_CERT_FILE, curl's CURL_CA_BUNDLE), nothing reached beyond loopback."""
        cwd = self.workdir / "users" / name
        cwd.mkdir(parents=True)
        # krew as its installer leaves it: `kubectl-krew` on PATH, and the plugins it links in ~/.krew/bin.
        plugins = cwd / "tools"
        plugins.mkdir()
        (plugins / "kubectl-krew").symlink_to(cache_dir() / "bin" / f"krew-{versions()['KREW_VERSION']}" / "krew")
        tools = [cwd / ".krew" / "bin", plugins, find_binaries().helm.parent, find_binaries().kubectl.parent]
        env = {
            **self.plane.env(),
            **NO_EGRESS,
            # Straight to loopback (curl proxies it unless told; Go never does) and to the plane on its
            # bridge; anything else meets the proxy that leads nowhere.
            "NO_PROXY": f"127.0.0.1,localhost,{urllib.parse.urlparse(self.plane.server).hostname}",
            "PATH": path_with(*tools, cosign().parent),
            "KREW_NO_UPGRADE_CHECK": "1",
            "HOME": str(cwd),
            "SSL_CERT_FILE": str(self.registry.ca_file),
            "CURL_CA_BUNDLE": str(self.registry.ca_file),
        }
        substitutions = self.where_users_get_it()
        if version != CURRENT:
            substitutions[f"VERSION={CURRENT}"] = f"VERSION={version}"
        return DocSession("tests/e2e/test_release.py", cwd, env, substitutions)

    @property
    def image(self) -> str:
        return f"{self.registry.host}/{ORG}/{NAME}"

    @property
    def chart(self) -> str:
        return f"oci://{self.registry.host}/{ORG}/charts/{NAME}"

    def cosign(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        # The registry's CA (against ghcr.io users need none of this), and nothing leaves the
        # machine: any lookup beyond loopback (a transparency log, a TUF root) would fail at once.
        env = {**os.environ, "SSL_CERT_FILE": str(self.registry.ca_file), **NO_EGRESS}
        return subprocess.run([cosign(), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)

    # docs/install.md, "Verify": the same commands with the registry's CA.
    def verify_image(self, version: str) -> subprocess.CompletedProcess[str]:
        return self.cosign(
            "verify", "--key", self.releases.public_key, "--insecure-ignore-tlog", f"{self.image}:{version}"
        )

    def pull_chart(self, version: str) -> Path:
        into = self.workdir / f"pulled-{time.monotonic_ns()}"
        into.mkdir()
        ca = str(self.registry.ca_file)
        self.plane.helm("pull", self.chart, "--version", version, "--ca-file", ca, "--destination", str(into))
        return into / f"{NAME}-{version}.tgz"

    def verify_chart(self, version: str) -> subprocess.CompletedProcess[str]:
        return self.cosign(
            "verify", "--key", self.releases.public_key, "--insecure-ignore-tlog", f"{self.chart_ref}:{version}"
        )

    @property
    def chart_ref(self) -> str:
        return self.chart.removeprefix("oci://")

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}")[
            "items"
        ]
        return [p for p in items if "job-name" not in p["metadata"].get("labels", {})]

    def running(self, version: str) -> bool:
        """Every component has exactly one pod, Ready, running `version`'s image; no other pod."""
        pods = self.pods()
        want = f"{self.image}:{version}"
        return sorted(p["metadata"]["labels"].get("app.kubernetes.io/component", "") for p in pods) == sorted(
            COMPONENTS
        ) and all(
            p["spec"]["containers"][0]["image"] == want
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            for p in pods
        )


def policy_as_served(policy: str, public_key: str, registry: str) -> str:
    """docs/policies' file as this module's users fetch it: its key is the one the releases here
    are signed with (this module's, not cosign.pub), its globs name the registry here (as a mirror's
    users rewrite them, the docs say)."""
    committed = (REPO_ROOT / "cosign.pub").read_text()
    old, new = ("".join(f"          {line}\n" for line in key.splitlines()) for key in (committed, public_key))
    assert policy.count(old) == 2, f"{POLICY}: each of its two policies holds cosign.pub as its key"
    return policy.replace(old, new).replace(f"ghcr.io/{ORG}/", f"{registry}/{ORG}/")


@pytest.fixture(scope="module")
def installation(releases: Releases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    workdir = tmp_path_factory.mktemp("release-install")
    served_policy = workdir / "policy.yaml"
    with (
        LocalRegistry(workdir / "registry") as registry,
        Downloads(
            {version: releases.assets(version) for version in releases.dists},
            raw={"cosign.pub": releases.public_key, POLICY: served_policy},
            cert=registry.workdir / "tls.crt",
            key=registry.workdir / "tls.key",
        ) as downloads,
        plane_with_real_node(workdir / "plane", None) as (plane, node),
    ):
        served_policy.write_text(
            policy_as_served((REPO_ROOT / POLICY).read_text(), releases.public_key.read_text(), registry.host)
        )
        node.trust_registry(registry.host, registry.ca_file)
        node.mirror_registry("ghcr.io", registry.host, registry.ca_file)
        with pytest.MonkeyPatch.context() as env:  # skopeo, cosign and helm talk to the registry alone
            for name, value in NO_EGRESS.items():
                env.setenv(name, value)
            for version in (PREVIOUS, CURRENT):
                registry_path = f"{registry.host}/{ORG}"
                push(releases.dists[version], registry_path, key=releases.key, ca_file=registry.ca_file, tlog=False)
        values = chart_values(node, f"{registry.host}/{ORG}/{NAME}:unused")
        values.pop("migrateStorage")  # 0.1.0's chart has no such value (and its schema refuses it)
        # The chart's own tag (its appVersion) and pull policy: only the registry host differs from ghcr.io.
        values["image"] = {"repository": f"{registry.host}/{ORG}/{NAME}"}
        (workdir / "values.yaml").write_text(yaml.safe_dump(values))
        try:
            yield Installation(plane, node, registry, releases, workdir / "values.yaml", workdir, downloads)
        finally:
            plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)


def load(namespace: str) -> list[Call]:
    """Foo writes at both versions (dry runs: all of admission, nothing stored), v1alpha1 reads
    (every stored Foo through the conversion webhook) and FooHealth reads (the aggregated API)."""

    def v1alpha1_foo(n: int) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "Foo",
            "metadata": {"name": f"load-old-{n}"},
            "spec": {"deploymentName": f"load-old-{n}", "replicas": 1},
        }

    return [
        dry_run_foo_create(namespace),
        Call(
            "write-v1alpha1",
            "POST",
            f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foos?dryRun=All",
            201,
            v1alpha1_foo,
        ),
        Call("read-v1alpha1", "GET", f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/foos", 200),
        Call("foohealths", "GET", f"/apis/insights.{GROUP}/v1alpha1/namespaces/{namespace}/foohealths", 200),
    ]


FOOS_AT_EACH_VERSION = {
    "made-at-v1": {"apiVersion": f"{GROUP}/v1", "spec": {"deployment": {"name": "made-at-v1"}, "replicas": 2}},
    "made-at-v1alpha1": {
        "apiVersion": f"{GROUP}/v1alpha1",
        "spec": {"deploymentName": "made-at-v1alpha1", "replicas": 3},
    },
}


def assert_every_foo_readable_and_stored_at_v1(installation: Installation) -> None:
    for version in ("v1", "v1alpha1"):
        listed = installation.get(f"foos.{version}.{GROUP}", "-n", FOOS)["items"]
        assert sorted(f["metadata"]["name"] for f in listed) == sorted(FOOS_AT_EACH_VERSION), version
        for foo in listed:
            assert foo["apiVersion"] == f"{GROUP}/{version}"
    replicas = {
        f["metadata"]["name"]: f["spec"]["replicas"]
        for f in installation.get("foos.v1alpha1." + GROUP, "-n", FOOS)["items"]
    }
    assert replicas == {"made-at-v1": 2, "made-at-v1alpha1": 3}
    crd = installation.get("crd", f"foos.{GROUP}")
    assert crd["status"]["storedVersions"] == ["v1"]


def change_under_load(installation: Installation, version: str, what: str, change: Callable[[], object]) -> None:
    """`change` (a helm upgrade or rollback to `version`, waiting for it) under steady requests."""
    plane = installation.plane
    with steady_requests(plane, load(FOOS)) as (answered, failures):
        wait_for_more("answers before the change", lambda: sum(answered.values()), 20)
        began = time.monotonic()
        change()
        print(f"{what} to {version}: {time.monotonic() - began:.1f}s")
        wait_for(f"every pod to run {version} alone", lambda: installation.running(version), timeout=180)
        wait_for_more("answers after the change", lambda: sum(answered.values()), 20)
    print(f"answers during the change to {version}: {dict(answered)}")
    assert failures == [], f"{len(failures)} requests failed ({sum(answered.values())} did not): {failures[:5]}"
    assert all(answered[what] >= 5 for what in ("write", "write-v1alpha1", "read-v1alpha1", "foohealths")), answered


# ----------------------------------------------------------------------------- verify
def verified_digests(printed: str) -> list[str]:
    """The `docker-manifest-digest` of each claim `cosign verify` printed (one JSON array a line)."""
    return [
        claim["critical"]["image"]["docker-manifest-digest"]
        for line in printed.splitlines()
        if line.startswith("[{")
        for claim in json.loads(line)
    ]


@pytest.mark.parametrize("version", [PREVIOUS, CURRENT])
def test_each_release_verifies_as_docs_install_md_says(installation: Installation, version: str) -> None:
    user = installation.user(f"verify-{version}", version)
    printed = user.run("docs/install.md", "verify")
    # The image's claim and the chart's: the image is the one release.json names.
    image, chart = verified_digests(printed)
    assert image == installation.releases.digests[version]
    assert chart != image
    # The SBOM attestation carries the release's SBOM, signed.
    (statement,) = [json.loads(line) for line in (user.cwd / "sbom.intoto.jsonl").read_text().splitlines()]
    payload = json.loads(base64.b64decode(statement["payload"]))
    assert payload["predicateType"] == "https://cyclonedx.org/bom"
    assert payload["subject"][0]["digest"]["sha256"] == image.removeprefix("sha256:")
    sbom = json.loads((installation.releases.assets(version) / f"{NAME}-{version}.cdx.json").read_text())
    assert payload["predicate"] == sbom
    # The pulled chart is the release's file, byte for byte.
    pulled = user.cwd / f"{NAME}-{version}.tgz"
    assert pulled.read_bytes() == (installation.releases.assets(version) / pulled.name).read_bytes()


def test_every_file_of_the_release_is_in_its_signed_checksums(installation: Installation) -> None:
    user = installation.user("all-files")
    assets = installation.releases.assets(CURRENT)
    names = json.loads((assets / "release.json").read_text())["assets"]
    for name in names:
        url = f"{installation.downloads.url}/releases/download/v{CURRENT}/{name}"
        subprocess.run(["curl", "-sSfLO", url], cwd=user.cwd, env=user.env, check=True, timeout=60)
    for name in (CHECKSUMS, f"{CHECKSUMS}.cosign.bundle"):
        shutil.copyfile(assets / name, user.cwd / name)
    checked = subprocess.run(["sha256sum", "--check", CHECKSUMS], cwd=user.cwd, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert sorted(line.split(": ")[0] for line in checked.stdout.splitlines()) == sorted(names)


def test_the_chart_runs_the_release_image_tagged_with_its_app_version_by_default(installation: Installation) -> None:
    chart = installation.pull_chart(CURRENT)
    with tarfile.open(chart) as tar:
        values = yaml.safe_load(tar.extractfile(f"{NAME}/values.yaml").read())  # type: ignore[union-attr]
        meta = yaml.safe_load(tar.extractfile(f"{NAME}/Chart.yaml").read())  # type: ignore[union-attr]
    assert values["image"]["repository"] == f"ghcr.io/{ORG}/{NAME}"
    assert (values["image"]["tag"], values["image"]["pullPolicy"]) == ("", "IfNotPresent")
    assert (meta["version"], meta["appVersion"]) == (CURRENT, CURRENT)


# ----------------------------------------------------------------------------- admission policy
@pytest.fixture(scope="module")
def tester() -> Path:
    """sigstore policy-controller's tester: its admission webhook's own evaluation, run on one image.
    Seconds once cached; else built now, at the lowest priority (`make test` builds it in the
    background while the tiers before this one run)."""
    subprocess.run(["bash", str(BUILD_SCRIPT), "policy-tester"], check=True, capture_output=True, timeout=3600)
    return policy_tester()


def test_policy_controller_admits_the_release_image_as_docs_install_md_says(
    installation: Installation, tester: Path
) -> None:
    user = installation.user("policy")
    user.env["PATH"] = os.pathsep.join([str(tester.parent), user.env["PATH"]])
    user.run("docs/install.md", "verify")  # step 1 sets VERSION, as in the user's shell
    printed = user.run("docs/install.md", "policy")
    assert "Verification was successful" in printed, printed


def test_policy_controller_refuses_the_image_unsigned_or_signed_without_its_sbom(
    installation: Installation, tester: Path
) -> None:
    """The same image changed by one byte: a digest the release never signed, so neither policy
    passes; then signed with the release's key but given no SBOM: the second policy still refuses."""
    user = installation.user("policy-refused")
    policy = user.cwd / "policy.yaml"
    policy.write_text(
        policy_as_served(
            (REPO_ROOT / POLICY).read_text(), installation.releases.public_key.read_text(), installation.registry.host
        )
    )
    release, unsigned = f"{installation.image}:{CURRENT}", f"{installation.image}:{CURRENT}-unsigned"
    push_changed_by_one_byte(installation, release, unsigned, installation.workdir / "unsigned-image", b"P")

    def decided(image: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tester, "--policy", policy, "--image", image],
            capture_output=True, text=True, env=user.env, cwd=user.cwd, timeout=120,
        )  # fmt: skip

    refused = decided(unsigned)
    assert refused.returncode != 0, f"policy-controller admitted an unsigned image:\n{refused.stderr}"
    # policy-controller stops at the first policy that fails (either: they are a map).
    (error,) = json.loads(refused.stdout)["errors"]
    assert "no signatures found" in error or "no matching attestations" in error, error
    assert decided(release).returncode == 0, "the release's own image, beside it, is admitted"

    sign: list[str | Path] = [
        cosign(),
        "sign",
        "--yes",
        "--key",
        installation.releases.key,
        "--tlog-upload=false",
        unsigned,
    ]
    env = {**os.environ, **NO_EGRESS, "SSL_CERT_FILE": str(installation.registry.ca_file), "COSIGN_PASSWORD": ""}
    subprocess.run(sign, check=True, capture_output=True, env=env, timeout=120)
    refused = decided(unsigned)
    assert refused.returncode != 0, f"policy-controller admitted an image without its SBOM:\n{refused.stderr}"
    (error,) = json.loads(refused.stdout)["errors"]
    assert "sbom-attested-with-cosign-pub" in error and "no matching attestations" in error, error


# ----------------------------------------------------------------------------- install, upgrade, rollback
def test_installing_the_previous_release_pulls_its_image_from_the_registry(installation: Installation) -> None:
    node, plane = installation.node, installation.plane
    assert not [i for i in node.images() if installation.registry.host in i], "the image was on the node already"
    verified = installation.verify_image(PREVIOUS)
    assert verified.returncode == 0, verified.stderr
    plane.helm(
        "install", RELEASE, installation.chart, "--version", PREVIOUS, "--ca-file", str(installation.registry.ca_file),
        "-n", NAMESPACE, "--create-namespace", "-f", str(installation.values), "--wait", "--timeout=240s",
        timeout=300,
    )  # fmt: skip
    wait_for(f"every pod to run {PREVIOUS}", lambda: installation.running(PREVIOUS), timeout=120)
    for pod in installation.pods():
        assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
        assert pod["spec"]["nodeName"] == node.name
        # The kubelet reports what containerd pulled: the release's own digest.
        assert pod["status"]["containerStatuses"][0]["imageID"].endswith(installation.releases.digests[PREVIOUS])
    assert f"{installation.image}:{PREVIOUS}" in node.images()
    plane.kubectl("create", "namespace", FOOS)
    for name, foo in FOOS_AT_EACH_VERSION.items():
        plane.kubectl(
            "apply", "-n", FOOS, "-f", "-", input=json.dumps({**foo, "kind": "Foo", "metadata": {"name": name}})
        )
    wait_for(
        "the FooHealths of both Foos",
        lambda: len(installation.get(f"foohealths.insights.{GROUP}", "-n", FOOS)["items"]) == 2,
    )
    assert_every_foo_readable_and_stored_at_v1(installation)


def test_upgrading_to_this_release_from_the_verified_chart_fails_no_request(installation: Installation) -> None:
    verified = installation.verify_image(CURRENT)
    assert verified.returncode == 0, verified.stderr
    assert installation.verify_chart(CURRENT).returncode == 0
    # docs/install.md's upgrade, as written: step 1 for the new version (which pulls and verifies
    # foo-operator-$VERSION.tgz), then the documented `helm upgrade --reset-then-reuse-values`.
    user = installation.user("upgrade")
    user.run("docs/install.md", "verify")
    chart = user.cwd / f"{NAME}-{CURRENT}.tgz"
    assert sha256(chart) == sha256(installation.releases.assets(CURRENT) / chart.name)
    change_under_load(
        installation, CURRENT, "install.md's helm upgrade", lambda: user.run("docs/install.md", "upgrade")
    )
    values = json.loads(installation.plane.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert values == yaml.safe_load(installation.values.read_text()), "the values set at install, kept"
    assert_every_foo_readable_and_stored_at_v1(installation)
    history = json.loads(installation.plane.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [(h["revision"], h["app_version"]) for h in history] == [(1, PREVIOUS), (2, CURRENT)]


def test_rolling_back_to_the_previous_release_fails_no_request(installation: Installation) -> None:
    rollback = ("rollback", RELEASE, "1", "-n", NAMESPACE, "--wait", "--timeout=240s")
    change_under_load(installation, PREVIOUS, "helm rollback", lambda: installation.plane.helm(*rollback, timeout=300))
    assert_every_foo_readable_and_stored_at_v1(installation)


# ----------------------------------------------------------------------------- tampering
def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _change_one_byte_of_the_config(layout: Path, tag: str, to: bytes) -> None:
    """In an OCI layout: one byte of the image's config changed to `to`, the manifest and index re-hashed."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    config = (blobs / manifest["config"]["digest"].split(":")[1]).read_bytes()
    at = config.index(b"foo-operator") + len("foo-operator") - 1
    tampered = config[:at] + to + config[at + 1 :]
    (blobs / _sha256(tampered).split(":")[1]).write_bytes(tampered)
    manifest["config"]["digest"] = _sha256(tampered)
    raw = json.dumps(manifest).encode()
    (blobs / _sha256(raw).split(":")[1]).write_bytes(raw)
    index["manifests"] = [{**index["manifests"][0], "digest": _sha256(raw), "size": len(raw)}]
    (layout / "index.json").write_text(json.dumps(index))


def registry_tls(installation: Installation) -> list[str]:
    """skopeo's flags to trust the registry's CA (a directory holding it)."""
    certs = installation.workdir / "registry-certs"
    certs.mkdir(exist_ok=True)
    shutil.copyfile(installation.registry.ca_file, certs / "ca.crt")
    return ["--src-cert-dir", str(certs), "--dest-cert-dir", str(certs)]


def push_changed_by_one_byte(installation: Installation, ref: str, to: str, layout: Path, byte: bytes) -> None:
    """The image `ref` with one byte of its config changed to `byte`, pushed as `to`: a digest nobody
    signed, as long as each test changes a byte of its own (a test that signs its image would sign
    another's too)."""
    tls = registry_tls(installation)
    subprocess.run(["skopeo", "copy", "--quiet", *tls, f"docker://{ref}", f"oci:{layout}:{CURRENT}"], check=True)
    _change_one_byte_of_the_config(layout, CURRENT, byte)
    subprocess.run(["skopeo", "copy", "--quiet", *tls, f"oci:{layout}:{CURRENT}", f"docker://{to}"], check=True)


def test_an_image_changed_by_one_byte_under_the_same_tag_fails_verification(installation: Installation) -> None:
    ref = f"{installation.image}:{CURRENT}"
    push_changed_by_one_byte(installation, ref, ref, installation.workdir / "tampered-image", b"R")
    try:
        refused = installation.verify_image(CURRENT)
        assert refused.returncode != 0, "cosign verified a tampered image"
        assert "no signatures found" in refused.stderr or "no matching signatures" in refused.stderr, refused.stderr
    finally:
        original = installation.releases.dists[CURRENT] / "image" / f"{NAME}-{CURRENT}.oci.tar"
        restore = [
            "skopeo",
            "copy",
            "--quiet",
            "--preserve-digests",
            *registry_tls(installation),
            f"oci-archive:{original}",
            f"docker://{ref}",
        ]
        subprocess.run(restore, check=True)
    assert installation.verify_image(CURRENT).returncode == 0


def test_a_chart_changed_by_one_byte_under_the_same_version_fails_verification(installation: Installation) -> None:
    plane, ca = installation.plane, str(installation.registry.ca_file)
    chart = installation.pull_chart(CURRENT)
    unpacked = installation.workdir / "tampered-chart"
    with tarfile.open(chart) as tar:
        tar.extractall(unpacked, filter="data")
    values = unpacked / NAME / "values.yaml"
    text = values.read_bytes()
    at = text.index(b"# ") + 2
    values.write_bytes(text[:at] + text[at : at + 1].swapcase() + text[at + 1 :])
    repacked = installation.workdir / "tampered-package"
    plane.helm("package", str(unpacked / NAME), "--destination", str(repacked))
    registry_path = installation.chart.rsplit("/", 1)[0]
    signed = verified_digests(installation.verify_chart(CURRENT).stdout)[0]
    plane.helm("push", str(repacked / chart.name), registry_path, "--ca-file", ca)
    try:
        tampered = installation.pull_chart(CURRENT)
        assert sha256(tampered) != sha256(installation.releases.assets(CURRENT) / chart.name)  # SHA256SUMS says no
        refused = installation.verify_chart(CURRENT)
        assert refused.returncode != 0, "cosign verified a tampered chart"
        assert "no signatures found" in refused.stderr or "no matching signatures" in refused.stderr, refused.stderr
    finally:
        installation.registry.retag(f"{ORG}/charts/{NAME}", signed, CURRENT)
    assert installation.verify_chart(CURRENT).returncode == 0


# ----------------------------------------------------------------------------- the docs' own install paths
def uninstalled_keeping_every_foo(installation: Installation) -> None:
    wait_for("the release's pods to go", lambda: installation.pods() == [], timeout=300)
    assert installation.get("crd", f"foos.{GROUP}")["metadata"]["name"] == f"foos.{GROUP}"
    names = sorted(f["metadata"]["name"] for f in installation.get(f"foos.v1.{GROUP}", "-n", FOOS)["items"])
    assert names == sorted(FOOS_AT_EACH_VERSION)


def test_uninstalling_as_docs_install_md_says_keeps_the_crd_and_every_foo(installation: Installation) -> None:
    installation.user("uninstall").run("docs/install.md", "uninstall")
    uninstalled_keeping_every_foo(installation)


def pods_run_the_published_image_on_the_real_node(installation: Installation, image: str) -> bool:
    pods = installation.pods()
    return bool(pods) and all(
        p["spec"]["containers"][0]["image"] == image
        and p["spec"].get("nodeName") == installation.node.name
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        for p in pods
    )


def wait_for_pods_running(installation: Installation, image: str, what: str) -> None:
    wait_for(what, lambda: pods_run_the_published_image_on_the_real_node(installation, image), timeout=300)


def test_installing_as_docs_install_md_says_runs_the_verified_chart(installation: Installation) -> None:
    plane, node = installation.plane, installation.node
    # A cluster as the docs assume one: pods need no toleration to land on the real node. The kwok
    # nodes, whose pods run nothing, now take none of the chart's.
    plane.kubectl("taint", "nodes", node.name, f"{node.taint['key']}-")
    plane.kubectl("taint", "nodes", "-l", "type=kwok", "foo-operator.dev/kwok=true:NoSchedule", "--overwrite")
    user = installation.user("install")
    user.run("docs/install.md", "verify")  # step 1 before step 2, in the same shell
    user.run("docs/install.md", "install")
    image = f"{PUBLISHED_IMAGE}:{CURRENT}"
    wait_for_pods_running(installation, image, "the chart's pods to run the published image")
    for pod in installation.pods():
        # Pulled through the mirror: the release's own digest.
        assert pod["status"]["containerStatuses"][0]["imageID"].endswith(installation.releases.digests[CURRENT])
    assert_every_foo_readable_and_stored_at_v1(installation)
    # The plugin, installed by krew from the release's archive, reads the FooHealths of this install.
    printed = user.run("docs/install.md", "plugin")
    assert all(name in printed for name in FOOS_AT_EACH_VERSION), printed
    assert (user.cwd / ".krew" / "bin" / "kubectl-foo_operator").is_symlink()
    user.run("charts/foo-operator/README.md", "metrics-reader")
    scraper = "system:serviceaccount:monitoring:prometheus"
    assert plane.kubectl("auth", "can-i", "get", "/metrics", f"--as={scraper}").stdout.strip() == "yes"
    user.run("docs/install.md", "uninstall")
    uninstalled_keeping_every_foo(installation)


def test_installing_from_the_registry_as_both_readmes_say(installation: Installation) -> None:
    image = f"{PUBLISHED_IMAGE}:{CURRENT}"
    installation.user("readme").run("README.md", "install-from-the-registry")
    wait_for_pods_running(installation, image, "the README's install to run")
    installation.user("readme-uninstall").run("docs/install.md", "uninstall")
    installation.user("chart-readme").run("charts/foo-operator/README.md", "install-from-the-registry")  # helm test too
    wait_for_pods_running(installation, image, "the chart README's install")
    installation.user("chart-readme-uninstall").run("docs/install.md", "uninstall")
    uninstalled_keeping_every_foo(installation)


def test_the_plain_manifests_install_as_docs_install_md_says(installation: Installation) -> None:
    plane = installation.plane
    # The CRD Helm kept (its labels and fields are Helm's: server-side apply would conflict) goes,
    # and every Foo with it: a cluster that never had Helm's install.
    plane.kubectl("delete", "crd", f"foos.{GROUP}", "--wait", timeout=120)
    user = installation.user("plain")
    user.run("docs/install.md", "verify")
    user.run("docs/install.md", "plain-manifests")
    image = f"{PUBLISHED_IMAGE}:{CURRENT}@{installation.releases.digests[CURRENT]}"
    wait_for_pods_running(installation, image, "the plain manifests' pods to run")
    plane.kubectl("create", "namespace", "plain-foos")
    foo = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Foo",
        "metadata": {"name": "plain"},
        "spec": {"deploymentName": "plain", "replicas": 1},
    }
    wait_for(
        "a Foo written through the rotator-mode webhook",  # once it has written its caBundles
        lambda: (
            plane.kubectl("apply", "-n", "plain-foos", "-f", "-", input=json.dumps(foo), check=False).returncode == 0
        ),
    )
    stored = installation.get(f"foos.v1.{GROUP}", "plain", "-n", "plain-foos")
    assert stored["spec"]["deployment"]["name"] == "plain"  # converted and defaulted by the rotator-mode webhook
