"""The records of `__share_group_state`: ShareSnapshot and ShareUpdate keys and values.

Mirrors Kafka's ShareCoordinatorRecordHelpers and ShareCoordinatorRecordSerde. Each key and
value is an int16 followed by the schema's struct (protocol_schemas/records/share/). The key's
int16 is the record type: 0 a ShareSnapshot (the whole state of a share-partition), 1 a
ShareUpdate (a delta over the last snapshot). Both keys carry the same (group, topic id,
partition), so the type prefix is what keeps their bytes apart. A tombstone is a ShareSnapshot
key with no value. Values are written and read at version 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry
from kafka_ext.share.persister import DeliveryState, SharePartitionKey, StateBatch

_PREFIX = struct.Struct(">h")  # record type of a key, schema version of a value

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1
VALUE_VERSION = 0
# ShareUpdate fields that carry no change.
UNCHANGED = -1

_reg = registry()
_KEY_TYPES = {SHARE_SNAPSHOT_RECORD_TYPE: _reg["ShareSnapshotKey"],
              SHARE_UPDATE_RECORD_TYPE: _reg["ShareUpdateKey"]}
_SnapshotValue = _reg["ShareSnapshotValue"]
_UpdateValue = _reg["ShareUpdateValue"]
_DELIVERY_STATES = {int(s): s for s in DeliveryState}


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """A share-partition's whole state (ShareSnapshotValue); timestamps in ms."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A delta over the last snapshot (ShareUpdateValue): -1 leaves a field as it was."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    batches: tuple[StateBatch, ...]


def share_state_key(record_type: int, key: SharePartitionKey) -> bytes:
    """The record key of `key` for a ShareSnapshot or ShareUpdate record."""
    mtype = _KEY_TYPES[record_type]
    return _PREFIX.pack(record_type) + mtype.encode(
        mtype.cls(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition),
        record_type)


def read_share_state_key(data: bytes) -> tuple[int, SharePartitionKey]:
    """(record type, key) of a record key; DecodeError for any other key."""
    record_type = _read_prefix(data, "key")
    mtype = _KEY_TYPES.get(record_type)
    if mtype is None:
        raise DecodeError(f"unknown __share_group_state record type {record_type}")
    k = mtype.decode_all(memoryview(data)[_PREFIX.size:], record_type)
    return record_type, SharePartitionKey(k.group_id, k.topic_id, k.partition)


def share_snapshot_value(snapshot: ShareSnapshot) -> bytes:
    cls = _SnapshotValue.cls
    value = cls(snapshot_epoch=snapshot.snapshot_epoch, state_epoch=snapshot.state_epoch,
                leader_epoch=snapshot.leader_epoch, start_offset=snapshot.start_offset,
                delivery_complete_count=snapshot.delivery_complete_count,
                create_timestamp=snapshot.create_timestamp_ms,
                write_timestamp=snapshot.write_timestamp_ms,
                state_batches=_batch_structs(cls.StateBatch, snapshot.batches))
    return _PREFIX.pack(VALUE_VERSION) + _SnapshotValue.encode(value, VALUE_VERSION)


def share_update_value(update: ShareUpdate) -> bytes:
    cls = _UpdateValue.cls
    value = cls(snapshot_epoch=update.snapshot_epoch, leader_epoch=update.leader_epoch,
                start_offset=update.start_offset,
                delivery_complete_count=update.delivery_complete_count,
                state_batches=_batch_structs(cls.StateBatch, update.batches))
    return _PREFIX.pack(VALUE_VERSION) + _UpdateValue.encode(value, VALUE_VERSION)


def read_share_snapshot_value(data: bytes) -> ShareSnapshot:
    v = _decode_value(_SnapshotValue, data)
    return ShareSnapshot(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                         v.delivery_complete_count, v.create_timestamp, v.write_timestamp,
                         _batches(v.state_batches))


def read_share_update_value(data: bytes) -> ShareUpdate:
    v = _decode_value(_UpdateValue, data)
    return ShareUpdate(v.snapshot_epoch, v.leader_epoch, v.start_offset,
                       v.delivery_complete_count, _batches(v.state_batches))


def delivery_state(value: int) -> DeliveryState:
    """The DeliveryState of a wire or record value; DecodeError for an unknown one."""
    state = _DELIVERY_STATES.get(value)
    if state is None:
        raise DecodeError(f"unknown delivery state {value}")
    return state


def _batch_structs(cls: Any, batches: tuple[StateBatch, ...]) -> list[Any]:
    return [cls(first_offset=b.first_offset, last_offset=b.last_offset,
                delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
            for b in batches]


def _batches(structs: list[Any]) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, delivery_state(b.delivery_state),
                            b.delivery_count) for b in structs)


def _decode_value(mtype: Any, data: bytes) -> Any:
    version = _read_prefix(data, "value")
    if version not in mtype.versions:
        raise DecodeError(f"unknown {mtype.name} version {version}")
    return mtype.decode_all(memoryview(data)[_PREFIX.size:], version)


def _read_prefix(data: bytes, what: str) -> int:
    if len(data) < _PREFIX.size:
        raise DecodeError(f"__share_group_state {what} of {len(data)} bytes has no version")
    (value,) = _PREFIX.unpack_from(data)
    return int(value)

