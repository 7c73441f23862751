"""Records waiting to be sent, batched per partition: the producer's `RecordAccumulator`.

Mirrors Kafka's `RecordAccumulator` and `ProducerBatch`. Pure bookkeeping: no I/O, so the
batching, retry and re-partitioning rules are unit-tested without a broker. Each partition has
a queue of batches and at most one batch in flight, which keeps its records in order under
retries and lets an idempotent producer hand sequence numbers back when a batch is refused.

A batch remembers the topic's partition count its records were partitioned with (KIP-253): that
is the count a Produce request names, so the broker refuses a batch whose keyed records were
placed under an older count, and a batch never mixes two counts.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from kafka_ext.client.metadata import TopicPartition
from kafka_ext.protocol.records import Header

# Bytes a record costs in a batch besides its key, value and headers (length, attributes,
# deltas, varint lengths): an estimate for batch.size, as Kafka's is.
RECORD_OVERHEAD_BYTES = 21


class RecordMetadata(NamedTuple):
    """Where a record landed: (partition, offset); offset is -1 with acks=0."""

    partition: int
    offset: int


class PartitionChoice(Enum):
    """Who chose a record's partition, which decides what a refused batch may do with it."""

    EXPLICIT = "explicit"  # the caller named it: it stays, or fails
    KEY = "key"  # murmur2 of the key: placed again when the partition count changes (KIP-253)
    STICKY = "sticky"  # no key: kept while writable, else placed again


@dataclass(slots=True)
class PendingRecord:
    """One `send()` waiting for its acknowledgement."""

    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp_ms: int
    future: asyncio.Future[RecordMetadata]
    choice: PartitionChoice
    size_bytes: int


def record_size(key: bytes | None, value: bytes | None, headers: list[Header]) -> int:
    """Estimated bytes of one record in a batch."""
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for name, header_value in headers:
        size += len(name) + len(header_value or b"") + 2
    return size


@dataclass(slots=True)
class ProducerBatch:
    """Records for one partition, sent and acknowledged together.

    `partition_count` is the count the records were partitioned with. `base_sequence` is set
    when the batch is first sent by an idempotent producer and kept across retries, so the
    broker recognises a resend. `outcome_unknown` turns true once an attempt may have been
    appended without us hearing (a timeout, a lost connection): such a batch may only be sent
    again as it is, never split across partitions.
    """

    tp: TopicPartition
    partition_count: int
    created_ms: float
    records: list[PendingRecord] = field(default_factory=list)
    size_bytes: int = 0
    attempts: int = 0
    base_sequence: int = -1
    outcome_unknown: bool = False
    retry_at_ms: float = 0.0
    encoded: bytes | None = None  # the built batch, reused by retries with the same header

    def fail(self, error: BaseException) -> None:
        for record in self.records:
            if not record.future.done():
                record.future.set_exception(error)

    def complete(self, base_offset: int) -> None:
        for index, record in enumerate(self.records):
            if not record.future.done():
                offset = base_offset + index if base_offset >= 0 else -1
                record.future.set_result(RecordMetadata(self.tp.partition, offset))


class RecordAccumulator:
    """Per-partition queues of batches and the batches in flight. Owned by one producer."""

    def __init__(self, *, batch_size_bytes: int, linger_ms: float,
                 batch_max_records: int | None = None) -> None:
        self.batch_size_bytes = batch_size_bytes
        self.linger_ms = linger_ms
        self.batch_max_records = batch_max_records
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.in_flight: dict[TopicPartition, ProducerBatch] = {}

    # -- adding ----------------------------------------------------------------------------

    def _full(self, batch: ProducerBatch, record: PendingRecord) -> bool:
        if not batch.records:
            return False
        if self.batch_max_records is not None and len(batch.records) >= self.batch_max_records:
            return True
        return batch.size_bytes + record.size_bytes > self.batch_size_bytes

    def append(self, tp: TopicPartition, record: PendingRecord, partition_count: int,
               now_ms: float) -> ProducerBatch:
        """Add a record to the last batch of `tp`, or to a new one when that is full or was
        partitioned under another count."""
        queue = self.queues.setdefault(tp, deque())
        batch = queue[-1] if queue else None
        if (batch is None or batch.partition_count != partition_count or batch.attempts
                or self._full(batch, record)):
            batch = ProducerBatch(tp, partition_count, now_ms)
            queue.append(batch)
        batch.records.append(record)
        batch.size_bytes += record.size_bytes
        return batch

    def push_front(self, tp: TopicPartition, records: list[PendingRecord],
                   partition_count: int, now_ms: float) -> list[ProducerBatch]:
        """Put records (oldest first) ahead of everything queued for `tp`: records taken back
        from refused batches are older than anything sent since."""
        batches: list[ProducerBatch] = []
        for record in records:
            if not batches or self._full(batches[-1], record):
                batches.append(ProducerBatch(tp, partition_count, now_ms))
            batches[-1].records.append(record)
            batches[-1].size_bytes += record.size_bytes
        self.queues.setdefault(tp, deque()).extendleft(reversed(batches))
        return batches

    # -- sending ---------------------------------------------------------------------------

    def ready(self, now_ms: float, flushing: bool) -> tuple[list[ProducerBatch], float | None]:
        """The head batches that may be sent now, and when the next one may be (ms, or None).

        A head batch is ready when nothing of its partition is in flight, its retry backoff has
        passed, and it is full, has batches behind it, waited `linger_ms`, or we are flushing.
        """
        ready: list[ProducerBatch] = []
        wake: float | None = None
        for tp, queue in self.queues.items():
            if not queue or tp in self.in_flight:
                continue
            batch = queue[0]
            if batch.retry_at_ms > now_ms:
                at = batch.retry_at_ms
            elif (flushing or batch.attempts or len(queue) > 1
                  or self._is_full(batch) or now_ms - batch.created_ms >= self.linger_ms):
                ready.append(batch)
                continue
            else:
                at = batch.created_ms + self.linger_ms
            wake = at if wake is None else min(wake, at)
        return ready, wake

    def _is_full(self, batch: ProducerBatch) -> bool:
        if self.batch_max_records is not None and len(batch.records) >= self.batch_max_records:
            return True
        return batch.size_bytes >= self.batch_size_bytes

    def start_send(self, batch: ProducerBatch) -> None:
        """Move the head batch of its partition in flight."""
        queue = self.queues[batch.tp]
        assert queue and queue[0] is batch, "only a partition's head batch is sent"
        queue.popleft()
        if not queue:
            del self.queues[batch.tp]
        self.in_flight[batch.tp] = batch
        batch.attempts += 1

    def finish_send(self, batch: ProducerBatch) -> None:
        """The batch is answered (or failed): its partition may send again."""
        if self.in_flight.get(batch.tp) is batch:
            del self.in_flight[batch.tp]

    def requeue(self, batch: ProducerBatch, retry_at_ms: float) -> None:
        """Send the batch again, before anything queued behind it, after a backoff."""
        self.finish_send(batch)
        batch.retry_at_ms = retry_at_ms
        self.queues.setdefault(batch.tp, deque()).appendleft(batch)

    def in_flight_counts(self, topic: str) -> set[int]:
        """The partition counts of `topic`'s batches in flight (KIP-253's fence)."""
        return {b.partition_count for tp, b in self.in_flight.items() if tp.topic == topic}

    # -- taking back -----------------------------------------------------------------------

    def take_queued(self, topic: str, current_count: int | None = None,
                    partitions: frozenset[int] = frozenset()) -> list[ProducerBatch]:
        """Remove and return the queued (not in-flight) batches of `topic` that were partitioned
        under another count than `current_count`, or that wait for one of `partitions`; oldest
        first within each partition."""
        taken: list[ProducerBatch] = []
        for tp in [tp for tp in self.queues if tp.topic == topic]:
            queue = self.queues[tp]
            keep: deque[ProducerBatch] = deque()
            for batch in queue:
                stale = current_count is not None and batch.partition_count != current_count
                if stale or tp.partition in partitions:
                    taken.append(batch)
                else:
                    keep.append(batch)
            if keep:
                self.queues[tp] = keep
            else:
                del self.queues[tp]
        return taken

    def expired(self, now_ms: float, delivery_timeout_ms: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than the delivery timeout."""
        gone: list[ProducerBatch] = []
        for tp in list(self.queues):
            queue = self.queues[tp]
            while queue and now_ms - queue[0].created_ms >= delivery_timeout_ms:
                gone.append(queue.popleft())
            if not queue:
                del self.queues[tp]
        return gone

    def batches(self) -> Iterator[ProducerBatch]:
        """Every batch, queued or in flight."""
        yield from self.in_flight.values()
        for queue in self.queues.values():
            yield from queue

    @property
    def empty(self) -> bool:
        return not self.queues and not self.in_flight
