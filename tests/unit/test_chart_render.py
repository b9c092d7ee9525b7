"""What `helm template` writes: the objects, their wiring, TLS in each mode, RBAC, pod hardening."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from certs.authority import service_dns_names
from controller.settings import parse as parse_controller_flags
from hack.release.pipeline import chart_versions
from insights.__main__ import parse_args as parse_insights_flags
from insights.manifests import aggregated_api_manifests
from serving.tlspolicy import parse_tls_policy
from webhook.command import parse_args as parse_webhook_flags
from webhook.manifests import (
    CONFIGURATION_NAME,
    mutating_configuration,
    service_client_config,
    validating_configuration,
)
from webhook.server import RotationOptions

from .test_chart import (
    GENERATED_SECRET,
    MODES,
    NAMESPACE,
    PEM_CA,
    PEM_CA_BASE64,
    SERVICE,
    TLS_SECRET,
    ca_bundle_holders,
    container,
    find,
    kinds,
    mode_values,
    pod_specs,
    render,
    render_error,
)

WEBHOOK = "foo-operator-webhook"
CONTROLLER = "foo-operator-controller"
INSIGHTS = "foo-operator-insights"
APISERVICE = "v1alpha1.insights.samplecontroller.k8s.io"


# ----------------------------------------------------------------------------- the objects
def test_default_install_has_every_object_of_the_operator() -> None:
    assert kinds(render()) == sorted(
        [
            ("APIService", APISERVICE),
            ("ClusterRole", CONTROLLER),
            ("ClusterRole", "foo-operator-metrics-reader"),
            ("ClusterRole", "foo-operator:insights-reader"),
            ("ClusterRole", "foo-operator:insights:edit"),
            ("ClusterRole", "foo-operator:insights:view"),
            ("ClusterRoleBinding", CONTROLLER),
            ("ClusterRoleBinding", "foo-operator:insights-reader"),
            ("ClusterRoleBinding", "foo-operator:metrics-auth-delegator"),
            ("ClusterRoleBinding", "foo-operator:system:auth-delegator"),
            ("CustomResourceDefinition", "foos.samplecontroller.k8s.io"),
            ("Deployment", CONTROLLER),
            ("Deployment", INSIGHTS),
            ("Deployment", WEBHOOK),
            ("MutatingWebhookConfiguration", CONFIGURATION_NAME),
            ("Pod", "foo-operator-test-readyz"),
            ("PodDisruptionBudget", CONTROLLER),
            ("PodDisruptionBudget", INSIGHTS),
            ("PodDisruptionBudget", WEBHOOK),
            ("Role", f"{CONTROLLER}-leader-election"),
            ("RoleBinding", f"{CONTROLLER}-leader-election"),
            ("RoleBinding", "foo-operator:extension-apiserver-authentication-reader"),
            ("Secret", GENERATED_SECRET),
            ("Service", INSIGHTS),
            ("Service", f"{CONTROLLER}-metrics"),
            ("Service", f"{INSIGHTS}-metrics"),
            ("Service", SERVICE),
            ("Service", f"{WEBHOOK}-metrics"),
            ("ServiceAccount", CONTROLLER),
            ("ServiceAccount", INSIGHTS),
            ("ServiceAccount", WEBHOOK),
            ("ValidatingWebhookConfiguration", CONFIGURATION_NAME),
        ]
    )


def test_namespaced_objects_land_in_the_release_namespace() -> None:
    cluster_scoped = {
        "APIService",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for obj in render():
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        elif obj["metadata"]["name"] != "foo-operator:extension-apiserver-authentication-reader":
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


# ----------------------------------------------------------------------------- admission
@pytest.mark.parametrize(
    ("kind", "builder", "path"),
    [
        ("MutatingWebhookConfiguration", mutating_configuration, "/mutate-foo"),
        ("ValidatingWebhookConfiguration", validating_configuration, "/validate-foo"),
    ],
)
def test_admission_configuration_is_the_local_planes_pointing_at_the_service(
    kind: str, builder: Any, path: str
) -> None:
    rendered = find(render(), kind, CONFIGURATION_NAME)
    ca_pem = base64.b64decode(rendered["webhooks"][0]["clientConfig"]["caBundle"])
    expected = builder(service_client_config(NAMESPACE, SERVICE, path, ca_pem), exclude_namespace=NAMESPACE)
    assert rendered["webhooks"] == expected["webhooks"]


def test_validating_webhook_covers_scale_and_both_use_the_agreed_policies() -> None:
    objects = render()
    validating = find(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert validating["rules"][0]["resources"] == ["foos", "foos/scale"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = find(objects, kind)["webhooks"][0]
        assert webhook["rules"][0] | {"resources": None} == {
            "apiGroups": ["samplecontroller.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": None,
            "scope": "Namespaced",
        }
        assert (
            webhook["matchPolicy"],
            webhook["sideEffects"],
            webhook["failurePolicy"],
            webhook["timeoutSeconds"],
            webhook["admissionReviewVersions"],
        ) == ("Equivalent", "None", "Fail", 5, ["v1"])


def test_more_namespaces_can_skip_admission_but_never_the_release_namespace_itself() -> None:
    objects = render({"webhook": {"excludeNamespaces": ["kube-system", NAMESPACE]}})
    selector = find(objects, "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]
    assert selector == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]}
        ]
    }


# ----------------------------------------------------------------------------- service and pods
def test_service_port_443_reaches_the_webhook_container_port_9443() -> None:
    objects = render()
    port = find(objects, "Service", SERVICE)["spec"]["ports"][0]
    webhook = container(find(objects, "Deployment", WEBHOOK))
    assert (port["port"], port["targetPort"]) == (443, "https")
    assert webhook["ports"][0] == {"name": "https", "containerPort": 9443, "protocol": "TCP"}
    selector = find(objects, "Service", SERVICE)["spec"]["selector"]
    pod_labels = find(objects, "Deployment", WEBHOOK)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert selector["app.kubernetes.io/component"] == "webhook"


def test_webhook_flags_are_ones_python_m_webhook_accepts() -> None:
    deployment = find(
        render({"defaultImage": "registry.example/nginx:1.27", "webhook": {"drainSeconds": 7}}), "Deployment", WEBHOOK
    )
    webhook = container(deployment)
    assert webhook["command"] == ["foo-operator-webhook"]
    args = parse_webhook_flags(webhook["args"])
    assert (str(args.cert_dir), args.port, args.default_image, args.drain_seconds, args.log_format) == (
        "/etc/foo-operator/tls",
        9443,
        "registry.example/nginx:1.27",
        7.0,
        "json",
    )
    mounts = {m["mountPath"]: m["name"] for m in webhook["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/etc/foo-operator/tls"]]["secret"]["secretName"] == GENERATED_SECRET


def test_insights_runs_in_its_own_deployment_with_flags_python_m_insights_accepts() -> None:
    objects = render({"defaultImage": "registry.example/nginx:1.27"})
    deployment = find(objects, "Deployment", INSIGHTS)
    insights = container(deployment)
    assert insights["command"] == ["foo-operator-insights"]
    args = parse_insights_flags(insights["args"])
    assert (str(args.cert_dir), args.port, args.default_image) == (
        "/etc/foo-operator/tls",
        8443,
        "registry.example/nginx:1.27",
    )
    assert str(args.requestheader_ca_file).startswith("/tmp/"), "the only writable place in the container"
    assert args.kubeconfig is None, "in a pod: the in-cluster config"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == INSIGHTS and pod["automountServiceAccountToken"] is True
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert tls["secretName"] == GENERATED_SECRET
    assert [i["key"] for i in tls["items"]] == ["tls.crt", "tls.key"], "never the rotator's CA key"
    service = find(objects, "Service", INSIGHTS)["spec"]
    assert service["ports"][0]["targetPort"] == "https" and insights["ports"][0]["containerPort"] == 8443
    assert service["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["selector"]["app.kubernetes.io/component"] == "insights"


def test_controller_flags_are_ones_python_m_controller_accepts_with_leader_election_on() -> None:
    controller = container(find(render({"defaultImage": "registry.example/nginx:1.27"}), "Deployment", CONTROLLER))
    assert controller["command"] == ["foo-operator-controller"]
    settings = parse_controller_flags(controller["args"])
    assert settings.leader_elect is True
    assert (settings.leader_elect_namespace, settings.leader_elect_name) == (NAMESPACE, CONTROLLER)
    assert settings.default_image == "registry.example/nginx:1.27"
    assert settings.namespace is None
    ports = {p["name"]: p["containerPort"] for p in controller["ports"]}
    assert (settings.metrics.port, settings.health_port) == (ports["metrics"], ports["health"])
    assert settings.metrics.secure and settings.metrics.host is None, "secure, so reachable by Prometheus"


def test_controller_can_watch_one_namespace_with_rbac_bound_only_there() -> None:
    objects = render({"controller": {"watchNamespace": "team-a"}})
    assert parse_controller_flags(container(find(objects, "Deployment", CONTROLLER))["args"]).namespace == "team-a"
    binding = find(objects, "RoleBinding", CONTROLLER)
    assert binding["metadata"]["namespace"] == "team-a"
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == CONTROLLER]


def test_webhook_runs_two_replicas_spread_over_nodes_with_a_disruption_budget() -> None:
    objects = render()
    deployment = find(objects, "Deployment", WEBHOOK)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    pdb = find(objects, "PodDisruptionBudget", WEBHOOK)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    hard = find(render({"webhook": {"podAntiAffinity": "hard"}}), "Deployment", WEBHOOK)
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution"
        in hard["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    )


def test_every_component_is_probed_on_a_health_port_of_its_own_that_its_process_serves() -> None:
    objects = render()
    for name in (WEBHOOK, INSIGHTS, CONTROLLER):
        pod = container(find(objects, "Deployment", name))
        assert pod["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}, name
        assert pod["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}, name
        [health] = [p["containerPort"] for p in pod["ports"] if p["name"] == "health"]
        assert f"--health-probe-bind-address=:{health}" in pod["args"], name


def test_every_pod_is_hardened_and_every_container_has_resources() -> None:
    for pod in pod_specs(render()).values():
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["capabilities"]) == (
                True,
                False,
                {"drop": ["ALL"]},
            )
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_image_defaults_to_the_app_version_and_takes_a_digest() -> None:
    app_version = chart_versions()[1]  # the one version: hack.release
    assert (
        container(find(render(), "Deployment", WEBHOOK))["image"] == f"ghcr.io/foo-operator/foo-operator:{app_version}"
    )
    digest = "sha256:" + "ab" * 32
    objects = render({"image": {"repository": "registry.example/foo", "digest": digest}})
    for name in (WEBHOOK, INSIGHTS, CONTROLLER):
        assert container(find(objects, "Deployment", name))["image"] == f"registry.example/foo@{digest}"


def test_helm_test_pod_checks_readyz_through_the_service_name_with_the_ca() -> None:
    pod = find(render(), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    assert f'name = "{SERVICE}.{NAMESPACE}.svc"' in script
    assert "server_hostname=name" in script and "GET /readyz" in script
    assert 'open("/etc/foo-operator/tls/ca.crt")' in script
    # The name itself is dialled (cluster DNS resolves it), as the apiserver would.
    assert "socket.create_connection((name, port)" in script and "port = 443" in script
    assert "_SERVICE_HOST" not in script and pod["spec"]["enableServiceLinks"] is False
    assert not [o for o in render({"tests": {"enabled": False}}) if o["kind"] == "Pod"]


def test_helm_test_pod_runs_the_charts_own_image_where_the_values_place_it() -> None:
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    pod = find(
        render(
            {
                "image": {"repository": "registry.example/foo", "tag": "1.2.3", "pullPolicy": "Never"},
                "imagePullSecrets": [{"name": "pull"}],
                "tests": {"nodeSelector": {"pool": "ops"}, "tolerations": [toleration]},
            }
        ),
        "Pod",
    )
    spec = pod["spec"]
    assert spec["containers"][0]["image"] == "registry.example/foo:1.2.3"
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert spec["containers"][0]["command"] == ["python3", "-c"]
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    # Helm merges maps: yours adds to the default `kubernetes.io/os: linux` (null drops it).
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "ops"}
    assert spec["tolerations"] == [toleration]
    other = find(render({"tests": {"image": "registry.example/probe:1"}}), "Pod")
    assert other["spec"]["containers"][0]["image"] == "registry.example/probe:1"


# ----------------------------------------------------------------------------- TLS
def test_generated_mode_puts_one_ca_in_the_secret_and_all_four_ca_bundles() -> None:
    objects = render()
    secret = find(objects, "Secret", GENERATED_SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    bundles = {kind: holder["caBundle"] for kind, holder in ca_bundle_holders(objects).items()}
    assert set(bundles.values()) == {secret["data"]["ca.crt"]}, "every caBundle must be the Secret's CA"


def test_generated_certificate_is_signed_by_that_ca_for_every_service_name() -> None:
    data = find(render(), "Secret", GENERATED_SECRET)["data"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    key = serialization.load_pem_private_key(base64.b64decode(data["tls.key"]), password=None)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(san.get_values_for_type(x509.DNSName)) == sorted(
        service_dns_names(SERVICE, NAMESPACE) + service_dns_names(INSIGHTS, NAMESPACE)
    )
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]


def test_generated_names_follow_the_cluster_domain() -> None:
    data = find(render({"clusterDomain": "corp.internal"}), "Secret", GENERATED_SECRET)["data"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{SERVICE}.{NAMESPACE}.svc.corp.internal" in names


def test_cert_manager_mode_builds_a_ca_chain_and_every_ca_bundle_is_the_ca() -> None:
    """Self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate; cainjector reads
    the CA, so renewing the serving certificate moves no caBundle."""
    objects = render(mode_values("certManager"))
    ca = find(objects, "Certificate", f"{WEBHOOK}-ca")["spec"]
    assert ca["isCA"] is True
    assert ca["issuerRef"] == {"name": f"{WEBHOOK}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert ca["privateKey"]["rotationPolicy"] == "Never", "a renewed CA must still verify what it signed"
    assert find(objects, "Issuer", f"{WEBHOOK}-selfsigned")["spec"] == {"selfSigned": {}}
    assert find(objects, "Issuer", f"{WEBHOOK}-ca")["spec"] == {"ca": {"secretName": ca["secretName"]}}

    certificate = find(objects, "Certificate", WEBHOOK)["spec"]
    assert certificate["secretName"] == TLS_SECRET
    assert sorted(certificate["dnsNames"]) == sorted(
        service_dns_names(SERVICE, NAMESPACE) + service_dns_names(INSIGHTS, NAMESPACE)
    )
    assert certificate["issuerRef"] == {"name": f"{WEBHOOK}-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert "isCA" not in certificate
    for kind, holder in ca_bundle_holders(objects).items():
        assert "caBundle" not in holder, f"{kind}: Helm would fight cainjector over caBundle"
        annotations = find(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{WEBHOOK}-ca", kind
    assert not [o for o in objects if o["kind"] == "Secret"], "cert-manager writes the Secrets"


def test_cert_manager_ca_lifetime_is_a_value() -> None:
    objects = render(
        {"tls": {"mode": "certManager", "certManager": {"caDuration": "43800h", "caRenewBefore": "4380h"}}}
    )
    ca = find(objects, "Certificate", f"{WEBHOOK}-ca")["spec"]
    assert (ca["duration"], ca["renewBefore"]) == ("43800h", "4380h")


def test_cert_manager_mode_with_your_issuer_takes_the_ca_from_the_serving_secret() -> None:
    ref = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objects = render({"tls": {"mode": "certManager", "certManager": {"issuerRef": ref}}})
    assert find(objects, "Certificate")["spec"]["issuerRef"] == ref
    assert not [o for o in objects if o["kind"] == "Issuer"]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Certificate"] == [WEBHOOK]
    for kind in ca_bundle_holders(objects):
        annotations = find(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{WEBHOOK}", kind


@pytest.mark.parametrize("ca", [PEM_CA, PEM_CA_BASE64], ids=["pem", "base64"])
def test_existing_secret_mode_mounts_your_secret_and_publishes_your_ca(ca: str) -> None:
    objects = render({"tls": {"mode": "existingSecret", "existingSecret": {"name": "my-tls", "caBundle": ca}}})
    assert not [o for o in objects if o["kind"] in ("Secret", "Certificate")]
    for kind, holder in ca_bundle_holders(objects).items():
        assert base64.b64decode(holder["caBundle"]).decode().strip() == PEM_CA.strip(), kind
    volumes = find(objects, "Deployment", WEBHOOK)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls"}} in volumes


def test_rotator_mode_leaves_an_empty_secret_and_every_ca_bundle_to_the_service() -> None:
    objects = render(mode_values("rotator"))
    secret = find(objects, "Secret", TLS_SECRET)
    assert "data" not in secret and secret["type"] == "Opaque"
    for kind, holder in ca_bundle_holders(objects).items():
        assert "caBundle" not in holder, f"{kind}: `helm upgrade` would overwrite the rotated CA"
    deployment = find(objects, "Deployment", WEBHOOK)
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert "emptyDir" in volume, "the rotator writes its certificate files itself"


def test_rotator_flags_name_the_secret_and_the_four_ca_bundle_holders_the_chart_installs() -> None:
    objects = render(mode_values("rotator"))
    args = parse_webhook_flags(container(find(objects, "Deployment", WEBHOOK))["args"])
    assert args.cert_rotation is True
    assert (args.namespace, args.cert_secret, args.service) == (NAMESPACE, TLS_SECRET, SERVICE)
    assert args.webhook_configuration == find(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert args.webhook_configuration == find(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert args.crd == find(objects, "CustomResourceDefinition")["metadata"]["name"]
    assert args.apiservice == find(objects, "APIService")["metadata"]["name"]
    assert args.rotation_overlap > args.rotation_interval
    assert set(service_dns_names(INSIGHTS, NAMESPACE)) <= set(args.extra_dns), "one certificate serves both"
    without = render(
        {
            "tls": {"mode": "rotator"},
            "crd": {"install": False},
            "insights": {"enabled": False},
            "clusterDomain": "corp.internal",
        }
    )
    args = parse_webhook_flags(container(find(without, "Deployment", WEBHOOK))["args"])
    assert (args.crd, args.apiservice) == ("", ""), "'' tells the rotator to skip what is not installed"
    assert f"{SERVICE}.{NAMESPACE}.svc.corp.internal" in args.extra_dns
    assert not [name for name in args.extra_dns if INSIGHTS in name]


# ----------------------------------------------------------------------------- RBAC
def _rules(objects: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return find(objects, kind, name)["rules"]


def test_controller_may_touch_foos_their_status_deployments_events_and_its_lease_only() -> None:
    objects = render()
    assert _rules(objects, "ClusterRole", CONTROLLER) == [
        {"apiGroups": ["samplecontroller.k8s.io"], "resources": ["foos"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["samplecontroller.k8s.io"], "resources": ["foos/status"], "verbs": ["get", "update", "patch"]},
        {"apiGroups": ["samplecontroller.k8s.io"], "resources": ["foos/finalizers"], "verbs": ["update"]},
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    assert _rules(objects, "Role", f"{CONTROLLER}-leader-election") == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [CONTROLLER],
            "verbs": ["get", "update"],
        },
    ]


@pytest.mark.parametrize("watched", [None, "team-a"])
def test_aggregated_api_objects_are_the_local_planes_bound_to_the_insights_service_account(watched: str | None) -> None:
    """Cluster-wide read for insights, or (controller.watchNamespace) a Role in that namespace alone."""
    objects = render({"controller": {"watchNamespace": watched or ""}})
    ca_bundle = base64.b64decode(find(objects, "APIService")["spec"]["caBundle"])
    expected = aggregated_api_manifests(
        namespace=NAMESPACE,
        service=INSIGHTS,
        service_account=INSIGHTS,
        ca_bundle=ca_bundle,
        name="foo-operator",
        watch_namespace=watched,
    )
    for want in expected:
        got = find(objects, want["kind"], want["metadata"]["name"])
        assert want["metadata"].get("labels", {}).items() <= got["metadata"]["labels"].items()
        assert want["metadata"].get("namespace") == got["metadata"].get("namespace")
        body = {k: v for k, v in got.items() if k != "metadata"}
        assert body == {k: v for k, v in want.items() if k != "metadata"}, want["metadata"]["name"]
    insights = parse_insights_flags(container(find(objects, "Deployment", INSIGHTS))["args"])
    assert insights.namespace == watched
    if watched:
        assert not [
            o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith(":insights-reader")
        ]


@pytest.mark.parametrize("mode", [m for m in MODES if m != "rotator"])
def test_outside_rotator_mode_nothing_may_write_secrets_webhooks_crds_or_apiservices(mode: str) -> None:
    for obj in render(mode_values(mode)):
        for rule in obj.get("rules", []):
            assert not {
                "secrets",
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
                "customresourcedefinitions",
                "apiservices",
            } & set(rule.get("resources", [])), (mode, obj)


def test_rotator_may_update_exactly_the_four_ca_bundle_holders_its_secret_and_lease_by_name() -> None:
    objects = render(mode_values("rotator"))
    names = {o["kind"]: o["metadata"]["name"] for o in objects}
    by_resource = {}
    for rule in _rules(objects, "ClusterRole", f"{WEBHOOK}-cert-rotator") + _rules(
        objects, "Role", f"{WEBHOOK}-cert-rotator"
    ):
        if rule["verbs"] == ["create"]:  # a Lease to create cannot be named in advance
            assert rule["resources"] == ["leases"]
            continue
        assert "delete" not in rule["verbs"] and "update" in rule["verbs"]
        for resource in rule["resources"]:
            by_resource[resource] = rule["resourceNames"]
    assert by_resource == {
        "mutatingwebhookconfigurations": [names["MutatingWebhookConfiguration"]],
        "validatingwebhookconfigurations": [names["ValidatingWebhookConfiguration"]],
        "customresourcedefinitions": [names["CustomResourceDefinition"]],
        "apiservices": [names["APIService"]],
        "secrets": [TLS_SECRET],
        "leases": [RotationOptions.lease_name],
    }
    assert find(objects, "Role", f"{WEBHOOK}-cert-rotator")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("insights", [True, False])
def test_outside_rotator_mode_with_plain_metrics_the_webhook_gets_no_api_access_at_all(insights: bool) -> None:
    objects = render({"insights": {"enabled": insights}, "metrics": {"secure": False}})
    webhook_bindings = [
        o for o in objects if o["kind"].endswith("Binding") and any(s["name"] == WEBHOOK for s in o["subjects"])
    ]
    assert webhook_bindings == []
    assert find(objects, "ServiceAccount", WEBHOOK)["automountServiceAccountToken"] is False
    assert find(objects, "Deployment", WEBHOOK)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_without_insights_there_is_no_apiservice_nor_anything_of_the_insights_server() -> None:
    objects = render({"insights": {"enabled": False}})
    assert not [o for o in objects if o["kind"] == "APIService"]
    assert not [o for o in objects if "insights" in o["metadata"]["name"]]


def test_apiservice_points_at_the_insights_service() -> None:
    spec = find(render(), "APIService", APISERVICE)["spec"]
    assert (spec["group"], spec["version"]) == ("insights.samplecontroller.k8s.io", "v1alpha1")
    assert spec["service"] == {"namespace": NAMESPACE, "name": INSIGHTS, "port": 443}
    assert 0 < spec["groupPriorityMinimum"] < 20000 and 0 < spec["versionPriority"] < 1000


# ----------------------------------------------------------------------------- metrics and TLS
COMPONENTS = {WEBHOOK: "webhook", INSIGHTS: "insights", CONTROLLER: "controller"}


def _flags(objects: list[dict[str, Any]], name: str) -> list[str]:
    return list(container(find(objects, "Deployment", name))["args"])


def test_every_component_serves_secure_metrics_on_a_port_of_its_own_behind_a_service() -> None:
    objects = render()
    for name, component in COMPONENTS.items():
        pod = find(objects, "Deployment", name)["spec"]["template"]
        ports = {p["name"]: p["containerPort"] for p in container(find(objects, "Deployment", name))["ports"]}
        assert ports["metrics"] == 8080 and list(ports.values()).count(8080) == 1, name
        flags = _flags(objects, name)
        assert "--metrics-bind-address=:8080" in flags and "--metrics-secure" in flags, name
        service = find(objects, "Service", f"{name}-metrics")["spec"]
        assert service["ports"] == [{"name": "https-metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}]
        assert service["selector"]["app.kubernetes.io/component"] == component
        assert service["selector"].items() <= pod["metadata"]["labels"].items()
        assert pod["spec"].get("automountServiceAccountToken") is not False, f"{name} needs a token for TokenReviews"
    webhook_args = parse_webhook_flags(_flags(objects, WEBHOOK))
    insights_args = parse_insights_flags(_flags(objects, INSIGHTS))
    assert webhook_args.metrics_secure and insights_args.metrics_secure
    assert webhook_args.metrics_bind_address == insights_args.metrics_bind_address == ":8080"


def test_secure_metrics_bind_auth_delegator_and_offer_a_metrics_reader_role() -> None:
    objects = render()
    binding = find(objects, "ClusterRoleBinding", "foo-operator:metrics-auth-delegator")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert sorted(s["name"] for s in binding["subjects"]) == [CONTROLLER, WEBHOOK], "insights has its own"
    assert find(objects, "ClusterRoleBinding", "foo-operator:system:auth-delegator")["subjects"][0]["name"] == INSIGHTS
    assert find(objects, "ClusterRole", "foo-operator-metrics-reader")["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    # Only auth-delegator: outside rotator mode the webhook may review tokens and access, nothing else.
    webhook_roles = {
        o["roleRef"]["name"]
        for o in objects
        if o["kind"].endswith("Binding") and any(s["name"] == WEBHOOK for s in o["subjects"])
    }
    assert webhook_roles == {"system:auth-delegator"}


def test_plain_metrics_are_http_with_no_review_rights() -> None:
    objects = render({"metrics": {"secure": False}})
    for name in COMPONENTS:
        assert "--metrics-secure" not in _flags(objects, name)
        assert find(objects, "Service", f"{name}-metrics")["spec"]["ports"][0]["name"] == "http-metrics"
    assert not [o for o in objects if o["metadata"]["name"] == "foo-operator:metrics-auth-delegator"]


def test_metrics_off_means_no_listener_no_port_no_service_no_role() -> None:
    objects = render({"metrics": {"enabled": False}})
    for name in COMPONENTS:
        assert "--metrics-bind-address=0" in _flags(objects, name)
        assert "metrics" not in {p["name"] for p in container(find(objects, "Deployment", name))["ports"]}
    assert not [o for o in objects if "metrics" in o["metadata"]["name"]]
    assert parse_controller_flags(_flags(objects, CONTROLLER)).metrics.enabled is False


def test_tls_values_become_both_listeners_flags_and_parse_as_a_policy() -> None:
    suites = ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256"]
    objects = render({"tls": {"minVersion": "VersionTLS13", "cipherSuites": suites}})
    for args in (parse_webhook_flags(_flags(objects, WEBHOOK)), parse_insights_flags(_flags(objects, INSIGHTS))):
        assert (args.tls_min_version, args.tls_cipher_suites) == ("VersionTLS13", ",".join(suites))
        parse_tls_policy(args.tls_min_version, args.tls_cipher_suites)
    default = parse_webhook_flags(_flags(render(), WEBHOOK))
    assert (default.tls_min_version, default.tls_cipher_suites) == ("VersionTLS12", "")


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"tls": {"cipherSuites": ["TLS_RSA_WITH_AES_128_CBC_SHA"]}}, "/tls/cipherSuites/0"),
        ({"tls": {"minVersion": "VersionTLS11"}}, "/tls/minVersion"),
        ({"metrics": {"port": 0}}, "/metrics/port"),
        ({"networkPolicy": {"metricsFrom": [{}]}}, "/networkPolicy/metricsFrom/0"),
    ],
)
def test_insecure_tls_or_bad_metrics_values_fail_the_install(values: dict[str, Any], path: str) -> None:
    assert f"at '{path}'" in render_error(values)


# ----------------------------------------------------------------------------- NetworkPolicy
def _policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"}


def test_no_network_policy_unless_asked() -> None:
    assert _policies(render()) == {}


def test_network_policy_opens_the_serving_ports_to_all_and_metrics_to_the_chosen_peers() -> None:
    peers = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    objects = render({"networkPolicy": {"enabled": True, "metricsFrom": peers}})
    policies = _policies(objects)
    assert sorted(policies) == sorted(COMPONENTS)
    serving = {WEBHOOK: [9443, 8081], INSIGHTS: [8443, 8083], CONTROLLER: [8081]}  # and the health port
    for name, spec in policies.items():
        labels = find(objects, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= labels.items()
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == COMPONENTS[name]
        assert spec["policyTypes"] == ["Ingress"], "egress (to the apiserver) stays open"
        open_to_all, metrics = spec["ingress"]
        assert open_to_all == {"ports": [{"port": p, "protocol": "TCP"} for p in serving[name]]}, (
            "no 'from': any source"
        )
        assert metrics == {"from": peers, "ports": [{"port": 8080, "protocol": "TCP"}]}
        ports = {p["containerPort"] for p in container(find(objects, "Deployment", name))["ports"]}
        assert {*serving[name], 8080} == ports, f"{name}: every port the pod serves is covered, no other"


def test_network_policy_without_metrics_peers_keeps_the_metrics_port_closed() -> None:
    for values in (
        {"networkPolicy": {"enabled": True, "metricsFrom": []}},
        {"networkPolicy": {"enabled": True}, "metrics": {"enabled": False}},
    ):
        for spec in _policies(render(values)).values():
            assert len(spec["ingress"]) == 1 and "from" not in spec["ingress"][0]


def test_default_metrics_peers_are_the_monitoring_namespace() -> None:
    spec = _policies(render({"networkPolicy": {"enabled": True}}))[WEBHOOK]
    assert spec["ingress"][1]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_webhook_body_budget_follows_its_memory_limit_through_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = find(render({"webhook": {"resources": {"limits": {"memory": "512Mi"}}}}), "Deployment", WEBHOOK)
    webhook = container(deployment)
    env = {e["name"]: e for e in webhook["env"]}
    assert env["MEMORY_LIMIT_MIB"]["valueFrom"]["resourceFieldRef"] == {
        "containerName": webhook["name"],
        "resource": "limits.memory",
        "divisor": "1Mi",
    }
    assert webhook["resources"]["limits"]["memory"] == "512Mi"
    assert not [a for a in webhook["args"] if a.startswith(("--memory-limit-mib", "--max-in-flight-mib"))]
    # What the kubelet puts there for that limit is what the flag's default reads.
    monkeypatch.setenv("MEMORY_LIMIT_MIB", "512")
    assert parse_webhook_flags(["--cert-dir", "/etc/foo-operator/tls"]).memory_limit_mib == 512


def test_insights_review_budget_follows_its_memory_limit_through_the_downward_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = find(render({"insights": {"resources": {"limits": {"memory": "384Mi"}}}}), "Deployment", INSIGHTS)
    insights = container(deployment)
    env = {e["name"]: e for e in insights["env"]}
    assert env["MEMORY_LIMIT_MIB"]["valueFrom"]["resourceFieldRef"] == {
        "containerName": insights["name"],
        "resource": "limits.memory",
        "divisor": "1Mi",
    }
    monkeypatch.setenv("MEMORY_LIMIT_MIB", "384")
    assert parse_insights_flags(["--cert-dir", "/etc/foo-operator/tls"]).memory_limit_mib == 384
