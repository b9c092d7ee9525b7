"""The rotator: one leader keeps the certificate Secret and every caBundle current; every replica
writes the Secret's certificate to its own cert directory, where the TLS watcher picks it up.

The decisions are ``certs.rotation.next_state``; this module only reads and writes objects.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apimachinery.resources import Resource
from kube.client import CRDS, ApiError, KubeClient
from kube.leader import LeaderElector

from .files import CA_CERT, TLS_CERT, TLS_KEY, write_atomic
from .policy import RotationPolicy
from .rotation import SecretState, next_state

log = logging.getLogger(__name__)

SECRETS = Resource("", "v1", "secrets", "Secret")
MUTATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
APISERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", namespaced=False)


@dataclass(frozen=True)
class BundleTargets:
    """The four places the apiserver reads our CA from; None skips one."""

    mutating: str | None = None
    validating: str | None = None
    crd: str | None = None
    apiservice: str | None = None


def _with_bundle_in_webhooks(obj: dict[str, Any], bundle: str) -> dict[str, Any] | None:
    """The configuration with every webhook's caBundle set, or None if it already was."""
    webhooks = obj.get("webhooks") or []
    if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
        return None
    return {
        **obj,
        "webhooks": [{**w, "clientConfig": {**(w.get("clientConfig") or {}), "caBundle": bundle}} for w in webhooks],
    }


class Rotator:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        secret_name: str,
        dns_names: Sequence[str],
        cert_dir: Path,
        targets: BundleTargets,
        policy: RotationPolicy = RotationPolicy(),
        ips: Sequence[str] = (),
        interval: float = 30.0,
        elector: LeaderElector | None = None,
        on_files_written: Callable[[], object] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.secret_name = secret_name
        self.dns_names = list(dns_names)
        self.ips = list(ips)
        self.cert_dir = cert_dir
        self.targets = targets
        self.policy = policy
        self.interval = interval
        self.elector = elector
        self.on_files_written = on_files_written
        self._written: tuple[bytes, bytes, bytes] | None = None
        self.files_ready = asyncio.Event()
        # Set when this replica becomes the leader: the next round runs at once, not up to an
        # interval later (a fresh install's Secret is empty until the leader's first round, and
        # the kubelet's liveness probe does not wait 30 s for a listener).
        self._became_leader = asyncio.Event()

    # -- the Secret --------------------------------------------------------------------------
    async def _read_secret(self) -> tuple[SecretState, dict[str, Any] | None]:
        try:
            secret = await self.client.get(SECRETS, self.secret_name, namespace=self.namespace)
        except ApiError as err:
            if err.not_found:
                return SecretState(), None
            raise
        return SecretState.from_secret_data(secret.get("data")), secret

    async def _write_secret(self, state: SecretState, current: dict[str, Any] | None) -> None:
        data = state.to_secret_data()
        if current is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": self.secret_name,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/managed-by": "foo-operator-rotator"},
                },
                "data": data,
            }
            await self.client.create(SECRETS, body, namespace=self.namespace)
        else:
            # resourceVersion in the body: a concurrent writer makes this a 409, never a lost update.
            await self.client.replace(SECRETS, self.secret_name, {**current, "data": data}, namespace=self.namespace)

    # -- the leader's work -------------------------------------------------------------------
    async def rotate_once(self, now: datetime.datetime | None = None) -> SecretState:
        """Advance the Secret one step if something is due, then make every caBundle match it."""
        state, secret = await self._read_secret()
        now = now or datetime.datetime.now(datetime.UTC)
        following = next_state(state, now, self.dns_names, self.policy, ips=self.ips)
        if following is not None:
            await self._write_secret(following, secret)
            log.info(
                "certificates: %s",
                following.step,
                extra={"secret": f"{self.namespace}/{self.secret_name}", "trusted_cas": len(following.bundle)},
            )
            state = following
        await self.inject(state.bundle_pem)
        return state

    async def inject(self, bundle_pem: bytes) -> None:
        """Put ``bundle_pem`` into every target that exists; absent targets are skipped."""
        bundle = base64.b64encode(bundle_pem).decode()
        for resource, name in ((MUTATING, self.targets.mutating), (VALIDATING, self.targets.validating)):
            if name:
                await self._update(resource, name, lambda obj: _with_bundle_in_webhooks(obj, bundle))
        if self.targets.crd:
            await self._update(CRDS, self.targets.crd, lambda obj: _crd_with_bundle(obj, bundle))
        if self.targets.apiservice:
            await self._update(APISERVICES, self.targets.apiservice, lambda obj: _apiservice_with_bundle(obj, bundle))

    async def _update(
        self, resource: Resource, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        try:
            current = await self.client.get(resource, name)
            wanted = change(current)
            if wanted is not None:
                await self.client.replace(resource, name, wanted)
                log.info("caBundle updated", extra={"kind": resource.kind, "object": name})
        except ApiError as err:
            if err.not_found:
                log.debug("caBundle target not installed yet", extra={"kind": resource.kind, "object": name})
            elif err.conflict:
                log.info(
                    "caBundle update conflicted; retrying next round", extra={"kind": resource.kind, "object": name}
                )
            else:
                raise

    # -- every replica's work ----------------------------------------------------------------
    def write_files(self, state: SecretState) -> bool:
        """Write our serving pair and the trusted bundle; True if anything changed."""
        if state.serving is None or not state.bundle:
            return False
        wanted = (state.serving.cert_pem, state.serving.key_pem, state.bundle_pem)
        if wanted == self._written:
            return False
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.cert_dir / CA_CERT, state.bundle_pem)
        write_atomic(self.cert_dir / TLS_KEY, state.serving.key_pem, 0o600)
        write_atomic(self.cert_dir / TLS_CERT, state.serving.cert_pem)
        self._written = wanted
        self.files_ready.set()
        if self.on_files_written is not None:
            self.on_files_written()
        return True

    async def step(self) -> None:
        leading = self.elector is None or self.elector.is_leader
        state = await self.rotate_once() if leading else (await self._read_secret())[0]
        self.write_files(state)

    async def run(self) -> None:
        """Forever: (lead and rotate, or follow) every ``interval``; errors are logged and retried."""
        campaign = asyncio.create_task(self._campaign(), name="rotator-leader-election") if self.elector else None
        try:
            while True:
                try:
                    await self.step()
                except (TimeoutError, ApiError, OSError) as err:
                    log.warning("certificate rotation round failed; retrying", extra={"error": str(err)})
                except Exception:
                    # A bug must not stop rotation for good: say so loudly and try again next round.
                    log.exception("certificate rotation round failed unexpectedly; retrying")
                try:
                    await asyncio.wait_for(self._became_leader.wait(), timeout=self.interval)
                except TimeoutError:
                    pass
                self._became_leader.clear()
        finally:
            if campaign is not None:
                campaign.cancel()
                await asyncio.gather(campaign, return_exceptions=True)
                if self.elector is not None:
                    await self.elector.release()

    async def _campaign(self) -> None:
        assert self.elector is not None
        while True:
            await self.elector.acquire()
            self._became_leader.set()
            await self.elector.hold()


def _crd_with_bundle(crd: dict[str, Any], bundle: str) -> dict[str, Any] | None:
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    client_config = (conversion.get("webhook") or {}).get("clientConfig")
    if conversion.get("strategy") != "Webhook" or client_config is None or client_config.get("caBundle") == bundle:
        return None
    webhook = {**conversion["webhook"], "clientConfig": {**client_config, "caBundle": bundle}}
    return {**crd, "spec": {**crd["spec"], "conversion": {**conversion, "webhook": webhook}}}


def _apiservice_with_bundle(apiservice: dict[str, Any], bundle: str) -> dict[str, Any] | None:
    spec = apiservice.get("spec") or {}
    if spec.get("caBundle") == bundle or spec.get("insecureSkipTLSVerify"):
        return None
    return {**apiservice, "spec": {**spec, "caBundle": bundle}}
