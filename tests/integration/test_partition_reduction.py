"""Partition reduction (seed 002) on one broker with stock clients and our CLI: the removed
partitions turn ReadOnly (readable, refused for writes), then their data goes and they leave
the topic; bad requests and a disabled feature are refused and change nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import Any

import confluent_kafka
import kafka
from confluent_kafka.admin import AdminClient

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.integration.clients import create_topic, wait_until
from tests.integration.conftest import BrokerProcess

CLI = [sys.executable, "-m", "kafka_ext"]
FAST = {"delete.topic.partition.interval.delay.ms": "300"}
DELAY_MS = 3000


def _topics(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + ["topics", "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def _delete_partitions(broker: BrokerProcess, topic: str, partitions: list[int]) -> Any:
    Request = registry().requests[ApiKey.DELETE_PARTITIONS].cls
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        identify(sock)
        response = round_trip(sock, ApiKey.DELETE_PARTITIONS, 0, Request(
            timeout_ms=30000, delete_partitions_delay_ms=0,
            topics=[Request.DeletePartitionsTopic(name=topic, partitions=partitions)]))
    return response.responses[0].partitions


def _partition_count(broker: BrokerProcess, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _produce(broker: BrokerProcess, topic: str, partition: int, values: list[bytes]) -> list[Any]:
    """Delivery errors (None for each acknowledged value)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "message.timeout.ms": 10000})
    outcome: list[Any] = []
    for value in values:
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    return outcome


def _read(broker: BrokerProcess, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition(topic, partition)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=300).values():
                got += [m.value for m in messages]
    finally:
        consumer.close()
    return got


def test_read_only_then_gone_with_stock_clients(broker_factory: Any) -> None:
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "shrinking", 4)
    for p in range(4):
        assert _produce(broker, "shrinking", p, [b"p%d-%d" % (p, i) for i in range(50)]) == (
            [None] * 50)
    run = _topics(broker, "--alter", "--topic", "shrinking", "--partitions", "2",
                  "--delete-partitions-delay", str(DELAY_MS))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "WARNING: If partitions are decreased for a topic that has a key" in run.stdout
    assert (f"Partitions 2-3 of shrinking are read-only for {DELAY_MS} ms, then deleted."
            in run.stdout)
    # ReadOnly: still readable by a stock consumer, refused to a stock producer.
    assert _read(broker, "shrinking", 3, 50) == [b"p3-%d" % i for i in range(50)]
    refused = _produce(broker, "shrinking", 3, [b"late"])
    assert refused[0] is not None and refused[0].code() == ErrorCode.PARTITION_NOT_WRITABLE
    assert _produce(broker, "shrinking", 1, [b"still"]) == [None]
    again = _topics(broker, "--alter", "--topic", "shrinking", "--partitions", "1")
    assert again.returncode == 1 and "WARNING: The topic is currently under changes" in (
        again.stdout)
    # After the delay the data goes and the partitions leave the topic.
    wait_until(lambda: _partition_count(broker, "shrinking") == 2, 30, "partitions 2-3 gone")
    wait_until(lambda: not (broker.data_dir / "shrinking-3").exists(), 10, "their data deleted")
    assert _read(broker, "shrinking", 1, 51)[-1] == b"still"


def test_bad_reductions_are_refused_and_change_nothing(broker_factory: Any) -> None:
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "fixed", 3)
    assert [p.error_code for p in _delete_partitions(broker, "fixed", [0, 1, 2])] == [
        ErrorCode.INVALID_PARTITIONS] * 3
    assert _delete_partitions(broker, "fixed", [1])[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert _delete_partitions(broker, "fixed", [2, 3])[0].error_code == (
        ErrorCode.INVALID_PARTITIONS)
    refused = _delete_partitions(broker, "nope", [1])[0]
    assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _partition_count(broker, "fixed") == 3
    zero = _topics(broker, "--alter", "--topic", "fixed", "--partitions", "0")
    assert zero.returncode == 2 and "--partitions must be at least 1" in zero.stderr


def test_refused_when_disabled(broker_factory: Any) -> None:
    broker = broker_factory({"delete.topic.partition.enable": "false"})
    create_topic(broker.bootstrap, "kept", 3)
    [answer] = _delete_partitions(broker, "kept", [2])
    assert answer.error_code == ErrorCode.TOPIC_DELETION_DISABLED and answer.status_code == 0
    run = _topics(broker, "--alter", "--topic", "kept", "--partitions", "2")
    assert run.returncode == 1 and "delete.topic.partition.enable turned on" in run.stdout
    assert _partition_count(broker, "kept") == 3
