"""Moving replicas and leaderships between brokers: AlterPartitionReassignments (45, v0),
ListPartitionReassignments (46, v0) and ElectLeaders (43, v0-v2).

All three are answered by the active controller (other nodes forward them, as Kafka's brokers
do); the rules are in controller/partition_change.py. A reassignment is committed at once and
runs afterwards: the new replicas fetch from the leader and join the ISR, and the controller
completes it when the ISR holds every target replica (docs/replication.md, Reassignment).
As on Kafka's controller, listing needs DESCRIBE on the cluster and the two changes ALTER; a
refusal is CLUSTER_AUTHORIZATION_FAILED at the top level and on every partition named.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.partition_change import PREFERRED, UNCLEAN
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import cluster_authorized
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
ELECTION_TYPE_VERSION = 1  # ElectLeaders v0 always elects the preferred leader
TOP_LEVEL_ERROR_VERSION = 1
_DENIED = "Cluster authorization failed."


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["AlterPartitionReassignmentsResponse"].cls
    if not cluster_authorized(ctx, AclOperation.ALTER):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return Response(throttle_time_ms=0, error_code=code, error_message=_DENIED, responses=[
            Response.ReassignableTopicResponse(name=t.name, partitions=[
                Response.ReassignablePartitionResponse(partition_index=p.partition_index,
                                                       error_code=code, error_message=_DENIED)
                for p in t.partitions]) for t in request.topics])
    changes = [(t.name, p.partition_index,
                tuple(p.replicas) if p.replicas is not None else None)
               for t in request.topics for p in t.partitions]
    outcome = iter(await ctx.broker.controller.alter_partition_reassignments(changes))
    responses = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            code, message = next(outcome)
            partitions.append(Response.ReassignablePartitionResponse(
                partition_index=p.partition_index, error_code=int(code), error_message=message))
        responses.append(Response.ReassignableTopicResponse(name=t.name, partitions=partitions))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["ListPartitionReassignmentsResponse"].cls
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        return Response(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                        error_message=_DENIED, topics=[])
    wanted = ({t.name: list(t.partition_indexes) for t in request.topics}
              if request.topics is not None else None)
    ongoing = ctx.broker.controller.ongoing_reassignments(wanted)
    topics = [Response.OngoingTopicReassignment(name=name, partitions=[
        Response.OngoingPartitionReassignment(
            partition_index=p.partition_id, replicas=list(p.replicas),
            adding_replicas=list(p.adding_replicas), removing_replicas=list(p.removing_replicas))
        for p in parts]) for name, parts in sorted(ongoing.items())]
    return Response(throttle_time_ms=0, error_code=0, error_message=None, topics=topics)


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["ElectLeadersResponse"].cls
    if not cluster_authorized(ctx, AclOperation.ALTER):
        return elect_leaders_error(request, KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                       _DENIED))
    election_type = (request.election_type if ctx.api_version >= ELECTION_TYPE_VERSION
                     else PREFERRED)
    if election_type not in (PREFERRED, UNCLEAN):
        return elect_leaders_error(request, KafkaError(
            ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}"))
    wanted: dict[str, list[int]] | None = None
    if request.topic_partitions is not None:
        wanted = {}
        for t in request.topic_partitions:
            wanted.setdefault(t.topic, []).extend(t.partitions)
    outcome = await ctx.broker.controller.elect_leaders(election_type, wanted)
    return Response(throttle_time_ms=0, error_code=0, replica_election_results=[
        Response.ReplicaElectionResult(topic=name, partition_result=[
            Response.PartitionResult(partition_id=p, error_code=int(code), error_message=message)
            for p, (code, message) in sorted(results.items())])
        for name, results in sorted(outcome.items())])


def elect_leaders_error(request: Any, error: KafkaError) -> Any:
    """ElectLeaders answering every partition it names with `error` (and at the top level,
    which v0 lacks and the encoder then leaves out)."""
    Response = _reg["ElectLeadersResponse"].cls
    code, message = int(error.code), error.message or None
    return Response(throttle_time_ms=0, error_code=code, replica_election_results=[
        Response.ReplicaElectionResult(topic=t.topic, partition_result=[
            Response.PartitionResult(partition_id=p, error_code=code, error_message=message)
            for p in t.partitions]) for t in request.topic_partitions or ()])


HANDLERS = {
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
