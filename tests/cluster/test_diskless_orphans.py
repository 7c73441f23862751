"""Orphan WAL objects on a three-node cluster (issue 19): exactly one scanner runs (on the
leader of coordinator 0), it asks every coordinator over the wire, deletes an object none of
them knows once, and leaves committed objects alone: a planted one, and the real one a broker
killed with -9 between its upload and its commit leaves."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_diskless_cluster import TOPIC, _produce, _read
from tests.cluster.test_replication import REPLICATION, partition_state

GRACE_MS = 3000
METADATA_TOPIC = "__diskless_metadata"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("diskless-orphans")
    made = Cluster(root, combined=3, extra={
        **REPLICATION, "diskless.storage.url": f"file://{root / 'objects'}",
        "diskless.metadata.topic.num.partitions": "2",
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20",
        "diskless.coordinator.orphan.scan.interval.ms": "300",
        "diskless.coordinator.orphan.scan.grace.period.ms": str(GRACE_MS),
        "diskless.file.deletion.grace.ms": "500"})
    made.start()
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def test_one_scanner_deletes_an_orphan_once_and_keeps_committed_objects(
        cluster: Cluster) -> None:
    nodes = cluster.brokers
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1, config={"diskless.enable": "true"})],
                        operation_timeout=30)[TOPIC].result(30)
    for i, node in enumerate(nodes):  # through every broker, to both coordinators
        for partition in (0, 1):
            code, _ = _produce(node, partition, f"kept-{i}-{partition}".encode())
            assert code == 0
    objects = cluster.root / "objects" / "wal"
    committed = set(p.name for p in objects.iterdir())
    assert len(committed) >= 3
    # What a broker killed between its upload and its commit leaves behind.
    orphan = objects / f"{int(time.time() * 1000) - 10 * GRACE_MS:013d}-{uuid.uuid4().hex}"
    orphan.write_bytes(b"never committed")
    wait_until(lambda: not orphan.exists(), 20, "the orphan to be deleted")
    time.sleep(1.0)  # several more scans
    assert set(p.name for p in objects.iterdir()) == committed
    scanned = [n.node_id for n in nodes if orphan.name in n.log()]
    assert len(scanned) == 1, f"nodes that deleted the orphan: {scanned}"
    seen = _read(nodes[1], {0: 3, 1: 3})
    assert sorted(v for p in seen.values() for _, v in p) == sorted(
        f"kept-{i}-{p}".encode() for i in range(3) for p in (0, 1))


def test_a_broker_killed_between_upload_and_commit_leaves_an_orphan_one_scanner_deletes(
        cluster: Cluster) -> None:
    nodes = cluster.brokers
    objects = cluster.root / "objects" / "wal"
    wait_until(lambda: len(partition_state(nodes[0], METADATA_TOPIC)) == 2, 20,
               "both coordinators")
    leaders = {leader for leader, _, _ in partition_state(nodes[0], METADATA_TOPIC).values()}
    victim = next(n for n in nodes if n.node_id not in leaders)
    before = set(objects.iterdir())
    # The victim's commits stall on the way to every coordinator: its upload lands, its commit
    # never does, and it is killed meanwhile.
    cluster.cut([(victim.node_id, leader) for leader in leaders], mode="stall")
    answers: list[object] = []

    def produce() -> None:
        try:
            answers.append(_produce(victim, 0, b"uploaded-never-committed"))
        except OSError as exc:
            answers.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    wait_until(lambda: set(objects.iterdir()) - before, 20, "the victim's upload")
    [orphan] = set(objects.iterdir()) - before
    victim.kill()
    producer.join()
    cluster.heal()
    assert len(answers) == 1 and isinstance(answers[0], OSError), answers  # never answered
    values = [v for p in _read(nodes[1], {0: 3, 1: 3}).values() for _, v in p]
    assert b"uploaded-never-committed" not in values
    # The scanner's threshold is the oldest committed file plus the grace period (KIP-1164),
    # so an orphan newer than live files waits for them to go: delete the topic.
    admin = AdminClient({"bootstrap.servers": nodes[1].bootstrap})
    admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(30)
    wait_until(lambda: not orphan.exists(), 30, "the orphan to be deleted")
    wait_until(lambda: not any(objects.iterdir()), 30, "the topic's objects to be deleted")
    scanned = [n.node_id for n in nodes if n is not victim and orphan.name in n.log()]
    assert len(scanned) == 1, f"nodes that deleted the orphan: {scanned}"
    victim.start()
    victim.wait_ready()
