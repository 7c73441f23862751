"""A KRaft cluster of real processes, driven by stock clients: partitions led across brokers,
a killed active controller, a killed broker, a controlled shutdown, a cut-off controller and a
node that catches up from a snapshot (issue 13 item 6). One file per failure would repeat the
cluster set-up; each test names the failure it makes."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from typing import Any

import kafka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.cluster.conftest import Cluster, Node


def create_topic(node: Node, name: str, partitions: int, timeout_s: float = 30) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)],
                        operation_timeout=timeout_s)[name].result(timeout_s)


def leaders(node: Node, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
    return {p: part.leader for p, part in metadata.topics[topic].partitions.items()}


def brokers_seen(node: Node) -> list[int]:
    metadata = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)
    return sorted(metadata.brokers)


def wait_until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (KafkaException, OSError):  # a node busy electing may not answer yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def produce(node: Node, topic: str, count: int) -> dict[int, list[tuple[int, bytes]]]:
    """Keyed records; (offset, value) per partition as the brokers acknowledged them."""
    acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[msg.partition()].append((msg.offset(), msg.value()))

    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % (i % 29), value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(60) == 0
    return acked


def call(node: Node, api_key: int, version: int, **fields: Any) -> Any:
    """One request on a fresh connection, decoded with our codec."""
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        return round_trip(sock, api_key, version, registry().requests[api_key].cls(**fields), 1)


def check_leader_hints(cluster: Cluster, topic: str, led: dict[int, int]) -> None:
    """KIP-951: a broker that does not lead a partition says who does, in the refusal."""
    partition, leader = next(iter(sorted(led.items())))
    other = next(n for n in cluster.brokers if n.node_id != leader)
    leader_node = next(n for n in cluster.brokers if n.node_id == leader)
    requests = registry().requests
    Produce, Fetch = requests[ApiKey.PRODUCE].cls, requests[ApiKey.FETCH].cls
    batch = build_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                               value=b"x")])
    produced = call(other, ApiKey.PRODUCE, 11, transactional_id=None, acks=-1, timeout_ms=10000,
                    topic_data=[Produce.TopicProduceData(name=topic, partition_data=[
                        Produce.PartitionProduceData(index=partition, records=batch)])])
    Metadata = requests[ApiKey.METADATA].cls
    topic_id = call(other, ApiKey.METADATA, 12, topics=[Metadata.MetadataRequestTopic(name=topic)],
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False).topics[0].topic_id
    fetched = call(other, ApiKey.FETCH, 17, replica_id=-1, max_wait_ms=0, min_bytes=1,
                   max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=[Fetch.FetchTopic(topic_id=topic_id, partitions=[
                       Fetch.FetchPartition(partition=partition, fetch_offset=0,
                                            partition_max_bytes=1 << 20)])],
                   forgotten_topics_data=[], rack_id="")
    for response, answer in ((produced, produced.responses[0].partition_responses[0]),
                             (fetched, fetched.responses[0].partitions[0])):
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert answer.current_leader.leader_id == leader
        assert answer.current_leader.leader_epoch >= 0
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [
            (leader, leader_node.client_port)]


def consume_group(node: Node, topic: str, count: int, group: str
                  ) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_three_combined_nodes_serve_a_topic_led_by_every_broker(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    n1, n2, n3 = cluster.brokers
    create_topic(n2, "orders", 6)
    assert brokers_seen(n1) == brokers_seen(n3) == [1, 2, 3]
    led = leaders(n2, "orders")  # the node that created it answered once it had it
    assert set(led.values()) == {1, 2, 3}
    wait_until(lambda: leaders(n1, "orders") == leaders(n3, "orders") == led, 10,
               "every broker has the same metadata")
    check_leader_hints(cluster, "orders", led)
    acked = produce(n3, "orders", 900)
    got = consume_group(n1, "orders", 900, "group-a")
    assert dict(got) == dict(acked)  # every record, once, in order, at its offset
    for records in got.values():
        assert [o for o, _ in records] == list(range(len(records)))
    # kafka-python bootstrapped to the third node reads the same thing.
    consumer = kafka.KafkaConsumer("orders", bootstrap_servers=n2.bootstrap,
                                   auto_offset_reset="earliest", consumer_timeout_ms=10000)
    seen = sorted((m.partition, m.offset, m.value) for m in consumer)
    consumer.close()
    assert seen == sorted((p, o, v) for p, records in acked.items() for o, v in records)


def test_three_controllers_and_three_brokers(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(controllers=3, brokers=3)
    b1, b2, b3 = cluster.brokers
    leader = cluster.wait_for_leader([b1, b2, b3])
    assert leader in (1, 2, 3)  # a controller leads the quorum; brokers observe it
    create_topic(b1, "events", 6)
    wait_until(lambda: set(leaders(b2, "events").values()) == {101, 102, 103}, 10,
               "the topic is led by the three brokers")
    acked = produce(b2, "events", 300)
    assert dict(consume_group(b3, "events", 300, "group-b")) == dict(acked)
    status = cluster.quorum(b1)  # a broker forwards DescribeQuorum to the active controller
    assert status.leader_id == leader
    assert sorted(v.replica_id for v in status.current_voters) == [1, 2, 3]
    assert all(v.log_end_offset > 0 for v in status.current_voters)
    assert sorted(o.replica_id for o in status.observers) == [101, 102, 103]


def test_killed_active_controller_is_replaced_and_metadata_changes_go_on(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    nodes = cluster.brokers
    leader = cluster.wait_for_leader(nodes)
    create_topic(nodes[0], "before", 3)
    started = time.monotonic()
    cluster.nodes[leader].kill()
    survivors = [n for n in nodes if n.node_id != leader]
    new_leader = cluster.wait_for_leader(survivors, not_=leader)
    create_topic(survivors[0], "after", 3)
    assert time.monotonic() - started < 20  # a few election timeouts, with room for CI
    assert new_leader != leader
    for node in survivors:
        assert "before" in AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(
            timeout=10).topics


def test_killed_broker_is_fenced_and_its_partitions_come_back_with_it(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    nodes = cluster.brokers
    leader = cluster.wait_for_leader(nodes)
    victim = next(n for n in nodes if n.node_id != leader)
    witness = next(n for n in nodes if n.node_id not in (leader, victim.node_id))
    create_topic(witness, "fenced", 6)
    acked = produce(witness, "fenced", 120)
    victim.kill()
    wait_until(lambda: victim.node_id not in brokers_seen(witness), 20,
               "the killed broker is fenced after its session timeout")
    # Its partitions (one replica each) go offline. Every broker applies the fencing a little
    # apart, and a client may ask any of them: wait for the one that answers to have it.
    wait_until(lambda: len([b for b in leaders(witness, "fenced").values() if b == -1]) == 2,
               10, "the fenced broker's two partitions are offline")
    victim.start()
    victim.wait_ready()
    wait_until(lambda: -1 not in leaders(witness, "fenced").values(), 20,
               "its partitions are led again")
    assert dict(consume_group(witness, "fenced", 120, "group-c")) == dict(acked)


def test_controlled_shutdown_moves_leaderships_before_the_broker_exits(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    nodes = cluster.brokers
    create_topic(nodes[0], "shutdown", 3)
    leaving = nodes[2]
    started = time.monotonic()
    assert leaving.stop() == 0
    # The controller fenced it during the shutdown: no waiting for a session timeout (3 s).
    wait_until(lambda: brokers_seen(nodes[0]) == [1, 2]
               and sorted(leaders(nodes[0], "shutdown").values()) == [-1, 1, 2], 2,
               "the broker left the cluster and its partition went offline")
    assert time.monotonic() - started < 3
    assert "controlled shutdown done" in leaving.log()


def test_a_cut_off_controller_cannot_commit_and_the_majority_goes_on(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    nodes = cluster.brokers
    leader = cluster.wait_for_leader(nodes)
    cluster.isolate(leader)
    majority = [n for n in nodes if n.node_id != leader]
    new_leader = cluster.wait_for_leader(majority, not_=leader)
    create_topic(majority[0], "majority-side", 2)
    # The cut-off node resigns (check quorum: no fetch from a majority for 1.5 fetch
    # timeouts) and cannot commit anything since.
    cut_off = cluster.nodes[leader]
    wait_until(lambda: cluster.quorum(cut_off).leader_id != leader, 10,
               "the cut-off leader resigns")
    admin = AdminClient({"bootstrap.servers": cut_off.bootstrap})
    failed = admin.create_topics([NewTopic("minority-side", 1, 1)], operation_timeout=3,
                                 request_timeout=5)["minority-side"]
    try:
        failed.result(15)
        raise AssertionError("a cut-off node created a topic")
    except KafkaException:
        pass
    cluster.isolate(leader, cut=False)
    wait_until(lambda: cluster.quorum(cut_off).leader_id == new_leader, 20,
               "the healed node follows the new leader")
    wait_until(lambda: "majority-side" in admin.list_topics(timeout=5).topics, 20,
               "the healed node sees what the majority committed")
    assert "minority-side" not in admin.list_topics(timeout=5).topics


def test_a_node_that_missed_many_changes_catches_up_from_a_snapshot(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(
        combined=3, extra={"metadata.log.max.record.bytes.between.snapshots": "2048"})
    nodes = cluster.brokers
    leader = cluster.wait_for_leader(nodes)
    away = next(n for n in nodes if n.node_id != leader)
    present = next(n for n in nodes if n is not away)
    assert away.stop() == 0
    for n in range(25):
        create_topic(present, f"while-away-{n}", 1)
    metadata_dir = cluster.nodes[leader].data_dir / "__cluster_metadata-0"
    wait_until(lambda: any(metadata_dir.glob("*.checkpoint")), 10, "the leader snapshots")
    away.start()
    away.wait_ready()
    topics = AdminClient({"bootstrap.servers": away.bootstrap}).list_topics(timeout=10).topics
    assert {f"while-away-{n}" for n in range(25)} <= set(topics)
    assert "installed the leader's snapshot" in away.log()


def test_a_transaction_over_partitions_of_every_broker_commits_and_aborts(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(combined=3)
    n1, n2, n3 = cluster.brokers
    create_topic(n1, "txn", 6)
    wait_until(lambda: set(leaders(n2, "txn").values()) == {1, 2, 3}, 10, "topic everywhere")
    producer = Producer({"bootstrap.servers": n2.bootstrap, "transactional.id": "tx-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(60):
        producer.produce("txn", value=b"c%d" % i, partition=i % 6)
    producer.commit_transaction(30)  # markers go to the leaders on the other brokers too
    producer.begin_transaction()
    for i in range(12):
        producer.produce("txn", value=b"a%d" % i, partition=i % 6)
    producer.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": n3.bootstrap, "group.id": "tx-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["txn"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    end = time.monotonic() + 3  # nothing of the aborted transaction follows
    while time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    assert sorted(values) == sorted(b"c%d" % i for i in range(60))
