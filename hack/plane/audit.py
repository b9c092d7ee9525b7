"""kube-apiserver's audit log of write verbs: who wrote what, counted where it counts (the apiserver).

A plane started with ``WriteAudit(dir).apiserver_args()`` logs every create, update, patch and
delete at Metadata level (one JSON line each, no bodies). ``writes`` reads them back from a
``mark`` on, with the user, the user agent, the object and the answer's code: a controller's
writes in a quiet minute, or the writes one replica made after another took its lease.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"""


@dataclass(frozen=True)
class AuditedWrite:
    user: str
    user_agent: str
    verb: str
    resource: str  # "deployments", "foos/status", ...
    namespace: str
    name: str
    code: int
    received: str  # requestReceivedTimestamp: RFC 3339 with microseconds, UTC (sorts as text)

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code < 300


class WriteAudit:
    """The policy file and log path of one plane's audit, and a reader of what it logged."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.policy = directory / "audit-policy.yaml"
        self.policy.write_text(POLICY)
        self.log = directory / "audit.log"
        self.log.unlink(missing_ok=True)

    def apiserver_args(self) -> list[str]:
        return [
            f"--audit-policy-file={self.policy}",
            f"--audit-log-path={self.log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]

    def mark(self) -> int:
        """Where the log ends now: ``writes(mark)`` reads only what comes after."""
        return self.log.stat().st_size if self.log.exists() else 0

    def writes(self, mark: int = 0) -> Iterator[AuditedWrite]:
        if not self.log.exists():
            return
        with open(self.log, "rb") as f:
            f.seek(mark)
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                if event.get("stage") != "ResponseComplete":
                    continue
                ref = event.get("objectRef") or {}
                subresource = f"/{ref['subresource']}" if ref.get("subresource") else ""
                yield AuditedWrite(
                    user=str((event.get("user") or {}).get("username", "")),
                    user_agent=str(event.get("userAgent", "")),
                    verb=str(event.get("verb", "")),
                    resource=str(ref.get("resource", "?")) + subresource,
                    namespace=str(ref.get("namespace", "")),
                    name=str(ref.get("name", "")),
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                    received=str(event.get("requestReceivedTimestamp", "")),
                )
