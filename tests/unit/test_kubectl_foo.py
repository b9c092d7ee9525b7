"""kubectl_foo's pure parts: which caBundles concern foo-operator, how their CAs read, kubectl's table."""

from __future__ import annotations

import base64
import datetime

from certs.authority import new_ca
from kube.client import ApiError
from kubectl_foo import cabundles, health, output
from kubectl_foo.__main__ import explain

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def b64(*pems: bytes) -> str:
    return base64.b64encode(b"".join(pems)).decode()


def webhook_configuration(name: str, group: str, bundle: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "webhooks": [{"name": f"w.{group}", "rules": [{"apiGroups": [group]}], "clientConfig": {"caBundle": bundle}}],
    }


def test_only_webhooks_about_foos_are_listed() -> None:
    found = cabundles.webhook_bundles(
        "MutatingWebhookConfiguration",
        [
            webhook_configuration("ours", "samplecontroller.k8s.io", "QQ=="),
            webhook_configuration("istio", "networking.istio.io", "Qg=="),
        ],
    )
    assert found == [
        cabundles.Bundle("MutatingWebhookConfiguration", "ours", "webhooks[0] w.samplecontroller.k8s.io", "QQ==")
    ]


def test_the_crd_counts_only_with_webhook_conversion_and_apiservices_by_group() -> None:
    crd = {
        "metadata": {"name": "foos.samplecontroller.k8s.io"},
        "spec": {
            "group": "samplecontroller.k8s.io",
            "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"caBundle": "QQ=="}}},
        },
    }
    legacy = {
        "metadata": {"name": "foos.samplecontroller.k8s.io"},
        "spec": {"group": "samplecontroller.k8s.io", "conversion": {"strategy": "None"}},
    }
    assert [b.ca_bundle for b in cabundles.crd_bundles([crd, legacy])] == ["QQ=="]
    services = [
        {
            "metadata": {"name": "v1alpha1.insights.samplecontroller.k8s.io"},
            "spec": {"group": "insights.samplecontroller.k8s.io", "caBundle": "QQ=="},
        },
        {"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": {"group": "metrics.k8s.io"}},
    ]
    assert [b.name for b in cabundles.apiservice_bundles(services)] == ["v1alpha1.insights.samplecontroller.k8s.io"]


def test_each_ca_of_an_overlapping_bundle_is_a_row_with_its_expiry() -> None:
    old, new = new_ca("old-ca", days=30), new_ca("new-ca", days=3650)
    rows = cabundles.rows(
        [cabundles.Bundle("APIService", "a", "spec.caBundle", b64(old.cert_pem, new.cert_pem))],
        datetime.datetime.now(datetime.UTC),
    )
    assert [(r.subject, r.expires_in) for r in rows] == [("old-ca", "29d"), ("new-ca", "9y")]


def test_a_missing_or_broken_bundle_is_a_row_that_says_so() -> None:
    rows = cabundles.rows(
        [
            cabundles.Bundle("APIService", "a", "spec.caBundle", ""),
            cabundles.Bundle("APIService", "b", "spec.caBundle", "not base64!"),
        ],
        NOW,
    )
    assert [r.expires_in for r in rows] == [
        "no caBundle: the apiserver cannot verify the server",
        "unreadable caBundle: not base64",
    ]


def test_time_left_reads_on_the_scale_renewals_are_planned() -> None:
    assert [cabundles.human_left(s) for s in (-3 * 86400, 300, 5 * 3600, 12 * 86400, 800 * 86400)] == [
        "expired 3d ago",
        "5m",
        "5h",
        "12d",
        "2y",
    ]


def test_tables_are_kubectls_upper_case_and_three_spaces_apart() -> None:
    assert output.table(["Name", "Health"], [["web", "Healthy"], ["a-longer-name", "Unknown"]]) == (
        "NAME            HEALTH\nweb             Healthy\na-longer-name   Unknown\n"
    )


def test_health_paths_and_wide_columns_follow_kubectl_get() -> None:
    assert health.path("ns", "web") == "/apis/insights.samplecontroller.k8s.io/v1alpha1/namespaces/ns/foohealths/web"
    assert health.path(None) == "/apis/insights.samplecontroller.k8s.io/v1alpha1/foohealths"
    assert health.headers(wide=False, all_namespaces=True)[:2] == ["Namespace", "Name"]
    assert "Deployment" in health.headers(wide=True, all_namespaces=False)
    assert "Deployment" not in health.headers(wide=False, all_namespaces=False)


# --- what a tenant wrote reaches the user's terminal inert ---------------------------------------

# OSC 52 writes the reader's clipboard, CSI 2J clears the screen, CR rewrites the line in place.
HOSTILE = "nginx:latest\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\rhealthy\n\x9b31m"
CONTROL_BYTES = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]}


def _hostile_health() -> dict[str, object]:
    return {
        "metadata": {"name": "web", "namespace": "tenant-a"},
        "status": {"image": HOSTILE, "lastError": {"reason": "Failed", "message": HOSTILE}, "deploymentName": "web"},
    }


def _printed_controls(text: str, *, ours: str = "\n") -> set[str]:
    return (set(text) & CONTROL_BYTES) - set(ours)


def test_health_wide_escapes_the_tenants_text_as_kubectl_does() -> None:
    rows = health.table_rows([_hostile_health()], NOW, wide=True, all_namespaces=True)
    printed = output.table(health.headers(wide=True, all_namespaces=True), rows)
    assert _printed_controls(printed) == set() and printed.count("\n") == 2
    assert "nginx:latest^[]52;c;cm0gLXJmIH4=\\x07^[[2J\\rhealthy\\n\\x9b31m" in printed  # ESC ^[, CR \r: kubectl's


def test_every_output_format_prints_no_control_byte_the_plugin_did_not_write() -> None:
    items = [_hostile_health(), {"metadata": {"name": "odd\x1b[2J"}, "status": {"image": "\x7f"}}]
    shown = {"apiVersion": "v1", "kind": "List", "items": items}
    for fmt in ("json", "yaml", "name", "jsonpath={.items[*].status.image}", "custom-columns=IMAGE:.status.image"):
        printed = output.objects(items, shown, fmt, resource=health.RESOURCE)
        assert printed is not None and _printed_controls(printed) == set(), fmt


def test_a_jsonpath_templates_own_newlines_are_printed_its_values_escaped() -> None:
    printed = output.objects([], _hostile_health(), 'jsonpath={.status.image}{"\\n"}', resource=health.RESOURCE)
    assert printed is not None and printed.endswith("\\n\\x9b31m\n") and printed.count("\n") == 1


def test_an_error_from_the_server_is_printed_escaped() -> None:
    err = ApiError(422, {"reason": "Invalid", "message": f"admission webhook said: {HOSTILE}"})
    assert _printed_controls(explain(err), ours="") == set()
