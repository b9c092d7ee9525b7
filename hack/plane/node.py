"""A real node beside the kwok ones: containerd + runc + CNI bridge, kubelet and kube-proxy,
and cluster DNS (CoreDNS on the host, behind the kube-dns Service) for its pods.

    with NodeBridge() as bridge, LocalControlPlane(dir, address=bridge.address) as plane, \\
            RealNode(plane, bridge) as node:
        node.load_image(archive)           # nothing is ever pulled
        plane.kubectl("apply", ...)         # pods tolerating node.taint land on node.name

Everything it touches on the machine is recorded first and put back by `stop()`, which always
runs (also after a failed start) and does not stop at the first error: processes, mounts under
the work dir, the kubelet's cgroups, iptables rules and chains, the bridge and its routes,
sysctls, and the files the kubelet writes outside its root dir (the bookkeeping is in
hack/plane/machine.py, whose `machine_state()` a test compares before and after). docs/real-node.md has the facts and traps behind each choice.

A second node (`another_node(first)`, e.g. for `kubectl drain`) joins the first on its plane and
bridge: a kubelet and a containerd of its own (name, bridge address, state dirs and sockets, pod
address range, cgroup root), sharing the first node's machine-wide parts (kube-proxy, cluster
DNS, the forwarding guard, and the record of iptables and sysctls it puts back). It is torn down
before the first, under the same flock.

Needs root, Debian's containerd/runc/CNI plugins (hack/install-node-deps.sh) and
`hack/build.sh node` (kubelet, kube-proxy, the pause image, CoreDNS); `cannot_host_node()` says which is
missing. One real node (and those beside it) per machine at a time: the bridge, the node names and
iptables are global.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import logging
import os
import shutil
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hack.plane.binaries import cache_dir, versions
from hack.plane.cluster import LocalControlPlane, free_port
from hack.plane.kube_versions import node_version
from hack.plane.machine import (
    BRIDGE,
    BRIDGE_ADDRESS,
    CGROUP_ROOT,
    FIXED_PATHS,
    IPTABLES,
    NETNS_DIR,
    TABLES,
    iptables_rules,
    kill_shims,
    machine_state,
    make_cgroup_parent,
    read_sysctls,
    remove_kubepods_cgroups,
    restore_iptables,
    run,
    sysctl_path,
    unmount_under,
)
from hack.plane.pki import KUBERNETES_SERVICE_IP, SERVICE_CLUSTER_IP_RANGE, issue_user
from hack.plane.procs import Component, ComponentError, Started, wait_until

log = logging.getLogger(__name__)

POD_SUBNET = "10.88.0.0/16"
NODE_NAME = "foo-real-node"
# Every real node registers with it; the taint below keeps all but tolerating pods off them.
NODE_LABEL = ("foo-operator.dev/real-node", "true")
# Node n's pods take their addresses from the n-th block of this many in POD_SUBNET (host-local
# IPAM per node: two nodes on one bridge must never hand out the same address).
POD_ADDRESSES_PER_NODE = 1 << 14
# A further node's kubelet serves on the bridge address plus this plus its number (node 2:
# 10.88.0.19): below the pods' first address, clear of the callers tests add (another_address).
NODE_ADDRESS_OFFSET = 16
# Only pods that say they accept a real node land there; Foos' Deployments keep to kwok.
TAINT = {"key": "foo-operator.dev/real-node", "value": "true", "effect": "NoSchedule"}
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"  # hack/build.sh PAUSE_VERSION
CLUSTER_DOMAIN = "cluster.local"
# The kube-dns Service's address, the kubelet's clusterDNS: the tenth of the service range, as
# kubeadm picks it. Its one endpoint is CoreDNS on this host, at the bridge address.
DNS_SERVICE_IP = "10.0.0.10"
# Any pull goes here and fails at once: nothing listens on port 1 of loopback.
NO_REGISTRY = "http://127.0.0.1:1"
LOCK_FILE = Path("/run/foo-operator-node.lock")  # held while a node's bridge exists
STATE_FILE = Path("/run/foo-operator-node.json")  # the last node's work dir, for a crashed run
# The kubelet's and containerd's sockets live under it: a unix socket path has at most 104 bytes,
# less than a pytest tmp_path leaves. One node per machine, so one fixed, short directory.
DEFAULT_WORKDIR = Path("/var/lib/foo-operator-node")


def cannot_host_node() -> str | None:
    """Why this machine cannot run a real node (one line), or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd, kubelet, a bridge, iptables)"
    for tool in ("containerd", "runc", "ctr", "iptables", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (hack/install-node-deps.sh installs the node's packages)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "the CNI plugins are not installed (hack/install-node-deps.sh)"
    if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").exists():
        return "no cgroup filesystem at /sys/fs/cgroup"
    return None


class MachineLock:
    """The exclusive flock on LOCK_FILE, held while this process has a real node's machine-wide
    state, so a second test session waits for the first one's node instead of tearing its bridge
    away. Re-entrant within the process (one flock, counted holders): a test that compares the
    machine before and after a node holds it around the node, so no other session's node starts
    in between."""

    def __init__(self) -> None:
        self._fd = -1
        self._holders = 0

    def __enter__(self) -> None:
        if self._holders == 0:
            fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("another real node runs on this machine; waiting for it (%s)", LOCK_FILE)
                fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
        self._holders += 1

    def __exit__(self, *exc: object) -> None:
        self._holders -= 1
        if self._holders == 0:
            os.close(self._fd)  # releases the flock
            self._fd = -1


machine_lock = MachineLock()


@dataclass
class NodeBridge:
    """The node's own bridge: the pods' gateway and the address kube-apiserver serves on.

    Held under `machine_lock` for its whole life.
    """

    name: str = BRIDGE
    address: str = BRIDGE_ADDRESS
    subnet: str = POD_SUBNET
    created: bool = False
    _locked: bool = False

    def __enter__(self) -> NodeBridge:
        machine_lock.__enter__()
        self._locked = True
        try:
            self._create()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _create(self) -> None:
        self.remove()  # a crashed earlier run's
        run("ip", "link", "add", self.name, "type", "bridge")
        self.created = True
        prefix = self.subnet.split("/")[1]
        run("ip", "addr", "add", f"{self.address}/{prefix}", "dev", self.name)
        run("ip", "link", "set", self.name, "up")

    def __exit__(self, *exc: object) -> None:
        try:
            self.remove()
        finally:
            if self._locked:
                self._locked = False
                machine_lock.__exit__()

    def another_address(self, offset: int) -> str:
        """A further address of this host on the bridge, below the pods' range: a caller that
        reaches the pods from an address of its own, as a second pod would, not from
        kube-apiserver's. It goes with the bridge."""
        address = _offset(self.address, offset)
        run("ip", "addr", "add", f"{address}/32", "dev", self.name)
        return address

    def remove(self) -> None:
        if run("ip", "link", "show", self.name, check=False).returncode == 0:
            run("ip", "link", "del", self.name, check=False)
        self.created = False


class RealNode(Started):
    """containerd, kubelet and kube-proxy for one node named `name`, state under `workdir`.

    `first`: this is a further node beside that running one (`another_node` makes it), sharing
    its machine-wide parts; None: the first node, which runs those parts and puts them back.
    """

    def __init__(
        self,
        plane: LocalControlPlane,
        bridge: NodeBridge,
        workdir: str | os.PathLike[str] = DEFAULT_WORKDIR,
        *,
        name: str = NODE_NAME,
        timeout: float = 120.0,
        first: RealNode | None = None,
    ) -> None:
        self.plane = plane
        self.bridge = bridge
        # "foo-operator-node" in every path: how leftovers of a crashed run are told apart.
        self.workdir = Path(workdir).resolve()
        if "foo-operator-node" not in str(self.workdir):
            self.workdir /= "foo-operator-node"
        self.name = name
        self.timeout = timeout
        self.first = first
        self.further: list[RealNode] = []  # the first node's: those running beside it
        self.number: int = 1 if first is None else first.number + 1 + len(first.further)
        # Where the kubelet serves, and the InternalIP it registers.
        self.address = bridge.address if first is None else _offset(bridge.address, NODE_ADDRESS_OFFSET + self.number)
        # The kubelet's cgroupRoot ("": each hierarchy's root, kubepods right under it). A further
        # node's kubepods must be its own: a kubelet kills the pods it finds there and does not
        # know as orphans.
        self.cgroup_parent = "" if first is None else name
        self.state_file = STATE_FILE if first is None else STATE_FILE.with_name(f"{self.workdir.name}.json")
        # Client identities and log files of a further node carry its number.
        self._prefix = "" if first is None else f"node{self.number}-"
        self.taint = dict(TAINT)
        version = node_version()  # the default version's, also under a plane of another version
        cache = cache_dir()
        self.kubelet_bin = cache / "bin" / f"kubernetes-{version}" / "kubelet"
        self.kube_proxy_bin = cache / "bin" / f"kubernetes-{version}" / "kube-proxy"
        self.pause_archive = cache / "share" / "pause-3.10.1" / "pause.oci.tar"
        self.coredns_bin = cache / "bin" / f"coredns-{versions()['COREDNS_VERSION']}" / "coredns"
        self.dns_port = 0  # CoreDNS's port on the bridge address, picked free at start
        self._dns_ready_port = 0
        self.socket = self.workdir / "containerd.sock"
        self.before: dict[str, Any] = {}
        self._sysctls: dict[str, str] = {}
        self._iptables: dict[tuple[str, str], list[str]] = {}
        self._components: dict[str, Component] = {}
        self._pre_existing_paths: dict[Path, bool] = {}
        self._netns_before: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        reason = cannot_host_node()
        if reason:
            raise ComponentError(reason)
        for path in (self.kubelet_bin, self.kube_proxy_bin, self.pause_archive, self.coredns_bin):
            if not path.exists():
                raise ComponentError(f"{path} is missing: run `bash hack/build.sh node`")
        if self.first is not None:
            self._start_beside(self.first)
            return
        for record in sorted(STATE_FILE.parent.glob(f"{STATE_FILE.stem}*.json")):
            _clean_after_crash(record)  # a further node's too: a crashed run may have left one
        began = time.monotonic()
        self.before = machine_state()
        self._sysctls = read_sysctls()
        self._iptables = {(b, t): iptables_rules(b, t) for b in IPTABLES for t in TABLES}
        self._pre_existing_paths = {p: p.exists() for p in FIXED_PATHS}
        self._netns_before = {p.name for p in NETNS_DIR.glob("*")} if NETNS_DIR.is_dir() else set()
        self._record()
        try:
            self._guard_forwarding()
            self._start_containerd()
            self.load_image(self.pause_archive)
            self._start_dns()
            self._start_kubelet()
            self._start_kube_proxy()
            wait_until(
                f"node {self.name} Ready", self._ready, timeout=self.timeout, watch=list(self._components.values())
            )
            wait_until("cluster DNS ready", self._dns_ready, timeout=self.timeout, watch=[self._components["coredns"]])
        except BaseException:
            self.stop()
            raise
        log.info("real node %s ready in %.1fs", self.name, time.monotonic() - began)

    def _start_beside(self, first: RealNode) -> None:
        """A further node: a containerd and a kubelet of its own; kube-proxy, DNS and the
        forwarding guard are the first node's, as is the record of what to put back."""
        _clean_after_crash(self.state_file)
        began = time.monotonic()
        self._record()
        first.further.append(self)
        try:
            run("ip", "addr", "add", f"{self.address}/32", "dev", self.bridge.name)
            self._make_cgroup_parent()
            self._start_containerd()
            self.load_image(self.pause_archive)
            self._start_kubelet()
            wait_until(
                f"node {self.name} Ready", self._ready, timeout=self.timeout, watch=list(self._components.values())
            )
        except BaseException:
            self.stop()
            raise
        log.info("real node %s ready beside %s in %.1fs", self.name, first.name, time.monotonic() - began)

    def _record(self) -> None:
        """What a later run needs to clean up after this node if this process dies first."""
        self.state_file.write_text(
            json.dumps(
                {
                    "workdir": str(self.workdir),
                    "socket": str(self.socket),
                    "cgroup_parent": self.cgroup_parent,
                    "before": self.before,
                    "pid": os.getpid(),
                }
            )
        )

    def stop(self) -> None:
        """Put the machine back as it was; every step runs even if an earlier one failed. A
        further node puts back only what is its own; the first stops any still beside it first."""
        if self.first is not None:
            steps = [
                self._drain,
                self._stop_kubelet,
                self._kill_containers,
                self._stop_containerd,
                self._unmount,
                self._remove_cgroups,
                self._remove_address,
                self._remove_workdir,
            ]
            self._run_teardown(steps)
            return
        for node in reversed(self.further):
            with contextlib.suppress(ComponentError):  # its failed steps are logged; go on
                node.stop()
        steps = [
            self._drain,
            self._stop_kube_proxy,
            self._stop_kubelet,
            self._stop_dns,
            self._kill_containers,
            self._stop_containerd,
            self._unmount,
            self._remove_netns,
            self._remove_cgroups,
            self._restore_iptables,
            self._restore_sysctls,
            self._remove_fixed_paths,
            self._remove_workdir,
        ]
        self._run_teardown(steps)

    def _run_teardown(self, steps: list[Callable[[], None]]) -> None:
        began = time.monotonic()
        errors = []
        for step in steps:
            try:
                step()
            except Exception as err:  # noqa: BLE001 - the other steps must still run
                errors.append(f"{step.__name__}: {err}")
                log.warning("teardown step %s failed: %s", step.__name__, err)
        self.state_file.unlink(missing_ok=True)
        if self.first is not None and self in self.first.further:
            self.first.further.remove(self)
        log.info("real node %s torn down in %.1fs", self.name, time.monotonic() - began)
        if errors:
            raise ComponentError("teardown incomplete: " + "; ".join(errors))

    def load_image(self, archive: str | os.PathLike[str]) -> None:
        """Import an OCI archive into the node's containerd (namespace k8s.io, where the CRI looks)."""
        run("ctr", "--address", self.socket, "-n", "k8s.io", "images", "import", archive, timeout=300)

    def trust_registry(self, host: str, ca_file: Path) -> None:
        """Let containerd pull from `host` over https verified by `ca_file` (a registry of ours on
        loopback): a hosts.toml of its own beside the ones that send every other registry to
        NO_REGISTRY. containerd reads these at each pull, so no restart. Loopback bypasses the
        HTTPS_PROXY that stops every other pull (Go's proxy rules never proxy loopback)."""
        self._registry_hosts(host, server=f"https://{host}", host=host, ca_file=ca_file)

    def mirror_registry(self, upstream: str, host: str, ca_file: Path) -> None:
        """Let containerd pull `upstream`'s images (e.g. ghcr.io) from `host`, a registry of ours on
        loopback holding the same paths, verified by `ca_file`: a pod naming the published image
        runs what the test pushed, and nothing reaches `upstream` (its own server is never tried)."""
        self._registry_hosts(upstream, server=NO_REGISTRY, host=host, ca_file=ca_file)

    def _registry_hosts(self, name: str, *, server: str, host: str, ca_file: Path) -> None:
        """certs.d/<name>/hosts.toml: pull and resolve from https://<host> (its CA `ca_file`), then `server`."""
        directory = self.workdir / "containerd" / "certs.d" / name
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca_file, directory / "ca.crt")
        (directory / "hosts.toml").write_text(
            f'server = "{server}"\n[host."https://{host}"]\n  capabilities = ["pull", "resolve"]\n'
            f'  ca = "{directory / "ca.crt"}"\n'
        )

    def images(self) -> list[str]:
        out = run("ctr", "--address", self.socket, "-n", "k8s.io", "images", "ls", "-q").stdout
        return out.split()

    # ------------------------------------------------------------------ start steps
    def _launch(self, name: str, argv: list[str | os.PathLike[str]], env: dict[str, str] | None = None) -> Component:
        component = Component(name, argv, self.plane.logs_dir / f"node-{self._prefix}{name}.log", env=env)
        component.start()
        self._components[name] = component
        log.info("started %s (pid %s), log: %s", name, component.pid, component.log_file)
        return component

    def _guard_forwarding(self) -> None:
        """Nothing from a pod is forwarded off the bridge (the CNI plugin turns ip_forward on)."""
        run(
            "iptables",
            "-w",
            "-t",
            "mangle",
            "-I",
            "FORWARD",
            "-i",
            self.bridge.name,
            "!",
            "-o",
            self.bridge.name,
            "-m",
            "comment",
            "--comment",
            "foo-operator-node: pods stay on this host",
            "-j",
            "DROP",
        )

    def _start_containerd(self) -> None:
        root = self.workdir / "containerd"
        certs = root / "certs.d"
        for host in ("_default", "docker.io", "registry.k8s.io", "ghcr.io", "localhost"):
            (certs / host).mkdir(parents=True, exist_ok=True)
            (certs / host / "hosts.toml").write_text(
                f'server = "{NO_REGISTRY}"\n[host."{NO_REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n'
            )
        cni_conf = self.workdir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-foo-operator-node.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "foo-operator-node",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": self.bridge.name,
                            "isGateway": True,
                            # No masquerade and no default route: a pod reaches this host, other pods and
                            # Services, and nothing else.
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(self.workdir / "cni" / "ipam"),
                                "ranges": [
                                    [
                                        {
                                            "subnet": self.bridge.subnet,
                                            "gateway": self.bridge.address,
                                            "rangeStart": self._pod_addresses()[0],
                                            "rangeEnd": self._pod_addresses()[1],
                                        }
                                    ]
                                ],
                                "routes": [{"dst": SERVICE_CLUSTER_IP_RANGE}],
                            },
                        },
                        {"type": "loopback"},
                    ],
                },
                indent=1,
            )
        )
        config = f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.workdir / "containerd.sock.ttrpc"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM lacks CAP_SYS_RESOURCE: lowering oom_score_adj (-998 for pause) fails every sandbox.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"""
        (root / "config.toml").write_text(config)
        env = {
            **os.environ,
            "HTTP_PROXY": NO_REGISTRY,
            "HTTPS_PROXY": NO_REGISTRY,
            "NO_PROXY": "",
            "http_proxy": NO_REGISTRY,
            "https_proxy": NO_REGISTRY,
            "no_proxy": "",
        }
        containerd = self._launch("containerd", ["containerd", "--config", root / "config.toml"], env=env)
        wait_until(
            "containerd's socket",
            lambda: run("ctr", "--address", self.socket, "version", check=False).returncode == 0,
            timeout=self.timeout,
            watch=[containerd],
        )

    def _start_dns(self) -> None:
        """CoreDNS on the host at the bridge address, answering cluster.local from the apiserver's
        Services and EndpointSlices, behind a selectorless kube-dns Service at DNS_SERVICE_IP.

        Its build has no `forward` plugin and it serves no zone but the cluster's: any other name
        is REFUSED, so no lookup from a pod leaves this machine.
        """
        assert self.plane.pki is not None
        # Only what the kubernetes plugin reads (pods disabled): the rules of CoreDNS's own
        # system:coredns ClusterRole, less pods.
        issue_user(self.plane.pki, "coredns", "system:foo-operator:coredns")
        kubeconfig = self.plane.component_kubeconfig("coredns")
        self.plane.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "system:foo-operator:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "system:foo-operator:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:foo-operator:coredns",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": "system:foo-operator:coredns",
                    }
                ],
            },
        )
        self.dns_port = _free_udp_and_tcp_port(self.bridge.address)
        self._dns_ready_port = free_port()
        corefile = self.workdir / "Corefile"
        zones = f"{CLUSTER_DOMAIN} in-addr.arpa ip6.arpa"
        corefile.write_text(f"""# hack/plane/node.py: cluster DNS for the real node's pods. No forward plugin, no other zone:
# a name outside the cluster is REFUSED, so no lookup leaves this machine.
{" ".join(f"{z}:{self.dns_port}" for z in zones.split())} {{
    bind {self.bridge.address}
    ready 127.0.0.1:{self._dns_ready_port}
    errors
    cache 5
    kubernetes {zones} {{
        kubeconfig {kubeconfig}
        pods disabled
        ttl 5
    }}
}}
""")
        self._launch("coredns", [self.coredns_bin, "-conf", corefile, "-quiet"])
        # The Service the kubelet's clusterDNS names, and its one endpoint: CoreDNS's address.
        ports = [
            {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": self.dns_port},
            {"name": "dns-tcp", "protocol": "TCP", "port": 53, "targetPort": self.dns_port},
        ]
        labels = {
            "k8s-app": "kube-dns",
            "kubernetes.io/name": "CoreDNS",
            "app.kubernetes.io/managed-by": "foo-operator-node",
        }
        self.plane.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
                "spec": {"clusterIP": DNS_SERVICE_IP, "ports": ports},
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kube-dns-host",
                    "namespace": "kube-system",
                    "labels": {
                        **labels,
                        "kubernetes.io/service-name": "kube-dns",
                        "endpointslice.kubernetes.io/managed-by": "foo-operator-node",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.bridge.address], "conditions": {"ready": True}}],
                "ports": [{"name": p["name"], "protocol": p["protocol"], "port": self.dns_port} for p in ports],
            },
        )

    def _dns_ready(self) -> bool:
        """CoreDNS's kubernetes plugin has synced (`ready`), and kubernetes.default resolves."""
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self._dns_ready_port, timeout=2)
            conn.request("GET", "/ready")
            if conn.getresponse().status != 200:
                return False
        except OSError:
            return False
        answer = dns_query(self.bridge.address, self.dns_port, f"kubernetes.default.svc.{CLUSTER_DOMAIN}")
        return answer == (0, [KUBERNETES_SERVICE_IP])

    def _start_kubelet(self) -> None:
        assert self.plane.pki is not None
        identity = f"{self._prefix}kubelet"
        issue_user(self.plane.pki, identity, f"system:node:{self.name}", ("system:nodes",))
        kubeconfig = self.plane.component_kubeconfig(identity)
        kubelet_dir = self.workdir / "kubelet"
        kubelet_dir.mkdir(parents=True, exist_ok=True)
        resolv = self.workdir / "resolv.conf"
        # The host part of a pod's resolv.conf: no nameserver of the machine's (cluster DNS is
        # the only one the kubelet adds) and no search domains of its.
        resolv.write_text("# only cluster DNS: no nameserver off this host\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.address,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.plane.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",  # PID 1 is not systemd; hybrid cgroup v1
            **({"cgroupRoot": f"/{self.cgroup_parent}"} if self.cgroup_parent else {}),
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "resolvConf": str(resolv),
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [DNS_SERVICE_IP],
            "registerWithTaints": [self.taint],
            "maxPods": 30,
            "serializeImagePulls": False,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "syncFrequency": "10s",
            "fileCheckFrequency": "5s",
        }
        config_file = self.workdir / "kubelet-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        self._launch(
            "kubelet",
            [
                self.kubelet_bin,
                f"--config={config_file}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={kubelet_dir}",
                f"--cert-dir={kubelet_dir / 'pki'}",
                f"--node-ip={self.address}",
                f"--hostname-override={self.name}",
                "--node-labels={}={}".format(*NODE_LABEL),
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        assert self.plane.pki is not None
        issue_user(self.plane.pki, "kube-proxy", "system:kube-proxy")
        kubeconfig = self.plane.component_kubeconfig("kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": self.bridge.subnet,
            "hostnameOverride": self.name,
            "bindAddress": self.bridge.address,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # NodePorts on the bridge only; no route_localnet; the kernel's conntrack and OOM
            # settings left alone.
            "nodePortAddresses": [f"{self.bridge.address}/32"],
            "iptables": {"localhostNodePorts": False},
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "oomScoreAdj": 0,
        }
        config_file = self.workdir / "kube-proxy-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        self._launch("kube-proxy", [self.kube_proxy_bin, f"--config={config_file}", "--v=1"])

    def _pod_addresses(self) -> tuple[str, str]:
        """The first and last address host-local IPAM gives this node's pods: the node's own
        block of POD_SUBNET (the first node's starts past the bridge's own addresses)."""
        base = self.bridge.subnet.split("/")[0]
        first = (self.number - 1) * POD_ADDRESSES_PER_NODE + (256 if self.number == 1 else 1)
        return _offset(base, first), _offset(base, self.number * POD_ADDRESSES_PER_NODE - 2)

    def _make_cgroup_parent(self) -> None:
        """The kubelet's cgroupRoot must exist in every hierarchy before it starts."""
        make_cgroup_parent(self.cgroup_parent)

    def _ready(self) -> bool:
        status, body = self.plane.get(f"/api/v1/nodes/{self.name}")
        if status != 200:
            return False
        conditions = json.loads(body).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # ------------------------------------------------------------------ teardown steps
    def _drain(self) -> None:
        """Delete this node's pods while the kubelet runs, so it stops them the proper way
        (CNI DEL, netns, mounts); then the Node object."""
        if "kubelet" not in self._components or not self._components["kubelet"].running():
            return
        selector = f"spec.nodeName={self.name}"
        self.plane.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector={selector}",
            "--grace-period=0",
            "--force",
            "--wait=false",
            check=False,
            timeout=30,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            tasks = run(
                "ctr", "--address", self.socket, "-n", "k8s.io", "tasks", "ls", "-q", check=False
            ).stdout.split()
            if not tasks:
                break
            time.sleep(0.5)
        self.plane.kubectl("delete", "node", self.name, "--wait=false", check=False, timeout=30)

    def _stop_kube_proxy(self) -> None:
        component = self._components.pop("kube-proxy", None)
        if component is not None:
            component.stop()
        if self.kube_proxy_bin.exists():
            run(self.kube_proxy_bin, "--cleanup", check=False)

    def _stop_kubelet(self) -> None:
        component = self._components.pop("kubelet", None)
        if component is not None:
            component.stop()

    def _stop_dns(self) -> None:
        component = self._components.pop("coredns", None)
        if component is not None:
            component.stop()

    def _kill_containers(self) -> None:
        """Whatever the kubelet left running: every task killed, every container removed."""
        if not self.socket.exists():
            return
        ctr = ("ctr", "--address", str(self.socket), "-n", "k8s.io")
        for task in run(*ctr, "tasks", "ls", "-q", check=False).stdout.split():
            run(*ctr, "tasks", "kill", "-a", "-s", "SIGKILL", task, check=False)
        time.sleep(0.5)
        for task in run(*ctr, "tasks", "ls", "-q", check=False).stdout.split():
            run(*ctr, "tasks", "delete", "-f", task, check=False)
        for container in run(*ctr, "containers", "ls", "-q", check=False).stdout.split():
            run(*ctr, "containers", "delete", container, check=False)

    def _stop_containerd(self) -> None:
        component = self._components.pop("containerd", None)
        if component is not None:
            component.stop()
        kill_shims(self.socket)

    def _unmount(self) -> None:
        unmount_under(self.workdir)

    def _remove_netns(self) -> None:
        if not NETNS_DIR.is_dir():
            return
        for path in NETNS_DIR.glob("cni-*"):
            if path.name not in self._netns_before:
                run("umount", path, check=False)
                path.unlink(missing_ok=True)

    def _remove_cgroups(self) -> None:
        remove_kubepods_cgroups(self.cgroup_parent)

    def _remove_address(self) -> None:
        """A further node's address on the bridge (the first's is the bridge's own)."""
        if self.address != self.bridge.address:
            run("ip", "addr", "del", f"{self.address}/32", "dev", self.bridge.name, check=False)

    def _restore_iptables(self) -> None:
        restore_iptables(self._iptables)

    def _restore_sysctls(self) -> None:
        for name, value in self._sysctls.items():
            if value != "<absent>" and read_sysctls().get(name) != value:
                sysctl_path(name).write_text(value)

    def _remove_fixed_paths(self) -> None:
        for path, existed in self._pre_existing_paths.items():
            if not existed and path.exists():
                unmount_under(path)
                shutil.rmtree(path, ignore_errors=True)

    def _remove_workdir(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def plane_with_real_node(
    workdir: str | os.PathLike[str], image_archive: str | os.PathLike[str] | None, *, nodes: int = 1
) -> Iterator[tuple[LocalControlPlane, RealNode]]:
    """A control plane on the node bridge's address and a real node beside its kwok ones, the
    product's image (`image_archive`) loaded into the node's containerd (None: nothing loaded, the
    node pulls it from a registry of ours: `RealNode.trust_registry`); all of it torn down after."""
    with (
        NodeBridge() as bridge,
        LocalControlPlane(workdir, nodes=nodes, address=bridge.address) as plane,
        RealNode(plane, bridge) as node,
    ):
        log.info("real node %s ready, cluster DNS at %s (kube-system/kube-dns)", node.name, DNS_SERVICE_IP)
        if image_archive is not None:
            log.info("loading %s into the node's containerd", image_archive)
            node.load_image(image_archive)
        yield plane, node


@contextlib.contextmanager
def another_node(first: RealNode, image_archive: str | os.PathLike[str] | None) -> Iterator[RealNode]:
    """A further real node on `first`'s plane and bridge (`<first's name>-<n>`, state in
    `<first's work dir>-<n>`), `image_archive` loaded into its containerd; torn down after (and
    by `first`'s teardown if this process never reaches that)."""
    number = first.number + 1 + len(first.further)
    with RealNode(
        first.plane, first.bridge, f"{DEFAULT_WORKDIR}-{number}", name=f"{first.name}-{number}", first=first
    ) as node:
        if image_archive is not None:
            node.load_image(image_archive)
        yield node


def chart_values(node: RealNode, image: str) -> dict[str, Any]:
    """Helm values that run the chart on `node` from the locally loaded `image` (never pulled)."""
    repository, tag = image.rsplit(":", 1)
    placement = {
        "tolerations": [{"key": node.taint["key"], "operator": "Exists", "effect": node.taint["effect"]}],
        "nodeSelector": {"kubernetes.io/hostname": node.name},
    }
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "webhook": {"replicas": 1, **placement},
        "insights": {"replicas": 1, **placement},
        "controller": dict(placement),
        "tests": dict(placement),
        "migrateStorage": {"job": dict(placement)},
    }


def image_metadata() -> dict[str, Any]:
    """hack/image.sh's image.json: the product image's `ref` and OCI `archive`."""
    path = cache_dir() / "share" / "image" / "image.json"
    if not path.exists():
        raise ComponentError(f"{path} is missing: run `make image`")
    meta: dict[str, Any] = json.loads(path.read_text())
    return meta


# ---------------------------------------------------------------------- helpers
def _free_udp_and_tcp_port(address: str) -> int:
    """A port free for both UDP and TCP on ``address`` (DNS listens on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((address, 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((address, port))
                except OSError:
                    continue
                return port
    raise ComponentError(f"no port free for both UDP and TCP on {address}")


def dns_query(server: str, port: int, name: str, *, timeout: float = 2.0) -> tuple[int, list[str]]:
    """One A query over UDP: (rcode, addresses); rcode -1 when nothing answered in time."""
    query_id = int.from_bytes(os.urandom(2), "big")
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendto(packet, (server, port))
            reply = sock.recv(4096)
        except OSError:
            return -1, []
    rid, flags, _qd, ancount, _ns, _ar = struct.unpack(">HHHHHH", reply[:12])
    if rid != query_id:
        return -1, []
    offset = 12 + len(question) + 4
    addresses = []
    for _ in range(ancount):
        # The answer's name: a compression pointer (2 bytes) or labels ending in a zero byte.
        while reply[offset] not in (0,) and reply[offset] & 0xC0 != 0xC0:
            offset += reply[offset] + 1
        offset += 2 if reply[offset] & 0xC0 == 0xC0 else 1
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if rtype == 1 and length == 4:
            addresses.append(".".join(str(b) for b in reply[offset : offset + 4]))
        offset += length
    return flags & 0xF, addresses


def _offset(address: str, n: int) -> str:
    a, b, c, d = (int(x) for x in address.split("."))
    value = ((a << 24) | (b << 16) | (c << 8) | d) + n
    return ".".join(str((value >> s) & 255) for s in (24, 16, 8, 0))


def _clean_after_crash(record: Path) -> None:
    """A run that died without its teardown left its `record`: undo what can be undone."""
    if not record.exists():
        return
    try:
        state = json.loads(record.read_text())
    except ValueError:
        record.unlink(missing_ok=True)
        return
    if state.get("pid") and Path(f"/proc/{state['pid']}").exists() and state["pid"] != os.getpid():
        raise ComponentError(f"another real node is running (pid {state['pid']}, {state['workdir']}); one per machine")
    log.warning("cleaning up after a real node that was not torn down (%s)", state["workdir"])
    workdir, socket = Path(state["workdir"]), Path(state["socket"])
    kill_shims(socket)
    unmount_under(workdir)
    remove_kubepods_cgroups(state.get("cgroup_parent", ""))
    shutil.rmtree(workdir, ignore_errors=True)
    record.unlink(missing_ok=True)
