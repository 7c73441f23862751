"""KIP-253's gate on the consumer: a new partition opens once every prior partition's position
(ours, the group's through Heartbeat, or committed) reached the end of its pre-expansion epoch;
and what our Heartbeats ask and report."""

from __future__ import annotations

from kafka_ext.client.expansion import ExpansionGate
from kafka_ext.client.metadata import TopicPartition


def tp(partition: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, partition)


def always(_: TopicPartition) -> bool:
    return True


def test_a_partition_without_thresholds_is_not_gated() -> None:
    gate = ExpansionGate()
    gate.add(tp(2), {})
    gate.add(tp(3), {0: 0, 1: -1})  # epochs that ended before any record, or unknown
    assert not gate.pending


def test_gate_opens_when_own_prior_positions_reach_their_thresholds() -> None:
    gate = ExpansionGate()
    gate.add(tp(2), {0: 10, 1: 5})
    assert gate.update({tp(0): 10, tp(1): 4, tp(2): 0}, always) == []
    assert gate.is_gated(tp(2))
    assert gate.update({tp(0): 10, tp(1): 5, tp(2): 0}, always) == [tp(2)]
    assert not gate.pending


def test_gate_waits_for_positions_the_group_reports() -> None:
    gate = ExpansionGate()
    gate.add(tp(2), {0: 10, 1: 5})
    own = {tp(2): 0}
    assert gate.wanted(own) == {tp(0), tp(1)}
    gate.absorb_heartbeat({"t": [(0, False, 10), (1, False, -1)]})
    assert gate.update(own, always) == []
    assert gate.wanted(own) == {tp(1)}  # partition 0's threshold is met for good
    gate.learn(tp(1), 7)  # e.g. the group's committed offset
    assert gate.update(own, always) == [tp(2)]


def test_positions_never_move_back() -> None:
    gate = ExpansionGate()
    gate.learn(tp(0), 9)
    gate.learn(tp(0), 4)
    gate.learn(tp(0), -1)
    assert gate.known_positions == {tp(0): 9}


def test_a_prior_partition_that_is_gone_or_none_is_not_waited_on() -> None:
    gate = ExpansionGate()
    gate.add(tp(3), {0: 10, 2: 10})
    assert gate.update({tp(0): 10}, lambda t: t != tp(2)) == [tp(3)]


def test_heartbeat_asks_for_priors_owned_elsewhere_and_reports_what_was_asked() -> None:
    gate = ExpansionGate()
    gate.add(tp(2), {0: 10, 1: 5})
    own = {tp(1): 3, tp(2): 0}
    gate.absorb_heartbeat({"t": [(1, True, -1)], "other": [(0, True, -1)]})
    entries = gate.heartbeat_entries(own)
    # ours: the position of partition 1 (asked, owned); need partition 0 (a prior, not owned)
    assert entries == {"t": [(0, True, -1), (1, False, 3)]}


def test_heartbeat_carries_one_position_when_there_is_nothing_to_exchange() -> None:
    gate = ExpansionGate()
    assert gate.heartbeat_entries({tp(4): 12, tp(1): 7}) == {"t": [(1, False, 7)]}
    assert gate.heartbeat_entries({}) == {}


def test_an_answer_replaces_what_the_coordinator_asks_for() -> None:
    gate = ExpansionGate()
    gate.absorb_heartbeat({"t": [(0, True, -1), (1, True, 4)]})
    assert gate.asked == {tp(0), tp(1)} and gate.known_positions == {tp(1): 4}
    gate.absorb_heartbeat({})
    assert gate.asked == set()


def test_clear_forgets_the_old_generation() -> None:
    gate = ExpansionGate()
    gate.add(tp(2), {0: 1})
    gate.learn(tp(0), 0)
    gate.absorb_heartbeat({"t": [(0, True, -1)]})
    gate.clear()
    assert not gate.pending and not gate.known_positions and not gate.asked
