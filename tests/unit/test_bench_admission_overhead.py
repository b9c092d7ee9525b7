"""bench.admission_overhead and bench.conversion: the arithmetic behind the end-to-end numbers."""

from typing import Any

import pytest

from bench.admission_overhead import added_latency, pooled, round_order
from bench.conversion import list_rates
from bench.report import percentile


def test_each_state_runs_as_often_early_as_late() -> None:
    order = round_order(1)
    assert order == ["ours", "go", "none", "none", "go", "ours"]
    mean_position = {state: sum(i for i, s in enumerate(order) if s == state) / 2 for state in set(order)}
    assert set(mean_position.values()) == {2.5}


def test_cycles_repeat_the_order() -> None:
    assert round_order(2) == round_order(1) * 2


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51.0
    assert percentile(values, 99) == 100.0
    assert percentile([], 50) is None


def _round(state: str, per_second: float, sequential: list[float], kubectl: list[float]) -> dict[str, Any]:
    return {
        "state": state,
        "creates_per_second": per_second,
        "sequential_ms": sequential,
        "kubectl_ms": kubectl,
        "failed": 0,
    }


def test_a_states_rounds_are_pooled_and_each_side_is_compared_with_no_webhooks() -> None:
    rounds = [
        _round("ours", 100.0, [10.0, 12.0], [200.0]),
        _round("go", 90.0, [8.0], [190.0]),
        _round("none", 200.0, [5.0], [180.0]),
        _round("none", 220.0, [5.0], [180.0]),
        _round("go", 110.0, [9.0], [210.0]),
        _round("ours", 120.0, [11.0], [220.0]),
    ]
    states = pooled(rounds)
    assert states["ours"]["creates_per_second"] == pytest.approx(110.0)
    assert states["none"]["creates_per_second"] == pytest.approx(210.0)
    assert states["ours"]["create_p50_ms"] == 11.0
    added = added_latency(states)
    assert added["ours"]["create_p50_ms"] == pytest.approx(6.0)
    assert added["go"]["create_p50_ms"] == pytest.approx(4.0)
    assert added["go"]["kubectl_p50_ms"] == pytest.approx(30.0)


def test_without_a_round_of_no_webhooks_nothing_is_subtracted() -> None:
    states = pooled([_round("ours", 100.0, [10.0], [200.0])])
    assert added_latency(states) == {
        "ours": {"create_p50_ms": None, "create_p99_ms": None, "kubectl_p50_ms": None, "kubectl_p99_ms": None}
    }


def test_conversion_rate_is_the_list_at_v1alpha1_minus_the_same_list_at_v1() -> None:
    assert list_rates(1000, 2.0, 1.5) == {"list_v1alpha1_foos_per_second": 500.0, "conversion_foos_per_second": 2000.0}


def test_a_conversion_lost_in_noise_has_no_rate() -> None:
    assert list_rates(1000, 1.4, 1.5)["conversion_foos_per_second"] is None
