"""Consumer group APIs: coordinator discovery, the classic group protocol and offsets.

FindCoordinator (10, v0-v6; v0 knows only groups; batched coordinator_keys from v4; key type 0
groups, 1 transactional ids, 2 share-partitions (v6+, KIP-932), 100 diskless coordinators as
docs/protocol.md proposes), JoinGroup
(11, v0-v9; v0 has no rebalance timeout (-1): the coordinator uses the session timeout;
MEMBER_ID_REQUIRED from v4, static members from v5, protocol type in the answer from v7,
SkipAssignment v9), SyncGroup (14, v0-v5; protocol checks v5), Heartbeat (12, v0-v4),
LeaveGroup (13, v0-v5; batched members from v3), OffsetCommit (8, v0-v9; v1 per-partition
commit timestamps, v2-v4 retention time), OffsetFetch (9, v0-v9; several groups from v8, member
epochs v9), OffsetDelete (47, v0),
ListGroups (16, v0-v5; state filter v4, type filter v5: classic, consumer, share),
DescribeGroups (15, v0-v5; a consumer or share group is Dead, as Kafka), DeleteGroups (42, v0-v2;
a share group only empty, with its share state), TxnOffsetCommit (28, v0-v4), and KIP-848's
ConsumerGroupHeartbeat (68, v0-v1; the member id comes from the client from v1, from us when
empty; topic regex v1) and ConsumerGroupDescribe (69, v0); share groups' own APIs are in
share_groups.py. The GroupCoordinator decides; these handlers translate the wire.

Each handler first authorizes as Kafka's KafkaApis does (server/authorization.py): READ on the
group to join, sync, heartbeat, leave or commit, DESCRIBE to find its coordinator, fetch its
offsets or describe it, DELETE to delete it or its offsets; READ on a topic to commit or delete
its offsets, DESCRIBE to see them; WRITE on the transactional id for TxnOffsetCommit.

OffsetCommit v0 and OffsetFetch v0 read and wrote ZooKeeper, not the group coordinator; Kafka
3.9 in KRaft mode decodes them and answers UNSUPPORTED_VERSION for every partition of a known
topic, and so do we (docs/compatibility.md).
"""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC
from kafka_ext.coordinator.group.assignors import Assignment
from kafka_ext.coordinator.group.consumer_group_manager import HeartbeatRequest
from kafka_ext.coordinator.group.coordinator import (
    FetchedOffset,
    GroupCoordinator,
    OffsetCommitEntry,
    PositionExchange,
)
from kafka_ext.coordinator.share.coordinator import parse_coordinator_key
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation, ResourceType
from kafka_ext.server.api_versions import group_version
from kafka_ext.server.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    authorized_topics,
    cluster_authorized,
    group_authorized,
    topic_authorized,
    transactional_id_authorized,
)
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2  # KIP-932: key "groupId:topicId:partition", FindCoordinator v6+
# Ours (docs/protocol.md): key = a __diskless_metadata partition number in decimal (KIP-1164).
DISKLESS_KEY_TYPE = 100


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.group_coordinator
    return coordinator


def _client_host(ctx: RequestContext) -> str:
    peer = ctx.connection.peer
    return "/" + peer.rsplit(":", 1)[0] if peer != "?" else ""


def _require_group(ctx: RequestContext, operation: AclOperation, group_id: str) -> None:
    """GROUP_AUTHORIZATION_FAILED unless the principal may apply `operation` to the group."""
    if not group_authorized(ctx, operation, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                         f"{ctx.principal} may not {operation.name} group {group_id}")


# -- FindCoordinator ---------------------------------------------------------------------------

async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["FindCoordinatorResponse"].cls
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node = await _find(ctx, request.key_type, key)
            coordinators.append(Response.Coordinator(
                key=key, node_id=node[0], host=node[1], port=node[2], error_code=int(error),
                error_message=message))
        return Response(coordinators=coordinators)
    error, message, node = await _find(ctx, request.key_type, request.key)
    return Response(error_code=int(error), error_message=message, node_id=node[0],
                    host=node[1], port=node[2])


async def _find(ctx: RequestContext, key_type: int, key: str
                ) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
    """(error, message, (node id, host, port)) of the coordinator of `key`."""
    no_node = (-1, "", -1)
    if key_type == DISKLESS_KEY_TYPE:
        return _find_diskless(ctx, key)
    if key_type == SHARE_KEY_TYPE:
        return await _find_share(ctx, key)
    if key_type == GROUP_KEY_TYPE:
        if not group_authorized(ctx, AclOperation.DESCRIBE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", no_node
        coordinator: Any = ctx.broker.group_coordinator
    elif key_type == TRANSACTION_KEY_TYPE:
        if not transactional_id_authorized(ctx, AclOperation.DESCRIBE, key):
            return (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "Transactional Id authorization failed.", no_node)
        coordinator = getattr(ctx.broker, "txn_coordinator", None)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator", no_node
    else:
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", no_node
    runtime = coordinator.runtime
    try:
        await runtime.ensure_topic()
    except KafkaError as exc:
        return exc.code, exc.message, no_node
    return _leader_node(ctx, runtime.leader_of(coordinator.partition_for(key)))


async def _find_share(ctx: RequestContext, key: str
                      ) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
    """The share coordinator of a share-partition: the leader of the `__share_group_state`
    partition its key hashes to, creating the topic on first use as Kafka does. Brokers ask
    (the persister): CLUSTER_ACTION is needed, and a key not of the form
    "groupId:topicId:partition" is INVALID_REQUEST, as is asking before v6."""
    no_node = (-1, "", -1)
    if ctx.api_version < 6:
        return ErrorCode.INVALID_REQUEST, "share coordinators are found with v6+", no_node
    if not cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
        return (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "CLUSTER_ACTION is needed to find a share coordinator", no_node)
    coordinator = getattr(ctx.broker, "share_coordinator", None)
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share coordinator", no_node
    try:
        share_key = parse_coordinator_key(key)
        await coordinator.ensure_topic()
    except KafkaError as exc:
        return exc.code, exc.message, no_node
    return _leader_node(ctx, coordinator.runtime.leader_of(coordinator.partition_for(share_key)))


def _find_diskless(ctx: RequestContext, key: str
                   ) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
    """The leader of the `__diskless_metadata` partition numbered `key` (a coordinator id).

    The topic is created by the diskless coordinator at start, not here: a broker asking
    before it exists gets COORDINATOR_NOT_AVAILABLE and retries. The answer says which broker
    leads that partition, as Metadata on the topic would: it needs DESCRIBE on the topic.
    """
    no_node = (-1, "", -1)
    if not topic_authorized(ctx, AclOperation.DESCRIBE, DISKLESS_METADATA_TOPIC):
        return (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"DESCRIBE on {DISKLESS_METADATA_TOPIC} is needed to find its coordinators",
                no_node)
    if not key.isdigit() or not key.isascii():
        return ErrorCode.INVALID_REQUEST, f"not a diskless coordinator id: {key!r}", no_node
    topic = ctx.broker.controller.image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
    if topic is None:
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{DISKLESS_METADATA_TOPIC} does not exist yet", no_node)
    partition = topic.partitions.get(int(key))
    if partition is None:
        return (ErrorCode.INVALID_REQUEST,
                f"no diskless coordinator {key}: {DISKLESS_METADATA_TOPIC} has "
                f"{len(topic.partitions)} partitions", no_node)
    return _leader_node(ctx, partition.leader)


def _leader_node(ctx: RequestContext, leader: int
                 ) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
    """The coordinator's answer for a partition led by `leader`, as clients of this listener
    reach it; COORDINATOR_NOT_AVAILABLE when that broker is not live (or there is none)."""
    for node in ctx.broker.live_nodes(ctx.listener_name):
        if node.node_id == leader:
            return ErrorCode.NONE, None, (node.node_id, node.host, node.port)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is not available", (-1, "", -1)


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------

async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["JoinGroupResponse"].cls
    version = ctx.api_version
    try:
        _require_group(ctx, AclOperation.READ, request.group_id)
        result = await _coordinator(ctx).join_group(
            group_id=request.group_id, member_id=request.member_id,
            group_instance_id=request.group_instance_id, client_id=ctx.client_id or "",
            client_host=_client_host(ctx), session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            api_version=version)
    except KafkaError as exc:
        return Response(error_code=int(exc.code), generation_id=-1,
                        protocol_name=None if version >= 7 else "", leader="",
                        member_id=request.member_id, members=[])
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return Response(
        error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name,
        leader=result.leader_id, skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[Response.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in result.members])


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["SyncGroupResponse"].cls
    try:
        _require_group(ctx, AclOperation.READ, request.group_id)
        result = await _coordinator(ctx).sync_group(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type, protocol_name=request.protocol_name,
            assignments=[(a.member_id, bytes(a.assignment)) for a in request.assignments])
    except KafkaError as exc:
        return Response(error_code=int(exc.code), assignment=b"")
    return Response(error_code=result.error, protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name, assignment=result.assignment)


POSITIONS_VERSION = 4  # the first Heartbeat version with tagged fields


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """Heartbeat; v4+ may carry KIP-253 positions (our tagged Topics): a member reports its
    positions and asks for other members'; every v4+ answer names the partitions some member
    waits on, so their owners report them (docs/partition-count.md)."""
    Response = _reg["HeartbeatResponse"].cls
    positions = None
    if ctx.api_version >= POSITIONS_VERSION:  # with or without Topics: it may be asked for some
        listed = [(t.topic, p) for t in request.topics or () for p in t.partitions]
        positions = PositionExchange(
            reported={(topic, p.partition): p.position for topic, p in listed
                      if p.position >= 0},
            wanted=frozenset((topic, p.partition) for topic, p in listed if p.need_position))
    try:
        _require_group(ctx, AclOperation.READ, request.group_id)
        error = await _coordinator(ctx).heartbeat(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            positions=positions)
    except KafkaError as exc:
        error = exc.code
    response = Response(error_code=int(error))
    if positions is not None and (positions.answered or positions.asked):
        entries: dict[str, dict[int, Any]] = {}
        for (topic, partition), position in positions.answered.items():
            entries.setdefault(topic, {})[partition] = Response.HeartbeatResponsePartition(
                partition=partition, need_position=False, position=position)
        for topic, partition in positions.asked:
            entry = entries.setdefault(topic, {}).get(partition)
            if entry is None:
                entries[topic][partition] = Response.HeartbeatResponsePartition(
                    partition=partition, need_position=True, position=-1)
            else:
                entry.need_position = True
        response.topics = [Response.HeartbeatResponseTopic(topic=topic, partitions=[
            by_partition[p] for p in sorted(by_partition)])
            for topic, by_partition in sorted(entries.items())]
    return response


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["LeaveGroupResponse"].cls
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    try:
        _require_group(ctx, AclOperation.READ, request.group_id)
        error, errors = await _coordinator(ctx).leave_group(request.group_id, members)
    except KafkaError as exc:
        error, errors = exc.code, []
    if ctx.api_version < 3:
        if error == ErrorCode.NONE and errors:
            error = errors[0]
        return Response(error_code=int(error))
    if error != ErrorCode.NONE:
        return Response(error_code=int(error), members=[])
    return Response(error_code=0, members=[
        Response.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e))
        for (m, i), e in zip(members, errors, strict=True)])


# -- offsets -----------------------------------------------------------------------------------

def _every_partition(request: Any, code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): code for t in request.topics for p in t.partitions}


def _commit_entries(ctx: RequestContext, request: Any
                    ) -> tuple[list[OffsetCommitEntry], dict[tuple[str, int], ErrorCode]]:
    """The offsets of an (Txn)OffsetCommit request to commit, and the error of every other
    partition: TOPIC_AUTHORIZATION_FAILED without READ on its topic, else
    UNKNOWN_TOPIC_OR_PARTITION for an unknown topic (authorization first, as in Kafka)."""
    known = ctx.broker.controller.image.topics_by_name
    readable = authorized_topics(ctx, AclOperation.READ, (t.name for t in request.topics))
    entries: list[OffsetCommitEntry] = []
    codes: dict[tuple[str, int], ErrorCode] = {}
    for t in request.topics:
        for p in t.partitions:
            if t.name not in readable:
                codes[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.name not in known:
                codes[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                entries.append(OffsetCommitEntry(
                    t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                    p.committed_metadata,
                    getattr(p, "commit_timestamp", -1)))  # OffsetCommit v1 only, never Txn
    return entries, codes


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["OffsetCommitResponse"].cls
    if not group_authorized(ctx, AclOperation.READ, request.group_id):
        codes = _every_partition(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    else:
        codes = await _commit(ctx, request)
    return Response(topics=[Response.OffsetCommitResponseTopic(name=t.name, partitions=[
        Response.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                               error_code=int(codes[(t.name, p.partition_index)]))
        for p in t.partitions]) for t in request.topics])


async def _commit(ctx: RequestContext, request: Any) -> dict[tuple[str, int], ErrorCode]:
    """OffsetCommit's error per partition, once the group is authorized."""
    entries, codes = _commit_entries(ctx, request)
    failure: ErrorCode | None = None
    if entries and ctx.api_version == 0:
        # ZooKeeper-stored in Kafka; its KRaft mode fails the whole request, unknown topics too.
        failure = ErrorCode.UNSUPPORTED_VERSION
        entries += [OffsetCommitEntry(t, p, -1) for (t, p), code in codes.items()
                    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    elif entries:
        try:
            results = await _coordinator(ctx).commit_offsets(
                group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
                member_id=request.member_id, group_instance_id=request.group_instance_id,
                retention_time_ms=request.retention_time_ms, entries=entries,
                api_version=ctx.api_version)
        except KafkaError as exc:
            failure = _offset_commit_error(exc.code)
        else:
            for entry, code in zip(entries, results, strict=True):
                codes[(entry.topic, entry.partition)] = code
    if failure is not None:
        for entry in entries:
            codes[(entry.topic, entry.partition)] = failure
    return codes


def _offset_commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka answers a commit too large for the log as INVALID_COMMIT_OFFSET_SIZE."""
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["TxnOffsetCommitResponse"].cls
    # The producer id is not authorized on its own: WRITE on the transactional id implies it.
    if not transactional_id_authorized(ctx, AclOperation.WRITE, request.transactional_id):
        codes = _every_partition(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not group_authorized(ctx, AclOperation.READ, request.group_id):
        codes = _every_partition(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    else:
        codes = await _txn_commit(ctx, request)
    return Response(topics=[Response.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        Response.TxnOffsetCommitResponsePartition(
            partition_index=p.partition_index,
            error_code=int(codes[(t.name, p.partition_index)]))
        for p in t.partitions]) for t in request.topics])


async def _txn_commit(ctx: RequestContext, request: Any) -> dict[tuple[str, int], ErrorCode]:
    """TxnOffsetCommit's error per partition, once the transactional id and group are."""
    entries, codes = _commit_entries(ctx, request)
    if entries:
        try:
            results = await _coordinator(ctx).commit_transactional_offsets(
                group_id=request.group_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch, generation_id=request.generation_id,
                member_id=request.member_id, group_instance_id=request.group_instance_id,
                entries=entries)
        except KafkaError as exc:
            code = _offset_commit_error(exc.code)
            if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
                code = ErrorCode.INVALID_PRODUCER_EPOCH  # older clients know only this one
            results = [code] * len(entries)
        for entry, code in zip(entries, results, strict=True):
            codes[(entry.topic, entry.partition)] = code
    return codes


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["OffsetFetchResponse"].cls
    require_stable = bool(request.require_stable)
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            wanted = (None if g.topics is None else
                      [(t.name, p) for t in g.topics for p in t.partition_indexes])
            error, fetched = _fetch(ctx, g.group_id, wanted, require_stable,
                                    g.member_id if ctx.api_version >= 9 else None,
                                    g.member_epoch if ctx.api_version >= 9 else -1)
            groups.append(Response.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=int(error),
                topics=_by_topic(fetched, Response.OffsetFetchResponseTopics,
                                 Response.OffsetFetchResponsePartitions)))
        return Response(groups=groups)
    wanted = (None if request.topics is None else
              [(t.name, p) for t in request.topics for p in t.partition_indexes])
    if ctx.api_version == 0:  # ZooKeeper-stored in Kafka; its KRaft mode answers this
        error, fetched = (ErrorCode.UNSUPPORTED_VERSION
                          if group_authorized(ctx, AclOperation.DESCRIBE, request.group_id)
                          else ErrorCode.GROUP_AUTHORIZATION_FAILED), []
    else:
        error, fetched = _fetch(ctx, request.group_id, wanted, require_stable)
    if error != ErrorCode.NONE and ctx.api_version < 2:
        # v0-v1 have no top-level error: every requested partition carries it.
        fetched = [FetchedOffset(t, p, -1, -1, "", int(error)) for t, p in wanted or []]
    return Response(error_code=int(error), topics=_by_topic(
        fetched, Response.OffsetFetchResponseTopic, Response.OffsetFetchResponsePartition))


def _fetch(ctx: RequestContext, group_id: str,
           wanted: list[tuple[str, int]] | None, require_stable: bool,
           member_id: str | None = None, member_epoch: int = -1
           ) -> tuple[ErrorCode, list[FetchedOffset]]:
    """The group's committed offsets the principal may see (Kafka's fetchOffsetsForGroup):
    none without DESCRIBE on the group; a requested partition of a topic it may not DESCRIBE
    answers TOPIC_AUTHORIZATION_FAILED, and fetching all offsets leaves such topics out."""
    if not group_authorized(ctx, AclOperation.DESCRIBE, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    asked: list[tuple[str, int]] | None = None
    visible: set[str] = set()
    if wanted is not None:
        visible = authorized_topics(ctx, AclOperation.DESCRIBE, (t for t, _ in wanted))
        asked = [tp for tp in wanted if tp[0] in visible]
    try:
        fetched = _coordinator(ctx).fetch_offsets(group_id, asked, require_stable,
                                                  member_id=member_id, member_epoch=member_epoch)
    except KafkaError as exc:
        return exc.code, []
    if wanted is None:
        visible = authorized_topics(ctx, AclOperation.DESCRIBE, {f.topic for f in fetched})
        return ErrorCode.NONE, [f for f in fetched if f.topic in visible]
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return ErrorCode.NONE, fetched + [FetchedOffset(t, p, -1, -1, "", denied)
                                      for t, p in wanted if t not in visible]


def _by_topic(fetched: list[FetchedOffset], topic_cls: Any, partition_cls: Any) -> list[Any]:
    topics: dict[str, list[Any]] = {}
    for f in fetched:
        topics.setdefault(f.topic, []).append(partition_cls(
            partition_index=f.partition, committed_offset=f.offset,
            committed_leader_epoch=f.leader_epoch, metadata=f.metadata, error_code=f.error))
    return [topic_cls(name=name, partitions=parts) for name, parts in topics.items()]


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["OffsetDeleteResponse"].cls
    if not group_authorized(ctx, AclOperation.DELETE, request.group_id):
        return Response(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), topics=[])
    readable = authorized_topics(ctx, AclOperation.READ, (t.name for t in request.topics))
    wanted = [(t.name, p.partition_index) for t in request.topics if t.name in readable
              for p in t.partitions]
    try:
        errors = await _coordinator(ctx).delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        return Response(error_code=int(exc.code), topics=[])
    codes = dict(zip(wanted, errors, strict=True))
    return Response(error_code=0, topics=[Response.OffsetDeleteResponseTopic(
        name=t.name, partitions=[Response.OffsetDeleteResponsePartition(
            partition_index=p.partition_index,
            error_code=int(codes.get((t.name, p.partition_index),
                                     ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            for p in t.partitions])
        for t in request.topics])


# -- ListGroups, DescribeGroups, DeleteGroups -------------------------------------------------

async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    """Every group with DESCRIBE on the cluster; otherwise the groups the principal may
    DESCRIBE (Kafka keeps the cluster-wide permission for compatibility)."""
    Response = _reg["ListGroupsResponse"].cls
    error, groups = _coordinator(ctx).list_groups(set(request.states_filter or []),
                                                  set(request.types_filter or []))
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        groups = [g for g in groups if group_authorized(ctx, AclOperation.DESCRIBE, g.group_id)]
    return Response(error_code=int(error), groups=[Response.ListedGroup(
        group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
        group_type=g.group_type) for g in groups])


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DescribeGroupsResponse"].cls
    coordinator = _coordinator(ctx)
    described = []
    for group_id in request.groups:
        if not group_authorized(ctx, AclOperation.DESCRIBE, group_id):
            described.append(Response.DescribedGroup(
                error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=group_id,
                group_state="", protocol_type="", protocol_data="",
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, members=[]))
            continue
        d = coordinator.describe_group(group_id)
        described.append(Response.DescribedGroup(
            error_code=d.error, group_id=group_id, group_state=d.state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            authorized_operations=_group_operations(ctx, request, group_id, d.error),
            members=[Response.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                member_assignment=m.assignment) for m in d.members]))
    return Response(groups=described)


def _group_operations(ctx: RequestContext, request: Any, group_id: str, error: int) -> int:
    """KIP-430: what the principal may do to a group it described, when the request asks."""
    if not request.include_authorized_operations or error != ErrorCode.NONE:
        return AUTHORIZED_OPERATIONS_OMITTED
    return authorized_operations(ctx, ResourceType.GROUP, group_id)


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DeleteGroupsResponse"].cls
    coordinator = _coordinator(ctx)
    results = []
    for group_id in request.groups_names:
        try:
            _require_group(ctx, AclOperation.DELETE, group_id)
            code = await coordinator.delete_group(group_id)
        except KafkaError as exc:
            code = exc.code
        results.append(Response.DeletableGroupResult(group_id=group_id, error_code=int(code)))
    return Response(results=results)


# -- KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe ------------------------------------

def _owned(request: Any) -> Assignment | None:
    if request.topic_partitions is None:
        return None
    return {tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions}


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """READ on the group; with subscribed topic names, DESCRIBE on every one of them, else
    TOPIC_AUTHORIZATION_FAILED (Kafka 4.0, KAFKA-18813: a member may not learn of topics it
    may not see). Topics a regex resolves to are the coordinator's to filter."""
    Response = _reg["ConsumerGroupHeartbeatResponse"].cls
    regex = request.subscribed_topic_regex if ctx.api_version >= 1 else None
    subscribed = request.subscribed_topic_names
    heartbeat = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if subscribed is None else list(subscribed),
        subscribed_topic_regex=regex, server_assignor=request.server_assignor,
        owned=_owned(request), client_id=ctx.client_id or "", client_host=_client_host(ctx))
    try:
        if group_version(ctx.broker) < 1:  # the consumer group protocol is off (KIP-848)
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "The version of API is not supported.")
        _require_group(ctx, AclOperation.READ, request.group_id)
        if subscribed and len(authorized_topics(ctx, AclOperation.DESCRIBE, subscribed)) < len(
                set(subscribed)):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             "Not authorized to describe every subscribed topic")
        result = await _coordinator(ctx).consumer_group_heartbeat(heartbeat)
    except KafkaError as exc:
        return Response(error_code=int(exc.code), error_message=exc.message,
                        member_id=request.member_id or None, member_epoch=-1,
                        heartbeat_interval_ms=0)
    assignment = None
    if result.assignment is not None:
        assignment = Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items(),
                                               key=lambda item: str(item[0]))])
    return Response(error_code=0, member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


# Kafka 4.0's answer for a group whose (target) assignments name a topic the caller may not see.
_HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    """DESCRIBE on each group; a group whose members' assignments or target assignments name
    a topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its
    members (Kafka 4.0, KAFKA-18813)."""
    Response = _reg["ConsumerGroupDescribeResponse"].cls
    coordinator = _coordinator(ctx)
    topics_by_id = ctx.broker.controller.image.topics_by_id

    def topic_name(topic_id: Any) -> str:
        return topics_by_id[topic_id].name if topic_id in topics_by_id else ""

    def assignment(parts: Assignment) -> Any:
        return Response.Assignment(topic_partitions=[
            Response.TopicPartitions(topic_id=topic_id, partitions=sorted(ps),
                                     topic_name=topic_name(topic_id))
            for topic_id, ps in sorted(parts.items(), key=lambda item: str(item[0]))])

    def refused(group_id: str, code: ErrorCode, message: str | None) -> Any:
        return Response.DescribedGroup(
            error_code=int(code), error_message=message, group_id=group_id, group_state="Dead",
            group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    groups = []
    for group_id in request.group_ids:
        try:
            _require_group(ctx, AclOperation.DESCRIBE, group_id)
            group = coordinator.consumer_group_describe(group_id)
        except KafkaError as exc:
            groups.append(refused(group_id, exc.code, exc.message))
            continue
        named = {topics_by_id[topic_id].name for m in group.members.values()
                 for parts in (m.assigned, group.target.get(m.member_id, {}))
                 for topic_id in parts if topic_id in topics_by_id}
        if len(authorized_topics(ctx, AclOperation.DESCRIBE, named)) < len(named):
            groups.append(refused(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, _HIDDEN_TOPICS))
            continue
        groups.append(Response.DescribedGroup(
            error_code=0, group_id=group_id, group_state=group.state.value,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=coordinator.consumer_groups.assignor_name(group.members.values()),
            authorized_operations=_group_operations(ctx, request, group_id, ErrorCode.NONE),
            members=[Response.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned),
                target_assignment=assignment(group.target.get(m.member_id, {})))
                for m in group.members.values()]))
    return Response(groups=groups)
