"""PKI and kubeconfigs for the local control plane, written as files the binaries read.

Two CAs, as in a kubeadm cluster: the cluster CA (signs the apiserver's serving certificate and
every client certificate) and the front-proxy CA (only for the aggregator's client certificate,
so extension apiservers can tell proxied requests from direct ones).
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from certs.authority import KeyPair, generate_private_key, issue_client, issue_serving, new_ca

# The first address of --service-cluster-ip-range: in-cluster clients dial it as `kubernetes`.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"

# Identities the components authenticate as (CN = user, O = groups). The bootstrap RBAC policy
# already grants system:kube-controller-manager and system:kube-scheduler what they need.
COMPONENT_USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    # kwok plays every kubelet at once (node and pod status for all fake nodes); the Node
    # authorizer would only let a kubelet touch its own node, so it gets cluster-admin.
    "kwok": ("kwok-controller", ("system:masters",)),
    # What kube-apiserver shows a real kubelet for logs, exec and port-forward (as in kubeadm).
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
}


@dataclass(frozen=True)
class ClusterPKI:
    dir: Path
    ca: KeyPair
    front_proxy_ca: KeyPair

    # Paths, named after kubeadm's files.
    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.dir / "ca.key"

    @property
    def front_proxy_ca_file(self) -> Path:
        return self.dir / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key_file(self) -> Path:
        return self.dir / "front-proxy-ca.key"

    def cert_file(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key_file(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def sa_key_file(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub_file(self) -> Path:
        return self.dir / "sa.pub"


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _write_pair(pki_dir: Path, name: str, pair: KeyPair) -> None:
    _write(pki_dir / f"{name}.crt", pair.cert_pem)
    _write(pki_dir / f"{name}.key", pair.key_pem, private=True)


def write_pki(pki_dir: Path, *, address: str = "127.0.0.1") -> ClusterPKI:
    """Generate all certificates and keys of the plane into `pki_dir` (fresh every start).

    `address`: where kube-apiserver serves (loopback, or a bridge pods reach); its certificate
    names it beside loopback and the `kubernetes` Service IP.
    """
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca = new_ca("foo-operator-local-ca")
    front_proxy_ca = new_ca("foo-operator-local-front-proxy-ca")
    _write_pair(pki_dir, "ca", ca)
    _write_pair(pki_dir, "front-proxy-ca", front_proxy_ca)

    _write_pair(
        pki_dir,
        "apiserver",
        issue_serving(
            ca,
            common_name="kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=list(dict.fromkeys(["127.0.0.1", address, KUBERNETES_SERVICE_IP])),
        ),
    )
    # The aggregator presents this to extension apiservers; they check the CN against
    # --requestheader-allowed-names.
    _write_pair(pki_dir, "front-proxy-client", issue_client(front_proxy_ca, common_name="front-proxy-client"))
    for name, (user, groups) in COMPONENT_USERS.items():
        _write_pair(pki_dir, name, issue_client(ca, common_name=user, organizations=groups))

    sa_key = generate_private_key()
    public = serialization.load_pem_private_key(sa_key, password=None).public_key()
    _write(pki_dir / "sa.key", sa_key, private=True)
    _write(
        pki_dir / "sa.pub",
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return ClusterPKI(pki_dir, ca, front_proxy_ca)


def issue_user(pki: ClusterPKI, name: str, user: str, groups: tuple[str, ...] = ()) -> None:
    """One more client identity (a kubelet's system:node:<name>, kube-proxy) as <name>.crt/.key."""
    _write_pair(pki.dir, name, issue_client(pki.ca, common_name=user, organizations=groups))


def write_kubeconfig(
    path: Path, *, server: str, pki: ClusterPKI, user: str, context: str = "foo-operator-local"
) -> Path:
    """A self-contained kubeconfig (certificates inlined) for one of COMPONENT_USERS."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": b64(pki.ca_file),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki.cert_file(user)),
                    "client-key-data": b64(pki.key_file(user)),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, yaml.safe_dump(config, sort_keys=False).encode(), private=True)
    return path


def served_certificate(host: str, port: int) -> x509.Certificate:
    """The certificate a TLS server at ``host:port`` serves right now (not verified: a test reads
    which one a pod serves while certificates rotate)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection((host, port), timeout=5)) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)
