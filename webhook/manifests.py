"""The admission configurations that point the kube-apiserver at this service.

Built in Python for the local control plane and tests; the Helm chart templates the same
objects (tests/unit/test_chart*.py keeps them in step).
"""

from __future__ import annotations

import base64
from typing import Any

from fooapi import GROUP, HUB_VERSION, PLURAL

CONFIGURATION_NAME = "foo-operator"
MUTATING_WEBHOOK = f"mfoo.{GROUP}"
VALIDATING_WEBHOOK = f"vfoo.{GROUP}"
TIMEOUT_SECONDS = 5  # short: a stuck webhook must not hold kubectl for the default 10 s


def ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()


def url_client_config(base_url: str, path: str, ca_pem: bytes) -> dict[str, Any]:
    return {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle(ca_pem)}


def service_client_config(namespace: str, name: str, path: str, ca_pem: bytes, port: int = 443) -> dict[str, Any]:
    return {
        "service": {"namespace": namespace, "name": name, "path": path, "port": port},
        "caBundle": ca_bundle(ca_pem),
    }


def _webhook(
    name: str, client_config: dict[str, Any], resources: list[str], exclude_namespace: str | None
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [GROUP],
                "apiVersions": [HUB_VERSION],
                "operations": ["CREATE", "UPDATE"],
                "resources": resources,
                "scope": "Namespaced",
            }
        ],
        # The apiserver converts v1alpha1 requests to v1 for us, so one version is enough.
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "admissionReviewVersions": ["v1"],
    }
    if exclude_namespace:
        # Never let a broken operator block writes in its own namespace (how it would recover).
        webhook["namespaceSelector"] = {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [exclude_namespace]}
            ]
        }
    return webhook


def mutating_configuration(client_config: dict[str, Any], *, exclude_namespace: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        # foos/scale too: it refuses out-of-bounds replicas before the CRD schema can, in our words.
        "webhooks": [
            {
                **_webhook(MUTATING_WEBHOOK, client_config, [PLURAL, f"{PLURAL}/scale"], exclude_namespace),
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }


def validating_configuration(client_config: dict[str, Any], *, exclude_namespace: str | None = None) -> dict[str, Any]:
    # foos/scale too: `kubectl scale` would otherwise write replicas the webhook never saw.
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [_webhook(VALIDATING_WEBHOOK, client_config, [PLURAL, f"{PLURAL}/scale"], exclude_namespace)],
    }
