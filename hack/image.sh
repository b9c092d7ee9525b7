#!/usr/bin/env bash
# Builds the product image without Docker or any container registry:
#   rootfs   mmdebstrap (Debian's python3 and the libraries it links, nothing installed, no
#            maintainer scripts), then stripped: no shell, no pip, no compiler, no package tools
#   product  the project's wheels (pip wheel from PyPI + this checkout), unpacked into Debian's
#            dist-packages; console scripts in /usr/local/bin
#   bytecode compiled at build time by the image's own python (unchecked-hash .pyc: valid on a
#            read-only root filesystem, independent of file mtimes)
#   image    buildah from scratch + that rootfs as one layer, user 65532, OCI labels,
#            timestamps clamped to SOURCE_DATE_EPOCH (default: the last commit's time)
#   SBOM     CycloneDX JSON of every Debian package and Python distribution left in the rootfs
#            (hack/release/sbom.py, from the .debs mmdebstrap unpacked and the dist-info dirs)
# Output (outside the repo): $FOO_OPERATOR_CACHE/share/image/foo-operator-<hash>.oci.tar, its
# SBOM foo-operator-<hash>.cdx.json, and image.json beside them ({"ref", "archive", "sbom",
# "digest", "version", "size_bytes", "rootfs_bytes"}) for hack/plane/node.py and hack/release/pipeline.py.
# The hash covers the product's sources, pyproject.toml and the scripts: an unchanged checkout
# is a cache hit in a second.
#
# Usage: hack/image.sh [--force]
# Environment: FOO_OPERATOR_CACHE, PYTHON (a python with pip; default .venv/bin/python),
#              SOURCE_DATE_EPOCH, DEBIAN_SUITE (default bookworm)
#              IMAGE_SOURCE_DIR (default this checkout: where the sources are; hack/release/pipeline.py
#                builds a past release from that commit's tree with today's script),
#              IMAGE_OUT_DIR (default the cache's share/image), IMAGE_REVISION (the commit)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HACK_DIR/.." && pwd)"
CACHE="${FOO_OPERATOR_CACHE:-$HOME/.cache/foo-operator}"
SRC_DIR="$(cd "${IMAGE_SOURCE_DIR:-$REPO}" && pwd)"
OUT_DIR="${IMAGE_OUT_DIR:-$CACHE/share/image}"
# Builds kept in the cache: this one and the two before it (see the clean-up at the end).
KEEP_BUILDS=3
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
SUITE="${DEBIAN_SUITE:-bookworm}"
# Every package pyproject.toml ships (a past release may lack the newer ones: kubectl_foo, apimachinery,
# serving, componentbase).
PACKAGES=()
for pkg in apimachinery componentbase fooapi kube serving webhook insights controller certs kubectl_foo; do
  [[ -d "$SRC_DIR/$pkg" ]] && PACKAGES+=("$pkg")
done

log() { printf '==> %s\n' "$*"; }
die() { printf 'image.sh: error: %s\n' "$*" >&2; exit 1; }

FORCE=false
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=true ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$arg'" ;;
  esac
done

[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap into a directory, chroot for the bytecode)"
"$HACK_DIR/install-node-deps.sh"
[[ -x "$PYTHON" ]] || die "$PYTHON not found: run \`make venv\` (or set PYTHON)"

# What the image is made of; any change makes a new image.
version="$(cd "$SRC_DIR" && "$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')"
hash="$(cd "$SRC_DIR" && { find "${PACKAGES[@]}" -name '*.py' -o -name '*.yaml' -o -name '*.typed' | LC_ALL=C sort \
  | xargs sha256sum; sha256sum pyproject.toml; cd "$REPO" && sha256sum hack/image.sh hack/release/sbom.py; echo "$SUITE"; } \
  | sha256sum | cut -c1-12)"
archive="$OUT_DIR/foo-operator-$hash.oci.tar"
sbom="$OUT_DIR/foo-operator-$hash.cdx.json"
ref="localhost/foo-operator:$version-$hash"
if [[ -n "${IMAGE_REVISION:-}" ]]; then
  revision="$IMAGE_REVISION" dirty=""
else
  revision="$(git -C "$SRC_DIR" rev-parse HEAD 2>/dev/null || echo unknown)"
  if [[ -z "$(git -C "$SRC_DIR" status --porcelain -- "${PACKAGES[@]}" pyproject.toml 2>/dev/null)" ]]; then
    dirty=""
  else
    dirty="-dirty"
  fi
fi
: "${SOURCE_DATE_EPOCH:=$(git -C "$SRC_DIR" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH

write_meta() {
  local rootfs_bytes="$1"
  python3 - "$OUT_DIR/image.json" "$ref" "$archive" "$rootfs_bytes" "$sbom" "$version" <<'EOF'
import json, os, sys, tarfile
path, ref, archive, rootfs, sbom, version = sys.argv[1:]
# The manifest's digest: what a registry names the image by, and what cosign signs.
with tarfile.open(archive) as tar:
    digest = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]
json.dump({"ref": ref, "archive": archive, "sbom": sbom, "digest": digest, "version": version,
           "size_bytes": os.path.getsize(archive), "rootfs_bytes": int(rootfs)},
          open(path + ".tmp", "w"), indent=1)
os.replace(path + ".tmp", path)
EOF
}

if ! $FORCE && [[ -f "$archive" && -f "$sbom" ]]; then
  log "image $ref: cached ($archive)"
  [[ -f "$OUT_DIR/image.json" ]] && grep -q "$hash.cdx" "$OUT_DIR/image.json" || write_meta 0
  exit 0
fi

began=$SECONDS
mkdir -p "$OUT_DIR"
work="$(mktemp -d "$CACHE/image.XXXXXX")"
ctr=""
storage=(--root="$CACHE/containers/storage" --runroot="$CACHE/containers/run" --storage-driver=vfs)
cleanup() {
  [[ -n "$ctr" ]] && buildah "${storage[@]}" rm "$ctr" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# ------------------------------------------------------------------ wheels
# From a copy of the product's sources only (no tests, no hack/), so setuptools writes its
# build/ and egg-info there, not into the checkout.
log "wheels: the project and its dependencies (pip wheel)"
mkdir -p "$work/src" "$work/wheels"
(cd "$SRC_DIR" && cp -r pyproject.toml README.md "${PACKAGES[@]}" "$work/src/")
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" "$work/src[fast]"
ls "$work/wheels"

# ------------------------------------------------------------------ rootfs
# --variant=extract: the listed packages and their dependencies are unpacked, nothing is
# configured and no maintainer script runs. Sources: the machine's own apt sources.
log "rootfs: mmdebstrap $SUITE python3 (extract)"
rootfs="$work/rootfs"
sources=/etc/apt/sources.list.d/debian.sources
[[ -f "$sources" ]] || sources=/etc/apt/sources.list
# The extract variant keeps no dpkg database: the .deb files it unpacked are what the SBOM reads.
mkdir -p "$work/debs"
mmdebstrap --quiet --variant=extract --include=python3,netbase --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --extract-hook="cp \"\$1\"/var/cache/apt/archives/*.deb $work/debs/" \
  "$SUITE" "$rootfs" "$sources"

# ------------------------------------------------------------------ the product
log "product: wheels into /usr/lib/python3/dist-packages"
site="$rootfs/usr/lib/python3/dist-packages"
mkdir -p "$site" "$rootfs/usr/local/bin"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
  --target "$site" "$work/wheels"/*.whl
# pip wrote the console scripts for the build's python; in the image it is /usr/bin/python3.
for script in "$site/bin"/*; do
  sed '1s|^#!.*|#!/usr/bin/python3|' "$script" > "$rootfs/usr/local/bin/$(basename "$script")"
  chmod 0755 "$rootfs/usr/local/bin/$(basename "$script")"
done
rm -rf "$site/bin"
# pip records where each wheel came from (this build's temp dir) in direct_url.json, and its
# hash in RECORD: the one thing that made two builds of the same inputs differ.
find "$site" -name direct_url.json -path '*.dist-info/*' -delete
find "$site" -name RECORD -path '*.dist-info/*' -exec sed -i '/direct_url\.json,/d' {} +

# ------------------------------------------------------------------ strip
log "strip: shells, package tools, docs, the parts of the stdlib nobody imports"
# Keep only python3 among the executables: no sh, no dpkg, no perl.
find "$rootfs/bin" "$rootfs/sbin" "$rootfs/usr/bin" "$rootfs/usr/sbin" -mindepth 1 \
  ! -name 'python3' ! -name 'python3.11' -exec rm -rf {} + 2>/dev/null || true
rm -rf "$rootfs"/usr/share/{doc,man,info,locale,lintian,bash-completion,perl5,debconf,bug,menu} \
  "$rootfs"/usr/lib/x86_64-linux-gnu/{perl-base,perl,gconv} "$rootfs"/usr/share/perl* \
  "$rootfs"/usr/lib/python3.11/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3,pydoc_data} \
  "$rootfs"/var/cache/* "$rootfs"/var/lib/apt "$rootfs"/var/log/* "$rootfs"/etc/apt \
  "$rootfs"/usr/lib/apt "$rootfs"/usr/lib/dpkg "$rootfs"/var/lib/dpkg
# Device nodes mmdebstrap made: the runtime mounts /dev of its own.
rm -rf "$rootfs"/dev/*
find "$rootfs" -name __pycache__ -prune -exec rm -rf {} +
# Wheels' extension modules keep their symbols (uvloop's alone: 13.6 MB, 1.6 MB stripped), and
# Cython/C sources and stubs ride along; none of it runs.
find "$site" -name '*.so' -exec strip --strip-unneeded {} +
find "$site" \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.pyi' -o -name '*.c' -o -name '*.h' \) -delete
# A user for 65532 (as in distroless: nonroot), and a world-writable /tmp for an emptyDir-less run.
cat > "$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin
EOF
cat > "$rootfs/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
mkdir -p "$rootfs/home/nonroot" "$rootfs/tmp"
chown 65532:65532 "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"

# ------------------------------------------------------------------ bytecode
# By the image's python (its magic number), unchecked-hash: never rewritten or re-checked at
# import, so a read-only root filesystem costs nothing at start.
log "bytecode: compileall in the rootfs (the image's own python)"
chroot "$rootfs" /usr/bin/python3 -m compileall -q --invalidation-mode unchecked-hash \
  /usr/lib/python3.11 /usr/lib/python3/dist-packages >/dev/null
imports="insights.__main__, controller.__main__, certs.__main__, uvloop"
# The webhook's command: webhook.command from 0.2.0 on, whose __main__ would start the webhook when
# imported; a past release's (`make release` of an older tag) is still webhook.__main__.
if [[ -f "$SRC_DIR/webhook/command.py" ]]; then imports+=", webhook.command"; else imports+=", webhook.__main__"; fi
[[ -d "$SRC_DIR/kubectl_foo" ]] && imports+=", kubectl_foo.__main__"
chroot "$rootfs" /usr/bin/python3 -c "import $imports"

log "SBOM: hack/release/sbom.py (the unpacked .debs + dist-info)"
(cd "$REPO" && "$PYTHON" -m hack.release.sbom "$rootfs" "$work/debs" "$sbom.tmp" --version "$version")
mv -f "$sbom.tmp" "$sbom"

find "$rootfs" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
rootfs_bytes="$(du -sb "$rootfs" | cut -f1)"
tar --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --xattrs \
  -C "$rootfs" -cf "$work/rootfs.tar" .

# ------------------------------------------------------------------ image
log "image: buildah from scratch → $ref"
ctr="$(buildah "${storage[@]}" from scratch)"
buildah "${storage[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
buildah "${storage[@]}" config \
  --user 65532:65532 --workingdir /home/nonroot \
  --env PATH=/usr/local/bin:/usr/bin --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
  --entrypoint '["foo-operator-webhook"]' \
  --label "org.opencontainers.image.title=foo-operator" \
  --label "org.opencontainers.image.description=Admission, conversion and aggregated-API webhooks and the controller for samplecontroller.k8s.io Foos" \
  --label "org.opencontainers.image.source=https://github.com/foo-operator/foo-operator" \
  --label "org.opencontainers.image.revision=$revision$dirty" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  --label "org.opencontainers.image.base.name=debian:$SUITE (mmdebstrap, python3)" \
  "$ctr"
rm -f "$archive.tmp"
buildah "${storage[@]}" commit --quiet --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" \
  "oci-archive:$archive.tmp:$ref" >/dev/null
ctr=""
# buildah stamps the archive's own tar headers with the time it writes them: the same image
# (same digest) came out as a different file each build, and so a different SHA256SUMS line.
# Packed again from its OCI layout, sorted, with the commit's time: one commit, one file.
layout="$work/oci-layout"
mkdir -p "$layout"
tar -xf "$archive.tmp" -C "$layout"
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" --format=gnu \
  -C "$layout" -cf "$archive.tmp" blobs index.json oci-layout
rm -rf "$layout"
mv -f "$archive.tmp" "$archive"
write_meta "$rootfs_bytes"
# Older builds (130 MB each) go, but not the newest few: another checkout sharing this cache may
# be loading its own build into a node right now (deleting all but ours failed its test).
for pattern in 'foo-operator-*.oci.tar' 'foo-operator-*.cdx.json'; do
  find "$OUT_DIR" -maxdepth 1 -name "$pattern" -printf '%T@ %p\n' | sort -rn | tail -n +$((KEEP_BUILDS + 1)) \
    | cut -d' ' -f2- | xargs -r rm -f --
done
took=$((SECONDS - began))
size_mb="$(( $(stat -c %s "$archive") / 1000000 ))"
log "image $ref: ${size_mb} MB archive (uncompressed layer), $((rootfs_bytes / 1000000)) MB unpacked, in ${took}s"
printf '%s\t%s\t%ss\t%s MB archive, %s MB unpacked\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "image $ref" "$took" "$size_mb" "$((rootfs_bytes / 1000000))" >> "$CACHE/build-times.log"
