"""Per-record produce errors (KIP-467) against the real broker: a batch refused because of some
of its records names them in ProduceResponse v8+ RecordErrors, so clients fail exactly those.

The first test is librdkafka's 0011_produce_batch `test_message_single_partition_record_fail`.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import confluent_kafka
import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    consume_confluent,
    create_topic,
    new_topic_name,
)

COMPACTED = {"cleanup.policy": "compact"}
KEYLESS_EVERY = 10
COUNT = 100
_Produce = registry()["ProduceRequest"].cls


def _produce(bootstrap: str, topic: str, batch: bytes, version: int) -> Any:
    """One Produce request of one batch to partition 0; the partition's answer."""
    request = _Produce(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        _Produce.TopicProduceData(name=topic, partition_data=[
            _Produce.PartitionProduceData(index=0, records=batch)])])
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        response = round_trip(sock, ApiKey.PRODUCE, version, request)
    [topic_answer] = response.responses
    [answer] = topic_answer.partition_responses
    return answer


def _keyed_every_tenth_keyless(timestamp_ms: int) -> bytes:
    return build_batch([Record(i, timestamp_ms, None if i % KEYLESS_EVERY == 0 else b"k%d" % i,
                               b"v%d" % i) for i in range(COUNT)])


def test_confluent_fails_only_the_keyless_records_of_a_compacted_batch(broker) -> None:
    topic = new_topic_name("record-fail")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "linger.ms": 2000,
        "batch.num.messages": COUNT, "enable.idempotence": False, "retries": 0})
    errors: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        errors[int(msg.value()[1:])] = err.code() if err is not None else 0

    for i in range(COUNT):
        producer.produce(topic, partition=0, value=b"v%d" % i, on_delivery=delivered,
                         key=None if i % KEYLESS_EVERY == 0 else b"k%d" % i)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert errors == {i: (confluent_kafka.KafkaError.INVALID_RECORD if i % KEYLESS_EVERY == 0
                          else confluent_kafka.KafkaError._INVALID_DIFFERENT_RECORD)
                      for i in range(COUNT)}
    # Nothing of the batch was written: a keyed record produced now lands at offset 0.
    producer.produce(topic, partition=0, key=b"k", value=b"v100", on_delivery=delivered)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert errors[COUNT] == 0
    [message] = consume_confluent(broker.bootstrap, topic, {0: 0}, count=1)
    assert (message.offset, message.value) == (0, b"v100")


@pytest.mark.parametrize("version", [7, 8, 9, 11])
def test_produce_lists_the_keyless_records_by_batch_index_from_v8(broker, version: int) -> None:
    topic = new_topic_name("record-errors")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    answer = _produce(broker.bootstrap, topic, _keyed_every_tenth_keyless(int(time.time() * 1000)),
                      version=version)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.INVALID_RECORD, -1)
    if version < 8:  # no RecordErrors nor ErrorMessage on the wire before v8
        assert (answer.record_errors, answer.error_message) == ([], None)
        return
    assert [e.batch_index for e in answer.record_errors] == list(range(0, COUNT, KEYLESS_EVERY))
    assert {e.batch_index_error_message for e in answer.record_errors} == {
        f"Compacted topic cannot accept message without key in topic partition {topic}-0."}
    assert answer.error_message.startswith(
        "One or more records have been rejected due to 10 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=0, ")


def _future_every_third(now_ms: int) -> bytes:
    """Records 0, 3, 6, 9 two hours ahead of the broker's clock, the rest now."""
    return build_batch([Record(i, now_ms + (7_200_000 if i % 3 == 0 else 0), b"k", b"v")
                        for i in range(10)])


def _assert_future_records_listed(answer: Any) -> None:
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert answer.error_message == \
        "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in answer.record_errors] == [0, 3, 6, 9]
    assert all(" is out of range. The timestamp should be within [" in e.batch_index_error_message
               for e in answer.record_errors)


def test_records_beyond_message_timestamp_after_max_ms_are_listed(broker) -> None:
    topic = new_topic_name("record-errors-ts")
    create_topic(broker.bootstrap, topic)  # message.timestamp.after.max.ms: one hour
    answer = _produce(broker.bootstrap, topic, _future_every_third(int(time.time() * 1000)),
                      version=11)
    _assert_future_records_listed(answer)
    now_batch = build_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    assert _produce(broker.bootstrap, topic, now_batch, version=11).base_offset == 0


@pytest.fixture
def diskless_broker(broker_factory: Any) -> Any:
    return broker_factory({"diskless.metadata.topic.num.partitions": "1",
                           "diskless.wal.max.ms": "20"})


def test_diskless_topic_lists_records_beyond_the_timestamp_window(diskless_broker: Any) -> None:
    topic = new_topic_name("record-errors-diskless")
    create_topic(diskless_broker.bootstrap, topic, config={"diskless.enable": "true"})
    answer = _produce(diskless_broker.bootstrap, topic,
                      _future_every_third(int(time.time() * 1000)), version=11)
    _assert_future_records_listed(answer)
    now_batch = build_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    accepted = _produce(diskless_broker.bootstrap, topic, now_batch, version=11)
    assert (accepted.error_code, accepted.base_offset) == (0, 0)
