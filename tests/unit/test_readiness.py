"""What `/readyz` says (serving.readiness): ready, or one line naming why not."""

from __future__ import annotations

from serving.readiness import CERTIFICATE_LOADED, Readiness


def test_readyz_names_the_check_that_failed() -> None:
    # Before: a check was a bare lambda, and `/readyz` answered "<lambda> failed".
    readiness = Readiness(serving=True, checks={CERTIFICATE_LOADED: lambda: False})
    assert readiness.ready() == (False, "certificate-loaded failed")


def test_ready_once_serving_with_every_check_passing() -> None:
    readiness = Readiness(checks={CERTIFICATE_LOADED: lambda: True})
    assert readiness.ready() == (False, "not serving yet")
    readiness.set_serving()
    assert readiness.ready() == (True, "ok")


def test_draining_is_not_ready_whatever_the_checks_say() -> None:
    readiness = Readiness(serving=True, checks={CERTIFICATE_LOADED: lambda: True})
    readiness.set_draining()
    assert readiness.ready() == (False, "shutting down")
