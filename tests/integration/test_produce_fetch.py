"""Produce and fetch against a real broker process with confluent-kafka, kafka-python and aiokafka.

Every test asserts on exact (partition, offset, key, value, headers, timestamp) sequences; a
producer of one library is read back by a consumer of another where that is possible.
"""

from __future__ import annotations

import time
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from clients import (
    ADMIN_TIMEOUT_S,
    CONSUMERS,
    LOG_APPEND_TIME,
    PRODUCERS,
    Message,
    Outgoing,
    by_partition,
    confluent_admin,
    confluent_consumer,
    confluent_message,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    dense_offsets,
    expected_messages,
    kafka_python_consumer,
    make_records,
    new_topic_name,
    offsets_for_times_aiokafka,
    offsets_for_times_confluent,
    offsets_for_times_kafka_python,
    produce_confluent,
    produce_kafka_python,
    read_batch_headers,
    segment_files,
    wait_until,
    watermarks_aiokafka,
    watermarks_confluent,
    watermarks_kafka_python,
)
from confluent_kafka.admin import OffsetSpec
from kafka.admin import KafkaAdminClient

BEGINNING = confluent_kafka.OFFSET_BEGINNING
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
OFFSETS_FOR_TIMES = {
    "confluent": offsets_for_times_confluent,
    "kafka-python": offsets_for_times_kafka_python,
    "aiokafka": offsets_for_times_aiokafka,
}
WATERMARKS = {
    "confluent": watermarks_confluent,
    "kafka-python": watermarks_kafka_python,
    "aiokafka": watermarks_aiokafka,
}
ONE_BATCH_CONFLUENT = {"linger.ms": 1000, "batch.num.messages": 100000, "batch.size": 10_000_000}


def assert_inside_a_batch(broker: Any, topic: str, offset: int) -> None:
    """`offset` is stored inside a batch that starts before it (the client may split a batch)."""
    batches = read_batch_headers(segment_files(broker.data_dir, topic, 0)[0])
    assert any(b.base_offset < offset <= b.last_offset for b in batches), batches


def assert_same_per_partition(consumed: list[Message], expected: list[Message]) -> None:
    """Same messages in the same order within each partition, nothing extra."""
    got, want = by_partition(consumed), by_partition(expected)
    assert sorted(got) == sorted(want)
    for partition in want:
        assert len(got[partition]) == len(want[partition]), f"partition {partition}"
        for g, w in zip(got[partition], want[partition], strict=True):
            assert g == w


# --- round trips across libraries ---------------------------------------------------------------


@pytest.mark.parametrize(("producer", "consumer"), [
    ("confluent", "kafka-python"),
    ("kafka-python", "aiokafka"),
    ("aiokafka", "confluent"),
])
def test_ten_thousand_records_with_keys_headers_timestamps_round_trip(
        broker: Any, producer: str, consumer: str) -> None:
    topic = new_topic_name(f"roundtrip-{producer}-{consumer}")
    create_topic(broker.bootstrap, topic, partitions=3)
    records = make_records(10_000, partitions=3)

    offsets = PRODUCERS[producer](broker.bootstrap, topic, records)
    assert offsets == dense_offsets(records)

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, {0: 0, 1: 0, 2: 0}, len(records))
    assert_same_per_partition(consumed, expected_messages(records, offsets))


@pytest.mark.parametrize(("producer", "codec", "consumer"), [
    ("confluent", "gzip", "kafka-python"),
    ("confluent", "snappy", "aiokafka"),
    ("confluent", "lz4", "kafka-python"),
    ("confluent", "zstd", "aiokafka"),
    ("kafka-python", "gzip", "confluent"),
    ("kafka-python", "lz4", "aiokafka"),
    ("kafka-python", "zstd", "confluent"),
    ("aiokafka", "snappy", "confluent"),
    ("aiokafka", "lz4", "kafka-python"),
    ("aiokafka", "gzip", "confluent"),
])
def test_compressed_batches_are_stored_as_sent_and_read_back_exactly(
        broker: Any, producer: str, codec: str, consumer: str) -> None:
    topic = new_topic_name(f"codec-{codec}")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(2_000, partitions=2, value_size_bytes=200)
    config: dict[str, Any] = (
        {"compression.type": codec, "linger.ms": 50} if producer == "confluent"
        else {"compression_type": codec, "linger_ms": 50})

    offsets = PRODUCERS[producer](broker.bootstrap, topic, records, config)
    assert offsets == dense_offsets(records)

    batches = read_batch_headers(segment_files(broker.data_dir, topic, 0)[0])
    assert batches, "no batch on disk"
    # librdkafka compresses with lz4 only when the broker advertises FindCoordinator (10, its
    # marker of a Kafka >= 0.10 broker); the broker serves it, so every codec arrives as asked.
    expected_codec = CODEC_IDS[codec]
    assert {b.compression_codec for b in batches} == {expected_codec}, (
        f"{producer} asked for {codec}; batches on disk use codecs "
        f"{sorted({b.compression_codec for b in batches})}")
    assert len(batches) < 1_000, "records were not batched"

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, {0: 0, 1: 0}, len(records))
    assert_same_per_partition(consumed, expected_messages(records, offsets))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_every_acks_setting_stores_all_records_in_order(broker: Any, acks: int | str) -> None:
    topic = new_topic_name(f"acks-{acks}")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(1_000, partitions=2)

    offsets = produce_confluent(broker.bootstrap, topic, records, {"acks": acks})
    if acks == 0:
        assert set(offsets) == {confluent_kafka.OFFSET_INVALID}
        # No response means no ordering against the next producer's connection: wait for them.
        for p in (0, 1):
            wait_until(lambda p=p: watermarks_confluent(broker.bootstrap, topic, p) == (0, 500),
                       ADMIN_TIMEOUT_S, f"partition {p} to hold 500 records")
    else:
        assert offsets == dense_offsets(records)
    # kafka-python makes offsets up locally under acks=0 (there is no response), so only
    # acks 1 and all have offsets to check.
    kp_offsets = produce_kafka_python(broker.bootstrap, topic, records[:10], {"acks": acks})
    if acks != 0:
        assert kp_offsets == dense_offsets(records[:10], {0: 500, 1: 500})

    expected = expected_messages(records + records[:10],
                                 dense_offsets(records + records[:10]))
    consumed = consume_kafka_python(broker.bootstrap, topic, {0: 0, 1: 0}, len(expected))
    assert_same_per_partition(consumed, expected)


# --- positioning ----------------------------------------------------------------------------------


@pytest.mark.parametrize("consumer", ["confluent", "kafka-python", "aiokafka"])
def test_seek_to_offset_reads_from_exactly_that_offset(broker: Any, consumer: str) -> None:
    topic = new_topic_name("seek")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(1_000, partitions=2)
    offsets = produce_confluent(broker.bootstrap, topic, records)

    start = {0: 250, 1: 437}
    expected = [m for m in expected_messages(records, offsets) if m.offset >= start[m.partition]]
    consumed = CONSUMERS[consumer](broker.bootstrap, topic, start, len(expected))
    assert_same_per_partition(consumed, expected)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_offsets_for_times_returns_first_offset_at_or_after_timestamp(
        broker: Any, client: str) -> None:
    topic = new_topic_name("by-time")
    create_topic(broker.bootstrap, topic, partitions=1)
    base_ms = 1_700_000_000_000
    # Ten batches of 100 records, timestamps 10 ms apart, so lookups land inside batches.
    records = make_records(1_000, base_timestamp_ms=base_ms)
    records = [r.__class__(r.partition, r.key, r.value, r.headers, base_ms + 10 * i)
               for i, r in enumerate(records)]
    for start in range(0, 1_000, 100):
        produce_confluent(broker.bootstrap, topic, records[start:start + 100], ONE_BATCH_CONFLUENT)
    for inside in (555, 999):
        assert_inside_a_batch(broker, topic, inside)

    lookup = OFFSETS_FOR_TIMES[client]
    assert lookup(broker.bootstrap, topic, {0: base_ms + 5_550}) == {0: 555}
    assert lookup(broker.bootstrap, topic, {0: base_ms + 5_545}) == {0: 555}
    assert lookup(broker.bootstrap, topic, {0: base_ms + 5_000}) == {0: 500}
    assert lookup(broker.bootstrap, topic, {0: base_ms - 1}) == {0: 0}
    assert lookup(broker.bootstrap, topic, {0: base_ms + 9_990}) == {0: 999}
    assert lookup(broker.bootstrap, topic, {0: base_ms + 10_000}) == {0: -1}


def test_consumer_positioned_by_timestamp_reads_from_that_record(broker: Any) -> None:
    topic = new_topic_name("seek-time")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(300)
    offsets = produce_confluent(broker.bootstrap, topic, records, ONE_BATCH_CONFLUENT)

    found = offsets_for_times_confluent(broker.bootstrap, topic, {0: records[123].timestamp_ms})
    assert found == {0: 123}
    consumed = consume_confluent(broker.bootstrap, topic, found, 300 - 123)
    assert consumed == expected_messages(records, offsets)[123:]


@pytest.mark.parametrize("consumer", ["confluent", "kafka-python", "aiokafka"])
def test_fetch_from_middle_of_a_batch_returns_records_from_that_offset_on(
        broker: Any, consumer: str) -> None:
    topic = new_topic_name("mid-batch")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(100)
    offsets = produce_confluent(broker.bootstrap, topic, records, ONE_BATCH_CONFLUENT)
    assert_inside_a_batch(broker, topic, 37)

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, {0: 37}, 63)
    assert consumed == expected_messages(records, offsets)[37:]


@pytest.mark.parametrize("consumer", ["kafka-python", "aiokafka", "confluent"])
def test_fetch_from_middle_of_a_compressed_batch_returns_records_from_that_offset_on(
        broker: Any, consumer: str) -> None:
    topic = new_topic_name("mid-gzip-batch")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(100)
    offsets = produce_confluent(broker.bootstrap, topic, records,
                                {**ONE_BATCH_CONFLUENT, "compression.type": "gzip"})
    assert_inside_a_batch(broker, topic, 61)
    batches = read_batch_headers(segment_files(broker.data_dir, topic, 0)[0])
    assert {b.compression_codec for b in batches} == {CODEC_IDS["gzip"]}

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, {0: 61}, 39)
    assert consumed == expected_messages(records, offsets)[61:]


def test_out_of_range_position_resets_to_earliest_or_latest(broker: Any) -> None:
    topic = new_topic_name("out-of-range")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(100)
    expected = expected_messages(records, produce_confluent(broker.bootstrap, topic, records))

    consumed = consume_confluent(broker.bootstrap, topic, {0: 500}, 100,
                                 {"auto.offset.reset": "earliest"})
    assert consumed == expected
    consumed = consume_kafka_python(broker.bootstrap, topic, {0: 500}, 100)
    assert consumed == expected

    # With reset to latest the consumer moves to 100 and sees only what is produced next.
    consumer = kafka_python_consumer(broker.bootstrap, {"auto_offset_reset": "latest"})
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 500)
        wait_until(lambda: consumer.poll(timeout_ms=100) == {} and consumer.position(tp) == 100,
                   ADMIN_TIMEOUT_S, "position reset to the high watermark")
        more = make_records(3, base_timestamp_ms=1_700_000_000_000)
        produce_confluent(broker.bootstrap, topic, more)
        got: list[Message] = []
        wait_until(lambda: got.extend(
            Message(m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
            for batch in consumer.poll(timeout_ms=200).values() for m in batch) or len(got) >= 3,
            ADMIN_TIMEOUT_S, "the three new records")
        assert got == expected_messages(more, [100, 101, 102])
    finally:
        consumer.close()


def test_small_fetch_size_still_returns_a_whole_large_batch(broker: Any) -> None:
    topic = new_topic_name("small-fetch")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(200, value_size_bytes=1_000)
    offsets = produce_confluent(broker.bootstrap, topic, records, ONE_BATCH_CONFLUENT)
    # Every record alone (a 1,000-byte value plus key and headers) exceeds the 1,024-byte limits.
    expected = expected_messages(records, offsets)

    assert consume_confluent(broker.bootstrap, topic, {0: 0}, 200, {
        "fetch.max.bytes": 1_024, "max.partition.fetch.bytes": 1_024,
        "message.max.bytes": 1_000}) == expected
    assert consume_kafka_python(broker.bootstrap, topic, {0: 0}, 200, {
        "fetch_max_bytes": 1_024, "max_partition_fetch_bytes": 1_024}) == expected


def test_null_keys_null_values_and_no_headers_round_trip(broker: Any) -> None:
    topic = new_topic_name("nulls")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = [
        Outgoing(0, None, b"no key", (), 1_600_000_000_000),
        Outgoing(0, b"tombstone", None, (), 1_600_000_000_001),
        Outgoing(0, b"", b"", (("empty", b""),), 1_600_000_000_002),
        Outgoing(0, None, None, (("a", b"1"), ("a", b"2")), 1_600_000_000_003),
    ]
    offsets = produce_confluent(broker.bootstrap, topic, records)
    assert offsets == [0, 1, 2, 3]
    expected = expected_messages(records, offsets)
    assert consume_aiokafka(broker.bootstrap, topic, {0: 0}, 4) == expected
    assert consume_kafka_python(broker.bootstrap, topic, {0: 0}, 4) == expected


def test_kafka_python_consumer_adding_a_partition_mid_stream_reads_both(broker: Any) -> None:
    topic = new_topic_name("fetch-session")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(400, partitions=2)
    expected = expected_messages(records, produce_confluent(broker.bootstrap, topic, records))
    tp0, tp1 = kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)
    consumer = kafka_python_consumer(broker.bootstrap)

    def read(count: int) -> list[Message]:
        got: list[Message] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got += [Message(m.partition, m.offset, m.key, m.value, tuple(m.headers),
                                m.timestamp) for m in batch]
        return got

    try:
        consumer.assign([tp0])
        consumer.seek(tp0, 0)
        first = read(200)
        assert first == [m for m in expected if m.partition == 0]
        # Incremental fetch sessions must pick up the added partition and keep the first.
        consumer.assign([tp0, tp1])
        consumer.seek(tp1, 50)
        more = make_records(20, partitions=2, base_timestamp_ms=1_700_000_000_000)
        more_offsets = produce_confluent(broker.bootstrap, topic, more)
        second = read(150 + 20)
        want = [m for m in expected if m.partition == 1 and m.offset >= 50] + expected_messages(
            more, more_offsets)
        assert by_partition(second) == by_partition(want)
    finally:
        consumer.close()


# --- ListOffsets and DeleteRecords ----------------------------------------------------------------


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_list_offsets_earliest_and_latest(broker: Any, client: str) -> None:
    topic = new_topic_name("watermarks")
    create_topic(broker.bootstrap, topic, partitions=2)
    watermarks = WATERMARKS[client]
    assert watermarks(broker.bootstrap, topic, 0) == (0, 0)

    records = make_records(123, partitions=2)
    produce_confluent(broker.bootstrap, topic, records)
    assert watermarks(broker.bootstrap, topic, 0) == (0, 62)
    assert watermarks(broker.bootstrap, topic, 1) == (0, 61)


def test_admin_list_offsets_earliest_latest_and_max_timestamp(broker: Any) -> None:
    topic = new_topic_name("admin-list-offsets")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(50)
    # The largest timestamp is in the middle: MaxTimestamp must find that record, not the last.
    records[20] = records[20].__class__(0, records[20].key, records[20].value,
                                        records[20].headers, records[-1].timestamp_ms + 1_000)
    produce_confluent(broker.bootstrap, topic, records)
    admin = confluent_admin(broker.bootstrap)
    tp = confluent_kafka.TopicPartition(topic, 0)

    def lookup(spec: OffsetSpec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec}, request_timeout=ADMIN_TIMEOUT_S)[tp].result()
        return info.offset, info.timestamp

    assert lookup(OffsetSpec.earliest())[0] == 0
    assert lookup(OffsetSpec.latest())[0] == 50
    assert lookup(OffsetSpec.max_timestamp()) == (20, records[20].timestamp_ms)


def test_delete_records_moves_low_watermark_and_consumers_start_there(broker: Any) -> None:
    topic = new_topic_name("delete-records")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(400, partitions=2)
    expected = expected_messages(records, produce_confluent(broker.bootstrap, topic, records))

    admin = confluent_admin(broker.bootstrap)
    futures = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 40)],
                                   request_timeout=ADMIN_TIMEOUT_S)
    deleted = futures[confluent_kafka.TopicPartition(topic, 0)].result()
    assert deleted.low_watermark == 40
    assert watermarks_confluent(broker.bootstrap, topic, 0) == (40, 200)
    assert watermarks_kafka_python(broker.bootstrap, topic, 1) == (0, 200)

    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = kp_admin.delete_records({kafka.TopicPartition(topic, 1): 150})
        assert result[kafka.TopicPartition(topic, 1)]["low_watermark"] == 150
    finally:
        kp_admin.close()
    assert watermarks_aiokafka(broker.bootstrap, topic, 1) == (150, 200)

    # A time lookup before every record answers the new log start offset.
    assert offsets_for_times_confluent(broker.bootstrap, topic, {0: 0, 1: 0}) == {0: 40, 1: 150}

    want = [m for m in expected if m.offset >= {0: 40, 1: 150}[m.partition]]
    for consume in (consume_confluent, consume_kafka_python, consume_aiokafka):
        consumed = consume(broker.bootstrap, topic, {0: BEGINNING, 1: BEGINNING}, len(want))
        assert_same_per_partition(consumed, want)


def test_delete_records_beyond_high_watermark_is_offset_out_of_range(broker: Any) -> None:
    topic = new_topic_name("delete-records-oor")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_confluent(broker.bootstrap, topic, make_records(10))
    admin = confluent_admin(broker.bootstrap)
    futures = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 11)],
                                   request_timeout=ADMIN_TIMEOUT_S)
    with pytest.raises(confluent_kafka.KafkaException) as excinfo:
        futures[confluent_kafka.TopicPartition(topic, 0)].result()
    assert excinfo.value.args[0].code() == confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
    assert watermarks_confluent(broker.bootstrap, topic, 0) == (0, 10)


# --- topic behaviour seen by producers ------------------------------------------------------------


def test_producing_to_unknown_topic_creates_it_with_default_partitions(broker: Any) -> None:
    topic = new_topic_name("auto-created")
    records = make_records(20)
    offsets = produce_confluent(broker.bootstrap, topic, records)
    assert offsets == list(range(20))
    meta = confluent_admin(broker.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    assert sorted(meta.topics[topic].partitions) == [0]

    other = new_topic_name("auto-created-kp")
    assert produce_kafka_python(broker.bootstrap, other, records[:5]) == list(range(5))
    assert consume_aiokafka(broker.bootstrap, other, {0: 0}, 5) == expected_messages(
        records[:5], range(5))


def test_producing_to_unknown_topic_with_auto_create_disabled_creates_nothing(
        broker_factory: Any) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    topic = new_topic_name("not-auto-created")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=2_000)
    try:
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            producer.send(topic, value=b"v").get(timeout=ADMIN_TIMEOUT_S)
    finally:
        producer.close(timeout=10)
    meta = confluent_admin(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
    assert topic not in meta.topics


def test_record_over_topic_max_message_bytes_is_rejected_and_others_still_work(
        broker: Any) -> None:
    topic = new_topic_name("too-large")
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "2048"})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "enable.idempotence": False, "linger.ms": 0,
                                         "message.send.max.retries": 0})
    reports: list[tuple[Any, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((err, msg.offset()))

    producer.produce(topic, key=b"big", value=b"B" * 10_000, partition=0, on_delivery=on_delivery)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    assert len(reports) == 1
    err = reports[0][0]
    assert err is not None and err.code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE

    records = make_records(10)
    offsets = produce_confluent(broker.bootstrap, topic, records, {"linger.ms": 0})
    assert offsets == list(range(10))

    kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False,
                             retries=0)
    try:
        with pytest.raises(kafka.errors.MessageSizeTooLargeError):
            kp.send(topic, value=b"C" * 10_000, partition=0).get(timeout=ADMIN_TIMEOUT_S)
    finally:
        kp.close(timeout=10)

    consumed = consume_confluent(broker.bootstrap, topic, {0: BEGINNING}, 10)
    assert consumed == expected_messages(records, offsets)
    assert watermarks_confluent(broker.bootstrap, topic, 0) == (0, 10)


def test_log_append_time_topic_replaces_producer_timestamps_with_broker_time(
        broker: Any) -> None:
    topic = new_topic_name("log-append-time")
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    records = make_records(100, base_timestamp_ms=1_000)
    before_ms = int(time.time() * 1000)
    offsets = produce_confluent(broker.bootstrap, topic, records)
    after_ms = int(time.time() * 1000)
    assert offsets == list(range(100))

    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        raw: list[Any] = []
        deadline = time.monotonic() + 60
        while len(raw) < 100 and time.monotonic() < deadline:
            raw += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        assert len(raw) == 100
        for msg in raw:
            ts_type, ts = msg.timestamp()
            assert ts_type == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
            assert before_ms <= ts <= after_ms
        converted = [confluent_message(m) for m in raw]
    finally:
        consumer.close()

    assert [(m.offset, m.key, m.value, m.headers) for m in converted] == [
        (o, r.key, r.value, r.headers) for o, r in zip(offsets, records, strict=True)]
    kp = consume_kafka_python(broker.bootstrap, topic, {0: 0}, 100)
    assert {m.timestamp_type for m in kp} == {LOG_APPEND_TIME}
    assert [m.timestamp_ms for m in kp] == [m.timestamp_ms for m in converted]


def test_aiokafka_consumer_long_poll_returns_records_produced_while_it_waits(broker: Any) -> None:
    import asyncio

    topic = new_topic_name("long-poll")
    create_topic(broker.bootstrap, topic)
    records = make_records(5)

    async def run() -> list[Message]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                             enable_auto_commit=False, fetch_max_wait_ms=5_000)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            waiting = asyncio.ensure_future(consumer.getone())
            await asyncio.get_running_loop().run_in_executor(
                None, produce_confluent, broker.bootstrap, topic, records)
            first = await asyncio.wait_for(waiting, timeout=30)
            return [Message(first.partition, first.offset, first.key, first.value,
                            tuple(first.headers), first.timestamp, first.timestamp_type)]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == expected_messages(records, range(5))[:1]
    wait_until(lambda: watermarks_confluent(broker.bootstrap, topic, 0) == (0, 5), 30,
               "high watermark 5")


def test_topic_compression_type_recompresses_what_producers_send(broker: Any) -> None:
    """compression.type=zstd on the topic: the broker stores zstd whatever the producer used,
    with the same offsets, keys, values, headers and timestamps."""
    topic = new_topic_name("recompress")
    create_topic(broker.bootstrap, topic, partitions=1, config={"compression.type": "zstd"})
    records = make_records(500, partitions=1)
    offsets = PRODUCERS["confluent"](broker.bootstrap, topic, records,
                                     {"compression.type": "gzip", "linger.ms": 20})
    assert offsets == dense_offsets(records)

    batches = read_batch_headers(segment_files(broker.data_dir, topic, 0)[0])
    assert {b.compression_codec for b in batches} == {CODEC_IDS["zstd"]}
    consumed = CONSUMERS["kafka-python"](broker.bootstrap, topic, {0: 0}, len(records))
    assert_same_per_partition(consumed, expected_messages(records, offsets))
