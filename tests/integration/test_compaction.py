"""Log compaction against the real broker with kafka-python: a `cleanup.policy=compact` topic
keeps the last value per key at its original offset, and refuses records without a key."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import kafka
import kafka.errors
import pytest
from clients import (
    CONSUME_TIMEOUT_S,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    new_topic_name,
    read_batch_headers,
    segment_files,
    wait_until,
)

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.records import decode_all_batches

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "100",  # one small batch per segment: every produce rolls a segment
    "min.cleanable.dirty.ratio": "0.01",
}

Stored = tuple[int, bytes | None, bytes | None]


def produce_one_batch_each(bootstrap: str, topic: str,
                           records: list[tuple[bytes | None, bytes]]) -> list[int]:
    """Send each record alone (waiting for its ack), so each is its own batch; their offsets."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False,
                                   linger_ms=0)
    try:
        return [producer.send(topic, key=key, value=value, partition=0)
                .get(timeout=CONSUME_TIMEOUT_S).offset for key, value in records]
    finally:
        producer.close(timeout=10)


def records_on_disk(data_dir: Path, topic: str) -> list[Stored] | None:
    """(offset, key, value) of every record in the partition's segment files, read while the
    broker runs; None when a file changed under the read (the cleaner swapped it)."""
    found: list[Stored] = []
    try:
        for segment in segment_files(data_dir, topic, 0):
            for _, records in decode_all_batches(segment.read_bytes()):
                found += [(r.offset, r.key, r.value) for r in records]
    except (FileNotFoundError, DecodeError):
        return None
    return found


def test_compacted_topic_keeps_the_last_value_per_key_at_its_original_offset(
        broker_factory) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": "50"})
    topic = new_topic_name("compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    sent = [(b"key-%d" % k, b"value-%d-%d" % (k, r)) for r in range(5) for k in range(4)]
    offsets = produce_one_batch_each(broker.bootstrap, topic, sent)
    assert offsets == list(range(len(sent)))
    # One more batch: it rolls the segment holding the last values, which become cleanable.
    [barrier] = produce_one_batch_each(broker.bootstrap, topic, [(b"barrier", b"end")])
    last: dict[bytes, Stored] = {}
    for offset, (key, value) in zip(offsets, sent, strict=True):
        last[key] = (offset, key, value)
    expected = sorted(last.values()) + [(barrier, b"barrier", b"end")]

    wait_until(lambda: records_on_disk(broker.data_dir, topic) == expected, CONSUME_TIMEOUT_S,
               "the cleaner to leave only the last value of each key on disk")

    got = consume_kafka_python(broker.bootstrap, topic, {0: -2}, count=len(expected))
    assert [(m.offset, m.key, m.value) for m in got] == expected


def test_record_without_key_is_refused_by_a_compacted_topic(broker) -> None:
    topic = new_topic_name("compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    with pytest.raises(kafka.errors.InvalidRecordError):
        produce_one_batch_each(broker.bootstrap, topic, [(None, b"no key")])
    assert produce_one_batch_each(broker.bootstrap, topic, [(b"k", b"keyed")]) == [0]


def test_deleted_keys_vanish_and_idempotent_batches_are_read_by_confluent(broker_factory) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": "50"})
    topic = new_topic_name("compacted")
    create_topic(broker.bootstrap, topic, config={**COMPACTED, "delete.retention.ms": "0"})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "enable.idempotence": True, "linger.ms": 0})
    sent: list[tuple[bytes, bytes | None]] = [
        (b"kept", b"v1"), (b"deleted", b"v1"), (b"kept", b"v2"), (b"deleted", None),
        (b"barrier", b"end")]
    for key, value in sent:  # one batch each: flush before the next
        producer.produce(topic, key=key, value=value, partition=0)
        assert producer.flush(CONSUME_TIMEOUT_S) == 0
    expected = [(2, b"kept", b"v2"), (4, b"barrier", b"end")]

    wait_until(lambda: records_on_disk(broker.data_dir, topic) == expected, CONSUME_TIMEOUT_S,
               "the cleaner to drop the superseded values and the expired tombstone")

    got = consume_confluent(broker.bootstrap, topic, {0: confluent_kafka.OFFSET_BEGINNING},
                            count=len(expected))
    assert [(m.offset, m.key, m.value) for m in got] == expected


@pytest.mark.parametrize("consume", [consume_kafka_python, consume_confluent, consume_aiokafka],
                         ids=["kafka-python", "confluent", "aiokafka"])
def test_consumers_skip_the_emptied_last_batch_an_idempotent_producer_keeps(
        broker_factory, consume) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": "50"})
    topic = new_topic_name("compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    idempotent = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                           "enable.idempotence": True, "linger.ms": 0})
    idempotent.produce(topic, key=b"k", value=b"old", partition=0)
    assert idempotent.flush(CONSUME_TIMEOUT_S) == 0
    produce_one_batch_each(broker.bootstrap, topic, [(b"k", b"new"), (b"barrier", b"end")])
    expected = [(1, b"k", b"new"), (2, b"barrier", b"end")]

    def cleaned_with_empty_header() -> bool:
        headers = [h for path in segment_files(broker.data_dir, topic, 0)
                   for h in read_batch_headers(path)]
        return (records_on_disk(broker.data_dir, topic) == expected
                and [h.base_offset for h in headers] == [0, 1, 2])

    wait_until(cleaned_with_empty_header, CONSUME_TIMEOUT_S,
               "the cleaner to empty the idempotent producer's last batch but keep its header")

    got = consume(broker.bootstrap, topic, {0: -2}, count=len(expected))
    assert [(m.offset, m.key, m.value) for m in got] == expected
