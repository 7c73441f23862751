"""Share group keys on the wire (KIP-932): 76-79, 83-87 and 90-92.

Every version we serve of each is cross-checked byte for byte with kio by
test_codec_vs_kio.py's property tests; the first test here makes sure kio has each of them, so
none is left out silently. Then golden request bodies written out by hand from franz-go's
field definitions (`generate/definitions/<key>_*`): compact (flexible) encoding throughout,
an empty tagged-field section after each struct. ShareGroupHeartbeat's golden join is in
tests/unit/coordinator/group/test_share_group_wire.py.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from kafka_ext.protocol.api_keys import (
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
    ApiKey,
    supported_versions,
)
from kafka_ext.protocol.messages import MessageType, registry
from tests.unit.protocol.test_codec_vs_kio import kio_class, kio_decode

SHADOWED = (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE)  # Kafka's APIs there, to stock clients
SHARE_KEYS = (*SHADOWED, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
              ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
              ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
              ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
              ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)
TOPIC_ID = uuid.UUID("6f1c2a4e-0b8d-4c55-9a77-3e2d1f0c9b81")
TAGS = b"\x00"  # no tagged fields


def _message(key: int, kind: str) -> MessageType:
    reg = registry()
    if key in SHADOWED:
        return (reg.shadowed_requests if kind == "request" else reg.shadowed_responses)[key]
    return (reg.requests if kind == "request" else reg.responses)[key]


def _served() -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for key in SHARE_KEYS:
        versions = supported_versions(key, shadowed=key in SHADOWED)
        assert versions is not None, key
        out.extend((key, v) for v in range(versions[0], versions[1] + 1))
    return out


SERVED = _served()


# Compact encodings, from the protocol guide: lengths are unsigned varints of length + 1
# (0 is null); every value here is short enough for a one-byte varint.
def string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def array(*items: bytes) -> bytes:
    assert len(items) < 127
    return bytes([len(items) + 1]) + b"".join(items)


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def test_the_share_keys_are_served_at_the_versions_kafka_4_2_has() -> None:
    assert SERVED == [(76, 1), (77, 1), (78, 1), (78, 2), (79, 1), (79, 2), (83, 0), (84, 0),
                      (85, 0), (85, 1), (86, 0), (87, 0), (87, 1), (90, 0), (90, 1), (91, 0),
                      (92, 0)]


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k}-v{v}" for k, v in SERVED])
def test_kio_has_every_share_key_we_serve_so_the_byte_cross_check_covers_it(
        key: int, version: int) -> None:
    for kind in ("request", "response"):
        mtype = _message(key, kind)
        assert kio_class(mtype.name, version) is not None, (mtype.name, version)


def _ack_batch(first: int, last: int, *types: int) -> bytes:
    return i64(first) + i64(last) + array(*(i8(t) for t in types)) + TAGS


def _share_fetch(version: int) -> tuple[Any, bytes]:
    cls = _message(ApiKey.SHARE_FETCH, "request").cls
    value = cls(
        group_id="g", member_id="m", share_session_epoch=3, max_wait_ms=500, min_bytes=1,
        max_bytes=1048576, max_records=500, batch_size=500,
        share_acquire_mode=1 if version >= 2 else 0, is_renew_ack=version >= 2,
        topics=[cls.FetchTopic(topic_id=TOPIC_ID, partitions=[cls.FetchPartition(
            partition_index=2, acknowledgement_batches=[cls.AcknowledgementBatch(
                first_offset=10, last_offset=12, acknowledge_types=[1, 0, 2])])])],
        forgotten_topics_data=[cls.ForgottenTopic(topic_id=TOPIC_ID, partitions=[5])])
    v2 = i8(1) + b"\x01" if version >= 2 else b""  # ShareAcquireMode, IsRenewAck
    golden = (string("g") + string("m") + i32(3) + i32(500) + i32(1) + i32(1048576)
              + i32(500) + i32(500) + v2
              + array(TOPIC_ID.bytes + array(i32(2) + array(_ack_batch(10, 12, 1, 0, 2))
                                             + TAGS) + TAGS)
              + array(TOPIC_ID.bytes + array(i32(5)) + TAGS) + TAGS)
    return value, golden


def _share_acknowledge(version: int) -> tuple[Any, bytes]:
    cls = _message(ApiKey.SHARE_ACKNOWLEDGE, "request").cls
    value = cls(group_id="g", member_id="m", share_session_epoch=-1, is_renew_ack=False,
                topics=[cls.AcknowledgeTopic(topic_id=TOPIC_ID, partitions=[
                    cls.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                        cls.AcknowledgementBatch(first_offset=7, last_offset=7,
                                                 acknowledge_types=[3])])])])
    v2 = b"\x00" if version >= 2 else b""  # IsRenewAck
    golden = (string("g") + string("m") + i32(-1) + v2
              + array(TOPIC_ID.bytes + array(i32(0) + array(_ack_batch(7, 7, 3)) + TAGS)
                      + TAGS) + TAGS)
    return value, golden


def _state_request(key: int, partition: Any, partition_bytes: bytes) -> tuple[Any, bytes]:
    """Keys 83-87: GroupId, then Topics [TopicId, Partitions [...]]."""
    cls = _message(key, "request").cls
    # InitializeStateData, ReadStateData, ...: the one "*Data" struct beside PartitionData
    topic_cls = next(getattr(cls, n) for n in dir(cls)
                     if n.endswith("StateData") or n.endswith("SummaryData"))
    value = cls(group_id="g", topics=[topic_cls(topic_id=TOPIC_ID, partitions=[partition])])
    golden = string("g") + array(TOPIC_ID.bytes + array(partition_bytes + TAGS) + TAGS) + TAGS
    return value, golden


def _golden_cases() -> list[tuple[str, int, int, Any, bytes]]:
    reg = registry()
    cases: list[tuple[str, int, int, Any, bytes]] = []
    describe = _message(SHARE_GROUP_DESCRIBE, "request").cls
    cases.append(("ShareGroupDescribe", SHARE_GROUP_DESCRIBE, 1,
                  describe(group_ids=["g", "h"], include_authorized_operations=True),
                  array(string("g"), string("h")) + b"\x01" + TAGS))
    for version in (1, 2):
        cases.append(("ShareFetch", ApiKey.SHARE_FETCH, version, *_share_fetch(version)))
        cases.append(("ShareAcknowledge", ApiKey.SHARE_ACKNOWLEDGE, version,
                      *_share_acknowledge(version)))
    init = reg.requests[ApiKey.INITIALIZE_SHARE_GROUP_STATE].cls
    cases.append(("InitializeShareGroupState", ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                  *_state_request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, init.PartitionData(
                      partition=1, state_epoch=4, start_offset=-1),
                      i32(1) + i32(4) + i64(-1))))
    read = reg.requests[ApiKey.READ_SHARE_GROUP_STATE].cls
    cases.append(("ReadShareGroupState", ApiKey.READ_SHARE_GROUP_STATE, 0,
                  *_state_request(ApiKey.READ_SHARE_GROUP_STATE, read.PartitionData(
                      partition=1, leader_epoch=6), i32(1) + i32(6))))
    write = reg.requests[ApiKey.WRITE_SHARE_GROUP_STATE].cls
    for version in (0, 1):
        batch = i64(100) + i64(109) + i8(2) + i16(1) + TAGS
        dcc = i32(7) if version >= 1 else b""  # DeliveryCompleteCount, v1+
        cases.append(("WriteShareGroupState", ApiKey.WRITE_SHARE_GROUP_STATE, version,
                      *_state_request(ApiKey.WRITE_SHARE_GROUP_STATE, write.PartitionData(
                          partition=1, state_epoch=4, leader_epoch=6, start_offset=100,
                          delivery_complete_count=7 if version >= 1 else -1,
                          state_batches=[write.StateBatch(
                              first_offset=100, last_offset=109, delivery_state=2,
                              delivery_count=1)]),
                          i32(1) + i32(4) + i32(6) + i64(100) + dcc + array(batch))))
    delete = reg.requests[ApiKey.DELETE_SHARE_GROUP_STATE].cls
    cases.append(("DeleteShareGroupState", ApiKey.DELETE_SHARE_GROUP_STATE, 0,
                  *_state_request(ApiKey.DELETE_SHARE_GROUP_STATE,
                                  delete.PartitionData(partition=1), i32(1))))
    summary = reg.requests[ApiKey.READ_SHARE_GROUP_STATE_SUMMARY].cls
    for version in (0, 1):
        cases.append(("ReadShareGroupStateSummary", ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                      version, *_state_request(
                          ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                          summary.PartitionData(partition=1, leader_epoch=-1),
                          i32(1) + i32(-1))))
    offsets = reg.requests[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS].cls
    for version in (0, 1):
        cases.append(("DescribeShareGroupOffsets", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                      version, offsets(groups=[
                          offsets.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=[
                              offsets.DescribeShareGroupOffsetsRequestTopic(
                                  topic_name="t", partitions=[0, 3])]),
                          offsets.DescribeShareGroupOffsetsRequestGroup(group_id="h",
                                                                        topics=None)]),
                      array(string("g") + array(string("t") + array(i32(0), i32(3)) + TAGS)
                            + TAGS,
                            string("h") + b"\x00" + TAGS)  # Topics null: every partition
                      + TAGS))
    alter = reg.requests[ApiKey.ALTER_SHARE_GROUP_OFFSETS].cls
    cases.append(("AlterShareGroupOffsets", ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, alter(
        group_id="g", topics=[alter.AlterShareGroupOffsetsRequestTopic(
            topic_name="t", partitions=[alter.AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=42)])]),
        string("g") + array(string("t") + array(i32(0) + i64(42) + TAGS) + TAGS) + TAGS))
    delete_offsets = reg.requests[ApiKey.DELETE_SHARE_GROUP_OFFSETS].cls
    cases.append(("DeleteShareGroupOffsets", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
                  delete_offsets(group_id="g", topics=[
                      delete_offsets.DeleteShareGroupOffsetsRequestTopic(topic_name="t")]),
                  string("g") + array(string("t") + TAGS) + TAGS))
    return cases


GOLDEN = _golden_cases()


@pytest.mark.parametrize(("name", "key", "version", "value", "golden"), GOLDEN,
                         ids=[f"{c[0]}-v{c[2]}" for c in GOLDEN])
def test_share_requests_have_the_bytes_written_out_from_kafkas_definitions(
        name: str, key: int, version: int, value: Any, golden: bytes) -> None:
    mtype = _message(key, "request")
    assert mtype.encode(value, version) == golden
    assert mtype.encode(mtype.decode_all(golden, version), version) == golden
    kio_cls = kio_class(mtype.name, version)
    assert kio_cls is not None
    kio_decode(kio_cls, golden)  # kio reads exactly these bytes too


def test_every_share_key_has_a_golden_request() -> None:
    covered = {key for _, key, _, _, _ in GOLDEN} | {SHARE_GROUP_HEARTBEAT}  # see module doc
    assert covered == set(SHARE_KEYS)


def test_a_share_fetch_answer_has_kafkas_bytes() -> None:
    """ShareFetchResponse v1: one partition with a batch handed out whole and the acquired
    range beside it, then the leader endpoints (empty)."""
    cls = _message(ApiKey.SHARE_FETCH, "response").cls
    partition_cls = cls.ShareFetchableTopicResponse.PartitionData
    records = b"\xab" * 5  # opaque here: a batch is never decoded to serve a ShareFetch
    value = cls(throttle_time_ms=0, error_code=0, error_message=None,
                acquisition_lock_timeout_ms=30000, responses=[cls.ShareFetchableTopicResponse(
                    topic_id=TOPIC_ID, partitions=[partition_cls(
                        partition_index=0, error_code=0, error_message=None,
                        acknowledge_error_code=121, acknowledge_error_message=None,
                        current_leader=partition_cls.LeaderIdAndEpoch(leader_id=1,
                                                                      leader_epoch=2),
                        records=records, acquired_records=[partition_cls.AcquiredRecords(
                            first_offset=10, last_offset=14, delivery_count=2)])])],
                node_endpoints=[])
    golden = (i32(0) + i16(0) + string(None) + i32(30000)
              + array(TOPIC_ID.bytes + array(
                  i32(0) + i16(0) + string(None) + i16(121) + string(None)
                  + i32(1) + i32(2) + TAGS             # CurrentLeader
                  + bytes([len(records) + 1]) + records  # compact nullable bytes
                  + array(i64(10) + i64(14) + i16(2) + TAGS) + TAGS) + TAGS)
              + array() + TAGS)
    mtype = _message(ApiKey.SHARE_FETCH, "response")
    assert mtype.encode(value, 1) == golden
    decoded = mtype.decode_all(golden, 1)
    (partition,) = decoded.responses[0].partitions
    assert (bytes(partition.records), partition.acknowledge_error_code) == (records, 121)
    kio_cls = kio_class(mtype.name, 1)
    assert kio_cls is not None
    kio_decode(kio_cls, golden)
