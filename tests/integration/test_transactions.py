"""Transactions with stock clients against the real broker process.

confluent-kafka (librdkafka) transactional producers and read_committed consumers: commit and
abort visibility, fencing by a second producer with the same transactional.id, offsets sent to
a transaction, the broker aborting a transaction left open past its timeout, exactly-once
consume-transform-produce across a broker kill -9, and the admin view through kafka-python's
DescribeTransactions and ListTransactions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaException, TopicPartition
from kafka.admin import KafkaAdminClient

from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    confluent_consumer,
    create_topic,
    new_topic_name,
    wait_until,
)

READ_COMMITTED = {"isolation.level": "read_committed"}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
EOS_RECORDS = 1500


def _transactional_producer(bootstrap: str, transactional_id: str,
                            **config: Any) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": transactional_id,
                                         "linger.ms": 5, **config})
    producer.init_transactions(30)
    return producer


def _produce_all(producer: confluent_kafka.Producer, topic: str, values: list[bytes],
                 partition: int = 0) -> None:
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def _values_until(bootstrap: str, topic: str, last: bytes, config: dict[str, str],
                  partitions: int = 1) -> list[bytes]:
    """Every value of `topic` read from the start until `last` has been read."""
    consumer = confluent_consumer(bootstrap, config)
    try:
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while last not in got:
            assert time.monotonic() < deadline, f"{last!r} never arrived; got {got[-5:]}"
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        return got
    finally:
        consumer.close()


def _all_values(bootstrap: str, topic: str, partitions: int, at_least: int) -> list[bytes]:
    """Every value a read_committed consumer sees until the end of every partition."""
    consumer = confluent_consumer(bootstrap, {**READ_COMMITTED, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        got: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < at_least or len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {len(got)} of {at_least}"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                got.append(msg.value())
        return got
    finally:
        consumer.close()


def _committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert tp.error is None, tp.error
        return int(tp.offset)
    finally:
        consumer.close()


def test_committed_transaction_is_visible_to_read_committed_consumers(broker: Any) -> None:
    topic = new_topic_name("txn-commit")
    create_topic(broker.bootstrap, topic)
    producer = _transactional_producer(broker.bootstrap, new_topic_name("tx"))
    values = [b"c%03d" % i for i in range(20)]
    producer.begin_transaction()
    _produce_all(producer, topic, values)
    producer.commit_transaction(30)
    assert _values_until(broker.bootstrap, topic, values[-1], READ_COMMITTED) == values


def test_aborted_transaction_is_hidden_from_read_committed_and_seen_by_read_uncommitted(
        broker: Any) -> None:
    topic = new_topic_name("txn-abort")
    create_topic(broker.bootstrap, topic)
    producer = _transactional_producer(broker.bootstrap, new_topic_name("tx"))
    aborted = [b"a%03d" % i for i in range(10)]
    committed = [b"k%03d" % i for i in range(10)]
    producer.begin_transaction()
    _produce_all(producer, topic, aborted)
    producer.abort_transaction(30)
    producer.begin_transaction()
    _produce_all(producer, topic, committed)
    producer.commit_transaction(30)
    assert _values_until(broker.bootstrap, topic, committed[-1], READ_COMMITTED) == committed
    assert _values_until(broker.bootstrap, topic, committed[-1], READ_UNCOMMITTED) == (
        aborted + committed)


def test_second_producer_with_the_same_transactional_id_fences_the_first(broker: Any) -> None:
    topic = new_topic_name("txn-fence")
    create_topic(broker.bootstrap, topic)
    transactional_id = new_topic_name("tx")
    first = _transactional_producer(broker.bootstrap, transactional_id)
    first.begin_transaction()
    _produce_all(first, topic, [b"zombie"])
    second = _transactional_producer(broker.bootstrap, transactional_id)
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    assert info.value.args[0].fatal(), info.value.args[0]
    second.begin_transaction()
    _produce_all(second, topic, [b"live"])
    second.commit_transaction(30)
    assert _values_until(broker.bootstrap, topic, b"live", READ_COMMITTED) == [b"live"]


def test_offsets_sent_to_a_transaction_are_committed_only_when_it_commits(
        broker: Any) -> None:
    topic = new_topic_name("txn-offsets")
    create_topic(broker.bootstrap, topic)
    group = new_topic_name("txn-group")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group, "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    producer = _transactional_producer(broker.bootstrap, new_topic_name("tx"))
    try:
        producer.begin_transaction()
        _produce_all(producer, topic, [b"x"])
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], metadata, 30)
        producer.abort_transaction(30)
        assert _committed_offset(broker.bootstrap, group, topic) < 0  # nothing committed
        producer.begin_transaction()
        _produce_all(producer, topic, [b"y"])
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], metadata, 30)
        producer.commit_transaction(30)
        assert _committed_offset(broker.bootstrap, group, topic) == 7
    finally:
        consumer.close()


def test_transaction_left_open_past_its_timeout_is_aborted_by_the_broker(
        broker_factory: Any) -> None:
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = new_topic_name("txn-timeout")
    create_topic(broker.bootstrap, topic)
    producer = _transactional_producer(broker.bootstrap, new_topic_name("tx"),
                                       **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    _produce_all(producer, topic, [b"open-1", b"open-2"])
    # A plain record after the open transaction: read_committed consumers reach it only once the
    # transaction is decided, i.e. once the broker has aborted it.
    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    _produce_all(plain, topic, [b"after"])
    assert _values_until(broker.bootstrap, topic, b"after", READ_COMMITTED) == [b"after"]
    assert _values_until(broker.bootstrap, topic, b"after", READ_UNCOMMITTED) == [
        b"open-1", b"open-2", b"after"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


def test_admin_describes_and_lists_transactions(broker: Any) -> None:
    topic = new_topic_name("txn-admin")
    create_topic(broker.bootstrap, topic, partitions=2)
    transactional_id = new_topic_name("tx")
    producer = _transactional_producer(broker.bootstrap, transactional_id,
                                       **{"transaction.timeout.ms": 45000})
    producer.begin_transaction()
    _produce_all(producer, topic, [b"v"], partition=1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert transactional_id in _listed(admin, "Ongoing")
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state.value == "Ongoing"
        assert described.transaction_timeout_ms == 45000
        assert described.producer_epoch == 0 and described.producer_id >= 0
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(topic, 1)}
        producer.commit_transaction(30)
        assert transactional_id not in _listed(admin, "Ongoing")
        assert transactional_id in _listed(admin, "CompleteCommit")
        done = admin.describe_transactions([transactional_id])[transactional_id]
        assert done.state.value == "CompleteCommit" and not done.topic_partitions
    finally:
        admin.close()


def _listed(admin: KafkaAdminClient, state: str) -> set[str]:
    """Transactional ids ListTransactions reports in `state`, over every broker."""
    return {listing.transactional_id
            for listings in admin.list_transactions(state_filters=[state]).values()
            for listing in listings}


@pytest.fixture
def copier_files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    progress = tmp_path / "copier-progress"
    progress.touch()
    yield progress, tmp_path / "copier.log"


def _progress(path: Path) -> int:
    lines = path.read_text().split()
    return int(lines[-1]) if lines else 0


def test_exactly_once_copy_survives_a_broker_kill(broker: Any,
                                                  copier_files: tuple[Path, Path]) -> None:
    progress, copier_log = copier_files
    source, sink = new_topic_name("eos-in"), new_topic_name("eos-out")
    create_topic(broker.bootstrap, source, partitions=3)
    create_topic(broker.bootstrap, sink, partitions=3)
    inputs = [b"in-%05d" % i for i in range(EOS_RECORDS)]
    loader = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i, value in enumerate(inputs):
        loader.produce(source, key=b"k%d" % i, value=value, partition=i % 3)
    assert loader.flush(30) == 0
    script = Path(__file__).with_name("eos_copier.py")
    with open(copier_log, "wb") as log_file:
        copier = subprocess.Popen(
            [sys.executable, str(script), broker.bootstrap, source, sink,
             new_topic_name("eos-group"), new_topic_name("eos-tx"), str(EOS_RECORDS),
             str(progress)], stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _progress(progress) >= EOS_RECORDS // 4 or copier.poll() is not None,
                   120, "the copier to get a quarter of the way")
        assert copier.poll() is None, "the copier finished before the broker could be killed"
        broker.kill()
        broker.start()
        assert copier.wait(timeout=200) == 0, copier_log.read_text()[-5000:]
    finally:
        if copier.poll() is None:
            copier.kill()
            copier.wait()
    got = _all_values(broker.bootstrap, sink, 3, EOS_RECORDS)
    expected = sorted(b"out-" + v for v in inputs)
    assert len(got) == len(expected), f"{len(got)} output records for {len(expected)} inputs"
    assert sorted(got) == expected
