"""What a real node changes on this machine, recorded before and put back after (hack/plane/node.py).

Sysctls the kubelet and the CNI bridge set, iptables rules and chains (kubelet's, kube-proxy's,
CNI's, ours), mounts under the node's work dir, the kubelet's kubepods cgroups, containerd's
shims, and `machine_state()`: all of it as plain data, for a test to compare before and after.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hack.plane.procs import run_command

BRIDGE = "foo-br0"
BRIDGE_ADDRESS = "10.88.0.1"
# A further real node's cgroupRoot is named after it (hack/plane/node.py: foo-real-node-2).
NODE_CGROUP_PREFIX = "foo-real-node-"
# What the kubelet (protectKernelDefaults: false), the CNI bridge and kube-proxy may change.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Written by the kubelet and containerd's CNI outside any directory they let us choose.
FIXED_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/lib/cni"),
    Path("/run/containerd"),
    Path("/usr/libexec/kubernetes"),
    Path("/var/log/pods"),
    Path("/var/lib/foo-operator-node"),
    Path("/var/lib/foo-operator-node-2"),  # a second node's (hack/plane/node.py's another_node)
)
NETNS_DIR = Path("/run/netns")
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle", "raw")
OUR_RULE_MARKS = ("KUBE-", "CNI-", BRIDGE, "foo-operator-node")


def run(
    *argv: str | os.PathLike[str], check: bool = True, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(argv, check=check, timeout=timeout, input=input)


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        try:
            values[name] = sysctl_path(name).read_text().strip()
        except OSError:
            values[name] = "<absent>"
    return values


def iptables_rules(binary: str, table: str) -> list[str]:
    result = run(binary, "-w", "-t", table, "-S", check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


def _hierarchies() -> list[Path]:
    return [CGROUP_ROOT, *sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir())]


def cgroup_dirs(parent: str = "") -> list[Path]:
    """Every kubepods cgroup the kubelet may have made under `parent` (its cgroupRoot; "" the
    root), in every hierarchy (v1 and unified)."""
    found = []
    for hierarchy in _hierarchies():
        for name in ("kubepods", "kubepods.slice"):
            if (hierarchy / parent / name).is_dir():
                found.append(hierarchy / parent / name)
    return found


def node_cgroup_parents() -> list[Path]:
    """The cgroupRoots made for further nodes (hack/plane/node.py names each after its node)."""
    return [p for hierarchy in _hierarchies() for p in sorted(hierarchy.glob(f"{NODE_CGROUP_PREFIX}*")) if p.is_dir()]


def make_cgroup_parent(parent: str) -> None:
    """`parent` in every v1 hierarchy, as a kubelet's cgroupRoot must be; cpuset's with its
    parent's cpus and mems, which a new cpuset cgroup lacks and a task in it needs."""
    for hierarchy in _hierarchies():
        if hierarchy == CGROUP_ROOT or not (hierarchy / "cgroup.procs").exists():
            continue
        directory = hierarchy / parent
        directory.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (directory / name).exists() and not (directory / name).read_text().strip():
                (directory / name).write_text((hierarchy / name).read_text())


def machine_state() -> dict[str, Any]:
    """What a real node changes on this machine, as plain data to compare before and after."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return {
        "sysctls": read_sysctls(),
        "iptables": {
            f"{b} {t}": sorted(r for r in iptables_rules(b, t) if any(m in r for m in OUR_RULE_MARKS))
            for b in IPTABLES
            for t in TABLES
        },
        # Only what could be ours: other tests on this machine make veth pairs and routes too.
        "routes": sorted(
            r
            for r in run("ip", "-4", "route", "show", "table", "all", check=False).stdout.splitlines()
            if BRIDGE in r or BRIDGE_ADDRESS.rsplit(".", 2)[0] + "." in r
        ),
        "links": sorted(
            name
            for name in (
                line.split(":")[1].strip().split("@")[0]
                for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines()
            )
            if name == BRIDGE or name.startswith("veth")
        ),
        "mounts": sorted(
            m
            for m in mounts
            if "kubelet" in m or "containerd" in m or "foo-operator-node" in m or m.startswith("/run/netns/cni-")
        ),
        "cgroups": [str(p) for p in [*cgroup_dirs(), *node_cgroup_parents()]],
        "paths": {str(p): p.exists() for p in FIXED_PATHS},
        "netns": sorted(p.name for p in NETNS_DIR.glob("cni-*")) if NETNS_DIR.is_dir() else [],
        "processes": sorted(_our_processes()),
    }


def _our_processes() -> list[str]:
    """kubelet, kube-proxy, containerd and shims started with a foo-operator node's paths."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "foo-operator-node" in cmdline or "foo-real-node" in cmdline:
            found.append(cmdline.split(" ", 1)[0])
    return found


def kill_shims(socket: Path) -> None:
    """containerd-shim-runc-v2 processes started for this containerd (its -address), by pid."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def unmount_under(path: Path) -> None:
    """Every mount at or below `path`, deepest first (the kubelet bind-mounts its root dir on itself)."""
    prefix = str(path.resolve()) if path.exists() else str(path)
    for _ in range(5):
        points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        ours = sorted(
            {p for p in points if p == prefix or p.startswith(prefix + "/")}, key=lambda p: p.count("/"), reverse=True
        )
        if not ours:
            return
        for point in ours:
            if run("umount", point, check=False).returncode != 0:
                run("umount", "-l", point, check=False)


def remove_kubepods_cgroups(parent: str = "") -> None:
    """The kubepods cgroups (killing what still runs in them); under `parent`, a further node's
    cgroupRoot, that whole tree with `parent` itself."""
    if parent:
        tops = [h / parent for h in _hierarchies() if h != CGROUP_ROOT and (h / parent).is_dir()]
    else:
        tops = cgroup_dirs()
    for top in tops:
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [
            top
        ]:
            procs = directory / "cgroup.procs"
            if procs.exists():
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)  # a container's process; ours to end
                    except ProcessLookupError:
                        pass
            for _ in range(20):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def restore_iptables(before: dict[tuple[str, str], list[str]]) -> None:
    """Remove the rules and chains that appeared since `before` (kubelet's, CNI's, ours)."""
    for (binary, table), old in before.items():
        now = iptables_rules(binary, table)
        added = Counter(now) - Counter(old)
        new_chains = [line.split()[1] for line in added if line.startswith("-N ")]
        for rule, count in added.items():
            if rule.startswith("-A ") and any(mark in rule for mark in OUR_RULE_MARKS):
                for _ in range(count):
                    run(binary, "-w", "-t", table, "-D", *_split_rule(rule[3:]), check=False)
        for chain in new_chains:
            if any(chain.startswith(mark) for mark in OUR_RULE_MARKS):
                run(binary, "-w", "-t", table, "-F", chain, check=False)
        for chain in new_chains:
            if any(chain.startswith(mark) for mark in OUR_RULE_MARKS):
                run(binary, "-w", "-t", table, "-X", chain, check=False)


def _split_rule(rule: str) -> list[str]:
    return shlex.split(rule)
