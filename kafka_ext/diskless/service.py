"""DisklessService: the broker side of diskless topics, between the request handlers and the
object store and the Diskless coordinators (KIP-1150/1163/1164, docs/diskless.md).

Produce validates a batch by its header (as the classic path does) and hands it to the WAL
writer, which answers once the object is uploaded and committed. Transaction markers go the
same way: a control batch in a WAL object, which its coordinator checks against the producer's
epochs and uses to close the transaction (docs/diskless.md, "Transactions"). Fetch asks the
coordinators for the batches at the fetch offsets (DisklessFindBatches; READ_COMMITTED up to the
last stable offset, with the aborted transactions) and reads them through the object cache;
ListOffsets, DeleteRecords and DescribeProducers go to the coordinators. An image listener tells the
coordinators about diskless partitions created and topics deleted (DisklessCreatePartitions,
DisklessDeleteTopics), and a periodic task runs the orphan scanner on the one broker that leads
coordinator 0. Coordinator calls go through the CoordinatorClient: method calls for the
coordinators this broker leads, requests to their leaders for the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import MetadataImage
from kafka_ext.coordinator.diskless.snapshots import RemoteSnapshots
from kafka_ext.diskless.batch_reader import BatchReader
from kafka_ext.diskless.coordinator_client import CALL_TIMEOUT_S, CoordinatorClient
from kafka_ext.diskless.object_cache import ObjectCache
from kafka_ext.diskless.object_store import ObjectStore
from kafka_ext.diskless.orphan_scanner import OrphanScanner
from kafka_ext.diskless.wal_writer import AppendResult, WalWriter, client_error_code
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import TimestampType, validate_batches
from kafka_ext.protocol.records import (
    READ_COMMITTED,
    ControlRecordType,
    build_end_txn_marker,
    decode_records,
)
from kafka_ext.storage.log_validator import TimestampBounds, validate_batch_records

log = logging.getLogger(__name__)

_reg = registry()
_CreatePartitions = _reg["DisklessCreatePartitionsRequest"].cls
_DeleteTopics = _reg["DisklessDeleteTopicsRequest"].cls
_FindBatches = _reg["DisklessFindBatchesRequest"].cls
_ListOffsets = _reg["DisklessListOffsetsRequest"].cls
_DeleteRecords = _reg["DisklessDeleteRecordsRequest"].cls
_DescribeFiles = _reg["DisklessDescribeFilesRequest"].cls

# Batches one FindBatches answer may list per partition (a fetch reads at most this many).
MAX_BATCHES_PER_PARTITION = 500
# ListOffsets' special timestamp for the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3
# How long a reconciliation waits before retrying coordinators that were not ready.
_RECONCILE_RETRY_S = 0.5


@dataclass(slots=True)
class DisklessFetchResult:
    """One partition's share of a fetch: what the handler copies into its PartitionData."""

    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: list[Any] | None = None
    size_bytes: int = 0
    last_stable_offset: int = -1
    # READ_COMMITTED: (producer id, first offset) of the aborted transactions in `records`.
    aborted_transactions: list[tuple[int, int]] | None = None


class DisklessService:
    """Loop-owned; one per broker. `broker.diskless_coordinator` hosts the coordinators."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        config = broker.config
        self.coordinator = broker.diskless_coordinator  # the coordinators this broker leads
        # Any coordinator. A commit gives up well inside the orphan scan's grace period, so
        # the scanner never deletes an object whose commit is still being retried.
        self.client = CoordinatorClient(
            broker, self.coordinator,
            timeout_s=min(CALL_TIMEOUT_S,
                          config.diskless_coordinator_orphan_scan_grace_period_ms / 2000))
        self.store = ObjectStore.from_url(config.diskless_storage_url)
        self.coordinator.delete_object = self.store.delete
        self.coordinator.remote_snapshots = RemoteSnapshots(self.store, broker.run_blocking)
        self.coordinator.owners = self.client  # a file's other owners may lead elsewhere
        self.writer = WalWriter(self.store, self.client.commit_file,
                                self.client.coordinator_of, broker_id=broker.node_id,
                                max_bytes=config.diskless_wal_max_bytes,
                                max_ms=config.diskless_wal_max_ms)
        self.cache = ObjectCache(self.store, config.diskless_fetch_cache_max_bytes)
        self.reader = BatchReader(self.cache)
        self.orphan_scanner = OrphanScanner(
            self.store, self.client.oldest_file_timestamp_ms, self.files_known,
            grace_period_ms=config.diskless_coordinator_orphan_scan_grace_period_ms)
        # Partition counts each topic was last registered with at its coordinators.
        self._registered: dict[uuid.UUID, int] = {}
        self._reconcile_wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.broker.controller.listeners.append(self._on_image)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._reconcile_forever()))
        self._tasks.append(loop.create_task(self._scan_orphans_forever()))
        self._reconcile_wakeup.set()

    async def stop(self) -> None:
        listeners = self.broker.controller.listeners
        if self._on_image in listeners:
            listeners.remove(self._on_image)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.writer.close()

    # -- routing -----------------------------------------------------------------------------

    def is_diskless(self, topic: str, partition: int) -> bool:
        return bool(self.broker.controller.image.is_diskless(topic, partition))

    def topic_id(self, topic: str) -> uuid.UUID:
        found = self.broker.controller.image.topics_by_name.get(topic)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic}")
        return found.topic_id

    # -- produce -----------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, records: Any) -> AppendResult:
        """Validate one producer batch and append it through the WAL; answers once committed."""
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "empty records")
        batches = validate_batches(records, from_client=True)
        if len(batches) != 1:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Produce requests with version 3 and "
                             "above must contain exactly one record batch per partition")
        header = batches[0][1]
        config = self.broker.log_config_for(topic)
        if header.size_bytes > config.max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"batch of {header.size_bytes} bytes exceeds max.message.bytes "
                             f"{config.max_message_bytes} of {topic}")
        if config.message_timestamp_type == TimestampType.CREATE_TIME:  # KIP-467 record errors
            validate_batch_records(
                records, batches[0][0], header, topic=topic, partition=partition, compacted=False,
                timestamps=TimestampBounds.around(int(time.time() * 1000),
                                                  config.message_timestamp_before_max_ms,
                                                  config.message_timestamp_after_max_ms))
        result = await self.writer.append(self.topic_id(topic), partition, memoryview(records))
        # Fetches waiting here on the partition: its coordinator may lead elsewhere.
        self.broker.replica_manager.notify_data(topic, partition)
        return result

    # -- fetch -------------------------------------------------------------------------------

    async def write_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, committed: bool) -> int:
        """WriteTxnMarkers for a diskless partition, on whichever broker is asked: the control
        batch goes through the WAL like a produced batch and its coordinator closes the
        producer's transaction. Returns the marker's offset; raises the coordinator's error
        (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...)."""
        control_type = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
        marker = build_end_txn_marker(control_type, producer_id=producer_id,
                                      producer_epoch=producer_epoch,
                                      coordinator_epoch=coordinator_epoch,
                                      timestamp_ms=int(time.time() * 1000))
        result = await self.writer.append(self.topic_id(topic), partition, memoryview(marker),
                                          control_type=int(control_type),
                                          coordinator_epoch=coordinator_epoch)
        return result.base_offset

    async def fetch(self, requests: list[tuple[str, int, int, int]], max_bytes: int, *,
                    first: bool = True, isolation_level: int = 0) -> list[DisklessFetchResult]:
        """Read (topic, partition, fetch offset, partition max bytes) tuples within max_bytes.

        One FindBatches call covers every partition; the first partition with data may exceed
        the budgets by one batch, as Kafka's fetch does, so a large batch never blocks;
        `first` says whether the response has no data yet from classic partitions.
        READ_COMMITTED reads up to the last stable offset and lists the aborted transactions
        among the batches read.
        """
        image = self.broker.controller.image
        topics: dict[uuid.UUID, Any] = {}
        topic_ids: dict[str, uuid.UUID] = {}
        for topic, partition, offset, partition_max_bytes in requests:
            found_topic = image.topics_by_name.get(topic)
            if found_topic is None:
                continue  # deleted since the fetch was resolved: answered unknown below
            topic_id = topic_ids[topic] = found_topic.topic_id
            entry = topics.get(topic_id)
            if entry is None:
                entry = topics[topic_id] = _FindBatches.DisklessFindBatchesTopic(
                    topic_id=topic_id, partitions=[])
            entry.partitions.append(_FindBatches.DisklessFindBatchesPartition(
                partition_index=partition, offset=offset,
                max_partition_fetch_bytes=partition_max_bytes))
        if not topics:
            return [DisklessFetchResult(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    for _ in requests]
        response = await self.client.find_batches(_FindBatches(
            fetch_max_bytes=max_bytes, max_batches_per_partition=MAX_BATCHES_PER_PARTITION,
            topics=list(topics.values()), isolation_level=isolation_level))
        found: dict[tuple[uuid.UUID, int], Any] = {
            (t.topic_id, p.partition_index): p for t in response.topics for p in t.partitions}
        await self._prefetch(found.values())
        results = []
        total = 0
        for topic, partition, _offset, partition_max_bytes in requests:
            topic_id = topic_ids.get(topic)
            answer = None if topic_id is None else found.get((topic_id, partition))
            if answer is None:
                results.append(DisklessFetchResult(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            result = DisklessFetchResult(
                int(client_error_code(answer.error_code)) if answer.error_code else 0,
                answer.high_watermark, answer.log_start_offset, [],
                last_stable_offset=answer.last_stable_offset)
            if isolation_level == READ_COMMITTED:
                result.aborted_transactions = []
            results.append(result)
            if answer.error_code or not answer.batches:
                continue
            budget = min(partition_max_bytes, max_bytes - total)
            chosen = _within_budget(answer.batches, budget, first=first and total == 0)
            if not chosen:
                continue
            stamp = (self.broker.log_config_for(topic).message_timestamp_type
                     == TimestampType.LOG_APPEND_TIME)
            try:
                result.records = await self.reader.read(chosen, stamp_log_append_time=stamp)
            except OSError as exc:
                log.warning("diskless fetch of %s-%d failed reading the object store: %s",
                            topic, partition, exc)
                result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                continue
            result.size_bytes = sum(b.byte_size for b in chosen)
            total += result.size_bytes
            if result.aborted_transactions is not None:
                read_end = chosen[-1].last_offset
                result.aborted_transactions = [(t.producer_id, t.first_offset)
                                               for t in answer.aborted_transactions
                                               if t.first_offset <= read_end]
        return results

    async def _prefetch(self, answers: Iterable[Any]) -> None:
        """Load the objects the answers name into the cache concurrently, so a fetch over
        partitions in different objects waits for one store round trip, not one each. A
        failure is left for the read of that partition to report."""
        keys = list(dict.fromkeys(b.object_key for a in answers for b in a.batches))
        if len(keys) > 1:
            await asyncio.gather(*(self.cache.get(k) for k in keys), return_exceptions=True)

    # -- offsets and deletion ----------------------------------------------------------------

    async def list_offset(self, topic: str, partition: int, timestamp: int,
                          isolation_level: int = 0) -> tuple[int, int]:
        """(offset, timestamp) for one ListOffsets query, strictly after every earlier write;
        READ_COMMITTED's latest offset is the last stable offset."""
        request = _ListOffsets(topics=[_ListOffsets.DisklessListOffsetsTopic(
            topic_id=self.topic_id(topic), partitions=[
                _ListOffsets.DisklessListOffsetsPartition(partition_index=partition,
                                                          timestamp=timestamp)])],
            isolation_level=isolation_level)
        response = await self.client.list_offsets(request)
        answer = response.topics[0].partitions[0]
        if answer.error_code:
            raise KafkaError(client_error_code(answer.error_code), answer.error_message)
        by_record_time = (timestamp >= 0 or timestamp == MAX_TIMESTAMP) and (
            self.broker.log_config_for(topic).message_timestamp_type == TimestampType.CREATE_TIME)
        if answer.offset < 0 or not by_record_time:
            return answer.offset, answer.timestamp
        return await self._record_offset(topic, partition, answer.offset, timestamp)

    async def describe_producers(self, topic: str, partition: int) -> Any:
        """DescribeProducers' PartitionResponse for a diskless partition, from its coordinator."""
        return await self.client.describe_producers(topic, self.topic_id(topic), partition)

    async def _record_offset(self, topic: str, partition: int, batch_offset: int,
                             timestamp: int) -> tuple[int, int]:
        """The coordinator keeps batches, not records: read the batch it found and pick the
        record Kafka would answer, the first at or after `timestamp`, or for MAX_TIMESTAMP the
        first with the largest timestamp. Decodes one batch; ListOffsets is not a hot path."""
        [found] = await self.fetch([(topic, partition, batch_offset, 1)], 1)
        if found.error_code or not found.records:
            raise KafkaError(ErrorCode(found.error_code or ErrorCode.UNKNOWN_SERVER_ERROR),
                             f"{topic}-{partition}: the batch at {batch_offset} could not be read")
        _, records = decode_records(b"".join(found.records))
        if timestamp == MAX_TIMESTAMP:
            best = max(records, key=lambda r: (r.timestamp, -r.offset))
            return best.offset, best.timestamp
        for record in records:
            if record.offset >= batch_offset and record.timestamp >= timestamp:
                return record.offset, record.timestamp
        return batch_offset, -1  # the batch's max timestamp says a record qualifies

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Move the partition's log start offset (-1: the high watermark); the new low mark."""
        request = _DeleteRecords(topics=[_DeleteRecords.DisklessDeleteRecordsTopic(
            topic_id=self.topic_id(topic), partitions=[
                _DeleteRecords.DisklessDeleteRecordsPartition(partition_index=partition,
                                                              offset=offset)])])
        response = await self.client.delete_records(request)
        answer = response.topics[0].partitions[0]
        if answer.error_code:
            raise KafkaError(client_error_code(answer.error_code), answer.error_message)
        return answer.low_watermark

    async def files_known(self, object_keys: list[str]) -> set[str]:
        """The keys some coordinator knows (DisklessDescribeFiles), for the orphan scanner."""
        if not object_keys:
            return set()
        response = await self.client.describe_files(_DescribeFiles(
            files=[_DescribeFiles.DisklessDescribeFileEntry(object_key=k) for k in object_keys]))
        return {f.object_key for f in response.files
                if f.error_code != ErrorCode.DISKLESS_FILE_NOT_FOUND}

    async def ensure_registered(self, topics: Iterable[str]) -> None:
        """Register new diskless partitions with their coordinators before answering a
        CreateTopics or CreatePartitions, so that a produce right after it succeeds."""
        image = self.broker.controller.image
        wanted = [image.topics_by_name[t] for t in topics if t in image.topics_by_name]
        await self._register(image, [t for t in wanted if _is_diskless_topic(t)])

    # -- background --------------------------------------------------------------------------

    def _on_image(self, old: MetadataImage | None, new: MetadataImage) -> None:
        self._reconcile_wakeup.set()
        self.client.on_image(old, new)

    async def _reconcile_forever(self) -> None:
        """Keep the coordinators' partitions in line with the image; retries what failed."""
        while True:
            await self._reconcile_wakeup.wait()
            self._reconcile_wakeup.clear()
            try:
                done = await self._reconcile()
            except KafkaError as exc:
                log.info("diskless reconciliation will be retried: %s", exc)
                done = False
            if not done:
                await asyncio.sleep(_RECONCILE_RETRY_S)
                self._reconcile_wakeup.set()

    async def _reconcile(self) -> bool:
        image = self.broker.controller.image
        diskless = [t for t in image.topics_by_name.values() if _is_diskless_topic(t)]
        if self.coordinator.loading():
            return False  # a loading shard answers nothing yet; retried shortly
        ok = await self._register(image, diskless)
        # Topics deleted while this broker was down are gone from the image but not from the
        # coordinators: ask them what they know, not what this process registered.
        gone = [topic_id for topic_id in self.coordinator.known_topic_ids()
                if topic_id not in image.topics_by_id]
        if gone:
            response = await self.coordinator.delete_topics(_DeleteTopics(topics=[
                _DeleteTopics.DisklessDeletableTopicState(topic_id=t) for t in gone]))
            for result in response.responses:
                self._registered.pop(result.topic_id, None)
                if result.error_code not in (0, ErrorCode.UNKNOWN_TOPIC_ID,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    ok = False
        return ok

    async def _register(self, image: MetadataImage, topics: list[Any]) -> bool:
        pending = [t for t in topics if self._registered.get(t.topic_id) != len(t.partitions)]
        if not pending:
            return True
        response = await self.client.create_partitions(_CreatePartitions(topics=[
            _CreatePartitions.DisklessCreatablePartitions(
                topic_id=t.topic_id, name=t.name, num_partitions=len(t.partitions))
            for t in pending]))
        ok = True
        counts = {t.topic_id: len(t.partitions) for t in pending}
        for result in response.topics:
            if result.error_code == 0:
                self._registered[result.topic_id] = counts[result.topic_id]
            else:
                ok = False
                log.info("diskless coordinator not ready for topic %s: %s %s", result.topic_id,
                         ErrorCode(result.error_code).name, result.error_message)
        return ok

    async def _scan_orphans_forever(self) -> None:
        interval_s = self.broker.config.diskless_coordinator_orphan_scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if self.client.leader_of(0) != self.broker.node_id:
                continue  # one scanner in the cluster: the leader of coordinator 0 runs it
            started = time.monotonic()
            try:
                deleted = await self.orphan_scanner.scan_once()
            except (OSError, KafkaError) as exc:
                log.warning("orphan scan failed (retried in %.0f s): %s", interval_s, exc)
                continue
            if deleted:
                log.info("orphan scan deleted %d object(s) in %.1f s: %s", len(deleted),
                         time.monotonic() - started, ", ".join(deleted[:10]))


def _is_diskless_topic(topic: Any) -> bool:
    return any(p.is_diskless for p in topic.partitions.values())


def _within_budget(batches: list[Any], budget: int, *, first: bool) -> list[Any]:
    """The leading batches that fit `budget` bytes; at least one when this is the first data."""
    chosen: list[Any] = []
    used = 0
    for batch in batches:
        if used + batch.byte_size > budget and (chosen or not first):
            break
        chosen.append(batch)
        used += batch.byte_size
    return chosen
