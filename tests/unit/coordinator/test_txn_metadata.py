"""TransactionMetadata: Kafka's transaction states and the moves between them (pure)."""

from __future__ import annotations

import pytest

from kafka_ext.coordinator.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError

S = TransactionState
NOW = 1_700_000_000_000


def _meta(state: TransactionState = S.EMPTY, epoch: int = 3, **changes: object
          ) -> TransactionMetadata:
    base = TransactionMetadata("tx", 1000, epoch, 60_000, state)
    return base.transition_to(state, **changes) if changes else base


def test_state_values_are_kafkas_transaction_status_numbers() -> None:
    assert [(s.display_name, int(s)) for s in S] == [
        ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3),
        ("CompleteCommit", 4), ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7)]
    assert S.from_display_name("PrepareAbort") == S.PREPARE_ABORT
    assert S.from_display_name("Nope") is None


@pytest.mark.parametrize("target", list(S))
def test_every_state_can_only_be_entered_from_its_listed_previous_states(
        target: TransactionState) -> None:
    for source in S:
        meta = TransactionMetadata("tx", 1, 0, 1000, source)
        if source in VALID_PREVIOUS_STATES[target]:
            assert meta.transition_to(target).state == target
        else:
            with pytest.raises(KafkaError) as info:
                meta.transition_to(target)
            assert info.value.code == ErrorCode.INVALID_TXN_STATE


def test_new_producer_gets_epoch_zero_from_a_fresh_id() -> None:
    fresh = TransactionMetadata.new("tx", 7, 30_000, NOW)
    bumped = fresh.prepare_increment_producer_epoch(30_000, None, NOW + 1)
    assert (bumped.producer_id, bumped.producer_epoch, bumped.state) == (7, 0, S.EMPTY)
    assert bumped.txn_last_update_timestamp_ms == NOW + 1


def test_reinitialising_without_an_expected_epoch_bumps_and_forgets_the_last_epoch() -> None:
    bumped = _meta(S.COMPLETE_COMMIT, epoch=3).prepare_increment_producer_epoch(5000, None, NOW)
    assert (bumped.producer_epoch, bumped.last_producer_epoch, bumped.txn_timeout_ms) == (4, -1,
                                                                                          5000)
    assert bumped.partitions == frozenset() and bumped.txn_start_timestamp_ms == -1


def test_kip360_bump_with_the_current_epoch_records_it_as_the_last_epoch() -> None:
    bumped = _meta(epoch=3).prepare_increment_producer_epoch(5000, 3, NOW)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (4, 3)


def test_kip360_retry_with_the_last_epoch_returns_the_same_epoch() -> None:
    bumped = _meta(epoch=3).prepare_increment_producer_epoch(5000, 3, NOW)
    again = bumped.prepare_increment_producer_epoch(5000, 3, NOW)
    assert (again.producer_epoch, again.last_producer_epoch) == (4, 3)


def test_kip360_bump_from_a_stale_epoch_is_fenced() -> None:
    with pytest.raises(KafkaError) as info:
        _meta(epoch=5).prepare_increment_producer_epoch(5000, 2, NOW)
    assert info.value.code == ErrorCode.PRODUCER_FENCED


def test_rotation_moves_to_a_new_producer_id_at_epoch_zero_and_keeps_the_old_one() -> None:
    old = _meta(S.COMPLETE_ABORT, epoch=MAX_PRODUCER_EPOCH - 1)
    assert is_epoch_exhausted(old.producer_epoch)
    rotated = old.prepare_producer_id_rotation(2000, 5000, NOW, record_last_epoch=True)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id) == (
        2000, 0, 1000)
    assert rotated.last_producer_epoch == MAX_PRODUCER_EPOCH - 1
    assert rotated.state == S.EMPTY


def test_first_add_starts_the_transaction_clock_and_later_adds_keep_it() -> None:
    ongoing = _meta().prepare_add_partitions(frozenset({("a", 0)}), NOW)
    assert ongoing.state == S.ONGOING and ongoing.txn_start_timestamp_ms == NOW
    more = ongoing.prepare_add_partitions(frozenset({("b", 1)}), NOW + 50)
    assert more.partitions == {("a", 0), ("b", 1)}
    assert (more.txn_start_timestamp_ms, more.txn_last_update_timestamp_ms) == (NOW, NOW + 50)


def test_commit_goes_through_prepare_then_complete_and_clears_the_partitions() -> None:
    ongoing = _meta().prepare_add_partitions(frozenset({("a", 0)}), NOW)
    prepared = ongoing.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 1)
    assert prepared.partitions == {("a", 0)}
    done = prepared.prepare_complete(NOW + 2)
    assert (done.state, done.partitions, done.txn_start_timestamp_ms) == (
        S.COMPLETE_COMMIT, frozenset(), NOW)
    assert done.producer_epoch == ongoing.producer_epoch  # transaction version 1: no bump


def test_fencing_an_ongoing_transaction_bumps_the_epoch_before_prepare_abort() -> None:
    ongoing = _meta(epoch=4).prepare_add_partitions(frozenset({("a", 0)}), NOW)
    fencing = ongoing.prepare_fence_producer_epoch()
    assert (fencing.state, fencing.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 5)
    aborting = fencing.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 5)
    assert aborting.prepare_complete(NOW).state == S.COMPLETE_ABORT


def test_a_fence_cannot_commit() -> None:
    fencing = _meta().prepare_add_partitions(frozenset({("a", 0)}), NOW)
    with pytest.raises(KafkaError):
        fencing.prepare_fence_producer_epoch().prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)


def test_complete_is_refused_outside_a_prepare_state() -> None:
    with pytest.raises(KafkaError) as info:
        _meta(S.ONGOING).prepare_complete(NOW)
    assert info.value.code == ErrorCode.INVALID_TXN_STATE


def test_timed_out_only_for_ongoing_transactions_past_their_timeout() -> None:
    ongoing = _meta().prepare_add_partitions(frozenset({("a", 0)}), NOW)
    assert not ongoing.timed_out(NOW + 60_000)
    assert ongoing.timed_out(NOW + 60_001)
    assert not ongoing.prepare_abort_or_commit(S.PREPARE_ABORT, NOW).timed_out(NOW + 10**9)
