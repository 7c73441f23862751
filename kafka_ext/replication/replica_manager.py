"""ReplicaManager: the partitions this broker hosts, produce appends, fetch reads, purgatories.

Mirrors Kafka's ReplicaManager. Each hosted replica is a `Partition` (replication/partition.py)
that leads or follows as the metadata image says. A leader appends producers' batches and
serves consumers up to its high watermark; followers fetch from it (replication/
replica_fetcher.py) and each fetch tells it how far they are, which moves the high watermark
and the ISR (changes proposed to the controller through AlterPartition, replication/
alter_partition_manager.py). acks=all produces wait in a purgatory the high watermark wakes.
Batches are validated and appended whole; nothing here decodes a record. Everything runs on the
event loop; fsync happens in the broker's flush task, off the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_ext.controller.image import (
    MODE_NONE,
    ChunkImage,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import validate_batches
from kafka_ext.protocol.records import (
    TOPIC_COMPRESSION_CODECS,
    ControlRecordType,
    build_end_txn_marker,
    recompress_batch,
)
from kafka_ext.replication.chunk_filler import ChunkFiller
from kafka_ext.replication.partition import (
    ISR_JOIN_BACKOFF_MS,
    NO_BROKER_EPOCH,
    Partition,
    isr_ineligibility,
)
from kafka_ext.replication.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    UNLIMITED,
    ReplicationQuota,
    dynamic_broker_rate,
    throttled_partitions,
)
from kafka_ext.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True, frozen=True)
class ChunksBefore:
    removed: list[tuple[str, int, ChunkImage]]
    first_kept: int


class ReplicaManager:
    """Owned by the broker; all methods run on the event loop."""

    def __init__(self, node_id: int, log_manager: Any, log_config_for: Any,
                 remove_dir: Callable[[Path], None]) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.log_config_for = log_config_for  # (topic name) -> LogConfig
        self.remove_dir = remove_dir  # removes a deleted log's files off the event loop
        self.partitions: dict[TopicPartition, Partition] = {}
        # Partitions the metadata gives us whose log could not be opened (e.g. out of fds).
        self.storage_errors: dict[TopicPartition, str] = {}
        self._data_waiters: dict[TopicPartition, set[asyncio.Event]] = {}
        # The last image applied: tells a diskless partition (no log here) from an unknown one.
        self._image = MetadataImage()
        # (log, error) of a failed disk write; the broker takes the log's dir offline (KIP-112).
        self.on_storage_error: Callable[[Any, OSError], None] = lambda plog, exc: None
        # Set by the broker: where ISR changes go (AlterPartitionManager.submit), and where the
        # partitions this broker follows go ({tp: (leader id, leader epoch)} to the fetchers).
        self.propose_isr: Callable[[Partition, tuple[int, ...]], None] = lambda p, isr: None
        self.on_followed: Callable[[dict[TopicPartition, Partition]], None] = lambda tps: None
        # KIP-858: where a replica whose log dir the metadata does not record goes
        # (DirectoryAssignments.assign: topic id, partition, dir id).
        self.assign_directory: Callable[[uuid.UUID, int, uuid.UUID], None] = (
            lambda topic_id, partition, directory: None)
        self.replica_lag_time_max_ms = 30000
        # Reassignment throttles (replication/replication_quota.py): the budgets, read from the
        # image at each use, and the partitions whose replica here they hold back.
        self.leader_quota = ReplicationQuota(lambda: dynamic_broker_rate(
            self._image, node_id, LEADER_RATE, self.static_leader_rate))
        self.follower_quota = ReplicationQuota(lambda: dynamic_broker_rate(
            self._image, node_id, FOLLOWER_RATE, self.static_follower_rate))
        self.static_leader_rate = self.static_follower_rate = UNLIMITED
        self.leader_throttled: frozenset[TopicPartition] = frozenset()
        self.follower_throttled: frozenset[TopicPartition] = frozenset()
        self.clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000
        self.chunk_filler = ChunkFiller(self)  # new active chunks copy their closed tail
        # Set by the broker: fsyncs a log and its dir off the event loop (a sealed chunk).
        self.flush_later: Callable[[Any], object] = lambda plog: None
        # IsrShrinksPerSec, IsrExpandsPerSec, FailedIsrUpdatesPerSec (server/metrics.py).
        self.isr_shrinks = self.isr_expands = self.failed_isr_updates = 0

    # -- metadata changes --------------------------------------------------------------------

    def apply_image(self, old: MetadataImage | None, new: MetadataImage) -> None:
        """Create logs for new replicas, take the roles the image gives (leader or follower of
        an epoch), delete logs of removed topics and replicas, refresh configs.

        Diskless partitions get no log: their data lives in WAL objects (kafka_ext.diskless).
        """
        previous, self._image = self._image, new
        self._forget_isr_join_refusals(previous, new)
        self.leader_throttled = throttled_partitions(new, LEADER_REPLICAS, self.node_id)
        self.follower_throttled = throttled_partitions(new, FOLLOWER_REPLICAS, self.node_id)
        self._apply_chunks(new)
        assigned: set[TopicPartition] = set()
        for topic in new.topics_by_name.values():
            for part in topic.partitions.values():
                # A partition being deleted (mode None) is no longer hosted: its data goes.
                if (self.node_id in part.replicas and not part.is_diskless
                        and part.mode != MODE_NONE):
                    tp = (topic.name, part.partition_id)
                    assigned.add(tp)
                    try:
                        self._ensure_partition(topic, part)
                    except (OSError, KafkaError) as exc:  # this partition only; retried later
                        log.error("cannot open the log of %s-%d: %s", *tp, exc)
                        self.storage_errors[tp] = str(exc)
                    else:
                        self.storage_errors.pop(tp, None)
            if old is not None and old.topic_configs(topic.name) != new.topic_configs(topic.name):
                for p in topic.partitions:
                    hosted = self.partitions.get((topic.name, p))
                    if hosted is not None:
                        hosted.log.update_config(self.log_config_for(topic.name, new))
        # Partitions of deleted topics, and replicas moved off this broker (reassignment).
        removed = [tp for tp, p in self.partitions.items()
                   if new.topics_by_id.get(p.topic_id) is None or tp not in assigned]
        for tp in removed:
            self._remove_partition(tp)
        for tp in [tp for tp in self.storage_errors if tp[0] not in new.topics_by_name]:
            del self.storage_errors[tp]
        for tp in [tp for tp in self._data_waiters if tp[0] not in new.topics_by_name]:
            self._notify_data(tp)  # fetches long-polling a deleted diskless topic see the error
        self.on_followed({tp: p for tp, p in self.partitions.items() if not p.is_leader})

    def _apply_chunks(self, image: MetadataImage) -> None:
        """Inactive chunks (seed 000): the log we kept as a replica of a chunk the image
        has just closed becomes that chunk's replica, sealed in place (no data moves); chunk
        replicas no longer ours (the topic deleted, the chunk moved or gone) are removed."""
        wanted: set[tuple[str, int, int]] = set()
        for topic in image.topics_by_name.values():
            for part in topic.partitions.values():
                for chunk in part.chunks:
                    if self.node_id not in chunk.replicas:
                        continue
                    key = (topic.name, part.partition_id, chunk.start_offset)
                    wanted.add(key)
                    plog = self.log_manager.get_chunk_log(*key)
                    if plog is None and not self._stop_as_chunk(topic, part,
                                                                chunk.start_offset):
                        plog = self.log_manager.create_chunk_log(
                            *key, topic.topic_id, self.log_config_for(topic.name, None))
                    if plog is not None and plog.log_end_offset <= chunk.end_offset:
                        # Added to the chunk (or restarted while copying it): copy the rest.
                        self.chunk_filler.copy_chunk(topic.name, part.partition_id,
                                                     topic.topic_id, chunk, plog)
        for key in [k for k in self.log_manager.chunk_logs() if k not in wanted]:
            log.info("removing chunk %s-%d@%d: no longer a replica of it here", *key)
            self.remove_dir(self.log_manager.detach_chunk_log(*key))

    def _stop_as_chunk(self, topic: TopicImage, part: PartitionImage, start_offset: int) -> bool:
        """chunkStops: our replica of the active chunk was closed; it stops as a partition
        replica and goes on as the chunk's, keeping its data. False when the log we host is
        not the closed chunk's (AlterChunkAssignments added us to a chunk: it is copied)."""
        tp = (topic.name, part.partition_id)
        hosted = self.partitions.get(tp)
        if hosted is None or hosted.log.log_start_offset >= part.start_offset:
            return False
        del self.partitions[tp]
        hosted.fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                       f"{tp[0]}-{tp[1]}: the chunk here was closed; the "
                                       f"partition goes on at offset {part.start_offset}"))
        chunk_log = self.log_manager.seal_as_chunk(topic.name, part.partition_id, start_offset)
        self.flush_later(chunk_log)  # an fsync of up to a segment's worth: never on the loop
        self._notify_data(tp)
        log.info("%s-%d: our replica is now the inactive chunk starting at %d", *tp,
                 start_offset)
        return True

    def chunk_log(self, topic: str, partition: int, offset: int,
                  readers: bool) -> tuple[Any, Any] | None:
        """(chunk image, its log) of an inactive chunk this broker holds whose offsets include
        `offset`: up to its stop offset for consumers (`readers`), to its end for replicas
        copying it; None otherwise."""
        known = self._image.topics_by_name.get(topic)
        part = known.partitions.get(partition) if known is not None else None
        if part is None:
            return None
        for chunk in part.chunks:
            last = chunk.stop_offset if readers else chunk.end_offset
            if chunk.start_offset <= offset <= last:
                plog = self.log_manager.get_chunk_log(topic, partition, chunk.start_offset)
                # Readers only where the whole chunk is (not a copy under way); copiers
                # wherever the offset is.
                held = chunk.stop_offset if readers else offset
                if plog is not None and held < plog.log_end_offset:
                    return chunk, plog
        return None

    def expired_chunks(self, now_ms: int) -> list[tuple[str, int, ChunkImage]]:
        """Inactive chunks of the partitions this broker leads that retention removes whole
        (seed 000): their newest record older than retention.ms, or the oldest ones while the
        partition (its chunks as they were closed, and the active log here) holds more than
        retention.bytes. The leader decides because it alone sees the whole partition."""
        expired = []
        for (topic, partition), hosted in self.partitions.items():
            known = self._image.topics_by_name.get(topic)
            part = known.partitions.get(partition) if known is not None else None
            if not hosted.is_leader or part is None or not part.chunks:
                continue
            config = hosted.log.config
            if not config.deletes_by_retention:
                continue
            excess = -1
            if config.retention_bytes >= 0:
                excess = (hosted.log.size_bytes + sum(max(c.size_bytes, 0) for c in part.chunks)
                          - config.retention_bytes)
            for chunk in part.chunks:  # oldest first
                too_old = (config.retention_ms >= 0 and chunk.max_timestamp >= 0
                           and now_ms - chunk.max_timestamp > config.retention_ms)
                too_big = 0 <= chunk.size_bytes <= excess
                if not (too_old or too_big):
                    break
                excess -= max(chunk.size_bytes, 0)
                expired.append((topic, partition, chunk))
        return expired

    def chunks_before(self, topic: str, partition: int, offset: int) -> ChunksBefore:
        """The inactive chunks DeleteRecords to `offset` removes (all of each is below it),
        and where the partition then starts if a chunk remains (-1: none does)."""
        known = self._image.topics_by_name.get(topic)
        part = known.partitions.get(partition) if known is not None else None
        chunks = part.chunks if part is not None else ()
        removed = [(topic, partition, c) for c in chunks if c.stop_offset < offset]
        kept = [c.start_offset for c in chunks if c.stop_offset >= offset]
        return ChunksBefore(removed, kept[0] if kept else -1)

    def chunks_held(self, topic: str, partition: int) -> list[Any]:
        """The inactive chunks of the partition this broker holds a replica of."""
        known = self._image.topics_by_name.get(topic)
        part = known.partitions.get(partition) if known is not None else None
        if part is None:
            return []
        return [c for c in part.chunks
                if self.log_manager.get_chunk_log(topic, partition, c.start_offset) is not None]

    def _ensure_partition(self, topic: TopicImage, part: PartitionImage) -> None:
        tp = (topic.name, part.partition_id)
        hosted = self.partitions.get(tp)
        if hosted is None:
            plog = self.log_manager.get_log(topic.name, part.partition_id)
            if plog is not None and plog.topic_id not in (None, topic.topic_id):
                # A log left by an earlier topic of the same name: never serve its data.
                log.info("removing %s-%d of topic id %s", topic.name, part.partition_id,
                         plog.topic_id)
                self.remove_dir(self.log_manager.detach_log(topic.name, part.partition_id))
                plog = None
            if plog is None:
                plog = self.log_manager.create_log(topic.name, part.partition_id, topic.topic_id,
                                                   self.log_config_for(topic.name, None))
                if part.start_offset > 0:  # a chunk's replica holds nothing before its start
                    plog.truncate_fully_and_start_at(part.start_offset)
            else:  # loaded at start-up with the broker's defaults: the topic's configs apply
                plog.update_config(self.log_config_for(topic.name, None))
            hosted = Partition(topic.name, part.partition_id, topic.topic_id, plog, self.node_id)
            self.partitions[tp] = hosted
        was_leader, old_epoch = hosted.is_leader, hosted.leader_epoch
        hosted.replicas = part.replicas
        self._check_directory(hosted, part)
        if part.partition_epoch > hosted.partition_epoch:
            # A newer partition state replaces any proposal in flight, as in Kafka: the leader
            # proposes again from it if it still needs to.
            hosted.pending_isr = None
        if part.partition_epoch >= hosted.partition_epoch:
            self._count_isr_change(hosted, part.isr)
            hosted.isr = part.isr
            hosted.partition_epoch = part.partition_epoch
        # A new active chunk first copies the closed chunk's open-transaction tail; it takes
        # no role (leads nothing, follows nobody) until it holds it.
        filling = self.chunk_filler.fill_tail(hosted, part)
        hosted.leader_id = -1 if filling else part.leader
        hosted.leader_epoch = part.leader_epoch
        if hosted.is_leader:
            if not was_leader or old_epoch != part.leader_epoch:
                hosted.become_leader(self.clock_ms())
                log.info("leading %s-%d in epoch %d (ISR %s)", *tp, part.leader_epoch,
                         list(part.isr))
            hosted.track_replicas()  # replicas a reassignment added or removed
            self._maybe_advance_high_watermark(hosted)  # an ISR shrink may let it move
        elif was_leader or old_epoch != part.leader_epoch or filling:
            hosted.fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                           f"{topic.name}-{part.partition_id} is now led by "
                                           f"broker {part.leader}"))
            hosted.followers = {}
            hosted.pending_isr = None
            self._notify_data(tp)  # fetches waiting on it answer NOT_LEADER_OR_FOLLOWER

    def tail_filled(self, tp: TopicPartition) -> None:
        """The chunk filler is done with a new active chunk's replica: it takes its role."""
        hosted = self.partitions.get(tp)
        known = self._image.topics_by_name.get(tp[0])
        part = known.partitions.get(tp[1]) if known is not None else None
        if hosted is None or known is None or part is None:
            return
        self._ensure_partition(known, part)
        self.on_followed({tp: p for tp, p in self.partitions.items() if not p.is_leader})

    def check_directory(self, topic: str, partition: int) -> None:
        """After a replica moved between log dirs: the controller must learn its new dir."""
        hosted = self.partitions.get((topic, partition))
        known = self._image.topics_by_name.get(topic)
        part = known.partitions.get(partition) if known is not None else None
        if hosted is not None and part is not None:
            self._check_directory(hosted, part)

    def _check_directory(self, hosted: Partition, part: PartitionImage) -> None:
        """Tell the controller the log dir of our replica when the metadata says otherwise."""
        log_dir = self.log_manager.log_dir_of(hosted.topic, hosted.partition)
        if log_dir is None or not self.log_manager.has_directory_id(log_dir):
            return
        directory = self.log_manager.directory_id(log_dir)
        if part.directory_of(self.node_id) != directory:
            self.assign_directory(hosted.topic_id, hosted.partition, directory)

    def _remove_partition(self, tp: TopicPartition) -> None:
        hosted = self.partitions.pop(tp)
        hosted.fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                       f"{tp[0]}-{tp[1]} is no longer hosted here"))
        self.remove_dir(self.log_manager.detach_log(*tp))
        for event in self._data_waiters.pop(tp, ()):  # wake fetchers: they see the error
            event.set()

    # -- produce -----------------------------------------------------------------------------

    def is_diskless(self, topic: str, partition: int) -> bool:
        """Whether the current metadata maps this partition to a diskless coordinator."""
        return self._image.is_diskless(topic, partition)

    def leader_partition(self, topic: str, partition: int) -> Partition:
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            if self.is_diskless(topic, partition):
                # Produce/fetch/ListOffsets route these to the diskless path first; a classic
                # path reaching here is a bug, and NOT_LEADER would make clients retry forever.
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{topic}-{partition}: diskless partition served by the "
                                 "diskless path")
            if (topic, partition) in self.storage_errors:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 self.storage_errors[(topic, partition)])
            known = self._image.topics_by_name.get(topic)
            if known is not None and partition in known.partitions:  # led by another broker
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"{topic}-{partition} is led by broker "
                                 f"{known.partitions[partition].leader}")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"This server does not host this topic-partition: {topic}-{partition}")
        if not hosted.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition}")
        return hosted

    def writable_partition(self, topic: str, partition: int) -> Partition:
        """The leader replica, for an append; NOT_LEADER_OR_FOLLOWER (retriable) while
        CreateChunks closes its chunk: the writer comes back to the new chunk's leader."""
        hosted = self.leader_partition(topic, partition)
        if hosted.closing_chunk:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{topic}-{partition}: its chunk is being closed")
        return hosted

    def readable_partition(self, topic: str, partition: int, *, from_follower: bool) -> Partition:
        """The replica a consumer's fetch reads: the leader, or with `from_follower` (Fetch v11+,
        KIP-392) a follower too, which serves up to its own high watermark."""
        hosted = self.partitions.get((topic, partition))
        if from_follower and hosted is not None and not hosted.is_leader:
            return hosted
        return self.leader_partition(topic, partition)

    def append_records(self, topic: str, partition: int, records: Any, *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        """Validate the batches (headers and CRC only) and append them; returns LogAppendInfo."""
        hosted = self.writable_partition(topic, partition)
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "empty records")
        plog = hosted.log
        # Sizes, magic, CRC and the client rules; MESSAGE_TOO_LARGE is the log's to check.
        # Coordinators write transactional batches without sequences and their own markers.
        batches = validate_batches(records, from_client=origin is AppendOrigin.CLIENT)
        if len(batches) != 1:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Produce requests with version 3 and "
                             "above must contain exactly one record batch per partition")
        target = TOPIC_COMPRESSION_CODECS.get(plog.config.compression_type)
        if target is not None and batches[0][1].compression != target:
            records = recompress_batch(records, target)  # the one produce path that decodes
        # The log stamps LogAppendTime itself when the topic asks for it. A large produce frame
        # arrives as a bytearray this request owns alone: offsets are patched in it, uncopied.
        in_place = isinstance(records, memoryview) and not records.readonly
        try:
            info = plog.append_as_leader(records, hosted.leader_epoch, in_place=in_place,
                                         origin=origin)
        except OSError as exc:  # KIP-112: the log's dir goes offline, not the broker
            self.on_storage_error(plog, exc)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition}: {exc}") from exc
        self._notify_data((topic, partition))  # followers long-polling for it
        self._maybe_advance_high_watermark(hosted)  # at once when the leader is the whole ISR
        return info

    def append_control_batch(self, topic: str, partition: int, producer_id: int,
                             producer_epoch: int, coordinator_epoch: int, committed: bool) -> int:
        """Write a COMMIT/ABORT marker (WriteTxnMarkers) ending the producer's transaction
        here; returns its offset. The log indexes an aborted transaction and the last stable
        offset moves past it. Raises KafkaError (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)."""
        hosted = self.writable_partition(topic, partition)
        plog = hosted.log
        marker = build_end_txn_marker(
            ControlRecordType.COMMIT if committed else ControlRecordType.ABORT,
            producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, timestamp_ms=int(time.time() * 1000))
        try:
            info = plog.append_as_leader(marker, hosted.leader_epoch,
                                         origin=AppendOrigin.COORDINATOR)
        except OSError as exc:  # KIP-112: the log's dir goes offline, not the broker
            self.on_storage_error(plog, exc)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition}: {exc}") from exc
        self._notify_data((topic, partition))  # followers; read_committed fetchers (the LSO)
        self._maybe_advance_high_watermark(hosted)
        return int(info.first_offset)

    # -- acks=all and min.insync.replicas -----------------------------------------------------

    def check_min_insync(self, topic: str, partition: int) -> None:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS when the ISR is smaller than the
        topic's min.insync.replicas (nothing is appended then)."""
        hosted = self.leader_partition(topic, partition)
        needed = hosted.log.config.min_insync_replicas
        if len(hosted.isr) < needed:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{topic}-{partition} has {len(hosted.isr)} in-sync replica(s) "
                             f"{list(hosted.isr)}, below min.insync.replicas {needed}")

    def wait_for_acks(self, topic: str, partition: int, end_offset: int,
                      timeout_s: float) -> Awaitable[None] | None:
        """The acks=all purgatory: None when every ISR member already has the batch (the high
        watermark reached `end_offset`: at once when the leader is the whole ISR), else what to
        await until it does. Failures: REQUEST_TIMED_OUT after `timeout_s`,
        NOT_LEADER_OR_FOLLOWER if leadership moves first, NOT_ENOUGH_REPLICAS_AFTER_APPEND when
        the ISR it reached is below min.insync.replicas (the batch is in the log; the
        producer retries)."""
        hosted = self.leader_partition(topic, partition)
        if hosted.high_watermark >= end_offset:
            _check_isr_after_append(hosted)
            return None
        return self._await_acks(hosted, end_offset, timeout_s)

    async def _await_acks(self, hosted: Partition, end_offset: int, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(hosted.wait_for_high_watermark(end_offset), timeout_s)
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"{hosted.topic}-{hosted.partition}: the in-sync replicas "
                             f"{list(hosted.maximal_isr)} did not all reach offset {end_offset} "
                             "in time") from None
        _check_isr_after_append(hosted)

    async def wait_for_high_watermark(self, hosted: Partition, end_offset: int) -> None:
        """Until `hosted`'s high watermark reaches `end_offset` (coordinators, markers)."""
        await hosted.wait_for_high_watermark(end_offset)

    # -- followers, as their leader sees them ------------------------------------------------

    def record_follower_fetch(self, hosted: Partition, replica_id: int, fetch_offset: int,
                              log_start_offset: int,
                              broker_epoch: int = NO_BROKER_EPOCH) -> None:
        """A follower's fetch at `fetch_offset` (with the broker epoch it carried): it may join
        the ISR, and the high watermark may move (waking acks=all produces and consumers)."""
        now_ms = self.clock_ms()
        state = hosted.record_follower_fetch(replica_id, fetch_offset, log_start_offset, now_ms,
                                             broker_epoch)
        if hosted.pending_isr is None and hosted.may_join_isr(replica_id):
            self._maybe_expand_isr(hosted, replica_id, state.broker_epoch, now_ms)
        self._maybe_advance_high_watermark(hosted)

    def _maybe_expand_isr(self, hosted: Partition, replica_id: int, broker_epoch: int,
                          now_ms: float) -> None:
        """Kafka's maybeExpandIsr for a follower that has caught up: proposed only when the
        metadata shows it eligible (the controller would refuse it otherwise), and not again
        after a refusal until the metadata about it changes or the backoff passes. Checked on
        every fetch, so what holds a follower back is logged at debug level only."""
        registration = self._image.brokers.get(replica_id)
        reason = isr_ineligibility(registration, broker_epoch)
        if reason is None and replica_id in self._replicas_on_offline_dirs(hosted):
            reason = "its log dir is offline"  # KIP-858: the controller refuses it too
        if reason is not None:
            log.debug("%s-%d: broker %d caught up but may not join the ISR: %s", hosted.topic,
                      hosted.partition, replica_id, reason)
            return
        if hosted.isr_join_held_back(replica_id, now_ms):
            return
        if (self._high_watermark_frozen(hosted)
                and hosted.lags(replica_id, now_ms, self.replica_lag_time_max_ms)):
            # The high watermark it reached is stale: joining, it would be shrunk out again
            # at once (and the ISR flap) while still behind the log end.
            return
        log.info("%s-%d: broker %d caught up, asking for it to join the ISR",
                 hosted.topic, hosted.partition, replica_id)
        self._propose(hosted, hosted.isr + (replica_id,))

    def _forget_isr_join_refusals(self, old: MetadataImage, new: MetadataImage) -> None:
        """New metadata about a broker (fenced, unfenced, re-registered, shutting down) ends
        the refusals to add it: the leader may propose it again at its next fetch."""
        if old.brokers is new.brokers:
            return
        changed = {b for b in old.brokers.keys() | new.brokers.keys()
                   if old.brokers.get(b) != new.brokers.get(b)}
        if not changed:
            return
        for hosted in self.partitions.values():
            if hosted.isr_join_refusals:
                for broker_id in changed:
                    hosted.isr_join_refusals.pop(broker_id, None)

    def _replicas_on_offline_dirs(self, hosted: Partition) -> set[int]:
        known = self._image.topics_by_id.get(hosted.topic_id)
        part = known.partitions.get(hosted.partition) if known is not None else None
        return self._image.replicas_on_offline_dirs(part) if part is not None else set()

    def shrink_isrs(self) -> None:
        """Propose removing the followers that stayed behind for replica.lag.time.max.ms (run
        by the broker every half of it, as Kafka's isr-expiration task)."""
        now = self.clock_ms()
        for hosted in self.partitions.values():
            if not hosted.is_leader or hosted.pending_isr is not None:
                continue
            lagging = hosted.out_of_sync_replicas(now, self.replica_lag_time_max_ms)
            if lagging:
                log.info("%s-%d: broker(s) %s fell behind for %d ms; shrinking the ISR %s",
                         hosted.topic, hosted.partition, lagging, self.replica_lag_time_max_ms,
                         list(hosted.isr))
                self._propose(hosted, tuple(r for r in hosted.isr if r not in lagging))

    def _count_isr_change(self, hosted: Partition, isr: tuple[int, ...]) -> None:
        """IsrShrinksPerSec / IsrExpandsPerSec of a partition led here, counted where its ISR
        is replaced (the AlterPartition answer or the image, whichever comes first)."""
        if hosted.is_leader and len(isr) != len(hosted.isr):
            if len(isr) < len(hosted.isr):
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1

    def _propose(self, hosted: Partition, new_isr: tuple[int, ...]) -> None:
        hosted.pending_isr = new_isr
        self.propose_isr(hosted, new_isr)

    def isr_change_refused(self, hosted: Partition, proposed: tuple[int, ...],
                           error: ErrorCode) -> None:
        """The controller refused a proposal in the partition's current epochs (INELIGIBLE_
        REPLICA, OPERATION_NOT_ATTEMPTED, INVALID_REQUEST, ...): the committed ISR stays, and a
        follower it would have added is held back (Partition.refuse_isr_join) until the
        metadata about it changes or the backoff passes, where Kafka's leader would propose it
        again on its next fetch. A refusal repeated in unchanged metadata logs at debug."""
        now_ms = self.clock_ms()
        added = [r for r in proposed if r not in hosted.isr]
        backoffs = [hosted.refuse_isr_join(r, now_ms) for r in added]
        repeated = bool(backoffs) and min(backoffs) > ISR_JOIN_BACKOFF_MS
        if added:
            log.log(logging.DEBUG if repeated else logging.INFO,
                    "%s-%d: ISR change to %s refused: %s; broker(s) %s not proposed again "
                    "before the metadata about them changes or %d ms pass", hosted.topic,
                    hosted.partition, list(proposed), error.name, added, min(backoffs))
        else:
            log.info("%s-%d: ISR change to %s refused: %s", hosted.topic, hosted.partition,
                     list(proposed), error.name)
        self.isr_change_done(hosted, None, -1)

    def isr_change_done(self, hosted: Partition, isr: tuple[int, ...] | None,
                        partition_epoch: int) -> None:
        """The controller's answer to a proposal: the committed ISR (None: refused, the image
        has the truth)."""
        hosted.pending_isr = None
        if isr is None:
            self.failed_isr_updates += 1
        if isr is not None and partition_epoch > hosted.partition_epoch:
            self._count_isr_change(hosted, isr)
            hosted.isr = isr
            hosted.partition_epoch = partition_epoch
        if hosted.is_leader:
            self._maybe_advance_high_watermark(hosted)

    def _high_watermark_frozen(self, hosted: Partition) -> bool:
        """KIP-966: with eligible leader replicas, the high watermark stays while the ISR is
        below min.insync.replicas, so the ELR holds every committed record."""
        return (self._image.elr_enabled
                and len(hosted.isr) < hosted.log.config.min_insync_replicas)

    def _maybe_advance_high_watermark(self, hosted: Partition) -> None:
        if self._high_watermark_frozen(hosted):
            return
        if hosted.is_leader and hosted.maybe_advance_high_watermark():
            self._notify_data((hosted.topic, hosted.partition))  # consumers read up to it

    # -- fetch -------------------------------------------------------------------------------

    def notify_data(self, topic: str, partition: int) -> None:
        """Wake fetches waiting on a partition whose data lives elsewhere (diskless topics)."""
        self._notify_data((topic, partition))

    def _notify_data(self, tp: TopicPartition) -> None:
        waiters = self._data_waiters.pop(tp, None)
        if waiters:
            for event in waiters:
                event.set()

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Fetch purgatory: return when any of `tps` gets new data or the time is up."""
        event = asyncio.Event()
        registered = list(tps)
        for tp in registered:
            self._data_waiters.setdefault(tp, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in registered:
                waiters = self._data_waiters.get(tp)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._data_waiters[tp]


def _check_isr_after_append(hosted: Partition) -> None:
    needed = hosted.log.config.min_insync_replicas
    if len(hosted.maximal_isr) < needed:
        raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                         f"{hosted.topic}-{hosted.partition} has {len(hosted.maximal_isr)} "
                         f"in-sync replica(s), below min.insync.replicas {needed}")
