"""Where the control-plane binaries live: the same lookup rules as `hack/build.sh`.

Precedence for etcd, kube-apiserver and kubectl: `TEST_ASSET_*` > `KUBEBUILDER_ASSETS` >
the build cache. Everything else only comes from the cache.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HACK_DIR = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = HACK_DIR / "build.sh"
VERSIONS_FILE = HACK_DIR / "versions.env"


# What `hack/build.sh` without arguments provides.
PLANE_FILES = (
    "etcd",
    "kube_apiserver",
    "kubectl",
    "kube_controller_manager",
    "kube_scheduler",
    "kwok",
    "kwok_stages",
    "helm",
)


class MissingBinaryError(RuntimeError):
    """A binary the plane needs is not built yet."""


def versions(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Component versions: `hack/versions.env`, each overridable by an env var of its name."""
    env = os.environ if env is None else env
    result: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        result[key] = env.get(key) or value
    return result


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("FOO_OPERATOR_CACHE"):
        return Path(env["FOO_OPERATOR_CACHE"])
    return Path(env.get("HOME", str(Path.home()))) / ".cache" / "foo-operator"


@dataclass(frozen=True)
class Binaries:
    """Resolved paths; a path may not exist yet (see `missing`)."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path  # the stage definitions kwok needs as --config (a YAML file)
    helm: Path
    sample_controller: Path  # only built by `hack/build.sh sample-controller`
    sample_controller_crd: Path
    promtool: Path  # Prometheus' rule checker, for the chart's PrometheusRule (not part of the plane)
    prometheus: Path  # the Prometheus server, only built by `hack/build.sh prometheus` (make dashboard)
    k8s_version: str
    # True when kube-apiserver/kubectl come from KUBEBUILDER_ASSETS or TEST_ASSET_*, so their
    # version is whatever the user supplied, not `k8s_version`.
    user_supplied: frozenset[str] = frozenset()

    def missing(self, *names: str) -> list[str]:
        """Which of the named fields (all binaries when none given) are not executable files."""
        wanted = names or PLANE_FILES
        return [n for n in wanted if not _is_file(getattr(self, n))]

    def require(self, *names: str) -> None:
        gone = self.missing(*names)
        if gone:
            listing = ", ".join(f"{n} ({getattr(self, n)})" for n in gone)
            if any(n in self.user_supplied for n in gone):
                raise MissingBinaryError(f"missing: {listing}; check TEST_ASSET_* / KUBEBUILDER_ASSETS")
            # Targets that `hack/build.sh` builds only when named.
            optional = [
                target
                for target in ("sample-controller", "prometheus")
                if any(n.startswith(target.replace("-", "_")) for n in gone)
            ]
            hint = " ".join(["bash hack/build.sh", *optional])
            raise MissingBinaryError(
                f"not built: {listing}; run `{hint}` first (same *_VERSION and FOO_OPERATOR_CACHE)"
            )


def _is_file(path: Path) -> bool:
    return path.is_file() and (path.suffix in (".yaml", ".yml") or os.access(path, os.X_OK))


def _user_asset(name: str, var: str, env: Mapping[str, str]) -> Path | None:
    if env.get(var):
        return Path(env[var])
    assets = env.get("KUBEBUILDER_ASSETS")
    if assets and _is_file(Path(assets) / name):
        return Path(assets) / name
    return None


def find_binaries(env: Mapping[str, str] | None = None) -> Binaries:
    """Paths of every binary, resolved exactly as `hack/build.sh` places or skips them."""
    env = os.environ if env is None else env
    v = versions(env)
    cache = cache_dir(env)
    bin_dir, share = cache / "bin", cache / "share"
    k8s = bin_dir / f"kubernetes-{v['K8S_VERSION']}"

    user: set[str] = set()
    resolved: dict[str, Path] = {}
    for field, name, var in (
        ("etcd", "etcd", "TEST_ASSET_ETCD"),
        ("kube_apiserver", "kube-apiserver", "TEST_ASSET_KUBE_APISERVER"),
        ("kubectl", "kubectl", "TEST_ASSET_KUBECTL"),
    ):
        asset = _user_asset(name, var, env)
        if asset is not None:
            resolved[field] = asset
            user.add(field)
    sc = v["SAMPLE_CONTROLLER_VERSION"]
    return Binaries(
        etcd=resolved.get("etcd", bin_dir / f"etcd-{v['ETCD_VERSION']}" / "etcd"),
        kube_apiserver=resolved.get("kube_apiserver", k8s / "kube-apiserver"),
        kubectl=resolved.get("kubectl", k8s / "kubectl"),
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kwok=bin_dir / f"kwok-{v['KWOK_VERSION']}" / "kwok",
        kwok_stages=share / f"kwok-{v['KWOK_VERSION']}" / "stages.yaml",
        helm=bin_dir / f"helm-{v['HELM_VERSION']}" / "helm",
        sample_controller=bin_dir / f"sample-controller-{sc}" / "sample-controller",
        sample_controller_crd=share / f"sample-controller-{sc}" / "crd-status-subresource.yaml",
        promtool=bin_dir / f"prometheus-{v['PROMETHEUS_VERSION']}" / "promtool",
        prometheus=bin_dir / f"prometheus-{v['PROMETHEUS_VERSION']}" / "prometheus",
        k8s_version=v["K8S_VERSION"],
        user_supplied=frozenset(user),
    )


def repo_program(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The Go program hack/<name> as `hack/build.sh` places it: under a hash of its sources
    (go.mod, go.sum, then the .go files in name order, as build.sh's glob reads them)."""
    src = HACK_DIR / name
    sources = [src / "go.mod", src / "go.sum", *sorted(src.glob("*.go"))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    return cache_dir(env) / "bin" / f"{name}-{digest[:12]}" / name


def selector_oracle(env: Mapping[str, str] | None = None) -> Path:
    """hack/selector-oracle: apimachinery's selector parsers (tests/unit/test_insights_selectors_oracle.py)."""
    return repo_program("selector-oracle", env)


def list_rules(env: Mapping[str, str] | None = None) -> Path:
    """hack/list-rules: client-go checking the list rules (tests/e2e/test_client_go_lists.py)."""
    return repo_program("list-rules", env)


@dataclass(frozen=True)
class CertManager:
    """hack/cert-manager as `hack/build.sh cert-manager` places it."""

    version: str
    controller: Path
    webhook: Path
    cainjector: Path
    crds: Path  # every CRD of the module's deploy/crds, one YAML stream

    def missing(self) -> list[Path]:
        return [p for p in (self.controller, self.webhook, self.cainjector, self.crds) if not p.is_file()]


def cert_manager(env: Mapping[str, str] | None = None) -> CertManager:
    src = HACK_DIR / "cert-manager"
    sources = [src / "go.mod", src / "go.sum", *sorted(src.glob("*/main.go"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    version = next(
        line.split()[-1]
        for line in (src / "go.mod").read_text().splitlines()
        if line.split()[:1] == ["github.com/cert-manager/cert-manager"]  # its require line
    )
    bin_dir = cache_dir(env) / "bin" / f"cert-manager-{version}-{digest[:12]}"
    return CertManager(
        version=version,
        controller=bin_dir / "controller",
        webhook=bin_dir / "webhook",
        cainjector=bin_dir / "cainjector",
        crds=cache_dir(env) / "share" / f"cert-manager-{version}" / "crds.yaml",
    )


def helm4(env: Mapping[str, str] | None = None) -> Path:
    """Helm 4 as `hack/build.sh helm4` places it, beside the plane's Helm 3."""
    return cache_dir(env) / "bin" / f"helm-{versions(env)['HELM4_VERSION']}" / "helm"


def policy_tester(env: Mapping[str, str] | None = None) -> Path:
    """sigstore policy-controller's tester as `hack/build.sh policy-tester` places it."""
    return cache_dir(env) / "bin" / f"policy-tester-{versions(env)['POLICY_CONTROLLER_VERSION']}" / "policy-tester"


def gitops_crds(env: Mapping[str, str] | None = None) -> Path:
    """Argo CD's and Flux's CRDs as `hack/build.sh gitops-crds` places them, one YAML stream."""
    v = versions(env)
    name = (
        f"gitops-crds-{v['ARGOCD_VERSION']}-{v['FLUX_HELM_CONTROLLER_VERSION']}-{v['FLUX_SOURCE_CONTROLLER_VERSION']}"
    )
    return cache_dir(env) / "share" / name / "crds.yaml"
