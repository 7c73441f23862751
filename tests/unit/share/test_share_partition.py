"""SharePartition: acquisition, acknowledgement, locks and the start offset (KIP-932)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.persister import DeliveryState, ShareState, StateBatch
from kafka_ext.share.share_partition import (
    AcknowledgeType,
    AcquiredRange,
    BatchInfo,
    SharePartition,
)

ACCEPT, RELEASE, REJECT, GAP, RENEW = (int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE),
                                       int(AcknowledgeType.REJECT), int(AcknowledgeType.GAP),
                                       int(AcknowledgeType.RENEW))
LOCK_MS = 1000


def share_partition(start: int = 0, limit: int = 3, max_in_flight: int = 100) -> SharePartition:
    return SharePartition(0, start, lock_duration_ms=LOCK_MS, delivery_count_limit=limit,
                          max_in_flight_records=max_in_flight)


def batches(*ranges: tuple[int, int]) -> list[BatchInfo]:
    return [BatchInfo(first, last) for first, last in ranges]


def acknowledge(sp: SharePartition, member: str, acks: list[tuple[int, int, list[int]]],
                now: float = 0.0) -> None:
    plan = sp.plan_acknowledgement(member, acks, now)
    sp.complete(plan)


def test_whole_batches_are_acquired_with_a_delivery_count_of_one() -> None:
    sp = share_partition()
    acquired = sp.acquire("m1", batches((0, 4), (5, 9)), max_records=100, now_ms=0)
    assert acquired == [AcquiredRange(0, 9, 1)]
    assert (sp.start_offset, sp.end_offset) == (0, 10)
    assert sp.acquire("m2", batches((0, 4), (5, 9)), 100, 0) == []  # locked for m1


def test_max_records_stops_at_a_batch_boundary() -> None:
    sp = share_partition()
    assert sp.acquire("m1", batches((0, 4), (5, 9), (10, 14)), max_records=6, now_ms=0) == [
        AcquiredRange(0, 9, 1)]
    assert sp.end_offset == 10
    assert sp.next_fetch_offset() == 10


def test_the_in_flight_limit_caps_new_records() -> None:
    sp = share_partition(max_in_flight=10)
    assert sp.acquire("m1", batches((0, 9), (10, 19)), 100, 0) == [AcquiredRange(0, 9, 1)]
    assert not sp.can_acquire()
    acknowledge(sp, "m1", [(0, 9, [ACCEPT])])
    assert sp.start_offset == 10 and sp.can_acquire()


def test_accepted_records_move_the_start_offset_and_leave_the_cache() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 9)), 100, 0)
    acknowledge(sp, "m1", [(0, 3, [ACCEPT])])
    assert sp.start_offset == 4
    acknowledge(sp, "m1", [(6, 9, [ACCEPT])])
    assert sp.start_offset == 4  # 4 and 5 are still acquired
    acknowledge(sp, "m1", [(4, 5, [REJECT])])
    assert (sp.start_offset, sp.end_offset, sp.runs) == (10, 10, [])


def test_per_offset_types_split_a_batch() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 3)), 100, 0)
    acknowledge(sp, "m1", [(0, 3, [ACCEPT, RELEASE, REJECT, GAP])])
    assert sp.start_offset == 1
    assert [(r.first, r.last, r.state) for r in sp.runs] == [
        (1, 1, DeliveryState.AVAILABLE), (2, 3, DeliveryState.ARCHIVED)]
    # The released record is delivered again, with its count raised.
    assert sp.acquire("m2", batches((0, 3)), 100, 0) == [AcquiredRange(1, 1, 2)]


def test_released_records_are_archived_at_the_delivery_count_limit() -> None:
    sp = share_partition(limit=2)
    sp.acquire("m1", batches((0, 0)), 100, 0)
    acknowledge(sp, "m1", [(0, 0, [RELEASE])])
    assert sp.acquire("m1", batches((0, 0)), 100, 0) == [AcquiredRange(0, 0, 2)]
    acknowledge(sp, "m1", [(0, 0, [RELEASE])])
    assert (sp.start_offset, sp.runs) == (1, [])


def test_an_expired_lock_makes_records_available_again() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, now_ms=0)
    assert sp.expire_locks(LOCK_MS - 1) == []
    assert sp.expire_locks(LOCK_MS) == [StateBatch(0, 4, DeliveryState.AVAILABLE, 1)]
    with pytest.raises(KafkaError) as late:
        sp.plan_acknowledgement("m1", [(0, 4, [ACCEPT])], LOCK_MS)
    assert late.value.code == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("m2", batches((0, 4)), 100, LOCK_MS) == [AcquiredRange(0, 4, 2)]


def test_renew_extends_the_lock_without_a_write() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, now_ms=0)
    plan = sp.plan_acknowledgement("m1", [(0, 4, [RENEW])], now_ms=900)
    assert not plan.needs_persisting
    sp.complete(plan)
    assert sp.expire_locks(LOCK_MS) == []
    assert sp.expire_locks(900 + LOCK_MS) != []


@pytest.mark.parametrize("acks", [
    [(0, 4, [ACCEPT])],          # member m2 never acquired them
    [(3, 7, [ACCEPT])],          # past the end offset
    [(0, 0, [ACCEPT]), (0, 1, [ACCEPT])],  # overlapping
])
def test_acknowledging_what_the_member_does_not_hold_changes_nothing(
        acks: list[tuple[int, int, list[int]]]) -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, 0)
    before = [(r.first, r.last, r.state, r.member_id) for r in sp.runs]
    with pytest.raises(KafkaError) as refused:
        sp.plan_acknowledgement("m2" if acks[0][1] == 4 else "m1", acks, 0)
    assert refused.value.code in (ErrorCode.INVALID_RECORD_STATE, ErrorCode.INVALID_REQUEST)
    assert [(r.first, r.last, r.state, r.member_id) for r in sp.runs] == before


def test_a_malformed_acknowledgement_is_an_invalid_request() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, 0)
    for acks in ([(0, 4, [ACCEPT, ACCEPT])], [(4, 0, [ACCEPT])], [(0, 4, [9])]):
        with pytest.raises(KafkaError) as refused:
            sp.plan_acknowledgement("m1", acks, 0)
        assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_a_pending_acknowledgement_is_neither_acquired_nor_expired_nor_acknowledged_twice() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, 0)
    plan = sp.plan_acknowledgement("m1", [(0, 4, [RELEASE])], 0)
    assert plan.state_batches == [StateBatch(0, 4, DeliveryState.AVAILABLE, 1)]
    assert sp.expire_locks(10 * LOCK_MS) == []
    assert sp.acquire("m2", batches((0, 4)), 100, 0) == []
    with pytest.raises(KafkaError):
        sp.plan_acknowledgement("m1", [(0, 4, [ACCEPT])], 0)
    sp.abandon(plan)  # the write failed: still m1's
    assert sp.acquired_by("m1") == 5
    acknowledge(sp, "m1", [(0, 4, [ACCEPT])])
    assert sp.start_offset == 5


def test_the_plan_says_where_the_start_offset_goes() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4), (5, 9)), 100, 0)
    acknowledge(sp, "m1", [(5, 9, [ACCEPT])])
    plan = sp.plan_acknowledgement("m1", [(0, 4, [ACCEPT])], 0)
    assert sp.start_after(plan) == (10, 0)
    sp.complete(plan)
    assert sp.start_offset == 10


def test_a_plan_made_before_another_was_applied_still_writes_the_newest_start() -> None:
    """Two acknowledgements in flight: the second one's write must not carry the start offset
    the state had when it was planned (that would bring the first one's records back)."""
    sp = share_partition()
    sp.acquire("m1", batches((0, 4), (5, 9)), 100, 0)
    first = sp.plan_acknowledgement("m1", [(0, 4, [ACCEPT])], 0)
    second = sp.plan_acknowledgement("m1", [(7, 9, [ACCEPT])], 0)
    sp.complete(first)  # written and applied first
    assert sp.start_after(second) == (5, 3)


def test_skipped_batches_are_archived_and_gaps_in_the_log_too() -> None:
    sp = share_partition()
    acquired = sp.acquire("m1", [BatchInfo(0, 1), BatchInfo(2, 2, skip=True), BatchInfo(5, 6)],
                          100, 0)
    assert acquired == [AcquiredRange(0, 1, 1), AcquiredRange(5, 6, 1)]
    assert [(r.first, r.last, r.state) for r in sp.runs] == [
        (0, 1, DeliveryState.ACQUIRED), (2, 4, DeliveryState.ARCHIVED),
        (5, 6, DeliveryState.ACQUIRED)]
    acknowledge(sp, "m1", [(0, 1, [ACCEPT])])
    assert sp.start_offset == 5


def test_a_member_that_leaves_releases_only_its_own_records() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 4)), 100, 0)
    sp.acquire("m2", batches((5, 9)), 100, 0)
    assert sp.release_member("m1") == [StateBatch(0, 4, DeliveryState.AVAILABLE, 1)]
    assert sp.acquired_by("m2") == 5


def test_the_log_start_moving_past_the_start_offset_drops_what_it_deleted() -> None:
    sp = share_partition()
    sp.acquire("m1", batches((0, 9)), 100, 0)
    assert sp.move_start_to(5)
    assert (sp.start_offset, sp.runs[0].first) == (5, 5)
    assert not sp.move_start_to(3)


def test_state_is_rebuilt_from_what_was_persisted() -> None:
    state = ShareState(3, 10, [StateBatch(12, 13, DeliveryState.ACKNOWLEDGED, 1),
                               StateBatch(14, 15, DeliveryState.AVAILABLE, 2)])
    sp = SharePartition.from_state(state, lock_duration_ms=LOCK_MS, delivery_count_limit=5,
                                   max_in_flight_records=100)
    assert (sp.state_epoch, sp.start_offset, sp.end_offset) == (3, 10, 16)
    # 10-11 were acquired, unacknowledged, when the old leader went: available again.
    assert sp.acquire("m", batches((10, 11), (12, 13), (14, 15)), 100, 0) == [
        AcquiredRange(10, 11, 1), AcquiredRange(14, 15, 3)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["acquire", "ack", "expire", "leave"]),
                          st.sampled_from(["a", "b"]), st.integers(0, 3),
                          st.integers(1, 4)), max_size=40))
def test_runs_always_cover_the_in_flight_window_exactly(
        steps: list[tuple[str, str, int, int]]) -> None:
    """Whatever happens, the runs tile [start, end) with no gap or overlap, and the start
    offset sits on the first incomplete offset."""
    sp = share_partition(limit=3, max_in_flight=20)
    log = [(i * 4, i * 4 + 3) for i in range(20)]
    now = 0.0
    for action, member, kind, size in steps:
        now += 300
        if action == "acquire":
            sp.acquire(member, (BatchInfo(f, la) for f, la in log if la >= sp.next_fetch_offset()),
                       size * 3, now)
        elif action == "ack":
            held = [r for r in sp.runs if r.state == DeliveryState.ACQUIRED
                    and r.member_id == member]
            if held:
                run = held[0]
                sp.complete(sp.plan_acknowledgement(
                    member, [(run.first, run.last, [[ACCEPT, RELEASE, REJECT, GAP][kind]])], now))
        elif action == "expire":
            sp.expire_locks(now)
        else:
            sp.release_member(member)
        at = sp.start_offset
        for run in sp.runs:
            assert run.first == at and run.last >= run.first
            at = run.last + 1
        assert at == sp.end_offset
        assert not sp.runs or sp.runs[0].state not in (DeliveryState.ACKNOWLEDGED,
                                                       DeliveryState.ARCHIVED)
        assert all(r.delivery_count <= 3 for r in sp.runs)
