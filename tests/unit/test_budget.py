"""The in-flight byte budget and the parse-cost estimate that charges it."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import orjson
import pytest

from attacks.foos import admission_review, conversion_of
from attacks.objects import foo_v1
from insights.api import INSIGHTS_RESERVED_MIB, review_budget
from serving.budget import (
    CLIENT_MIB,
    ByteBudget,
    MiB,
    NeverFits,
    body_shape,
    budget_for_memory_limit,
    parse_charge,
    parse_cost,
)

N = 512 * 1024

HOSTILE = {
    "empty objects": b"[" + b"{}," * (N // 3) + b"{}]",
    "empty arrays": b"[" + b"[]," * (N // 3) + b"[]]",
    "one-key objects": b"[" + b'{"a":0},' * (N // 8) + b"{}]",
    "nested one-key objects": b"[" + b'{"a":{"a":{"a":{"a":{}}}}},' * (N // 27) + b"{}]",
    "one-char strings": b"[" + b'"a",' * (N // 4) + b"1]",
    "floats": b"[" + b"1.5," * (N // 4) + b"1]",
    "floats orjson writes long": b"[" + b"1e15," * (N // 5) + b"1]",  # 1000000000000000.0
    "unique keys of strings": b"{" + b",".join(b'"%d":"a"' % i for i in range(N // 10)) + b"}",
    "unique keys of objects": b"{" + b",".join(b'"%d":{}' % i for i in range(N // 10)) + b"}",
    "one-element lists": b"[" + b'["a"],' * (N // 6) + b"[]]",
    "wide objects": b"[" + b'{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0},' * (N // 38) + b"{}]",
    "big integers": b"[" + b"12345678901234567890123," * (N // 24) + b"1]",
    "one-key objects of strings": b"[" + b'{"a":"b"},' * (N // 10) + b"{}]",
    "one-key objects of lists": b"[" + b'{"a":[]},' * (N // 9) + b"{}]",
    "one-key objects 1,000 deep": b"[" + b",".join([b'{"a":' * 1000 + b"0" + b"}" * 1000] * (N // 6000)) + b"]",
    "lists 1,000 deep": b"[" + b",".join([b"[" * 1000 + b'"a"' + b"]" * 1000] * (N // 2000)) + b"]",
}


def _parsed_bytes(body: bytes) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tree = orjson.loads(body)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del tree
    return size


def _written_bytes(body: bytes) -> int:
    """What apimachinery.nesting.nests_too_deep writes of the parsed body to measure it. (orjson
    reserves more than it writes, address space the process never touches: tracemalloc would
    count it, the cgroup does not.)"""
    try:
        return len(orjson.dumps(orjson.loads(body)))
    except orjson.JSONEncodeError:  # too deep: given up after 254 levels
        return len(body)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_parse_cost_is_never_below_what_parsing_and_measuring_the_depth_hold(shape: str) -> None:
    body = HOSTILE[shape]
    assert parse_cost(body) >= _parsed_bytes(body) + _written_bytes(body)


@pytest.mark.parametrize("body", [b"", b"{}", b'{"a":[1,2,{"b":":,[{"}]}', *HOSTILE.values()])
def test_parse_cost_charges_each_byte_container_value_and_key(body: bytes) -> None:
    containers, values, keys = body.count(b"{") + body.count(b"["), body.count(b","), body.count(b":")
    assert parse_cost(body) == len(body) + 96 * containers + 64 * values + 96 * keys


def test_a_list_of_three_thousand_foos_fits_the_budget_of_the_charts_256mi_pod() -> None:
    # kube-apiserver sends a list read at a non-storage version as ONE ConversionReview (~4.5 MB
    # of Foos as stored: managedFields, last-applied annotation, status with conditions). The
    # chart's pod holds the Kubernetes client for its secure /metrics.
    body = orjson.dumps(conversion_of(3_000))
    budget = ByteBudget(budget_for_memory_limit(256, shared_mib=CLIENT_MIB))
    assert parse_charge(body)[0] <= budget.largest(parse_charge(body)[0])


def test_an_update_of_two_3mib_objects_fits_the_budget_of_a_256mi_pod() -> None:
    big = foo_v1()
    big["metadata"]["annotations"] = {"example.com/blob": "x" * (3 * MiB - 1024)}
    body = orjson.dumps(admission_review(big, operation="UPDATE", old=big))
    budget = ByteBudget(budget_for_memory_limit(256))
    assert 2 * len(body) <= budget.largest(2 * len(body))
    assert parse_charge(body)[0] <= budget.largest(parse_charge(body)[0])


def test_the_budget_is_the_memory_limit_less_the_pods_headroom_and_what_the_process_needs() -> None:
    assert budget_for_memory_limit(256) == 112 * MiB  # 256 - 64 of headroom - 80 of its own
    assert budget_for_memory_limit(256, shared_mib=CLIENT_MIB) == 64 * MiB  # - 48 of client, once
    assert budget_for_memory_limit(1024) == 688 * MiB
    assert budget_for_memory_limit(10) == 16 * MiB  # a floor, so a tiny limit still serves small reviews


def test_insights_holds_what_the_same_rule_leaves_beside_its_own_larger_reserve() -> None:
    # Before: insights had a formula of its own, (limit - 128) / 2, which met this one at 256 MiB only.
    assert review_budget(256) == 64 * MiB  # 256 - 64 of headroom - 128 of its own
    assert review_budget(512) == budget_for_memory_limit(512, reserved_mib=INSIGHTS_RESERVED_MIB) == 256 * MiB


async def test_a_small_charge_passes_while_a_large_one_waits_for_room() -> None:
    budget = ByteBudget(1000, headroom=100, small=10)
    async with budget.reserve(800):
        large = asyncio.create_task(_hold(budget, 200))
        await asyncio.sleep(0)
        assert not large.done()
        async with budget.reserve(10):  # in the headroom kept for small charges
            assert budget.in_use == 810
    await large
    assert budget.in_use == 0 and budget.peak == 810


async def _hold(budget: ByteBudget, amount: int) -> None:
    async with budget.reserve(amount):
        pass


async def test_a_charge_larger_than_the_budget_never_waits() -> None:
    budget = ByteBudget(1000, headroom=100, small=10)
    with pytest.raises(NeverFits):
        async with budget.reserve(901):
            pass
    assert budget.in_use == 0


async def test_a_reservation_grows_and_shrinks_with_what_it_learns() -> None:
    budget = ByteBudget(1000, headroom=0)
    async with budget.reserve(100) as held:
        await held.resize(600)
        assert budget.in_use == 600
        assert not held.try_resize(1001)
        assert held.try_resize(50) and budget.in_use == 50
    assert budget.in_use == 0


async def test_a_waiter_that_gives_up_leaves_nothing_behind() -> None:
    budget = ByteBudget(100, headroom=0)
    async with budget.reserve(100):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await _hold(budget, 50)
    assert budget.in_use == 0 and not budget._waiters


def test_the_webhook_sizes_its_budget_from_the_memory_limit_the_chart_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.command import parse_args, settings_from

    monkeypatch.delenv("MEMORY_LIMIT_MIB", raising=False)
    assert settings_from(parse_args(["--cert-dir", "/x"])).in_flight_budget == budget_for_memory_limit(256)
    monkeypatch.setenv("MEMORY_LIMIT_MIB", "1024")
    assert settings_from(parse_args(["--cert-dir", "/x"])).in_flight_budget == budget_for_memory_limit(1024)
    assert settings_from(parse_args(["--cert-dir", "/x", "--max-in-flight-mib", "100"])).in_flight_budget == 100 * MiB


def test_a_bodys_shape_counts_the_arrays_and_objects_it_opens() -> None:
    body = b'{"a":[1,{"b":[]}],"c":"{[:,"}'
    cost, opens = body_shape(body)
    assert cost == parse_cost(body) and opens == 4 + 2  # two more inside the string: a bound
