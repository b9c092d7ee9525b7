"""Real control planes for the benchmarks that need kube-apiserver (their admin client: hack.plane.adminclient)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fooapi.crd import CRD_NAME, crd_manifest
from hack.plane.cluster import LocalControlPlane

from .report import RESULTS_DIR, say


@contextmanager
def plane(
    name: str, *, minimal: bool = True, apiserver_args: list[str] | None = None, aggregator_routing: bool = True
) -> Iterator[LocalControlPlane]:
    """A LocalControlPlane under bench/results/planes/<name> (logs kept there after it stops);
    ``aggregator_routing=False`` for insights on loopback (hack.plane.product.LocalProduct)."""
    workdir = RESULTS_DIR / "planes" / name
    shutil.rmtree(workdir, ignore_errors=True)
    say(f"starting a {'minimal ' if minimal else ''}control plane ({name})")
    with LocalControlPlane(
        workdir, minimal=minimal, apiserver_args=apiserver_args or (), aggregator_routing=aggregator_routing
    ) as p:
        yield p


def apply(p: LocalControlPlane, *objects: dict[str, Any]) -> None:
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    p.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=document)


def apply_plain_crd(p: LocalControlPlane) -> None:
    """Our CRD without a conversion webhook (enough for anything that only reads v1)."""
    apply(p, crd_manifest())
    p.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
