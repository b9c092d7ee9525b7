"""One release command: everything a user installs, from a clean checkout, into a dist directory.

    python -m hack.release build [--dist DIR] [--key cosign.key] [--commit REF] [--allow-dirty]
    python -m hack.release push  --dist DIR --registry HOST[/PATH] --key cosign.key [--ca-file CA]
    python -m hack.release notes [VERSION]      # CHANGELOG.md's section for a version
    python -m hack.release version              # the one version (pyproject.toml)

`build` writes, for the version in pyproject.toml (the one version source: the chart's `version`
and `appVersion`, every command's `--version` and the image tag follow it, and a unit test holds
them together):

    foo-operator-<v>.oci.tar        the image (hack/image.sh: the same inputs give the same digest)
    foo-operator-<v>.cdx.json       its SBOM (CycloneDX: every Debian package and Python distribution)
    foo-operator-<v>.tgz            the chart (`helm package`)
    foo-operator-<v>.tgz.sig        the chart's cosign signature (with --key)
    RELEASE_NOTES.md                CHANGELOG.md's section for <v>
    release.json                    version, image digest, the files
    SHA256SUMS                      sha256sum of every file above (`sha256sum -c SHA256SUMS`)

`--commit REF` builds a past release from that commit's tree with today's tools (0.1.0 was cut
before this command existed; its commit is PAST_RELEASES'). `push` copies the image and the chart
to a registry (`<registry>/foo-operator:<v>`, `oci://<registry>/charts/foo-operator`) and signs
the image there with cosign. The kubectl plugin's krew archive and manifest (hack/krew.py) are
built beside them; every builder in ARTIFACTS adds its files before the checksums are written.
"""

from __future__ import annotations

import argparse
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

from hack import krew
from hack.binaries import cache_dir, find_binaries, versions

REPO_ROOT = Path(__file__).resolve().parent.parent
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
    rebuild_image: bool = False  # hack/image.sh --force: build again rather than take the cached archive
    files: list[Path] = field(default_factory=list)
    image_digest: str = ""


Builder = Callable[[Release], None]


def run(argv: Sequence[str | os.PathLike[str]], *, env: dict[str, str] | None = None, timeout: float = 3600) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise ReleaseError(f"{Path(str(argv[0])).name} {' '.join(map(str, argv[1:3]))} failed:\n{tail}")
    return result.stdout


def cosign() -> Path:
    path = cache_dir() / "bin" / f"cosign-{versions()['COSIGN_VERSION']}" / "cosign"
    if not path.is_file():
        raise ReleaseError(f"{path} is missing: run `bash hack/build.sh release`")
    return path


def cosign_env() -> dict[str, str]:
    # A key made for the test has an empty password; a real one comes from COSIGN_PASSWORD.
    return {"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")}


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
    image = release.dist / f"{NAME}-{release.version}.oci.tar"
    sbom = release.dist / f"{NAME}-{release.version}.cdx.json"
    shutil.copyfile(meta["archive"], image)
    shutil.copyfile(meta["sbom"], sbom)
    release.image_digest = meta["digest"]
    release.files += [image, sbom]


def build_chart(release: Release) -> None:
    helm = find_binaries().helm
    run([helm, "package", release.source / "charts" / NAME, "--destination", release.dist])
    chart = release.dist / f"{NAME}-{release.version}.tgz"
    if not chart.is_file():
        raise ReleaseError(f"helm package wrote no {chart.name}: is the chart's version {release.version}?")
    release.files.append(chart)
    if release.key:
        signature = chart.with_name(chart.name + ".sig")
        sign: list[str | os.PathLike[str]] = [cosign(), "sign-blob", "--yes", "--key", release.key]
        run([*sign, "--tlog-upload=false", "--output-signature", signature, chart], env=cosign_env())
        release.files.append(signature)


def write_notes(release: Release) -> None:
    # Today's CHANGELOG.md, also for a past release built from its commit: it has every section.
    notes = release.dist / "RELEASE_NOTES.md"
    notes.write_text(f"# foo-operator {release.version}\n\n" + changelog_section(release.version))
    release.files.append(notes)


def build_plugin(release: Release) -> None:
    """The kubectl plugin's krew archive and manifest (hack/krew.py), from this release's wheel."""
    with tempfile.TemporaryDirectory(prefix="foo-operator-wheel-") as wheels:
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, release.source])
        (wheel,) = Path(wheels).glob("*.whl")
        name = f"kubectl-{krew.PLUGIN}-{release.version}.tar.gz"
        uri = f"{krew.HOMEPAGE}/releases/download/v{release.version}/{name}"
        archive, manifest = krew.release_plugin(wheel, version=release.version, out_dir=release.dist, uri=uri)
    release.files += [archive, manifest]


# Run in order; a builder that needs another's output comes after it.
ARTIFACTS: list[Builder] = [build_image, build_chart, build_plugin, write_notes]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(release: Release) -> None:
    manifest = release.dist / "release.json"
    manifest.write_text(
        json.dumps(
            {
                "version": release.version,
                "revision": release.revision,
                "image": {"digest": release.image_digest, "archive": f"{NAME}-{release.version}.oci.tar"},
                "files": sorted(p.name for p in release.files),
            },
            indent=1,
        )
        + "\n"
    )
    release.files.append(manifest)
    lines = [f"{sha256(p)}  {p.name}\n" for p in sorted(release.files, key=lambda p: p.name)]
    (release.dist / "SHA256SUMS").write_text("".join(lines))


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


def build(
    dist: Path, *, key: Path | None, commit: str | None = None, allow_dirty: bool = False, rebuild_image: bool = False
) -> Release:
    with tempfile.TemporaryDirectory(prefix="foo-operator-release-") as scratch:
        source, revision, epoch = source_tree(commit, allow_dirty, Path(scratch))
        version = project_version(source)
        if chart_versions(source) != (version, version):
            raise ReleaseError(f"Chart.yaml's version/appVersion {chart_versions(source)} are not {version}")
        changelog_section(version)  # fail before the long part
        dist.mkdir(parents=True, exist_ok=True)
        names = ("SHA256SUMS", "release.json", "RELEASE_NOTES.md", f"{krew.PLUGIN}.yaml")
        for stale in [*dist.glob(f"{NAME}-*"), *dist.glob(f"kubectl-{krew.PLUGIN}-*"), *(dist / n for n in names)]:
            stale.unlink(missing_ok=True)  # an earlier build's files: SHA256SUMS lists this build's alone
        release = Release(version, source, dist, revision, epoch, key=key, rebuild_image=rebuild_image)
        for builder in ARTIFACTS:
            builder(release)
        write_checksums(release)
    return release


# ---------------------------------------------------------------------- push
@dataclass(frozen=True)
class Published:
    image: str  # <registry>/foo-operator@sha256:...
    chart: str  # oci://<registry>/charts/foo-operator


def push(dist: Path, registry: str, *, key: Path, ca_file: Path | None = None) -> Published:
    """Copy the built image and chart to `registry` (host[:port][/path]) and sign the image there."""
    meta = json.loads((dist / "release.json").read_text())
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
    run(
        ["skopeo", "copy", "--quiet", "--preserve-digests", *tls]
        + [f"oci-archive:{dist / meta['image']['archive']}", f"docker://{repository}:{version}"]
    )
    image = f"{repository}@{digest}"
    run([cosign(), "sign", "--yes", "--key", key, "--tlog-upload=false", image], env=env)
    helm = find_binaries().helm
    chart_repo = f"oci://{registry}/charts"
    run([helm, "push", dist / f"{NAME}-{version}.tgz", chart_repo, *(["--ca-file", str(ca_file)] if ca_file else [])])
    return Published(image=image, chart=f"{chart_repo}/{NAME}")


# ---------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.release", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="build the release into --dist")
    b.add_argument("--dist", type=Path, default=REPO_ROOT / "dist" / "release")
    b.add_argument("--key", type=Path, help="cosign private key: sign the chart")
    b.add_argument("--commit", help="build a past release from this commit (e.g. v0.1.0) with today's tools")
    b.add_argument(
        "--allow-dirty", action="store_true", help="build from uncommitted changes (never for a real release)"
    )
    b.add_argument(
        "--rebuild-image", action="store_true", help="build the image again even when cached (proves the digest)"
    )
    p = commands.add_parser("push", help="push --dist's image and chart to --registry and sign the image")
    p.add_argument("--dist", type=Path, default=REPO_ROOT / "dist" / "release")
    p.add_argument("--registry", default=REGISTRY_PREFIX, help="host[:port][/path] (default %(default)s)")
    p.add_argument("--key", type=Path, required=True)
    p.add_argument("--ca-file", type=Path, help="the registry's CA, if not a public one")
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
            )
            print(f"==> foo-operator {release.version} ({release.revision[:12]}) in {release.dist}")
            print((release.dist / "SHA256SUMS").read_text(), end="")
            print(f"image digest {release.image_digest}")
        else:
            published = push(args.dist.resolve(), args.registry, key=args.key, ca_file=args.ca_file)
            print(f"==> pushed {published.image} and {published.chart}")
    except ReleaseError as err:
        print(f"hack.release: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
