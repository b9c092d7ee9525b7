"""migrate-storage: every Foo re-written at the storage version, then storedVersions pruned; refusals
are one line. Driven against a small in-memory apiserver that keeps kube-apiserver's rules that
matter here: a PUT whose encoding equals the stored bytes is not written (same resourceVersion),
stale resourceVersions conflict, and reading at another version needs the conversion webhook.
The claims about the real apiserver live in tests/e2e/test_switch_from_sample_controller.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from apimachinery.objects import Object
from apimachinery.resources import Resource
from controller import cli
from controller import migrate as migrate_module
from controller.migrate import (
    CRDS,
    Migration,
    MigrationSettings,
    Refusal,
    Result,
    crd_facts,
    refusal_for,
    summary,
)
from controller.progress import Progress
from fooapi import GROUP, convert
from fooapi.crd import CRD_NAME, crd_manifest
from kube.client import ApiError, KubeClient

V1, V1ALPHA1 = f"{GROUP}/v1", f"{GROUP}/v1alpha1"


def sample_controller_foo(name: str, namespace: str = "legacy", replicas: int = 2) -> Object:
    return {
        "apiVersion": V1ALPHA1,
        "kind": "Foo",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {"deploymentName": f"{name}-deploy", "replicas": replicas},
        "status": {"availableReplicas": replicas},
    }


def our_crd(storage: str = "v1", stored: tuple[str, ...] = ("v1alpha1", "v1")) -> Object:
    crd = crd_manifest(conversion_client_config={"url": "https://127.0.0.1:1/convert", "caBundle": ""})
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == storage
    crd["metadata"]["resourceVersion"] = "1"
    crd["status"] = {"storedVersions": list(stored)}
    return crd


class FakeApiserver:
    """The calls migrate-storage makes, answered like kube-apiserver would (see module doc)."""

    def __init__(self, crd: Object | None, foos: list[Object]) -> None:
        self.crd = crd
        self.rv = 100
        # key -> stored object (at the version it was written, like etcd's bytes)
        self.stored: dict[str, Object] = {}
        for foo in foos:
            self._store(copy.deepcopy(foo))
        self.webhook_up = True
        self.writes: list[str] = []  # keys whose stored bytes changed
        self.before_put: Callable[[str], None] = lambda key: None
        self.invalid: set[str] = set()  # keys the validating webhook denies
        self.expire_continue_once = False
        self.probe_hangs = False
        self.unserved_probes = 0  # probe GETs answered 404 for the resource (a CRD handler being rebuilt)
        self.deleted_per_read = 0  # a namespace being deleted: Foos go in list order, this many per GET
        self.remaining_item_count = True

    # -- storage ----------------------------------------------------------------------------
    def _store(self, obj: Object) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.stored[_key(obj)] = obj

    @property
    def storage_version(self) -> str:
        assert self.crd is not None
        return next(f"{GROUP}/{v['name']}" for v in self.crd["spec"]["versions"] if v["storage"])

    def _read(self, key: str, api_version: str) -> Object:
        obj = self.stored[key]
        if obj["apiVersion"] != api_version and not self.webhook_up:
            raise ApiError(
                500,
                {
                    "message": "conversion webhook for samplecontroller.k8s.io/v1, Kind=Foo failed: "
                    'Post "https://127.0.0.1:1/convert": connect: connection refused'
                },
            )
        return convert(copy.deepcopy(obj), api_version)

    def concurrent_write(self, key: str, replicas: int) -> None:
        obj = convert(copy.deepcopy(self.stored[key]), self.storage_version)
        obj["spec"]["replicas"] = replicas
        self._store(obj)

    def delete(self, key: str) -> None:
        del self.stored[key]

    # -- the KubeClient surface ------------------------------------------------------------------
    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> Object:
        if resource == CRDS:
            if self.crd is None or name != CRD_NAME:
                raise ApiError(404, {"reason": "NotFound", "message": f'"{name}" not found'})
            return copy.deepcopy(self.crd)
        key = f"{namespace}/{name}"
        if key not in self.stored:
            raise ApiError(404, {"reason": "NotFound", "details": {"name": name, "kind": "foos"}})
        return self._read(key, resource.api_version)

    async def request(self, method: str, path: str, *, timeout: float | None = None, **_: Any) -> Object:
        assert method == "GET"
        if self.probe_hangs:
            raise ApiError(0, {"message": "TimeoutError: "})
        if self.unserved_probes:
            self.unserved_probes -= 1
            raise ApiError(404, {"reason": "NotFound", "message": "the server could not find the requested resource"})
        for key in sorted(self.stored)[: self.deleted_per_read]:
            self.delete(key)
        parts = path.split("/")  # /apis/<group>/<version>/namespaces/<ns>/foos/<name>
        return await self.get(Resource(GROUP, parts[3], "foos"), parts[7], namespace=parts[5])

    async def list(
        self,
        resource: Resource,
        *,
        limit: int | None = None,
        continue_: str | None = None,
        timeout: float | None = None,
        **_: Any,
    ) -> Object:
        if continue_ is not None and self.expire_continue_once:
            self.expire_continue_once = False
            raise ApiError(410, {"reason": "Expired", "message": "The provided continue parameter is too old"})
        keys = sorted(self.stored)
        start = int(continue_ or 0)
        end = start + (limit or len(keys))
        # Lists come from the watch cache: converted long ago, so a dead webhook does not show here.
        items = [convert(copy.deepcopy(self.stored[k]), resource.api_version) for k in keys[start:end]]
        metadata: Object = {"continue": str(end) if end < len(keys) else ""}
        if end < len(keys) and self.remaining_item_count:  # kube-apiserver counts the pages to come
            metadata["remainingItemCount"] = len(keys) - end
        return {"items": items, "metadata": metadata}

    async def replace(
        self, resource: Resource, name: str, body: Object, *, namespace: str | None = None, **_: Any
    ) -> Object:
        key = f"{namespace}/{name}"
        self.before_put(key)
        if not self.webhook_up:
            raise ApiError(500, {"reason": "InternalError", "message": 'failed calling webhook "mfoo"'})
        if key not in self.stored:
            raise ApiError(404, {"reason": "NotFound"})
        if key in self.invalid:
            raise ApiError(
                422, {"reason": "Invalid", "message": f'Foo "{name}" is invalid: spec.deployment.name: Required value'}
            )
        current = self.stored[key]
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"})
        new = convert(copy.deepcopy(body), self.storage_version)
        if _bytes(new) != _bytes(current):  # GuaranteedUpdate: identical bytes are not written
            self._store(new)
            self.writes.append(key)
        return self._read(key, resource.api_version)

    async def patch(
        self, resource: Resource, name: str, patch: Object, *, subresource: str | None = None, **_: Any
    ) -> Object:
        assert resource == CRDS and subresource == "status" and self.crd is not None
        if patch["metadata"]["resourceVersion"] != self.crd["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict"})
        self.crd["status"].update(patch["status"])
        self.crd["metadata"]["resourceVersion"] = str(int(self.crd["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.crd)


def _key(obj: Object) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _bytes(obj: Object) -> str:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return json.dumps({**obj, "metadata": meta}, sort_keys=True)


class Output:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []


async def migrate(server: FakeApiserver, *, page_size: int = 500) -> tuple[int, Output, Migration]:
    output = Output()
    migration = Migration(
        cast(KubeClient, server),
        MigrationSettings(page_size=page_size),
        output.out.append,
        output.err.append,
        sleep=_no_sleep,
    )
    try:
        code = await migration.run()
    except Refusal as refusal:
        output.err.append(f"error: {refusal}")
        code = 1
    return code, output, migration


async def _no_sleep(seconds: float) -> None:
    return None


def legacy_foos(n: int) -> list[Object]:
    return [sample_controller_foo(f"foo-{i:02d}") for i in range(n)]


# -- the CRD ----------------------------------------------------------------------------------------


def test_sample_controllers_crd_is_refused_as_not_ours() -> None:
    crd = {
        "metadata": {"name": CRD_NAME},
        "spec": {"versions": [{"name": "v1alpha1", "served": True, "storage": True}]},
        "status": {"storedVersions": ["v1alpha1"]},
    }
    reason = refusal_for(crd_facts(crd))
    assert reason is not None
    assert "strategy None" in reason and "install foo-operator first" in reason


def test_our_crd_after_the_takeover_is_described_as_it_stands() -> None:
    facts = crd_facts(our_crd())
    assert refusal_for(facts) is None
    assert (facts.storage_version, facts.served_versions, facts.stored_versions) == (
        "v1",
        ("v1", "v1alpha1"),
        ("v1alpha1", "v1"),
    )
    assert facts.describe() == (
        f"CRD {CRD_NAME}: storage version v1, served v1, v1alpha1, status.storedVersions [v1alpha1, v1]"
    )


async def test_a_missing_crd_is_one_clear_line() -> None:
    code, output, _ = await migrate(FakeApiserver(None, []))
    assert code == 1
    assert output.err == [f"error: CRD {CRD_NAME} not found: install foo-operator first"]


# -- the walk -----------------------------------------------------------------------------------------


async def test_every_foo_stored_at_v1alpha1_is_rewritten_at_v1_and_v1alpha1_pruned() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(20))
    code, output, migration = await migrate(server)
    assert code == 0
    assert {obj["apiVersion"] for obj in server.stored.values()} == {V1}
    assert server.crd is not None and server.crd["status"]["storedVersions"] == ["v1"]
    assert (migration.tally.rewritten, migration.tally.current) == (20, 0)
    assert output.out[-2].startswith("done: 20 Foos in ")
    assert output.out[-2].endswith(": 20 rewritten, 0 already stored at v1, 0 deleted meanwhile, 0 failed")
    assert output.out[-1] == "status.storedVersions: [v1alpha1, v1] -> [v1]"
    assert output.err == []


async def test_a_second_run_writes_nothing_and_says_every_foo_is_already_at_v1() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    await migrate(server)
    server.writes.clear()
    code, output, migration = await migrate(server)
    assert code == 0
    assert server.writes == []
    assert (migration.tally.rewritten, migration.tally.current) == (0, 5)
    assert output.out[-1] == "status.storedVersions: already [v1]"


async def test_only_if_needed_reads_the_crd_alone_once_every_foo_is_stored_at_v1() -> None:
    """The chart's hook Job, which Argo CD runs on every sync: no walk, no probe, no PUT per Foo."""
    server = FakeApiserver(our_crd(stored=("v1",)), legacy_foos(3))
    server.webhook_up = False  # nothing but the CRD is read: not even the conversion probe
    output = Output()
    settings = MigrationSettings(only_if_needed=True)
    migration = Migration(cast(KubeClient, server), settings, output.out.append, output.err.append, sleep=_no_sleep)
    assert await migration.run() == 0
    assert output.out[-1] == "every Foo is stored at v1 already: nothing to re-write (--only-if-needed)"
    assert migration.tally.total == 0 and server.writes == [] and output.err == []


async def test_only_if_needed_walks_every_foo_while_another_version_may_be_stored() -> None:
    server = FakeApiserver(our_crd(stored=("v1alpha1", "v1")), legacy_foos(3))
    output = Output()
    settings = MigrationSettings(only_if_needed=True)
    migration = Migration(cast(KubeClient, server), settings, output.out.append, output.err.append, sleep=_no_sleep)
    assert await migration.run() == 0
    assert migration.tally.rewritten == 3
    assert server.crd is not None and server.crd["status"]["storedVersions"] == ["v1"]


async def test_only_foos_still_at_v1alpha1_are_written_when_a_run_is_resumed() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(4))
    server.concurrent_write("legacy/foo-01", replicas=2)  # written at v1 since the CRD changed
    _, _, migration = await migrate(server)
    assert sorted(server.writes) == ["legacy/foo-00", "legacy/foo-02", "legacy/foo-03"]
    assert (migration.tally.rewritten, migration.tally.current) == (3, 1)


async def test_one_progress_line_per_page_with_counts() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    _, output, _ = await migrate(server, page_size=2)
    pages = [line for line in output.out if line.startswith("page ")]
    assert [line.split(" (")[0] for line in pages] == [
        "page 1: 2 Foos: 2 rewritten, 0 already stored at v1, 0 deleted meanwhile, 0 failed",
        "page 2: 2 Foos: 2 rewritten, 0 already stored at v1, 0 deleted meanwhile, 0 failed",
        "page 3: 1 Foo: 1 rewritten, 0 already stored at v1, 0 deleted meanwhile, 0 failed",
    ]
    assert [line.split(" (")[1].split(",")[0] for line in pages] == ["2 of ~5", "4 of ~5", "5 of ~5"]
    assert ", ~" in pages[0] and " left, " in pages[0]  # time left, while there is some


async def test_without_remaining_item_count_progress_counts_what_is_done() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    server.remaining_item_count = False  # e.g. an apiserver that does not send it
    _, output, _ = await migrate(server, page_size=2)
    pages = [line for line in output.out if line.startswith("page ")]
    assert [line.split(" (")[1].split(",")[0] for line in pages] == ["2 so far", "4 so far", "5 of ~5"]


async def test_each_page_reports_its_progress_for_a_bar() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    seen: list[Progress] = []
    migration = Migration(
        cast(KubeClient, server),
        MigrationSettings(page_size=2),
        print,
        print,
        sleep=_no_sleep,
        on_page=lambda line, progress: seen.append(progress),
    )
    assert await migration.run() == 0
    assert [(p.done, p.total) for p in seen] == [(2, 5), (4, 5), (5, 5)]


async def test_a_client_dry_run_counts_every_foo_and_writes_nothing() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    output = Output()
    migration = Migration(
        cast(KubeClient, server),
        MigrationSettings(page_size=2, dry_run="client"),
        output.out.append,
        output.err.append,
        sleep=_no_sleep,
    )
    assert await migration.run() == 0
    assert server.writes == [] and server.crd is not None
    assert server.crd["status"]["storedVersions"] == ["v1alpha1", "v1"]
    assert migration.tally.checked == 5
    assert output.out[-1] == "status.storedVersions: would be [v1alpha1, v1] -> [v1] (dry run: left as it is)"


async def test_the_json_summary_says_what_the_run_did() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(3))
    server.invalid.add("legacy/foo-01")
    _, _, migration = await migrate(server)
    report = summary(migration, 1)
    assert report["foos"] == {"total": 3, "rewritten": 2, "current": 0, "gone": 0, "checked": 0, "failed": 1}
    assert report["failures"][0]["foo"] == "legacy/foo-01" and "Invalid" in report["failures"][0]["error"]
    assert report["storedVersions"] == {"before": ["v1alpha1", "v1"], "after": ["v1alpha1", "v1"]}
    assert (report["succeeded"], report["dryRun"], report["storageVersion"]) == (False, "none", "v1")


async def test_a_conflict_rereads_the_foo_and_keeps_the_newer_write() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(3))
    writes_left = {"legacy/foo-01": 1}

    def someone_scales_it(key: str) -> None:
        if writes_left.get(key):
            writes_left[key] -= 1
            server.concurrent_write(key, replicas=7)

    server.before_put = someone_scales_it
    code, _, migration = await migrate(server)
    assert code == 0
    assert server.stored["legacy/foo-01"]["spec"]["replicas"] == 7  # their change, not our stale copy
    # Their write already stored it at v1, so our retry finds it current.
    assert (migration.tally.rewritten, migration.tally.current, migration.tally.failed) == (2, 1, 0)


async def test_a_foo_deleted_mid_run_is_counted_as_deleted_not_failed() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(3))
    server.before_put = lambda key: server.delete(key) if key == "legacy/foo-02" else None
    code, output, migration = await migrate(server)
    assert code == 0
    assert (migration.tally.rewritten, migration.tally.gone, migration.tally.failed) == (2, 1, 0)
    assert "0 already stored at v1, 1 deleted meanwhile, 0 failed" in output.out[-2]
    assert server.crd is not None and server.crd["status"]["storedVersions"] == ["v1"]


async def test_a_foo_the_webhook_denies_fails_the_run_and_keeps_stored_versions() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(3))
    server.invalid.add("legacy/foo-01")
    code, output, migration = await migrate(server)
    assert code == 1
    assert migration.tally.failures == [
        ("legacy/foo-01", '422 Invalid: Foo "foo-01" is invalid: spec.deployment.name: Required value')
    ]
    assert output.err == [
        '  legacy/foo-01: not re-written: 422 Invalid: Foo "foo-01" is invalid: spec.deployment.name: Required value',
        "error: 1 Foo(s) could not be re-written at v1 (see above); status.storedVersions left at "
        "[v1alpha1, v1]; fix them and run again",
    ]
    assert server.crd is not None and server.crd["status"]["storedVersions"] == ["v1alpha1", "v1"]


async def test_an_expired_continue_token_starts_over_without_counting_a_foo_twice() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(5))
    server.expire_continue_once = True
    code, output, migration = await migrate(server, page_size=2)
    assert code == 0
    assert any("continue token expired" in line for line in output.out)
    assert (migration.tally.total, migration.tally.rewritten) == (5, 5)


async def test_the_walk_can_go_back_to_v1alpha1_when_that_is_the_storage_version() -> None:
    """The way back to sample-controller's CRD: storage set to v1alpha1, then one run."""
    server = FakeApiserver(our_crd(storage="v1alpha1", stored=("v1", "v1alpha1")), legacy_foos(2))
    server.concurrent_write("legacy/foo-00", replicas=3)  # at v1alpha1, the storage now
    for foo in legacy_foos(2):
        server._store(convert(foo, V1))
    code, output, _ = await migrate(server)
    assert code == 0
    assert {obj["apiVersion"] for obj in server.stored.values()} == {V1ALPHA1}
    assert output.out[-1] == "status.storedVersions: [v1, v1alpha1] -> [v1alpha1]"


# -- refusals ----------------------------------------------------------------------------------------


async def test_refuses_to_start_while_the_conversion_webhook_is_down_and_writes_nothing() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(3))
    server.webhook_up = False
    code, output, _ = await migrate(server)
    assert code == 1
    assert server.writes == []
    assert len(output.err) == 1
    assert output.err[0].startswith(
        "error: cannot read Foos at v1: the conversion webhook is not answering (500: "
        "conversion webhook for samplecontroller.k8s.io/v1, Kind=Foo failed"
    )
    assert output.err[0].endswith("start foo-operator's webhook and run again")


async def test_refuses_when_the_conversion_probe_times_out() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(1))
    server.probe_hangs = True
    code, output, _ = await migrate(server)
    assert code == 1
    assert "the conversion webhook is not answering (no answer within 10s)" in output.err[0]


async def test_a_version_not_served_for_a_moment_is_asked_again_not_taken_for_a_deleted_foo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kube-apiserver rebuilds a CRD's handler after each update of the CRD (storedVersions too):
    # for a moment a served version answers 404 for the resource, with no object named.
    server = FakeApiserver(our_crd(), legacy_foos(1))
    server.unserved_probes = 6  # more than the probes a deleted Foo may cost (ATTEMPTS)
    monkeypatch.setattr(migrate_module, "PROBE_BACKOFF_SECONDS", 0.0)
    code, output, _ = await migrate(server)
    assert code == 0, output.err
    assert any(line.startswith("conversion webhook: answering") for line in output.out)


async def test_a_namespace_being_deleted_does_not_fail_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # The namespace controller deletes Foos in the order a list returns them: probing the first
    # Foo listed found it gone every time and refused; the probe reads the last of the page.
    server = FakeApiserver(our_crd(), legacy_foos(30))
    server.deleted_per_read = 1
    monkeypatch.setattr(migrate_module, "PROBE_BACKOFF_SECONDS", 0.0)
    code, output, _ = await migrate(server)
    assert code == 0, output.err
    assert any(line.startswith("conversion webhook: answering") for line in output.out)


async def test_no_foos_at_all_still_prunes_stored_versions() -> None:
    server = FakeApiserver(our_crd(), [])
    code, output, _ = await migrate(server)
    assert code == 0
    assert "no Foos: nothing to convert" in output.out
    assert output.out[-1] == "status.storedVersions: [v1alpha1, v1] -> [v1]"


async def test_a_storage_version_changed_during_the_run_is_not_pruned() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(1))

    def flip_storage(key: str) -> None:
        assert server.crd is not None
        for version in server.crd["spec"]["versions"]:
            version["storage"] = version["name"] == "v1alpha1"

    server.before_put = flip_storage
    code, output, _ = await migrate(server)
    assert code == 1
    assert output.err == ["error: the CRD's storage version changed from v1 to v1alpha1 during the run: run again"]
    assert server.crd is not None and server.crd["status"]["storedVersions"] == ["v1alpha1", "v1"]


async def test_a_transient_failure_is_retried_then_reported() -> None:
    server = FakeApiserver(our_crd(), legacy_foos(1))
    migration = Migration(cast(KubeClient, server), MigrationSettings(), print, print, sleep=_no_sleep)
    server.webhook_up = False
    result, note = await migration.rewrite(Resource(GROUP, "v1", "foos"), convert(legacy_foos(1)[0], V1))
    assert result is Result.FAILED
    assert note == '500 InternalError: failed calling webhook "mfoo" (gave up after 5 attempts)'


# -- the command line ------------------------------------------------------------------------------------


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(args)
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_a_missing_kubeconfig_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(["migrate-storage", "--kubeconfig", str(tmp_path / "nope")], capsys)
    assert (code, out) == (1, "")
    assert err == f"error: kubeconfig {tmp_path / 'nope'}: no such file\n"


def test_a_broken_kubeconfig_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    code, _, err = run_cli(["migrate-storage", "--kubeconfig", str(broken)], capsys)
    assert code == 1
    assert err.startswith(f"error: {broken}: not YAML: ")
    assert err.count("\n") == 1


def test_an_unreachable_apiserver_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    code, _, err = run_cli(["migrate-storage", "--kubeconfig", str(kubeconfig)], capsys)
    assert code == 1
    assert err.startswith("error: cannot reach the apiserver at http://127.0.0.1:9: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("flag", [["--qps", "0"], ["--page-size", "0"], ["--probe-timeout", "-1"]])
def test_nonsense_flags_are_usage_errors(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["migrate-storage", *flag], capsys)
    assert code == 2
    assert f"argument {flag[0]}" in err


def test_even_a_bug_of_ours_ends_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> int:
        raise KeyError("metadata")

    monkeypatch.setattr(cli, "migrate_storage", broken)
    code, _, err = run_cli(["migrate-storage"], capsys)
    assert code == 1
    assert err == "error: unexpected KeyError: 'metadata' (please report it); running again is safe\n"
