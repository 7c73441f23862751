"""Share groups beyond Kafka (issue 30, item 5): confluent-kafka's ShareConsumer on a diskless
topic (records from WAL objects) and on a partition with inactive chunks, on one broker.

The three-broker cases (a chunk held by another broker, a diskless coordinator's failover) are
in tests/cluster/.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.integration.clients import create_topic, new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module
from tests.integration.test_share_consumer import poll_records, share_consumer, share_group

DISKLESS = {"diskless.enable": "true"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-sources") / "data", {
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "diskless.metadata.topic.num.partitions": "1",
        "diskless.wal.max.ms": "20",
        "group.share.heartbeat.interval.ms": "500",
    })
    yield from serve_for_module(b)


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 25})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


def consume_all(bootstrap: str, group: str, topic: str, expected: int, members: int = 2,
                timeout_s: float = 60) -> list[tuple[int, bytes, int]]:
    """(offset, value, delivery count) of every record `members` share consumers got, each
    poll acknowledged (implicit mode), until `expected` distinct offsets came."""
    consumers = [share_consumer(bootstrap, group, topic) for _ in range(members)]
    got: list[tuple[int, bytes, int]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len({o for o, _, _ in got}) < expected and time.monotonic() < deadline:
            for consumer in consumers:
                records = poll_records(consumer, 0.3)
                got += [(m.offset(), m.value(), m.delivery_count()) for m in records]
                if records:
                    consumer.commit_sync(30)
        # Nothing more comes: each record was handed out once.
        for consumer in consumers:
            got += [(m.offset(), m.value(), m.delivery_count())
                    for m in poll_records(consumer, 0.5)]
    finally:
        for consumer in consumers:
            consumer.close()
    return got


def test_a_diskless_topic_is_shared_and_each_record_delivered_once(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("share-diskless")
    create_topic(broker.bootstrap, topic, config=DISKLESS)
    values = [b"job-%d" % i for i in range(600)]
    produce_values(broker.bootstrap, topic, values)
    group = share_group(broker.bootstrap, "diskless-workers")
    got = consume_all(broker.bootstrap, group, topic, len(values))
    assert sorted((o, v) for o, v, _ in got) == list(enumerate(values))
    assert Counter(n for _, _, n in got) == {1: len(values)}
    # A late member finds nothing left: the acknowledgements were persisted.
    assert consume_all(broker.bootstrap, group, topic, 1, members=1, timeout_s=3) == []


def test_a_read_committed_share_group_skips_aborted_transactions_on_a_diskless_topic(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("share-diskless-txn")
    create_topic(broker.bootstrap, topic, config=DISKLESS)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                         "linger.ms": 5})
    producer.init_transactions(30)
    committed: list[bytes] = []
    for round_ in range(4):
        producer.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(30)]
        for value in values:
            producer.produce(topic, value=value, partition=0)
        if round_ % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    group = share_group(broker.bootstrap, "diskless-committed",
                        **{"share.isolation.level": "read_committed"})
    got = consume_all(broker.bootstrap, group, topic, len(committed), members=1)
    assert [v for _, v, _ in sorted(got)] == committed


def _create_chunk_here(broker: BrokerProcess, topic: str) -> None:
    """CreateChunks on the one broker: the records so far become an inactive chunk."""
    Request = registry().requests[ApiKey.CREATE_CHUNKS].cls
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        identify(sock)
        answer = round_trip(sock, ApiKey.CREATE_CHUNKS, 0, Request(topic_partitions=[
            Request.CreateChunksTopicPartition(topic_name=topic, partition_id=0,
                                               broker_ids=[1], start_offset=-1,
                                               start_timestamp=-1, prev_stop_offset=-1)]), 1)
    assert answer.results[0].error_code == 0, answer.results[0]


def test_a_share_group_reads_the_inactive_chunks_then_the_active_one(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("share-chunks")
    create_topic(broker.bootstrap, topic)
    values = [b"c%d" % i for i in range(300)]
    for part in range(3):  # two inactive chunks of 100 records, then the active one
        produce_values(broker.bootstrap, topic, values[part * 100:(part + 1) * 100])
        if part < 2:
            _create_chunk_here(broker, topic)
    group = share_group(broker.bootstrap, "chunk-workers")
    got = consume_all(broker.bootstrap, group, topic, len(values))
    assert sorted((o, v) for o, v, _ in got) == list(enumerate(values))
    assert Counter(n for _, _, n in got) == {1: len(values)}
