"""One release command: everything a user installs, from a clean checkout, into a dist directory.

    python -m hack.release build [--dist DIR] [--key cosign.key] [--public-key cosign.pub] [--commit REF]
                                 [--allow-dirty] [--no-tlog-upload]
    python -m hack.release push  --dist DIR --registry HOST[/PATH] --key cosign.key [--ca-file CA] [--no-tlog-upload]
    python -m hack.release keygen --out DIR     # the project's key pair: cosign.pub at the root, the key in DIR
    python -m hack.release notes [VERSION]      # CHANGELOG.md's section for a version
    python -m hack.release version              # the one version (pyproject.toml)

`build` writes, for the version in pyproject.toml (the one version source: the chart's `version`
and `appVersion`, every command's `--version` and the image tag follow it, and a unit test holds
them together), into DIR/assets, the files the GitHub release carries, and nothing else:

    foo-operator-<v>.tgz            the chart (`helm package`, then packed again so that the same tree
                                    gives the same bytes; Chart.yaml's `artifacthub.io/images` names the
                                    image by digest, `artifacthub.io/changes` lists CHANGELOG.md's
                                    section, hack/release/artifacthub.py)
    foo-operator-<v>.cdx.json       the image's SBOM (CycloneDX: every Debian package and Python distribution)
    foo-operator-<v>.yaml           the plain manifests (deploy/foo-operator.yaml, the image by digest)
    foo-operator-crds-<v>.yaml      the Foo CRD alone, for clusters that manage CRDs apart
    kubectl-foo-operator-<v>-<os>-<arch>.tar.gz  the kubectl plugin, one self-contained archive per
                                    platform (hack/release/krew.py); foo-operator.yaml, its krew manifest;
                                    kubectl-foo-operator-<v>.cdx.json, the SBOM of what they carry
    foo-operator-<v>-disruptions.md docs/disruptions.md: failed requests and recovery through each
                                    disruption, as tests/e2e/test_disruptions.py measured them
    release.json                    version, revision, image digest, the assets
    SHA256SUMS                      sha256sum of every asset above (`sha256sum -c SHA256SUMS`)
    SHA256SUMS.cosign.bundle        its cosign signature (with --key)

and beside them, not uploaded: DIR/image/foo-operator-<v>.oci.tar (the image: pushed to the
registry, where it is signed) and DIR/RELEASE_NOTES.md (CHANGELOG.md's section: the release's text).

`--commit REF` builds a past release from that commit's tree with today's tools (0.1.0 was cut
before this command existed; its commit is PAST_RELEASES'). `push` copies the image and the chart
to a registry (`<registry>/foo-operator:<v>`, `oci://<registry>/charts/foo-operator`), signs both
there and attaches the SBOM to the image as a CycloneDX attestation (cosign). Signatures go to the
public transparency log (Rekor) unless `--no-tlog-upload`: the tests, whose registry is on
loopback and which reach nothing else, sign without it (docs/install.md says what each choice
means for whoever verifies).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hack.plane.binaries import cache_dir, find_binaries, versions
from hack.release import artifacthub, krew

REPO_ROOT = Path(__file__).resolve().parents[2]
NAME = "foo-operator"
# Where the chart's image default and the workflow publish to: the image is <prefix>/foo-operator,
# the chart oci://<prefix>/charts/foo-operator.
REGISTRY_PREFIX = "ghcr.io/foo-operator"
# Releases cut before this command, by the commit each stands for (CHANGELOG.md says why that one).
PAST_RELEASES = {
    "0.1.0": "853341c332685036d8cc305d0e6d57644fa792ca",
    "0.2.0": "1363a7229f03c514b980d5a2a8d70a404f6809d7",
}


class ReleaseError(RuntimeError):
    """A release cannot be made as asked; the message is the one line the user sees."""


# ---------------------------------------------------------------------- the one version
def project_version(root: Path = REPO_ROOT) -> str:
    version: str = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    return version


def chart_versions(root: Path = REPO_ROOT) -> tuple[str, str]:
    """The chart's (version, appVersion)."""
    chart = yaml.safe_load((root / "charts" / NAME / "Chart.yaml").read_text())
    return str(chart["version"]), str(chart["appVersion"])


def changelog_section(version: str, root: Path = REPO_ROOT) -> str:
    """The body of CHANGELOG.md's `## [version] - date` section, without its heading."""
    text = (root / "CHANGELOG.md").read_text()
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|^\[[^\]]+\]: |\Z)", text, re.M | re.S)
    if not match:
        raise ReleaseError(f"CHANGELOG.md has no '## [{version}]' section: write it before the release")
    return match.group(1).strip() + "\n"


# ---------------------------------------------------------------------- the build
@dataclass
class Release:
    """What one build is made from and what it has written so far."""

    version: str
    source: Path  # the tree the artifacts come from (this checkout, or a past commit's)
    dist: Path
    revision: str
    epoch: int
    key: Path | None = None
    tlog: bool = True  # upload signatures to the public transparency log (Rekor)
    rebuild_image: bool = False  # hack/image.sh --force: build again rather than take the cached archive
    # The kubectl plugin's platforms (krew's os, arch); the tests build the one they run on.
    plugin_platforms: tuple[tuple[str, str], ...] = tuple(krew.PLATFORMS)
    files: list[Path] = field(default_factory=list)  # the assets written so far (all under `assets`)
    image_digest: str = ""

    @property
    def assets(self) -> Path:
        """What the GitHub release carries: exactly these files, each in SHA256SUMS."""
        return self.dist / "assets"

    @property
    def image_archive(self) -> Path:
        return self.dist / "image" / f"{NAME}-{self.version}.oci.tar"


Builder = Callable[[Release], None]


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    with_stderr: bool = False,
) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise ReleaseError(f"{Path(str(argv[0])).name} {' '.join(map(str, argv[1:3]))} failed:\n{tail}")
    return result.stdout + (result.stderr if with_stderr else "")


def cosign() -> Path:
    path = cache_dir() / "bin" / f"cosign-{versions()['COSIGN_VERSION']}" / "cosign"
    if not path.is_file():
        raise ReleaseError(f"{path} is missing: run `bash hack/build.sh cosign`")
    return path


def cosign_env() -> dict[str, str]:
    # A key made for the test has an empty password; a real one comes from COSIGN_PASSWORD.
    return {"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")}


def tlog_flag(tlog: bool) -> str:
    return f"--tlog-upload={str(tlog).lower()}"


def build_image(release: Release) -> None:
    # This checkout's image is the one hack/image.sh caches for the real node (a cache hit when the
    # tests built it); a past release's gets a cache directory of its own, by commit.
    env = {
        "SOURCE_DATE_EPOCH": str(release.epoch),
        "PYTHON": os.environ.get("PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python")),
    }
    out = cache_dir() / "share" / "image"
    if release.source != REPO_ROOT:
        out = cache_dir() / "share" / "release-images" / release.revision[:12]
        env |= {"IMAGE_SOURCE_DIR": str(release.source), "IMAGE_OUT_DIR": str(out), "IMAGE_REVISION": release.revision}
    run([REPO_ROOT / "hack" / "image.sh", *(["--force"] if release.rebuild_image else [])], env=env)
    meta = json.loads((out / "image.json").read_text())
    release.image_archive.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(meta["archive"], release.image_archive)
    sbom = release.assets / f"{NAME}-{release.version}.cdx.json"
    shutil.copyfile(meta["sbom"], sbom)
    release.image_digest = meta["digest"]
    release.files.append(sbom)


def image_by_digest(release: Release) -> str:
    return f"{REGISTRY_PREFIX}/{NAME}:{release.version}@{release.image_digest}"


def with_artifacthub_images(chart_yaml: str, image: str) -> str:
    """Chart.yaml with `artifacthub.io/images` naming `image` (tag and digest): the image Artifact Hub
    lists and scans."""
    return with_annotation(chart_yaml, "artifacthub.io/images", f"- name: {NAME}\n  image: {image}\n")


def with_annotation(chart_yaml: str, key: str, value: str) -> str:
    """Chart.yaml with the annotation `key` holding `value` (YAML, as a block string). Written into
    the text, nothing else of it changed (helm package then writes the file anew from what it
    parsed); an entry already there is replaced."""
    block = "".join(f"    {line}" if line.strip() else line for line in value.splitlines(keepends=True))
    entry = f"  {key}: |\n{block}"
    lines = chart_yaml.splitlines(keepends=True)
    kept: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith(f"  {key}:"):
            skipping = True
            continue
        if skipping and (line.startswith("    ") or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    at = next((i for i, line in enumerate(kept) if re.match(r"annotations:\s*(#.*)?$", line)), None)
    if at is None:
        return "".join(kept).rstrip("\n") + "\nannotations:\n" + entry
    return "".join(kept[: at + 1]) + entry + "".join(kept[at + 1 :])


def repack_reproducibly(archive: Path, epoch: int) -> None:
    """`helm package` stamps each member with the time it writes it (helm v3's chartutil.writeToTar:
    time.Now(); v4 takes the files' mtimes, which a checkout sets): the same tree gave a new archive
    each time. Same members, same order, the commit's time, no owner, and a gzip header without a time."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]  # type: ignore[union-attr]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members:
            member.mtime, member.uid, member.gid, member.uname, member.gname = epoch, 0, 0, "", ""
            member.pax_headers = {}
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    with open(archive, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())


def build_chart(release: Release) -> None:
    helm = find_binaries().helm
    with tempfile.TemporaryDirectory(prefix="foo-operator-chart-") as scratch:
        chart_dir = Path(scratch) / NAME
        shutil.copytree(release.source / "charts" / NAME, chart_dir, ignore=shutil.ignore_patterns("*.tgz", "charts"))
        chart_yaml = chart_dir / "Chart.yaml"
        text = with_artifacthub_images(chart_yaml.read_text(), image_by_digest(release))
        # Today's CHANGELOG.md, also for a past release built from its commit (as the notes are).
        try:
            changes = artifacthub.changes_annotation(changelog_section(release.version))
        except artifacthub.ChangelogError as err:
            raise ReleaseError(str(err)) from None
        chart_yaml.write_text(with_annotation(text, "artifacthub.io/changes", changes))
        run([helm, "package", chart_dir, "--destination", release.assets])
    chart = release.assets / f"{NAME}-{release.version}.tgz"
    if not chart.is_file():
        raise ReleaseError(f"helm package wrote no {chart.name}: is the chart's version {release.version}?")
    repack_reproducibly(chart, release.epoch)
    release.files.append(chart)


def crds_only(manifests: str) -> str:
    """The CustomResourceDefinitions of a multi-document manifest, alone."""
    crds = [d for d in yaml.safe_load_all(manifests) if d and d.get("kind") == "CustomResourceDefinition"]
    return str(yaml.safe_dump_all(crds, sort_keys=False, explicit_start=True))


def build_manifests(release: Release) -> None:
    """deploy/foo-operator.yaml (kubectl apply, no Helm) with the image pinned to its digest, and its CRD
    alone. A past release that had no plain manifests gets none."""
    plain = release.source / "deploy" / f"{NAME}.yaml"
    if not plain.is_file():
        return
    tagged = f"image: {REGISTRY_PREFIX}/{NAME}:{release.version}\n"
    text = plain.read_text()
    if tagged not in text:
        raise ReleaseError(f"deploy/{NAME}.yaml does not run {tagged.strip()}: run `python -m hack.release.manifests`")
    manifests = release.assets / f"{NAME}-{release.version}.yaml"
    manifests.write_text(text.replace(tagged, f"image: {image_by_digest(release)}\n"))
    crds = release.assets / f"{NAME}-crds-{release.version}.yaml"
    crds.write_text(
        f"# The Foo CRD of foo-operator {release.version} alone (docs/install.md, Plain manifests).\n" + crds_only(text)
    )
    release.files += [manifests, crds]


def write_notes(release: Release) -> None:
    # Today's CHANGELOG.md, also for a past release built from its commit: it has every section.
    # The release's text, not one of its files.
    notes = release.dist / "RELEASE_NOTES.md"
    notes.write_text(f"# foo-operator {release.version}\n\n" + changelog_section(release.version))


def build_plugin(release: Release) -> None:
    """The kubectl plugin's krew archives (one per platform), manifest and SBOM (hack/release/krew.py). A
    past release from before the plugin ships none."""
    if not (release.source / "kubectl_foo").is_dir():
        return
    uri = f"{krew.HOMEPAGE}/releases/download/v{release.version}/{{name}}"
    release.files += krew.release_plugin(
        release.source, version=release.version, out_dir=release.assets, uri=uri, platforms=release.plugin_platforms
    )


def attach_disruptions(release: Release) -> None:
    """docs/disruptions.md, the table the disruption suite writes, as the release's own record of
    what a cluster's disruptions cost. A past release from before the suite ships none."""
    table = release.source / "docs" / "disruptions.md"
    if not table.is_file():
        return
    attached = release.assets / f"{NAME}-{release.version}-disruptions.md"
    shutil.copyfile(table, attached)
    release.files.append(attached)


# Run in order; a builder that needs another's output comes after it (the chart and the plain
# manifests name the image's digest).
ARTIFACTS: list[Builder] = [build_image, build_chart, build_manifests, build_plugin, attach_disruptions, write_notes]

CHECKSUMS = "SHA256SUMS"
CHECKSUMS_BUNDLE = f"{CHECKSUMS}.cosign.bundle"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(release: Release) -> None:
    manifest = release.assets / "release.json"
    manifest.write_text(
        json.dumps(
            {
                "version": release.version,
                "revision": release.revision,
                "image": {"name": f"{REGISTRY_PREFIX}/{NAME}", "digest": release.image_digest},
                "chart": f"oci://{REGISTRY_PREFIX}/charts/{NAME}",
                "assets": sorted([p.name for p in release.files] + ["release.json"]),
            },
            indent=1,
        )
        + "\n"
    )
    release.files.append(manifest)
    lines = [f"{sha256(p)}  {p.name}\n" for p in sorted(release.files, key=lambda p: p.name)]
    checksums = release.assets / CHECKSUMS
    checksums.write_text("".join(lines))
    if release.key:
        bundle = release.assets / CHECKSUMS_BUNDLE
        flags = ["--yes", "--key", str(release.key), tlog_flag(release.tlog), "--bundle", str(bundle)]
        run([cosign(), "sign-blob", *flags, checksums], env=cosign_env())


def assets_are_exactly_the_checksummed(assets: Path) -> list[str]:
    """What is wrong with `assets` as a release: files SHA256SUMS does not name, or names and lacks."""
    named = {line.split(maxsplit=1)[1].strip() for line in (assets / CHECKSUMS).read_text().splitlines()}
    present = {p.name for p in assets.iterdir()} - {CHECKSUMS, CHECKSUMS_BUNDLE}
    return [f"not in {CHECKSUMS}: {n}" for n in sorted(present - named)] + [
        f"in {CHECKSUMS} but missing: {n}" for n in sorted(named - present)
    ]


def git(*args: str) -> str:
    return run(["git", "-C", REPO_ROOT, *args]).strip()


def source_tree(commit: str | None, allow_dirty: bool, scratch: Path) -> tuple[Path, str, int]:
    """The tree to build from, its revision and its commit time (SOURCE_DATE_EPOCH)."""
    if commit is None:
        dirty = git("status", "--porcelain")  # untracked files count: the image takes whole package dirs
        if dirty and not allow_dirty:
            raise ReleaseError("the checkout has uncommitted changes; a release is built from a clean tree")
        revision = git("rev-parse", "HEAD") + ("-dirty" if dirty else "")
        return REPO_ROOT, revision, int(git("log", "-1", "--format=%ct"))
    revision = git("rev-parse", f"{commit}^{{commit}}")
    tree = scratch / "source"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", revision], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree, revision, int(git("log", "-1", "--format=%ct", revision))


def public_key_of(key: Path) -> str:
    return run([cosign(), "public-key", "--key", key], env=cosign_env()).strip()


def check_key(key: Path, public_key: Path) -> None:
    """Refuse to sign with a key whose public half is not the published one (the root's cosign.pub):
    a release nobody could verify with the documented key must not ship."""
    if public_key_of(key) != public_key.read_text().strip():
        raise ReleaseError(f"the signing key's public half is not {public_key}: users could not verify this release")


def build(
    dist: Path,
    *,
    key: Path | None,
    commit: str | None = None,
    allow_dirty: bool = False,
    rebuild_image: bool = False,
    tlog: bool = True,
    public_key: Path | None = None,
    plugin_platforms: tuple[tuple[str, str], ...] = tuple(krew.PLATFORMS),
) -> Release:
    if key and public_key:
        check_key(key, public_key)
    with tempfile.TemporaryDirectory(prefix="foo-operator-release-") as scratch:
        source, revision, epoch = source_tree(commit, allow_dirty, Path(scratch))
        version = project_version(source)
        if chart_versions(source) != (version, version):
            raise ReleaseError(f"Chart.yaml's version/appVersion {chart_versions(source)} are not {version}")
        changelog_section(version)  # fail before the long part
        release = Release(version, source, dist, revision, epoch, key, tlog, rebuild_image, plugin_platforms)
        # An earlier build's files: the assets are this build's alone.
        shutil.rmtree(release.assets, ignore_errors=True)
        shutil.rmtree(release.image_archive.parent, ignore_errors=True)
        release.assets.mkdir(parents=True)
        for builder in ARTIFACTS:
            builder(release)
        write_checksums(release)
    return release


# ---------------------------------------------------------------------- push
@dataclass(frozen=True)
class Published:
    image: str  # <registry>/foo-operator@sha256:...
    chart: str  # <registry>/charts/foo-operator@sha256:... (helm's oci:// without the scheme)


def pushed_chart_digest(helm_output: str) -> str:
    """The chart's manifest digest from `helm push`'s `Digest: sha256:...` line: what cosign signs."""
    match = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", helm_output, re.M)
    if not match:
        raise ReleaseError(f"helm push printed no digest:\n{helm_output}")
    return match.group(1)


def push(dist: Path, registry: str, *, key: Path, ca_file: Path | None = None, tlog: bool = True) -> Published:
    """Copy the built image and chart to `registry` (host[:port][/path]); sign both there and attach the
    SBOM to the image as a CycloneDX attestation."""
    assets = dist / "assets"
    meta = json.loads((assets / "release.json").read_text())
    version, digest = meta["version"], meta["image"]["digest"]
    repository = f"{registry}/{NAME}"
    tls: list[str] = []
    env = cosign_env()
    if ca_file:
        # skopeo reads *.crt from a directory; cosign (Go) the file SSL_CERT_FILE names.
        cert_dir = dist / ".registry-ca"
        cert_dir.mkdir(exist_ok=True)
        shutil.copyfile(ca_file, cert_dir / "ca.crt")
        tls = ["--dest-cert-dir", str(cert_dir)]
        env["SSL_CERT_FILE"] = str(ca_file)
    archive = dist / "image" / f"{NAME}-{version}.oci.tar"
    run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--preserve-digests",
            *tls,
            f"oci-archive:{archive}",
            f"docker://{repository}:{version}",
        ]
    )
    image = f"{repository}@{digest}"
    signing: list[str | os.PathLike[str]] = ["--yes", "--key", key, tlog_flag(tlog)]
    run([cosign(), "sign", *signing, image], env=env)
    sbom = assets / f"{NAME}-{version}.cdx.json"
    run([cosign(), "attest", *signing, "--type", "cyclonedx", "--predicate", sbom, image], env=env)
    helm = find_binaries().helm
    chart_repo = f"{registry}/charts"
    ca = ["--ca-file", str(ca_file)] if ca_file else []
    pushed = run([helm, "push", assets / f"{NAME}-{version}.tgz", f"oci://{chart_repo}", *ca], with_stderr=True)
    chart = f"{chart_repo}/{NAME}@{pushed_chart_digest(pushed)}"
    run([cosign(), "sign", *signing, chart], env=env)
    return Published(image=image, chart=chart)


# ---------------------------------------------------------------------- the project's key
def keygen(out: Path, root: Path = REPO_ROOT) -> Path:
    """A new key pair for the project: the private key (COSIGN_PASSWORD encrypts it) into `out`, which
    must lie outside the repository, and its public half to `root`/cosign.pub, to commit. The release
    workflow takes the private key and its password from the secrets COSIGN_PRIVATE_KEY and
    COSIGN_PASSWORD and refuses to sign unless its public half is the committed cosign.pub."""
    out = out.resolve()
    if out == root or root in out.parents:
        raise ReleaseError(f"{out} is inside the repository: a private key is never committed")
    out.mkdir(parents=True, exist_ok=True)
    if (out / "cosign.key").exists():
        raise ReleaseError(f"{out / 'cosign.key'} exists already: keep it or move it away first")
    run([cosign(), "generate-key-pair", "--output-key-prefix", out / "cosign"], env=cosign_env())
    shutil.copyfile(out / "cosign.pub", root / "cosign.pub")
    return out / "cosign.key"


# ---------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.release", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tlog = {
        "action": argparse.BooleanOptionalAction,
        "default": True,
        "help": "record signatures in the public transparency log, Rekor (default: yes; the tests: no)",
    }
    b = commands.add_parser("build", help="build the release into --dist")
    b.add_argument("--dist", type=Path, default=REPO_ROOT / "dist" / "release")
    b.add_argument("--key", type=Path, help="cosign private key: sign SHA256SUMS")
    b.add_argument("--public-key", type=Path, help="refuse to sign unless the key's public half is this file")
    b.add_argument("--commit", help="build a past release from this commit (e.g. v0.1.0) with today's tools")
    b.add_argument(
        "--allow-dirty", action="store_true", help="build from uncommitted changes (never for a real release)"
    )
    b.add_argument(
        "--rebuild-image", action="store_true", help="build the image again even when cached (proves the digest)"
    )
    b.add_argument("--tlog-upload", **tlog)  # type: ignore[arg-type]
    p = commands.add_parser("push", help="push --dist's image and chart to --registry, sign and attest them")
    p.add_argument("--dist", type=Path, default=REPO_ROOT / "dist" / "release")
    p.add_argument("--registry", default=REGISTRY_PREFIX, help="host[:port][/path] (default %(default)s)")
    p.add_argument("--key", type=Path, required=True)
    p.add_argument("--ca-file", type=Path, help="the registry's CA, if not a public one")
    p.add_argument("--tlog-upload", **tlog)  # type: ignore[arg-type]
    k = commands.add_parser("keygen", help="a new project key pair: cosign.pub at the root, the private key in --out")
    k.add_argument("--out", type=Path, required=True, help="a directory outside the repository")
    n = commands.add_parser("notes", help="print CHANGELOG.md's section for a version")
    n.add_argument("version", nargs="?")
    commands.add_parser("version", help="print the one version")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(project_version())
        elif args.command == "notes":
            print(changelog_section(args.version or project_version()), end="")
        elif args.command == "build":
            commit = PAST_RELEASES.get(args.commit.removeprefix("v"), args.commit) if args.commit else None
            release = build(
                args.dist.resolve(),
                key=args.key,
                commit=commit,
                allow_dirty=args.allow_dirty,
                rebuild_image=args.rebuild_image,
                tlog=args.tlog_upload,
                public_key=args.public_key,
            )
            print(f"==> foo-operator {release.version} ({release.revision[:12]}) in {release.dist}")
            print((release.assets / CHECKSUMS).read_text(), end="")
            print(f"image digest {release.image_digest}")
        elif args.command == "push":
            published = push(
                args.dist.resolve(), args.registry, key=args.key, ca_file=args.ca_file, tlog=args.tlog_upload
            )
            print(f"==> pushed, signed and attested {published.image}; pushed and signed {published.chart}")
        else:
            key = keygen(args.out)
            print(f"==> {key} (the private key: into the secret COSIGN_PRIVATE_KEY, never into git)")
            print(f"==> {REPO_ROOT / 'cosign.pub'} (its public half: commit it)")
    except ReleaseError as err:
        print(f"hack.release: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
