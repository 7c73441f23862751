"""Topic auto-creation as Kafka does it, against the real broker process.

A Metadata request that may auto-create (v0-3, or v4+ with AllowAutoTopicCreation, and
`auto.create.topics.enable`) starts the creation and is answered LEADER_NOT_AVAILABLE without
partitions; the topic appears in a later answer. `__consumer_offsets` and
`__transaction_state` are created only with their coordinator's shape, whoever asks first, and a
broker that finds one created as an ordinary topic says so at start and repairs it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.integration.clients import (
    ADMIN_TIMEOUT_S,
    CONSUME_TIMEOUT_S,
    PRODUCERS,
    confluent_admin,
    consume_confluent,
    create_topic,
    expected_messages,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)

_Metadata = registry()["MetadataRequest"].cls
GROUPS_FAST = {"group.initial.rebalance.delay.ms": "0"}


def _metadata(bootstrap: str, topic: str, version: int = 12, allow: bool = True) -> Any:
    """One Metadata request naming `topic`; the topic's answer."""
    request = _Metadata(topics=[_Metadata.MetadataRequestTopic(name=topic)],
                        allow_auto_topic_creation=allow)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        response = round_trip(sock, ApiKey.METADATA, version, request)
    [answer] = response.topics
    assert answer.name == topic
    return answer


def _wait_for_topic(bootstrap: str, topic: str) -> Any:
    """Poll Metadata (not allowing creation) until the topic is there; its answer."""
    return wait_until(lambda: (lambda t: t if t.error_code == 0 else None)(
        _metadata(bootstrap, topic, allow=False)), ADMIN_TIMEOUT_S, f"{topic} to be created")


def _topic_config(bootstrap: str, topic: str, name: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = confluent_admin(bootstrap)
    [future] = admin.describe_configs([resource]).values()
    return str(future.result(timeout=ADMIN_TIMEOUT_S)[name].value)


# -- ordinary topics ------------------------------------------------------------------------------


def test_a_deleted_topic_comes_back_only_after_leader_not_available(broker: Any) -> None:
    topic = new_topic_name("delete-then-check")
    create_topic(broker.bootstrap, topic, partitions=2)
    admin = confluent_admin(broker.bootstrap)
    [future] = admin.delete_topics([topic]).values()
    future.result(timeout=ADMIN_TIMEOUT_S)
    # The very next answer of a client allowing auto-creation: not the topic, fully formed.
    answer = _metadata(broker.bootstrap, topic)
    assert (answer.error_code, answer.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    recreated = _wait_for_topic(broker.bootstrap, topic)
    assert [p.partition_index for p in recreated.partitions] == [0]  # num.partitions


@pytest.mark.parametrize("version", range(13))
def test_metadata_versions_start_the_creation_when_allowed(broker: Any, version: int) -> None:
    topic = new_topic_name(f"auto-v{version}")
    answer = _metadata(broker.bootstrap, topic, version=version, allow=True)
    assert (answer.error_code, answer.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    assert _wait_for_topic(broker.bootstrap, topic).error_code == 0
    if version >= 4:  # AllowAutoTopicCreation=false: nothing is created
        other = new_topic_name(f"no-auto-v{version}")
        answer = _metadata(broker.bootstrap, other, version=version, allow=False)
        assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _metadata(broker.bootstrap, other, allow=False).error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [1, 3, 4, 12])
def test_auto_create_topics_disabled_answers_unknown_topic(broker_factory: Any,
                                                           version: int) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    topic = new_topic_name("never-created")
    for _ in range(2):
        answer = _metadata(broker.bootstrap, topic, version=version, allow=True)
        assert (answer.error_code, answer.partitions) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert _metadata(broker.bootstrap, "bad name!", version=version).error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_stock_producers_to_a_new_topic_retry_until_it_exists(broker: Any, client: str) -> None:
    topic = new_topic_name(f"auto-{client}")
    records = make_records(10)
    assert PRODUCERS[client](broker.bootstrap, topic, records) == list(range(10))
    assert consume_confluent(broker.bootstrap, topic, {0: 0}, 10) == expected_messages(
        records, range(10))


# -- internal topics ------------------------------------------------------------------------------


def _group_commits_and_fetches(bootstrap: str) -> None:
    """A consumer group joins, consumes, commits; a new member of it reads the commit back."""
    topic = new_topic_name("grouped")
    create_topic(bootstrap, topic)
    produce_confluent(bootstrap, topic, make_records(5))
    group = new_topic_name("group")
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    consumer = confluent_kafka.Consumer(config)
    try:
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < 5:
            assert time.monotonic() < deadline, f"only {len(got)} of 5 messages arrived"
            for msg in consumer.consume(num_messages=10, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    other = confluent_kafka.Consumer(config)
    try:
        [committed] = other.committed([confluent_kafka.TopicPartition(topic, 0)],
                                      timeout=ADMIN_TIMEOUT_S)
        assert committed.offset == 5
    finally:
        other.close()


def test_metadata_naming_consumer_offsets_creates_it_as_the_group_coordinator_does(
        broker_factory: Any) -> None:
    broker = broker_factory({"offsets.topic.num.partitions": "5", **GROUPS_FAST})
    answer = _metadata(broker.bootstrap, "__consumer_offsets", version=1)  # as Burrow asks
    assert (answer.error_code, answer.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    created = _wait_for_topic(broker.bootstrap, "__consumer_offsets")
    assert created.is_internal
    assert len(created.partitions) == 5  # offsets.topic.num.partitions, not num.partitions
    assert _topic_config(broker.bootstrap, "__consumer_offsets", "cleanup.policy") == "compact"
    _group_commits_and_fetches(broker.bootstrap)


def test_a_librdkafka_producer_naming_consumer_offsets_gets_the_coordinators_topic(
        broker_factory: Any) -> None:
    broker = broker_factory({"offsets.topic.num.partitions": "4", **GROUPS_FAST})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "message.timeout.ms": 10_000})
    errors: list[int] = []
    producer.produce("__consumer_offsets", value=b"v", partition=0,
                     on_delivery=lambda err, _: errors.append(err.code() if err else 0))
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert errors == [confluent_kafka.KafkaError.TOPIC_EXCEPTION]  # only coordinators write
    created = _wait_for_topic(broker.bootstrap, "__consumer_offsets")
    assert len(created.partitions) == 4
    assert _topic_config(broker.bootstrap, "__consumer_offsets", "cleanup.policy") == "compact"
    _group_commits_and_fetches(broker.bootstrap)


def test_metadata_naming_transaction_state_creates_it_as_the_coordinator_does(
        broker_factory: Any) -> None:
    broker = broker_factory({"transaction.state.log.num.partitions": "3"})
    answer = _metadata(broker.bootstrap, "__transaction_state")
    assert (answer.error_code, answer.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    assert len(_wait_for_topic(broker.bootstrap, "__transaction_state").partitions) == 3
    assert _topic_config(broker.bootstrap, "__transaction_state", "cleanup.policy") == "compact"
    topic = new_topic_name("txn-after-metadata")
    create_topic(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": new_topic_name("txn")})
    producer.init_transactions(ADMIN_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    producer.commit_transaction(ADMIN_TIMEOUT_S)
    got = consume_confluent(broker.bootstrap, topic, {0: 0}, 3,
                            config={"isolation.level": "read_committed"})
    assert [m.value for m in got] == [b"v0", b"v1", b"v2"]


def test_internal_topics_are_not_created_when_the_request_does_not_allow_it(
        broker: Any) -> None:
    for name in ("__consumer_offsets", "__transaction_state"):
        answer = _metadata(broker.bootstrap, name, allow=False)
        assert (answer.error_code, answer.is_internal) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)


def test_a_consumer_offsets_topic_created_as_an_ordinary_one_is_repaired_at_start(
        broker_factory: Any) -> None:
    broker = broker_factory({"offsets.topic.num.partitions": "5", **GROUPS_FAST})
    # What older brokers did on a Metadata request; CreateTopics may still do it, as in Kafka.
    admin = confluent_admin(broker.bootstrap)
    [future] = admin.create_topics(
        [NewTopic("__consumer_offsets", 1, config={"cleanup.policy": "delete"})]).values()
    future.result(timeout=ADMIN_TIMEOUT_S)
    broker.restart()
    log = broker.log()
    assert ("__consumer_offsets was created as an ordinary topic (cleanup.policy=delete)"
            in log)
    assert ("__consumer_offsets has 1 partition(s) but offsets.topic.num.partitions=5" in log
            and "Fix: set offsets.topic.num.partitions=1 to match the topic." in log)
    assert _topic_config(broker.bootstrap, "__consumer_offsets", "cleanup.policy") == "compact"
    _group_commits_and_fetches(broker.bootstrap)
    broker.restart()  # repaired for good: nothing more to say
    assert broker.log().count("was created as an ordinary topic") == 1


def _produce_and_fetch_errors(bootstrap: str, topic: str) -> tuple[int, int]:
    """(Produce v9 error, Fetch v12 error) for partition 0 of `topic`."""
    produce = registry()["ProduceRequest"].cls
    fetch = registry()["FetchRequest"].cls
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        produced = round_trip(sock, ApiKey.PRODUCE, 9, produce(
            transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
                produce.TopicProduceData(name=topic, partition_data=[
                    produce.PartitionProduceData(index=0, records=build_batch(
                        [Record(0, int(time.time() * 1000), b"k", b"v")]))])]), 1)
        fetched = round_trip(sock, ApiKey.FETCH, 12, fetch(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[fetch.FetchTopic(topic=topic, partitions=[
                fetch.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                     log_start_offset=-1, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id=""), 2)
    return (produced.responses[0].partition_responses[0].error_code,
            fetched.responses[0].partitions[0].error_code)


def test_produce_and_fetch_answer_unknown_topic_until_the_creation_is_committed(
        broker: Any) -> None:
    topic = new_topic_name("being-created")
    # Produce and Fetch never create a topic (Kafka's answer for a topic not in the metadata,
    # which is what a topic whose creation is in flight is).
    assert _produce_and_fetch_errors(broker.bootstrap, topic) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert _metadata(broker.bootstrap, topic, allow=False).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _metadata(broker.bootstrap, topic).error_code == ErrorCode.LEADER_NOT_AVAILABLE
    _wait_for_topic(broker.bootstrap, topic)
    assert _produce_and_fetch_errors(broker.bootstrap, topic) == (ErrorCode.NONE, ErrorCode.NONE)
