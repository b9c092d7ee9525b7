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
from hack.product import LocalProduct
from kube.client import ApiError
from kube.config import connect

FOOS_V1 = Resource("samplecontroller.k8s.io", "v1", "foos", "Foo")
FOOS_V1ALPHA1 = Resource("samplecontroller.k8s.io", "v1alpha1", "foos", "Foo")
LOAD_SECONDS = 25.0
WRITERS = 4


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


async def _drive_load(kubeconfig: str, namespace: str, seconds: float) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    async with await connect(kubeconfig) as client:

        async def writer(worker: int) -> None:
            sent = 0
            while time.monotonic() < deadline:
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

        await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    return outcomes


def test_rotating_the_ca_under_load_fails_no_request(rotating_webhook: LocalProduct, namespace: str) -> None:
    plane = rotating_webhook.plane
    outcomes = asyncio.run(_drive_load(str(plane.kubeconfig), namespace, LOAD_SECONDS))
    log = (plane.logs_dir / "webhook.log").read_text()
    retired = log.count("certificates: retired the old CA")
    print(f"rotation under load: {dict(outcomes)}; CA rotations completed: {retired}")
    assert outcomes["ok"] > 100
    assert set(outcomes) == {"ok"}, outcomes
    assert "Traceback" not in log
    assert retired >= 2, "the CA should have been replaced at least twice during the load"
