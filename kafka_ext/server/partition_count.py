"""The proposals that change a topic's partition count: LeaderEpochsForPartition (our key 1001,
KIP-253, seed 001) and DeletePartitions (our key 1000, partition reduction, seed 002).

LeaderEpochsForPartition is answered by any broker from its metadata image: for each partition
asked about, the leader epochs the topic's older partitions had when it was added (PartitionRecord
`PriorLeaderEpochs`), which a consumer turns into offsets with OffsetForLeaderEpoch before it
reads the new partition (docs/partition-count.md).
"""

from __future__ import annotations

from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()


async def handle_leader_epochs_for_partition(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["LeaderEpochsForPartitionResponse"].cls
    image = ctx.broker.controller.image
    topics = []
    for t in request.topics:
        known = image.topics_by_name.get(t.topic)
        partitions = []
        for index in t.partitions:
            part = known.partitions.get(index) if known is not None else None
            if part is None:
                partitions.append(Response.LeaderEpochsForPartitionResponsePartition(
                    partition=index, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    prior_leader_epochs=[]))
                continue
            partitions.append(Response.LeaderEpochsForPartitionResponsePartition(
                partition=index, error_code=0, prior_leader_epochs=[
                    Response.LeaderEpochsForPartitionPriorEpoch(partition=p, leader_epoch=e)
                    for p, e in part.prior_leader_epochs]))
        topics.append(Response.LeaderEpochsForPartitionResponseTopic(topic=t.topic,
                                                                      partitions=partitions))
    return Response(throttle_time_ms=0, topics=topics)


HANDLERS = {
    ApiKey.LEADER_EPOCHS_FOR_PARTITION: handle_leader_epochs_for_partition,
}
