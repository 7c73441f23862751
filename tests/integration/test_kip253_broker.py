"""KIP-253's broker side over the wire, with our codec: adding partitions starts new leader
epochs and records the prior ones (LeaderEpochsForPartition), Produce naming another partition
count is refused with a retriable error, and stock producers (no count) are unaffected."""

from __future__ import annotations

import socket
import time
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewPartitions

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.integration.clients import create_topic
from tests.integration.conftest import BrokerProcess

PRODUCE_VERSION = 9  # the first flexible version: it carries the tagged PartitionNumber


def _call(broker: BrokerProcess, api_key: int, version: int, **fields: Any) -> Any:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        identify(sock)  # our client: the extension keys are shown and served
        return round_trip(sock, api_key, version, registry().requests[api_key].cls(**fields), 1)


def _produce(broker: BrokerProcess, topic: str, partition: int, count: int) -> Any:
    Produce = registry().requests[ApiKey.PRODUCE].cls
    batch = build_batch([Record(0, int(time.time() * 1000), None, b"v")])
    answer = _call(broker, ApiKey.PRODUCE, PRODUCE_VERSION, transactional_id=None, acks=-1,
                   timeout_ms=10000, topic_data=[Produce.TopicProduceData(
                       name=topic, partition_number=count, partition_data=[
                           Produce.PartitionProduceData(index=partition, records=batch)])])
    return answer.responses[0].partition_responses[0]


def _epochs(broker: BrokerProcess, topic: str) -> dict[int, int]:
    answer = _call(broker, ApiKey.METADATA, 12, topics=[
        registry().requests[ApiKey.METADATA].cls.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return {p.partition_index: p.leader_epoch for p in answer.topics[0].partitions}


def test_adding_partitions_bumps_epochs_records_priors_and_checks_produce_counts(
        broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "keyed", 2)
    before = _epochs(broker, "keyed")
    assert _produce(broker, "keyed", 0, 2).error_code == ErrorCode.NONE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions("keyed", 4)])["keyed"].result(30)
    after = _epochs(broker, "keyed")
    assert {p: after[p] for p in (0, 1)} == {p: before[p] + 1 for p in (0, 1)}

    LeaderEpochs = registry().requests[ApiKey.LEADER_EPOCHS_FOR_PARTITION].cls
    answer = _call(broker, ApiKey.LEADER_EPOCHS_FOR_PARTITION, 0, topics=[
        LeaderEpochs.LeaderEpochsForPartitionRequestTopic(topic="keyed", partitions=[3, 0, 9]),
        LeaderEpochs.LeaderEpochsForPartitionRequestTopic(topic="nope", partitions=[0])])
    by_partition = {p.partition: p for p in answer.topics[0].partitions}
    assert [(e.partition, e.leader_epoch) for e in by_partition[3].prior_leader_epochs] == [
        (0, before[0]), (1, before[1])]
    assert by_partition[0].error_code == 0 and by_partition[0].prior_leader_epochs == []
    assert by_partition[9].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert answer.topics[1].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # A producer that still thinks there are 2 partitions is refused, retriably; 4 is right.
    stale = _produce(broker, "keyed", 0, 2)
    assert stale.error_code == ErrorCode.INVALID_PARTITION_COUNT
    assert ErrorCode(stale.error_code).retriable
    assert _produce(broker, "keyed", 3, 4).error_code == ErrorCode.NONE
    # Stock producers send no count.
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("keyed", b"stock", partition=1)
    assert producer.flush(30) == 0
