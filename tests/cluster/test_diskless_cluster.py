"""Diskless topics on three nodes (issue 19): any broker takes produce for any diskless
partition and commits to the partition's coordinator over the wire; the coordinators live on
the leaders of the replicated `__diskless_metadata` partitions and fail over with them.

The checker: every acknowledged batch is read back exactly once, at the offset its answer gave,
and each partition's offsets are dense from 0.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, partition_state

TOPIC = "events"
PARTITIONS = 2
_Produce = registry().requests[ApiKey.PRODUCE].cls


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("diskless-cluster")
    made = Cluster(root, combined=3, extra={
        **REPLICATION, "diskless.storage.url": f"file://{root / 'objects'}",
        "diskless.metadata.topic.num.partitions": "1",  # one coordinator: all partitions
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20"})
    made.start()
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def _produce(node: Node, partition: int, value: bytes) -> tuple[int, int]:
    """One acks=all batch of one record straight to `node`: (error code, base offset)."""
    batch = build_batch([Record(0, int(time.time() * 1000), None, value)])
    request = _Produce(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        _Produce.TopicProduceData(name=TOPIC, partition_data=[
            _Produce.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=40) as sock:
        answer = round_trip(sock, ApiKey.PRODUCE, 9, request)
    [[result]] = [t.partition_responses for t in answer.responses]
    return result.error_code, result.base_offset


def _read(node: Node, expected: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "diskless-checker",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in expected])
    seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
    deadline = time.monotonic() + 30
    while any(len(seen[p]) < n for p, n in expected.items()) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return seen


def test_every_broker_takes_produce_and_a_coordinator_failover_loses_nothing(
        cluster: Cluster) -> None:
    nodes = cluster.brokers
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"diskless.enable": "true"})],
                        operation_timeout=30)[TOPIC].result(30)
    wait_until(lambda: all(TOPIC in AdminClient({"bootstrap.servers": n.bootstrap})
                           .list_topics(timeout=5).topics for n in nodes), 20, "topic everywhere")
    acked: dict[tuple[int, bytes], int] = {}  # (partition, value) -> offset answered
    lock = threading.Lock()

    def producer(node: Node, name: str, count: int, stop_on_error: bool = False) -> None:
        for i in range(count):
            partition = i % PARTITIONS
            value = f"{name}-{i}".encode()
            for _attempt in range(40):
                try:
                    code, offset = _produce(node, partition, value)
                except OSError:
                    if stop_on_error:
                        return  # this producer's broker was killed
                    time.sleep(0.25)
                    continue
                if code == 0:
                    with lock:
                        acked[(partition, value)] = offset
                    break
                time.sleep(0.25)  # a retriable error: NOT_LEADER / storage while failing over

    # Phase 1: three producers, one per broker, the same partitions.
    threads = [threading.Thread(target=producer, args=(n, f"b{n.node_id}", 20)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(acked) == 20 * len(nodes)

    # Phase 2: kill -9 the leader of partition 0's coordinator while the others keep producing.
    victim_id = partition_state(nodes[0], "__diskless_metadata")[0][0]
    victim = cluster.nodes[victim_id]
    survivors = [n for n in nodes if n is not victim]
    threads = [threading.Thread(target=producer, args=(n, f"after{n.node_id}", 20))
               for n in survivors]
    for t in threads:
        t.start()
    time.sleep(0.3)
    victim.kill()
    for t in threads:
        t.join()
    assert len(acked) == 20 * len(nodes) + 20 * len(survivors)

    # Every acknowledged batch once, at its offset; offsets dense from 0.
    expected = {p: sum(1 for (q, _) in acked if q == p) for p in range(PARTITIONS)}
    seen = _read(survivors[0], expected)
    for p in range(PARTITIONS):
        offsets = [o for o, _ in seen[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: gaps or duplicates"
        values = [v for _, v in seen[p]]
        assert len(values) == len(set(values)), f"partition {p}: a record twice"
        for (q, value), offset in acked.items():
            if q == p:
                assert (offset, value) in seen[p], f"acknowledged {value!r}@{offset} lost"
    victim.start()
    victim.wait_ready()
