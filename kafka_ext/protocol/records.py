"""Records inside v2 batches: decode and build them, for the paths that must see records.

Mirrors Apache Kafka's `DefaultRecord`, `MemoryRecordsBuilder` and `EndTransactionMarker`. The
produce, fetch and replication paths never come here (DESIGN.md §1.4); metadata log replay,
coordinators, control markers, tests and tools do.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from kafka_ext.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, compress, decompress
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    BytesLike,
    Compression,
    TimestampType,
    attributes_for,
    iter_batch_headers,
    pack_batch_header,
    update_crc,
    validate_batch,
)

Header = tuple[str, bytes | None]

# Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength and headerCount, one byte each. Bounds a declared count before allocating.
_MIN_RECORD_BYTES = 7
_MIN_HEADER_BYTES = 2  # headerKeyLength and headerValueLength, one byte each
_MAX_VARINT_BYTES = 5  # a zigzag int32
_MAX_VARLONG_BYTES = 10  # a zigzag int64
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1  # a timestamp base + delta must fit

# Key of a control record (transaction markers, KRaft control records).
_CONTROL_KEY = struct.Struct(
    ">"
    "h"  # version: 0
    "h"  # type: ControlRecordType
)
# Value of a transaction marker (EndTxnMarker).
_END_TXN_MARKER = struct.Struct(
    ">"
    "h"  # version: 0
    "i"  # coordinatorEpoch: epoch of the transaction coordinator that wrote the marker
)
_CONTROL_KEY_VERSION = 0
_END_TXN_MARKER_VERSION = 0


# The IsolationLevel of Fetch (v4+), ListOffsets (v2+) and DisklessFindBatches.
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class ControlRecordType(IntEnum):
    """The type in a control record's key (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2  # KRaft
    SNAPSHOT_HEADER = 3  # KRaft
    SNAPSHOT_FOOTER = 4  # KRaft
    KRAFT_VERSION = 5  # KRaft
    KRAFT_VOTERS = 6  # KRaft


@dataclass(slots=True, frozen=True)
class Record:
    """One record with its absolute offset and timestamp.

    Decoding fills offset as baseOffset + offsetDelta; `build_batch` stores offset - base_offset.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class EndTxnMarker:
    """A decoded transaction marker: the control record that commits or aborts a transaction."""

    control_type: ControlRecordType
    coordinator_epoch: int


# ---------------------------------------------------------------------------------------------
# Varints (zigzag, as protobuf): Kafka's record fields.


def encode_varint(value: int, out: bytearray) -> None:
    """Append value as a zigzag varint (works for int32 and int64 alike)."""
    zigzag = (value << 1) ^ (value >> 63)
    zigzag &= 0xFFFFFFFFFFFFFFFF
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def decode_varint(
    buf: BytesLike, pos: int, end: int, max_bytes: int = _MAX_VARINT_BYTES
) -> tuple[int, int]:
    """Read a zigzag varint at pos, not past end; return (value, new_pos). DecodeError if bad."""
    raw = 0
    shift = 0
    limit = min(end, pos + max_bytes)
    while pos < limit:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    if pos >= end:
        raise DecodeError("varint is cut short")
    raise DecodeError(f"varint is longer than {max_bytes} bytes")


def decode_varlong(buf: BytesLike, pos: int, end: int) -> tuple[int, int]:
    """Read a zigzag varlong at pos, not past end; return (value, new_pos)."""
    return decode_varint(buf, pos, end, _MAX_VARLONG_BYTES)


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_records(
    batch_bytes: BytesLike,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at pos and every record in it, decompressing when needed.

    Raises only DecodeError; max_bytes bounds the decompressed records section.
    """
    with memoryview(batch_bytes) as view:
        try:
            header = _checked_header(view, pos, verify_crc)
            codec = header.compression
        except DecodeError:
            raise
        except KafkaError as exc:  # a batch-level violation: to a decoder, bytes that do not parse
            raise DecodeError(exc.message) from exc
        body: BytesLike = view[pos + BATCH_OVERHEAD : pos + header.size_bytes]
        if codec != Compression.NONE:
            body = decompress(codec, body, max_bytes=max_bytes)
        return header, _decode_record_section(body, header)


def _checked_header(view: memoryview, pos: int, verify_crc: bool) -> BatchHeader:
    if verify_crc:
        return validate_batch(view, pos)
    for _, header in iter_batch_headers(view, pos):
        if header.magic != CURRENT_MAGIC:
            raise DecodeError(f"record batch at {pos} has magic {header.magic}")
        return header
    raise DecodeError(f"no whole record batch at {pos}")


def _decode_record_section(body: BytesLike, header: BatchHeader) -> list[Record]:
    """Decode records_count records that must fill body exactly."""
    end = len(body)
    count = header.records_count
    if count < 0 or count > end // _MIN_RECORD_BYTES:
        raise DecodeError(f"batch declares {count} records in {end} bytes")
    log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        record_length, pos = decode_varint(body, pos, end)
        record_end = pos + record_length
        if record_length < 0 or record_end > end:
            raise DecodeError(f"record of {record_length} bytes overruns its batch")
        pos += 1  # attributes: unused by magic v2
        timestamp_delta, pos = decode_varlong(body, pos, record_end)
        offset_delta, pos = decode_varint(body, pos, record_end)
        key, pos = _decode_bytes(body, pos, record_end)
        value, pos = _decode_bytes(body, pos, record_end)
        headers, pos = _decode_headers(body, pos, record_end)
        if pos != record_end:
            raise DecodeError(f"record declares {record_length} bytes but uses a different number")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise DecodeError(f"{end - pos} bytes remain after the batch's {count} records")
    return records


def _decode_bytes(buf: BytesLike, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos, end)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise DecodeError(f"field of {length} bytes overruns its record")
    return bytes(buf[pos : pos + length]), pos + length


def _decode_headers(buf: BytesLike, pos: int, end: int) -> tuple[list[Header], int]:
    count, pos = decode_varint(buf, pos, end)
    if count < 0 or count > (end - pos) // _MIN_HEADER_BYTES:
        raise DecodeError(f"record declares {count} headers in {end - pos} bytes")
    headers: list[Header] = []
    for _ in range(count):
        key_length, pos = decode_varint(buf, pos, end)
        if key_length < 0 or pos + key_length > end:
            raise DecodeError(f"header key of {key_length} bytes is invalid")
        try:
            key = str(buf[pos : pos + key_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"header key is not UTF-8: {exc}") from exc
        value, pos = _decode_bytes(buf, pos + key_length, end)
        headers.append((key, value))
    return headers, pos


def decode_all_batches(
    buf: BytesLike, *, verify_crc: bool = True, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode batches back to back (a segment or fetch slice), stopping at a torn tail."""
    with memoryview(buf) as view:
        for pos, _ in iter_batch_headers(view):
            yield decode_records(view, pos, verify_crc=verify_crc, max_bytes=max_bytes)


def decode_end_txn_marker(record: Record) -> EndTxnMarker:
    """Read a transaction marker (COMMIT or ABORT control record); DecodeError otherwise."""
    control_type = control_record_type(record)
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise DecodeError(f"control record of type {control_type.name} is not a transaction marker")
    if record.value is None or len(record.value) < _END_TXN_MARKER.size:
        raise DecodeError("transaction marker value is cut short")
    _version, coordinator_epoch = _END_TXN_MARKER.unpack_from(record.value)
    return EndTxnMarker(control_type, coordinator_epoch)


def control_record_type(record: Record) -> ControlRecordType:
    """The type in a control record's key; DecodeError for a missing or unknown one."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise DecodeError("control record key is cut short")
    _version, type_id = _CONTROL_KEY.unpack_from(record.key)
    try:
        return ControlRecordType(type_id)
    except ValueError as exc:
        raise DecodeError(f"unknown control record type {type_id}") from exc


# ---------------------------------------------------------------------------------------------
# Building


def encode_record(record: Record, offset_delta: int, timestamp_delta: int, out: bytearray) -> None:
    """Append one v2 record (length prefix included) to out."""
    body = bytearray()
    body.append(0)  # attributes: unused by magic v2
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _encode_bytes(record.key, body)
    _encode_bytes(record.value, body)
    encode_varint(len(record.headers), body)
    for key, value in record.headers:
        _encode_bytes(key.encode(), body)
        _encode_bytes(value, body)
    encode_varint(len(body), out)
    out += body


def _encode_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        encode_varint(-1, out)
        return
    encode_varint(len(value), out)
    out += value


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode records as one v2 batch with a valid CRC.

    Each record's offset delta is its offset - base_offset (increasing, so gaps are allowed as
    after compaction); last_offset_delta may extend the range past the last record.
    """
    section = bytearray()
    base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    max_timestamp = NO_TIMESTAMP
    previous_delta = -1
    for record in records:
        offset_delta = record.offset - base_offset
        if offset_delta <= previous_delta:
            raise ValueError(f"record offset {record.offset} does not increase past {base_offset + previous_delta}")
        previous_delta = offset_delta
        max_timestamp = max(max_timestamp, record.timestamp)
        encode_record(record, offset_delta, record.timestamp - base_timestamp, section)
    if last_offset_delta is None:
        last_offset_delta = max(previous_delta, 0)
    elif last_offset_delta < previous_delta:
        raise ValueError(f"last_offset_delta {last_offset_delta} is before the last record")
    payload = compress(compression, section, level=compression_level)
    attributes = attributes_for(
        compression, timestamp_type, is_transactional=is_transactional, is_control=is_control
    )
    size_bytes = BATCH_OVERHEAD + len(payload)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=size_bytes - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        magic=CURRENT_MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    batch = bytearray(size_bytes)
    pack_batch_header(batch, 0, header)
    batch[BATCH_OVERHEAD:] = payload
    update_crc(batch, 0)
    return bytes(batch)


def records_for(
    values: Iterable[bytes | None],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    key: bytes | None = None,
) -> list[Record]:
    """Records with consecutive offsets and one timestamp: the common case in tests and tools."""
    return [Record(base_offset + i, timestamp_ms, key, value) for i, value in enumerate(values)]


def control_record(
    control_type: ControlRecordType, value: bytes, *, offset: int = 0, timestamp_ms: int = 0
) -> Record:
    """A control record (key = version 0 + type); value is the type's own encoding."""
    key = _CONTROL_KEY.pack(_CONTROL_KEY_VERSION, control_type)
    return Record(offset, timestamp_ms, key, value)


def build_end_txn_marker(
    control_type: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker (WriteTxnMarkers)."""
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError(f"{control_type.name} is not a transaction marker type")
    value = _END_TXN_MARKER.pack(_END_TXN_MARKER_VERSION, coordinator_epoch)
    marker = control_record(control_type, value, offset=base_offset, timestamp_ms=timestamp_ms)
    return build_batch(
        [marker],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


# Topic `compression.type` values and the codec each stores batches with ("producer": keep).
TOPIC_COMPRESSION_CODECS = {
    "uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}


def recompress_batch(batch: BytesLike, compression: Compression) -> bytes:
    """The same batch (offsets, timestamps, producer fields) stored with another codec: what
    Kafka does when a topic's compression.type differs from the producer's. Decodes records.

    A client's records are checked as Kafka's LogValidator checks the batches it rewrites
    (found by the wire fuzzer: an offset delta or timestamp delta that lies used to escape
    as ValueError/struct.error)."""
    header, records = decode_records(batch)
    for expected, record in enumerate(records):
        if record.offset != header.base_offset + expected:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"inner record {expected} has offset delta "
                             f"{record.offset - header.base_offset}, expected {expected}")
        if not _INT64_MIN <= record.timestamp <= _INT64_MAX:
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                             f"inner record {expected} has timestamp {record.timestamp}")
    if records and header.last_offset_delta < len(records) - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"last offset delta {header.last_offset_delta} is before the last "
                         f"of {len(records)} records")
    return build_batch(
        records, base_offset=header.base_offset, compression=compression,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, is_transactional=header.is_transactional,
        timestamp_type=header.timestamp_type, partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )

