"""Issue #25's attack mix against the chart's pods on the real node, while the cluster keeps working.

The chart runs from the image built here with its defaults (limits.memory 256Mi, the webhook with
`--workers auto`, `--metrics-secure`; the controller off: it is not what callers reach).
bench.attack_mix's attacks (the findings that make a process hold memory, then every finding,
1-15) go straight at the webhook and insights pod IPs on the node's bridge, from an address of
their own as an attacking pod's are, with a /healthz probe per pod, while kube-apiserver receives dry-run Foo creates (all of admission, in the
webhook pod) and FooHealth reads (through the aggregator, in the insights pod), and the
kubelet's readiness probe is asked as the kubelet asks it (/readyz on each pod's health port). Then:
none of those requests failed, no container restarted, each pod's container stayed under 200 MiB
(its cgroup's working set, sampled), and every probe was answered 200 within 1 s (the kubelet's
timeout): the probes have a port and a thread of their own (serving.probes), nothing an attacker
does to the serving port is theirs to wait for.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from attacks.clients import Clients, create_foos, insights_target
from attacks.harness import Target
from attacks.honest import HONEST_LABEL
from attacks.insights import INSIGHTS_ATTACKS, NAMESPACE
from attacks.webhook import WEBHOOK_ATTACKS
from hack.plane.cluster import LocalControlPlane
from hack.plane.node import chart_values, plane_with_real_node
from tests.e2e.load import Call, dry_run_foo_create, steady_requests
from tests.e2e.podmemory import charges_mib, container_cgroup, working_set_mib

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "foo-operator"
RELEASE = "attack-foo-operator"
RELEASE_NAMESPACE = "foo-attack"
SECONDS = 45.0  # of attack
HEAVY_FOOS = 300  # with 8 KiB of labels each: the Tables of finding 13 are built of them
BOUND_MIB = 200
PROBE_BOUND_S = 1.0  # the kubelet's timeoutSeconds
PORTS = {"webhook": 9443, "insights": 8443}
# The attackers' own address on the node's bridge (10.88.0.2), as an attacking pod has its own:
# kube-apiserver reaches the pods from the bridge's first address, and the servers' handshakes
# are shared out by address (serving.tlsupgrade).
ATTACKER_OFFSET = 1


@dataclass
class Release:
    plane: LocalControlPlane
    ca_pem: str
    attackers_from: str  # an address of this host on the node's bridge, not kube-apiserver's

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def pod(self, component: str) -> dict[str, Any]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        pods: list[dict[str, Any]] = self.get("pods", "-n", RELEASE_NAMESPACE, "-l", selector)["items"]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]


@pytest.fixture(scope="module")
def release(node_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    workdir = tmp_path_factory.mktemp("attack-mix")
    with plane_with_real_node(workdir, node_image["archive"]) as (plane, node):
        values = chart_values(node, node_image["ref"])
        values["controller"]["enabled"] = False
        (workdir / "values.yaml").write_text(yaml.safe_dump(values))
        try:
            plane.helm(
                "install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--create-namespace",
                "-f", str(workdir / "values.yaml"), "--wait", "--timeout=180s", timeout=240,
            )  # fmt: skip
            plane.kubectl(
                "wait", "--for=condition=Available", "apiservice/v1alpha1.insights.samplecontroller.k8s.io",
                "--timeout=120s", timeout=150,
            )  # fmt: skip
            secret = json.loads(
                plane.kubectl(
                    "get", "secret", f"{RELEASE}-webhook-generated-tls", "-n", RELEASE_NAMESPACE, "-o", "json"
                ).stdout
            )
            create_foos(plane, HEAVY_FOOS)
            ca_pem = base64.b64decode(secret["data"]["ca.crt"]).decode()
            yield Release(plane, ca_pem, node.bridge.another_address(ATTACKER_OFFSET))
        finally:
            plane.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout=60s", check=False)


def _context(ca_pem: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca_pem)
    context.check_hostname = False  # the certificate names the Services, not the pod IPs
    return context


def health_port(pod: dict[str, Any]) -> int:
    """The port the kubelet probes the pod's container on."""
    [port] = [p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "health"]
    return int(port)


def why_unavailable(plane: LocalControlPlane) -> str:
    """What kube-apiserver says of the APIService, and which insights addresses it may route to."""
    apiservice = json.loads(
        plane.kubectl("get", "apiservice", "v1alpha1.insights.samplecontroller.k8s.io", "-o", "json").stdout
    )
    conditions = [
        {k: c.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
        for c in apiservice["status"].get("conditions", [])
    ]
    slices = plane.kubectl(
        "get", "endpointslices", "-n", RELEASE_NAMESPACE, "-o",
        "jsonpath={range .items[*]}{.metadata.name}: {.endpoints[*].conditions}{'\\n'}{end}", check=False,
    ).stdout  # fmt: skip
    # Why the aggregator answered 503: its availability checks and proxy errors, in its own words.
    said = [
        line[:400]
        for line in (plane.logs_dir / "kube-apiserver.log").read_text(errors="replace").splitlines()
        if "insights" in line and ("remote_available_controller" in line or "handler_proxy" in line)
    ]
    return f"APIService conditions {conditions}; endpoints: {slices.strip()}; kube-apiserver said: {said[-5:]}"


def foohealth_reads() -> list[Call]:
    group_version = "insights.samplecontroller.k8s.io/v1alpha1"
    selector = f"labelSelector={HONEST_LABEL[0]}%3D{HONEST_LABEL[1]}"
    return [
        Call("read", "GET", f"/apis/{group_version}/namespaces/{NAMESPACE}/foohealths?{selector}", 200),
        Call("read", "GET", f"/apis/{group_version}/namespaces/{NAMESPACE}/foohealths/honest-00000", 200),
    ]


# The floods of connections (findings 6 and 14) take every place a new connection can have, so
# with them the other attackers mostly meet closed connections: the attacks that make a process
# hold memory run once alone, so that they reach it, then with every other.
CONNECTION_FLOODS = (6, 14)
MIXES = {
    "memory-attacks": {
        "webhook": tuple(n for n in WEBHOOK_ATTACKS if n not in CONNECTION_FLOODS),
        "insights": tuple(n for n in INSIGHTS_ATTACKS if n not in CONNECTION_FLOODS),
    },
    "every-attack": {"webhook": tuple(WEBHOOK_ATTACKS), "insights": tuple(INSIGHTS_ATTACKS)},
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_under_the_attack_mix_the_cluster_keeps_working_and_no_pod_restarts_or_outgrows_its_bound(
    release: Release, mix: str
) -> None:
    context = _context(release.ca_pem)
    pods = {component: release.pod(component) for component in PORTS}
    ips = {component: pods[component]["status"]["podIP"] for component in PORTS}
    health = {component: health_port(pods[component]) for component in PORTS}
    targets: dict[str, Target] = {
        "webhook": Target(ips["webhook"], PORTS["webhook"], context, probe_port=health["webhook"]),
        "insights": insights_target(ips["insights"], PORTS["insights"], context, release.plane, health["insights"]),
    }
    cgroups = {c: container_cgroup(pods[c]["status"]["containerStatuses"][0]["containerID"]) for c in PORTS}
    peaks = {c: working_set_mib(cgroups[c]) for c in PORTS}
    print(f"idle working sets (MiB): { {c: round(v, 1) for c, v in peaks.items()} }")
    print(f"idle charges (MiB): { {c: charges_mib(cgroups[c]) for c in PORTS} }")
    at_peak = {c: charges_mib(cgroups[c]) for c in PORTS}
    findings = MIXES[mix]
    clients = {
        c: Clients(c, targets[c], findings[c], SECONDS, honest=0, attackers_from=release.attackers_from) for c in PORTS
    }
    for client in clients.values():
        client.start()
    calls = [dry_run_foo_create(NAMESPACE), *foohealth_reads()]
    began = time.monotonic()
    with steady_requests(release.plane, calls) as (answered, failures):
        while time.monotonic() - began < SECONDS + 60 and not all(c.finished() for c in clients.values()):
            for component, cgroup in cgroups.items():
                try:
                    working_set = working_set_mib(cgroup)
                    if working_set > peaks[component]:
                        peaks[component], at_peak[component] = working_set, charges_mib(cgroup)
                except OSError:  # the container was replaced: the restart count says so below
                    pass
            time.sleep(0.1)
    results = {c: client.results() for c, client in clients.items()}
    for component, (tallies, _, probes) in results.items():
        for n, tally in sorted(tallies.items()):
            print(f"{component} #{n}: {dict(tally.answers)} {dict(tally.notes)}")
        print(
            f"{component}: peak working set {peaks[component]:.1f} MiB ({at_peak[component]}), "
            f"/readyz on port {health[component]} max {max(probes.latency):.2f}s, "
            f"{len(probes.failures)} of {len(probes.latency)} failed"
        )
    print(f"through kube-apiserver: {dict(answered)}, failed {len(failures)}")

    # Every broken promise at once: the report of a failed run is what the fixes are judged on.
    broken: list[str] = []
    if failures:
        broken.append(
            f"{len(failures)} requests through kube-apiserver failed, e.g. {failures[:3]}; "
            + why_unavailable(release.plane)
        )
    if not (answered["write"] and answered["read"]):
        broken.append(f"kube-apiserver's load did not run: {dict(answered)}")
    for component, (tallies, _, probes) in results.items():
        pod = release.pod(component)
        restarts = [s["restartCount"] for s in pod["status"]["containerStatuses"]]
        before = [s["restartCount"] for s in pods[component]["status"]["containerStatuses"]]
        if restarts != before or pod["metadata"]["uid"] != pods[component]["metadata"]["uid"]:
            last = [s.get("lastState", {}).get("terminated", {}) for s in pod["status"]["containerStatuses"]]
            previous = release.plane.kubectl(
                "logs", "--previous", "-n", RELEASE_NAMESPACE, pod["metadata"]["name"], check=False
            ).stdout.splitlines()[-5:]
            broken.append(f"{component}: restarted {restarts} times: {last}; its last lines: {previous}")
        if peaks[component] >= BOUND_MIB:
            broken.append(f"{component}: working set peaked at {peaks[component]:.0f} MiB")
        if probes.failures or max(probes.latency) >= PROBE_BOUND_S:
            broken.append(
                f"{component}: /readyz max {max(probes.latency):.2f}s, {len(probes.failures)} failed "
                f"(at most {probes.most_failed_in_a_row} in a row): {probes.failures[:3]}"
            )
        if server_errors := {n: dict(t.answers) for n, t in tallies.items() if t.server_errors()}:
            broken.append(f"{component}: 5xx answers {server_errors}")
        name = pod["metadata"]["name"]
        logs = release.plane.kubectl("logs", "-n", RELEASE_NAMESPACE, name, check=False).stdout
        warned = Counter(
            json.loads(line).get("msg") for line in logs.splitlines() if line.startswith("{") and '"warning"' in line
        )
        print(f"{component} warned: {dict(warned)}")
        if "Traceback" in logs:
            broken.append(f"{component} logged a traceback: {logs[logs.find('Traceback') :][:800]}")
    assert broken == [], "\n".join(broken)
