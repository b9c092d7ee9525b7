"""foo-operator on a LocalControlPlane: the webhook, insights and controller as local processes, registered.

The webhook listens on 127.0.0.1 with a certificate from our own CA; the CRD's conversion
webhook and the admission configurations point at ``https://127.0.0.1:<port>`` with that CA as
``caBundle`` — the same objects the chart installs, with a URL instead of a Service.

The insights server listens on 127.0.0.1 too. An APIService can only name a Service, and no
endpoint may hold a loopback address, so its Service is an ExternalName one naming
``localhost``: on a plane without aggregator routing kube-apiserver dials that name at the
APIService's port (docs/architecture.md, "The whole product on `make run`"). It needs no root.
"""

from __future__ import annotations

import json
import shutil
import ssl
import sys
import urllib.request
from pathlib import Path
from typing import Any

from certs.authority import KeyPair, issue_serving, new_ca, service_dns_names
from certs.files import write_serving_files
from fooapi import CRD_NAME
from fooapi.crd import crd_manifest
from insights.manifests import APISERVICE_NAME, aggregated_api_manifests
from insights.resources import GROUP as INSIGHTS_GROUP
from webhook.manifests import CONFIGURATION_NAME, mutating_configuration, url_client_config, validating_configuration

from .cluster import LocalControlPlane, free_port
from .pki import issue_user, write_kubeconfig
from .procs import Component, Started, wait_until

REPO = Path(__file__).resolve().parents[2]
FIELD_MANAGER = "foo-operator"
# The webhooks skip the operator's own namespace, as the chart's skip its release namespace: a
# broken operator must never block the writes that would repair it. Foos there meet the CRD
# schema's bounds alone.
OWN_NAMESPACE = "foo-operator-system"
INSIGHTS_SERVICE = "foo-operator-insights"  # the Service the APIService names, and its ServiceAccount


def webhook_args(cert_dir: Path, port: int, *, metrics: str = "0") -> list[str]:
    """`python -m webhook`'s serving flags on loopback: certificates from ``cert_dir``, ``port``, and
    the metrics listener's address (``"0"``: none). What the product, the benchmarks and the tests
    that start a webhook of their own all pass. One process (``--workers 1``, not the default
    ``auto``): the numbers, signals and ``/proc`` readings of those callers are one process's; a
    later ``--workers`` in the caller's own arguments wins."""
    return [
        "--cert-dir", str(cert_dir), "--bind-address", "127.0.0.1", "--port", str(port),
        "--metrics-bind-address", metrics, "--workers", "1",
    ]  # fmt: skip


class LocalProduct(Started):
    """The webhook service (and optionally insights and the controller) running against ``plane``.

    ``insights`` needs a plane started with ``aggregator_routing=False`` (what `make run` starts).
    """

    def __init__(
        self,
        plane: LocalControlPlane,
        *,
        controller: bool = False,
        insights: bool = False,
        webhook_args: list[str] | None = None,
        controller_args: list[str] | None = None,
    ) -> None:
        if insights and plane.aggregator_routing:
            raise ValueError(
                "insights on loopback needs a plane with aggregator_routing=False (an ExternalName Service)"
            )
        self.plane = plane
        self.workdir = plane.workdir / "foo-operator"
        self.cert_dir = self.workdir / "certs"
        self.with_controller = controller
        self.with_insights = insights
        self.webhook_args = webhook_args or []
        self.controller_args = controller_args or []
        self.port = 0
        self.url = ""
        self.webhook: Component | None = None
        self.controller: Component | None = None
        self.controller_health_port = 0
        self.metrics_port = 0  # the webhook's /metrics listener
        self.ca: KeyPair | None = None
        self.ca_pem = b""
        self.insights: Component | None = None
        self.insights_port = 0

    @property
    def metrics_url(self) -> str:
        """The webhook's metrics listener (plain HTTP on loopback)."""
        return f"http://127.0.0.1:{self.metrics_port}"

    # -- certificates and manifests ---------------------------------------------------------
    def _write_certs(self) -> None:
        ca = new_ca("foo-operator-local-ca")
        serving = issue_serving(ca, common_name="foo-operator-webhook", dns_names=["localhost"], ips=["127.0.0.1"])
        write_serving_files(self.cert_dir, ca, serving, force=True)
        self.ca = ca
        self.ca_pem = ca.cert_pem

    def manifests(self, url: str | None = None) -> list[dict[str, Any]]:
        """CRD (conversion by webhook) and both admission configurations, pointing at us (or at
        ``url``: another server with our certificates, registered exactly as we are)."""
        url = url or self.url
        return [
            crd_manifest(conversion_client_config=url_client_config(url, "/convert", self.ca_pem)),
            mutating_configuration(url_client_config(url, "/mutate-foo", self.ca_pem), exclude_namespace=OWN_NAMESPACE),
            validating_configuration(
                url_client_config(url, "/validate-foo", self.ca_pem), exclude_namespace=OWN_NAMESPACE
            ),
        ]

    def register(self, url: str | None = None) -> None:
        """Server-side apply of our objects; re-running it converges (e.g. after a restart). With
        ``url``, the same objects point at that server instead (the benchmarks' Go peer)."""
        self.plane.apply(*self.manifests(url), field_manager=FIELD_MANAGER)
        self.plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")

    def unregister_admission(self) -> None:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            self.plane.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found")

    # -- processes ---------------------------------------------------------------------------
    def _python(self, module: str, args: list[str], log: str) -> Component:
        return Component(module, [sys.executable, "-m", module, *args], self.plane.logs_dir / log)

    def start_webhook(self, extra_args: list[str] | None = None, cert_dir: Path | None = None) -> None:
        """Start (or restart) the webhook on the same port, so registered URLs stay right."""
        self.port = self.port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        cert_dir = cert_dir or self.cert_dir
        self.metrics_port = self.metrics_port or free_port()
        self.webhook = self._python(
            "webhook",
            [
                *webhook_args(cert_dir, self.port, metrics=f"127.0.0.1:{self.metrics_port}"),
                *self.webhook_args,
                *(extra_args or []),
            ],
            "webhook.log",
        )
        self.webhook.start()

        def ready() -> bool:
            # In rotation mode ca.crt appears only once the Secret exists: read it each time.
            context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
            with urllib.request.urlopen(self.url + "/readyz", context=context, timeout=2) as response:
                return bool(response.status == 200)

        wait_until("the webhook's /readyz", ready, timeout=30, watch=[self.webhook])

    def stop_webhook(self) -> None:
        if self.webhook is not None:
            self.webhook.stop()

    def start_controller(self) -> None:
        # Free ports, not the defaults 8080/8081, which a developer's machine may already use.
        self.controller_health_port = free_port()
        self.controller = self._python(
            "controller",
            [
                "--kubeconfig",
                str(self.plane.kubeconfig),
                "--metrics-bind-address",
                f"127.0.0.1:{free_port()}",
                "--health-probe-bind-address",
                f"127.0.0.1:{self.controller_health_port}",
                *self.controller_args,
            ],
            "controller.log",
        )
        self.controller.start()

    # -- insights ------------------------------------------------------------------------------
    @property
    def insights_cert_dir(self) -> Path:
        return self.cert_dir / "insights"

    def _insights_identity(self) -> Path:
        """A kubeconfig naming the insights ServiceAccount, as the pod's token would.

        A client certificate whose subject is the ServiceAccount's user name and groups: the RBAC
        that ``insights.manifests`` binds to the ServiceAccount applies unchanged, and unlike a
        requested token nothing expires however long `make run` runs.
        """
        assert self.plane.pki is not None
        name = INSIGHTS_SERVICE
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{OWN_NAMESPACE}")
        issue_user(self.plane.pki, name, f"system:serviceaccount:{OWN_NAMESPACE}:{name}", groups)
        return write_kubeconfig(
            self.insights_cert_dir / "kubeconfig", server=self.plane.server, pki=self.plane.pki, user=name
        )

    def _insights_objects(self) -> list[dict[str, Any]]:
        """The namespace, the ServiceAccount, the ExternalName Service and everything the chart
        registers insights with (RBAC, the APIService at the port the server listens on)."""
        meta = {"name": INSIGHTS_SERVICE, "namespace": OWN_NAMESPACE}
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
            # The aggregator dials <externalName>:<APIService port> and checks the certificate
            # against <service>.<namespace>.svc: the port is ours, the name is loopback.
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta,
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            },
            *aggregated_api_manifests(
                namespace=OWN_NAMESPACE,
                service=INSIGHTS_SERVICE,
                service_account=INSIGHTS_SERVICE,
                ca_bundle=self.ca_pem,
                port=self.insights_port,
            ),
        ]

    def start_insights(self) -> None:
        """Start the insights server on loopback, register it, and wait until its APIService is Available."""
        assert self.ca is not None
        self.insights_port = self.insights_port or free_port()
        serving = issue_serving(
            self.ca,
            common_name=INSIGHTS_SERVICE,
            dns_names=service_dns_names(INSIGHTS_SERVICE, OWN_NAMESPACE),
            ips=["127.0.0.1"],
        )
        write_serving_files(self.insights_cert_dir, self.ca, serving, force=True)
        kubeconfig = self._insights_identity()
        self.plane.apply(*self._insights_objects(), field_manager=FIELD_MANAGER)
        self.insights = self._python(
            "insights",
            [
                "--cert-dir", str(self.insights_cert_dir), "--bind-address", "127.0.0.1",
                "--port", str(self.insights_port), "--metrics-bind-address", f"127.0.0.1:{free_port()}",
                "--kubeconfig", str(kubeconfig),
                "--requestheader-ca-file", str(self.insights_cert_dir / "requestheader-ca.crt"),
            ],
            "insights.log",
        )  # fmt: skip
        self.insights.start()
        wait_until(
            f"the APIService {APISERVICE_NAME} to be Available",
            self._insights_available,
            timeout=90,
            watch=[self.insights],
        )
        # kube-apiserver fetches an APIService's OpenAPI on a queue of its own, backing off after
        # the 503 it met before insights served: `kubectl explain foohealth` fails until then.
        wait_until(
            "kube-apiserver to serve insights' OpenAPI (kubectl explain)",
            self._insights_openapi_loaded,
            timeout=90,
            watch=[self.insights],
        )

    def _insights_openapi_loaded(self) -> bool:
        status, body = self.plane.get("/openapi/v3")
        return status == 200 and f"apis/{INSIGHTS_GROUP}/v1alpha1" in json.loads(body).get("paths", {})

    def _insights_available(self) -> bool:
        status, body = self.plane.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}")
        if status != 200:
            return False
        conditions = json.loads(body).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_certs()
        self.start_webhook()
        self.register()
        if self.with_insights:
            self.start_insights()
        if self.with_controller:
            self.start_controller()

    def stop(self) -> None:
        if self.insights is not None:
            # The plane may outlive us (tests): a registered group nobody serves fails discovery.
            self.plane.kubectl("delete", "apiservice", APISERVICE_NAME, "--ignore-not-found", check=False)
        for component in (self.controller, self.insights, self.webhook):
            if component is not None:
                component.stop()
        # The private key must not outlive the run (logs are kept, keys are not).
        shutil.rmtree(self.cert_dir, ignore_errors=True)
