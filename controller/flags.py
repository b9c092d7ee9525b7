"""Argument types shared by the controller's commands: each says in words what it wants."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kube.metricsserver import parse_bind_address


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def bind_address(flag: str) -> Callable[[str], tuple[str | None, int]]:
    """controller-runtime's ``host:port`` / ``:port`` / ``0`` for ``flag``, as (host, port)."""

    def parse(text: str) -> tuple[str | None, int]:
        try:
            return parse_bind_address(text, flag)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{flag} ")) from None

    return parse
