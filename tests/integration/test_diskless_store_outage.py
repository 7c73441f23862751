"""Diskless topics when the S3 store fails (issue 7 points 6 and 8): produce during an outage
gets a retriable error and every acknowledged message is there exactly once after the store
comes back; a broker killed between an upload and its commit leaves an orphan object, which the
orphan scanner deletes.

The store is moto's S3 server behind tests/s3_server.py's proxy, which refuses connections
during the outage, or holds moto's answers back, while moto keeps its objects.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import build_batch, records_for
from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    by_partition,
    consume_confluent,
    create_topic,
    new_topic_name,
    wait_until,
)
from tests.s3_server import ProxyMode, S3Server

PARTITIONS = 3
API_PRODUCE = 0
ANSWER_TIMEOUT_S = 30.0
UPLOAD_FAILED = "diskless WAL upload of"  # WalWriter's warning for each failed object


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[S3Server]:
    with S3Server(tmp_path) as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)  # the broker subprocess inherits them
        yield server


def _raw_produce(bootstrap_port: int, topic: str, value: bytes) -> ErrorCode:
    cls = registry()["ProduceRequest"].cls
    batch = build_batch(records_for([value]))
    request = cls(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=0, records=batch)])])
    with socket.create_connection(("127.0.0.1", bootstrap_port), timeout=ANSWER_TIMEOUT_S) as sock:
        response = round_trip(sock, API_PRODUCE, 9, request)
    return ErrorCode(response.responses[0].partition_responses[0].error_code)


def test_unreachable_store_fails_produce_retriably_and_loses_nothing_acknowledged(
    broker_factory: Any, s3: S3Server
) -> None:
    broker = broker_factory({
        "diskless.storage.url": s3.url,
        "diskless.metadata.topic.num.partitions": "2",
        "diskless.wal.max.ms": "20",
    })
    topic = new_topic_name("diskless-outage")
    create_topic(broker.bootstrap, topic, PARTITIONS, {"diskless.enable": "true"})
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "retry.backoff.max.ms": 500,
    })
    acknowledged: list[tuple[int, int, bytes]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                errors.append(str(err))
            else:
                acknowledged.append((msg.partition(), msg.offset(), msg.value()))

    def send(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, value=b"m%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)

    send(0, 300)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0 and not errors
    with s3.unreachable():
        # A produce during the outage gets a retriable error, not a timeout...
        code = _raw_produce(broker.port, topic, b"refused")
        assert code == ErrorCode.KAFKA_STORAGE_ERROR and code.retriable
        # ...and a stock producer keeps retrying what it sends meanwhile.
        send(300, 300)
        wait_until(
            lambda: producer.poll(0.05) is not None and broker.log().count(UPLOAD_FAILED) >= 2,
            CONSUME_TIMEOUT_S,
            "the producer's batches to meet the outage",
        )
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert not errors, errors[:5]
    assert len(acknowledged) == 600
    consumed = consume_confluent(
        broker.bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, 600
    )
    got = {p: [(m.offset, m.value) for m in ms] for p, ms in by_partition(consumed).items()}
    expected = {
        p: sorted((offset, value) for part, offset, value in acknowledged if part == p)
        for p in range(PARTITIONS)
    }
    assert got == expected  # each acknowledged message exactly once, at its acknowledged offset
    assert sorted(v for _, _, v in acknowledged) == sorted(b"m%d" % i for i in range(600))


def test_an_object_uploaded_but_never_committed_is_deleted_by_the_orphan_scanner(
    broker_factory: Any, s3: S3Server
) -> None:
    overrides = {
        "diskless.storage.url": s3.url,
        "diskless.metadata.topic.num.partitions": "2",
        "diskless.wal.max.ms": "20",
        "diskless.coordinator.orphan.scan.interval.ms": "300",
        "diskless.coordinator.orphan.scan.grace.period.ms": "1000",
    }
    broker = broker_factory(overrides)
    topic = new_topic_name("diskless-orphan")
    create_topic(broker.bootstrap, topic, 1, {"diskless.enable": "true"})
    assert _raw_produce(broker.port, topic, b"kept") == ErrorCode.NONE
    committed = s3.count_objects_directly()
    assert committed == 1
    # The next upload reaches moto but its answer is held, so the broker never commits it:
    # killed now, it leaves exactly the object a crash between upload and commit leaves.
    s3.proxy.set_mode(ProxyMode.HOLD_RESPONSES)
    producing = threading.Thread(target=_produce_into_a_kill, args=(broker.port, topic),
                                 daemon=True)
    producing.start()
    wait_until(lambda: s3.count_objects_directly() == committed + 1, 30,
               "the second upload to reach moto")
    broker.kill()
    s3.proxy.set_mode(ProxyMode.FORWARD)
    broker.start()
    wait_until(lambda: s3.count_objects_directly() == committed, 30,
               "the orphan scanner to delete the uncommitted object")
    assert "orphan scan deleted 1 object" in broker.log()
    consumed = consume_confluent(broker.bootstrap, topic, {0: 0}, 1)
    assert [(m.offset, m.value) for m in consumed] == [(0, b"kept")]


def _produce_into_a_kill(port: int, topic: str) -> None:
    """A produce whose broker is killed before it answers: the connection just closes."""
    with contextlib.suppress(ConnectionError):
        _raw_produce(port, topic, b"orphan")
