"""FooHealth lists by apimachinery's rules, as client-go meets them: hack/list-rules, a real client-go program.

It runs each list rule (resourceVersion and resourceVersionMatch, too-large versions, limit and
continue from one snapshot, an expired continue token, invalid values) through kube-apiserver
against Foos (kube-apiserver's own answer) and against FooHealths (the insights server's), by raw
lists, client-go's pager and informers with WatchList off and on, and prints the two side by
side; it exits 1 where ours breaks the rule. The plane is `make run`'s kind (insights on loopback
behind an ExternalName Service), so this needs no root.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from hack.plane.binaries import list_rules
from hack.plane.cluster import LocalControlPlane
from hack.plane.product import LocalProduct


@pytest.fixture(scope="module")
def product(built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProduct]:
    """etcd and kube-apiserver dialling APIServices by name, the webhook and insights registered."""
    workdir = tmp_path_factory.mktemp("client-go-lists")
    with (
        LocalControlPlane(workdir, minimal=True, aggregator_routing=False) as plane,
        LocalProduct(plane, insights=True) as product,
    ):
        yield product


def _run_list_rules(product: LocalProduct, namespace: str, via: str) -> subprocess.CompletedProcess[str]:
    product.plane.kubectl("create", "namespace", namespace)
    argv = [str(list_rules()), f"--kubeconfig={product.plane.kubeconfig}", f"--namespace={namespace}", f"--via={via}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    print(result.stdout)
    return result


@pytest.mark.parametrize(
    "via",
    [
        pytest.param("raw", id="raw-lists-and-pages"),
        pytest.param("REST", id="invalid-values"),
        pytest.param("pager", id="pager"),
        pytest.param("informer", id="informers-watchlist-off-and-on"),
    ],
)
def test_client_go_lists_foohealths_by_the_rules_kube_apiserver_lists_foos_by(product: LocalProduct, via: str) -> None:
    result = _run_list_rules(product, f"list-rules-{via.lower()}", via)
    summary = result.stdout[result.stdout.rfind("\nvia ") :]
    assert result.returncode == 0, f"list-rules exited {result.returncode}: {result.stderr}\n{summary}"
