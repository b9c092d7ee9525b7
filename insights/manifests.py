"""The objects that register the aggregated API and give it (and its users) the rights it needs.

Plain dicts, one builder per object, so the e2e suite applies exactly these and the Helm chart
mirrors them (charts/foo-operator/templates/): the APIService, the two bindings every
extension apiserver needs (`system:auth-delegator` for TokenReviews/SubjectAccessReviews,
`extension-apiserver-authentication-reader` for the front-proxy ConfigMap), read access to what
FooHealth is computed from (cluster-wide, or a Role in the one namespace insights watches), and
roles that aggregate into the built-in view and edit roles.
"""

from __future__ import annotations

import base64

from apimachinery.objects import Object
from fooapi import GROUP as FOO_GROUP
from fooapi import PLURAL as FOO_PLURAL

from .resources import FOO_HEALTHS, FOO_REVIEWS, GROUP, GROUP_PRIORITY_MINIMUM, VERSION, VERSION_PRIORITY

RBAC = "rbac.authorization.k8s.io/v1"
APISERVICE_NAME = f"{VERSION}.{GROUP}"


def _b64(ca_bundle: bytes | str) -> str:
    data = ca_bundle.encode() if isinstance(ca_bundle, str) else ca_bundle
    return base64.b64encode(data).decode()


def _service_account(name: str, namespace: str) -> Object:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def _meta(name: str, labels: dict[str, str] | None, namespace: str | None = None) -> Object:
    meta: Object = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return meta


def api_service(
    *, namespace: str, service: str, ca_bundle: bytes | str, port: int = 443, labels: dict[str, str] | None = None
) -> Object:
    """`v1alpha1.insights.samplecontroller.k8s.io`, served by ``service`` and trusted through ``ca_bundle``."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": _meta(APISERVICE_NAME, labels),
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"namespace": namespace, "name": service, "port": port},
            "caBundle": _b64(ca_bundle),
            "groupPriorityMinimum": GROUP_PRIORITY_MINIMUM,
            "versionPriority": VERSION_PRIORITY,
        },
    }


def auth_delegator_binding(
    *, name: str, namespace: str, service_account: str, labels: dict[str, str] | None = None
) -> Object:
    """Lets the service ask SubjectAccessReviews (and TokenReviews) of the cluster."""
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": _meta(f"{name}:system:auth-delegator", labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
        "subjects": [_service_account(service_account, namespace)],
    }


def authentication_reader_binding(
    *, name: str, namespace: str, service_account: str, labels: dict[str, str] | None = None
) -> Object:
    """Lets the service read kube-system/extension-apiserver-authentication (front-proxy trust)."""
    return {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": _meta(f"{name}:extension-apiserver-authentication-reader", labels, "kube-system"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "extension-apiserver-authentication-reader",
        },
        "subjects": [_service_account(service_account, namespace)],
    }


def reader_role(*, name: str, watch_namespace: str | None = None, labels: dict[str, str] | None = None) -> Object:
    """What FooHealth is computed from: Foos, Deployments, Pods and Events, read-only; a ClusterRole,
    or a Role in ``watch_namespace`` when insights watches that one alone (`--namespace`).

    list and watch only: the informers (insights/cluster.py) never GET one object, so `get` would
    be a right granted and never used.
    """
    read = ["list", "watch"]
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole" if watch_namespace is None else "Role",
        "metadata": _meta(f"{name}:insights-reader", labels, watch_namespace),
        "rules": [
            {"apiGroups": [FOO_GROUP], "resources": [FOO_PLURAL], "verbs": read},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": read},
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": read},
        ],
    }


def reader_binding(
    *,
    name: str,
    namespace: str,
    service_account: str,
    watch_namespace: str | None = None,
    labels: dict[str, str] | None = None,
) -> Object:
    """reader_role's binding: cluster-wide, or in ``watch_namespace`` alone."""
    kind = "ClusterRole" if watch_namespace is None else "Role"
    return {
        "apiVersion": RBAC,
        "kind": f"{kind}Binding",
        "metadata": _meta(f"{name}:insights-reader", labels, watch_namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": f"{name}:insights-reader"},
        "subjects": [_service_account(service_account, namespace)],
    }


def aggregate_to_view_role(*, name: str, labels: dict[str, str] | None = None) -> Object:
    """Everyone with `view` (and so `edit` and `admin`) may read foohealths."""
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": _meta(
            f"{name}:insights:view", {**(labels or {}), "rbac.authorization.k8s.io/aggregate-to-view": "true"}
        ),
        "rules": [{"apiGroups": [GROUP], "resources": [FOO_HEALTHS.name], "verbs": list(FOO_HEALTHS.verbs)}],
    }


def aggregate_to_edit_role(*, name: str, labels: dict[str, str] | None = None) -> Object:
    """Everyone with `edit` (and so `admin`) may create fooreviews; like a dry run, they store nothing."""
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": _meta(
            f"{name}:insights:edit", {**(labels or {}), "rbac.authorization.k8s.io/aggregate-to-edit": "true"}
        ),
        "rules": [{"apiGroups": [GROUP], "resources": [FOO_REVIEWS.name], "verbs": list(FOO_REVIEWS.verbs)}],
    }


def aggregated_api_manifests(
    *,
    namespace: str,
    service: str,
    service_account: str,
    ca_bundle: bytes | str,
    port: int = 443,
    name: str = "foo-operator",
    watch_namespace: str | None = None,
    labels: dict[str, str] | None = None,
) -> list[Object]:
    """Everything above, in an order that applies cleanly (RBAC before the APIService goes live).
    ``watch_namespace``: the one namespace insights reads (its `--namespace`), else all."""
    return [
        auth_delegator_binding(name=name, namespace=namespace, service_account=service_account, labels=labels),
        authentication_reader_binding(name=name, namespace=namespace, service_account=service_account, labels=labels),
        reader_role(name=name, watch_namespace=watch_namespace, labels=labels),
        reader_binding(
            name=name,
            namespace=namespace,
            service_account=service_account,
            watch_namespace=watch_namespace,
            labels=labels,
        ),
        aggregate_to_view_role(name=name, labels=labels),
        aggregate_to_edit_role(name=name, labels=labels),
        api_service(namespace=namespace, service=service, ca_bundle=ca_bundle, port=port, labels=labels),
    ]
