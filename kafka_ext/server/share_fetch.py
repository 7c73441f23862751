"""ShareFetch (78) and ShareAcknowledge (79): share consumers reading a partition's leader.

v1-v2 (v0 was Kafka 4.0's early access, gone since 4.1). A request names a share session
(`share/share_session.py`): epoch 0 opens one for the member and lists its partitions, later
epochs add partitions (Topics) and remove them (ForgottenTopicsData), -1 closes it after its
acknowledgements. Acknowledgements, piggy-backed on ShareFetch or alone in ShareAcknowledge,
are persisted before they are answered (AcknowledgeErrorCode / ErrorCode per partition). A
ShareFetch then reads every partition of the session in turn within MaxBytes and MaxRecords,
waiting up to MaxWaitMs for records to acquire, and answers with whole batches and the
acquired ranges beside them (`share/share_partition_manager.py`). v2 adds RENEW
acknowledgements (KIP-1222), which only extend the locks; ShareAcquireMode 1 (KIP-1206,
record-limit mode) is answered in batch mode, which MaxRecords allows ("can be exceeded for
alignment of batch boundaries"). A full answer (epoch 0) lists every session partition; an
incremental one those with records, an error, or an acknowledgement result.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics, group_authorized
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.server.leader_hints import add_leader_hints
from kafka_ext.share.group_config import share_group_configs
from kafka_ext.share.share_partition import AcknowledgeType, AcquiredRange
from kafka_ext.share.share_session import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from kafka_ext.share.share_source import share_owner

# MaxRecords when a client leaves it 0 (Kafka's share.max.poll.records default).
_DEFAULT_MAX_RECORDS = 500
# KafkaConnection.state key: the connection's lost callback for share sessions is registered.
_SHARE_SESSIONS_WATCHED = "share_sessions_watched"

# Errors of loading a share-partition's state that mean "not ready yet, retry".
_NOT_READY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT}


@dataclass(slots=True)
class _PartitionAnswer:
    """What one session partition gets in the answer."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    ack_error: ErrorCode = ErrorCode.NONE
    ack_message: str | None = None
    acknowledged: bool = False
    records: list[Any] = field(default_factory=list)
    acquired: list[AcquiredRange] = field(default_factory=list)

    @property
    def worth_answering(self) -> bool:
        return bool(self.records or self.error or self.acknowledged)


async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    Response = registry().responses[ApiKey.SHARE_FETCH].cls
    broker = ctx.broker
    try:
        session, full = _session_for(ctx, request, has_acks=any(
            p.acknowledgement_batches for t in request.topics for p in t.partitions))
    except KafkaError as exc:
        return Response(error_code=int(exc.code), error_message=exc.message, responses=[])
    config = share_group_configs(broker, session.group_id)
    answers = _session_answers(ctx, session, request.topics, request.forgotten_topics_data)
    renew = ctx.api_version >= 2 and request.is_renew_ack
    await _acknowledge_all(ctx, session, answers, request.topics, renew)
    if request.share_session_epoch == FINAL_EPOCH:
        _close(ctx, session)
    elif not renew:  # a renewing request fetches nothing (KIP-1222)
        await _fetch(ctx, session, answers, request)
    _record_stats(ctx, answers.values(), fetched=request.share_session_epoch != FINAL_EPOCH)
    listed = list(answers.values()) if full else [a for a in answers.values()
                                                   if a.worth_answering]
    return _fetch_response(ctx, Response, listed, config.record_lock_duration_ms)


async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    Response = registry().responses[ApiKey.SHARE_ACKNOWLEDGE].cls
    if request.share_session_epoch == INITIAL_EPOCH:
        return Response(error_code=int(ErrorCode.INVALID_SHARE_SESSION_EPOCH),
                        error_message="ShareAcknowledge cannot open a share session",
                        responses=[])
    try:
        session, _ = _session_for(ctx, request, has_acks=True)
    except KafkaError as exc:
        return Response(error_code=int(exc.code), error_message=exc.message, responses=[])
    config = share_group_configs(ctx.broker, session.group_id)
    answers = _session_answers(ctx, session, request.topics, add_to_session=False)
    renew = ctx.api_version >= 2 and request.is_renew_ack
    await _acknowledge_all(ctx, session, answers, request.topics, renew)
    if request.share_session_epoch == FINAL_EPOCH:
        _close(ctx, session)
    _record_stats(ctx, answers.values(), fetched=False)
    topics: dict[uuid.UUID, Any] = {}
    hinted: list[tuple[str, Any]] = []
    for answer in answers.values():
        if not answer.acknowledged:
            continue
        topic = topics.get(answer.topic_id)
        if topic is None:
            topic = topics[answer.topic_id] = Response.ShareAcknowledgeTopicResponse(
                topic_id=answer.topic_id, partitions=[])
        data = Response.PartitionData(partition_index=answer.partition,
                                      error_code=int(answer.ack_error),
                                      error_message=answer.ack_message)
        topic.partitions.append(data)
        hinted.append((answer.topic, data))
    endpoints = add_leader_hints(ctx, hinted, Response.NodeEndpoint, share_owner)
    return Response(error_code=0, acquisition_lock_timeout_ms=config.record_lock_duration_ms,
                    responses=list(topics.values()), node_endpoints=endpoints)


def _record_stats(ctx: RequestContext, answers: Iterable[_PartitionAnswer], fetched: bool
                  ) -> None:
    """BrokerTopicMetrics' share counters (KIP-1103), per share-partition of the request."""
    stats = ctx.broker.topic_stats
    for answer in answers:
        if answer.topic:
            stats.record_share(answer.topic, fetched, fetched and bool(answer.error),
                               answer.acknowledged, answer.acknowledged and bool(answer.ack_error))


# -- sessions ----------------------------------------------------------------------------

def _session_for(ctx: RequestContext, request: Any, has_acks: bool
                 ) -> tuple[ShareSession, bool]:
    """The request's share session, and whether the answer is a full one (epoch 0)."""
    group_id, member_id = request.group_id, request.member_id
    if not group_id or not member_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required")
    if ctx.broker.authorizer is not None and not group_authorized(ctx, AclOperation.READ,
                                                                  group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                         f"{ctx.principal} may not read share group {group_id}")
    manager = ctx.broker.share_partitions
    now = asyncio.get_running_loop().time()
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        if has_acks:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "a share session's first request (epoch 0) cannot acknowledge")
        session, replaced = manager.sessions.open(group_id, member_id, ctx.connection, now)
        if replaced is not None:
            manager.release(replaced)
        conn = ctx.connection
        if not conn.state.get(_SHARE_SESSIONS_WATCHED):
            conn.state[_SHARE_SESSIONS_WATCHED] = True
            conn.lost_callbacks.append(manager.connection_lost)
        return session, True
    session = manager.sessions.get(group_id, member_id, epoch, now)
    if epoch != FINAL_EPOCH:
        session.advance()
    return session, False


def _close(ctx: RequestContext, session: ShareSession) -> None:
    manager = ctx.broker.share_partitions
    if manager.sessions.close(session):
        manager.release(session)


def _session_answers(ctx: RequestContext, session: ShareSession, topics: list[Any],
                     forgotten: Sequence[Any] = (), add_to_session: bool = True
                     ) -> dict[tuple[uuid.UUID, int], _PartitionAnswer]:
    """Drop the session's forgotten partitions, add the request's (unless `add_to_session` is
    False: a ShareAcknowledge only acknowledges), and start an answer for each partition of
    the session and of the request."""
    for topic in forgotten:
        for partition in topic.partitions:
            session.partitions.pop((topic.topic_id, partition), None)
    image = ctx.broker.controller.image
    answers: dict[tuple[uuid.UUID, int], _PartitionAnswer] = {}
    for topic in topics:
        known = image.topics_by_id.get(topic.topic_id)
        for p in topic.partitions:
            key = (topic.topic_id, p.partition_index)
            if known is None:
                answers[key] = _PartitionAnswer("", topic.topic_id, p.partition_index,
                                                ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            if p.partition_index not in known.partitions:
                answers[key] = _PartitionAnswer(known.name, topic.topic_id, p.partition_index,
                                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if add_to_session:
                session.partitions[key] = known.name
            answers[key] = _PartitionAnswer(known.name, topic.topic_id, p.partition_index)
    for key, name in list(session.partitions.items()):
        if key not in answers:
            answers[key] = _PartitionAnswer(name, key[0], key[1])
    denied = _denied_topics(ctx, {a.topic for a in answers.values() if a.topic})
    for answer in answers.values():
        if answer.topic in denied:
            answer.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return answers


def _denied_topics(ctx: RequestContext, topics: set[str]) -> set[str]:
    if ctx.broker.authorizer is None or not topics:
        return set()
    return topics - set(authorized_topics(ctx, AclOperation.READ, topics))


# -- acknowledgements --------------------------------------------------------------------

async def _acknowledge_all(ctx: RequestContext, session: ShareSession,
                           answers: dict[tuple[uuid.UUID, int], _PartitionAnswer],
                           topics: list[Any], renew: bool) -> None:
    work = []
    for topic in topics:
        for p in topic.partitions:
            answer = answers.get((topic.topic_id, p.partition_index))
            if answer is None or not p.acknowledgement_batches:
                continue
            answer.acknowledged = True
            if answer.error:
                answer.ack_error = answer.error
                continue
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            if not renew and any(t == AcknowledgeType.RENEW for _, _, ts in batches for t in ts):
                answer.ack_error = ErrorCode.INVALID_REQUEST
                answer.ack_message = "RENEW acknowledgements need IsRenewAck (v2)"
                continue
            work.append(_acknowledge(ctx, session, answer, batches))
    if work:
        await asyncio.gather(*work)


async def _acknowledge(ctx: RequestContext, session: ShareSession, answer: _PartitionAnswer,
                       batches: list[tuple[int, int, list[int]]]) -> None:
    manager = ctx.broker.share_partitions
    try:
        loaded = await manager.share_partition(session.group_id, answer.topic, answer.topic_id,
                                               answer.partition)
        await manager.acknowledge(loaded, session.member_id, batches)
    except KafkaError as exc:
        answer.ack_error = _client_error(exc.code)
        answer.ack_message = exc.message


def _client_error(code: ErrorCode) -> ErrorCode:
    return ErrorCode.LEADER_NOT_AVAILABLE if code in _NOT_READY else code


# -- fetching ----------------------------------------------------------------------------

async def _fetch(ctx: RequestContext, session: ShareSession,
                 answers: dict[tuple[uuid.UUID, int], _PartitionAnswer], request: Any) -> None:
    broker = ctx.broker
    manager = broker.share_partitions
    max_records = request.max_records if request.max_records > 0 else _DEFAULT_MAX_RECORDS
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    fetching = [a for a in answers.values() if not a.error and a.topic
                and (a.topic_id, a.partition) in session.partitions]
    while True:
        total_bytes = acquired = 0
        for answer in fetching:
            if answer.error:
                continue
            key = (answer.topic_id, answer.partition)
            loading = manager.share_partition(session.group_id, answer.topic,
                                              answer.topic_id, answer.partition)
            try:
                if acquired and key not in session.fetched:
                    # As Kafka skips a share-partition still initializing once others have
                    # records: answer with those, and let this one load meanwhile.
                    ready = await _ready_now(loading)
                    if ready is None:
                        continue
                    loaded = ready
                else:
                    loaded = await loading
                session.fetched.add(key)
                got = await manager.read(loaded, session.member_id,
                                         max(request.max_bytes - total_bytes, 0),
                                         max_records - acquired,
                                         min_one_batch=total_bytes == 0)
            except KafkaError as exc:
                answer.error, answer.message = _client_error(exc.code), exc.message
                continue
            answer.records.extend(got.records)
            answer.acquired.extend(got.acquired)
            total_bytes += got.nbytes
            acquired += sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
        remaining = deadline - loop.time()
        if acquired or remaining <= 0 or any(a.error for a in fetching) \
                or not fetching:
            return
        await broker.replica_manager.wait_for_data(
            [(a.topic, a.partition) for a in fetching], remaining)


async def _ready_now(loading: Awaitable[Any]) -> Any | None:
    """What `loading` gives if it is done within one turn of the loop, else None (it goes on
    in the background; its outcome is the next fetch's)."""
    task = asyncio.ensure_future(loading)
    await asyncio.wait({task}, timeout=0)
    if task.done():
        return task.result()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return None


def _fetch_response(ctx: RequestContext, Response: Any, answers: list[_PartitionAnswer],
                    lock_duration_ms: int) -> Any:
    topics: dict[uuid.UUID, Any] = {}
    hinted: list[tuple[str, Any]] = []
    for answer in answers:
        topic = topics.get(answer.topic_id)
        if topic is None:
            topic = topics[answer.topic_id] = Response.ShareFetchableTopicResponse(
                topic_id=answer.topic_id, partitions=[])
        data = Response.ShareFetchableTopicResponse.PartitionData(
            partition_index=answer.partition, error_code=int(answer.error),
            error_message=answer.message, acknowledge_error_code=int(answer.ack_error),
            acknowledge_error_message=answer.ack_message, records=answer.records,
            acquired_records=[Response.ShareFetchableTopicResponse.PartitionData.AcquiredRecords(
                first_offset=r.first_offset, last_offset=r.last_offset,
                delivery_count=r.delivery_count) for r in answer.acquired])
        topic.partitions.append(data)
        hinted.append((answer.topic, data))
    endpoints = add_leader_hints(ctx, hinted, Response.NodeEndpoint, share_owner)
    return Response(error_code=0, acquisition_lock_timeout_ms=lock_duration_ms,
                    responses=list(topics.values()), node_endpoints=endpoints)


HANDLERS = {
    ApiKey.SHARE_FETCH: handle_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: handle_share_acknowledge,
}
