"""The kubectl plugin as krew ships plugins: one self-contained archive per platform, and the Plugin
manifest naming each archive's sha256.

The plugin is `kubectl foo-operator` (krew's naming guide: a vendor's prefix, not a generic word;
kubectl finds a plugin named `foo-operator` as the file `kubectl-foo_operator`). Each archive holds
one PEX file (pex: a zip of the plugin and every dependency, the versions pinned by hack/plugin.lock
with their hashes, the wheels of that platform for CPython 3.11, 3.12 and 3.13), the completion
launcher and the licence. A user needs a python3 of those versions on PATH and nothing else: no pip,
no venv, no network. The first run unpacks it under ~/.pex.

``release_plugin(source, version=..., out_dir=..., uri=...)`` is what a release calls: it writes
``kubectl-foo-operator-<version>-<os>-<arch>.tar.gz`` per platform, ``foo-operator.yaml`` (the
manifest for a krew index) and ``kubectl-foo-operator-<version>.cdx.json`` (the SBOM of what the
archives carry) into ``out_dir``.

    python -m hack.release.krew --source . --version 0.2.0 --out dist \\
        --uri 'https://github.com/foo-operator/foo-operator/releases/download/v0.2.0/{name}'
    python -m hack.release.krew lock      # hack/plugin.lock again, from pyproject.toml's dependencies (PyPI)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from hack.plane.binaries import cache_dir
from hack.release.sbom import Component, cyclonedx

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "foo-operator"  # `kubectl krew install foo-operator`, `kubectl foo-operator`
COMMAND = "kubectl-foo_operator"  # kubectl looks a plugin's dash up as an underscore
COMPLETION = "kubectl_complete-foo_operator"  # kubectl >= 1.26 runs it to complete `kubectl foo-operator ...`
HOMEPAGE = "https://github.com/foo-operator/foo-operator"
LOCK = REPO_ROOT / "hack" / "plugin.lock"
# krew's (os, arch) -> the wheels' platform tag. The tags are the oldest the locked wheels need.
PLATFORMS = {
    ("linux", "amd64"): "manylinux2014_x86_64",
    ("linux", "arm64"): "manylinux2014_aarch64",
    ("darwin", "amd64"): "macosx_11_0_x86_64",
    ("darwin", "arm64"): "macosx_11_0_arm64",
}
PYTHONS = ("3.11", "3.12", "3.13")  # requires-python's floor up to the newest pyproject.toml's classifiers claim
PIP_VERSION = "24.2"  # the pip pex resolves with (pex's own default is older than some wheels' metadata)
MTIME = 0  # every member's time: the same inputs make the same archive, byte for byte

_COMPLETION_LAUNCHER = """#!/bin/sh
# kubectl_complete-foo_operator: kubectl >= 1.26 runs it to complete `kubectl foo-operator ...`.
# The plugin's own PEX beside this file (followed through the link you made onto PATH), entered at
# its completion module.
self=$(python3 -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$0")
PEX_MODULE=kubectl_foo.completion:main exec python3 "$(dirname "$self")/kubectl-foo_operator" "$@"
"""


class PluginError(RuntimeError):
    """The plugin cannot be built as asked; the message is the one line the user sees."""


def _run(argv: Sequence[str | Path], *, cwd: Path | None = None) -> None:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=3600)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise PluginError(f"{Path(str(argv[0])).name} failed:\n{tail}")


def _pex_tool(name: str) -> Path:
    tool = Path(sys.executable).parent / name
    if not tool.is_file():
        raise PluginError(f"{tool} is missing: `make venv` installs pex (the test extra)")
    return tool


def locked_requirements(lock: Path = LOCK) -> list[tuple[str, str]]:
    """(name, version) of every distribution hack/plugin.lock pins."""
    resolve = json.loads(lock.read_text())["locked_resolves"][0]
    return sorted((r["project_name"], r["version"]) for r in resolve["locked_requirements"])


def _packages(source: Path) -> list[str]:
    """The product's packages (pyproject.toml's import-linter roots): what the wheel holds."""
    packages: list[str] = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["importlinter"][
        "root_packages"
    ]
    return packages


def _sources_digest(source: Path, lock: Path) -> str:
    digest = hashlib.sha256(lock.read_bytes() + (source / "pyproject.toml").read_bytes())
    for package in _packages(source):
        for path in sorted((source / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yaml", ".typed"):
                digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def plugin_pex(source: Path, os_: str, arch: str, *, lock: Path = LOCK) -> Path:
    """The PEX of the plugin in `source` for one platform, from the lock; cached by the sources' hash
    (two to three minutes each cold: pip resolves the lock once per Python version)."""
    out = cache_dir() / "share" / "plugin" / _sources_digest(source, lock) / f"{os_}-{arch}" / COMMAND
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="foo-operator-plugin-") as scratch:
        # A copy of the product's packages: setuptools writes build/ and *.egg-info beside them.
        project = Path(scratch) / "project"
        project.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(source / name, project / name)
        for package in _packages(source):
            shutil.copytree(source / package, project / package, ignore=shutil.ignore_patterns("__pycache__"))
        platforms = [
            arg
            for python in PYTHONS
            for arg in ("--platform", f"{PLATFORMS[(os_, arch)]}-cp-{python}.0-cp{python.replace('.', '')}")
        ]
        built = Path(scratch) / COMMAND
        _run(
            [_pex_tool("pex"), "--lock", lock, "--project", project, "--pip-version", PIP_VERSION, "-j", "1"]
            + platforms
            + ["-e", "kubectl_foo.__main__:main", "--python-shebang", "/usr/bin/env python3", "-o", built]
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(built, out.with_suffix(".tmp"))
        out.with_suffix(".tmp").rename(out)
    return out


def _member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, MTIME
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def archive_name(version: str, os_: str, arch: str) -> str:
    return f"kubectl-{PLUGIN}-{version}-{os_}-{arch}.tar.gz"


def plugin_archive(pex: Path, *, version: str, os_: str, arch: str, out_dir: Path) -> Path:
    """One platform's archive: the PEX, the completion launcher and the licence, reproducibly."""
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / archive_name(version, os_, arch)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, COMMAND, pex.read_bytes(), 0o755)
        _member(tar, COMPLETION, _COMPLETION_LAUNCHER.encode(), 0o755)
        _member(tar, "LICENSE", (REPO_ROOT / "LICENSE").read_bytes(), 0o644)
    # gzip's header holds a time and a name too: both fixed.
    with open(archive, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=MTIME, filename="") as gz:
        gz.write(raw.getvalue())
    return archive


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def krew_manifest(archives: dict[tuple[str, str], Path], *, version: str, uri: str) -> dict[str, Any]:
    """The krew index's Plugin: one entry per platform, its archive at `uri` (`{name}`: the file's name)."""
    platforms = [
        {
            "selector": {"matchLabels": {"os": os_, "arch": arch}},
            "uri": uri.format(name=archive.name),
            "sha256": sha256(archive),
            "bin": COMMAND,
            "files": [{"from": "*", "to": "."}],
        }
        for (os_, arch), archive in sorted(archives.items())
    ]
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "version": f"v{version.removeprefix('v')}",
            "homepage": HOMEPAGE,
            "shortDescription": "FooHealth, storage migration and CA expiry of foo-operator",
            "description": (
                "kubectl foo-operator shows the FooHealth of Foos (the insights aggregated API),\n"
                "migrates stored Foos to the storage version (migrate-storage), and lists when the\n"
                "CA of every caBundle through which the apiserver trusts foo-operator expires (certs).\n"
            ),
            "caveats": (
                "Needs python3 (3.11, 3.12 or 3.13) on PATH, nothing else: every dependency is\n"
                "inside, pinned. The first run unpacks it under ~/.pex (PEX_ROOT moves it).\n"
                "Shell completion (kubectl >= 1.26): link kubectl_complete-foo_operator from the\n"
                "plugin's directory (kubectl krew info foo-operator) onto your PATH.\n"
            ),
            "platforms": platforms,
        },
    }


def plugin_sbom(version: str, lock: Path = LOCK) -> dict[str, Any]:
    """CycloneDX of what every archive carries: the plugin's own distribution and each locked one."""
    components = [
        Component("pypi", name, pinned, f"pkg:pypi/{name}@{pinned}") for name, pinned in locked_requirements(lock)
    ]
    components.append(Component("pypi", "foo-operator", version, f"pkg:pypi/foo-operator@{version}"))
    return cyclonedx(components, name=f"kubectl-{PLUGIN}", version=version, epoch=MTIME, kind="application")


def release_plugin(
    source: Path,
    *,
    version: str,
    out_dir: Path,
    uri: str,
    platforms: Sequence[tuple[str, str]] = tuple(PLATFORMS),
) -> list[Path]:
    """Every platform's archive, the manifest (``foo-operator.yaml``) and the SBOM, into ``out_dir``."""
    archives = {
        (os_, arch): plugin_archive(plugin_pex(source, os_, arch), version=version, os_=os_, arch=arch, out_dir=out_dir)
        for os_, arch in platforms
    }
    manifest = out_dir / f"{PLUGIN}.yaml"
    manifest.write_text(yaml.safe_dump(krew_manifest(archives, version=version, uri=uri), sort_keys=False))
    sbom = out_dir / f"kubectl-{PLUGIN}-{version}.cdx.json"
    sbom.write_text(json.dumps(plugin_sbom(version), indent=1) + "\n")
    return [*archives.values(), manifest, sbom]


def lock(out: Path = LOCK) -> None:
    """hack/plugin.lock from pyproject.toml's dependencies: every artifact of every platform, hashed."""
    requirements = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor, newest = PYTHONS[0], PYTHONS[-1]
    newest_minor = int(newest.split(".")[1]) + 1
    _run(
        [_pex_tool("pex3"), "lock", "create", "--style", "universal", "--pip-version", PIP_VERSION]
        + ["--interpreter-constraint", f"CPython>={floor},<3.{newest_minor}"]
        + ["--target-system", "linux", "--target-system", "mac", "--indent", "1", "-o", out, *requirements]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.release.krew", description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", choices=["release", "lock"], default="release")
    p.add_argument("--source", type=Path, default=REPO_ROOT, help="the tree to build the plugin from")
    p.add_argument("--version", help="the release's version, e.g. 0.2.0")
    p.add_argument("--out", type=Path, help="directory for the archives, the manifest and the SBOM")
    p.add_argument("--uri", help="where each archive will be downloaded from; {name} is the file's name")
    args = p.parse_args(argv)
    try:
        if args.what == "lock":
            lock()
            print(f"wrote {LOCK}: {len(locked_requirements())} distributions pinned")
            return 0
        if not (args.version and args.out and args.uri):
            p.error("--version, --out and --uri are needed to build the plugin")
        for path in release_plugin(args.source, version=args.version, out_dir=args.out, uri=args.uri):
            print(f"wrote {path}")
    except PluginError as err:
        print(f"hack.release.krew: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
