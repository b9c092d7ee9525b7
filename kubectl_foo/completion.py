"""``kubectl_complete-foo_operator``: shell completion of ``kubectl foo-operator`` (kubectl >= 1.26 runs it).

kubectl finds this executable next to ``kubectl-foo_operator`` on PATH and runs it with the words typed
after ``kubectl foo-operator``, the last one being the word to complete (``""`` for a new word). It prints
one candidate per line, then Cobra's directive line (``:4``: no file names). Subcommands and flags
come from the plugin's own parser, so they never drift; Foo names, namespaces and contexts come
from the cluster and the kubeconfig, with a short timeout, and nothing at all when either fails
(completion must never print an error into the user's command line).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from kube.client import KubeClient
from kube.config import ClientSettings, connect
from kube.kubeconfig import context_namespace, load

from .__main__ import parser
from .output import FORMATS

NO_FILE_COMPLETION = 4  # cobra.ShellCompDirectiveNoFileComp
NO_SPACE = 2  # cobra.ShellCompDirectiveNoSpace: `-o jsonpath=` goes on with the template
TIMEOUT = 3.0  # seconds: a completion that waits longer than this is worse than none


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _value_flags(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions if a.option_strings and a.nargs != 0 for s in a.option_strings}


def _flags(p: argparse.ArgumentParser) -> list[str]:
    return [s for a in p._actions for s in a.option_strings if s.startswith("--")]


def _value_of(words: Sequence[str], *flags: str) -> str | None:
    for i, word in enumerate(words):
        for flag in flags:
            if word == flag and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(flag + "="):
                return word.split("=", 1)[1]
    return None


async def _names(path: str, kubeconfig: str | None, context: str | None) -> list[str]:
    client: KubeClient = await connect(
        kubeconfig, context=context, settings=ClientSettings(user_agent="kubectl-foo-operator", timeout=TIMEOUT)
    )
    async with client:
        answer = await client.request("GET", path, timeout=TIMEOUT)
    return sorted(str((item.get("metadata") or {}).get("name", "")) for item in answer.get("items") or ())


def _from_cluster(path: str, words: Sequence[str]) -> list[str]:
    try:
        return asyncio.run(_names(path, _value_of(words, "--kubeconfig"), _value_of(words, "--context")))
    except Exception:  # no cluster, no rights, no kubeconfig: no candidates, never a message
        return []


def candidates(words: Sequence[str]) -> tuple[list[str], int]:
    """What to offer for ``words`` (the last one being completed) and Cobra's directive."""
    *typed, current = words or [""]
    root = parser()
    commands = _subcommands(root)
    command = next((w for w in typed if w in commands), None)
    if command is None:
        offered = list(commands) if not current.startswith("-") else ["--help", "--version"]
        return [c for c in offered if c.startswith(current)], NO_FILE_COMPLETION
    sub = commands[command]
    previous = typed[-1] if typed else ""
    if previous in _value_flags(sub):
        return _flag_values(previous, current, typed)
    if current.startswith("-"):
        return [f for f in _flags(sub) if f.startswith(current)], NO_FILE_COMPLETION
    if command == "health" and _positional_free(typed, sub):
        namespace = _value_of(typed, "-n", "--namespace") or _default_namespace(typed)
        names = _from_cluster(f"/apis/samplecontroller.k8s.io/v1/namespaces/{namespace}/foos", typed)
        return [n for n in names if n.startswith(current)], NO_FILE_COMPLETION
    return [], NO_FILE_COMPLETION


def _positional_free(typed: Sequence[str], sub: argparse.ArgumentParser) -> bool:
    """True while `health` has no NAME yet: every word after it is a flag or a flag's value."""
    value_flags, words = _value_flags(sub), list(typed[typed.index("health") + 1 :])
    i = 0
    while i < len(words):
        if words[i] in value_flags:
            i += 2
            continue
        if not words[i].startswith("-"):
            return False
        i += 1
    return True


def _default_namespace(typed: Sequence[str]) -> str:
    try:
        config = load(_value_of(typed, "--kubeconfig")).config
    except Exception:
        return "default"
    return context_namespace(config, _value_of(typed, "--context")) or "default"


def _flag_values(flag: str, current: str, typed: Sequence[str]) -> tuple[list[str], int]:
    if flag in ("-o", "--output"):
        offered = [o for o in (*FORMATS, "jsonpath=", "custom-columns=") if o.startswith(current)]
        templates_only = bool(offered) and all(o.endswith("=") for o in offered)
        return offered, NO_FILE_COMPLETION | (NO_SPACE if templates_only else 0)
    if flag in ("-n", "--namespace"):
        names = _from_cluster("/api/v1/namespaces", typed)
        return [n for n in names if n.startswith(current)], NO_FILE_COMPLETION
    if flag == "--context":
        try:
            contexts = [str(c.get("name")) for c in load(_value_of(typed, "--kubeconfig")).config.get("contexts") or ()]
        except Exception:
            contexts = []
        return [c for c in contexts if c.startswith(current)], NO_FILE_COMPLETION
    if flag == "--kubeconfig":
        return [], 0  # cobra.ShellCompDirectiveDefault: the shell completes file names
    return [], NO_FILE_COMPLETION


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    offered, directive = candidates(words)
    sys.stdout.write("".join(f"{c}\n" for c in offered) + f":{directive}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
