"""Metadata (3): brokers, controller and topic/partition state from the MetadataImage; v0-v12.

A null topic list (v1+) or an empty one (v0) asks for every topic. Unknown topics are
auto-created when `auto.create.topics.enable` and the request's AllowAutoTopicCreation (v4+)
agree: as in Kafka the creation starts and the answer is LEADER_NOT_AVAILABLE without
partitions; the client's next Metadata request finds the topic (server/auto_topic_creation.py).
`__consumer_offsets` and `__transaction_state` are created only with their coordinator's shape.
`__cluster_metadata` is never listed. Partitions of diskless topics (v9+)
carry the tagged PreferredProduceBrokers: the produce gateways of their coordinator
(kafka_ext/diskless/gateways.py), or every live broker before `__diskless_metadata` exists.
When the client's rack is known (RequestContext.client_rack), that rack's gateways come first,
so its leader is a broker of its rack.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka_ext.controller.image import ChunkImage, MetadataImage, TopicImage
from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC, check_topic_name
from kafka_ext.diskless.gateways import produce_gateways, rack_first
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafka_ext.server.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    authorized_topics,
    cluster_authorized,
    topic_authorized,
)
from kafka_ext.server.dispatcher import RequestContext

_Response = registry()["MetadataResponse"].cls
_Broker = _Response.MetadataResponseBroker
_Topic = _Response.MetadataResponseTopic
_Partition = _Response.MetadataResponsePartition
_Chunk = _Response.MetadataResponseChunk
# Kafka's internal topics (a user topic named "__x" is an ordinary topic).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                             DISKLESS_METADATA_TOPIC})


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    image = broker.controller.image
    wanted = request.topics
    all_topics = wanted is None or (ctx.api_version == 0 and not wanted)
    topics: list[Any] = []
    nodes = broker.live_nodes(ctx.listener_name)
    gateways = _Gateways(image, nodes, ctx.client_rack)
    guarded = broker.authorizer is not None
    if all_topics:
        # ACLs: every topic the principal may DESCRIBE, the others silently left out.
        allowed = (authorized_topics(ctx, AclOperation.DESCRIBE, image.topics_by_name)
                   if guarded else None)
        topics = [_topic(t, gateways) for name, t in image.topics_by_name.items()
                  if allowed is None or name in allowed]
    else:
        missing: list[str] = []
        for entry in wanted:
            name = entry.name
            if name is None:  # by id; the zero id names no topic
                found = image.topics_by_id.get(entry.topic_id)
                if found is None:
                    # The name is nullable only from v12: older versions answer "".
                    topics.append(_Topic(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID),
                                         name=None if ctx.api_version >= 12 else "",
                                         topic_id=entry.topic_id))
                    continue
                name = found.name
            if guarded and not topic_authorized(ctx, AclOperation.DESCRIBE, name):
                # Known or not, an undescribable topic is only ever "not authorized".
                topics.append(_Topic(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                     name=name, is_internal=name in INTERNAL_TOPICS))
                continue
            if name in image.topics_by_name:
                topics.append(_topic(image.topics_by_name[name], gateways))
            else:
                missing.append(name)
        if missing:
            topics += _missing_topics(ctx, request, missing)
    if ctx.api_version >= 8 and request.include_topic_authorized_operations:  # KIP-430
        for topic in topics:
            if topic.error_code == 0:
                topic.topic_authorized_operations = authorized_operations(
                    ctx, ResourceType.TOPIC, topic.name)
    cluster_operations = (authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                          if 8 <= ctx.api_version <= 10
                          and request.include_cluster_authorized_operations
                          else AUTHORIZED_OPERATIONS_OMITTED)
    return _Response(
        brokers=[_Broker(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
                 for n in nodes],
        cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=topics,
        cluster_authorized_operations=cluster_operations)


class _Gateways:
    """The produce gateways of each diskless coordinator, those in the client's `rack` first;
    each computed once per request, on first need."""

    __slots__ = ("_image", "_nodes", "_rack", "_rack_of", "_by_coordinator", "_ordered")

    def __init__(self, image: MetadataImage, nodes: list[Any], rack: str | None) -> None:
        self._image = image
        self._nodes = nodes
        self._rack = rack
        self._rack_of = {n.node_id: n.rack for n in nodes} if rack is not None else {}
        self._by_coordinator: dict[int, list[int]] | None = None
        self._ordered: dict[int, list[int]] = {}

    def of(self, coordinator: int) -> list[int]:
        ordered = self._ordered.get(coordinator)
        if ordered is None:
            ordered = self._gateways(coordinator)
            if self._rack is not None:
                ordered = rack_first(ordered, self._rack_of, self._rack)
            self._ordered[coordinator] = ordered
        return ordered

    def _gateways(self, coordinator: int) -> list[int]:
        if self._by_coordinator is None:
            metadata_topic = self._image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
            leaders = ({} if metadata_topic is None else
                       {p.partition_id: p.leader for p in metadata_topic.partitions.values()})
            self._by_coordinator = produce_gateways(
                [(n.node_id, n.rack) for n in self._nodes], list(leaders), leaders)
        found = self._by_coordinator.get(coordinator)
        # No such coordinator yet (its topic is created on first use): any broker will do.
        return found if found else sorted(n.node_id for n in self._nodes)


def _topic(topic: TopicImage, gateways: _Gateways) -> Any:
    return _Topic(
        error_code=0, name=topic.name, topic_id=topic.topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=[_diskless_partition(p, gateways.of(p.diskless_coordinator))
                    if p.is_diskless else
                    _Partition(error_code=_leader_error(p), partition_index=p.partition_id,
                               leader_id=p.leader,
                               leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                               isr_nodes=list(p.isr), offline_replicas=[],
                               preferred_produce_brokers=[],
                               mode=p.mode, start_offset=p.start_offset,
                               chunks=[_chunk(c) for c in p.chunks])
                    for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)])


def _diskless_partition(p: Any, gateways: list[int]) -> Any:
    """A diskless partition has no leader that holds its data: any live broker serves it. Its
    coordinator's produce gateways stand in as leader and replicas (stock clients send
    produce and fetch to the leader), so it stays available whichever broker dies."""
    leader = gateways[0] if gateways else p.leader
    return _Partition(error_code=0 if leader >= 0 else _leader_error(p),
                      partition_index=p.partition_id, leader_id=leader,
                      leader_epoch=p.leader_epoch, replica_nodes=list(gateways or p.replicas),
                      isr_nodes=list(gateways or p.isr), offline_replicas=[],
                      preferred_produce_brokers=gateways, mode=p.mode,
                      start_offset=p.start_offset, chunks=[])


def _chunk(chunk: ChunkImage) -> Any:
    """An inactive chunk (seed 000), a tagged field stock clients skip."""
    return _Chunk(start_offset=chunk.start_offset, start_timestamp=chunk.start_timestamp,
                  stop_offset=chunk.stop_offset, end_offset=chunk.end_offset,
                  replica_nodes=list(chunk.replicas), isr_nodes=list(chunk.readable_replicas),
                  chunk_epoch=chunk.chunk_epoch)


def _missing_topics(ctx: RequestContext, request: Any, names: list[str]) -> list[Any]:
    """Answers for topics the image does not have: their creation starts when the request and
    `auto.create.topics.enable` allow it (LEADER_NOT_AVAILABLE, as Kafka answers), else
    UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name)."""
    broker = ctx.broker
    allowed = broker.config.auto_create_topics_enable and (
        ctx.api_version < 4 or request.allow_auto_topic_creation)
    answers: list[tuple[str, ErrorCode]] = []
    if allowed and not cluster_authorized(ctx, AclOperation.CREATE):
        # ACLs: auto-creation needs CREATE on the cluster or on the topic itself.
        creatable = authorized_topics(ctx, AclOperation.CREATE, names)
        answers = [(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for name in names
                   if name not in creatable]
        names = [name for name in names if name in creatable]
    if allowed:
        answers += broker.auto_topic_creation.create_topics(names)
    else:
        answers += [(name, _unknown_topic_error(name)) for name in names]
    return [_Topic(error_code=int(error), name=name, is_internal=name in INTERNAL_TOPICS)
            for name, error in answers]


def _unknown_topic_error(name: str) -> ErrorCode:
    try:
        check_topic_name(name)
    except KafkaError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _leader_error(partition: Any) -> int:
    """LEADER_NOT_AVAILABLE for a partition without a leader (its broker is fenced or shutting
    down), as Kafka answers; clients retry."""
    return int(ErrorCode.LEADER_NOT_AVAILABLE) if partition.leader < 0 else 0


# -- DescribeTopicPartitions (75) -------------------------------------------------------------

_DescribeResponse = registry()["DescribeTopicPartitionsResponse"].cls
_DescribeTopic = _DescribeResponse.DescribeTopicPartitionsResponseTopic
_DescribePartition = _DescribeResponse.DescribeTopicPartitionsResponsePartition
_ZERO_UUID = uuid.UUID(int=0)


async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    """DescribeTopicPartitions v0 (KIP-966), which Kafka 4.x admin clients describe topics with:
    the partitions of the topics asked for (every topic the principal may describe when none),
    sorted by name, at most ResponsePartitionLimit of them (capped by
    `max.request.partition.size.limit`), from the Cursor on; NextCursor says where the next
    page starts. Each partition is what Metadata says of it (a diskless one's gateways as its
    leader and replicas), with its eligible leader replicas (KIP-966; empty unless
    eligible.leader.replicas.version is 1)."""
    broker = ctx.broker
    image = broker.controller.image
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    names = sorted({name for name in (image.topics_by_name if every_topic
                                      else (t.name for t in request.topics)) if name >= after})
    if cursor is not None and (cursor.partition_index < 0
                               or not every_topic and cursor.topic_name not in names):
        # Kafka's error answer: INVALID_REQUEST on every topic asked for.
        return _DescribeResponse(throttle_time_ms=0, next_cursor=None, topics=[
            _DescribeTopic(error_code=int(ErrorCode.INVALID_REQUEST), name=t.name,
                           topic_id=_ZERO_UUID, is_internal=False, partitions=[])
            for t in request.topics])
    refused: list[Any] = []
    if broker.authorizer is not None:
        allowed = authorized_topics(ctx, AclOperation.DESCRIBE, names)
        if not every_topic:  # named topics are refused; the others silently left out
            refused = [_DescribeTopic(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                      name=name, topic_id=_ZERO_UUID, is_internal=False,
                                      partitions=[]) for name in names if name not in allowed]
        names = [name for name in names if name in allowed]
    limit = broker.config.get("max.request.partition.size.limit")
    assert isinstance(limit, int)
    remaining = max(min(limit, request.response_partition_limit), 1)
    gateways = _Gateways(image, broker.live_nodes(ctx.listener_name), ctx.client_rack)
    response = _DescribeResponse(throttle_time_ms=0, topics=[], next_cursor=None)
    for name in names:
        if remaining == 0:  # the previous topics are complete: the next page starts here
            response.next_cursor = _DescribeResponse.Cursor(topic_name=name, partition_index=0)
            break
        topic = image.topics_by_name.get(name)
        if topic is None:
            if not every_topic:
                response.topics.append(_DescribeTopic(
                    error_code=int(_unknown_topic_error(name)), name=name, topic_id=_ZERO_UUID,
                    is_internal=name in INTERNAL_TOPICS, partitions=[]))
            continue
        start = cursor.partition_index if cursor is not None and name == after else 0
        described = _topic(topic, gateways).partitions[start:start + remaining]
        response.topics.append(_DescribeTopic(
            error_code=0, name=name, topic_id=topic.topic_id, is_internal=name in INTERNAL_TOPICS,
            partitions=[_described_partition(p, topic.partitions[p.partition_index])
                        for p in described],
            topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name)))
        remaining -= len(described)
        if start + len(described) < len(topic.partitions):
            response.next_cursor = _DescribeResponse.Cursor(
                topic_name=name, partition_index=start + len(described))
            break
    response.topics += refused
    return response


def _described_partition(p: Any, image: Any) -> Any:
    """Metadata's answer for a partition, with its ELR from the image."""
    return _DescribePartition(
        error_code=p.error_code, partition_index=p.partition_index, leader_id=p.leader_id,
        leader_epoch=p.leader_epoch, replica_nodes=p.replica_nodes, isr_nodes=p.isr_nodes,
        eligible_leader_replicas=list(image.elr), last_known_elr=list(image.last_known_elr),
        offline_replicas=p.offline_replicas)
