#!/usr/bin/env bash
# Installs the Debian packages a real node and the image build need, when any is missing:
#   containerd, runc, CNI plugins (bridge, host-local, loopback in /usr/lib/cni), buildah,
#   mmdebstrap (the image's rootfs), iptables and conntrack (kube-proxy), gcc + libc6-dev
#   (the static pause binary); docker-registry (CNCF distribution's registry: the release e2e's
#   loopback registry) and skopeo (copies the release's OCI archive into it).
# Idempotent and quiet when everything is there. Needs root (it is the only thing that does
# apt-get); prints one line and exits 1 otherwise.
#
# Debian's containerd package enables a systemd unit; this machine's PID 1 is not systemd, so
# nothing starts on its own. Where systemd runs it, hack/plane/node.py still starts its own containerd
# with its own config, socket and state under the node's work dir, never the system's.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins buildah mmdebstrap iptables conntrack gcc libc6-dev
  docker-registry skopeo)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "==> node packages: all present (${PACKAGES[*]})"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-node-deps.sh: missing ${missing[*]}; run as root to apt-get install them" >&2
  exit 1
fi
echo "==> installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d: no maintainer script may start a daemon (containerd) on the machine.
policy=/usr/sbin/policy-rc.d
made_policy=false
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=true
fi
trap '$made_policy && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "==> installed ${missing[*]}"
