"""ShareCoordinatorShard: the share-partition states of one `__share_group_state` partition.

Mirrors Kafka's ShareCoordinatorShard (Kafka 4.2). Each operation validates one key against the
current state and returns the record to log as a CoordinatorResult, without touching the shard;
the state changes only when the runtime replays that record, at load and after the append, so
a reload rebuilds exactly the state the writes built.

A write is logged as a ShareUpdate (its batches and start offset, merged over the state at
replay) until `snapshot_update_records_per_snapshot` updates follow the last ShareSnapshot;
the next write is then a ShareSnapshot of the whole merged state. A write that raises the
state epoch is a snapshot too (ShareUpdate carries none). Initialize is a snapshot with no
batches, Delete a tombstone. Leader and state epochs only grow while a key lives; a read by a
newer leader logs its epoch (a ShareUpdate with nothing else), so an older leader is fenced.

The topic is not compacted (Kafka's cleanup.policy=delete, retention.ms=-1): compaction would
keep only the last ShareUpdate of a key and lose the batches of the ones before it. Instead
the records below every live key's last snapshot are redundant (`last_redundant_offset`) and
the coordinator deletes them; keys nobody writes are snapshotted again now and then
(`snapshot_cold_partitions`) so they do not hold that offset back. Loop-owned.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kafka_ext.coordinator.runtime import CoordinatorResult
from kafka_ext.coordinator.share.records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    UNCHANGED,
    ShareSnapshot,
    ShareUpdate,
    read_share_snapshot_value,
    read_share_state_key,
    read_share_update_value,
    share_snapshot_value,
    share_state_key,
    share_update_value,
)
from kafka_ext.coordinator.share.state_batches import combine_state_batches
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.share.persister import (
    UNINITIALIZED_START_OFFSET,
    DeliveryState,
    SharePartitionKey,
    ShareState,
    ShareStateSummary,
    StateBatch,
)

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
NO_EPOCH = -1
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1
# Keys per cold-snapshot or topic-cleanup write, so one batch stays small.
MAX_KEYS_PER_WRITE = 500
# ACQUIRED is accepted as Kafka accepts it; ARCHIVING (3) is not a persisted state.
_WRITABLE_STATES = frozenset(DeliveryState)


@dataclass(frozen=True, slots=True)
class ShareShardConfig:
    """What a shard needs of the share coordinator's settings."""

    snapshot_update_records_per_snapshot: int = 500


def _snapshot_record(key: SharePartitionKey, snapshot: ShareSnapshot) -> Record:
    return share_state_key(SHARE_SNAPSHOT_RECORD_TYPE, key), share_snapshot_value(snapshot)


def _update_record(key: SharePartitionKey, update: ShareUpdate) -> Record:
    return share_state_key(SHARE_UPDATE_RECORD_TYPE, key), share_update_value(update)


def _tombstone(key: SharePartitionKey) -> Record:
    return share_state_key(SHARE_SNAPSHOT_RECORD_TYPE, key), None


def _or_current(value: int, current: int) -> int:
    return current if value == UNCHANGED else value


class ShareCoordinatorShard:
    """SharePartitionKey -> its state (a ShareSnapshot as one would be written now); changed
    only by replay. `image()` is the current metadata image: keys of a topic or partition it
    does not have are UNKNOWN_TOPIC_OR_PARTITION, as in Kafka."""

    def __init__(self, partition: int, config: ShareShardConfig, image: Callable[[], Any],
                 on_loaded: Callable[[int], None] | None = None,
                 on_unloaded: Callable[[int], None] | None = None) -> None:
        self.partition = partition
        self.config = config
        self._image = image
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self.states: dict[SharePartitionKey, ShareSnapshot] = {}
        self.updates_since_snapshot: dict[SharePartitionKey, int] = {}
        # Offset of each live key's last committed ShareSnapshot: nothing of the key before it
        # is needed. Only committed records count: a prune must never lean on a snapshot that a
        # failover could still take back.
        self.snapshot_offsets: dict[SharePartitionKey, int] = {}
        self.committed_offset = 0  # the high watermark the runtime last told
        # Snapshots and tombstones replayed but not committed yet: (offset, key, tombstone).
        self._pending: deque[tuple[int, SharePartitionKey, bool]] = deque()

    # -- CoordinatorShard --------------------------------------------------------------------

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        try:
            record_type, spk = read_share_state_key(key)
            if value is None:
                record: ShareSnapshot | ShareUpdate | None = None
            elif record_type == SHARE_SNAPSHOT_RECORD_TYPE:
                record = read_share_snapshot_value(value)
            else:
                record = read_share_update_value(value)
        except DecodeError as exc:
            # Unreadable records are skipped so every other key stays served.
            log.error("__share_group_state-%d: skipping the record at offset %d: %s",
                      self.partition, offset, exc)
            return
        if record is None:
            if record_type == SHARE_SNAPSHOT_RECORD_TYPE:
                self.states.pop(spk, None)
                self.updates_since_snapshot.pop(spk, None)
                self._pending.append((offset, spk, True))
            return  # a ShareUpdate key is never a tombstone: nothing to undo
        current = self.states.get(spk)
        if isinstance(record, ShareSnapshot):
            if current is not None and current.leader_epoch > record.leader_epoch:
                record = replace(record, leader_epoch=current.leader_epoch)
            self.states[spk] = record
            self.updates_since_snapshot[spk] = 0
            self._pending.append((offset, spk, False))
            return
        if current is None:
            # An update with no snapshot before it (Kafka keeps it as the state it names).
            start = record.start_offset
            self.states[spk] = ShareSnapshot(
                record.snapshot_epoch, NO_EPOCH, record.leader_epoch, start,
                record.delivery_complete_count, -1, -1,
                combine_state_batches((), record.batches, start))
            self.updates_since_snapshot[spk] = 1
            return
        start = _or_current(record.start_offset, current.start_offset)
        self.states[spk] = replace(
            current, leader_epoch=max(current.leader_epoch, record.leader_epoch),
            start_offset=start,
            delivery_complete_count=_or_current(record.delivery_complete_count,
                                                current.delivery_complete_count),
            batches=combine_state_batches(current.batches, record.batches, start))
        self.updates_since_snapshot[spk] = self.updates_since_snapshot.get(spk, 0) + 1

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               committed: bool, offset: int) -> None:
        """`__share_group_state` holds no transactional records."""

    def on_loaded(self) -> None:
        if self._on_loaded is not None:
            self._on_loaded(self.partition)

    def on_unloaded(self) -> None:
        if self._on_unloaded is not None:
            self._on_unloaded(self.partition)

    def on_committed(self, committed_offset: int) -> None:
        """The state is current after replay; only the prune's bookkeeping waits for this."""
        self.committed_offset = max(self.committed_offset, committed_offset)
        pending = self._pending
        while pending and pending[0][0] < self.committed_offset:
            offset, key, tombstone = pending.popleft()
            if tombstone:
                self.snapshot_offsets.pop(key, None)
            else:
                self.snapshot_offsets[key] = offset

    # -- operations (validate, return the records; never change the shard) ------------------

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   now_ms: int) -> CoordinatorResult[None]:
        """InitializeShareGroupState: a fresh snapshot at `start_offset` with no batches; an
        older state epoch than the stored one is FENCED_STATE_EPOCH."""
        self._check_key(key)
        current = self.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH,
                             f"state epoch {state_epoch} is older than {current.state_epoch}")
        snapshot = ShareSnapshot(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=NO_EPOCH if current is None else current.leader_epoch,
            start_offset=start_offset,
            # Nothing is delivered yet at a known start offset.
            delivery_complete_count=(0 if start_offset != UNINITIALIZED_START_OFFSET
                                     else UNKNOWN_DELIVERY_COMPLETE_COUNT),
            create_timestamp_ms=now_ms, write_timestamp_ms=now_ms, batches=())
        return CoordinatorResult([_snapshot_record(key, snapshot)], None)

    def read(self, key: SharePartitionKey, leader_epoch: int,
             now_ms: int) -> CoordinatorResult[ShareState]:
        """ReadShareGroupState by the partition leader: its state; FENCED_LEADER_EPOCH for an
        older leader than the last one, and a newer leader's epoch is logged."""
        current = self._initialized(key)
        if current.leader_epoch > leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {leader_epoch} is older than {current.leader_epoch}")
        state = ShareState(current.state_epoch, current.start_offset, list(current.batches))
        if leader_epoch == current.leader_epoch:
            return CoordinatorResult([], state)
        update = ShareUpdate(current.snapshot_epoch, leader_epoch, UNCHANGED, UNCHANGED, ())
        return CoordinatorResult([self._write_record(key, current, update, now_ms)], state)

    def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
              start_offset: int, delivery_complete_count: int, batches: Sequence[StateBatch],
              now_ms: int) -> CoordinatorResult[None]:
        """WriteShareGroupState: the new start offset and the batches that changed, merged
        over the stored state; FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for an older writer."""
        for b in batches:
            if b.first_offset > b.last_offset or b.first_offset < 0:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"state batch [{b.first_offset}, {b.last_offset}] is not a range")
            if b.delivery_state not in _WRITABLE_STATES:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"unknown delivery state {b.delivery_state}")
        current = self._initialized(key)
        if current.leader_epoch > leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {leader_epoch} is older than {current.leader_epoch}")
        if current.state_epoch > state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH,
                             f"state epoch {state_epoch} is older than {current.state_epoch}")
        update = ShareUpdate(current.snapshot_epoch, leader_epoch, start_offset,
                             delivery_complete_count,
                             combine_state_batches((), batches, start_offset))
        if state_epoch > current.state_epoch:
            return CoordinatorResult(
                [_snapshot_record(key, self._merged(current, update, state_epoch, now_ms))],
                None)
        return CoordinatorResult([self._write_record(key, current, update, now_ms)], None)

    def delete(self, key: SharePartitionKey) -> CoordinatorResult[None]:
        """DeleteShareGroupState: a tombstone; a key with no state answers NONE at once."""
        self._check_key(key)
        if key not in self.states:
            return CoordinatorResult([], None)
        return CoordinatorResult([_tombstone(key)], None)

    def read_summary(self, key: SharePartitionKey) -> ShareStateSummary:
        """ReadShareGroupStateSummary (DescribeShareGroupOffsets): epochs, start offset and
        delivery complete count; a pure read, it fences nobody."""
        current = self._initialized(key)
        return ShareStateSummary(current.state_epoch, current.leader_epoch,
                                 current.start_offset, current.delivery_complete_count)

    def delete_topics(self, topic_ids: Iterable[uuid.UUID]) -> CoordinatorResult[int]:
        """Tombstones for the keys of deleted topics (Kafka's maybeCleanupShareState), at most
        MAX_KEYS_PER_WRITE a write; the response is how many."""
        wanted = frozenset(topic_ids)
        keys = sorted(k for k in self.states if k.topic_id in wanted)[:MAX_KEYS_PER_WRITE]
        return CoordinatorResult([_tombstone(k) for k in keys], len(keys))

    def snapshot_cold_partitions(self, now_ms: int, interval_ms: int) -> CoordinatorResult[int]:
        """Snapshot again the keys nobody wrote for `interval_ms`, so their old snapshots stop
        holding back the prune (Kafka's snapshotColdPartitions). A snapshot taken here keeps its
        create time and gets a new write time; when every key is such a one, the partition is
        quiet and nothing is written."""
        if all(s.create_timestamp_ms != s.write_timestamp_ms for s in self.states.values()):
            return CoordinatorResult([], 0)
        records = [_snapshot_record(key, replace(s, snapshot_epoch=s.snapshot_epoch + 1,
                                                 write_timestamp_ms=now_ms))
                   for key, s in sorted(self.states.items())
                   if now_ms - s.write_timestamp_ms > interval_ms][:MAX_KEYS_PER_WRITE]
        return CoordinatorResult(records, len(records))

    def last_redundant_offset(self) -> int:
        """Records below this offset are not needed to rebuild any key's state: the first of
        the live keys' last committed snapshots, or everything committed when no key lives."""
        return min(self.snapshot_offsets.values(), default=self.committed_offset)

    # -- helpers -----------------------------------------------------------------------------

    def _write_record(self, key: SharePartitionKey, current: ShareSnapshot, update: ShareUpdate,
                      now_ms: int) -> Record:
        """The ShareUpdate, or a snapshot of the merged state once enough updates follow the
        last snapshot (0: every write is a snapshot)."""
        if (self.updates_since_snapshot.get(key, 0)
                < self.config.snapshot_update_records_per_snapshot):
            return _update_record(key, update)
        return _snapshot_record(key, self._merged(current, update, current.state_epoch, now_ms))

    @staticmethod
    def _merged(current: ShareSnapshot, update: ShareUpdate, state_epoch: int,
                now_ms: int) -> ShareSnapshot:
        """The state `update` makes of `current`, as a new snapshot written at `now_ms`."""
        start = _or_current(update.start_offset, current.start_offset)
        return ShareSnapshot(
            snapshot_epoch=current.snapshot_epoch + 1, state_epoch=state_epoch,
            leader_epoch=max(current.leader_epoch, update.leader_epoch), start_offset=start,
            delivery_complete_count=_or_current(update.delivery_complete_count,
                                                current.delivery_complete_count),
            create_timestamp_ms=now_ms, write_timestamp_ms=now_ms,
            batches=combine_state_batches(current.batches, update.batches, start))

    def _check_key(self, key: SharePartitionKey) -> None:
        """INVALID_REQUEST for a negative partition; UNKNOWN_TOPIC_OR_PARTITION for a topic or
        partition the metadata does not have."""
        if key.partition < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "The partition id cannot be a negative number.")
        topic = self._image().topics_by_id.get(key.topic_id)
        if topic is None or key.partition not in topic.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"unknown topic partition {key.topic_id}-{key.partition}")

    def _initialized(self, key: SharePartitionKey) -> ShareSnapshot:
        """The key's state; UNKNOWN_TOPIC_OR_PARTITION when it was never initialized (Kafka
        4.2 says INVALID_REQUEST there; docs/share-groups.md)."""
        self._check_key(key)
        current = self.states.get(key)
        if current is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"share-partition {key.coordinator_key()} is not initialized")
        return current
