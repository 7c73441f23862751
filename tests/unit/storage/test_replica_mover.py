"""ReplicaMover (KIP-113) in process: real LogManager, real ReplicaManager, real files."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.image import MetadataImage, PartitionImage, TopicImage
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.replication.replica_manager import ReplicaManager
from kafka_ext.storage.log_cleaner import CleanerConfig, LogCleaner
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_manager import DiskUsage, LogManager
from kafka_ext.storage.replica_mover import (
    MIN_CHUNK_BYTES,
    MoveThrottle,
    ReplicaMove,
    ReplicaMover,
)

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
TOPIC_ID = uuid.UUID(int=7)
CONFIG = LogConfig(segment_bytes=4096)
UNLIMITED = 1 << 62


class Jbod:
    """A broker's storage and replica manager over two dirs, with a move rate the test sets."""

    def __init__(self, root: Path, rate: int = UNLIMITED) -> None:
        self.dirs = [(root / "a").resolve(), (root / "b").resolve()]
        self.rate = rate
        self.failures: list[tuple[Path, BaseException]] = []
        self.removed: list[Path] = []
        self.log_manager = LogManager(self.dirs, node_id=1, cluster_id=CLUSTER,
                                      default_config=CONFIG)
        self.log_manager.load()
        self.replicas = ReplicaManager(1, self.log_manager, lambda topic, image: CONFIG,
                                       self.remove)
        self.cleaner = LogCleaner(self.log_manager, CleanerConfig(),
                                  run_blocking=self.run_blocking)
        self.mover = ReplicaMover(self.log_manager, self.replicas, self.run_blocking,
                                  self.remove, lambda: self.rate, 2,
                                  lambda d, exc: self.failures.append((d, exc)),
                                  log_cleaner=self.cleaner)

    async def run_blocking(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    def remove(self, path: Path) -> None:
        self.removed.append(path)
        shutil.rmtree(path)

    def host(self, partitions: int = 1) -> None:
        parts = {p: PartitionImage(p, (1,), (1,), 1, 0, 0) for p in range(partitions)}
        topic = TopicImage("t", TOPIC_ID, parts)
        self.replicas.apply_image(None, MetadataImage(topics_by_name={"t": topic},
                                                      topics_by_id={TOPIC_ID: topic}))

    def dir_of(self, partition: int = 0) -> Path:
        found = self.log_manager.log_dir_of("t", partition)
        assert found is not None
        return found

    def other_dir(self, partition: int = 0) -> Path:
        return next(d for d in self.dirs if d != self.dir_of(partition))


def append(jbod: Jbod, make_batch: Callable[..., bytes], count: int, partition: int = 0) -> None:
    for _ in range(count):
        jbod.replicas.append_records("t", partition, make_batch(5, value_size=40))


def contents(jbod: Jbod, partition: int = 0) -> bytes:
    log = jbod.replicas.partitions[("t", partition)].log
    return b"".join(bytes(v) for v in log.read(0, 1 << 30).records)


async def test_move_copies_segments_swaps_and_removes_the_source(tmp_path: Path,
                                                                  make_batch) -> None:
    jbod = Jbod(tmp_path)
    jbod.host()
    append(jbod, make_batch, 60)
    source_log = jbod.replicas.partitions[("t", 0)].log
    assert len(source_log.segments) > 3  # rolled segments go by copy_file_range
    before, source_dir, dest = contents(jbod), jbod.dir_of(), jbod.other_dir()
    epochs = source_log.leader_epoch_cache.entries
    assert jbod.mover.alter_replica_log_dir("t", 0, str(dest)) == ErrorCode.NONE
    move = jbod.mover.moves[("t", 0)]
    assert (dest / "t-0.move").is_dir()
    await move.done.wait()
    assert move.state == "done" and jbod.dir_of() == dest
    moved = jbod.replicas.partitions[("t", 0)].log
    assert moved.dir == dest / "t-0" and moved.log_end_offset == 300
    assert contents(jbod) == before
    assert moved.leader_epoch_cache.entries == epochs
    assert not (dest / "t-0.move").exists() and not (source_dir / "t-0").exists()
    assert [p.name.startswith("t-0.") and p.name.endswith("-delete") for p in jbod.removed] == [True]
    append(jbod, make_batch, 1)  # the moved log takes appends
    assert moved.log_end_offset == 305 and not jbod.failures


async def test_move_catches_up_with_appends_made_while_it_copies(tmp_path: Path,
                                                                 make_batch) -> None:
    jbod = Jbod(tmp_path, rate=MIN_CHUNK_BYTES * 40)
    jbod.host()
    append(jbod, make_batch, 40)
    dest = jbod.other_dir()
    jbod.mover.alter_replica_log_dir("t", 0, str(dest))
    move = jbod.mover.moves[("t", 0)]
    appended = 0
    while not move.done.is_set():
        if appended < 40:
            append(jbod, make_batch, 1)
            appended += 1
        await asyncio.sleep(0.005)
    assert move.state == "done" and appended > 0
    assert jbod.replicas.partitions[("t", 0)].log.log_end_offset == (40 + appended) * 5
    offsets = [r for r in range(0, (40 + appended) * 5, 5)]
    log = jbod.replicas.partitions[("t", 0)].log
    assert [log.read(o, 1).fetch_offset_metadata.message_offset for o in offsets] == offsets


async def test_any_cancels_the_move_and_removes_the_future_dir(tmp_path: Path,
                                                               make_batch) -> None:
    jbod = Jbod(tmp_path, rate=1)  # one chunk, then a debt of hours: the move stays in progress
    jbod.host()
    append(jbod, make_batch, 40)
    source, dest = jbod.dir_of(), jbod.other_dir()
    jbod.mover.alter_replica_log_dir("t", 0, str(dest))
    move = jbod.mover.moves[("t", 0)]
    while move.copied_bytes == 0:
        await asyncio.sleep(0.005)
    assert jbod.mover.alter_replica_log_dir("t", 0, "any") == ErrorCode.NONE
    await move.done.wait()
    assert move.state == "cancelled" and jbod.dir_of() == source
    assert not (dest / "t-0.move").exists() and ("t", 0) not in jbod.mover.moves


async def test_a_move_pauses_cleaning_of_its_partition_until_it_ends(tmp_path: Path,
                                                                     make_batch) -> None:
    jbod = Jbod(tmp_path, rate=1)  # one chunk, then a debt of hours: the move stays in progress
    jbod.host(partitions=2)
    append(jbod, make_batch, 40)
    dest = jbod.other_dir()
    jbod.mover.alter_replica_log_dir("t", 0, str(dest))
    move = jbod.mover.moves[("t", 0)]
    while move.copied_bytes == 0:
        await asyncio.sleep(0.005)
    assert jbod.cleaner.is_paused(("t", 0)) and not jbod.cleaner.is_paused(("t", 1))
    jbod.mover.alter_replica_log_dir("t", 0, "any")
    await move.done.wait()
    assert not jbod.cleaner.is_paused(("t", 0))
    jbod.rate = UNLIMITED
    jbod.mover.alter_replica_log_dir("t", 0, str(dest))
    await jbod.mover.moves[("t", 0)].done.wait()
    assert jbod.dir_of() == dest and not jbod.cleaner.is_paused(("t", 0))


async def test_copy_of_a_file_that_shrinks_meanwhile_stops_at_its_new_end(
        tmp_path: Path) -> None:
    jbod = Jbod(tmp_path, rate=MIN_CHUNK_BYTES * 4)  # copies go MIN_CHUNK_BYTES at a time
    jbod.host()
    source, target = tmp_path / "source.bin", tmp_path / "target.bin"
    source.write_bytes(b"x" * MIN_CHUNK_BYTES * 3)
    move = ReplicaMove("t", 0, jbod.other_dir(), tmp_path / "unused.move")
    calls = 0

    async def shrinking_after_the_first_chunk(fn: Callable[[], Any]) -> Any:
        nonlocal calls
        result = await jbod.run_blocking(fn)
        calls += 1
        if calls == 3:  # open source, open target, first chunk: then a truncation cuts it
            os.truncate(source, MIN_CHUNK_BYTES + 100)
        return result

    jbod.mover.run_blocking = shrinking_after_the_first_chunk
    # The guard only turns a copy that never ends into a failure.
    assert await asyncio.wait_for(jbod.mover._copy_file(move, source, target), 10)
    assert target.read_bytes() == source.read_bytes()
    assert move.copied_bytes == MIN_CHUNK_BYTES + 100


async def test_requests_for_unknown_dirs_and_unhosted_partitions(tmp_path: Path) -> None:
    jbod = Jbod(tmp_path)
    assert jbod.mover.alter_replica_log_dir("t", 0, "relative/dir") == ErrorCode.LOG_DIR_NOT_FOUND
    assert jbod.mover.alter_replica_log_dir("t", 0, str(tmp_path / "c")) == (
        ErrorCode.LOG_DIR_NOT_FOUND)
    # Not hosted yet: remembered, and the log is created there when the metadata brings it.
    for p in (0, 1):
        assert jbod.mover.alter_replica_log_dir("t", p, str(jbod.dirs[1])) == (
            ErrorCode.REPLICA_NOT_AVAILABLE)
    jbod.host(partitions=2)
    assert jbod.dir_of(0) == jbod.dir_of(1) == jbod.dirs[1]
    assert jbod.mover.alter_replica_log_dir("t", 0, str(jbod.dirs[1])) == ErrorCode.NONE
    assert ("t", 0) not in jbod.mover.moves  # already there


def _crash_layout(tmp_path: Path, make_batch, *, keep_source: bool) -> tuple[Path, Path]:
    """A stopped broker whose t-0 lives in dir a with a copy in b/t-0.move."""
    jbod = Jbod(tmp_path)
    jbod.host()
    append(jbod, make_batch, 20)
    source, dest = jbod.dir_of(), jbod.other_dir()
    jbod.log_manager.close()
    shutil.copytree(source / "t-0", dest / "t-0.move")
    if not keep_source:
        (source / "t-0").rename(source / f"t-0.{uuid.uuid4().hex}-delete")
    return source, dest


async def test_recovery_resumes_a_move_when_both_copies_exist(tmp_path: Path, make_batch) -> None:
    source, dest = _crash_layout(tmp_path, make_batch, keep_source=True)
    jbod = Jbod(tmp_path)
    jbod.mover.recover()
    assert jbod.dir_of() == source  # the source is still the partition
    jbod.host()
    jbod.mover.resume_pending()
    move = jbod.mover.moves[("t", 0)]
    await move.done.wait()
    assert jbod.dir_of() == dest and jbod.replicas.partitions[("t", 0)].log.log_end_offset == 100


async def test_recovery_renames_a_lone_move_dir_when_no_dir_is_offline(tmp_path: Path,
                                                                       make_batch) -> None:
    source, dest = _crash_layout(tmp_path, make_batch, keep_source=False)
    jbod = Jbod(tmp_path)
    assert len(jbod.log_manager.pending_deletions) == 1  # the source, removed asynchronously
    jbod.mover.recover()
    assert jbod.dir_of() == dest and (dest / "t-0").is_dir() and not (dest / "t-0.move").exists()
    assert jbod.log_manager.get_log("t", 0).log_end_offset == 100


def test_recovery_leaves_a_lone_move_dir_alone_when_a_dir_is_offline(tmp_path: Path,
                                                                     make_batch) -> None:
    source, dest = _crash_layout(tmp_path, make_batch, keep_source=False)
    shutil.rmtree(source)
    source.write_text("a failed disk")  # listing it fails even for root
    jbod = Jbod(tmp_path)
    assert source in jbod.log_manager.offline_dirs
    jbod.mover.recover()
    assert ("t", 0) in jbod.log_manager.offline_partitions
    assert (dest / "t-0.move").is_dir() and jbod.log_manager.get_log("t", 0) is None
    jbod.host()  # the metadata still lists it: it stays offline rather than starting empty
    assert ("t", 0) not in jbod.replicas.partitions
    assert ("t", 0) in jbod.replicas.storage_errors


async def test_throttle_takes_one_chunk_then_waits_and_stops_on_request() -> None:
    rate = [100]
    throttle = MoveThrottle(lambda: rate[0])
    assert throttle.chunk_bytes() == MIN_CHUNK_BYTES
    rate[0] = 1 << 40
    assert throttle.chunk_bytes() == 1 << 20  # never more than 1 MiB per step
    rate[0] = 100
    assert await throttle.acquire(MIN_CHUNK_BYTES, lambda: False)  # no debt yet
    assert not await throttle.acquire(MIN_CHUNK_BYTES, lambda: True)  # in debt, then stopped


@pytest.mark.parametrize("policy", ["fewest-partitions", "most-free-bytes"])
def test_placement_never_picks_an_offline_dir(tmp_path: Path, policy: str) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    dirs[1].write_text("not a directory")
    manager = LogManager(dirs, node_id=1, cluster_id=CLUSTER)
    manager.placement_policy = policy
    manager.load()
    assert list(manager.offline_dirs) == [dirs[1].resolve()]
    placed = {manager.create_log("t", p).dir.parent for p in range(6)}
    assert placed <= {dirs[0].resolve(), dirs[2].resolve()}
    if policy == "fewest-partitions":
        assert placed == {dirs[0].resolve(), dirs[2].resolve()}


def test_most_free_bytes_placement_uses_the_space_measured_off_the_loop(tmp_path: Path) -> None:
    dirs = [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()]
    manager = LogManager(dirs, node_id=1, cluster_id=CLUSTER)
    manager.placement_policy = "most-free-bytes"
    manager.load()  # measures once; the broker re-measures in its executor every second
    assert set(manager.disk_usage) == set(dirs)
    assert all(0 < u.usable_bytes <= u.total_bytes for u in manager.disk_usage.values())
    manager.disk_usage = {dirs[0]: DiskUsage(100, 10), dirs[1]: DiskUsage(100, 90)}
    assert manager.create_log("t", 0).dir.parent == dirs[1]
    manager.disk_usage = {dirs[0]: DiskUsage(100, 90)}  # b could not be measured
    assert manager.create_log("t", 1).dir.parent == dirs[0]
    manager.close()


def test_a_failed_dir_drops_its_logs_and_they_are_never_recreated(tmp_path: Path) -> None:
    dirs = [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()]
    manager = LogManager(dirs, node_id=1, cluster_id=CLUSTER)
    manager.load()
    manager.create_log("t", 0)
    manager.create_log("t", 1)
    assert manager.mark_dir_offline(dirs[0], "EIO") == [("t", 0)]
    assert manager.get_log("t", 0) is None and manager.online_dirs() == [dirs[1]]
    with pytest.raises(Exception) as err:
        manager.create_log("t", 0)
    assert getattr(err.value, "code", None) == ErrorCode.KAFKA_STORAGE_ERROR
    assert manager.create_log("u", 0).dir.parent == dirs[1]
    manager.close()  # checkpoints and markers only where the disk is good
    assert (dirs[1] / ".kafka_cleanshutdown").exists()
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()


def test_every_dir_offline_refuses_to_start(tmp_path: Path) -> None:
    only = tmp_path / "a"
    only.write_text("not a directory")
    with pytest.raises(Exception) as err:
        LogManager([only], node_id=1, cluster_id=CLUSTER).load()
    assert getattr(err.value, "code", None) == ErrorCode.KAFKA_STORAGE_ERROR


async def test_moved_log_keeps_the_producer_state(tmp_path: Path) -> None:
    jbod = Jbod(tmp_path)
    jbod.host()
    for seq in range(0, 200, 5):  # idempotent batches across several rolled segments
        records = [Record(i, 1_000, None, b"p" * 40) for i in range(5)]
        jbod.replicas.append_records("t", 0, build_batch(
            records, producer_id=4242, producer_epoch=3, base_sequence=seq))
    before = jbod.replicas.partitions[("t", 0)].log.producer_state.active_producers()[4242]
    jbod.mover.alter_replica_log_dir("t", 0, str(jbod.other_dir()))
    await jbod.mover.moves[("t", 0)].done.wait()
    after = jbod.replicas.partitions[("t", 0)].log.producer_state.active_producers()[4242]
    assert (after.producer_epoch, after.last_sequence) == (before.producer_epoch, 199)
