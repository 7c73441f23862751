"""Round trips through every compiled schema and version: decode(encode(x)) == x."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_ext.protocol.compiler import MessageCompiler
from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.primitives import uvarint_bytes
from kafka_ext.protocol.schema import parse_schema
from tests.unit.protocol.strategies import all_message_versions, as_plain, message_values

ROUND_TRIP_SETTINGS = settings(
    max_examples=15, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MESSAGE_VERSIONS = all_message_versions()
FLEXIBLE_MESSAGE_VERSIONS = [(n, v) for n, v in MESSAGE_VERSIONS if registry()[n].is_flexible(v)]


def _ids(pairs: list[tuple[str, int]]) -> list[str]:
    return [f"{name}-v{version}" for name, version in pairs]


def test_registry_compiles_every_schema_with_a_closed_version_range() -> None:
    reg = registry()
    assert reg.by_name, "no schemas were loaded"
    for name, mtype in reg.by_name.items():
        assert mtype.versions.highest is not None, f"{name} has an open validVersions"
        assert set(mtype.decoders) == set(mtype.versions), name


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS, ids=_ids(MESSAGE_VERSIONS))
def test_decode_of_encode_gives_back_the_fields_the_version_carries(name: str, version: int) -> None:
    mtype = registry()[name]

    @ROUND_TRIP_SETTINGS
    @given(message_values(name, version))
    def check(message: Any) -> None:
        encoded = mtype.encode(message, version)
        decoded = mtype.decode_all(encoded, version)
        assert as_plain(mtype, decoded, version) == as_plain(mtype, message, version)
        assert mtype.encode(decoded, version) == encoded

    check()


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS, ids=_ids(MESSAGE_VERSIONS))
def test_decode_at_an_offset_returns_the_end_position(name: str, version: int) -> None:
    mtype = registry()[name]
    message = mtype.cls()
    encoded = mtype.encode(message, version)
    decoded, end = mtype.decode(b"\x99\x98" + encoded + b"\x97", version, pos=2)
    assert end == 2 + len(encoded)
    assert as_plain(mtype, decoded, version) == as_plain(mtype, message, version)


@pytest.mark.parametrize(("name", "version"), FLEXIBLE_MESSAGE_VERSIONS,
                         ids=_ids(FLEXIBLE_MESSAGE_VERSIONS))
def test_unknown_top_level_tagged_fields_survive_decode_and_re_encode(name: str,
                                                                      version: int) -> None:
    mtype = registry()[name]
    known = {f.tag for f in mtype.spec.struct.fields
             if version in f.versions and version in f.tagged_versions}
    tag = max([t for t in known if t is not None] + [0]) + 7  # a tag nobody declares
    message = mtype.cls(unknown_tagged_fields=[(tag, b"\x01\x02\x03")])
    encoded = mtype.encode(message, version)
    decoded = mtype.decode_all(encoded, version)
    assert decoded.unknown_tagged_fields == [(tag, b"\x01\x02\x03")]
    assert mtype.encode(decoded, version) == encoded


def test_unknown_tags_are_merged_in_ascending_order_with_known_ones() -> None:
    mtype = registry()["ApiVersionsResponse"]
    version = 3
    message = mtype.cls(
        error_code=0, throttle_time_ms=5, finalized_features_epoch=9,
        unknown_tagged_fields=[(7, b"\xaa"), (4, b"")],
    )
    encoded = mtype.encode(message, version)
    # error_code (2 bytes), api_keys (1: empty compact array), throttle_time_ms (4), tags
    section = encoded[7:]
    assert section[0] == 3  # known FinalizedFeaturesEpoch (tag 1), unknown 4 and 7
    tags = []
    pos = 1
    for _ in range(3):
        tags.append(section[pos])
        pos += 2 + section[pos + 1]
    assert tags == [1, 4, 7]
    assert pos == len(section)
    decoded = mtype.decode_all(encoded, version)
    assert decoded.finalized_features_epoch == 9
    assert decoded.unknown_tagged_fields == [(4, b""), (7, b"\xaa")]


def test_unknown_tagged_field_in_a_nested_struct_is_kept() -> None:
    mtype = registry()["MetadataResponse"]
    version = 12
    topic_cls = mtype.cls.MetadataResponseTopic
    topic = topic_cls(name="t", topic_id=uuid.UUID(int=5), unknown_tagged_fields=[(42, b"xyz")])
    message = mtype.cls(topics=[topic])
    decoded = mtype.decode_all(mtype.encode(message, version), version)
    assert decoded.topics[0].unknown_tagged_fields == [(42, b"xyz")]
    assert decoded.topics[0].name == "t"


def test_hand_built_unknown_tag_bytes_decode_to_raw_bytes() -> None:
    mtype = registry()["ApiVersionsRequest"]
    body = b"\x02a" + b"\x02b"  # compact strings: client_software_name, _version
    tagged = b"\x01" + uvarint_bytes(300) + b"\x02\xde\xad"  # one field, tag 300, 2 bytes
    decoded = mtype.decode_all(body + tagged, 3)
    assert decoded.client_software_name == "a"
    assert decoded.client_software_version == "b"
    assert decoded.unknown_tagged_fields == [(300, b"\xde\xad")]


def test_fields_a_version_lacks_keep_their_schema_defaults_on_decode() -> None:
    mtype = registry()["MetadataRequest"]
    decoded = mtype.decode_all(mtype.encode(mtype.cls(topics=None), 1), 1)
    assert decoded.allow_auto_topic_creation is True  # v4+ field, default true
    assert decoded.topics is None


def test_records_field_decodes_to_a_memoryview_of_the_input() -> None:
    mtype = registry()["ProduceRequest"]
    part = mtype.cls.TopicProduceData.PartitionProduceData(index=0, records=b"batch-bytes")
    topic = mtype.cls.TopicProduceData(name="t", partition_data=[part])
    message = mtype.cls(acks=-1, timeout_ms=1000, topic_data=[topic])
    encoded = mtype.encode(message, 9)
    decoded = mtype.decode_all(encoded, 9)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is encoded
    assert bytes(records) == b"batch-bytes"


@settings(max_examples=50, deadline=None, database=None)
@given(st.integers(0, 2**31 - 1))
def test_uvarint_bytes_decode_to_the_same_value(value: int) -> None:
    from kafka_ext.protocol.primitives import read_uvarint

    encoded = uvarint_bytes(value)
    assert read_uvarint(encoded, 0) == (value, len(encoded))


def test_unknown_tags_inside_a_default_valued_tagged_struct_are_re_emitted() -> None:
    """Kafka's equals() counts unknown tags, so such a struct is not the default: keep it."""
    mtype = registry()["FetchResponse"]
    version = 16
    topic_cls = mtype.cls.FetchableTopicResponse
    diverging = mtype.cls.EpochEndOffset(unknown_tagged_fields=[(9, b"\x01")])  # fields default
    partition = topic_cls.PartitionData(partition_index=0, diverging_epoch=diverging)
    message = mtype.cls(responses=[topic_cls(topic_id=uuid.UUID(int=1), partitions=[partition])])
    decoded = mtype.decode_all(mtype.encode(message, version), version)
    kept = decoded.responses[0].partitions[0].diverging_epoch
    assert kept.unknown_tagged_fields == [(9, b"\x01")]


# A nullable tagged struct whose default is not null (KIP-893): Kafka's generated code writes
# its presence marker inside the tagged field as an unsigned varint, 0 for null and 1 for a
# value, unlike the int8 -1/1 marker of untagged nullable structs.
_NULLABLE_TAGGED_STRUCT = """
{"type": "data", "name": "NullableTaggedStructData", "validVersions": "0",
 "flexibleVersions": "0+",
 "fields": [{"name": "Inner", "type": "InnerStruct", "versions": "0+", "nullableVersions": "0+",
             "taggedVersions": "0+", "tag": 0,
             "fields": [{"name": "Value", "type": "int32", "versions": "0+"}]}]}
"""


def _nullable_tagged_struct_type() -> MessageType:
    spec = parse_schema(_NULLABLE_TAGGED_STRUCT)
    compiler = MessageCompiler(spec)
    mtype = MessageType(spec, compiler.message_class)
    mtype.decoders[0], mtype.encoders[0] = compiler.compile_version(0)
    return mtype


def test_present_nullable_tagged_struct_uses_a_varint_one_marker() -> None:
    mtype = _nullable_tagged_struct_type()
    message = mtype.cls(inner=mtype.cls.InnerStruct(value=5))
    # one tag; tag 0; size 6: marker 1, int32 5, empty tagged section
    expected = b"\x01\x00\x06" + b"\x01" + b"\x00\x00\x00\x05" + b"\x00"
    assert mtype.encode(message, 0) == expected
    assert mtype.decode_all(expected, 0).inner.value == 5


def test_null_nullable_tagged_struct_uses_a_varint_zero_marker() -> None:
    mtype = _nullable_tagged_struct_type()
    kafka_bytes = b"\x01\x00\x01\x00"  # one tag; tag 0; size 1; varint 0 = null
    assert mtype.decode_all(kafka_bytes, 0).inner is None
    assert mtype.encode(mtype.cls(inner=None), 0) == kafka_bytes
