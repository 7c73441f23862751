"""Records inside v2 batches: build/decode round trips, stock client builders, control markers."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioRecordBatch  # type: ignore[import-untyped]
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec  # type: ignore[import-untyped]
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBatchBuilder  # type: ignore[import-untyped]

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    RECORDS_COUNT_POS,
    Compression,
    TimestampType,
    set_base_offset,
    set_log_append_time,
    update_crc,
    validate_batch,
)
from kafka_ext.protocol.records import (
    ControlRecordType,
    EndTxnMarker,
    Record,
    build_batch,
    build_end_txn_marker,
    control_record,
    control_record_type,
    decode_all_batches,
    decode_end_txn_marker,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    recompress_batch,
    records_for,
)

nullable_bytes = st.one_of(st.none(), st.binary(max_size=100))
headers = st.lists(st.tuples(st.text(max_size=10), nullable_bytes), max_size=3)


@st.composite
def record_lists(draw: st.DrawFn, base_offset: int = 0) -> list[Record]:
    """Records with increasing offsets (gaps allowed) and any int64-range timestamps."""
    gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=12))
    offsets = [base_offset + sum(gaps[:i]) - gaps[0] for i in range(1, len(gaps) + 1)]
    return [
        Record(offset, draw(st.integers(0, 2**45)), draw(nullable_bytes), draw(nullable_bytes), draw(headers))
        for offset in offsets
    ]


def sample_rows() -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    return [
        (b"key-%d" % i if i % 3 else None, b"value-%d" % i * (i + 1) if i % 5 else None, [("trace", b"t%d" % i), ("empty", None)] if i % 2 else [])
        for i in range(40)
    ]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), codec=st.sampled_from(Compression), base_offset=st.integers(0, 2**40))
def test_build_then_decode_returns_the_same_records(data: st.DataObject, codec: Compression, base_offset: int) -> None:
    records = data.draw(record_lists(base_offset))
    batch = build_batch(records, base_offset=base_offset, compression=codec)
    header, decoded = decode_records(batch)
    assert decoded == records
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.last_offset == records[-1].offset
    assert header.max_timestamp == max(record.timestamp for record in records)


def test_negative_timestamp_deltas_round_trip() -> None:
    records = [Record(0, 5_000, None, b"a"), Record(1, 1_000, None, b"b"), Record(2, -1, b"k", None)]
    header, decoded = decode_records(build_batch(records))
    assert decoded == records
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 5_000)


def test_decode_uses_assigned_base_offset() -> None:
    batch = bytearray(build_batch(records_for([b"a", b"b"])))
    set_base_offset(batch, 0, 1_000)
    _, decoded = decode_records(batch)
    assert [(record.offset, record.value) for record in decoded] == [(1_000, b"a"), (1_001, b"b")]


def test_log_append_time_gives_every_record_max_timestamp() -> None:
    batch = bytearray(build_batch([Record(0, 10, None, b"a"), Record(1, 20, None, b"b")]))
    set_log_append_time(batch, 0, 99_999)
    header, decoded = decode_records(batch)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [record.timestamp for record in decoded] == [99_999, 99_999]


def test_build_rejects_offsets_that_do_not_increase() -> None:
    with pytest.raises(ValueError):
        build_batch([Record(3, 0, None, b"a"), Record(3, 0, None, b"b")], base_offset=3)
    with pytest.raises(ValueError):
        build_batch([Record(2, 0, None, b"a")], base_offset=3)


def _kafka_python_batch(codec: Compression, rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    builder = KafkaPythonBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False,
        producer_id=1234, producer_epoch=5, base_sequence=17, batch_size=10_000_000,
    )
    for i, (key, value, record_headers) in enumerate(rows):
        builder.append(i, timestamp=1_700_000_000_000 + 7 * i, key=key, value=value, headers=record_headers)
    return bytes(builder.build())


def _aiokafka_batch(codec: Compression, rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    builder = AioBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=1,
        producer_id=99, producer_epoch=0, base_sequence=0, batch_size=10_000_000,
    )
    for i, (key, value, record_headers) in enumerate(rows):
        builder.append(i, timestamp=1_700_000_000_000 - i, key=key, value=value, headers=record_headers)
    return bytes(builder.build())


KAFKA_PYTHON_CODECS = [
    codec for codec, available in [
        (Compression.NONE, True),
        (Compression.GZIP, kafka_python_codec.has_gzip()),
        (Compression.SNAPPY, kafka_python_codec.has_snappy()),
        (Compression.LZ4, kafka_python_codec.has_lz4()),
        (Compression.ZSTD, kafka_python_codec.has_zstd()),
    ] if available
]


def test_kafka_python_supports_the_codecs_we_cross_check() -> None:
    # Snappy needs python-snappy, which kafka-python lacks here; aiokafka covers it below.
    assert {Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD} <= set(KAFKA_PYTHON_CODECS)


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_kafka_python_batch_validates_and_decodes(codec: Compression) -> None:
    rows = sample_rows()
    batch = _kafka_python_batch(codec, rows)
    header = validate_batch(batch, from_client=True)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, 17)
    _, decoded = decode_records(batch)
    assert decoded == [
        Record(i, 1_700_000_000_000 + 7 * i, key, value, record_headers)
        for i, (key, value, record_headers) in enumerate(rows)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_batch_validates_and_decodes(codec: Compression) -> None:
    rows = sample_rows()
    batch = _aiokafka_batch(codec, rows)
    header = validate_batch(batch, from_client=True)
    assert header.compression == codec and header.is_transactional
    _, decoded = decode_records(batch)
    assert decoded == [
        Record(i, 1_700_000_000_000 - i, key, value, record_headers)
        for i, (key, value, record_headers) in enumerate(rows)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches(codec: Compression) -> None:
    rows = sample_rows()
    records = [Record(50 + i, 1_000 + i, key, value, h) for i, (key, value, h) in enumerate(rows)]
    batch = build_batch(records, base_offset=50, compression=codec, producer_id=3, producer_epoch=1, base_sequence=0)
    theirs = AioRecordBatch(batch)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records
    ]


@pytest.mark.parametrize("control_type", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_end_txn_marker_round_trips(control_type: ControlRecordType) -> None:
    batch = build_end_txn_marker(control_type, producer_id=42, producer_epoch=3, coordinator_epoch=8, timestamp_ms=123, base_offset=10)
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (42, 3, 10)
    _, [marker] = decode_records(batch)
    assert control_record_type(marker) == control_type
    assert decode_end_txn_marker(marker) == EndTxnMarker(control_type, 8)


def test_aiokafka_sees_our_marker_as_control_batch() -> None:
    batch = build_end_txn_marker(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0)
    theirs = AioRecordBatch(batch)
    assert theirs.is_control_batch and theirs.is_transactional


def test_other_control_records_keep_their_value() -> None:
    record = control_record(ControlRecordType.LEADER_CHANGE, b"\x00\x00payload", offset=4)
    _, [decoded] = decode_records(build_batch([record], base_offset=4, is_control=True))
    assert control_record_type(decoded) == ControlRecordType.LEADER_CHANGE
    assert decoded.value == b"\x00\x00payload"
    with pytest.raises(DecodeError):
        decode_end_txn_marker(decoded)


@given(value=st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trips(value: int) -> None:
    out = bytearray(b"\xff")
    encode_varint(value, out)
    assert decode_varlong(out, 1, len(out)) == (value, len(out))


@given(value=st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trips_in_five_bytes(value: int) -> None:
    out = bytearray()
    encode_varint(value, out)
    assert len(out) <= 5
    assert decode_varint(out, 0, len(out)) == (value, len(out))


def test_varint_cut_short_or_too_long_is_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_varint(b"\x80\x80", 0, 2)
    with pytest.raises(DecodeError):
        decode_varint(b"\x80" * 5 + b"\x01", 0, 6)
    with pytest.raises(DecodeError):
        decode_varint(b"\x80\x01", 0, 1)  # the end bound, not the buffer, limits the read


def test_records_count_beyond_the_bytes_is_decode_error_before_allocating() -> None:
    batch = bytearray(build_batch(records_for([b"a"]), last_offset_delta=2**31 - 2))
    batch[RECORDS_COUNT_POS : RECORDS_COUNT_POS + 4] = (2**31 - 1).to_bytes(4, "big")
    update_crc(batch, 0)
    with pytest.raises(DecodeError, match="declares"):
        decode_records(batch)


def test_bytes_after_the_last_record_are_decode_error() -> None:
    batch = bytearray(build_batch(records_for([b"a", b"b"])))
    batch[RECORDS_COUNT_POS : RECORDS_COUNT_POS + 4] = (1).to_bytes(4, "big")
    update_crc(batch, 0)
    with pytest.raises(DecodeError, match="remain"):
        decode_records(batch)


def test_decode_checks_crc_unless_told_not_to() -> None:
    batch = bytearray(build_batch(records_for([b"abc"])))
    batch[-3] ^= 0x01  # inside the value (the last byte is the header count)
    with pytest.raises(DecodeError):
        decode_records(batch)
    _, [record] = decode_records(batch, verify_crc=False)
    assert record.value != b"abc"


def test_decode_bounds_decompressed_size() -> None:
    batch = build_batch(records_for([b"\x00" * 500_000]), compression=Compression.ZSTD)
    with pytest.raises(DecodeError):
        decode_records(batch, max_bytes=10_000)


def test_decode_all_batches_stops_at_a_torn_tail() -> None:
    log = b"".join(build_batch(records_for([b"m%d" % i], base_offset=i), base_offset=i) for i in range(3))
    tail = build_batch(records_for([b"torn"], base_offset=3), base_offset=3)
    decoded = [records for _, records in decode_all_batches(log + tail[:-1])]
    assert [record.value for records in decoded for record in records] == [b"m0", b"m1", b"m2"]


@settings(max_examples=300, deadline=None)
@given(section=st.binary(max_size=120), count=st.integers(-2, 40), codec=st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_random_record_sections_raise_only_decode_error(section: bytes, count: int, codec: Compression) -> None:
    # A valid header and CRC around random records, so the record parser itself is fuzzed.
    template = bytearray(build_batch(records_for([b"x"]), compression=codec, last_offset_delta=100))
    batch = template[:BATCH_OVERHEAD] + section
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[RECORDS_COUNT_POS : RECORDS_COUNT_POS + 4] = count.to_bytes(4, "big", signed=True)
    update_crc(batch, 0)
    try:
        decode_records(batch)
    except DecodeError:
        return


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    for verify_crc in (True, False):
        try:
            decode_records(data, verify_crc=verify_crc)
        except DecodeError:
            pass


# -- recompression of a client's batch (found by the wire fuzzer) -------------------------------


def test_recompressing_a_batch_whose_offsets_skip_is_invalid_record() -> None:
    batch = build_batch([Record(0, 5, None, b"a"), Record(3, 5, None, b"b")],
                        compression=Compression.GZIP)
    with pytest.raises(KafkaError) as raised:
        recompress_batch(batch, Compression.LZ4)
    assert raised.value.code == ErrorCode.INVALID_RECORD


def test_recompressing_a_batch_whose_timestamp_overflows_int64_is_invalid_timestamp() -> None:
    top = (1 << 63) - 10
    batch = bytearray(build_batch([Record(0, top, None, b"a"), Record(1, top, None, b"b")]))
    first_length = batch[BATCH_OVERHEAD] >> 1  # zigzag, one byte
    second = BATCH_OVERHEAD + 1 + first_length
    assert batch[second + 2] == 0  # the second record's timestamp delta
    batch[second + 2] = 40  # zigzag 20: past the largest int64
    update_crc(batch, 0)
    with pytest.raises(KafkaError) as raised:
        recompress_batch(bytes(batch), Compression.ZSTD)
    assert raised.value.code == ErrorCode.INVALID_TIMESTAMP


def test_recompressing_a_consecutive_batch_keeps_its_records() -> None:
    records = [Record(7 + i, 100 + i, b"k", b"v%d" % i) for i in range(3)]
    batch = build_batch(records, base_offset=7, compression=Compression.SNAPPY)
    _, decoded = decode_records(recompress_batch(batch, Compression.LZ4))
    assert [(r.offset, r.timestamp, r.value) for r in decoded] == [
        (r.offset, r.timestamp, r.value) for r in records]
