"""What a reconcile can end in. The worker loop, not the reconciler, maps them onto the queue."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Done:
    """Converged (or nothing left to do): forget the key until the next change."""

    note: str = ""


@dataclass(frozen=True)
class Retry:
    """A transient failure: requeue with per-item exponential backoff."""

    reason: str


@dataclass(frozen=True)
class RetryAfter:
    """Look again after ``delay`` seconds (e.g. the apiserver asked us to wait)."""

    delay: float
    reason: str


@dataclass(frozen=True)
class PermanentFailure:
    """Retrying will not help until something changes: Warning event, no requeue.

    ``already_reported``: the Foo's status said so before this reconcile, and its Warning was
    recorded then; a Foo is told once, not on every look (a new term, a Deployment deleted).
    """

    reason: str
    message: str
    already_reported: bool = False


ReconcileOutcome = Done | Retry | RetryAfter | PermanentFailure


def result_label(outcome: ReconcileOutcome) -> str:
    """controller-runtime's ``result`` label of controller_runtime_reconcile_total."""
    if isinstance(outcome, Done):
        return "success"
    if isinstance(outcome, RetryAfter):
        return "requeue_after"
    return "error"
