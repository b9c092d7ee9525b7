"""``kubectl foo-operator health [NAME]``: FooHealths from the aggregated API, in kubectl get's columns.

The columns are the server's own (``insights.table``), so this and ``kubectl get foohealths``
never disagree; ``-o wide`` adds the priority-1 columns, as kubectl does.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from insights.resources import FOO_HEALTHS, GROUP, GROUP_VERSION
from insights.table import COLUMNS, cells
from kube.client import KubeClient


def path(namespace: str | None, name: str | None = None) -> str:
    """The aggregated API's URL; no namespace means every namespace (``-A``)."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{GROUP_VERSION}{where}/{FOO_HEALTHS.name}" + (f"/{name}" if name else "")


# kubectl's `-o name` prefix: resource.group
RESOURCE = f"{FOO_HEALTHS.singular}.{GROUP}"


async def fetch(
    client: KubeClient, namespace: str | None, name: str | None, *, selector: str | None = None
) -> list[dict[str, Any]]:
    """One FooHealth, or the list (the server applies the label selector, as for any list)."""
    query = {"labelSelector": selector} if selector else None
    answer = await client.request("GET", path(namespace, name), query=query)
    return [answer] if name else list(answer.get("items") or [])


def headers(*, wide: bool, all_namespaces: bool) -> list[str]:
    names = [str(c["name"]) for c in COLUMNS if wide or c["priority"] == 0]
    return (["Namespace"] if all_namespaces else []) + names


def table_rows(
    healths: Sequence[Mapping[str, Any]], now: datetime.datetime, *, wide: bool, all_namespaces: bool
) -> list[list[Any]]:
    shown = [i for i, c in enumerate(COLUMNS) if wide or c["priority"] == 0]
    rows = []
    for health in healths:
        values = cells(dict(health), now)
        row = [values[i] for i in shown]
        if all_namespaces:
            row.insert(0, (health.get("metadata") or {}).get("namespace", ""))
        rows.append(row)
    return rows
