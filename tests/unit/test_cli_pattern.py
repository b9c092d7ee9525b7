"""Every command follows one pattern (componentbase.cli): --version, defaults shown in --help, one-line
mistakes, the same argument types; and the webhook's hint for missing certificates works as printed."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import certs.__main__ as certs_main
import controller.cli
import controller.settings
import insights.__main__ as insights_main
import kubectl_foo.__main__ as kubectl_foo_main
import webhook.command as webhook_main
from componentbase.cli import env_default, pod_namespace, version
from serving.lifecycle import check_serving_flags

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "foo-operator-webhook": webhook_main.parser,
    "foo-operator-insights": insights_main.parser,
    "foo-operator-controller": controller.settings.parser,
    "foo-operator-certs": certs_main.parser,
    "foo-operator": controller.cli.parser,
    "kubectl-foo_operator": kubectl_foo_main.parser,
    "kubectl-foo": kubectl_foo_main.parser,  # the plugin's name before 0.3, an alias
}
# kubectl shows a plugin by the command a user types.
SHOWN_AS = {"kubectl-foo_operator": "kubectl foo-operator", "kubectl-foo": "kubectl foo-operator"}


# Not commands a person types: kubectl runs it with the words to complete and reads Cobra's
# completion protocol back (tests/unit/test_kubectl_foo_flags.py, tests/e2e/test_kubectl_plugin.py).
PROTOCOL_ENDPOINTS = {"kubectl_complete-foo_operator", "kubectl_complete-foo"}


def console_scripts() -> list[str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return sorted(set(scripts) - PROTOCOL_ENDPOINTS)


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_every_console_script_has_a_parser_under_test() -> None:
    assert sorted(PARSERS) == console_scripts()


@pytest.mark.parametrize("script", console_scripts())
def test_every_command_prints_its_version(script: str) -> None:
    done = subprocess.run([BIN / script, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, f"{SHOWN_AS.get(script, script)} {version()}")


@pytest.mark.parametrize("script", sorted(PARSERS))
def test_every_default_is_shown_in_help(script: str) -> None:
    for parser in every_parser(PARSERS[script]()):
        text = parser.format_help()
        for action in parser._actions:
            if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
                continue
            help_text = parser._get_formatter()._expand_help(action) if action.help else ""
            assert "default" in help_text, f"{parser.prog} {action.option_strings[0]} hides its default"
            assert help_text.split()[0] in text


@pytest.mark.parametrize("script", sorted(PARSERS))
def test_every_option_says_what_it_is_for(script: str) -> None:
    for parser in every_parser(PARSERS[script]()):
        for action in parser._actions:
            assert action.help, f"{parser.prog} {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["foo-operator-webhook", "--cert-dir", "/x", "--port", "seventy"], "--port"),
        (["foo-operator-controller", "--workers", "0"], "--workers"),
        (["foo-operator", "migrate-storage", "--qps", "-1"], "--qps"),
        (["foo-operator-certs", "generate", "--service", "Bad_Name", "--namespace", "n", "--out", "/x"], "--service"),
    ],
)
def test_a_command_line_mistake_is_one_line_and_exit_2(argv: list[str], flag: str) -> None:
    done = subprocess.run([BIN / argv[0], *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and flag in done.stderr and "Traceback" not in done.stderr


def test_environment_fallbacks_apply_only_when_set_and_not_empty() -> None:
    assert env_default("MEMORY_LIMIT_MIB", "256", {"MEMORY_LIMIT_MIB": "512"}) == "512"
    assert env_default("MEMORY_LIMIT_MIB", "256", {"MEMORY_LIMIT_MIB": ""}) == "256"
    assert env_default("MEMORY_LIMIT_MIB", "256", {}) == "256"


def test_the_webhook_takes_its_memory_limit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_LIMIT_MIB", "512")
    assert webhook_main.parse_args(["--cert-dir", "/x"]).memory_limit_mib == 512
    assert webhook_main.parse_args(["--cert-dir", "/x", "--memory-limit-mib", "64"]).memory_limit_mib == 64


def test_the_pod_namespace_is_client_gos(tmp_path: Path) -> None:
    file = tmp_path / "namespace"
    assert pod_namespace({"POD_NAMESPACE": "from-env"}, file) == "from-env"
    assert pod_namespace({}, file) == "default"
    file.write_text("from-file\n")
    assert pod_namespace({}, file) == "from-file"


@pytest.mark.parametrize("extra", [[], ["--cert-name", "serving.pem", "--key-name", "serving-key.pem"]])
@pytest.mark.parametrize("leftover", [None, "tls.crt"])
def test_the_hint_for_missing_certificates_works_as_printed(
    tmp_path: Path, extra: list[str], leftover: str | None
) -> None:
    cert_dir = tmp_path / "a dir with spaces"
    if leftover:  # half a pair from an earlier run
        cert_dir.mkdir()
        (cert_dir / leftover).write_text("stale")
    args = webhook_main.parse_args(["--cert-dir", str(cert_dir), *extra])
    problem = check_serving_flags(args, webhook_main.PROG, service=args.service, namespace=args.namespace)
    assert problem is not None and "make a pair with: " in problem
    command = problem.split("make a pair with: ", 1)[1].removesuffix(")")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert check_serving_flags(args, webhook_main.PROG, service=args.service, namespace=args.namespace) is None
