"""From fetched bytes to consumer records: the decoding half of Kafka's `Fetcher`.

Mirrors Kafka's `CompletedFetch`: the record batches of one partition's answer are decoded
(decompressed, CRC-checked), records before the fetch offset are dropped (a batch may start
before it), control batches are never returned, and a read_committed consumer skips the batches
of aborted transactions, using the answer's aborted-transaction list and the ABORT markers.
Pure: bytes in, records out.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import BytesLike, TimestampType, iter_batch_headers
from kafka_ext.protocol.records import (
    ControlRecordType,
    Header,
    control_record_type,
    decode_records,
)


@dataclass(slots=True, frozen=True)
class ConsumerRecord:
    """One record as `poll()` returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    leader_epoch: int = -1


@dataclass(slots=True)
class PartitionRecords:
    """Decoded records of one fetch waiting to be returned, and where the next fetch starts
    (past trailing control or aborted batches, which return nothing)."""

    topic: str
    partition: int
    fetch_offset: int
    records: deque[ConsumerRecord] = field(default_factory=deque)
    next_fetch_offset: int = -1


def decode_fetched(topic: str, partition: int, records: BytesLike | None, fetch_offset: int, *,
                   read_committed: bool = False,
                   aborted_transactions: Iterable[tuple[int, int]] = ()) -> PartitionRecords:
    """Decode one partition's fetched batches. `aborted_transactions` holds the answer's
    (producer_id, first_offset) pairs. Raises KafkaError(CORRUPT_MESSAGE) for a bad batch."""
    out = PartitionRecords(topic, partition, fetch_offset, next_fetch_offset=fetch_offset)
    if not records:
        return out
    aborted = [(first_offset, producer_id) for producer_id, first_offset in aborted_transactions]
    heapq.heapify(aborted)
    aborted_producers: set[int] = set()
    try:
        view = memoryview(records)
        for pos, header in iter_batch_headers(view):
            next_offset = header.next_offset
            if read_committed and header.has_producer_id:
                while aborted and aborted[0][0] <= header.last_offset:
                    aborted_producers.add(heapq.heappop(aborted)[1])
                if not header.is_control and header.is_transactional and (
                        header.producer_id in aborted_producers):
                    out.next_fetch_offset = max(out.next_fetch_offset, next_offset)
                    continue  # a batch of an aborted transaction
            if header.is_control:
                if read_committed:
                    _, markers = decode_records(view, pos)
                    if any(control_record_type(r) == ControlRecordType.ABORT for r in markers):
                        aborted_producers.discard(header.producer_id)
                out.next_fetch_offset = max(out.next_fetch_offset, next_offset)
                continue
            if next_offset <= fetch_offset:
                out.next_fetch_offset = max(out.next_fetch_offset, next_offset)
                continue
            batch, decoded = decode_records(view, pos)
            for record in decoded:
                if record.offset < fetch_offset:
                    continue
                out.records.append(ConsumerRecord(
                    topic, partition, record.offset, record.timestamp, batch.timestamp_type,
                    record.key, record.value, tuple(record.headers),
                    batch.partition_leader_epoch))
            out.next_fetch_offset = max(out.next_fetch_offset, next_offset)
    except DecodeError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                         f"{topic}-{partition} at offset {fetch_offset}: {exc.message}") from exc
    return out
