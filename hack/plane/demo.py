"""`make run`: a real local control plane with foo-operator registered, until Ctrl-C.

Builds nothing itself (``make run`` runs hack/build.sh first); starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and a kwok node, then the whole product — the webhook,
the insights server (its APIService Available) and the controller — applies examples/foo.yaml
and prints what to try. Nothing of it needs root.

`make run REAL_NODE=1` (``--real-node``, root): the product as it runs in a cluster instead — a
real node (hack/plane/node.py) beside the kwok one, the image built here loaded into it, and
`helm install` of the chart; the machine is put back on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

import yaml

from .cluster import LocalControlPlane
from .procs import ComponentError
from .product import REPO, LocalProduct

# Run as `python -m hack.plane.demo`, where __name__ is "__main__": the rule (getLogger(__name__)) names it by hand.
log = logging.getLogger("hack.plane.demo")

E = TypeVar("E")  # what an environment of the demo yields while it runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=REPO / ".local" / "demo",
        help="where the plane keeps its data, logs and kubeconfig",
    )
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument(
        "--real-node", action="store_true", help="run the chart from the locally built image on a real node (root)"
    )
    args = parser.parse_args(argv)
    if args.real_node:
        return _run_on_a_real_node(args.workdir, args.nodes)

    return _serve(lambda: local_product(args.workdir, args.nodes), _local_banner)


@contextlib.contextmanager
def local_product(workdir: Path, nodes: int = 1) -> Iterator[tuple[LocalControlPlane, LocalProduct]]:
    """The plane with the webhook, insights and controller on loopback, the example applied.

    The aggregator dials names, not endpoints, on this plane: insights' APIService names an
    ExternalName Service for ``localhost`` (hack/plane/product.py says why).
    """
    with (
        LocalControlPlane(workdir, nodes=nodes, aggregator_routing=False) as plane,
        LocalProduct(plane, controller=True, insights=True) as product,
    ):
        plane.kubectl("apply", "-f", str(REPO / "examples" / "foo.yaml"))
        yield plane, product


def _local_banner(running: tuple[LocalControlPlane, LocalProduct], seconds: float) -> str:
    plane, product = running
    return f"""foo-operator is running on a local Kubernetes {plane.version} (ready in {seconds:.0f}s).

  export KUBECONFIG={plane.kubeconfig}
  export PATH={plane.bin.kubectl.parent}:$PATH   # kubectl {plane.version}, built from its module
  kubectl get foos                                  # the example, defaulted
  kubectl get deployments                           # its Deployment, made by the controller
  kubectl apply -f examples/foo-invalid.yaml        # every field error at once
  kubectl apply -f examples/foo-v1alpha1.yaml       # sample-controller's schema, converted
  kubectl get foos.v1alpha1.samplecontroller.k8s.io # read back at the old version
  kubectl scale foo/example-foo --replicas=3
  kubectl get foohealths                            # the aggregated API: each Foo's rollout, live
  kubectl explain foohealth.status
  kubectl create -f examples/fooreview.yaml -o yaml # admission as a dry-run API: defaults, errors

Logs: {plane.logs_dir}   Webhook: {product.url}   Insights: https://127.0.0.1:{product.insights_port}
Press Ctrl-C to stop and remove everything."""


@contextlib.contextmanager
def _real_node_release(workdir: Path, nodes: int) -> Iterator[LocalControlPlane]:
    from .node import cannot_host_node, chart_values, image_metadata, plane_with_real_node

    reason = cannot_host_node()
    if reason:
        raise ComponentError(reason)
    image = image_metadata()
    with plane_with_real_node(workdir, image["archive"], nodes=nodes) as (plane, node):
        values = workdir / "values.yaml"
        values.write_text(yaml.safe_dump(chart_values(node, image["ref"])))
        log.info("helm install foo-operator (waits for the pods to be Ready)")
        plane.helm(
            "install",
            "foo-operator",
            str(REPO / "charts" / "foo-operator"),
            "-n",
            "foo-system",
            "--create-namespace",
            "-f",
            str(values),
            "--wait",
            "--timeout=180s",
            timeout=240,
        )
        try:
            plane.kubectl("apply", "-f", str(REPO / "examples" / "foo.yaml"))
            yield plane
        finally:
            plane.helm("uninstall", "foo-operator", "-n", "foo-system", "--wait", "--timeout=60s", check=False)


def _run_on_a_real_node(workdir: Path, nodes: int) -> int:
    logging.basicConfig(level=logging.INFO, format="==> %(message)s", stream=sys.stderr)
    return _serve(lambda: _real_node_release(workdir, nodes), _real_node_banner)


def _real_node_banner(plane: LocalControlPlane, seconds: float) -> str:
    return f"""foo-operator runs from its image on a real node of a local Kubernetes {plane.version} (ready in {seconds:.0f}s).

  export KUBECONFIG={plane.kubeconfig}
  export PATH={plane.bin.kubectl.parent}:{plane.bin.helm.parent}:$PATH
  kubectl get pods -n foo-system -o wide            # webhook, insights, controller on foo-real-node
  kubectl logs -n foo-system deploy/foo-operator-controller
  kubectl get foos; kubectl get deployments         # the example and its Deployment (on the kwok node)
  kubectl apply -f examples/foo-invalid.yaml        # denied by the webhook pod
  kubectl get foohealths                            # the aggregated API, from the insights pod
  helm test foo-operator -n foo-system              # dials foo-operator-webhook.foo-system.svc (cluster DNS)

Logs: {plane.logs_dir}
Press Ctrl-C to stop; the node is torn down and the machine put back as it was."""


def _serve(environment: Callable[[], AbstractContextManager[E]], banner: Callable[[E, float], str]) -> int:
    """Bring ``environment`` up, say what to try, and keep it until Ctrl-C or SIGTERM takes it down."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    began = time.monotonic()
    try:
        with environment() as running:
            print("\n" + banner(running, time.monotonic() - began), flush=True)
            while not stop:
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except ComponentError as err:
        print(f"make run: {err}", file=sys.stderr)
        return 1
    print("stopped; everything removed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
