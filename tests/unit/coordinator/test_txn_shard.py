"""TransactionStateShard: request validation against replayed state, as the runtime drives it.

Each operation is applied the way CoordinatorRuntime.write applies it: the op returns records
without touching the shard, then the records are replayed at increasing offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from kafka_ext.coordinator.runtime import CoordinatorResult
from kafka_ext.coordinator.txn.metadata import MAX_PRODUCER_EPOCH, TransactionState
from kafka_ext.coordinator.txn.records import transaction_log_key, transaction_log_value
from kafka_ext.coordinator.txn.shard import TransactionStateShard
from kafka_ext.protocol.errors import ErrorCode, KafkaError

S = TransactionState
T = TypeVar("T")
NOW = 1_700_000_000_000
TIMEOUT_MS = 60_000


class Harness:
    """A shard plus a fake log offset; `run` is CoordinatorRuntime.write without the log."""

    def __init__(self) -> None:
        self.shard = TransactionStateShard(0)
        self.offset = 0
        self.written: list[tuple[bytes, bytes | None]] = []
        self._ids: Iterator[int] = iter(range(1000, 2000))

    def new_id(self) -> int:
        return next(self._ids)

    def run(self, op: Callable[[TransactionStateShard], CoordinatorResult[T]]) -> T:
        before = dict(self.shard.transactions)
        result = op(self.shard)
        assert self.shard.transactions == before, "an op changed the shard"
        for key, value in result.records:
            self.shard.replay(self.offset, -1, -1, key, value)
            self.offset += 1
        self.written += result.records
        return result.response

    def init(self, txn_id: str = "tx", expected: tuple[int, int] | None = None,
             now: int = NOW) -> Any:
        result = self.run(lambda s: s.init_producer_id(txn_id, TIMEOUT_MS, expected, now,
                                                       self.new_id))
        if not result.fenced:
            self.shard.remember_last_producer_epoch(result.metadata)
        return result

    def state(self, txn_id: str = "tx") -> Any:
        return self.shard.transactions[txn_id]


@pytest.fixture
def h() -> Harness:
    return Harness()


def _code(fn: Callable[[], object]) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        fn()
    return info.value.code


def test_first_init_allocates_an_id_at_epoch_zero_and_logs_it(h: Harness) -> None:
    result = h.init()
    assert (result.metadata.producer_id, result.metadata.producer_epoch) == (1000, 0)
    assert h.state().state == S.EMPTY
    assert h.written[-1][0] == transaction_log_key("tx")


def test_second_init_keeps_the_id_and_bumps_the_epoch(h: Harness) -> None:
    h.init()
    result = h.init()
    assert (result.metadata.producer_id, result.metadata.producer_epoch) == (1000, 1)


def test_transaction_lifecycle_commit(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 1)}), NOW + 5))
    assert h.state().partitions == {("a", 0), ("a", 1)}
    assert h.state().txn_start_timestamp_ms == NOW
    ended = h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW + 10))
    assert ended.metadata.state == S.PREPARE_COMMIT == h.state().state
    done = h.run(lambda s: s.complete_transaction("tx", pid, 0, NOW + 20))
    assert done.state == S.COMPLETE_COMMIT and h.state().partitions == frozenset()


def test_adding_partitions_already_in_the_transaction_writes_nothing(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0), ("b", 0)}), NOW))
    count = len(h.written)
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    assert len(h.written) == count


def test_end_txn_retry_after_completion_succeeds_without_writing(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    h.run(lambda s: s.end_transaction("tx", pid, 0, False, NOW))
    h.run(lambda s: s.complete_transaction("tx", pid, 0, NOW))
    count = len(h.written)
    assert h.run(lambda s: s.end_transaction("tx", pid, 0, False, NOW)).metadata is None
    assert len(h.written) == count
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.INVALID_TXN_STATE)


def test_end_txn_while_markers_are_pending_is_concurrent_transactions(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.CONCURRENT_TRANSACTIONS)
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, False, NOW))) == (
        ErrorCode.INVALID_TXN_STATE)
    assert _code(lambda: h.run(lambda s: s.add_partitions(
        "tx", pid, 0, frozenset({("b", 0)}), NOW))) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert _code(h.init) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_end_txn_without_a_transaction_is_invalid_txn_state(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.INVALID_TXN_STATE)


def test_requests_from_a_fenced_epoch_or_another_producer_id_are_refused(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.init()  # a second producer: epoch 1
    tp = frozenset({("a", 0)})
    assert _code(lambda: h.run(lambda s: s.add_partitions("tx", pid, 0, tp, NOW))) == (
        ErrorCode.PRODUCER_FENCED)
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.PRODUCER_FENCED)
    assert _code(lambda: h.run(lambda s: s.add_partitions("tx", pid + 1, 1, tp, NOW))) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert _code(lambda: h.run(lambda s: s.add_partitions("nope", pid, 1, tp, NOW))) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)


def test_init_during_an_ongoing_transaction_fences_and_aborts_it_first(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    result = h.init()
    assert result.fenced
    assert (result.metadata.state, result.metadata.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert result.metadata.partitions == {("a", 0)}
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.PRODUCER_FENCED)
    h.run(lambda s: s.complete_transaction("tx", pid, 1, NOW))
    again = h.init()  # the client's retry after CONCURRENT_TRANSACTIONS
    assert not again.fenced and again.metadata.producer_epoch == 2


def test_kip360_init_with_the_current_epoch_bumps_and_a_retry_is_answered_the_same(
        h: Harness) -> None:
    pid = h.init().metadata.producer_id
    bumped = h.init(expected=(pid, 0))
    assert bumped.metadata.producer_epoch == 1
    retried = h.init(expected=(pid, 0))
    assert retried.metadata.producer_epoch == 1


def test_kip360_init_from_a_producer_fenced_by_a_new_one_is_fenced(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.init()  # a new producer (no expected epoch): last epoch forgotten
    assert _code(lambda: h.init(expected=(pid, 0))) == ErrorCode.PRODUCER_FENCED
    assert _code(lambda: h.init(expected=(pid + 7, 1))) == ErrorCode.PRODUCER_FENCED


def test_kip360_init_for_an_unknown_id_starts_at_epoch_zero(h: Harness) -> None:
    result = h.init(expected=(555, 3))
    assert (result.metadata.producer_id, result.metadata.producer_epoch) == (1000, 0)


def test_exhausted_epoch_rotates_to_a_new_producer_id(h: Harness) -> None:
    h.init()
    exhausted = h.state().transition_to(S.EMPTY, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    h.shard.replay(99, -1, -1, transaction_log_key("tx"), transaction_log_value(exhausted))
    result = h.init()
    assert (result.metadata.producer_id, result.metadata.producer_epoch) == (1001, 0)
    assert result.metadata.previous_producer_id == 1000


def test_timed_out_transaction_is_aborted_under_a_bumped_epoch(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    assert h.run(lambda s: s.abort_timed_out("tx", pid, 0, NOW + TIMEOUT_MS)) is None
    aborting = h.run(lambda s: s.abort_timed_out("tx", pid, 0, NOW + TIMEOUT_MS + 1))
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert _code(lambda: h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW))) == (
        ErrorCode.PRODUCER_FENCED)
    # A second check (the same epoch is gone) changes nothing.
    count = len(h.written)
    assert h.run(lambda s: s.abort_timed_out("tx", pid, 0, NOW + 10**6)) is None
    assert len(h.written) == count


def test_end_txn_logged_before_the_timeout_check_wins_over_it(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    # The abort timer picked the transaction, but the producer's EndTxn was logged first.
    h.run(lambda s: s.end_transaction("tx", pid, 0, True, NOW + TIMEOUT_MS + 1))
    count = len(h.written)
    assert h.run(lambda s: s.abort_timed_out("tx", pid, 0, NOW + TIMEOUT_MS + 2)) is None
    assert len(h.written) == count
    assert (h.state().state, h.state().producer_epoch) == (S.PREPARE_COMMIT, 0)


def test_complete_after_another_outcome_writes_nothing(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    assert h.run(lambda s: s.complete_transaction("tx", pid, 0, NOW)) is None


def test_idle_ids_expire_with_tombstones_but_open_transactions_do_not(h: Harness) -> None:
    h.init("idle", now=NOW)
    busy = h.init("busy", now=NOW).metadata
    h.run(lambda s: s.add_partitions("busy", busy.producer_id, 0, frozenset({("a", 0)}), NOW))
    expired = h.run(lambda s: s.expire_transactional_ids(NOW + 1000, 1000))
    assert expired == ["idle"]
    assert h.written[-1] == (transaction_log_key("idle"), None)
    assert set(h.shard.transactions) == {"busy"}


def test_verify_only_reports_which_partitions_are_in_the_transaction(h: Harness) -> None:
    pid = h.init().metadata.producer_id
    h.run(lambda s: s.add_partitions("tx", pid, 0, frozenset({("a", 0)}), NOW))
    assert h.shard.verify_partitions("tx", pid, 0, [("a", 0), ("a", 1)]) == {
        ("a", 0): ErrorCode.NONE, ("a", 1): ErrorCode.INVALID_TXN_STATE}
    assert _code(lambda: h.shard.verify_partitions("tx", pid, 1, [("a", 0)])) == (
        ErrorCode.PRODUCER_FENCED)


def test_replaying_the_written_log_rebuilds_the_same_state(h: Harness) -> None:
    pid = h.init("x").metadata.producer_id
    h.run(lambda s: s.add_partitions("x", pid, 0, frozenset({("a", 0), ("b", 3)}), NOW))
    h.init("y")
    h.run(lambda s: s.end_transaction("x", pid, 0, True, NOW))
    fresh = TransactionStateShard(0)
    for offset, (key, value) in enumerate(h.written):
        fresh.replay(offset, -1, -1, key, value)
    assert fresh.transactions.keys() == h.shard.transactions.keys()
    for txn_id, meta in h.shard.transactions.items():
        assert fresh.transactions[txn_id].state == meta.state
        assert fresh.transactions[txn_id].partitions == meta.partitions
        assert fresh.transactions[txn_id].producer_epoch == meta.producer_epoch


def test_unreadable_records_are_skipped(h: Harness) -> None:
    h.shard.replay(0, -1, -1, b"\x00\x09junk", b"x")
    h.shard.replay(1, -1, -1, transaction_log_key("tx"), b"\x00")
    assert h.shard.transactions == {}
