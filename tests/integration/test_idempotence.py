"""Idempotent and transactional produce against the real broker: duplicates, sequence and epoch
errors, state rebuilt after kill -9, the last stable offset, DescribeProducers.

Most tests speak the protocol with our own codec (raw Produce batches carrying a producer id we
pick, as a producer would after InitProducerId), so they check the broker's producer state
without depending on a coordinator. The stock-client test needs InitProducerId.
"""

from __future__ import annotations

import random
import socket
from typing import Any

import confluent_kafka

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import build_batch, decode_all_batches, records_for
from tests.integration.clients import (
    CONSUME_TIMEOUT_S,
    confluent_consumer,
    create_topic,
    new_topic_name,
    wait_until,
)

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_WRITE_TXN_MARKERS = 27
API_DESCRIBE_PRODUCERS = 61
PRODUCE_VERSION = 9
FETCH_VERSION = 11  # topic names, isolation level, aborted transactions
LIST_OFFSETS_VERSION = 7
ANSWER_TIMEOUT_S = 15.0
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
TIMESTAMP_MS = 1_700_000_000_000
TXN_ID = "idempotence-tests"  # Produce needs one for transactional batches; never checked here


# -- raw protocol ------------------------------------------------------------------------------


def _connect(broker: Any) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S)


def _round_trip(broker: Any, api_key: int, version: int, body: Any) -> Any:
    with _connect(broker) as sock:
        return round_trip(sock, api_key, version, body)


def _batch(producer_id: int, seq: int, values: list[bytes], *, epoch: int = 0,
           transactional: bool = False) -> bytes:
    return build_batch(records_for(values, timestamp_ms=TIMESTAMP_MS), producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def _produce(broker: Any, topic: str, batch: bytes,
             transactional_id: str | None = None) -> tuple[ErrorCode, int]:
    """(error, base offset) of one batch produced to partition 0 with acks=-1."""
    cls = registry()["ProduceRequest"].cls
    request = cls(transactional_id=transactional_id, acks=-1, timeout_ms=30000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=0, records=batch)])])
    response = _round_trip(broker, API_PRODUCE, PRODUCE_VERSION, request)
    [part] = response.responses[0].partition_responses
    return ErrorCode(part.error_code), part.base_offset


def _fetch(broker: Any, topic: str, isolation_level: int, offset: int = 0) -> Any:
    cls = registry()["FetchRequest"].cls
    request = cls(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                  isolation_level=isolation_level, session_id=0, session_epoch=-1,
                  topics=[cls.FetchTopic(topic=topic, partitions=[cls.FetchPartition(
                      partition=0, current_leader_epoch=-1, fetch_offset=offset,
                      log_start_offset=-1, partition_max_bytes=1 << 20)])],
                  forgotten_topics_data=[], rack_id="")
    response = _round_trip(broker, API_FETCH, FETCH_VERSION, request)
    [part] = response.responses[0].partitions
    assert part.error_code == 0
    return part


def _fetched_values(part: Any) -> list[tuple[int, bytes | None]]:
    data = bytes(part.records or b"")
    return [(record.offset, record.value) for header, records in decode_all_batches(data)
            if not header.is_control for record in records]


def _latest_offset(broker: Any, topic: str, isolation_level: int) -> int:
    cls = registry()["ListOffsetsRequest"].cls
    request = cls(replica_id=-1, isolation_level=isolation_level, topics=[cls.ListOffsetsTopic(
        name=topic, partitions=[cls.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    response = _round_trip(broker, API_LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
    [part] = response.topics[0].partitions
    assert part.error_code == 0
    return part.offset


def _producer_id() -> int:
    return random.randrange(1_000_000, 1 << 40)


# -- tests -------------------------------------------------------------------------------------


def test_resent_batch_gets_its_original_offset_and_is_stored_once(broker: Any) -> None:
    topic = new_topic_name("idem")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    first = _batch(pid, 0, [b"a", b"b", b"c"])
    assert _produce(broker, topic, first) == (ErrorCode.NONE, 0)
    assert _produce(broker, topic, _batch(pid, 3, [b"d"])) == (ErrorCode.NONE, 3)
    assert _produce(broker, topic, first) == (ErrorCode.NONE, 0)  # the retry of a lost answer
    values = _fetched_values(_fetch(broker, topic, READ_UNCOMMITTED))
    assert values == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_duplicates_are_recognised_after_kill_9_and_restart(broker: Any) -> None:
    topic = new_topic_name("idem-crash")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    batches = [_batch(pid, 2 * n, [b"%d" % (2 * n), b"%d" % (2 * n + 1)]) for n in range(4)]
    for n, batch in enumerate(batches):
        assert _produce(broker, topic, batch) == (ErrorCode.NONE, 2 * n)
    broker.kill()
    broker.start()
    # The producer retries its in-flight batches: all are answered with their first offsets.
    for n, batch in enumerate(batches):
        assert _produce(broker, topic, batch) == (ErrorCode.NONE, 2 * n)
    assert _produce(broker, topic, _batch(pid, 8, [b"8"])) == (ErrorCode.NONE, 8)
    values = _fetched_values(_fetch(broker, topic, READ_UNCOMMITTED))
    assert values == [(i, b"%d" % i) for i in range(9)]


def test_duplicates_are_recognised_after_a_clean_restart(broker: Any) -> None:
    topic = new_topic_name("idem-restart")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    last = _batch(pid, 5, [b"x"])
    assert _produce(broker, topic, _batch(pid, 0, [b"v"] * 5)) == (ErrorCode.NONE, 0)
    assert _produce(broker, topic, last) == (ErrorCode.NONE, 5)
    broker.restart()
    assert _produce(broker, topic, last) == (ErrorCode.NONE, 5)
    assert _latest_offset(broker, topic, READ_UNCOMMITTED) == 6


def test_sequence_gap_is_out_of_order_sequence_number(broker: Any) -> None:
    topic = new_topic_name("idem-gap")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    assert _produce(broker, topic, _batch(pid, 0, [b"a"])) == (ErrorCode.NONE, 0)
    error, offset = _produce(broker, topic, _batch(pid, 2, [b"c"]))
    assert (error, offset) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert _produce(broker, topic, _batch(pid, 1, [b"b"])) == (ErrorCode.NONE, 1)


def test_older_epoch_is_invalid_producer_epoch(broker: Any) -> None:
    topic = new_topic_name("idem-epoch")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    assert _produce(broker, topic, _batch(pid, 0, [b"a"], epoch=5)) == (ErrorCode.NONE, 0)
    error, _ = _produce(broker, topic, _batch(pid, 1, [b"b"], epoch=4))
    assert error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _latest_offset(broker, topic, READ_UNCOMMITTED) == 1


def test_open_transaction_holds_back_read_committed_readers(broker: Any) -> None:
    topic = new_topic_name("txn-lso")
    create_topic(broker.bootstrap, topic)
    plain, transactional = _producer_id(), _producer_id()
    assert _produce(broker, topic, _batch(plain, 0, [b"p0"])) == (ErrorCode.NONE, 0)
    txn = _batch(transactional, 0, [b"t1", b"t2"], transactional=True)
    assert _produce(broker, topic, txn, TXN_ID) == (ErrorCode.NONE, 1)
    assert _produce(broker, topic, _batch(plain, 1, [b"p3"])) == (ErrorCode.NONE, 3)
    committed = _fetch(broker, topic, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 1)
    assert _fetched_values(committed) == [(0, b"p0")]
    assert committed.aborted_transactions == []
    uncommitted = _fetch(broker, topic, READ_UNCOMMITTED)
    assert uncommitted.last_stable_offset == 1 and uncommitted.aborted_transactions is None
    assert [offset for offset, _ in _fetched_values(uncommitted)] == [0, 1, 2, 3]
    assert _latest_offset(broker, topic, READ_COMMITTED) == 1
    assert _latest_offset(broker, topic, READ_UNCOMMITTED) == 4
    # A plain batch from the producer whose transaction is open is refused.
    error, _ = _produce(broker, topic, _batch(transactional, 2, [b"t3"]))
    assert error == ErrorCode.INVALID_TXN_STATE


def test_transactional_batch_without_transactional_id_is_refused(broker: Any) -> None:
    topic = new_topic_name("txn-no-id")
    create_topic(broker.bootstrap, topic)
    error, _ = _produce(broker, topic, _batch(_producer_id(), 0, [b"t"], transactional=True))
    assert error == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _latest_offset(broker, topic, READ_UNCOMMITTED) == 0


def test_open_transaction_survives_kill_9(broker: Any) -> None:
    topic = new_topic_name("txn-crash")
    create_topic(broker.bootstrap, topic)
    pid = _producer_id()
    assert _produce(broker, topic, _batch(_producer_id(), 0, [b"a"])) == (ErrorCode.NONE, 0)
    txn = _batch(pid, 0, [b"t"], transactional=True)
    assert _produce(broker, topic, txn, TXN_ID) == (ErrorCode.NONE, 1)
    broker.kill()
    broker.start()
    assert _latest_offset(broker, topic, READ_COMMITTED) == 1


def _write_marker(broker: Any, topic: str, producer_id: int, *, committed: bool) -> None:
    cls = registry()["WriteTxnMarkersRequest"].cls
    request = cls(markers=[cls.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=0, transaction_result=committed,
        topics=[cls.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
        coordinator_epoch=0)])
    response = _round_trip(broker, API_WRITE_TXN_MARKERS, 1, request)
    [partition] = response.markers[0].topics[0].partitions
    assert partition.error_code == 0


def test_read_committed_fetch_skips_an_aborted_transaction(broker: Any) -> None:
    topic = new_topic_name("txn-abort")
    create_topic(broker.bootstrap, topic)
    aborted, committed = _producer_id(), _producer_id()
    _produce(broker, topic, _batch(aborted, 0, [b"x1", b"x2"], transactional=True), TXN_ID)  # 0-1
    _produce(broker, topic, _batch(committed, 0, [b"c1"], transactional=True), TXN_ID)  # 2
    _produce(broker, topic, _batch(aborted, 2, [b"x3"], transactional=True), TXN_ID)  # 3
    assert _latest_offset(broker, topic, READ_COMMITTED) == 0
    _write_marker(broker, topic, aborted, committed=False)  # 4
    assert _latest_offset(broker, topic, READ_COMMITTED) == 2  # the other one is still open
    _write_marker(broker, topic, committed, committed=True)  # 5
    assert _latest_offset(broker, topic, READ_COMMITTED) == 6
    part = _fetch(broker, topic, READ_COMMITTED)
    assert part.last_stable_offset == part.high_watermark == 6
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(aborted, 0)]
    # A stock read_committed consumer drops the aborted records and the markers; a plain
    # record written last tells it has read everything.
    assert _produce(broker, topic, build_batch(records_for([b"end"]))) == (ErrorCode.NONE, 6)
    consumer = confluent_consumer(broker.bootstrap, {"isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    values: list[tuple[int, bytes]] = []

    def caught_up() -> bool:
        for msg in consumer.consume(100, timeout=0.2):
            assert msg.error() is None, msg.error()
            values.append((msg.offset(), msg.value()))
        return bool(values) and values[-1][1] == b"end"

    try:
        wait_until(caught_up, CONSUME_TIMEOUT_S, "the last record")
    finally:
        consumer.close()
    assert values == [(2, b"c1"), (6, b"end")]


def test_describe_producers_lists_the_partitions_producers(broker: Any) -> None:
    topic = new_topic_name("describe-producers")
    create_topic(broker.bootstrap, topic)
    plain, transactional = _producer_id(), _producer_id()
    _produce(broker, topic, _batch(plain, 0, [b"a", b"b"], epoch=2))
    _produce(broker, topic, _batch(transactional, 0, [b"t"], transactional=True), TXN_ID)
    cls = registry()["DescribeProducersRequest"].cls
    request = cls(topics=[cls.TopicRequest(name=topic, partition_indexes=[0, 7])])
    response = _round_trip(broker, API_DESCRIBE_PRODUCERS, 0, request)
    [topic_response] = response.topics
    found, missing = sorted(topic_response.partitions, key=lambda p: p.partition_index)
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert found.error_code == 0
    producers = {p.producer_id: p for p in found.active_producers}
    assert (producers[plain].producer_epoch, producers[plain].last_sequence,
            producers[plain].current_txn_start_offset) == (2, 1, -1)
    assert producers[plain].last_timestamp == TIMESTAMP_MS
    assert producers[transactional].current_txn_start_offset == 2


def test_confluent_idempotent_producer_delivers_each_message_once_in_order(broker: Any) -> None:
    topic = new_topic_name("idem-confluent")
    create_topic(broker.bootstrap, topic)
    count = 10_000
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.num.messages": 500,
    })
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=b"m%d" % i, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert not errors, errors[:5]
    assert _read_partition_0(broker, topic, count) == [b"m%d" % i for i in range(count)]


def test_confluent_retries_across_a_broker_kill_9_write_each_message_once(broker: Any) -> None:
    topic = new_topic_name("idem-retry")
    create_topic(broker.bootstrap, topic)
    per_round = 3_000
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.num.messages": 200, "reconnect.backoff.max.ms": 200,
    })
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    def send(first: int) -> None:
        for i in range(first, first + per_round):
            while True:
                try:
                    producer.produce(topic, value=b"m%d" % i, partition=0,
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)

    send(0)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    # Whatever is in flight when the broker dies may be in its log without an answer: the
    # producer retries it after the restart and the rebuilt producer state drops the copy.
    send(per_round)
    broker.kill()
    broker.start()
    send(2 * per_round)
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert not errors, errors[:5]
    count = 3 * per_round
    assert _read_partition_0(broker, topic, count) == [b"m%d" % i for i in range(count)]


def _read_partition_0(broker: Any, topic: str, count: int) -> list[bytes]:
    """The first `count` values of partition 0, read_committed, from the beginning."""
    consumer = confluent_consumer(broker.bootstrap, {"isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    values: list[bytes] = []

    def all_read() -> bool:
        for msg in consumer.consume(1000, timeout=0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        return len(values) >= count

    try:
        wait_until(all_read, CONSUME_TIMEOUT_S, f"{count} messages")
    finally:
        consumer.close()
    return values
