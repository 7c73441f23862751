"""KRaft snapshots of the metadata image (KIP-630): records that rebuild the image, the file
layout, and refusal of damaged files."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from kafka_ext.controller.snapshot import (
    MAX_BATCH_BYTES,
    decode_snapshot,
    delete_snapshot,
    image_records,
    list_snapshots,
    read_snapshot_image,
    snapshot_bytes,
    snapshot_path,
    write_snapshot,
)
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import iter_batch_headers
from kafka_ext.storage.checkpoints import CorruptCheckpointError

TOPICS = ["a", "b", "c", "d"]
DIRS = [uuid.UUID(int=i) for i in range(100, 105)]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


def _record(record_type: str, **values: Any) -> Any:
    return registry()[record_type].cls(**values)


def replay(records: list[Any]) -> MetadataImage:
    return MetadataImage().apply_all(0, _named(records))


def assert_same_image(got: MetadataImage, want: MetadataImage) -> None:
    for f in fields(MetadataImage):
        if f.name != "offset":
            assert getattr(got, f.name) == getattr(want, f.name), f.name


# -- random histories of metadata operations ---------------------------------------------------

partitions = st.lists(st.fixed_dictionaries({
    "replicas": st.lists(st.integers(0, 3), unique=True, max_size=3),
    "isr": st.lists(st.integers(0, 3), unique=True, max_size=3),
    "leader": st.integers(-1, 3),
    "leader_epoch": st.integers(0, 2**20),  # int32 on the wire, with room to grow
    "partition_epoch": st.integers(0, 2**20),
    "diskless_coordinator": st.integers(-1, 3),
}), min_size=1, max_size=4)
config_names = st.sampled_from(["retention.ms", "cleanup.policy", "x"])
operations = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(TOPICS), partitions,
              st.dictionaries(config_names, TEXT, max_size=2)),
    st.tuples(st.just("delete"), st.integers(0, 10)),
    st.tuples(st.just("change_partition"), st.integers(0, 10), st.integers(0, 10),
              st.none() | st.lists(st.integers(0, 3), unique=True, max_size=3),
              st.none() | st.lists(st.integers(0, 3), unique=True, max_size=3),
              st.integers(-2, 3)),
    # Chunks (seed 000): a new active chunk closing the old one, a chunk's new replicas
    # (none: the chunk is gone).
    st.tuples(st.just("create_chunk"), st.integers(0, 10), st.integers(0, 10),
              st.integers(0, 2**40), st.lists(st.integers(0, 3), unique=True, max_size=3)),
    st.tuples(st.just("alter_chunk"), st.integers(0, 10), st.integers(0, 10), st.integers(0, 5),
              st.lists(st.integers(0, 3), unique=True, max_size=3)),
    st.tuples(st.just("config"), st.sampled_from([TOPIC_RESOURCE, BROKER_RESOURCE, 8]),
              st.sampled_from(["", *TOPICS, "1", "2"]), config_names, st.none() | TEXT),
    st.tuples(st.just("quota"),
              st.dictionaries(st.sampled_from(["user", "client-id", "ip"]), st.none() | TEXT,
                              max_size=2),
              st.sampled_from(["producer_byte_rate", "request_percentage"]),
              st.floats(allow_nan=False), st.booleans()),
    st.tuples(st.just("producer_ids"), st.integers(0, 2**62)),
    st.tuples(st.just("log_dirs"),
              st.sampled_from(["RegisterBrokerRecord", "BrokerRegistrationChangeRecord"]),
              st.integers(0, 3), st.lists(st.sampled_from(DIRS), unique=True)),
    st.tuples(st.just("feature"), st.sampled_from(["metadata.version", "group.version",
                                                   "transaction.version"]),
              st.integers(0, 25)),
)


def _records_of(image: MetadataImage, op: tuple[Any, ...], topic_ids: Iterator[int]) -> list[Any]:
    """The records the controller would write for op, given the image before it."""
    kind, *args = op
    topics = sorted(image.topics_by_id.values(), key=lambda t: t.name)
    if kind == "create":
        name, parts, configs = args
        if name in image.topics_by_name:
            return []
        topic_id = uuid.UUID(int=next(topic_ids))
        return [_record("TopicRecord", name=name, topic_id=topic_id),
                *(_record("PartitionRecord", partition_id=i, topic_id=topic_id, **p)
                  for i, p in enumerate(parts)),
                *(_record("ConfigRecord", resource_type=TOPIC_RESOURCE, resource_name=name,
                          name=k, value=v) for k, v in configs.items())]
    if kind == "delete":
        return [_record("RemoveTopicRecord", topic_id=topics[args[0] % len(topics)].topic_id)
                ] if topics else []
    if kind == "change_partition":
        if not topics:
            return []
        topic = topics[args[0] % len(topics)]
        partition_id = sorted(topic.partitions)[args[1] % len(topic.partitions)]
        return [_record("PartitionChangeRecord", topic_id=topic.topic_id,
                        partition_id=partition_id, isr=args[2], replicas=args[3],
                        leader=args[4])]
    if kind in ("create_chunk", "alter_chunk"):
        if not topics:
            return []
        topic = topics[args[0] % len(topics)]
        partition_id = sorted(topic.partitions)[args[1] % len(topic.partitions)]
        part = topic.partitions[partition_id]
        if kind == "create_chunk":
            start = max(part.start_offset, 0)
            new_start = start + args[2]
            return [_record("ChunkRecord", topic_id=topic.topic_id, partition_id=partition_id,
                            start_offset=start, start_timestamp=start * 10,
                            stop_offset=new_start - 1, end_offset=new_start + 1, chunk_epoch=0,
                            replicas=list(part.replicas), directories=[], isr=list(part.isr),
                            removing_replicas=[], adding_replicas=[],
                            epoch=part.partition_epoch),
                    _record("PartitionChangeRecord", topic_id=topic.topic_id,
                            partition_id=partition_id, replicas=args[3], isr=args[3],
                            leader=args[3][0] if args[3] else -1, start_offset=new_start,
                            start_timestamp=new_start * 10)]
        if not part.chunks:
            return []
        chunk = part.chunks[args[2] % len(part.chunks)]
        return [_record("ChunkChangeRecord", topic_id=topic.topic_id, partition_id=partition_id,
                        start_offset=chunk.start_offset, replicas=args[3],
                        isr=args[3][:1], epoch=chunk.chunk_epoch + 1)]
    if kind == "config":
        rtype, rname, name, value = args
        return [_record("ConfigRecord", resource_type=rtype, resource_name=rname, name=name,
                        value=value)]
    if kind == "quota":
        entity, key, value, remove = args
        entity_cls = registry()["ClientQuotaRecord"].cls.EntityData
        return [_record("ClientQuotaRecord", key=key, value=value, remove=remove, entity=[
            entity_cls(entity_type=t, entity_name=n) for t, n in entity.items()])]
    if kind == "producer_ids":
        return [_record("ProducerIdsRecord", broker_id=1, broker_epoch=0,
                        next_producer_id=args[0])]
    if kind == "log_dirs":
        record_type, broker, dirs = args
        return [_record(record_type, broker_id=broker, broker_epoch=0, log_dirs=dirs)]
    name, level = args
    return [_record("FeatureLevelRecord", name=name, feature_level=level)]


def build_image(batches: list[list[tuple[Any, ...]]]) -> MetadataImage:
    """Apply each batch of operations in one apply_all, as one committed metadata batch."""
    image = MetadataImage()
    topic_ids = iter(range(1, 10**6))
    for batch in batches:
        records: list[Any] = []
        seen = image  # what the controller sees: the image with this batch's records so far
        for op in batch:
            new = _records_of(seen, op, topic_ids)
            seen = seen.apply_all(0, _named(new))
            records += new
        if records:
            image = image.apply_all(image.offset + 1, _named(records))
    return image


def _named(records: list[Any]) -> list[tuple[str, Any]]:
    return [(type(r).__name__, r) for r in records]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(operations, min_size=1, max_size=4), max_size=12))
def test_image_records_replay_to_the_same_image(batches: list[list[tuple[Any, ...]]]) -> None:
    image = build_image(batches)
    rebuilt = replay(image_records(image))
    assert_same_image(rebuilt, image)
    # The records depend on the image only, so the rebuilt image writes the same bytes.
    assert (snapshot_bytes(image_records(rebuilt), last_contained_log_time_ms=7)
            == snapshot_bytes(image_records(image), last_contained_log_time_ms=7))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.lists(operations, min_size=1, max_size=4), max_size=12))
def test_snapshot_file_reads_back_as_the_image_at_end_offset_minus_one(
        tmp_path: Path, batches: list[list[tuple[Any, ...]]]) -> None:
    image = build_image(batches)
    end_offset = image.offset + 1
    path = write_snapshot(tmp_path, end_offset, 3, image, last_contained_log_time_ms=1234)
    assert path == tmp_path / f"{end_offset:020d}-{3:010d}.checkpoint"
    got = read_snapshot_image(path)
    assert got.offset == end_offset - 1
    assert_same_image(got, image)


# -- fixed images ----------------------------------------------------------------------------


def _small_image() -> MetadataImage:
    return build_image([[("feature", "group.version", 1), ("feature", "metadata.version", 25),
                         ("create", "a", [{"replicas": [1, 2], "isr": [1], "leader": 1,
                                           "leader_epoch": 4, "partition_epoch": 5,
                                           "diskless_coordinator": 2}], {"retention.ms": "9"}),
                         ("config", BROKER_RESOURCE, "", "x", "1"),
                         ("quota", {"user": None}, "producer_byte_rate", 1e6, False),
                         ("producer_ids", 2000),
                         ("log_dirs", "RegisterBrokerRecord", 1, DIRS[:3])],
                        [("log_dirs", "BrokerRegistrationChangeRecord", 1, [DIRS[2]])]])


def test_metadata_version_is_written_first_then_features_by_name() -> None:
    records = image_records(_small_image())
    assert [(r.name, r.feature_level) for r in records[:2]] == [
        ("metadata.version", 25), ("group.version", 1)]


def test_offline_log_dirs_are_rebuilt_from_two_registrations() -> None:
    image = _small_image()
    assert image.broker_log_dirs[1] == (DIRS[2],)
    assert image.offline_log_dirs[1] == (DIRS[0], DIRS[1])
    assert_same_image(replay(image_records(image)), image)


def test_a_resource_whose_configs_were_all_deleted_is_rebuilt_empty() -> None:
    image = build_image([[("config", BROKER_RESOURCE, "1", "x", "5")],
                         [("config", BROKER_RESOURCE, "1", "x", None)]])
    assert image.configs == {(BROKER_RESOURCE, "1"): {}}
    assert replay(image_records(image)).configs == image.configs


def test_topics_disagreeing_by_name_and_id_are_refused() -> None:
    image = replay([_record("TopicRecord", name="a", topic_id=uuid.UUID(int=1)),
                    _record("TopicRecord", name="a", topic_id=uuid.UUID(int=2))])
    with pytest.raises(ValueError, match=r"disagree on \['a'\]"):
        image_records(image)


def test_equal_images_from_different_histories_give_identical_files(tmp_path: Path) -> None:
    first = build_image([[("config", BROKER_RESOURCE, "1", "x", "1"),
                          ("config", BROKER_RESOURCE, "2", "y", "2"),
                          ("quota", {"user": "u", "client-id": None}, "request_percentage",
                           50.0, False)],
                         [("producer_ids", 10), ("producer_ids", 20)]])
    second = build_image([[("producer_ids", 20),
                           ("quota", {"client-id": None, "user": "u"}, "request_percentage",
                            10.0, False)],
                          [("config", BROKER_RESOURCE, "2", "y", "2"),
                           ("quota", {"user": "u", "client-id": None}, "request_percentage",
                            50.0, False),
                           ("config", BROKER_RESOURCE, "1", "x", "1")]])
    assert_same_image(first, second)
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    a = write_snapshot(tmp_path / "1", 5, 1, first, last_contained_log_time_ms=99)
    b = write_snapshot(tmp_path / "2", 5, 1, second, last_contained_log_time_ms=99)
    assert a.read_bytes() == b.read_bytes()


def test_large_images_are_split_into_batches_of_at_most_a_mebibyte(tmp_path: Path) -> None:
    big = "v" * 100_000
    image = build_image([[("config", BROKER_RESOURCE, str(i), "x", big) for i in range(30)]])
    data = write_snapshot(tmp_path, 31, 2, image, last_contained_log_time_ms=0).read_bytes()
    sizes = [header.size_bytes for _, header in iter_batch_headers(data)]
    assert len(sizes) >= 2 + 3 and max(sizes) <= MAX_BATCH_BYTES
    assert sum(sizes) == len(data)
    assert_same_image(read_snapshot_image(snapshot_path(tmp_path, 31, 2)), image)


def test_snapshot_opens_with_header_and_ends_with_footer_at_consecutive_offsets() -> None:
    data = snapshot_bytes(image_records(_small_image()), last_contained_log_time_ms=42,
                          partition_leader_epoch=6, max_batch_bytes=200)
    headers = [header for _, header in iter_batch_headers(data)]
    assert headers[0].is_control and headers[-1].is_control and len(headers) > 3
    assert [h.base_offset for h in headers[1:]] == [h.next_offset for h in headers[:-1]]
    assert {h.partition_leader_epoch for h in headers} == {6}
    controls, records = decode_snapshot(data)
    assert controls["SnapshotHeaderRecord"].last_contained_log_timestamp == 42
    assert len(records) == len(image_records(_small_image()))


def test_truncated_or_flipped_snapshot_files_are_refused_naming_the_file(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, 10, 1, _small_image(), last_contained_log_time_ms=5,
                          max_batch_bytes=300)
    data = path.read_bytes()
    damaged = [data[:cut] for cut in range(len(data))]
    damaged += [data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:] for i in range(len(data))]
    damaged.append(data + data[:20])  # a torn batch after the footer
    for content in damaged:
        path.write_bytes(content)
        with pytest.raises(CorruptCheckpointError, match=re.escape(str(path))):
            read_snapshot_image(path)


def test_a_snapshot_of_another_epoch_is_refused(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, 10, 1, _small_image(), last_contained_log_time_ms=5)
    moved = path.rename(snapshot_path(tmp_path, 10, 2))
    with pytest.raises(CorruptCheckpointError, match="partition leader epoch 1, not 2"):
        read_snapshot_image(moved)


def test_list_snapshots_ignores_and_removes_partial_leftovers(tmp_path: Path) -> None:
    image = _small_image()
    write_snapshot(tmp_path, 30, 2, image, last_contained_log_time_ms=0)
    write_snapshot(tmp_path, 8, 1, image, last_contained_log_time_ms=0)
    leftovers = [tmp_path / "00000000000000000040-0000000002.checkpoint.part",
                 tmp_path / "00000000000000000020-0000000001.checkpoint.deleted"]
    for leftover in leftovers:
        leftover.write_bytes(b"half a snapshot")
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n0\n")
    assert list_snapshots(tmp_path) == [(8, 1), (30, 2)]
    assert not any(p.exists() for p in leftovers)
    assert (tmp_path / "leader-epoch-checkpoint").exists()
    assert list_snapshots(tmp_path / "missing") == []


def test_delete_snapshot_removes_only_that_snapshot(tmp_path: Path) -> None:
    image = _small_image()
    write_snapshot(tmp_path, 8, 1, image, last_contained_log_time_ms=0)
    write_snapshot(tmp_path, 30, 2, image, last_contained_log_time_ms=0)
    assert delete_snapshot(tmp_path, 8, 1)
    assert not delete_snapshot(tmp_path, 8, 1)
    assert list_snapshots(tmp_path) == [(30, 2)]
