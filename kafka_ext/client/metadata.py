"""The cluster as our client sees it: brokers, topics, partitions and their modes.

Mirrors Kafka's `Cluster`/`PartitionInfo`, built from one Metadata response. Pure: the
network client fetches, this module only reads. A partition's `mode` is partition reduction's
tagged field (seed 002): ReadWrite partitions take writes, ReadOnly ones are read but not
written, None ones are neither (docs/protocol.md, "Our tagged fields").
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from kafka_ext.protocol.errors import ErrorCode


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class PartitionMode(IntEnum):
    """Partition reduction's modes (the schema's numbering, DESIGN.md §5)."""

    READ_WRITE = 0
    READ_ONLY = 1
    NONE = -1


def mode_of(value: int) -> PartitionMode:
    """A wire mode; an unknown value reads as None (neither written nor read), the safe side."""
    try:
        return PartitionMode(value)
    except ValueError:
        return PartitionMode.NONE


@dataclass(slots=True, frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True, frozen=True)
class ChunkMetadata:
    """An inactive chunk of a partition (seed 000, Metadata's tagged Chunks): offsets
    [start_offset, stop_offset] are read from any of its in-sync replicas, never the leader."""

    start_offset: int
    start_timestamp: int
    stop_offset: int
    end_offset: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    chunk_epoch: int = -1


@dataclass(slots=True, frozen=True)
class PartitionMetadata:
    """One partition of a Metadata response; `leader` is -1 while there is none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = ErrorCode.NONE
    mode: PartitionMode = PartitionMode.READ_WRITE
    # Chunks (seed 000): where the active chunk starts (-1: no chunks) and the inactive ones.
    start_offset: int = -1
    chunks: tuple[ChunkMetadata, ...] = ()

    def chunk_at(self, offset: int) -> ChunkMetadata | None:
        """The inactive chunk a reader at `offset` reads from; None: the active chunk."""
        if self.start_offset < 0 or offset >= self.start_offset:
            return None
        return next((c for c in self.chunks if c.start_offset <= offset <= c.stop_offset),
                    None)

    @property
    def writable(self) -> bool:
        """A producer may choose it (partition reduction: only ReadWrite)."""
        return self.mode == PartitionMode.READ_WRITE

    @property
    def readable(self) -> bool:
        """A consumer may read it (partition reduction: all but None)."""
        return self.mode != PartitionMode.NONE


@dataclass(slots=True, frozen=True)
class TopicMetadata:
    """A topic and its partitions by index; `error` is the topic-level code."""

    name: str
    partitions: dict[int, PartitionMetadata]
    error: ErrorCode = ErrorCode.NONE
    is_internal: bool = False
    topic_id: Any = None
    # Computed once: the producer asks for every record it places.
    _writable: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_writable", tuple(sorted(
            p for p, info in self.partitions.items() if info.writable)))

    @property
    def partition_count(self) -> int:
        """Every partition the broker lists, whatever its mode: KIP-253's count (what the
        broker compares Produce's PartitionNumber with)."""
        return len(self.partitions)

    @property
    def writable_partitions(self) -> tuple[int, ...]:
        """Indexes a producer may choose, ascending."""
        return self._writable

    @property
    def readable_partitions(self) -> list[int]:
        """Indexes a consumer may read, ascending (None partitions are skipped)."""
        return sorted(p for p, info in self.partitions.items() if info.readable)


@dataclass(slots=True, frozen=True)
class ClusterMetadata:
    """One snapshot of the cluster; replaced whole on every refresh, never changed."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def leader_of(self, tp: TopicPartition) -> int:
        """The leader's node id, or -1 when unknown or leaderless."""
        info = self.partition(tp)
        return -1 if info is None else info.leader

    def read_node_of(self, tp: TopicPartition, offset: int) -> int:
        """Where a consumer at `offset` fetches: the leader, or for an offset of an inactive
        chunk (seed 000) one of its in-sync replicas the metadata lists as a live broker,
        chosen by a hash of the chunk as the brokers choose (server/fetch.py
        chunk_read_replica), so readers of a chunk spread over partitions and stay put.
        -1 when there is none."""
        info = self.partition(tp)
        if info is None:
            return -1
        chunk = info.chunk_at(offset)
        if chunk is None:
            return info.leader
        live = [r for r in chunk.isr if r in self.brokers]
        if not live:
            return -1
        key = f"{tp.topic}-{tp.partition}@{chunk.start_offset}".encode()
        return live[zlib.crc32(key) % len(live)]

    def merged(self, newer: ClusterMetadata, topics_asked: frozenset[str] | None
               ) -> ClusterMetadata:
        """`newer` plus the topics of this snapshot that the refresh did not ask about."""
        if topics_asked is None:
            return newer
        kept = {name: t for name, t in self.topics.items() if name not in topics_asked}
        kept.update(newer.topics)
        return ClusterMetadata(newer.brokers, kept, newer.controller_id, newer.cluster_id)


def cluster_from_response(response: Any) -> ClusterMetadata:
    """Build a snapshot from a decoded MetadataResponse (any version)."""
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack)
               for b in response.brokers}
    topics: dict[str, TopicMetadata] = {}
    for t in response.topics:
        if t.name is None:
            continue
        partitions = {
            p.partition_index: PartitionMetadata(
                topic=t.name, partition=p.partition_index, leader=p.leader_id,
                leader_epoch=p.leader_epoch, replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes), error=_code(p.error_code), mode=mode_of(p.mode),
                start_offset=p.start_offset, chunks=tuple(
                    ChunkMetadata(c.start_offset, c.start_timestamp, c.stop_offset,
                                  c.end_offset, tuple(c.replica_nodes), tuple(c.isr_nodes),
                                  c.chunk_epoch) for c in p.chunks or ()))
            for p in t.partitions}
        topics[t.name] = TopicMetadata(t.name, partitions, _code(t.error_code), t.is_internal,
                                       t.topic_id)
    return ClusterMetadata(brokers, topics, response.controller_id, response.cluster_id)


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
