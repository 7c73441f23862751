"""Partition count both ways on 3 real nodes (issue 16): adding partitions starts new leader
epochs everywhere and every broker answers the prior epochs and checks produce counts (KIP-253);
a delayed partition reduction survives kill -9 of the active controller and ends with the data
gone from every replica (seed 002)."""

from __future__ import annotations

import socket
import time
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    check_history,
    create_replicated_topic,
    partition_state,
    read_all,
)

DELAY_MS = 4000


def _call(node: Node, api_key: int, version: int, **fields: Any) -> Any:
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        identify(sock)
        return round_trip(sock, api_key, version, registry().requests[api_key].cls(**fields), 1)


def _leader_epochs(node: Node, topic: str) -> dict[int, int]:
    Metadata = registry().requests[ApiKey.METADATA].cls
    answer = _call(node, ApiKey.METADATA, 12, topics=[Metadata.MetadataRequestTopic(name=topic)],
                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return {p.partition_index: p.leader_epoch for p in answer.topics[0].partitions}


def _prior_epochs(node: Node, topic: str, partition: int) -> list[tuple[int, int]]:
    Request = registry().requests[ApiKey.LEADER_EPOCHS_FOR_PARTITION].cls
    answer = _call(node, ApiKey.LEADER_EPOCHS_FOR_PARTITION, 0, topics=[
        Request.LeaderEpochsForPartitionRequestTopic(topic=topic, partitions=[partition])])
    return [(e.partition, e.leader_epoch)
            for e in answer.topics[0].partitions[0].prior_leader_epochs]


def _produce_with_count(node: Node, topic: str, partition: int, count: int) -> int:
    Produce = registry().requests[ApiKey.PRODUCE].cls
    batch = build_batch([Record(0, int(time.time() * 1000), None, b"counted")])
    answer = _call(node, ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout_ms=10000,
                   topic_data=[Produce.TopicProduceData(name=topic, partition_number=count,
                                                        partition_data=[
                       Produce.PartitionProduceData(index=partition, records=batch)])])
    return int(answer.responses[0].partition_responses[0].error_code)


def _delete_partitions(node: Node, topic: str, partitions: list[int], delay_ms: int) -> Any:
    Request = registry().requests[ApiKey.DELETE_PARTITIONS].cls
    answer = _call(node, ApiKey.DELETE_PARTITIONS, 0, timeout_ms=30000,
                   delete_partitions_delay_ms=delay_ms,
                   topics=[Request.DeletePartitionsTopic(name=topic, partitions=partitions)])
    return answer.responses[0].partitions


def test_expansion_and_a_reduction_across_a_controller_kill(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "delete.topic.partition.interval.delay.ms": "500"})
    n1, n2, n3 = cluster.brokers
    create_replicated_topic(n1, "counted", 2, 2)
    before = _leader_epochs(n1, "counted")
    admin = AdminClient({"bootstrap.servers": n2.bootstrap})
    admin.create_partitions([NewPartitions("counted", 4)])["counted"].result(30)
    for node in cluster.brokers:  # every broker learns the bumped epochs and the priors
        wait_until(lambda node=node: len(_leader_epochs(node, "counted")) == 4, 10,
                   "4 partitions everywhere")
        epochs = _leader_epochs(node, "counted")
        assert {p: epochs[p] for p in (0, 1)} == {p: before[p] + 1 for p in (0, 1)}
        assert _prior_epochs(node, "counted", 3) == [(0, before[0]), (1, before[1])]
    leader = cluster.nodes[partition_state(n1, "counted")[0][0]]
    assert _produce_with_count(leader, "counted", 0, 2) == ErrorCode.INVALID_PARTITION_COUNT
    assert _produce_with_count(leader, "counted", 0, 4) == ErrorCode.NONE

    # A reduction with a delay; the active controller dies while it runs.
    producer = SequencedProducer(n1, "counted")
    producer.send(400)
    producer.flush()
    removed_replicas = {(node_id, p) for p, (_, replicas, _) in
                        partition_state(n1, "counted").items() if p >= 2 for node_id in replicas}
    answer = _delete_partitions(n3, "counted", [2, 3], DELAY_MS)
    assert [(p.error_code, p.status_code) for p in answer] == [(0, 1), (0, 1)]  # ReadOnly
    controller = cluster.wait_for_leader(cluster.brokers)
    cluster.nodes[controller].kill()
    survivors = [n for n in cluster.brokers if n.node_id != controller]
    cluster.wait_for_leader(survivors, not_=controller)
    wait_until(lambda: len(partition_state(survivors[0], "counted")) == 2, 30,
               "the new controller finishes the deletion")
    for node_id, p in removed_replicas:
        if node_id != controller:
            wait_until(lambda node_id=node_id, p=p: not (
                cluster.nodes[node_id].data_dir / f"counted-{p}").exists(), 10,
                f"counted-{p} deleted on broker {node_id}")
    # The killed controller comes back and drops what it still held of them.
    cluster.nodes[controller].start()
    cluster.nodes[controller].wait_ready()
    for node_id, p in removed_replicas:
        wait_until(lambda node_id=node_id, p=p: not (
            cluster.nodes[node_id].data_dir / f"counted-{p}").exists(), 20,
            f"counted-{p} deleted on broker {node_id}")
    kept = {v: place for v, place in producer.acked.items() if place[0] < 2}
    check_history(kept, read_all(survivors[0], "counted", len(kept)))
