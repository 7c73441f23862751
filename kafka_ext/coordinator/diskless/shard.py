"""DisklessShard: the state machine of one Diskless coordinator (KIP-1164), a runtime shard.

Two layers, as the KIP's "How operations are performed" asks:
- in memory, per partition, what validation needs: log start offset, next offset (high
  watermark), producer state (sequences, epochs, open transactions), plus the topics.
  `replay` updates it at once, so it is the committed state plus every pending (appended, not
  yet replicated) record, the speculative state the next operation validates against;
- in SQLite (DisklessStore), the committed state: `replay` queues each record and
  `on_committed` applies the replicated ones with their log offset in one transaction.
Operations validate and return records without touching the shard. Records at or below the
database's applied offset are skipped on replay, so a restart with an intact database replays
only the tail. Loop-owned.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_ext.coordinator.diskless.records import (
    FILE_COMMITTED,
    PARTITION_CREATED,
    PRODUCERS_EXPIRED,
    RECORDS_DELETED,
    TOPIC_DELETED,
    CommittedBatch,
    CommittedPartition,
    CommittedTopic,
    DisklessRecord,
    FileCommittedRecord,
    PartitionCreatedRecord,
    ProducersExpiredRecord,
    RecordsDeletedRecord,
    TopicDeletedRecord,
    decode,
    encode,
)
from kafka_ext.coordinator.diskless.state import LOG_APPEND_TIME, AppliedChanges, DisklessStore
from kafka_ext.coordinator.runtime import CoordinatorResult
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    check_client_sequence,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[uuid.UUID, int]
Record = tuple[bytes, bytes | None]
RECORD_BATCH_MAGIC = 2


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class PartitionState:
    """One partition: speculative offsets and producers, plus what SQLite has applied."""

    topic_id: uuid.UUID
    topic_name: str
    partition: int
    log_start_offset: int = 0
    high_watermark: int = 0  # the next offset to assign
    committed_log_start_offset: int = 0
    committed_high_watermark: int = 0
    producers: dict[int, ProducerStateEntry] = field(default_factory=dict)
    # Producer id -> first offset of its open transaction, as SQLite has it (committed).
    committed_open_txns: dict[int, int] = field(default_factory=dict)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO over the committed state: the first offset of the oldest open
        transaction, else the high watermark; never below the log start."""
        end = self.committed_high_watermark
        if self.committed_open_txns:
            end = min(end, min(self.committed_open_txns.values()))
        return max(end, self.committed_log_start_offset)


@dataclass(slots=True, frozen=True)
class CommitOutcome:
    """One batch's answer to DisklessCommitFile (the response's DisklessCommitBatchResult)."""

    error_code: int
    error_message: str | None = None
    assigned_base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    is_duplicate: bool = False


def _copy_entry(entry: ProducerStateEntry) -> ProducerStateEntry:
    return ProducerStateEntry(entry.producer_id, entry.producer_epoch, entry.coordinator_epoch,
                              entry.last_timestamp_ms, entry.current_txn_first_offset,
                              deque(entry.batches, maxlen=entry.batches.maxlen))


def _remember(entry: ProducerStateEntry, b: Any) -> None:
    """A producer's batch (CommittedBatch) or transaction marker, in its producer's entry."""
    entry.update_epoch(b.producer_epoch)
    entry.last_timestamp_ms = b.batch_max_timestamp
    if b.control_type >= 0:
        entry.coordinator_epoch = b.coordinator_epoch
        entry.current_txn_first_offset = -1
        return
    if b.base_sequence >= 0:
        delta = b.assigned_last_offset - b.assigned_base_offset
        entry.batches.append(BatchMetadata(b.last_sequence, b.assigned_last_offset, delta,
                                           b.batch_max_timestamp))
    if b.is_transactional and entry.current_txn_first_offset < 0:
        entry.current_txn_first_offset = b.assigned_base_offset


def _has_producer_state(b: Any) -> bool:
    """Whether a batch changes its producer's entry: idempotent, transactional or a marker."""
    return b.producer_id >= 0 and (b.base_sequence >= 0 or b.is_transactional
                                   or b.control_type >= 0)


def _check_marker(entry: ProducerStateEntry | None, b: Any) -> None:
    """Kafka's checks of a COMMIT/ABORT marker: not from an older producer epoch (a zombie's
    coordinator) nor from an older transaction coordinator epoch."""
    if entry is None:
        return
    if b.producer_epoch < entry.producer_epoch:
        raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                         f"marker for producer {b.producer_id} with epoch {b.producer_epoch}, "
                         f"older than its epoch {entry.producer_epoch}")
    if b.coordinator_epoch < entry.coordinator_epoch:
        raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                         f"marker for producer {b.producer_id} from coordinator epoch "
                         f"{b.coordinator_epoch}, older than {entry.coordinator_epoch}")


class DisklessShard:
    """See the module docstring. `on_applied(shard, changes)` hears of each SQLite apply."""

    def __init__(self, coordinator_id: int, db_path: Path,
                 on_applied: Callable[[DisklessShard, AppliedChanges], None] | None = None,
                 on_loaded: Callable[[DisklessShard], None] | None = None,
                 on_unloaded: Callable[[DisklessShard], None] | None = None,
                 prepare: Callable[[DisklessShard, int, int], Awaitable[None]] | None = None,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self.coordinator_id = coordinator_id
        self.db_path = db_path
        self.store: DisklessStore | None = None
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.topics: dict[uuid.UUID, str] = {}
        self.pending: list[tuple[int, DisklessRecord]] = []
        self.loaded = False
        self.unloaded = False
        self.replayed_at_load = 0  # records replayed (not skipped) before the shard loaded
        self.records_since_snapshot = 0
        self._on_applied = on_applied
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._prepare = prepare
        self._clock_ms = clock_ms

    # -- loading ----------------------------------------------------------------------------

    async def prepare_load(self, log_start_offset: int, log_end_offset: int) -> int:
        """Runtime hook before the load replay: make the database usable (the coordinator
        restores a snapshot if it is missing or behind the log), read it back, and replay
        from the record after the last one it applied."""
        if self._prepare is not None:
            await self._prepare(self, log_start_offset, log_end_offset)
        if self.unloaded:  # dropped while preparing: the runtime stops the load
            return log_end_offset
        self.open_store()
        return self.applied_offset + 1

    def open_store(self) -> None:
        """Open (or create) the database and read the in-memory state back from it."""
        self.store = DisklessStore(self.db_path)
        self.partitions.clear()
        self.topics.clear()
        for row in self.store.partitions():
            self.partitions[(row.topic_id, row.partition)] = PartitionState(
                row.topic_id, row.topic_name, row.partition, row.log_start_offset,
                row.high_watermark, row.log_start_offset, row.high_watermark)
            self.topics[row.topic_id] = row.topic_name
        for b in self.store.producer_batches():
            entry = self._stored_entry(b.topic_id, b.partition, b.producer_id)
            if entry is None:
                continue
            entry.update_epoch(b.producer_epoch)
            entry.batches.append(BatchMetadata(b.last_sequence, b.last_offset, b.offset_delta,
                                               b.timestamp_ms))
            entry.last_timestamp_ms = b.timestamp_ms
        for t in self.store.txn_producers():
            entry = self._stored_entry(t.topic_id, t.partition, t.producer_id)
            if entry is None:
                continue
            if t.producer_epoch > entry.producer_epoch:  # a marker's newer epoch
                entry.update_epoch(t.producer_epoch)
            entry.coordinator_epoch = t.coordinator_epoch
            entry.current_txn_first_offset = t.open_txn_first_offset
            if t.open_txn_first_offset >= 0:
                self.partitions[(t.topic_id, t.partition)].committed_open_txns[
                    t.producer_id] = t.open_txn_first_offset

    def _stored_entry(self, topic_id: uuid.UUID, partition: int,
                      producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry being read back from SQLite (made on first sight); None for a
        partition no longer here."""
        state = self.partitions.get((topic_id, partition))
        if state is None:
            return None
        entry = state.producers.get(producer_id)
        if entry is None:
            entry = state.producers[producer_id] = ProducerStateEntry(producer_id)
        return entry

    @property
    def applied_offset(self) -> int:
        return -1 if self.store is None else self.store.applied_offset

    def _db(self) -> DisklessStore:
        if self.store is None:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"diskless coordinator {self.coordinator_id} is not open")
        return self.store

    # -- CoordinatorShard -------------------------------------------------------------------

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        if offset <= self.applied_offset:
            return  # already in SQLite (and so in the in-memory state read from it)
        try:
            record = decode(key, value)
        except DecodeError as exc:
            log.error("__diskless_metadata-%d: skipping the record at offset %d: %s",
                      self.coordinator_id, offset, exc)
            return
        if record is None:
            log.warning("__diskless_metadata-%d: unknown record type at offset %d",
                        self.coordinator_id, offset)
            return
        if not self.loaded:
            self.replayed_at_load += 1
        self._replay_in_memory(record)
        self.pending.append((offset, record))

    def _replay_in_memory(self, record: DisklessRecord) -> None:
        m = record.message
        if record.record_type == PARTITION_CREATED:
            key = (m.topic_id, m.partition_index)
            if key not in self.partitions:
                self.partitions[key] = PartitionState(m.topic_id, m.name, m.partition_index)
            self.topics[m.topic_id] = m.name
        elif record.record_type == TOPIC_DELETED:
            self.topics.pop(m.topic_id, None)
            for key in [k for k in self.partitions if k[0] == m.topic_id]:
                del self.partitions[key]
        elif record.record_type == FILE_COMMITTED:
            for topic in m.topics:
                for part in topic.partitions:
                    state = self.partitions.get((topic.topic_id, part.partition_index))
                    if state is None:
                        continue
                    for b in part.batches:
                        state.high_watermark = max(state.high_watermark,
                                                   b.assigned_last_offset + 1)
                        if _has_producer_state(b):
                            entry = state.producers.get(b.producer_id)
                            if entry is None:
                                entry = state.producers[b.producer_id] = ProducerStateEntry(
                                    b.producer_id)
                            _remember(entry, b)
        elif record.record_type == PRODUCERS_EXPIRED:
            state = self.partitions.get((m.topic_id, m.partition_index))
            if state is not None:
                for pid in m.producer_ids:
                    state.producers.pop(pid, None)
        elif record.record_type == RECORDS_DELETED:
            state = self.partitions.get((m.topic_id, m.partition_index))
            if state is not None and m.new_log_start_offset > state.log_start_offset:
                state.log_start_offset = m.new_log_start_offset
                for pid in [p for p, e in state.producers.items()
                            if e.last_data_offset < m.new_log_start_offset
                            and e.current_txn_first_offset < 0]:
                    del state.producers[pid]

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, committed: bool,
                               offset: int) -> None:
        """`__diskless_metadata` holds no transactional records (the diskless partitions'
        transactions are state in FILE_COMMITTED records, not transactions of this log)."""

    def on_committed(self, committed_offset: int) -> None:
        """Apply the pending records below `committed_offset` to SQLite, in one transaction."""
        if not self.pending or self.pending[0][0] >= committed_offset or self.store is None:
            return
        count = 0
        while count < len(self.pending) and self.pending[count][0] < committed_offset:
            count += 1
        batch = self.pending[:count]
        try:
            changes = self.store.apply(batch, self._clock_ms())
        except sqlite3.Error as exc:
            # The records are committed in the log, which is the truth: they stay pending (the
            # in-memory state already has them) and the next commit retries the apply.
            log.error("diskless coordinator %d could not apply offsets %d-%d to %s: %s",
                      self.coordinator_id, batch[0][0], batch[-1][0], self.db_path, exc)
            return
        del self.pending[:count]
        self.records_since_snapshot += count
        for _, record in batch:
            self._commit_in_memory(record)
        if self._on_applied is not None:
            self._on_applied(self, changes)

    def _commit_in_memory(self, record: DisklessRecord) -> None:
        m = record.message
        if record.record_type == FILE_COMMITTED:
            for topic in m.topics:
                for part in topic.partitions:
                    state = self.partitions.get((topic.topic_id, part.partition_index))
                    if state is None or not part.batches:
                        continue
                    state.committed_high_watermark = max(
                        state.committed_high_watermark,
                        max(b.assigned_last_offset for b in part.batches) + 1)
                    for b in part.batches:
                        if b.control_type >= 0:
                            state.committed_open_txns.pop(b.producer_id, None)
                        elif b.is_transactional:
                            state.committed_open_txns.setdefault(b.producer_id,
                                                                 b.assigned_base_offset)
        elif record.record_type == RECORDS_DELETED:
            state = self.partitions.get((m.topic_id, m.partition_index))
            if state is not None:
                state.committed_log_start_offset = max(state.committed_log_start_offset,
                                                       m.new_log_start_offset)

    def on_loaded(self) -> None:
        self.loaded = True
        if self._on_loaded is not None:
            self._on_loaded(self)

    def on_unloaded(self) -> None:
        self.loaded = False
        self.unloaded = True
        if self._on_unloaded is not None:
            self._on_unloaded(self)
        if self.store is not None:
            self.store.close()
            self.store = None

    # -- operations (validate, return records; never change the shard) ----------------------

    def create_partitions(self, topic_id: uuid.UUID, name: str,
                          partitions: list[int]) -> CoordinatorResult[None]:
        """DisklessPartitionCreatedRecord for each partition not here yet (idempotent)."""
        records = [encode(PARTITION_CREATED, PartitionCreatedRecord(
            topic_id=topic_id, name=name, partition_index=p))
            for p in sorted(set(partitions)) if (topic_id, p) not in self.partitions]
        return CoordinatorResult(records, None)

    def delete_topics(self, topic_ids: list[uuid.UUID]) -> CoordinatorResult[None]:
        records = [encode(TOPIC_DELETED, TopicDeletedRecord(topic_id=t))
                   for t in dict.fromkeys(topic_ids) if t in self.topics]
        return CoordinatorResult(records, None)

    def commit_file(self, request: Any, indices: list[int],
                    timestamp_types: dict[uuid.UUID, int], uploader_broker_id: int
                    ) -> CoordinatorResult[dict[int, CommitOutcome]]:
        """Assign offsets to the request's batches at `indices` (this shard's), in order.

        Each batch is checked against the speculative state including the batches before it
        in this request (a retry inside the same file is a duplicate). The accepted batches
        become one DisklessFileCommittedRecord; none accepted, nothing is written.
        `timestamp_types`: topics whose message.timestamp.type is LogAppendTime (1).
        """
        earlier = self._committed_file(request.object_key)
        if earlier is not None:
            # A retry of a commit that went through (its answer was lost in a failover): the
            # same offsets again, never a second copy of the file's batches.
            return CoordinatorResult([], {i: self._recommitted(request.batches[i], earlier)
                                          for i in indices})
        now = self._clock_ms()
        next_offsets: dict[TopicPartition, int] = {}
        producers: dict[tuple[TopicPartition, int], ProducerStateEntry] = {}
        accepted: dict[TopicPartition, list[Any]] = {}
        outcomes: dict[int, CommitOutcome] = {}
        for index in indices:
            b = request.batches[index]
            key = (b.topic_id, b.partition_index)
            state = self.partitions.get(key)
            if state is None:
                outcomes[index] = CommitOutcome(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                                f"{b.topic_id}-{b.partition_index} is not a "
                                                f"partition of this diskless coordinator")
                continue
            try:
                outcomes[index] = self._assign(b, key, state, now, timestamp_types,
                                               next_offsets, producers, accepted)
            except KafkaError as exc:
                outcomes[index] = CommitOutcome(int(exc.code), exc.message,
                                                log_start_offset=state.log_start_offset)
        if not accepted:
            return CoordinatorResult([], outcomes)
        topics: dict[uuid.UUID, list[Any]] = {}
        for (topic_id, partition), batches in accepted.items():
            topics.setdefault(topic_id, []).append(
                CommittedPartition(partition_index=partition, batches=batches))
        record = FileCommittedRecord(
            object_key=request.object_key, object_format=request.object_format,
            file_size=request.file_size, uploader_broker_id=uploader_broker_id,
            owner_ids=list(request.owner_ids),
            topics=[CommittedTopic(topic_id=t, partitions=ps) for t, ps in topics.items()])
        return CoordinatorResult([encode(FILE_COMMITTED, record)], outcomes)

    def _committed_file(self, object_key: str
                        ) -> dict[tuple[uuid.UUID, int, int], tuple[int, int]] | None:
        """The batches this shard committed from `object_key`, pending records included; None
        for a file it never committed."""
        for _, record in reversed(self.pending):
            m = record.message
            if record.record_type == FILE_COMMITTED and m.object_key == object_key:
                return {(t.topic_id, part.partition_index, b.byte_offset):
                        (b.assigned_base_offset, b.log_append_timestamp
                         if b.timestamp_type == LOG_APPEND_TIME else -1)
                        for t in m.topics for part in t.partitions for b in part.batches}
        return self._db().committed_batches(object_key)

    def _recommitted(self, b: Any, earlier: dict[tuple[uuid.UUID, int, int], tuple[int, int]]
                     ) -> CommitOutcome:
        state = self.partitions.get((b.topic_id, b.partition_index))
        log_start = state.log_start_offset if state is not None else -1
        found = earlier.get((b.topic_id, b.partition_index, b.byte_offset))
        if found is None:  # refused the first time, or deleted since: not committed now either
            return CommitOutcome(int(ErrorCode.INVALID_REQUEST),
                                 "this WAL object was committed already; this batch is not in "
                                 "it (refused then, or deleted since)", log_start_offset=log_start)
        return CommitOutcome(0, None, found[0], found[1], log_start)

    def _assign(self, b: Any, key: TopicPartition, state: PartitionState, now: int,
                timestamp_types: dict[uuid.UUID, int], next_offsets: dict[TopicPartition, int],
                producers: dict[tuple[TopicPartition, int], ProducerStateEntry],
                accepted: dict[TopicPartition, list[Any]]) -> CommitOutcome:
        if b.magic != RECORD_BATCH_MAGIC:
            raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                             f"record batch magic {b.magic}: only v2 batches are supported")
        if b.last_offset < b.base_offset or b.size <= 0 or b.byte_offset < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"batch offsets {b.base_offset}-{b.last_offset} at "
                             f"{b.byte_offset}+{b.size} are inconsistent")
        marker = b.control_type >= 0
        if (marker or b.is_transactional) and b.producer_id < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             "a transactional batch or marker without a producer id")
        tracked = _has_producer_state(b)
        entry: ProducerStateEntry | None = None
        if tracked:
            entry = producers.get((key, b.producer_id))
            if entry is None:
                known = state.producers.get(b.producer_id)
                entry = None if known is None else _copy_entry(known)
        if marker:
            _check_marker(entry, b)
        elif tracked:
            duplicate = check_client_sequence(entry, b.producer_epoch, b.base_sequence,
                                              b.last_sequence)
            if duplicate is not None:
                return CommitOutcome(0, None, duplicate.first_offset, -1, state.log_start_offset,
                                     True)
            if entry is not None and entry.current_txn_first_offset >= 0 \
                    and not b.is_transactional:
                raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                 f"non-transactional batch from producer {b.producer_id} inside "
                                 f"its transaction started at {entry.current_txn_first_offset}")
        base = next_offsets.get(key, state.high_watermark)
        last = base + (b.last_offset - b.base_offset)
        log_append_time = timestamp_types.get(b.topic_id, 0) == LOG_APPEND_TIME
        committed = CommittedBatch(
            magic=b.magic, byte_offset=b.byte_offset, byte_size=b.size,
            assigned_base_offset=base, assigned_last_offset=last, log_append_timestamp=now,
            batch_max_timestamp=now if log_append_time else b.batch_max_timestamp,
            timestamp_type=LOG_APPEND_TIME if log_append_time else b.timestamp_type,
            producer_id=b.producer_id, producer_epoch=b.producer_epoch,
            base_sequence=b.base_sequence, last_sequence=b.last_sequence,
            is_transactional=b.is_transactional or marker, control_type=b.control_type,
            coordinator_epoch=b.coordinator_epoch)
        accepted.setdefault(key, []).append(committed)
        next_offsets[key] = last + 1
        if tracked:
            if entry is None:
                entry = ProducerStateEntry(b.producer_id)
            _remember(entry, committed)
            producers[(key, b.producer_id)] = entry
        return CommitOutcome(0, None, base, now if log_append_time else -1,
                             state.log_start_offset, False)

    def producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerStateEntry]:
        """The partition's producer entries (DescribeProducers)."""
        return list(self.partition(topic_id, partition).producers.values())

    def delete_records(self, requests: list[tuple[uuid.UUID, int, int]]
                       ) -> CoordinatorResult[list[tuple[int, int, str | None]]]:
        """(topic id, partition, offset; -1 = high watermark) -> (error, low watermark, msg)."""
        records: list[Record] = []
        answers: list[tuple[int, int, str | None]] = []
        moved: dict[TopicPartition, int] = {}
        for topic_id, partition, offset in requests:
            state = self.partitions.get((topic_id, partition))
            if state is None:
                answers.append((int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1,
                                f"unknown diskless partition {topic_id}-{partition}"))
                continue
            start = moved.get((topic_id, partition), state.log_start_offset)
            target = state.high_watermark if offset == -1 else offset
            if target < 0 or target > state.high_watermark:
                answers.append((int(ErrorCode.OFFSET_OUT_OF_RANGE), start,
                                f"offset {offset} is beyond the high watermark "
                                f"{state.high_watermark}"))
                continue
            if target > start:
                records.append(encode(RECORDS_DELETED, RecordsDeletedRecord(
                    topic_id=topic_id, partition_index=partition, new_log_start_offset=target)))
                moved[(topic_id, partition)] = start = target
            answers.append((0, start, None))
        return CoordinatorResult(records, answers)

    def expire_producers(self, now: int, expiration_ms: int) -> CoordinatorResult[int]:
        """A DisklessProducersExpiredRecord per partition with producers idle for
        `expiration_ms` (by their last batch's timestamp, as Kafka's producer.id.expiration.ms)
        and no open transaction; returns how many producers go."""
        records: list[Record] = []
        count = 0
        for (topic_id, partition), state in self.partitions.items():
            idle = sorted(pid for pid, e in state.producers.items()
                          if e.current_txn_first_offset < 0
                          and now - e.last_timestamp_ms >= expiration_ms)
            if idle:
                records.append(encode(PRODUCERS_EXPIRED, ProducersExpiredRecord(
                    topic_id=topic_id, partition_index=partition, producer_ids=idle)))
                count += len(idle)
        return CoordinatorResult(records, count)

    def enforce_retention(self, now: int, retention_of: Callable[[str], tuple[int, int]]
                          ) -> CoordinatorResult[int]:
        """DisklessRecordsDeletedRecords for partitions past retention.ms / retention.bytes
        (`retention_of(topic name)` -> (ms, bytes), -1 = unbounded). Whole batches go, oldest
        first, as Kafka deletes whole segments; the start never passes the committed high
        watermark. Reads the committed batches in SQLite (pending ones are newer)."""
        store = self._db()
        records: list[Record] = []
        for (topic_id, partition), state in self.partitions.items():
            retention_ms, retention_bytes = retention_of(state.topic_name)
            start = state.log_start_offset
            new_start = start
            if retention_ms >= 0:
                kept = store.first_unexpired_batch(topic_id, partition, start,
                                                   now - retention_ms)
                new_start = (max(start, kept) if kept is not None
                             else max(start, state.committed_high_watermark))
            if retention_bytes >= 0:
                size = store.size_bytes(topic_id, partition, new_start)
                for _base, last, size_bytes, _ts in store.batch_sizes(topic_id, partition,
                                                                     new_start):
                    if size - size_bytes < retention_bytes:
                        break
                    size -= size_bytes
                    new_start = last + 1
            new_start = min(new_start, state.committed_high_watermark)
            if new_start > start:
                records.append(encode(RECORDS_DELETED, RecordsDeletedRecord(
                    topic_id=topic_id, partition_index=partition,
                    new_log_start_offset=new_start)))
        return CoordinatorResult(records, len(records))

    # -- reads ------------------------------------------------------------------------------

    def partition(self, topic_id: uuid.UUID, partition: int) -> PartitionState:
        state = self.partitions.get((topic_id, partition))
        if state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"unknown diskless partition {topic_id}-{partition}")
        return state

    def list_offset(self, topic_id: uuid.UUID, partition: int, timestamp: int,
                    read_committed: bool = False) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets over the committed state (call after the
        runtime's wait_committed): -1 latest (the last stable offset for read_committed), -2
        earliest, -3 max timestamp, -4 earliest local, -5 latest tiered (none), else the first
        batch whose max timestamp >= it."""
        state = self.partition(topic_id, partition)
        start, end = state.committed_log_start_offset, state.committed_high_watermark
        if timestamp == -1:
            return (state.last_stable_offset if read_committed else end), -1
        if timestamp in (-2, -4):
            return start, -1
        if timestamp == -5:
            return -1, -1
        store = self._db()
        if timestamp == -3:
            found = store.max_timestamp_batch(topic_id, partition, start)
            return (-1, -1) if found is None else found
        if timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
        found = store.first_batch_at_or_after_timestamp(topic_id, partition, start, timestamp)
        if found is None:
            return -1, -1
        return max(found[0], start), found[1]

    def has_live_batches(self, object_key: str) -> bool | None:
        """Whether this shard still has live batches in the file; None: the file is unknown."""
        return self._db().has_live_batches(object_key)
