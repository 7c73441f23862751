"""Client quotas against the real broker: DescribeClientQuotas / AlterClientQuotas (through
`kafka-ext configs` and raw requests), persistence, bad input, the throttle times producers and
consumers get (KIP-219), the mute of a throttled connection that leaves other clients alone,
and THROTTLING_QUOTA_EXCEEDED for topic mutations (KIP-599).

No stock Python client has client-quota admin calls (confluent-kafka 2.16, kafka-python 3.0),
so quotas are set with the CLI and raw requests; throttling is observed through librdkafka's
throttle callback and in raw responses, never by timing.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from clients import create_topic, new_topic_name, wait_until
from confluent_kafka import Consumer, Producer

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.integration.conftest import BrokerProcess

_reg = registry()
PRODUCE_VERSION = 9
CREATE_TOPICS_VERSION = 7


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafka_ext", "configs", "--bootstrap-server",
                           broker.bootstrap, *args], capture_output=True, text=True, timeout=60)


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=30)


def alter_quotas(broker: BrokerProcess, entity: list[tuple[str, str | None]],
                 ops: list[tuple[str, float | None]], validate_only: bool = False) -> Any:
    Request = _reg["AlterClientQuotasRequest"].cls
    entry = Request.EntryData(
        entity=[Request.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[Request.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
             for k, v in ops])
    with connect(broker) as sock:
        return round_trip(sock, ApiKey.ALTER_CLIENT_QUOTAS, 1,
                          Request(entries=[entry], validate_only=validate_only))


def describe_all(broker: BrokerProcess) -> dict[tuple, dict[str, float]]:
    Request = _reg["DescribeClientQuotasRequest"].cls
    with connect(broker) as sock:
        response = round_trip(sock, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                              Request(components=[], strict=False))
    assert response.error_code == 0
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def produce_request(topic: str, value_bytes: int) -> Any:
    Request = _reg["ProduceRequest"].cls
    batch = build_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                value=b"x" * value_bytes)])
    return Request(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        Request.TopicProduceData(name=topic, partition_data=[
            Request.PartitionProduceData(index=0, records=batch)])])


# -- admin -------------------------------------------------------------------------------------

def test_cli_alter_and_describe_round_trip_and_survive_a_restart(broker: BrokerProcess) -> None:
    done = configs(broker, "--entity-type", "users", "--entity-name", "alice", "--alter",
                   "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating config for user alice."
    done = configs(broker, "--entity-type", "clients", "--entity-default", "--alter",
                   "--add-config", "request_percentage=25.5")
    assert done.stdout.strip() == "Completed updating default config for clients in the cluster."
    done = configs(broker, "--user", "alice", "--client", "c1", "--alter",
                   "--add-config", "controller_mutation_rate=10")
    assert done.returncode == 0, done.stderr

    broker.restart()

    described = configs(broker, "--entity-type", "users", "--entity-name", "alice", "--describe")
    assert described.stdout.splitlines() == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, "
        "producer_byte_rate=1048576.0"]
    described = configs(broker, "--entity-type", "clients", "--describe")
    assert described.stdout.splitlines() == [
        "Quota configs for the default client-id are request_percentage=25.5"]
    described = configs(broker, "--user", "alice", "--client", "c1", "--describe")
    assert described.stdout.splitlines() == [
        "Quota configs for user-principal 'alice', client-id 'c1' are "
        "controller_mutation_rate=10.0"]

    done = configs(broker, "--entity-type", "users", "--entity-name", "alice", "--alter",
                   "--delete-config", "consumer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert describe_all(broker)[(("user", "alice"),)] == {"producer_byte_rate": 1048576.0}


def test_bad_quota_input_gets_invalid_request_and_changes_nothing(broker: BrokerProcess) -> None:
    alice = [("user", "alice")]
    assert alter_quotas(broker, alice, [("producer_byte_rate", 100.0)]).entries[0].error_code == 0
    before = describe_all(broker)
    cases = [
        (alice, [("producer_byte_rate", 5.0), ("no_such_rate", 1.0)]),
        (alice, [("consumer_byte_rate", -10.0)]),
        (alice, [("producer_byte_rate", 0.5)]),
        ([("group", "g")], [("producer_byte_rate", 10.0)]),
        ([], [("producer_byte_rate", 10.0)]),
    ]
    for entity, ops in cases:
        response = alter_quotas(broker, entity, ops)
        assert [e.error_code for e in response.entries] == [ErrorCode.INVALID_REQUEST], (entity, ops)
    assert alter_quotas(broker, alice, [("producer_byte_rate", 7.0)],
                        validate_only=True).entries[0].error_code == 0
    assert describe_all(broker) == before

    done = configs(broker, "--entity-type", "users", "--entity-name", "bob", "--alter",
                   "--add-config", "producer_byte_rate=fast")
    assert done.returncode != 0
    assert "Cannot parse quota configuration value for producer_byte_rate" in done.stderr
    done = configs(broker, "--entity-type", "users", "--entity-name", "bob", "--alter",
                   "--add-config", "producer_byte_rate=-1")
    assert done.returncode == 1 and "INVALID_REQUEST" in done.stderr
    assert describe_all(broker) == before


# -- enforcement -------------------------------------------------------------------------------

def throttle_events(config: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    events: list[int] = []
    return {**config, "throttle_cb": lambda event: events.append(event.throttle_time)}, events


def test_over_quota_producer_gets_a_throttle_time_through_librdkafka(broker: BrokerProcess
                                                                      ) -> None:
    topic = new_topic_name("quota-produce")
    create_topic(broker.bootstrap, topic)
    alter_quotas(broker, [("client-id", "slow-producer")], [("producer_byte_rate", 2048.0)])
    config, events = throttle_events({"bootstrap.servers": broker.bootstrap,
                                      "client.id": "slow-producer", "linger.ms": 0})
    producer = Producer(config)
    try:
        def throttled() -> bool:
            producer.produce(topic, b"v" * 20_000)
            producer.poll(0.1)
            return any(t > 0 for t in events)
        wait_until(throttled, 60, "a throttle callback from the producer")
    finally:
        producer.flush(30)


def test_over_quota_consumer_gets_a_throttle_time_through_librdkafka(broker: BrokerProcess
                                                                      ) -> None:
    topic = new_topic_name("quota-fetch")
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(50):
        producer.produce(topic, b"v" * 10_000)
    producer.flush(30)
    alter_quotas(broker, [("user", None)], [("consumer_byte_rate", 4096.0)])  # ANONYMOUS
    config, events = throttle_events({
        "bootstrap.servers": broker.bootstrap, "group.id": "quota-g", "client.id": "slow-consumer",
        "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])

        def throttled() -> bool:
            consumer.poll(0.2)
            return any(t > 0 for t in events)
        wait_until(throttled, 60, "a throttle callback from the consumer")
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [3, PRODUCE_VERSION])
def test_a_throttled_connection_is_muted_while_other_clients_are_served(broker: BrokerProcess,
                                                                        version: int) -> None:
    """Every version is answered at once and muted, as Kafka 2.0+ does: Produce v3-v5
    predate KIP-219 (clients hold back on their side only from v6); the broker mutes alike."""
    topic = new_topic_name("quota-mute")
    create_topic(broker.bootstrap, topic)
    # 100 B/s against ~20 KB at once: the throttle is minutes long, so the mute cannot end
    # during the test however slow the machine is.
    alter_quotas(broker, [("client-id", "slow")], [("producer_byte_rate", 100.0)])
    with connect(broker) as slow, connect(broker) as fast:
        first = round_trip(slow, ApiKey.PRODUCE, version, produce_request(topic, 20_000),
                           correlation_id=1, client_id="slow")
        assert first.throttle_time_ms > 0
        assert first.responses[0].partition_responses[0].error_code == 0
        # The throttled client sends again: the broker does not read it while muted.
        slow.sendall(encode_request(ApiKey.PRODUCE, version, 2, "slow",
                                    produce_request(topic, 10)))
        for correlation_id in (1, 2, 3):
            answer = round_trip(fast, ApiKey.PRODUCE, version,
                                produce_request(topic, 20_000), correlation_id=correlation_id,
                                client_id="fast")
            assert answer.throttle_time_ms == 0
            assert answer.responses[0].partition_responses[0].error_code == 0
        readable, _, _ = select.select([slow], [], [], 0)
        assert readable == [], "the muted connection's request was answered during its throttle"


def test_throttled_fetch_is_answered_empty_with_its_throttle_time(broker: BrokerProcess) -> None:
    topic = new_topic_name("quota-fetch-raw")
    create_topic(broker.bootstrap, topic)
    with connect(broker) as sock:
        for correlation_id in (1, 2, 3):
            produced = round_trip(sock, ApiKey.PRODUCE, PRODUCE_VERSION,
                                  produce_request(topic, 2000), correlation_id=correlation_id)
            assert produced.responses[0].partition_responses[0].error_code == 0
    alter_quotas(broker, [("client-id", "reader")], [("consumer_byte_rate", 1000.0)])
    Request = _reg["FetchRequest"].cls
    request = Request(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                      isolation_level=0, session_id=0, session_epoch=-1, topics=[
                          Request.FetchTopic(topic=topic, partitions=[Request.FetchPartition(
                              partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                      forgotten_topics_data=[], rack_id="")
    with connect(broker) as sock:
        # ~6 KB over the 10 s the rate counts at least is within 1,000 B/s; fetching them
        # again takes the rate over it, and that answer comes without data.
        first = round_trip(sock, ApiKey.FETCH, 12, request, client_id="reader")
        assert first.throttle_time_ms == 0
        assert len(first.responses[0].partitions[0].records) > 3 * 2000
        second = round_trip(sock, ApiKey.FETCH, 12, request, correlation_id=2, client_id="reader")
        assert second.throttle_time_ms > 0
        assert second.error_code == 0 and second.responses == []


def test_topic_mutations_over_the_rate_get_throttling_quota_exceeded(broker: BrokerProcess
                                                                     ) -> None:
    # 1 partition mutation per second: the bucket holds 11 (quota.window.num windows).
    alter_quotas(broker, [("client-id", "admin")], [("controller_mutation_rate", 1.0)])
    Request = _reg["CreateTopicsRequest"].cls
    first, second = new_topic_name("mut-a"), new_topic_name("mut-b")
    request = Request(timeout_ms=30_000, validate_only=False, topics=[
        Request.CreatableTopic(name=first, num_partitions=20, replication_factor=1,
                               assignments=[], configs=[]),
        Request.CreatableTopic(name=second, num_partitions=1, replication_factor=1,
                               assignments=[], configs=[])])
    with connect(broker) as sock:
        response = round_trip(sock, ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, request,
                              client_id="admin")
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {first: 0, second: ErrorCode.THROTTLING_QUOTA_EXCEEDED}
    assert response.throttle_time_ms > 0
    # Older versions are permissive (KIP-599): accepted, with a throttle time.
    third = new_topic_name("mut-c")
    request = Request(timeout_ms=30_000, validate_only=False, topics=[Request.CreatableTopic(
        name=third, num_partitions=2, replication_factor=1, assignments=[], configs=[])])
    with connect(broker) as sock:
        response = round_trip(sock, ApiKey.CREATE_TOPICS, 5, request, client_id="admin")
    assert [(t.name, t.error_code) for t in response.topics] == [(third, 0)]
    assert response.throttle_time_ms > 0
    # Other clients have no quota and are not slowed.
    fourth = new_topic_name("mut-d")
    request = Request(timeout_ms=30_000, validate_only=False, topics=[Request.CreatableTopic(
        name=fourth, num_partitions=30, replication_factor=1, assignments=[], configs=[])])
    with connect(broker) as sock:
        response = round_trip(sock, ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, request,
                              client_id="someone-else")
    assert [(t.name, t.error_code) for t in response.topics] == [(fourth, 0)]
    assert response.throttle_time_ms == 0



def test_request_percentage_throttles_by_handler_time_at_most_one_window(
        broker: BrokerProcess) -> None:
    # 0.001% of a handler thread: a few requests' handler time exceeds it.
    alter_quotas(broker, [("client-id", "busy")], [("request_percentage", 0.001)])
    Request = _reg["ApiVersionsRequest"].cls
    request = Request(client_software_name="quota-test", client_software_version="1")
    throttles: list[int] = []
    with connect(broker) as sock:
        def throttled() -> bool:
            answer = round_trip(sock, ApiKey.API_VERSIONS, 3, request, client_id="busy",
                                correlation_id=len(throttles) + 1)
            throttles.append(answer.throttle_time_ms)
            return answer.throttle_time_ms > 0
        wait_until(throttled, 60, "a request-time throttle")
    assert 0 < throttles[-1] <= 1000  # quota.window.size.seconds bounds it
    with connect(broker) as sock:
        other = round_trip(sock, ApiKey.API_VERSIONS, 3, request, client_id="idle")
    assert other.throttle_time_ms == 0


def test_deleting_topics_over_the_mutation_rate_is_refused(broker: BrokerProcess) -> None:
    topics = [new_topic_name("del-a"), new_topic_name("del-b")]
    for topic in topics:
        create_topic(broker.bootstrap, topic, partitions=12)
    alter_quotas(broker, [("client-id", "deleter")], [("controller_mutation_rate", 1.0)])
    Request = _reg["DeleteTopicsRequest"].cls
    request = Request(timeout_ms=30_000, topic_names=topics)
    with connect(broker) as sock:
        response = round_trip(sock, ApiKey.DELETE_TOPICS, 5, request, client_id="deleter")
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {topics[0]: 0, topics[1]: ErrorCode.THROTTLING_QUOTA_EXCEEDED}
    assert response.throttle_time_ms > 0
