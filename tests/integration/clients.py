"""Produce, consume and look up offsets with the three stock Python clients, in one shape.

Each library gets a `produce_<lib>` and a `consume_<lib>` with the same signature so a test can
produce with one library and consume with another and compare plain `Message` tuples. Producers
keep each library's default idempotence (on in kafka-python 3, off in confluent-kafka and
aiokafka); consumers here use manual assignment, never a group.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka
from confluent_kafka.admin import AdminClient, NewTopic

CREATE_TIME = 0
"""Kafka's timestamp type of a producer-assigned timestamp (bit 3 of the batch attributes clear)."""
LOG_APPEND_TIME = 1
"""Kafka's timestamp type of a broker-assigned timestamp."""

ADMIN_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 90.0
POLL_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record a test sends to an explicit partition."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Message:
    """A consumed record, the same whichever library read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    timestamp_type: int = CREATE_TIME


# --- names, topics and waiting --------------------------------------------------------------------


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `condition` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                 config: Mapping[str, str] | None = None) -> None:
    """Create a topic with confluent-kafka and wait until its metadata shows every partition."""
    admin = confluent_admin(bootstrap)
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=dict(config or {}))],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)

    def ready() -> bool:
        meta = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        return (meta is not None and meta.error is None and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values()))

    wait_until(ready, ADMIN_TIMEOUT_S, f"metadata of new topic {topic}")


def segment_files(data_dir: Path, topic: str, partition: int) -> list[Path]:
    """The partition's `.log` segment files in base offset order."""
    return sorted((data_dir / f"{topic}-{partition}").glob("*.log"))


BATCH_HEADER = struct.Struct(">qiibIhi")
"""The start of a v2 record batch on disk: base offset, batch length (bytes after this field),
partition leader epoch, magic, CRC-32C, attributes (low 3 bits: codec), last offset delta."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Where one record batch of a segment file starts and ends, and its codec."""

    base_offset: int
    last_offset: int
    compression_codec: int


def read_batch_headers(segment: Path) -> list[BatchHeader]:
    """Walk a `.log` segment file batch by batch (the on-disk format is the wire format)."""
    data = segment.read_bytes()
    headers = []
    pos = 0
    while pos + BATCH_HEADER.size <= len(data):
        base, length, _epoch, magic, _crc, attributes, last_delta = BATCH_HEADER.unpack_from(
            data, pos)
        if length == 0:
            break
        assert magic == 2, f"batch at byte {pos} of {segment} has magic {magic}"
        headers.append(BatchHeader(base, base + last_delta, attributes & 0x7))
        pos += 12 + length
    return headers


# --- what to send and what to expect -------------------------------------------------------------


def make_records(count: int, partitions: int = 1, base_timestamp_ms: int = 1_600_000_000_000,
                 value_size_bytes: int = 64) -> list[Outgoing]:
    """`count` distinct records round-robin over `partitions`, each with key, two headers and a
    timestamp 1 ms after the previous one."""
    records = []
    for i in range(count):
        value = f"value-{i:06d}-".encode()
        value += b"x" * max(0, value_size_bytes - len(value))
        records.append(Outgoing(
            partition=i % partitions,
            key=f"key-{i:06d}".encode(),
            value=value,
            headers=(("seq", str(i).encode()), ("parity", b"odd" if i % 2 else b"even")),
            timestamp_ms=base_timestamp_ms + i,
        ))
    return records


def expected_messages(records: Sequence[Outgoing], offsets: Sequence[int]) -> list[Message]:
    """The consumed form of `records` written at `offsets`, with CreateTime timestamps."""
    return [Message(r.partition, offset, r.key, r.value, r.headers, r.timestamp_ms)
            for r, offset in zip(records, offsets, strict=True)]


def dense_offsets(records: Sequence[Outgoing], start: Mapping[int, int] | None = None) -> list[int]:
    """The offsets a fresh log assigns to `records` sent in order: 0, 1, 2... per partition."""
    next_offset = dict(start or {})
    offsets = []
    for r in records:
        offset = next_offset.get(r.partition, 0)
        offsets.append(offset)
        next_offset[r.partition] = offset + 1
    return offsets


def by_partition(messages: Iterable[Message]) -> dict[int, list[Message]]:
    """Messages grouped per partition, keeping their order within each partition."""
    grouped: dict[int, list[Message]] = {}
    for m in messages:
        grouped.setdefault(m.partition, []).append(m)
    return grouped


# --- producers -----------------------------------------------------------------------------------


def produce_confluent(bootstrap: str, topic: str, records: Sequence[Outgoing],
                      config: Mapping[str, Any] | None = None) -> list[int]:
    """Send every record with confluent-kafka; returns each record's offset from its delivery
    report and fails if any report carries an error."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "linger.ms": 5, **(config or {})})
    offsets: list[int | None] = [None] * len(records)
    delivered = [False] * len(records)
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                delivered[index] = True
                offsets[index] = msg.offset()
        return on_delivery

    for i, r in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, partition=r.partition,
                                 headers=list(r.headers), timestamp=r.timestamp_ms,
                                 on_delivery=report(i))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(CONSUME_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records still undelivered"
    assert not errors, errors[:5]
    assert all(delivered)
    return [confluent_kafka.OFFSET_INVALID if o is None else o for o in offsets]


def produce_kafka_python(bootstrap: str, topic: str, records: Sequence[Outgoing],
                         config: Mapping[str, Any] | None = None) -> list[int]:
    """Send every record with kafka-python; returns each record's offset."""
    producer = kafka.KafkaProducer(**{"bootstrap_servers": bootstrap, "linger_ms": 5,
                                      **(config or {})})
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                                 headers=list(r.headers), timestamp_ms=r.timestamp_ms)
                   for r in records]
        producer.flush(timeout=CONSUME_TIMEOUT_S)
        return [f.get(timeout=CONSUME_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, records: Sequence[Outgoing],
                     config: Mapping[str, Any] | None = None) -> list[int]:
    """Send every record with aiokafka; returns each record's offset."""

    async def run() -> list[int]:
        producer = aiokafka.AIOKafkaProducer(**{"bootstrap_servers": bootstrap,
                                                "linger_ms": 5, **(config or {})})
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value,
                                           partition=r.partition, headers=list(r.headers),
                                           timestamp_ms=r.timestamp_ms)
                       for r in records]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    return asyncio.run(run())


PRODUCERS: dict[str, Callable[..., list[int]]] = {
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


# --- consumers -----------------------------------------------------------------------------------


def _headers(raw: Iterable[tuple[str, bytes | None]] | None) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, v if v is not None else b"") for k, v in (raw or ()))


def confluent_consumer(bootstrap: str, config: Mapping[str, Any] | None = None
                       ) -> confluent_kafka.Consumer:
    """A confluent consumer for manual assignment: it never joins or commits to its group."""
    return confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": new_topic_name("unused-group"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        **(config or {}),
    })


def confluent_message(msg: Any) -> Message:
    ts_type, ts = msg.timestamp()
    return Message(msg.partition(), msg.offset(), msg.key(), msg.value(), _headers(msg.headers()),
                   ts, LOG_APPEND_TIME if ts_type == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
                   else CREATE_TIME)


def consume_confluent(bootstrap: str, topic: str, start: Mapping[int, int], count: int,
                      config: Mapping[str, Any] | None = None,
                      timeout_s: float = CONSUME_TIMEOUT_S) -> list[Message]:
    """Read `count` messages with confluent-kafka from the given {partition: offset} positions
    (an offset may be OFFSET_BEGINNING/OFFSET_END); fails on a consumer error."""
    consumer = confluent_consumer(bootstrap, config)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, o) for p, o in start.items()])
        got: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(confluent_message(msg))
        return got
    finally:
        consumer.close()


def kafka_python_consumer(bootstrap: str, config: Mapping[str, Any] | None = None
                          ) -> kafka.KafkaConsumer:
    return kafka.KafkaConsumer(**{"bootstrap_servers": bootstrap, "group_id": None,
                                  "enable_auto_commit": False, "auto_offset_reset": "earliest",
                                  **(config or {})})


def consume_kafka_python(bootstrap: str, topic: str, start: Mapping[int, int], count: int,
                         config: Mapping[str, Any] | None = None,
                         timeout_s: float = CONSUME_TIMEOUT_S) -> list[Message]:
    """Read `count` messages with kafka-python from {partition: offset} (-2 earliest, -1 latest)."""
    consumer = kafka_python_consumer(bootstrap, config)
    try:
        tps = {p: kafka.TopicPartition(topic, p) for p in start}
        consumer.assign(list(tps.values()))
        for p, offset in start.items():
            if offset == confluent_kafka.OFFSET_BEGINNING:
                consumer.seek_to_beginning(tps[p])
            elif offset == confluent_kafka.OFFSET_END:
                consumer.seek_to_end(tps[p])
            else:
                consumer.seek(tps[p], offset)
        got: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
            for batch in consumer.poll(timeout_ms=500, max_records=5000).values():
                got += [Message(m.partition, m.offset, m.key, m.value, _headers(m.headers),
                                m.timestamp, m.timestamp_type) for m in batch]
        return got
    finally:
        consumer.close()


def consume_aiokafka(bootstrap: str, topic: str, start: Mapping[int, int], count: int,
                     config: Mapping[str, Any] | None = None,
                     timeout_s: float = CONSUME_TIMEOUT_S) -> list[Message]:
    """Read `count` messages with aiokafka from {partition: offset} (-2 earliest, -1 latest)."""

    async def run() -> list[Message]:
        consumer = aiokafka.AIOKafkaConsumer(**{
            "bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
            "auto_offset_reset": "earliest", **(config or {})})
        await consumer.start()
        try:
            tps = {p: aiokafka.TopicPartition(topic, p) for p in start}
            consumer.assign(list(tps.values()))
            for p, offset in start.items():
                if offset == confluent_kafka.OFFSET_BEGINNING:
                    await consumer.seek_to_beginning(tps[p])
                elif offset == confluent_kafka.OFFSET_END:
                    await consumer.seek_to_end(tps[p])
                else:
                    consumer.seek(tps[p], offset)
            got: list[Message] = []
            deadline = time.monotonic() + timeout_s
            while len(got) < count:
                assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
                batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                for batch in batches.values():
                    got += [Message(m.partition, m.offset, m.key, m.value, _headers(m.headers),
                                    m.timestamp, m.timestamp_type) for m in batch]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


CONSUMERS: dict[str, Callable[..., list[Message]]] = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


# --- offset lookups ------------------------------------------------------------------------------


def offsets_for_times_confluent(bootstrap: str, topic: str,
                                timestamps: Mapping[int, int]) -> dict[int, int]:
    """{partition: first offset with timestamp >= ts}, -1 where there is none (confluent)."""
    consumer = confluent_consumer(bootstrap)
    try:
        result = consumer.offsets_for_times(
            [confluent_kafka.TopicPartition(topic, p, ts) for p, ts in timestamps.items()],
            timeout=ADMIN_TIMEOUT_S)
        for tp in result:
            assert tp.error is None, tp.error
        return {tp.partition: tp.offset for tp in result}
    finally:
        consumer.close()


def offsets_for_times_kafka_python(bootstrap: str, topic: str,
                                   timestamps: Mapping[int, int]) -> dict[int, int]:
    consumer = kafka_python_consumer(bootstrap)
    try:
        result = consumer.offsets_for_times(
            {kafka.TopicPartition(topic, p): ts for p, ts in timestamps.items()})
        return {tp.partition: (-1 if found is None else found.offset)
                for tp, found in result.items()}
    finally:
        consumer.close()


def offsets_for_times_aiokafka(bootstrap: str, topic: str,
                               timestamps: Mapping[int, int]) -> dict[int, int]:
    async def run() -> dict[int, int]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            result = await consumer.offsets_for_times(
                {aiokafka.TopicPartition(topic, p): ts for p, ts in timestamps.items()})
            return {tp.partition: (-1 if found is None else found.offset)
                    for tp, found in result.items()}
        finally:
            await consumer.stop()

    return asyncio.run(run())


def watermarks_confluent(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(earliest, latest) offsets of a partition from ListOffsets, via confluent-kafka."""
    consumer = confluent_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT_S,
            cached=False)
        return low, high
    finally:
        consumer.close()


def watermarks_kafka_python(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = kafka_python_consumer(bootstrap)
    try:
        tp = kafka.TopicPartition(topic, partition)
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def watermarks_aiokafka(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    async def run() -> tuple[int, int]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, partition)
            low = (await consumer.beginning_offsets([tp]))[tp]
            high = (await consumer.end_offsets([tp]))[tp]
            return low, high
        finally:
            await consumer.stop()

    return asyncio.run(run())
