"""`make run`: a real local control plane with foo-operator registered, until Ctrl-C.

Builds nothing itself (``make run`` runs hack/build.sh first); starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and a kwok node, then the webhook and the controller,
applies examples/foo.yaml and prints what to try.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import time
from pathlib import Path

from .cluster import LocalControlPlane
from .procs import ComponentError
from .product import REPO, LocalProduct


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__)
    parser.add_argument("--workdir", type=Path, default=REPO / ".local" / "demo",
                        help="where the plane keeps its data, logs and kubeconfig")
    parser.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args(argv)

    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    has_controller = importlib.util.find_spec("controller.__main__") is not None
    began = time.monotonic()
    try:
        with LocalControlPlane(args.workdir, nodes=args.nodes) as plane, \
                LocalProduct(plane, controller=has_controller) as product:
            plane.kubectl("apply", "-f", str(REPO / "examples" / "foo.yaml"))
            print(f"""
foo-operator is running on a local Kubernetes {plane.version} (ready in {time.monotonic() - began:.0f}s).

  export KUBECONFIG={plane.kubeconfig}
  export PATH={plane.bin.kubectl.parent}:$PATH   # kubectl {plane.version}, built from its module
  kubectl get foos                                  # the example, defaulted
  kubectl get deployments                           # {'its Deployment, made by the controller' if has_controller else '(controller not built yet)'}
  kubectl apply -f examples/foo-invalid.yaml        # every field error at once
  kubectl apply -f examples/foo-v1alpha1.yaml       # sample-controller's schema, converted
  kubectl get foos.v1alpha1.samplecontroller.k8s.io # read back at the old version
  kubectl scale foo/example-foo --replicas=3

Logs: {plane.logs_dir}   Webhook: {product.url}
Press Ctrl-C to stop and remove everything.""", flush=True)
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
