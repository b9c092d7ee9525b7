"""A real local Kubernetes control plane on loopback, for the demo and the e2e tests.

etcd and kube-apiserver (configured like controller-runtime's envtest, plus the front-proxy
flags the aggregated API needs); unless `minimal`, also kube-controller-manager, kube-scheduler
and kwok playing the kubelet of N fake nodes, so Deployments really roll out to "Running" pods.

    with LocalControlPlane(tmp_path) as plane:
        plane.kubectl("get", "nodes")

CLI:
    python -m hack.plane.cluster up [--workdir DIR] [--minimal] [--nodes N]   # foreground, Ctrl-C stops
    python -m hack.plane.cluster down [--workdir DIR]                          # stop a backgrounded `up`
    python -m hack.plane.cluster env [--workdir DIR]                           # print the export line
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hack.plane.binaries import Binaries, MissingBinaryError, find_binaries
from hack.plane.kube_versions import plane_flags
from hack.plane.pki import SERVICE_CLUSTER_IP_RANGE, ClusterPKI, write_kubeconfig, write_pki
from hack.plane.procs import Component, ComponentError, Started, wait_until

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = REPO_ROOT / ".local" / "cluster"  # /.local/ is git-ignored
# kwok only manages Nodes carrying this annotation, so it never touches anything else.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
POD_CIDR = "10.244.0.0/16"  # addresses kwok hands to its pretend pods

__all__ = ["ComponentError", "KubectlError", "LocalControlPlane", "find_binaries", "free_port"]


# Everything a plane writes into its workdir except logs/, which outlive it for post-mortems.
DATA_ENTRIES = ("etcd", "pki", "kubeconfig", "kubeconfigs", "pids", "kube-cache", "helm", "flex-volume-plugins")


def remove_data_in(workdir: Path) -> None:
    for name in DATA_ENTRIES:
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl (or helm) call whose message, unlike CalledProcessError's, has stderr."""

    def __str__(self) -> str:
        return f"{' '.join(map(str, self.cmd))} exited {self.returncode}: {(self.stderr or '').strip()}"


def free_port() -> int:
    """A currently free loopback TCP port (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalControlPlane(Started):
    """etcd + kube-apiserver (+ kube-controller-manager, kube-scheduler, kwok) under `workdir`.

    After `start()`: `kubeconfig` (admin, system:masters), `server`, `bin`, `pki`,
    `ca_file` / `front_proxy_ca_file` (and their keys), `node_names`, `logs_dir`.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        nodes: int = 1,
        minimal: bool = False,
        apiserver_args: Sequence[str] = (),
        timeout: float = 120.0,
        address: str = "127.0.0.1",
        aggregator_routing: bool = True,
    ) -> None:
        """`address`: where kube-apiserver binds and what it advertises. Loopback (the default)
        keeps the plane invisible off this host; a real node's bridge address (hack/plane/node.py)
        lets pods reach it, as `kubernetes.default`, through kube-proxy.

        `aggregator_routing`: the aggregator dials an APIService's Service by its endpoints
        (the default: there is no kube-proxy for ClusterIPs, and the tests' network namespaces
        are endpoints). Off, it dials the ClusterIP, or an ExternalName Service's name: how
        `make run` reaches an insights server on loopback, which no endpoint may name
        (docs/architecture.md, "The whole product on `make run`")."""
        self.workdir = Path(workdir).resolve()
        self.address = address
        self.aggregator_routing = aggregator_routing
        self.minimal = minimal
        self.node_names = [] if minimal else [f"kwok-node-{i}" for i in range(nodes)]
        self.apiserver_args = list(apiserver_args)
        self.timeout = timeout
        self.bin: Binaries = find_binaries()
        self.version = self.bin.k8s_version

        self.kubeconfig = self.workdir / "kubeconfig"
        self.logs_dir = self.workdir / "logs"
        self.pki_dir = self.workdir / "pki"
        self.etcd_dir = self.workdir / "etcd"
        self._kubeconfigs_dir = self.workdir / "kubeconfigs"
        self._pids_dir = self.workdir / "pids"

        self.apiserver_port = 0
        self.etcd_port = 0
        self.server = ""
        self.pki: ClusterPKI | None = None
        self._components: dict[str, Component] = {}
        self._routes_added: list[str] = []
        self._ssl: ssl.SSLContext | None = None

    # ------------------------------------------------------------------ paths of the PKI
    @property
    def ca_file(self) -> Path:
        """The cluster CA: signs the apiserver's serving cert and all client certs."""
        return self.pki_dir / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.pki_dir / "ca.key"

    @property
    def front_proxy_ca_file(self) -> Path:
        """Signs the aggregator's client cert (--requestheader-client-ca-file)."""
        return self.pki_dir / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key_file(self) -> Path:
        return self.pki_dir / "front-proxy-ca.key"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start every component and return once the plane is ready; on failure stop all."""
        needed = ["etcd", "kube_apiserver", "kubectl"]
        if not self.minimal:
            needed += ["kube_controller_manager", "kube_scheduler", "kwok", "kwok_stages"]
        self.bin.require(*needed)

        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.etcd_port = free_port()
        self.apiserver_port = free_port()
        self.server = f"https://{self.address}:{self.apiserver_port}"
        self.pki = write_pki(self.pki_dir, address=self.address)
        write_kubeconfig(self.kubeconfig, server=self.server, pki=self.pki, user="admin")
        self._ssl = None
        try:
            self._claim_virtual_networks()
            self._start_etcd()
            self._start_apiserver()
            if not self.minimal:
                self._start_workers()
        except BaseException:
            self.stop()
            raise
        log.info(
            "control plane ready in %.1fs: kube-apiserver %s at %s%s",
            time.monotonic() - began,
            self.version,
            self.server,
            "" if self.minimal else f", {len(self.node_names)} kwok node(s)",
        )

    def stop(self, *, remove_data: bool = True) -> None:
        """Stop every process (SIGTERM, then SIGKILL) newest first; remove all but the logs."""
        for name in reversed(list(self._components)):
            self._components.pop(name).stop()
        for cidr in self._routes_added:
            subprocess.run(["ip", "route", "del", "unreachable", cidr], capture_output=True)
        self._routes_added = []
        if remove_data:
            remove_data_in(self.workdir)

    def _claim_virtual_networks(self) -> None:
        """Make pod and Service addresses fail fast on this machine, as they would in a cluster.

        kwok's pods and our ClusterIPs exist only on paper; without this, a dial to one (the
        aggregator routing to a pretend pod) follows the default route off the machine. A test's
        network namespace adds a more specific /32 route, which wins. Needs root; else skipped.
        """
        for cidr in (POD_CIDR, SERVICE_CLUSTER_IP_RANGE):
            added = subprocess.run(["ip", "route", "add", "unreachable", cidr], capture_output=True)
            if added.returncode == 0:
                self._routes_added.append(cidr)

    def stop_apiserver(self) -> None:
        """Take kube-apiserver down alone (fault tests); etcd and its data stay."""
        component = self._components.get("kube-apiserver")
        if component is not None:
            component.stop()

    def start_apiserver(self) -> None:
        """Bring kube-apiserver back on the same port and certificates; wait for /readyz."""
        self._start_apiserver()

    def restart_apiserver(self) -> None:
        self.stop_apiserver()
        self.start_apiserver()

    def component_pid(self, name: str) -> int | None:
        """The process id of a running component ("etcd", "kube-apiserver", ...), None if it is not running."""
        component = self._components.get(name)
        return component.pid if component is not None else None

    def check_alive(self) -> None:
        """Raise ComponentError (with its log tail) if any component has exited."""
        for component in self._components.values():
            component.check_alive()

    def __repr__(self) -> str:
        state = "running" if self._components else "stopped"
        return f"<LocalControlPlane {self.version} {self.server or '-'} {state} in {self.workdir}>"

    # ------------------------------------------------------------------ components
    def _launch(self, name: str, argv: Sequence[str | os.PathLike[str]]) -> Component:
        component = Component(name, argv, self.logs_dir / f"{name}.log", pid_dir=self._pids_dir)
        component.start()
        self._components[name] = component
        log.info("started %s (pid %s), log: %s", name, component.pid, component.log_file)
        return component

    def _start_etcd(self) -> None:
        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{free_port()}"
        etcd = self._launch(
            "etcd",
            [
                self.bin.etcd,
                "--name=foo-operator-local",
                f"--data-dir={self.etcd_dir}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=foo-operator-local={peer}",
                # Throwaway data: durability buys nothing here and fsync dominates write latency.
                "--unsafe-no-fsync=true",
                # 8 GiB, not the 2 GiB default: 500 fat Foos and 500 fat Deployments (~1.2 MiB each,
                # rewritten by status writes between compactions) would fill 2 GiB (bench.tenants).
                f"--quota-backend-bytes={8 * 1024**3}",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            status, body = _http_get("127.0.0.1", self.etcd_port, "/health", None)
            return status == 200 and json.loads(body).get("health") == "true"

        wait_until("etcd /health", healthy, timeout=self.timeout, watch=[etcd])

    def _apiserver_argv(self) -> list[str | os.PathLike[str]]:
        assert self.pki is not None
        pki = self.pki
        argv: list[str | os.PathLike[str]] = [
            self.bin.kube_apiserver,
            # Loopback by default: otherwise it picks and advertises the machine's address.
            f"--advertise-address={self.address}",
            f"--bind-address={self.address}",
            f"--secure-port={self.apiserver_port}",
        ]
        if self.address == "127.0.0.1":
            # The `kubernetes` Service's endpoints would be that loopback address, which
            # kube-apiserver >= 1.37 refuses at start ("may not be in the loopback range").
            # Nothing here dials the Service (no kube-proxy), so no endpoints are kept.
            argv.append("--endpoint-reconciler-type=none")
        else:
            # A real kubelet (logs, exec, port-forward) by its InternalIP: its hostname would be
            # looked up in the machine's DNS, off this host.
            argv.append("--kubelet-preferred-address-types=InternalIP")
        argv += [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--tls-cert-file={pki.cert_file('apiserver')}",
            f"--tls-private-key-file={pki.key_file('apiserver')}",
            f"--client-ca-file={pki.ca_file}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki.sa_pub_file}",
            f"--service-account-signing-key-file={pki.sa_key_file}",
            f"--service-account-issuer={self.server}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # Front proxy: how the aggregator authenticates to extension apiservers, published
            # to them in kube-system/extension-apiserver-authentication.
            f"--requestheader-client-ca-file={pki.front_proxy_ca_file}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.cert_file('front-proxy-client')}",
            f"--proxy-client-key-file={pki.key_file('front-proxy-client')}",
            # Its identity towards a real kubelet (hack/plane/node.py), which authorizes by webhook.
            f"--kubelet-client-certificate={pki.cert_file('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.key_file('apiserver-kubelet-client')}",
            # Dial Service endpoints directly: there is no kube-proxy to make ClusterIPs work.
            # Off: an ExternalName Service's name is dialled instead (see __init__).
            f"--enable-aggregator-routing={str(self.aggregator_routing).lower()}",
        ]
        if self.minimal:
            # Without kube-controller-manager no namespace ever gets its `default`
            # ServiceAccount, and the ServiceAccount admission plugin would refuse every Pod.
            argv.append("--disable-admission-plugins=ServiceAccount")
        # What this Kubernetes version needs (e.g. no endpoint reconciler): hack/plane/kube_versions.py.
        return argv + plane_flags("kube-apiserver", self.version) + self.apiserver_args

    def _start_apiserver(self) -> None:
        apiserver = self._launch("kube-apiserver", self._apiserver_argv())

        def ready() -> bool:
            return self.get("/readyz")[0] == 200

        wait_until("kube-apiserver /readyz", ready, timeout=self.timeout, watch=[self._components["etcd"], apiserver])

    def component_kubeconfig(self, user: str) -> Path:
        """A kubeconfig for one identity of hack.plane.pki (COMPONENT_USERS, or one made by issue_user)."""
        return self._component_kubeconfig(user)

    def _component_kubeconfig(self, user: str) -> Path:
        assert self.pki is not None
        return write_kubeconfig(
            self._kubeconfigs_dir / f"{user}.kubeconfig", server=self.server, pki=self.pki, user=user
        )

    def _start_workers(self) -> None:
        assert self.pki is not None
        pki = self.pki
        kcm_kubeconfig = self._component_kubeconfig("kube-controller-manager")
        kcm_port = free_port()
        kcm = self._launch(
            "kube-controller-manager",
            [
                self.bin.kube_controller_manager,
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",  # one instance; no Lease churn in the tests' event streams
                "--controllers=*",
                # Each controller acts as its own ServiceAccount (as in kubeadm), so the bootstrap
                # RBAC roles apply exactly as in a real cluster.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key_file}",
                f"--root-ca-file={pki.ca_file}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--cluster-name=foo-operator-local",
                # Its default, /usr/libexec/kubernetes/..., is created on the machine at start.
                f"--flex-volume-plugin-dir={self.workdir / 'flex-volume-plugins'}",
                # kwok's status heartbeat comes every 20-45 s; the default 50 s grace leaves too
                # little slack on a busy 2-core machine, and a node going NotReady evicts pods
                # mid-test.
                "--node-monitor-grace-period=2m",
                *plane_flags("kube-controller-manager", self.version),
            ],
        )
        scheduler_kubeconfig = self._component_kubeconfig("kube-scheduler")
        scheduler_port = free_port()
        scheduler = self._launch(
            "kube-scheduler",
            [
                self.bin.kube_scheduler,
                f"--kubeconfig={scheduler_kubeconfig}",
                f"--authentication-kubeconfig={scheduler_kubeconfig}",
                f"--authorization-kubeconfig={scheduler_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--leader-elect=false",
                *plane_flags("kube-scheduler", self.version),
            ],
        )
        kwok = self._launch(
            "kwok",
            [
                self.bin.kwok,
                f"--kubeconfig={self._component_kubeconfig('kwok')}",
                f"--config={self.bin.kwok_stages}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector={}={}".format(*KWOK_NODE_ANNOTATION),
                # kwok's default pod CIDR is 10.0.0.0/24: the Service range here, and room for only
                # 254 pods (the benchmarks make thousands).
                f"--cidr={POD_CIDR}",
            ],
        )
        workers = [self._components["etcd"], self._components["kube-apiserver"], kcm, scheduler, kwok]
        for node in self.node_names:
            self._create_node(node)

        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", scheduler_port)):
            wait_until(f"{name} /healthz", functools.partial(_healthz_ok, port), timeout=self.timeout, watch=workers)
        wait_until(
            f"node(s) {', '.join(self.node_names)} Ready", self._nodes_ready, timeout=self.timeout, watch=workers
        )
        # Pods are refused until kube-controller-manager has made the namespace's ServiceAccount.
        wait_until(
            "ServiceAccount default/default",
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            timeout=self.timeout,
            watch=workers,
        )

    def _create_node(self, name: str) -> None:
        key, value = KWOK_NODE_ANNOTATION
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name,
                    "type": "kwok",
                },
            },
            # No kwok taint: ordinary workloads (the operator's nginx Deployments) must land
            # here without tolerations. No status: kwok's node-initialize stage fills it, with
            # room for a million pods.
            "spec": {},
        }
        status, body = self.request("POST", "/api/v1/nodes", node)
        if status not in (201, 409):
            raise ComponentError(f"creating node {name}: HTTP {status}: {body[:500]!r}")

    def _nodes_ready(self) -> bool:
        status, body = self.get("/api/v1/nodes")
        if status != 200:
            return False
        ready = set()
        for node in json.loads(body)["items"]:
            conditions = node.get("status", {}).get("conditions") or []
            taints = node.get("spec", {}).get("taints") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
                t["key"] == "node.kubernetes.io/not-ready" for t in taints
            ):
                ready.add(node["metadata"]["name"])
        return ready >= set(self.node_names)

    # ------------------------------------------------------------------ clients
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            assert self.pki is not None
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
            ctx.load_cert_chain(self.pki.cert_file("admin"), self.pki.key_file("admin"))
            self._ssl = ctx
        return self._ssl

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 5.0) -> tuple[int, bytes]:
        """One raw admin request to kube-apiserver (JSON body); returns (status, body)."""
        return _http_request(self.address, self.apiserver_port, method, path, self._ssl_context(), body, timeout)

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG (and a private kubectl cache) for tools run against us."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.workdir / "kube-cache")}

    def kubectl(
        self, *args: str, check: bool = True, input: str | bytes | None = None, timeout: float | None = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin; stdout/stderr captured as text. Raises KubectlError if check."""
        return self._run(
            [str(self.bin.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            input=input,
            timeout=timeout,
            env=self.env(),
        )

    def kubectl_objects(
        self, verb: str, objects: Iterable[Mapping[str, Any]], *flags: str, timeout: float | None = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl <verb> <flags> -f -`` with the objects as one List: one kubectl run for any number."""
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        return self.kubectl(verb, *flags, "-f", "-", input=document, timeout=timeout)

    def apply(self, *objects: Mapping[str, Any], field_manager: str | None = None) -> None:
        """``kubectl apply`` of the objects; with a ``field_manager``, a server-side apply that takes
        the fields over from any other manager (what a re-run of an installer wants)."""
        server_side = ("--server-side", "--force-conflicts", f"--field-manager={field_manager}")
        self.kubectl_objects("apply", objects, *(server_side if field_manager else ()))

    def helm(
        self, *args: str, check: bool = True, input: str | bytes | None = None, timeout: float | None = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run helm as admin with its cache/config/data kept inside the workdir."""
        helm_home = self.workdir / "helm"
        env = {
            **self.env(),
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }
        return self._run(
            [str(self.bin.helm), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            input=input,
            timeout=timeout,
            env=env,
        )

    @staticmethod
    def _run(
        argv: list[str], *, check: bool, input: str | bytes | None, timeout: float | None, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        text_input = input.decode() if isinstance(input, bytes) else input
        result = subprocess.run(argv, input=text_input, capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result


# ---------------------------------------------------------------------- tiny HTTP client
def _insecure() -> ssl.SSLContext:
    # kube-controller-manager and kube-scheduler serve /healthz with a self-signed cert.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _http_request(
    host: str, port: int, method: str, path: str, ctx: ssl.SSLContext | None, body: Any = None, timeout: float = 5.0
) -> tuple[int, bytes]:
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _healthz_ok(port: int) -> bool:
    return _http_get("127.0.0.1", port, "/healthz", _insecure())[0] == 200


def _http_get(host: str, port: int, path: str, ctx: ssl.SSLContext | None) -> tuple[int, bytes]:
    return _http_request(host, port, "GET", path, ctx)


# ---------------------------------------------------------------------- CLI
def _pid_alive(pid: int, expect_in_cmdline: str) -> bool:
    """True if `pid` runs and is still the process we recorded (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return expect_in_cmdline in cmdline


def _terminate(pid: int, grace: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _cmd_up(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    pid_file = workdir / "cluster.pid"
    if pid_file.exists() and _pid_alive(int(pid_file.read_text()), "hack.plane.cluster"):
        print(
            f"a control plane is already up in {workdir} (pid {pid_file.read_text().strip()});"
            f" run `python -m hack.plane.cluster down --workdir {workdir}`",
            file=sys.stderr,
        )
        return 1

    # SIGTERM (from `down`) takes the same clean path as Ctrl-C. SIGINT is set explicitly
    # because a shell starts `&` jobs with it ignored, and Python then keeps it ignored.
    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    plane = LocalControlPlane(workdir, nodes=args.nodes, minimal=args.minimal)
    workdir.mkdir(parents=True, exist_ok=True)
    # Written before start() so that `down` can also stop a plane that is still starting.
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        plane.start()
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        log.info("running; Ctrl-C (or `python -m hack.plane.cluster down --workdir %s`) stops it", workdir)
        while True:
            plane.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        log.info("stopping")
        return 0
    except (ComponentError, MissingBinaryError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        pid_file.unlink(missing_ok=True)


def _cmd_down(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    pid_file = workdir / "cluster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if _pid_alive(pid, "hack.plane.cluster"):
            log.info("stopping the `up` process (pid %d)", pid)
            _terminate(pid, grace=60)
        pid_file.unlink(missing_ok=True)
    # Whatever the `up` process left behind (it was SIGKILLed, say).
    for component_pid in sorted((workdir / "pids").glob("*.pid")):
        name = component_pid.stem
        pid = int(component_pid.read_text())
        if _pid_alive(pid, name):
            log.info("stopping leftover %s (pid %d)", name, pid)
            _terminate(pid, grace=10)
    remove_data_in(workdir)
    log.info("control plane in %s is down", workdir)
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    kubeconfig = Path(args.workdir).resolve() / "kubeconfig"
    if not kubeconfig.exists():
        print(f"no control plane in {args.workdir}: run `python -m hack.plane.cluster up`", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={kubeconfig}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.plane.cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and stay in the foreground")
    up.add_argument(
        "--minimal", action="store_true", help="etcd and kube-apiserver only (no controllers, scheduler or nodes)"
    )
    up.add_argument("--nodes", type=int, default=1, help="number of kwok fake nodes (default 1)")
    down = sub.add_parser("down", help="stop a backgrounded `up` and remove its data")
    env = sub.add_parser("env", help="print the `export KUBECONFIG=...` line")
    for p in (up, down, env):
        p.add_argument("--workdir", default=str(DEFAULT_WORKDIR), help=f"state directory (default {DEFAULT_WORKDIR})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="==> %(message)s", stream=sys.stderr)
    handler = {"up": _cmd_up, "down": _cmd_down, "env": _cmd_env}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
