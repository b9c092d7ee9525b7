#!/usr/bin/env bash
# `make test`, the one test command, as its stages: build what the tests stand on, lint, the unit
# and component tests, the e2e tests, then the e2e smoke set on each other Kubernetes version of
# the matrix (K8S_SMOKE_VERSIONS). Each stage prints its time (hack/timed.sh).
#
# The matrix's Kubernetes builds are CPU-bound (~18 min on 2 cores with a cold Go cache) and the
# e2e tier is not: it mostly waits on kube-apiserver, the kubelet and helm. So once the default
# plane and node are built, the matrix builds start in the background at the lowest CPU and I/O
# priority, and each version's smoke stage first waits for what is left of its build. A failed
# stage stops them (they are cached as far as they got). Helm 4 and the GitOps tools' CRDs, which
# a few e2e modules use, and policy-controller's tester (the release e2e), are built the same way
# from then on; those modules' own `hack/build.sh helm4` (`policy-tester`) waits on its lock for
# what is left.
#
# Called by the Makefile, which sets PY (the virtualenv's python), TEST_SEED and MAKE.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PY:?PY: the virtualenv python (run make test)}" "${TEST_SEED:?TEST_SEED: run make test}"
MAKE="${MAKE:-make}"
read -r -a matrix <<<"${K8S_SMOKE_VERSIONS-$(sed -n 's/^K8S_SMOKE_VERSIONS=//p' hack/versions.env)}"
shuffle=(-p randomly "--randomly-seed=$TEST_SEED")

MATRIX_BUILDS="$(mktemp -d "${TMPDIR:-/tmp}/foo-operator-matrix.XXXXXX")"
export MATRIX_BUILDS
builder=""
gitops_builder=""
policy_builder=""
stop_builds() {
  if [[ -n "$builder" ]]; then kill -- "-$builder" 2>/dev/null || true; fi
  if [[ -n "$gitops_builder" ]]; then kill -- "-$gitops_builder" 2>/dev/null || true; fi
  if [[ -n "$policy_builder" ]]; then kill -- "-$policy_builder" 2>/dev/null || true; fi
  rm -rf "$MATRIX_BUILDS"
}
trap stop_builds EXIT
trap 'exit 130' INT TERM

# One version's build, in the background: its log and, once done, its exit status and seconds.
build_matrix() {
  local version began
  for version in "$@"; do
    began=$SECONDS
    K8S_VERSION="$version" nice -n 19 ionice -c 3 bash hack/build.sh >"$MATRIX_BUILDS/$version.log" 2>&1
    printf '%s %s\n' "$?" "$((SECONDS - began))" >"$MATRIX_BUILDS/$version.done.tmp"
    mv "$MATRIX_BUILDS/$version.done.tmp" "$MATRIX_BUILDS/$version.done"
  done
}

# Wait for one version's background build; print its log; fail as it failed.
matrix_built() {
  local version="$1" status seconds
  until [[ -f "$MATRIX_BUILDS/$version.done" ]]; do sleep 2; done
  cat "$MATRIX_BUILDS/$version.log"
  read -r status seconds <"$MATRIX_BUILDS/$version.done"
  printf '==> built in the background in %ss; waited for what was left of it\n' "$seconds"
  return "$status"
}
export -f matrix_built

hack/timed.sh "install (virtualenv)" "$MAKE" --no-print-directory venv
hack/timed.sh "build (control plane from Go modules)" "$MAKE" --no-print-directory build-plane
hack/timed.sh "build (real node: Debian packages, kubelet, kube-proxy, pause, CoreDNS, image, cert-manager, cosign, krew)" \
  "$MAKE" --no-print-directory build-node
# hack/build.sh helm4 lowers its own priority (nice 19, ionice idle); gitops-crds only downloads.
setsid nice -n 19 ionice -c 3 bash hack/build.sh gitops-crds helm4 >"$MATRIX_BUILDS/gitops.log" 2>&1 &
gitops_builder=$!
# policy-controller's tester (the release e2e's admission policy check) likewise, beside it: the
# release module waits on its lock for what is left, holding the real node, so it starts now.
setsid nice -n 19 ionice -c 3 bash hack/build.sh policy-tester >"$MATRIX_BUILDS/policy-tester.log" 2>&1 &
policy_builder=$!
if [[ ${#matrix[@]} -gt 0 ]]; then
  # setsid: a process group of its own, so that stopping it stops go and its compilers too.
  setsid bash -c "$(declare -f build_matrix); build_matrix \"\$@\"" build_matrix "${matrix[@]}" &
  builder=$!
  printf '\n==> [%s] building Kubernetes %s in the background (logs: %s)\n' \
    "$(date -u +%H:%M:%S)" "${matrix[*]}" "$MATRIX_BUILDS"
fi
hack/timed.sh "lint (style, layers, types)" "$MAKE" --no-print-directory lint
hack/timed.sh "tests (unit, component; shuffled, TEST_SEED=$TEST_SEED)" \
  "$PY" -m pytest -q "${shuffle[@]}" tests/unit tests/component
hack/timed.sh "tests (e2e; shuffled, TEST_SEED=$TEST_SEED)" "$PY" -m pytest -q "${shuffle[@]}" tests/e2e
for version in "${matrix[@]}"; do
  hack/timed.sh "build (Kubernetes $version)" bash -c 'matrix_built "$1"' matrix_built "$version"
  hack/timed.sh "e2e smoke set (Kubernetes $version)" \
    env K8S_VERSION="$version" "$PY" -m pytest -q "${shuffle[@]}" -m smoke tests/e2e
done
