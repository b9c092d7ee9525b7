"""``foo-operator migrate-storage``: re-write every Foo at the CRD's storage version, then prune
``status.storedVersions`` of the CRD down to that one version.

How a re-write is proven: each Foo is read at the storage version and PUT back as read.
kube-apiserver skips the etcd write when the newly encoded object equals the stored bytes
(``GuaranteedUpdate``), so an unchanged resourceVersion proves the Foo was already stored at that
version, and a new one proves it has just been written at it. Only when every Foo was one or the
other does the command drop the other versions from ``storedVersions`` — the step that lets a
version leave the CRD for good (kube-storage-version-migrator works the same way).

Safe to run again at any time: a finished or interrupted run leaves nothing half done, and the
next run walks everything again, finding what was done already current. Errors end the run with
one line; they are values (``Refusal``) until the command's edge.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import fooapi
from apimachinery.objects import Object
from apimachinery.resources import Resource
from fooapi import CRD_NAME
from fooapi.names import foos_at
from kube.client import CRDS, ApiError, KubeClient, no_answer
from kube.config import ClientSettings, MissingContextError, connect
from kube.informer import object_key
from kube.kubeconfig import KubeconfigError

from .progress import Progress, describe, total_after_page

FIELD_MANAGER = "foo-operator-migrate-storage"
ATTEMPTS = 5  # per Foo, for conflicts (re-read, retry) and transient failures (back off, retry)
IN_FLIGHT = 8  # concurrent PUTs within a page; the client-side QPS limiter sets the pace
# While a served version answers 404 for its resource (not for the Foo): that many probes, this far apart.
UNSERVED_PROBES, PROBE_BACKOFF_SECONDS = 20, 0.5
# The probe reads the last Foo of a page of this many: a namespace being deleted loses its Foos
# in the order a list returns them, so the first Foo listed is the one most likely gone by the GET.
PROBE_PAGE = 50
LIST_RESTARTS = 3  # times a walk starts over when its continue token expires

Say = Callable[[str], None]
# One finished page: its line for a log, and the walk's progress (a terminal draws a bar instead).
OnPage = Callable[[str, Progress], None]
DRY_RUNS = ("none", "client", "server")


class Refusal(Exception):
    """Why the command will not start, or stopped: one line for the user."""


class Result(Enum):
    REWRITTEN = "rewritten"  # the apiserver wrote it anew, at the storage version
    CURRENT = "current"  # the apiserver found it already stored at the storage version
    GONE = "gone"  # deleted while we worked: nothing left to migrate
    CHECKED = "checked"  # dry run: would be written (server: the apiserver accepted a dry-run write)
    FAILED = "failed"


@dataclass(frozen=True)
class MigrationSettings:
    kubeconfig: str | None = None
    context: str | None = None
    qps: float = 50.0
    page_size: int = 500
    probe_timeout: float = 10.0
    crd_name: str = CRD_NAME
    # kubectl's --dry-run: client lists and counts; server also sends each PUT with dryRun=All,
    # so admission and validation answer for every Foo; neither writes a Foo or the CRD.
    dry_run: str = "none"


@dataclass(frozen=True)
class CrdFacts:
    """What the Foo CRD says about versions, as far as a storage migration cares."""

    name: str
    storage_version: str
    served_versions: tuple[str, ...]
    stored_versions: tuple[str, ...]
    conversion_strategy: str
    resource_version: str

    @property
    def resource(self) -> Resource:
        return foos_at(self.storage_version)

    def describe(self) -> str:
        return (
            f"CRD {self.name}: storage version {self.storage_version}, served {', '.join(self.served_versions)}, "
            f"status.storedVersions {_listing(self.stored_versions)}"
        )


def crd_facts(crd: Mapping[str, Any]) -> CrdFacts:
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or () if isinstance(v, dict)]
    storage = [str(v.get("name")) for v in versions if v.get("storage")]
    return CrdFacts(
        name=str((crd.get("metadata") or {}).get("name")),
        storage_version=storage[0] if storage else "",
        served_versions=tuple(str(v.get("name")) for v in versions if v.get("served")),
        stored_versions=tuple((crd.get("status") or {}).get("storedVersions") or ()),
        conversion_strategy=str((spec.get("conversion") or {}).get("strategy") or "None"),
        resource_version=str((crd.get("metadata") or {}).get("resourceVersion") or ""),
    )


def refusal_for(facts: CrdFacts) -> str | None:
    """Why this CRD cannot be migrated, or None."""
    if facts.conversion_strategy != "Webhook":
        return (
            f"CRD {facts.name} converts with strategy {facts.conversion_strategy}, not foo-operator's conversion "
            f"webhook (is it still sample-controller's CRD?): install foo-operator first"
        )
    if not facts.storage_version:
        return f"CRD {facts.name} marks no version as storage"
    return None


@dataclass
class Tally:
    rewritten: int = 0
    current: int = 0
    gone: int = 0
    checked: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def total(self) -> int:
        return self.rewritten + self.current + self.gone + self.checked + self.failed

    def count(self, key: str, result: Result, note: str = "") -> None:
        if result is Result.REWRITTEN:
            self.rewritten += 1
        elif result is Result.CURRENT:
            self.current += 1
        elif result is Result.GONE:
            self.gone += 1
        elif result is Result.CHECKED:
            self.checked += 1
        else:
            self.failures.append((key, note))

    def add(self, other: Tally) -> None:
        self.rewritten += other.rewritten
        self.current += other.current
        self.gone += other.gone
        self.checked += other.checked
        self.failures += other.failures

    def counts(self, version: str) -> str:
        if self.checked:
            return f"{self.checked} would be re-written (dry run), {self.gone} deleted meanwhile, {self.failed} failed"
        return (
            f"{self.rewritten} rewritten, {self.current} already stored at {version}, "
            f"{self.gone} deleted meanwhile, {self.failed} failed"
        )


def _foos(n: int) -> str:
    return f"{n} Foo" if n == 1 else f"{n} Foos"


def _listing(versions: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(versions) + "]"


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(exc: ApiError) -> str:
    head = str(exc.status) if exc.reason == "Unknown" else f"{exc.status} {exc.reason}"
    return _one_line(f"{head}: {exc.message}" if exc.message else head)


class Migration:
    """One run: check the CRD and the conversion webhook, re-write every Foo, prune storedVersions."""

    def __init__(
        self,
        client: KubeClient,
        settings: MigrationSettings,
        say: Say,
        warn: Say,
        *,
        sleep: Callable[[float], Any] = asyncio.sleep,
        on_page: OnPage | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.say = say
        self.warn = warn
        self.tally = Tally()
        self.version = ""
        self._sleep = sleep
        self.on_page: OnPage = on_page or (lambda line, _: say(line))
        self.stored_before: tuple[str, ...] = ()
        self.stored_after: tuple[str, ...] = ()
        self.seconds = 0.0

    async def run(self) -> int:
        facts = await self.check_crd()
        self.version = facts.storage_version
        self.stored_before = self.stored_after = facts.stored_versions
        await self.probe_conversion(facts)
        began = time.monotonic()
        await self.rewrite_all(facts)
        self.seconds = time.monotonic() - began
        self.say(f"done: {_foos(self.tally.total)} in {self.seconds:.1f}s: {self.tally.counts(self.version)}")
        if self.tally.failures:
            self.warn(
                f"error: {self.tally.failed} Foo(s) could not be re-written at {self.version} (see above); "
                f"status.storedVersions left at {_listing(facts.stored_versions)}; fix them and run again"
            )
            return 1
        await self.prune_stored_versions(facts.storage_version)
        return 0

    # -- the CRD and its conversion webhook -------------------------------------------------
    async def read_crd(self) -> Object:
        try:
            return await self.client.get(CRDS, self.settings.crd_name)
        except ApiError as exc:
            if exc.not_found:
                raise Refusal(f"CRD {self.settings.crd_name} not found: install foo-operator first") from None
            raise

    async def check_crd(self) -> CrdFacts:
        facts = crd_facts(await self.read_crd())
        reason = refusal_for(facts)
        if reason:
            raise Refusal(reason)
        self.say(facts.describe())
        return facts

    async def probe_conversion(self, facts: CrdFacts) -> None:
        """GET one Foo at every served version: whatever version it is stored at, one read converts it.

        A GET, not a list: lists are served from the apiserver's per-version watch caches, which
        hold objects converted back when the webhook last answered.
        """
        timeout = self.settings.probe_timeout
        deleted = unserved = 0
        last_404 = ""  # the apiserver's words, for the refusal
        while deleted < ATTEMPTS and unserved < UNSERVED_PROBES:
            began = time.monotonic()
            try:
                listing = await self.client.list(facts.resource, limit=PROBE_PAGE, timeout=timeout)
            except ApiError as exc:
                raise self._not_answering(facts.storage_version, exc) from None
            items = listing.get("items") or ()
            if not items:
                self.say("no Foos: nothing to convert")
                return
            probed = _probe_candidate(items)
            meta = probed.get("metadata") or {}
            try:
                for version in facts.served_versions:
                    resource = foos_at(version)
                    await self.client.request(
                        "GET", resource.path(meta.get("namespace"), meta.get("name")), timeout=timeout
                    )
            except ApiError as exc:
                last_404 = f"GET {exc.path}: {_short(exc)}"
                if exc.object_not_found:
                    deleted += 1  # deleted under us: the next list gives another
                    await asyncio.sleep(PROBE_BACKOFF_SECONDS)
                    continue
                if exc.not_found:
                    # The version is not served for a moment: kube-apiserver rebuilds a CRD's
                    # handler after each update of the CRD (storedVersions included). Ask again.
                    unserved += 1
                    await asyncio.sleep(PROBE_BACKOFF_SECONDS)
                    continue
                raise self._not_answering(version, exc) from None
            took = time.monotonic() - began
            self.say(
                f"conversion webhook: answering (read {object_key(probed)} at "
                f"{', '.join(facts.served_versions)} in {took:.2f}s)"
            )
            return
        if deleted >= ATTEMPTS:
            raise Refusal(
                f"every Foo picked for the conversion probe was deleted before it could be read ({last_404}); run again"
            )
        raise Refusal(
            f"Foos are not served at every version of {', '.join(facts.served_versions)} "
            f"({UNSERVED_PROBES * PROBE_BACKOFF_SECONDS:g}s of 404 for the resource; {last_404}); run again"
        )

    def _not_answering(self, version: str, exc: ApiError) -> Refusal:
        why = f"no answer within {self.settings.probe_timeout:g}s" if exc.status == 0 else _short(exc)
        return Refusal(
            f"cannot read Foos at {version}: the conversion webhook is not answering ({why}); "
            f"start foo-operator's webhook and run again"
        )

    # -- the walk ----------------------------------------------------------------------------
    async def rewrite_all(self, facts: CrdFacts) -> None:
        """Page through every Foo at the storage version, re-writing each once."""
        resource = facts.resource
        seen: set[str] = set()
        continue_: str | None = None
        page = restarts = 0
        began = time.monotonic()
        limit = asyncio.Semaphore(IN_FLIGHT)
        while True:
            try:
                listing = await self.client.list(resource, limit=self.settings.page_size, continue_=continue_)
            except ApiError as exc:
                if exc.gone and continue_ is not None and restarts < LIST_RESTARTS:
                    restarts += 1
                    self.say("the list's continue token expired: starting over (Foos already done are skipped)")
                    continue_ = None
                    continue
                raise Refusal(f"listing Foos at {facts.storage_version} failed: {_short(exc)}") from None
            items = [item for item in listing.get("items") or () if self._first_time(item, seen)]
            page_tally = Tally()

            async def one(item: Object) -> None:
                async with limit:
                    result, note = await self.rewrite(resource, item)
                key = object_key(item)
                page_tally.count(key, result, note)  # noqa: B023 (awaited within this iteration)
                if result is Result.FAILED:
                    self.warn(f"  {key}: not re-written: {note}")

            await asyncio.gather(*(one(item) for item in items))
            self.tally.add(page_tally)
            page += 1
            metadata = listing.get("metadata") or {}
            continue_ = metadata.get("continue") or None
            elapsed = time.monotonic() - began
            progress = Progress(
                self.tally.total,
                total_after_page(self.tally.total, metadata.get("remainingItemCount"), continue_ is not None),
                elapsed,
            )
            self.on_page(
                f"page {page}: {_foos(len(items))}: {page_tally.counts(facts.storage_version)} "
                f"({describe(progress)}, {elapsed:.1f}s)",
                progress,
            )
            if continue_ is None:
                return

    @staticmethod
    def _first_time(item: Object, seen: set[str]) -> bool:
        uid = str((item.get("metadata") or {}).get("uid") or object_key(item))
        if uid in seen:
            return False
        seen.add(uid)
        return True

    async def rewrite(self, resource: Resource, foo: Object) -> tuple[Result, str]:
        """PUT ``foo`` back as read; re-read on conflict; a vanished Foo is GONE, not a failure."""
        meta = foo.get("metadata") or {}
        namespace, name = meta.get("namespace"), str(meta.get("name"))
        body = {**foo, "apiVersion": resource.api_version, "kind": fooapi.KIND}
        note = ""
        if self.settings.dry_run == "client":
            return Result.CHECKED, ""
        dry_run = self.settings.dry_run == "server"
        for attempt in range(ATTEMPTS):
            try:
                written = await self.client.replace(resource, name, body, namespace=namespace, dry_run=dry_run)
                if dry_run:
                    return Result.CHECKED, ""
                return (Result.CURRENT if _rv(written) == _rv(body) else Result.REWRITTEN), ""
            except ApiError as exc:
                note = _short(exc)
                if exc.not_found:
                    return Result.GONE, ""
                if exc.conflict:  # someone wrote it since we read it: take the fresh copy
                    try:
                        fresh = await self.client.get(resource, name, namespace=namespace)
                    except ApiError as again:
                        if again.not_found:
                            return Result.GONE, ""
                        note = _short(again)
                    else:
                        body = {**fresh, "apiVersion": resource.api_version, "kind": fooapi.KIND}
                        continue
                elif not exc.transient:
                    return Result.FAILED, note  # e.g. 422 from validation: retrying will not help
                await self._sleep(exc.retry_after or min(0.1 * 2**attempt, 2.0))
        return Result.FAILED, f"{note} (gave up after {ATTEMPTS} attempts)"

    # -- storedVersions ---------------------------------------------------------------------------
    async def prune_stored_versions(self, storage_version: str) -> None:
        """Set ``status.storedVersions`` to the storage version alone, if the CRD still stores there."""
        for _ in range(ATTEMPTS):
            facts = crd_facts(await self.read_crd())
            if facts.storage_version != storage_version:
                raise Refusal(
                    f"the CRD's storage version changed from {storage_version} to {facts.storage_version} "
                    f"during the run: run again"
                )
            wanted = (storage_version,)
            if facts.stored_versions == wanted:
                self.say(f"status.storedVersions: already {_listing(wanted)}")
                return
            if self.settings.dry_run != "none":
                self.say(
                    f"status.storedVersions: would be {_listing(facts.stored_versions)} -> {_listing(wanted)} "
                    f"(dry run: left as it is)"
                )
                return
            # resourceVersion makes the patch conditional: a CRD changed meanwhile is read again.
            patch = {
                "metadata": {"resourceVersion": facts.resource_version},
                "status": {"storedVersions": list(wanted)},
            }
            try:
                await self.client.patch(CRDS, facts.name, patch, subresource="status")
            except ApiError as exc:
                if exc.conflict:
                    continue
                raise Refusal(f"pruning status.storedVersions of CRD {facts.name} failed: {_short(exc)}") from None
            self.say(f"status.storedVersions: {_listing(facts.stored_versions)} -> {_listing(wanted)}")
            self.stored_after = wanted
            return
        raise Refusal(f"CRD {self.settings.crd_name} kept changing: could not prune status.storedVersions; run again")


def _client_settings(settings: MigrationSettings) -> ClientSettings:
    return ClientSettings(
        qps=settings.qps,
        burst=max(1, math.ceil(settings.qps)),
        max_connections=IN_FLIGHT + 2,
        user_agent=FIELD_MANAGER,
        field_manager=FIELD_MANAGER,
    )


def summary(migration: Migration, code: int) -> dict[str, Any]:
    """``-o json``: what the run did, for scripts (the lines went to stderr)."""
    tally = migration.tally
    return {
        "crd": migration.settings.crd_name,
        "storageVersion": migration.version,
        "dryRun": migration.settings.dry_run,
        "succeeded": code == 0,
        "foos": {
            "total": tally.total,
            "rewritten": tally.rewritten,
            "current": tally.current,
            "gone": tally.gone,
            "checked": tally.checked,
            "failed": tally.failed,
        },
        "failures": [{"foo": key, "error": note} for key, note in tally.failures],
        "storedVersions": {"before": list(migration.stored_before), "after": list(migration.stored_after)},
        "seconds": round(migration.seconds, 3),
    }


async def migrate_storage(
    settings: MigrationSettings,
    say: Say,
    warn: Say,
    *,
    on_page: OnPage | None = None,
    report: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """The command: 0 when every Foo is at the storage version and storedVersions is pruned, else 1.

    ``report`` gets the ``summary`` of a run that reached the Foos (not of one refused before).
    """
    try:
        client = await connect(settings.kubeconfig, context=settings.context, settings=_client_settings(settings))
    except MissingContextError as exc:
        warn(f"Error in configuration: {exc}")  # kubectl's line, as `kubectl foo-operator health` says it
        return 1
    except KubeconfigError as exc:
        warn(f"error: {exc}")
        return 1
    except Exception as exc:  # the loaders raise anything from ConfigException to yaml and OS errors
        warn(f"error: cannot load the kubeconfig: {_one_line(str(exc))}")
        return 1
    async with client:
        migration = Migration(client, settings, say, warn, on_page=on_page)
        try:
            code = await migration.run()
            if report is not None:
                report(summary(migration, code))
            return code
        except Refusal as refusal:
            warn(f"error: {refusal}")
        except ApiError as exc:
            host = client.api.configuration.host
            if exc.status == 0:
                warn(f"error: {no_answer(exc)}")
            else:
                warn(f"error: the apiserver at {host} refused {exc.method} {exc.path}: {_short(exc)}")
        except asyncio.CancelledError:  # Ctrl-C: say how far we got, then let the edge exit
            _stopped(migration, warn)
            raise
        _stopped(migration, warn)
        return 1


def _stopped(migration: Migration, warn: Say) -> None:
    if migration.tally.total:
        warn(
            f"stopped after {_foos(migration.tally.total)} ({migration.tally.counts(migration.version)}); "
            f"run again to finish"
        )


def _probe_candidate(items: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The Foo to read at every version: the last of the page that is not being deleted, if any."""
    alive = [item for item in items if not (item.get("metadata") or {}).get("deletionTimestamp")]
    return (alive or list(items))[-1]
