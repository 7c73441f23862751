"""Read planning: offset ranges of topic-partitions -> read tasks, one Spark input partition each.

Plays the part of Spark's `KafkaOffsetRangeCalculator`. Planning is pure and runs on the driver:
a `ReplicaLocator` first says where each range can be read (the partition leader, or with
partition chunks (seed 000) a replica of each inactive chunk the range crosses: `ChunkLocator`),
then `plan_read_tasks` splits the located pieces for `minPartitions` / `maxRecordsPerPartition`.
One task per chunk piece means the chunks of a partition are read from their replicas in
parallel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ReplicaLocation:
    """A broker that can serve a range: its node id and the address a consumer connects to."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets [start_offset, end_offset) of one topic-partition; end is exclusive, as in Kafka."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int

    @property
    def size(self) -> int:
        return max(0, self.end_offset - self.start_offset)


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One Spark input partition: read [start_offset, end_offset) of a topic-partition from
    `replica` (None: wherever the partition's leader is when the task runs). Picklable."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    replica: ReplicaLocation | None = None

    @property
    def size(self) -> int:
        return max(0, self.end_offset - self.start_offset)


class ReplicaLocator(Protocol):
    """Where ranges can be read. Returns pieces that exactly cover the range, in offset order."""

    def locate(self, offset_range: PartitionRange) -> list[ReadTask]: ...


class LeaderLocator:
    """Reads every range whole from its partition's current leader (classic partitions)."""

    def __init__(self, leaders: Mapping[tuple[str, int], ReplicaLocation | None]) -> None:
        self._leaders = leaders

    def locate(self, offset_range: PartitionRange) -> list[ReadTask]:
        replica = self._leaders.get((offset_range.topic, offset_range.partition))
        return [ReadTask(offset_range.topic, offset_range.partition, offset_range.start_offset,
                         offset_range.end_offset, replica)]


@dataclass(frozen=True, slots=True)
class ChunkPiece:
    """Offsets [start_offset, end_offset) of an inactive chunk's readable range, and the replica
    chosen to read them from (None: none is live; the leader sends readers on)."""

    start_offset: int
    end_offset: int
    replica: ReplicaLocation | None


class ChunkLocator:
    """Cuts each range at the partition's chunk boundaries: a piece inside an inactive chunk
    is read from the replica chosen for it, the rest from the leader."""

    def __init__(self, leaders: Mapping[tuple[str, int], ReplicaLocation | None],
                 chunks: Mapping[tuple[str, int], list[ChunkPiece]]) -> None:
        self._leaders = leaders
        self._chunks = chunks

    def locate(self, offset_range: PartitionRange) -> list[ReadTask]:
        key = (offset_range.topic, offset_range.partition)
        pieces: list[ReadTask] = []
        start = offset_range.start_offset
        for chunk in sorted(self._chunks.get(key, ()), key=lambda c: c.start_offset):
            low, high = max(start, chunk.start_offset), min(offset_range.end_offset,
                                                            chunk.end_offset)
            if low < high:
                if low > start:  # a gap before the chunk: the leader answers for it
                    pieces.append(ReadTask(*key, start, low, self._leaders.get(key)))
                pieces.append(ReadTask(*key, low, high, chunk.replica))
                start = high
        if start < offset_range.end_offset:
            pieces.append(ReadTask(*key, start, offset_range.end_offset, self._leaders.get(key)))
        return pieces


def plan_read_tasks(ranges: Iterable[PartitionRange], locator: ReplicaLocator,
                    min_partitions: int | None = None,
                    max_records_per_partition: int | None = None) -> list[ReadTask]:
    """Read tasks covering every non-empty range, in (topic, partition, offset) order.

    Without options there is one task per located piece. With `min_partitions` larger than the
    piece count, pieces are cut in proportion to their size so there are at least that many tasks;
    with `max_records_per_partition` no task holds more records than that.
    """
    pieces = [piece
              for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start_offset))
              if r.size > 0
              for piece in locator.locate(r) if piece.size > 0]
    total = sum(p.size for p in pieces)
    split_for_min = min_partitions is not None and len(pieces) < min_partitions and total > 0
    tasks: list[ReadTask] = []
    for piece in pieces:
        parts = 1
        if split_for_min:
            assert min_partitions is not None
            parts = math.ceil(piece.size * min_partitions / total)
        if max_records_per_partition is not None:
            parts = max(parts, math.ceil(piece.size / max_records_per_partition))
        tasks += split_task(piece, parts)
    return tasks


def split_task(task: ReadTask, parts: int) -> list[ReadTask]:
    """Cut a task into `parts` contiguous tasks whose sizes differ by at most one record."""
    parts = max(1, min(parts, task.size))
    base, extra = divmod(task.size, parts)
    result = []
    start = task.start_offset
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        result.append(ReadTask(task.topic, task.partition, start, end, task.replica))
        start = end
    return result


def rate_limit(start: Mapping[tuple[str, int], int], latest: Mapping[tuple[str, int], int],
               max_offsets: int) -> dict[tuple[str, int], int]:
    """End offsets of one micro-batch of about `max_offsets` records at most (maxOffsetsPerTrigger).

    The budget is shared in proportion to each partition's backlog; a partition whose share is
    under one record still gets one, so a small backlog is never starved.
    """
    backlog = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    ends: dict[tuple[str, int], int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        # Spark's order of operations (limit * (size / total)), so the rounding, and with it the
        # checkpointed end offsets, are the same as Spark's Kafka source computes.
        share = max_offsets * (backlog[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        ends[tp] = min(end, begin + step)
    return ends
