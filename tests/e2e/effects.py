"""What a steady load's Foo creates did, against what the load was told (tests/e2e/load.py).

Once the controller has settled a namespace, each create answered 201 must be a stored Foo with
exactly one Deployment it owns, every Deployment seen earlier the same object still, and no Foo
stored whose create failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hack.plane.cluster import LocalControlPlane
from tests.e2e.load import Answers
from tests.e2e.waiting import wait_for


def settled(plane: LocalControlPlane, namespace: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The namespace's Foos and Deployments by name once every Foo has its Deployment and a
    status the controller wrote for its generation with its replica available."""
    foos = {
        f["metadata"]["name"]: f
        for f in json.loads(plane.kubectl("get", "foos", "-n", namespace, "-o", "json").stdout)["items"]
    }
    deployments = json.loads(plane.kubectl("get", "deployments", "-n", namespace, "-o", "json").stdout)["items"]
    by_name = {d["metadata"]["name"]: d for d in deployments}
    for name, foo in foos.items():
        status = foo.get("status") or {}
        if name not in by_name or status.get("observedGeneration") != foo["metadata"]["generation"]:
            return None
        if status.get("availableReplicas") != 1:
            return None
    return foos, by_name


@dataclass(frozen=True)
class Effects:
    lost: list[str]  # answered 201, and not stored or without its Deployment
    duplicated: list[str]  # more than one Deployment for a Foo, or its Deployment made again
    unacknowledged: list[str]  # stored although the create failed

    @property
    def counted(self) -> tuple[int, int]:
        return len(self.lost), len(self.duplicated) + len(self.unacknowledged)


def effects(plane: LocalControlPlane, namespace: str, answers: Answers, uids: dict[str, str] | None = None) -> Effects:
    """Once the controller has settled the namespace: what the load's creates did, against what
    it was told; ``uids``: Deployments seen earlier, which must be the same objects still."""
    foos, deployments = wait_for(
        f"every Foo in {namespace} reconciled and available",
        lambda: settled(plane, namespace),
        timeout=300,
        interval=1,
    )
    acknowledged = {f"load-{n}" for n in answers.acknowledged("write")}
    owners: dict[str, list[str]] = {}
    for name, deployment in deployments.items():
        for owner in deployment["metadata"].get("ownerReferences") or []:
            owners.setdefault(owner["name"], []).append(name)
    lost = sorted(name for name in acknowledged if name not in foos or owners.get(name) != [name])
    duplicated = sorted(name for name, made in owners.items() if len(made) > 1)
    duplicated += sorted(
        name
        for name, uid in (uids or {}).items()
        if name in deployments and deployments[name]["metadata"]["uid"] != uid
    )
    return Effects(lost, duplicated, sorted(set(foos) - acknowledged))


def deployment_uids(plane: LocalControlPlane, namespace: str) -> dict[str, str]:
    listed = json.loads(plane.kubectl("get", "deployments", "-n", namespace, "-o", "json").stdout)["items"]
    return {d["metadata"]["name"]: d["metadata"]["uid"] for d in listed}


def foo_names(plane: LocalControlPlane, namespace: str) -> set[str]:
    return set(plane.kubectl("get", "foos", "-n", namespace, "-o", "jsonpath={.items[*].metadata.name}").stdout.split())
