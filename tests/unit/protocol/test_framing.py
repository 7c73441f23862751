"""Request/response framing: size prefix bounds, header versions, and zero-copy response parts."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.framing import (
    FrameTooLarge,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    frame_size,
    peek_request_prefix,
    request_header_version,
    response_header_version,
)
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.primitives import INLINE_RECORDS_MAX_BYTES

MAX_REQUEST_BYTES = 100 * 1024 * 1024


def _metadata_request(version: int) -> Any:
    mtype = registry()["MetadataRequest"]
    topic = mtype.cls.MetadataRequestTopic(name="orders", topic_id=uuid.UUID(int=0))
    return mtype.cls(topics=[topic])


def _joined(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def _fetch_response(records: Any) -> Any:
    mtype = registry()["FetchResponse"]
    partition = mtype.cls.FetchableTopicResponse.PartitionData(
        partition_index=3, high_watermark=10, last_stable_offset=10, records=records)
    topic = mtype.cls.FetchableTopicResponse(topic_id=uuid.UUID(int=7), partitions=[partition])
    return mtype.cls(responses=[topic])


# -- size prefix ---------------------------------------------------------------------------

def test_frame_size_waits_for_the_whole_prefix() -> None:
    assert frame_size(b"", MAX_REQUEST_BYTES) is None
    assert frame_size(b"\x00\x00\x01", MAX_REQUEST_BYTES) is None
    assert frame_size(b"\x00\x00\x00\x01\x00\x00\x01", MAX_REQUEST_BYTES, pos=4) is None


def test_frame_size_reads_the_prefix_at_a_position() -> None:
    buf = struct.pack(">i", 3) + b"abc" + struct.pack(">i", 9)
    assert frame_size(buf, MAX_REQUEST_BYTES, pos=7) == 9
    with pytest.raises(FrameTooLarge):
        frame_size(buf + struct.pack(">i", -5), MAX_REQUEST_BYTES, pos=11)


def test_frame_size_returns_the_body_size_without_the_body() -> None:
    assert frame_size(struct.pack(">i", 1234), MAX_REQUEST_BYTES) == 1234
    assert frame_size(struct.pack(">i", 0), MAX_REQUEST_BYTES) == 0


def test_frame_size_rejects_a_negative_size_from_the_prefix_alone() -> None:
    with pytest.raises(FrameTooLarge) as info:
        frame_size(struct.pack(">i", -1), MAX_REQUEST_BYTES)
    assert info.value.size == -1
    assert isinstance(info.value, KafkaError)
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_frame_size_rejects_a_size_over_the_limit_before_buffering() -> None:
    with pytest.raises(FrameTooLarge) as info:
        frame_size(struct.pack(">i", 2**31 - 1), MAX_REQUEST_BYTES)
    assert info.value.size == 2**31 - 1
    with pytest.raises(FrameTooLarge):
        frame_size(struct.pack(">i", 1001), 1000)
    assert frame_size(struct.pack(">i", 1000), 1000) == 1000


# -- request headers -----------------------------------------------------------------------

def test_request_header_v1_carries_a_legacy_client_id_and_body_follows() -> None:
    assert request_header_version(3, 8) == 1
    frame = encode_request(3, 8, correlation_id=77, client_id="app-1", body=_metadata_request(8))
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    body = frame[4:]
    assert body[8:10] == b"\x00\x05" and body[10:15] == b"app-1"
    header, pos = decode_request_header(body)
    assert (header.request_api_key, header.request_api_version) == (3, 8)
    assert header.correlation_id == 77
    assert header.client_id == "app-1"
    assert pos == 15
    request = registry()["MetadataRequest"].decode_all(body[pos:], 8)
    assert [t.name for t in request.topics] == ["orders"]


def test_request_header_v2_keeps_a_legacy_client_id_and_adds_tagged_fields() -> None:
    assert request_header_version(3, 12) == 2
    frame = encode_request(3, 12, correlation_id=5, client_id="c", body=_metadata_request(12))
    body = frame[4:]
    assert body[8:11] == b"\x00\x01c"  # int16 length even though the header is flexible
    assert body[11] == 0                # empty tagged-field section
    header, pos = decode_request_header(body)
    assert header.client_id == "c" and pos == 12
    request = registry()["MetadataRequest"].decode_all(body[pos:], 12)
    assert request.topics[0].name == "orders"


def test_request_header_null_client_id_is_minus_one() -> None:
    frame = encode_request(18, 3, correlation_id=1, client_id=None,
                           body=registry()["ApiVersionsRequest"].cls(
                               client_software_name="x", client_software_version="1"))
    body = frame[4:]
    assert body[8:10] == b"\xff\xff"
    header, _ = decode_request_header(body)
    assert header.client_id is None


def test_request_header_v2_tagged_fields_are_kept() -> None:
    prefix = struct.pack(">hhi", 3, 12, 9) + b"\x00\x00"  # api key, version, id, empty client id
    tagged = b"\x01\x05\x02hi"  # one unknown tag (5) with two bytes
    header, pos = decode_request_header(prefix + tagged + b"BODY")
    assert header.unknown_tagged_fields == [(5, b"hi")]
    assert pos == len(prefix) + len(tagged)


def test_unknown_api_and_unknown_version_parse_with_header_v1() -> None:
    assert request_header_version(31999, 0) == 1
    assert request_header_version(3, 999) == 1


def test_short_request_frame_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        peek_request_prefix(b"\x00\x03\x00")
    with pytest.raises(DecodeError):
        decode_request_header(struct.pack(">hhi", 3, 8, 1) + b"\x00\x09ab")  # client id cut


# -- response headers ----------------------------------------------------------------------

def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    mtype = registry()["ApiVersionsResponse"]
    for version in mtype.versions:
        assert response_header_version(18, version) == 0
    body = mtype.cls(error_code=0, api_keys=[mtype.cls.ApiVersion(api_key=0, min_version=0,
                                                                  max_version=11)])
    frame = _joined(encode_response(42, 0, mtype, 3, body))
    assert frame[4:8] == struct.pack(">i", 42)
    assert frame[8:10] == b"\x00\x00"  # error_code follows the correlation id directly
    correlation_id, decoded = decode_response(frame[4:], 18, 3)
    assert correlation_id == 42 and decoded.api_keys[0].max_version == 11


def test_flexible_responses_use_header_v1_and_others_v0() -> None:
    assert response_header_version(3, 12) == 1
    assert response_header_version(3, 8) == 0
    assert response_header_version(31999, 0) == 0
    mtype = registry()["MetadataResponse"]
    frame = _joined(encode_response(7, 1, mtype, 12, mtype.cls(throttle_time_ms=3)))
    assert frame[4:9] == struct.pack(">i", 7) + b"\x00"  # empty header tagged section
    assert frame[9:13] == struct.pack(">i", 3)


def test_response_with_trailing_bytes_is_a_decode_error() -> None:
    mtype = registry()["MetadataResponse"]
    frame = _joined(encode_response(7, 1, mtype, 12, mtype.cls()))
    with pytest.raises(DecodeError):
        decode_response(frame[4:] + b"\x00", 3, 12)


# -- response parts ------------------------------------------------------------------------

def test_encode_response_parts_concatenate_to_a_decodable_frame() -> None:
    mtype = registry()["FetchResponse"]
    records = memoryview(bytes(range(256)) * 20)  # 5120 bytes: travels as its own part
    parts = encode_response(99, 1, mtype, 16, _fetch_response(records))
    frame = _joined(parts)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    correlation_id, decoded = decode_response(frame[4:], 1, 16)
    assert correlation_id == 99
    partition = decoded.responses[0].partitions[0]
    assert partition.partition_index == 3
    assert bytes(partition.records) == bytes(records)


def test_large_records_are_their_own_part_without_a_copy() -> None:
    mtype = registry()["FetchResponse"]
    records = memoryview(bytearray(b"r" * INLINE_RECORDS_MAX_BYTES))
    parts = encode_response(1, 1, mtype, 16, _fetch_response(records))
    assert any(part is records for part in parts)
    assert len(parts) == 3  # size+header+body head, the records, the body tail


def test_several_large_record_buffers_each_travel_as_a_part() -> None:
    mtype = registry()["FetchResponse"]
    first = memoryview(b"a" * 5000)
    second = memoryview(b"b" * 6000)
    parts = encode_response(1, 1, mtype, 16, _fetch_response([first, second]))
    assert [p for p in parts if p is first or p is second] == [first, second]
    _, decoded = decode_response(_joined(parts)[4:], 1, 16)
    assert bytes(decoded.responses[0].partitions[0].records) == b"a" * 5000 + b"b" * 6000


def test_small_records_bytes_are_copied_inline() -> None:
    mtype = registry()["FetchResponse"]
    records = b"s" * (INLINE_RECORDS_MAX_BYTES - 1)
    parts = encode_response(1, 1, mtype, 16, _fetch_response(records))
    assert len(parts) == 1
    _, decoded = decode_response(_joined(parts)[4:], 1, 16)
    assert bytes(decoded.responses[0].partitions[0].records) == records


def test_large_records_bytes_are_their_own_part() -> None:
    mtype = registry()["FetchResponse"]
    records = b"L" * INLINE_RECORDS_MAX_BYTES
    parts = encode_response(1, 1, mtype, 16, _fetch_response(records))
    assert any(part is records for part in parts)


def test_a_small_memoryview_still_travels_as_its_own_part() -> None:
    """A memoryview borrows a segment map: copying it would defeat zero-copy fetch."""
    mtype = registry()["FetchResponse"]
    records = memoryview(b"m" * 100)
    parts = encode_response(1, 1, mtype, 16, _fetch_response(records))
    assert any(part is records for part in parts)
    _, decoded = decode_response(_joined(parts)[4:], 1, 16)
    assert bytes(decoded.responses[0].partitions[0].records) == b"m" * 100


def test_null_records_encode_as_null() -> None:
    mtype = registry()["FetchResponse"]
    parts = encode_response(1, 1, mtype, 16, _fetch_response(None))
    _, decoded = decode_response(_joined(parts)[4:], 1, 16)
    assert decoded.responses[0].partitions[0].records is None
