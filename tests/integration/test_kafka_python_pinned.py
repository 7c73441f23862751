"""kafka-python pinned to old broker versions (`api_version=`): it then sends only the request
versions those brokers knew, as applications built for them do (issue 23).

Each pin creates a topic, describes its configs, produces keyed gzip-compressed messages,
consumes them in a consumer group, commits, and reads the committed offsets back through the
consumer and the admin client, against one broker. What each pin sends is in
docs/compatibility.md; (0, 11) and (1, 0) describe configs with DescribeConfigs v0.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kafka
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata, TopicPartition

from tests.integration.clients import ADMIN_TIMEOUT_S, CONSUME_TIMEOUT_S, wait_until

PARTITIONS = 3
KEYS = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]
PER_KEY = 5
# (0, 10, 2) also sends Produce v2 and Fetch v3 (message format v1); it joins this list with
# the message-format conversion of issue 23. Its admin and offset calls are tested below.
FULL_FLOW_PINS = [(0, 11), (1, 0), (2, 0), (2, 5)]
DESCRIBE_CONFIGS_SINCE = (0, 11)  # Kafka 0.11 brought DescribeConfigs (KIP-133)


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

        producer = kafka.KafkaProducer(bootstrap_servers=group_broker.bootstrap, api_version=pin,
                                       compression_type="gzip", linger_ms=20, acks="all")
        try:
            futures = [(key, f"{key.decode()}-{n}".encode(), producer.send(
                topic, key=key, value=f"{key.decode()}-{n}".encode()))
                for n in range(PER_KEY) for key in KEYS]
            producer.flush(timeout=CONSUME_TIMEOUT_S)
            sent = [(key, value, f.get(timeout=CONSUME_TIMEOUT_S)) for key, value, f in futures]
        finally:
            producer.close(timeout=10)
        partition_of = {key: meta.partition for key, _, meta in sent}
        assert all(meta.partition == partition_of[key] for key, _, meta in sent)
        end_offsets = {p: sum(1 for _, _, m in sent if m.partition == p)
                       for p in range(PARTITIONS)}

        consumer = kafka.KafkaConsumer(
            topic, bootstrap_servers=group_broker.bootstrap, api_version=pin, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10_000,
            heartbeat_interval_ms=1000)
        try:
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
                    (key, value) for key, value, meta in sent if meta.partition == p]
            consumer.commit()
            committed = {p: consumer.committed(TopicPartition(topic, p))
                         for p in range(PARTITIONS)}
            assert committed == end_offsets
        finally:
            consumer.close()

        listed = admin.list_group_offsets({group: [TopicPartition(topic, p)
                                                   for p in range(PARTITIONS)]})[group]
        assert {tp.partition: o.offset for tp, o in listed.items()} == end_offsets


def test_kafka_python_pinned_to_0_10_2_creates_commits_and_fetches_offsets(broker: Any) -> None:
    """What (0, 10, 2) sends besides Produce v2 / Fetch v3: CreateTopics v1, FindCoordinator v0
    (a group's coordinator), OffsetCommit v2 and OffsetFetch v1-2 of a simple group, DeleteTopics
    v0."""
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
