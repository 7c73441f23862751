"""How `kafka-ext dump-log` prints record keys and values: Kafka's DumpLogSegments parsers.

A parser turns one record into the (key, payload) texts printed after `key:` and `payload:`
(None leaves the field out): the plain decoders of `--key-decoder-class`/`--value-decoder-class`
(String, Integer, Long), `--offsets-decoder`, `--transaction-log-decoder` and
`--share-group-state-decoder` (the coordinator records of `__consumer_offsets`, share groups'
included, `__transaction_state` and `__share_group_state` as Kafka's JSON: the key as
{"type":"<record type>","data":{..}}, the value as {"version":"<v>","data":{..}}, a tombstone as
<DELETE>) and `--cluster-metadata-decoder` (the payload {"type":"TOPIC_RECORD","version":0,
"data":{..}}). Control records are described by `control_record_text`. The JSON is what Kafka's
generated JsonConverters write, derived from our schemas: camelCase field names, Uuids in
Kafka's base64 text, bytes in base64, tagged fields only when they differ from their default.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import Any, Protocol

from kafka_ext.controller.metadata_log import FRAME_VERSION, decode_metadata_record
from kafka_ext.protocol import primitives
from kafka_ext.protocol.compiler import field_default
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    control_record_type,
    decode_end_txn_marker,
)
from kafka_ext.protocol.schema import FieldSpec, StructSpec, snake_case
from kafka_ext.storage.checkpoints import kafka_uuid_to_str

_VERSION = struct.Struct(">h")  # the version before a coordinator record's key or value struct
CONSUMER_PROTOCOL_TYPE = "consumer"
DELETE = "<DELETE>"

# Record types of __consumer_offsets (Kafka's group CoordinatorRecordType); key versions 0 and
# 1 are both an offset commit, any other key version is the record type itself. 10-15 are
# share groups' (coordinator/group/share_group.py); 9, ShareGroupPartitionMetadata, left
# Kafka before 4.0 and is not written.
GROUP_RECORD_TYPES = {
    1: "OffsetCommit", 2: "GroupMetadata", 3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata", 13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment", 15: "ShareGroupStatePartitionMetadata",
}
LEGACY_OFFSET_COMMIT_KEY_VERSION = 0
# Record types of __transaction_state (Kafka's transaction CoordinatorRecordType).
TRANSACTION_RECORD_TYPES = {0: "TransactionLog"}
# Record types of __share_group_state (Kafka's share CoordinatorRecordType,
# coordinator/share/records.py): a share-partition's whole state, and a delta over it.
SHARE_STATE_RECORD_TYPES = {0: "ShareSnapshot", 1: "ShareUpdate"}

# What Kafka prints before the JSON of each KRaft control record, by control type.
_CONTROL_LABELS = {
    ControlRecordType.LEADER_CHANGE: ("LeaderChange:", "LeaderChangeMessage"),
    ControlRecordType.SNAPSHOT_HEADER: ("SnapshotHeader", "SnapshotHeaderRecord"),
    ControlRecordType.SNAPSHOT_FOOTER: ("SnapshotFooter", "SnapshotFooterRecord"),
    ControlRecordType.KRAFT_VERSION: ("KRaftVersion", "KRaftVersionRecord"),
    ControlRecordType.KRAFT_VOTERS: ("KRaftVoters", "VotersRecord"),
}

Parsed = tuple[str | None, str | None]


class RecordParser(Protocol):
    """Kafka's DumpLogSegments.MessageParser: the key and payload texts of one record."""

    def parse(self, record: Record) -> Parsed: ...


class ParseError(Exception):
    """A record the chosen decoder cannot read at all (Kafka's tool stops there); exit 1."""


# -- JSON of generated messages (Kafka's <Message>JsonConverter.write) ---------------------------


def message_json(struct_spec: StructSpec, message: Any, version: int) -> dict[str, Any]:
    """The JSON object Kafka's generated converter writes for `message` at `version`."""
    out: dict[str, Any] = {}
    for f in struct_spec.fields:
        if version not in f.versions:
            continue
        value = getattr(message, f.attr)
        if version in f.tagged_versions and _is_default(f, value, version):
            continue
        out[f.name[:1].lower() + f.name[1:]] = _json_value(f, value, version)
    return out


def to_json_text(value: Any) -> str:
    """Compact JSON as Jackson's ObjectNode.toString writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_default(f: FieldSpec, value: Any, version: int) -> bool:
    if f.is_array:
        return value is None if f.default == "null" else value == []
    if f.struct is not None:
        return value is None
    return bool(value == field_default(f, version))


def _json_value(f: FieldSpec, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.is_array:
        if f.struct is not None:
            return [message_json(f.struct, item, version) for item in value]
        return [_json_scalar(f.element_type, item) for item in value]
    if f.struct is not None:
        return message_json(f.struct, value, version)
    return _json_scalar(f.type, value)


def _json_scalar(type_name: str, value: Any) -> Any:
    if type_name == "uuid":
        return kafka_uuid_to_str(value)
    if type_name in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _versioned(buf: bytes) -> tuple[int, memoryview]:
    """The int16 version of a coordinator record's key or value and the struct after it."""
    if len(buf) < _VERSION.size:
        raise DecodeError("coordinator record is shorter than its version")
    (version,) = _VERSION.unpack_from(buf)
    return version, memoryview(buf)[_VERSION.size:]


# -- plain decoders (--key-decoder-class / --value-decoder-class) --------------------------------


def _string(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")  # Java's new String(bytes, UTF_8) replaces too


def _integer(data: bytes) -> str:
    return str(int.from_bytes(data[:4], "big", signed=True))


def _long(data: bytes) -> str:
    return str(int.from_bytes(data[:8], "big", signed=True))


# Kafka's Decoder classes, by the names its tool accepts (the deprecated kafka.serializer ones
# too); the Integer and Long decoders read a big-endian int32 and int64.
DECODERS: dict[str, Callable[[bytes], str]] = {}
for _package in ("org.apache.kafka.tools.api", "kafka.serializer"):
    DECODERS.update({f"{_package}.StringDecoder": _string,
                     f"{_package}.IntegerDecoder": _integer,
                     f"{_package}.LongDecoder": _long})
DEFAULT_DECODER = "org.apache.kafka.tools.api.StringDecoder"


class DecoderParser:
    """Kafka's DecoderMessageParser: key and value through the chosen decoders."""

    def __init__(self, key_decoder: Callable[[bytes], str],
                 value_decoder: Callable[[bytes], str]) -> None:
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder

    def parse(self, record: Record) -> Parsed:
        key = None if record.key is None else self.key_decoder(record.key)
        value = None if record.value is None else self.value_decoder(record.value)
        return key, value


# -- coordinator records (--offsets-decoder, --transaction-log-decoder) --------------------------


class CoordinatorRecordParser:
    """Kafka's CoordinatorRecordMessageParser over one coordinator's record types."""

    def __init__(self, record_types: dict[int, str]) -> None:
        reg = registry()
        self.keys = {t: reg[f"{name}Key"] for t, name in record_types.items()}
        self.values = {t: reg[f"{name}Value"] for t, name in record_types.items()}

    def record_type(self, key_version: int) -> int:
        return key_version

    def parse(self, record: Record) -> Parsed:
        if record.key is None:
            raise ParseError(f"Failed to decode message at offset {record.offset} using the "
                             "specified decoder (message had a missing key)")
        try:
            key_version, key_body = _versioned(record.key)
            record_type = self.record_type(key_version)
            if record_type not in self.keys:
                return (f"Unknown record type {key_version} at offset {record.offset}, "
                        "skipping."), None
            key_type = self.keys[record_type]
            key = key_type.decode_all(key_body, key_version)
            key_text = to_json_text({"type": str(record_type),
                                     "data": message_json(key_type.spec.struct, key, key_version)})
            if record.value is None:
                return key_text, DELETE
            value_version, value_body = _versioned(record.value)
            value_type = self.values[record_type]
            value = value_type.decode_all(value_body, value_version)
            data = self.value_json(value_type, value, value_version)
            return key_text, to_json_text({"version": str(value_version), "data": data})
        except DecodeError as exc:
            return f"Error at offset {record.offset}, skipping. {exc}", None

    def value_json(self, value_type: MessageType, value: Any, version: int) -> dict[str, Any]:
        return message_json(value_type.spec.struct, value, version)


class OffsetsParser(CoordinatorRecordParser):
    """`--offsets-decoder`: the records of `__consumer_offsets`; a consumer group's member
    subscriptions and assignments are decoded (ConsumerProtocol) as Kafka's tool does."""

    def __init__(self) -> None:
        super().__init__(GROUP_RECORD_TYPES)
        reg = registry()
        self.embedded = {"subscription": reg["ConsumerProtocolSubscription"],
                         "assignment": reg["ConsumerProtocolAssignment"]}

    def record_type(self, key_version: int) -> int:
        return 1 if key_version == LEGACY_OFFSET_COMMIT_KEY_VERSION else key_version

    def value_json(self, value_type: MessageType, value: Any, version: int) -> dict[str, Any]:
        data = message_json(value_type.spec.struct, value, version)
        if value_type.name != "GroupMetadataValue" or \
                data.get("protocolType") != CONSUMER_PROTOCOL_TYPE:
            return data
        for member_json, member in zip(data.get("members") or [], value.members or [],
                                       strict=True):
            for name, embedded_type in self.embedded.items():
                raw = getattr(member, name)
                if name not in member_json or raw is None:
                    continue
                try:  # as Kafka: bytes that are not the embedded protocol stay bytes
                    embedded_version, body = _versioned(bytes(raw))
                    embedded = embedded_type.decode(body, embedded_version)[0]
                except DecodeError:
                    continue
                member_json[name] = message_json(embedded_type.spec.struct, embedded,
                                                 embedded_version)
        return data


class TransactionLogParser(CoordinatorRecordParser):
    """`--transaction-log-decoder`: the records of `__transaction_state`."""

    def __init__(self) -> None:
        super().__init__(TRANSACTION_RECORD_TYPES)


class ShareGroupStateParser(CoordinatorRecordParser):
    """`--share-group-state-decoder`: the records of `__share_group_state`."""

    def __init__(self) -> None:
        super().__init__(SHARE_STATE_RECORD_TYPES)


# -- cluster metadata (--cluster-metadata-decoder) ------------------------------------------------


class ClusterMetadataParser:
    """`--cluster-metadata-decoder`: each `__cluster_metadata` record (and snapshot record) as
    {"type":"TOPIC_RECORD","version":0,"data":{..}}; no key."""

    def parse(self, record: Record) -> Parsed:
        try:
            if record.value is None:
                raise DecodeError("the record has no value")
            frame_version, pos = primitives.read_uvarint(record.value, 0)
            _api_key, pos = primitives.read_uvarint(record.value, pos)
            version, _ = primitives.read_uvarint(record.value, pos)
            if frame_version != FRAME_VERSION:
                raise DecodeError(f"metadata frame version {frame_version}")
            name, message = decode_metadata_record(record.value)
            data = message_json(registry()[name].spec.struct, message, version)
            text = to_json_text({"type": snake_case(name).upper(), "version": version,
                                 "data": data})
        except DecodeError as exc:
            text = f"Error at {record.offset}, skipping. {exc}"
        return None, text


# -- control records -----------------------------------------------------------------------------


def control_record_text(record: Record) -> str:
    """What Kafka prints after a control record's metadata: the transaction marker, or the
    KRaft control message as JSON."""
    try:
        control_type = control_record_type(record)
    except DecodeError:
        type_id = -1 if record.key is None or len(record.key) < 4 else \
            int.from_bytes(record.key[2:4], "big", signed=True)
        return f" controlType: UNKNOWN({type_id})"
    try:
        if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            marker = decode_end_txn_marker(record)
            return (f" endTxnMarker: {marker.control_type.name} "
                    f"coordinatorEpoch: {marker.coordinator_epoch}")
        label, schema = _CONTROL_LABELS[control_type]
        mtype = registry()[schema]
        # These values carry their own Version field; the struct is read at version 0.
        message, _ = mtype.decode(record.value or b"", 0)
        return f" {label} {to_json_text(message_json(mtype.spec.struct, message, 0))}"
    except DecodeError as exc:
        return f" controlType: {control_type.name}({int(control_type)}) error: {exc}"
