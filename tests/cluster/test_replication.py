"""Partition replication on real processes (issue 14): followers copy their leaders, acks=all
waits for the ISR, a killed leader loses nothing it acknowledged, min.insync.replicas refuses
writes it cannot protect, and a returning broker catches up and rejoins the ISR."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import kafka
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.coordinator.runtime import partition_for_key
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from kafka_ext.server.config import RACK_AWARE_SELECTOR
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import call, wait_until

# Followers that stop fetching leave the ISR after 2 s (Kafka's default is 30 s).
REPLICATION = {"replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "200"}
RACKS = {101: "rack-a", 102: "rack-b", 103: "rack-c"}  # the brokers of a 3 + 3 cluster


def create_replicated_topic(node: Node, name: str, partitions: int, factor: int,
                            configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(name, partitions, factor, config=configs or {})],
                        operation_timeout=30)[name].result(30)
    # librdkafka asks any broker it knows for metadata; one may learn the topic a moment later.
    wait_until(lambda: sorted(partition_state(node, name)) == list(range(partitions)), 20,
               f"{name} in the metadata")


def partition_state(node: Node, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as one broker's Metadata says."""
    metadata = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
    return {p: (part.leader, list(part.replicas), sorted(part.isrs))
            for p, part in metadata.topics[topic].partitions.items()}


def read_all(node: Node, topic: str, expected: int, timeout_s: float = 60
             ) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) per partition, read from the start without a group: a reader must not
    depend on a group coordinator a test may have killed."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    deadline = time.monotonic() + timeout_s
    partitions = None
    while not partitions and time.monotonic() < deadline:
        partitions = consumer.partitions_for_topic(topic)
        time.sleep(0.1)
    consumer.assign([kafka.TopicPartition(topic, p) for p in sorted(partitions or ())])
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.value) for m in messages]
    finally:
        consumer.close()
    return got


class SequencedProducer:
    """An idempotent acks=all producer writing "seq-N" values; remembers what was acked."""

    def __init__(self, node: Node, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": node.bootstrap,
                                  "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                  "message.timeout.ms": 60000})
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[str] = []
        self.sent = 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.value()] = (msg.partition(), msg.offset())

    def send(self, count: int, pause_s: float = 0.0, value_bytes: int = 0) -> None:
        """`count` more values, padded with dots to `value_bytes`."""
        for _ in range(count):
            value = (b"seq-%d" % self.sent).ljust(value_bytes, b".")
            self.producer.produce(self.topic, key=value, value=value,
                                  on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0)
            if pause_s:
                time.sleep(pause_s)

    def flush(self) -> None:
        assert self.producer.flush(90) == 0


def check_history(acked: dict[bytes, tuple[int, int]],
                  read: dict[int, list[tuple[int, bytes]]]) -> None:
    """No acknowledged write lost, none duplicated, each at the offset it was acknowledged at,
    and every partition's offsets dense from 0."""
    seen: dict[bytes, tuple[int, int]] = {}
    duplicates = []
    for partition, records in read.items():
        assert [o for o, _ in records] == list(range(len(records))), f"gap in {partition}"
        for offset, value in records:
            if value in seen:
                duplicates.append(value)
            seen[value] = (partition, offset)
    lost = [v for v in acked if v not in seen]
    moved = [v for v, where in acked.items() if v in seen and seen[v] != where]
    assert (lost, duplicates, moved) == ([], [], []), (
        f"{len(lost)} lost, {len(duplicates)} duplicated, {len(moved)} at another offset")


def take(node: Node, topic: str, group: str, count: int) -> list[bytes]:
    """Up to `count` values read by a member of `group`, committed before it leaves."""
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    taken: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(taken) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            taken.append(msg.value())
    if taken:
        consumer.commit(asynchronous=False)
    consumer.close()
    return taken


def test_a_killed_broker_loses_no_acknowledged_write_nor_committed_offset_and_catches_up(
        cluster_factory: Any) -> None:
    """kill -9 of the broker that coordinates a consumer group and leads a partition, while an
    acks=all producer writes: its partitions and the group's offsets move to in-sync replicas;
    back, it truncates what it had beyond them, catches up and rejoins every ISR."""
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "3"})
    n1, n2, n3 = cluster.brokers
    create_replicated_topic(n1, "events", 3, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_state(n2, "events").values()),
               20, "every partition has 3 in-sync replicas")
    producer = SequencedProducer(n2, "events")
    producer.send(600)
    producer.flush()
    group = "workers"
    taken = take(n2, "events", group, 300)
    assert len(taken) == 300
    offsets_state = partition_state(n3, "__consumer_offsets")[partition_for_key(group, 3)]
    assert len(offsets_state[2]) == 3  # the committed offsets are on every replica
    victim_id = offsets_state[0]  # the group coordinator
    victim = cluster.nodes[victim_id]
    assert victim_id in {leader for leader, _, _ in partition_state(n1, "events").values()}
    survivor = next(n for n in cluster.brokers if n is not victim)
    writer = threading.Thread(target=producer.send, args=(1500, 0.002))
    writer.start()
    time.sleep(1.0)
    victim.kill()
    writer.join()
    producer.flush()
    assert producer.failed == []
    state = partition_state(survivor, "events")
    assert all(leader != victim_id and leader >= 0 for leader, _, _ in state.values()), state
    check_history(producer.acked, read_all(survivor, "events", len(producer.acked)))
    # The new coordinator loaded the committed offsets: nothing read twice, nothing skipped.
    rest = take(survivor, "events", group, len(producer.acked) - len(taken))
    assert sorted(taken + rest) == sorted(producer.acked) and not set(taken) & set(rest)
    victim.start()
    victim.wait_ready()
    wait_until(lambda: all(len(isr) == 3
                           for _, _, isr in partition_state(survivor, "events").values()),
               30, "the returning broker rejoins every ISR")
    producer.send(300)
    producer.flush()
    check_history(producer.acked, read_all(victim, "events", len(producer.acked)))


def check_fetch_from_follower(cluster: Cluster) -> None:
    """KIP-392: the leader names the follower in the consumer's rack, which serves up to its
    high watermark; librdkafka with client.rack follows the hint."""
    n1 = cluster.brokers[0]
    create_replicated_topic(n1, "nearby", 1, 3)
    producer = SequencedProducer(n1, "nearby")
    producer.send(200)
    producer.flush()
    leader, replicas, _ = partition_state(n1, "nearby")[0]
    follower = next(r for r in replicas if r != leader)
    follower_rack = RACKS[follower]
    wait_until(lambda: len(partition_state(n1, "nearby")[0][2]) == 3, 20, "all in sync")
    Fetch = registry().requests[ApiKey.FETCH].cls

    def fetch_from(node_id: int) -> Any:
        answer = call(cluster.nodes[node_id], ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0,
                      min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                      session_epoch=-1, topics=[Fetch.FetchTopic(topic="nearby", partitions=[
                          Fetch.FetchPartition(partition=0, fetch_offset=0,
                                               partition_max_bytes=1 << 20)])],
                      forgotten_topics_data=[], rack_id=follower_rack)
        return answer.responses[0].partitions[0]

    hinted = fetch_from(leader)
    assert hinted.error_code == 0 and hinted.preferred_read_replica == follower
    assert not hinted.records
    served = fetch_from(follower)
    assert served.error_code == 0 and served.high_watermark == 200 and len(served.records) > 0
    consumer = Consumer({"bootstrap.servers": cluster.nodes[leader].bootstrap,
                         "group.id": "near", "auto.offset.reset": "earliest",
                         "client.rack": follower_rack})
    consumer.subscribe(["nearby"])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(seen) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append((msg.offset(), msg.value()))
    consumer.close()
    assert seen == sorted((o, v) for v, (_, o) in producer.acked.items())


def test_fetch_from_follower_and_min_insync_replicas(cluster_factory: Any) -> None:
    """A consumer reads from the follower of its rack; min.insync.replicas refuses acks=all
    writes it cannot protect and lets acks=1 through."""
    # Separate controllers: two brokers down must not take the metadata quorum with them.
    cluster: Cluster = cluster_factory(
        controllers=3, brokers=3, racks=RACKS,
        extra={**REPLICATION, "replica.selector.class": RACK_AWARE_SELECTOR})
    check_fetch_from_follower(cluster)  # one cluster for both: CI time
    n1, n2, n3 = cluster.brokers
    create_replicated_topic(n1, "guarded", 1, 3, {"min.insync.replicas": "2"})
    leader = partition_state(n1, "guarded")[0][0]
    others = [n for n in cluster.brokers if n.node_id != leader]
    producer = SequencedProducer(cluster.nodes[leader], "guarded")
    others[0].kill()  # one down: the two others still make min.insync.replicas
    wait_until(lambda: len(partition_state(cluster.nodes[leader], "guarded")[0][2]) == 2, 20,
               "the killed follower leaves the ISR")
    producer.send(50)
    producer.flush()
    assert producer.failed == [] and len(producer.acked) == 50
    others[1].kill()  # two down: acks=all must be refused
    wait_until(lambda: len(partition_state(cluster.nodes[leader], "guarded")[0][2]) == 1, 20,
               "the second killed follower leaves the ISR")
    refused = Producer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "acks": "all",
                        "message.timeout.ms": 3000, "retries": 0})
    errors: list[Any] = []
    refused.produce("guarded", value=b"unprotected",
                    on_delivery=lambda err, msg: errors.append(err))
    refused.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
    # acks=1 still goes through the leader alone.
    single = Producer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "acks": "1"})
    single.produce("guarded", value=b"leader-only")
    assert single.flush(10) == 0
    got = read_all(cluster.nodes[leader], "guarded", 51)
    assert [v for _, v in got[0]][-1] == b"leader-only"
    assert b"unprotected" not in [v for _, v in got[0]]
