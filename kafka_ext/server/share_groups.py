"""Share group APIs (KIP-932): ShareGroupHeartbeat (76, v1), ShareGroupDescribe (77, v1),
DescribeShareGroupOffsets (90, v0-v1; Lag from v1, KIP-1226), AlterShareGroupOffsets (91, v0)
and DeleteShareGroupOffsets (92, v0). Mirrors Kafka 4.2's KafkaApis for them; the
GroupCoordinator (share_group_manager.py) decides.

Keys 76/77 are CreateChunks/AlterChunkAssignments to our own client (DESIGN.md §4): these
handlers are registered with `register_shadowed` and serve stock connections, decoded with
Kafka's schemas (`protocol_schemas/shadowed/`). v0 of 76/77 was Kafka 4.0's early access and is
gone since 4.1, as here. With `group.share.enable=false` or share.version finalized at 0 every
share API answers UNSUPPORTED_VERSION, as a Kafka broker without the share.version feature does.

Authorization as KafkaApis: READ on the group to heartbeat or alter offsets, DESCRIBE to
describe it or its offsets, DELETE to delete its offsets; DESCRIBE on every subscribed topic
(else TOPIC_AUTHORIZATION_FAILED, KAFKA-18813), DESCRIBE on the topics a description or an
offset answer names, READ on a topic to alter or delete its offsets.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka_ext.coordinator.group.assignors import Assignment
from kafka_ext.coordinator.group.coordinator import GroupCoordinator
from kafka_ext.coordinator.group.share_group_manager import (
    MAX_MEMBER_ID_LENGTH,
    ShareHeartbeatRequest,
    TopicOffsets,
)
from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.security.acl import AclOperation, ResourceType
from kafka_ext.server.api_versions import share_version
from kafka_ext.server.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    authorized_topics,
    group_authorized,
)
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.share.group_config import share_group_configs
from kafka_ext.storage.log import LATEST_TIMESTAMP

_reg = registry()
_Heartbeat = _reg.shadowed_responses[SHARE_GROUP_HEARTBEAT].cls
_Describe = _reg.shadowed_responses[SHARE_GROUP_DESCRIBE].cls
_DescribeOffsets = _reg["DescribeShareGroupOffsetsResponse"].cls
_AlterOffsets = _reg["AlterShareGroupOffsetsResponse"].cls
_DeleteOffsets = _reg["DeleteShareGroupOffsetsResponse"].cls
_ListOffsets = _reg["ListOffsetsRequest"].cls

_UNSUPPORTED = "The broker does not support share groups."
# Kafka 4.x's answer for a group whose assignments name a topic the caller may not see.
_HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."
ZERO_UUID = uuid.UUID(int=0)
LIST_OFFSETS_VERSION = 7  # asking a partition's leader for its end offset (Lag)
END_OFFSET_TIMEOUT_S = 10.0


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.group_coordinator
    return coordinator


def _enabled(ctx: RequestContext) -> bool:
    return share_version(ctx.broker) >= 1


def _client_host(ctx: RequestContext) -> str:
    """Kafka's clientAddress.toString(): "/" and the address."""
    peer = ctx.client_host or ctx.connection.peer
    return "/" + peer.rsplit(":", 1)[0] if peer and peer != "?" else ""


# -- ShareGroupHeartbeat (76) -----------------------------------------------------------------

def _heartbeat_error(code: ErrorCode, message: str | None) -> Any:
    return _Heartbeat(error_code=int(code), error_message=message, member_id=None,
                      member_epoch=0, heartbeat_interval_ms=0, assignment=None)


async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """READ on the group, a member id of the client's (1-36 characters), DESCRIBE on every
    subscribed topic; then the coordinator's answer."""
    if not _enabled(ctx):
        return _heartbeat_error(ErrorCode.UNSUPPORTED_VERSION, _UNSUPPORTED)
    if not group_authorized(ctx, AclOperation.READ, request.group_id):
        return _heartbeat_error(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                "Group authorization failed.")
    if not request.member_id or len(request.member_id) > MAX_MEMBER_ID_LENGTH:
        return _heartbeat_error(ErrorCode.INVALID_REQUEST, "Invalid member id in the request.")
    subscribed = request.subscribed_topic_names
    if subscribed and len(authorized_topics(ctx, AclOperation.DESCRIBE, subscribed)) < len(
            set(subscribed)):
        return _heartbeat_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    try:
        result = await _coordinator(ctx).share_group_heartbeat(ShareHeartbeatRequest(
            group_id=request.group_id, member_id=request.member_id,
            member_epoch=request.member_epoch, rack_id=request.rack_id,
            subscribed_topic_names=None if subscribed is None else list(subscribed),
            client_id=ctx.client_id or "", client_host=_client_host(ctx)))
    except KafkaError as exc:
        return _heartbeat_error(exc.code, exc.message or None)
    assignment = None
    if result.assignment is not None:
        assignment = _Heartbeat.Assignment(topic_partitions=[
            _Heartbeat.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items(),
                                               key=lambda item: str(item[0]))])
    return _Heartbeat(error_code=0, member_id=result.member_id, member_epoch=result.member_epoch,
                      heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


# -- ShareGroupDescribe (77) ------------------------------------------------------------------

def _described_error(group_id: str, code: ErrorCode, message: str | None) -> Any:
    return _Describe.DescribedGroup(
        error_code=int(code), error_message=message, group_id=group_id, group_state="",
        group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


async def handle_share_group_describe(ctx: RequestContext, request: Any) -> Any:
    """DESCRIBE on each group; a group whose members' assignments name a topic the principal
    may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its members."""
    if not _enabled(ctx):
        return _Describe(groups=[_described_error(g, ErrorCode.UNSUPPORTED_VERSION, _UNSUPPORTED)
                                 for g in request.group_ids])
    coordinator = _coordinator(ctx)
    topics_by_id = ctx.broker.controller.image.topics_by_id

    def assignment(parts: Assignment) -> Any:
        return _Describe.Assignment(topic_partitions=[
            _Describe.TopicPartitions(
                topic_id=topic_id, partitions=sorted(ps),
                topic_name=topics_by_id[topic_id].name if topic_id in topics_by_id else "")
            for topic_id, ps in sorted(parts.items(), key=lambda item: str(item[0]))])

    groups = []
    for group_id in request.group_ids:
        if not group_authorized(ctx, AclOperation.DESCRIBE, group_id):
            groups.append(_described_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        if not group_id:
            groups.append(_described_error(group_id, ErrorCode.INVALID_GROUP_ID, None))
            continue
        try:
            group = coordinator.share_group_describe(group_id)
        except KafkaError as exc:
            groups.append(_described_error(group_id, exc.code, exc.message or None))
            continue
        named = {topics_by_id[t].name for m in group.members.values() for t in m.assigned
                 if t in topics_by_id}
        if len(authorized_topics(ctx, AclOperation.DESCRIBE, named)) < len(named):
            groups.append(_described_error(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                           _HIDDEN_TOPICS))
            continue
        groups.append(_Describe.DescribedGroup(
            error_code=0, group_id=group_id, group_state=group.state.value,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=coordinator.config.share.assignors[0],
            authorized_operations=authorized_operations(ctx, ResourceType.GROUP, group_id)
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
            members=[_Describe.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=assignment(m.assigned)) for m in group.members.values()]))
    return _Describe(groups=groups)


# -- DescribeShareGroupOffsets (90) -----------------------------------------------------------

async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """Each group's share-partition start offsets (and Lag in v1): all initialized ones when
    Topics is null; topics the principal may not DESCRIBE are left out of "all", and answer
    TOPIC_AUTHORIZATION_FAILED when asked for."""
    groups = []
    for g in request.groups:
        groups.append(await _describe_offsets(ctx, g))
    return _DescribeOffsets(groups=groups)


def _group_offsets_error(group_id: str, code: ErrorCode, message: str | None) -> Any:
    return _DescribeOffsets.DescribeShareGroupOffsetsResponseGroup(
        group_id=group_id, topics=[], error_code=int(code), error_message=message)


async def _describe_offsets(ctx: RequestContext, g: Any) -> Any:
    Group = _DescribeOffsets.DescribeShareGroupOffsetsResponseGroup
    if not _enabled(ctx):
        return _group_offsets_error(g.group_id, ErrorCode.UNSUPPORTED_VERSION, None)
    if not group_authorized(ctx, AclOperation.DESCRIBE, g.group_id):
        return _group_offsets_error(g.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if g.topics is not None and not g.topics:
        return Group(group_id=g.group_id, topics=[], error_code=0)
    denied: list[Any] = []
    asked: list[tuple[str, list[int]]] | None = None
    if g.topics is not None:
        visible = authorized_topics(ctx, AclOperation.DESCRIBE, (t.topic_name for t in g.topics))
        asked = [(t.topic_name, list(t.partitions)) for t in g.topics if t.topic_name in visible]
        denied = [t for t in g.topics if t.topic_name not in visible]
    try:
        found = await _coordinator(ctx).describe_share_group_offsets(g.group_id, asked)
    except KafkaError as exc:
        return _group_offsets_error(g.group_id, exc.code, exc.message or None)
    if asked is None:
        visible = authorized_topics(ctx, AclOperation.DESCRIBE, (t.name for t in found))
        found = [t for t in found if t.name in visible]
    isolation = share_group_configs(ctx.broker, g.group_id).isolation_level
    topics = [await _topic_offsets(ctx, t, isolation) for t in found]
    Topic = _DescribeOffsets.DescribeShareGroupOffsetsResponseTopic
    Partition = _DescribeOffsets.DescribeShareGroupOffsetsResponsePartition
    for t in denied:
        topics.append(Topic(topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=[
            Partition(partition_index=p, start_offset=-1, leader_epoch=0, lag=-1,
                      error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                      error_message="Topic authorization failed.") for p in t.partitions]))
    return Group(group_id=g.group_id, topics=topics, error_code=0)


async def _topic_offsets(ctx: RequestContext, topic: TopicOffsets, isolation: int) -> Any:
    """Lag = the partition's end offset (high watermark, or last stable offset for
    read_committed groups) - start offset - delivery-complete count, when all are known;
    -1 otherwise (Kafka 4.2's computeShareGroupLag)."""
    Partition = _DescribeOffsets.DescribeShareGroupOffsetsResponsePartition
    partitions = []
    for p in topic.partitions:
        s = p.summary
        if s is None:
            partitions.append(Partition(partition_index=p.partition, start_offset=-1,
                                        leader_epoch=0, lag=-1, error_code=0))
            continue
        entry = Partition(partition_index=p.partition, start_offset=s.start_offset,
                          leader_epoch=s.leader_epoch, lag=-1, error_code=0)
        if ctx.api_version >= 1 and s.start_offset >= 0 and s.delivery_complete_count >= 0:
            try:
                end = await _end_offset(ctx.broker, topic.name, p.partition, isolation)
                entry.lag = end - s.start_offset - s.delivery_complete_count
            except KafkaError as exc:
                entry = Partition(partition_index=p.partition, start_offset=-1, leader_epoch=0,
                                  lag=-1, error_code=int(exc.code),
                                  error_message=exc.message or None)
        partitions.append(entry)
    return _DescribeOffsets.DescribeShareGroupOffsetsResponseTopic(
        topic_name=topic.name, topic_id=topic.topic_id, partitions=partitions)


async def _end_offset(broker: Any, topic: str, partition: int, isolation: int) -> int:
    """The offset a consumer of that isolation could read up to: here when this broker leads
    the partition (or it is diskless), else through ListOffsets at its leader."""
    if broker.diskless.is_diskless(topic, partition):
        offset, _ = await broker.diskless.list_offset(topic, partition, LATEST_TIMESTAMP,
                                                      isolation)
        return int(offset)
    hosted = broker.replica_manager.partitions.get((topic, partition))
    if hosted is not None and hosted.is_leader:
        log = hosted.log
        return int(log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark)
    known = broker.controller.image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is None or part.leader < 0:
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
    ask = _ListOffsets(replica_id=-1, isolation_level=isolation, topics=[
        _ListOffsets.ListOffsetsTopic(name=topic, partitions=[_ListOffsets.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP)])])
    try:
        answer = await broker.broker_channels.request(part.leader, ApiKey.LIST_OFFSETS,
                                                      LIST_OFFSETS_VERSION, ask,
                                                      END_OFFSET_TIMEOUT_S)
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                         f"the leader of {topic}-{partition} did not answer: {exc}") from exc
    got = answer.topics[0].partitions[0]
    if got.error_code:
        raise KafkaError(ErrorCode(got.error_code), f"ListOffsets of {topic}-{partition}")
    return int(got.offset)


# -- AlterShareGroupOffsets (91) --------------------------------------------------------------

def _alter_error(request: Any, code: ErrorCode, message: str | None) -> Any:
    """Kafka's getErrorResponse: the error at the top and on every partition asked for."""
    return _AlterOffsets(error_code=int(code), error_message=message, responses=[
        _AlterOffsets.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=[
                _AlterOffsets.AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=int(code),
                    error_message=message) for p in t.partitions])
        for t in request.topics])


async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """READ on the group and on each topic; the group must be empty (NON_EMPTY_GROUP)."""
    if not _enabled(ctx):
        return _alter_error(request, ErrorCode.UNSUPPORTED_VERSION, _UNSUPPORTED)
    if not group_authorized(ctx, AclOperation.READ, request.group_id):
        return _alter_error(request, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not request.group_id:
        return _alter_error(request, ErrorCode.INVALID_GROUP_ID, None)
    readable = authorized_topics(ctx, AclOperation.READ, (t.topic_name for t in request.topics))
    asked = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
             for t in request.topics if t.topic_name in readable]
    try:
        results = await _coordinator(ctx).alter_share_group_offsets(request.group_id, asked) \
            if asked else []
    except KafkaError as exc:
        return _alter_error(request, exc.code, exc.message or None)
    Topic = _AlterOffsets.AlterShareGroupOffsetsResponseTopic
    Partition = _AlterOffsets.AlterShareGroupOffsetsResponsePartition
    by_name = {r.name: r for r in results}
    responses = []
    for t in request.topics:
        result = by_name.get(t.topic_name)
        if result is None:
            denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            responses.append(Topic(topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=[
                Partition(partition_index=p.partition_index, error_code=denied,
                          error_message="Topic authorization failed.") for p in t.partitions]))
            continue
        responses.append(Topic(topic_name=t.topic_name, topic_id=result.topic_id, partitions=[
            Partition(partition_index=p, error_code=int(code), error_message=message)
            for p, (code, message) in result.partitions.items()]))
    return _AlterOffsets(error_code=0, responses=responses)


# -- DeleteShareGroupOffsets (92) -------------------------------------------------------------

def _delete_error(code: ErrorCode, message: str | None) -> Any:
    return _DeleteOffsets(error_code=int(code), error_message=message, responses=[])


async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """DELETE on the group, READ on each topic; the group must be empty (NON_EMPTY_GROUP)."""
    if not _enabled(ctx):
        return _delete_error(ErrorCode.UNSUPPORTED_VERSION, _UNSUPPORTED)
    if not group_authorized(ctx, AclOperation.DELETE, request.group_id):
        return _delete_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not request.group_id:
        return _delete_error(ErrorCode.INVALID_GROUP_ID, None)
    readable = authorized_topics(ctx, AclOperation.READ, (t.topic_name for t in request.topics))
    Topic = _DeleteOffsets.DeleteShareGroupOffsetsResponseTopic
    responses = [Topic(topic_name=t.topic_name, topic_id=ZERO_UUID,
                       error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                       error_message="Topic authorization failed.")
                 for t in request.topics if t.topic_name not in readable]
    asked = [t.topic_name for t in request.topics if t.topic_name in readable]
    try:
        results = await _coordinator(ctx).delete_share_group_offsets(request.group_id, asked)
    except KafkaError as exc:
        return _delete_error(exc.code, exc.message or None)
    responses += [Topic(topic_name=r.name, topic_id=r.topic_id, error_code=int(r.error),
                        error_message=r.message) for r in results]
    return _DeleteOffsets(error_code=0, responses=responses)


# Kafka's APIs on keys that are ours to our own peers (register_shadowed), and the others.
SHADOWED_HANDLERS = {
    SHARE_GROUP_HEARTBEAT: handle_share_group_heartbeat,
    SHARE_GROUP_DESCRIBE: handle_share_group_describe,
}
HANDLERS = {
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: handle_describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: handle_alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: handle_delete_share_group_offsets,
}
