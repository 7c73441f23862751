"""DisklessCoordinator over real logs and real SQLite: the seven operations, pipelining, file
lifetime, retention, restarts, rebuilds and snapshots (KIP-1164)."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.coordinator.diskless import DISKLESS_METADATA_TOPIC, DisklessCoordinator
from kafka_ext.coordinator.diskless.snapshots import RemoteSnapshots
from kafka_ext.coordinator.diskless.state import backup_database, remove_database
from kafka_ext.diskless.object_store import ObjectStore
from kafka_ext.diskless.service import DisklessService
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.unit.coordinator.mini_broker import MiniBroker

_reg = registry()
Commit = _reg["DisklessCommitFileRequest"].cls
FindBatches = _reg["DisklessFindBatchesRequest"].cls
ListOffsets = _reg["DisklessListOffsetsRequest"].cls
DeleteRecords = _reg["DisklessDeleteRecordsRequest"].cls
DeleteTopics = _reg["DisklessDeleteTopicsRequest"].cls
CreatePartitions = _reg["DisklessCreatePartitionsRequest"].cls
DescribeFiles = _reg["DisklessDescribeFilesRequest"].cls

NONE = 0
T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


class DisklessBroker(MiniBroker):
    """MiniBroker plus the thread pool the coordinator's snapshots use."""

    async def run_blocking(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(fn)


class Harness:
    def __init__(self, tmp_path: Path, overrides: dict[str, str] | None = None) -> None:
        raw = {"diskless.metadata.topic.num.partitions": "2",
               "diskless.file.deletion.grace.ms": "0",
               "log.retention.check.interval.ms": "3600000"}
        raw.update(overrides or {})
        self.broker = DisklessBroker(tmp_path / "data", raw)
        self.clock = Clock()
        self.deleted: list[str] = []
        self.coordinator: DisklessCoordinator = None  # type: ignore[assignment]
        self.snapshot_store: ObjectStore | None = None  # where snapshots are uploaded, if set

    async def start(self) -> None:
        await self.broker.start()
        await self.start_coordinator()

    async def start_coordinator(self) -> None:
        self.coordinator = DisklessCoordinator(self.broker, clock_ms=self.clock)
        self.coordinator.delete_object = self.delete_object
        if self.snapshot_store is not None:
            self.coordinator.remote_snapshots = RemoteSnapshots(self.snapshot_store,
                                                                self.broker.run_blocking)
        await self.coordinator.start()
        await until(lambda: self.coordinator.hosts(0) and self.coordinator.hosts(1))

    async def restart_coordinator(self) -> None:
        await self.coordinator.stop()
        await self.start_coordinator()

    async def delete_object(self, key: str) -> None:
        self.deleted.append(key)

    async def create_topic(self, name: str, partitions: int = 2, **configs: str) -> uuid.UUID:
        configs = {"diskless.enable": "true", **{k.replace("_", "."): v
                                                 for k, v in configs.items()}}
        (result,) = await self.broker.controller.create_topics(
            [TopicCreation(name, partitions, 1, configs=dict(configs))], validate_only=False)
        assert result.error == ErrorCode.NONE, result.message
        response = await self.coordinator.create_partitions(CreatePartitions(topics=[
            CreatePartitions.DisklessCreatablePartitions(topic_id=result.topic_id, name=name,
                                                         num_partitions=partitions)]))
        assert [t.error_code for t in response.topics] == [NONE]
        return result.topic_id

    def db_path(self, coordinator_id: int) -> Path:
        return self.broker.config.metadata_log_dir / "diskless" / f"{coordinator_id}.sqlite"

    def applied_offset(self, coordinator_id: int) -> int:
        db = sqlite3.connect(self.db_path(coordinator_id))
        try:
            row = db.execute("SELECT value FROM meta WHERE name = 'applied_offset'").fetchone()
        finally:
            db.close()
        return -1 if row is None else int(row[0])

    def metadata_log(self, coordinator_id: int) -> Any:
        return self.broker.replica_manager.partitions[(DISKLESS_METADATA_TOPIC,
                                                       coordinator_id)].log

    async def commit(self, key: str, batches: list[Any], owners: list[int] | None = None
                     ) -> list[Any]:
        response = await self.coordinator.commit_file(Commit(
            object_key=key, object_format=1, file_size=sum(b.size for b in batches) + 10,
            owner_ids=[0, 1] if owners is None else owners, batches=batches))
        return list(response.batches)

    async def find(self, topic_id: uuid.UUID, partition: int, offset: int, *,
                   max_batches: int = 100, partition_bytes: int = 1 << 20,
                   fetch_bytes: int = 1 << 20) -> Any:
        response = await self.coordinator.find_batches(FindBatches(
            fetch_max_bytes=fetch_bytes, max_batches_per_partition=max_batches,
            topics=[FindBatches.DisklessFindBatchesTopic(topic_id=topic_id, partitions=[
                FindBatches.DisklessFindBatchesPartition(
                    partition_index=partition, offset=offset,
                    max_partition_fetch_bytes=partition_bytes)])]))
        return response.topics[0].partitions[0]

    async def list_offset(self, topic_id: uuid.UUID, partition: int,
                          timestamp: int) -> tuple[int, int, int]:
        response = await self.coordinator.list_offsets(ListOffsets(topics=[
            ListOffsets.DisklessListOffsetsTopic(topic_id=topic_id, partitions=[
                ListOffsets.DisklessListOffsetsPartition(partition_index=partition,
                                                         timestamp=timestamp)])]))
        p = response.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    async def delete_records(self, topic_id: uuid.UUID, partition: int,
                             offset: int) -> tuple[int, int]:
        response = await self.coordinator.delete_records(DeleteRecords(topics=[
            DeleteRecords.DisklessDeleteRecordsTopic(topic_id=topic_id, partitions=[
                DeleteRecords.DisklessDeleteRecordsPartition(partition_index=partition,
                                                             offset=offset)])]))
        p = response.topics[0].partitions[0]
        return p.error_code, p.low_watermark

    async def describe(self, *keys: str) -> dict[str, tuple[int, bool]]:
        response = await self.coordinator.describe_files(DescribeFiles(files=[
            DescribeFiles.DisklessDescribeFileEntry(object_key=k) for k in keys]))
        return {f.object_key: (f.error_code, f.has_live_batches) for f in response.files}

    async def view(self, topic_id: uuid.UUID, partitions: int, keys: list[str]) -> Any:
        """Everything a client could ask, for before/after comparisons."""
        out: list[Any] = []
        for p in range(partitions):
            _, start, _ = await self.list_offset(topic_id, p, -2)
            found = await self.find(topic_id, p, start)
            out.append((found.error_code, found.log_start_offset, found.high_watermark,
                        [(b.batch_id, b.object_key, b.byte_offset, b.byte_size, b.base_offset,
                          b.last_offset, b.log_append_timestamp, b.batch_max_timestamp,
                          b.timestamp_type) for b in found.batches]))
            for ts in (-1, -2, -3, T0 - 1, T0 + 2, T0 + 10**9):
                out.append(await self.list_offset(topic_id, p, ts))
        out.append(await self.describe(*keys))
        out.append(self.coordinator.oldest_file_timestamp_ms())
        return out


def batch(topic_id: uuid.UUID, partition: int, *, count: int = 1, size: int = 100,
          pos: int = 0, producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          max_timestamp: int = T0) -> Any:
    return Commit.DisklessCommitBatch(
        magic=2, request_id=0, topic_id=topic_id, partition_index=partition, byte_offset=pos,
        size=size, base_offset=0, last_offset=count - 1, batch_max_timestamp=max_timestamp,
        timestamp_type=0, producer_id=producer_id, producer_epoch=epoch,
        base_sequence=sequence, last_sequence=sequence + count - 1 if sequence >= 0 else -1)


def results(answers: list[Any]) -> list[tuple[int, int, bool]]:
    return [(a.error_code, a.assigned_base_offset, a.is_duplicate) for a in answers]


async def until(condition: Callable[[], bool], timeout_s: float = 5.0,
                step_s: float = 0.001) -> None:
    """Poll `condition` with a deadline; step_s=0 checks after every scheduling round."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(step_s)


def partition_of(h: Harness, topic_id: uuid.UUID, coordinator_id: int) -> int:
    """A partition of the topic that coordinator `coordinator_id` owns."""
    return next(p for p in range(8) if h.coordinator.coordinator_of(topic_id, p) == coordinator_id)


# -- commit and offsets -----------------------------------------------------------------------


async def test_commits_assign_contiguous_offsets_across_files(h: Harness) -> None:
    tid = await h.create_topic("t")
    first = await h.commit("wal/1", [batch(tid, 0, count=3, pos=0), batch(tid, 1, count=2),
                                     batch(tid, 0, count=1, pos=100)])
    second = await h.commit("wal/2", [batch(tid, 0, count=5), batch(tid, 1, count=1)])
    assert results(first) == [(NONE, 0, False), (NONE, 0, False), (NONE, 3, False)]
    assert results(second) == [(NONE, 4, False), (NONE, 2, False)]
    found = await h.find(tid, 0, 0)
    assert [(b.object_key, b.base_offset, b.last_offset, b.byte_offset) for b in found.batches] \
        == [("wal/1", 0, 2, 0), ("wal/1", 3, 3, 100), ("wal/2", 4, 8, 0)]
    assert (found.log_start_offset, found.high_watermark) == (0, 9)
    assert all(b.log_append_timestamp == T0 and b.timestamp_type == 0 for b in found.batches)
    assert first[0].log_append_time == -1  # a CreateTime topic


async def test_unknown_partition_and_not_hosted_coordinator_are_per_batch_errors(
        h: Harness) -> None:
    tid = await h.create_topic("t")
    answers = await h.commit("wal/1", [batch(uuid.uuid4(), 0), batch(tid, 0)])
    assert results(answers) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, False),
                                (NONE, 0, False)]
    await h.coordinator.runtime.stop()  # no shard hosted here any more
    answers = await h.commit("wal/2", [batch(tid, 0)])
    assert answers[0].error_code == ErrorCode.NOT_COORDINATOR
    assert (await h.list_offset(tid, 0, -1))[0] == ErrorCode.NOT_COORDINATOR


async def test_log_append_time_topic_stamps_the_commit_time(h: Harness) -> None:
    tid = await h.create_topic("t", message_timestamp_type="LogAppendTime")
    h.clock.now_ms = T0 + 500
    (answer,) = await h.commit("wal/1", [batch(tid, 0, max_timestamp=T0)])
    assert answer.log_append_time == T0 + 500
    (found,) = (await h.find(tid, 0, 0)).batches
    assert (found.timestamp_type, found.batch_max_timestamp) == (1, T0 + 500)


async def test_pipelined_commits_validate_before_either_reaches_sqlite(h: Harness) -> None:
    tid = await h.create_topic("t")
    p = partition_of(h, tid, 0)
    shard = h.coordinator.runtime.shard(0)
    applied_before = shard.applied_offset
    first = asyncio.ensure_future(h.commit("wal/1", [batch(tid, p, count=2)]))
    second = asyncio.ensure_future(h.commit("wal/2", [batch(tid, p, count=3)]))
    # Both commits validated and appended: the in-memory state continues the offsets ...
    await until(lambda: shard.partitions[(tid, p)].high_watermark == 5, step_s=0)
    # ... while SQLite has applied neither yet.
    assert shard.applied_offset == applied_before == h.applied_offset(0)
    assert len(shard.pending) == 2
    assert results(await first) == [(NONE, 0, False)]
    assert results(await second) == [(NONE, 2, False)]
    assert shard.pending == []
    assert h.applied_offset(0) == h.metadata_log(0).log_end_offset - 1


# -- idempotence --------------------------------------------------------------------------------


async def test_a_wal_object_is_committed_once_however_often_it_is_sent(h: Harness) -> None:
    """A broker retries a commit whose answer it lost (a coordinator failover): pending,
    applied to SQLite, or after a restart, the object's batches keep their first offsets and
    are never written again."""
    tid = await h.create_topic("t", message_timestamp_type="LogAppendTime")
    h.clock.now_ms = T0 + 7
    file = [batch(tid, 0, count=2, pos=0), batch(tid, 0, count=3, pos=200)]
    cid = h.coordinator.coordinator_of(tid, 0)
    shard = h.coordinator.runtime.shard(cid)
    first, again = await asyncio.gather(h.commit("wal/1", file), h.commit("wal/1", file))
    assert results(first) == results(again) == [(NONE, 0, False), (NONE, 2, False)]
    assert [a.log_append_time for a in again] == [T0 + 7, T0 + 7]
    assert shard.pending == []
    end = h.metadata_log(cid).log_end_offset
    h.clock.now_ms = T0 + 99
    after_apply = await h.commit("wal/1", [*file, batch(tid, 0, pos=900)])
    assert results(after_apply) == [(NONE, 0, False), (NONE, 2, False),
                                    (ErrorCode.INVALID_REQUEST, -1, False)]
    assert after_apply[0].log_append_time == T0 + 7
    assert h.metadata_log(cid).log_end_offset == end  # nothing written
    await h.restart_coordinator()
    assert results(await h.commit("wal/1", file)) == [(NONE, 0, False), (NONE, 2, False)]
    assert (await h.find(tid, 0, 0)).high_watermark == 5



async def test_duplicate_batches_answer_the_original_offsets(h: Harness) -> None:
    tid = await h.create_topic("t")
    b0 = batch(tid, 0, count=2, producer_id=7, epoch=0, sequence=0)
    b1 = batch(tid, 0, count=3, producer_id=7, epoch=0, sequence=2)
    assert results(await h.commit("wal/1", [b0, b0, b1])) == [
        (NONE, 0, False), (NONE, 0, True), (NONE, 2, False)]  # a retry inside the same file
    assert results(await h.commit("wal/2", [b1, b0])) == [(NONE, 2, True), (NONE, 0, True)]
    assert (await h.find(tid, 0, 0)).high_watermark == 5


async def test_all_duplicates_write_no_file_record(h: Harness) -> None:
    tid = await h.create_topic("t")
    b0 = batch(tid, 0, producer_id=7, epoch=0, sequence=0)
    await h.commit("wal/1", [b0])
    cid = h.coordinator.coordinator_of(tid, 0)
    end = h.metadata_log(cid).log_end_offset
    assert results(await h.commit("wal/2", [b0])) == [(NONE, 0, True)]
    assert h.metadata_log(cid).log_end_offset == end
    assert (await h.describe("wal/2"))["wal/2"] == (ErrorCode.DISKLESS_FILE_NOT_FOUND, False)


async def test_sequence_and_epoch_errors(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [batch(tid, 0, count=2, producer_id=7, epoch=1, sequence=0)])
    answers = await h.commit("wal/2", [
        batch(tid, 0, producer_id=7, epoch=1, sequence=5),  # a gap
        batch(tid, 0, producer_id=7, epoch=0, sequence=2),  # an older epoch
        batch(tid, 0, producer_id=7, epoch=2, sequence=3),  # a new epoch not at 0
        batch(tid, 0, producer_id=7, epoch=2, sequence=0),  # a new epoch at 0
        batch(tid, 0, producer_id=7, epoch=1, sequence=2),  # now fenced by epoch 2
    ])
    assert [a.error_code for a in answers] == [
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, NONE, ErrorCode.INVALID_PRODUCER_EPOCH]
    assert answers[3].assigned_base_offset == 2


async def test_producer_state_survives_a_restart(h: Harness) -> None:
    tid = await h.create_topic("t")
    b0 = batch(tid, 0, producer_id=7, epoch=0, sequence=0)
    await h.commit("wal/1", [b0])
    await h.restart_coordinator()
    answers = await h.commit("wal/2", [b0, batch(tid, 0, producer_id=7, epoch=0, sequence=3)])
    assert [(a.error_code, a.is_duplicate) for a in answers] == [
        (NONE, True), (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False)]


# -- reads ------------------------------------------------------------------------------------


async def test_list_offsets_special_timestamps_and_by_time(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [batch(tid, 0, count=2, max_timestamp=T0 + 10),
                             batch(tid, 0, count=3, max_timestamp=T0 + 30),
                             batch(tid, 0, count=1, max_timestamp=T0 + 20)])
    assert await h.list_offset(tid, 0, -1) == (NONE, 6, -1)
    assert await h.list_offset(tid, 0, -2) == (NONE, 0, -1)
    assert await h.list_offset(tid, 0, -4) == (NONE, 0, -1)
    assert await h.list_offset(tid, 0, -3) == (NONE, 4, T0 + 30)
    assert await h.list_offset(tid, 0, -5) == (NONE, -1, -1)
    assert await h.list_offset(tid, 0, T0) == (NONE, 0, T0 + 10)
    assert await h.list_offset(tid, 0, T0 + 11) == (NONE, 2, T0 + 30)
    assert await h.list_offset(tid, 0, T0 + 31) == (NONE, -1, -1)
    assert (await h.list_offset(uuid.uuid4(), 0, -1))[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_find_batches_limits_and_offset_range(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [batch(tid, 0, count=2, size=400, pos=i * 400) for i in range(4)])
    assert [b.base_offset for b in (await h.find(tid, 0, 3)).batches] == [2, 4, 6]
    assert len((await h.find(tid, 0, 0, max_batches=2)).batches) == 2
    assert len((await h.find(tid, 0, 0, partition_bytes=900)).batches) == 2
    assert len((await h.find(tid, 0, 0, partition_bytes=10)).batches) == 1  # at least one
    assert (await h.find(tid, 0, 8)).batches == []
    assert (await h.find(tid, 0, 9)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


# -- deletion -------------------------------------------------------------------------------


async def test_delete_records_moves_the_log_start(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [batch(tid, 0, count=2), batch(tid, 0, count=2)])
    assert await h.delete_records(tid, 0, 3) == (NONE, 3)
    assert await h.delete_records(tid, 0, 1) == (NONE, 3)  # never backwards
    assert await h.delete_records(tid, 0, 5) == (ErrorCode.OFFSET_OUT_OF_RANGE, 3)
    found = await h.find(tid, 0, 3)
    assert (found.log_start_offset, [b.base_offset for b in found.batches]) == (3, [2])
    assert (await h.find(tid, 0, 1)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert await h.delete_records(tid, 0, -1) == (NONE, 4)
    assert (await h.find(tid, 0, 4)).batches == []
    assert await h.list_offset(tid, 0, -2) == (NONE, 4, -1)


async def test_retention_by_time_and_by_bytes(h: Harness) -> None:
    by_time = await h.create_topic("by-time", 1, retention_ms="1000")
    by_bytes = await h.create_topic("by-bytes", 1, retention_bytes="250")
    h.clock.now_ms = T0
    await h.commit("wal/1", [batch(by_time, 0, max_timestamp=T0),
                             batch(by_time, 0, max_timestamp=T0 + 4500),
                             batch(by_bytes, 0, size=100), batch(by_bytes, 0, size=100),
                             batch(by_bytes, 0, size=100), batch(by_bytes, 0, size=100)])
    h.clock.now_ms = T0 + 5000
    for cid in (0, 1):
        await h.coordinator.enforce_retention(cid)
    assert (await h.list_offset(by_time, 0, -2))[1] == 1  # the old batch went
    # 400 bytes -> 300: as Kafka, a batch goes only while the rest still holds retention.bytes.
    assert (await h.list_offset(by_bytes, 0, -2))[1] == 1
    h.clock.now_ms = T0 + 10_000
    for cid in (0, 1):
        await h.coordinator.enforce_retention(cid)
    assert await h.list_offset(by_time, 0, -2) == (NONE, 2, -1)  # all expired: start = end


async def test_old_timestamps_are_kept_retention_ms_after_their_commit(h: Harness) -> None:
    tid = await h.create_topic("t", 1, retention_ms="1000")
    h.clock.now_ms = T0 + 60_000
    await h.commit("wal/1", [batch(tid, 0, max_timestamp=T0)])  # a producer's old timestamp
    for cid in (0, 1):
        await h.coordinator.enforce_retention(cid)
    assert (await h.list_offset(tid, 0, -2))[1] == 0  # no active segment to protect it: kept
    h.clock.now_ms = T0 + 61_001
    for cid in (0, 1):
        await h.coordinator.enforce_retention(cid)
    assert (await h.list_offset(tid, 0, -2))[1] == 1


async def test_topic_delete_frees_its_files(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [batch(tid, 0), batch(tid, 1)])
    assert (await h.describe("wal/1"))["wal/1"] == (NONE, True)
    response = await h.coordinator.delete_topics(DeleteTopics(topics=[
        DeleteTopics.DisklessDeletableTopicState(topic_id=tid)]))
    assert [r.error_code for r in response.responses] == [NONE]
    await until(lambda: h.deleted == ["wal/1"])
    assert (await h.describe("wal/1"))["wal/1"] == (ErrorCode.DISKLESS_FILE_NOT_FOUND, False)
    assert (await h.find(tid, 0, 0)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert h.coordinator.oldest_file_timestamp_ms() is None


async def test_file_is_handed_over_then_deleted_after_the_grace(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"diskless.file.deletion.grace.ms": "200"})
    await h.start()
    try:
        tid = await h.create_topic("t")
        p0, p1 = partition_of(h, tid, 0), partition_of(h, tid, 1)
        await h.commit("wal/1", [batch(tid, p0), batch(tid, p1)], owners=[1, 0])
        await h.commit("wal/2", [batch(tid, p0)], owners=[0])
        await h.delete_records(tid, p0, 1)  # coordinator 0's last batch in wal/1
        shard0, shard1 = (h.coordinator.runtime.shard(c) for c in (0, 1))
        # Coordinator 1 still reads wal/1: coordinator 0 hands it over and forgets it.
        await until(lambda: shard0.has_live_batches("wal/1") is None)
        assert shard1.has_live_batches("wal/1") is True and h.deleted == []
        await h.delete_records(tid, p1, 1)  # the last owner's last batch
        await until(lambda: shard1.store is not None
                    and shard1.store.file("wal/1") is not None
                    and shard1.store.file("wal/1").state == "deleting")  # type: ignore[union-attr]
        row = shard1.store.file("wal/1")  # type: ignore[union-attr]
        assert row is not None and row.deletion_due_ms == T0 + 200 and h.deleted == []
        h.clock.now_ms += 200
        await until(lambda: h.deleted == ["wal/1"])
        await until(lambda: shard1.has_live_batches("wal/1") is None)
        assert (await h.describe("wal/1", "wal/2")) == {
            "wal/1": (ErrorCode.DISKLESS_FILE_NOT_FOUND, False), "wal/2": (NONE, True)}
    finally:
        await h.coordinator.stop()
        h.broker.stop()


async def test_failed_object_deletion_is_retried(h: Harness) -> None:
    failures = [OSError("store down")]
    attempts: list[str] = []

    async def flaky_delete(key: str) -> None:
        attempts.append(key)
        if failures:
            raise failures.pop()
    h.coordinator.delete_object = flaky_delete
    tid = await h.create_topic("t", 1)
    await h.commit("wal/1", [batch(tid, 0)])
    await h.delete_records(tid, 0, -1)
    await until(lambda: attempts == ["wal/1", "wal/1"])
    shard = h.coordinator.runtime.shard(h.coordinator.coordinator_of(tid, 0))
    await until(lambda: shard.has_live_batches("wal/1") is None)


async def test_pending_deletion_is_rescheduled_on_load(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"diskless.file.deletion.grace.ms": "60000"})
    await h.start()
    try:
        tid = await h.create_topic("t", 1)
        await h.commit("wal/1", [batch(tid, 0)])
        await h.delete_records(tid, 0, -1)
        cid = h.coordinator.coordinator_of(tid, 0)
        shard = h.coordinator.runtime.shard(cid)
        await until(lambda: shard.store.file("wal/1").state == "deleting")  # type: ignore[union-attr]
        await h.restart_coordinator()
        assert h.coordinator.runtime.has_timer(cid, "delete:wal/1") and h.deleted == []
        h.clock.now_ms += 60_000
        await h.restart_coordinator()  # due now: deleted right after the load
        await until(lambda: h.deleted == ["wal/1"])
    finally:
        await h.coordinator.stop()
        h.broker.stop()


# -- restarts, rebuilds, snapshots -----------------------------------------------------------


async def _workload(h: Harness) -> tuple[uuid.UUID, list[str]]:
    tid = await h.create_topic("t", 3)
    keys = [f"wal/{i}" for i in range(6)]
    for i, key in enumerate(keys):
        h.clock.now_ms = T0 + i
        await h.commit(key, [batch(tid, p, count=p + 1, pos=p * 100, max_timestamp=T0 + i,
                                   producer_id=p, epoch=0, sequence=i * (p + 1))
                             for p in range(3)])
    await h.delete_records(tid, 0, 3)
    await h.delete_records(tid, 1, -1)
    return tid, keys


async def test_restart_with_an_intact_database_replays_only_the_tail(h: Harness) -> None:
    tid, keys = await _workload(h)
    before = await h.view(tid, 3, keys)
    for cid in (0, 1):
        assert h.coordinator.runtime.shard(cid).replayed_at_load == 0
    await h.restart_coordinator()
    assert [h.coordinator.runtime.shard(c).replayed_at_load for c in (0, 1)] == [0, 0]
    assert await h.view(tid, 3, keys) == before
    # A database that lost its last transactions (synchronous=NORMAL, power loss) replays them.
    copies = {c: h.db_path(c).with_name(f"copy-{c}") for c in (0, 1)}
    applied = {c: backup_database(h.db_path(c), copies[c]) for c in (0, 1)}
    await h.commit("wal/9", [batch(tid, p) for p in range(3)])
    await h.coordinator.stop()
    for c in (0, 1):
        remove_database(h.db_path(c))
        copies[c].replace(h.db_path(c))
    await h.start_coordinator()
    replayed = [h.coordinator.runtime.shard(c).replayed_at_load for c in (0, 1)]
    assert replayed == [h.metadata_log(c).log_end_offset - 1 - applied[c] for c in (0, 1)]
    assert sum(replayed) >= 1
    assert (await h.find(tid, 2, 0)).high_watermark == 19


async def test_deleted_database_is_rebuilt_from_the_log(h: Harness) -> None:
    tid, keys = await _workload(h)
    before = await h.view(tid, 3, keys)
    await h.coordinator.stop()
    for c in (0, 1):
        h.db_path(c).unlink()
    await h.start_coordinator()
    assert [h.coordinator.runtime.shard(c).replayed_at_load for c in (0, 1)] == [
        h.metadata_log(c).log_end_offset for c in (0, 1)]
    assert await h.view(tid, 3, keys) == before


async def test_snapshot_prunes_the_log_and_restores_a_deleted_database(h: Harness) -> None:
    tid, keys = await _workload(h)
    applied = {}
    for c in (0, 1):
        applied[c] = await h.coordinator.take_snapshot(c)
        assert h.metadata_log(c).log_start_offset == applied[c] + 1
    await h.commit("wal/9", [batch(tid, p) for p in range(3)])  # a tail after the snapshot
    keys.append("wal/9")
    before = await h.view(tid, 3, keys)
    await h.coordinator.stop()
    for c in (0, 1):
        h.db_path(c).unlink()
    await h.start_coordinator()
    assert await h.view(tid, 3, keys) == before
    # Only the records after the snapshot were replayed.
    assert [h.coordinator.runtime.shard(c).replayed_at_load for c in (0, 1)] == [
        h.metadata_log(c).log_end_offset - 1 - applied[c] for c in (0, 1)]


async def test_snapshots_are_taken_every_interval_and_the_last_two_kept(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"diskless.metadata.snapshot.interval.records": "2"})
    await h.start()
    try:
        tid = await h.create_topic("t", 1)
        cid = h.coordinator.coordinator_of(tid, 0)
        for i in range(8):
            await h.commit(f"wal/{i}", [batch(tid, 0)])
            await until(lambda: cid not in h.coordinator._snapshotting)
        snapshots = h.coordinator.snapshot_paths(cid)
        assert len(snapshots) == 2
        assert h.metadata_log(cid).log_start_offset == snapshots[-1][0] + 1
        # A snapshot of everything leaves an empty log: the state comes from the snapshot alone.
        await h.coordinator.take_snapshot(cid)
        assert h.metadata_log(cid).log_start_offset == h.metadata_log(cid).log_end_offset
        keys = [f"wal/{i}" for i in range(8)]
        before = await h.view(tid, 1, keys)
        await h.coordinator.stop()
        h.db_path(cid).unlink()
        await h.start_coordinator()
        assert await h.view(tid, 1, keys) == before
        assert (await h.find(tid, 0, 0)).high_watermark == 8
    finally:
        await h.coordinator.stop()
        h.broker.stop()


async def test_applied_commits_wake_waiting_fetches(h: Harness) -> None:
    tid = await h.create_topic("t", 1)
    waiting = asyncio.ensure_future(h.broker.replica_manager.wait_for_data([("t", 0)], 10.0))
    await asyncio.sleep(0)  # the fetch registers its waiter
    await h.commit("wal/1", [batch(tid, 0)])
    await asyncio.wait_for(waiting, 1.0)


async def test_retention_runs_on_its_timer(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"log.retention.check.interval.ms": "10"})
    await h.start()
    try:
        tid = await h.create_topic("t", 1, retention_ms="1000")
        await h.commit("wal/1", [batch(tid, 0, max_timestamp=T0)])
        h.clock.now_ms = T0 + 2000
        await until(lambda: h.deleted == ["wal/1"])
        assert await h.list_offset(tid, 0, -2) == (NONE, 1, -1)
    finally:
        await h.coordinator.stop()
        h.broker.stop()


async def test_a_topic_deleted_while_the_coordinators_were_down_is_dropped_at_start(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.start()
    service = None
    try:
        tid = await h.create_topic("gone", 2)
        await h.commit("wal/1", [batch(tid, 0), batch(tid, 1)])
        await h.coordinator.stop()
        # The metadata forgets the topic while no coordinator runs to hear of it.
        outcome = await h.broker.controller.delete_topics(["gone"])
        assert outcome["gone"][0] == ErrorCode.NONE
        await h.start_coordinator()
        assert tid in h.coordinator.known_topic_ids()
        h.broker.diskless_coordinator = h.coordinator
        service = DisklessService(h.broker)
        service.coordinator.delete_object = h.delete_object  # the harness records deletions
        await service.start()
        await until(lambda: tid not in h.coordinator.known_topic_ids() and h.deleted == ["wal/1"])
    finally:
        if service is not None:
            await service.stop()
        await h.coordinator.stop()
        h.broker.stop()
