"""Producer state of a partition log: sequences, duplicates, epochs, transactions, snapshots,
recovery after an unclean stop, truncation and retention (Kafka's ProducerStateManager rules)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import iter_batch_headers
from kafka_ext.protocol.records import (
    ControlRecordType,
    build_batch,
    build_end_txn_marker,
    records_for,
)
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.producer_state import (
    MAX_SEQUENCE,
    AppendOrigin,
    BatchMetadata,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
)
from kafka_ext.storage.transaction_index import AbortedTxn

TIMESTAMP_MS = 1_000


@pytest.fixture(autouse=True, scope="module")
def _compiled_schemas() -> None:
    registry()  # compile once per module, not inside the first test's timing


def _open(tmp_path: Path, clock, **config: int) -> UnifiedLog:
    return UnifiedLog(tmp_path / "t-0", LogConfig(**config), clock_ms=clock)


def _batch(seq: int, count: int = 2, *, pid: int = 7, epoch: int = 0, txn: bool = False) -> bytes:
    return build_batch(
        records_for([b"v"] * count, timestamp_ms=TIMESTAMP_MS),
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    )


def _marker(pid: int, *, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_end_txn_marker(
        ControlRecordType.COMMIT if committed else ControlRecordType.ABORT,
        producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
        timestamp_ms=TIMESTAMP_MS,
    )


def _append(log: UnifiedLog, batch: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    info = log.append_as_leader(batch, 0, origin=origin)
    log.high_watermark = log.log_end_offset
    return info.first_offset


def _state(log: UnifiedLog) -> dict[int, tuple[int, int, int, int, list[BatchMetadata]]]:
    return {
        pid: (e.producer_epoch, e.coordinator_epoch, e.last_timestamp_ms,
              e.current_txn_first_offset, list(e.batches))
        for pid, e in log.producer_state.active_producers().items()
    }


def _error(log: UnifiedLog, batch: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> ErrorCode:
    leo = log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(batch, 0, origin=origin)
    assert log.log_end_offset == leo  # nothing appended
    return caught.value.code


# -- sequences, duplicates, epochs


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    assert _append(log, _batch(42)) == 0
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.last_sequence == 43 and entry.producer_epoch == 0


def test_in_sequence_batches_append_and_a_gap_is_out_of_order(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    assert [_append(log, _batch(seq)) for seq in (0, 2, 4)] == [0, 2, 4]
    assert _error(log, _batch(7)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _append(log, _batch(6)) == 6


def test_duplicate_of_each_of_the_last_five_batches_gets_its_original_offsets(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    offsets = [_append(log, _batch(2 * n)) for n in range(6)]
    leo = log.log_end_offset
    for n in range(1, 6):
        info = log.append_as_leader(_batch(2 * n), 0)
        assert (info.first_offset, info.last_offset) == (offsets[n], offsets[n] + 1)
    assert log.log_end_offset == leo
    # The first batch is no longer remembered: its sequence is simply out of order now.
    assert _error(log, _batch(0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    headers = [h for _, h in iter_batch_headers(log.read(0, 1 << 20).records[0])]
    assert [h.base_sequence for h in headers] == [0, 2, 4, 6, 8, 10]


def test_older_epoch_is_invalid_producer_epoch(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, epoch=3))
    assert _error(log, _batch(2, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_sequence_zero(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, epoch=0))
    assert _error(log, _batch(2, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    _append(log, _batch(0, epoch=1))
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1
    # The old epoch's batch is forgotten: sending it again is fenced, not a duplicate.
    assert _error(log, _batch(0, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_to_zero_after_max_int(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(MAX_SEQUENCE - 1, count=2))
    assert _append(log, _batch(0, count=1)) == 2
    assert log.producer_state.last_entry(7).last_sequence == 0  # type: ignore[union-attr]


def test_producers_are_independent(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1))
    _append(log, _batch(0, pid=2))
    assert _append(log, _batch(2, pid=1)) == 4
    assert sorted(_state(log)) == [1, 2]


def test_coordinator_appends_skip_sequences_but_not_epochs(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    coordinator = AppendOrigin.COORDINATOR
    txn_batch = build_batch(records_for([b"k"], timestamp_ms=TIMESTAMP_MS), producer_id=9,
                            producer_epoch=4, is_transactional=True)
    _append(log, txn_batch, coordinator)
    _append(log, txn_batch, coordinator)  # no sequence: never a duplicate
    older = build_batch(records_for([b"k"], timestamp_ms=TIMESTAMP_MS), producer_id=9,
                        producer_epoch=3, is_transactional=True)
    assert _error(log, older, coordinator) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2


# -- transactions and the last stable offset


def test_transactional_batch_starts_a_transaction_that_holds_back_the_lso(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1))
    first = _append(log, _batch(0, pid=2, txn=True))
    _append(log, _batch(2, pid=2, txn=True))
    _append(log, _batch(2, pid=1))
    assert log.high_watermark == 8 and log.last_stable_offset == first == 2
    assert log.producer_state.ongoing_transactions() == {2: 2}
    commit_offset = _append(log, _marker(2, committed=True), AppendOrigin.COORDINATOR)
    assert commit_offset == 8
    assert log.last_stable_offset == log.high_watermark == 9
    assert log.aborted_transactions() == []  # a commit is not indexed


def test_lso_is_the_oldest_of_several_open_transactions(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1, txn=True))
    _append(log, _batch(0, pid=2, txn=True))
    _append(log, _marker(1, committed=False), AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == 2
    # The aborted entry records the LSO at that moment: producer 2's open transaction.
    assert log.aborted_transactions() == [AbortedTxn(1, 0, 4, 2)]
    _append(log, _marker(2, committed=True), AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == 6


def test_lso_waits_for_the_high_watermark_to_pass_the_marker(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    log.append_as_leader(_marker(7, committed=True), 0, origin=AppendOrigin.COORDINATOR)
    assert log.high_watermark == 2 and log.last_stable_offset == 0  # marker not replicated
    log.high_watermark = 3
    assert log.last_stable_offset == 3


def test_plain_batch_inside_a_transaction_is_invalid_txn_state(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    assert _error(log, _batch(2, txn=False)) == ErrorCode.INVALID_TXN_STATE


def test_transactional_batch_after_a_marker_starts_a_new_transaction(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    _append(log, _marker(7, committed=False), AppendOrigin.COORDINATOR)
    second = _append(log, _batch(2, txn=True))
    assert log.producer_state.ongoing_transactions() == {second: 7}
    assert log.last_stable_offset == second == 3


def test_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    _append(log, _marker(7, committed=True, coordinator_epoch=5), AppendOrigin.COORDINATOR)
    _append(log, _batch(2, txn=True))
    stale = _marker(7, committed=False, coordinator_epoch=4)
    assert _error(log, stale, AppendOrigin.COORDINATOR) == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_marker_with_an_older_producer_epoch_is_rejected(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, epoch=2, txn=True))
    stale = _marker(7, committed=True, epoch=1)
    assert _error(log, stale, AppendOrigin.COORDINATOR) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_aborted_transactions_overlapping_a_read_are_collected(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1, txn=True))  # 0-1
    _append(log, _marker(1, committed=False), AppendOrigin.COORDINATOR)  # 2
    _append(log, _batch(0, pid=2))  # 3-4
    _append(log, _batch(0, pid=3, txn=True))  # 5-6
    _append(log, _marker(3, committed=False), AppendOrigin.COORDINATOR)  # 7
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    assert log.collect_aborted_transactions(3, 5) == []
    assert log.collect_aborted_transactions(3, 8) == [AbortedTxn(3, 5, 7, 8)]
    everything = log.read(0, 1 << 20)
    assert [t.producer_id for t in log.aborted_transactions_in(everything)] == [1, 3]
    # A read that stops before the second transaction does not report it.
    first_two = log.read(0, 1 << 20, max_offset=3)
    assert [t.producer_id for t in log.aborted_transactions_in(first_two)] == [1]


def test_aborted_transactions_are_found_in_later_segments(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1, txn=True))  # 0-1, segment 0
    log.roll()
    _append(log, _batch(0, pid=2))  # 2-3, segment 2
    _append(log, _marker(1, committed=False), AppendOrigin.COORDINATOR)  # 4, indexed in segment 2
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 4, 5)]
    assert (tmp_path / "t-0" / "00000000000000000002.txnindex").exists()
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()


# -- expiration


def test_idle_producers_expire_unless_their_transaction_is_open(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1))
    _append(log, _batch(0, pid=2, txn=True))
    state = log.producer_state
    assert state.remove_expired_producers(TIMESTAMP_MS + 999, 1000) == 0
    assert state.remove_expired_producers(TIMESTAMP_MS + 1000, 1000) == 1
    assert sorted(state.active_producers()) == [2]
    # An expired producer is unknown again: any sequence is accepted.
    assert _append(log, _batch(40, pid=1)) == 4


# -- snapshots


def test_snapshot_bytes_follow_kafkas_layout(tmp_path: Path) -> None:
    entry = ProducerStateEntry(5, 3, 2, 1234, 100)
    entry.batches.append(BatchMetadata(9, 120, 4, 1234))
    data = encode_snapshot([entry])
    assert struct.unpack_from(">h", data, 0) == (1,)  # version
    assert struct.unpack_from(">i", data, 6) == (1,)  # entry count
    assert len(data) == 10 + 46
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (5, 3, 9, 120, 4, 1234, 2, 100)
    (decoded,) = decode_snapshot(data)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.coordinator_epoch,
            decoded.last_timestamp_ms, decoded.current_txn_first_offset) == (5, 3, 2, 1234, 100)
    assert list(decoded.batches) == [BatchMetadata(9, 120, 4, 1234)]
    assert decoded.batches[0].first_sequence == 5 and decoded.batches[0].first_offset == 116


def test_snapshot_keeps_all_remembered_batches_last_entry_as_kafka_reads_it() -> None:
    entry = ProducerStateEntry(5, 3, -1, 2000)
    entry.batches.extend([BatchMetadata(1, 11, 1, 1000), BatchMetadata(3, 13, 1, 1500)])
    data = encode_snapshot([entry])
    assert struct.unpack_from(">i", data, 6) == (2,)
    # The last entry of a producer id is what Kafka's reader keeps: the newest batch.
    assert struct.unpack_from(">qhiqiq", data, 10 + 46) == (5, 3, 3, 13, 1, 2000)
    (decoded,) = decode_snapshot(data)
    assert list(decoded.batches) == [BatchMetadata(1, 11, 1, 1000), BatchMetadata(3, 13, 1, 2000)]
    assert decoded.last_timestamp_ms == 2000


def test_snapshot_of_a_producer_without_batches_round_trips() -> None:
    entry = ProducerStateEntry(8, 2, 4, 3000)
    (decoded,) = decode_snapshot(encode_snapshot([entry]))
    assert (decoded.producer_epoch, decoded.coordinator_epoch, decoded.last_sequence,
            len(decoded.batches)) == (2, 4, -1, 0)


def test_clean_close_writes_a_snapshot_that_the_next_open_loads(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1))
    _append(log, _batch(0, pid=2, txn=True))
    log.close()
    assert (tmp_path / "t-0" / "00000000000000000004.snapshot").exists()
    reopened = UnifiedLog(tmp_path / "t-0", LogConfig(), needs_recovery=False, clock_ms=clock)
    entry = reopened.producer_state.last_entry(1)
    assert entry is not None and entry.last_sequence == 1 and entry.batches[0].last_offset == 1
    assert reopened.producer_state.ongoing_transactions() == {2: 2}
    reopened.high_watermark = reopened.log_end_offset
    assert reopened.last_stable_offset == 2
    # The last batch survives a snapshot, so its retry is still a duplicate.
    assert reopened.append_as_leader(_batch(0, pid=1), 0).first_offset == 0


def test_unclean_stop_rebuilds_identical_state_from_the_log(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock, segment_bytes=300)
    for seq in range(0, 16, 2):
        _append(log, _batch(seq, pid=1))
    _append(log, _batch(0, pid=2, txn=True))
    _append(log, _marker(2, committed=False), AppendOrigin.COORDINATOR)
    _append(log, _batch(2, pid=2, txn=True))
    _append(log, _batch(0, pid=3, epoch=1, txn=True))
    _append(log, _marker(3, committed=True, epoch=1, coordinator_epoch=2), AppendOrigin.COORDINATOR)
    assert len(log.segments) > 2  # snapshots were taken on the rolls
    before = _state(log)
    # Another open without close(): what a kill -9 leaves (the page cache keeps the writes).
    recovered = _open(tmp_path, clock, segment_bytes=300)
    assert _state(recovered) == before
    assert recovered.aborted_transactions() == log.aborted_transactions()
    assert recovered.producer_state.ongoing_transactions() == log.producer_state.ongoing_transactions()
    recovered.high_watermark = recovered.log_end_offset
    assert recovered.last_stable_offset == log.last_stable_offset
    # All five remembered batches of producer 1 are duplicates again.
    assert recovered.append_as_leader(_batch(6, pid=1), 0).first_offset == 6


def test_unclean_stop_without_any_snapshot_rebuilds_from_the_first_segment(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock, segment_bytes=300)
    for seq in range(0, 20, 2):
        _append(log, _batch(seq, pid=1))
    before = _state(log)
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    recovered = _open(tmp_path, clock, segment_bytes=300)
    assert _state(recovered) == before


def test_corrupt_snapshot_is_ignored_and_state_rebuilt(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    _append(log, _batch(2))
    log.close()
    before = _state(log)
    snapshot = tmp_path / "t-0" / "00000000000000000004.snapshot"
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0xFF  # the CRC no longer matches
    snapshot.write_bytes(bytes(data))
    reopened = _open(tmp_path, clock)
    assert _state(reopened) == before
    assert reopened.producer_state.snapshot_offsets == [4]  # rewritten after the rebuild
    assert decode_snapshot(snapshot.read_bytes())[0].last_sequence == 3


def test_torn_snapshot_is_ignored(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    log.close()
    snapshot = tmp_path / "t-0" / "00000000000000000002.snapshot"
    snapshot.write_bytes(snapshot.read_bytes()[:20])
    reopened = _open(tmp_path, clock)
    assert reopened.producer_state.last_entry(7).last_sequence == 1  # type: ignore[union-attr]


def test_roll_writes_a_snapshot_at_the_new_segment_base(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    log.roll()
    assert log.producer_state.snapshot_offsets == [2]
    (entry,) = decode_snapshot((tmp_path / "t-0" / "00000000000000000002.snapshot").read_bytes())
    assert entry.producer_id == 7 and entry.last_sequence == 1


def test_roll_snapshot_is_fsynced_by_the_flush_that_passes_it(
    tmp_path: Path, clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    log.roll()  # snapshot at 2
    _append(log, _batch(2))
    log.roll()  # snapshot at 4
    assert log.producer_state.unflushed_snapshot_offsets == [2, 4]
    synced_inodes: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced_inodes.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log.flush(2)  # the roll's flush: segments below 2, and the snapshot at 2
    assert log.recovery_point == 2
    snapshot_2 = tmp_path / "t-0" / "00000000000000000002.snapshot"
    snapshot_4 = tmp_path / "t-0" / "00000000000000000004.snapshot"
    assert snapshot_2.stat().st_ino in synced_inodes
    assert snapshot_4.stat().st_ino not in synced_inodes
    assert log.producer_state.unflushed_snapshot_offsets == [4]
    log.flush()
    assert snapshot_4.stat().st_ino in synced_inodes
    assert log.producer_state.unflushed_snapshot_offsets == []


def test_flush_of_a_log_whose_dir_was_renamed_away_meanwhile_does_not_fail(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    log.flush()
    _append(log, _batch(2))
    log.roll()  # snapshot at 4, due at the next flush
    (tmp_path / "t-0").rename(tmp_path / "t-0.deleted-dir")  # a topic deletion mid-flush
    log.flush()
    assert log.recovery_point == 4


# -- truncation and retention


def test_truncation_forgets_later_batches_and_snapshots(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0))
    _append(log, _batch(2))
    log.roll()
    _append(log, _batch(4))
    log.roll()
    assert log.producer_state.snapshot_offsets == [4, 6]
    log.truncate_to(4)
    assert log.producer_state.snapshot_offsets == [4]
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.last_sequence == 3
    # The truncated batch is no longer a duplicate: it is appended again at offset 4.
    assert log.append_as_leader(_batch(4), 0).first_offset == 4


def test_truncation_below_an_abort_marker_reopens_the_transaction(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    _append(log, _marker(7, committed=False), AppendOrigin.COORDINATOR)
    assert log.aborted_transactions() == [AbortedTxn(7, 0, 2, 3)]
    log.truncate_to(2)
    assert log.aborted_transactions() == []
    assert log.producer_state.ongoing_transactions() == {0: 7}
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0


def test_truncation_keeps_the_last_stable_offset_past_replayed_committed_transactions(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, pid=1, txn=True))
    _append(log, _marker(1, committed=True), AppendOrigin.COORDINATOR)
    _append(log, _batch(0, pid=2))
    _append(log, _batch(2, pid=2))
    assert log.last_stable_offset == 7
    log.truncate_to(5)  # replays the log: the committed transaction at 0 is found again
    assert (log.high_watermark, log.last_stable_offset) == (5, 5)


def test_truncating_fully_clears_state_snapshots_and_indexes(tmp_path: Path, clock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    _append(log, _marker(7, committed=False), AppendOrigin.COORDINATOR)
    log.roll()
    log.truncate_fully_and_start_at(10)
    assert log.producer_state.active_producers() == {}
    assert log.producer_state.snapshot_offsets == []
    assert log.aborted_transactions() == []
    assert not list((tmp_path / "t-0").glob("*.txnindex"))


def test_retention_removes_snapshots_and_txn_indexes_of_deleted_segments(
    tmp_path: Path, clock
) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(0, txn=True))
    _append(log, _marker(7, committed=False), AppendOrigin.COORDINATOR)
    log.roll()  # snapshot at 3
    _append(log, _batch(2))
    log.roll()  # snapshot at 5
    log.delete_records_before(5)
    assert [s.base_offset for s in log.segments] == [5]
    assert log.producer_state.snapshot_offsets == [5]
    assert log.aborted_transactions() == []
    removed = log.take_deleted_files()
    assert any(p.name.startswith("00000000000000000000.txnindex") for p in removed)
    # Producer state outlives the data (Kafka keeps it until producer.id.expiration.ms).
    assert log.producer_state.last_entry(7).last_sequence == 3  # type: ignore[union-attr]


# -- replication


def test_follower_builds_the_same_state_and_index_as_the_leader(tmp_path: Path, clock) -> None:
    leader = UnifiedLog(tmp_path / "leader" / "t-0", LogConfig(), clock_ms=clock)
    _append(leader, _batch(0, pid=1, txn=True))
    _append(leader, _batch(0, pid=2))
    _append(leader, _marker(1, committed=False), AppendOrigin.COORDINATOR)
    _append(leader, _batch(2, pid=2))
    follower = UnifiedLog(tmp_path / "follower" / "t-0", LogConfig(), clock_ms=clock)
    follower.append_as_follower(leader.read(0, 1 << 20).records[0])
    assert _state(follower) == _state(leader)
    assert follower.aborted_transactions() == leader.aborted_transactions() == [
        AbortedTxn(1, 0, 4, 5)]
