"""The webhook with `--workers 2` behind the real kube-apiserver admits, defaults and denies Foos.

Which worker answers is the kernel's choice per connection (kube-apiserver keeps its
connections alive); the pod as a whole must behave as one process does.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.plane.product import LocalProduct
from tests.e2e.test_admission import foo_yaml, get_foo

FOOS = 12


@pytest.fixture
def two_workers(foo_operator: LocalProduct) -> Iterator[LocalProduct]:
    """The session's webhook replaced, on the same URL, by two workers under a supervisor; restored after."""
    foo_operator.stop_webhook()
    foo_operator.start_webhook(extra_args=["--workers", "2"])
    try:
        yield foo_operator
    finally:
        foo_operator.stop_webhook()
        foo_operator.start_webhook()


def served_reviews(product: LocalProduct, endpoint: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{product.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = f'controller_runtime_webhook_requests_total{{code="200",webhook="{endpoint}"}} '
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


def test_two_workers_admit_default_and_deny_foos_through_the_apiserver(
    two_workers: LocalProduct, namespace: str
) -> None:
    plane = two_workers.plane
    assert two_workers.webhook is not None and two_workers.webhook.pid is not None
    supervisor = two_workers.webhook.pid
    assert len(Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()) == 2

    for n in range(FOOS):
        plane.kubectl("apply", "-n", namespace, "-f", "-", input=foo_yaml(f"plain-{n}", replicas=None))
        assert get_foo(plane, namespace, f"plain-{n}")["spec"] == {
            "deployment": {"name": "web", "image": "nginx:latest"},
            "replicas": 1,
        }
    denied = plane.kubectl("apply", "-n", namespace, "-f", "-", input=foo_yaml("too-many", replicas=11), check=False)
    assert denied.returncode != 0
    assert denied.stderr.strip() == (
        'The Foo "too-many" is invalid: spec.replicas: Invalid value: 11: must be less than or equal to 10'
    )
    # Every review counted once, whichever worker answered it.
    assert served_reviews(two_workers, "/mutate-foo") >= FOOS + 1
    assert served_reviews(two_workers, "/validate-foo") >= FOOS  # the mutating webhook already denied the last
