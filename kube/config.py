"""Client configuration: an ApiClient from a kubeconfig or the pod's service account, plus QPS/burst.

The defaults are generous on purpose: the apiserver (API Priority and Fairness) should set the
pace, not a client-side limiter tuned for a laptop (sample-controller's QPS 5 makes 1,000 Foos
take minutes).
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config_from_dict
from multidict import CIMultiDict

from . import kubeconfig as kubeconfig_files
from .client import FencedConnector, KubeClient
from .ratelimit import TokenBucket


class MissingContextError(kubeconfig_files.KubeconfigError):
    """--context names no context: client-go's words (kubectl prefixes "Error in configuration: ")."""

    def __init__(self, context: str) -> None:
        super().__init__(f"context was not found for specified context: {context}")


@dataclass(frozen=True)
class ClientSettings:
    """How a process talks to the apiserver."""

    qps: float = 1000.0
    burst: int = 2000
    timeout: float = 30.0  # seconds, for every call but watches (which have their own)
    max_connections: int = 100
    user_agent: str = "foo-operator"
    field_manager: str | None = None
    # kubectl's --as and --as-group: every request carries Impersonate-User / Impersonate-Group.
    impersonate_user: str | None = None
    impersonate_groups: tuple[str, ...] = ()


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
    if context is not None and context not in {entry.get("name") for entry in loaded.config.get("contexts") or ()}:
        raise MissingContextError(context)
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
    if configuration.proxy is None and configuration.host:  # a kubeconfig's proxy-url comes first, as in client-go
        configuration.proxy = proxy_from_environment(configuration.host, os.environ)
    api = ApiClient(configuration)
    api.user_agent = settings.user_agent
    await _a_session_of_our_own(api, _impersonation(settings))
    return api


def _impersonation(settings: ClientSettings) -> list[tuple[str, str]]:
    """The headers of kubectl's --as/--as-group; one Impersonate-Group header per group (the
    apiserver reads each header value as one group, so they are never comma-joined)."""
    if settings.impersonate_user is None:
        return []
    return [("Impersonate-User", settings.impersonate_user)] + [
        ("Impersonate-Group", group) for group in settings.impersonate_groups
    ]


def proxy_from_environment(server: str, environ: Mapping[str, str]) -> str | None:
    """The proxy $HTTPS_PROXY/$HTTP_PROXY (either case) names for ``server``, unless $NO_PROXY exempts it.

    Read once per client, as client-go's ``http.ProxyFromEnvironment`` reads the environment once
    per process.
    """
    url = urlsplit(server)
    proxies = {
        scheme: value
        for scheme in ("https", "http", "no")
        for value in (environ.get(f"{scheme}_proxy") or environ.get(f"{scheme.upper()}_PROXY"),)
        if value
    }
    proxy = proxies.get(url.scheme or "https")
    if proxy is None or url.hostname is None:
        return None
    host = url.hostname if url.port is None else f"{url.hostname}:{url.port}"
    # The stdlib's own $NO_PROXY matching (what aiohttp uses); typeshed leaves it out.
    if "no" in proxies and urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxy


async def _a_session_of_our_own(api: ApiClient, headers: list[tuple[str, str]] | None = None) -> None:
    """Give the client a session that does not look up proxies and ~/.netrc on every request,
    and whose connector asks a write's fence once its connection is ready (``FencedConnector``).

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``, and aiohttp then reads
    the environment and ~/.netrc in a worker thread, twice, for every request: a large share
    of the controller's CPU while it reconciled, and more in a pod, whose environment holds a
    variable per Service. The proxy is resolved once above instead;
    ~/.netrc is not read, as client-go and kubectl do not read it. The connector has the TLS
    settings and pool size kubernetes_asyncio's would have.
    """
    rest = api.rest_client
    session: aiohttp.ClientSession = rest.pool_manager
    configuration: Configuration = api.configuration
    limit = session.connector.limit if session.connector is not None else configuration.connection_pool_maxsize
    # Watch events of large objects need more than aiohttp's default read buffer (as upstream sets).
    # Session headers, not ApiClient.default_headers: those are a dict, and groups repeat a header.
    rest.pool_manager = aiohttp.ClientSession(
        connector=FencedConnector(limit=limit, ssl=_tls_context(configuration)),
        trust_env=False,
        read_bufsize=2**21,
        headers=CIMultiDict(headers or ()),
    )
    await session.close()  # nothing was sent on it yet


def _tls_context(configuration: Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes_asyncio's RESTClientObject makes from ``configuration``.

    Made again, not taken from its connector: aiohttp keeps a connector's SSL context private,
    and ``FencedConnector`` needs one of its own (kubernetes_asyncio builds the context inline).
    """
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


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
