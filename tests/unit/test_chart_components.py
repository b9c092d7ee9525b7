"""Per-component knobs a platform team's policies ask for: metadata, scheduling, security, budgets."""

from __future__ import annotations

from typing import Any

import pytest

from controller.settings import parse as parse_controller_flags

from .test_chart import container, find, render, render_error

COMPONENTS = ("webhook", "controller", "insights")
LINUX = {"kubernetes.io/os": "linux"}


def deployment(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return find(objects, "Deployment", f"foo-operator-{component}")


def pod_spec(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    spec: dict[str, Any] = deployment(objects, component)["spec"]["template"]["spec"]
    return spec


def test_every_pod_the_chart_runs_asks_for_a_linux_node() -> None:
    objects = render({"migrateStorage": {"job": {"enabled": True}}})
    for component in COMPONENTS:
        assert pod_spec(objects, component)["nodeSelector"] == LINUX, component
    assert find(objects, "Job")["spec"]["template"]["spec"]["nodeSelector"] == LINUX
    assert find(objects, "Pod")["spec"]["nodeSelector"] == LINUX


@pytest.mark.parametrize("component", COMPONENTS)
def test_deployment_and_pod_metadata_are_separate_knobs(component: str) -> None:
    values = {
        "deploymentAnnotations": {"policy.example/owner": "platform"},
        "deploymentLabels": {"cost-center": "42"},
        "podAnnotations": {"pod.example/scrape": "no"},
        "podLabels": {"tier": "system"},
    }
    found = deployment(render({component: values}), component)
    assert found["metadata"]["annotations"] == values["deploymentAnnotations"]
    assert found["metadata"]["labels"]["cost-center"] == "42"
    assert found["metadata"]["labels"]["app.kubernetes.io/component"] == component
    template = found["spec"]["template"]["metadata"]
    assert template["annotations"] == values["podAnnotations"] and template["labels"]["tier"] == "system"
    assert "cost-center" not in template["labels"] and "tier" not in found["metadata"]["labels"]


def test_services_and_service_accounts_take_annotations_and_labels() -> None:
    meta = {"annotations": {"a.example/x": "1"}, "labels": {"team": "platform"}}
    objects = render(
        {
            "webhook": {"service": meta},
            "insights": {"service": meta},
            "metrics": {"service": meta},
            "serviceAccount": {c: {"labels": {"team": "platform"}} for c in COMPONENTS},
        }
    )
    services = [o for o in objects if o["kind"] == "Service"]
    assert len(services) == 5  # webhook, insights, three metrics Services
    for service in services:
        assert service["metadata"]["annotations"] == meta["annotations"], service["metadata"]["name"]
        assert service["metadata"]["labels"]["team"] == "platform"
        assert "team" not in service["spec"]["selector"]
    for account in (o for o in objects if o["kind"] == "ServiceAccount"):
        assert account["metadata"]["labels"]["team"] == "platform", account["metadata"]["name"]


def test_update_strategies_default_to_surge_first_and_take_any_strategy() -> None:
    objects = render()
    surge = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployment(objects, "webhook")["spec"]["strategy"] == surge
    assert deployment(objects, "insights")["spec"]["strategy"] == surge
    assert "strategy" not in deployment(objects, "controller")["spec"]
    without_election = render({"controller": {"leaderElection": {"enabled": False}}})
    assert deployment(without_election, "controller")["spec"]["strategy"] == {"type": "Recreate"}
    mine = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}
    objects = render({c: {"strategy": mine} for c in COMPONENTS})
    assert all(deployment(objects, c)["spec"]["strategy"] == mine for c in COMPONENTS)


@pytest.mark.parametrize("component", COMPONENTS)
def test_recreate_alone_drops_the_default_rolling_update_the_apiserver_would_refuse(component: str) -> None:
    # Helm merges {type: Recreate} into the surge-first default map; a Deployment with both is
    # refused ("may not be specified when strategy `type` is 'Recreate'").
    strategy = deployment(render({component: {"strategy": {"type": "Recreate"}}}), component)["spec"]["strategy"]
    assert strategy == {"type": "Recreate"}


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_components_security_contexts_add_to_the_shared_restricted_ones(component: str) -> None:
    objects = render(
        {
            component: {
                "podSecurityContext": {"supplementalGroups": [4000], "runAsUser": 1001},
                "securityContext": {"seLinuxOptions": {"level": "s0:c123,c456"}},
            }
        }
    )
    pod = pod_spec(objects, component)["securityContext"]
    assert pod["runAsUser"] == 1001 and pod["supplementalGroups"] == [4000]
    assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    main = container(deployment(objects, component))["securityContext"]
    assert main["seLinuxOptions"] == {"level": "s0:c123,c456"}
    assert main["readOnlyRootFilesystem"] is True and main["capabilities"] == {"drop": ["ALL"]}
    others = [c for c in COMPONENTS if c != component]
    assert all(pod_spec(objects, c)["securityContext"]["runAsUser"] == 65532 for c in others)


@pytest.mark.parametrize("component", COMPONENTS)
def test_topology_spread_gets_the_components_selector_unless_it_names_one(component: str) -> None:
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    own = {**zone, "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"x": "y"}}}
    found = deployment(render({component: {"topologySpreadConstraints": [zone, own]}}), component)
    first, second = found["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert first["labelSelector"] == {"matchLabels": found["spec"]["selector"]["matchLabels"]}
    assert second == own


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_components_replicas_prefer_different_nodes_so_a_drain_takes_one(component: str) -> None:
    """Soft anti-affinity by node between a component's replicas (the controller's standby too):
    with as many nodes as replicas, one each, so draining or losing a node takes one of them and
    its PodDisruptionBudget lets it go; with fewer nodes they still schedule."""
    found = deployment(render({component: {"replicas": 2}}), component)
    anti = found["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": found["spec"]["selector"]["matchLabels"]},
    }


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_components_own_affinity_replaces_the_default_anti_affinity(component: str) -> None:
    zone = {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"x": "y"}}}
    own = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [zone]}}
    affinity = pod_spec(render({component: {"affinity": own}}), component)["affinity"]
    assert affinity["podAntiAffinity"] == own["podAntiAffinity"]


def test_the_controller_has_a_disruption_budget_on_its_pods() -> None:
    objects = render()
    budget = find(objects, "PodDisruptionBudget", "foo-operator-controller")
    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"]
        == deployment(objects, "controller")["spec"]["selector"]["matchLabels"]
    )
    assert not [
        o
        for o in render({"controller": {"podDisruptionBudget": {"enabled": False}}})
        if o["kind"] == "PodDisruptionBudget" and "controller" in o["metadata"]["name"]
    ]


def test_leader_election_timings_are_values_that_reach_the_controllers_flags() -> None:
    timings = {"leaseDurationSeconds": 60, "renewDeadlineSeconds": 40, "retryPeriodSeconds": 5}
    args = container(deployment(render({"controller": {"leaderElection": timings}}), "controller"))["args"]
    settings = parse_controller_flags(args)
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (60, 40, 5)
    defaults = parse_controller_flags(container(deployment(render(), "controller"))["args"])
    assert (defaults.lease_duration, defaults.renew_deadline, defaults.retry_period) == (15, 10, 2)


def test_leader_election_timings_out_of_order_fail_the_install_naming_them() -> None:
    error = render_error({"controller": {"leaderElection": {"renewDeadlineSeconds": 20}}})
    assert "controller.leaderElection: leaseDurationSeconds (15) must exceed renewDeadlineSeconds (20)" in error


def test_the_migrate_job_and_the_test_pod_take_a_priority_class() -> None:
    objects = render(
        {
            "migrateStorage": {"job": {"enabled": True, "priorityClassName": "system-cluster-critical"}},
            "tests": {"priorityClassName": "low"},
        }
    )
    assert find(objects, "Job")["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    assert find(objects, "Pod")["spec"]["priorityClassName"] == "low"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"controller": {"topologySpreadConstraints": [{"maxSkew": 1}]}},
            "at '/controller/topologySpreadConstraints/0'",
        ),
        ({"insights": {"strategy": {"type": "Rolling"}}}, "at '/insights/strategy/type'"),
        (
            {"webhook": {"securityContext": {"readOnlyRootFS": True}}},
            "additional properties 'readOnlyRootFS' not allowed",
        ),
        (
            {"controller": {"podSecurityContext": {"runAsUser": "root"}}},
            "at '/controller/podSecurityContext/runAsUser'",
        ),
        ({"controller": {"deploymentLabels": {"n": 1}}}, "at '/controller/deploymentLabels/n'"),
        (
            {"controller": {"leaderElection": {"retryPeriodSeconds": 0}}},
            "at '/controller/leaderElection/retryPeriodSeconds'",
        ),
        ({"serviceAccount": {"webhook": {"labels": []}}}, "at '/serviceAccount/webhook/labels'"),
    ],
)
def test_malformed_component_knobs_fail_the_install_naming_the_value(values: dict[str, Any], message: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error and message in error, error
