"""DisklessStore: the SQLite materialisation of one Diskless coordinator's log (KIP-1164).

One database per shard (`<metadata.log.dir>/diskless/<coordinator id>.sqlite`) holding
partitions, producer state (the last five batches per producer, for duplicate detection;
epochs and open transactions of transactional producers), the aborted transactions, WAL files,
batches and the offset of the last applied `__diskless_metadata` record, which is written in
the same transaction as the changes it brings. It is a cache of the log: deleting it
is safe, the shard rebuilds it from the log (and the newest snapshot, once the log is pruned).

Concurrency: one connection, used on the event loop only. Every statement is a small indexed
query or a change of a few rows, so it runs inline; snapshots (`backup_to`) open their own
connection in a worker thread.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_ext.coordinator.diskless.records import (
    FILE_COMMITTED,
    PARTITION_CREATED,
    PRODUCERS_EXPIRED,
    RECORDS_DELETED,
    TOPIC_DELETED,
    DisklessRecord,
)
from kafka_ext.protocol.records import ControlRecordType
from kafka_ext.storage.producer_state import NUM_BATCHES_TO_RETAIN

log = logging.getLogger(__name__)

# File states (SQLite only, never in the log: the log already implies them, as KIP-1164 says).
LOG_APPEND_TIME = 1  # a batch's timestamp type when the coordinator set its timestamp
FILE_LIVE = "live"  # this shard has (or just had) live batches in the file
FILE_RELEASING = "releasing"  # its last batch here is gone; asking the other owners
FILE_DELETING = "deleting"  # nobody needs it: delete the object at deletion_due_ms

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partitions (
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    topic_name TEXT NOT NULL,
    log_start_offset INTEGER NOT NULL,
    high_watermark INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS producer_batches (
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    offset_delta INTEGER NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id, last_offset)
) WITHOUT ROWID;
-- Transactional producers: their epoch and coordinator epoch as the last marker or batch set
-- them, and the first offset of their open transaction (-1: none).
CREATE TABLE IF NOT EXISTS txn_producers (
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    coordinator_epoch INTEGER NOT NULL,
    open_txn_first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
) WITHOUT ROWID;
-- Kafka's aborted transaction index: read_committed fetches skip these producers' batches.
CREATE TABLE IF NOT EXISTS aborted_txns (
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    file_id INTEGER PRIMARY KEY,
    object_key TEXT NOT NULL UNIQUE,
    object_format INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    uploader_broker_id INTEGER NOT NULL,
    owner_ids TEXT NOT NULL,
    committed_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    deletion_due_ms INTEGER
);
CREATE INDEX IF NOT EXISTS files_by_committed ON files (committed_ms);
CREATE TABLE IF NOT EXISTS batches (
    batch_id INTEGER PRIMARY KEY,
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    file_id INTEGER NOT NULL,
    magic INTEGER NOT NULL,
    byte_offset INTEGER NOT NULL,
    byte_size INTEGER NOT NULL,
    log_append_ms INTEGER NOT NULL,
    max_timestamp_ms INTEGER NOT NULL,
    timestamp_type INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL
);
-- FindBatches and retention: a partition's batches by last offset.
CREATE INDEX IF NOT EXISTS batches_by_offset ON batches (topic_id, partition, last_offset);
-- File lifetime: the live batches of a file.
CREATE INDEX IF NOT EXISTS batches_by_file ON batches (file_id);
"""


@dataclass(slots=True, frozen=True)
class BatchRow:
    """One live batch as FindBatches answers it."""

    batch_id: int
    object_key: str
    magic: int
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    log_append_ms: int
    max_timestamp_ms: int
    timestamp_type: int


@dataclass(slots=True, frozen=True)
class PartitionRow:
    topic_id: uuid.UUID
    partition: int
    topic_name: str
    log_start_offset: int
    high_watermark: int


@dataclass(slots=True, frozen=True)
class ProducerBatchRow:
    topic_id: uuid.UUID
    partition: int
    producer_id: int
    producer_epoch: int
    last_offset: int
    last_sequence: int
    offset_delta: int
    timestamp_ms: int


@dataclass(slots=True, frozen=True)
class TxnProducerRow:
    topic_id: uuid.UUID
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    open_txn_first_offset: int


@dataclass(slots=True, frozen=True)
class FileRow:
    object_key: str
    owner_ids: tuple[int, ...]
    committed_ms: int
    state: str
    deletion_due_ms: int | None


@dataclass(slots=True)
class AppliedChanges:
    """What one apply changed: partitions with new data or a new start, files left with no
    live batch here (now FILE_RELEASING)."""

    partitions: set[tuple[uuid.UUID, int]]
    released_files: list[str]


def remove_database(path: Path) -> None:
    """Delete a database with its WAL and shared-memory files (a stale -wal must never be
    applied to another database)."""
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def backup_database(source: Path, target: Path) -> int:
    """Copy `source` to `target` consistently with the backup API; returns the applied offset
    the copy holds. Blocking: run it in a worker thread (it opens its own connections)."""
    tmp = target.with_name(target.name + ".tmp")
    remove_database(tmp)
    src = sqlite3.connect(source)
    try:
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)  # one step: a point-in-time copy under one read transaction
            row = dst.execute("SELECT value FROM meta WHERE name = 'applied_offset'").fetchone()
        finally:
            dst.close()
    finally:
        src.close()
    tmp.replace(target)
    return -1 if row is None else int(row[0])


class DisklessStore:
    """The SQLite state of one shard; see the module docstring. Loop-owned."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            remove_database(path)  # a -wal left beside a deleted database belongs to it
        # Autocommit mode: transactions are explicit (BEGIN ... COMMIT in `apply`).
        self._db = sqlite3.connect(path, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL: in WAL mode a commit is not fsynced (only checkpoints are). A power loss
            # may drop the last transactions but never corrupts the file; the applied offset
            # drops with them, so the load replays those records from the log again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self.applied_offset = self._meta("applied_offset", -1)
        except sqlite3.Error:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    def _meta(self, name: str, default: int) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return default if row is None else int(row[0])

    # -- load ---------------------------------------------------------------------------------

    def partitions(self) -> list[PartitionRow]:
        return [PartitionRow(uuid.UUID(bytes=t), p, n, s, h) for t, p, n, s, h in self._db.execute(
            "SELECT topic_id, partition, topic_name, log_start_offset, high_watermark "
            "FROM partitions")]

    def producer_batches(self) -> list[ProducerBatchRow]:
        """Every remembered producer batch, oldest first per producer."""
        return [ProducerBatchRow(uuid.UUID(bytes=row[0]), *row[1:]) for row in self._db.execute(
            "SELECT topic_id, partition, producer_id, producer_epoch, last_offset, "
            "last_sequence, offset_delta, timestamp_ms FROM producer_batches "
            "ORDER BY topic_id, partition, producer_id, last_offset")]

    def txn_producers(self) -> list[TxnProducerRow]:
        return [TxnProducerRow(uuid.UUID(bytes=row[0]), *row[1:]) for row in self._db.execute(
            "SELECT topic_id, partition, producer_id, producer_epoch, coordinator_epoch, "
            "open_txn_first_offset FROM txn_producers")]

    # -- apply --------------------------------------------------------------------------------

    def apply(self, records: Iterable[tuple[int, DisklessRecord]], now_ms: int,
              through_offset: int = -1) -> AppliedChanges:
        """Apply replicated records and store the last one's offset (or `through_offset`, when
        records up to it were skipped), in one transaction."""
        changes = AppliedChanges(set(), [])
        touched_files: set[int] = set()
        db = self._db
        db.execute("BEGIN")
        try:
            last = max(self.applied_offset, through_offset)
            for offset, record in records:
                self._apply_one(record, now_ms, changes, touched_files)
                last = max(last, offset)
            if touched_files:
                changes.released_files = self._release_empty_files(touched_files)
            db.execute("INSERT INTO meta (name, value) VALUES ('applied_offset', ?) "
                       "ON CONFLICT (name) DO UPDATE SET value = excluded.value", (last,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.applied_offset = last
        return changes

    def _apply_one(self, record: DisklessRecord, now_ms: int, changes: AppliedChanges,
                   touched_files: set[int]) -> None:
        m = record.message
        db = self._db
        if record.record_type == PARTITION_CREATED:
            db.execute("INSERT OR IGNORE INTO partitions VALUES (?, ?, ?, 0, 0)",
                       (m.topic_id.bytes, m.partition_index, m.name))
            changes.partitions.add((m.topic_id, m.partition_index))
        elif record.record_type == TOPIC_DELETED:
            tid = m.topic_id.bytes
            touched_files.update(r[0] for r in db.execute(
                "SELECT DISTINCT file_id FROM batches WHERE topic_id = ?", (tid,)))
            changes.partitions.update((m.topic_id, r[0]) for r in db.execute(
                "SELECT partition FROM partitions WHERE topic_id = ?", (tid,)))
            for table in ("batches", "producer_batches", "txn_producers", "aborted_txns",
                          "partitions"):
                db.execute(f"DELETE FROM {table} WHERE topic_id = ?", (tid,))  # noqa: S608
        elif record.record_type == FILE_COMMITTED:
            self._apply_file(m, now_ms, changes)
        elif record.record_type == PRODUCERS_EXPIRED:
            self._forget_producers(m)
        elif record.record_type == RECORDS_DELETED:
            key = (m.topic_id.bytes, m.partition_index)
            cur = db.execute("UPDATE partitions SET log_start_offset = max(log_start_offset, ?) "
                             "WHERE topic_id = ? AND partition = ?", (m.new_log_start_offset, *key))
            if cur.rowcount == 0:
                return
            touched_files.update(r[0] for r in db.execute(
                "SELECT DISTINCT file_id FROM batches WHERE topic_id = ? AND partition = ? "
                "AND last_offset < ?", (*key, m.new_log_start_offset)))
            db.execute("DELETE FROM batches WHERE topic_id = ? AND partition = ? "
                       "AND last_offset < ?", (*key, m.new_log_start_offset))
            # Producers whose last batch is gone are forgotten, as Kafka's truncateHead does,
            # unless a transaction of theirs is still open.
            db.execute("DELETE FROM producer_batches WHERE topic_id = ? AND partition = ? AND "
                       "producer_id IN (SELECT producer_id FROM producer_batches WHERE "
                       "topic_id = ? AND partition = ? GROUP BY producer_id "
                       "HAVING max(last_offset) < ?) AND producer_id NOT IN (SELECT producer_id "
                       "FROM txn_producers WHERE topic_id = ? AND partition = ? AND "
                       "open_txn_first_offset >= 0)",
                       (*key, *key, m.new_log_start_offset, *key))
            db.execute("DELETE FROM txn_producers WHERE topic_id = ? AND partition = ? AND "
                       "open_txn_first_offset < 0 AND producer_id NOT IN (SELECT producer_id "
                       "FROM producer_batches WHERE topic_id = ? AND partition = ?)", (*key, *key))
            db.execute("DELETE FROM aborted_txns WHERE topic_id = ? AND partition = ? AND "
                       "last_offset < ?", (*key, m.new_log_start_offset))
            changes.partitions.add((m.topic_id, m.partition_index))

    def _forget_producers(self, m: Any) -> None:
        """A ProducersExpired record: the producers' batches and transaction state go."""
        key = (m.topic_id.bytes, m.partition_index)
        for table in ("producer_batches", "txn_producers"):
            self._db.executemany(
                f"DELETE FROM {table} WHERE topic_id = ? AND partition = ? "  # noqa: S608
                "AND producer_id = ?", [(*key, pid) for pid in m.producer_ids])

    def _apply_file(self, m: Any, now_ms: int, changes: AppliedChanges) -> None:
        db = self._db
        owners = ",".join(str(o) for o in m.owner_ids)
        db.execute("INSERT INTO files (object_key, object_format, size_bytes, uploader_broker_id,"
                   " owner_ids, committed_ms, state) VALUES (?, ?, ?, ?, ?, ?, ?) "
                   "ON CONFLICT (object_key) DO UPDATE SET state = excluded.state, "
                   "deletion_due_ms = NULL",
                   (m.object_key, m.object_format, m.file_size, m.uploader_broker_id, owners,
                    _committed_ms(m, now_ms), FILE_LIVE))
        (file_id,) = db.execute("SELECT file_id FROM files WHERE object_key = ?",
                                (m.object_key,)).fetchone()
        for topic in m.topics:
            tid = topic.topic_id.bytes
            for part in topic.partitions:
                key = (tid, part.partition_index)
                last_offset = -1
                for b in part.batches:
                    db.execute("INSERT INTO batches (topic_id, partition, base_offset, "
                               "last_offset, file_id, magic, byte_offset, byte_size, "
                               "log_append_ms, max_timestamp_ms, timestamp_type, producer_id, "
                               "producer_epoch, base_sequence, last_sequence) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (*key, b.assigned_base_offset, b.assigned_last_offset, file_id,
                                b.magic, b.byte_offset, b.byte_size, b.log_append_timestamp,
                                b.batch_max_timestamp, b.timestamp_type, b.producer_id,
                                b.producer_epoch, b.base_sequence, b.last_sequence))
                    last_offset = max(last_offset, b.assigned_last_offset)
                    if b.control_type >= 0:
                        self._end_txn(key, b)
                        continue
                    if b.producer_id >= 0 and b.base_sequence >= 0:
                        self._remember_producer_batch(key, b)
                    if b.is_transactional:
                        self._open_txn(key, b)
                db.execute("UPDATE partitions SET high_watermark = max(high_watermark, ?) "
                           "WHERE topic_id = ? AND partition = ?", (last_offset + 1, *key))
                changes.partitions.add((topic.topic_id, part.partition_index))

    def _remember_producer_batch(self, key: tuple[bytes, int], b: Any) -> None:
        """Keep the producer's last NUM_BATCHES_TO_RETAIN batches of its current epoch."""
        db = self._db
        pid = b.producer_id
        db.execute("DELETE FROM producer_batches WHERE topic_id = ? AND partition = ? AND "
                   "producer_id = ? AND producer_epoch != ?", (*key, pid, b.producer_epoch))
        db.execute("INSERT OR REPLACE INTO producer_batches VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (*key, pid, b.producer_epoch, b.assigned_last_offset, b.last_sequence,
                    b.assigned_last_offset - b.assigned_base_offset, b.batch_max_timestamp))
        db.execute("DELETE FROM producer_batches WHERE topic_id = ? AND partition = ? AND "
                   "producer_id = ? AND last_offset NOT IN (SELECT last_offset FROM "
                   "producer_batches WHERE topic_id = ? AND partition = ? AND producer_id = ? "
                   "ORDER BY last_offset DESC LIMIT ?)",
                   (*key, pid, *key, pid, NUM_BATCHES_TO_RETAIN))

    def _open_txn(self, key: tuple[bytes, int], b: Any) -> None:
        """A transactional batch: its producer's transaction is open from here if it was not."""
        self._db.execute(
            "INSERT INTO txn_producers VALUES (?, ?, ?, ?, -1, ?) ON CONFLICT DO UPDATE SET "
            "producer_epoch = excluded.producer_epoch, open_txn_first_offset = CASE WHEN "
            "open_txn_first_offset < 0 THEN excluded.open_txn_first_offset "
            "ELSE open_txn_first_offset END",
            (*key, b.producer_id, b.producer_epoch, b.assigned_base_offset))

    def _end_txn(self, key: tuple[bytes, int], b: Any) -> None:
        """A COMMIT or ABORT marker: an aborted open transaction is indexed, the producer takes
        the marker's epochs (a new producer epoch forgets the old epoch's batches)."""
        db = self._db
        row = db.execute("SELECT open_txn_first_offset FROM txn_producers WHERE topic_id = ? "
                         "AND partition = ? AND producer_id = ?", (*key, b.producer_id)).fetchone()
        if row is not None and row[0] >= 0 and b.control_type == ControlRecordType.ABORT:
            db.execute("INSERT OR REPLACE INTO aborted_txns VALUES (?, ?, ?, ?, ?)",
                       (*key, b.assigned_last_offset, b.producer_id, row[0]))
        db.execute("INSERT INTO txn_producers VALUES (?, ?, ?, ?, ?, -1) ON CONFLICT DO UPDATE "
                   "SET producer_epoch = excluded.producer_epoch, coordinator_epoch = "
                   "excluded.coordinator_epoch, open_txn_first_offset = -1",
                   (*key, b.producer_id, b.producer_epoch, b.coordinator_epoch))
        db.execute("DELETE FROM producer_batches WHERE topic_id = ? AND partition = ? AND "
                   "producer_id = ? AND producer_epoch != ?",
                   (*key, b.producer_id, b.producer_epoch))

    def _release_empty_files(self, file_ids: set[int]) -> list[str]:
        """Files among `file_ids` left with no live batch: FILE_LIVE -> FILE_RELEASING."""
        released = []
        for file_id in sorted(file_ids):
            row = self._db.execute(
                "SELECT object_key FROM files WHERE file_id = ? AND state = ? AND NOT EXISTS "
                "(SELECT 1 FROM batches WHERE batches.file_id = files.file_id)",
                (file_id, FILE_LIVE)).fetchone()
            if row is not None:
                released.append(row[0])
        if released:
            self._db.executemany("UPDATE files SET state = ? WHERE object_key = ?",
                                 [(FILE_RELEASING, k) for k in released])
        return released

    # -- file lifetime (single statements, outside `apply`) --------------------------------------

    def file(self, object_key: str) -> FileRow | None:
        row = self._db.execute("SELECT object_key, owner_ids, committed_ms, state, "
                               "deletion_due_ms FROM files WHERE object_key = ?",
                               (object_key,)).fetchone()
        if row is None:
            return None
        owners = tuple(int(o) for o in row[1].split(",") if o)
        return FileRow(row[0], owners, row[2], row[3], row[4])

    def files_in_state(self, state: str) -> list[FileRow]:
        keys = [r[0] for r in self._db.execute("SELECT object_key FROM files WHERE state = ?",
                                                (state,))]
        return [f for f in (self.file(k) for k in keys) if f is not None]

    def committed_batches(self, object_key: str
                          ) -> dict[tuple[uuid.UUID, int, int], tuple[int, int]] | None:
        """A committed file's live batches: (topic id, partition, byte offset) -> (assigned base
        offset, log append time or -1 for a CreateTime batch); None when this shard never
        committed the file."""
        row = self._db.execute("SELECT file_id FROM files WHERE object_key = ?",
                               (object_key,)).fetchone()
        if row is None:
            return None
        return {(uuid.UUID(bytes=bytes(topic_id)), partition, byte_offset):
                (base, append_ms if timestamp_type == LOG_APPEND_TIME else -1)
                for topic_id, partition, byte_offset, base, append_ms, timestamp_type
                in self._db.execute(
                    "SELECT topic_id, partition, byte_offset, base_offset, log_append_ms, "
                    "timestamp_type FROM batches WHERE file_id = ?", (row[0],))}

    def has_live_batches(self, object_key: str) -> bool | None:
        """None: the file is unknown here."""
        row = self._db.execute(
            "SELECT EXISTS (SELECT 1 FROM batches WHERE batches.file_id = files.file_id) "
            "FROM files WHERE object_key = ?", (object_key,)).fetchone()
        return None if row is None else bool(row[0])

    def set_file_state(self, object_key: str, from_state: str, to_state: str,
                       deletion_due_ms: int | None = None) -> bool:
        cur = self._db.execute("UPDATE files SET state = ?, deletion_due_ms = ? "
                               "WHERE object_key = ? AND state = ?",
                               (to_state, deletion_due_ms, object_key, from_state))
        return cur.rowcount > 0

    def forget_file(self, object_key: str, state: str) -> bool:
        """Drop the file's row if it is still in `state` and has no live batch here."""
        cur = self._db.execute(
            "DELETE FROM files WHERE object_key = ? AND state = ? AND NOT EXISTS "
            "(SELECT 1 FROM batches WHERE batches.file_id = files.file_id)", (object_key, state))
        return cur.rowcount > 0

    def oldest_file_ms(self) -> int | None:
        row = self._db.execute("SELECT min(committed_ms) FROM files").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- queries ------------------------------------------------------------------------------

    def find_batches(self, topic_id: uuid.UUID, partition: int, offset: int,
                     limit: int) -> Iterator[BatchRow]:
        """Batches whose last offset is >= offset, ascending (lazily, the caller stops)."""
        cur = self._db.execute(
            "SELECT b.batch_id, f.object_key, b.magic, b.byte_offset, b.byte_size, "
            "b.base_offset, b.last_offset, b.log_append_ms, b.max_timestamp_ms, "
            "b.timestamp_type FROM batches b JOIN files f ON f.file_id = b.file_id "
            "WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset >= ? "
            "ORDER BY b.last_offset LIMIT ?", (topic_id.bytes, partition, offset, limit))
        for row in cur:
            yield BatchRow(*row)

    def first_batch_at_or_after_timestamp(self, topic_id: uuid.UUID, partition: int,
                                          log_start_offset: int,
                                          timestamp_ms: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch from the log start whose max
        timestamp is >= timestamp_ms."""
        row = self._db.execute(
            "SELECT base_offset, max_timestamp_ms FROM batches WHERE topic_id = ? AND "
            "partition = ? AND last_offset >= ? AND max_timestamp_ms >= ? "
            "ORDER BY last_offset LIMIT 1",
            (topic_id.bytes, partition, log_start_offset, timestamp_ms)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def first_unexpired_batch(self, topic_id: uuid.UUID, partition: int,
                              log_start_offset: int, cutoff_ms: int) -> int | None:
        """Base offset of the first batch from the log start that retention.ms keeps: its max
        timestamp or its commit time is >= cutoff_ms. The commit time counts because a diskless
        log has no active segment: without it a producer's old timestamps would expire at once,
        where Kafka keeps them until their segment rolls."""
        row = self._db.execute(
            "SELECT base_offset FROM batches WHERE topic_id = ? AND partition = ? AND "
            "last_offset >= ? AND MAX(max_timestamp_ms, log_append_ms) >= ? "
            "ORDER BY last_offset LIMIT 1",
            (topic_id.bytes, partition, log_start_offset, cutoff_ms)).fetchone()
        return None if row is None else int(row[0])

    def max_timestamp_batch(self, topic_id: uuid.UUID, partition: int,
                            log_start_offset: int) -> tuple[int, int] | None:
        """(last offset, max timestamp) of the batch with the largest timestamp (the earliest
        such batch on a tie)."""
        row = self._db.execute(
            "SELECT last_offset, max_timestamp_ms FROM batches WHERE topic_id = ? AND "
            "partition = ? AND last_offset >= ? ORDER BY max_timestamp_ms DESC, last_offset "
            "LIMIT 1", (topic_id.bytes, partition, log_start_offset)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def batch_sizes(self, topic_id: uuid.UUID, partition: int,
                    log_start_offset: int) -> Iterator[tuple[int, int, int, int]]:
        """(base offset, last offset, byte size, max timestamp) of live batches, ascending."""
        cur = self._db.execute(
            "SELECT base_offset, last_offset, byte_size, max_timestamp_ms FROM batches "
            "WHERE topic_id = ? AND partition = ? AND last_offset >= ? ORDER BY last_offset",
            (topic_id.bytes, partition, log_start_offset))
        yield from cur

    def aborted_txns(self, topic_id: uuid.UUID, partition: int, from_offset: int,
                     to_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping offsets
        [from_offset, to_offset), as a read_committed fetch of that range needs them."""
        return [(int(pid), int(first)) for pid, first in self._db.execute(
            "SELECT producer_id, first_offset FROM aborted_txns WHERE topic_id = ? AND "
            "partition = ? AND last_offset >= ? AND first_offset < ? ORDER BY first_offset",
            (topic_id.bytes, partition, from_offset, to_offset))]

    def size_bytes(self, topic_id: uuid.UUID, partition: int, log_start_offset: int) -> int:
        row = self._db.execute(
            "SELECT coalesce(sum(byte_size), 0) FROM batches WHERE topic_id = ? AND "
            "partition = ? AND last_offset >= ?",
            (topic_id.bytes, partition, log_start_offset)).fetchone()
        return int(row[0])


def _committed_ms(m: Any, now_ms: int) -> int:
    """A file's commit time: the first batch's log append time (the coordinator's clock when it
    was committed), so a rebuild from the log gives the same value."""
    for topic in m.topics:
        for part in topic.partitions:
            for b in part.batches:
                return int(b.log_append_timestamp)
    return now_ms
