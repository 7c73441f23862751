"""Message formats v0/v1: reading, up-conversion on produce, down-conversion on fetch.

Cross-checked with kafka-python's own v0/v1 codec (`kafka.record`), an implementation written
apart from ours: it reads what we write and we read what it writes. Bytes are checked against
the layout of Kafka's LegacyRecord written out by hand here (golden), round trips with
hypothesis, and bad input under the decoder contract (only DecodeError, or only KafkaError for
the produce converter's refusals).
"""

from __future__ import annotations

import random
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_ext.protocol.compression import (
    compress,
    lz4_frame_from_kafka_3160,
    lz4_frame_to_kafka_3160,
    xxh32,
)
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.legacy_records import (
    MAGIC_V0,
    MAGIC_V1,
    LegacyMessage,
    build_message_set,
    decode_message_set,
    down_convert,
    is_message_set,
    message_set_to_batch,
)
from kafka_ext.protocol.record_batch import Compression, TimestampType, set_log_append_time
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    build_end_txn_marker,
    decode_records,
)

LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
KAFKA_PYTHON_CODECS = {Compression.NONE: 0, Compression.GZIP: 1, Compression.LZ4: 3}  # no snappy lib
LOG_APPEND_TIME_FLAG = 0x08
NO_LIMIT = 1 << 30


def _kafka_python_read(message_set: bytes | bytearray) -> list[tuple[int, int | None, bytes | None,
                                                                     bytes | None]]:
    """(offset, timestamp, key, value) of every message, as kafka-python's consumer reads them."""
    records = MemoryRecords(bytes(message_set))
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def _kafka_python_write(magic: int, codec: int, messages: list[tuple[int | None, bytes | None,
                                                                     bytes | None]]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for offset, (timestamp, key, value) in enumerate(messages):
        builder.append(offset, timestamp=timestamp, key=key, value=value)
    return bytes(builder.build())


def _golden_message(offset: int, magic: int, attributes: int, timestamp: int | None,
                    key: bytes | None, value: bytes | None) -> bytes:
    """Kafka's LegacyRecord layout, written field by field."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


# -- the LZ4 framing of message format v0 (KAFKA-3160) -----------------------------------------

def test_xxh32_matches_the_reference_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_standard_lz4_header_checksum_is_what_the_lz4_library_writes() -> None:
    framed = lz4.frame.compress(b"x" * 1000, block_linked=False, store_size=True)
    assert lz4_frame_from_kafka_3160(framed) == framed


def test_magic_0_lz4_header_checksum_covers_the_frame_magic() -> None:
    framed = compress(Compression.LZ4, b"payload" * 50)
    broken = lz4_frame_to_kafka_3160(framed)
    assert broken[6] == (xxh32(framed[:6]) >> 8) & 0xFF != framed[6]
    assert broken[:6] == framed[:6] and broken[7:] == framed[7:]
    with pytest.raises(RuntimeError):  # a standard reader refuses it, as Kafka 0.10+ readers would
        lz4.frame.decompress(broken)
    assert lz4_frame_from_kafka_3160(broken) == framed


def test_magic_0_lz4_wrapper_is_read_and_written_with_the_broken_checksum() -> None:
    messages = [LegacyMessage(i, MAGIC_V0, 0, -1, None, b"v%d" % i) for i in range(3)]
    wrapper = build_message_set(messages, codec=Compression.LZ4)
    value = wrapper[12 + 14:]  # entry header, then crc, magic, attributes, key -1, value length
    assert value[6] == (xxh32(value[:6]) >> 8) & 0xFF
    assert [m.value for m in decode_message_set(wrapper)] == [b"v0", b"v1", b"v2"]


# -- golden bytes ------------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
def test_messages_are_written_in_kafkas_legacy_layout(magic: int) -> None:
    timestamp = 1_600_000_000_123 if magic else -1
    batch = build_batch([Record(5, timestamp, b"key", b"value"), Record(6, timestamp, None, b"")],
                        base_offset=5)
    converted = down_convert([batch], magic, 5, NO_LIMIT, min_one_message=True).message_set
    assert bytes(converted) == (_golden_message(5, magic, 0, timestamp, b"key", b"value")
                                + _golden_message(6, magic, 0, timestamp, None, b""))


@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
def test_uncompressed_messages_are_byte_for_byte_kafka_pythons(magic: int) -> None:
    rows = [(1000 + i if magic else None, b"k%d" % i if i % 2 else None, b"v%d" % i)
            for i in range(4)]
    ours = build_message_set([LegacyMessage(i, magic, 0, -1 if ts is None else ts, key, value)
                              for i, (ts, key, value) in enumerate(rows)])
    assert ours == _kafka_python_write(magic, 0, rows)


def test_is_message_set_looks_at_the_magic_byte() -> None:
    assert is_message_set(_golden_message(0, 1, 0, 0, None, b"v"))
    assert not is_message_set(build_batch([Record(0, 0, None, b"v")]))
    assert is_message_set(b"")


# -- produce: up-conversion ----------------------------------------------------------------------

# kafka-python writes magic 0 lz4 only with the xxhash package (not a dependency): that framing
# is checked against the hand-written layout above instead.
KAFKA_PYTHON_WRITES = [(m, c) for m in (MAGIC_V0, MAGIC_V1) for c in KAFKA_PYTHON_CODECS
                       if not (m == MAGIC_V0 and c == Compression.LZ4)]


@pytest.mark.parametrize(("magic", "codec"), KAFKA_PYTHON_WRITES,
                         ids=[f"v{m}-{c.name}" for m, c in KAFKA_PYTHON_WRITES])
def test_kafka_python_message_set_becomes_one_v2_batch_with_its_codec(magic: int,
                                                                      codec: Compression) -> None:
    rows = [(1000 + i if magic else None, b"k%d" % i if i % 2 else None, b"v%d" % i)
            for i in range(5)]
    batch = message_set_to_batch(_kafka_python_write(magic, KAFKA_PYTHON_CODECS[codec], rows),
                                 log_append_time=False)
    assert batch is not None
    header, records = decode_records(batch)
    assert header.compression == codec and header.producer_id == -1
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (i, -1 if ts is None else ts, key, value, []) for i, (ts, key, value) in enumerate(rows)]


@settings(max_examples=80, deadline=None)
@given(magic=st.sampled_from([MAGIC_V0, MAGIC_V1]), codec=st.sampled_from(LEGACY_CODECS),
       rows=st.lists(st.tuples(st.integers(0, 2**62), st.none() | st.binary(max_size=20),
                               st.none() | st.binary(max_size=40)), min_size=1, max_size=12),
       first_offset=st.integers(0, 1000))
def test_produced_message_set_round_trips_through_a_v2_batch(
        magic: int, codec: Compression, rows: list[tuple[int, bytes | None, bytes | None]],
        first_offset: int) -> None:
    messages = [LegacyMessage(first_offset + i, magic, 0, ts if magic else -1, key, value)
                for i, (ts, key, value) in enumerate(rows)]
    batch = message_set_to_batch(build_message_set(messages, codec=codec), log_append_time=False)
    assert batch is not None
    header, records = decode_records(batch)
    assert header.compression == codec
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (i, m.timestamp, m.key, m.value) for i, m in enumerate(messages)]


def test_torn_last_message_is_dropped_and_nothing_whole_is_none() -> None:
    whole = _golden_message(0, 1, 0, 5, None, b"a") + _golden_message(1, 1, 0, 6, None, b"b")
    batch = message_set_to_batch(whole + _golden_message(2, 1, 0, 7, None, b"c")[:-3],
                                 log_append_time=False)
    assert batch is not None
    assert [r.value for r in decode_records(batch)[1]] == [b"a", b"b"]
    assert message_set_to_batch(whole[:20], log_append_time=False) is None
    assert message_set_to_batch(b"", log_append_time=False) is None


def _message_set_error(data: bytes, *, log_append_time: bool = False) -> ErrorCode:
    with pytest.raises(KafkaError) as caught:
        message_set_to_batch(data, log_append_time=log_append_time)
    return caught.value.code


def _wrapper(magic: int, inner: bytes, *, offset: int = 0, attributes: int = 1,
             codec: Compression = Compression.GZIP, timestamp: int = 0) -> bytes:
    return _golden_message(offset, magic, attributes, timestamp, None, compress(codec, inner))


def test_bad_crc_is_corrupt_message() -> None:
    data = bytearray(_golden_message(0, 1, 0, 5, b"k", b"value"))
    data[-1] ^= 0xFF
    assert _message_set_error(bytes(data)) == ErrorCode.CORRUPT_MESSAGE


def test_inner_message_with_bad_crc_is_corrupt_message() -> None:
    inner = bytearray(_golden_message(0, 1, 0, 5, b"k", b"value"))
    inner[-1] ^= 0xFF
    assert _message_set_error(_wrapper(1, bytes(inner))) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("size", [0, 13, -5])
def test_message_smaller_than_any_message_is_corrupt(size: int) -> None:
    assert _message_set_error(struct.pack(">qi", 0, size) + b"\0" * 20) == ErrorCode.CORRUPT_MESSAGE


def test_unknown_magic_is_corrupt_message() -> None:
    data = bytearray(_golden_message(0, 1, 0, 5, None, b"v"))
    data[16] = 7
    assert _message_set_error(bytes(data)) == ErrorCode.CORRUPT_MESSAGE


def test_mixed_magics_are_invalid_record() -> None:
    data = _golden_message(0, 1, 0, 5, None, b"a") + _golden_message(1, 0, 0, -1, None, b"b")
    assert _message_set_error(data) == ErrorCode.INVALID_RECORD
    batch = build_batch([Record(0, 0, None, b"v2")])
    assert _message_set_error(_golden_message(0, 1, 0, 5, None, b"a") + batch) == (
        ErrorCode.INVALID_RECORD)


def test_more_than_one_compressed_message_is_invalid_record() -> None:
    inner = _golden_message(0, 1, 0, 5, None, b"a")
    assert _message_set_error(_wrapper(1, inner) + _wrapper(1, inner, offset=1)) == (
        ErrorCode.INVALID_RECORD)
    assert _message_set_error(_golden_message(0, 1, 0, 5, None, b"plain") + _wrapper(1, inner)) == (
        ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("inner", [
    pytest.param(b"", id="no inner messages"),
    pytest.param(_golden_message(0, 0, 0, -1, None, b"a"), id="inner magic differs"),
    pytest.param(_golden_message(0, 1, 1, 5, None, b"nested"), id="inner compressed"),
])
def test_wrappers_kafka_refuses_are_invalid_record(inner: bytes) -> None:
    assert _message_set_error(_wrapper(1, inner)) == ErrorCode.INVALID_RECORD


def test_wrapper_with_null_value_or_zstd_is_invalid_record() -> None:
    assert _message_set_error(_golden_message(0, 1, 1, 0, None, None)) == ErrorCode.INVALID_RECORD
    inner = _golden_message(0, 1, 0, 5, None, b"a")
    assert _message_set_error(_wrapper(1, inner, attributes=4, codec=Compression.ZSTD)) == (
        ErrorCode.INVALID_RECORD)


def test_wrapper_that_does_not_inflate_is_corrupt_message() -> None:
    assert _message_set_error(_golden_message(0, 1, 1, 0, None, b"not gzip")) == (
        ErrorCode.CORRUPT_MESSAGE)


def test_v1_wrapper_offset_below_its_last_inner_offset_is_invalid_record() -> None:
    inner = b"".join(_golden_message(i, 1, 0, 5, None, b"x") for i in range(3))
    assert _message_set_error(_wrapper(1, inner, offset=1)) == ErrorCode.INVALID_RECORD
    for wrapper_offset in (0, 2, 99):  # 0 from some producers, as Kafka accepts it
        batch = message_set_to_batch(_wrapper(1, inner, offset=wrapper_offset),
                                     log_append_time=False)
        assert batch is not None and decode_records(batch)[0].records_count == 3


def test_producer_log_append_time_follows_kafkas_timestamp_rule() -> None:
    stamped = _golden_message(0, 1, LOG_APPEND_TIME_FLAG, 1234, None, b"v")
    assert _message_set_error(stamped, log_append_time=True) == ErrorCode.INVALID_TIMESTAMP
    unstamped = _golden_message(0, 1, LOG_APPEND_TIME_FLAG, -1, None, b"v")
    assert _message_set_error(unstamped) == ErrorCode.INVALID_TIMESTAMP
    # A CreateTime topic takes the timestamp (it checks its range on append).
    batch = message_set_to_batch(stamped, log_append_time=False)
    assert batch is not None and decode_records(batch)[1][0].timestamp == 1234
    inner = _golden_message(0, 1, 0, 5, None, b"a")
    wrapper = _wrapper(1, inner, attributes=1 | LOG_APPEND_TIME_FLAG, timestamp=777)
    assert _message_set_error(wrapper, log_append_time=True) == ErrorCode.INVALID_TIMESTAMP
    batch = message_set_to_batch(wrapper, log_append_time=False)
    assert batch is not None and decode_records(batch)[1][0].timestamp == 777  # the wrapper's


# -- fetch: down-conversion ----------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(magic=st.sampled_from([MAGIC_V0, MAGIC_V1]), codec=st.sampled_from(LEGACY_CODECS),
       rows=st.lists(st.tuples(st.integers(0, 2**62), st.none() | st.binary(max_size=20),
                               st.none() | st.binary(max_size=40)), min_size=1, max_size=12),
       base_offset=st.integers(0, 2**40), gaps=st.lists(st.integers(1, 3), min_size=12,
                                                         max_size=12))
def test_v2_batch_round_trips_through_down_conversion(
        magic: int, codec: Compression, rows: list[tuple[int, bytes | None, bytes | None]],
        base_offset: int, gaps: list[int]) -> None:
    offsets = [base_offset + sum(gaps[:i]) for i in range(len(rows))]  # gaps, as after compaction
    records = [Record(o, ts, key, value, [("h", b"dropped")])
               for o, (ts, key, value) in zip(offsets, rows, strict=True)]
    batch = build_batch(records, base_offset=base_offset, compression=codec)
    converted = down_convert([batch], magic, base_offset, NO_LIMIT, min_one_message=True)
    assert converted.next_offset == offsets[-1] + 1
    got = decode_message_set(converted.message_set)
    assert [(m.offset, m.magic, m.timestamp, m.key, m.value) for m in got] == [
        (r.offset, magic, r.timestamp if magic else -1, r.key, r.value) for r in records]
    if codec in KAFKA_PYTHON_CODECS and not (magic == MAGIC_V0 and codec == Compression.LZ4):
        assert _kafka_python_read(converted.message_set) == [
            (r.offset, r.timestamp if magic else None, r.key, r.value) for r in records]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
def test_compressed_batch_becomes_one_wrapper_of_its_codec(magic: int, codec: Compression) -> None:
    records = [Record(10 + i, 500 + i, None, b"v%d" % i) for i in range(4)]
    batch = build_batch(records, base_offset=10, compression=codec)
    message_set = down_convert([batch], magic, 12, NO_LIMIT, min_one_message=True).message_set
    offset, size = struct.unpack_from(">qi", message_set)
    assert (offset, len(message_set)) == (13, 12 + size)  # one wrapper: the last inner offset
    assert message_set[17] == int(codec)  # its attributes: the codec
    if magic == MAGIC_V1:
        assert struct.unpack_from(">q", message_set, 18)[0] == 503  # the largest timestamp
    # The whole batch, even before the fetch offset: old consumers skip those themselves.
    assert [m.offset for m in decode_message_set(message_set)] == [10, 11, 12, 13]


def test_uncompressed_batch_starts_at_the_fetch_offset() -> None:
    batch = build_batch([Record(10 + i, 0, None, b"v%d" % i) for i in range(4)], base_offset=10)
    message_set = down_convert([batch], MAGIC_V1, 12, NO_LIMIT, min_one_message=True).message_set
    assert [m.offset for m in decode_message_set(message_set)] == [12, 13]


def test_log_append_time_batch_gives_stamped_v1_messages() -> None:
    for codec in (Compression.NONE, Compression.GZIP):
        batch = bytearray(build_batch([Record(0, 5, None, b"a"), Record(1, 6, None, b"b")],
                                      compression=codec))
        set_log_append_time(batch, 0, 9999)  # as the log stamps it on append
        message_set = down_convert([batch], MAGIC_V1, 0, NO_LIMIT,
                                   min_one_message=True).message_set
        assert message_set[17] & LOG_APPEND_TIME_FLAG  # the first (outer) message
        got = decode_message_set(message_set)
        assert [(m.timestamp, m.is_log_append_time) for m in got] == [(9999, True)] * 2


def test_control_batches_are_dropped_and_transactional_data_is_kept() -> None:
    data = build_batch([Record(0, 0, None, b"txn")], producer_id=7, producer_epoch=0,
                       base_sequence=0, is_transactional=True)
    marker = build_end_txn_marker(ControlRecordType.ABORT, producer_id=7, producer_epoch=0,
                                  coordinator_epoch=0, timestamp_ms=0, base_offset=1)
    after = build_batch([Record(2, 0, None, b"after")], base_offset=2)
    converted = down_convert([data + marker, after], MAGIC_V0, 0, NO_LIMIT, min_one_message=True)
    assert [(m.offset, m.value) for m in decode_message_set(converted.message_set)] == [
        (0, b"txn"), (2, b"after")]
    only_marker = down_convert([marker], MAGIC_V0, 1, NO_LIMIT, min_one_message=True)
    assert (bytes(only_marker.message_set), only_marker.next_offset) == (b"", 2)


def test_limit_cuts_between_whole_messages_and_the_first_may_exceed_it() -> None:
    batch = build_batch([Record(i, 0, None, b"x" * 100) for i in range(5)])
    one = len(_golden_message(0, 1, 0, 0, None, b"x" * 100))
    cut = down_convert([batch], MAGIC_V1, 0, 2 * one + one // 2, min_one_message=False)
    assert [m.offset for m in decode_message_set(cut.message_set)] == [0, 1]
    assert len(cut.message_set) == 2 * one
    assert down_convert([batch], MAGIC_V1, 0, 10, min_one_message=False).message_set == b""
    first = down_convert([batch], MAGIC_V1, 0, 10, min_one_message=True)
    assert [m.offset for m in decode_message_set(first.message_set)] == [0]
    wrapped = build_batch([Record(i, 0, None, b"x" * 100) for i in range(5)],
                          compression=Compression.GZIP)
    assert down_convert([wrapped], MAGIC_V1, 0, 10, min_one_message=False).message_set == b""
    whole = down_convert([wrapped], MAGIC_V1, 0, 10, min_one_message=True).message_set
    assert len(decode_message_set(whole)) == 5


def test_zstd_batch_cannot_be_down_converted() -> None:
    plain = build_batch([Record(0, 0, None, b"a")])
    zstd = build_batch([Record(1, 0, None, b"b")], base_offset=1, compression=Compression.ZSTD)
    with pytest.raises(KafkaError) as caught:
        down_convert([zstd], MAGIC_V1, 1, NO_LIMIT, min_one_message=True)
    assert caught.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    converted = down_convert([plain + zstd], MAGIC_V1, 0, NO_LIMIT, min_one_message=True)
    assert [m.value for m in decode_message_set(converted.message_set)] == [b"a"]


# -- bad input under the decoder contract --------------------------------------------------------

def _mangled_cases(seed: str, count: int) -> list[bytes]:
    rng = random.Random(seed)
    valid = [
        build_message_set([LegacyMessage(i, m, 0, 5 if m else -1, b"k", b"v" * i)
                           for i in range(3)], codec=c)
        for m in (MAGIC_V0, MAGIC_V1) for c in LEGACY_CODECS]
    cases = []
    for _ in range(count):
        data = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 3)):
            choice = rng.random()
            if choice < 0.4 and data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif choice < 0.6 and data:
                del data[rng.randrange(len(data)):]
            elif choice < 0.8 and len(data) >= 4:
                pos = rng.randrange(len(data) - 3)
                data[pos:pos + 4] = struct.pack(">i", rng.choice((-1, -2, 2**31 - 1, 13, 0)))
            else:
                pos = rng.randrange(len(data) + 1)
                data[pos:pos] = rng.randbytes(rng.randint(1, 12))
        cases.append(bytes(data))
    return cases


def test_decoder_raises_only_decode_error_on_mangled_message_sets() -> None:
    for data in _mangled_cases("decode", 1500):
        try:
            decode_message_set(data)
        except DecodeError:
            pass
        except Exception as exc:  # the contract under test
            raise AssertionError(f"{type(exc).__name__}: {exc} on {data.hex()}") from exc


def test_produce_converter_raises_only_kafkas_errors_on_mangled_message_sets() -> None:
    for data in _mangled_cases("produce", 1500):
        try:
            message_set_to_batch(data, log_append_time=False)
        except KafkaError as exc:
            assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), exc
        except Exception as exc:  # the contract under test
            raise AssertionError(f"{type(exc).__name__}: {exc} on {data.hex()}") from exc
