"""How a storage migration is checked: what etcd itself holds for Foos, and the line in which
`foo-operator migrate-storage` sums up its walk."""

from __future__ import annotations

import base64
import json
import re
import urllib.request

from hack.plane.cluster import LocalControlPlane

# The walk's summary, as controller/migrate.py prints it (storage version v1).
DONE_LINE = re.compile(
    r"^done: (?P<total>\d+) Foos? in (?P<seconds>[\d.]+)s: (?P<rewritten>\d+) rewritten, (?P<current>\d+) already "
    r"stored at v1, (?P<gone>\d+) deleted meanwhile, (?P<failed>\d+) failed$",
    re.M,
)


def etcd_foos(plane: LocalControlPlane, namespace: str) -> dict[str, tuple[str, int]]:
    """What etcd really holds for the Foos of ``namespace``: name -> (apiVersion of the stored
    bytes, mod revision). Read from etcd's gRPC gateway, past kube-apiserver's conversion."""
    prefix = f"/registry/samplecontroller.k8s.io/foos/{namespace}/".encode()
    body = {
        "key": base64.b64encode(prefix).decode(),
        "range_end": base64.b64encode(prefix[:-1] + bytes([prefix[-1] + 1])).decode(),
    }
    request = urllib.request.Request(f"http://127.0.0.1:{plane.etcd_port}/v3/kv/range", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.load(response)
    out = {}
    for kv in answer.get("kvs", []):
        name = base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1]
        out[name] = (json.loads(base64.b64decode(kv["value"]))["apiVersion"], int(kv["mod_revision"]))
    return out
