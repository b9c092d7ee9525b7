"""Rotation decisions: a CA change trusts first, switches after an overlap, retires after another."""

from __future__ import annotations

import datetime

from certs.policy import RotationPolicy
from certs.rotation import SecretState, next_state

NAMES = ["foo-operator-webhook", "foo-operator-webhook.ops.svc"]
# Certificates are stamped with the real clock, so the story starts now.
T0 = datetime.datetime.now(datetime.UTC)
OVERLAP = datetime.timedelta(minutes=5)
ALWAYS_RENEW = RotationPolicy(renew_fraction=1.0, overlap=OVERLAP)


def roundtrip(state: SecretState) -> SecretState:
    """What the next round reads back from the Secret."""
    return SecretState.from_secret_data(state.to_secret_data())


def test_an_empty_secret_gets_a_ca_a_serving_certificate_and_a_one_ca_bundle() -> None:
    state = next_state(SecretState(), T0, NAMES, ips=["127.0.0.1"])
    assert state is not None and state.step == "created"
    assert state.serving is not None and state.ca is not None and state.bundle == (state.ca.cert_pem,)
    state.serving.certificate.verify_directly_issued_by(state.ca.certificate)


def test_a_current_secret_needs_nothing() -> None:
    state = roundtrip(next_state(SecretState(), T0, NAMES))  # type: ignore[arg-type]
    assert next_state(state, T0 + datetime.timedelta(days=1), NAMES) is None


def test_a_ca_change_never_serves_from_a_ca_the_bundle_lacks() -> None:
    state = roundtrip(next_state(SecretState(), T0, NAMES, ALWAYS_RENEW))  # type: ignore[arg-type]
    now = T0 + OVERLAP
    steps = []
    for _ in range(6):
        following = next_state(state, now, NAMES, ALWAYS_RENEW)
        assert following is not None
        steps.append(following.step)
        state = roundtrip(following)
        assert state.ca is not None and state.ca.cert_pem in state.bundle  # the serving CA is always trusted
        now += OVERLAP
    assert steps[:3] == ["trusting a new CA", "switched serving to the new CA", "retired the old CA"]


def test_each_ca_step_waits_for_the_overlap() -> None:
    state = roundtrip(next_state(SecretState(), T0, NAMES, ALWAYS_RENEW))  # type: ignore[arg-type]
    trusting = roundtrip(next_state(state, T0 + OVERLAP, NAMES, ALWAYS_RENEW))  # type: ignore[arg-type]
    assert len(trusting.bundle) == 2
    assert next_state(trusting, T0 + OVERLAP + datetime.timedelta(minutes=1), NAMES, ALWAYS_RENEW) is None


def test_serving_certificate_is_reissued_when_the_names_change() -> None:
    state = roundtrip(next_state(SecretState(), T0, NAMES))  # type: ignore[arg-type]
    following = next_state(state, T0, [*NAMES, "extra.example"])
    assert following is not None and following.step == "renewed the serving certificate"
    assert following.ca == state.ca


def test_a_serving_certificate_near_its_end_is_renewed_by_the_same_ca() -> None:
    state = roundtrip(next_state(SecretState(), T0, NAMES))  # type: ignore[arg-type]
    following = next_state(state, T0 + datetime.timedelta(days=300), NAMES)
    assert following is not None and following.step == "renewed the serving certificate"


def test_garbage_in_the_secret_counts_as_absent() -> None:
    state = SecretState.from_secret_data({"tls.crt": "bm90IGEgY2VydA==", "tls.key": "bm9wZQ=="})
    assert state.serving is None and state.ca is None
