"""bench.admission_overhead and bench.conversion: the arithmetic behind the end-to-end numbers, and how
connections to a webhook are counted."""

from typing import Any

import pytest

from bench.admission_overhead import STATES_WITH_GO_HTTP1, added_latency, pooled, round_order
from bench.conversion import list_rates, side_summary
from bench.report import percentile
from bench.servers import client_ports


def test_each_state_runs_as_often_early_as_late() -> None:
    order = round_order(1)
    assert order == ["ours", "go", "none", "none", "go", "ours"]
    mean_position = {state: sum(i for i, s in enumerate(order) if s == state) / 2 for state in set(order)}
    assert set(mean_position.values()) == {2.5}


def test_the_go_peer_over_http1_is_one_more_state_as_often_early_as_late() -> None:
    order = round_order(1, STATES_WITH_GO_HTTP1)
    assert order == ["ours", "go", "go-http1", "none", "none", "go-http1", "go", "ours"]
    mean_position = {state: sum(i for i, s in enumerate(order) if s == state) / 2 for state in set(order)}
    assert set(mean_position.values()) == {3.5}


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


def test_the_go_peer_over_http1_is_compared_with_no_webhooks_too() -> None:
    rounds = [_round("go-http1", 95.0, [9.0], [200.0]), _round("none", 200.0, [5.0], [180.0])]
    added = added_latency(pooled(rounds))
    assert set(added) == {"go-http1"}
    assert added["go-http1"]["create_p50_ms"] == pytest.approx(4.0)


def test_without_a_round_of_no_webhooks_nothing_is_subtracted() -> None:
    states = pooled([_round("ours", 100.0, [10.0], [200.0])])
    assert added_latency(states) == {
        "ours": {"create_p50_ms": None, "create_p99_ms": None, "kubectl_p50_ms": None, "kubectl_p99_ms": None}
    }


def test_conversion_rate_is_the_list_at_v1alpha1_minus_the_same_list_at_v1() -> None:
    assert list_rates(1000, 2.0, 1.5) == {"list_v1alpha1_foos_per_second": 500.0, "conversion_foos_per_second": 2000.0}


def test_a_conversion_lost_in_noise_has_no_rate() -> None:
    assert list_rates(1000, 1.4, 1.5)["conversion_foos_per_second"] is None


def _list(seconds: float, webhook_cpu: float, apiserver_cpu: float, connections: int, opened: int) -> dict[str, float]:
    return {
        "seconds": seconds,
        "webhook_cpu_seconds": webhook_cpu,
        "apiserver_cpu_seconds": apiserver_cpu,
        "connections": connections,
        "connections_opened": opened,
    }


def test_a_review_costs_what_the_list_at_v1alpha1_takes_above_the_same_list_at_v1() -> None:
    summary = side_summary(
        1000,
        {
            "v1alpha1": [_list(3.0, 0.5, 2.0, 1, 0), _list(2.0, 0.3, 1.5, 1, 0), _list(2.5, 0.4, 1.8, 2, 1)],
            "v1": [_list(0.5, 0.0, 0.3, 1, 0)] * 3,
        },
    )
    assert summary["ms_per_review"] == pytest.approx(2.0)
    assert summary["webhook_cpu_us_per_review"] == pytest.approx(400.0)
    assert summary["apiserver_cpu_us_per_review"] == pytest.approx(1500.0)
    assert (summary["connections"], summary["connections_opened"]) == (2, 1)


# /proc/net/tcp as the kernel writes it (addresses and ports in hex; state 0A listen, 01 established,
# 06 time-wait), trimmed after the inode: a listener on 127.0.0.1:9443 (0x24E3), a connection from
# port 40000 (0x9C40) seen from both ends, the client's TIME_WAIT of one from port 40001 (0x9C41),
# and an unrelated connection.
PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:24E3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101
   1: 0100007F:24E3 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 102
   2: 0100007F:9C40 0100007F:24E3 01 00000000:00000000 00:00000000 00000000     0        0 103
   3: 0100007F:9C41 0100007F:24E3 06 00000000:00000000 03:00000F2A 00000000     0        0 0
   4: 0100007F:1F90 0100007F:9C42 01 00000000:00000000 00:00000000 00000000     0        0 104
"""


def test_connections_to_a_port_are_counted_by_client_port_whatever_their_state() -> None:
    assert client_ports(0x24E3, PROC_NET_TCP) == {40000, 40001}
    assert client_ports(0x1F90, PROC_NET_TCP) == {40002}
    assert client_ports(1234, PROC_NET_TCP) == set()
