"""A release as users get it: built by `hack/release.py`, pushed to a registry, verified, installed,
upgraded and rolled back from there, on the real node.

The registry is CNCF distribution (Debian's docker-registry) on loopback with TLS from a CA of its
own (hack/registry.py), standing in for ghcr.io: the releases are pushed to it exactly as the
release workflow pushes them (`hack.release.push`), under `<registry>/foo-operator`. The node's
containerd trusts it through a hosts.toml with its CA and pulls the image itself (nothing is
loaded beforehand; pullPolicy IfNotPresent); every other registry still leads nowhere. Signatures
are checked as docs/install.md tells users, with a cosign key pair made for this module: the
image with `cosign verify`, the chart with `cosign verify-blob` of the .tgz helm pulled against the
release's .sig. A byte changed in the image or the chart, re-pushed under the same tag, fails that.

0.1.0 is built from its commit (hack.release.PAST_RELEASES) with today's tools; the upgrade to
this checkout's version and the rollback run under load through kube-apiserver: Foo writes at
both versions, v1alpha1 reads (the conversion webhook) and FooHealth reads (the aggregated API).

One journey (`story`): each step stands on the one before, in file order.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.binaries import BUILD_SCRIPT
from hack.node import RealNode, chart_values, plane_with_real_node
from hack.registry import LocalRegistry
from hack.release import NAME, PAST_RELEASES, build, cosign, project_version, push
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


@dataclass
class Releases:
    """Both releases built, and the key pair they are signed with."""

    key: Path
    public_key: Path
    dists: dict[str, Path]
    digests: dict[str, str]


@pytest.fixture(scope="module")
def releases(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Releases:
    subprocess.run(["bash", str(BUILD_SCRIPT), "cosign"], check=True, capture_output=True, timeout=3600)
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
        made = build(workdir / version, key=workdir / "cosign.key", commit=commit, allow_dirty=True)
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

    def verify_chart(self, chart: Path, version: str) -> subprocess.CompletedProcess[str]:
        signature = self.releases.dists[version] / f"{NAME}-{version}.tgz.sig"
        return self.cosign(
            "verify-blob", "--key", self.releases.public_key, "--insecure-ignore-tlog", "--signature", signature, chart
        )

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


@pytest.fixture(scope="module")
def installation(releases: Releases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    workdir = tmp_path_factory.mktemp("release-install")
    with (
        LocalRegistry(workdir / "registry") as registry,
        plane_with_real_node(workdir / "plane", None) as (plane, node),
    ):
        node.trust_registry(registry.host, registry.ca_file)
        with pytest.MonkeyPatch.context() as env:  # skopeo, cosign and helm talk to the registry alone
            for name, value in NO_EGRESS.items():
                env.setenv(name, value)
            for version in (PREVIOUS, CURRENT):
                push(releases.dists[version], f"{registry.host}/{ORG}", key=releases.key, ca_file=registry.ca_file)
        values = chart_values(node, f"{registry.host}/{ORG}/{NAME}:unused")
        values.pop("migrateStorage")  # 0.1.0's chart has no such value (and its schema refuses it)
        # The chart's own tag (its appVersion) and pull policy: only the registry host differs from ghcr.io.
        values["image"] = {"repository": f"{registry.host}/{ORG}/{NAME}"}
        (workdir / "values.yaml").write_text(yaml.safe_dump(values))
        try:
            yield Installation(plane, node, registry, releases, workdir / "values.yaml", workdir)
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


def upgrade_under_load(installation: Installation, version: str, *helm_args: str) -> None:
    plane = installation.plane
    with steady_requests(plane, load(FOOS)) as (answered, failures):
        wait_for_more("answers before the change", lambda: sum(answered.values()), 20)
        began = time.monotonic()
        plane.helm(*helm_args, "-n", NAMESPACE, "--wait", "--timeout=240s", timeout=300)
        print(f"helm {helm_args[0]} to {version}: {time.monotonic() - began:.1f}s")
        wait_for(f"every pod to run {version} alone", lambda: installation.running(version), timeout=180)
        wait_for_more("answers after the change", lambda: sum(answered.values()), 20)
    print(f"answers during the change to {version}: {dict(answered)}")
    assert failures == [], f"{len(failures)} requests failed ({sum(answered.values())} did not): {failures[:5]}"
    assert all(answered[what] >= 5 for what in ("write", "write-v1alpha1", "read-v1alpha1", "foohealths")), answered


# ----------------------------------------------------------------------------- verify
def test_both_releases_verify_as_docs_install_md_says(installation: Installation) -> None:
    for version in (PREVIOUS, CURRENT):
        verified = installation.verify_image(version)
        assert verified.returncode == 0, verified.stderr
        (claim,) = json.loads(verified.stdout)
        assert claim["critical"]["image"]["docker-manifest-digest"] == installation.releases.digests[version]
        chart = installation.pull_chart(version)
        checked = installation.verify_chart(chart, version)
        assert checked.returncode == 0, checked.stderr
        assert "Verified OK" in checked.stderr


def test_the_chart_runs_the_release_image_tagged_with_its_app_version_by_default(installation: Installation) -> None:
    chart = installation.pull_chart(CURRENT)
    with tarfile.open(chart) as tar:
        values = yaml.safe_load(tar.extractfile(f"{NAME}/values.yaml").read())  # type: ignore[union-attr]
        meta = yaml.safe_load(tar.extractfile(f"{NAME}/Chart.yaml").read())  # type: ignore[union-attr]
    assert values["image"]["repository"] == f"ghcr.io/{ORG}/{NAME}"
    assert (values["image"]["tag"], values["image"]["pullPolicy"]) == ("", "IfNotPresent")
    assert (meta["version"], meta["appVersion"]) == (CURRENT, CURRENT)


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
    chart = installation.pull_chart(CURRENT)
    checked = installation.verify_chart(chart, CURRENT)
    assert checked.returncode == 0, checked.stderr
    upgrade_under_load(installation, CURRENT, "upgrade", RELEASE, str(chart), "-f", str(installation.values))
    assert_every_foo_readable_and_stored_at_v1(installation)
    history = json.loads(installation.plane.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [(h["revision"], h["app_version"]) for h in history] == [(1, PREVIOUS), (2, CURRENT)]


def test_rolling_back_to_the_previous_release_fails_no_request(installation: Installation) -> None:
    upgrade_under_load(installation, PREVIOUS, "rollback", RELEASE, "1")
    assert_every_foo_readable_and_stored_at_v1(installation)


# ----------------------------------------------------------------------------- tampering
def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _change_one_byte_of_the_config(layout: Path, tag: str) -> None:
    """In an OCI layout: one byte of the image's config changed, the manifest and index re-hashed."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    config = (blobs / manifest["config"]["digest"].split(":")[1]).read_bytes()
    at = config.index(b"foo-operator") + len("foo-operator") - 1
    tampered = config[:at] + b"R" + config[at + 1 :]
    (blobs / _sha256(tampered).split(":")[1]).write_bytes(tampered)
    manifest["config"]["digest"] = _sha256(tampered)
    raw = json.dumps(manifest).encode()
    (blobs / _sha256(raw).split(":")[1]).write_bytes(raw)
    index["manifests"] = [{**index["manifests"][0], "digest": _sha256(raw), "size": len(raw)}]
    (layout / "index.json").write_text(json.dumps(index))


def test_an_image_changed_by_one_byte_under_the_same_tag_fails_verification(installation: Installation) -> None:
    ref = f"{installation.image}:{CURRENT}"
    certs = installation.workdir / "registry-certs"
    certs.mkdir(exist_ok=True)
    shutil.copyfile(installation.registry.ca_file, certs / "ca.crt")
    layout = installation.workdir / "tampered-image"
    tls = ["--src-cert-dir", str(certs), "--dest-cert-dir", str(certs)]
    subprocess.run(["skopeo", "copy", "--quiet", *tls, f"docker://{ref}", f"oci:{layout}:{CURRENT}"], check=True)
    _change_one_byte_of_the_config(layout, CURRENT)
    subprocess.run(["skopeo", "copy", "--quiet", *tls, f"oci:{layout}:{CURRENT}", f"docker://{ref}"], check=True)
    try:
        refused = installation.verify_image(CURRENT)
        assert refused.returncode != 0, "cosign verified a tampered image"
        assert "no signatures found" in refused.stderr or "no matching signatures" in refused.stderr, refused.stderr
    finally:
        original = installation.releases.dists[CURRENT] / f"{NAME}-{CURRENT}.oci.tar"
        restore = [
            "skopeo",
            "copy",
            "--quiet",
            "--preserve-digests",
            *tls,
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
    plane.helm("push", str(repacked / chart.name), registry_path, "--ca-file", ca)
    try:
        tampered = installation.pull_chart(CURRENT)
        assert tampered.read_bytes() != chart.read_bytes()
        refused = installation.verify_chart(tampered, CURRENT)
        assert refused.returncode != 0, "cosign verified a tampered chart"
        assert "invalid signature" in refused.stderr.lower(), refused.stderr
    finally:
        plane.helm("push", str(installation.releases.dists[CURRENT] / chart.name), registry_path, "--ca-file", ca)
    assert installation.verify_chart(installation.pull_chart(CURRENT), CURRENT).returncode == 0
