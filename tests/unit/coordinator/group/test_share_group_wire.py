"""Share group APIs on the wire: ShareGroupHeartbeat/ShareGroupDescribe v1 (Kafka's schemas on
keys 76/77, shadowed for stock clients) and Describe/Alter/DeleteShareGroupOffsets (90-92), byte
for byte against kio (an independent implementation of Kafka's schemas), plus one golden frame
written out by hand."""

from __future__ import annotations

import datetime
import io
import uuid
from typing import Any

import pytest
from kio.schema.alter_share_group_offsets.v0 import request as alter_req
from kio.schema.alter_share_group_offsets.v0 import response as alter_resp
from kio.schema.delete_share_group_offsets.v0 import request as delete_req
from kio.schema.delete_share_group_offsets.v0 import response as delete_resp
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets_req
from kio.schema.describe_share_group_offsets.v1 import response as describe_offsets_resp
from kio.schema.errors import ErrorCode as KioError
from kio.schema.share_group_describe.v1 import request as describe_req
from kio.schema.share_group_describe.v1 import response as describe_resp
from kio.schema.share_group_heartbeat.v1 import request as heartbeat_req
from kio.schema.share_group_heartbeat.v1 import response as heartbeat_resp
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i64

from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, ApiKey
from kafka_ext.protocol.messages import MessageType, registry

T1 = uuid.UUID("6f1c2a4e-0b8d-4c55-9a77-3e2d1f0c9b81")
NO_THROTTLE = datetime.timedelta(0)


def _kio_bytes(obj: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


def _ours(kind: str, key: int, shadowed: bool) -> MessageType:
    reg = registry()
    table = {("request", True): reg.shadowed_requests, ("response", True): reg.shadowed_responses,
             ("request", False): reg.requests, ("response", False): reg.responses}
    return table[(kind, shadowed)][key]


CASES = [
    ("request", SHARE_GROUP_HEARTBEAT, True, 1, heartbeat_req.ShareGroupHeartbeatRequest(
        group_id="queue", member_id="Wq8n2cR5T1yvYhYc3JmA3g", member_epoch=i32(0),
        rack_id=None, subscribed_topic_names=("jobs",))),
    ("response", SHARE_GROUP_HEARTBEAT, True, 1, heartbeat_resp.ShareGroupHeartbeatResponse(
        throttle_time=NO_THROTTLE, error_code=KioError.none, error_message=None,
        member_id="Wq8n2cR5T1yvYhYc3JmA3g", member_epoch=i32(2), heartbeat_interval=datetime
        .timedelta(milliseconds=5000), assignment=heartbeat_resp.Assignment(topic_partitions=(
            heartbeat_resp.TopicPartitions(topic_id=T1, partitions=(i32(0), i32(1))),)))),
    ("request", SHARE_GROUP_DESCRIBE, True, 1, describe_req.ShareGroupDescribeRequest(
        group_ids=("queue",), include_authorized_operations=True)),
    ("response", SHARE_GROUP_DESCRIBE, True, 1, describe_resp.ShareGroupDescribeResponse(
        throttle_time=NO_THROTTLE, groups=(describe_resp.DescribedGroup(
            error_code=KioError.none, group_id="queue", group_state="Stable",
            group_epoch=i32(2), assignment_epoch=i32(2), assignor_name="simple",
            members=(describe_resp.Member(
                member_id="m1", rack_id=None, member_epoch=i32(2), client_id="rdkafka",
                client_host="/127.0.0.1", subscribed_topic_names=("jobs",),
                assignment=describe_resp.Assignment(topic_partitions=(
                    describe_resp.TopicPartitions(topic_id=T1, topic_name="jobs",
                                                  partitions=(i32(0),)),))),),
            authorized_operations=i32(-2147483648)),))),
    ("request", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, False, 1,
     describe_offsets_req.DescribeShareGroupOffsetsRequest(groups=(
         describe_offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id="queue", topics=None),
         describe_offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id="q2", topics=(
             describe_offsets_req.DescribeShareGroupOffsetsRequestTopic(
                 topic_name="jobs", partitions=(i32(0),)),))))),
    ("response", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, False, 1,
     describe_offsets_resp.DescribeShareGroupOffsetsResponse(throttle_time=NO_THROTTLE, groups=(
         describe_offsets_resp.DescribeShareGroupOffsetsResponseGroup(
             group_id="queue", error_code=KioError.none, topics=(
                 describe_offsets_resp.DescribeShareGroupOffsetsResponseTopic(
                     topic_name="jobs", topic_id=T1, partitions=(
                         describe_offsets_resp.DescribeShareGroupOffsetsResponsePartition(
                             partition_index=i32(0), start_offset=i64(17), leader_epoch=i32(3),
                             lag=i64(5), error_code=KioError.none),)),)),))),
    ("request", ApiKey.ALTER_SHARE_GROUP_OFFSETS, False, 0,
     alter_req.AlterShareGroupOffsetsRequest(group_id="queue", topics=(
         alter_req.AlterShareGroupOffsetsRequestTopic(topic_name="jobs", partitions=(
             alter_req.AlterShareGroupOffsetsRequestPartition(partition_index=i32(0),
                                                              start_offset=i64(42)),)),))),
    ("response", ApiKey.ALTER_SHARE_GROUP_OFFSETS, False, 0,
     alter_resp.AlterShareGroupOffsetsResponse(
         throttle_time=NO_THROTTLE, error_code=KioError.none, responses=(
             alter_resp.AlterShareGroupOffsetsResponseTopic(topic_name="jobs", topic_id=T1,
                                                            partitions=(
                 alter_resp.AlterShareGroupOffsetsResponsePartition(
                     partition_index=i32(0), error_code=KioError.non_empty_group),)),))),
    ("request", ApiKey.DELETE_SHARE_GROUP_OFFSETS, False, 0,
     delete_req.DeleteShareGroupOffsetsRequest(group_id="queue", topics=(
         delete_req.DeleteShareGroupOffsetsRequestTopic(topic_name="jobs"),))),
    ("response", ApiKey.DELETE_SHARE_GROUP_OFFSETS, False, 0,
     delete_resp.DeleteShareGroupOffsetsResponse(
         throttle_time=NO_THROTTLE, error_code=KioError.none, responses=(
             delete_resp.DeleteShareGroupOffsetsResponseTopic(
                 topic_name="jobs", topic_id=T1, error_code=KioError.unknown_topic_or_partition,
                 error_message="There is no offset information to delete."),))),
]


@pytest.mark.parametrize(("kind", "key", "shadowed", "version", "theirs"), CASES,
                         ids=[f"{c[4].__class__.__name__}-v{c[3]}" for c in CASES])
def test_share_group_messages_are_byte_identical_to_kio(kind: str, key: int, shadowed: bool,
                                                        version: int, theirs: Any) -> None:
    mtype = _ours(kind, key, shadowed)
    wire = _kio_bytes(theirs)
    ours = mtype.decode_all(wire, version)
    assert mtype.encode(ours, version) == wire
    back, size = entity_reader(type(theirs))(mtype.encode(ours, version), 0)
    assert size == len(wire) and back == theirs


def test_a_share_group_heartbeat_join_has_kafkas_bytes() -> None:
    """GroupId "g", MemberId "m", epoch 0, RackId null, SubscribedTopicNames ["t"], written
    out as the compact (flexible) encoding of Kafka's ShareGroupHeartbeatRequest v1."""
    golden = bytes([0x02]) + b"g" + bytes([0x02]) + b"m" + bytes(4) + bytes([0x00]) \
        + bytes([0x02, 0x02]) + b"t" + bytes([0x00])
    mtype = _ours("request", SHARE_GROUP_HEARTBEAT, True)
    ours = mtype.cls(group_id="g", member_id="m", member_epoch=0, rack_id=None,
                     subscribed_topic_names=["t"])
    assert mtype.encode(ours, 1) == golden
    assert _kio_bytes(heartbeat_req.ShareGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=i32(0), subscribed_topic_names=("t",))) == golden


def test_only_v1_of_the_share_group_keys_is_kafkas() -> None:
    """v0 was Kafka 4.0's early access, removed in 4.1: a stock client asking for it gets no
    such version."""
    for key in (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE):
        versions = registry().shadowed_requests[key].versions
        assert (versions.lowest, versions.highest) == (1, 1)
