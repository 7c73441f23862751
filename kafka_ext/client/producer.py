"""Our asyncio producer: batching, acks, idempotence, retries, and the proposals' client side.

Mirrors Kafka's `KafkaProducer` with its `Sender`: `send()` places a record in a partition
(murmur2 of the key, sticky without one, or the caller's), the accumulator batches it per
partition for `linger_ms`, and one sender task ships ready batches to each leader in one Produce
request per broker. Idempotence is on by default with acks=all, as in Kafka 3.x: InitProducerId,
then a sequence number per partition, so a resent batch is stored once. Retriable errors refresh
the metadata and resend until `delivery_timeout_ms`.

The proposals (docs/client.md):
- KIP-253 (seed 001): every Produce topic carries our tagged `PartitionNumber`, the partition
  count the batch's records were placed with. The broker refuses a batch placed under another
  count with INVALID_PARTITION_COUNT; we refresh the metadata and place its keyed records again
  with the new count, because a retry into the old partition would land after the offset
  threshold new-partition readers wait for, and could be read after the key's newer records.
  Batches of a topic placed under two counts are never in flight together.
- Partition reduction (seed 002): ReadOnly and None partitions are never chosen; a record sent
  explicitly to one fails with PARTITION_NOT_WRITABLE. When a partition stops taking writes,
  its waiting records that the partitioner placed move to a writable one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_ext.client.accumulator import (
    PartitionChoice,
    PendingRecord,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    record_size,
)
from kafka_ext.client.connection import DEFAULT_REQUEST_TIMEOUT_MS
from kafka_ext.client.metadata import ClusterMetadata, TopicMetadata, TopicPartition
from kafka_ext.client.network_client import (
    DEFAULT_METADATA_MAX_AGE_MS,
    DEFAULT_RETRY_BACKOFF_MS,
    NetworkClient,
)
from kafka_ext.client.partitioner import StickyPartitioner, partition_for_key
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import Compression
from kafka_ext.protocol.records import Header, Record, build_batch

log = logging.getLogger(__name__)

PRODUCE_VERSION = 11  # v9+ is flexible and carries PartitionNumber; v3+ carries v2 batches
PRODUCE_MIN_VERSION = 3
INIT_PRODUCER_ID_VERSION = 5
SEQUENCE_MODULUS = 1 << 31  # sequences wrap at 2^31, as Kafka's do
# Answers after which the batch may be in the log although we were told otherwise, or nothing.
_OUTCOME_UNKNOWN = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
                              ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                              ErrorCode.UNKNOWN_SERVER_ERROR})
# Answers that mean our metadata is stale: refresh before the retry.
_STALE_METADATA = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR,
                             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NETWORK_EXCEPTION,
                             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.INVALID_PARTITION_COUNT,
                             ErrorCode.PARTITION_NOT_WRITABLE})
# Answers that the proposals make recoverable by placing records again after a refresh.
_PLACE_AGAIN = frozenset({ErrorCode.INVALID_PARTITION_COUNT, ErrorCode.PARTITION_NOT_WRITABLE})
# Answers after which the producer id must be fetched again and sequences restart.
_RESET_PRODUCER_ID = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH})
_RETRIABLE_INIT = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                             ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT})

_COMPRESSION_NAMES = {"none": Compression.NONE, "uncompressed": Compression.NONE,
                      "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                      "lz4": Compression.LZ4, "zstd": Compression.ZSTD}

_reg = registry()
_Produce = _reg["ProduceRequest"].cls
_InitProducerId = _reg["InitProducerIdRequest"].cls

HeadersArg = Mapping[str, bytes | None] | Sequence[tuple[str, bytes | None]] | None


def parse_acks(acks: int | str) -> int:
    """Kafka's acks setting: 0, 1, or all (-1)."""
    text = str(acks).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ValueError(f"acks must be 0, 1 or all, not {acks!r}")


def parse_compression(compression: str | Compression) -> Compression:
    if isinstance(compression, Compression):
        return compression
    try:
        return _COMPRESSION_NAMES[compression.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown compression type {compression!r}") from None


def _now_ms() -> float:
    return time.monotonic() * 1000


def _error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class Producer:
    """Sends records to topics; `async with Producer(...)` or `start()`/`close()`.

    Owned by one event loop. `send()` may be called from many tasks at once; records of one
    partition are written in the order their `send()` calls placed them.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], *,
                 client_id: str = "kafka-ext-producer",
                 acks: int | str = "all",
                 enable_idempotence: bool | None = None,
                 linger_ms: int = 5,
                 batch_size_bytes: int = 16384,
                 batch_max_records: int | None = None,
                 compression: str | Compression = Compression.NONE,
                 compression_level: int | None = None,
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 delivery_timeout_ms: int = 120_000,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 max_request_size_bytes: int = 1_048_576,
                 buffer_memory_bytes: int = 32 * 1024 * 1024,
                 max_block_ms: int = 60_000,
                 send_partition_count: bool = True) -> None:
        self.acks = parse_acks(acks)
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1  # Kafka 3.x: on unless acks says otherwise
        elif enable_idempotence and self.acks != -1:
            raise ValueError("an idempotent producer needs acks=all")
        self.enable_idempotence = enable_idempotence
        self.compression = parse_compression(compression)
        self.compression_level = compression_level
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_request_size_bytes = max_request_size_bytes
        self.buffer_memory_bytes = buffer_memory_bytes
        self.max_block_ms = max_block_ms
        self.send_partition_count = send_partition_count
        self._client = NetworkClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms, retry_backoff_ms=retry_backoff_ms,
            allow_auto_topic_creation=True)
        self._accumulator = RecordAccumulator(batch_size_bytes=batch_size_bytes,
                                              linger_ms=linger_ms,
                                              batch_max_records=batch_max_records)
        self._sticky = StickyPartitioner(batch_size_bytes)
        self._producer_id = -1
        self._producer_epoch = -1
        self._producer_id_stale = enable_idempotence
        self._next_sequence: dict[TopicPartition, int] = {}
        self._buffered_bytes = 0
        self._buffer_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._metadata_stale = False
        self._placed_under: ClusterMetadata | None = None  # the snapshot batches were checked against
        self._flushing = 0
        self._closing = False
        self._starting: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (bootstrap and metadata) and start the sender task; idempotent."""
        if self._sender is not None:
            return
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._client.start())
        starting = self._starting
        try:
            await asyncio.shield(starting)
        except BaseException:
            if self._starting is starting and starting.done():
                self._starting = None  # the next call tries again
            raise
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._run_sender())
            self._sender.add_done_callback(self._sender_done)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Deliver what is waiting (bounded by the delivery timeout), then disconnect."""
        if self._sender is not None and not self._closing:
            self._closing = True
            self._wakeup.set()
            await asyncio.wait([self._sender])
            if self._requests:
                await asyncio.wait(list(self._requests))
        await self._client.close()

    def _sender_done(self, task: asyncio.Task[None]) -> None:
        """The sender ended; a crash fails every waiting record rather than hanging them."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        log.error("producer sender failed", exc_info=error)
        for batch in list(self._accumulator.batches()):
            batch.fail(KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"producer failed: {error}"))

    # -- sending -------------------------------------------------------------------------------

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   partition: int | None = None, headers: HeadersArg = None,
                   timestamp_ms: int | None = None) -> RecordMetadata:
        """Send one record and wait for its acknowledgement: (partition, offset).

        Raises KafkaError with the broker's code once retries are exhausted, or at once for a
        partition that does not exist or takes no writes.
        """
        future = await self.enqueue(topic, value, key, partition, headers, timestamp_ms)
        return await future

    async def enqueue(self, topic: str, value: bytes | None, key: bytes | None = None,
                      partition: int | None = None, headers: HeadersArg = None,
                      timestamp_ms: int | None = None) -> asyncio.Future[RecordMetadata]:
        """Place one record in its batch and return the future of its acknowledgement.

        Waits only for the topic's metadata and for buffer space (`max_block_ms` each).
        """
        if self._closing:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the producer is closed")
        await self.start()
        header_list = _headers(headers)
        size = record_size(key, value, header_list)
        await self._reserve(size)
        try:
            meta = await self.topic_metadata(topic)
            chosen, choice = self._choose(meta, key, partition, size)
        except BaseException:
            self._release(size)
            raise
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _: self._release(size))
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        record = PendingRecord(key, value, header_list, stamp, future, choice, size)
        self._accumulator.append(TopicPartition(topic, chosen), record, meta.partition_count,
                                 _now_ms())
        self._wakeup.set()
        return future

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged or failed."""
        futures = [r.future for b in self._accumulator.batches() for r in b.records]
        if not futures:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._flushing -= 1

    async def topic_metadata(self, topic: str) -> TopicMetadata:
        """The topic's metadata, waiting up to `max_block_ms` for it to exist (auto-creation)."""
        if self._client.add_topics([topic]):
            await self._client.refresh_metadata()
        deadline = _now_ms() + self.max_block_ms
        while True:
            meta = self._client.metadata.topic(topic)
            if meta is not None and meta.error == ErrorCode.NONE and meta.partitions:
                return meta
            error = meta.error if meta is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if error not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             ErrorCode.LEADER_NOT_AVAILABLE) and not error.retriable:
                raise KafkaError(error, f"topic {topic}")
            if _now_ms() >= deadline:
                raise KafkaError(error if error != ErrorCode.NONE
                                 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic {topic} not available after {self.max_block_ms} ms")
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            await self._client.refresh_metadata()

    def _choose(self, meta: TopicMetadata, key: bytes | None, partition: int | None,
                size: int) -> tuple[int, PartitionChoice]:
        """The partition of a new record, and who chose it."""
        if partition is not None:
            self._check_writable(meta, partition)
            return partition, PartitionChoice.EXPLICIT
        writable = meta.writable_partitions
        if not writable:
            raise KafkaError(ErrorCode.PARTITION_NOT_WRITABLE,
                             f"topic {meta.name} has no writable partition")
        if key is not None:
            return partition_for_key(key, writable), PartitionChoice.KEY
        return self._sticky.partition(meta.name, writable, size), PartitionChoice.STICKY

    @staticmethod
    def _check_writable(meta: TopicMetadata, partition: int) -> None:
        info = meta.partitions.get(partition)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {meta.name} has no partition {partition}")
        if not info.writable:
            raise KafkaError(ErrorCode.PARTITION_NOT_WRITABLE,
                             f"{meta.name}-{partition} is {info.mode.name}: it takes no writes")

    def _place_again(self, meta: TopicMetadata, record: PendingRecord, partition: int) -> int:
        """Where a record taken back from a batch goes under the current metadata."""
        if record.choice is PartitionChoice.EXPLICIT:
            self._check_writable(meta, partition)
            return partition
        writable = meta.writable_partitions
        if not writable:
            raise KafkaError(ErrorCode.PARTITION_NOT_WRITABLE,
                             f"topic {meta.name} has no writable partition")
        if record.choice is PartitionChoice.KEY:
            assert record.key is not None
            return partition_for_key(record.key, writable)
        if partition in writable:
            return partition
        return self._sticky.partition(meta.name, writable, record.size_bytes)

    async def _reserve(self, size: int) -> None:
        """Wait for buffer space (Kafka's buffer.memory and max.block.ms)."""
        deadline = _now_ms() + self.max_block_ms
        while self._buffered_bytes and self._buffered_bytes + size > self.buffer_memory_bytes:
            self._buffer_freed.clear()
            left_ms = deadline - _now_ms()
            if left_ms <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"no buffer space within {self.max_block_ms} ms")
            try:
                await asyncio.wait_for(self._buffer_freed.wait(), left_ms / 1000)
            except TimeoutError:
                pass
        self._buffered_bytes += size

    def _release(self, size: int) -> None:
        self._buffered_bytes -= size
        self._buffer_freed.set()

    # -- the sender ----------------------------------------------------------------------------

    async def _run_sender(self) -> None:
        while True:
            self._wakeup.clear()
            now = _now_ms()
            wake_ms = await self._sender_pass(now)
            if self._closing and self._accumulator.empty:
                return  # every batch answered: request tasks are only finishing
            timeout_s = None if wake_ms is None else max(0.0, (wake_ms - now) / 1000)
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout_s)
            except TimeoutError:
                pass

    async def _sender_pass(self, now: float) -> float | None:
        """Refresh what needs it, then send every ready batch; returns the next wake-up."""
        backoff_at = now + self.retry_backoff_ms
        try:
            if self._metadata_stale or (not self._accumulator.empty
                                        and self._client.metadata_age_ms
                                        >= self._client.metadata_max_age_ms):
                self._metadata_stale = False
                await self._client.refresh_metadata()
        except KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)
            self._metadata_stale = True
            return backoff_at
        now = _now_ms()
        if self._client.metadata is not self._placed_under:
            self._placed_under = self._client.metadata
            self._place_stale_batches(now)
        for batch in self._accumulator.expired(now, self.delivery_timeout_ms):
            self._give_up(batch, KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{batch.tp.topic}-{batch.tp.partition}: not delivered within "
                f"{self.delivery_timeout_ms} ms"))
        if self._producer_id_stale:
            if self._accumulator.in_flight or self._accumulator.empty:
                return None  # an answer wakes us; the id is fetched once nothing is in flight
            try:
                await self._init_producer_id()
            except KafkaError as exc:
                if exc.code not in _RETRIABLE_INIT and not exc.code.retriable:
                    for batch in list(self._accumulator.batches()):
                        self._accumulator.finish_send(batch)
                        batch.fail(exc)
                    self._accumulator.queues.clear()
                    return None
                return backoff_at
        ready, wake = self._accumulator.ready(now, bool(self._flushing or self._closing))
        by_node = self._route(ready, now)
        if any(b.retry_at_ms > now for b in ready):
            wake = backoff_at if wake is None else min(wake, backoff_at)
        if self._metadata_stale:
            wake = backoff_at if wake is None else min(wake, backoff_at)
        for node_id, batches in by_node.items():
            for group in self._split_request(batches):
                for batch in group:
                    self._accumulator.start_send(batch)
                    self._assign_sequence(batch)
                task = asyncio.get_running_loop().create_task(self._send_produce(node_id, group))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
        return wake

    def _route(self, ready: list[ProducerBatch], now: float) -> dict[int, list[ProducerBatch]]:
        """Ready batches by leader, holding back those KIP-253's fence stops: a topic never has
        batches placed under two partition counts in flight or waiting at once."""
        counts: dict[str, set[int]] = {}
        for batch in self._accumulator.batches():
            counts.setdefault(batch.tp.topic, set()).add(batch.partition_count)
        by_node: dict[int, list[ProducerBatch]] = {}
        for batch in ready:
            if len(counts[batch.tp.topic]) > 1:
                self._metadata_stale = True  # the stale ones are placed again after a refresh
                continue
            leader = self._client.metadata.leader_of(batch.tp)
            if leader < 0:
                self._metadata_stale = True
                batch.retry_at_ms = max(batch.retry_at_ms, now + self.retry_backoff_ms)
                continue
            by_node.setdefault(leader, []).append(batch)
        return by_node

    def _split_request(self, batches: list[ProducerBatch]) -> list[list[ProducerBatch]]:
        """Batches of one broker in groups under max_request_size_bytes (one batch at least)."""
        groups: list[list[ProducerBatch]] = []
        size = 0
        for batch in batches:
            if not groups or size + batch.size_bytes > self.max_request_size_bytes:
                groups.append([])
                size = 0
            groups[-1].append(batch)
            size += batch.size_bytes
        return groups

    def _assign_sequence(self, batch: ProducerBatch) -> None:
        if not self.enable_idempotence or batch.base_sequence >= 0:
            return
        batch.base_sequence = self._next_sequence.get(batch.tp, 0)
        self._next_sequence[batch.tp] = (batch.base_sequence + len(batch.records)) % SEQUENCE_MODULUS
        batch.encoded = None

    def _place_stale_batches(self, now: float) -> None:
        """After a metadata change: waiting batches placed under another partition count, or
        waiting for a partition that no longer takes writes, are placed again (in flight ones
        when their answer comes)."""
        for topic in {tp.topic for tp in self._accumulator.queues}:
            meta = self._client.metadata.topic(topic)
            if meta is None or not meta.partitions:
                continue
            closed = frozenset(p for p in {tp.partition for tp in self._accumulator.queues
                                           if tp.topic == topic}
                               if p not in meta.partitions or not meta.partitions[p].writable)
            taken = self._accumulator.take_queued(topic, meta.partition_count, closed)
            if taken:
                self._reroute(meta, taken, now)

    def _reroute(self, meta: TopicMetadata, batches: list[ProducerBatch], now: float) -> None:
        """Place the records of batches taken back (oldest first per partition) under `meta`
        and queue them ahead of newer records. A batch that may already be in the log keeps
        its partition and sequence: moving it could store it twice."""
        as_is: list[ProducerBatch] = []
        placed: dict[int, list[PendingRecord]] = {}
        for batch in batches:
            if batch.outcome_unknown:
                if batch.tp.partition in meta.partitions:
                    batch.partition_count = meta.partition_count
                    as_is.append(batch)
                else:
                    self._give_up(batch, KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"{meta.name} has no partition {batch.tp.partition} any more"))
                continue
            self._return_sequence(batch)
            for record in batch.records:
                try:
                    partition = self._place_again(meta, record, batch.tp.partition)
                except KafkaError as exc:
                    if not record.future.done():
                        record.future.set_exception(exc)
                    continue
                placed.setdefault(partition, []).append(record)
        for partition, records in placed.items():
            self._accumulator.push_front(TopicPartition(meta.name, partition), records,
                                         meta.partition_count, now)
        for batch in reversed(as_is):  # at the very front: they went out before the rest
            self._accumulator.requeue(batch, batch.retry_at_ms)

    def _return_sequence(self, batch: ProducerBatch) -> None:
        """A batch refused for sure gives its sequence numbers back (it is its partition's
        newest: one batch per partition is in flight, and later ones have none yet)."""
        if batch.base_sequence >= 0:
            self._next_sequence[batch.tp] = batch.base_sequence
            batch.base_sequence = -1
            batch.encoded = None

    def _give_up(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Fail a batch's records. One that may be in the log leaves a gap in the sequences
        only a new producer id closes (Kafka bumps the epoch for the same reason)."""
        self._accumulator.finish_send(batch)
        if batch.outcome_unknown:
            self._producer_id_stale = self.enable_idempotence
        else:
            self._return_sequence(batch)
        batch.fail(error)

    async def _init_producer_id(self) -> None:
        answer = await self._client.call(
            None, ApiKey.INIT_PRODUCER_ID,
            _InitProducerId(transactional_id=None, transaction_timeout_ms=60_000,
                            producer_id=-1, producer_epoch=-1),
            highest=INIT_PRODUCER_ID_VERSION)
        code = _error_code(answer.error_code)
        if code != ErrorCode.NONE:
            raise KafkaError(code, "InitProducerId")
        self._producer_id, self._producer_epoch = answer.producer_id, answer.producer_epoch
        self._producer_id_stale = False
        self._next_sequence.clear()
        for batch in self._accumulator.batches():
            batch.base_sequence = -1
            batch.outcome_unknown = False
            batch.encoded = None

    async def _encode(self, batch: ProducerBatch) -> bytes:
        if batch.encoded is None:
            records = [Record(i, r.timestamp_ms, r.key, r.value, r.headers)
                       for i, r in enumerate(batch.records)]
            build = functools.partial(
                build_batch, records, compression=self.compression,
                compression_level=self.compression_level,
                producer_id=self._producer_id if self.enable_idempotence else -1,
                producer_epoch=self._producer_epoch if self.enable_idempotence else -1,
                base_sequence=batch.base_sequence)
            if self.compression == Compression.NONE:
                batch.encoded = build()
            else:  # compression is CPU work: off the loop (STYLE rule 7)
                batch.encoded = await asyncio.get_running_loop().run_in_executor(None, build)
        return batch.encoded

    async def _send_produce(self, node_id: int, batches: list[ProducerBatch]) -> None:
        try:
            await self._produce(node_id, batches)
        finally:
            self._wakeup.set()

    async def _produce(self, node_id: int, batches: list[ProducerBatch]) -> None:
        topics: dict[str, Any] = {}
        for batch in batches:
            entry = topics.get(batch.tp.topic)
            if entry is None:
                entry = topics[batch.tp.topic] = _Produce.TopicProduceData(
                    name=batch.tp.topic, partition_data=[],
                    partition_number=batch.partition_count if self.send_partition_count else -1)
            entry.partition_data.append(_Produce.PartitionProduceData(
                index=batch.tp.partition, records=await self._encode(batch)))
        request = _Produce(transactional_id=None, acks=self.acks,
                           timeout_ms=self.request_timeout_ms, topic_data=list(topics.values()))
        try:
            conn = await self._client.connection(node_id)
            version = conn.version_for(ApiKey.PRODUCE, PRODUCE_VERSION, PRODUCE_MIN_VERSION)
        except KafkaError as exc:  # nothing was sent
            self._metadata_stale = True
            for batch in batches:
                self._retry_or_fail(batch, exc)
            return
        try:
            response = await conn.request(
                ApiKey.PRODUCE, request, version=version, expect_response=self.acks != 0,
                timeout_ms=self.request_timeout_ms + 5000)
        except KafkaError as exc:
            self._metadata_stale = True
            for batch in batches:
                batch.outcome_unknown = batch.outcome_unknown or self.acks != 0
                self._retry_or_fail(batch, exc)
            return
        if self.acks == 0:
            for batch in batches:
                self._accumulator.finish_send(batch)
                batch.complete(-1)
            return
        answers = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        for batch in batches:
            answer = answers.get((batch.tp.topic, batch.tp.partition))
            if answer is None:
                batch.outcome_unknown = True
                self._retry_or_fail(batch, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                      "no answer for the partition"))
                continue
            self._on_answer(batch, answer)

    def _on_answer(self, batch: ProducerBatch, answer: Any) -> None:
        code = _error_code(answer.error_code)
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            self._accumulator.finish_send(batch)
            batch.complete(answer.base_offset)
            return
        error = KafkaError(code, answer.error_message or f"{batch.tp.topic}-{batch.tp.partition}")
        if code in _OUTCOME_UNKNOWN:
            batch.outcome_unknown = True
        if code in _RESET_PRODUCER_ID:
            self._producer_id_stale = True
            self._accumulator.finish_send(batch)
            batch.fail(error)
            return
        self._retry_or_fail(batch, error)

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Send the batch again after a backoff (the proposals' codes: after a refresh that
        places it again), or fail it: not retriable, or past the delivery timeout."""
        now = _now_ms()
        retriable = error.code.retriable or error.code in _PLACE_AGAIN
        if error.code == ErrorCode.PARTITION_NOT_WRITABLE and all(
                r.choice is PartitionChoice.EXPLICIT for r in batch.records):
            retriable = False  # the caller chose a partition that takes no writes
        if not retriable or now - batch.created_ms >= self.delivery_timeout_ms:
            self._give_up(batch, error)
            return
        if error.code in _STALE_METADATA:
            self._metadata_stale = True
        if error.code in _PLACE_AGAIN:
            self._placed_under = None  # check the placement after the refresh, even if unchanged
        log.debug("retrying %s after %s", batch.tp, error)
        self._accumulator.requeue(batch, now + self.retry_backoff_ms)


def _headers(headers: HeadersArg) -> list[Header]:
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return list(headers.items())
    return [(name, value) for name, value in headers]
