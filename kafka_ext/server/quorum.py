"""DescribeQuorum (55): the `__cluster_metadata` quorum for kafka-metadata-quorum.sh (KIP-595,
v2 adds directory ids and voter endpoints, KIP-853).

Versions 0-2, as Kafka 3.9 and 4.x serve them, on broker and controller listeners alike (a
Kafka broker forwards it to the active controller; here they are one process). The answer is
read from the controller's QuorumStatusSource, so it is the same whoever feeds it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.controller.quorum_status import QuorumStatus, ReplicaStatus
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.raft.wire import is_metadata_fetch
from kafka_ext.security.acl import AclOperation
from kafka_ext.server import fetch
from kafka_ext.server.authorization import cluster_authorized

if TYPE_CHECKING:
    from kafka_ext.server.dispatcher import RequestContext

_reg = registry()


async def handle_raft_request(ctx: RequestContext, request: Any) -> Any:
    """Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot: answered by the Raft core."""
    return await ctx.broker.controller.raft.handle_request(ctx.header.request_api_key,
                                                           ctx.api_version, request)


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    """A replica's fetch of `__cluster_metadata` goes to the Raft core; any other to the
    partitions (server/fetch.py)."""
    if is_metadata_fetch(request, ctx.api_version):
        if not cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):  # a node's fetch only
            return _reg.responses[ApiKey.FETCH].cls(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, session_id=0, responses=[])
        return await ctx.broker.controller.raft.handle_request(ApiKey.FETCH, ctx.api_version,
                                                               request)
    return await fetch.handle_fetch(ctx, request)


async def handle_describe_quorum(ctx: RequestContext, request: Any) -> Any:
    """The quorum of `__cluster_metadata-0`; any other partition is UNKNOWN_TOPIC_OR_PARTITION
    on each partition asked for, as KafkaRaftClient answers."""
    Response = _reg["DescribeQuorumResponse"].cls
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[], nodes=[])
    asked = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        return Response(error_code=0, topics=[Response.TopicData(
            topic_name=t.topic_name,
            partitions=[Response.PartitionData(
                partition_index=p.partition_index,
                error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                error_message="only __cluster_metadata-0 has a quorum")
                for p in t.partitions]) for t in request.topics])
    status = ctx.broker.controller.quorum.status(int(time.time() * 1000))
    return describe_quorum_response(status)


def describe_quorum_response(status: QuorumStatus) -> Any:
    """The DescribeQuorum answer for a quorum status (the leader's view)."""
    Response = _reg["DescribeQuorumResponse"].cls

    def replica(r: ReplicaStatus) -> Any:
        return Response.ReplicaState(
            replica_id=r.replica_id, replica_directory_id=r.directory_id,
            log_end_offset=r.log_end_offset, last_fetch_timestamp=r.last_fetch_timestamp_ms,
            last_caught_up_timestamp=r.last_caught_up_timestamp_ms)

    nodes: dict[int, list[Any]] = {}
    for endpoint in status.endpoints:
        nodes.setdefault(endpoint.node_id, []).append(Response.Node.Listener(
            name=endpoint.listener_name, host=endpoint.host, port=endpoint.port))
    partition = Response.PartitionData(
        partition_index=0, error_code=0, leader_id=status.leader_id,
        leader_epoch=status.leader_epoch, high_watermark=status.high_watermark,
        current_voters=[replica(r) for r in status.voters],
        observers=[replica(r) for r in status.observers])
    return Response(error_code=0, topics=[Response.TopicData(topic_name=METADATA_TOPIC,
                                                             partitions=[partition])],
                    nodes=[Response.Node(node_id=node_id, listeners=listeners)
                           for node_id, listeners in sorted(nodes.items())])
