"""Produce (0): append producers' batches to partition logs; v0-v11.

Each partition answers on its own: an unknown partition, a corrupt batch or a batch above
max.message.bytes fails that partition only; a batch refused for particular records (keyless on
a compacted topic, timestamps out of range) names them in v8+ RecordErrors (KIP-467). Batches
are validated by header and CRC and appended whole (decoded only where storage/log_validator.py
says). Idempotent batches are checked against the partition's producer
state: a duplicate is answered with its original base offset and no error; sequence gaps, old
epochs and plain batches inside a transaction get Kafka's errors. Transactional batches need
the request's transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, as Kafka).
Internal topics (`__consumer_offsets`, `__transaction_state`) belong to their coordinators: a
client's batch for one fails with INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager answers.
acks=0 gets no response; if anything failed, the connection is closed instead, so the
producer notices, as Kafka does. acks=1 is answered once the batch is in the leader's log;
acks=-1 first needs an ISR of min.insync.replicas (NOT_ENOUGH_REPLICAS, nothing appended), then
waits until every ISR member has the batch (the high watermark passes it) for at most the
request's timeout (REQUEST_TIMED_OUT), and answers NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
shrank below min.insync.replicas meanwhile (docs/replication.md). A diskless partition's batch goes
to the WAL writer and is answered once its object is committed to the partition's coordinator
(acks=1 and acks=-1 alike); acks=0 diskless appends finish in the background.
A partition refused because another broker leads it carries KIP-951's CurrentLeader (v10+,
server/leader_hints.py). A producer over its producer_byte_rate quota is answered with
ThrottleTimeMs and muted (docs/quotas.md).

v0-2 (message formats v0/v1, no transactional id): a v0/v1 message set is converted to one v2
batch at this edge (protocol/legacy_records.py, as Kafka 3.x's LogValidator) and then takes the
path above; Kafka's checks of those formats answer CORRUPT_MESSAGE, INVALID_RECORD or
INVALID_TIMESTAMP for the partition, and a set without one whole message appends nothing and
answers no error, as Kafka does. A v2 batch sent at v0-2 is taken as it is, as Kafka takes it.
v2 brought the response's LogAppendTime, v1 the throttle time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from kafka_ext.controller.image import TopicImage
from kafka_ext.network.connection import CloseConnection
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.legacy_records import is_message_set, message_set_to_batch
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import (
    ATTRIBUTES_POS,
    CURRENT_MAGIC,
    MAGIC_POS,
    TRANSACTIONAL_FLAG,
    TimestampType,
)
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics, transactional_id_authorized
from kafka_ext.server.client_quota_manager import client_of, now_ms
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.server.leader_hints import add_leader_hints
from kafka_ext.server.metadata import INTERNAL_TOPICS
from kafka_ext.storage.log_validator import RecordValidationError

log = logging.getLogger(__name__)

_Response = registry()["ProduceResponse"].cls
_TRANSACTIONAL_BYTE_POS = ATTRIBUTES_POS + 1  # the low byte of the big-endian int16 attributes
_TopicResponse = _Response.TopicProduceResponse
_PartitionResponse = _Response.PartitionProduceResponse
_RecordError = _PartitionResponse.BatchIndexAndErrorMessage
MESSAGE_SETS_BELOW_VERSION = 3  # Produce v0-2 carry message formats v0/v1


def _partition_count_error(known: TopicImage | None, topic_data: Any) -> KafkaError | None:
    """KIP-253: a producer that names the topic's partition count (our tagged PartitionNumber;
    stock producers send -1) must have the count this broker's metadata has, or its keyed
    records could go to a partition the keys no longer map to. INVALID_PARTITION_COUNT is
    retriable: the producer refreshes its metadata and sends again."""
    expected = topic_data.partition_number
    if expected < 0 or known is None or len(known.partitions) == expected:
        return None
    return KafkaError(ErrorCode.INVALID_PARTITION_COUNT,
                      f"{topic_data.name} has {len(known.partitions)} partitions, not {expected}")


def _check_writable(known: TopicImage | None, partition: int) -> None:
    """Partition reduction: a partition being deleted (ReadOnly, then None) takes no writes.
    PARTITION_NOT_WRITABLE is not retriable: a stock producer fails the batch at once rather
    than retry it into the same partition (docs/partition-count.md)."""
    if known is None:
        return
    part = known.partitions.get(partition)
    if part is not None and not part.writable:
        raise KafkaError(ErrorCode.PARTITION_NOT_WRITABLE,
                         f"{known.name}-{partition} is being deleted (partition reduction): "
                         "it takes no more writes")


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    if request.acks not in (0, 1, -1):
        return _error_for_all(request, ErrorCode.INVALID_REQUIRED_ACKS)
    if request.transactional_id is None and _has_transactional_batch(request):
        # Kafka authorizes transactional writes by their transactional id: none, no write.
        return _error_for_all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    broker = ctx.broker
    writable_topics = None
    if broker.authorizer is not None:  # ACLs: WRITE on the transactional id and each topic
        if request.transactional_id is not None and not transactional_id_authorized(
                ctx, AclOperation.WRITE, request.transactional_id):
            return _error_for_all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        writable_topics = authorized_topics(ctx, AclOperation.WRITE,
                                            (t.name for t in request.topic_data))
    replicas = broker.replica_manager
    message_sets = ctx.api_version < MESSAGE_SETS_BELOW_VERSION
    topics = []
    # Diskless partitions answer once their WAL object is committed; they wait together, so
    # one request's partitions share one object. acks=all partitions wait for their ISR.
    waiting: list[tuple[Any, Awaitable[Any]]] = []
    for topic_data in request.topic_data:
        partitions = []
        known = broker.controller.image.topics_by_name.get(topic_data.name)
        count_error = _partition_count_error(known, topic_data)
        for data in topic_data.partition_data:
            answer = _PartitionResponse(index=data.index, error_code=0, base_offset=-1)
            partitions.append(answer)
            try:
                if writable_topics is not None and topic_data.name not in writable_topics:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if count_error is not None:
                    raise count_error
                _check_writable(known, data.index)
                if topic_data.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot append to internal topic {topic_data.name}")
                if message_sets and data.records is not None and is_message_set(data.records):
                    data.records = _to_batch(broker, topic_data.name, data.records)
                    if data.records is None:
                        continue  # not one whole message: nothing appended, no error (Kafka)
                if broker.diskless.is_diskless(topic_data.name, data.index):
                    records = data.records
                    if request.acks == 0 and isinstance(records, memoryview):
                        records = bytes(records)  # the frame's buffer is reused once we answer
                    waiting.append((answer, broker.diskless.produce(
                        topic_data.name, data.index, records)))
                    continue
                if request.acks == -1:
                    replicas.check_min_insync(topic_data.name, data.index)
                info = replicas.append_records(topic_data.name, data.index, data.records)
            except KafkaError as exc:
                _failed(answer, exc)
                continue
            _succeeded(answer, info.first_offset, info.log_append_time_ms, info.log_start_offset)
            if request.acks == -1:
                try:
                    pending = replicas.wait_for_acks(topic_data.name, data.index,
                                                     info.last_offset + 1,
                                                     request.timeout_ms / 1000)
                except KafkaError as exc:
                    _failed(answer, exc)
                    continue
                if pending is not None:
                    waiting.append((answer, pending))
        topics.append(_TopicResponse(name=topic_data.name, partition_responses=partitions))
    if waiting and request.acks == 0:
        # Nobody waits for the answer: the appends finish in the background, failures logged.
        for _, append in waiting:
            broker.spawn(_logged_append(append))
        waiting = []
    if waiting:
        outcomes = await asyncio.gather(*(append for _, append in waiting),
                                        return_exceptions=True)
        for (answer, _), outcome in zip(waiting, outcomes, strict=True):
            if isinstance(outcome, KafkaError):
                _failed(answer, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            elif outcome is not None:  # a diskless commit; acks=all waits return nothing
                _succeeded(answer, outcome.base_offset, outcome.log_append_time_ms,
                           outcome.log_start_offset)
    broker.topic_stats.record_produce(request, topics)  # MessagesIn, BytesIn (metrics.py)
    if broker.quotas.produce.enabled:  # KIP-13: the request's bytes count against the quota
        user, client_id = client_of(ctx)
        ctx.throttle_time_ms = broker.quotas.produce.record_and_get_throttle_time_ms(
            user, client_id, ctx.size_bytes, now_ms())
    if request.acks == 0:
        if any(p.error_code for t in topics for p in t.partition_responses):
            raise CloseConnection("acks=0 produce failed")
        return None
    endpoints = add_leader_hints(ctx, ((t.name, p) for t in topics
                                          for p in t.partition_responses), _Response.NodeEndpoint)
    return _Response(responses=topics, node_endpoints=endpoints)


def _to_batch(broker: Any, topic: str, message_set: Any) -> bytes | None:
    """A Produce v0-2 message set as one v2 batch, checked against the topic's timestamp type."""
    log_append_time = (broker.log_config_for(topic).message_timestamp_type
                       == TimestampType.LOG_APPEND_TIME)
    return message_set_to_batch(message_set, log_append_time=log_append_time)


def _succeeded(answer: Any, base_offset: int, log_append_time_ms: int,
               log_start_offset: int) -> None:
    answer.base_offset = base_offset
    answer.log_append_time_ms = log_append_time_ms
    answer.log_start_offset = log_start_offset


def _failed(answer: Any, exc: KafkaError) -> None:
    answer.error_code = int(exc.code)
    answer.error_message = exc.message or None
    if isinstance(exc, RecordValidationError):  # KIP-467: v8+ names the records at fault
        answer.record_errors = [_RecordError(batch_index=e.batch_index,
                                             batch_index_error_message=e.message)
                                for e in exc.record_errors]


async def _logged_append(append: Awaitable[Any]) -> None:
    """An acks=0 diskless append: the producer asked for no answer, so a failure is logged."""
    try:
        await append
    except KafkaError as exc:
        log.warning("acks=0 diskless produce failed: %s", exc)


def _has_transactional_batch(request: Any) -> bool:
    """Whether any partition's first batch has the transactional attribute (a header byte of
    a v2 batch; v0/v1 messages have no such flag)."""
    return any(
        data.records is not None and len(data.records) > _TRANSACTIONAL_BYTE_POS
        and data.records[MAGIC_POS] == CURRENT_MAGIC
        and data.records[_TRANSACTIONAL_BYTE_POS] & TRANSACTIONAL_FLAG
        for topic_data in request.topic_data for data in topic_data.partition_data)


def _error_for_all(request: Any, code: ErrorCode) -> Any:
    """Every partition fails with `code`. An acks=0 producer reads no answer, so its connection
    is closed instead (Kafka: ProduceRequest.getErrorResponse is null for acks=0; found by the
    wire fuzzer, which saw a transactional batch without a transactional id answered)."""
    if request.acks == 0:
        raise CloseConnection(f"acks=0 produce failed: {code.name}")
    return _Response(responses=[
        _TopicResponse(name=t.name, partition_responses=[
            _PartitionResponse(index=p.index, error_code=int(code), base_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])
