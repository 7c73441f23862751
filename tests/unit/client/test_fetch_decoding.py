"""Fetched batches to records (Kafka's CompletedFetch): offsets before the fetch offset, control
batches and aborted transactions are not returned, and a bad batch is CORRUPT_MESSAGE."""

from __future__ import annotations

import pytest

from kafka_ext.client.fetcher import decode_fetched
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import Compression, TimestampType
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    build_end_txn_marker,
    records_for,
)

PID = 7


def txn_batch(values: list[bytes], base_offset: int) -> bytes:
    return build_batch(records_for(values, base_offset=base_offset), base_offset=base_offset,
                       producer_id=PID, producer_epoch=0, base_sequence=base_offset,
                       is_transactional=True)


def marker(kind: ControlRecordType, offset: int) -> bytes:
    return build_end_txn_marker(kind, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                                timestamp_ms=0, base_offset=offset)


def test_records_before_the_fetch_offset_are_dropped() -> None:
    data = build_batch(records_for([b"a", b"b", b"c"], timestamp_ms=5), compression=Compression.GZIP)
    fetched = decode_fetched("t", 0, data, 1)
    assert [(r.offset, r.value) for r in fetched.records] == [(1, b"b"), (2, b"c")]
    assert fetched.next_fetch_offset == 3
    assert fetched.records[0].timestamp == 5
    assert fetched.records[0].timestamp_type == TimestampType.CREATE_TIME


def test_keys_headers_and_leader_epoch_come_through() -> None:
    data = build_batch([Record(0, 9, b"k", b"v", [("h", b"x"), ("n", None)])],
                       partition_leader_epoch=3)
    (record,) = decode_fetched("t", 2, data, 0).records
    assert (record.topic, record.partition, record.key, record.headers, record.leader_epoch) == (
        "t", 2, b"k", (("h", b"x"), ("n", None)), 3)


def test_control_batches_are_not_returned_but_move_the_next_fetch_past_them() -> None:
    data = txn_batch([b"a"], 0) + marker(ControlRecordType.COMMIT, 1)
    fetched = decode_fetched("t", 0, data, 0, read_committed=True)
    assert [r.value for r in fetched.records] == [b"a"]
    assert fetched.next_fetch_offset == 2


def test_read_committed_skips_aborted_transactions() -> None:
    data = (txn_batch([b"aborted"], 0) + marker(ControlRecordType.ABORT, 1)
            + txn_batch([b"kept"], 2) + marker(ControlRecordType.COMMIT, 3))
    committed = decode_fetched("t", 0, data, 0, read_committed=True,
                               aborted_transactions=[(PID, 0)])
    assert [r.value for r in committed.records] == [b"kept"]
    uncommitted = decode_fetched("t", 0, data, 0, aborted_transactions=[(PID, 0)])
    assert [r.value for r in uncommitted.records] == [b"aborted", b"kept"]


def test_a_torn_last_batch_is_left_for_the_next_fetch() -> None:
    whole = build_batch(records_for([b"a"]))
    torn = build_batch(records_for([b"b"], base_offset=1), base_offset=1)[:-3]
    fetched = decode_fetched("t", 0, whole + torn, 0)
    assert [r.value for r in fetched.records] == [b"a"] and fetched.next_fetch_offset == 1


def test_a_corrupt_batch_is_corrupt_message() -> None:
    data = bytearray(build_batch(records_for([b"a"])))
    data[-1] ^= 0xFF
    with pytest.raises(KafkaError) as raised:
        decode_fetched("t", 0, bytes(data), 0)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
