"""kafka-python pinned to old broker versions (`api_version=`): it then sends only the request
versions those brokers knew, as applications built for them do (issue 23).

Each pin creates a topic, describes its configs, produces keyed compressed messages, consumes
them in a consumer group, commits, and reads the committed offsets back through the consumer
and the admin client, against one broker. What each pin sends is in docs/compatibility.md;
(0, 11) and (1, 0) describe configs with DescribeConfigs v0. Below (0, 11) the messages travel
in message formats v0/v1 (Produce v0-2, Fetch v0-3), converted by the broker: (0, 10, 2) writes
magic 1 (Produce v2, Fetch v3); (0, 9) and (0, 8, 2), which have no CreateTopics, write magic 0
(Produce v1 and v0, Fetch v1 and v0), (0, 9) in a group, (0, 8, 2) with manual assignment and
offsets committed to Kafka (OffsetCommit v1), the only way that pin knows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kafka
import kafka.codec
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata, TopicPartition

from tests.integration.clients import (
    ADMIN_TIMEOUT_S,
    CONSUME_TIMEOUT_S,
    create_topic,
    wait_until,
)

PARTITIONS = 3
KEYS = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]
PER_KEY = 5
FULL_FLOW_PINS = [(0, 10, 2), (0, 11), (1, 0), (2, 0), (2, 5)]
DESCRIBE_CONFIGS_SINCE = (0, 11)  # Kafka 0.11 brought DescribeConfigs (KIP-133)
GROUPS_SINCE = (0, 9)  # Kafka 0.9 brought group management (JoinGroup)
# Codecs each pin produces with, one producer after the other: gzip everywhere, and for the
# message-format pins snappy when kafka-python has it here, else lz4 (magic 1 only: kafka-python
# writes magic 0 lz4 only with the xxhash package, which is not a dependency).
SECOND_CODEC = "snappy" if kafka.codec.has_snappy() else "lz4"
CODECS = {(0, 10, 2): ("gzip", SECOND_CODEC), (0, 9): ("gzip",), (0, 8, 2): ("gzip",)}


@pytest.fixture
def group_broker(broker_factory: Any) -> Any:
    return broker_factory({"group.initial.rebalance.delay.ms": "0"})


@contextmanager
def _admin(broker: Any, pin: tuple[int, ...]) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=pin,
                             request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
    try:
        yield admin
    finally:
        admin.close()


def _names(pin: tuple[int, ...], what: str) -> str:
    return f"pinned-{'-'.join(map(str, pin))}-{what}-{uuid.uuid4().hex[:8]}"


def _create_topic_and_check_configs(admin: KafkaAdminClient, pin: tuple[int, ...],
                                    topic: str) -> None:
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs={
        "retention.ms": "86400000"})], timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
    if pin < DESCRIBE_CONFIGS_SINCE:
        return
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    # Only what was set: the defaults are told apart by ConfigSource, or by IsDefault at v0.
    modified = described["topic"][topic]
    assert {name: c["value"] for name, c in modified.items()} == {"retention.ms": "86400000"}


@pytest.mark.parametrize("pin", FULL_FLOW_PINS, ids=lambda p: ".".join(map(str, p)))
def test_pinned_kafka_python_creates_produces_consumes_in_a_group_and_commits(
        group_broker: Any, pin: tuple[int, ...]) -> None:
    topic, group = _names(pin, "topic"), _names(pin, "group")
    with _admin(group_broker, pin) as admin:
        _create_topic_and_check_configs(admin, pin, topic)
        end_offsets = _produce_consume_and_commit(group_broker, pin, topic, group)
        listed = admin.list_group_offsets({group: [TopicPartition(topic, p)
                                                   for p in range(PARTITIONS)]})[group]
        assert {tp.partition: o.offset for tp, o in listed.items()} == end_offsets


@pytest.mark.parametrize("pin", [(0, 9), (0, 8, 2)], ids=lambda p: ".".join(map(str, p)))
def test_pinned_kafka_python_writes_and_reads_message_format_v0(
        group_broker: Any, pin: tuple[int, ...]) -> None:
    """The pins before CreateTopics: the topic comes from another client; the rest is theirs."""
    topic, group = _names(pin, "topic"), _names(pin, "group")
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    end_offsets = _produce_consume_and_commit(group_broker, pin, topic, group)
    with _admin(group_broker, (0, 10, 2)) as admin:
        listed = admin.list_group_offsets({group: [TopicPartition(topic, p)
                                                   for p in range(PARTITIONS)]})[group]
    assert {tp.partition: o.offset for tp, o in listed.items()} == end_offsets


def _produce(broker: Any, pin: tuple[int, ...], topic: str) -> list[tuple[bytes, bytes, Any]]:
    """Keyed messages, each codec of the pin in turn; (key, value, metadata) in send order."""
    sent: list[tuple[bytes, bytes, Any]] = []
    for codec in CODECS.get(pin, ("gzip",)):
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=pin,
                                       compression_type=codec, linger_ms=20, acks="all")
        try:
            futures = [(key, f"{codec}-{key.decode()}-{n}".encode()) for n in range(PER_KEY)
                       for key in KEYS]
            pending = [(key, value, producer.send(topic, key=key, value=value))
                       for key, value in futures]
            producer.flush(timeout=CONSUME_TIMEOUT_S)
            sent += [(key, value, f.get(timeout=CONSUME_TIMEOUT_S)) for key, value, f in pending]
        finally:
            producer.close(timeout=10)
    return sent


def _produce_consume_and_commit(broker: Any, pin: tuple[int, ...], topic: str,
                                group: str) -> dict[int, int]:
    """Produce, consume everything back (in a group from 0.9 on), commit; the end offsets."""
    sent = _produce(broker, pin, topic)
    partition_of = {key: meta.partition for key, _, meta in sent}
    assert all(meta.partition == partition_of[key] for key, _, meta in sent)
    end_offsets = {p: sum(1 for _, _, m in sent if m.partition == p) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        assert sorted(m.offset for _, _, m in sent if m.partition == p) == list(
            range(end_offsets[p]))

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap, api_version=pin, group_id=group,
        enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10_000,
        heartbeat_interval_ms=1000)
    try:
        if pin >= GROUPS_SINCE:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        received: list[Any] = []

        def all_received() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                received.extend(records)
            return len(received) >= len(sent)

        wait_until(all_received, CONSUME_TIMEOUT_S, f"{len(sent)} records in group {group}")
        assert len(received) == len(sent)
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        for p in range(PARTITIONS):
            in_partition = [r for r in received if r.partition == p]
            assert [r.offset for r in in_partition] == list(range(end_offsets[p]))
            assert [(r.key, r.value) for r in in_partition] == [
                (key, value) for key, value, meta in sorted(sent, key=lambda s: s[2].offset)
                if meta.partition == p]
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
        assert committed == end_offsets
    finally:
        consumer.close()
    return end_offsets


def test_kafka_python_pinned_to_0_10_2_creates_commits_and_fetches_offsets(broker: Any) -> None:
    """(0, 10, 2)'s admin and simple-group calls: CreateTopics v1, FindCoordinator v0 (a group's
    coordinator), OffsetCommit v2 and OffsetFetch v1-2 of a simple group, DeleteTopics v0."""
    pin = (0, 10, 2)
    topic, group = _names(pin, "topic"), _names(pin, "group")
    with _admin(broker, pin) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)],
                            timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
        consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=pin,
                                       group_id=group, enable_auto_commit=False)
        try:
            partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            consumer.commit({tp: OffsetAndMetadata(10 + tp.partition, "", -1)
                             for tp in partitions})
            assert {tp.partition: consumer.committed(tp) for tp in partitions} == {
                0: 10, 1: 11, 2: 12}
        finally:
            consumer.close()
        listed = admin.list_group_offsets({group: partitions})[group]
        assert {tp.partition: o.offset for tp, o in listed.items()} == {0: 10, 1: 11, 2: 12}
        admin.delete_topics([topic], timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
        wait_until(lambda: topic not in admin.list_topics(), ADMIN_TIMEOUT_S,
                   f"{topic} to be deleted")
