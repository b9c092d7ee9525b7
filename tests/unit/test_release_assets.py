"""What a release carries: exactly the files SHA256SUMS names, a chart archive that the same tree
makes byte for byte, the image named by digest, and a workflow that uploads just that."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from hack.plane.binaries import find_binaries
from hack.release import pipeline as release

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _release(tmp_path: Path, source: Path = ROOT) -> release.Release:
    made = release.Release(
        version=release.project_version(), source=source, dist=tmp_path / "dist", revision="r", epoch=1_700_000_000
    )
    made.assets.mkdir(parents=True)
    made.image_digest = DIGEST
    return made


def _chart_yaml(archive: Path) -> dict[str, object]:
    with tarfile.open(archive) as tar:
        chart: dict[str, object] = yaml.safe_load(tar.extractfile("foo-operator/Chart.yaml").read())  # type: ignore[union-attr]
    return chart


@pytest.fixture
def helm() -> Path:
    path = find_binaries().helm
    if not path.is_file():
        pytest.skip("helm is not built: run `bash hack/build.sh`")
    return path


# ----------------------------------------------------------------------------- the chart
def test_the_same_chart_tree_packs_into_the_same_bytes_whenever_and_wherever_it_is_packed(
    tmp_path: Path, helm: Path
) -> None:
    first = _release(tmp_path / "one")
    release.build_chart(first)
    source = tmp_path / "copy"
    (source / "charts").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(ROOT / "charts" / "foo-operator"), str(source / "charts")], check=True)
    for path in (source / "charts").rglob("*"):
        os.utime(path, (1, 1))  # another checkout: other mtimes
    second = _release(tmp_path / "two", source=source)
    release.build_chart(second)
    (one,), (two,) = first.files, second.files
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tar:
        assert {m.mtime for m in tar.getmembers()} == {first.epoch}
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}
        assert tar.getnames()[0] == "foo-operator/Chart.yaml"


def test_helm_itself_stamps_each_member_with_the_time_it_packs_it(tmp_path: Path, helm: Path) -> None:
    # Why the chart is packed again: were helm ever to take a fixed time, the repack could go.
    chart = tmp_path / "foo-operator"
    subprocess.run(["cp", "-r", str(ROOT / "charts" / "foo-operator"), str(chart)], check=True)
    for path in [chart, *chart.rglob("*")]:
        os.utime(path, (1, 1))
    subprocess.run([str(helm), "package", str(chart), "-d", str(tmp_path / "out")], check=True, capture_output=True)
    (archive,) = (tmp_path / "out").glob("*.tgz")
    with tarfile.open(archive) as tar:
        assert min(m.mtime for m in tar.getmembers()) > 1_700_000_000  # when it ran, not the files' time


def test_the_packed_chart_names_the_release_image_by_digest_for_artifact_hub(tmp_path: Path, helm: Path) -> None:
    made = _release(tmp_path)
    release.build_chart(made)
    chart = _chart_yaml(made.files[0])
    annotations = chart["annotations"]
    assert isinstance(annotations, dict)
    images = yaml.safe_load(annotations["artifacthub.io/images"])
    version = release.project_version()
    assert images == [{"name": "foo-operator", "image": f"ghcr.io/foo-operator/foo-operator:{version}@{DIGEST}"}]
    source = yaml.safe_load((ROOT / "charts" / "foo-operator" / "Chart.yaml").read_text())
    assert {k: v for k, v in chart.items() if k != "annotations"} == {
        k: v for k, v in source.items() if k != "annotations"
    }


@pytest.mark.parametrize(
    ("chart_yaml", "expected"),
    [
        (
            "name: x\nannotations:\n  a: b\n",
            "name: x\nannotations:\n  artifacthub.io/images: |\n    - name: foo-operator\n      image: IMG\n  a: b\n",
        ),
        (
            "name: x\n",
            "name: x\nannotations:\n  artifacthub.io/images: |\n    - name: foo-operator\n      image: IMG\n",
        ),
        (
            "annotations:  # why\n  artifacthub.io/images: |\n    - name: old\n      image: old:1\n  a: b\n",
            "annotations:  # why\n  artifacthub.io/images: |\n    - name: foo-operator\n      image: IMG\n  a: b\n",
        ),
    ],
    ids=["beside-other-annotations", "no-annotations-yet", "replaces-the-source-entry"],
)
def test_the_images_annotation_is_written_into_the_text_keeping_the_rest(chart_yaml: str, expected: str) -> None:
    assert release.with_artifacthub_images(chart_yaml, "IMG") == expected


# ----------------------------------------------------------------------------- plain manifests
def test_the_plain_manifests_run_the_image_by_digest_and_the_crd_comes_alone_too(tmp_path: Path) -> None:
    made = _release(tmp_path)
    release.build_manifests(made)
    manifests, crds = made.files
    version = release.project_version()
    assert (manifests.name, crds.name) == (f"foo-operator-{version}.yaml", f"foo-operator-crds-{version}.yaml")
    images = {
        c["image"]
        for d in yaml.safe_load_all(manifests.read_text())
        if d and d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"ghcr.io/foo-operator/foo-operator:{version}@{DIGEST}"}
    only = [d for d in yaml.safe_load_all(crds.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in only] == [
        ("CustomResourceDefinition", "foos.samplecontroller.k8s.io")
    ]
    plain_crd = next(d for d in yaml.safe_load_all(manifests.read_text()) if d and d["kind"] == only[0]["kind"])
    assert only[0] == plain_crd


def test_a_past_release_without_plain_manifests_ships_none(tmp_path: Path) -> None:
    made = _release(tmp_path, source=tmp_path)
    release.build_manifests(made)
    assert made.files == []


def test_the_release_carries_the_disruption_table_of_docs(tmp_path: Path) -> None:
    made = _release(tmp_path)
    assert release.attach_disruptions in release.ARTIFACTS
    release.attach_disruptions(made)
    (table,) = made.files
    assert table.name == f"foo-operator-{release.project_version()}-disruptions.md"
    assert table.read_text() == (ROOT / "docs" / "disruptions.md").read_text()


def test_a_past_release_from_before_the_disruption_suite_ships_no_table(tmp_path: Path) -> None:
    made = _release(tmp_path, source=tmp_path)
    release.attach_disruptions(made)
    assert made.files == []


# ----------------------------------------------------------------------------- checksums
def _fake_assets(made: release.Release) -> None:
    for name in ("foo-operator-1.tgz", "foo-operator-1.cdx.json", "kubectl-foo-1.tar.gz"):
        (made.assets / name).write_text(name)
        made.files.append(made.assets / name)


def test_sha256sums_names_every_asset_and_nothing_else(tmp_path: Path) -> None:
    made = _release(tmp_path)
    _fake_assets(made)
    release.write_checksums(made)
    assert release.assets_are_exactly_the_checksummed(made.assets) == []
    listed = (made.assets / "SHA256SUMS").read_text().splitlines()
    assert [line.split()[1] for line in listed] == sorted(
        p.name for p in made.assets.iterdir() if p.name != "SHA256SUMS"
    )
    for line in listed:
        digest, name = line.split()
        assert hashlib.sha256((made.assets / name).read_bytes()).hexdigest() == digest
    result = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=made.assets, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_stray_or_a_missing_asset_is_named(tmp_path: Path) -> None:
    made = _release(tmp_path)
    _fake_assets(made)
    release.write_checksums(made)
    (made.assets / "stray.txt").write_text("")
    (made.assets / "kubectl-foo-1.tar.gz").unlink()
    assert release.assets_are_exactly_the_checksummed(made.assets) == [
        "not in SHA256SUMS: stray.txt",
        "in SHA256SUMS but missing: kubectl-foo-1.tar.gz",
    ]


def test_release_json_lists_the_assets_and_names_the_image_by_digest(tmp_path: Path) -> None:
    made = _release(tmp_path)
    _fake_assets(made)
    release.write_checksums(made)
    meta = json.loads((made.assets / "release.json").read_text())
    assert meta["assets"] == sorted([*(p.name for p in made.files)])
    assert meta["image"] == {"name": "ghcr.io/foo-operator/foo-operator", "digest": DIGEST}


def test_helm_pushs_digest_line_is_what_gets_signed() -> None:
    out = f"Pushed: 127.0.0.1:5000/charts/foo-operator:0.2.0\nDigest: {DIGEST}\n"
    assert release.pushed_chart_digest(out) == DIGEST
    with pytest.raises(release.ReleaseError, match="no digest"):
        release.pushed_chart_digest("Pushed: x\n")


# ----------------------------------------------------------------------------- the workflow
def test_the_workflow_uploads_the_assets_directory_alone() -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["release"]["steps"]
    (upload,) = [s for s in steps if "action-gh-release" in s.get("uses", "")]
    assert upload["with"]["files"] == "dist/release/assets/*"


def test_every_action_is_pinned_by_a_commit_digest() -> None:
    uses = re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", WORKFLOW.read_text(), re.M)
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.search(r"#\s*v\d+\.\d+\.\d+", comment), f"{action}: say which release the digest is"


def test_a_private_key_is_never_generated_into_the_repository(tmp_path: Path) -> None:
    with pytest.raises(release.ReleaseError, match="inside the repository"):
        release.keygen(ROOT / "keys", root=ROOT)


def test_the_published_public_key_is_a_pem_public_key_and_no_private_key_is_committed() -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key((ROOT / "cosign.pub").read_bytes())
    assert key.key_size >= 256  # type: ignore[union-attr]
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True).stdout
    for name in tracked.split():
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 1 << 20:
            # serving/tls.py names the PEM markers it reads; no file holds a key's body.
            assert not re.search(rb"PRIVATE KEY-----\s*\n[A-Za-z0-9+/=]{40}", path.read_bytes()), name


def test_the_repack_keeps_members_and_contents(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in (("c/Chart.yaml", b"name: c\n"), ("c/values.yaml", b"a: 1\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uname = len(data), 12345, "someone"
            tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "c.tgz"
    archive.write_bytes(raw.getvalue())
    release.repack_reproducibly(archive, 99)
    with tarfile.open(archive) as tar:
        assert [(m.name, m.mtime, m.uname) for m in tar.getmembers()] == [
            ("c/Chart.yaml", 99, ""),
            ("c/values.yaml", 99, ""),
        ]
        assert tar.extractfile("c/values.yaml").read() == b"a: 1\n"  # type: ignore[union-attr]


def test_a_key_whose_public_half_is_not_the_published_one_signs_nothing(tmp_path: Path) -> None:
    try:
        cosign = release.cosign()
    except release.ReleaseError:
        pytest.skip("cosign is not built: run `bash hack/build.sh cosign`")
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    subprocess.run(
        [str(cosign), "generate-key-pair", "--output-key-prefix", str(tmp_path / "other")],
        check=True,
        capture_output=True,
        env=env,
    )
    with pytest.raises(release.ReleaseError, match="users could not verify this release"):
        release.check_key(tmp_path / "other.key", ROOT / "cosign.pub")
    release.check_key(tmp_path / "other.key", tmp_path / "other.pub")  # its own half: fine
