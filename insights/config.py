"""What the aggregated API needs to know; cheap to import (no Kubernetes client behind it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fooapi import DEFAULT_IMAGE

if TYPE_CHECKING:
    from .authn import RequestHeaderConfig
    from .authz import Authorizer
    from .view import HealthView


@dataclass(frozen=True)
class AggregatedConfig:
    """Settings of the aggregated API; the last three are seams for tests and static setups."""

    default_image: str = DEFAULT_IMAGE
    # Where to reach the cluster: a kubeconfig path, or None for the pod's service account.
    kubeconfig: str | None = None
    # The one namespace whose Foos, Deployments, Pods and Events FooHealth is computed from (the
    # controller's, and all RBAC grants then); None: every namespace.
    namespace: str | None = None
    # The requestheader CA is written here; give the same path to the TLS layer
    # (ServerOptions.client_ca_file) so the listener asks clients for a certificate.
    requestheader_ca_file: Path | None = None
    authorization_allowed_ttl: float = 10.0
    authorization_denied_ttl: float = 10.0
    watch_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    history: int = 1024
    # The container's memory limit: FooReviews are charged to a budget taken from it (api.review_budget).
    memory_limit_mib: int = 256
    history_window: float = 300.0  # seconds a FooHealth change stays readable (Exact, continue, watch resume)
    # How long startup waits for the ConfigMap before serving anyway (the caches sync meanwhile;
    # foohealths answer 503 until they have).
    sync_timeout: float = 10.0
    # Given, these are used as they are and nothing is fetched from the cluster for them.
    requestheader: RequestHeaderConfig | None = None
    authorizer: Authorizer | None = None
    view: HealthView | None = None

    @property
    def needs_cluster(self) -> bool:
        return self.requestheader is None or self.authorizer is None or self.view is None
