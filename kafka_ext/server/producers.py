"""DescribeProducers (61, v0): the active producers of partitions this broker leads (KIP-664),
and of diskless partitions on any broker (their Diskless coordinator answers).

Each partition answers on its own: UNKNOWN_TOPIC_OR_PARTITION when not hosted here,
NOT_LEADER_OR_FOLLOWER when hosted as a follower, else one entry per producer id the
partition's producer state holds, with its epoch, last sequence and timestamp, the epoch of the
coordinator that wrote its last marker and the first offset of its open transaction (-1 if none).
A partition of a topic the principal may not READ answers TOPIC_AUTHORIZATION_FAILED first, as
in Kafka.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics
from kafka_ext.server.dispatcher import RequestContext

_Response = registry()["DescribeProducersResponse"].cls
_TopicResponse = _Response.TopicResponse
_PartitionResponse = _Response.PartitionResponse
_ProducerState = _Response.ProducerState


async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replica_manager
    readable = authorized_topics(ctx, AclOperation.READ, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                if topic.name not in readable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     "Topic authorization failed.")
                if ctx.broker.diskless.is_diskless(topic.name, index):
                    # Any broker answers for a diskless partition: its coordinator knows.
                    partitions.append(await ctx.broker.diskless.describe_producers(topic.name,
                                                                                   index))
                    continue
                hosted = replicas.leader_partition(topic.name, index)
            except KafkaError as exc:
                partitions.append(_PartitionResponse(
                    partition_index=index, error_code=int(exc.code),
                    error_message=exc.message or None, active_producers=[]))
                continue
            producers = hosted.log.producer_state.active_producers()
            partitions.append(_PartitionResponse(
                partition_index=index, error_code=0, error_message=None,
                active_producers=[
                    _ProducerState(
                        producer_id=entry.producer_id,
                        producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_sequence,
                        last_timestamp=entry.last_timestamp_ms,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset,
                    )
                    for entry in producers.values()
                ]))
        topics.append(_TopicResponse(name=topic.name, partitions=partitions))
    return _Response(throttle_time_ms=0, topics=topics)
