"""Idempotence and transactions with the pure-Python stock clients against the real broker.

kafka-python 3 enables idempotence by default (KIP-679): with no settings at all its batches
carry a producer id from InitProducerId and a group consumer reads each message once, in order.
aiokafka's and kafka-python's transactional producers (begin/commit/abort,
send_offsets_to_transaction) with read_committed consumers of the same library: committed data
is visible, aborted data is not, and the group's offsets move only with a commit.
(confluent-kafka's transactions are in test_transactions.py.)
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any

import aiokafka
import kafka
from kafka.admin import KafkaAdminClient

from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    Outgoing,
    create_topic,
    new_topic_name,
    produce_confluent,
    segment_files,
)

BATCH_PRODUCER = struct.Struct(">qhi")
"""Producer fields of a v2 batch header on disk, at byte 43: producer id, producer epoch,
base sequence."""
BATCH_PRODUCER_AT = 43
BATCH_LENGTH = struct.Struct(">qi")  # base offset, batch length (bytes after this field)

COMMITTED = [b"committed-%d" % i for i in range(5)]
ABORTED = [b"aborted-%d" % i for i in range(5)]
LAST = b"last"


def batch_producers(path: Any) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of every batch of a `.log` segment file."""
    data = path.read_bytes()
    found = []
    pos = 0
    while pos + BATCH_PRODUCER_AT + BATCH_PRODUCER.size <= len(data):
        _base, length = BATCH_LENGTH.unpack_from(data, pos)
        if length == 0:
            break
        found.append(BATCH_PRODUCER.unpack_from(data, pos + BATCH_PRODUCER_AT))
        pos += 12 + length
    return found


def committed_offset(bootstrap: str, group: str, topic: str) -> int | None:
    """The group's committed offset of `topic`-0 (OffsetFetch), None if it has none."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets(group).get(group, {})
    finally:
        admin.close()
    found = offsets.get(kafka.TopicPartition(topic, 0))
    return None if found is None or found.offset < 0 else found.offset


# -- kafka-python: default producer settings ----------------------------------------------------


def test_kafka_python_defaults_are_idempotent_and_a_group_reads_each_message_once_in_order(
        broker: Any) -> None:
    topic = new_topic_name("kp-idem")
    create_topic(broker.bootstrap, topic, 3)
    values = [b"m-%04d" % i for i in range(900)]
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)  # nothing but defaults
    try:
        assert producer.config["enable_idempotence"] and producer.config["acks"] == -1
        futures = [producer.send(topic, value=v, partition=i % 3) for i, v in enumerate(values)]
        producer.flush(timeout=CONSUME_TIMEOUT_S)
        offsets = [f.get(timeout=CONSUME_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == [i // 3 for i in range(len(values))]
    # Every stored batch carries the producer id InitProducerId gave, with sequences from 0.
    for p in range(3):
        batches = [b for f in segment_files(broker.data_dir, topic, p) for b in batch_producers(f)]
        assert batches and {pid for pid, _, _ in batches} == {batches[0][0]}
        assert batches[0][0] >= 0 and batches[0][1:] == (0, 0)

    group = new_topic_name("kp-idem-group")
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while sum(map(len, got.values())) < len(values):
            assert time.monotonic() < deadline, f"only {sum(map(len, got.values()))} arrived"
            for tp, batch in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [m.value for m in batch]
        consumer.commit()
        assert not any(consumer.poll(timeout_ms=500).values())  # nothing beyond: no duplicate
    finally:
        consumer.close()
    assert got == {p: values[p::3] for p in range(3)}
    assert committed_offset(broker.bootstrap, group, topic) == len(values[0::3])


# -- transactional producers ---------------------------------------------------------------------


def _check_transactions(broker: Any, run: Callable[[str, str, str], None],
                        read_committed: Callable[[str, str], list[bytes]],
                        read_uncommitted: Callable[[str, str], list[bytes]]) -> None:
    """`run(in_topic, out_topic, group)` commits COMMITTED with input offset 5, aborts ABORTED
    with input offset 10, then commits LAST with no offsets, checking the group in between."""
    source, sink = new_topic_name("eos-in"), new_topic_name("eos-out")
    group = new_topic_name("eos-group")
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    produce_confluent(broker.bootstrap, source,
                      [Outgoing(0, None, b"in-%d" % i, (), 1_700_000_000_000 + i)
                       for i in range(20)])
    run(source, sink, group)
    assert read_committed(broker.bootstrap, sink) == [*COMMITTED, LAST]
    assert read_uncommitted(broker.bootstrap, sink) == [*COMMITTED, *ABORTED, LAST]
    assert committed_offset(broker.bootstrap, group, source) == 5


def test_aiokafka_transactions_show_committed_data_and_offsets_only(broker: Any) -> None:
    def run(source: str, sink: str, group: str) -> None:
        async def transact() -> None:
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                                 transactional_id=new_topic_name("aio-tx"))
            await producer.start()  # InitProducerId
            tp = aiokafka.TopicPartition(source, 0)
            try:
                async with producer.transaction():
                    for value in COMMITTED:
                        await producer.send_and_wait(sink, value, partition=0)
                    await producer.send_offsets_to_transaction({tp: 5}, group)
                assert committed_offset(broker.bootstrap, group, source) == 5
                await producer.begin_transaction()
                for value in ABORTED:
                    await producer.send_and_wait(sink, value, partition=0)
                await producer.send_offsets_to_transaction({tp: 10}, group)
                await producer.abort_transaction()
                assert committed_offset(broker.bootstrap, group, source) == 5
                async with producer.transaction():
                    await producer.send_and_wait(sink, LAST, partition=0)
            finally:
                await producer.stop()

        asyncio.run(transact())

    _check_transactions(broker, run, lambda b, t: _read_aiokafka(b, t, "read_committed"),
                        lambda b, t: _read_aiokafka(b, t, "read_uncommitted"))


def _read_aiokafka(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    """Values of `topic`-0 from the start until LAST, with aiokafka."""
    async def read() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                             enable_auto_commit=False,
                                             auto_offset_reset="earliest",
                                             isolation_level=isolation_level)
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while LAST not in got:
                assert time.monotonic() < deadline, f"no {LAST!r} after {got}"
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in batch]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(read())


def test_kafka_python_transactions_show_committed_data_and_offsets_only(broker: Any) -> None:
    def run(source: str, sink: str, group: str) -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap,
                                       transactional_id=new_topic_name("kp-tx"))
        tp = kafka.TopicPartition(source, 0)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for value in COMMITTED:
                producer.send(sink, value, partition=0)
            producer.send_offsets_to_transaction({tp: kafka.structs.OffsetAndMetadata(5)}, group)
            producer.commit_transaction()
            assert committed_offset(broker.bootstrap, group, source) == 5
            producer.begin_transaction()
            for value in ABORTED:
                producer.send(sink, value, partition=0).get(timeout=CONSUME_TIMEOUT_S)
            producer.send_offsets_to_transaction({tp: kafka.structs.OffsetAndMetadata(10)},
                                                 group)
            producer.abort_transaction()
            assert committed_offset(broker.bootstrap, group, source) == 5
            producer.begin_transaction()
            producer.send(sink, LAST, partition=0)
            producer.commit_transaction()
        finally:
            producer.close(timeout=10)

    _check_transactions(broker, run, lambda b, t: _read_kafka_python(b, t, "read_committed"),
                        lambda b, t: _read_kafka_python(b, t, "read_uncommitted"))


def _read_kafka_python(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    """Values of `topic`-0 from the start until LAST, with kafka-python."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="earliest",
                                   isolation_level=isolation_level)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while LAST not in got:
            assert time.monotonic() < deadline, f"no {LAST!r} after {got}"
            for batch in consumer.poll(timeout_ms=500).values():
                got += [m.value for m in batch]
        return got
    finally:
        consumer.close()
