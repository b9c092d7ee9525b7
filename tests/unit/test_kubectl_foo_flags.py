"""kubectl's flags in `kubectl foo-operator`: -o name|jsonpath|custom-columns, -l, --as, --request-timeout,
completion, and kubectl's words for a wrong --context and an unreachable server."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kube.client import ApiError, no_answer
from kube.config import ClientSettings, load_api_client
from kube.kubeconfig import KubeconfigError
from kubectl_foo import completion, health, jsonpath, output
from kubectl_foo.__main__ import main, request_timeout, subcommand_first

HEALTHS: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"metadata": {"name": "web", "labels": {"app": "web"}}, "status": {"ready": True, "replicas": 2}},
        {"metadata": {"name": "db"}, "status": {"ready": False, "replicas": 1}},
    ],
}


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        ("{.items[*].metadata.name}", "web db"),
        ('{range .items[*]}{.metadata.name}{"\\t"}{.status.replicas}{"\\n"}{end}', "web\t2\ndb\t1\n"),
        ("{.items[?(@.status.ready==true)].metadata.name}", "web"),
        ("{.items[?(@.status.replicas>1)].metadata.name}", "web"),
        ("{.items[?(@.metadata.labels.app)].metadata.name}", "web"),
        ("{.items[-1].metadata.name}", "db"),
        ("{.items[0].metadata.labels}", '{"app":"web"}'),
        ("{..name}", "web db"),
        ("{.items[*].status.missing}", ""),
        ("name: {.items[0].metadata.name}", "name: web"),
    ],
)
def test_jsonpath_prints_what_kubectl_prints(template: str, printed: str) -> None:
    assert jsonpath.render(template, HEALTHS) == printed


@pytest.mark.parametrize("template", ["{.items[*]", "{range .items[*]}{.metadata.name}", "{end}", "{.items[x]}"])
def test_a_broken_template_is_a_usage_error(template: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="error parsing jsonpath="):
        output.output_format(f"jsonpath={template}")


def test_output_name_is_resource_dot_group_slash_name() -> None:
    printed = output.objects(HEALTHS["items"], HEALTHS, "name", resource=health.RESOURCE)
    assert printed == (
        "foohealth.insights.samplecontroller.k8s.io/web\nfoohealth.insights.samplecontroller.k8s.io/db\n"
    )


def test_custom_columns_are_a_table_with_none_for_a_missing_value() -> None:
    spec = "custom-columns=NAME:.metadata.name,APP:.metadata.labels.app"
    assert output.output_format(spec) == spec
    printed = output.objects(HEALTHS["items"], HEALTHS, spec, resource=health.RESOURCE)
    assert printed == "NAME   APP\nweb    web\ndb     <none>\n"


def test_jsonpath_may_be_quoted_or_bare_as_kubectl_takes_it() -> None:
    for spec in ("jsonpath='{.kind}'", "jsonpath=.kind", "jsonpath={.kind}"):
        assert output.objects([], HEALTHS, output.output_format(spec), resource="") == "List"


def test_an_unknown_output_format_names_the_allowed_ones() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match='output format "xml", allowed formats are: custom-col'):
        output.output_format("xml")


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("5", 5.0), ("1s", 1.0), ("2m", 120.0), ("500ms", 0.5)])
def test_request_timeout_reads_kubectls_durations(value: str, seconds: float) -> None:
    assert request_timeout(value) == seconds


def test_a_bad_request_timeout_is_kubectls_message() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="^Invalid timeout value. Timeout must be a single integer"):
        request_timeout("soon")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["health", "web", "-l", "app=web"], "error: name cannot be provided when a selector is specified"),
        (["health", "--as-group", "admins"], "error: requesting uid, groups or user-extra for "),
        (["health", "-o", "jsonpath={.items[*]"], "error parsing jsonpath="),
    ],
)
def test_flag_mistakes_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and len(err.splitlines()) == 1, err


def _kubeconfig(tmp_path: Path, server: str = "http://127.0.0.1:9") -> Path:
    path = tmp_path / "config"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
            }
        )
    )
    return path


def test_a_missing_context_is_said_in_kubectls_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--kubeconfig", str(_kubeconfig(tmp_path)), "--context", "nope"]) == 1
    assert capsys.readouterr().err == "Error in configuration: context was not found for specified context: nope\n"


@pytest.mark.parametrize("command", ["health", "certs", "migrate-storage"])
@pytest.mark.parametrize("before", [True, False], ids=["flags-before-the-command", "flags-after-it"])
def test_every_command_says_a_missing_context_in_kubectls_words(
    command: str, before: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--kubeconfig", str(_kubeconfig(tmp_path)), "--context=nope"]
    assert main([*flags, command] if before else [command, *flags]) == 1
    assert capsys.readouterr().err == "Error in configuration: context was not found for specified context: nope\n"


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["--context", "prod", "health", "web"], ["health", "--context", "prod", "web"]),
        (["-n", "team", "--as=jane", "health", "-o", "name"], ["health", "-n", "team", "--as=jane", "-o", "name"]),
        (["health", "--context", "prod"], ["health", "--context", "prod"]),
        # No command after them: argparse answers about what follows, not "invalid choice: 'prod'".
        (["--context", "prod"], []),
        (["--context", "prod", "--version"], ["--version"]),
        (["--context", "prod", "--bogus", "health"], ["--bogus", "health"]),
    ],
)
def test_kubectls_global_flags_may_come_before_the_command_as_kubectl_takes_them(
    argv: list[str], parsed: list[str]
) -> None:
    assert subcommand_first(argv) == parsed


def test_as_group_without_as_names_the_kubeconfig_user_as_kubectl_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["health", "--kubeconfig", str(_kubeconfig(tmp_path)), "--as-group", "admins"])
    assert capsys.readouterr().err == "error: requesting uid, groups or user-extra for u without impersonating a user\n"


def test_the_library_never_sees_a_missing_context(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="^context was not found for specified context: nope$"):
        asyncio.run(load_api_client(str(_kubeconfig(tmp_path)), context="nope"))


def test_an_unreachable_server_is_the_same_line_as_migrate_storages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["health", "--kubeconfig", str(_kubeconfig(tmp_path)), "--request-timeout", "5s"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the apiserver at http://127.0.0.1:9: ") and err.count("\n") == 1
    assert (
        no_answer(ApiError(0, {"message": "x"}, server="https://h:6443"))
        == "cannot reach the apiserver at https://h:6443: x"
    )


def test_impersonation_sends_one_header_per_group(tmp_path: Path) -> None:
    async def headers() -> list[tuple[str, str]]:
        settings = ClientSettings(impersonate_user="jane", impersonate_groups=("devs", "ops"))
        api = await load_api_client(str(_kubeconfig(tmp_path)), settings=settings)
        try:
            return list(api.rest_client.pool_manager.headers.items())
        finally:
            await api.close()

    assert asyncio.run(headers()) == [
        ("Impersonate-User", "jane"),
        ("Impersonate-Group", "devs"),
        ("Impersonate-Group", "ops"),
    ]


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        ([""], ["health", "migrate-storage", "certs"]),
        (["he"], ["health"]),
        (["health", "-o", "js"], ["json", "jsonpath="]),
        (["health", "--se"], ["--selector"]),
        (["certs", "--req"], ["--request-timeout"]),
    ],
)
def test_completion_offers_subcommands_flags_and_formats(words: list[str], offered: list[str]) -> None:
    assert completion.candidates(words) == (offered, completion.NO_FILE_COMPLETION)


def test_completion_of_a_template_format_leaves_no_space(capsys: pytest.CaptureFixture[str]) -> None:
    assert completion.main(["health", "-o", "custom"]) == 0
    assert capsys.readouterr().out == "custom-columns=\n:6\n"


def test_completion_of_contexts_reads_the_kubeconfig(tmp_path: Path) -> None:
    words = ["health", "--kubeconfig", str(_kubeconfig(tmp_path)), "--context", ""]
    assert completion.candidates(words) == (["c"], completion.NO_FILE_COMPLETION)


def test_completion_without_a_cluster_offers_no_names_and_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert completion.main(["health", "--kubeconfig", str(_kubeconfig(tmp_path)), ""]) == 0
    assert capsys.readouterr() == (":4\n", "")
