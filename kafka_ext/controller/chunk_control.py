"""Chunks (seed 000) in the controller, as pure functions of the image: the records of
CreateChunks and AlterChunkAssignments, with the proposal's refusals.

CreateChunks closes the active chunk of a partition and opens a new one on other replicas, in
one atomic batch: a ChunkRecord for the closed chunk (its replicas and ISR are the partition's,
its offsets the ones its leader gave: read up to `stop`, holding up to `end`) and a
PartitionChangeRecord moving the partition to the new replicas, all in sync (they start empty at
the new start offset: there is nothing they lack), led by the first of them, in a new leader
epoch. No data is copied but the closed chunk's open-transaction tail, [stop + 1, end], which the
new leader fetches before it takes writes (replication/chunk_filler.py).

AlterChunkAssignments moves an inactive chunk's replicas as a reassignment does: the targets not
yet replicas are added (they copy the chunk from one that holds it) and join the ISR when they
have it all; the replicas left out are removed only then (`chunk_replica_caught_up`), so a
chunk is never without a whole copy. An empty target list removes the chunk outright (what a
replica asks when retention deleted the whole chunk everywhere; issue 15 item 5).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import UNASSIGNED_DIR, ChunkImage, PartitionImage, TopicImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry


@dataclass(frozen=True, slots=True)
class ChunkCreation:
    """One CreateChunks entry as the partition leader filled it in."""

    topic: str
    partition: int
    brokers: tuple[int, ...]
    start_offset: int
    start_timestamp: int
    prev_stop_offset: int
    prev_end_offset: int
    prev_max_timestamp: int = -1
    prev_size_bytes: int = -1


@dataclass(frozen=True, slots=True)
class ChunkChange:
    """One AlterChunkAssignments entry: a move to `brokers`, or a replica's report."""

    topic: str
    partition: int
    start_offset: int
    chunk_epoch: int = -1
    brokers: tuple[int, ...] = ()
    caught_up_replica: int = -1  # a replica being added holds all of the chunk now
    removed_replica: int = -1  # a replica whose copy retention deleted


def chunk_change_records(topic: TopicImage, part: PartitionImage, change: ChunkChange,
                         registered: set[int]) -> list[Any]:
    """The records of one AlterChunkAssignments entry (a replica's report or a move)."""
    if change.caught_up_replica >= 0 or change.removed_replica >= 0:
        chunk = part.chunk_starting_at(change.start_offset)
        if chunk is None:
            raise KafkaError(ErrorCode.CHUNK_NOT_FOUND,
                             f"{topic.name}-{part.partition_id} has no inactive chunk starting "
                             f"at {change.start_offset}")
        if change.caught_up_replica >= 0:
            return chunk_replica_caught_up(topic.topic_id, part.partition_id, chunk,
                                           change.caught_up_replica)
        return drop_chunk_replica(topic.topic_id, part.partition_id, chunk,
                                  change.removed_replica)
    return alter_chunk_records(topic, part, change.start_offset, change.chunk_epoch,
                               change.brokers, registered)


def _record(name: str, **fields: Any) -> Any:
    return registry()[name].cls(**fields)


def _check_replicas(part: PartitionImage, brokers: tuple[int, ...],
                    registered: set[int]) -> None:
    """The proposal's rules for a chunk's replicas: as many as the partition has, distinct,
    each a registered broker."""
    if len(brokers) != len(part.replicas):
        raise KafkaError(ErrorCode.INVALID_CHUNK_ASSIGNMENT,
                         f"{len(brokers)} replicas given; the partition has "
                         f"{len(part.replicas)}")
    if len(set(brokers)) != len(brokers):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"duplicate broker in {list(brokers)}")
    unknown = [b for b in brokers if b not in registered]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"no broker {unknown[0]} is registered")


def create_chunk_records(topic: TopicImage, part: PartitionImage, creation: ChunkCreation,
                         registered: set[int]) -> list[Any]:
    """The ChunkRecord closing the active chunk and the PartitionChangeRecord opening the next
    one where its leader said, on the brokers asked for; KafkaError with the refusal
    otherwise."""
    brokers, start_offset = creation.brokers, creation.start_offset
    prev_stop_offset, prev_end_offset = creation.prev_stop_offset, creation.prev_end_offset
    closed = part.chunks[-1] if part.chunks else None
    if (closed is not None and part.start_offset == start_offset and part.replicas == brokers
            and (closed.stop_offset, closed.end_offset) == (prev_stop_offset, prev_end_offset)):
        # Already done: a leader retries a forwarded CreateChunks whose controller committed
        # it and died before answering.
        return []
    if part.is_diskless:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a diskless partition has no chunks")
    if part.is_reassigning:
        raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                         "the partition is being reassigned")
    _check_replicas(part, brokers, registered)
    active_start = max(part.start_offset, 0)
    if not active_start <= prev_stop_offset + 1 == start_offset <= prev_end_offset + 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"offsets out of order: the active chunk starts at {active_start}, "
                         f"stop {prev_stop_offset}, end {prev_end_offset}, next start "
                         f"{start_offset}")
    if start_offset == active_start:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "the active chunk holds no readable record yet: nothing to close")
    closed = _record(
        "ChunkRecord", topic_id=topic.topic_id, partition_id=part.partition_id,
        start_offset=active_start, start_timestamp=part.start_timestamp,
        stop_offset=prev_stop_offset, end_offset=prev_end_offset, chunk_epoch=0,
        replicas=list(part.replicas), directories=list(part.directories), isr=list(part.isr),
        removing_replicas=[], adding_replicas=[], epoch=part.partition_epoch,
        max_timestamp=creation.prev_max_timestamp, size_bytes=creation.prev_size_bytes)
    opened = _record(
        "PartitionChangeRecord", topic_id=topic.topic_id, partition_id=part.partition_id,
        replicas=list(brokers), isr=list(brokers), leader=brokers[0],
        directories=[UNASSIGNED_DIR] * len(brokers), start_offset=start_offset,
        start_timestamp=creation.start_timestamp)
    if part.elr or part.last_known_elr:  # the new chunk's replicas are all in sync
        opened.eligible_leader_replicas, opened.last_known_elr = [], []
    return [closed, opened]


def alter_chunk_records(topic: TopicImage, part: PartitionImage, start_offset: int,
                        chunk_epoch: int, brokers: tuple[int, ...],
                        registered: set[int]) -> list[Any]:
    """The ChunkChangeRecord starting the move of a chunk's replicas to `brokers` (no
    record when they already are its replicas)."""
    chunk = part.chunk_starting_at(start_offset)
    if chunk is None:
        raise KafkaError(ErrorCode.CHUNK_NOT_FOUND,
                         f"{topic.name}-{part.partition_id} has no inactive chunk starting at "
                         f"{start_offset}")
    if chunk_epoch >= 0 and chunk_epoch != chunk.chunk_epoch:
        raise KafkaError(ErrorCode.INVALID_CHUNK_ASSIGNMENT,
                         f"chunk epoch {chunk_epoch} given; the chunk is at "
                         f"{chunk.chunk_epoch}")
    _check_replicas(part, brokers, registered)
    if chunk.adding_replicas or chunk.removing_replicas:
        raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                         "the chunk's replicas are already being moved")
    if set(brokers) == set(chunk.replicas):
        if brokers == chunk.replicas:
            return []
        return [_change(topic.topic_id, part.partition_id, chunk, replicas=list(brokers),
                        directories=[chunk_dir(chunk, b) for b in brokers])]
    adding = [b for b in brokers if b not in chunk.replicas]
    removing = [r for r in chunk.replicas if r not in brokers]
    replicas = [*brokers, *removing]
    return [_change(topic.topic_id, part.partition_id, chunk, replicas=replicas,
                    directories=[chunk_dir(chunk, b) for b in replicas],
                    adding_replicas=adding, removing_replicas=removing)]


def chunk_replica_caught_up(topic_id: uuid.UUID, partition_id: int, chunk: ChunkImage,
                            broker: int) -> list[Any]:
    """A replica being added now holds the whole chunk: it joins the ISR; when it was the
    last one copying, the move completes and the replicas left out are dropped."""
    if broker not in chunk.adding_replicas:
        return []
    adding = [b for b in chunk.adding_replicas if b != broker]
    isr = [*chunk.isr, broker]
    if adding:
        return [_change(topic_id, partition_id, chunk, isr=isr, adding_replicas=adding)]
    replicas = [r for r in chunk.replicas if r not in chunk.removing_replicas]
    return [_change(topic_id, partition_id, chunk, replicas=replicas,
                    isr=[r for r in isr if r in replicas],
                    directories=[chunk_dir(chunk, r) for r in replicas],
                    adding_replicas=[], removing_replicas=[])]


def drop_chunk_replica(topic_id: uuid.UUID, partition_id: int, chunk: ChunkImage,
                       broker: int) -> list[Any]:
    """A replica whose copy of the chunk is gone (retention deleted all of it) leaves the
    chunk; the last one to leave removes it."""
    if broker not in chunk.replicas:
        return []
    replicas = [r for r in chunk.replicas if r != broker]
    return [_change(topic_id, partition_id, chunk, replicas=replicas,
                    isr=[r for r in chunk.isr if r != broker],
                    directories=[chunk_dir(chunk, r) for r in replicas],
                    adding_replicas=[r for r in chunk.adding_replicas if r != broker],
                    removing_replicas=[r for r in chunk.removing_replicas if r != broker])]


def chunk_dir(chunk: ChunkImage, broker: int) -> uuid.UUID:
    for replica, directory in zip(chunk.replicas, chunk.directories, strict=False):
        if replica == broker:
            return directory
    return UNASSIGNED_DIR


def _change(topic_id: uuid.UUID, partition_id: int, chunk: ChunkImage, **changes: Any) -> Any:
    return _record("ChunkChangeRecord", topic_id=topic_id, partition_id=partition_id,
                   start_offset=chunk.start_offset, epoch=chunk.chunk_epoch + 1, **changes)
