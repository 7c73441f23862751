"""Partition chunks (seed 000) on 3 real brokers: the proposal's test plan, read by stock
consumers that follow the leader's PreferredReadReplica to the old chunk's replica."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, partition_state
from tests.integration.test_partition_reduction_clients import _kafkajs_modules

JS_READER = Path(__file__).parent / "js" / "chunk_reader.js"


def _call(node: Node, api_key: int, **fields: Any) -> Any:
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        identify(sock)
        return round_trip(sock, api_key, 0, registry().requests[api_key].cls(**fields), 1)


def create_chunk(node: Node, topic: str, partition: int, brokers: list[int]) -> tuple[int, str]:
    """CreateChunks, sent to the partition's leader `node`: (error code, message)."""
    Request = registry().requests[ApiKey.CREATE_CHUNKS].cls
    answer = _call(node, ApiKey.CREATE_CHUNKS, topic_partitions=[
        Request.CreateChunksTopicPartition(topic_name=topic, partition_id=partition,
                                           broker_ids=brokers, start_offset=-1,
                                           start_timestamp=-1, prev_stop_offset=-1)])
    [result] = answer.results
    return result.error_code, result.error_message


def alter_chunk(node: Node, topic: str, partition: int, start: int, epoch: int,
                brokers: list[int]) -> tuple[int, str]:
    """AlterChunkAssignments through any broker: (error code, message)."""
    Request = registry().requests[ApiKey.ALTER_CHUNK_ASSIGNMENTS].cls
    answer = _call(node, ApiKey.ALTER_CHUNK_ASSIGNMENTS, chunks=[Request.AlterChunkAssignment(
        topic_name=topic, partition_id=partition, start_offset=start, chunk_epoch=epoch,
        broker_ids=brokers)])
    [result] = answer.results
    return result.error_code, result.error_message


def chunks_of(node: Node, topic: str, partition: int) -> tuple[int, list[Any]]:
    """(active chunk's start offset, inactive chunks) as one broker's Metadata says."""
    answer = _metadata(node, topic)
    part = next(p for p in answer.topics[0].partitions if p.partition_index == partition)
    return part.start_offset, list(part.chunks)


def _metadata(node: Node, topic: str) -> Any:
    Metadata = registry().requests[ApiKey.METADATA].cls
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        identify(sock)
        return round_trip(sock, ApiKey.METADATA, 12, Metadata(
            topics=[Metadata.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), 1)


def _create_topic_on(node: Node, topic: str, broker: int) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[broker]])],
                        operation_timeout=30)[topic].result(30)
    wait_until(lambda: partition_state(node, topic).get(0, (-1,))[0] == broker, 20,
               f"{topic} led by broker {broker}")


def _produce(node: Node, topic: str, values: list[bytes], **config: Any) -> None:
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", **config})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _consume(node: Node, topic: str, expected: int, **config: Any) -> list[tuple[int, bytes]]:
    """(offset, value) of `expected` records from the start of partition 0 (confluent-kafka)."""
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1000, **config})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def consumer_offsets_kafka_python(node: Node, topic: str, timestamp: int) -> int:
    consumer = kafka.KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None)
    try:
        tp = kafka.TopicPartition(topic, 0)
        return int(consumer.offsets_for_times({tp: timestamp})[tp].offset)
    finally:
        consumer.close()


def _read_kafka_python(node: Node, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([kafka.TopicPartition(topic, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                got += [(m.offset, m.value) for m in messages]
    finally:
        consumer.close()
    return got


async def _read_aiokafka(node: Node, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=node.bootstrap,
                                         enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([aiokafka.TopicPartition(topic, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                got += [(m.offset, m.value) for m in messages]
    finally:
        await consumer.stop()
    return got


def _read_kafkajs(node: Node, topic: str, expected: int) -> list[tuple[int, bytes]]:
    env = {**os.environ, "NODE_PATH": str(_kafkajs_modules())}
    run = subprocess.run(["node", str(JS_READER), json.dumps({
        "bootstrap": node.bootstrap, "topic": topic, "expected": expected, "timeoutMs": 30000})],
        capture_output=True, text=True, timeout=120, env=env)
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer
    return [(offset, value.encode()) for offset, value in answer["records"]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-broker cluster for this module's tests (each uses its own topics)."""
    made = Cluster(tmp_path_factory.mktemp("chunks"), combined=3, extra={
        **REPLICATION, "log.retention.check.interval.ms": "500"})
    made.start()
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def test_the_proposals_plans(cluster: Cluster) -> None:
    """The non-transactional, transactional and AlterChunkAssignments plans of the proposal."""
    n1, n2, n3 = cluster.brokers
    # Non-transactional: a partition on broker 1 only, 10 records, a chunk on broker 2, 10 more.
    _create_topic_on(n1, "plain", 1)
    first = [f"a{i}".encode() for i in range(10)]
    _produce(n1, "plain", first)
    assert create_chunk(n1, "plain", 0, [2]) == (0, None)
    for node in cluster.brokers:
        wait_until(lambda node=node: chunks_of(node, "plain", 0)[0] == 10, 10,
                   "every broker knows the new chunk")
    start, [chunk] = chunks_of(n3, "plain", 0)
    assert (chunk.start_offset, chunk.stop_offset, chunk.end_offset) == (0, 9, 9)
    assert chunk.replica_nodes == [1] and partition_state(n3, "plain")[0][0] == 2
    second = [f"b{i}".encode() for i in range(10)]
    _produce(n3, "plain", second)
    # A stock consumer from the start: the old chunk from broker 1, then broker 2.
    assert _consume(n3, "plain", 20) == list(enumerate(first + second))
    assert (cluster.nodes[1].data_dir / "plain-0@0").is_dir()
    assert not (cluster.nodes[1].data_dir / "plain-0").exists()
    # The other stock clients that follow PreferredReadReplica (KIP-392) do the same.
    expected = list(enumerate(first + second))
    assert _read_kafka_python(n3, "plain", 20) == expected
    got = asyncio.run(_read_aiokafka(n3, "plain", 20))
    assert got == expected, got
    assert _read_kafkajs(n3, "plain", 20) == expected

    # AlterChunkAssignments: the first chunk moves from broker 1 to broker 3, which copies it
    # before broker 1 lets its copy go; then readers get it from broker 3.
    assert alter_chunk(n2, "plain", 0, 0, 0, [3]) == (0, None)
    wait_until(lambda: [c.replica_nodes for c in chunks_of(n1, "plain", 0)[1]] == [[3]], 20,
               "the chunk moved to broker 3")
    wait_until(lambda: not (cluster.nodes[1].data_dir / "plain-0@0").exists(), 10,
               "broker 1 deleted its copy")
    assert (cluster.nodes[3].data_dir / "plain-0@0").is_dir()
    assert _consume(n1, "plain", 20) == expected
    assert alter_chunk(n2, "plain", 0, 0, 0, [1])[0] == ErrorCode.INVALID_CHUNK_ASSIGNMENT
    assert alter_chunk(n2, "plain", 0, 5, -1, [1])[0] == ErrorCode.CHUNK_NOT_FOUND
    assert alter_chunk(n2, "plain", 0, 0, 2, [1, 2])[0] == ErrorCode.INVALID_CHUNK_ASSIGNMENT

    # Transactional: a transaction open while the chunk is created, committed after it; a
    # read_committed consumer reads the 10 plain records from broker 1, the 10 transactional
    # ones from broker 2.
    _create_topic_on(n1, "txn", 1)
    _produce(n1, "txn", first)
    transactional = Producer({"bootstrap.servers": n1.bootstrap, "transactional.id": "chunky"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for value in second:
        transactional.produce("txn", value, partition=0)
    transactional.flush(30)
    assert create_chunk(n1, "txn", 0, [2]) == (0, None)
    _, [chunk] = chunks_of(n1, "txn", 0)
    assert (chunk.start_offset, chunk.stop_offset, chunk.end_offset) == (0, 9, 19)
    transactional.commit_transaction(30)
    got = _consume(n3, "txn", 20, **{"isolation.level": "read_committed"})
    assert got == list(enumerate(first + second))


def test_whole_chunks_leave_with_delete_records_and_retention(cluster: Cluster) -> None:
    """DeleteRecords past a chunk removes it from every replica; retention.bytes removes the
    oldest chunks once the partition holds more; the partition then starts at what is left."""
    n1, n2, n3 = cluster.brokers
    _create_topic_on(n1, "aging", 1)
    values = [f"v{i}".encode() * 50 for i in range(30)]
    for leader, (start, end), chunk_on in ((n1, (0, 10), 2), (n2, (10, 20), 3)):
        _produce(leader, "aging", values[start:end])
        assert create_chunk(leader, "aging", 0, [chunk_on]) == (0, None)
        wait_until(lambda chunk_on=chunk_on: partition_state(n1, "aging")[0][0] == chunk_on,
                   10, f"broker {chunk_on} leads aging-0")
    _produce(n3, "aging", values[20:])
    admin = AdminClient({"bootstrap.servers": n1.bootstrap})
    [future] = admin.delete_records([TopicPartition("aging", 0, 5)]).values()
    assert future.result(30).low_watermark == 0  # inside the first chunk: it stays whole
    [future] = admin.delete_records([TopicPartition("aging", 0, 12)]).values()
    assert future.result(30).low_watermark == 10  # the first chunk went; the second starts at 10
    wait_until(lambda: [c.start_offset for c in chunks_of(n3, "aging", 0)[1]] == [10], 10,
               "the first chunk is gone from the metadata")
    wait_until(lambda: not (cluster.nodes[1].data_dir / "aging-0@0").exists(), 10,
               "broker 1 deleted its copy")
    assert _consume(n1, "aging", 20) == [(i, values[i]) for i in range(10, 30)]
    # retention.bytes: the active chunk alone is below it; with the second chunk it is not.
    admin.incremental_alter_configs([ConfigResource(
        "topic", "aging", incremental_configs=[ConfigEntry(
            "retention.bytes", "1500",
            incremental_operation=AlterConfigOpType.SET)])])[ConfigResource("topic", "aging")
                                                              ].result(30)
    wait_until(lambda: chunks_of(n3, "aging", 0)[1] == [], 20, "retention removed the chunk")
    wait_until(lambda: not (cluster.nodes[2].data_dir / "aging-0@10").exists(), 10,
               "broker 2 deleted its copy")
    assert _consume(n1, "aging", 10) == [(i, values[i]) for i in range(20, 30)]


def test_offsets_by_time_and_earliest_across_chunks(cluster: Cluster) -> None:
    """ListOffsets by timestamp finds records that only a chunk's replica holds, and the
    earliest offset is the first chunk's, through any client's usual calls."""
    n1, n2, n3 = cluster.brokers
    _create_topic_on(n1, "timed", 1)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": n1.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("timed", f"t{i}".encode(), partition=0, timestamp=base + 10 * i)
    assert producer.flush(30) == 0
    assert create_chunk(n1, "timed", 0, [3]) == (0, None)
    wait_until(lambda: partition_state(n2, "timed")[0][0] == 3, 10, "broker 3 leads timed-0")
    producer = Producer({"bootstrap.servers": n2.bootstrap, "acks": "all"})
    for i in range(10, 20):
        producer.produce("timed", f"t{i}".encode(), partition=0, timestamp=base + 10 * i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": n2.bootstrap, "group.id": "timed"})
    try:
        found = [consumer.offsets_for_times([TopicPartition("timed", 0, ts)], 30)[0].offset
                 for ts in (base + 35, base + 150, base - 1)]
        assert found == [4, 15, 0]  # in the chunk (broker 1), in the active one, before all
        low, high = consumer.get_watermark_offsets(TopicPartition("timed", 0), 30)
        assert (low, high) == (0, 20)
    finally:
        consumer.close()
    found = consumer_offsets_kafka_python(n2, "timed", base + 55)
    assert found == 6
    # Deleting the topic deletes every chunk with it.
    assert (cluster.nodes[1].data_dir / "timed-0@0").is_dir()
    admin = AdminClient({"bootstrap.servers": n1.bootstrap})
    admin.delete_topics(["timed"], operation_timeout=30)["timed"].result(30)
    wait_until(lambda: not any(path.name.startswith("timed-") for node in cluster.brokers
                               for path in node.data_dir.iterdir()), 20,
               "every chunk of timed deleted")


CLI = [sys.executable, "-m", "kafka_ext"]
LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-chunks.sh"


def run(command: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)


def describe_until(node: Node, topic: str, wanted: list[str], timeout_s: float = 20) -> list[str]:
    """`topics --describe` lines once they hold every line of `wanted`."""
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        described = run(CLI + ["topics", "--describe", "--topic", topic,
                               "--bootstrap-server", node.bootstrap])
        assert described.returncode == 0, described.stderr
        assert "WARNING" not in described.stderr, described.stderr
        lines = described.stdout.splitlines()
        if all(line in lines for line in wanted):
            return lines
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout_s}s: {wanted} in {lines}")


def test_the_chunk_tool_creates_and_alters_and_describe_shows_chunks(
        cluster: Cluster, tmp_path: Path) -> None:
    """`kafka-ext chunks` (the proposal's kafka-chunks.sh) and the chunk lines of `kafka-ext
    topics --describe`: create routed to each partition's leader through a bootstrap broker
    that leads neither, then alter through another."""
    n1, n2, n3 = cluster.brokers
    admin = AdminClient({"bootstrap.servers": n1.bootstrap})
    admin.create_topics([NewTopic("orders", 2, replica_assignment=[[1, 2], [2, 3]])],
                        operation_timeout=30)["orders"].result(30)
    wait_until(lambda: {p: s[0] for p, s in partition_state(n3, "orders").items()}
               == {0: 1, 1: 2}, 20, "orders-0 led by 1, orders-1 by 2")
    producer = Producer({"bootstrap.servers": n1.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("orders", f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    # create through broker 3, which leads neither partition: orders-0 goes to broker 1 and
    # gets a chunk; orders-1 goes to broker 2 and is refused (2 replicas, 1 given).
    create = tmp_path / "create.json"
    create.write_text(json.dumps({"partitions": [
        {"topic": "orders", "partition": 0, "replicas": [2, 3]},
        {"topic": "orders", "partition": 1, "replicas": [1]}]}))
    created = run([str(LAUNCHER), "create", "--bootstrap-server", n3.bootstrap,
                   "--create-chunk-json-file", str(create)])
    assert created.returncode == 1, created.stdout + created.stderr
    assert created.stdout == "Created a chunk of orders-0 on brokers [2, 3]\n", created.stderr
    assert created.stderr.startswith(
        "Failed to create a chunk of orders-1: INVALID_CHUNK_ASSIGNMENT: "), created.stderr

    lines = describe_until(n3, "orders", [
        "\tTopic: orders\tPartition: 0\tLeader: 2\tReplicas: 2,3\tIsr: 2,3\tElr: "
        "\tLastKnownElr: ",
        "\t\tChunk: inactive\tStartOffset: 0\tStopOffset: 9\tEndOffset: 9\tReplicas: 1,2"
        "\tIsr: 1,2",
        "\t\tChunk: active\tStartOffset: 10"])
    assert len(lines) == 5 and lines[4].startswith("\tTopic: orders\tPartition: 1\tLeader: 2\t")

    # alter through broker 2 (forwarded to the controller): the chunk moves from 1,2 to 3,1;
    # broker 3 copies it, then broker 2 lets its copy go.
    alter = tmp_path / "alter.json"
    alter.write_text(json.dumps({"chunks": [
        {"topic": "orders", "partition": 0, "startOffset": 0, "replicas": [3, 1],
         "chunkEpoch": 0}]}))
    altered = run(CLI + ["chunks", "alter", "--bootstrap-server", n2.bootstrap,
                         "--alter-chunk-json-file", str(alter)])
    assert altered.returncode == 0, altered.stdout + altered.stderr
    assert altered.stdout.splitlines()[0] == (
        "Started moving the chunk of orders-0 starting at offset 0 to brokers [3, 1]")
    describe_until(n1, "orders", [
        "\t\tChunk: inactive\tStartOffset: 0\tStopOffset: 9\tEndOffset: 9\tReplicas: 3,1"
        "\tIsr: 1,3",
        "\t\tChunk: active\tStartOffset: 10"])

    # The same epoch again is stale now: refused, exit 1, nothing printed on stdout.
    again = run(CLI + ["chunks", "alter", "--bootstrap-server", n2.bootstrap,
                       "--alter-chunk-json-file", str(alter)])
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.startswith("Failed to move the chunk of orders-0 starting at offset 0: "
                                   "INVALID_CHUNK_ASSIGNMENT: chunk epoch 0 given"), again.stderr


def test_a_reader_goes_on_when_the_chunk_replica_it_reads_is_killed(cluster: Cluster) -> None:
    """A chunk with two replicas: kill -9 the one a consumer was sent to, mid-read; the
    consumer ends up on the other and reads every record once, in order."""
    n1, n2, n3 = cluster.brokers
    admin = AdminClient({"bootstrap.servers": n1.bootstrap})
    admin.create_topics([NewTopic("sturdy", 1, replica_assignment=[[1, 2]])],
                        operation_timeout=30)["sturdy"].result(30)
    wait_until(lambda: partition_state(n3, "sturdy").get(0, (-1,))[0] == 1, 20, "sturdy led")
    values = [f"s{i:05d}".encode() * 100 for i in range(2000)]
    _produce(n1, "sturdy", values, **{"batch.size": 16_384})  # ~25 records a batch
    assert create_chunk(n1, "sturdy", 0, [2, 3]) == (0, None)
    wait_until(lambda: chunks_of(n3, "sturdy", 0)[0] == 2000, 10, "the chunk everywhere")
    _, [chunk] = chunks_of(n3, "sturdy", 0)
    # Where the leader sends readers: both replicas live, no rack.
    reading = sorted(chunk.isr_nodes)[zlib.crc32(b"sturdy-0@0") % 2]
    consumer = Consumer({"bootstrap.servers": n3.bootstrap, "group.id": "sturdy",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         # Small fetches and a small prefetch queue: most of the chunk is
                         # still to be fetched when its replica dies.
                         "fetch.max.bytes": 20_000, "max.partition.fetch.bytes": 20_000,
                         "message.max.bytes": 20_000, "queued.max.messages.kbytes": 64,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.assign([TopicPartition("sturdy", 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    killed = False
    deadline = time.monotonic() + 90
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            for message in consumer.consume(50, 0.5):
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
            if not killed and len(got) >= 300:
                cluster.nodes[reading].kill()
                killed = True
    finally:
        consumer.close()
        if killed:
            cluster.nodes[reading].start()
            cluster.nodes[reading].wait_ready()
    assert killed
    assert got == list(enumerate(values))


def test_a_controller_killed_during_create_chunks_applies_all_of_it_or_none(
        cluster: Cluster) -> None:
    """kill -9 of the active controller while a CreateChunks is on its way: afterwards every
    node shows either the chunk closed and the partition on its new replica, or neither."""
    controller = cluster.wait_for_leader(cluster.brokers)
    leader, target = [n for n in sorted(cluster.nodes) if n != controller]
    _create_topic_on(cluster.nodes[leader], "atomic", leader)
    _produce(cluster.nodes[leader], "atomic", [f"x{i}".encode() for i in range(10)])
    outcome: list[tuple[int, str]] = []
    sender = threading.Thread(target=lambda: outcome.append(
        create_chunk(cluster.nodes[leader], "atomic", 0, [target])))
    sender.start()
    time.sleep(0.005)
    cluster.nodes[controller].kill()
    survivors = [n for n in cluster.brokers if n.node_id != controller]
    try:
        cluster.wait_for_leader(survivors, not_=controller)
        sender.join(60)
        assert outcome and outcome[0][0] in (0, ErrorCode.REQUEST_TIMED_OUT), outcome
    finally:
        cluster.nodes[controller].start()
        cluster.nodes[controller].wait_ready()

    def state(node: Node) -> tuple[int, list[Any], int]:
        start, chunks = chunks_of(node, "atomic", 0)
        return start, [(c.start_offset, c.stop_offset, c.replica_nodes) for c in chunks], \
            partition_state(node, "atomic")[0][0]

    whole = (10, [(0, 9, [leader])], target)
    none = (-1, [], leader)
    wait_until(lambda: len({str(state(n)) for n in cluster.brokers}) == 1, 20,
               "every node agrees")
    assert state(cluster.nodes[leader]) in (whole, none)
    if outcome[0][0] == 0:
        assert state(cluster.nodes[leader]) == whole
    assert _consume(cluster.nodes[target], "atomic", 10) == [
        (i, f"x{i}".encode()) for i in range(10)]


def test_our_client_reads_inactive_chunks_from_their_replicas(cluster: Cluster) -> None:
    """Our consumer picks a chunk's replica from the metadata (no redirect, no relay) and
    seeks into inactive chunks by offset and by time."""
    from kafka_ext.client import Consumer as OurConsumer
    from kafka_ext.client import TopicPartition as OurTopicPartition

    n1, n2, n3 = cluster.brokers
    _create_topic_on(n1, "ours", 1)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": n1.bootstrap, "acks": "all"})
    for i in range(30):
        if i in (10, 20):
            assert producer.flush(30) == 0
            brokers = [2] if i == 10 else [3]
            leader = cluster.nodes[1 if i == 10 else 2]
            assert create_chunk(leader, "ours", 0, brokers) == (0, None)
            wait_until(lambda brokers=brokers: partition_state(n1, "ours")[0][0] == brokers[0],
                       10, "the new leader")
            producer = Producer({"bootstrap.servers": n1.bootstrap, "acks": "all"})
        producer.produce("ours", f"o{i}".encode(), partition=0, timestamp=base + 10 * i)
    assert producer.flush(30) == 0
    tp = OurTopicPartition("ours", 0)

    async def read() -> tuple[list[tuple[int, bytes]], list[int], int]:
        async with OurConsumer(n3.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 30
            while len(got) < 30 and time.monotonic() < deadline:
                got += [(r.offset, r.value) for r in await consumer.poll(500)]
            metadata = consumer._client.metadata
            nodes = [metadata.read_node_of(tp, offset) for offset in (0, 15, 25)]
            await consumer.seek_to_time(tp, base + 125)
            position = await consumer.position(tp)
        return got, nodes, position

    got, nodes, position = asyncio.run(read())
    assert got == [(i, f"o{i}".encode()) for i in range(30)]
    assert nodes == [1, 2, 3]  # the first chunk on 1, the second on 2, the active one led by 3
    assert position == 13
