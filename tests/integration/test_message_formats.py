"""Message formats v0 and v1: Produce v0-2 and Fetch v0-3 against the real broker (issue 23).

Raw requests at each of those versions, every request and answer also read and written by
kafka-python's hand-written structs for them (kio, generated from Kafka 4.x, has none of these
versions), and every message set read back with kafka-python's own v0/v1 record reader. Then
stock clients across formats: a Fetch v3 consumer (kafka-python pinned to 0.10.2) and a Fetch v1
one (0.9) reading what confluent-kafka wrote as v2 batches, transaction markers included, and v2
consumers (confluent-kafka, aiokafka) reading what kafka-python 0.10.2 and 0.9 wrote as v1/v0
messages; content, keys, order, offsets and timestamps are asserted.
"""

from __future__ import annotations

import struct
import time
import zlib
from dataclasses import replace
from typing import Any

import confluent_kafka
import pytest
from kafka.record.memory_records import MemoryRecords

from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import encode_request
from kafka_ext.protocol.legacy_records import (
    MAGIC_V0,
    MAGIC_V1,
    LegacyMessage,
    build_message_set,
    decode_message_set,
)
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import Compression
from kafka_ext.protocol.records import Record, build_batch, decode_all_batches
from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    CREATE_TIME,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    dense_offsets,
    expected_messages,
    make_records,
    new_topic_name,
    produce_confluent,
    produce_kafka_python,
    wait_until,
)
from tests.integration.test_old_versions import Conn, connection

_reg = registry()
ProduceReq = _reg["ProduceRequest"].cls
FetchReq = _reg["FetchRequest"].cls
MB = 1024 * 1024
MAGIC_OF_FETCH = {0: MAGIC_V0, 1: MAGIC_V0, 2: MAGIC_V1, 3: MAGIC_V1}
MAGIC_OF_PRODUCE = {0: MAGIC_V0, 1: MAGIC_V0, 2: MAGIC_V1}


def produce(conn: Conn, version: int, topic: str, records: bytes, *, partition: int = 0,
            acks: int = -1) -> Any:
    """One partition's answer to a Produce at `version` (v3+ with no transactional id)."""
    response = conn.call("Produce", version, acks=acks, timeout_ms=30_000, topic_data=[
        ProduceReq.TopicProduceData(name=topic, partition_data=[
            ProduceReq.PartitionProduceData(index=partition, records=records)])])
    [topic_response] = response.responses
    [answer] = topic_response.partition_responses
    return answer


def fetch(conn: Conn, version: int, topic: str, offsets: dict[int, int], *,
          partition_max_bytes: int = MB, max_bytes: int = 50 * MB) -> dict[int, Any]:
    """Each partition's answer to one Fetch at `version`, by partition."""
    response = conn.call("Fetch", version, replica_id=-1, max_wait_ms=0, min_bytes=1,
                         max_bytes=max_bytes, topics=[FetchReq.FetchTopic(topic=topic, partitions=[
                             FetchReq.FetchPartition(partition=p, fetch_offset=o,
                                                     partition_max_bytes=partition_max_bytes)
                             for p, o in offsets.items()])])
    [topic_response] = response.responses
    return {p.partition_index: p for p in topic_response.partitions}


def kafka_python_reads(records: Any) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each message, by kafka-python's own record reader."""
    reader = MemoryRecords(bytes(records))
    out = []
    while (batch := reader.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def v2_records(conn: Conn, topic: str, partition: int = 0) -> list[Record]:
    """What the log holds, through Fetch v12 (v2 batches, as today's consumers read them)."""
    [answer] = fetch(conn, 12, topic, {partition: 0}).values()
    assert answer.error_code == 0
    return [r for _, records in decode_all_batches(answer.records) for r in records]


def legacy_messages(magic: int, count: int, *, first_key: int = 0,
                    timestamp_ms: int = 1_600_000_000_000) -> list[LegacyMessage]:
    return [LegacyMessage(i, magic, 0, timestamp_ms + first_key + i if magic else -1,
                          b"key-%d" % (first_key + i), b"value-%d" % (first_key + i))
            for i in range(count)]


# -- Produce v0-2 ----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY,
                                   Compression.LZ4], ids=lambda c: c.name.lower())
@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_message_sets_are_appended_as_v2_batches(broker: Any, version: int,
                                                                  codec: Compression) -> None:
    topic = new_topic_name(f"produce-v{version}")
    magic = MAGIC_OF_PRODUCE[version]
    with connection(broker) as conn:
        conn.call("CreateTopics", 1, timeout_ms=30_000, topics=[
            _reg["CreateTopicsRequest"].cls.CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])])
        first = produce(conn, version, topic, build_message_set(legacy_messages(magic, 3),
                                                                codec=codec))
        second = produce(conn, version, topic, build_message_set(
            legacy_messages(magic, 2, first_key=3), codec=codec))
        assert (first.error_code, first.base_offset) == (0, 0)
        assert (second.error_code, second.base_offset) == (0, 3)
        if version == 2:
            assert first.log_append_time_ms == -1  # CreateTime topic
        stored = v2_records(conn, topic)
    sent = legacy_messages(magic, 5)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in stored] == [
        (i, m.key, m.value, m.timestamp) for i, m in enumerate(sent)]


def test_produce_v2_on_a_log_append_time_topic_answers_the_append_time(broker: Any) -> None:
    topic = new_topic_name("produce-v2-lat")
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    with connection(broker) as conn:
        answer = produce(conn, 2, topic, build_message_set(legacy_messages(MAGIC_V1, 2)))
        assert answer.error_code == 0 and before_ms <= answer.log_append_time_ms
        assert [r.timestamp for r in v2_records(conn, topic)] == [answer.log_append_time_ms] * 2
        # A producer may not claim LogAppendTime itself (Kafka's LogValidator).
        stamped = [replace(m, attributes=0x08) for m in legacy_messages(MAGIC_V1, 1)]
        refused = produce(conn, 2, topic, build_message_set(stamped))
        assert (refused.error_code, refused.base_offset) == (ErrorCode.INVALID_TIMESTAMP, -1)


def test_produce_v1_keyless_message_on_a_compacted_topic_is_invalid_record(broker: Any) -> None:
    topic = new_topic_name("produce-v1-compacted")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    with connection(broker) as conn:
        keyless = [replace(m, key=None) if m.offset == 1 else m
                   for m in legacy_messages(MAGIC_V0, 3)]
        for codec in (Compression.NONE, Compression.GZIP):
            answer = produce(conn, 1, topic, build_message_set(keyless, codec=codec))
            assert answer.error_code == ErrorCode.INVALID_RECORD
        assert produce(conn, 1, topic, build_message_set(legacy_messages(MAGIC_V0, 3))
                       ).error_code == 0
        assert [r.key for r in v2_records(conn, topic)] == [b"key-0", b"key-1", b"key-2"]


def test_produce_v2_refusals_fail_only_their_partition(broker: Any) -> None:
    topic = new_topic_name("produce-v2-refusals")
    create_topic(broker.bootstrap, topic, partitions=4)
    good = build_message_set(legacy_messages(MAGIC_V1, 2))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the first message's CRC no longer matches
    inner = build_message_set(legacy_messages(MAGIC_V1, 2), codec=Compression.GZIP)
    two_wrappers = inner + inner
    with connection(broker) as conn:
        response = conn.call("Produce", 2, acks=1, timeout_ms=30_000, topic_data=[
            ProduceReq.TopicProduceData(name=topic, partition_data=[
                ProduceReq.PartitionProduceData(index=0, records=good),
                ProduceReq.PartitionProduceData(index=1, records=bytes(corrupt)),
                ProduceReq.PartitionProduceData(index=2, records=two_wrappers),
                ProduceReq.PartitionProduceData(index=3, records=b"")])])
        answers = {p.index: (p.error_code, p.base_offset)
                   for p in response.responses[0].partition_responses}
        # An empty message set appends nothing and is no error, as in Kafka.
        assert answers == {0: (0, 0), 1: (ErrorCode.CORRUPT_MESSAGE, -1),
                           2: (ErrorCode.INVALID_RECORD, -1), 3: (0, -1)}
        ends = fetch(conn, 3, topic, {p: 0 for p in range(4)})
        assert {p: a.high_watermark for p, a in ends.items()} == {0: 2, 1: 0, 2: 0, 3: 0}


def test_produce_v0_with_acks_0_is_appended_without_an_answer(broker: Any) -> None:
    topic = new_topic_name("produce-v0-acks0")
    create_topic(broker.bootstrap, topic)
    request = ProduceReq(acks=0, timeout_ms=30_000, topic_data=[ProduceReq.TopicProduceData(
        name=topic, partition_data=[ProduceReq.PartitionProduceData(
            index=0, records=build_message_set(legacy_messages(MAGIC_V0, 4)))])])
    with connection(broker) as conn:
        conn.sock.sendall(encode_request(0, 0, 77, "acks0", request))

        def appended() -> bool:
            return fetch(conn, 0, topic, {0: 0})[0].high_watermark == 4

        wait_until(appended, CONSUME_TIMEOUT_S, "the acks=0 messages")


# -- Fetch v0-3 ------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY,
                                   Compression.LZ4], ids=lambda c: c.name.lower())
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_convert_v2_batches(broker: Any, version: int,
                                                codec: Compression) -> None:
    topic = new_topic_name(f"fetch-v{version}")
    create_topic(broker.bootstrap, topic)
    magic = MAGIC_OF_FETCH[version]
    records = [Record(i, 1_600_000_000_000 + i, b"k%d" % i if i % 3 else None, b"v%d" % i,
                      [("dropped", b"header")]) for i in range(6)]
    with connection(broker) as conn:
        for start in (0, 3):
            batch = build_batch([replace(r, offset=r.offset - start)
                                 for r in records[start:start + 3]], compression=codec)
            assert produce(conn, 3, topic, batch).error_code == 0
        answers = fetch(conn, version, topic, {0: 0})
        [answer] = answers.values()
        assert (answer.error_code, answer.high_watermark) == (0, 6)
        messages = decode_message_set(answer.records)
        assert [(m.offset, m.magic, m.timestamp, m.key, m.value) for m in messages] == [
            (r.offset, magic, r.timestamp if magic else -1, r.key, r.value) for r in records]
        if not (codec == Compression.SNAPPY or (codec == Compression.LZ4 and magic == MAGIC_V0)):
            # kafka-python reads these itself (it lacks snappy here, and xxhash for magic 0 lz4)
            assert kafka_python_reads(answer.records) == [
                (r.offset, r.timestamp if magic else None, r.key, r.value) for r in records]
        # From inside a batch: uncompressed starts at the fetch offset, a wrapper is whole.
        [inside] = fetch(conn, version, topic, {0: 4}).values()
        first = 4 if codec == Compression.NONE else 3
        assert [m.offset for m in decode_message_set(inside.records)] == list(range(first, 6))


def test_fetch_v3_limits_count_converted_bytes_and_never_cut_a_message(broker: Any) -> None:
    topic = new_topic_name("fetch-v3-limits")
    create_topic(broker.bootstrap, topic, partitions=2)
    value = b"x" * 100
    one_message = 12 + 22 + len(b"k00") + len(value)  # entry header, v1 overhead, key, value
    with connection(broker) as conn:
        for p in (0, 1):
            batch = build_batch([Record(i, 5, b"k%02d" % i, value) for i in range(20)])
            assert produce(conn, 3, topic, batch, partition=p).error_code == 0
        # The v2 batch (about 2.5 KB) is smaller than its 20 v1 messages (about 2.7 KB).
        by_partition = fetch(conn, 3, topic, {0: 0, 1: 0}, partition_max_bytes=5 * one_message
                             + 10, max_bytes=8 * one_message)
        sizes = {p: len(a.records) for p, a in by_partition.items()}
        assert sizes == {0: 5 * one_message, 1: 3 * one_message}
        for p, answer in by_partition.items():
            assert [m.offset for m in decode_message_set(answer.records)] == list(
                range(sizes[p] // one_message))
        # The first message goes out even when it alone is over every limit.
        [tiny] = fetch(conn, 3, topic, {0: 7}, partition_max_bytes=10, max_bytes=10).values()
        assert [m.offset for m in decode_message_set(tiny.records)] == [7]
        # Fetch v2 has no response limit: each partition gets its own.
        both = fetch(conn, 2, topic, {0: 0, 1: 0}, partition_max_bytes=2 * one_message)
        assert {p: len(a.records) for p, a in both.items()} == {0: 2 * one_message,
                                                                1: 2 * one_message}


def _transactional_producer(bootstrap: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": new_topic_name("txn"),
                                         "linger.ms": 5})
    producer.init_transactions(CONSUME_TIMEOUT_S)
    return producer


def _transaction(producer: confluent_kafka.Producer, topic: str, values: list[bytes], *,
                 commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, key=b"t", value=value, partition=0)
    producer.flush(CONSUME_TIMEOUT_S)
    if commit:
        producer.commit_transaction(CONSUME_TIMEOUT_S)
    else:
        producer.abort_transaction(CONSUME_TIMEOUT_S)


def test_fetch_v3_drops_transaction_markers_and_reads_uncommitted(broker: Any) -> None:
    """Kafka 3.9: v0-3 have no isolation level; aborted data is read, markers dropped."""
    topic = new_topic_name("fetch-v3-txn")
    create_topic(broker.bootstrap, topic)
    producer = _transactional_producer(broker.bootstrap)
    _transaction(producer, topic, [b"c0", b"c1"], commit=True)  # offsets 0-1, marker 2
    _transaction(producer, topic, [b"a0"], commit=False)  # offset 3, marker 4
    with connection(broker) as conn:
        [answer] = fetch(conn, 3, topic, {0: 0}).values()
        assert answer.high_watermark == 5
        assert [(m.offset, m.value) for m in decode_message_set(answer.records)] == [
            (0, b"c0"), (1, b"c1"), (3, b"a0")]
        # At a marker that ends the log: nothing to read, and no error.
        [at_marker] = fetch(conn, 3, topic, {0: 4}).values()
        assert (at_marker.error_code, bytes(at_marker.records)) == (0, b"")
        # Past a marker that is not last: the next data, never an empty answer.
        _transaction(producer, topic, [b"c2"], commit=True)  # offset 5, marker 6
        [past] = fetch(conn, 3, topic, {0: 4}).values()
        assert [(m.offset, m.value) for m in decode_message_set(past.records)] == [(5, b"c2")]
    del producer  # librdkafka's handle goes now, before the broker does


def test_fetch_v3_of_zstd_data_is_unsupported_compression_type(broker: Any) -> None:
    zstd_topic, mixed = new_topic_name("fetch-zstd-topic"), new_topic_name("fetch-zstd-mixed")
    create_topic(broker.bootstrap, zstd_topic, config={"compression.type": "zstd"})
    create_topic(broker.bootstrap, mixed)
    with connection(broker) as conn:
        assert produce(conn, 3, zstd_topic, build_batch([Record(0, 0, None, b"z")])).error_code == 0
        for version in (1, 3):
            assert fetch(conn, version, zstd_topic, {0: 0})[0].error_code == (
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        assert produce(conn, 7, mixed, build_batch([Record(0, 0, None, b"plain")])).error_code == 0
        assert produce(conn, 7, mixed, build_batch([Record(0, 0, None, b"z")],
                                                   compression=Compression.ZSTD)).error_code == 0
        [head] = fetch(conn, 3, mixed, {0: 0}).values()  # stops before the zstd batch
        assert (head.error_code, [m.value for m in decode_message_set(head.records)]) == (
            0, [b"plain"])
        assert fetch(conn, 3, mixed, {0: 1})[0].error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# -- stock clients across formats --------------------------------------------------------------

PINNED_CONSUMERS = {(0, 10, 2): MAGIC_V1, (0, 9): MAGIC_V0}  # Fetch v3 and Fetch v1
# What confluent-kafka compresses with for each: kafka-python reads magic 0 lz4 only with the
# xxhash package, not a dependency here (the broker's magic 0 lz4 is checked in unit tests).
WRITTEN_WITH = {(0, 10, 2): ("lz4", "gzip"), (0, 9): ("none", "gzip")}


@pytest.mark.parametrize("pin", list(PINNED_CONSUMERS), ids=lambda p: ".".join(map(str, p)))
def test_old_consumer_reads_what_confluent_kafka_wrote_as_v2_batches(broker: Any,
                                                                     pin: tuple[int, ...]) -> None:
    topic = new_topic_name("down-conversion")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(300, partitions=2)
    first, second = WRITTEN_WITH[pin]
    offsets = produce_confluent(broker.bootstrap, topic, records[:150],
                                {"compression.type": first})
    offsets += produce_confluent(broker.bootstrap, topic, records[150:],
                                 {"compression.type": second})
    assert offsets == dense_offsets(records)
    producer = _transactional_producer(broker.bootstrap)
    _transaction(producer, topic, [b"in-a-transaction"], commit=True)  # partition 0, + marker
    del producer  # librdkafka's handle goes now, before the broker does
    got = consume_kafka_python(broker.bootstrap, topic, {0: 0, 1: 0}, len(records) + 1,
                               {"api_version": pin})
    magic = PINNED_CONSUMERS[pin]
    # Headers are dropped (v0/v1 have none); magic 0 has no timestamps (kafka-python: None).
    read = sorted((m.partition, m.offset, m.key, m.value, m.headers, m.timestamp_ms,
                   m.timestamp_type) for m in got)
    in_partition_0 = sum(1 for r in records if r.partition == 0)
    assert sorted([(m.partition, m.offset, m.key, m.value, (), m.timestamp_ms if magic else None,
                    CREATE_TIME if magic else None)
                   for m in expected_messages(records, offsets)]
                  + [(0, in_partition_0, b"t", b"in-a-transaction", (), read[in_partition_0][5],
                      read[in_partition_0][6])]) == read


@pytest.mark.parametrize("pin", [(0, 10, 2), (0, 9)], ids=lambda p: ".".join(map(str, p)))
@pytest.mark.parametrize("consume", [consume_confluent, consume_aiokafka],
                         ids=["confluent", "aiokafka"])
def test_v2_consumer_reads_what_an_old_kafka_python_producer_wrote(
        broker: Any, pin: tuple[int, ...], consume: Any) -> None:
    topic = new_topic_name("up-conversion")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = [replace(r, headers=()) for r in make_records(200, partitions=2)]  # v0/v1: none
    offsets = produce_kafka_python(broker.bootstrap, topic, records,
                                   {"api_version": pin, "compression_type": "gzip"})
    assert offsets == dense_offsets(records)
    got = consume(broker.bootstrap, topic, {0: 0, 1: 0}, len(records))
    by_position = sorted(got, key=lambda m: (m.partition, m.offset))
    expected = sorted(expected_messages(records, offsets), key=lambda m: (m.partition, m.offset))
    assert [(m.partition, m.offset, m.key, m.value) for m in by_position] == [
        (m.partition, m.offset, m.key, m.value) for m in expected]
    if pin >= (0, 10):  # magic 1 carries the producer's timestamps; magic 0 has none
        assert [(m.timestamp_ms, m.timestamp_type) for m in by_position] == [
            (m.timestamp_ms, CREATE_TIME) for m in expected]


def test_raw_golden_fetch_v2_answer_bytes(broker: Any) -> None:
    """The whole partition entry of a Fetch v2 answer, byte for byte as Kafka 3.9 lays it out."""
    topic = new_topic_name("fetch-v2-golden")
    create_topic(broker.bootstrap, topic)
    with connection(broker) as conn:
        produce(conn, 3, topic, build_batch([Record(0, 1234, b"k", b"v")]))
        [answer] = fetch(conn, 2, topic, {0: 0}).values()
    body = struct.pack(">bbqi", 1, 0, 1234, 1) + b"k" + struct.pack(">i", 1) + b"v"
    message = struct.pack(">I", zlib.crc32(body)) + body
    assert bytes(answer.records) == struct.pack(">qi", 0, len(message)) + message
