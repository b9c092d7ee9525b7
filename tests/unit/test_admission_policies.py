"""docs/policies' admission policies name what the release publishes: the key is cosign.pub (a new
key means new policies, or the cluster refuses the next release), the image is the published
one, the SBOM attestation's type is the one `hack/release/pipeline.py` attaches (cosign's `cyclonedx`).

What they decide is checked in tests/e2e/test_release.py, by sigstore policy-controller's own code
against a release in a registry; these tests keep the files in step with the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "docs" / "policies"
PUBLIC_KEY = (ROOT / "cosign.pub").read_text()
CYCLONEDX = "https://cyclonedx.org/bom"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((POLICIES / name).read_text()) if d]


def test_policy_controller_requires_the_image_signature_and_its_sbom_with_cosign_pub() -> None:
    signed, sbom = documents("sigstore-policy-controller.yaml")
    for policy in (signed, sbom):
        assert (policy["apiVersion"], policy["kind"]) == ("policy.sigstore.dev/v1beta1", "ClusterImagePolicy")
        assert [i["glob"] for i in policy["spec"]["images"]] == [
            "ghcr.io/foo-operator/foo-operator:**",
            "ghcr.io/foo-operator/foo-operator@**",
        ]
        (authority,) = policy["spec"]["authorities"]
        assert authority["key"]["data"] == PUBLIC_KEY
        assert "ctlog" not in authority, "a transparency log the docs' air-gapped path cannot reach"
    assert "attestations" not in signed["spec"]["authorities"][0], "an authority with attestations checks only them"
    (attestation,) = sbom["spec"]["authorities"][0]["attestations"]
    assert attestation["predicateType"] == CYCLONEDX


def test_kyverno_requires_the_image_signature_and_its_sbom_with_cosign_pub() -> None:
    (policy,) = documents("kyverno.yaml")
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    (rule,) = policy["spec"]["rules"]
    (verify,) = rule["verifyImages"]
    assert verify["imageReferences"] == ["ghcr.io/foo-operator/foo-operator:*", "ghcr.io/foo-operator/foo-operator@*"]
    assert (verify["failureAction"], verify["required"], verify["verifyDigest"]) == ("Enforce", True, True)
    (attestation,) = verify["attestations"]
    assert attestation["type"] == CYCLONEDX
    for attestors in (verify["attestors"], attestation["attestors"]):
        ((entry,),) = [a["entries"] for a in attestors]
        assert entry["keys"]["publicKeys"] == PUBLIC_KEY
        assert entry["keys"]["rekor"] == {"ignoreTlog": True}
