"""Diskless topics (KIP-1150/1163/1164) against the real broker process and stock clients.

Every test runs with the local object store (a directory) and with an S3 server on loopback
(moto's). The broker runs three Diskless coordinators, so a 6-partition topic is spread over
several of them and each WAL object is committed to several coordinators.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch, decode_all_batches, records_for
from tests.integration.clients import (
    ADMIN_TIMEOUT_S,
    CONSUME_TIMEOUT_S,
    PRODUCERS,
    by_partition,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    dense_offsets,
    expected_messages,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)
from tests.s3_server import S3Server

DISKLESS = {"diskless.enable": "true"}
COORDINATORS = 3
API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
ANSWER_TIMEOUT_S = 30.0
TIMESTAMP_MS = 1_700_000_000_000
FILE_COMMITTED_KEY = (102).to_bytes(2, "big")


# -- the broker under test, on either store -----------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def store(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Broker overrides selecting the object store; S3 is a moto server on loopback."""
    if request.param == "local":
        yield {}
        return
    with S3Server() as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        yield {"diskless.storage.url": server.url}


@pytest.fixture
def diskless_broker(broker_factory: Any, store: dict[str, str]) -> Any:
    return broker_factory({**_BASE_OVERRIDES, **store})


_BASE_OVERRIDES = {
    "diskless.metadata.topic.num.partitions": str(COORDINATORS),
    "diskless.wal.max.ms": "20",
    "diskless.file.deletion.grace.ms": "0",
    "log.retention.check.interval.ms": "200",
}


def _local_objects(broker: Any) -> list[Path]:
    return sorted(p for p in (broker.data_dir / "objects").rglob("*") if p.is_file())


# -- raw protocol -------------------------------------------------------------------------------


def _round_trip(broker: Any, api_key: int, version: int, body: Any) -> Any:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S) as sock:
        return round_trip(sock, api_key, version, body)


def _answer(broker: Any, api_key: int, version: int, body: Any, error_of: Any) -> Any:
    """The first answer whose error is not retriable, as a client's retries would get it: right
    after a start the coordinators are still loading their logs."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        response = _round_trip(broker, api_key, version, body)
        code = ErrorCode(error_of(response))
        if not code.retriable or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _batch(producer_id: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch(records_for(values, timestamp_ms=TIMESTAMP_MS), producer_id=producer_id,
                       producer_epoch=0, base_sequence=seq)


def _produce(broker: Any, topic: str, batch: bytes, partition: int = 0) -> tuple[ErrorCode, int]:
    cls = registry()["ProduceRequest"].cls
    request = cls(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=partition, records=batch)])])
    response = _answer(broker, API_PRODUCE, 9, request,
                       lambda r: r.responses[0].partition_responses[0].error_code)
    [part] = response.responses[0].partition_responses
    return ErrorCode(part.error_code), part.base_offset


def _fetch_values(broker: Any, topic: str, partition: int = 0,
                  offset: int = 0) -> list[tuple[int, bytes | None]]:
    cls = registry()["FetchRequest"].cls
    request = cls(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24,
                  isolation_level=0, session_id=0, session_epoch=-1,
                  topics=[cls.FetchTopic(topic=topic, partitions=[cls.FetchPartition(
                      partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                      log_start_offset=-1, partition_max_bytes=1 << 24)])],
                  forgotten_topics_data=[], rack_id="")
    [part] = _answer(broker, API_FETCH, 11, request,
                     lambda r: r.responses[0].partitions[0].error_code).responses[0].partitions
    assert part.error_code == 0, ErrorCode(part.error_code)
    data = b"".join(bytes(r) for r in part.records) if isinstance(part.records, list) \
        else bytes(part.records or b"")
    return [(record.offset, record.value) for _, records in decode_all_batches(data)
            for record in records]


def _list_offset(broker: Any, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    cls = registry()["ListOffsetsRequest"].cls
    request = cls(replica_id=-1, isolation_level=0, topics=[cls.ListOffsetsTopic(
        name=topic, partitions=[cls.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
    [part] = _answer(broker, API_LIST_OFFSETS, 7, request,
                     lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions
    assert part.error_code == 0, ErrorCode(part.error_code)
    return part.offset, part.timestamp


def _list_offsets_v0(broker: Any, topic: str, timestamp: int) -> list[int]:
    """ListOffsets v0 of partition 0: a diskless partition has no segments, so one offset."""
    cls = registry()["ListOffsetsRequest"].cls
    request = cls(replica_id=-1, topics=[cls.ListOffsetsTopic(name=topic, partitions=[
        cls.ListOffsetsPartition(partition_index=0, timestamp=timestamp, max_num_offsets=10)])])
    [part] = _answer(broker, API_LIST_OFFSETS, 0, request,
                     lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions
    assert part.error_code == 0, ErrorCode(part.error_code)
    return list(part.old_style_offsets)


def _producer_id() -> int:
    return random.randrange(1_000_000, 1 << 40)


def _send_all(producer: confluent_kafka.Producer, topic: str, first: int, count: int,
              partitions: int, errors: list[str]) -> None:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(first, first + count):
        while True:
            try:
                producer.produce(topic, value=b"m%d" % i, partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)


def _values_by_partition(broker: Any, topic: str, partitions: int,
                         count: int) -> dict[int, list[bytes]]:
    got = consume_confluent(broker.bootstrap, topic,
                            {p: confluent_kafka.OFFSET_BEGINNING for p in range(partitions)},
                            count)
    values: dict[int, list[bytes]] = {}
    for message in got:
        values.setdefault(message.partition, []).append(message.value or b"")
    return values


def _expected_values(count: int, partitions: int) -> dict[int, list[bytes]]:
    return {p: [b"m%d" % i for i in range(p, count, partitions)] for p in range(partitions)}


# -- tests --------------------------------------------------------------------------------------


def test_stock_clients_produce_and_consume_10000_messages_over_6_partitions(
        diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless")
    create_topic(broker.bootstrap, topic, 6, DISKLESS)
    records = make_records(10_000, partitions=6)
    offsets = produce_confluent(broker.bootstrap, topic, records, {"enable.idempotence": True})
    assert offsets == dense_offsets(records)
    expected = by_partition(expected_messages(records, offsets))
    start = {p: 0 for p in range(6)}
    assert by_partition(consume_confluent(broker.bootstrap, topic, start, 10_000)) == expected
    assert by_partition(consume_kafka_python(broker.bootstrap, topic, start, 10_000)) == expected
    assert by_partition(consume_aiokafka(broker.bootstrap, topic, start, 10_000)) == expected
    # No segment files: the data is in WAL objects, committed to several coordinators.
    assert not any((broker.data_dir / f"{topic}-{p}").exists() for p in range(6))
    assert len(_coordinators_with_batches(broker)) >= 2


@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_other_stock_producers_write_to_a_diskless_topic(broker_factory: Any,
                                                         library: str) -> None:
    broker = broker_factory(_BASE_OVERRIDES)
    topic = new_topic_name("diskless-producers")
    create_topic(broker.bootstrap, topic, 3, DISKLESS)
    records = make_records(600, partitions=3)
    offsets = PRODUCERS[library](broker.bootstrap, topic, records)
    assert offsets == dense_offsets(records)
    got = consume_confluent(broker.bootstrap, topic, {p: 0 for p in range(3)}, 600)
    assert by_partition(got) == by_partition(expected_messages(records, offsets))


def test_list_offsets_by_time_and_the_watermarks_come_from_the_coordinator(
        diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-offsets")
    create_topic(broker.bootstrap, topic, 1, DISKLESS)
    pid = _producer_id()
    for n in range(5):
        batch = build_batch(records_for([b"v%d" % n], timestamp_ms=TIMESTAMP_MS + 1000 * n),
                            producer_id=pid, producer_epoch=0, base_sequence=n)
        assert _produce(broker, topic, batch) == (ErrorCode.NONE, n)
    assert _list_offset(broker, topic, 0, -2)[0] == 0
    assert _list_offset(broker, topic, 0, -1)[0] == 5
    assert _list_offset(broker, topic, 0, TIMESTAMP_MS + 2500) == (3, TIMESTAMP_MS + 3000)
    assert _list_offset(broker, topic, 0, -3) == (4, TIMESTAMP_MS + 4000)
    assert _list_offset(broker, topic, 0, TIMESTAMP_MS + 99_000)[0] == -1
    # Inside one batch the answer is a record's offset, as Kafka gives, not the batch's.
    records = [Record(i, TIMESTAMP_MS + 10_000 + step, None, value)
               for i, (step, value) in enumerate([(0, b"x"), (20, b"y"), (10, b"z")])]
    batch = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=5)
    assert _produce(broker, topic, batch) == (ErrorCode.NONE, 5)
    assert _list_offset(broker, topic, 0, TIMESTAMP_MS + 10_005) == (6, TIMESTAMP_MS + 10_020)
    assert _list_offset(broker, topic, 0, -3) == (6, TIMESTAMP_MS + 10_020)
    assert _list_offsets_v0(broker, topic, -1) == [8]
    assert _list_offsets_v0(broker, topic, -2) == [0]


def test_a_resent_idempotent_batch_gets_its_original_offset_and_is_stored_once(
        diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-idem")
    create_topic(broker.bootstrap, topic, 1, DISKLESS)
    pid = _producer_id()
    first = _batch(pid, 0, [b"a", b"b", b"c"])
    assert _produce(broker, topic, first) == (ErrorCode.NONE, 0)
    assert _produce(broker, topic, _batch(pid, 3, [b"d"])) == (ErrorCode.NONE, 3)
    assert _produce(broker, topic, first) == (ErrorCode.NONE, 0)  # the retry of a lost answer
    assert _produce(broker, topic, _batch(pid, 9, [b"gap"]))[0] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _fetch_values(broker, topic) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    broker.kill()
    broker.start()
    # After kill -9 the coordinator still knows the producer's last batches.
    assert _produce(broker, topic, _batch(pid, 3, [b"d"])) == (ErrorCode.NONE, 3)
    assert _produce(broker, topic, _batch(pid, 4, [b"e"])) == (ErrorCode.NONE, 4)


def test_kill_9_mid_produce_keeps_every_acknowledged_message_once(diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-kill")
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions, DISKLESS)
    per_round = 3_000
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.num.messages": 200, "reconnect.backoff.max.ms": 200,
    })
    errors: list[str] = []
    _send_all(producer, topic, 0, per_round, partitions, errors)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    # What is in flight when the broker dies may be committed without an answer: the
    # producer retries it after the restart and the coordinator recognises the duplicate.
    _send_all(producer, topic, per_round, per_round, partitions, errors)
    broker.kill()
    broker.start()
    _send_all(producer, topic, 2 * per_round, per_round, partitions, errors)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert not errors, errors[:5]
    count = 3 * per_round
    assert _values_by_partition(broker, topic, partitions, count) == \
        _expected_values(count, partitions)


def test_sqlite_state_dropped_is_rebuilt_from_the_metadata_log(diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-rebuild")
    create_topic(broker.bootstrap, topic, 6, DISKLESS)
    records = make_records(3_000, partitions=6)
    offsets = produce_confluent(broker.bootstrap, topic, records, {"enable.idempotence": True})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deleted = admin.delete_records([confluent_kafka.TopicPartition(topic, 1, 100)])
    for future in deleted.values():
        future.result(timeout=ADMIN_TIMEOUT_S)

    def observe() -> tuple[Any, ...]:
        offsets_seen = [(_list_offset(broker, topic, p, -2), _list_offset(broker, topic, p, -1),
                         _list_offset(broker, topic, p, 1_600_000_000_000 + 600))
                        for p in range(6)]
        data = [_fetch_values(broker, topic, p, 100 if p == 1 else 0) for p in range(6)]
        return tuple(offsets_seen), tuple(map(tuple, data))

    before = observe()
    assert before[0][1][0] == (100, -1)  # DeleteRecords moved partition 1's start
    broker.stop()
    state_dir = broker.data_dir / "diskless"
    removed = [p for p in state_dir.glob("*.sqlite*") if p.is_file()]
    assert removed, "no SQLite state to drop"
    for path in removed:
        path.unlink()
    snapshots = state_dir / "snapshots"
    if snapshots.exists():
        shutil.rmtree(snapshots)
    broker.start()
    assert observe() == before
    expected = by_partition(expected_messages(records, offsets))
    expected[1] = [m for m in expected[1] if m.offset >= 100]
    start = {p: (100 if p == 1 else 0) for p in range(6)}
    assert by_partition(consume_confluent(broker.bootstrap, topic, start,
                                          3_000 - 100)) == expected


def test_snapshots_prune_the_metadata_log_and_restore_a_dropped_database(
        broker_factory: Any, store: dict[str, str]) -> None:
    broker = broker_factory({**_BASE_OVERRIDES, **store,
                             "diskless.metadata.topic.num.partitions": "1",
                             "diskless.metadata.snapshot.interval.records": "20"})
    topic = new_topic_name("diskless-snapshot")
    create_topic(broker.bootstrap, topic, 2, DISKLESS)
    pid = _producer_id()
    for n in range(60):  # one commit (one record) per batch; sequences count per partition
        assert _produce(broker, topic, _batch(pid, n // 2, [b"v%d" % n]), partition=n % 2) == \
            (ErrorCode.NONE, n // 2)
    # The coordinator snapshotted its SQLite state and moved its log's start past it.
    wait_until(lambda: _list_offset(broker, "__diskless_metadata", 0, -2)[0] > 0, 30,
               "the __diskless_metadata log pruned after a snapshot")
    before = [_fetch_values(broker, topic, p) for p in range(2)]
    assert before == [[(i, b"v%d" % (2 * i + p)) for i in range(30)] for p in range(2)]
    broker.stop()
    for path in (broker.data_dir / "diskless").glob("*.sqlite*"):
        path.unlink()  # the database only: the snapshot and the log's tail rebuild it
    broker.start()
    assert [_fetch_values(broker, topic, p) for p in range(2)] == before
    assert _produce(broker, topic, _batch(pid, 30, [b"v60"])) == (ErrorCode.NONE, 30)
    assert _produce(broker, topic, _batch(pid, 29, [b"v58"])) == (ErrorCode.NONE, 29)  # a dup


def test_deleting_a_topic_frees_its_objects(diskless_broker: Any, store: dict[str, str]) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-delete")
    create_topic(broker.bootstrap, topic, 2, DISKLESS)
    produce_confluent(broker.bootstrap, topic, make_records(500, partitions=2))
    assert _object_count(broker, store) > 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(
        timeout=ADMIN_TIMEOUT_S)
    wait_until(lambda: _object_count(broker, store) == 0, 30, "the topic's objects deleted")


def test_retention_deletes_old_batches_and_their_objects(diskless_broker: Any,
                                                         store: dict[str, str]) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-retention")
    create_topic(broker.bootstrap, topic, 1, {**DISKLESS, "retention.ms": "1000"})
    pid = _producer_id()
    for n in range(3):  # old timestamps: retention applies at once
        batch = build_batch(records_for([b"old%d" % n], timestamp_ms=TIMESTAMP_MS),
                            producer_id=pid, producer_epoch=0, base_sequence=n)
        assert _produce(broker, topic, batch) == (ErrorCode.NONE, n)
    wait_until(lambda: _list_offset(broker, topic, 0, -2)[0] == 3, 30, "log start moved to 3")
    assert _list_offset(broker, topic, 0, -1)[0] == 3
    wait_until(lambda: _object_count(broker, store) == 0, 30, "expired objects deleted")


def test_metadata_names_the_produce_gateways_of_diskless_partitions(diskless_broker: Any) -> None:
    broker = diskless_broker
    topic = new_topic_name("diskless-meta")
    create_topic(broker.bootstrap, topic, 2, DISKLESS)
    cls = registry()["MetadataRequest"].cls
    request = cls(topics=[cls.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False)
    response = _round_trip(broker, API_METADATA, 12, request)
    [found] = response.topics
    node_ids = [b.node_id for b in response.brokers]
    assert [p.preferred_produce_brokers for p in found.partitions] == [node_ids, node_ids]


def _object_count(broker: Any, store: dict[str, str]) -> int:
    if "diskless.storage.url" not in store:
        return len(_local_objects(broker))
    return S3Server.count_objects(store["diskless.storage.url"], dict(os.environ))


def _coordinators_with_batches(broker: Any) -> set[int]:
    """Coordinators (partitions of __diskless_metadata) whose log holds a committed file: a
    record keyed by DisklessFileCommittedRecord's type (102)."""
    found = set()
    for coordinator in range(COORDINATORS):
        directory = broker.data_dir / f"__diskless_metadata-{coordinator}"
        for segment in directory.glob("*.log"):
            for _, records in decode_all_batches(segment.read_bytes()):
                if any(r.key is not None and r.key[:2] == FILE_COMMITTED_KEY for r in records):
                    found.add(coordinator)
    return found
