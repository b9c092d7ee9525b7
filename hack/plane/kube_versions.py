"""What each Kubernetes version of the matrix needs to build and to run here, and why: one table.

The versions themselves are in `hack/versions.env` (`K8S_VERSION`, `K8S_SMOKE_VERSIONS`);
`hack/build.sh` asks here for the Go build tags of the version it builds
(`python3 -m hack.plane.kube_versions go-tags v1.27.16`), `hack/plane/cluster.py` for the extra flags of the
version it runs. Each entry names the minors it applies to and the reason, so a reader can tell
when it may go.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from hack.plane.binaries import versions


@dataclass(frozen=True)
class PlaneFlag:
    """Extra flags for one component on minors `first_minor`..`last_minor` (of 1.x) inclusive."""

    component: str  # "kube-apiserver", "kube-controller-manager", "kube-scheduler"
    args: tuple[str, ...]
    reason: str
    first_minor: int = 0
    last_minor: int = 999


# No minor of the matrix needs a flag of its own today. The endpoint reconciler is switched off by
# hack/plane/cluster.py, for the address rather than the version: a loopback plane advertises 127.0.0.1,
# which kube-apiserver >= 1.37 refuses as the `kubernetes` Service's endpoint, while a plane serving
# a real node keeps its endpoints so kube-proxy leads pods to it.
PLANE_FLAGS: tuple[PlaneFlag, ...] = ()


@dataclass(frozen=True)
class BuildTags:
    """Go build tags for k8s.io/kubernetes on minors `first_minor`..`last_minor` inclusive."""

    tags: tuple[str, ...]
    reason: str
    first_minor: int = 0
    last_minor: int = 999


BUILD_TAGS: tuple[BuildTags, ...] = (
    BuildTags(
        ("providerless",),
        first_minor=27,
        last_minor=27,
        reason="k8s.io/legacy-cloud-providers v0.27.16 is not on the module proxy (zip 403, checksum "
        "database 404), and without this tag kube-apiserver and kube-controller-manager import "
        "it for the in-tree AWS/Azure/GCE/vSphere providers, which a loopback plane never uses. "
        "v0.28.x and later are published; v1.31 removed the module.",
    ),
)


def minor_of(version: str) -> int:
    """1.x minor of a version string such as `v1.25.16`."""
    match = re.fullmatch(r"v?1\.(\d+)(?:\.\d+)?(?:[-+].*)?", version)
    if match is None:
        raise ValueError(f"not a Kubernetes 1.x version: {version!r}")
    return int(match.group(1))


def plane_flags(component: str, version: str) -> list[str]:
    """The table's flags for `component` at `version`, in table order."""
    minor = minor_of(version)
    return [
        arg
        for flag in PLANE_FLAGS
        if flag.component == component and flag.first_minor <= minor <= flag.last_minor
        for arg in flag.args
    ]


def go_tags(version: str) -> list[str]:
    """The table's Go build tags for k8s.io/kubernetes at `version`."""
    minor = minor_of(version)
    return [tag for entry in BUILD_TAGS if entry.first_minor <= minor <= entry.last_minor for tag in entry.tags]


# Kubernetes' version skew policy: a kubelet (and kube-proxy) may be up to three minors older than
# kube-apiserver, never newer.
KUBELET_MAX_MINORS_BEHIND = 3


def node_version() -> str:
    """The version the real node's kubelet and kube-proxy are built at: the matrix's default.

    Only the default version's wrapper module builds them (`hack/build.sh node`): v1.27's kubelet
    imports legacy-cloud-providers, which the module proxy does not serve. A plane of another
    version gets this kubelet when the skew policy allows it (`kubelet_skew_refusal`).
    """
    return versions(env={})["K8S_VERSION"]


def kubelet_skew_refusal(apiserver: str, kubelet: str) -> str | None:
    """Why a kubelet at `kubelet` may not join an apiserver at `apiserver` (one line), or None."""
    behind = minor_of(apiserver) - minor_of(kubelet)
    if behind < 0:
        return f"the real node's kubelet {kubelet} is newer than kube-apiserver {apiserver} (the skew policy allows older only)"
    if behind > KUBELET_MAX_MINORS_BEHIND:
        return (
            f"the real node's kubelet {kubelet} is {behind} minors behind kube-apiserver {apiserver} "
            f"(the skew policy allows {KUBELET_MAX_MINORS_BEHIND})"
        )
    return None


def smoke_versions() -> list[str]:
    """The matrix's extra versions (`K8S_SMOKE_VERSIONS`), oldest first."""
    return sorted(versions()["K8S_SMOKE_VERSIONS"].split(), key=lambda v: tuple(map(int, v.lstrip("v").split("."))))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "go-tags":
        print(",".join(go_tags(argv[1])))
        return 0
    print("usage: python3 -m hack.plane.kube_versions go-tags VERSION", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
