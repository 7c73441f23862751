"""TransactionLogKey/Value records of `__transaction_state`: byte layout and round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_ext.coordinator.txn.metadata import TransactionMetadata, TransactionState
from kafka_ext.coordinator.txn.records import (
    read_transaction_log_key,
    read_transaction_log_value,
    transaction_log_key,
    transaction_log_value,
)
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

LOGGED_STATES = [s for s in TransactionState if s != TransactionState.PREPARE_EPOCH_FENCE]


def test_key_is_version_zero_then_the_transactional_id_as_a_string() -> None:
    assert transaction_log_key("my-txn") == b"\x00\x00" + b"\x00\x06my-txn"
    assert read_transaction_log_key(transaction_log_key("my-txn")) == "my-txn"


def test_value_round_trips_every_field_but_the_in_memory_last_epoch() -> None:
    meta = TransactionMetadata(
        "tx", producer_id=42, producer_epoch=7, txn_timeout_ms=60_000,
        state=TransactionState.ONGOING, partitions=frozenset({("b", 2), ("a", 1), ("a", 0)}),
        txn_start_timestamp_ms=1000, txn_last_update_timestamp_ms=2000,
        previous_producer_id=41, last_producer_epoch=6)
    value = transaction_log_value(meta)
    assert struct.unpack_from(">h", value) == (1,)
    back = read_transaction_log_value("tx", value)
    assert back == TransactionMetadata(
        "tx", 42, 7, 60_000, TransactionState.ONGOING,
        frozenset({("a", 0), ("a", 1), ("b", 2)}), 1000, 2000, previous_producer_id=41)


def test_value_groups_partitions_by_topic_in_order() -> None:
    meta = TransactionMetadata("tx", 1, 0, 1000, TransactionState.PREPARE_COMMIT,
                               frozenset({("b", 0), ("a", 3), ("a", 1)}))
    mtype = registry()["TransactionLogValue"]
    decoded = mtype.decode_all(transaction_log_value(meta)[2:], 1)
    assert [(p.topic, list(p.partition_ids)) for p in decoded.transaction_partitions] == [
        ("a", [1, 3]), ("b", [0])]


def test_empty_state_is_written_with_a_null_partition_list() -> None:
    meta = TransactionMetadata("tx", 1, 0, 1000, TransactionState.EMPTY)
    mtype = registry()["TransactionLogValue"]
    assert mtype.decode_all(transaction_log_value(meta)[2:], 1).transaction_partitions is None


def test_version_zero_values_written_by_older_brokers_are_read() -> None:
    mtype = registry()["TransactionLogValue"]
    v0 = mtype.cls(producer_id=9, producer_epoch=2, transaction_timeout_ms=500,
                   transaction_status=int(TransactionState.COMPLETE_ABORT),
                   transaction_partitions=[], transaction_last_update_timestamp_ms=5,
                   transaction_start_timestamp_ms=4)
    back = read_transaction_log_value("old", b"\x00\x00" + mtype.encode(v0, 0))
    assert (back.producer_id, back.producer_epoch, back.state, back.previous_producer_id) == (
        9, 2, TransactionState.COMPLETE_ABORT, -1)


def test_prepare_epoch_fence_is_never_written() -> None:
    with pytest.raises(ValueError):
        transaction_log_value(TransactionMetadata("tx", 1, 0, 1000,
                                                  TransactionState.PREPARE_EPOCH_FENCE))


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x07\x00\x01x", b"\x00\x00\x00\x09ab"])
def test_bad_keys_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        read_transaction_log_key(data)


def test_unknown_status_and_value_version_raise_decode_error() -> None:
    good = transaction_log_value(TransactionMetadata("tx", 1, 0, 1000, TransactionState.EMPTY))
    with pytest.raises(DecodeError):
        read_transaction_log_value("tx", b"\x00\x05" + good[2:])
    mtype = registry()["TransactionLogValue"]
    bad = mtype.cls(producer_id=1, producer_epoch=0, transaction_timeout_ms=1,
                    transaction_status=99, transaction_partitions=None)
    with pytest.raises(DecodeError):
        read_transaction_log_value("tx", b"\x00\x01" + mtype.encode(bad, 1))


@given(
    transactional_id=st.text(min_size=1, max_size=40),
    producer_id=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 32767),
    timeout_ms=st.integers(1, 2**31 - 1),
    state=st.sampled_from(LOGGED_STATES),
    partitions=st.frozensets(st.tuples(st.sampled_from(["a", "b", "orders"]),
                                       st.integers(0, 1000)), max_size=20),
    start_ms=st.integers(-1, 2**50), update_ms=st.integers(-1, 2**50),
)
def test_any_logged_state_round_trips(transactional_id: str, producer_id: int, epoch: int,
                                      timeout_ms: int, state: TransactionState,
                                      partitions: frozenset[tuple[str, int]], start_ms: int,
                                      update_ms: int) -> None:
    if state == TransactionState.EMPTY:
        partitions = frozenset()
    meta = TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms, state,
                               partitions, start_ms, update_ms)
    assert read_transaction_log_key(transaction_log_key(transactional_id)) == transactional_id
    assert read_transaction_log_value(transactional_id, transaction_log_value(meta)) == meta
