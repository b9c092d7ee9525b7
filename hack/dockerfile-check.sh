#!/usr/bin/env bash
# Builds the Dockerfile as a Docker or Podman user would, with buildah and nothing pulled, then
# runs every console script's --version in the image it made.
#   base     the image the Dockerfile's FROM names (python:3.11-slim), made here under that name:
#            an mmdebstrap rootfs of Debian's python3 and pip (minbase: a shell for RUN), pip
#            allowed to install system-wide as in the real python image; kept in buildah's storage
#            in the cache under a hash of its recipe, so a warm run reuses it
#   build    buildah bud --pull=never (chroot isolation, the host's network for pip's downloads
#            from PyPI, as hack/image.sh's wheels come from PyPI)
#   check    `<script> --version` for every [project.scripts] entry prints pyproject's version
# Prints one line per script; exits non-zero on the first failure.
#
# Usage: hack/dockerfile-check.sh   (root, Debian; buildah and mmdebstrap: hack/install-node-deps.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HACK_DIR/.." && pwd)"
CACHE="${FOO_OPERATOR_CACHE:-$HOME/.cache/foo-operator}"
SUITE="${DEBIAN_SUITE:-bookworm}"
BASE_REF="docker.io/library/python:3.11-slim"  # what the Dockerfile's ARG PYTHON_IMAGE defaults to
storage=(--root="$CACHE/containers/storage" --runroot="$CACHE/containers/run" --storage-driver=vfs)

log() { printf '==> %s\n' "$*"; }
die() { printf 'dockerfile-check.sh: error: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap, buildah with chroot isolation)"
"$HACK_DIR/install-node-deps.sh" >/dev/null

version="$(python3 -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$REPO/pyproject.toml")"
# kubectl_complete-* is kubectl's completion endpoint: it takes the words to complete, not --version.
mapfile -t scripts < <(python3 -c 'import tomllib,sys; print("\n".join(s for s in tomllib.load(open(sys.argv[1],"rb"))["project"]["scripts"] if not s.startswith("kubectl_complete-")))' "$REPO/pyproject.toml")

# What the base is made of: a change here makes a new base (the rest of this script does not).
BASE_PACKAGES=python3,python3-pip,ca-certificates
base_hash="$(echo "$SUITE $BASE_PACKAGES minbase no-externally-managed pip-symlink" | sha256sum | cut -c1-12)"
work="$(mktemp -d "$CACHE/dockerfile.XXXXXX")"
ctr=""
cleanup() {
  [[ -n "$ctr" ]] && buildah "${storage[@]}" rm "$ctr" >/dev/null 2>&1
  buildah "${storage[@]}" rmi -f localhost/foo-operator:dockerfile-check >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
began=$SECONDS

# The base stays in buildah's storage in the cache, labelled with the hash it was made for.
have="$(buildah "${storage[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "foo-operator.base-hash"}}' \
  "$BASE_REF" 2>/dev/null || true)"
if [[ "$have" != "$base_hash" ]]; then
  log "base: mmdebstrap $SUITE python3 + pip → $BASE_REF"
  sources=/etc/apt/sources.list.d/debian.sources
  [[ -f "$sources" ]] || sources=/etc/apt/sources.list
  mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    "$SUITE" "$work/rootfs" "$sources"
  # The python image's pip installs system-wide; Debian's refuses without this (PEP 668).
  rm -f "$work"/rootfs/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf pip3 "$work/rootfs/usr/bin/pip"
  tar --numeric-owner -C "$work/rootfs" -cf "$work/rootfs.tar" .
  ctr="$(buildah "${storage[@]}" from scratch)"
  buildah "${storage[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
  buildah "${storage[@]}" config --env PATH=/usr/local/bin:/usr/bin:/bin --cmd '["python3"]' \
    --label "foo-operator.base-hash=$base_hash" "$ctr"
  buildah "${storage[@]}" commit --quiet --rm "$ctr" "$BASE_REF" >/dev/null
  ctr=""
fi
log "base ready in $((SECONDS - began))s"

log "build: buildah bud --pull=never (the Dockerfile as it is)"
# pip in the build trusts what this host trusts (a proxy's or a mirror's CA); nothing is written
# into the image by this.
trust=()
bundle=/etc/ssl/certs/ca-certificates.crt
[[ -f "$bundle" ]] && trust=(--volume "$bundle:$bundle:ro")
buildah "${storage[@]}" bud --quiet --pull=never --isolation=chroot --network=host --layers=false "${trust[@]}" \
  -t localhost/foo-operator:dockerfile-check -f "$REPO/Dockerfile" "$REPO" >/dev/null
log "built in $((SECONDS - began))s"

ctr="$(buildah "${storage[@]}" from --pull=never localhost/foo-operator:dockerfile-check)"
failed=0
for script in "${scripts[@]}"; do
  out="$(buildah "${storage[@]}" run --isolation=chroot "$ctr" -- "$script" --version 2>&1)" || true
  if [[ "$out" == *" $version" ]]; then
    printf '%s --version: %s\n' "$script" "$out"
  else
    printf '%s --version: FAILED: %s\n' "$script" "$out"
    failed=1
  fi
done
user="$(buildah "${storage[@]}" inspect --format '{{.OCIv1.Config.User}}' "$ctr")"
printf 'user: %s\n' "$user"
log "checked in $((SECONDS - began))s"
exit "$failed"
