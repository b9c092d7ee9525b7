"""Which kubeconfig a command uses: client-go's loading rules (clientcmd ``ClientConfigLoadingRules``).

Written here because kubernetes_asyncio's merger differs from kubectl in ways a user sees: the
*last* file's current-context wins there, and a missing ``$KUBECONFIG`` entry is a warning about
all of them. The rules, as client-go documents them:

* ``--kubeconfig`` given: that file alone, and it must exist.
* else every path in ``$KUBECONFIG`` (``:``-separated, empty entries and duplicates dropped,
  missing files ignored), else ``~/.kube/config``;
* merged so that the first file to set a map key (a cluster, user or context name) wins, and that
  entry is taken whole — nothing of a later file's entry of the same name survives; the first
  file to set current-context wins;
* relative file references inside a file are resolved against that file's directory;
* only when that yields nothing at all does the in-cluster service account apply.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

Config = dict[str, Any]

NAMED_LISTS = ("clusters", "users", "contexts")
# The fields client-go resolves against the file's directory (GetClusterFileReferences,
# GetAuthInfoFileReferences).
CLUSTER_FILES = ("certificate-authority",)
USER_FILES = ("client-certificate", "client-key", "tokenFile")


class KubeconfigError(Exception):
    """A kubeconfig that cannot be used: one line for the user."""


@dataclass(frozen=True)
class Loaded:
    """The merged configuration and the files it came from (for messages)."""

    config: Config
    files: tuple[Path, ...]

    @property
    def empty(self) -> bool:
        return not any(self.config.get(key) for key in NAMED_LISTS) and not self.config.get("current-context")


def precedence(explicit: str | None, environ: Mapping[str, str], home: Path) -> tuple[list[Path], bool]:
    """The files to read, and whether a missing one is an error (only an explicit path's is)."""
    if explicit:
        return [Path(explicit).expanduser()], True
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        return list(dict.fromkeys(paths)), False
    return [home / ".kube" / "config"], False


def resolve_paths(config: Mapping[str, Any], base: Path) -> Config:
    """A copy of ``config`` whose relative file references are absolute under ``base``."""

    def resolve(entry: Mapping[str, Any], key: str, fields: Sequence[str]) -> Any:
        body = dict(entry.get(key) or {})
        for name in fields:
            value = body.get(name)
            if isinstance(value, str) and value and not os.path.isabs(value):
                body[name] = str(base / value)
        exec_ = body.get("exec")
        if (
            isinstance(exec_, dict)
            and os.sep in str(exec_.get("command", ""))
            and not os.path.isabs(str(exec_["command"]))
        ):
            body["exec"] = {**exec_, "command": str(base / str(exec_["command"]))}
        return {**entry, key: body}

    out = dict(config)
    out["clusters"] = [resolve(c, "cluster", CLUSTER_FILES) for c in _named(config, "clusters")]
    out["users"] = [resolve(u, "user", USER_FILES) for u in _named(config, "users")]
    out["contexts"] = list(_named(config, "contexts"))
    return out


def merge(configs: Sequence[Mapping[str, Any]]) -> Config:
    """client-go's merge: the first file to set a name (or current-context) wins, whole."""
    merged: Config = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for config in configs:
        for key in NAMED_LISTS:
            taken = {entry["name"] for entry in merged[key]}
            merged[key] += [entry for entry in _named(config, key) if entry["name"] not in taken]
        if not merged.get("current-context") and config.get("current-context"):
            merged["current-context"] = config["current-context"]
    return merged


def _named(config: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    entries = config.get(key) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"{key} is not a list")
    return [e for e in entries if isinstance(e, Mapping) and e.get("name")]


def read(path: Path) -> Config:
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise KubeconfigError(f"{path}: not YAML: {' '.join(str(err).split())}") from None
    except OSError as err:
        raise KubeconfigError(f"{path}: {err.strerror or err}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping)")
    return loaded


def _home() -> Path:
    """The user's home; a pod's user often has none (no passwd entry, no $HOME): then '/'.

    Path.home() raises there, and the in-cluster fallback must still be reached.
    """
    home = os.path.expanduser("~")
    return Path("/" if home.startswith("~") else home)


def load(explicit: str | None = None, environ: Mapping[str, str] = os.environ, home: Path | None = None) -> Loaded:
    """Read and merge the files the rules name; raises KubeconfigError with one line."""
    paths, must_exist = precedence(explicit, environ, home or _home())
    configs: list[Config] = []
    files: list[Path] = []
    for path in paths:
        if not path.is_file():
            if must_exist:
                raise KubeconfigError(f"kubeconfig {path}: no such file")
            continue
        try:
            configs.append(resolve_paths(read(path), path.absolute().parent))
        except KubeconfigError as err:
            raise KubeconfigError(f"{path}: {err}" if not str(err).startswith(str(path)) else str(err)) from None
        files.append(path)
    return Loaded(merge(configs), tuple(files))


def context_namespace(config: Mapping[str, Any], context: str | None = None) -> str | None:
    """The namespace the context (default: current-context) names, as kubectl's -n defaults to."""
    wanted = context or config.get("current-context")
    for entry in _named(config, "contexts"):
        if entry["name"] == wanted:
            namespace = (entry.get("context") or {}).get("namespace")
            return str(namespace) if namespace else None
    return None
