"""controller.reconciler and the worker loop: the syncHandler contract against in-memory caches."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from apimachinery.resources import Resource
from attacks.objects import foo_v1
from controller.controller import FooController
from controller.outcomes import Done, PermanentFailure, Retry, RetryAfter
from controller.reconciler import FooReconciler
from fooapi.images import MAX_LENGTH as IMAGE_MAX_LENGTH
from fooapi.projections import project_foo
from kube.client import ApiError, FencedWrite
from kube.informer import Store
from kube.metrics import metrics_for
from kube.workqueue import ShutDown, WorkQueue

UID = "uid-foo"
DEPLOYMENT_UID = "uid-deployment"
NOW = datetime(2025, 1, 1, tzinfo=UTC)


def cached_foo(
    replicas: int = 2, image: str = "nginx:latest", generation: int = 1, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Foo ns/f in the informer's cache."""
    return foo_v1(
        "f",
        namespace="ns",
        deployment="web",
        image=image,
        replicas=replicas,
        uid=UID,
        generation=generation,
        resource_version="1",
        status=status,
    )


class FakeApi:
    """Records writes; answers like the apiserver would (the whole object), or with a scripted error."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any]] = []
        self.fail: dict[str, ApiError] = {}
        self.objects: dict[str, dict[str, Any]] = {}  # plural -> the one object of that kind
        self.rv = 100

    def _answer(self, verb: str, plural: str, obj: dict[str, Any], project: Any = None) -> dict[str, Any]:
        if verb in self.fail:
            raise self.fail[verb]
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[plural] = obj
        answer = copy.deepcopy(obj)
        return project(answer) if project is not None else answer

    async def create(
        self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None, project: Any = None
    ) -> dict[str, Any]:
        self.writes.append(("create", resource.plural, body))
        return self._answer("create", resource.plural, body, project)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        project: Any = None,
        **_: Any,
    ) -> dict[str, Any]:
        verb = "patch-status" if subresource == "status" else "patch"
        self.writes.append((verb, resource.plural, patch))
        current = copy.deepcopy(self.objects[resource.plural])
        if subresource == "status":
            current["status"] = patch["status"]
        else:
            current["spec"].update({k: v for k, v in patch["spec"].items() if k != "template"})
        return self._answer(verb, resource.plural, current, project)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def event(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.recorded.append((type_, reason, message))


def world(
    the_foo: dict[str, Any] | None, deployment: dict[str, Any] | None = None
) -> tuple[FooReconciler, FakeApi, Events]:
    foos, deployments = Store(), Store()
    if the_foo is not None:
        foos.put("ns/f", the_foo)
    if deployment is not None:
        deployments.put("ns/web", deployment)
    api, events = FakeApi(), Events()
    for plural, obj in (("foos", the_foo), ("deployments", deployment)):
        if obj is not None:
            api.objects[plural] = copy.deepcopy(obj)
    reconciler = FooReconciler(api, foos, deployments, events, wall_clock=lambda: NOW)  # type: ignore[arg-type]
    return reconciler, api, events


def live_deployment(
    replicas: int = 2,
    image: str = "nginx:latest",
    owner_uid: str | None = UID,
    available: int = 2,
    owner_version: str = "v1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "ns", "uid": DEPLOYMENT_UID, "resourceVersion": "50"}
    if owner_uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": f"samplecontroller.k8s.io/{owner_version}",
                "kind": "Foo",
                "name": "f",
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}},
        "status": {
            "replicas": replicas,
            "readyReplicas": available,
            "availableReplicas": available,
            "conditions": [
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": ""}
            ],
        },
    }


def synced_status(replicas: int = 2, available: int = 2) -> dict[str, Any]:
    reconciler, api, _ = world(cached_foo(replicas), live_deployment(replicas, available=available))
    return reconciler_status(reconciler)


def reconciler_status(reconciler: FooReconciler) -> dict[str, Any]:
    from controller.status import desired_status

    foo_obj = reconciler.foos.get("ns/f")
    assert foo_obj is not None
    return desired_status(foo_obj, reconciler.deployments.get("ns/web"), now="2025-01-01T00:00:00Z")


async def test_a_foo_that_is_gone_is_done_without_writes() -> None:
    reconciler, api, events = world(None)
    assert await reconciler.reconcile("ns/f") == Done("Foo is gone")
    assert api.writes == [] and events.recorded == []


async def test_a_foo_being_deleted_gets_no_new_deployment() -> None:
    deleting = cached_foo()
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    reconciler, api, _ = world(deleting)
    assert await reconciler.reconcile("ns/f") == Done("Foo is being deleted")
    assert api.writes == []


async def test_a_missing_deployment_is_created_then_status_written_and_synced_recorded() -> None:
    reconciler, api, events = world(cached_foo())
    outcome = await reconciler.reconcile("ns/f")
    assert isinstance(outcome, Done)
    assert [w[:2] for w in api.writes] == [("create", "deployments"), ("patch-status", "foos")]
    created = api.writes[0][2]
    assert created["metadata"]["ownerReferences"][0]["uid"] == UID
    status = api.writes[1][2]["status"]
    assert status["observedGeneration"] == 1 and status["availableReplicas"] == 0
    assert events.recorded == [("Normal", "Synced", "Foo synced successfully")]


async def test_a_second_reconcile_before_the_cache_sees_our_create_does_not_create_again() -> None:
    reconciler, api, _ = world(cached_foo())
    await reconciler.reconcile("ns/f")
    await reconciler.reconcile("ns/f")  # caches still empty/stale
    assert [w[0] for w in api.writes] == ["create", "patch-status"]


async def test_a_converged_foo_costs_zero_writes_and_zero_events() -> None:
    reconciler, api, events = world(cached_foo(status=synced_status()), live_deployment())
    assert await reconciler.reconcile("ns/f") == Done("in sync")
    assert api.writes == [] and events.recorded == []


@pytest.mark.parametrize(
    ("deployment", "patch"),
    [
        (
            live_deployment(replicas=5),
            {"metadata": {"uid": DEPLOYMENT_UID, "resourceVersion": "50"}, "spec": {"replicas": 2}},
        ),
        (
            live_deployment(image="nginx:1.0"),
            {
                "metadata": {"uid": DEPLOYMENT_UID, "resourceVersion": "50"},
                "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}},
            },
        ),
    ],
    ids=["replicas", "image"],
)
async def test_drift_is_reverted_with_a_patch_of_only_that_field_on_the_deployment_judged(
    deployment: dict[str, Any], patch: dict[str, Any]
) -> None:
    reconciler, api, events = world(cached_foo(status=synced_status()), deployment)
    assert isinstance(await reconciler.reconcile("ns/f"), Done)
    assert api.writes[0] == ("patch", "deployments", patch)
    assert ("Normal", "Synced", "Foo synced successfully") in events.recorded


async def test_sample_controllers_deployment_is_adopted_without_any_change() -> None:
    reconciler, api, _ = world(cached_foo(status=synced_status()), live_deployment(owner_version="v1alpha1"))
    assert await reconciler.reconcile("ns/f") == Done("in sync")
    assert api.writes == []


async def test_a_foreign_deployment_is_left_alone_and_reported() -> None:
    reconciler, api, events = world(cached_foo(), live_deployment(replicas=7, owner_uid=None))
    outcome = await reconciler.reconcile("ns/f")
    assert outcome == PermanentFailure("ErrResourceExists", 'Resource "web" already exists and is not managed by Foo')
    assert [w[0] for w in api.writes] == ["patch-status"]  # the Deployment is never written
    ready = api.writes[0][2]["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "ErrResourceExists")
    assert events.recorded == []  # the worker loop records the Warning for a PermanentFailure


async def test_a_deployment_owned_by_a_previous_foo_of_the_same_name_is_foreign() -> None:
    reconciler, api, _ = world(cached_foo(), live_deployment(owner_uid="uid-of-a-deleted-foo"))
    assert isinstance(await reconciler.reconcile("ns/f"), PermanentFailure)
    assert all(w[0] == "patch-status" for w in api.writes)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": 100000}, "spec.replicas: Invalid value: 100000: must be less than or equal to 10"),
        ({"replicas": 0}, "spec.replicas: Invalid value: 0: must be greater than or equal to 1"),
        (
            {"deployment": {"name": "Web_1", "image": "nginx:latest"}},
            'spec.deployment.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain',
        ),
    ],
)
async def test_a_foo_the_schema_would_refuse_gets_no_deployment_write_and_says_why(
    spec: dict[str, Any], message: str
) -> None:
    # As if stored where no webhook looked (an excluded namespace, before the CRD had bounds).
    the_foo = cached_foo()
    the_foo["spec"].update(spec)
    reconciler, api, _ = world(the_foo, live_deployment())
    outcome = await reconciler.reconcile("ns/f")
    assert isinstance(outcome, PermanentFailure) and outcome.reason == "InvalidSpec"
    assert outcome.message.startswith(message)
    assert [w[0] for w in api.writes] == ["patch-status"]  # the Deployment keeps its 2 replicas
    ready = api.writes[0][2]["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")


async def test_a_foo_whose_image_the_cache_refused_gets_no_deployment_and_says_why() -> None:
    # Issue #34: the cache keeps no image past its bound; acting on the rest would create a
    # Deployment of the default image. The Foo's conditions and a Warning say why instead.
    reconciler, api, _ = world(project_foo(cached_foo(image="nginx:" + "1" * 10_000)))
    outcome = await reconciler.reconcile("ns/f")
    assert outcome == PermanentFailure(
        "InvalidSpec", f"spec.deployment.image: Too long: must have at most {IMAGE_MAX_LENGTH} bytes"
    )
    assert [w[0] for w in api.writes] == ["patch-status"]
    ready = api.writes[0][2]["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")


async def test_a_foo_without_deployment_name_fails_for_good() -> None:
    the_foo = cached_foo()
    the_foo["spec"]["deployment"] = {}
    reconciler, _, _ = world(the_foo)
    assert await reconciler.reconcile("ns/f") == PermanentFailure(
        "InvalidSpec", "spec.deployment.name must be specified"
    )


@pytest.mark.parametrize(
    ("verb", "error", "expected"),
    [
        ("create", ApiError(409, {"reason": "AlreadyExists", "message": "exists"}), Retry),
        ("create", ApiError(500, {"reason": "InternalError"}), Retry),
        ("create", ApiError(0, {"message": "connection refused"}), Retry),
        ("create", ApiError(429, {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 3}}), RetryAfter),
        ("create", ApiError(422, {"reason": "Invalid", "message": "bad image"}), PermanentFailure),
        ("patch-status", ApiError(409, {"reason": "Conflict"}), Retry),
    ],
    ids=["already-exists", "server-error", "unreachable", "throttled", "invalid", "conflict"],
)
async def test_api_errors_become_typed_outcomes(verb: str, error: ApiError, expected: type) -> None:
    reconciler, api, _ = world(cached_foo())
    api.fail[verb] = error
    outcome = await reconciler.reconcile("ns/f")
    assert isinstance(outcome, expected)
    if isinstance(outcome, RetryAfter):
        assert outcome.delay == 3


async def test_a_status_write_for_a_foo_deleted_meanwhile_is_done() -> None:
    reconciler, api, _ = world(cached_foo(), live_deployment())
    api.fail["patch-status"] = ApiError(404, {"reason": "NotFound"})
    assert await reconciler.reconcile("ns/f") == Done("Foo is gone")


# ---- the worker loop maps outcomes onto the queue ---------------------------------------------


class Scripted:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    async def reconcile(self, key: str) -> Any:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def controller_with(outcome: Any) -> tuple[FooController, WorkQueue[str], Events, CollectorRegistry]:
    registry = CollectorRegistry()
    events = Events()
    controller = FooController(None, events, metrics=metrics_for(registry))  # type: ignore[arg-type]
    controller.reconciler = Scripted(outcome)  # type: ignore[assignment]
    controller.foos.store.put("ns/f", cached_foo())
    queue: WorkQueue[str] = WorkQueue("foo")
    return controller, queue, events, registry


async def test_worker_forgets_a_done_key() -> None:
    controller, queue, _, registry = controller_with(Done())
    queue.add_rate_limited("ns/f")
    await controller.process(queue, "ns/f")
    assert queue.num_requeues("ns/f") == 0
    assert (
        registry.get_sample_value("controller_runtime_reconcile_total", {"controller": "foo", "result": "success"}) == 1
    )


async def test_worker_backs_off_a_retry() -> None:
    controller, queue, _, registry = controller_with(Retry("409 Conflict"))
    await controller.process(queue, "ns/f")
    await controller.process(queue, "ns/f")
    assert queue.num_requeues("ns/f") == 2 and queue.delayed == 1
    assert registry.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "foo"}) == 2
    queue.shutdown()


async def test_worker_requeues_after_the_asked_delay_without_counting_a_failure() -> None:
    controller, queue, _, registry = controller_with(RetryAfter(30, "throttled"))
    await controller.process(queue, "ns/f")
    assert queue.num_requeues("ns/f") == 0 and queue.delayed == 1
    assert (
        registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "foo", "result": "requeue_after"}
        )
        == 1
    )
    queue.shutdown()


async def test_worker_records_a_warning_for_a_permanent_failure_and_does_not_requeue() -> None:
    controller, queue, events, _ = controller_with(PermanentFailure("ErrResourceExists", "msg"))
    await controller.process(queue, "ns/f")
    assert events.recorded == [("Warning", "ErrResourceExists", "msg")]
    assert queue.delayed == 0 and len(queue) == 0


async def test_a_crashing_reconcile_is_retried_with_backoff() -> None:
    controller, queue, _, _ = controller_with(RuntimeError("bug"))
    outcome = await controller.process(queue, "ns/f")
    assert isinstance(outcome, Retry) and "bug" in outcome.reason
    queue.shutdown()


async def drained(queue: WorkQueue[str]) -> list[str]:
    keys = []
    while len(queue):
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return sorted(keys)


async def test_a_new_term_queues_every_cached_foo() -> None:
    controller = FooController(None, Events(), workers=0)  # type: ignore[arg-type]
    controller.foos.store.put("ns/f", cached_foo())
    controller.foos.store.put("ns/g", cached_foo())
    queue = controller.start_workers()
    assert await drained(queue) == ["ns/f", "ns/g"]
    await controller.stop_workers()
    assert queue.shutting_down and controller.queue is None


def foo_naming(name: str, deployment: str = "web") -> dict[str, Any]:
    """A Foo ns/<name> whose spec names ``deployment`` (which it may or may not own)."""
    return foo_v1(name, namespace="ns", deployment=deployment, uid=f"uid-{name}", resource_version="1")


def leading_controller(*foos: dict[str, Any]) -> tuple[FooController, WorkQueue[str]]:
    controller = FooController(None, Events(), workers=0)  # type: ignore[arg-type]
    for the_foo in foos:
        controller.foos.store.put(f"ns/{the_foo['metadata']['name']}", the_foo)
    return controller, controller.start_workers()


async def test_a_deployment_change_reconciles_its_owner_only() -> None:
    # Issue 34: 5,000 Foos naming one Deployment made 5,000 reconciles per edit of it.
    controller, queue = leading_controller(cached_foo(), *(foo_naming(f"g{i}") for i in range(5000)))
    await drained(queue)

    edited = live_deployment(replicas=3)
    edited["metadata"]["resourceVersion"] = "51"
    controller._on_deployment_update(live_deployment(), edited)
    assert await drained(queue) == ["ns/f"]
    controller._on_deployment(live_deployment(owner_uid=None))  # a foreign one appears: no owner, nothing to do
    assert len(queue) == 0
    controller._on_deployment_update(live_deployment(), live_deployment())  # same resourceVersion: a resync
    assert len(queue) == 0
    await controller.stop_workers()


async def test_a_foreign_deployment_going_away_reconciles_the_foos_naming_it() -> None:
    # The contract (e2e test_a_foreign_deployment_is_left_alone_and_reported): once its owner
    # removes it, a refused Foo gets its own Deployment without anyone touching the Foo.
    controller, queue = leading_controller(foo_naming("g"), foo_naming("h"), foo_naming("other", deployment="db"))
    await drained(queue)
    controller._on_deployment_delete(live_deployment(owner_uid=None))
    assert await drained(queue) == ["ns/g", "ns/h"]
    await controller.stop_workers()


async def test_a_deployment_changing_hands_reconciles_the_foo_that_lost_it() -> None:
    controller, queue = leading_controller(cached_foo())
    await drained(queue)
    taken = live_deployment(owner_uid=None)
    taken["metadata"]["resourceVersion"] = "51"
    controller._on_deployment_update(live_deployment(), taken)
    assert await drained(queue) == ["ns/f"]
    await controller.stop_workers()


async def test_our_own_writes_coming_back_reconcile_nothing() -> None:
    # A tenant's edit of a Deployment costs one reconcile, not a second one for the echo of the revert.
    controller, queue = leading_controller(cached_foo())
    reconciler, api, _ = world(cached_foo(), live_deployment(replicas=5))
    reconciler.foos, reconciler.deployments = controller.foos.store, controller.deployments.store
    controller.reconciler = reconciler
    controller.deployments.store.put("ns/web", live_deployment(replicas=5))
    await drained(queue)
    await reconciler.reconcile("ns/f")
    assert [w[0] for w in api.writes] == ["patch", "patch-status"]
    controller._on_deployment_update(live_deployment(replicas=5), api.objects["deployments"])
    controller._on_foo_update(cached_foo(), api.objects["foos"])
    assert len(queue) == 0
    someone_else = copy.deepcopy(api.objects["deployments"])
    someone_else["metadata"]["resourceVersion"] = "999"
    controller._on_deployment_update(api.objects["deployments"], someone_else)
    assert await drained(queue) == ["ns/f"]
    await controller.stop_workers()


async def test_an_echo_ahead_of_the_writes_answer_reconciles_nothing_either() -> None:
    # The watch often delivers our write before the write's own answer comes back.
    controller, queue = leading_controller(cached_foo(status=synced_status()))
    reconciler, api, _ = world(cached_foo(status=synced_status()), live_deployment(replicas=5))
    reconciler.foos, reconciler.deployments = controller.foos.store, controller.deployments.store
    controller.reconciler = reconciler
    controller.deployments.store.put("ns/web", live_deployment(replicas=5))
    answer = api._answer

    def watch_first(verb: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        written = answer(verb, plural, obj)
        if plural != "deployments":
            return written
        judged = live_deployment(replicas=5)
        controller.deployments.store.put("ns/web", written)
        controller._on_deployment_update(judged, written)  # the echo, before the answer
        return written

    api._answer = watch_first  # type: ignore[method-assign]
    key = await queue.get()
    await controller.process(queue, key)
    queue.done(key)
    assert api.writes[0][0] == "patch"
    assert len(queue) == 0  # not queued again by the echo
    await controller.stop_workers()


async def test_a_refused_foo_is_told_once() -> None:
    reconciler, api, _ = world(cached_foo(), live_deployment(owner_uid=None))
    events = Events()
    controller = FooController(None, events, workers=0)  # type: ignore[arg-type]
    controller.reconciler = reconciler
    controller.foos.store.put("ns/f", cached_foo())
    queue: WorkQueue[str] = WorkQueue("foo")
    first = await controller.process(queue, "ns/f")
    assert isinstance(first, PermanentFailure) and not first.already_reported
    # The status now says so; a second look (a new term, the Deployment deleted and back) writes
    # nothing and records nothing.
    reported = cached_foo(status=api.writes[-1][2]["status"])
    reconciler.foos.put("ns/f", reported)
    controller.foos.store.put("ns/f", reported)
    second = await controller.process(queue, "ns/f")
    assert isinstance(second, PermanentFailure) and second.already_reported
    assert events.recorded == [
        ("Warning", "ErrResourceExists", 'Resource "web" already exists and is not managed by Foo')
    ]
    assert [w[0] for w in api.writes] == ["patch-status"]


async def test_a_status_write_applies_only_to_the_foo_version_judged() -> None:
    reconciler, api, _ = world(cached_foo(), live_deployment())
    await reconciler.reconcile("ns/f")
    (patch,) = [w[2] for w in api.writes if w[0] == "patch-status"]
    assert patch["metadata"] == {"resourceVersion": "1"}


async def test_a_new_term_serves_a_lone_namespace_second_not_last() -> None:
    controller = FooController(None, Events(), workers=0)  # type: ignore[arg-type]
    for i in range(5000):
        controller.foos.store.put(f"busy/foo-{i}", cached_foo())
    controller.foos.store.put("quiet/lone", cached_foo())
    queue = controller.start_workers()
    served = [await queue.get() for _ in range(2)]
    assert "quiet/lone" in served
    await controller.stop_workers()


async def test_a_write_stopped_by_the_lease_fence_ends_the_terms_work(caplog: pytest.LogCaptureFixture) -> None:
    controller, queue, _, _ = controller_with(FencedWrite("lease ns/lock was last renewed 16.0s ago"))
    queue.add("ns/queued")
    outcome = await controller.process(queue, "ns/f")
    assert isinstance(outcome, Retry) and "last renewed" in outcome.reason
    assert "crashed" not in caplog.text
    # No more keys for this term: the next one, ours or another replica's, starts from the caches.
    assert queue.shutting_down and len(queue) == 0 and queue.delayed == 0
    with pytest.raises(ShutDown):
        await queue.get()


async def test_no_keys_are_queued_while_not_leading() -> None:
    controller = FooController(None, Events(), workers=0)  # type: ignore[arg-type]
    controller._on_foo(cached_foo())  # no term, no queue: nothing to do, nothing kept
    assert controller.queue is None
