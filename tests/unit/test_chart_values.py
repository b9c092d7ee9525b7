"""The chart's knobs for big clusters, as `helm template` renders them; each refused when malformed.

Per-webhook admission settings, the webhook's own deadline following timeoutSeconds, selectors,
hostNetwork, extra env/volumes, commonLabels, revisionHistoryLimit and probe overrides.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.app import admission_deadline
from webhook.command import parse_args as parse_webhook_flags

from .test_chart import Objects, container, find, pod_specs, render, render_error

DEPLOYMENTS = ("foo-operator-webhook", "foo-operator-insights", "foo-operator-controller")


def admission(objects: Objects) -> dict[str, dict[str, Any]]:
    return {
        kind: find(objects, kind)["webhooks"][0]
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    }


def webhook_flags(objects: Objects) -> Any:
    return parse_webhook_flags(container(find(objects, "Deployment", "foo-operator-webhook"))["args"])


def test_failure_policy_and_timeout_apply_to_both_webhooks_unless_one_says_otherwise() -> None:
    hooks = admission(
        render(
            {
                "webhook": {
                    "failurePolicy": "Ignore",
                    "timeoutSeconds": 10,
                    "validating": {"failurePolicy": "Fail", "timeoutSeconds": 2},
                }
            }
        )
    )
    mutating, validating = hooks["MutatingWebhookConfiguration"], hooks["ValidatingWebhookConfiguration"]
    assert (mutating["failurePolicy"], mutating["timeoutSeconds"]) == ("Ignore", 10)
    assert (validating["failurePolicy"], validating["timeoutSeconds"]) == ("Fail", 2)


@pytest.mark.parametrize(
    ("values", "seconds"),
    [
        ({}, 5),
        ({"webhook": {"timeoutSeconds": 12}}, 12),
        ({"webhook": {"timeoutSeconds": 12, "mutating": {"timeoutSeconds": 3}}}, 3),
    ],
)
def test_the_webhooks_own_deadline_follows_the_shorter_timeout(values: dict[str, Any], seconds: int) -> None:
    flags = webhook_flags(render(values))
    assert flags.admission_timeout_seconds == seconds
    assert admission_deadline(seconds) < seconds  # answered before the apiserver gives up


def test_admission_deadlines_leave_the_apiserver_time_to_read_the_answer() -> None:
    assert [admission_deadline(s) for s in (1, 2, 5, 30)] == [0.8, 1.6, 4.0, 29.0]


def test_namespace_selector_adds_to_the_release_namespace_exclusion_never_replaces_it() -> None:
    selector = {
        "matchLabels": {"admission": "on"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["apps"]}],
    }
    for hook in admission(render({"webhook": {"namespaceSelector": selector}})).values():
        chosen = hook["namespaceSelector"]
        assert chosen["matchLabels"] == {"admission": "on"}
        assert chosen["matchExpressions"][0] == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["foo-system"],
        }
        assert chosen["matchExpressions"][1:] == selector["matchExpressions"]


def test_object_selector_is_shared_or_per_webhook() -> None:
    hooks = admission(
        render(
            {
                "webhook": {
                    "objectSelector": {"matchLabels": {"a": "b"}},
                    "mutating": {"objectSelector": {"matchLabels": {"c": "d"}}},
                }
            }
        )
    )
    assert hooks["MutatingWebhookConfiguration"]["objectSelector"] == {"matchLabels": {"c": "d"}}
    assert hooks["ValidatingWebhookConfiguration"]["objectSelector"] == {"matchLabels": {"a": "b"}}
    assert all("objectSelector" not in hook for hook in admission(render()).values())


@pytest.mark.parametrize("component", ["webhook", "insights"])
def test_host_network_puts_the_pods_on_the_node_with_the_configured_port(component: str) -> None:
    objects = render({component: {"hostNetwork": True, "containerPort": 10443}})
    deployment = find(objects, "Deployment", f"foo-operator-{component}")
    pod = deployment["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert "--port=10443" in container(deployment)["args"]
    assert {"name": "https", "containerPort": 10443, "protocol": "TCP"} in container(deployment)["ports"]
    assert "hostNetwork" not in find(render(), "Deployment", f"foo-operator-{component}")["spec"]["template"]["spec"]


BOTH_ON_THE_NODE = {"webhook": {"hostNetwork": True}, "insights": {"hostNetwork": True}}


def metrics_ports(objects: Objects) -> dict[str, tuple[int, str]]:
    """Each Deployment's metrics containerPort and the address its --metrics-bind-address names."""
    ports = {}
    for name in DEPLOYMENTS:
        main = container(find(objects, "Deployment", name))
        (port,) = [p["containerPort"] for p in main["ports"] if p["name"] == "metrics"]
        (bind,) = [a.split("=", 1)[1] for a in main["args"] if a.startswith("--metrics-bind-address=")]
        ports[name] = (port, bind)
    return ports


@pytest.mark.parametrize(
    ("values", "port", "names"),
    [
        ({}, "8080", "(metrics.port and metrics.port)"),
        (
            {"insights": {"metricsPort": 8082, "containerPort": 9443}},
            "9443",
            "(webhook.containerPort and insights.containerPort)",
        ),
        (
            {"metrics": {"port": 9090}, "insights": {"metricsPort": 9443}},
            "9443",
            "(webhook.containerPort and insights.metricsPort)",
        ),
        (
            {"metrics": {"enabled": False}, "insights": {"healthPort": 8081}},
            "8081",
            "(webhook.healthPort and insights.healthPort)",
        ),
    ],
)
def test_webhook_and_insights_both_on_the_node_network_may_not_share_a_port(
    values: dict[str, Any], port: str, names: str
) -> None:
    error = render_error(
        {**values, "webhook": {"hostNetwork": True}, "insights": {**values.get("insights", {}), "hostNetwork": True}}
    )
    assert "webhook.hostNetwork and insights.hostNetwork: a webhook and an insights pod on one node" in error
    assert f"would both bind port {port} on it {names}" in error
    assert (
        "give the insights pods another port (insights.healthPort, insights.metricsPort or insights.containerPort)"
        in error
    )


def test_insights_metrics_port_sets_the_insights_pods_metrics_port_apart() -> None:
    objects = render({"webhook": {"hostNetwork": True}, "insights": {"hostNetwork": True, "metricsPort": 8082}})
    assert metrics_ports(objects) == {
        "foo-operator-webhook": (8080, ":8080"),
        "foo-operator-insights": (8082, ":8082"),
        "foo-operator-controller": (8080, ":8080"),
    }
    # The metrics Service targets the named port; the NetworkPolicy opens the pod's own number.
    policy = find(
        render({"insights": {"metricsPort": 8082}, "networkPolicy": {"enabled": True}}),
        "NetworkPolicy",
        "foo-operator-insights",
    )
    assert policy["spec"]["ingress"][1]["ports"] == [{"port": 8082, "protocol": "TCP"}]


def test_one_component_on_the_node_network_or_metrics_off_shares_no_node_port() -> None:
    render({"webhook": {"hostNetwork": True}})
    render({"insights": {"hostNetwork": True}})
    render({**BOTH_ON_THE_NODE, "metrics": {"enabled": False}})
    assert metrics_ports(render())["foo-operator-insights"] == (8080, ":8080"), "metrics.port by default"


@pytest.mark.parametrize("component", ["webhook", "insights", "controller"])
def test_extra_env_volumes_and_mounts_are_added_to_what_the_chart_needs(component: str) -> None:
    extra = {
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
    }
    deployment = find(render({component: extra}), "Deployment", f"foo-operator-{component}")
    pod, main = deployment["spec"]["template"]["spec"], container(deployment)
    assert extra["extraEnv"][0] in main["env"]
    assert extra["extraVolumes"][0] in pod["volumes"] and any(v["name"] == "tmp" for v in pod["volumes"])
    assert extra["extraVolumeMounts"][0] in main["volumeMounts"]
    assert any(m["name"] == "tmp" for m in main["volumeMounts"])


def test_common_labels_are_on_every_object_and_pod_but_no_selector() -> None:
    objects = render({"commonLabels": {"team": "platform"}})
    # The CRD carries the chart's labels too; only the `helm test` Pod's are its own.
    labelled = [o for o in objects if o["kind"] != "Pod"]
    assert all(o["metadata"]["labels"].get("team") == "platform" for o in labelled), [
        (o["kind"], o["metadata"]["name"])
        for o in labelled
        if o["metadata"].get("labels", {}).get("team") != "platform"
    ]
    for name in DEPLOYMENTS:
        deployment = find(objects, "Deployment", name)
        assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
        assert "team" not in deployment["spec"]["selector"]["matchLabels"]


def test_revision_history_limit_per_component() -> None:
    objects = render({"webhook": {"revisionHistoryLimit": 2}, "controller": {"revisionHistoryLimit": 0}})
    limits = {name: find(objects, "Deployment", name)["spec"]["revisionHistoryLimit"] for name in DEPLOYMENTS}
    assert limits == {"foo-operator-webhook": 2, "foo-operator-insights": 10, "foo-operator-controller": 0}


def test_probe_overrides_merge_over_the_defaults() -> None:
    objects = render(
        {
            "webhook": {"readinessProbe": {"periodSeconds": 2, "timeoutSeconds": 3}},
            "controller": {"livenessProbe": {"httpGet": None, "exec": {"command": ["true"]}}},
        }
    )
    readiness = container(find(objects, "Deployment", "foo-operator-webhook"))["readinessProbe"]
    assert readiness == {
        "httpGet": {"path": "/readyz", "port": "health"},
        "periodSeconds": 2,
        "timeoutSeconds": 3,
        "failureThreshold": 2,
    }
    liveness = container(find(objects, "Deployment", "foo-operator-controller"))["livenessProbe"]
    assert liveness == {"exec": {"command": ["true"]}, "periodSeconds": 10, "failureThreshold": 3}


@pytest.mark.parametrize(("workers", "flag"), [(None, None), (3, 3), (1, 1)])
def test_webhook_workers_default_to_auto_and_reach_the_flag(workers: int | None, flag: int | None) -> None:
    objects = render({} if workers is None else {"webhook": {"workers": workers}})
    assert webhook_flags(objects).workers == flag  # None: auto


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"mutating": {"failurePolicy": "Sometimes"}}}, "at '/webhook/mutating/failurePolicy'"),
        ({"webhook": {"validating": {"timeoutSeconds": 45}}}, "at '/webhook/validating/timeoutSeconds'"),
        ({"webhook": {"mutating": {"failurPolicy": "Fail"}}}, "additional properties 'failurPolicy' not allowed"),
        ({"webhook": {"objectSelector": {"matchLabel": {}}}}, "additional properties 'matchLabel' not allowed"),
        (
            {"webhook": {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Equals"}]}}},
            "at '/webhook/namespaceSelector/matchExpressions/0/operator'",
        ),
        ({"webhook": {"hostNetwork": "yes"}}, "at '/webhook/hostNetwork'"),
        ({"controller": {"extraEnv": [{"value": "x"}]}}, "at '/controller/extraEnv/0'"),
        ({"insights": {"extraVolumeMounts": [{"name": "v"}]}}, "at '/insights/extraVolumeMounts/0'"),
        ({"webhook": {"revisionHistoryLimit": -1}}, "at '/webhook/revisionHistoryLimit'"),
        ({"webhook": {"readinessProbe": {"periodSeconds": "often"}}}, "at '/webhook/readinessProbe/periodSeconds'"),
        ({"commonLabels": {"team": 7}}, "at '/commonLabels/team'"),
        ({"webhook": {"workers": 0}}, "at '/webhook/workers'"),
        ({"webhook": {"workers": "many"}}, "at '/webhook/workers'"),
        ({"defaultImage": "nginx:latest\n"}, "at '/defaultImage'"),
        ({"defaultImage": " nginx:latest"}, "at '/defaultImage'"),
    ],
)
def test_malformed_knobs_fail_the_install_naming_the_value(values: dict[str, Any], message: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error


# ---- the migrate-storage hook Job -------------------------------------------------------------------


def test_the_migrate_storage_job_is_off_by_default() -> None:
    assert not [o for o in render() if "migrate-storage" in o["metadata"]["name"]]


def test_the_migrate_storage_job_runs_the_real_command_as_a_hook_with_its_own_rbac() -> None:
    from controller.cli import parser as migrate_parser

    objects = render({"migrateStorage": {"job": {"enabled": True, "qps": 20, "extraArgs": ["--dry-run=server"]}}})
    ours = {(o["kind"], o["metadata"]["name"]): o for o in objects if "migrate-storage" in o["metadata"]["name"]}
    name = "foo-operator-migrate-storage"
    assert set(ours) == {("ServiceAccount", name), ("ClusterRole", name), ("ClusterRoleBinding", name), ("Job", name)}
    for obj in ours.values():
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # RBAC first (lower weight), then the Job.
    assert int(ours[("ClusterRole", name)]["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        ours[("Job", name)]["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    pod = ours[("Job", name)]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name and pod["restartPolicy"] == "Never"
    (main,) = pod["containers"]
    assert main["command"] == ["foo-operator", "migrate-storage"]
    args = migrate_parser().parse_args(["migrate-storage", *main["args"]])
    assert (args.qps, args.page_size, args.dry_run) == (20.0, 500, "server")
    assert args.only_if_needed, "Argo CD runs the hook on every sync: a no-op once storedVersions is [v1]"
    subject = ours[("ClusterRoleBinding", name)]["subjects"][0]
    assert (subject["name"], subject["namespace"]) == (name, "foo-system")


# ---- where the pods may run: the image's architectures --------------------------------------------

EVERY_POD = {
    "Deployment/foo-operator-webhook",
    "Deployment/foo-operator-insights",
    "Deployment/foo-operator-controller",
    "Job/foo-operator-migrate-storage",
    "Pod/foo-operator-test-readyz",
}
WITH_THE_JOB = {"migrateStorage": {"job": {"enabled": True}}}


def required_arch_terms(pod: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The matchExpressions of each required nodeSelectorTerm."""
    node = (pod.get("affinity") or {}).get("nodeAffinity") or {}
    terms = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return [term.get("matchExpressions") or [] for term in terms]


AMD64 = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}


def test_every_pod_requires_a_node_of_the_images_architecture_by_default() -> None:
    """The release's image is linux/amd64: on a mixed cluster no pod lands on an arm64 node, where it
    would only fail with `exec format error`."""
    specs = pod_specs(render(WITH_THE_JOB))
    assert set(specs) == EVERY_POD
    for name, pod in specs.items():
        assert required_arch_terms(pod) == [[AMD64]], name


def test_image_architectures_widens_or_drops_the_requirement() -> None:
    for name, pod in pod_specs(render({"image": {"architectures": ["amd64", "arm64"]}, **WITH_THE_JOB})).items():
        assert required_arch_terms(pod) == [[{**AMD64, "values": ["amd64", "arm64"]}]], name
    for name, pod in pod_specs(render({"image": {"architectures": []}, **WITH_THE_JOB})).items():
        assert not required_arch_terms(pod), name


def test_the_architecture_is_anded_into_the_users_own_node_affinity_and_keeps_the_rest() -> None:
    """Terms of a required node affinity are ORed: the architecture joins each of them, so no term
    of yours can bring a pod to a node the image does not run on."""
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    gpu = {"key": "example.com/pool", "operator": "Exists"}
    preferred = [{"weight": 1, "preference": {"matchExpressions": [gpu]}}]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [gpu]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        }
    }
    values = {component: {"affinity": affinity} for component in ("webhook", "insights", "controller")}
    specs = pod_specs(render({**values, "tests": {"affinity": affinity}}))
    for name in (
        "Deployment/foo-operator-webhook",
        "Deployment/foo-operator-controller",
        "Pod/foo-operator-test-readyz",
    ):
        pod = specs[name]
        assert required_arch_terms(pod) == [[zone, AMD64], [gpu, AMD64]], name
        assert pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    # Your affinity replaces the default anti-affinity between replicas, as it did before.
    assert "podAntiAffinity" not in specs["Deployment/foo-operator-webhook"]["affinity"]


def test_the_test_pod_with_an_image_of_your_own_goes_where_you_say() -> None:
    pod = pod_specs(render({"tests": {"image": "registry.example/python:3"}}))["Pod/foo-operator-test-readyz"]
    assert "affinity" not in pod
