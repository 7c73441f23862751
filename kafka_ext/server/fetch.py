"""Fetch (1): consumers read batches as memoryviews of segment maps; v0-v17.

Behaviour as Kafka's: long poll until `min_bytes` are available or `max_wait_ms` passes;
`max_bytes` caps the response and `partition_max_bytes` each partition, except that the first
non-empty partition may return one whole batch beyond them so a large batch never blocks a
consumer; reading from an offset inside a batch returns the whole batch. Topic IDs replace names
from v13. Sessions (v7+) are in fetch_session.py. Diskless partitions are read from their WAL
objects (DisklessService.fetch) in the same response. Nothing here copies or decodes record
bytes. A partition led elsewhere carries KIP-951's CurrentLeader (v16+, server/leader_hints.py).
A consumer over its consumer_byte_rate quota gets an empty answer with ThrottleTimeMs
(docs/quotas.md).

v0-3 (message formats v0/v1, read uncommitted up to the high watermark) are the exception: the
batches read are down-converted to magic 0 (v0-1) or magic 1 (v2-3) messages, as Kafka 3.9
does (protocol/legacy_records.py), after the read and only for those versions; the limits and
`min_bytes` then count converted bytes, never a partial message goes out, and reading goes on
past batches that convert to nothing (transaction markers) so an old consumer is never stuck on
them, nor answered at once with nothing while a marker ends the log. A topic
with compression.type=zstd answers UNSUPPORTED_COMPRESSION_TYPE below v10 as in Kafka (checked
here for v0-3 only), and KAFKA_STORAGE_ERROR becomes NOT_LEADER_OR_FOLLOWER for them.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.legacy_records import MAGIC_V0, MAGIC_V1, down_convert
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics, cluster_authorized
from kafka_ext.server.client_quota_manager import client_of, now_ms
from kafka_ext.server.config import RACK_AWARE_SELECTOR
from kafka_ext.server.dispatcher import CLIENT_RACK, RequestContext
from kafka_ext.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    SESSIONLESS_ID,
    CachedPartition,
    FetchSession,
)
from kafka_ext.server.leader_hints import add_leader_hints

_Response = registry()["FetchResponse"].cls
_Request = registry()["FetchRequest"].cls
_TopicResponse = _Response.FetchableTopicResponse
_PartitionData = _Response.PartitionData
_AbortedTransaction = _Response.AbortedTransaction
TOPIC_IDS_VERSION = 13
FETCH_FROM_FOLLOWER_VERSION = 11  # KIP-392: RackId, PreferredReadReplica
REPLICA_STATE_VERSION = 15  # the follower's id moved into ReplicaState (KIP-903)
RELAY_FETCH_VERSION = 16  # a broker relaying a consumer's read of an inactive chunk
RELAY_TIMEOUT_S = 10.0
MESSAGE_FORMAT_V1_BELOW_VERSION = 4  # Fetch v2-3 read magic 1 messages
MESSAGE_FORMAT_V0_BELOW_VERSION = 2  # Fetch v0-1 read magic 0 messages


@dataclass(slots=True)
class _Target:
    topic: str
    topic_id: uuid.UUID
    partition: int
    cached: CachedPartition
    current_leader_epoch: int = -1
    unknown_topic_id: bool = False
    denied: bool = False  # the principal may not READ the topic

    @property
    def unreadable(self) -> bool:
        return self.unknown_topic_id or self.denied


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    uses_ids = ctx.api_version >= TOPIC_IDS_VERSION
    replica_id = (request.replica_state.replica_id if ctx.api_version >= REPLICA_STATE_VERSION
                  else request.replica_id)
    if replica_id >= 0:
        return await _handle_replica_fetch(ctx, request, replica_id, uses_ids)
    if ctx.api_version >= FETCH_FROM_FOLLOWER_VERSION and request.rack_id:
        # Metadata on this connection lists diskless gateways in this rack first.
        ctx.connection.state[CLIENT_RACK] = request.rack_id
    try:
        session, targets, incremental = _resolve(ctx, request, uses_ids)
    except KafkaError as exc:
        return _Response(error_code=int(exc.code), session_id=0, responses=[])
    if broker.authorizer is not None:  # ACLs: READ on each topic
        readable = authorized_topics(ctx, AclOperation.READ,
                                     (t.topic for t in targets if not t.unknown_topic_id))
        for target in targets:
            target.denied = not target.unknown_topic_id and target.topic not in readable
    fetch_quota = broker.quotas.fetch
    if fetch_quota.enabled:
        # Kafka caps a consumer's fetch at what its quota allows in one full window, so one
        # response is never certain to be throttled (KAFKA-9677).
        cap = fetch_quota.max_value_in_window(*client_of(ctx))
        if cap is not None:
            request.max_bytes = max(1, min(request.max_bytes, int(cap)))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    diskless = {i for i, t in enumerate(targets)
                if not t.unreadable and broker.diskless.is_diskless(t.topic, t.partition)}
    magic = _down_conversion_magic(ctx.api_version)
    while True:
        relayed: dict[int, Any] = {}
        results, total_bytes, has_error = _read_all(broker, request, targets, diskless,
                                                    ctx.api_version, _redirects_of(ctx),
                                                    relayed)
        if relayed:
            total_bytes += await _relay_chunk_reads(broker, request, targets, results, relayed)
        if diskless:
            more_bytes, more_error = await _read_diskless(broker, request, targets, results,
                                                          diskless, total_bytes)
            total_bytes += more_bytes
            has_error = has_error or more_error
        if magic is not None:
            total_bytes, has_error = _down_convert_all(broker, request, targets, results,
                                                       diskless, magic)
        remaining = deadline - loop.time()
        if total_bytes >= request.min_bytes or has_error or remaining <= 0:
            break
        await broker.replica_manager.wait_for_data(
            [(t.topic, t.partition) for t in targets if not t.unreadable], remaining)
    if fetch_quota.enabled and _throttled(ctx, total_bytes):
        # KIP-219: an over-quota consumer gets an empty answer carrying the throttle time; a
        # session this full fetch would have opened is not kept (Kafka opens it on answering).
        if session is not None and not incremental:
            broker.fetch_sessions.remove(session.session_id)
        return _Response(error_code=0, session_id=session.session_id if incremental and session else 0,
                         responses=[])
    broker.topic_stats.record_fetch(targets, results)  # BytesOut (server/metrics.py)
    responses: dict[tuple[str, uuid.UUID], Any] = {}
    for target, data in zip(targets, results, strict=True):
        if session is not None and _has_records(data.records):
            # KIP-227 fairness: partitions that got data go last, so that when max_bytes binds
            # the others are read first next time.
            session.partitions.move_to_end((target.topic, target.partition))
        changed = target.cached.note_answer(data.high_watermark, data.last_stable_offset,
                                            data.log_start_offset)
        if incremental and not (changed or data.error_code or _has_records(data.records)):
            continue
        key = (target.topic, target.topic_id)
        topic = responses.get(key)
        if topic is None:
            topic = responses[key] = _TopicResponse(topic=target.topic, topic_id=target.topic_id,
                                                    partitions=[])
        topic.partitions.append(data)
    endpoints = add_leader_hints(ctx, ((t.topic, p) for t in responses.values()
                                          for p in t.partitions), _Response.NodeEndpoint)
    return _Response(error_code=0, session_id=session.session_id if session else 0,
                     responses=list(responses.values()), node_endpoints=endpoints)


async def _handle_replica_fetch(ctx: RequestContext, request: Any, replica_id: int,
                                uses_ids: bool) -> Any:
    """A follower's fetch: it holds everything below each fetch offset, which the leader
    records first (the high watermark and the ISR may move); then batches up to the log end
    offset, or the DivergingEpoch where its log stopped matching ours (KIP-320). Sessionless;
    no quotas; long-polls like a consumer's."""
    broker = ctx.broker
    replicas = broker.replica_manager
    image = broker.controller.image
    # KIP-903: the incarnation of the follower fetching; an ISR member must be the registered one.
    broker_epoch = (request.replica_state.replica_epoch
                    if ctx.api_version >= REPLICA_STATE_VERSION else -1)
    wanted: list[tuple[str, Any, Any]] = []  # (topic name, topic id, FetchPartition)
    results: list[Any] = []
    if not cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):  # only brokers replicate
        return _Response(error_code=0, session_id=0, responses=[_TopicResponse(
            topic=t.topic, topic_id=t.topic_id, partitions=[_PartitionData(
                partition_index=p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                high_watermark=-1, records=[]) for p in t.partitions]) for t in request.topics])
    for topic in request.topics:
        found = (image.topics_by_id.get(topic.topic_id) if uses_ids
                 else image.topics_by_name.get(topic.topic))
        for p in topic.partitions:
            data = _PartitionData(partition_index=p.partition, error_code=0, records=[])
            results.append(data)
            if found is None:
                data.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID if uses_ids
                                      else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                data.high_watermark = -1
            wanted.append((found.name if found else topic.topic,
                           found.topic_id if found else topic.topic_id, p))
    # The high watermarks before this fetch: one that moves (this fetch or another follower's
    # moved it) is answered at once, so followers serving consumers (KIP-392) learn it soon.
    known_high_watermarks: list[int] = []
    chunk_copies: set[int] = set()  # entries that copy an inactive chunk held here (seed 000)
    for index, ((name, _, p), data) in enumerate(zip(wanted, results, strict=True)):
        known_high_watermarks.append(-1)
        if data.error_code:
            continue
        if _copies_chunk(replicas, name, p.partition, p.fetch_offset):
            chunk_copies.add(index)
            continue
        try:
            hosted = replicas.leader_partition(name, p.partition)
            hosted.check_leader_epoch(p.current_leader_epoch)
            known_high_watermarks[-1] = hosted.high_watermark
            plog = hosted.log
            # A fetch whose log diverged or lies outside ours says nothing of what the follower
            # holds: counting it would let a diverged tail join the ISR (Kafka skips it too).
            if (hosted.diverging_epoch(p.last_fetched_epoch, p.fetch_offset) is None
                    and plog.log_start_offset <= p.fetch_offset <= plog.log_end_offset):
                replicas.record_follower_fetch(hosted, replica_id, p.fetch_offset,
                                               p.log_start_offset, broker_epoch)
        except KafkaError as exc:
            data.error_code = int(exc.code)
            data.high_watermark = -1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    while True:
        total, done, throttled_bytes = _read_for_replica(replicas, request, wanted, results,
                                                         replica_id, chunk_copies)
        done = done or any(data.high_watermark > known for data, known
                           in zip(results, known_high_watermarks, strict=True))
        remaining = deadline - loop.time()
        if done or total >= request.min_bytes or remaining <= 0:
            break
        await replicas.wait_for_data([(name, p.partition) for name, _, p in wanted], remaining)
    replicas.leader_quota.record(throttled_bytes)  # what this answer sends, counted once
    responses: dict[Any, Any] = {}
    for (name, topic_id, _), data in zip(wanted, results, strict=True):
        topic_answer = responses.get((name, topic_id))
        if topic_answer is None:
            topic_answer = responses[(name, topic_id)] = _TopicResponse(
                topic=name, topic_id=topic_id, partitions=[])
        topic_answer.partitions.append(data)
    endpoints = add_leader_hints(ctx, ((t.topic, p) for t in responses.values()
                                          for p in t.partitions), _Response.NodeEndpoint)
    return _Response(error_code=0, session_id=0, responses=list(responses.values()),
                     node_endpoints=endpoints)


def _copies_chunk(replicas: Any, topic: str, partition: int, fetch_offset: int) -> bool:
    """Whether a replica fetch copies an inactive chunk held here (seed 000): an offset of
    the chunk that the active chunk's log here does not serve (it starts later, or this
    broker does not lead it, or not yet)."""
    if replicas.chunk_log(topic, partition, fetch_offset, readers=False) is None:
        return False
    try:
        hosted = replicas.leader_partition(topic, partition)
    except KafkaError:
        return True
    return bool(fetch_offset < hosted.log.log_start_offset)


def _read_for_replica(replicas: Any, request: Any, wanted: list[tuple[str, Any, Any]],
                      results: list[Any], replica_id: int,
                      chunk_copies: set[int]) -> tuple[int, bool, int]:
    """Read every partition for a follower within the request's limits; returns (bytes, whether
    to answer at once: an error or a divergence, bytes read for throttled replicas). An
    out-of-sync replica that a reassignment throttles gets nothing while this leader's budget
    is in debt. A replica copying an inactive chunk held here reads it up to its end."""
    total = throttled_bytes = 0
    done = False
    over_quota = replicas.leader_quota.exceeded()
    for index, ((name, _, p), data) in enumerate(zip(wanted, results, strict=True)):
        if data.error_code:  # refused before reading (unknown, not the leader, old epoch)
            done = True
            continue
        if index in chunk_copies:
            total += _read_chunk(replicas, name, p.partition, p.fetch_offset,
                                 min(p.partition_max_bytes, max(request.max_bytes - total, 0)),
                                 data, readers=False, first=total == 0)
            done = True  # immutable: nothing to wait for
            continue
        try:
            hosted = replicas.leader_partition(name, p.partition)
            hosted.check_leader_epoch(p.current_leader_epoch)
        except KafkaError as exc:  # leadership moved while the fetch waited
            data.error_code, data.high_watermark, data.records = int(exc.code), -1, []
            done = True
            continue
        plog = hosted.log
        data.high_watermark = plog.high_watermark
        data.last_stable_offset = plog.last_stable_offset
        data.log_start_offset = plog.log_start_offset
        diverging = hosted.diverging_epoch(p.last_fetched_epoch, p.fetch_offset)
        if diverging is not None:
            data.diverging_epoch.epoch, data.diverging_epoch.end_offset = diverging
            data.records = []
            done = True
            continue
        throttled = (replica_id not in hosted.isr
                     and (name, p.partition) in replicas.leader_throttled)
        max_bytes = min(p.partition_max_bytes, max(request.max_bytes - total, 0))
        if (max_bytes <= 0 and total > 0) or (throttled and over_quota):
            data.records = []
            continue
        try:
            info = plog.read(p.fetch_offset, max_bytes, min_one_message=total == 0)
        except KafkaError as exc:
            data.error_code, data.records = int(exc.code), []
            done = True
            continue
        data.records = info.records
        nbytes = sum(r.nbytes for r in info.records)
        total += nbytes
        if throttled:
            throttled_bytes += nbytes
    return total, done, throttled_bytes


# A connection's consumer that came back for the offset it was sent elsewhere for: it does not
# follow PreferredReadReplica to a chunk's replica (the value in the connection's redirects).
IGNORES_REDIRECTS = -2


def _redirects_of(ctx: RequestContext) -> dict[tuple[str, int], int]:
    """Per connection: (topic, partition) -> the offset its consumer was last sent to a
    chunk's replica for, or IGNORES_REDIRECTS."""
    redirects: dict[tuple[str, int], int] = ctx.connection.state.setdefault(
        "chunk_redirects", {})
    return redirects


def _inactive_chunk_read(broker: Any, request: Any, target: _Target, from_follower: bool,
                         rack_id: str, redirects: dict[tuple[str, int], int], *, first: bool,
                         budget: int) -> tuple[Any, int, int | None] | None:
    """A consumer's fetch at an offset before the partition's active chunk (seed 000): read
    from the chunk's replica when this broker holds one, else (Fetch v11+) sent to one with
    PreferredReadReplica (KIP-392), as the leader sends consumers to a follower; None for an
    offset of the active chunk. (data, bytes read, broker to relay the read from) otherwise.

    Some consumers only follow PreferredReadReplica to a broker the Metadata lists as a replica
    of the partition (Java's and kafka-python's), which a chunk's replica need not be; others
    (Fetch below v11) cannot be sent at all. A consumer that comes back for the offset it was
    sent away for, and any below v11, gets the chunk's records relayed by this broker: every
    stock client reads all of the partition, only the extra hop differs."""
    offset = target.cached.fetch_offset
    known = broker.controller.image.topics_by_name.get(target.topic)
    part = known.partitions.get(target.partition) if known is not None else None
    if part is None or not part.chunks:
        return None
    replicas = broker.replica_manager
    read_committed = request.isolation_level == READ_COMMITTED
    data = _PartitionData(partition_index=target.partition, error_code=0, high_watermark=-1,
                          last_stable_offset=-1, log_start_offset=part.chunks[0].start_offset,
                          records=[], aborted_transactions=[] if read_committed else None)
    if offset >= part.start_offset:
        if ((target.topic, target.partition) in replicas.partitions or not from_follower
                or part.leader < 0):
            return None  # the active chunk's replicas serve it as usual
        # A reader that finished a chunk here (or knows an old leader): on to the leader.
        # Every KIP-392 client follows this (the leader is a replica); some rejoin their
        # group on NOT_LEADER_OR_FOLLOWER and would read the chunk again from a commit.
        data.preferred_read_replica = part.leader
        return data, 0, None
    if replicas.chunk_log(target.topic, target.partition, offset, readers=True) is not None:
        max_bytes = min(target.cached.max_bytes, budget)
        return data, _read_chunk(replicas, target.topic, target.partition, offset, max_bytes,
                                 data, readers=True, first=first), None
    chunk = part.chunk_at(offset)
    if chunk is None:  # below the first chunk (or what retention removed)
        data.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
        return data, 0, None
    replica = chunk_read_replica(broker.controller.image, target.topic, target.partition,
                                 chunk, rack_id)
    if replica is None:
        data.error_code = int(ErrorCode.REPLICA_NOT_AVAILABLE)
        return data, 0, None
    key = (target.topic, target.partition)
    if from_follower and redirects.get(key) not in (offset, IGNORES_REDIRECTS):
        redirects[key] = offset
        data.preferred_read_replica = replica
        return data, 0, None
    redirects[key] = IGNORES_REDIRECTS
    return data, 0, replica


async def _relay_chunk_reads(broker: Any, request: Any, targets: list[_Target],
                             results: list[Any], relayed: dict[int, int]) -> int:
    """Read each relayed target from the chunk replica chosen for it (a consumer's Fetch
    between brokers); a replica that cannot be reached answers the consumer with
    REPLICA_NOT_AVAILABLE (retriable). Returns the bytes read."""
    total = 0
    for index, replica in relayed.items():
        target, data = targets[index], results[index]
        try:
            got = await relay_chunk_fetch(broker, replica, target.topic, target.topic_id,
                                          target.partition, target.cached.fetch_offset,
                                          target.cached.max_bytes, request.isolation_level)
        except KafkaError as exc:
            data.error_code = int(exc.code)
            continue
        data.error_code = got.error_code
        data.high_watermark, data.last_stable_offset = got.high_watermark, got.last_stable_offset
        records = memoryview(got.records) if got.records is not None else memoryview(b"")
        data.records = [records] if records.nbytes else []  # as the log's reads give them
        if data.aborted_transactions is not None:
            data.aborted_transactions = list(got.aborted_transactions or ())
        total += records.nbytes
    return total


async def relay_chunk_fetch(broker: Any, replica: int, topic: str, topic_id: uuid.UUID,
                            partition: int, offset: int, max_bytes: int,
                            isolation_level: int) -> Any:
    """One partition's read of an inactive chunk at `replica` (a consumer's Fetch between
    brokers, answered without waiting): its PartitionData. REPLICA_NOT_AVAILABLE (retriable)
    when the replica cannot be reached."""
    ask = _Request(
        replica_state=_Request.ReplicaState(replica_id=-1, replica_epoch=-1),
        max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=isolation_level,
        session_id=0, session_epoch=-1,
        topics=[_Request.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
            _Request.FetchPartition(partition=partition, current_leader_epoch=-1,
                                    fetch_offset=offset, last_fetched_epoch=-1,
                                    log_start_offset=-1, partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id="")
    try:
        answer = await broker.broker_channels.request(replica, ApiKey.FETCH,
                                                      RELAY_FETCH_VERSION, ask, RELAY_TIMEOUT_S)
        return answer.responses[0].partitions[0]
    except (ConnectionError, TimeoutError, OSError, IndexError) as exc:
        raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE,
                         f"the replica {replica} of a chunk of {topic}-{partition} did not "
                         f"answer: {exc}") from exc


def chunk_read_replica(image: Any, topic: str, partition: int, chunk: Any,
                       rack_id: str) -> int | None:
    """The replica of an inactive chunk a reader is sent to: among its live replicas holding
    all of it, those in the reader's rack when it names one that has any, chosen by a hash of
    the chunk so that its readers spread over partitions and stay put."""
    brokers = image.brokers
    live = [r for r in chunk.readable_replicas
            if r in brokers and not brokers[r].fenced]
    if not live:
        return None
    same_rack = [r for r in live if rack_id and brokers[r].rack == rack_id]
    candidates = same_rack or live
    key = f"{topic}-{partition}@{chunk.start_offset}".encode()
    return int(candidates[zlib.crc32(key) % len(candidates)])


def _read_chunk(replicas: Any, topic: str, partition: int, fetch_offset: int, max_bytes: int,
                data: Any, *, readers: bool, first: bool) -> int:
    """Fill `data` from the inactive chunk held here that has `fetch_offset`: consumers read up
    to its stop offset (its high watermark and last stable offset), replicas copying it up to
    its end. OFFSET_OUT_OF_RANGE when it moved away meanwhile. Returns the bytes read."""
    found = replicas.chunk_log(topic, partition, fetch_offset, readers=readers)
    if found is None:
        data.error_code, data.high_watermark, data.records = (
            int(ErrorCode.OFFSET_OUT_OF_RANGE), -1, [])
        return 0
    chunk, plog = found
    limit = (chunk.stop_offset if readers else chunk.end_offset) + 1
    data.high_watermark = data.last_stable_offset = limit
    data.log_start_offset = plog.log_start_offset
    if max_bytes <= 0 and not first:
        return 0
    info = plog.read(fetch_offset, max_bytes, max_offset=limit, min_one_message=first)
    data.records = info.records
    if readers and data.aborted_transactions is not None and info.records:
        data.aborted_transactions = [
            _AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
            for txn in plog.aborted_transactions_in(info)]
    return sum(r.nbytes for r in info.records)


def _preferred_read_replica(broker: Any, hosted: Any, rack_id: str) -> int:
    """Kafka's RackAwareReplicaSelector: the leader when it is in the consumer's rack, else the
    in-sync replica of that rack furthest along, else the leader."""
    brokers = broker.controller.image.brokers

    def rack_of(node_id: int) -> str | None:
        known = brokers.get(node_id)
        return known.rack if known is not None and not known.fenced else None

    if rack_of(hosted.local_id) == rack_id:
        return int(hosted.local_id)
    candidates = [(state.log_end_offset, replica) for replica, state in hosted.followers.items()
                  if replica in hosted.isr and rack_of(replica) == rack_id]
    return max(candidates)[1] if candidates else int(hosted.local_id)


def _down_conversion_magic(api_version: int) -> int | None:
    """The message format a Fetch version reads, when it is older than v2 batches."""
    if api_version >= MESSAGE_FORMAT_V1_BELOW_VERSION:
        return None
    return MAGIC_V0 if api_version < MESSAGE_FORMAT_V0_BELOW_VERSION else MAGIC_V1


def _down_convert_all(broker: Any, request: Any, targets: list[_Target], results: list[Any],
                      diskless: set[int], magic: int) -> tuple[int, bool]:
    """Fetch v0-3: rewrite each partition's batches as `magic` messages within the partition and
    response limits, now counted in converted bytes (the first partition with data may send
    one message beyond them); returns (response bytes, whether a partition failed)."""
    budget = request.max_bytes
    total = 0
    has_error = False
    for index, (target, data) in enumerate(zip(targets, results, strict=True)):
        chunks, data.records = data.records, []
        if data.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            # Consumers this old do not know the code; Kafka sends them this one (<= v5).
            data.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not data.error_code and broker.log_config_for(target.topic).compression_type == "zstd":
            data.error_code = int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)  # KIP-110: Fetch < v10
        if data.error_code:
            has_error = True
            continue
        max_bytes = min(target.cached.max_bytes, budget - total)
        if max_bytes <= 0 and total > 0:
            continue
        try:
            converted = _down_convert(broker, target, chunks, data.high_watermark, magic,
                                      max_bytes, first=total == 0, classic=index not in diskless)
        except KafkaError as exc:
            data.error_code = int(exc.code)
            has_error = True
            continue
        if converted:
            data.records = [converted]
            total += len(converted)
    return total, has_error


def _down_convert(broker: Any, target: _Target, chunks: list[Any], high_watermark: int,
                  magic: int, max_bytes: int, *, first: bool, classic: bool) -> bytearray:
    """One partition's messages. When what was read converts to nothing (transaction markers,
    records before the fetch offset, or a batch larger than what the v2 limits left), a classic
    partition reads on below the high watermark, a whole batch at a time: the limit applies to
    the converted messages, so part of an uncompressed batch may fit where all of it did not."""
    fetch_offset = target.cached.fetch_offset
    converted = down_convert(chunks, magic, fetch_offset, max_bytes, min_one_message=first)
    position = converted.next_offset
    while classic and not converted.message_set and position < high_watermark:
        plog = broker.replica_manager.leader_partition(target.topic, target.partition).log
        info = plog.read(position, max_bytes, max_offset=high_watermark, min_one_message=True)
        if not info.records:
            break
        converted = down_convert(info.records, magic, fetch_offset, max_bytes,
                                 min_one_message=first)
        if converted.next_offset <= position:
            break
        position = converted.next_offset
    return converted.message_set


def _throttled(ctx: RequestContext, total_bytes: int) -> bool:
    """Record the fetched bytes against the consumer's quota; when that throttles it, take
    them back (the answer goes without them) and keep the throttle time for the dispatcher."""
    quota = ctx.broker.quotas.fetch
    user, client_id = client_of(ctx)
    now = now_ms()
    throttle = quota.record_and_get_throttle_time_ms(user, client_id, total_bytes, now)
    if throttle <= 0:
        return False
    quota.unrecord(user, client_id, total_bytes, now)
    ctx.throttle_time_ms = throttle
    return True


def _has_records(records: Any) -> bool:
    return bool(records) and any(len(r) for r in records)


def _resolve(ctx: RequestContext, request: Any, uses_ids: bool
             ) -> tuple[FetchSession | None, list[_Target], bool]:
    """Apply the request to the session cache; the partitions to answer and whether incremental."""
    cache = ctx.broker.fetch_sessions
    image = ctx.broker.controller.image
    session_id, epoch = request.session_id, request.session_epoch
    session: FetchSession | None = None
    incremental = False
    if ctx.api_version < 7 or (session_id == SESSIONLESS_ID and epoch == FINAL_EPOCH):
        pass  # sessionless full fetch
    elif epoch == INITIAL_EPOCH:
        if session_id != SESSIONLESS_ID:
            cache.remove(session_id)
        session = cache.create()  # None when the cache is full: a sessionless full fetch
    elif epoch == FINAL_EPOCH:
        cache.remove(session_id)
    else:
        session = cache.lookup(session_id, epoch)
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        incremental = True

    partitions = session.partitions if session is not None else {}
    ids: dict[tuple[str, int], tuple[uuid.UUID, int]] = {}
    unknown: list[_Target] = []
    for topic in request.topics:
        if uses_ids:
            found = image.topics_by_id.get(topic.topic_id)
            if found is None:
                for p in topic.partitions:
                    unknown.append(_Target("", topic.topic_id, p.partition,
                                           CachedPartition(p.fetch_offset, p.partition_max_bytes),
                                           unknown_topic_id=True))
                continue
            name, topic_id = found.name, found.topic_id
        else:
            found = image.topics_by_name.get(topic.topic)
            name, topic_id = topic.topic, found.topic_id if found else ZERO_UUID
        for p in topic.partitions:
            key = (name, p.partition)
            cached = partitions.get(key) if incremental else None
            if cached is None:
                cached = CachedPartition(p.fetch_offset, p.partition_max_bytes)
                partitions[key] = cached
            else:
                cached.fetch_offset = p.fetch_offset
                cached.max_bytes = p.partition_max_bytes
            ids[key] = (topic_id, p.current_leader_epoch)
    if incremental:
        for forgotten in request.forgotten_topics_data:
            if uses_ids:
                found = image.topics_by_id.get(forgotten.topic_id)
                if found is None:
                    continue  # a topic gone since: its partitions left the session with it
                name = found.name
            else:
                name = forgotten.topic
            for partition in forgotten.partitions:
                partitions.pop((name, partition), None)
    targets = []
    for (name, partition), cached in partitions.items():
        if (name, partition) in ids:
            topic_id, leader_epoch = ids[(name, partition)]
        else:  # carried by the session, not named in this request
            found = image.topics_by_name.get(name)
            topic_id, leader_epoch = (found.topic_id if found else ZERO_UUID), -1
        targets.append(_Target(name, topic_id, partition, cached, leader_epoch))
    return session, targets + unknown, incremental


def _read_all(broker: Any, request: Any, targets: list[_Target], diskless: set[int],
              api_version: int, redirects: dict[tuple[str, int], int],
              relayed: dict[int, Any]) -> tuple[list[Any], int, bool]:
    """Read every classic target within the budgets; diskless ones get an empty entry that
    _read_diskless fills. Records are never null, even on error: librdkafka drops the whole
    response when a partition's records field is null."""
    replicas = broker.replica_manager
    budget = request.max_bytes
    total = 0
    has_error = False
    results = []
    from_follower = api_version >= FETCH_FROM_FOLLOWER_VERSION
    rack_id = request.rack_id if from_follower else ""
    selector = broker.config.values.get("replica.selector.class")
    for index, target in enumerate(targets):
        if index in diskless:
            results.append(_PartitionData(partition_index=target.partition, error_code=0,
                                          records=[]))
            continue
        if target.unreadable:
            code = (ErrorCode.UNKNOWN_TOPIC_ID if target.unknown_topic_id
                    else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            results.append(_PartitionData(partition_index=target.partition,
                                          error_code=int(code), high_watermark=-1, records=[]))
            has_error = True
            continue
        in_chunk = _inactive_chunk_read(broker, request, target, from_follower, rack_id,
                                        redirects, first=total == 0,
                                        budget=max(budget - total, 0))
        if in_chunk is not None:  # an offset of an inactive chunk (seed 000)
            data, nbytes, relay_from = in_chunk
            if relay_from is not None:
                relayed[index] = relay_from
            results.append(data)
            total += nbytes
            # An error or a redirect is answered at once, as Kafka does.
            has_error = has_error or data.error_code != 0 or data.preferred_read_replica >= 0
            continue
        try:
            hosted = replicas.readable_partition(target.topic, target.partition,
                                                 from_follower=from_follower)
        except KafkaError as exc:  # unknown here, or its log could not be opened
            results.append(_PartitionData(partition_index=target.partition,
                                          error_code=int(exc.code), high_watermark=-1,
                                          records=[]))
            has_error = True
            continue
        plog = hosted.log
        high_watermark = plog.high_watermark
        last_stable_offset = plog.last_stable_offset
        read_committed = request.isolation_level == READ_COMMITTED
        data = _PartitionData(partition_index=target.partition, error_code=0,
                              high_watermark=high_watermark, last_stable_offset=last_stable_offset,
                              log_start_offset=plog.log_start_offset, records=[],
                              aborted_transactions=[] if request.isolation_level == READ_COMMITTED
                              else None)
        results.append(data)
        max_bytes = min(target.cached.max_bytes, max(budget - total, 0))
        try:
            hosted.check_leader_epoch(target.current_leader_epoch)
            if hosted.is_leader and rack_id and selector == RACK_AWARE_SELECTOR:
                preferred = _preferred_read_replica(broker, hosted, rack_id)
                if preferred != hosted.local_id:  # KIP-392: read there, nothing from here
                    data.preferred_read_replica = preferred
                    has_error = True  # answered at once, as Kafka does
                    continue
            if max_bytes <= 0 and total > 0:
                continue  # the response is full: this partition answers without records
            if not hosted.is_leader and target.cached.fetch_offset > plog.log_end_offset:
                # A follower behind its leader: the consumer retries, it must not reset.
                raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                                 f"offset {target.cached.fetch_offset} is not on this follower "
                                 "yet")
            # read_committed consumers see nothing past the last stable offset (KIP-98).
            info = plog.read(target.cached.fetch_offset, max_bytes,
                             max_offset=last_stable_offset if read_committed else high_watermark,
                             min_one_message=total == 0)
        except KafkaError as exc:
            data.error_code = int(exc.code)
            has_error = True
            continue
        data.records = info.records
        if read_committed and info.records:
            data.aborted_transactions = [
                _AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
                for txn in plog.aborted_transactions_in(info)]
        total += sum(r.nbytes for r in info.records)
    return results, total, has_error


async def _read_diskless(broker: Any, request: Any, targets: list[_Target], results: list[Any],
                         diskless: set[int], classic_bytes: int) -> tuple[int, bool]:
    """Fill the diskless targets' entries from the object store (DisklessService.fetch); the
    classic partitions already read count against max_bytes. The coordinators keep each
    partition's last stable offset and aborted transactions, as a classic log does."""
    order = sorted(diskless)
    reads = [(targets[i].topic, targets[i].partition, targets[i].cached.fetch_offset,
              targets[i].cached.max_bytes) for i in order]
    answers = await broker.diskless.fetch(reads, max(request.max_bytes - classic_bytes, 0),
                                          first=classic_bytes == 0,
                                          isolation_level=request.isolation_level)
    total = 0
    has_error = False
    for index, answer in zip(order, answers, strict=True):
        data = results[index]
        data.error_code = answer.error_code
        data.high_watermark = answer.high_watermark
        data.last_stable_offset = answer.last_stable_offset
        data.log_start_offset = answer.log_start_offset
        data.records = answer.records or []
        if request.isolation_level == READ_COMMITTED:
            data.aborted_transactions = [
                _AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
                for producer_id, first_offset in answer.aborted_transactions or ()]
        has_error = has_error or answer.error_code != 0
        total += answer.size_bytes
    return total, has_error
