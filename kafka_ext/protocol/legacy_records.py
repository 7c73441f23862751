"""Message formats v0 and v1, at the edge only: Kafka's LegacyRecord and AbstractLegacyRecordBatch.

Old producers (Produce v0-2) send message sets: `message_set_to_batch` turns one into a single v2
batch, as Kafka 3.x's LogValidator converts on append. Old consumers (Fetch v0-3) read message
sets: `down_convert` writes v2 batches as magic 0 or 1 messages within a byte limit, as Kafka's
RecordsUtil.downConvert and LazyDownConversionRecords do. Nothing on disk is ever v0/v1.

A message set is entries back to back: offset (int64), size (int32), then a message of `size`
bytes: crc (CRC-32 of the rest, zlib's polynomial, not CRC-32C), magic, attributes, timestamp
(magic 1 only), key and value (int32 length, -1 for null). A compressed message (a "wrapper",
key null) holds a whole inner message set in its value: magic 1 inner offsets are relative (the
wrapper's offset is the last inner one's absolute offset), magic 0 inner offsets absolute.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from kafka_ext.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    compress,
    decompress,
    lz4_frame_from_kafka_3160,
    lz4_frame_to_kafka_3160,
)
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_POS,
    NO_TIMESTAMP,
    BatchHeader,
    BytesLike,
    Compression,
    TimestampType,
    iter_batch_headers,
)
from kafka_ext.protocol.records import Record, build_batch, decode_records

MAGIC_V0 = 0
MAGIC_V1 = 1

# One entry of a message set, before its message.
_ENTRY = struct.Struct(
    ">"
    "q"  # offset: absolute, or relative inside a magic 1 wrapper
    "i"  # size: bytes of the message that follows
)
# The fixed start of a message, both magics.
_MESSAGE_HEAD = struct.Struct(
    ">"
    "I"  # crc: CRC-32 of every byte from magic to the end of the message
    "b"  # magic: 0 or 1
    "b"  # attributes: codec bits 0-2, timestamp type bit 3 (magic 1)
)
_TIMESTAMP = struct.Struct(">q")  # magic 1: CreateTime, or LogAppendTime of the wrapper
_LENGTH = struct.Struct(">i")  # key and value length, -1 for null
_CRC = struct.Struct(">I")

_CRC_POS = 0  # in a message
_MAGIC_POS_IN_MESSAGE = 4  # the CRC covers from here on
RECORD_OVERHEAD_V0 = 14  # crc 4, magic 1, attributes 1, key length 4, value length 4
RECORD_OVERHEAD_V1 = 22  # and the timestamp, 8
_RECORD_OVERHEAD = (RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1)

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_FLAG = 0x08  # magic 1 only
# Message formats v0/v1 know no zstd (KIP-110 brought it with v2 only).
_LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)


@dataclass(slots=True, frozen=True)
class LegacyMessage:
    """One v0/v1 message with its offset; inner messages carry absolute offsets and, inside a
    LogAppendTime wrapper, the wrapper's timestamp (as Kafka's deep iterator hands them out)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # NO_TIMESTAMP at magic 0
    key: bytes | None
    value: bytes | None

    @property
    def codec_id(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return self.magic == MAGIC_V1 and bool(self.attributes & _TIMESTAMP_TYPE_FLAG)


@dataclass(slots=True)
class DownConversion:
    """What `down_convert` wrote: whole messages only, and where reading may go on when
    nothing was written (past control batches and records before the fetch offset)."""

    message_set: bytearray
    next_offset: int


# ---------------------------------------------------------------------------------------------
# Reading


def decode_message_set(buf: BytesLike, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
                       ) -> list[LegacyMessage]:
    """Every message of a v0/v1 message set, wrappers opened (inner messages with absolute
    offsets), as a consumer reads a fetch answer: a torn last entry is dropped. Raises only
    DecodeError; max_bytes bounds each wrapper's inflated value."""
    try:
        messages: list[LegacyMessage] = []
        for message in _shallow_messages(buf):
            if message.codec_id == Compression.NONE:
                messages.append(message)
            else:
                messages.extend(_inner_messages(message, max_bytes))
        return messages
    except DecodeError:
        raise
    except KafkaError as exc:  # a rule Kafka enforces on produce: to a decoder, bytes that do not parse
        raise DecodeError(exc.message) from exc


def is_message_set(records: BytesLike) -> bool:
    """Whether a produce request's records are v0/v1 messages rather than a v2 batch (the magic
    byte sits at the same place in both); too short to tell counts as a message set."""
    return len(records) <= MAGIC_POS or records[MAGIC_POS] < CURRENT_MAGIC


def _shallow_messages(buf: BytesLike) -> list[LegacyMessage]:
    """The top-level messages; all must share the first one's magic (INVALID_RECORD otherwise,
    as Kafka's LogValidator). A torn last entry is dropped, as Kafka's log input stream does."""
    with memoryview(buf) as view:
        end = len(view)
        messages: list[LegacyMessage] = []
        pos = 0
        while True:
            entry = _read_entry(view, pos, end)
            if entry is None:
                return messages
            offset, start, stop = entry
            magic = view[start + _MAGIC_POS_IN_MESSAGE]
            if messages and magic != messages[0].magic:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"message magic {magic} is not the first message's "
                                 f"{messages[0].magic}")
            if magic not in (MAGIC_V0, MAGIC_V1):
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"message at {pos} has magic {magic} in a v0/v1 message set")
            messages.append(_read_message(view, start, stop, offset))
            pos = stop


def _read_entry(view: memoryview, pos: int, end: int) -> tuple[int, int, int] | None:
    """(offset, message start, message end) of the entry at pos, or None when it is torn."""
    if end - pos < LOG_OVERHEAD:
        return None
    offset, size = _ENTRY.unpack_from(view, pos)
    if size < RECORD_OVERHEAD_V0:
        raise DecodeError(f"message at {pos} claims {size} bytes, fewer than the smallest message")
    start = pos + LOG_OVERHEAD
    if end - start > _MAGIC_POS_IN_MESSAGE and not 0 <= view[start + _MAGIC_POS_IN_MESSAGE] <= 2:
        raise DecodeError(f"message at {pos} has magic {view[start + _MAGIC_POS_IN_MESSAGE]}")
    if end - start < size:
        return None
    return offset, start, start + size


def _read_message(view: memoryview, start: int, end: int, offset: int) -> LegacyMessage:
    """The message in view[start:end], its CRC checked (CORRUPT_MESSAGE)."""
    crc, magic, attributes = _MESSAGE_HEAD.unpack_from(view, start)
    if end - start < _RECORD_OVERHEAD[magic]:
        raise DecodeError(f"magic {magic} message of {end - start} bytes is cut short")
    computed = zlib.crc32(view[start + _MAGIC_POS_IN_MESSAGE:end])
    if computed != crc:
        raise DecodeError(f"message at offset {offset} has CRC {crc:#010x}, computed {computed:#010x}")
    pos = start + _MESSAGE_HEAD.size
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _TIMESTAMP.unpack_from(view, pos)
        pos += _TIMESTAMP.size
    key, pos = _read_bytes(view, pos, end)
    value, pos = _read_bytes(view, pos, end)
    if pos != end:
        raise DecodeError(f"message at offset {offset} has {end - pos} bytes after its value")
    return LegacyMessage(offset, magic, attributes, timestamp, key, value)


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < _LENGTH.size:
        raise DecodeError("message key or value length is cut short")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += _LENGTH.size
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise DecodeError(f"message key or value of {length} bytes overruns its message")
    return bytes(view[pos:pos + length]), pos + length


def _inner_messages(wrapper: LegacyMessage, max_bytes: int) -> list[LegacyMessage]:
    """Open a wrapper, as Kafka's DeepRecordsIterator and LogValidator do: INVALID_RECORD for
    what they refuse, CORRUPT_MESSAGE (DecodeError) for bytes that do not parse."""
    codec = _legacy_codec(wrapper)
    if wrapper.value is None:
        raise KafkaError(ErrorCode.INVALID_RECORD, "compressed message set with a null value")
    data = _decompress(codec, wrapper.value, wrapper.magic, max_bytes)
    inner: list[LegacyMessage] = []
    with memoryview(data) as view:
        end = len(view)
        pos = 0
        while (entry := _read_entry(view, pos, end)) is not None:  # a torn tail is dropped
            offset, start, stop = entry
            magic = view[start + _MAGIC_POS_IN_MESSAGE]
            if magic != wrapper.magic:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"inner message magic {magic} does not match wrapper magic "
                                 f"{wrapper.magic}")
            message = _read_message(view, start, stop, offset)
            if message.codec_id != Compression.NONE:
                raise KafkaError(ErrorCode.INVALID_RECORD, "inner messages must not be compressed")
            inner.append(message)
            pos = stop
    if not inner:
        raise KafkaError(ErrorCode.INVALID_RECORD, "compressed message set with no inner messages")
    if wrapper.magic == MAGIC_V0:
        return inner
    # Magic 1: relative offsets; a wrapper offset of 0 comes from some producers (librdkafka),
    # and Kafka then takes the inner offsets as they are.
    base = 0
    if wrapper.offset != 0:
        last = inner[-1].offset
        if wrapper.offset < last:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"wrapper offset {wrapper.offset} is below the last inner offset "
                             f"{last} and not zero")
        base = wrapper.offset - last
    log_append_time = wrapper.is_log_append_time
    type_flag = wrapper.attributes & _TIMESTAMP_TYPE_FLAG  # inner messages take the wrapper's
    return [LegacyMessage(base + m.offset, m.magic, m.attributes | type_flag,
                          wrapper.timestamp if log_append_time else m.timestamp, m.key, m.value)
            for m in inner]


def _legacy_codec(wrapper: LegacyMessage) -> Compression:
    codec_id = wrapper.codec_id
    if codec_id >= len(_LEGACY_CODECS):
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"compression id {codec_id} does not exist in message format v{wrapper.magic}")
    return _LEGACY_CODECS[codec_id]


def _decompress(codec: Compression, data: bytes, magic: int, max_bytes: int) -> bytes:
    if codec == Compression.LZ4 and magic == MAGIC_V0:
        data = lz4_frame_from_kafka_3160(data)
    return decompress(codec, data, max_bytes=max_bytes)


# ---------------------------------------------------------------------------------------------
# Produce: up-conversion


def message_set_to_batch(buf: BytesLike, *, log_append_time: bool,
                         max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes | None:
    """A produced v0/v1 message set as one v2 batch (offsets from 0, no producer id, CreateTime,
    the wrapper's codec), as Kafka 3.x's LogValidator converts it; None when not one whole
    message is there (Kafka then appends nothing and answers no error).

    `log_append_time`: the topic's message.timestamp.type. Raises KafkaError: CORRUPT_MESSAGE
    (DecodeError) for bytes that do not parse or a bad CRC, INVALID_RECORD for a message set
    Kafka refuses (more than one wrapper, mixed magics, nested compression, an empty wrapper),
    INVALID_TIMESTAMP for a LogAppendTime message Kafka refuses.
    """
    shallow = _shallow_messages(buf)
    if not shallow:
        return None
    codec = Compression.NONE
    messages = shallow
    if any(m.codec_id != Compression.NONE for m in shallow):
        if len(shallow) > 1:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             "compressed message set has more than one outer message")
        codec = _legacy_codec(shallow[0])
        messages = _inner_messages(shallow[0], max_bytes)
    records = []
    for index, message in enumerate(messages):  # per-message loop: the conversion is per message
        # Kafka's validateTimestamp: a producer may not claim LogAppendTime, except for a
        # timestamp a CreateTime topic checks anyway.
        if message.is_log_append_time and (log_append_time or message.timestamp == NO_TIMESTAMP):
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                             f"message {index} has timestamp type LogAppendTime; producers may "
                             "not set it")
        records.append(Record(index, message.timestamp, message.key, message.value))
    return build_batch(records, compression=codec)


# ---------------------------------------------------------------------------------------------
# Fetch: down-conversion


def down_convert(chunks: Iterable[BytesLike], magic: int, fetch_offset: int, max_bytes: int, *,
                 min_one_message: bool) -> DownConversion:
    """Write the v2 batches in chunks (whole batches back to back, e.g. segment slices) as magic
    0 or 1 messages, at most max_bytes of them; with min_one_message the first message (or
    wrapper) is written even when it alone exceeds max_bytes, so a consumer makes progress.

    As Kafka's RecordsUtil.downConvert: control batches are dropped (aborted transactional data
    is not: old consumers read uncommitted), headers are dropped, an uncompressed batch becomes
    one message per record from fetch_offset on, a compressed one a wrapper of the same codec
    holding all its records. A batch that cannot be converted (zstd, corrupt) ends the answer;
    when it comes first it raises KafkaError (UNSUPPORTED_COMPRESSION_TYPE, CORRUPT_MESSAGE).
    """
    out = bytearray()
    next_offset = fetch_offset
    for chunk in chunks:
        for pos, header in iter_batch_headers(chunk):
            if header.is_control:
                next_offset = header.next_offset
                continue
            try:
                full = _write_batch(out, chunk, pos, header, magic, fetch_offset, max_bytes,
                                    min_one_message)
            except KafkaError:
                if out:
                    return DownConversion(out, next_offset)
                raise
            if full:
                return DownConversion(out, next_offset)
            next_offset = header.next_offset
    return DownConversion(out, next_offset)


def _write_batch(out: bytearray, chunk: BytesLike, pos: int, header: BatchHeader, magic: int,
                 fetch_offset: int, max_bytes: int, min_one_message: bool) -> bool:
    """Append one batch's messages to out; True once max_bytes stopped it."""
    codec = header.compression
    if codec == Compression.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         "zstd batches cannot be down-converted to message format "
                         f"v{magic} (Fetch v3 and below)")
    _, records = decode_records(chunk, pos, verify_crc=False)
    log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    attributes = _TIMESTAMP_TYPE_FLAG if log_append_time and magic == MAGIC_V1 else 0
    if codec == Compression.NONE:
        for record in records:  # per-record loop: every record becomes a message of its own
            if record.offset < fetch_offset:
                continue  # old consumers expect uncompressed messages from the fetch offset
            size = LOG_OVERHEAD + _message_size(magic, record.key, record.value)
            if len(out) + size > max_bytes and (out or not min_one_message):
                return True
            _write_message(out, record.offset, magic, attributes, record.timestamp,
                           record.key, record.value)
        return False
    if not records:
        return False
    wrapper = _wrapper(records, magic, codec, attributes)
    if len(out) + len(wrapper) > max_bytes and (out or not min_one_message):
        return True
    out += wrapper
    return False


def _wrapper(records: list[Record], magic: int, codec: Compression, attributes: int
             ) -> bytearray:
    """One compressed message holding records (Kafka's MemoryRecordsBuilder for magic 0/1); its
    timestamp is the largest inner one (under LogAppendTime every record has the append time)."""
    inner = bytearray()
    base_offset = records[0].offset
    max_timestamp = NO_TIMESTAMP
    for record in records:  # per-record loop: the inner message set is written message by message
        inner_offset = record.offset - base_offset if magic == MAGIC_V1 else record.offset
        _write_message(inner, inner_offset, magic, attributes, record.timestamp,
                       record.key, record.value)
        max_timestamp = max(max_timestamp, record.timestamp)
    value = compress(codec, inner)
    if codec == Compression.LZ4 and magic == MAGIC_V0:
        value = lz4_frame_to_kafka_3160(value)
    out = bytearray()
    _write_message(out, records[-1].offset, magic, attributes | int(codec), max_timestamp,
                   None, value)
    return out


def _message_size(magic: int, key: bytes | None, value: bytes | None) -> int:
    return (_RECORD_OVERHEAD[magic] + (len(key) if key is not None else 0)
            + (len(value) if value is not None else 0))


def _write_message(out: bytearray, offset: int, magic: int, attributes: int, timestamp: int,
                   key: bytes | None, value: bytes | None) -> None:
    """Append one entry (offset, size, message) with its CRC."""
    out += _ENTRY.pack(offset, _message_size(magic, key, value))
    start = len(out)
    out += _MESSAGE_HEAD.pack(0, magic, attributes)
    if magic == MAGIC_V1:
        out += _TIMESTAMP.pack(timestamp)
    _write_bytes(out, key)
    _write_bytes(out, value)
    with memoryview(out) as view:
        crc = zlib.crc32(view[start + _MAGIC_POS_IN_MESSAGE:])
    _CRC.pack_into(out, start + _CRC_POS, crc)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _LENGTH.pack(-1)
    else:
        out += _LENGTH.pack(len(data))
        out += data


def build_message_set(messages: Iterable[LegacyMessage], *, codec: Compression = Compression.NONE
                      ) -> bytes:
    """Encode messages as a message set, or with a codec as one wrapper of their magic (inner
    offsets as given, wrapper offset the last one's): what old producers send; for tests and
    tools."""
    out = bytearray()
    listed = list(messages)
    for message in listed:
        _write_message(out, message.offset, message.magic, message.attributes, message.timestamp,
                       message.key, message.value)
    if codec == Compression.NONE or not listed:
        return bytes(out)
    magic = listed[0].magic
    value = compress(codec, out)
    if codec == Compression.LZ4 and magic == MAGIC_V0:
        value = lz4_frame_to_kafka_3160(value)
    wrapper = bytearray()
    timestamp = max(m.timestamp for m in listed)
    _write_message(wrapper, listed[-1].offset, magic, int(codec), timestamp, None, value)
    return bytes(wrapper)
