"""`kafka-ext transactions` (kafka-transactions.sh, KIP-664) against a real broker: a
transactional producer killed with -9 inside a transaction leaves the partition's last stable
offset stuck; the tool lists, describes and finds it, and `abort` unblocks a read_committed
consumer without touching what was committed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ext.cli.transactions import OpenTransaction, hanging
from tests.integration.clients import create_topic, new_topic_name, wait_until
from tests.integration.conftest import BrokerProcess, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-transactions.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("txn-tool") / "data"))


def tool(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def table(done: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert done.returncode == 0, done.stderr
    # Each cell padded to its column, then a tab (Kafka's prettyPrintTable).
    assert all(line.endswith("\t") for line in done.stdout.splitlines())
    return [[cell.rstrip() for cell in line.split("\t")[:-1]]
            for line in done.stdout.splitlines()]


def last_stable_offset(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                         "isolation.level": "read_committed"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def read_committed(broker: BrokerProcess, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": new_topic_name("rc"),
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.value() for m in consumer.consume(100, 0.5)
                                      if m.error() is None) or len(got) >= expected, 30,
                   f"{expected} committed records")
    finally:
        consumer.close()
    return got


HANGING_PRODUCER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3],
                         "transaction.timeout.ms": 600000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(sys.argv[2], value=b"open-%d" % i, partition=0)
    producer.flush(30)
    print("ready", flush=True)
    time.sleep(600)
""")


def test_a_transaction_killed_with_9_is_found_and_aborted(broker: BrokerProcess) -> None:
    topic, txn_id = new_topic_name("stuck"), new_topic_name("stuck-txn")
    create_topic(broker.bootstrap, topic)
    committed = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id + "-ok"})
    committed.init_transactions(30)
    committed.begin_transaction()
    for i in range(10):
        committed.produce(topic, value=b"committed-%d" % i, partition=0)
    committed.commit_transaction(30)
    proc = subprocess.Popen([sys.executable, "-c", HANGING_PRODUCER, broker.bootstrap, topic,
                             txn_id], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.kill()
    proc.wait()
    # The first open record is at 11 (the commit marker took 10): read_committed stops there.
    wait_until(lambda: last_stable_offset(broker, topic) == 11, 20, "the LSO stuck at 11")

    listed = {row[0]: row for row in table(tool(broker, "list"))[1:]}
    assert listed[txn_id][2:] == [listed[txn_id][2], "Ongoing"]
    [header, row] = table(tool(broker, "describe", "--transactional-id", txn_id))
    assert header[0] == "CoordinatorId" and row[1] == txn_id and row[4] == "Ongoing"
    assert row[8] == f"{topic}-0"
    producers = table(tool(broker, "describe-producers", "--topic", topic, "--partition", "0"))
    assert producers[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                            "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
    assert [p[5] for p in producers[1:]].count("11") == 1
    # Its coordinator holds the partition in the transaction: not hanging (Kafka's rule; the
    # coordinator ends it at its timeout), however old.
    found = table(tool(broker, "find-hanging", "--topic", topic,
                       "--max-transaction-timeout", "0"))
    assert found == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                      "StartOffset", "LastTimestamp", "Duration(min)"]]

    aborted = tool(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "11")
    assert (aborted.returncode, aborted.stdout) == (0, ""), aborted.stderr
    wait_until(lambda: last_stable_offset(broker, topic) == 17, 20, "the LSO past the abort")
    assert read_committed(broker, topic, 10) == [b"committed-%d" % i for i in range(10)]
    again = tool(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "11")
    assert again.returncode == 1
    assert again.stderr == (f"Could not find any open transactions starting at offset 11 on "
                            f"partition {topic}-0\n")


def test_refusals_are_kafkas(broker: BrokerProcess) -> None:
    scope = tool(broker, "find-hanging")
    assert scope.returncode == 1 and "requires either --topic or --broker-id" in scope.stderr
    alone = tool(broker, "find-hanging", "--broker-id", "1", "--partition", "0")
    assert alone.stderr == "The --partition argument requires --topic to be provided\n"
    unknown = tool(broker, "describe", "--transactional-id", "nobody")
    assert unknown.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.stderr
    which = tool(broker, "abort", "--topic", "t", "--partition", "0")
    assert "must be identified either with --start-offset" in which.stderr


def test_the_hanging_rule() -> None:
    """Hanging: no transactional id for the producer, an id its coordinator does not know, or a
    transaction there that does not hold the partition."""
    from types import SimpleNamespace

    def open_at(topic: str, producer_id: int) -> OpenTransaction:
        return OpenTransaction(topic, 0, producer_id, 0, 0, 5, 0)

    state = SimpleNamespace(topics=[SimpleNamespace(topic="a", partitions=[0])])
    candidates = [open_at("a", 1), open_at("b", 1), open_at("a", 2), open_at("a", 3)]
    assert hanging(candidates, {1: "t1", 3: "t3"}, {"t1": (1, state), "t3": None}) == [
        open_at("b", 1), open_at("a", 2), open_at("a", 3)]
