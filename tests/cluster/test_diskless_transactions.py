"""Transactions on diskless topics on three nodes (issue 19 item 4), with stock clients.

Transactional producers write to a diskless topic through different brokers; their markers go
through the WAL and the partition's Diskless coordinator, which keeps the last stable offset and
the aborted transactions. read_committed consumers of confluent-kafka, kafka-python and aiokafka
must see exactly the committed records at their offsets, an open transaction must hold every
later record back, and read_uncommitted readers must see everything. ListOffsets and
DescribeProducers are answered by any broker from the coordinator's state.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_diskless_cluster import create_diskless_topic
from tests.cluster.test_replication import REPLICATION, partition_state
from tests.integration.clients import CONSUMERS, consume_confluent

TOPIC = "diskless-txn"
PARTITIONS = 2
_reg = registry()
_ListOffsets = _reg["ListOffsetsRequest"].cls
_DescribeProducers = _reg["DescribeProducersRequest"].cls
READ_COMMITTED_CONFIG = {
    "confluent": {"isolation.level": "read_committed"},
    "kafka-python": {"isolation_level": "read_committed"},
    "aiokafka": {"isolation_level": "read_committed"},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("diskless-txn")
    made = Cluster(root, combined=3, extra={
        **REPLICATION, "diskless.storage.url": f"file://{root / 'objects'}",
        "diskless.metadata.topic.num.partitions": "1",
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "3"})
    made.start()
    create_diskless_topic(made.brokers, TOPIC, PARTITIONS)
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


class TxnProducer:
    """A confluent-kafka transactional producer bootstrapped at one node, recording where each
    delivered value landed."""

    def __init__(self, node: Node, transactional_id: str) -> None:
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": node.bootstrap, "transactional.id": transactional_id,
            "linger.ms": 2})
        self.producer.init_transactions(30)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        assert err is None, err
        self.delivered[msg.value()] = (msg.partition(), msg.offset())

    def write(self, values: dict[int, list[bytes]]) -> None:
        """Begin a transaction and write `values` per partition; flushed, left open."""
        self.producer.begin_transaction()
        for partition, items in values.items():
            for value in items:
                self.producer.produce(TOPIC, value=value, partition=partition,
                                      on_delivery=self._on_delivery)
        assert self.producer.flush(30) == 0

    def commit(self) -> None:
        self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)


def _values(tag: str, count: int, partitions: int = PARTITIONS) -> dict[int, list[bytes]]:
    return {p: [f"{tag}-{p}-{i}".encode() for i in range(count)] for p in range(partitions)}


def _latest(node: Node, partition: int, isolation_level: int) -> int:
    request = _ListOffsets(replica_id=-1, isolation_level=isolation_level, topics=[
        _ListOffsets.ListOffsetsTopic(name=TOPIC, partitions=[
            _ListOffsets.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        answer = round_trip(sock, ApiKey.LIST_OFFSETS, 7, request)
    [part] = answer.topics[0].partitions
    assert part.error_code == 0, part
    return int(part.offset)


def _producers(node: Node, partition: int) -> dict[int, int]:
    """producer id -> first offset of its open transaction (-1: none), from DescribeProducers."""
    request = _DescribeProducers(topics=[_DescribeProducers.TopicRequest(
        name=TOPIC, partition_indexes=[partition])])
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=30) as sock:
        answer = round_trip(sock, ApiKey.DESCRIBE_PRODUCERS, 0, request)
    [part] = answer.topics[0].partitions
    assert part.error_code == 0, part
    return {p.producer_id: p.current_txn_start_offset for p in part.active_producers}


def _read(node: Node, client: str, expected: dict[int, list[tuple[int, bytes]]],
          config: dict[str, str]) -> dict[int, list[tuple[int, bytes]]]:
    """What `client` reads from the start of each partition, `expected`'s count of records."""
    messages = CONSUMERS[client](node.bootstrap, TOPIC, dict.fromkeys(expected, -2),
                                 sum(len(v) for v in expected.values()), config, timeout_s=30)
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
    for m in messages:
        assert m.value is not None
        got[m.partition].append((m.offset, m.value))
    return got


def _nothing_more(node: Node, after: dict[int, int]) -> None:
    """A read_committed confluent consumer finds nothing past `after` (partition -> offset)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": node.bootstrap, "group.id": "txn-probe",
        "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, o) for p, o in after.items()])
    try:
        extra = [m for m in consumer.consume(100, timeout=2.0) if m.error() is None]
    finally:
        consumer.close()
    assert extra == [], [(m.partition(), m.offset(), m.value()) for m in extra]


def test_read_committed_hides_aborted_and_open_transactions(cluster: Cluster) -> None:
    a, b, c = cluster.brokers
    first = TxnProducer(a, "diskless-txn-first")
    second = TxnProducer(b, "diskless-txn-second")
    committed_values: list[bytes] = []

    first.write(_values("t1", 5))
    first.commit()
    committed_values += [v for vs in _values("t1", 5).values() for v in vs]
    first.write(_values("t2-aborted", 4))
    first.abort()
    first.write(_values("t3", 3))
    first.commit()
    committed_values += [v for vs in _values("t3", 3).values() for v in vs]
    # An open transaction on partition 0, then a committed one after it.
    second.write({0: [b"open-0", b"open-1"]})
    first.write({0: [b"t4-0", b"t4-1"], 1: [b"t4-p1"]})
    first.commit()

    open_at = second.delivered[b"open-0"][1]
    stable = {p: [(first.delivered[v][1], v) for v in committed_values
                  if first.delivered[v][0] == p] for p in range(PARTITIONS)}
    stable[1].append((first.delivered[b"t4-p1"][1], b"t4-p1"))  # no open transaction there
    for p in stable:
        stable[p].sort()
    assert all(o < open_at for o, _ in stable[0])
    for client, config in READ_COMMITTED_CONFIG.items():
        assert _read(c, client, stable, config) == stable, client
    _nothing_more(a, {0: open_at})
    # Every broker answers the last stable offset and the open transaction's start.
    for node in (a, b, c):
        assert _latest(node, 0, 1) == open_at
        assert _latest(node, 0, 0) == first.delivered[b"t4-1"][1] + 2  # past its marker
        assert open_at in _producers(node, 0).values()

    second.commit()
    for value in (b"open-0", b"open-1"):
        stable[0].append((second.delivered[value][1], value))
    for value in (b"t4-0", b"t4-1"):
        stable[0].append((first.delivered[value][1], value))
    stable[0].sort()
    for client, config in READ_COMMITTED_CONFIG.items():
        assert _read(b, client, stable, config) == stable, client
    assert _latest(c, 0, 1) == _latest(c, 0, 0)
    assert all(start == -1 for start in _producers(c, 0).values())
    # read_uncommitted sees the aborted transaction too, at the offsets its acks gave.
    everything = {p: sorted([(o, v) for v, (q, o) in {**first.delivered,
                                                      **second.delivered}.items() if q == p])
                  for p in range(PARTITIONS)}
    assert _read(a, "confluent", everything, {"isolation.level": "read_uncommitted"}) == everything


def test_a_zombie_producer_is_fenced_on_a_diskless_partition(cluster: Cluster) -> None:
    """A second producer with the same transactional.id bumps the epoch: the first one's writes
    are refused, its open transaction is aborted and never visible to read_committed."""
    a, b, c = cluster.brokers
    zombie = TxnProducer(a, "diskless-txn-zombie")
    zombie.write({1: [b"zombie-0"]})
    successor = TxnProducer(b, "diskless-txn-zombie")  # aborts the zombie's transaction
    with pytest.raises(confluent_kafka.KafkaException):
        zombie.producer.produce(TOPIC, value=b"zombie-1", partition=1)
        zombie.producer.flush(10)
        zombie.commit()
    successor.write({1: [b"successor-0"]})
    successor.commit()
    lso = _latest(c, 1, 1)
    assert lso == _latest(c, 1, 0)
    at = successor.delivered[b"successor-0"][1]
    messages = consume_confluent(c.bootstrap, TOPIC, {1: at}, 1,
                                 {"isolation.level": "read_committed"}, timeout_s=30)
    assert [(m.offset, m.value) for m in messages] == [(at, b"successor-0")]
    zombie_at = zombie.delivered[b"zombie-0"][1]
    aborted = consume_confluent(c.bootstrap, TOPIC, {1: zombie_at}, 1,
                                {"isolation.level": "read_committed"}, timeout_s=30)
    assert aborted[0].value != b"zombie-0"
    wait_until(lambda: partition_state(c, "__diskless_metadata").get(0, (-1,))[0] >= 0, 10,
               "a coordinator leader")
