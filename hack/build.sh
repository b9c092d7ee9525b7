#!/usr/bin/env bash
# Builds the local control plane from Go modules into a cache outside the repo:
#   kube-apiserver, kubectl, kube-controller-manager, kube-scheduler (k8s.io/kubernetes),
#   etcd, helm, kwok (+ its stage definitions), selector-oracle (hack/selector-oracle:
#   apimachinery's selector parsers, for a differential test), list-rules (hack/list-rules:
#   client-go checking the list rules through kube-apiserver), promtool (checks and unit-tests
#   the chart's PrometheusRule); `sample-controller`, the real node's parts, cert-manager and
#   the Prometheus server on request.
#
# Usage: hack/build.sh [--force] [sample-controller] [node] [cert-manager] [prometheus]
#        hack/build.sh [--force] [helm] [cosign] [krew] [actionlint] [release]
#        hack/build.sh [--force] [helm4] [gitops-crds]
#        hack/build.sh [--force] policy-tester
#   sample-controller  also build the Go k8s.io/sample-controller (a peer for comparisons)
#   node               also build kubelet and kube-proxy (same wrapper module as the apiserver),
#                      the pause image (pause.c from the module, gcc -static, buildah) and
#                      CoreDNS with only the plugins cluster DNS needs: what hack/plane/node.py needs
#                      besides Debian's packages
#   cert-manager       cert-manager's controller, webhook and cainjector (hack/cert-manager: its
#                      own packages, wired as its commands wire them) and its CRDs, for the
#                      chart's certManager mode on the real node
#   prometheus         the Prometheus server (same module and version as promtool, no web UI
#                      assets), for `make dashboard`'s picture of the Grafana dashboard
#   cosign             only cosign (signs and verifies the release's image and chart: `make
#                      release`, the release e2e); krew: only krew (installs the release's kubectl
#                      plugin in the release e2e); actionlint: only actionlint (checks
#                      .github/workflows in `make lint`); release: all three; helm: only helm (what
#                      `make release` needs of the plane). Given only these, the plane is skipped;
#                      cosign and actionlint alone take a lock of their own (their wrappers and
#                      binaries are their own), helm the plane's
#   helm4              Helm 4 (HELM4_VERSION) beside the plane's Helm 3, at the lowest CPU and I/O
#                      priority: the chart's upgrade and GitOps e2e tests render and upgrade with both
#   gitops-crds        Argo CD's Application and Flux's HelmRelease and OCIRepository CRDs, copied
#                      from their Go modules (downloads only, nothing built): docs/gitops.md's
#                      examples are checked against them. helm4 and gitops-crds build alone, under a
#                      lock of their own
#   policy-tester      sigstore policy-controller's offline evaluator (its cmd/tester: the admission
#                      webhook's own policy code, run on one image), at the lowest CPU and I/O
#                      priority, alone under a lock of its own: it checks docs/policies'
#                      ClusterImagePolicies against a release in a registry
#   --force            rebuild binaries that are already cached (after changing build flags)
#
# Idempotent: whatever is already in the cache is skipped, so a warm run takes a second.
# Environment:
#   FOO_OPERATOR_CACHE   cache dir (default ~/.cache/foo-operator)
#   K8S_VERSION ETCD_VERSION HELM_VERSION KWOK_VERSION SAMPLE_CONTROLLER_VERSION PROMETHEUS_VERSION
#                        override hack/versions.env
#   KUBEBUILDER_ASSETS   dir with envtest's etcd, kube-apiserver, kubectl: used, not built
#   TEST_ASSET_ETCD TEST_ASSET_KUBE_APISERVER TEST_ASSET_KUBECTL  same, one binary each
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Defaults from versions.env unless the caller set them.
while IFS='=' read -r key value; do
  [[ -z "$key" || "$key" == \#* ]] && continue
  if [[ -z "${!key:-}" ]]; then export "$key=$value"; fi
done < "$HACK_DIR/versions.env"

CACHE="${FOO_OPERATOR_CACHE:-$HOME/.cache/foo-operator}"
BIN="$CACHE/bin"
SRC="$CACHE/src"
SHARE="$CACHE/share"
# Static, path-independent binaries: they run anywhere and rebuild byte-identically.
export CGO_ENABLED=0
GO_BUILD=(go build -trimpath)

log() { printf '==> %s\n' "$*"; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }

FORCE=false  # --force: rebuild cached binaries (after changing build flags); only relinks,
             # since the Go build cache still holds every compiled package.
want_sample_controller=false
want_node=false
want_cert_manager=false
want_prometheus=false
want_cosign=false
want_actionlint=false
want_krew=false
want_helm_only=false
want_helm4=false
want_gitops_crds=false
want_policy_tester=false
for arg in "$@"; do
  case "$arg" in
    sample-controller) want_sample_controller=true ;;
    node) want_node=true ;;
    cert-manager) want_cert_manager=true ;;
    prometheus) want_prometheus=true ;;
    cosign) want_cosign=true ;;
    actionlint) want_actionlint=true ;;
    krew) want_krew=true ;;
    release) want_cosign=true want_actionlint=true want_krew=true ;;
    helm) want_helm_only=true ;;
    helm4) want_helm4=true ;;
    gitops-crds) want_gitops_crds=true ;;
    policy-tester) want_policy_tester=true ;;
    --force) FORCE=true ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown target '$arg' (known: sample-controller, node, cert-manager, prometheus, helm, cosign, krew, actionlint, release, helm4, gitops-crds, policy-tester)" ;;
  esac
done

command -v go >/dev/null || die "go is not on PATH (Go >= 1.24 is needed)"
mkdir -p "$BIN" "$SRC" "$SHARE"

# Two builds at once (two test sessions, a developer and CI) would race on the same
# wrapper modules and half-written binaries; serialise them.
lock="$CACHE/.build.lock"
tools_only=false
if $want_cosign || $want_actionlint || $want_krew; then tools_only=true lock="$CACHE/.build-release.lock"; fi
if $want_helm_only; then tools_only=true lock="$CACHE/.build.lock"; fi
gitops_only=false
if $want_helm4 || $want_gitops_crds; then gitops_only=true lock="$CACHE/.build-gitops.lock"; fi
if { $tools_only || $gitops_only; } && { $want_sample_controller || $want_node || $want_cert_manager || $want_prometheus; }; then
  die "helm, cosign, krew, actionlint, release, helm4 and gitops-crds build alone: run the plane's targets in a call of their own"
fi
if $want_policy_tester; then
  if $tools_only || $gitops_only || $want_sample_controller || $want_node || $want_cert_manager || $want_prometheus; then
    die "policy-tester builds alone: run the other targets in a call of their own"
  fi
  lock="$CACHE/.build-policy-tester.lock"
fi
if $tools_only && $gitops_only; then
  die "helm4 and gitops-crds build alone: run helm, cosign, krew, actionlint and release in a call of their own"
fi
exec 9>"$lock"
if ! flock -n 9; then
  log "another build.sh holds $lock; waiting for it"
  flock 9
fi

# Checked here, not in user_asset: that runs in $(...), where `die` would only end a subshell.
for var in TEST_ASSET_ETCD TEST_ASSET_KUBE_APISERVER TEST_ASSET_KUBECTL; do
  if [[ -n "${!var:-}" && ! -x "${!var}" ]]; then die "$var=${!var} is not an executable file"; fi
done

is_built() { ! $FORCE && [[ -x "$1" ]]; }

# Path of a user-supplied binary (TEST_ASSET_* wins over KUBEBUILDER_ASSETS), or nothing.
user_asset() {
  local name="$1" var="$2"
  if [[ -n "${!var:-}" ]]; then
    printf '%s' "${!var}"
  elif [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$name" ]]; then
    printf '%s' "$KUBEBUILDER_ASSETS/$name"
  fi
}

# Records how long each component took, for the curious and for the README's numbers.
timed() {
  local what="$1"; shift
  local start=$SECONDS
  "$@"
  local took=$((SECONDS - start))
  log "$what done in ${took}s"
  printf '%s\t%s\t%ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$what" "$took" >> "$CACHE/build-times.log"
}

# A throwaway module that requires the real one: `go install mod@version` refuses modules
# whose go.mod has replace lines (etcd, kubernetes), and a wrapper also lets us pin versions.
# $1 = wrapper dir, $2 = module@version, $3... = packages to blank-import for `go mod tidy`.
init_wrapper() {
  local dir="$1" modver="$2"; shift 2
  # The stamp holds the blank imports it was tidied for: a command added later (kubelet
  # beside kube-apiserver) re-tidies the same module rather than keeping a stale go.mod.
  local want="$modver $*"
  if [[ -f "$dir/.tidy-done" && "$(cat "$dir/.tidy-done")" == "$want" ]]; then return; fi
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    go mod init "foo-operator.local/wrapper/$(basename "$dir")" >/dev/null 2>&1
    {
      echo '//go:build tools'
      echo
      echo '// Package tools pins the commands this wrapper builds, so `go mod tidy` keeps them.'
      echo 'package tools'
      echo
      echo 'import ('
      for pkg in "$@"; do echo "	_ \"$pkg\""; done
      echo ')'
    } > tools.go
    go mod edit -require="$modver"
    if [[ -n "${WRAPPER_EDIT:-}" ]]; then eval "$WRAPPER_EDIT"; fi
    if [[ -n "${WRAPPER_TAGS:-}" ]]; then
      # `go mod tidy` acts as if every build tag were set, so it also wants the modules the
      # tags leave out (which may not be published): let it finish, then check that the
      # build with the tags has every package it needs.
      go mod tidy -e 2> tidy-errors.log || true
      log "$(basename "$dir"): tidy could not resolve $(grep -c ': reading\|: verifying' tidy-errors.log || true)" \
        "imports that tags $WRAPPER_TAGS leave out (listed in $dir/tidy-errors.log)"
      local broken
      broken="$(go list -tags "$WRAPPER_TAGS" -e -deps -f '{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}' "$@")"
      [[ -z "$broken" ]] || die "with tags $WRAPPER_TAGS, packages are still missing: $broken"
    else
      go mod tidy
    fi
  )
  printf '%s' "$want" > "$dir/.tidy-done"
}

# go build into a temp name, then rename: an interrupted build never leaves a
# truncated binary that later runs would mistake for a finished one.
build_binary() {
  local dir="$1" pkg="$2" out="$3"; shift 3
  mkdir -p "$(dirname "$out")"
  (cd "$dir" && "${GO_BUILD[@]}" "$@" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
}

# ---------------------------------------------------------------- etcd
build_etcd() {
  local out="$BIN/etcd-$ETCD_VERSION/etcd"
  if [[ -n "$(user_asset etcd TEST_ASSET_ETCD)" ]]; then
    log "etcd: using $(user_asset etcd TEST_ASSET_ETCD)"; return
  fi
  if is_built "$out"; then log "etcd $ETCD_VERSION: cached"; return; fi
  log "building etcd $ETCD_VERSION (~1 min with a cold Go cache)"
  local dir="$SRC/etcd-$ETCD_VERSION"
  timed "etcd $ETCD_VERSION" build_etcd_in "$dir" "$out"
}

build_etcd_in() {
  init_wrapper "$1" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3
  build_binary "$1" go.etcd.io/etcd/server/v3 "$2"
}

# ---------------------------------------------------------------- kubernetes
k8s_wrapper_dir() { printf '%s' "$SRC/kubernetes-$K8S_VERSION"; }

# k8s.io/kubernetes replaces its ~31 staging modules (k8s.io/api, client-go, ...) with
# ./staging/src paths, which do not exist in the module zip. Replace each with its
# published twin: v1.X.Y  ->  v0.X.Y. The list is read from that version's own go.mod.
k8s_replace_staging() {
  local gomod staging_version="v0.${K8S_VERSION#v1.}"
  # go exits 1 with the reason in the JSON: a version the proxy does not have says so, in one line.
  gomod="$({ go mod download -json "k8s.io/kubernetes@$K8S_VERSION" || true; } \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or "error: " + " ".join(d.get("Error", "?").split()))')"
  [[ "$gomod" != error:* ]] || die "K8S_VERSION=$K8S_VERSION: cannot download k8s.io/kubernetes: ${gomod#error: }"
  local mods
  mods="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$gomod" | sort -u)"
  [[ -n "$mods" ]] || die "no ./staging/src replace lines in $gomod"
  local args=()
  for m in $mods; do args+=("-replace=$m=$m@$staging_version"); done
  go mod edit "${args[@]}"
  log "kubernetes $K8S_VERSION: replaced $(wc -w <<<"$mods") staging modules with $staging_version"
}

# The same -X flags as kubernetes' hack/lib/version.sh; without them the binaries report
# v0.0.0-master+$Format:%H$ and `kubectl version` fails to parse it.
k8s_ldflags() {
  local info commit date minor major
  # The proxy's .info file has the release time (a reproducible buildDate) and, for some
  # versions, the commit (Origin.Hash).
  info="$(cd "$(k8s_wrapper_dir)" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Info"])')"
  commit="$(python3 -c 'import json,sys; print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash",""))' "$info")"
  date="$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])).get("Time",""); print(t[:19]+"Z" if t else "")' "$info")"
  major="$(cut -d. -f1 <<<"${K8S_VERSION#v}")"
  minor="$(cut -d. -f2 <<<"${K8S_VERSION#v}")"
  local flags=""
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
    [[ -n "$commit" ]] && flags+=" -X $pkg.gitCommit=$commit"
    [[ -n "$date" ]] && flags+=" -X $pkg.buildDate=$date"
  done
  printf '%s' "-s -w${flags}"
}

K8S_BINARIES=(kube-apiserver kubectl kube-controller-manager kube-scheduler)
K8S_NODE_BINARIES=(kubelet kube-proxy)

# What the wrapper blank-imports: every command, so `hack/build.sh node` after a plain build
# re-tidies nothing (~9 more modules, seconds) — on the default version, the one the real node
# runs. The matrix's other versions only ever build the plane, and v1.27's kubelet imports
# k8s.io/legacy-cloud-providers even with `providerless`, a module the proxy does not serve.
k8s_commands() {
  if [[ "$K8S_VERSION" == "$(sed -n 's/^K8S_VERSION=//p' "$HACK_DIR/versions.env")" ]]; then
    printf '%s\n' "${K8S_BINARIES[@]}" "${K8S_NODE_BINARIES[@]}"
  else
    printf '%s\n' "${K8S_BINARIES[@]}"
  fi
}

# $@: the commands to build (default K8S_BINARIES).
build_kubernetes() {
  local dir out todo=() name names=("$@")
  [[ $# -gt 0 ]] || names=("${K8S_BINARIES[@]}")
  dir="$(k8s_wrapper_dir)"
  for name in "${names[@]}"; do
    out="$BIN/kubernetes-$K8S_VERSION/$name"
    case "$name" in
      kube-apiserver) if [[ -n "$(user_asset kube-apiserver TEST_ASSET_KUBE_APISERVER)" ]]; then
          log "kube-apiserver: using $(user_asset kube-apiserver TEST_ASSET_KUBE_APISERVER)"; continue; fi ;;
      kubectl) if [[ -n "$(user_asset kubectl TEST_ASSET_KUBECTL)" ]]; then
          log "kubectl: using $(user_asset kubectl TEST_ASSET_KUBECTL)"; continue; fi ;;
    esac
    if is_built "$out"; then log "$name $K8S_VERSION: cached"; continue; fi
    todo+=("$name")
  done
  [[ ${#todo[@]} -gt 0 ]] || return 0

  # Per-version Go build tags, with the reason for each: hack/plane/kube_versions.py.
  local tags
  tags="$(cd "$HACK_DIR/.." && python3 -m hack.plane.kube_versions go-tags "$K8S_VERSION")"
  local pkgs=()
  for name in $(k8s_commands); do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
  if [[ "$(cat "$dir/.tidy-done" 2>/dev/null)" != "k8s.io/kubernetes@$K8S_VERSION ${pkgs[*]}" ]]; then
    log "preparing k8s.io/kubernetes $K8S_VERSION wrapper module (downloads ~1 min)"
    WRAPPER_EDIT=k8s_replace_staging WRAPPER_TAGS="$tags" \
      timed "kubernetes $K8S_VERSION module download" \
      init_wrapper "$dir" "k8s.io/kubernetes@$K8S_VERSION" "${pkgs[@]}"
  fi
  local ldflags tag_args=()
  ldflags="$(k8s_ldflags)"
  if [[ -n "$tags" ]]; then
    log "kubernetes $K8S_VERSION: build tags $tags (hack/plane/kube_versions.py says why)"
    tag_args=(-tags "$tags")
  fi
  for name in "${todo[@]}"; do
    case "$name" in
      kube-apiserver) log "building kube-apiserver $K8S_VERSION (~5 min with a cold Go cache)" ;;
      kubelet) log "building kubelet $K8S_VERSION (~70 s after kube-apiserver)" ;;
      *) log "building $name $K8S_VERSION (~1 min after kube-apiserver)" ;;
    esac
    timed "$name $K8S_VERSION" build_binary "$dir" "k8s.io/kubernetes/cmd/$name" \
      "$BIN/kubernetes-$K8S_VERSION/$name" "${tag_args[@]}" -ldflags "$ldflags"
  done
}

# ---------------------------------------------------------------- helm
build_helm() {
  local out="$BIN/helm-$HELM_VERSION/helm"
  if is_built "$out"; then log "helm $HELM_VERSION: cached"; return; fi
  log "building helm $HELM_VERSION (~1 min with a cold Go cache)"
  timed "helm $HELM_VERSION" build_helm_in "$SRC/helm-$HELM_VERSION" "$out"
}

build_helm_in() {
  local dir="$1" out="$2"
  init_wrapper "$dir" "helm.sh/helm/v3@$HELM_VERSION" helm.sh/helm/v3/cmd/helm
  # Helm's Makefile stamps its version and the Kubernetes version it assumes offline
  # (`helm template` without a cluster), taken from the client-go it is built with.
  local cg minor
  cg="$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/client-go)"
  minor="$(cut -d. -f2 <<<"${cg#v}")"
  build_binary "$dir" helm.sh/helm/v3/cmd/helm "$out" -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
}

# ---------------------------------------------------------------- kwok
# kwok exits with "no stages found" without stage definitions. They ship in its module;
# copy the ones we want: fast node-initialize, the plain status heartbeat (the lease-based
# one made the fake node flap), and the fast pod lifecycle.
copy_kwok_stages() {
  local dest="$SHARE/kwok-$KWOK_VERSION"
  if [[ -f "$dest/stages.yaml" ]]; then return; fi
  local moddir
  moddir="$(cd "$SRC/kwok-$KWOK_VERSION" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  local files=(
    "$moddir/kustomize/stage/node/fast/node-initialize.yaml"
    "$moddir/kustomize/stage/node/heartbeat/node-heartbeat.yaml"
  )
  local f
  for f in "$moddir"/kustomize/stage/pod/fast/*.yaml; do
    [[ "$(basename "$f")" == kustomization.yaml ]] || files+=("$f")
  done
  mkdir -p "$dest/stages"
  : > "$dest/stages.yaml.tmp"
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || die "kwok stage $f not found in the module"
    install -m 0644 "$f" "$dest/stages/$(basename "$f")"
    { echo "---"; cat "$f"; } >> "$dest/stages.yaml.tmp"
  done
  mv -f "$dest/stages.yaml.tmp" "$dest/stages.yaml"
  log "kwok stages: ${#files[@]} copied to $dest/stages.yaml"
}

build_kwok() {
  local out="$BIN/kwok-$KWOK_VERSION/kwok"
  local dir="$SRC/kwok-$KWOK_VERSION"
  if is_built "$out"; then
    log "kwok $KWOK_VERSION: cached"
  else
    log "building kwok $KWOK_VERSION (~1.5 min with a cold Go cache)"
    timed "kwok $KWOK_VERSION" build_kwok_in "$dir" "$out"
  fi
  copy_kwok_stages
}

build_kwok_in() {
  init_wrapper "$1" "sigs.k8s.io/kwok@$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  # No version -X flags: kwok's own consts.Version already matches its module version.
  build_binary "$1" sigs.k8s.io/kwok/cmd/kwok "$2" -ldflags "-s -w"
}

# ---------------------------------------------------------------- promtool
# Prometheus' own rule checker and rule unit-test runner, for the chart's PrometheusRule.
# `remove_all_sd` leaves out every service-discovery plugin (AWS, Azure, GCE, Kubernetes, ...):
# promtool's rule commands need none of them, and their SDKs are most of its dependencies.
PROMTOOL_TAGS=remove_all_sd
build_promtool() {
  build_prometheus_command promtool "$SRC/prometheus-$PROMETHEUS_VERSION" "~4 min with a cold Go cache"
}

# ---------------------------------------------------------------- prometheus (server)
# The server itself, only for `make dashboard` (hack/pictures/dashboard.py): it scrapes the product on
# loopback so the dashboard's queries can be evaluated over a real run. Same module, version and
# tags as promtool (static scrape configs need no service discovery); built without the
# `builtinassets` tag, so the web UI's assets are not embedded: only the HTTP API is used. A
# wrapper of its own: cmd/prometheus needs modules promtool's does not, and sharing one would
# re-tidy it each time the two builds alternate. Not nearly free after promtool: ~6 min on 2
# busy cores with promtool's packages in the Go build cache (the TSDB, scrape, web and
# notifier packages are the server's alone), so `make test` does not build it.
build_prometheus() {
  build_prometheus_command prometheus "$SRC/prometheus-server-$PROMETHEUS_VERSION" \
    "~6 min on 2 cores, even after promtool's build"
}

# $1 = command under github.com/prometheus/prometheus/cmd, $2 = its wrapper dir, $3 = how long it takes.
build_prometheus_command() {
  local command="$1" out="$BIN/prometheus-$PROMETHEUS_VERSION/$1"
  if is_built "$out"; then log "$command $PROMETHEUS_VERSION: cached"; return; fi
  log "building $command $PROMETHEUS_VERSION ($3)"
  timed "$command $PROMETHEUS_VERSION" build_prometheus_command_in "$command" "$2" "$out"
}

build_prometheus_command_in() {
  local package="github.com/prometheus/prometheus/cmd/$1"
  WRAPPER_TAGS="$PROMTOOL_TAGS" init_wrapper "$2" "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" "$package"
  # Stamped as Prometheus' Makefile (promu) does, so `--version` names the release.
  build_binary "$2" "$package" "$3" -tags "$PROMTOOL_TAGS" \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"
}

# ---------------------------------------------------------------- cert-manager
# cert-manager's cmd/controller, cmd/webhook and cmd/cainjector are Go modules of their own that
# the module proxy does not serve; the controllers and the injector they run are packages of
# github.com/cert-manager/cert-manager, which it does. hack/cert-manager wires those packages
# as the commands do (no leader election, no listeners), pinned by its committed go.mod/go.sum;
# the directory name carries a hash of the sources, as selector-oracle's does. The webhook's
# server is an internal package: the wrapper module's path is beneath cert-manager's for that
# (hack/cert-manager/go.mod). It shares most packages with the other two, so it adds ~3 min of
# CPU to a cold build.
build_cert_manager() {
  local src="$HACK_DIR/cert-manager" hash version out crds
  hash="$(cat "$src/go.mod" "$src/go.sum" "$src"/*/main.go | sha256sum | cut -c1-12)"
  version="$(cd "$src" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)"
  out="$BIN/cert-manager-$version-$hash"
  crds="$SHARE/cert-manager-$version/crds.yaml"
  if is_built "$out/controller" && is_built "$out/webhook" && is_built "$out/cainjector"; then
    log "cert-manager $version: cached"
  else
    log "building cert-manager $version controller, webhook and cainjector (~15 min with a cold Go cache)"
    timed "cert-manager $version" build_cert_manager_in "$src" "$out"
  fi
  if [[ ! -f "$crds" ]]; then
    local moddir f
    moddir="$(cd "$src" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
    mkdir -p "$(dirname "$crds")"
    : > "$crds.tmp"
    for f in "$moddir"/deploy/crds/*.yaml; do
      { echo "---"; cat "$f"; } >> "$crds.tmp"
    done
    mv -f "$crds.tmp" "$crds"
    log "cert-manager CRDs copied to $crds"
  fi
}

build_cert_manager_in() {
  # Stamped as cert-manager's Makefile does: its user agent (and so its field managers) names it.
  local version
  version="$(cd "$1" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)"
  local ldflags="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version"
  build_binary "$1" ./controller "$2/controller" -ldflags "$ldflags"
  build_binary "$1" ./webhook "$2/webhook" -ldflags "$ldflags"
  build_binary "$1" ./cainjector "$2/cainjector" -ldflags "$ldflags"
}

# ---------------------------------------------------------------- sample-controller
# The Go peer for side-by-side tests and benchmarks. Not on the proxy's version list and
# not in the checksum database: exact version, GONOSUMDB.
build_sample_controller() {
  local out="$BIN/sample-controller-$SAMPLE_CONTROLLER_VERSION/sample-controller"
  local dir="$SRC/sample-controller-$SAMPLE_CONTROLLER_VERSION"
  local dest="$SHARE/sample-controller-$SAMPLE_CONTROLLER_VERSION"
  export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io/sample-controller"
  if is_built "$out"; then
    log "sample-controller $SAMPLE_CONTROLLER_VERSION: cached"
  else
    log "building sample-controller $SAMPLE_CONTROLLER_VERSION (~1 min with a cold Go cache)"
    timed "sample-controller $SAMPLE_CONTROLLER_VERSION" build_sample_controller_in "$dir" "$out"
  fi
  if [[ ! -f "$dest/crd-status-subresource.yaml" ]]; then
    local moddir
    moddir="$(cd "$dir" && go list -m -f '{{.Dir}}' k8s.io/sample-controller)"
    mkdir -p "$dest"
    install -m 0644 "$moddir/artifacts/examples/crd-status-subresource.yaml" "$dest/"
    log "sample-controller CRD copied to $dest/crd-status-subresource.yaml"
  fi
}

build_sample_controller_in() {
  init_wrapper "$1" "k8s.io/sample-controller@$SAMPLE_CONTROLLER_VERSION" k8s.io/sample-controller
  build_binary "$1" k8s.io/sample-controller "$2" -ldflags "-s -w"
}

# ---------------------------------------------------------------- programs of this repository
# Go programs kept in hack/<name>, built from this repository (go.mod pins apimachinery and
# client-go to the plane's version, go.sum is committed); the directory name carries a hash of the
# sources, so an edit rebuilds it and hack/plane/binaries.py (repo_program) finds the build that
# matches the checkout. Seconds each once the plane's build has filled the Go module cache.
#   selector-oracle  k8s.io/apimachinery's own label and field selector parsers behind a
#                    JSON-lines pipe, for the differential test of insights' parser
#   list-rules       client-go's raw lists, pager and informers checking every list rule
#                    through kube-apiserver, kube-apiserver's own answer beside insights'
#                    (tests/e2e/test_client_go_lists.py)
build_repo_program() {
  local name="$1" src="$HACK_DIR/$1" hash out want default_version
  hash="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-12)"
  out="$BIN/$name-$hash/$name"
  # Pinned to the default version's apimachinery; the matrix's other versions do not move it.
  default_version="$(sed -n 's/^K8S_VERSION=//p' "$HACK_DIR/versions.env")"
  want="k8s.io/apimachinery v0.${default_version#v1.}"
  grep -q "$want\$" "$src/go.mod" \
    || log "note: hack/$name/go.mod does not require $want (K8S_VERSION=$default_version in versions.env)"
  if is_built "$out"; then log "$name: cached"; return; fi
  log "building $name (seconds once its modules are in the Go module cache)"
  timed "$name" build_binary "$src" . "$out" -ldflags "-s -w"
}

# ---------------------------------------------------------------- coredns
# Cluster DNS for the real node's pods (hack/plane/node.py runs it on the host). Not `go install
# .../coredns`: that links every plugin CoreDNS ships (forward, etcd, route53, ...). A main
# package of our own imports only the plugins cluster DNS needs and sets their order, as
# CoreDNS's own plugin.cfg would (its order is the chain's: bind, ready, errors, log, cache,
# kubernetes); without `forward` no query can leave the machine.
COREDNS_PLUGINS=(bind ready errors log cache kubernetes)

build_coredns() {
  local out="$BIN/coredns-$COREDNS_VERSION/coredns"
  if is_built "$out"; then log "coredns $COREDNS_VERSION: cached"; return; fi
  log "building coredns $COREDNS_VERSION with ${COREDNS_PLUGINS[*]} (~2 min with a cold Go cache)"
  timed "coredns $COREDNS_VERSION" build_coredns_in "$SRC/coredns-$COREDNS_VERSION" "$out"
}

build_coredns_in() {
  local dir="$1" out="$2" want plugin
  want="github.com/coredns/coredns@$COREDNS_VERSION ${COREDNS_PLUGINS[*]}"
  if [[ ! -f "$dir/.tidy-done" || "$(cat "$dir/.tidy-done")" != "$want" ]]; then
    rm -rf "$dir" && mkdir -p "$dir"
    {
      echo '// Command coredns: CoreDNS with only the plugins cluster DNS needs (hack/build.sh).'
      echo 'package main'
      echo
      echo 'import ('
      echo '	"github.com/coredns/coredns/core/dnsserver"'
      echo '	"github.com/coredns/coredns/coremain"'
      for plugin in "${COREDNS_PLUGINS[@]}"; do echo "	_ \"github.com/coredns/coredns/plugin/$plugin\""; done
      echo ')'
      echo
      echo 'func init() {'
      printf '	if err := dnsserver.SetDirectives([]string{'
      printf '"%s", ' "${COREDNS_PLUGINS[@]}"
      echo '}); err != nil {'
      echo '		panic(err)'
      echo '	}'
      echo '}'
      echo
      echo 'func main() { coremain.Run() }'
    } > "$dir/main.go"
    (cd "$dir" && gofmt -w main.go && go mod init foo-operator.local/wrapper/coredns >/dev/null 2>&1 \
      && go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION" && go mod tidy)
    printf '%s' "$want" > "$dir/.tidy-done"
  fi
  build_binary "$dir" . "$out" -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
}

# ---------------------------------------------------------------- pause image
# The sandbox image every pod starts from, made here because nothing may be pulled:
# build/pause/linux/pause.c ships in the k8s.io/kubernetes module; compiled static (as its
# Makefile does) and packaged from scratch with buildah into an OCI archive that hack/plane/node.py
# imports into containerd under the name the kubelet and containerd expect.
PAUSE_VERSION=3.10.1  # build/pause/Makefile's TAG for v1.34; kubeadm's PauseVersion

buildah_storage() {
  # Storage of our own in the cache, not the machine's /var/lib/containers.
  printf '%s' "--root=$CACHE/containers/storage --runroot=$CACHE/containers/run --storage-driver=vfs"
}

build_pause() {
  local out="$SHARE/pause-$PAUSE_VERSION/pause.oci.tar"
  # Not is_built: an archive is no executable.
  if ! $FORCE && [[ -f "$out" ]]; then log "pause image $PAUSE_VERSION: cached"; return; fi
  command -v gcc >/dev/null || die "gcc is missing: run hack/install-node-deps.sh"
  command -v buildah >/dev/null || die "buildah is missing: run hack/install-node-deps.sh"
  log "building the pause image $PAUSE_VERSION (gcc -static, buildah; seconds)"
  timed "pause image $PAUSE_VERSION" build_pause_in "$out"
}

build_pause_in() {
  local out="$1" moddir work ctr epoch
  moddir="$(cd "$(k8s_wrapper_dir)" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  work="$(mktemp -d "$CACHE/pause.XXXXXX")"
  gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-foo-operator" \
    -o "$work/pause" "$moddir/build/pause/linux/pause.c"
  strip "$work/pause"
  # The module's release time: the same inputs give the same image digest.
  epoch="$(date -d "$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(open(json.load(sys.stdin)["Info"]))["Time"])')" +%s)"
  # shellcheck disable=SC2046
  ctr="$(buildah $(buildah_storage) from scratch)"
  # shellcheck disable=SC2046
  {
    buildah $(buildah_storage) copy --chmod 0755 "$ctr" "$work/pause" /pause >/dev/null
    buildah $(buildah_storage) config --entrypoint '["/pause"]' --user 65535:65535 \
      --label "org.opencontainers.image.version=$PAUSE_VERSION" \
      --label "org.opencontainers.image.source=https://github.com/kubernetes/kubernetes/tree/$K8S_VERSION/build/pause" \
      "$ctr"
    mkdir -p "$(dirname "$out")"
    rm -f "$out.tmp"
    buildah $(buildah_storage) commit --quiet --timestamp "$epoch" --rm "$ctr" \
      "oci-archive:$out.tmp:registry.k8s.io/pause:$PAUSE_VERSION" >/dev/null
  } || { buildah $(buildah_storage) rm "$ctr" >/dev/null 2>&1; rm -rf "$work"; return 1; }
  rm -rf "$work"
  mv -f "$out.tmp" "$out"
}

build_node() {
  build_kubernetes kubelet kube-proxy
  build_pause
  build_coredns
}

# ---------------------------------------------------------------- release tools
# One command from one Go module, stamped with its version: $1 name, $2 version, $3 module,
# $4 package, $5 how long a cold build takes, $6 ldflags.
build_go_tool() {
  local name="$1" version="$2" module="$3" package="$4" took="$5" ldflags="$6"
  local out="$BIN/$name-$version/$name"
  if is_built "$out"; then log "$name $version: cached"; return; fi
  log "building $name $version ($took)"
  timed "$name $version" build_go_tool_in "$SRC/$name-$version" "$module@$version" "$package" "$out" "$ldflags"
}

build_go_tool_in() {
  init_wrapper "$1" "$2" "$3"
  build_binary "$1" "$3" "$4" -ldflags "$5"
}

# cosign signs the release's image and chart with a key pair and verifies them (sigstore's own
# client; notation's module is refused by the Go module proxy). v2: the key-pair flags docs/install.md
# shows (`--insecure-ignore-tlog`) are v2's. Stamped as its Makefile does, so `cosign version`
# names the release. Its dependency tree is large (cloud KMS clients): 2022 s wall here, on 2
# cores shared with the plane's build; more than every other tool of the release together.
build_cosign() {
  build_go_tool cosign "$COSIGN_VERSION" github.com/sigstore/cosign/v2 github.com/sigstore/cosign/v2/cmd/cosign \
    "long: ~10-30 min with a cold Go cache" \
    "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
}

# actionlint checks .github/workflows in `make lint` (38 s cold here).
build_actionlint() {
  build_go_tool actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint github.com/rhysd/actionlint/cmd/actionlint \
    "~40 s with a cold Go cache" "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION"
}

# krew, kubectl's plugin manager: the release e2e installs the release's plugin with it
# (`kubectl krew install --manifest --archive`), as docs/install.md tells users to.
build_krew() {
  build_go_tool krew "$KREW_VERSION" sigs.k8s.io/krew sigs.k8s.io/krew/cmd/krew \
    "~1-2 min with a cold Go cache" "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION"
}

# ---------------------------------------------------------------- helm 4 and the GitOps tools' CRDs
# Helm 4 beside the plane's Helm 3 (a binary of its own name: helm-v4.x.y/helm). Its default
# Kubernetes version for `helm template` comes from the client-go it is built with, read at run
# time, so only its own version is stamped. Built at the lowest CPU and I/O priority: the tests
# that need it start it and wait, while the rest of the machine keeps its cores.
build_helm4() {
  build_go_tool helm "$HELM4_VERSION" helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm \
    "minutes with a cold Go cache: 930 s at the lowest priority beside the plane's build here" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
}

# The CRDs docs/gitops.md's examples are objects of, one YAML stream: Argo CD's Application (and
# AppProject), Flux's HelmRelease and OCIRepository. Downloaded with their Go modules (`go mod
# download`: the proxy's zip, checked against go.sum's database), nothing compiled.
build_gitops_crds() {
  local out="$SHARE/gitops-crds-$ARGOCD_VERSION-$FLUX_HELM_CONTROLLER_VERSION-$FLUX_SOURCE_CONTROLLER_VERSION/crds.yaml"
  if ! $FORCE && [[ -f "$out" ]]; then log "GitOps CRDs: cached"; return; fi
  log "copying Argo CD $ARGOCD_VERSION and Flux (helm-controller $FLUX_HELM_CONTROLLER_VERSION, source-controller $FLUX_SOURCE_CONTROLLER_VERSION) CRDs from their modules"
  timed "GitOps CRDs" build_gitops_crds_in "$out"
}

build_gitops_crds_in() {
  local out="$1" argocd helm_controller source_controller f
  argocd="$(module_dir github.com/argoproj/argo-cd/v3 "$ARGOCD_VERSION")"
  helm_controller="$(module_dir github.com/fluxcd/helm-controller "$FLUX_HELM_CONTROLLER_VERSION")"
  source_controller="$(module_dir github.com/fluxcd/source-controller "$FLUX_SOURCE_CONTROLLER_VERSION")"
  mkdir -p "$(dirname "$out")"
  : > "$out.tmp"
  for f in "$argocd/manifests/crds/application-crd.yaml" "$argocd/manifests/crds/appproject-crd.yaml" \
    "$helm_controller/config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml" \
    "$source_controller/config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml"; do
    [[ -f "$f" ]] || die "$f is not in its module"
    { echo "---"; cat "$f"; } >> "$out.tmp"
  done
  mv -f "$out.tmp" "$out"
}

# The directory `go mod download` unpacked module $1 at version $2 into.
module_dir() {
  local dir
  dir="$(cd "$SRC" && go mod download -json "$1@$2" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or "error: " + " ".join(d.get("Error", "?").split()))')"
  [[ "$dir" != error:* ]] || die "cannot download $1@$2: ${dir#error: }"
  printf '%s' "$dir"
}

# ---------------------------------------------------------------- sigstore policy-controller's tester
# policy-controller's cmd/tester evaluates a ClusterImagePolicy on one image with the admission
# webhook's own code (pkg/policy, pkg/webhook): what docs/policies/ gives users is checked by the
# engine that enforces it, not by our reading of its docs. Its go.mod's replace lines are copied
# into the wrapper (a dependency's are ignored): glog's fork keeps glog and klog from both
# registering -log_dir (a panic at start), and knative needs the older kube-openapi. Its tree is
# cosign's (v2.5, with the cloud KMS clients) plus knative, client-go, OPA and CUE: 849 s wall
# with an empty Go build cache (modules downloaded in the first ~60 s), at the lowest priority on
# 2 cores whose load average was 6 to 11 (other builds and an e2e run).
build_policy_tester() {
  local replaces="-replace=github.com/golang/glog=github.com/jdolitsky/glog@v0.0.0-20220729172235-78744e90d087"
  replaces+=" -replace=k8s.io/code-generator=k8s.io/code-generator@v0.29.4"
  replaces+=" -replace=k8s.io/kube-openapi=k8s.io/kube-openapi@v0.0.0-20231010175941-2dd684a91f00"
  WRAPPER_EDIT="go mod edit $replaces" \
    build_go_tool policy-tester "$POLICY_CONTROLLER_VERSION" github.com/sigstore/policy-controller \
    github.com/sigstore/policy-controller/cmd/tester "~15 min with a cold Go cache" \
    "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$POLICY_CONTROLLER_VERSION -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
}

# ---------------------------------------------------------------- main
# For tools only a few tests use, built while the tests run: the rest of the machine keeps its cores.
lowest_priority() {
  renice -n 19 -p $$ >/dev/null
  ionice -c 3 -p $$ 2>/dev/null || true
}

total_start=$SECONDS
log "cache: $CACHE"
if $want_policy_tester; then
  lowest_priority
  build_policy_tester
  log "policy-controller's tester ready in $((SECONDS - total_start))s under $CACHE"
  exit 0
fi
if $gitops_only; then
  if $want_gitops_crds; then build_gitops_crds; fi
  if $want_helm4; then
    lowest_priority
    build_helm4
  fi
  log "GitOps tools ready in $((SECONDS - total_start))s under $CACHE"
  exit 0
fi
if $tools_only; then
  if $want_helm_only; then build_helm; fi
  if $want_cosign; then build_cosign; fi
  if $want_actionlint; then build_actionlint; fi
  if $want_krew; then build_krew; fi
  log "release tools ready in $((SECONDS - total_start))s; binaries under $BIN"
  exit 0
fi
build_etcd
build_kwok
build_helm
build_repo_program selector-oracle
build_repo_program list-rules
build_promtool
# Another version of the matrix, alone: only its Kubernetes binaries are its own, so they are
# built under a lock of their own and the shared one is let go. `make test` builds the matrix in
# the background while the e2e tier runs (hack/test.sh), and the tier's own build.sh calls
# (sample-controller, cert-manager) must not wait ~10 min for it.
if [[ "$K8S_VERSION" != "$(sed -n 's/^K8S_VERSION=//p' "$HACK_DIR/versions.env")" ]] \
  && ! { $want_sample_controller || $want_node || $want_cert_manager || $want_prometheus; }; then
  flock -u 9
  exec 8>"$CACHE/.build-kubernetes-$K8S_VERSION.lock"
  if ! flock -n 8; then
    log "another build.sh builds Kubernetes $K8S_VERSION; waiting for it"
    flock 8
  fi
fi
build_kubernetes
if $want_sample_controller; then build_sample_controller; fi
if $want_node; then build_node; fi
if $want_cert_manager; then build_cert_manager; fi
if $want_prometheus; then build_prometheus; fi
log "ready in $((SECONDS - total_start))s; binaries under $BIN"
