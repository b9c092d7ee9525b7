"""Reconcile one Foo by key, from the informer caches: sample-controller's syncHandler, done properly.

Read ``_sync`` top to bottom for the contract: get the Foo, get or create its Deployment, refuse
a Deployment someone else owns, fix drift in replicas and image, write status, record an event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import fooapi
from apimachinery.errors import aggregate_message
from apimachinery.objects import Object, ObjectView
from fooapi.defaults import DEFAULT_IMAGE
from fooapi.names import FOOS
from fooapi.projections import project_deployment, project_foo
from fooapi.views import DeploymentView, FooView
from kube.client import DEPLOYMENTS, ApiError, KubeClient, Projection
from kube.events import EventRecorder, wire_time
from kube.informer import Store, split_key
from kube.recent import RecentWrites

from .deployment import desired_deployment, drift_patch
from .outcomes import Done, PermanentFailure, ReconcileOutcome, Retry, RetryAfter
from .status import Problem, desired_status, status_changed

log = logging.getLogger(__name__)

# The reasons and messages sample-controller's users already know.
SUCCESS_SYNCED = "Synced"
MESSAGE_RESOURCE_SYNCED = "Foo synced successfully"
ERR_RESOURCE_EXISTS = "ErrResourceExists"
MESSAGE_RESOURCE_EXISTS = 'Resource "%s" already exists and is not managed by Foo'
INVALID_SPEC = "InvalidSpec"
MESSAGE_NO_DEPLOYMENT_NAME = "spec.deployment.name must be specified"
DEPLOYMENT_REJECTED = "DeploymentRejected"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def outcome_for(exc: ApiError) -> ReconcileOutcome:
    """An apiserver error as a reconcile outcome: throttling waits as told, the rest backs off."""
    if exc.status == 429 or exc.retry_after is not None:
        return RetryAfter(exc.retry_after or 1.0, f"{exc.status} {exc.reason}: {exc.message}")
    return Retry(f"{exc.status} {exc.reason}: {exc.message}" if exc.message else f"{exc.status} {exc.reason}")


class FooReconciler:
    """Turns a Foo key into at most one Deployment write and one status write."""

    def __init__(
        self,
        client: KubeClient,
        foos: Store,
        deployments: Store,
        recorder: EventRecorder,
        *,
        default_image: str = DEFAULT_IMAGE,
        wall_clock: Callable[[], datetime] = _utcnow,
        project_foo: Projection = project_foo,
        project_deployment: Projection = project_deployment,
    ) -> None:
        self.client = client
        # What the caches keep of each kind; our writes' answers are kept the same way.
        self.project_foo = project_foo
        self.project_deployment = project_deployment
        self.foos = foos
        self.deployments = deployments
        self.recorder = recorder
        self.default_image = default_image
        self._wall_clock = wall_clock
        # Our own writes, until the informers deliver them (see kube.recent).
        self.recent_foos = RecentWrites()
        self.recent_deployments = RecentWrites()

    async def reconcile(self, key: str) -> ReconcileOutcome:
        try:
            return await self._sync(key)
        except ApiError as exc:
            return outcome_for(exc)

    async def _sync(self, key: str) -> ReconcileOutcome:
        foo = self.recent_foos.resolve(key, self.foos.get(key))
        if foo is None:
            return Done("Foo is gone")
        view = FooView(foo)
        if view.deleting:
            # Being deleted (e.g. foreground cascade): the garbage collector removes the
            # Deployment; re-creating it would fight the collector until the Foo is gone.
            return Done("Foo is being deleted")
        namespace, _ = split_key(key)
        if view.refused:
            # A field past the cache's bound: the Foo is not what the cache holds, so nothing
            # is done with it but say so (its conditions, a Warning Event).
            return await self._refuse(key, foo, Problem(INVALID_SPEC, view.refused))

        name = view.deployment_name
        if name is None:
            return await self._refuse(key, foo, Problem(INVALID_SPEC, MESSAGE_NO_DEPLOYMENT_NAME))
        # What the webhook and the CRD schema refuse never becomes a Deployment, even when both
        # were skipped (an excluded namespace, a Foo stored before the bounds, failurePolicy
        # Ignore): a Foo asking for 100,000 replicas is reported, and its Deployment left as it is.
        errors = fooapi.validate({**foo, "apiVersion": fooapi.HUB_API_VERSION})
        if errors:
            return await self._refuse(key, foo, Problem(INVALID_SPEC, aggregate_message(errors)))

        deployment_key = f"{namespace}/{name}"
        deployment = self.recent_deployments.resolve(deployment_key, self.deployments.get(deployment_key))
        wrote = False
        if deployment is None:
            created = await self._create_deployment(key, foo, deployment_key)
            if isinstance(created, PermanentFailure):
                return created
            deployment, wrote = created, True

        if not DeploymentView(deployment).controlled_by(view):
            return await self._refuse(key, foo, Problem(ERR_RESOURCE_EXISTS, MESSAGE_RESOURCE_EXISTS % name))

        patch = drift_patch(foo, deployment, default_image=self.default_image)
        if patch is not None:
            deployment = await self._fix_drift(key, deployment_key, deployment, patch)
            wrote = True

        newly_observed = view.observed_generation != view.generation
        try:
            status_written = await self._write_status(key, foo, deployment)
        except ApiError as exc:
            if exc.not_found:
                return Done("Foo is gone")
            raise

        # sample-controller records Synced after every sync; we do only when the sync wrote the
        # Deployment or observed a new generation, so a quiet cluster stays free of writes.
        if wrote or newly_observed:
            self.recorder.event(foo, "Normal", SUCCESS_SYNCED, MESSAGE_RESOURCE_SYNCED)
        if wrote:
            return Done("Deployment written")
        return Done("status updated" if status_written else "in sync")

    async def _create_deployment(self, key: str, foo: Object, deployment_key: str) -> Object | PermanentFailure:
        desired = desired_deployment(foo, default_image=self.default_image)
        namespace = desired["metadata"]["namespace"]
        try:
            with self.recent_deployments.writing(deployment_key, None):
                created = await self.client.create(
                    DEPLOYMENTS, desired, namespace=namespace, project=self.project_deployment
                )
        except ApiError as exc:
            if exc.status in (400, 422):  # the Deployment itself is invalid: retrying will not fix it
                return PermanentFailure(DEPLOYMENT_REJECTED, f"Deployment {deployment_key} rejected: {exc.message}")
            raise  # AlreadyExists: our cache is behind; backing off lets the informer catch up
        self.recent_deployments.remember(deployment_key, None, created, cached=self.deployments.get(deployment_key))
        log.info(
            "%s: created Deployment %s (replicas %s, image %s)",
            key,
            deployment_key,
            desired["spec"]["replicas"],
            desired["spec"]["template"]["spec"]["containers"][0]["image"],
            extra={"key": key},
        )
        return created

    async def _fix_drift(self, key: str, deployment_key: str, deployment: Object, patch: Object) -> Object:
        namespace, name = split_key(deployment_key)
        # Preconditions: the patch applies to the Deployment we judged or not at all (409, and
        # the retry judges it afresh). uid: it was not replaced meanwhile by someone else's of the
        # same name, which is not ours to touch. resourceVersion: nobody changed it since, so a
        # patch from stale state (a leader that was frozen while the user scaled) cannot undo
        # a newer one.
        patch = {"metadata": _preconditions(deployment), **patch}
        with self.recent_deployments.writing(deployment_key, deployment):
            patched = await self.client.patch(
                DEPLOYMENTS, name, patch, namespace=namespace, patch_type="strategic", project=self.project_deployment
            )
        self.recent_deployments.remember(
            deployment_key, deployment, patched, cached=self.deployments.get(deployment_key)
        )
        log.info("%s: reverted drift of Deployment %s: %s", key, deployment_key, patch["spec"], extra={"key": key})
        return patched

    async def _write_status(
        self, key: str, foo: Object, deployment: Object | None, problem: Problem | None = None
    ) -> bool:
        status = desired_status(foo, deployment, now=wire_time(self._wall_clock()), problem=problem)
        if not status_changed(foo, status):
            return False
        namespace, name = split_key(key)
        # Judged from this resourceVersion: a Foo changed meanwhile gets a 409 and a fresh look,
        # never a status of an older generation over a newer one.
        patch = {"metadata": _preconditions(foo, uid=False), "status": status}
        with self.recent_foos.writing(key, foo):
            written = await self.client.patch(
                FOOS, name, patch, namespace=namespace, subresource="status", project=self.project_foo
            )
        self.recent_foos.remember(key, foo, written, cached=self.foos.get(key))
        log.debug("%s: status written: %s", key, _summary(status), extra={"key": key})
        return True

    async def _refuse(self, key: str, foo: Object, problem: Problem) -> ReconcileOutcome:
        """Leave things as they are, say why in the Foo's conditions; the worker records the Warning
        when that is news (the status changed), so a refused Foo is told once."""
        try:
            written = await self._write_status(key, foo, None, problem)
        except ApiError as exc:
            if exc.not_found:
                return Done("Foo is gone")
            raise
        return PermanentFailure(problem.reason, problem.message, already_reported=not written)


def _preconditions(obj: Object, *, uid: bool = True) -> Object:
    """``metadata`` for a patch that the apiserver applies only to this very version of ``obj``."""
    view = ObjectView(obj)
    preconditions: Object = {"uid": view.uid} if uid and view.uid else {}
    if view.resource_version:
        preconditions["resourceVersion"] = view.resource_version
    return preconditions


def _summary(status: Object) -> str:
    conditions = ", ".join(f"{c['type']}={c['status']}({c['reason']})" for c in status.get("conditions", ()))
    return (
        f"generation {status.get('observedGeneration')}, replicas {status.get('replicas')} "
        f"(ready {status.get('readyReplicas')}, available {status.get('availableReplicas')}), {conditions}"
    )
