"""An OCI registry of our own on loopback, with TLS from a CA of its own: where a release is pushed
and installed from in the tests, as users install from ghcr.io.

CNCF distribution's registry from Debian's `docker-registry` package (hack/install-node-deps.sh),
filesystem storage under the work dir, no authentication (loopback only: nothing else reaches it).

    with LocalRegistry(workdir) as registry:
        registry.host      # "127.0.0.1:<port>"
        registry.ca_file   # its CA, for helm --ca-file, skopeo, cosign (SSL_CERT_FILE), containerd
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import urllib.request
from pathlib import Path

import yaml

from certs.authority import issue_serving, new_ca
from hack.plane.procs import Component, ComponentError, Started, wait_until

REGISTRY_BINARY = "docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalRegistry(Started):
    def __init__(self, workdir: Path, *, timeout: float = 30.0) -> None:
        self.workdir = workdir
        self.timeout = timeout
        self.port = 0
        self.ca_file = workdir / "ca.crt"
        self._component: Component | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = shutil.which(REGISTRY_BINARY)
        if binary is None:
            raise ComponentError(f"{REGISTRY_BINARY} is not installed (hack/install-node-deps.sh installs it)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca = new_ca("foo-operator-test-registry-ca")
        serving = issue_serving(ca, common_name="registry", dns_names=["localhost"], ips=["127.0.0.1"])
        self.ca_file.write_bytes(ca.cert_pem)
        (self.workdir / "tls.crt").write_bytes(serving.cert_pem)
        (self.workdir / "tls.key").write_bytes(serving.key_pem)
        self.port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "storage")},
                "delete": {"enabled": True},
            },
            "http": {
                "addr": self.host,
                "tls": {"certificate": str(self.workdir / "tls.crt"), "key": str(self.workdir / "tls.key")},
            },
        }
        (self.workdir / "config.yml").write_text(yaml.safe_dump(config))
        self._component = Component(
            "registry", [binary, "serve", self.workdir / "config.yml"], self.workdir / "registry.log"
        )
        self._component.start()
        wait_until("the registry's /v2/", self._ready, timeout=self.timeout, watch=[self._component])

    def _ready(self) -> bool:
        return self.get("/v2/") == {}

    def get(self, path: str) -> object:
        """A JSON answer of the registry API (tags, catalogue), over its own CA."""
        with self._opener().open(f"https://{self.host}{path}", timeout=5) as answer:
            return json.loads(answer.read() or b"{}")

    def retag(self, repository: str, digest: str, tag: str) -> None:
        """Point `tag` at the manifest `digest` again (the registry API's GET and PUT of a manifest): how a
        test puts back what it replaced, since pushing the same chart again makes a new manifest (helm
        stamps it with the time) that nothing signed."""
        media_type = "application/vnd.oci.image.manifest.v1+json"
        opener = self._opener()
        fetch = urllib.request.Request(
            f"https://{self.host}/v2/{repository}/manifests/{digest}", headers={"Accept": media_type}
        )
        with opener.open(fetch, timeout=5) as answer:
            manifest, media_type = answer.read(), answer.headers["Content-Type"]
        put = urllib.request.Request(
            f"https://{self.host}/v2/{repository}/manifests/{tag}",
            data=manifest,
            method="PUT",
            headers={"Content-Type": media_type},
        )
        with opener.open(put, timeout=5):
            pass

    def _opener(self) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        # Straight to loopback, whatever proxy the environment names (urllib would use it).
        return urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def stop(self) -> None:
        if self._component is not None:
            self._component.stop()
            self._component = None
