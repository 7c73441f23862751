"""ShareCoordinator: share-partition state over `__share_group_state`, a runtime tenant.

Mirrors Kafka's ShareCoordinatorService (KIP-932, Kafka 4.2). A share-partition's key
"groupId:topicId:partition" hashes to a partition of `__share_group_state` (Kafka's
abs(hashCode) % partitions); the broker leading that partition is its share coordinator, and
its shard (shard.py) holds the state. Each operation is one key: writes go through
`runtime.write` (validate, append, replay, wait for the high watermark) so an answer means the
state is replicated, and a read that writes nothing still waits for the writes before it to be
replicated (`wait_committed`), so it never shows state a failover could lose. These per-key
methods raise KafkaError; the handlers of keys 83-87 (server/share_state.py) and the
persister client (share/persister_client.py, for keys led here) call them.

Housekeeping, per loaded shard: every `share.coordinator.state.topic.prune.interval.ms` the
records below every live key's last snapshot are deleted (the topic is not compacted, see
shard.py), every `share.coordinator.cold.partition.snapshot.interval.ms` keys nobody wrote for
that long are snapshotted again, and a topic deleted from the metadata takes its keys' state
with it (tombstones). Loop-owned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_ext.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from kafka_ext.coordinator.share.shard import (
    MAX_KEYS_PER_WRITE,
    ShareCoordinatorShard,
    ShareShardConfig,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.persister import SharePartitionKey, ShareState, ShareStateSummary, StateBatch
from kafka_ext.storage.checkpoints import kafka_uuid_from_str

log = logging.getLogger(__name__)

T = TypeVar("T")

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
PRUNE_TIMER = "prune-share-group-state"
COLD_SNAPSHOT_TIMER = "snapshot-cold-share-partitions"
# share.coordinator.state.topic.compression.codec: Kafka's CompressionType ids.
COMPRESSION_CODECS = {0: "producer", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_coordinator_key(key: str) -> SharePartitionKey:
    """The share-partition of a FindCoordinator key "groupId:topicId:partition" (Kafka's
    SharePartitionKey.validate: three non-empty parts, a topic id, a partition >= 0); the topic
    id may be Kafka's base64 text or the hyphenated hex. INVALID_REQUEST otherwise."""
    parts = key.split(":")
    try:
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise ValueError("expected groupId:topicId:partition")
        group_id, topic_text, partition_text = parts
        topic_id = (uuid.UUID(topic_text) if len(topic_text) == 36
                    else kafka_uuid_from_str(topic_text))
        if not partition_text.isascii() or not partition_text.isdigit():
            raise ValueError(f"partition {partition_text!r} is not a number >= 0")
        partition = int(partition_text)
        if partition > 2**31 - 1:
            raise ValueError(f"partition {partition} is out of range")
    except ValueError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid key format: expected groupId:topicId:partition, found {key!r} "
                         f"({exc})") from None
    return SharePartitionKey(group_id, topic_id, partition)


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    """The share.coordinator.* broker settings (Kafka's ShareCoordinatorConfig)."""

    num_partitions: int = 50
    replication_factor: int = 1
    min_isr: int = 1
    segment_bytes: int = 100 * 1024 * 1024
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    compression_codec: int = 0
    prune_interval_ms: int = 5 * 60 * 1000
    cold_partition_snapshot_interval_ms: int = 5 * 60 * 1000

    @classmethod
    def from_broker_config(cls, config: Any) -> ShareCoordinatorConfig:
        def i(name: str) -> int:
            return int(config.get(f"share.coordinator.{name}"))
        return cls(
            num_partitions=i("state.topic.num.partitions"),
            replication_factor=i("state.topic.replication.factor"),
            min_isr=i("state.topic.min.isr"),
            segment_bytes=i("state.topic.segment.bytes"),
            snapshot_update_records_per_snapshot=i("snapshot.update.records.per.snapshot"),
            write_timeout_ms=i("write.timeout.ms"),
            compression_codec=i("state.topic.compression.codec"),
            prune_interval_ms=i("state.topic.prune.interval.ms"),
            cold_partition_snapshot_interval_ms=i("cold.partition.snapshot.interval.ms"),
        )

    def topic_configs(self) -> dict[str, str]:
        """`__share_group_state`'s own configs, as Kafka's shareGroupStateTopicConfigs: kept
        forever (the coordinator prunes it), never compacted (shard.py says why)."""
        return {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "compression.type": COMPRESSION_CODECS.get(self.compression_codec, "producer"),
            "min.insync.replicas": str(self.min_isr),
            "segment.bytes": str(self.segment_bytes),
            "unclean.leader.election.enable": "false",
        }


class ShareCoordinator:
    """`broker.share_coordinator`: the share coordinator's logic; callers map its KafkaErrors."""

    def __init__(self, broker: Any, config: ShareCoordinatorConfig | None = None,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self.broker = broker
        self.config = config or ShareCoordinatorConfig.from_broker_config(broker.config)
        self._clock_ms = clock_ms
        self._shard_config = ShareShardConfig(self.config.snapshot_update_records_per_snapshot)
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] = CoordinatorRuntime(
            broker, SHARE_GROUP_STATE_TOPIC, self.config.num_partitions,
            self.config.topic_configs(), self._new_shard,
            replication_factor=self.config.replication_factor)

    # -- placement and lifecycle -------------------------------------------------------------

    def partition_for(self, key: SharePartitionKey) -> int:
        """The `__share_group_state` partition (so the coordinator) of a share-partition."""
        return self.runtime.partition_for(key.coordinator_key())

    async def ensure_topic(self) -> None:
        """Create `__share_group_state` if missing (FindCoordinator does, as in Kafka)."""
        await self.runtime.ensure_topic()

    async def start(self) -> None:
        self.broker.controller.listeners.append(self._on_image)
        await self.runtime.start()

    async def stop(self) -> None:
        listeners = self.broker.controller.listeners
        if self._on_image in listeners:
            listeners.remove(self._on_image)
        await self.runtime.stop()

    def _new_shard(self, partition: int) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(partition, self._shard_config,
                                     lambda: self.broker.controller.image,
                                     self._shard_loaded)

    def _shard_loaded(self, partition: int) -> None:
        self._schedule(partition, PRUNE_TIMER, self.config.prune_interval_ms, self._prune)
        self._schedule(partition, COLD_SNAPSHOT_TIMER,
                       self.config.cold_partition_snapshot_interval_ms, self._snapshot_cold)
        deleted = self._deleted_topics(partition)
        if deleted:
            self.runtime.spawn(self._delete_topics_logged(partition, deleted))

    def _schedule(self, partition: int, key: str, delay_ms: int,
                  job: Callable[[int], Any]) -> None:
        try:
            self.runtime.schedule(partition, key, delay_ms, lambda: job(partition))
        except KafkaError:
            pass  # unloaded meanwhile: the timer dies with the shard

    # -- the five operations, one key each ---------------------------------------------------

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        """InitializeShareGroupState: (re)start the key's state at `start_offset`."""
        now = self._clock_ms()
        await self._write(key, lambda shard: shard.initialize(key, state_epoch, start_offset,
                                                               now))

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ShareState:
        """ReadShareGroupState by the partition leader at `leader_epoch`."""
        now = self._clock_ms()
        return await self._write(key, lambda shard: shard.read(key, leader_epoch, now))

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        """WriteShareGroupState: answered once the record is replicated."""
        now = self._clock_ms()
        await self._write(key, lambda shard: shard.write(
            key, state_epoch, leader_epoch, start_offset, delivery_complete_count, batches, now))

    async def delete(self, key: SharePartitionKey) -> None:
        """DeleteShareGroupState: a tombstone for the key."""
        await self._write(key, lambda shard: shard.delete(key))

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1
                           ) -> ShareStateSummary:
        """ReadShareGroupStateSummary; `leader_epoch` is accepted and not checked."""
        partition = self.partition_for(key)
        self.runtime.shard(partition)  # NOT_COORDINATOR / LOAD_IN_PROGRESS before waiting
        await self._committed(partition)
        return self.runtime.shard(partition).read_summary(key)

    async def _write(self, key: SharePartitionKey,
                     op: Callable[[ShareCoordinatorShard], CoordinatorResult[T]]) -> T:
        """One operation on the key's shard, answered when what it wrote and what was written
        before it are replicated; REQUEST_TIMED_OUT (as COORDINATOR_NOT_AVAILABLE, Kafka's
        mapping) after share.coordinator.write.timeout.ms."""
        partition = self.partition_for(key)
        wrote = False

        def tracked(shard: ShareCoordinatorShard) -> CoordinatorResult[T]:
            nonlocal wrote
            result = op(shard)
            wrote = bool(result.records)
            return result

        try:
            async with asyncio.timeout(self.config.write_timeout_ms / 1000):
                response = await self.runtime.write(partition, tracked)
                if not wrote:
                    await self.runtime.wait_committed(partition)
        except TimeoutError:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{SHARE_GROUP_STATE_TOPIC}-{partition} did not replicate within "
                             f"share.coordinator.write.timeout.ms") from None
        return response

    async def _committed(self, partition: int) -> None:
        try:
            async with asyncio.timeout(self.config.write_timeout_ms / 1000):
                await self.runtime.wait_committed(partition)
        except TimeoutError:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{SHARE_GROUP_STATE_TOPIC}-{partition} did not replicate within "
                             f"share.coordinator.write.timeout.ms") from None

    # -- housekeeping ------------------------------------------------------------------------

    async def _prune(self, partition: int) -> None:
        """Delete the records no key needs any more (Kafka's setupRecordPruning), up to the
        high watermark: what followers have not got stays until they have it."""
        self._schedule(partition, PRUNE_TIMER, self.config.prune_interval_ms, self._prune)
        await self.prune(partition)

    async def prune(self, partition: int) -> int:
        """Move the partition's log start offset to its shard's last redundant offset;
        returns the log start offset."""
        shard = self.runtime.shard(partition)
        hosted = self.broker.replica_manager.partitions.get((SHARE_GROUP_STATE_TOPIC, partition))
        if hosted is None:
            return -1
        plog = hosted.log
        offset = min(shard.last_redundant_offset(), plog.high_watermark)
        if offset <= plog.log_start_offset:
            return int(plog.log_start_offset)
        plog.delete_records_before(offset)
        await self.broker.run_blocking(self.broker.log_manager.checkpoint_log_start_offsets)
        remove_files = getattr(self.broker, "remove_deleted_segment_files", None)
        if remove_files is not None:
            await remove_files()
        log.debug("%s-%d: records before offset %d pruned", SHARE_GROUP_STATE_TOPIC, partition,
                  offset)
        return int(plog.log_start_offset)

    async def _snapshot_cold(self, partition: int) -> None:
        interval = self.config.cold_partition_snapshot_interval_ms
        self._schedule(partition, COLD_SNAPSHOT_TIMER, interval, self._snapshot_cold)
        await self.snapshot_cold_partitions(partition)

    async def snapshot_cold_partitions(self, partition: int) -> int:
        """Snapshot again the shard's keys unwritten for the cold interval; returns how many."""
        interval = self.config.cold_partition_snapshot_interval_ms
        total = 0
        while True:
            count = await self.runtime.write(partition, functools.partial(
                ShareCoordinatorShard.snapshot_cold_partitions, now_ms=self._clock_ms(),
                interval_ms=interval))
            total += count
            if count < MAX_KEYS_PER_WRITE:  # a full write: there may be more
                return total

    def _on_image(self, old: Any, new: Any) -> None:
        """Controller listener: the state of a deleted topic's keys goes with it."""
        if old is None:
            return
        deleted = old.topics_by_id.keys() - new.topics_by_id.keys()
        if not deleted:
            return
        for partition in self.runtime.loaded_partitions():
            self.runtime.spawn(self._delete_topics_logged(partition, set(deleted)))

    def _deleted_topics(self, partition: int) -> set[uuid.UUID]:
        """Topics a freshly loaded shard has state of but the metadata no longer has (deleted
        while no one led the shard)."""
        shard = self.runtime.shard(partition)
        topics = self.broker.controller.image.topics_by_id
        return {k.topic_id for k in shard.states if k.topic_id not in topics}

    async def _delete_topics_logged(self, partition: int, topic_ids: set[uuid.UUID]) -> None:
        try:
            count = await self.delete_topics(partition, topic_ids)
        except KafkaError as exc:  # moved or unloaded: the new leader's load does it
            log.info("%s-%d: state of deleted topics not dropped here: %s",
                     SHARE_GROUP_STATE_TOPIC, partition, exc)
            return
        if count:
            log.info("%s-%d: dropped the state of %d share-partition(s) of deleted topics",
                     SHARE_GROUP_STATE_TOPIC, partition, count)

    async def delete_topics(self, partition: int, topic_ids: set[uuid.UUID]) -> int:
        """Tombstone every key of `topic_ids` in the shard; returns how many."""
        total = 0
        while True:
            count = await self.runtime.write(partition,
                                             lambda shard: shard.delete_topics(topic_ids))
            total += count
            if count < MAX_KEYS_PER_WRITE:  # a full write: there may be more
                return total
