"""Client configuration: an ApiClient from a kubeconfig or the pod's service account, plus QPS/burst.

The defaults are generous on purpose: the apiserver (API Priority and Fairness) should set the
pace, not a client-side limiter tuned for a laptop (sample-controller's QPS 5 makes 1,000 Foos
take minutes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config_from_dict

from . import kubeconfig as kubeconfig_files
from .client import KubeClient
from .ratelimit import TokenBucket


@dataclass(frozen=True)
class ClientSettings:
    """How a process talks to the apiserver."""

    qps: float = 1000.0
    burst: int = 2000
    timeout: float = 30.0  # seconds, for every call but watches (which have their own)
    max_connections: int = 100
    user_agent: str = "foo-operator"
    field_manager: str | None = None


def in_cluster() -> bool:
    """True inside a pod: the apiserver's address is in the environment."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT"))


async def load_configuration(kubeconfig: str | None = None, *, context: str | None = None) -> Configuration:
    """client-go's loading rules (``kube.kubeconfig``): ``kubeconfig`` alone if given; else the files
    in $KUBECONFIG merged, else ~/.kube/config; the in-cluster service account only when those give
    nothing. Raises ``KubeconfigError`` (one line) when there is nothing to use.
    """
    configuration = Configuration()
    loaded = kubeconfig_files.load(kubeconfig)
    if loaded.empty and kubeconfig is None and in_cluster():
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return configuration
    if loaded.empty:
        where = ", ".join(map(str, loaded.files)) or "no kubeconfig file found"
        raise kubeconfig_files.KubeconfigError(f"no cluster configured ({where}) and not running in a cluster")
    try:
        await load_kube_config_from_dict(loaded.config, context=context, client_configuration=configuration)
    except ConfigException as err:
        raise kubeconfig_files.KubeconfigError(" ".join(str(err).split())) from None
    return configuration


async def load_api_client(
    kubeconfig: str | None = None, *, context: str | None = None, settings: ClientSettings = ClientSettings()
) -> ApiClient:
    """A kubernetes_asyncio ApiClient; the caller closes it."""
    configuration = await load_configuration(kubeconfig, context=context)
    configuration.connection_pool_maxsize = settings.max_connections
    api = ApiClient(configuration)
    api.user_agent = settings.user_agent
    return api


async def connect(
    kubeconfig: str | None = None, *, context: str | None = None, settings: ClientSettings = ClientSettings()
) -> KubeClient:
    """A ``KubeClient`` with the settings' QPS/burst limiter and timeout; the caller closes it."""
    api = await load_api_client(kubeconfig, context=context, settings=settings)
    return KubeClient(
        api,
        limiter=TokenBucket(settings.qps, settings.burst),
        timeout=settings.timeout,
        field_manager=settings.field_manager,
    )
