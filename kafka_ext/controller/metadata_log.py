"""The `__cluster_metadata` log: metadata records framed as KRaft frames them, in record batches.

Each record's value is: unsigned varint frame version (1), unsigned varint record type (the
schema's apiKey), unsigned varint record version, then the record body. Replaying the log from
the start rebuilds the MetadataImage (DESIGN.md §1.6: every state machine is a log replay).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from kafka_ext.protocol import primitives
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.records import Record, build_batch, decode_all_batches

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed id for the metadata topic
FRAME_VERSION = 1
READ_CHUNK_BYTES = 8 * 1024 * 1024


def _record_types() -> dict[int, MessageType]:
    reg = registry()
    return {m.api_key: m for m in reg.by_name.values()
            if m.spec.type == "metadata" and m.api_key is not None}


def encode_metadata_record(record: Any) -> bytes:
    """Frame one metadata record (a generated message object) at its latest version."""
    mtype = registry()[type(record).__name__]
    version = mtype.versions.highest
    assert version is not None and mtype.api_key is not None
    out = bytearray()
    primitives.write_uvarint(out, FRAME_VERSION)
    primitives.write_uvarint(out, mtype.api_key)
    primitives.write_uvarint(out, version)
    mtype.encode_into(record, version, out, None)
    return bytes(out)


def decode_metadata_record(value: bytes) -> tuple[str, Any]:
    """(record type name, record) of one framed metadata record."""
    frame_version, pos = primitives.read_uvarint(value, 0)
    if frame_version != FRAME_VERSION:
        raise DecodeError(f"metadata frame version {frame_version}")
    api_key, pos = primitives.read_uvarint(value, pos)
    version, pos = primitives.read_uvarint(value, pos)
    mtype = _record_types().get(api_key)
    if mtype is None:
        raise DecodeError(f"unknown metadata record type {api_key}")
    record, end = mtype.decode(value, version, pos)
    if end != len(value):
        raise DecodeError(f"{mtype.name}: {len(value) - end} trailing bytes")
    return mtype.name, record


def build_metadata_batch(records: Sequence[Any]) -> bytes:
    """One uncompressed batch holding `records` atomically (KRaft appends them together)."""
    now_ms = int(time.time() * 1000)
    return build_batch([Record(offset=i, timestamp=now_ms, key=None,
                               value=encode_metadata_record(r)) for i, r in enumerate(records)])


def replay(log: Any, start: int | None = None, end: int | None = None
           ) -> Iterator[tuple[int, str, Any]]:
    """(offset, record type name, record) for the records of the log in [start, end)
    (default: all of it), in order; Raft's control records are skipped."""
    offset = log.log_start_offset if start is None else max(start, log.log_start_offset)
    end = log.log_end_offset if end is None else min(end, log.log_end_offset)
    while offset < end:
        info = log.read(offset, READ_CHUNK_BYTES, max_offset=end, min_one_message=True)
        if not info.records:
            break
        data = b"".join(info.records)
        for header, records in decode_all_batches(data):
            for rec in records if not header.is_control else ():  # LeaderChange: Raft's own
                if rec.value is not None and offset <= rec.offset < end:
                    name, message = decode_metadata_record(rec.value)
                    yield rec.offset, name, message
            offset = header.base_offset + header.last_offset_delta + 1
