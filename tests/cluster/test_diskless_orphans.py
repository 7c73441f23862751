"""Orphan WAL objects on a three-node cluster (issue 19): exactly one scanner runs (on the
leader of coordinator 0), it asks every coordinator over the wire, deletes an object none of
them knows once, and leaves committed objects alone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_diskless_cluster import TOPIC, _produce, _read
from tests.cluster.test_replication import REPLICATION

GRACE_MS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("diskless-orphans")
    made = Cluster(root, combined=3, extra={
        **REPLICATION, "diskless.storage.url": f"file://{root / 'objects'}",
        "diskless.metadata.topic.num.partitions": "2",
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20",
        "diskless.coordinator.orphan.scan.interval.ms": "300",
        "diskless.coordinator.orphan.scan.grace.period.ms": str(GRACE_MS)})
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
