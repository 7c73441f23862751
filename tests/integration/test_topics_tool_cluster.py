"""`kafka-ext topics --replica-assignment` on a real three-node cluster (nodes 1-3, each broker
and controller): the partitions land on the brokers named, led by the first of each list, on
--create and on --alter; records go to those leaders and come back; a broker down puts the
partitions it was needed for under their min ISR. broker-api-versions reports each broker."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.cluster.conftest import Cluster
from tests.integration.conftest import run_cli

SETTLE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("topics-cluster"), combined=3,
                   extra={"replica.lag.time.max.ms": "2000"})
    made.start()
    yield made
    problems = made.close()
    assert not problems, "\n\n".join(problems)


def topics(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    bootstrap = ",".join(n.bootstrap for n in cluster.brokers if n.alive)
    return run_cli("topics", "--bootstrap-server", bootstrap, *args)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def layout(cluster: Cluster, topic: str) -> list[tuple[str, str, str]]:
    """(leader, replicas, isr) of each partition, from --describe's lines."""
    rows = []
    for line in ok(topics(cluster, "--describe", "--topic", topic)).splitlines()[1:]:
        fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
        rows.append((fields["Leader"], fields["Replicas"], fields["Isr"]))
    return rows


def settled(cluster: Cluster, topic: str, want: list[tuple[str, str, str]]) -> None:
    """Until --describe shows `want` (leaders are elected as the brokers learn the topic)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while (rows := layout(cluster, topic)) != want:
        assert time.monotonic() < deadline, f"layout {rows}, expected {want}"
        time.sleep(0.2)


def test_create_and_alter_place_partitions_on_the_brokers_named(cluster: Cluster) -> None:
    topic = f"placed-{uuid.uuid4().hex[:8]}"
    assert ok(topics(cluster, "--create", "--topic", topic, "--replica-assignment",
                     "1:2,2:3")) == f"Created topic {topic}.\n"
    settled(cluster, topic, [("1", "1,2", "1,2"), ("2", "2,3", "2,3")])
    head = ok(topics(cluster, "--describe", "--topic", topic)).splitlines()[0]
    assert "\tPartitionCount: 2\tReplicationFactor: 2\t" in head

    ok(topics(cluster, "--alter", "--topic", topic, "--partitions", "4",
              "--replica-assignment", "1:2,2:3,3:1,3:2"))
    settled(cluster, topic, [("1", "1,2", "1,2"), ("2", "2,3", "2,3"),
                             ("3", "3,1", "3,1"), ("3", "3,2", "3,2")])

    bootstrap = cluster.nodes[1].bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(4):
        producer.produce(topic, key=b"k", value=f"p{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        got = {}
        while len(got) < 4:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None
            got[msg.partition()] = (msg.offset(), msg.value())
    finally:
        consumer.close()
    assert got == {p: (0, f"p{p}".encode()) for p in range(4)}


def test_broker_api_versions_reports_every_broker_by_id(cluster: Cluster) -> None:
    done = run_cli("broker-api-versions", "--bootstrap-server", cluster.nodes[2].bootstrap)
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if not line.startswith(("\t", ")"))]
    assert heads == [f"{cluster.nodes[n].bootstrap} (id: {n} rack: null) -> ("
                     for n in (1, 2, 3)]
    assert done.stdout.count("\tProduce(0): 0 to 11 [usable: 11],\n") == 3


def test_a_broker_down_puts_its_partitions_under_min_isr(cluster: Cluster) -> None:
    """Last in this module: it stops node 3."""
    topic = f"min-isr-{uuid.uuid4().hex[:8]}"
    ok(topics(cluster, "--create", "--topic", topic, "--replica-assignment", "1:3,1:2",
              "--config", "min.insync.replicas=2"))
    settled(cluster, topic, [("1", "1,3", "1,3"), ("1", "1,2", "1,2")])
    at = ok(topics(cluster, "--describe", "--topic", topic, "--at-min-isr-partitions"))
    assert [line.split("\tLeader:")[0] for line in at.splitlines()] == [
        f"\tTopic: {topic}\tPartition: 0", f"\tTopic: {topic}\tPartition: 1"]

    assert cluster.nodes[3].stop() == 0
    settled(cluster, topic, [("1", "1,3", "1"), ("1", "1,2", "1,2")])
    under = ok(topics(cluster, "--describe", "--topic", topic, "--under-min-isr-partitions"))
    assert under == (f"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 1,3\tIsr: 1"
                     "\tElr: \tLastKnownElr: \n")
    at = ok(topics(cluster, "--describe", "--topic", topic, "--at-min-isr-partitions"))
    assert [line.split("\tLeader:")[0] for line in at.splitlines()] == [
        f"\tTopic: {topic}\tPartition: 1"]
