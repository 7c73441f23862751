"""The proposals that change a topic's partition count: LeaderEpochsForPartition (our key 1001,
KIP-253, seed 001) and DeletePartitions (our key 1000, partition reduction, seed 002).

LeaderEpochsForPartition is answered by any broker from its metadata image: for each partition
asked about, the leader epochs the topic's older partitions had when it was added (PartitionRecord
`PriorLeaderEpochs`), which a consumer turns into offsets with OffsetForLeaderEpoch before it
reads the new partition (docs/partition-count.md). It needs DESCRIBE on the topic, as Metadata
does; DeletePartitions needs ALTER on it, as CreatePartitions does (else
TOPIC_AUTHORIZATION_FAILED for each partition).

DeletePartitions is answered by the active controller (other nodes forward it), with
`delete.topic.partition.enable` on; each partition is answered with its mode after the call
(ReadOnly while its delay runs, None when it is deleted at once) or with why it was refused.
"""

from __future__ import annotations

import time
from typing import Any

from kafka_ext.controller.image import MODE_NONE
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()


async def handle_leader_epochs_for_partition(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["LeaderEpochsForPartitionResponse"].cls
    image = ctx.broker.controller.image
    describable = authorized_topics(ctx, AclOperation.DESCRIBE, (t.topic for t in request.topics))
    topics = []
    for t in request.topics:
        known = image.topics_by_name.get(t.topic)
        partitions = []
        for index in t.partitions:
            part = known.partitions.get(index) if known is not None else None
            if t.topic not in describable or part is None:
                code = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t.topic in describable
                        else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partitions.append(Response.LeaderEpochsForPartitionResponsePartition(
                    partition=index, error_code=int(code), prior_leader_epochs=[]))
                continue
            partitions.append(Response.LeaderEpochsForPartitionResponsePartition(
                partition=index, error_code=0, prior_leader_epochs=[
                    Response.LeaderEpochsForPartitionPriorEpoch(partition=p, leader_epoch=e)
                    for p, e in part.prior_leader_epochs]))
        topics.append(Response.LeaderEpochsForPartitionResponseTopic(topic=t.topic,
                                                                      partitions=partitions))
    return Response(throttle_time_ms=0, topics=topics)


async def handle_delete_partitions(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DeletePartitionsResponse"].cls
    broker = ctx.broker
    enabled = broker.config.delete_topic_partition_enable
    alterable = authorized_topics(ctx, AclOperation.ALTER, (t.name for t in request.topics))
    responses = []
    for t in request.topics:
        error, message, new_mode = ErrorCode.NONE, None, None
        try:
            if t.name not in alterable:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                 "Topic authorization failed.")
            if not enabled:
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED,
                                 "partition deletion is disabled: set "
                                 "delete.topic.partition.enable=true")
            new_mode = await broker.controller.delete_partitions(
                t.name, list(t.partitions), request.delete_partitions_delay_ms,
                int(time.time() * 1000))
        except KafkaError as exc:
            error, message = exc.code, exc.message or None
        # A topic the principal may not alter keeps its partitions' modes to itself.
        known = (broker.controller.image.topics_by_name.get(t.name) if t.name in alterable
                 else None)
        partitions = []
        for index in t.partitions:
            part = known.partitions.get(index) if known is not None else None
            # Refused: the mode the partition keeps (None for one that does not exist).
            status = new_mode if new_mode is not None else (
                part.mode if part is not None else MODE_NONE)
            partitions.append(Response.DeletePartitionsPartitionResult(
                partition_index=index, status_code=status, error_code=int(error),
                error_message=message))
        responses.append(Response.DeletePartitionsTopicResult(name=t.name, partitions=partitions))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


def delete_partitions_error(request: Any, error: KafkaError) -> Any:
    """DeletePartitions answered with `error` at the top level (no controller in time)."""
    return _reg["DeletePartitionsResponse"].cls(
        throttle_time_ms=0, error_code=int(error.code), error_message=error.message or None,
        responses=[])


HANDLERS = {
    ApiKey.LEADER_EPOCHS_FOR_PARTITION: handle_leader_epochs_for_partition,
    ApiKey.DELETE_PARTITIONS: handle_delete_partitions,
}
