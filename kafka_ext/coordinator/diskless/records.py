"""Records of `__diskless_metadata` (KIP-1164): partition created, topic deleted, file committed,
records deleted, and ours: producers expired.

The key is the record type as an int16 (the schema's apiKey, 100-104); the value is an int16
version followed by the schema's struct (`protocol_schemas/records/diskless/`), the same
framing as the group coordinator's records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

_INT16 = struct.Struct(">h")  # the key (record type) and the value's version prefix

PARTITION_CREATED = 100
TOPIC_DELETED = 101
FILE_COMMITTED = 102
RECORDS_DELETED = 103
PRODUCERS_EXPIRED = 104
RECORD_VERSION = 0

_reg = registry()
_TYPES = {
    PARTITION_CREATED: _reg["DisklessPartitionCreatedRecord"],
    TOPIC_DELETED: _reg["DisklessTopicDeletedRecord"],
    FILE_COMMITTED: _reg["DisklessFileCommittedRecord"],
    RECORDS_DELETED: _reg["DisklessRecordsDeletedRecord"],
    PRODUCERS_EXPIRED: _reg["DisklessProducersExpiredRecord"],
}
PartitionCreatedRecord: Any = _TYPES[PARTITION_CREATED].cls
TopicDeletedRecord: Any = _TYPES[TOPIC_DELETED].cls
FileCommittedRecord: Any = _TYPES[FILE_COMMITTED].cls
RecordsDeletedRecord: Any = _TYPES[RECORDS_DELETED].cls
ProducersExpiredRecord: Any = _TYPES[PRODUCERS_EXPIRED].cls
CommittedTopic: Any = FileCommittedRecord.DisklessCommittedTopic
CommittedPartition: Any = FileCommittedRecord.DisklessCommittedPartition
CommittedBatch: Any = FileCommittedRecord.DisklessCommittedBatch


@dataclass(slots=True, frozen=True)
class DisklessRecord:
    """One decoded record: its type (100-104) and message."""

    record_type: int
    message: Any


def encode(record_type: int, message: Any) -> tuple[bytes, bytes | None]:
    """(key, value) of a record of `record_type` for the runtime to append."""
    mtype = _TYPES[record_type]
    return (_INT16.pack(record_type),
            _INT16.pack(RECORD_VERSION) + mtype.encode(message, RECORD_VERSION))


def decode(key: bytes, value: bytes | None) -> DisklessRecord | None:
    """The record behind (key, value); None for a type this version does not know."""
    if len(key) != _INT16.size:
        raise DecodeError(f"diskless record key of {len(key)} bytes, expected 2")
    (record_type,) = _INT16.unpack(key)
    mtype = _TYPES.get(record_type)
    if mtype is None:
        return None
    if value is None or len(value) < _INT16.size:
        raise DecodeError(f"diskless record {record_type} without a value")
    (version,) = _INT16.unpack_from(value)
    if version not in mtype.versions:
        raise DecodeError(f"diskless record {record_type} of unknown version {version}")
    return DisklessRecord(record_type, mtype.decode_all(memoryview(value)[_INT16.size:],
                                                        version))
