"""Opaque v2 batch headers: validation, in-place patches, and the recovery walk."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    CRC_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    RECORDS_COUNT_POS,
    Compression,
    TimestampType,
    batch_size_at,
    crc_is_valid,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    set_producer_fields,
    update_crc,
    validate_batch,
    validate_batches,
)
from kafka_ext.protocol.records import Record, build_batch, decode_records, records_for

FAST = settings(max_examples=60, deadline=None)

values = st.one_of(st.none(), st.binary(max_size=64))
records_lists = st.lists(st.tuples(values, values, st.integers(0, 2**40)), min_size=1, max_size=8)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A client-style batch: any codec, optionally idempotent or transactional."""
    rows = draw(records_lists)
    base_offset = draw(st.integers(0, 2**40))
    records = [Record(base_offset + i, ts, key, value) for i, (key, value, ts) in enumerate(rows)]
    idempotent = draw(st.booleans())
    return build_batch(
        records,
        base_offset=base_offset,
        compression=draw(st.sampled_from(Compression)),
        producer_id=draw(st.integers(0, 2**50)) if idempotent else -1,
        producer_epoch=draw(st.integers(0, 2**15 - 1)) if idempotent else -1,
        base_sequence=draw(st.integers(0, 2**31 - 1)) if idempotent else -1,
        is_transactional=idempotent and draw(st.booleans()),
    )


def plain_batch(count: int = 3, base_offset: int = 0, **kwargs: object) -> bytes:
    return build_batch(records_for([b"v%d" % i for i in range(count)], base_offset=base_offset, timestamp_ms=1_000), base_offset=base_offset, **kwargs)  # type: ignore[arg-type]


def patched(batch: bytes, pos: int, data: bytes, *, fix_crc: bool) -> bytearray:
    out = bytearray(batch)
    out[pos : pos + len(data)] = data
    if fix_crc:
        update_crc(out, 0)
    return out


def error_code(buf: bytes | bytearray, **kwargs: bool) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        validate_batch(buf, **kwargs)
    return info.value.code


@FAST
@given(batch=batches())
def test_validate_accepts_built_batches_from_clients(batch: bytes) -> None:
    header = validate_batch(batch, from_client=True)
    assert header.size_bytes == len(batch)
    assert crc_is_valid(batch)


def test_header_reports_what_the_builder_wrote() -> None:
    records = [Record(100 + i, 5_000 + i, None, b"x") for i in range(4)]
    batch = build_batch(
        records,
        base_offset=100,
        compression=Compression.LZ4,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = read_batch_header(batch)
    assert (header.base_offset, header.last_offset, header.next_offset) == (100, 103, 104)
    assert header.size_bytes == len(batch) == header.batch_length + LOG_OVERHEAD
    assert header.records_count == 4 and header.last_offset_delta == 3
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 5_003)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert header.last_sequence == 14
    assert header.partition_leader_epoch == 9 and header.magic == 2
    assert header.compression == Compression.LZ4
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control


def test_last_sequence_wraps_at_int32() -> None:
    batch = plain_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert read_batch_header(batch).last_sequence == 0


def test_read_header_of_short_buffer_is_decode_error() -> None:
    with pytest.raises(DecodeError):
        read_batch_header(plain_batch()[: BATCH_OVERHEAD - 1])


@FAST
@given(batch=batches(), data=st.data())
def test_flipped_byte_under_crc_is_corrupt_message(batch: bytes, data: st.DataObject) -> None:
    index = data.draw(st.integers(CRC_POS, len(batch) - 1))
    flipped = bytearray(batch)
    flipped[index] ^= data.draw(st.integers(1, 255))
    assert error_code(flipped) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(("magic", "code"), [(0, ErrorCode.INVALID_RECORD), (1, ErrorCode.INVALID_RECORD), (3, ErrorCode.CORRUPT_MESSAGE), (-1, ErrorCode.CORRUPT_MESSAGE)])
def test_magic_other_than_2_is_rejected(magic: int, code: ErrorCode) -> None:
    batch = patched(plain_batch(), MAGIC_POS, magic.to_bytes(1, "big", signed=True), fix_crc=False)
    assert error_code(batch) == code


def test_length_past_the_buffer_is_corrupt_message() -> None:
    batch = plain_batch()
    longer = patched(batch, LENGTH_POS, (len(batch) - LOG_OVERHEAD + 1).to_bytes(4, "big"), fix_crc=False)
    assert error_code(longer) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("batch_length", [0, BATCH_OVERHEAD - LOG_OVERHEAD - 1, -1, -(2**31)])
def test_length_shorter_than_header_is_corrupt_message(batch_length: int) -> None:
    batch = patched(plain_batch(), LENGTH_POS, batch_length.to_bytes(4, "big", signed=True), fix_crc=False)
    assert error_code(batch) == ErrorCode.CORRUPT_MESSAGE


def test_length_shorter_than_the_records_fails_crc() -> None:
    batch = plain_batch()
    shorter = patched(batch, LENGTH_POS, (len(batch) - LOG_OVERHEAD - 2).to_bytes(4, "big"), fix_crc=False)
    assert error_code(shorter) == ErrorCode.CORRUPT_MESSAGE


def test_records_count_not_matching_offset_range_is_invalid_for_clients() -> None:
    batch = patched(plain_batch(3), RECORDS_COUNT_POS, (2).to_bytes(4, "big"), fix_crc=True)
    assert error_code(batch, from_client=True) == ErrorCode.INVALID_RECORD


def test_fewer_records_than_offsets_is_valid_in_a_log() -> None:
    # Compaction keeps lastOffsetDelta but drops records: valid on disk and from a leader.
    records = [Record(0, 1, None, b"a"), Record(5, 2, None, b"b")]
    batch = build_batch(records, last_offset_delta=9)
    header = validate_batch(batch)
    assert (header.records_count, header.last_offset_delta) == (2, 9)
    assert error_code(batch, from_client=True) == ErrorCode.INVALID_RECORD


def test_more_records_than_offsets_is_invalid_everywhere() -> None:
    batch = patched(plain_batch(3), RECORDS_COUNT_POS, (4).to_bytes(4, "big"), fix_crc=True)
    assert error_code(batch) == ErrorCode.INVALID_RECORD


def test_empty_batch_is_invalid_from_clients_only() -> None:
    batch = build_batch([], last_offset_delta=4)
    assert validate_batch(batch).records_count == 0
    assert error_code(batch, from_client=True) == ErrorCode.INVALID_RECORD


def test_unknown_compression_codec_is_invalid_record() -> None:
    batch = bytearray(plain_batch())
    batch[22] = (batch[22] & ~0x07) | 0x05  # attributes low byte: codec 5
    update_crc(batch, 0)
    assert error_code(batch) == ErrorCode.INVALID_RECORD


def test_control_batch_is_invalid_from_clients_only() -> None:
    batch = plain_batch(1, producer_id=4, producer_epoch=0, base_sequence=-1, is_transactional=True, is_control=True)
    assert validate_batch(batch).is_control
    assert error_code(batch, from_client=True) == ErrorCode.INVALID_RECORD


def test_idempotent_batch_without_sequence_is_invalid_from_clients() -> None:
    batch = plain_batch(2, producer_id=4, producer_epoch=0, base_sequence=-1)
    assert error_code(batch, from_client=True) == ErrorCode.INVALID_RECORD


def test_transactional_batch_without_producer_id_is_invalid() -> None:
    batch = plain_batch(2, is_transactional=True)
    assert error_code(batch) == ErrorCode.INVALID_RECORD


def test_validate_batches_returns_every_position() -> None:
    first, second, third = plain_batch(2), plain_batch(1, base_offset=2), plain_batch(5, base_offset=3)
    found = validate_batches(first + second + third)
    assert [pos for pos, _ in found] == [0, len(first), len(first) + len(second)]
    assert [header.base_offset for _, header in found] == [0, 2, 3]


@pytest.mark.parametrize("tail_bytes", [1, LOG_OVERHEAD, BATCH_OVERHEAD, BATCH_OVERHEAD + 3])
def test_validate_batches_rejects_a_torn_last_batch(tail_bytes: int) -> None:
    batch = plain_batch()
    with pytest.raises(KafkaError) as info:
        validate_batches(batch + batch[:tail_bytes])
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_validate_batches_rejects_an_empty_produce() -> None:
    with pytest.raises(KafkaError) as info:
        validate_batches(b"")
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert validate_batches(b"", from_client=False) == []


def test_validate_reads_a_batch_inside_a_larger_buffer() -> None:
    batch = plain_batch()
    buf = memoryview(b"\x00" * 7 + batch + b"\xff" * 5)
    assert validate_batch(buf, 7).size_bytes == len(batch)


@FAST
@given(batch=batches(), base_offset=st.integers(0, 2**63 - 1))
def test_set_base_offset_keeps_crc_valid(batch: bytes, base_offset: int) -> None:
    buf = bytearray(b"pad" + batch)
    set_base_offset(buf, 3, base_offset)
    header = validate_batch(buf, 3)
    assert header.base_offset == base_offset
    assert bytes(buf[3 + LOG_OVERHEAD :]) == batch[LOG_OVERHEAD:]


@FAST
@given(batch=batches(), epoch=st.integers(-1, 2**31 - 1))
def test_set_partition_leader_epoch_keeps_crc_valid(batch: bytes, epoch: int) -> None:
    buf = bytearray(batch)
    set_partition_leader_epoch(memoryview(buf), 0, epoch)
    assert validate_batch(buf).partition_leader_epoch == epoch


@FAST
@given(batch=batches(), now_ms=st.integers(0, 2**45))
def test_set_log_append_time_sets_max_timestamp_and_keeps_crc_valid(batch: bytes, now_ms: int) -> None:
    buf = bytearray(batch)
    before = read_batch_header(batch)
    set_log_append_time(buf, 0, now_ms)
    header = validate_batch(buf, from_client=True)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == now_ms
    assert header.compression == before.compression and header.is_transactional == before.is_transactional
    _, records = decode_records(buf)
    assert {record.timestamp for record in records} == {now_ms}


def test_set_producer_fields_keeps_crc_valid() -> None:
    buf = bytearray(plain_batch(3))
    set_producer_fields(buf, 0, 77, 2, 40)
    header = validate_batch(buf, from_client=True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 40)


@FAST
@given(count=st.integers(1, 4), cut=st.integers(0, 10_000))
def test_iter_batch_headers_stops_at_a_torn_tail(count: int, cut: int) -> None:
    log = b"".join(plain_batch(2, base_offset=2 * i) for i in range(count))
    torn = plain_batch(2, base_offset=2 * count)
    cut %= len(torn)
    walked = list(iter_batch_headers(log + torn[:cut]))
    assert [header.base_offset for _, header in walked] == [2 * i for i in range(count)]


def test_iter_batch_headers_stops_at_a_nonsense_length() -> None:
    good = plain_batch(2)
    garbage = bytearray(plain_batch(2, base_offset=2))
    garbage[LENGTH_POS : LENGTH_POS + 4] = (-5).to_bytes(4, "big", signed=True)
    assert [pos for pos, _ in iter_batch_headers(good + garbage)] == [0]


def test_iter_batch_headers_honours_start_and_end() -> None:
    batches_ = [plain_batch(1, base_offset=i) for i in range(4)]
    log = b"".join(batches_)
    size = len(batches_[0])
    walked = list(iter_batch_headers(log, size, 3 * size + 1))
    assert [(pos, header.base_offset) for pos, header in walked] == [(size, 1), (2 * size, 2)]


def test_iter_batch_headers_does_not_check_crc() -> None:
    # Recovery walks by length, then validates each batch itself.
    broken = bytearray(plain_batch(2))
    broken[-1] ^= 0xFF
    assert len(list(iter_batch_headers(broken))) == 1
    assert not crc_is_valid(broken)


def test_batch_size_at_reads_only_the_length() -> None:
    batch = plain_batch()
    assert batch_size_at(batch) == len(batch)
    assert batch_size_at(batch[:LOG_OVERHEAD - 1]) is None


@settings(max_examples=400, deadline=None)
@given(data=st.binary(min_size=0, max_size=300), header_like=st.booleans())
def test_random_bytes_raise_only_kafka_errors(data: bytes, header_like: bool) -> None:
    if header_like and len(data) >= BATCH_OVERHEAD:
        # Make the length and magic plausible so the deeper checks run.
        buf = bytearray(data)
        buf[LENGTH_POS : LENGTH_POS + 4] = (len(buf) - LOG_OVERHEAD).to_bytes(4, "big")
        buf[MAGIC_POS] = 2
        data = bytes(buf)
    try:
        validate_batches(data, from_client=False)
    except KafkaError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    list(iter_batch_headers(data))
