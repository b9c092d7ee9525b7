"""Certificates rotate under load through the real apiserver and not one request fails.

The webhook runs in rotator mode with every step forced (renew always, 3 s overlap): it keeps
trusting a new CA, switching its serving certificate to it and retiring the old one, while
writers create Foos through kube-apiserver, which calls /mutate-foo, /validate-foo and /convert.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from apimachinery.resources import Resource
from fooapi.crd import CRD_NAME
from hack.plane.product import LocalProduct
from kube.client import ApiError
from kube.config import connect

FOOS_V1 = Resource("samplecontroller.k8s.io", "v1", "foos", "Foo")
FOOS_V1ALPHA1 = Resource("samplecontroller.k8s.io", "v1alpha1", "foos", "Foo")
WRITERS = 4
RETIRED = "certificates: retired the old CA"
ROTATIONS = 2  # CAs replaced under the load: each trusted, served and retired
MORE_WRITES = 100  # answered after the last retirement, so the load covers kube-apiserver taking it in
# A rotation is a few caBundle patches and two 3 s overlaps (~7 s on a quiet machine); each patch
# rebuilds the CRD's storage in kube-apiserver, which a busy machine makes slow. Only a hang takes this.
ROTATIONS_WITHIN = 300.0


@pytest.fixture(params=["1", "2"], ids=["one-process", "two-workers"])
def rotating_webhook(
    foo_operator: LocalProduct, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[LocalProduct]:
    """The session's webhook replaced, on the same URL, by one in rotator mode; restored after.
    With two workers, worker 0 rotates and worker 1 serves the files it writes."""
    foo_operator.stop_webhook()
    foo_operator.start_webhook(
        cert_dir=tmp_path / "rotated",
        extra_args=[
            "--workers",
            request.param,
            "--cert-rotation",
            "--kubeconfig",
            str(foo_operator.plane.kubeconfig),
            "--namespace",
            namespace,
            "--extra-ip",
            "127.0.0.1",
            "--apiservice",
            "",
            "--crd",
            CRD_NAME,
            "--rotation-interval",
            "0.5",
            "--rotation-overlap",
            "3",
            "--renew-fraction",
            "1.0",
        ],
    )
    try:
        yield foo_operator
    finally:
        foo_operator.stop_webhook()
        foo_operator.start_webhook()
        foo_operator.register()  # our own CA back into every caBundle


def _retirements(log: Path, offset: int) -> int:
    """How many CAs the webhook has retired since ``offset`` of its log (the log outlives a restart)."""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").count(RETIRED)


async def _drive_load(kubeconfig: str, namespace: str, log: Path) -> tuple[Counter[str], int]:
    """Writers through kube-apiserver until ``ROTATIONS`` CAs are retired and ``MORE_WRITES`` more
    answered after that: the load brackets the rotations by their progress, not by a clock."""
    outcomes: Counter[str] = Counter()
    offset = log.stat().st_size
    stop = asyncio.Event()
    async with await connect(kubeconfig) as client:

        async def writer(worker: int) -> None:
            sent = 0
            while not stop.is_set():
                sent += 1
                legacy = sent % 2 == 0  # every other write is v1alpha1: conversion on the path too
                name = f"load-{worker}-{sent}"
                body = (
                    {
                        "apiVersion": "samplecontroller.k8s.io/v1alpha1",
                        "kind": "Foo",
                        "metadata": {"name": name},
                        "spec": {"deploymentName": name, "replicas": 1},
                    }
                    if legacy
                    else {
                        "apiVersion": "samplecontroller.k8s.io/v1",
                        "kind": "Foo",
                        "metadata": {"name": name},
                        "spec": {"deployment": {"name": name}, "replicas": 1},
                    }
                )
                try:
                    await client.create(FOOS_V1ALPHA1 if legacy else FOOS_V1, body, namespace=namespace, dry_run=True)
                    outcomes["ok"] += 1
                except ApiError as err:
                    outcomes[f"{err.status}: {str(err)[:200]}"] += 1

        async def conductor() -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ROTATIONS_WITHIN
            try:
                while _retirements(log, offset) < ROTATIONS and loop.time() < deadline:
                    await asyncio.sleep(0.25)
                enough = outcomes["ok"] + MORE_WRITES
                while outcomes["ok"] < enough and loop.time() < deadline:
                    await asyncio.sleep(0.25)
            finally:
                stop.set()

        await asyncio.gather(conductor(), *(writer(i) for i in range(WRITERS)))
    return outcomes, _retirements(log, offset)


def test_rotating_the_ca_under_load_fails_no_request(rotating_webhook: LocalProduct, namespace: str) -> None:
    plane = rotating_webhook.plane
    log_file = plane.logs_dir / "webhook.log"
    began = time.monotonic()
    outcomes, retired = asyncio.run(_drive_load(str(plane.kubeconfig), namespace, log_file))
    log = log_file.read_text()
    print(
        f"rotation under load: {dict(outcomes)} in {time.monotonic() - began:.0f}s; CA rotations completed: {retired}"
    )
    assert outcomes["ok"] > MORE_WRITES
    assert set(outcomes) == {"ok"}, outcomes
    assert "Traceback" not in log
    assert retired >= ROTATIONS, f"the CA should have been replaced {ROTATIONS} times within {ROTATIONS_WITHIN:.0f}s"
