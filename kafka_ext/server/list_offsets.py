"""ListOffsets (2, v0-v10) and OffsetForLeaderEpoch (23, v0-v4): offsets by time and by epoch.

ListOffsets special timestamps, as Kafka: -1 latest (the high watermark, or the last stable
offset for read_committed), -2 earliest, -3 the offset of the largest timestamp (KIP-734),
-4 earliest local (= earliest: no tiered storage), -5 earliest pending upload (none: -1).
A timestamp finds the first offset whose timestamp is at or after it through the time index.
Each special timestamp needs the version that introduced it (-1 and -2 any, -3 v7, -4 v8, -5 v9).
v0 is Kafka's legacy lookup: up to MaxNumOffsets segment boundaries (OldStyleOffsets).
"""

from __future__ import annotations

from typing import Any

from kafka_ext.protocol.api_keys import ApiKey, Audience
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics, cluster_authorized
from kafka_ext.server.dispatcher import RequestContext, peer_audience_of
from kafka_ext.server.fetch import RELAY_TIMEOUT_S, chunk_read_replica
from kafka_ext.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

EARLIEST_PENDING_UPLOAD_TIMESTAMP = -5  # the others (-1 to -4) are the log's to resolve
CONSUMER_REPLICA_ID = -1  # ListOffsets replica_id of a consumer (not a follower or a debug tool)
RELAY_LIST_OFFSETS_VERSION = 7  # a broker asking a chunk's replica (seed 000)
# The first version that knows each special timestamp; below it, or for any other negative
# timestamp, Kafka answers the partition UNSUPPORTED_VERSION.
_SPECIAL_TIMESTAMP_SINCE = {
    LATEST_TIMESTAMP: 0, EARLIEST_TIMESTAMP: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 9,
}

_Offsets = registry()["ListOffsetsResponse"].cls
_Epochs = registry()["OffsetForLeaderEpochResponse"].cls


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replica_manager
    describable = authorized_topics(ctx, AclOperation.DESCRIBE, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = _Offsets.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                           error_code=0)
            partitions.append(result)
            try:
                if topic.name not in describable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if p.timestamp < 0 and ctx.api_version < _SPECIAL_TIMESTAMP_SINCE.get(
                        p.timestamp, 1 << 15):
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"timestamp {p.timestamp} at ListOffsets v{ctx.api_version}")
                if ctx.api_version == 0:
                    result.old_style_offsets = await _lookup_v0(
                        ctx.broker, topic.name, p.partition_index, p.timestamp,
                        p.max_num_offsets, request.replica_id == CONSUMER_REPLICA_ID)
                    continue
                if ctx.broker.diskless.is_diskless(topic.name, p.partition_index):
                    result.offset, result.timestamp, result.leader_epoch = await _lookup_diskless(
                        ctx.broker, topic.name, p.partition_index, p.timestamp,
                        request.isolation_level)
                    continue
                if p.timestamp >= 0 and ctx.api_version >= 1:  # inactive chunks first
                    found = await _lookup_in_chunks(ctx, topic.name, p.partition_index,
                                                    p.timestamp)
                    if found is not None:
                        result.offset, result.timestamp, result.leader_epoch = found
                        continue
                hosted = replicas.leader_partition(topic.name, p.partition_index)
                hosted.check_leader_epoch(p.current_leader_epoch)
                result.offset, result.timestamp, result.leader_epoch = _lookup(
                    hosted, p.timestamp, request.isolation_level)
                if p.timestamp == EARLIEST_TIMESTAMP:
                    result.offset = _earliest_of_chunks(ctx.broker, topic.name,
                                                        p.partition_index, result.offset)
            except KafkaError as exc:
                result.error_code = int(exc.code)
        topics.append(_Offsets.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return _Offsets(topics=topics)


async def _lookup_in_chunks(ctx: RequestContext, topic: str, partition: int,
                            timestamp: int) -> tuple[int, int, int] | None:
    """The first offset at or after `timestamp` when it is in an inactive chunk (seed 000),
    asked by a client of the partition's leader, or by another broker of a replica, which
    answers from the chunks it holds. None: not in any chunk."""
    broker = ctx.broker
    leads = (topic, partition) in broker.replica_manager.partitions and \
        broker.replica_manager.partitions[(topic, partition)].is_leader
    asked_by_node = peer_audience_of(ctx.connection) == Audience.NODE
    if not leads and not asked_by_node:
        return None  # the usual NOT_LEADER_OR_FOLLOWER follows
    return await lookup_in_chunks(broker, topic, partition, timestamp,
                                  ask_replicas=not asked_by_node)


async def lookup_in_chunks(broker: Any, topic: str, partition: int, timestamp: int, *,
                           ask_replicas: bool) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) of the first record at or after `timestamp` in the
    inactive chunks: tried oldest first, each that may hold it (its newest record is not
    older), in the log here when this broker holds it, else (`ask_replicas`) through one of
    its replicas. None: not in any chunk."""
    known = broker.controller.image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is None or not part.chunks:
        return None
    for chunk in part.chunks:
        if 0 <= chunk.max_timestamp < timestamp:
            continue
        found = _lookup_in_chunk(broker, topic, partition, chunk, timestamp)
        if found is None and ask_replicas:
            found = await _ask_chunk_replica(broker, topic, partition, chunk, timestamp)
        if found is not None:
            return found
    return None


def _lookup_in_chunk(broker: Any, topic: str, partition: int, chunk: Any,
                     timestamp: int) -> tuple[int, int, int] | None:
    plog = broker.log_manager.get_chunk_log(topic, partition, chunk.start_offset)
    if plog is None or plog.log_end_offset <= chunk.stop_offset:
        return None
    found = plog.fetch_offset_by_timestamp(timestamp)
    if found is None or found.offset > chunk.stop_offset:
        return None
    return found.offset, found.timestamp, found.leader_epoch


async def _ask_chunk_replica(broker: Any, topic: str, partition: int, chunk: Any,
                             timestamp: int) -> tuple[int, int, int] | None:
    replica = chunk_read_replica(broker.controller.image, topic, partition, chunk, "")
    if replica is None:
        raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE,
                         f"no replica of the chunk at {chunk.start_offset} is available")
    Request = registry()["ListOffsetsRequest"].cls
    ask = Request(replica_id=CONSUMER_REPLICA_ID, isolation_level=0, topics=[
        Request.ListOffsetsTopic(name=topic, partitions=[Request.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
    try:
        answer = await broker.broker_channels.request(replica, ApiKey.LIST_OFFSETS,
                                                      RELAY_LIST_OFFSETS_VERSION, ask,
                                                      RELAY_TIMEOUT_S)
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE,
                         f"broker {replica} holding the chunk did not answer: {exc}") from exc
    got = answer.topics[0].partitions[0]
    if got.error_code or got.offset < 0 or got.offset > chunk.stop_offset:
        return None
    return got.offset, got.timestamp, got.leader_epoch


def _earliest_of_chunks(broker: Any, topic: str, partition: int, active_earliest: int) -> int:
    """With chunks (seed 000) the partition starts at its first inactive chunk, whose
    replicas serve it (server/fetch.py sends readers there)."""
    known = broker.controller.image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is None or not part.chunks:
        return active_earliest
    return int(part.chunks[0].start_offset)


def _lookup(hosted: Any, timestamp: int, isolation_level: int = 0) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one ListOffsets query; the log knows the special
    timestamps, this adds what consumers may see: nothing at or past the high watermark, or
    the last stable offset for read_committed (isolation_level 1)."""
    plog = hosted.log
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:  # no tiered storage: nothing pending
        return -1, -1, -1
    fetchable = plog.last_stable_offset if isolation_level == READ_COMMITTED else plog.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return fetchable, -1, hosted.leader_epoch
    found = plog.fetch_offset_by_timestamp(timestamp)
    if found is None:
        return -1, -1, -1
    offset, found_timestamp, leader_epoch = found
    if offset >= fetchable and offset != plog.log_start_offset:
        return -1, -1, -1  # not yet visible to consumers
    return offset, found_timestamp, leader_epoch


async def _lookup_v0(broker: Any, topic: str, partition: int, timestamp: int,
                     max_num_offsets: int, from_consumer: bool) -> list[int]:
    """ListOffsets v0 of one partition. A consumer never sees offsets past the high watermark:
    they are replaced by it, as Kafka does. A diskless partition has no segments: its answer
    is the one offset of the v1 lookup (-1 latest, -2 earliest)."""
    if broker.diskless.is_diskless(topic, partition):
        offset, _, _ = await _lookup_diskless(broker, topic, partition, timestamp)
        return [offset] if offset >= 0 and max_num_offsets > 0 else []
    hosted = broker.replica_manager.leader_partition(topic, partition)
    offsets: list[int] = hosted.log.legacy_offsets_before(timestamp, max_num_offsets)
    high_watermark = hosted.log.high_watermark
    if from_consumer and any(o > high_watermark for o in offsets):
        offsets = [high_watermark] + [o for o in offsets if o <= high_watermark]
    return offsets


async def _lookup_diskless(broker: Any, topic: str, partition: int, timestamp: int,
                           isolation_level: int = 0) -> tuple[int, int, int]:
    """ListOffsets of a diskless partition: DisklessListOffsets at its coordinator (strictly
    consistent; read_committed's latest is the last stable offset). No tiered storage: -5
    finds nothing. The leader epoch is the partition's, which never changes."""
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        return -1, -1, -1
    offset, found_timestamp = await broker.diskless.list_offset(topic, partition, timestamp,
                                                                isolation_level)
    part = broker.controller.image.topics_by_name[topic].partitions[partition]
    return offset, found_timestamp, part.leader_epoch if offset >= 0 else -1


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replica_manager
    # A follower's question needs CLUSTER_ACTION; a consumer's, DESCRIBE on the topic (Kafka).
    if getattr(request, "replica_id", -1) >= 0:
        allowed = ({t.topic for t in request.topics}
                   if cluster_authorized(ctx, AclOperation.CLUSTER_ACTION) else set())
    else:
        allowed = authorized_topics(ctx, AclOperation.DESCRIBE, (t.topic for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = _Epochs.EpochEndOffset(partition=p.partition, error_code=0)
            partitions.append(result)
            try:
                if topic.topic not in allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                hosted = replicas.leader_partition(topic.topic, p.partition)
                hosted.check_leader_epoch(p.current_leader_epoch)
                result.leader_epoch, result.end_offset = hosted.log.end_offset_for_epoch(
                    p.leader_epoch)
            except KafkaError as exc:
                result.error_code = int(exc.code)
        topics.append(_Epochs.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions))
    return _Epochs(topics=topics)
