"""Produce (0): append producers' batches to partition logs; v3-v11 (v0-2 advertised, refused).

Each partition answers on its own: an unknown partition, a corrupt batch or a batch above
max.message.bytes fails that partition only. Batches are validated by header and CRC and
appended whole (never decoded). Idempotent batches are checked against the partition's producer
state: a duplicate is answered with its original base offset and no error; sequence gaps, old
epochs and plain batches inside a transaction get Kafka's errors. Transactional batches need
the request's transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, as Kafka).
Internal topics (`__consumer_offsets`, `__transaction_state`) belong to their coordinators: a
client's batch for one fails with INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager answers.
acks=0 gets no response; if anything failed, the connection is closed instead, so the
producer notices, as Kafka does. With one replica per partition, acks=1
and acks=-1 are both satisfied once the batch is in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka_ext.network.connection import CloseConnection
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import ATTRIBUTES_POS, TRANSACTIONAL_FLAG
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.server.metadata import INTERNAL_TOPICS

log = logging.getLogger(__name__)

_Response = registry()["ProduceResponse"].cls
_TRANSACTIONAL_BYTE_POS = ATTRIBUTES_POS + 1  # the low byte of the big-endian int16 attributes
_TopicResponse = _Response.TopicProduceResponse
_PartitionResponse = _Response.PartitionProduceResponse


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    if request.acks not in (0, 1, -1):
        return _error_for_all(request, ErrorCode.INVALID_REQUIRED_ACKS)
    if request.transactional_id is None and _has_transactional_batch(request):
        # Kafka authorizes transactional writes by their transactional id: none, no write.
        return _error_for_all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    replicas = ctx.broker.replica_manager
    failed = False
    topics = []
    for topic_data in request.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            try:
                if topic_data.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot append to internal topic {topic_data.name}")
                info = replicas.append_records(topic_data.name, data.index, data.records)
            except KafkaError as exc:
                failed = True
                partitions.append(_PartitionResponse(
                    index=data.index, error_code=int(exc.code), base_offset=-1,
                    error_message=exc.message or None))
                continue
            partitions.append(_PartitionResponse(
                index=data.index, error_code=0, base_offset=info.first_offset,
                log_append_time_ms=info.log_append_time_ms, log_start_offset=info.log_start_offset))
        topics.append(_TopicResponse(name=topic_data.name, partition_responses=partitions))
    if request.acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return None
    return _Response(responses=topics)


def _has_transactional_batch(request: Any) -> bool:
    """Whether any partition's first batch has the transactional attribute (a header byte)."""
    return any(
        data.records is not None and len(data.records) > _TRANSACTIONAL_BYTE_POS
        and data.records[_TRANSACTIONAL_BYTE_POS] & TRANSACTIONAL_FLAG
        for topic_data in request.topic_data for data in topic_data.partition_data)


def _error_for_all(request: Any, code: ErrorCode) -> Any:
    return _Response(responses=[
        _TopicResponse(name=t.name, partition_responses=[
            _PartitionResponse(index=p.index, error_code=int(code), base_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])
