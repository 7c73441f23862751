"""The producer's RecordAccumulator: batching per partition, linger, one batch in flight per
partition, retries ahead of newer batches, and taking batches back when placement changes."""

from __future__ import annotations

import asyncio

from kafka_ext.client.accumulator import (
    PartitionChoice,
    PendingRecord,
    RecordAccumulator,
    RecordMetadata,
)
from kafka_ext.client.metadata import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def record(size: int = 10, key: bytes | None = None) -> PendingRecord:
    future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
    return PendingRecord(key, b"v", [], 0, future, PartitionChoice.STICKY, size)


def accumulator(**options: int) -> RecordAccumulator:
    return RecordAccumulator(batch_size_bytes=options.get("batch_size_bytes", 100),
                             linger_ms=options.get("linger_ms", 10),
                             batch_max_records=options.get("batch_max_records"))


async def test_records_batch_per_partition_until_full() -> None:
    acc = accumulator(batch_size_bytes=30)
    first = acc.append(TP0, record(), 2, 0)
    assert acc.append(TP0, record(), 2, 0) is first
    assert acc.append(TP0, record(), 2, 0) is first  # 30 bytes: full, not over
    assert acc.append(TP0, record(), 2, 0) is not first
    assert acc.append(TP1, record(), 2, 0) is not first
    assert [len(b.records) for b in acc.queues[TP0]] == [3, 1]


async def test_batch_max_records_bounds_a_batch() -> None:
    acc = accumulator(batch_max_records=2)
    batches = {id(acc.append(TP0, record(1), 2, 0)) for _ in range(5)}
    assert len(batches) == 3


async def test_a_new_partition_count_starts_a_new_batch() -> None:
    acc = accumulator()
    old = acc.append(TP0, record(), 2, 0)
    assert acc.append(TP0, record(), 4, 0) is not old  # KIP-253: never two counts in a batch


async def test_head_batch_waits_for_linger_unless_full_or_flushing() -> None:
    acc = accumulator(linger_ms=10)
    acc.append(TP0, record(), 2, 100)
    assert acc.ready(105, flushing=False) == ([], 110)
    assert [b.tp for b in acc.ready(105, flushing=True)[0]] == [TP0]
    assert [b.tp for b in acc.ready(110, flushing=False)[0]] == [TP0]
    acc.append(TP1, record(100), 2, 100)
    assert TP1 in [b.tp for b in acc.ready(101, flushing=False)[0]]


async def test_one_batch_is_in_flight_per_partition() -> None:
    acc = accumulator(batch_size_bytes=10)
    acc.append(TP0, record(), 2, 0)
    acc.append(TP0, record(), 2, 0)
    head = acc.ready(100, flushing=False)[0][0]
    acc.start_send(head)
    assert acc.ready(100, flushing=False)[0] == []
    acc.finish_send(head)
    assert len(acc.ready(100, flushing=False)[0]) == 1


async def test_a_retried_batch_goes_before_newer_ones_after_its_backoff() -> None:
    acc = accumulator(batch_size_bytes=10)
    first = acc.append(TP0, record(), 2, 0)
    second = acc.append(TP0, record(), 2, 0)
    acc.start_send(first)
    acc.requeue(first, retry_at_ms=50)
    assert acc.ready(40, flushing=False) == ([], 50)
    assert acc.ready(50, flushing=False)[0] == [first]
    assert list(acc.queues[TP0]) == [first, second]
    assert acc.append(TP0, record(), 2, 0) is not first  # a sent batch takes no more records


async def test_take_queued_takes_stale_counts_and_closed_partitions_only() -> None:
    acc = accumulator(batch_size_bytes=10)
    stale = acc.append(TP0, record(), 2, 0)
    current = acc.append(TP0, record(), 4, 0)
    closed = acc.append(TP1, record(), 4, 0)
    in_flight = acc.append(TopicPartition("t", 2), record(), 2, 0)
    acc.start_send(in_flight)
    taken = acc.take_queued("t", 4, frozenset({1}))
    assert taken == [stale, closed]
    assert list(acc.queues[TP0]) == [current]
    assert acc.in_flight[TopicPartition("t", 2)] is in_flight


async def test_push_front_puts_taken_back_records_ahead_of_newer_ones() -> None:
    acc = accumulator(batch_size_bytes=20)
    newer = acc.append(TP0, record(), 4, 0)
    old = [record(), record(), record()]
    pushed = acc.push_front(TP0, old, 4, 0)
    assert [len(b.records) for b in pushed] == [2, 1]
    assert list(acc.queues[TP0]) == [*pushed, newer]
    assert [r for b in pushed for r in b.records] == old


async def test_expired_batches_leave_the_queue() -> None:
    acc = accumulator()
    acc.append(TP0, record(), 2, 0)
    acc.append(TP1, record(), 2, 500)
    assert [b.tp for b in acc.expired(1000, delivery_timeout_ms=600)] == [TP0]
    assert list(acc.queues) == [TP1]
