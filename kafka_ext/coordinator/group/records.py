"""Records of `__consumer_offsets`: Kafka's OffsetCommit and GroupMetadata keys and values.

Each key and value is an int16 version followed by the schema's struct of that version
(`protocol_schemas/records/group/`), byte-compatible with Kafka's coordinator so the topic can be
read by Kafka's own tools. Key versions 0-1 are offset commits, 2 group metadata, 3-8 the
KIP-848 consumer group records (group epoch, subscribed topics, member metadata, target
assignment epoch and members, current member assignments); other versions are skipped.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

_VERSION = struct.Struct(">h")  # record version prefix of every key and value

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# Value versions Kafka 3.x+ writes: v3 carries the leader epoch, v1 an explicit expire time.
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_reg = registry()
_OffsetCommitKey = _reg["OffsetCommitKey"]
_OffsetCommitValue = _reg["OffsetCommitValue"]
_GroupMetadataKey = _reg["GroupMetadataKey"]
_GroupMetadataValue = _reg["GroupMetadataValue"]
GroupMetadataValue: Any = _GroupMetadataValue.cls
MemberMetadata: Any = _GroupMetadataValue.cls.MemberMetadata


@dataclass(slots=True, frozen=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(slots=True, frozen=True)
class GroupMetadataKey:
    group_id: str


@dataclass(slots=True, frozen=True)
class ConsumerGroupRecordKey:
    """The key of a KIP-848 consumer group record: its type (the key version) and ids."""

    record_type: int
    group_id: str
    member_id: str | None = None


@dataclass(slots=True, frozen=True)
class OffsetAndMetadata:
    """A committed offset as stored in an OffsetCommitValue; timestamps in ms, -1 when unset."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


def _encode(mtype: Any, version: int, message: Any) -> bytes:
    return _VERSION.pack(version) + mtype.encode(message, version)


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _encode(_OffsetCommitKey, OFFSET_COMMIT_KEY_VERSION,
                   _OffsetCommitKey.cls(group=group_id, topic=topic, partition=partition))


def group_metadata_key(group_id: str) -> bytes:
    return _encode(_GroupMetadataKey, GROUP_METADATA_KEY_VERSION,
                   _GroupMetadataKey.cls(group=group_id))


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    """v1 when an explicit expire time was asked for (OffsetCommit v2-v4), else v3."""
    if value.expire_timestamp_ms >= 0:
        return _encode(_OffsetCommitValue, OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY,
                       _OffsetCommitValue.cls(offset=value.offset, metadata=value.metadata,
                                              commit_timestamp=value.commit_timestamp_ms,
                                              expire_timestamp=value.expire_timestamp_ms))
    return _encode(_OffsetCommitValue, OFFSET_COMMIT_VALUE_VERSION,
                   _OffsetCommitValue.cls(offset=value.offset, leader_epoch=value.leader_epoch,
                                          metadata=value.metadata,
                                          commit_timestamp=value.commit_timestamp_ms))


def group_metadata_value(value: Any) -> bytes:
    """Encode a GroupMetadataValue message (built with `GroupMetadataValue(...)`)."""
    return _encode(_GroupMetadataValue, GROUP_METADATA_VALUE_VERSION, value)


def _split(buf: bytes) -> tuple[int, memoryview]:
    if len(buf) < _VERSION.size:
        raise DecodeError("coordinator record is shorter than its version")
    (version,) = _VERSION.unpack_from(buf)
    return version, memoryview(buf)[_VERSION.size:]


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | None:
    """The key of a `__consumer_offsets` record; None for record types we do not host."""
    version, body = _split(key)
    if version in (0, 1):
        k = _OffsetCommitKey.decode_all(body, version)
        return OffsetCommitKey(k.group, k.topic, k.partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(_GroupMetadataKey.decode_all(body, version).group)
    if version in _CG_KEYS:
        k = _CG_KEYS[version].decode_all(body, version)
        return ConsumerGroupRecordKey(version, k.group_id, getattr(k, "member_id", None))
    if version < 0:
        raise DecodeError(f"negative record key version {version}")
    return None


def decode_offset_commit_value(value: bytes) -> OffsetAndMetadata:
    version, body = _split(value)
    if version not in _OffsetCommitValue.versions:
        raise DecodeError(f"unknown OffsetCommitValue version {version}")
    v = _OffsetCommitValue.decode_all(body, version)
    return OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                             v.expire_timestamp)


def decode_group_metadata_value(value: bytes) -> Any:
    """A GroupMetadataValue message (fields: protocol_type, generation, protocol, leader,
    current_state_timestamp, members)."""
    version, body = _split(value)
    if version not in _GroupMetadataValue.versions:
        raise DecodeError(f"unknown GroupMetadataValue version {version}")
    return _GroupMetadataValue.decode_all(body, version)


# -- KIP-848 consumer group records (key version = record type) --------------------------------

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
_CG_NAMES = {
    CONSUMER_GROUP_METADATA: "ConsumerGroupMetadata",
    CONSUMER_GROUP_PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    CONSUMER_GROUP_MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_CG_KEYS = {t: _reg[f"{n}Key"] for t, n in _CG_NAMES.items()}
_CG_VALUES = {t: _reg[f"{n}Value"] for t, n in _CG_NAMES.items()}
_CG_VALUE_VERSION = 0


def consumer_group_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    """The key of a consumer group record; member records carry the member id."""
    mtype = _CG_KEYS[record_type]
    if member_id is None:
        return _encode(mtype, record_type, mtype.cls(group_id=group_id))
    return _encode(mtype, record_type, mtype.cls(group_id=group_id, member_id=member_id))


def consumer_group_value(record_type: int, **fields: Any) -> bytes:
    """The value of a consumer group record from its schema's fields (snake_case)."""
    mtype = _CG_VALUES[record_type]
    return _encode(mtype, _CG_VALUE_VERSION, mtype.cls(**fields))


def decode_consumer_group_value(record_type: int, value: bytes) -> Any:
    version, body = _split(value)
    mtype = _CG_VALUES[record_type]
    if version not in mtype.versions:
        raise DecodeError(f"unknown {mtype.name} version {version}")
    return mtype.decode_all(body, version)


def topic_partitions_field(record_type: int, assignment: Mapping[uuid.UUID, frozenset[int]]
                           ) -> list[Any]:
    """An assignment as the record's [TopicPartitions] list, topics and partitions sorted."""
    cls = _CG_VALUES[record_type].cls
    struct_cls = getattr(cls, "TopicPartitions", None) or cls.TopicPartition
    return [struct_cls(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(assignment.items(), key=lambda item: str(item[0])) if ps]


def assignment_of(topic_partitions: Any) -> dict[uuid.UUID, frozenset[int]]:
    """A record's [TopicPartitions] list as an assignment."""
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}
