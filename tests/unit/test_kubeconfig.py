"""kube.kubeconfig follows client-go's documented loading rules (clientcmd ClientConfigLoadingRules).

Each test names the rule it checks, in client-go's words where it has them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.config import load_configuration
from kube.kubeconfig import KubeconfigError, load, merge, precedence, resolve_paths


def kubeconfig(
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, dict[str, Any]] | None = None,
    current: str | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [{"name": n, "context": c} for n, c in (contexts or {}).items()],
    }
    if current is not None:
        config["current-context"] = current
    return config


def write(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def named(config: dict[str, Any], key: str) -> dict[str, Any]:
    return {entry["name"]: entry for entry in config[key]}


# ---- which files ----------------------------------------------------------------------------------


def test_an_explicit_path_is_the_only_file_loaded_and_kubeconfig_is_ignored(tmp_path: Path) -> None:
    paths, must_exist = precedence("/a/explicit", {"KUBECONFIG": "/b:/c"}, tmp_path)
    assert paths == [Path("/a/explicit")] and must_exist


def test_kubeconfig_lists_files_in_order_without_empty_entries_or_duplicates(tmp_path: Path) -> None:
    paths, must_exist = precedence(None, {"KUBECONFIG": f"/one{os.pathsep}{os.pathsep}/two{os.pathsep}/one"}, tmp_path)
    assert paths == [Path("/one"), Path("/two")] and not must_exist


def test_without_kubeconfig_the_home_file_is_read(tmp_path: Path) -> None:
    assert precedence(None, {}, tmp_path) == ([tmp_path / ".kube" / "config"], False)


def test_a_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="no such file"):
        load(str(tmp_path / "absent"), {}, tmp_path)


def test_missing_files_in_kubeconfig_are_ignored(tmp_path: Path) -> None:
    there = write(tmp_path / "there", kubeconfig(clusters={"c": {"server": "https://c"}}, current="x"))
    loaded = load(None, {"KUBECONFIG": f"{tmp_path / 'absent'}{os.pathsep}{there}"}, tmp_path)
    assert loaded.files == (there,) and named(loaded.config, "clusters")["c"]["cluster"]["server"] == "https://c"


def test_a_file_that_is_not_a_kubeconfig_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(KubeconfigError, match=f"{bad}: not a kubeconfig"):
        load(None, {"KUBECONFIG": str(bad)}, tmp_path)
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeconfigError, match="not YAML"):
        load(None, {"KUBECONFIG": str(bad)}, tmp_path)


def test_no_file_at_all_loads_an_empty_config(tmp_path: Path) -> None:
    assert load(None, {}, tmp_path).empty


# ---- how they merge ---------------------------------------------------------------------------------


def test_the_first_file_to_set_a_map_key_wins_and_its_entry_is_taken_whole() -> None:
    first = kubeconfig(users={"red-user": {"token": "red-token"}})
    second = kubeconfig(users={"red-user": {"token": "other", "client-key": "/k"}, "black-user": {"token": "b"}})
    users = named(merge([first, second]), "users")
    # "if two files specify a red-user, only values from the first file's red-user are used.
    # Even non-conflicting entries from the second file's red-user are discarded."
    assert users["red-user"]["user"] == {"token": "red-token"}
    assert users["black-user"]["user"] == {"token": "b"}


def test_clusters_and_contexts_merge_by_name_like_users() -> None:
    first = kubeconfig(clusters={"a": {"server": "https://first"}}, contexts={"x": {"cluster": "a"}})
    second = kubeconfig(
        clusters={"a": {"server": "https://second"}, "b": {"server": "https://b"}},
        contexts={"x": {"cluster": "b"}, "y": {"cluster": "b"}},
    )
    merged = merge([first, second])
    assert {n: e["cluster"]["server"] for n, e in named(merged, "clusters").items()} == {
        "a": "https://first",
        "b": "https://b",
    }
    assert {n: e["context"]["cluster"] for n, e in named(merged, "contexts").items()} == {"x": "a", "y": "b"}


def test_the_first_file_to_set_current_context_wins() -> None:
    assert merge([kubeconfig(), kubeconfig(current="second"), kubeconfig(current="third")])["current-context"] == (
        "second"
    )
    assert "current-context" not in merge([kubeconfig(), kubeconfig()])


def test_relative_paths_resolve_against_the_directory_of_the_file_that_named_them(tmp_path: Path) -> None:
    config = kubeconfig(
        clusters={"c": {"server": "https://c", "certificate-authority": "ca.crt"}},
        users={
            "u": {
                "client-certificate": "certs/u.crt",
                "client-key": "/abs/u.key",
                "tokenFile": "token",
                "exec": {"command": "./bin/auth"},
            },
            "v": {"exec": {"command": "kubelogin"}},
        },
    )
    resolved = resolve_paths(config, tmp_path / "dir")
    assert named(resolved, "clusters")["c"]["cluster"]["certificate-authority"] == str(tmp_path / "dir" / "ca.crt")
    user = named(resolved, "users")["u"]["user"]
    assert user["client-certificate"] == str(tmp_path / "dir" / "certs" / "u.crt")
    assert user["client-key"] == "/abs/u.key"  # absolute paths stay
    assert user["tokenFile"] == str(tmp_path / "dir" / "token")
    assert user["exec"]["command"] == str(tmp_path / "dir" / "bin" / "auth")
    assert named(resolved, "users")["v"]["user"]["exec"]["command"] == "kubelogin"  # looked up on PATH


def test_each_file_resolves_against_its_own_directory_when_merged(tmp_path: Path) -> None:
    one = write(tmp_path / "one" / "config", kubeconfig(clusters={"a": {"certificate-authority": "ca"}}))
    two = write(tmp_path / "two" / "config", kubeconfig(clusters={"b": {"certificate-authority": "ca"}}))
    merged = load(None, {"KUBECONFIG": f"{one}{os.pathsep}{two}"}, tmp_path).config
    cas = {n: e["cluster"]["certificate-authority"] for n, e in named(merged, "clusters").items()}
    assert cas == {"a": str(tmp_path / "one" / "ca"), "b": str(tmp_path / "two" / "ca")}


# ---- the client configuration -----------------------------------------------------------------------


def two_files(tmp_path: Path) -> str:
    """Context and user in one file, the cluster in another: only a merge can connect."""
    one = write(
        tmp_path / "contexts",
        kubeconfig(users={"u": {"token": "t0ken"}}, contexts={"ctx": {"cluster": "c", "user": "u"}}, current="ctx"),
    )
    two = write(
        tmp_path / "clusters", kubeconfig(clusters={"c": {"server": "https://10.0.0.9:6443"}}, current="ignored")
    )
    return f"{one}{os.pathsep}{two}"


async def test_every_file_in_kubeconfig_takes_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", two_files(tmp_path))
    configuration = await load_configuration()
    assert configuration.host == "https://10.0.0.9:6443"
    assert configuration.api_key["BearerToken"] == "Bearer t0ken"


async def test_kubeconfig_is_preferred_over_the_in_cluster_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", two_files(tmp_path))
    assert (await load_configuration()).host == "https://10.0.0.9:6443"


async def test_in_cluster_applies_only_when_no_kubeconfig_file_gives_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    # Not in a pod, the service account's files are missing: the in-cluster loader's own error
    # shows that it, not a kubeconfig, was tried.
    with pytest.raises(Exception, match="[Ss]ervice"):
        await load_configuration()


async def test_nothing_to_load_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KubeconfigError, match="no cluster configured .* and not running in a cluster"):
        await load_configuration()


async def test_an_unknown_context_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", two_files(tmp_path))
    with pytest.raises(KubeconfigError, match="nope"):
        await load_configuration(context="nope")


def test_a_user_without_a_home_still_reaches_the_in_cluster_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's uid often has no passwd entry and no $HOME: no error, just no home file."""
    import kube.kubeconfig

    monkeypatch.setattr(kube.kubeconfig.os.path, "expanduser", lambda path: path)  # what Python does there
    assert load(None, {}).empty


def test_the_contexts_namespace_is_the_default_namespace_as_in_kubectl() -> None:
    from kube.kubeconfig import context_namespace

    config = merge(
        [kubeconfig(contexts={"a": {"cluster": "c", "namespace": "team-a"}, "b": {"cluster": "c"}}, current="a")]
    )
    assert context_namespace(config) == "team-a"
    assert context_namespace(config, "b") is None  # kubectl then uses "default"
    assert context_namespace(config, "missing") is None
