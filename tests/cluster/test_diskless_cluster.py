"""Diskless topics on three nodes (issue 19): any broker takes produce for any diskless
partition and commits to the partition's coordinator over the wire; the coordinators live on
the leaders of the replicated `__diskless_metadata` partitions and fail over with them.
The nodes are in three racks: Metadata names a client whose rack it knows (a `diskless_az=`
marker in its client.id, or its Fetch's RackId) a gateway of that rack as the leader.

The checker: every acknowledged batch is read back exactly once, at the offset its answer gave,
and each partition's offsets are dense from 0.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, partition_state
from tests.cluster.test_share_groups_cluster import POLL_RECORDS, SHARE, Ledger, Worker

TOPIC = "events"
PARTITIONS = 2
RACK_TOPIC = "rack-events"
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
WARM_TOPIC = "warm-events"
SNAPSHOT_EVERY = 40
METADATA_TOPIC = "__diskless_metadata"
_Produce = registry().requests[ApiKey.PRODUCE].cls
_Fetch = registry().requests[ApiKey.FETCH].cls
_Metadata = registry().requests[ApiKey.METADATA].cls
_ListOffsets = registry().requests[ApiKey.LIST_OFFSETS].cls


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("diskless-cluster")
    made = Cluster(root, combined=3, racks=RACKS, extra={
        **REPLICATION, **SHARE, "diskless.storage.url": f"file://{root / 'objects'}",
        "diskless.metadata.topic.num.partitions": "1",  # one coordinator: all partitions
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20",
        # Snapshot (upload, prune) every SNAPSHOT_EVERY coordinator records.
        "diskless.metadata.snapshot.interval.records": str(SNAPSHOT_EVERY)})
    made.start()
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def _produce(node: Node, partition: int, value: bytes, topic: str = TOPIC) -> tuple[int, int]:
    """One acks=all batch of one record straight to `node`: (error code, base offset)."""
    batch = build_batch([Record(0, int(time.time() * 1000), None, value)])
    request = _Produce(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        _Produce.TopicProduceData(name=topic, partition_data=[
            _Produce.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=40) as sock:
        answer = round_trip(sock, ApiKey.PRODUCE, 9, request)
    [[result]] = [t.partition_responses for t in answer.responses]
    return result.error_code, result.base_offset


def _read(node: Node, expected: dict[int, int],
          topic: str = TOPIC) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "diskless-checker",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in expected])
    seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
    deadline = time.monotonic() + 30
    while any(len(seen[p]) < n for p, n in expected.items()) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return seen


def create_diskless_topic(nodes: list[Node], name: str, partitions: int) -> None:
    """Create a diskless topic and wait until every broker's metadata has it."""
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config={"diskless.enable": "true"})],
                        operation_timeout=30)[name].result(30)
    wait_until(lambda: all(name in AdminClient({"bootstrap.servers": n.bootstrap})
                           .list_topics(timeout=5).topics for n in nodes), 20,
               f"{name} on every broker")


def _gateway_order(node: Node, client_id: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, replicas) of RACK_TOPIC, as a stock client named `client_id`
    hears them from `node`."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "client.id": client_id})
    topic = admin.list_topics(RACK_TOPIC, timeout=10).topics[RACK_TOPIC]
    return {p: (part.leader, list(part.replicas)) for p, part in topic.partitions.items()}


def _leaders_after_fetch(node: Node, rack: str) -> list[int]:
    """RACK_TOPIC's leaders in a Metadata answer on the connection a Fetch named `rack` on."""
    fetch = _Fetch(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                   isolation_level=0, session_id=0, session_epoch=-1, topics=[],
                   forgotten_topics_data=[], rack_id=rack)
    metadata = _Metadata(topics=[_Metadata.MetadataRequestTopic(name=RACK_TOPIC)],
                         allow_auto_topic_creation=False)
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=10) as sock:
        assert round_trip(sock, ApiKey.FETCH, 12, fetch, 1, "consumer").error_code == 0
        answer = round_trip(sock, ApiKey.METADATA, 12, metadata, 2, "consumer")
    return [p.leader_id for p in sorted(answer.topics[0].partitions,
                                        key=lambda p: p.partition_index)]


def test_metadata_leads_a_client_to_a_produce_gateway_of_its_rack(cluster: Cluster) -> None:
    nodes = cluster.brokers
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic(RACK_TOPIC, PARTITIONS, 1, config={"diskless.enable": "true"})],
                        operation_timeout=30)[RACK_TOPIC].result(30)
    wait_until(lambda: all(len(_gateway_order(n, "probe")) == PARTITIONS for n in nodes), 20,
               "the topic on every broker")
    wait_until(lambda: partition_state(nodes[0], "__diskless_metadata").get(0, (-1,))[0] >= 0,
               20, "a coordinator leader")
    coordinator = partition_state(nodes[0], "__diskless_metadata")[0][0]
    # Three brokers, one coordinator, three racks: one gateway per rack, so all three, the
    # coordinator's own broker first.
    everyone = [coordinator] + sorted(n for n in RACKS if n != coordinator)
    for node in nodes:
        assert _gateway_order(node, "app-1") == dict.fromkeys(range(PARTITIONS),
                                                              (coordinator, everyone))
    for node_id, rack in RACKS.items():
        in_rack_first = [node_id] + [n for n in everyone if n != node_id]
        for node in nodes:  # whichever broker answers
            assert _gateway_order(node, f"app-1,diskless_az={rack}") == dict.fromkeys(
                range(PARTITIONS), (node_id, in_rack_first)), (rack, node.node_id)
        assert _leaders_after_fetch(nodes[0], rack) == [node_id] * PARTITIONS
    assert _gateway_order(nodes[0], "app-1,diskless_az=rack-z")[0] == (coordinator, everyone)


def test_every_broker_takes_produce_and_a_coordinator_failover_loses_nothing(
        cluster: Cluster) -> None:
    nodes = cluster.brokers
    create_diskless_topic(nodes, TOPIC, PARTITIONS)
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


def _applied_offset(node: Node) -> int:
    """The `__diskless_metadata` offset coordinator 0's database on `node` has applied."""
    path = node.data_dir / "diskless" / "0.sqlite"
    if not path.exists():
        return -1
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute("SELECT value FROM meta WHERE name = 'applied_offset'").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return -1
    finally:
        db.close()
    return -1 if row is None else int(row[0])


def _metadata_log(node: Node) -> tuple[int, int]:
    """(log start, high watermark) of `__diskless_metadata`-0 at its leader `node`."""
    bounds = []
    for timestamp in (-2, -1):
        request = _ListOffsets(replica_id=-1, isolation_level=0, topics=[
            _ListOffsets.ListOffsetsTopic(name=METADATA_TOPIC, partitions=[
                _ListOffsets.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
        with socket.create_connection(("127.0.0.1", node.client_port), timeout=10) as sock:
            [part] = round_trip(sock, ApiKey.LIST_OFFSETS, 7, request).topics[0].partitions
        assert part.error_code == 0, part
        bounds.append(int(part.offset))
    return bounds[0], bounds[1]


def test_followers_stay_warm_and_one_back_from_a_pruned_log_restores_the_snapshot(
        cluster: Cluster) -> None:
    nodes = cluster.brokers
    create_diskless_topic(nodes, WARM_TOPIC, 1)
    acked: dict[bytes, int] = {}

    def produce(count: int, tag: str, among: list[Node]) -> None:
        for i in range(count):
            value = f"{tag}-{i}".encode()
            for _attempt in range(80):
                try:
                    code, offset = _produce(among[i % len(among)], 0, value, WARM_TOPIC)
                except OSError:
                    code = -1
                if code == 0:
                    acked[value] = offset
                    break
                time.sleep(0.25)
            else:
                pytest.fail(f"{value!r} never acknowledged")

    def warm(members: list[Node]) -> bool:
        _, end = _metadata_log(leader)
        return all(_applied_offset(n) == end - 1 for n in members)

    leader = cluster.nodes[partition_state(nodes[0], METADATA_TOPIC)[0][0]]
    followers = [n for n in nodes if n is not leader]
    produce(20, "first", nodes)
    wait_until(lambda: warm(followers), 10, "every follower's database at the high watermark")

    # A follower is away while the log is snapshotted and pruned past its database.
    away = followers[0]
    away_applied = _applied_offset(away)
    away.kill()
    produce(3 * SNAPSHOT_EVERY, "while-away", [leader, followers[1]])
    log_start, _ = _metadata_log(leader)
    assert log_start > away_applied + 1, "the log was not pruned past the follower's database"
    snapshots = sorted((cluster.root / "objects" / "diskless-snapshots" / "0").iterdir())
    assert 1 <= len(snapshots) <= 2, snapshots
    away.start()
    away.wait_ready()
    wait_until(lambda: warm(followers), 30, "the returning follower restored and caught up")
    assert "restoring a snapshot" in away.log_path.read_text(errors="replace")

    # The leader dies: a warm follower takes over at once and nothing acknowledged is lost.
    leader.kill()
    produce(10, "after-failover", followers)
    seen = _read(followers[0], {0: len(acked)}, WARM_TOPIC)[0]
    assert [o for o, _ in seen] == list(range(len(seen))), "gaps or duplicates"
    assert sorted(seen) == sorted((o, v) for v, o in acked.items())
    leader.start()
    leader.wait_ready()


SHARE_TOPIC = "diskless-jobs"
SHARE_RECORDS = 1500


def test_a_share_group_on_a_diskless_topic_survives_kill_9_of_its_coordinator(
        cluster: Cluster) -> None:
    """Share groups on diskless topics (issue 30): the share-partition lives with the
    partition's diskless coordinator. kill -9 of that broker mid-queue: the coordinator's new
    leader takes the share-partition over from the persisted state. Nothing is lost, nothing
    acknowledged comes back, and only what was in flight at the kill is delivered again."""
    nodes = cluster.brokers
    create_diskless_topic(nodes, SHARE_TOPIC, 1)
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    group = "diskless-workers"
    for future in admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                "share.auto.offset.reset", "earliest",
                incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": nodes[0].bootstrap, "linger.ms": 5,
                         "batch.num.messages": 20})
    for i in range(SHARE_RECORDS):
        producer.produce(SHARE_TOPIC, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    owner_id = partition_state(nodes[0], METADATA_TOPIC)[0][0]
    # Metadata names the coordinator's broker as the partition's leader: share consumers
    # (no rack) send their ShareFetch there.
    assert partition_state(nodes[0], SHARE_TOPIC)[0][0] == owner_id
    others = [n for n in nodes if n.node_id != owner_id]
    ledger = Ledger()
    workers = [Worker(n.bootstrap, group, SHARE_TOPIC, ledger) for n in others]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: ledger.count() >= SHARE_RECORDS // 4, 60, "a quarter consumed")
        cluster.nodes[owner_id].kill()

        def acked_or_failed() -> bool:
            failed = [w.error for w in workers if w.error is not None]
            assert not failed, f"a worker stopped: {failed}"
            return ledger.acked_count() >= SHARE_RECORDS
        wait_until(acked_or_failed, 120, "everything acked")
    finally:
        for worker in workers:
            worker.stop_event.set()
        for worker in workers:
            worker.join(60)
        cluster.nodes[owner_id].start()
        cluster.nodes[owner_id].wait_ready()
    assert [w.error for w in workers] == [None, None]
    lost = set(range(SHARE_RECORDS)) - set(ledger.deliveries)
    again = sorted(o for o, n in ledger.deliveries.items() if n > 1)
    print(f"diskless share group over a coordinator kill: {len(lost)} lost, {len(again)} "
          f"delivered again, {len(ledger.after_ack)} after an ack, "
          f"{sum(len(w.commit_errors) for w in workers)} acknowledgements retried")
    assert lost == set()
    assert ledger.after_ack == [], "an acknowledged record was delivered again"
    assert len(again) <= 2 * 2 * (POLL_RECORDS + 20)
