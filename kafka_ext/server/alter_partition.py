"""AlterPartition (56, KIP-497): a partition leader asks the active controller to change the
partition's ISR; v0-3 (topic ids from v2, broker epochs per ISR member from v3).

Only the active controller answers (NOT_CONTROLLER elsewhere: the leader retries with the
quorum's new leader). Each partition is checked against the metadata as it is now
(controller/quorum_controller.py `alter_partition`) and answered with the partition's leader,
leader epoch, ISR and partition epoch after the change. A new member that is fenced, shutting
down or (v3) fetching with another broker epoch than the registered one is INELIGIBLE_REPLICA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_ext.controller.quorum_controller import IsrChange
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker
    from kafka_ext.server.dispatcher import RequestContext

_Response = registry()["AlterPartitionResponse"].cls
TOPIC_IDS_VERSION = 2
ISR_WITH_EPOCHS_VERSION = 3


async def handle_alter_partition(ctx: RequestContext, request: Any) -> Any:
    return await answer_alter_partition(ctx.broker, request, ctx.api_version)


async def answer_alter_partition(broker: Broker, request: Any, version: int) -> Any:
    controller = broker.controller
    if not controller.raft.is_leader:
        return _Response(error_code=int(ErrorCode.NOT_CONTROLLER), topics=[])
    image = controller.image
    changes: list[IsrChange] = []
    names: dict[Any, str] = {}
    unknown: list[tuple[Any, int]] = []
    for topic in request.topics:
        if version >= TOPIC_IDS_VERSION:
            topic_id = topic.topic_id
        else:
            found = image.topics_by_name.get(topic.topic_name)
            topic_id = found.topic_id if found is not None else ZERO_UUID
        names[topic_id] = topic.topic_name
        for p in topic.partitions:
            if version >= ISR_WITH_EPOCHS_VERSION:
                isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
                epochs = tuple(b.broker_epoch for b in p.new_isr_with_epochs)
            else:
                isr, epochs = tuple(p.new_isr), ()
            if topic_id == ZERO_UUID:
                unknown.append((topic.topic_name, p.partition_index))
                continue
            changes.append(IsrChange(topic_id, p.partition_index, p.leader_epoch,
                                     p.partition_epoch, isr, epochs))
    try:
        results = await controller.alter_partition(request.broker_id, request.broker_epoch,
                                                   changes)
    except KafkaError as exc:
        return _Response(error_code=int(exc.code), topics=[])
    by_topic: dict[Any, Any] = {}
    for result in results:
        change, part = result.change, result.partition
        topic_answer = by_topic.get(change.topic_id)
        if topic_answer is None:
            topic_answer = by_topic[change.topic_id] = _Response.TopicData(
                topic_id=change.topic_id, topic_name=names.get(change.topic_id, ""),
                partitions=[])
        error = result.error
        if error == ErrorCode.UNKNOWN_TOPIC_ID and version < TOPIC_IDS_VERSION:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        answer = _Response.PartitionData(partition_index=change.partition,
                                         error_code=int(error))
        if part is not None:
            answer.leader_id = part.leader
            answer.leader_epoch = part.leader_epoch
            answer.isr = list(part.isr)
            answer.partition_epoch = part.partition_epoch
        topic_answer.partitions.append(answer)
    topics = list(by_topic.values())
    for name, partition in unknown:
        topics.append(_Response.TopicData(topic_name=name, partitions=[_Response.PartitionData(
            partition_index=partition,
            error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))]))
    return _Response(error_code=0, topics=topics)
