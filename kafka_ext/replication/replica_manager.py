"""ReplicaManager: the partitions this broker hosts, produce appends, fetch reads, fetch purgatory.

Mirrors Kafka's ReplicaManager for a single replica per partition: the leader's high watermark
is its log end offset once an append is in the log (every replica of the ISR has it). Batches
are validated and appended whole; nothing here decodes a record. Everything runs on the event
loop; fsync happens in the broker's flush task, off the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_ext.controller.image import MetadataImage, PartitionImage, TopicImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import validate_batches
from kafka_ext.protocol.records import (
    TOPIC_COMPRESSION_CODECS,
    ControlRecordType,
    build_end_txn_marker,
    recompress_batch,
)
from kafka_ext.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Partition:
    """A hosted partition; guarded by the event loop."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    log: Any  # storage.log.UnifiedLog
    leader_epoch: int
    is_leader: bool

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def check_leader_epoch(self, requested: int) -> None:
        """KIP-320: a client ahead of our epoch is told to wait, one behind is fenced; -1 skips."""
        if requested == -1 or requested == self.leader_epoch:
            return
        if requested > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                             f"epoch {requested} is newer than ours ({self.leader_epoch})")
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"epoch {requested} is older than ours ({self.leader_epoch})")


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

    # -- metadata changes --------------------------------------------------------------------

    def apply_image(self, old: MetadataImage | None, new: MetadataImage) -> None:
        """Create logs for new partitions, delete logs of removed topics, refresh configs.

        Diskless partitions get no log: their data lives in WAL objects (kafka_ext.diskless).
        """
        self._image = new
        for topic in new.topics_by_name.values():
            for part in topic.partitions.values():
                if self.node_id in part.replicas and not part.is_diskless:
                    tp = (topic.name, part.partition_id)
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
        removed = [tp for tp, p in self.partitions.items()
                   if new.topics_by_id.get(p.topic_id) is None]
        for tp in removed:
            self._remove_partition(tp)
        for tp in [tp for tp in self.storage_errors if tp[0] not in new.topics_by_name]:
            del self.storage_errors[tp]
        for tp in [tp for tp in self._data_waiters if tp[0] not in new.topics_by_name]:
            self._notify_data(tp)  # fetches long-polling a deleted diskless topic see the error

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
            else:  # loaded at start-up with the broker's defaults: the topic's configs apply
                plog.update_config(self.log_config_for(topic.name, None))
            plog.high_watermark = max(plog.high_watermark, plog.log_end_offset)
            hosted = Partition(topic.name, part.partition_id, topic.topic_id, plog,
                               part.leader_epoch, part.leader == self.node_id)
            self.partitions[tp] = hosted
        hosted.leader_epoch = part.leader_epoch
        hosted.is_leader = part.leader == self.node_id

    def _remove_partition(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp)
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

    def append_records(self, topic: str, partition: int, records: Any, *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        """Validate the batches (headers and CRC only) and append them; returns LogAppendInfo."""
        hosted = self.leader_partition(topic, partition)
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
        plog.high_watermark = plog.log_end_offset  # sole replica of the ISR
        self._notify_data((topic, partition))
        return info

    def append_control_batch(self, topic: str, partition: int, producer_id: int,
                             producer_epoch: int, coordinator_epoch: int, committed: bool) -> int:
        """Write a COMMIT/ABORT marker (WriteTxnMarkers) ending the producer's transaction
        here; returns its offset. The log indexes an aborted transaction and the last stable
        offset moves past it. Raises KafkaError (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)."""
        hosted = self.leader_partition(topic, partition)
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
        plog.high_watermark = plog.log_end_offset  # sole replica of the ISR
        self._notify_data((topic, partition))  # read_committed fetchers wait for the LSO
        return int(info.first_offset)

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
