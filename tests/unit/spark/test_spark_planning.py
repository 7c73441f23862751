"""Read planning of the `kafka-ext` Spark source: ranges -> read tasks, rate limits, offset JSON."""

from __future__ import annotations

import pickle
import pkgutil

import pyarrow as pa
import pytest

from kafka_ext.spark.offsets import offsets_from_json, offsets_to_json
from kafka_ext.spark.planning import (
    ChunkLocator,
    ChunkPiece,
    LeaderLocator,
    PartitionRange,
    ReadTask,
    ReplicaLocation,
    plan_read_tasks,
    rate_limit,
    split_task,
)

LEADER = ReplicaLocation(1, "127.0.0.1", 9092)


def locator(*ranges: PartitionRange) -> LeaderLocator:
    return LeaderLocator({(r.topic, r.partition): LEADER for r in ranges})


def spans(tasks: list[ReadTask]) -> list[tuple[str, int, int, int]]:
    return [(t.topic, t.partition, t.start_offset, t.end_offset) for t in tasks]


def test_one_task_per_partition_range_in_order() -> None:
    ranges = [PartitionRange("b", 0, 0, 10), PartitionRange("a", 1, 5, 6),
              PartitionRange("a", 0, 0, 100)]
    tasks = plan_read_tasks(ranges, locator(*ranges))
    assert spans(tasks) == [("a", 0, 0, 100), ("a", 1, 5, 6), ("b", 0, 0, 10)]
    assert all(t.replica == LEADER for t in tasks)


def test_empty_ranges_get_no_task() -> None:
    ranges = [PartitionRange("a", 0, 7, 7), PartitionRange("a", 1, 0, 3)]
    assert spans(plan_read_tasks(ranges, locator(*ranges))) == [("a", 1, 0, 3)]


def test_min_partitions_splits_ranges_in_proportion_to_size() -> None:
    ranges = [PartitionRange("a", 0, 0, 900), PartitionRange("a", 1, 0, 100)]
    tasks = plan_read_tasks(ranges, locator(*ranges), min_partitions=10)
    assert spans(tasks) == [("a", 0, i * 100, (i + 1) * 100) for i in range(9)] + [
        ("a", 1, 0, 100)]


def test_min_partitions_below_range_count_changes_nothing() -> None:
    ranges = [PartitionRange("a", p, 0, 1000) for p in range(4)]
    assert len(plan_read_tasks(ranges, locator(*ranges), min_partitions=3)) == 4


def test_min_partitions_never_makes_empty_tasks() -> None:
    ranges = [PartitionRange("a", 0, 10, 13)]
    assert spans(plan_read_tasks(ranges, locator(*ranges), min_partitions=8)) == [
        ("a", 0, 10, 11), ("a", 0, 11, 12), ("a", 0, 12, 13)]


def test_max_records_per_partition_caps_every_task() -> None:
    ranges = [PartitionRange("a", 0, 0, 1000), PartitionRange("a", 1, 0, 10)]
    tasks = plan_read_tasks(ranges, locator(*ranges), max_records_per_partition=300)
    assert spans(tasks) == [("a", 0, 0, 250), ("a", 0, 250, 500), ("a", 0, 500, 750),
                            ("a", 0, 750, 1000), ("a", 1, 0, 10)]


def test_split_task_covers_range_with_sizes_differing_by_one() -> None:
    parts = split_task(ReadTask("a", 0, 3, 13), 3)
    assert spans(parts) == [("a", 0, 3, 7), ("a", 0, 7, 10), ("a", 0, 10, 13)]


class ChunkLikeLocator:
    """A locator that cuts ranges at a boundary and reads each side from a different replica,
    as the chunk issue's planner will."""

    def locate(self, offset_range: PartitionRange) -> list[ReadTask]:
        cut = 50
        replicas = (ReplicaLocation(2, "h2", 1), ReplicaLocation(3, "h3", 1))
        pieces = []
        if offset_range.start_offset < cut:
            pieces.append(ReadTask(offset_range.topic, offset_range.partition,
                                   offset_range.start_offset, min(cut, offset_range.end_offset),
                                   replicas[0]))
        if offset_range.end_offset > cut:
            pieces.append(ReadTask(offset_range.topic, offset_range.partition,
                                   max(cut, offset_range.start_offset), offset_range.end_offset,
                                   replicas[1]))
        return pieces


def test_planner_keeps_one_task_per_located_piece_and_its_replica() -> None:
    tasks = plan_read_tasks([PartitionRange("a", 0, 20, 80)], ChunkLikeLocator())
    assert [(t.start_offset, t.end_offset, t.replica.node_id if t.replica else None)
            for t in tasks] == [(20, 50, 2), (50, 80, 3)]


def test_read_tasks_pickle() -> None:
    task = ReadTask("a", 0, 1, 2, LEADER)
    assert pickle.loads(pickle.dumps(task)) == task


def test_rate_limit_shares_budget_by_backlog() -> None:
    start = {("a", 0): 0, ("a", 1): 100, ("a", 2): 50}
    latest = {("a", 0): 300, ("a", 1): 200, ("a", 2): 50}
    assert rate_limit(start, latest, 200) == {("a", 0): 150, ("a", 1): 150, ("a", 2): 50}


def test_rate_limit_gives_small_backlogs_one_record() -> None:
    start = {("a", 0): 0, ("a", 1): 0}
    latest = {("a", 0): 10_000, ("a", 1): 1}
    assert rate_limit(start, latest, 100) == {("a", 0): 99, ("a", 1): 1}


def test_rate_limit_rounds_shares_exactly_as_spark() -> None:
    # Spark computes 22 * (30 / 44) = 14.999999999999998 in doubles and floors it to 14.
    start = {("a", 0): 0, ("a", 1): 0}
    latest = {("a", 0): 30, ("a", 1): 14}
    assert rate_limit(start, latest, 22) == {("a", 0): 14, ("a", 1): 7}


def test_rate_limit_under_budget_returns_latest() -> None:
    latest = {("a", 0): 10, ("b", 0): 5}
    assert rate_limit({("a", 0): 0, ("b", 0): 0}, latest, 100) == latest


def test_offsets_json_is_spark_kafka_format() -> None:
    offsets = {("b", 0): 5, ("a", 10): 7, ("a", 2): 3}
    document = offsets_to_json(offsets)
    assert document == {"a": {"2": 3, "10": 7}, "b": {"0": 5}}
    assert offsets_from_json(document) == offsets
    assert offsets_from_json('{"a":{"2":3,"10":7},"b":{"0":5}}') == offsets


def test_arrow_schema_is_what_spark_expects_of_the_source() -> None:
    from kafka_ext.spark.source import arrow_schema, kafka_schema

    schema = arrow_schema(kafka_schema(include_headers=True))
    assert schema.types == [
        pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
        pa.timestamp("us", tz="UTC"), pa.int32(),
        pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
    assert schema.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                            "timestampType", "headers"]


def test_spark_lookup_finds_the_source_without_registration() -> None:
    from pyspark.sql.datasource import DataSource

    assert any(m.name == "pyspark_kafka_ext" for m in pkgutil.iter_modules())
    import pyspark_kafka_ext

    assert issubclass(pyspark_kafka_ext.DefaultSource, DataSource)
    assert pyspark_kafka_ext.DefaultSource.name() == "kafka-ext"


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_split_then_plan_keeps_every_offset_once(parts: int) -> None:
    ranges = [PartitionRange("a", 0, 0, 17), PartitionRange("a", 1, 4, 9)]
    tasks = plan_read_tasks(ranges, locator(*ranges), min_partitions=parts)
    covered = sorted((t.partition, o) for t in tasks for o in range(t.start_offset, t.end_offset))
    assert covered == [(0, o) for o in range(17)] + [(1, o) for o in range(4, 9)]


def test_chunk_locator_cuts_ranges_at_chunk_boundaries() -> None:
    """Partition chunks (seed 000): one piece per inactive chunk a range crosses, read from
    its chosen replica, the rest from the leader; planning then splits pieces as usual."""
    leader = ReplicaLocation(3, "h3", 9093)
    one, two = ReplicaLocation(1, "h1", 9091), ReplicaLocation(2, "h2", 9092)
    locator = ChunkLocator({("t", 0): leader}, {("t", 0): [
        ChunkPiece(10, 20, two), ChunkPiece(0, 10, one)]})
    pieces = locator.locate(PartitionRange("t", 0, 5, 35))
    assert [(p.start_offset, p.end_offset, p.replica) for p in pieces] == [
        (5, 10, one), (10, 20, two), (20, 35, leader)]
    assert [(p.start_offset, p.end_offset) for p in locator.locate(PartitionRange("t", 0, 25, 30))
            ] == [(25, 30)]
    tasks = plan_read_tasks([PartitionRange("t", 0, 0, 30)], locator,
                            max_records_per_partition=6)
    assert [(t.start_offset, t.end_offset, t.replica.node_id if t.replica else None)
            for t in tasks] == [(0, 5, 1), (5, 10, 1), (10, 15, 2), (15, 20, 2), (20, 25, 3),
                                (25, 30, 3)]
