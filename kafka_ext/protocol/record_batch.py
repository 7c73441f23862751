"""Opaque magic v2 record batches: read, validate and patch the 61-byte header, never the records.

Mirrors Apache Kafka's `DefaultRecordBatch` header handling and the batch-level checks of its
`LogValidator`; records themselves are decoded only in `records.py`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from crc32c import crc32c

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError

BytesLike = bytes | bytearray | memoryview  # what batch functions read: a request, a segment map slice

# Header of a v2 record batch; every integer is big-endian.
_HEADER = struct.Struct(
    ">"
    "q"  # baseOffset: offset of the first record (assigned by the leader on append)
    "i"  # batchLength: bytes after this field, up to the end of the batch
    "i"  # partitionLeaderEpoch: epoch of the leader that appended it (-1 from clients)
    "b"  # magic: record format version, always 2 here
    "I"  # crc: CRC-32C of every byte from attributes to the end of the batch
    "h"  # attributes: codec bits 0-2, timestamp type bit 3, transactional 4, control 5, delete horizon 6
    "i"  # lastOffsetDelta: last record's offset minus baseOffset (kept by compaction)
    "q"  # baseTimestamp: timestamp of the first record, or the delete horizon
    "q"  # maxTimestamp: largest record timestamp, or the log append time
    "q"  # producerId: idempotent/transactional producer id, -1 if none
    "h"  # producerEpoch: producer epoch, -1 if none
    "i"  # baseSequence: sequence number of the first record, -1 if none
    "i"  # recordsCount: number of records that follow
)
_OFFSET = struct.Struct(">q")  # baseOffset
_LENGTH = struct.Struct(">i")  # batchLength
_INT32 = struct.Struct(">i")  # partitionLeaderEpoch, baseSequence
_INT16 = struct.Struct(">h")  # attributes, producerEpoch
_INT64 = struct.Struct(">q")  # maxTimestamp, producerId
_CRC = struct.Struct(">I")  # crc

BATCH_OVERHEAD = 61  # bytes of the v2 header, before the first record
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes that batchLength does not count
CURRENT_MAGIC = 2

# Byte positions of header fields, relative to the start of the batch.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21  # the CRC covers from here to the end of the batch
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
PRODUCER_EPOCH_POS = 51
BASE_SEQUENCE_POS = 53
RECORDS_COUNT_POS = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

assert _HEADER.size == BATCH_OVERHEAD


class TimestampType(IntEnum):
    """Attribute bit 3: who set the timestamps of a batch."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Compression(IntEnum):
    """Attribute bits 0-2: the codec of a batch's records section (Kafka's ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


@dataclass(slots=True, frozen=True)
class BatchHeader:
    """The decoded 61-byte header of one v2 batch; a snapshot, never written back."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at 2^31 as Kafka's producer does; -1 if none."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def compression(self) -> Compression:
        """The codec; raises KafkaError(INVALID_RECORD) for ids 5-7, which Kafka does not define."""
        return _compression_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_FLAG:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        """Compaction's marker: baseTimestamp holds the tombstone delete horizon (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


def _compression_of(attributes: int) -> Compression:
    codec = attributes & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"unknown compression codec id {codec}")
    return Compression(codec)


def attributes_for(
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    *,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """Pack the attribute bits of a batch header."""
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_FLAG
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG
    return attributes


def pack_batch_header(buf: bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Write every header field at pos (the CRC as given; see `update_crc`)."""
    _HEADER.pack_into(
        buf,
        pos,
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def read_batch_header(buf: BytesLike, pos: int = 0) -> BatchHeader:
    """Decode the header at pos without checking it; DecodeError if fewer than 61 bytes remain."""
    if pos < 0 or len(memoryview(buf)) - pos < BATCH_OVERHEAD:
        raise DecodeError(f"record batch header at {pos} is cut short")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def compute_crc(buf: BytesLike, pos: int, size_bytes: int) -> int:
    """CRC-32C of the batch at pos spanning size_bytes, over the range the header's crc covers."""
    with memoryview(buf) as view:
        return crc32c(view[pos + ATTRIBUTES_POS : pos + size_bytes])


def update_crc(buf: bytearray | memoryview, pos: int = 0) -> None:
    """Recompute and store the CRC of the batch at pos after a patch inside the CRC range."""
    (batch_length,) = _LENGTH.unpack_from(buf, pos + LENGTH_POS)
    _CRC.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, batch_length + LOG_OVERHEAD))


def crc_is_valid(buf: BytesLike, pos: int = 0) -> bool:
    """Whether the stored CRC matches the bytes; assumes the length was already checked."""
    header = read_batch_header(buf, pos)
    return header.crc == compute_crc(buf, pos, header.size_bytes)


def validate_batch(buf: BytesLike, pos: int = 0, *, from_client: bool = False) -> BatchHeader:
    """Check the batch at pos (length, magic, CRC, attributes, offsets) without decoding records.

    Raises KafkaError(CORRUPT_MESSAGE) for a lying length, a bad magic or a bad CRC, and
    KafkaError(INVALID_RECORD) for other violations. `from_client=True` adds the checks Kafka
    applies to produce requests only (a compacted batch on disk or from a leader may fail them):
    at least one record, recordsCount == lastOffsetDelta + 1, no control batches, a sequence
    for idempotent producers.
    """
    with memoryview(buf) as view:
        available = len(view) - pos
        if pos < 0 or available < BATCH_OVERHEAD:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"record batch at {pos} has {max(available, 0)} bytes, fewer than its {BATCH_OVERHEAD}-byte header",
            )
        header = BatchHeader(*_HEADER.unpack_from(view, pos))
        size_bytes = header.size_bytes
        if size_bytes < BATCH_OVERHEAD:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"record batch at {pos} claims {size_bytes} bytes, fewer than its header",
            )
        if size_bytes > available:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"record batch at {pos} claims {size_bytes} bytes but only {available} remain",
            )
        if header.magic != CURRENT_MAGIC:
            # Kafka 4 rejects v0/v1 message sets in produce requests as invalid records; any
            # other magic means the bytes are not a batch at all.
            code = ErrorCode.INVALID_RECORD if header.magic in (0, 1) else ErrorCode.CORRUPT_MESSAGE
            raise KafkaError(code, f"record batch at {pos} has magic {header.magic}, only 2 is supported")
        actual_crc = crc32c(view[pos + ATTRIBUTES_POS : pos + size_bytes])
    if actual_crc != header.crc:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"record batch at {pos} has CRC {header.crc:#010x}, computed {actual_crc:#010x}",
        )
    _check_header_fields(header, pos, from_client)
    return header


def _check_header_fields(header: BatchHeader, pos: int, from_client: bool) -> None:
    """Batch-level consistency checks of Kafka's LogValidator, on header fields only."""
    _compression_of(header.attributes)
    if header.last_offset_delta < 0:
        _invalid(pos, f"negative lastOffsetDelta {header.last_offset_delta}")
    if header.records_count < 0:
        _invalid(pos, f"negative recordsCount {header.records_count}")
    if header.records_count > header.last_offset_delta + 1:
        _invalid(
            pos,
            f"recordsCount {header.records_count} exceeds the offset range of "
            f"lastOffsetDelta {header.last_offset_delta}",
        )
    if header.is_transactional and not header.has_producer_id:
        _invalid(pos, "transactional batch without a producer id")
    if not from_client:
        return
    if header.records_count == 0:
        _invalid(pos, "produced batch has no records")
    if header.records_count != header.last_offset_delta + 1:
        _invalid(
            pos,
            f"recordsCount {header.records_count} does not match lastOffsetDelta "
            f"{header.last_offset_delta}",
        )
    if header.is_control:
        _invalid(pos, "clients may not produce control batches")
    if header.has_producer_id and header.base_sequence < 0:
        _invalid(pos, f"idempotent batch of producer {header.producer_id} has no sequence")


def _invalid(pos: int, reason: str) -> None:
    raise KafkaError(ErrorCode.INVALID_RECORD, f"record batch at {pos}: {reason}")


def validate_batches(buf: BytesLike, *, from_client: bool = True) -> list[tuple[int, BatchHeader]]:
    """Validate a whole `records` field (batches back to back); return (position, header) each.

    An empty field is INVALID_RECORD for clients (Kafka wants at least one batch); a torn last
    batch or a length past the end is CORRUPT_MESSAGE.
    """
    with memoryview(buf) as view:
        end = len(view)
        if end == 0 and from_client:
            raise KafkaError(ErrorCode.INVALID_RECORD, "produce request has no record batch")
        batches: list[tuple[int, BatchHeader]] = []
        pos = 0
        while pos < end:
            header = validate_batch(view, pos, from_client=from_client)
            batches.append((pos, header))
            pos += header.size_bytes
    return batches


def iter_batch_headers(
    buf: BytesLike, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Walk batches by their lengths only (no CRC), stopping quietly at a torn or nonsense tail.

    Log recovery pairs this with `validate_batch` to find the valid prefix of a segment.
    """
    with memoryview(buf) as view:
        limit = len(view) if end is None else min(end, len(view))
        while limit - pos >= BATCH_OVERHEAD:
            header = BatchHeader(*_HEADER.unpack_from(view, pos))
            size_bytes = header.size_bytes
            if size_bytes < BATCH_OVERHEAD or size_bytes > limit - pos:
                return
            yield pos, header
            pos += size_bytes


def batch_size_at(buf: BytesLike, pos: int = 0) -> int | None:
    """Bytes of the batch at pos from its length field, or None if fewer than 12 bytes remain."""
    with memoryview(buf) as view:
        if len(view) - pos < LOG_OVERHEAD:
            return None
        (batch_length,) = _LENGTH.unpack_from(view, pos + LENGTH_POS)
    return int(batch_length) + LOG_OVERHEAD


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's offsets in place; baseOffset lies outside the CRC, so it stays valid."""
    _OFFSET.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, leader_epoch: int) -> None:
    """Stamp the appending leader's epoch in place; outside the CRC, so it stays valid."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = timestamp_ms, then recompute the CRC.

    Consumers then read timestamp_ms as every record's timestamp, as in Kafka's LogValidator.
    """
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_POS)
    _INT16.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_FLAG)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp_ms)
    update_crc(buf, pos)


def set_producer_fields(
    buf: bytearray | memoryview,
    pos: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Overwrite producerId, producerEpoch and baseSequence, then recompute the CRC."""
    _INT64.pack_into(buf, pos + PRODUCER_ID_POS, producer_id)
    _INT16.pack_into(buf, pos + PRODUCER_EPOCH_POS, producer_epoch)
    _INT32.pack_into(buf, pos + BASE_SEQUENCE_POS, base_sequence)
    update_crc(buf, pos)
