"""The records of `__transaction_state`: TransactionLogKey and TransactionLogValue.

Mirrors Kafka's TransactionLog. Key and value are each an int16 schema version followed by the
struct (protocol_schemas/records/txn). The key is the transactional id, so compaction keeps the
latest state of each id; a null value (tombstone) removes an expired id. Values are written at
version 1 (flexible, with the previous producer id as a tagged field) and read at 0 and 1.
"""

from __future__ import annotations

import struct
from typing import Any

from kafka_ext.coordinator.txn.metadata import TransactionMetadata, TransactionState
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

_VERSION = struct.Struct(">h")  # schema version of the key or value struct that follows

KEY_VERSION = 0
VALUE_VERSION = 1


def _key_type() -> Any:
    return registry()["TransactionLogKey"]


def _value_type() -> Any:
    return registry()["TransactionLogValue"]


def transaction_log_key(transactional_id: str) -> bytes:
    """The record key of a transactional id."""
    mtype = _key_type()
    return _VERSION.pack(KEY_VERSION) + mtype.encode(mtype.cls(transactional_id=transactional_id),
                                                     KEY_VERSION)


def transaction_log_value(metadata: TransactionMetadata) -> bytes:
    """The record value of a transactional id's state; Empty carries no partition list."""
    if metadata.state == TransactionState.PREPARE_EPOCH_FENCE:
        raise ValueError("PrepareEpochFence is never written to the transaction log")
    mtype = _value_type()
    cls = mtype.cls
    partitions: list[Any] | None = None
    if metadata.state != TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = [cls.PartitionsSchema(topic=topic, partition_ids=ids)
                      for topic, ids in by_topic.items()]
    value = cls(
        producer_id=metadata.producer_id,
        previous_producer_id=metadata.previous_producer_id,
        next_producer_id=metadata.next_producer_id,
        producer_epoch=metadata.producer_epoch,
        transaction_timeout_ms=metadata.txn_timeout_ms,
        transaction_status=int(metadata.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=metadata.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=metadata.txn_start_timestamp_ms,
        client_transaction_version=metadata.client_transaction_version,
    )
    return _VERSION.pack(VALUE_VERSION) + mtype.encode(value, VALUE_VERSION)


def read_transaction_log_key(key: bytes) -> str:
    """The transactional id of a record key; DecodeError for any other key."""
    version = _read_version(key, "key")
    mtype = _key_type()
    if version not in mtype.versions:
        raise DecodeError(f"unknown transaction log key version {version}")
    return str(mtype.decode_all(memoryview(key)[_VERSION.size:], version).transactional_id)


def read_transaction_log_value(transactional_id: str, value: bytes) -> TransactionMetadata:
    """The state a record value carries; DecodeError for an unknown version or status."""
    version = _read_version(value, "value")
    mtype = _value_type()
    if version not in mtype.versions:
        raise DecodeError(f"unknown transaction log value version {version}")
    v = mtype.decode_all(memoryview(value)[_VERSION.size:], version)
    try:
        state = TransactionState(v.transaction_status)
    except ValueError:
        raise DecodeError(f"unknown transaction status {v.transaction_status}") from None
    if state == TransactionState.PREPARE_EPOCH_FENCE:
        raise DecodeError("PrepareEpochFence cannot appear in the transaction log")
    partitions = frozenset((p.topic, index) for p in (v.transaction_partitions or ())
                           for index in p.partition_ids)
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        txn_timeout_ms=v.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        txn_start_timestamp_ms=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=v.transaction_last_update_timestamp_ms,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        client_transaction_version=v.client_transaction_version,
    )


def _read_version(data: bytes, what: str) -> int:
    if len(data) < _VERSION.size:
        raise DecodeError(f"transaction log {what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    return int(version)
