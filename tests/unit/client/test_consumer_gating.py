"""Our consumer against a fake broker: KIP-253 holds a new partition back until its prior
partitions are read up to their thresholds; partition reduction's None partitions are not read;
seeks by offset and time."""

from __future__ import annotations

from kafka_ext.client.consumer import Consumer
from kafka_ext.client.fetcher import ConsumerRecord
from kafka_ext.client.metadata import PartitionMode, TopicPartition
from tests.unit.client.fake_cluster import FakeBroker, FakeNetworkClient

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


def expanded_topic() -> FakeBroker:
    """t had 2 partitions (5 and 3 records), grew to 3, then got 2 + 2 + 4 more records."""
    broker = FakeBroker()
    broker.create_topic("t", 2)
    for i in range(5):
        broker.append("t", 0, b"k", b"p0-%d" % i)
    for i in range(3):
        broker.append("t", 1, b"k", b"p1-%d" % i)
    broker.add_partitions("t", 3)
    for p, count in ((0, 2), (1, 2), (2, 4)):
        for i in range(count):
            broker.append("t", p, b"k", b"p%d-new-%d" % (p, i))
    broker.max_batches_per_fetch = 1  # one record per partition per fetch: interleaving shows
    return broker


async def started_consumer(broker: FakeBroker, **options: object) -> Consumer:
    options.setdefault("auto_offset_reset", "earliest")
    options.setdefault("fetch_max_wait_ms", 1)
    consumer = Consumer("fake:9092", **options)  # type: ignore[arg-type]
    consumer._client = FakeNetworkClient(broker)  # type: ignore[assignment]
    await consumer.start()
    return consumer


async def read_all(consumer: Consumer, count: int, max_polls: int = 500) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    for _ in range(max_polls):
        records += await consumer.poll(10, max_records=1)
        if len(records) >= count:
            break
    return records


async def test_new_partition_is_read_only_after_its_priors_reach_their_thresholds() -> None:
    broker = expanded_topic()
    consumer = await started_consumer(broker)
    consumer.assign([P0, P1, P2])
    records = await read_all(consumer, 16)
    await consumer.close()
    assert len(records) == 16
    order = [(r.partition, r.offset) for r in records]
    first_new = order.index((2, 0))
    assert (0, 4) in order[:first_new] and (1, 2) in order[:first_new]  # last pre-expansion ones
    for p in (0, 1, 2):  # each partition in offset order
        offsets = [o for q, o in order if q == p]
        assert offsets == sorted(offsets)


async def test_a_gated_partition_is_not_even_fetched() -> None:
    broker = expanded_topic()
    consumer = await started_consumer(broker)
    consumer.assign([P0, P1, P2])
    await consumer.poll(10, max_records=1)
    assert consumer.gated_partitions() == {P2}
    fetched = {(t.topic, p.partition) for r in broker.fetch_requests for t in r.topics
               for p in t.partitions}
    assert ("t", 2) not in fetched
    await consumer.close()


async def test_manual_assignment_waits_only_for_the_priors_it_reads() -> None:
    broker = expanded_topic()
    consumer = await started_consumer(broker)
    consumer.assign([P2])
    records = await read_all(consumer, 4)
    await consumer.close()
    assert [r.value for r in records] == [b"p2-new-%d" % i for i in range(4)]


async def test_a_partition_seeked_by_the_caller_is_not_gated() -> None:
    broker = expanded_topic()
    consumer = await started_consumer(broker)
    consumer.assign([P0, P1, P2])
    consumer.seek(P2, 0)
    first = await consumer.poll(10)
    await consumer.close()
    assert P2.partition in {r.partition for r in first}


async def test_without_leader_epochs_for_partition_new_partitions_are_read_ungated() -> None:
    broker = expanded_topic()
    broker.serves_leader_epochs = False  # a stock Kafka broker
    consumer = await started_consumer(broker)
    consumer.assign([P0, P1, P2])
    await consumer.poll(10)
    assert consumer.gated_partitions() == set()
    assert not consumer.expansion_gating
    await consumer.close()


async def test_none_partitions_are_not_read_and_readonly_ones_are() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 3)
    for p in range(3):
        broker.append("t", p, None, b"v%d" % p)
    broker.set_mode("t", 1, PartitionMode.READ_ONLY)
    broker.set_mode("t", 2, PartitionMode.NONE)
    consumer = await started_consumer(broker, expansion_gating=False)
    consumer.assign([P0, P1, P2])
    records = await read_all(consumer, 2, max_polls=20)
    await consumer.close()
    assert sorted(r.value or b"" for r in records) == [b"v0", b"v1"]
    assert all(p.partition != 2 for r in broker.fetch_requests for t in r.topics
               for p in t.partitions)


async def test_seek_and_seek_to_time_move_the_position() -> None:
    broker = FakeBroker()
    broker.create_topic("t", 1)
    for i in range(10):
        broker.append("t", 0, None, b"v%d" % i, timestamp_ms=1000 + 10 * i)
    consumer = await started_consumer(broker)
    consumer.assign([P0])
    consumer.seek(P0, 5)
    assert [r.offset for r in await consumer.poll(10, max_records=2)] == [5, 6]
    assert await consumer.seek_to_time(P0, 1035) == {P0: 4}  # first at or after 1035: 1040
    assert (await consumer.poll(10, max_records=1))[0].value == b"v4"
    assert await consumer.seek_to_time([P0], 99_999) == {P0: 10}  # none after: the end
    consumer.seek_to_beginning()
    assert await consumer.position(P0) == 0
    await consumer.close()
