"""Share groups on three nodes: kill -9 of the partition leader, then of the share coordinator,
while two confluent-kafka ShareConsumers work through a queue.

The checker counts, from the consumers' own callbacks: records never delivered (lost), records
delivered again after an acknowledgement of theirs had succeeded (an acknowledgement lost), and
records delivered more than once (allowed only for what was in flight, unacknowledged, at a
kill). A last member of the group must find nothing left: every acknowledgement is durable.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_chunks import chunks_of, create_chunk
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, partition_state

RECORDS = 2000
WORK_S = 0.004  # per record and worker: about 4 s of work for the two
POLL_RECORDS = 100
BATCH_RECORDS = 20  # producer batches: records are acquired a batch at a time
SHARE = {
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.share.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("share"), combined=3, extra={**REPLICATION, **SHARE})
    try:
        made.start()
    except BaseException:
        made.close()
        raise
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


class Worker(threading.Thread):
    """A share consumer polling and committing (implicit mode) until told to stop."""

    def __init__(self, bootstrap: str, group: str, topic: str, ledger: Ledger) -> None:
        super().__init__(daemon=True)
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                       "max.poll.records": POLL_RECORDS})
        self.consumer.set_acknowledgement_commit_callback(ledger.acknowledged)
        self.consumer.subscribe([topic])
        self.ledger = ledger
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.commit_errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for message in self.consumer.poll(0.5) or []:
                    if message.error() is None:
                        self.ledger.delivered(message.offset())
                        time.sleep(WORK_S)  # the work: records are in flight at the kills
                try:
                    self.consumer.commit_sync(30)
                except KafkaException as exc:
                    # As an application does: an acknowledgement refused while a leader or
                    # coordinator fails over is retried by the next poll's (the records come
                    # back if it never lands, which the ledger counts).
                    self.commit_errors.append(str(exc))
            self.consumer.close()
        except BaseException as exc:  # the test reports it
            self.error = exc


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: Counter[int] = Counter()
        self.acked: set[int] = set()
        self.after_ack: list[int] = []  # delivered again after a successful acknowledgement

    def delivered(self, offset: int) -> None:
        with self.lock:
            self.deliveries[offset] += 1
            if offset in self.acked:
                self.after_ack.append(offset)

    def acknowledged(self, offsets: dict[Any, set[int]], exception: Any) -> None:
        if exception is None:
            with self.lock:
                for acked in offsets.values():
                    self.acked.update(acked)

    def count(self) -> int:
        with self.lock:
            return len(self.deliveries)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)


def _leader(node: Node, topic: str) -> int:
    return partition_state(node, topic)[0][0]


def test_kill_9_of_the_leader_and_of_the_share_coordinator_loses_no_acknowledgement(
        cluster: Cluster) -> None:
    controller = cluster.wait_for_leader(list(cluster.nodes.values()))
    leader, follower = [n for n in cluster.nodes if n != controller]
    entry = cluster.nodes[controller]
    admin = AdminClient({"bootstrap.servers": entry.bootstrap})
    admin.create_topics([NewTopic("jobs", 1, replica_assignment=[[leader, follower, controller]],
                                  config={"min.insync.replicas": "2"})],
                        operation_timeout=30)["jobs"].result(30)
    group = "workers"
    for future in admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                "share.auto.offset.reset", "earliest",
                incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": entry.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": BATCH_RECORDS})
    for i in range(RECORDS):
        producer.produce("jobs", value=b"%d" % i)
    assert producer.flush(60) == 0
    ledger = Ledger()
    workers = [Worker(entry.bootstrap, group, "jobs", ledger) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: ledger.count() >= RECORDS // 4, 60, "a quarter consumed")
        cluster.nodes[leader].kill()  # the partition's leader
        wait_until(lambda: ledger.count() >= RECORDS // 2, 90, "half consumed after the kill")
        cluster.nodes[leader].start()
        cluster.nodes[leader].wait_ready()
        coordinator = _leader(entry, "__share_group_state")
        cluster.nodes[coordinator].kill()  # the share coordinator
        wait_until(lambda: ledger.acked_count() >= RECORDS, 120, "everything acknowledged")
        cluster.nodes[coordinator].start()
        cluster.nodes[coordinator].wait_ready()
    finally:
        for worker in workers:
            worker.stop_event.set()
        for worker in workers:
            worker.join(60)
    assert [w.error for w in workers] == [None, None]
    lost = set(range(RECORDS)) - set(ledger.deliveries)
    again = sorted(o for o, n in ledger.deliveries.items() if n > 1)
    assert max(ledger.deliveries.values()) <= 3
    print(f"share group over two kills: {RECORDS} records, {len(lost)} lost, "
          f"{len(again)} delivered more than once, {len(ledger.after_ack)} after an ack")
    assert lost == set()
    assert ledger.after_ack == [], "an acknowledged record was delivered again"
    # At most what the two members held at the two kills (a poll's records, and as many
    # again that librdkafka fetched ahead), redelivered each time.
    assert len(again) <= 2 * 2 * 2 * (POLL_RECORDS + BATCH_RECORDS)
    late = ShareConsumer({"bootstrap.servers": entry.bootstrap, "group.id": group})
    late.subscribe(["jobs"])
    try:
        leftover = [m.offset() for _ in range(6) for m in late.poll(0.5) or []]
    finally:
        late.close()
    assert leftover == [], "records left unacknowledged"


def test_a_share_group_reads_an_inactive_chunk_held_by_another_broker(cluster: Cluster) -> None:
    """Partition chunks (seed 000): the first 300 records stay on broker A as an inactive
    chunk, the active chunk (and so the share-partition) moves to broker B, which reads the
    chunk from A for its share consumers. Every record is delivered once, in offset order
    within each consumer's deliveries."""
    a, b = sorted(cluster.nodes)[:2]
    entry = cluster.nodes[a]
    admin = AdminClient({"bootstrap.servers": entry.bootstrap})
    topic, group = "chunked-jobs", "chunk-workers"
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[a]])],
                        operation_timeout=30)[topic].result(30)
    wait_until(lambda: _leader(entry, topic) == a, 20, f"{topic} led by broker {a}")
    values = [b"%d" % i for i in range(600)]
    producer = Producer({"bootstrap.servers": entry.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": BATCH_RECORDS})
    for value in values[:300]:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    assert create_chunk(entry, topic, 0, [b]) == (0, None)
    for node in cluster.brokers:
        wait_until(lambda node=node: chunks_of(node, topic, 0)[0] == 300, 20,
                   "every broker knows the new chunk")
    wait_until(lambda: _leader(entry, topic) == b, 20, f"{topic} led by broker {b}")
    for value in values[300:]:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    for future in admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                "share.auto.offset.reset", "earliest",
                incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    ledger = Ledger()
    consumers = [ShareConsumer({"bootstrap.servers": node.bootstrap, "group.id": group})
                 for node in (cluster.nodes[a], cluster.nodes[b])]
    values_seen: dict[int, bytes] = {}
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while ledger.count() < len(values) and time.monotonic() < deadline:
            for consumer in consumers:
                got = [m for m in consumer.poll(0.3) or [] if m.error() is None]
                for message in got:
                    ledger.delivered(message.offset())
                    values_seen[message.offset()] = message.value()
                if got:
                    consumer.commit_sync(30)
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(values_seen.items()) == list(enumerate(values))
    assert set(ledger.deliveries.values()) == {1}
    # The chunk's records came from broker A: broker B holds no copy of it.
    assert not (cluster.nodes[b].data_dir / f"{topic}-0@0").exists()
