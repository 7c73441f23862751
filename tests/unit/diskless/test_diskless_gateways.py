"""The produce-gateway rule of KIP-1164 ("Reducing multi-DC commit operations").

The proposal's six scenarios: 3 racks, 12 diskless coordinators (DCs), 3 to 108 brokers. Brokers
are numbered 0..n-1 in racks a, b, c in turn; coordinator c is led by broker c % n, as the
round-robin placement of `__diskless_metadata` partitions puts them.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_ext.diskless.gateways import gateways_per_rack, produce_gateways

RACKS = ("a", "b", "c")
COORDINATORS = list(range(12))


def _cluster(n_brokers: int) -> tuple[list[tuple[int, str | None]], dict[int, int]]:
    brokers: list[tuple[int, str | None]] = [(n, RACKS[n % 3]) for n in range(n_brokers)]
    leaders = {c: c % n_brokers for c in COORDINATORS}
    return brokers, leaders


# (brokers, gateways per DC per rack, the most DCs one broker is gateway for): the proposal's
# scenarios 1-6.
SCENARIOS = [(3, 1, 12), (6, 1, 6), (12, 1, 3), (24, 1, 2), (36, 1, 1), (108, 3, 1)]


@pytest.mark.parametrize(("n_brokers", "per_rack", "max_load"), SCENARIOS)
def test_the_proposal_scenarios_give_its_gateway_counts_and_loads(
        n_brokers: int, per_rack: int, max_load: int) -> None:
    brokers, leaders = _cluster(n_brokers)
    rack_of = dict(brokers)
    assert gateways_per_rack(n_brokers, len(COORDINATORS), len(RACKS)) == per_rack
    gateways = produce_gateways(brokers, COORDINATORS, leaders)
    assert sorted(gateways) == COORDINATORS
    for nodes in gateways.values():
        assert len(set(nodes)) == len(nodes)
        assert Counter(rack_of[n] for n in nodes) == dict.fromkeys(RACKS, per_rack)
    load = Counter(n for nodes in gateways.values() for n in nodes)
    assert max(load.values()) == max_load
    # Even: no broker carries more than one coordinator above another (when all are used).
    if len(load) == n_brokers:
        assert max(load.values()) - min(load.values()) <= 1


@pytest.mark.parametrize(("n_brokers", "per_rack", "max_load"), SCENARIOS)
def test_a_coordinators_own_broker_is_its_gateway_in_its_rack(
        n_brokers: int, per_rack: int, max_load: int) -> None:
    brokers, leaders = _cluster(n_brokers)
    gateways = produce_gateways(brokers, COORDINATORS, leaders)
    for coordinator, nodes in gateways.items():
        assert nodes[0] == leaders[coordinator]


@pytest.mark.parametrize("n_brokers", [3, 6, 12])
def test_before_saturation_a_gateway_commits_to_at_most_one_broker_per_rack(
        n_brokers: int) -> None:
    """Co-located coordinators share gateways, so a WAL object a gateway writes is committed
    to at most n_racks coordinator brokers (the proposal's bound), not to n_brokers."""
    brokers, leaders = _cluster(n_brokers)
    gateways = produce_gateways(brokers, COORDINATORS, leaders)
    served: dict[int, set[int]] = {}
    for coordinator, nodes in gateways.items():
        for node in nodes:
            served.setdefault(node, set()).add(leaders[coordinator])
    assert max(len(owners) for owners in served.values()) <= len(RACKS)
    by_leader: dict[int, set[tuple[int, ...]]] = {}
    for coordinator, nodes in gateways.items():
        by_leader.setdefault(leaders[coordinator], set()).add(tuple(sorted(nodes)))
    assert all(len(gateway_sets) == 1 for gateway_sets in by_leader.values())


def test_brokers_without_a_rack_form_one_rack() -> None:
    gateways = produce_gateways([(1, None), (2, None), (3, None), (4, None)], [0, 1],
                                {0: 1, 1: 2})
    # 4 brokers, 2 coordinators, 1 rack: two gateways each, every broker used once.
    assert gateways == {0: [1, 3], 1: [2, 4]}


def test_a_coordinator_without_a_live_leader_still_gets_gateways() -> None:
    gateways = produce_gateways([(1, "a"), (2, "b")], [0, 1, 2], {0: 1, 1: -1})
    assert all(sorted({n % 2 for n in nodes}) == [0, 1] for nodes in gateways.values())
    assert gateways[0][0] == 1


def test_no_brokers_or_no_coordinators_give_no_gateways() -> None:
    assert produce_gateways([], [0, 1], {}) == {0: [], 1: []}
    assert produce_gateways([(1, "a")], [], {}) == {}


def test_the_answer_is_the_same_whatever_the_input_order() -> None:
    brokers, leaders = _cluster(12)
    first = produce_gateways(brokers, COORDINATORS, leaders)
    again = produce_gateways(list(reversed(brokers)), list(reversed(COORDINATORS)), leaders)
    assert first == again
