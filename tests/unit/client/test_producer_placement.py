"""Our producer against a fake broker: where records go, and where they go again.

KIP-253: each Produce names the partition count its records were placed with; a refused batch
makes the producer refresh and place its keyed records again under the new count, in order.
Partition reduction: ReadOnly/None partitions are never chosen, records waiting for one move,
and a record sent explicitly to one fails. Idempotence: a resend after a lost answer reuses its
sequence, and sequences handed back by moved records stay gapless.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from kafka_ext.client.metadata import PartitionMode, TopicPartition
from kafka_ext.client.partitioner import partition_for_key
from kafka_ext.client.producer import Producer
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import decode_records
from tests.unit.client.fake_cluster import FakeBroker, FakeNetworkClient


async def started_producer(broker: FakeBroker, topic: str = "t", **options: object) -> Producer:
    options.setdefault("linger_ms", 0)
    options.setdefault("retry_backoff_ms", 1)
    producer = Producer("fake:9092", **options)  # type: ignore[arg-type]
    producer._client = FakeNetworkClient(broker)  # type: ignore[assignment]
    await producer.start()
    await producer.topic_metadata(topic)  # the producer now knows the topic as it is
    return producer


def sent_counts(broker: FakeBroker) -> list[tuple[int, ErrorCode | None]]:
    """(PartitionNumber, None) of every Produce topic entry, in order."""
    return [(t.partition_number, None) for r in broker.produce_requests for t in r.topic_data]


def sequences_of(broker: FakeBroker, partition: int) -> list[int]:
    """Base sequences of the batches sent to `partition`, in order."""
    out = []
    for request in broker.produce_requests:
        for t in request.topic_data:
            for p in t.partition_data:
                if p.index == partition:
                    out.append(decode_records(bytes(p.records))[0].base_sequence)
    return out


async def test_produce_names_the_partition_count_its_records_were_placed_with() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 3)
    producer = await started_producer(broker)
    await producer.send("t", b"v", key=b"k")
    await producer.close()
    assert [c for c, _ in sent_counts(broker)] == [3]


async def test_keyed_records_refused_for_a_stale_count_are_placed_again_in_order() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 2)
    producer = await started_producer(broker)
    broker.add_partitions("t", 4)  # the producer's metadata still says 2
    keys = [b"key-%d" % (i % 10) for i in range(60)]
    results = await asyncio.gather(*(producer.send("t", b"%d" % i, key=key)
                                     for i, key in enumerate(keys)))
    await producer.close()

    counts = [c for c, _ in sent_counts(broker)]
    assert counts[0] == 2 and counts[-1] == 4  # refused once, then sent with the new count
    for i, (key, (partition, offset)) in enumerate(zip(keys, results, strict=True)):
        assert partition == partition_for_key(key, [0, 1, 2, 3])
        assert broker.topics["t"][partition].records[offset].value == b"%d" % i
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for key, result in zip(keys, results, strict=True):
        by_key[key].append(result)
    for placements in by_key.values():  # a key's records keep their send order
        assert placements == sorted(placements)
    assert sum(len(p.records) for p in broker.topics["t"]) == len(keys)


async def test_sequences_handed_back_by_moved_records_leave_no_gap() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 2)
    producer = await started_producer(broker)
    broker.add_partitions("t", 4)
    await asyncio.gather(*(producer.send("t", b"v", key=b"key-%d" % i) for i in range(40)))
    await producer.send("t", b"after", partition=0)
    await producer.close()
    # The fake broker refuses a sequence that does not follow the last one stored, so every
    # record being stored means the refused batches' sequences were reused, not skipped.
    assert sum(len(p.records) for p in broker.topics["t"]) == 41
    assert sequences_of(broker, 0).count(0) == 2  # refused at 0, then sent again from 0


async def test_unkeyed_and_explicit_records_keep_their_partition_after_a_count_change() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 2)
    producer = await started_producer(broker)
    broker.add_partitions("t", 4)
    explicit, unkeyed = await asyncio.gather(producer.send("t", b"explicit", partition=1),
                                             producer.send("t", b"unkeyed"))
    await producer.close()
    assert [c for c, _ in sent_counts(broker)][0] == 2  # both went out under 2 and came back
    assert explicit.partition == 1
    assert unkeyed.partition in (0, 1)  # sticky kept it: it is still writable
    assert broker.values("t", 1)[explicit.offset] == b"explicit"


async def test_partitioner_never_chooses_readonly_or_none_partitions() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 4)
    broker.set_mode("t", 2, PartitionMode.READ_ONLY)
    broker.set_mode("t", 3, PartitionMode.NONE)
    producer = await started_producer(broker, batch_size_bytes=64)
    results = await asyncio.gather(
        *(producer.send("t", b"v%d" % i, key=b"k%d" % i if i % 2 else None) for i in range(200)))
    await producer.close()
    assert {partition for partition, _ in results} <= {0, 1}
    for i, (partition, _) in enumerate(results):
        if i % 2:
            assert partition == partition_for_key(b"k%d" % i, [0, 1])


async def test_records_waiting_for_a_partition_turned_readonly_move_to_writable_ones() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 4)
    producer = await started_producer(broker)
    broker.set_mode("t", 3, PartitionMode.READ_ONLY)  # the producer has not heard yet
    keys = [k for k in (b"k%d" % i for i in range(100))
            if partition_for_key(k, [0, 1, 2, 3]) == 3][:5]
    results = await asyncio.gather(*(producer.send("t", b"v", key=k) for k in keys))
    await producer.close()
    assert [p for p, _ in results] == [partition_for_key(k, [0, 1, 2]) for k in keys]
    assert broker.topics["t"][3].records == []


async def test_explicit_send_to_a_partition_without_writes_fails() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 3)
    broker.set_mode("t", 2, PartitionMode.READ_ONLY)
    producer = await started_producer(broker)
    with pytest.raises(KafkaError) as known:
        await producer.send("t", b"v", partition=2)
    assert known.value.code == ErrorCode.PARTITION_NOT_WRITABLE
    broker.set_mode("t", 1, PartitionMode.READ_ONLY)  # the producer's metadata is stale now
    with pytest.raises(KafkaError) as refused:
        await producer.send("t", b"v", partition=1)
    assert refused.value.code == ErrorCode.PARTITION_NOT_WRITABLE
    with pytest.raises(KafkaError) as missing:
        await producer.send("t", b"v", partition=7)
    assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await producer.close()
    assert broker.topics["t"][1].records == [] and broker.topics["t"][2].records == []


async def test_resend_after_a_lost_answer_reuses_its_sequence_and_is_stored_once() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 1)
    producer = await started_producer(broker)
    await producer.send("t", b"first", partition=0)  # the producer id is fetched by now
    broker.lose_answers = 1
    result = await producer.send("t", b"once", partition=0)
    second = await producer.send("t", b"twice", partition=0)
    await producer.close()
    assert result == (0, 1) and second == (0, 2)
    assert broker.values("t", 0) == [b"first", b"once", b"twice"]
    assert sequences_of(broker, 0) == [0, 1, 1, 2]


async def test_acks_zero_completes_without_offsets() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 1)
    producer = await started_producer(broker, acks=0)
    assert await producer.send("t", b"v") == (0, -1)
    await producer.close()
    assert broker.values("t", 0) == [b"v"]
    assert not producer.enable_idempotence


async def test_linger_batches_concurrent_sends_into_one_request() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 1)
    producer = await started_producer(broker, linger_ms=50)
    results = await asyncio.gather(*(producer.send("t", b"v%d" % i) for i in range(20)))
    await producer.close()
    assert [offset for _, offset in results] == list(range(20))
    assert len(broker.produce_requests) == 1


def test_idempotence_needs_acks_all() -> None:
    with pytest.raises(ValueError):
        Producer("fake:9092", acks=1, enable_idempotence=True)
    assert Producer("fake:9092").enable_idempotence
    assert not Producer("fake:9092", acks="1").enable_idempotence


async def test_flush_waits_for_every_enqueued_record() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 2)
    producer = await started_producer(broker, linger_ms=10_000)
    futures = [await producer.enqueue("t", b"v%d" % i) for i in range(5)]
    await producer.flush()
    assert all(f.done() and f.exception() is None for f in futures)
    await producer.close()
    assert TopicPartition("t", 0) not in producer._accumulator.queues
