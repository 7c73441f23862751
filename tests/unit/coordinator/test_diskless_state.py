"""DisklessShard and DisklessStore without a runtime: records, speculative validation against
pending records, SQLite applies with the applied offset, replay skipping (KIP-1164)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.coordinator.diskless.records import (
    FILE_COMMITTED,
    RECORDS_DELETED,
    RecordsDeletedRecord,
    decode,
    encode,
)
from kafka_ext.coordinator.diskless.shard import DisklessShard
from kafka_ext.coordinator.diskless.state import FILE_RELEASING
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.messages import registry

Commit = registry()["DisklessCommitFileRequest"].cls
TOPIC = uuid.UUID(int=42)
T0 = 1_700_000_000_000


def request(key: str, *specs: tuple[int, int], producer: tuple[int, int, int] | None = None
            ) -> Any:
    """A commit of batches given as (partition, record count)."""
    batches = []
    sequence = -1 if producer is None else producer[2]
    for partition, count in specs:
        batches.append(Commit.DisklessCommitBatch(
            magic=2, request_id=0, topic_id=TOPIC, partition_index=partition, byte_offset=0,
            size=50, base_offset=0, last_offset=count - 1, batch_max_timestamp=T0,
            timestamp_type=0, producer_id=-1 if producer is None else producer[0],
            producer_epoch=-1 if producer is None else producer[1], base_sequence=sequence,
            last_sequence=-1 if sequence < 0 else sequence + count - 1))
        if sequence >= 0:
            sequence += count
    return Commit(object_key=key, object_format=1, file_size=100, owner_ids=[0],
                  batches=batches)


class Log:
    """Stands in for the runtime: offsets for the shard's records, replayed at once."""

    def __init__(self, shard: DisklessShard) -> None:
        self.shard = shard
        self.end = 0

    def write(self, records: list[tuple[bytes, bytes | None]]) -> int:
        for key, value in records:
            self.shard.replay(self.end, -1, -1, key, value)
            self.end += 1
        return self.end


def new_shard(tmp_path: Path) -> tuple[DisklessShard, Log]:
    shard = DisklessShard(0, tmp_path / "0.sqlite", clock_ms=lambda: T0)
    shard.open_store()
    shard.on_loaded()
    log = Log(shard)
    log.write(shard.create_partitions(TOPIC, "t", [0, 1]).records)
    shard.on_committed(log.end)
    return shard, log


def applied_offset(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT value FROM meta WHERE name = 'applied_offset'")
                   .fetchone()[0])
    finally:
        db.close()


def test_record_round_trip_and_framing() -> None:
    key, value = encode(RECORDS_DELETED, RecordsDeletedRecord(
        topic_id=TOPIC, partition_index=3, new_log_start_offset=17))
    assert key == b"\x00\x67" and value is not None and value[:2] == b"\x00\x00"
    record = decode(key, value)
    assert record is not None and record.record_type == RECORDS_DELETED
    assert (record.message.partition_index, record.message.new_log_start_offset) == (3, 17)
    assert decode(b"\x00\x10", b"\x00\x00") is None  # a type this version does not know
    with pytest.raises(DecodeError):
        decode(key, b"\x00\x05" + value[2:])


def test_operations_validate_against_pending_records(tmp_path: Path) -> None:
    shard, log = new_shard(tmp_path)
    first = shard.commit_file(request("wal/1", (0, 2)), [0], {}, 1)
    log.write(first.records)
    second = shard.commit_file(request("wal/2", (0, 3)), [0], {}, 1)
    log.write(second.records)
    # The second commit continued the offsets of the first, which SQLite has not seen yet.
    assert first.response[0].assigned_base_offset == 0
    assert second.response[0].assigned_base_offset == 2
    assert applied_offset(tmp_path / "0.sqlite") == 1 and len(shard.pending) == 2
    state = shard.partitions[(TOPIC, 0)]
    assert (state.high_watermark, state.committed_high_watermark) == (5, 0)
    shard.on_committed(log.end - 1)  # only the first is replicated
    assert applied_offset(tmp_path / "0.sqlite") == 2
    assert state.committed_high_watermark == 2 and len(shard.pending) == 1
    shard.on_committed(log.end)
    assert applied_offset(tmp_path / "0.sqlite") == 3 and shard.pending == []
    assert [b.last_offset for b in shard.store.find_batches(TOPIC, 0, 0, 10)] == [1, 4]  # type: ignore[union-attr]


def test_operations_never_change_the_shard(tmp_path: Path) -> None:
    shard, _ = new_shard(tmp_path)
    result = shard.commit_file(request("wal/1", (0, 2), producer=(9, 0, 0)), [0], {}, 1)
    assert len(result.records) == 1
    assert shard.partitions[(TOPIC, 0)].high_watermark == 0
    assert shard.partitions[(TOPIC, 0)].producers == {}


def test_a_commit_with_no_accepted_batch_writes_nothing(tmp_path: Path) -> None:
    shard, _ = new_shard(tmp_path)
    result = shard.commit_file(request("wal/1", (5, 1)), [0], {}, 1)
    assert result.records == []
    assert result.response[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_replay_skips_what_the_database_already_applied(tmp_path: Path) -> None:
    shard, log = new_shard(tmp_path)
    records = shard.commit_file(request("wal/1", (0, 2)), [0], {}, 1).records
    log.write(records)
    shard.on_committed(log.end)
    shard.on_unloaded()
    reopened = DisklessShard(0, tmp_path / "0.sqlite")
    reopened.open_store()
    assert reopened.applied_offset == 2
    assert reopened.partitions[(TOPIC, 0)].high_watermark == 2  # read back from SQLite
    for offset in range(3):  # the whole log again: everything is skipped
        key, value = records[0] if offset == 2 else (b"\x00\x64", None)
        reopened.replay(offset, -1, -1, key, value)
    assert reopened.pending == [] and reopened.replayed_at_load == 0
    reopened.on_unloaded()


def test_failed_apply_keeps_records_pending(tmp_path: Path) -> None:
    shard, log = new_shard(tmp_path)
    log.write(shard.commit_file(request("wal/1", (0, 1)), [0], {}, 1).records)
    store = shard.store
    assert store is not None
    store._db.execute("ALTER TABLE batches RENAME TO moved")  # the next apply fails
    shard.on_committed(log.end)
    assert len(shard.pending) == 1 and shard.applied_offset == 1
    assert shard.partitions[(TOPIC, 0)].committed_high_watermark == 0
    store._db.execute("ALTER TABLE moved RENAME TO batches")
    shard.on_committed(log.end)  # the retry applies it
    assert shard.pending == [] and shard.applied_offset == 2
    assert shard.partitions[(TOPIC, 0)].committed_high_watermark == 1


def test_deleting_the_last_batch_of_a_file_releases_it(tmp_path: Path) -> None:
    shard, log = new_shard(tmp_path)
    log.write(shard.commit_file(request("wal/1", (0, 2), (1, 1)), [0, 1], {}, 1).records)
    log.write(shard.commit_file(request("wal/2", (0, 1)), [0], {}, 1).records)
    shard.on_committed(log.end)
    log.write(shard.delete_records([(TOPIC, 0, 2), (TOPIC, 1, 1)]).records)
    shard.on_committed(log.end)
    store = shard.store
    assert store is not None
    released = store.file("wal/1")
    assert released is not None and released.state == FILE_RELEASING
    assert store.has_live_batches("wal/1") is False and store.has_live_batches("wal/2") is True
    assert store.has_live_batches("wal/3") is None


def test_producer_batches_keep_the_last_five_per_producer(tmp_path: Path) -> None:
    shard, log = new_shard(tmp_path)
    for i in range(7):
        log.write(shard.commit_file(request(f"wal/{i}", (0, 1), producer=(9, 0, i)), [0], {},
                                    1).records)
    shard.on_committed(log.end)
    store = shard.store
    assert store is not None
    rows = store.producer_batches()
    assert [r.last_sequence for r in rows] == [2, 3, 4, 5, 6]
    # A duplicate of the oldest remembered batch is still recognised, one older is not.
    result = shard.commit_file(request("wal/x", (0, 1), producer=(9, 0, 2)), [0], {}, 1)
    assert result.response[0].is_duplicate and result.response[0].assigned_base_offset == 2
    result = shard.commit_file(request("wal/y", (0, 1), producer=(9, 0, 1)), [0], {}, 1)
    assert result.response[0].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_file_record_carries_owner_ids_and_uploader(tmp_path: Path) -> None:
    shard, _ = new_shard(tmp_path)
    req = request("wal/1", (0, 1))
    req.owner_ids = [3, 0, 1]
    ((key, value),) = shard.commit_file(req, [0], {TOPIC: 1}, 7).records
    record = decode(key, value)
    assert record is not None and record.record_type == FILE_COMMITTED
    m = record.message
    assert (m.owner_ids, m.uploader_broker_id, m.object_key) == ([3, 0, 1], 7, "wal/1")
    (b,) = m.topics[0].partitions[0].batches
    assert (b.timestamp_type, b.log_append_timestamp, b.batch_max_timestamp) == (1, T0, T0)
