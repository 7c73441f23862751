"""KIP-253 positions over classic heartbeats: what the group coordinator keeps and answers."""

from __future__ import annotations

from kafka_ext.coordinator.group.classic_group import ClassicGroup, GroupState

A0, A1, A2 = ("orders", 0), ("orders", 1), ("orders", 2)


def test_a_member_learns_the_positions_others_report_for_what_it_waits_on() -> None:
    group = ClassicGroup("g", 0)
    # b reads new partition 2 and waits on 0 and 1: nothing known yet.
    answered, asked = group.exchange_positions("b", {}, frozenset({A0, A1}))
    assert answered == {A0: -1, A1: -1} and asked == {A0, A1}
    # a owns 0 and 1; its heartbeat is told to report them, and then does.
    answered, asked = group.exchange_positions("a", {}, frozenset())
    assert answered == {} and asked == {A0, A1}
    group.exchange_positions("a", {A0: 40, A1: 7}, frozenset())
    answered, _ = group.exchange_positions("b", {A2: 3}, frozenset({A0, A1}))
    assert answered == {A0: 40, A1: 7}


def test_positions_are_forgotten_with_the_generation_and_the_member() -> None:
    group = ClassicGroup("g", 0)
    group.exchange_positions("b", {}, frozenset({A0}))
    group.exchange_positions("a", {A0: 40}, frozenset())
    group.transition_to(GroupState.PREPARING_REBALANCE, 0)
    group.init_next_generation(0)  # partitions may change owners: ask again
    answered, asked = group.exchange_positions("b", {}, frozenset({A0}))
    assert answered == {A0: -1} and asked == {A0}
    group.exchange_positions("b", {}, frozenset())  # b stopped waiting
    assert group.exchange_positions("a", {}, frozenset()) == ({}, frozenset())
    group.exchange_positions("b", {}, frozenset({A0}))
    group.remove("b")
    assert group.exchange_positions("a", {}, frozenset())[1] == frozenset()
