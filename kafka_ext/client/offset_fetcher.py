"""Offset lookups shared by the consumer and the admin: Kafka's `OffsetFetcher`.

ListOffsets turns a timestamp (or earliest -2 / latest -1) into an offset at each partition's
leader. For KIP-253 (seed 001), LeaderEpochsForPartition (our key 1001, any broker) gives the
prior partitions' leader epochs of new partitions, and OffsetForLeaderEpoch turns an epoch into
the end offset of that epoch at the partition's leader. Partitions whose leader moved are asked
again after a metadata refresh, a bounded number of times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ext.client.metadata import TopicPartition
from kafka_ext.client.network_client import NetworkClient
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark (or LSO for read_committed)
LIST_OFFSETS_VERSION = 10
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LEADER_EPOCHS_FOR_PARTITION_VERSION = 0
CONSUMER_REPLICA_ID = -1  # a consumer's replica id in ListOffsets and OffsetForLeaderEpoch
LOOKUP_ATTEMPTS = 10

_RETRY_AT_LEADER = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                              ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
                              ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
                              ErrorCode.NETWORK_EXCEPTION})

_reg = registry()
_ListOffsets = _reg["ListOffsetsRequest"].cls
_OffsetForLeaderEpoch = _reg["OffsetForLeaderEpochRequest"].cls
_LeaderEpochs = _reg["LeaderEpochsForPartitionRequest"].cls


@dataclass(slots=True, frozen=True)
class ListedOffset:
    """A ListOffsets answer: the offset (-1: no record at or after the timestamp) and the
    timestamp of that record (-1 for earliest/latest)."""

    offset: int
    timestamp: int


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


async def _at_leaders(client: NetworkClient, partitions: Iterable[TopicPartition],
                      ask: Callable[[int, list[TopicPartition]], Awaitable[dict[TopicPartition, Any]]],
                      what: str) -> dict[TopicPartition, Any]:
    """Run `ask(leader, partitions)` per leader until every partition has an answer; `ask`
    returns the answered ones and raises nothing for the ones to retry."""
    left = set(partitions)
    out: dict[TopicPartition, Any] = {}
    last_error: KafkaError | None = None
    if client.add_topics(tp.topic for tp in left):
        await client.refresh_metadata()
    for attempt in range(LOOKUP_ATTEMPTS):
        if attempt:
            await asyncio.sleep(client.retry_backoff_ms / 1000)
            await client.refresh_metadata()
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(left):
            leader = client.metadata.leader_of(tp)
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            try:
                out.update(await ask(leader, tps))
            except KafkaError as exc:
                if not (exc.code.retriable or exc.code in _RETRY_AT_LEADER):
                    raise
                last_error = exc
        left -= out.keys()
        if not left:
            return out
    raise last_error or KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                                   f"{what}: no answer for {sorted(left)}")


async def list_offsets(client: NetworkClient, timestamps: Mapping[TopicPartition, int], *,
                       read_committed: bool = False) -> dict[TopicPartition, ListedOffset]:
    """ListOffsets at the leaders: each partition's offset for its timestamp (or -2/-1)."""

    async def ask(leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(_ListOffsets.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=-1,
                timestamp=timestamps[tp], max_num_offsets=1))
        request = _ListOffsets(
            replica_id=CONSUMER_REPLICA_ID, isolation_level=1 if read_committed else 0,
            topics=[_ListOffsets.ListOffsetsTopic(name=t, partitions=p)
                    for t, p in by_topic.items()],
            timeout_ms=client.request_timeout_ms)
        answer = await client.call(leader, ApiKey.LIST_OFFSETS, request,
                                   highest=LIST_OFFSETS_VERSION, lowest=1)
        found: dict[TopicPartition, Any] = {}
        for t in answer.topics:
            for p in t.partitions:
                code = _code(p.error_code)
                if code in _RETRY_AT_LEADER:
                    continue
                if code != ErrorCode.NONE:
                    raise KafkaError(code, f"ListOffsets {t.name}-{p.partition_index}")
                found[TopicPartition(t.name, p.partition_index)] = ListedOffset(p.offset,
                                                                                p.timestamp)
        return found

    return await _at_leaders(client, timestamps, ask, "ListOffsets")


async def end_offsets_for_epochs(client: NetworkClient, epochs: Mapping[TopicPartition, int]
                                 ) -> dict[TopicPartition, int]:
    """OffsetForLeaderEpoch at the leaders: the end offset of each partition's given epoch
    (one past its last record; -1 when the leader knows no such epoch)."""

    async def ask(leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(
                _OffsetForLeaderEpoch.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=tp.partition, current_leader_epoch=-1, leader_epoch=epochs[tp]))
        request = _OffsetForLeaderEpoch(
            replica_id=CONSUMER_REPLICA_ID,
            topics=[_OffsetForLeaderEpoch.OffsetForLeaderTopic(topic=t, partitions=p)
                    for t, p in by_topic.items()])
        answer = await client.call(leader, ApiKey.OFFSET_FOR_LEADER_EPOCH, request,
                                   highest=OFFSET_FOR_LEADER_EPOCH_VERSION, lowest=2)
        found: dict[TopicPartition, Any] = {}
        for t in answer.topics:
            for p in t.partitions:
                code = _code(p.error_code)
                if code in _RETRY_AT_LEADER:
                    continue
                if code != ErrorCode.NONE:
                    raise KafkaError(code, f"OffsetForLeaderEpoch {t.topic}-{p.partition}")
                found[TopicPartition(t.topic, p.partition)] = int(p.end_offset)
        return found

    return await _at_leaders(client, epochs, ask, "OffsetForLeaderEpoch")


async def leader_epochs_for_partition(client: NetworkClient, partitions: Iterable[TopicPartition]
                                      ) -> dict[TopicPartition, dict[int, int]]:
    """LeaderEpochsForPartition (key 1001) at any broker: for each partition, its prior
    partitions' leader epochs when it was created (empty for a topic's original partitions).

    Raises KafkaError(UNSUPPORTED_VERSION) when the broker does not offer the API.
    """
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return {}
    request = _LeaderEpochs(topics=[
        _LeaderEpochs.LeaderEpochsForPartitionRequestTopic(topic=t, partitions=p)
        for t, p in by_topic.items()])
    answer = await client.call(None, ApiKey.LEADER_EPOCHS_FOR_PARTITION, request,
                               highest=LEADER_EPOCHS_FOR_PARTITION_VERSION)
    out: dict[TopicPartition, dict[int, int]] = {}
    for t in answer.topics:
        for p in t.partitions:
            code = _code(p.error_code)
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"LeaderEpochsForPartition {t.topic}-{p.partition}")
            out[TopicPartition(t.topic, p.partition)] = {
                e.partition: e.leader_epoch for e in p.prior_leader_epochs}
    return out
