"""The Foo controller: informers feed a rate-limited queue of Foo keys, N async workers reconcile them.

Informers run all the time (a standby replica keeps warm caches and is ready); workers run only
while this process leads, one queue per term. The worker loop is where reconcile outcomes become
queue operations, metrics and Warning events.
"""

from __future__ import annotations

import asyncio
import logging
import time

from apimachinery.objects import Object, namespaced_key
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.names import FOOS
from fooapi.projections import project_deployment, project_foo
from fooapi.views import BY_DEPLOYMENT, DeploymentView, deployment_index
from kube.client import DEPLOYMENTS, FencedWrite, KubeClient
from kube.events import EventRecorder
from kube.informer import Informer, compact, object_key, split_key
from kube.metrics import Metrics
from kube.workqueue import ShutDown, WorkQueue

from .outcomes import Done, PermanentFailure, ReconcileOutcome, Retry, RetryAfter, result_label
from .reconciler import FooReconciler

log = logging.getLogger(__name__)

NAME = "foo"


def cached_foo(foo: Object) -> Object:
    """What the controller keeps of a Foo (``fooapi.projections``: bounded, no labels), its
    strings shared (``compact``): 10,000 Foos in ~150 MiB, a tenant's megabyte Foo in a kilobyte."""
    projected: Object = compact(project_foo(foo))
    return projected


def cached_deployment(deployment: Object) -> Object:
    """What the controller keeps of a Deployment: its owner, and if a Foo's, what reconcile reads."""
    projected: Object = compact(project_deployment(deployment))
    return projected


def owning_foo_key(deployment: Object) -> str | None:
    """The key of the Foo that controls ``deployment``, whatever version its reference names."""
    view = DeploymentView(deployment)
    foo = view.controlling_foo
    return namespaced_key(view.namespace, foo) if foo else None


def namespace_of(key: str) -> str:
    """The queue's flow of a Foo key: namespaces are served in turn."""
    return split_key(key)[0] or ""


class FooController:
    """Owns the Foo and Deployment informers, the reconciler and, while leading, the workers."""

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        *,
        namespace: str | None = None,
        workers: int = 16,
        default_image: str = DEFAULT_IMAGE,
        metrics: Metrics | None = None,
    ) -> None:
        self.recorder = recorder
        self.workers = workers
        self.metrics = metrics
        self.foos = Informer(
            client,
            FOOS,
            namespace=namespace,
            indexers={BY_DEPLOYMENT: deployment_index},
            transform=cached_foo,
            metrics=metrics,
        )
        self.deployments = Informer(
            client,
            DEPLOYMENTS,
            namespace=namespace,
            transform=cached_deployment,
            metrics=metrics,
        )
        self.reconciler = FooReconciler(
            client,
            self.foos.store,
            self.deployments.store,
            recorder,
            default_image=default_image,
            project_foo=cached_foo,
            project_deployment=cached_deployment,
        )
        self.foos.add_handler(self._on_foo, self._on_foo_update, self._on_foo_delete)
        self.deployments.add_handler(self._on_deployment, self._on_deployment_update, self._on_deployment_delete)
        self._queue: WorkQueue[str] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        if metrics is not None:
            metrics.max_concurrent_reconciles.labels(NAME).set(workers)
            metrics.active_workers.labels(NAME).set(0)

    @property
    def informers(self) -> tuple[Informer, Informer]:
        return (self.foos, self.deployments)

    @property
    def synced(self) -> bool:
        return all(informer.has_synced for informer in self.informers)

    @property
    def queue(self) -> WorkQueue[str] | None:
        """The current term's queue (None while not leading)."""
        return self._queue

    # ---- event handlers: turn changes into Foo keys -----------------------------------------

    def _enqueue(self, key: str) -> None:
        if self._queue is not None:
            self._queue.add(key)

    def _on_foo(self, foo: Object) -> None:
        self._enqueue(object_key(foo))

    def _on_foo_update(self, old: Object, new: Object) -> None:
        key = object_key(new)
        if not self.reconciler.recent_foos.observe(key, new, old):  # our own status write needs no look
            self._enqueue(key)

    def _on_foo_delete(self, foo: Object) -> None:
        key = object_key(foo)
        self.reconciler.recent_foos.forget(key)
        self._enqueue(key)

    # A Deployment change reconciles its owner only: the Foos that merely name it were refused
    # (ErrResourceExists, once, in their status) and nothing about the Deployment changes that,
    # but its deletion, which lets one of them create it. 5,000 Foos naming one Deployment that
    # a tenant edits every second cost 5,000 reconciles an edit when every one was told.

    def _on_deployment(self, deployment: Object, previous: Object | None = None) -> None:
        if self.reconciler.recent_deployments.observe(object_key(deployment), deployment, previous):
            return  # our own create or patch coming back: the reconcile that wrote it judged it
        owner = owning_foo_key(deployment)
        if owner is not None:
            self._enqueue(owner)

    def _on_deployment_update(self, old: Object, new: Object) -> None:
        if DeploymentView(old).resource_version == DeploymentView(new).resource_version:
            return  # a resync, not a change
        self._on_deployment(new, old)
        previous = owning_foo_key(old)
        if previous is not None and previous != owning_foo_key(new):
            self._enqueue(previous)  # it lost its Deployment: it must say so

    def _on_deployment_delete(self, deployment: Object) -> None:
        self.reconciler.recent_deployments.forget(object_key(deployment))
        keys = self.foos.store.index_keys(BY_DEPLOYMENT, object_key(deployment))
        owner = owning_foo_key(deployment)
        if owner is not None:
            keys.add(owner)
        for key in keys:
            self._enqueue(key)

    # ---- workers -----------------------------------------------------------------------------

    def start_workers(self) -> WorkQueue[str]:
        """Begin a term: a fresh queue holding every cached Foo, and the worker tasks."""
        if self._queue is not None:
            raise RuntimeError("workers are already running")
        queue: WorkQueue[str] = WorkQueue(NAME, flow_of=namespace_of, metrics=self.metrics)
        self._queue = queue
        for key in self.foos.store.keys():
            queue.add(key)
        self._tasks = [asyncio.create_task(self._worker(queue), name=f"worker-{i}") for i in range(self.workers)]
        log.info("started %d workers with %d Foos queued", self.workers, len(queue))
        return queue

    async def stop_workers(self, grace: float = 30.0) -> None:
        """End a term: take no more work, let in-flight reconciles finish (cancel after ``grace``)."""
        queue, self._queue = self._queue, None
        if queue is None:
            return
        in_flight = len(queue.processing)
        queue.shutdown(discard_queued=True)
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        log.info("stopping workers: waiting for %d in-flight reconciles", in_flight)
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d reconciles still running after %.0fs", len(pending), grace)
            await asyncio.gather(*pending, return_exceptions=True)

    async def _worker(self, queue: WorkQueue[str]) -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                await self.process(queue, key)
            finally:
                queue.done(key)

    async def process(self, queue: WorkQueue[str], key: str) -> ReconcileOutcome:
        """Reconcile ``key`` and map the outcome onto the queue (the only place that does)."""
        if self.metrics is not None:
            self.metrics.active_workers.labels(NAME).inc()
        started = time.monotonic()
        try:
            outcome = await self.reconciler.reconcile(key)
        except asyncio.CancelledError:
            raise
        except FencedWrite as exc:
            # This replica may no longer lead: the term is over. Hand out no more keys (the next
            # term, ours or another replica's, starts from every cached Foo); reconciles still in
            # flight meet the fence at their next write.
            if not queue.shutting_down:
                log.warning("%s: not written, ending this term's work: %s", key, exc, extra={"key": key})
                queue.shutdown(discard_queued=True)
            outcome = Retry(f"not written: {exc}")
        except Exception as exc:  # a bug, not a cluster condition: back off and say so loudly
            log.exception("%s: reconcile crashed", key, extra={"key": key})
            outcome = Retry(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            if self.metrics is not None:
                self.metrics.active_workers.labels(NAME).dec()
        elapsed = time.monotonic() - started

        if isinstance(outcome, Done):
            queue.forget(key)
            log.debug("%s: done (%s) in %.3fs", key, outcome.note, elapsed, extra={"key": key})
        elif isinstance(outcome, RetryAfter):
            queue.forget(key)
            queue.add_after(key, outcome.delay)
            log.info("%s: retrying in %.1fs: %s", key, outcome.delay, outcome.reason, extra={"key": key})
        elif isinstance(outcome, Retry) and queue.shutting_down:
            log.debug("%s: not retried, the term is over: %s", key, outcome.reason, extra={"key": key})
        elif isinstance(outcome, Retry):
            requeues = queue.num_requeues(key)
            queue.add_rate_limited(key)
            log.warning("%s: retrying (attempt %d): %s", key, requeues + 1, outcome.reason, extra={"key": key})
        elif isinstance(outcome, PermanentFailure):
            queue.forget(key)
            foo = self.foos.store.get(key)
            if outcome.already_reported:
                log.debug("%s: still refused: %s", key, outcome.reason, extra={"key": key})
            else:
                if foo is not None:
                    self.recorder.event(foo, "Warning", outcome.reason, outcome.message)
                log.warning("%s: not retrying: %s: %s", key, outcome.reason, outcome.message, extra={"key": key})

        if self.metrics is not None:
            self.metrics.reconcile_total.labels(NAME, result_label(outcome)).inc()
            self.metrics.reconcile_time_seconds.labels(NAME).observe(elapsed)
            if isinstance(outcome, Retry | PermanentFailure):
                self.metrics.reconcile_errors_total.labels(NAME).inc()
        return outcome
