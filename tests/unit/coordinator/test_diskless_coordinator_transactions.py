"""Transactions on diskless partitions, in the Diskless coordinator over real logs and SQLite:
open transactions hold the last stable offset, markers close them, aborted ones are indexed for
read_committed fetches, producer and coordinator epochs fence, and all of it survives a restart
and a rebuild of the database from the log."""

from __future__ import annotations

import uuid
from typing import Any

from kafka_ext.coordinator.diskless.state import remove_database
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import READ_COMMITTED, ControlRecordType
from tests.unit.coordinator.test_diskless_coordinator import (
    NONE,
    T0,
    Commit,
    FindBatches,
    Harness,
    ListOffsets,
    batch,
)

ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT
DescribeProducers = registry()["DescribeProducersRequest"].cls


def txn_batch(topic_id: uuid.UUID, partition: int, producer_id: int, sequence: int, *,
              count: int = 1, epoch: int = 0) -> Any:
    b = batch(topic_id, partition, count=count, producer_id=producer_id, epoch=epoch,
              sequence=sequence)
    b.is_transactional = True
    return b


def marker(topic_id: uuid.UUID, partition: int, producer_id: int, control_type: int, *,
           epoch: int = 0, coordinator_epoch: int = 0) -> Any:
    return Commit.DisklessCommitBatch(
        magic=2, request_id=0, topic_id=topic_id, partition_index=partition, byte_offset=0,
        size=78, base_offset=0, last_offset=0, batch_max_timestamp=0, timestamp_type=0,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=-1, last_sequence=-1,
        is_transactional=True, control_type=control_type, coordinator_epoch=coordinator_epoch)


async def find_committed(h: Harness, topic_id: uuid.UUID, offset: int,
                         isolation_level: int = READ_COMMITTED) -> Any:
    response = await h.coordinator.find_batches(FindBatches(
        fetch_max_bytes=1 << 20, max_batches_per_partition=100, isolation_level=isolation_level,
        topics=[FindBatches.DisklessFindBatchesTopic(topic_id=topic_id, partitions=[
            FindBatches.DisklessFindBatchesPartition(partition_index=0, offset=offset,
                                                     max_partition_fetch_bytes=1 << 20)])]))
    return response.topics[0].partitions[0]


async def latest(h: Harness, topic_id: uuid.UUID, isolation_level: int) -> int:
    response = await h.coordinator.list_offsets(ListOffsets(isolation_level=isolation_level,
                                                            topics=[
        ListOffsets.DisklessListOffsetsTopic(topic_id=topic_id, partitions=[
            ListOffsets.DisklessListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return int(response.topics[0].partitions[0].offset)


async def txn_view(h: Harness, topic_id: uuid.UUID) -> Any:
    """What read_committed and read_uncommitted readers and DescribeProducers see."""
    committed = await find_committed(h, topic_id, 0)
    uncommitted = await find_committed(h, topic_id, 0, isolation_level=0)
    producers = await h.coordinator.describe_producers(DescribeProducers(topics=[
        DescribeProducers.TopicRequest(name="t", partition_indexes=[0])]))
    [[answer]] = [t.partitions for t in producers.topics]
    return (committed.high_watermark, committed.last_stable_offset,
            [(b.base_offset, b.last_offset) for b in committed.batches],
            [(t.producer_id, t.first_offset) for t in committed.aborted_transactions],
            [(b.base_offset, b.last_offset) for b in uncommitted.batches],
            sorted((p.producer_id, p.producer_epoch, p.coordinator_epoch,
                    p.current_txn_start_offset) for p in answer.active_producers),
            await latest(h, topic_id, READ_COMMITTED), await latest(h, topic_id, 0))


async def test_open_transactions_hold_the_last_stable_offset_until_their_markers(
        h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [txn_batch(tid, 0, 7, 0, count=2),   # 0-1, producer 7 opens
                             batch(tid, 0, count=1),               # 2, plain
                             txn_batch(tid, 0, 8, 0, count=3)])    # 3-5, producer 8 opens
    found = await find_committed(h, tid, 0)
    assert (found.high_watermark, found.last_stable_offset, found.batches) == (6, 0, [])
    assert await latest(h, tid, READ_COMMITTED) == 0
    assert await latest(h, tid, 0) == 6

    await h.commit("wal/2", [marker(tid, 0, 7, COMMIT)])  # 6
    found = await find_committed(h, tid, 0)
    assert found.last_stable_offset == 3  # producer 8's transaction is still open
    assert [(b.base_offset, b.last_offset) for b in found.batches] == [(0, 1), (2, 2)]
    assert found.aborted_transactions == []

    await h.commit("wal/3", [txn_batch(tid, 0, 8, 3), marker(tid, 0, 8, ABORT)])  # 7, 8
    found = await find_committed(h, tid, 0)
    assert (found.high_watermark, found.last_stable_offset) == (9, 9)
    assert [(b.base_offset, b.last_offset) for b in found.batches] == [
        (0, 1), (2, 2), (3, 5), (6, 6), (7, 7), (8, 8)]
    assert [(t.producer_id, t.first_offset) for t in found.aborted_transactions] == [(8, 3)]
    # A read past the aborted transaction does not list it.
    assert (await find_committed(h, tid, 9)).aborted_transactions == []


async def test_markers_fence_old_producer_and_coordinator_epochs(h: Harness) -> None:
    tid = await h.create_topic("t")
    await h.commit("wal/1", [txn_batch(tid, 0, 7, 0, epoch=3)])
    # The coordinator aborted it on timeout with a bumped epoch: the zombie's batch is fenced.
    answers = await h.commit("wal/2", [
        marker(tid, 0, 7, ABORT, epoch=4, coordinator_epoch=5),
        txn_batch(tid, 0, 7, 1, epoch=3),
        marker(tid, 0, 7, COMMIT, epoch=3, coordinator_epoch=5),
        marker(tid, 0, 7, COMMIT, epoch=4, coordinator_epoch=4),
    ])
    assert [a.error_code for a in answers] == [
        NONE, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    # The new epoch starts its sequences at 0; a plain batch inside a transaction is refused.
    answers = await h.commit("wal/3", [
        txn_batch(tid, 0, 7, 0, epoch=4),
        batch(tid, 0, producer_id=7, epoch=4, sequence=1)])
    assert [a.error_code for a in answers] == [NONE, ErrorCode.INVALID_TXN_STATE]
    found = await find_committed(h, tid, 0)
    assert [(t.producer_id, t.first_offset) for t in found.aborted_transactions] == [(7, 0)]
    assert found.last_stable_offset == 2  # producer 7's new transaction is open at 2


async def test_transaction_state_survives_a_restart_and_a_rebuild_from_the_log(
        h: Harness) -> None:
    tid = await h.create_topic("t", partitions=1)
    await h.commit("wal/1", [txn_batch(tid, 0, 7, 0, count=2), txn_batch(tid, 0, 8, 0)])
    await h.commit("wal/2", [marker(tid, 0, 7, ABORT, epoch=1, coordinator_epoch=2)])
    await h.commit("wal/3", [txn_batch(tid, 0, 9, 0)])
    before = await txn_view(h, tid)
    assert before[:4] == (5, 2, [(0, 1)], [(7, 0)])
    assert before[5] == [(7, 1, 2, -1), (8, 0, -1, 2), (9, 0, -1, 4)]
    await h.restart_coordinator()
    assert await txn_view(h, tid) == before
    await h.coordinator.stop()
    cid = h.coordinator.coordinator_of(tid, 0)
    remove_database(h.db_path(cid))
    await h.start_coordinator()
    assert await txn_view(h, tid) == before
    # Fencing survived too: producer 7's old epoch is refused.
    answers = await h.commit("wal/4", [txn_batch(tid, 0, 7, 2, epoch=0)])
    assert answers[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH


async def test_delete_records_drops_aborted_transactions_below_the_new_start(
        h: Harness) -> None:
    tid = await h.create_topic("t", partitions=1)
    await h.commit("wal/1", [txn_batch(tid, 0, 7, 0), marker(tid, 0, 7, ABORT)])
    await h.commit("wal/2", [txn_batch(tid, 0, 8, 0), marker(tid, 0, 8, ABORT)])
    assert [(t.producer_id, t.first_offset)
            for t in (await find_committed(h, tid, 0)).aborted_transactions] == [(7, 0), (8, 2)]
    assert await h.delete_records(tid, 0, 2) == (NONE, 2)
    found = await find_committed(h, tid, 2)
    assert [(t.producer_id, t.first_offset) for t in found.aborted_transactions] == [(8, 2)]
    # Producer 7 had nothing left and no open transaction: forgotten, as Kafka does.
    producers = await h.coordinator.describe_producers(DescribeProducers(topics=[
        DescribeProducers.TopicRequest(name="t", partition_indexes=[0])]))
    assert [p.producer_id for p in producers.topics[0].partitions[0].active_producers] == [8]


async def test_idle_producers_expire_unless_their_transaction_is_open(h: Harness) -> None:
    tid = await h.create_topic("t", partitions=1)
    hour = 3_600_000
    await h.commit("wal/1", [
        batch(tid, 0, producer_id=7, epoch=0, sequence=0, max_timestamp=T0),  # idle
        txn_batch(tid, 0, 8, 0),  # idle too, but its transaction is open
        batch(tid, 0, producer_id=9, epoch=0, sequence=0, max_timestamp=T0 + 2 * hour)])
    expired = await h.coordinator.expire_producers(T0 + 2 * hour, hour)
    assert expired == 1
    kept = [(8, 0, -1, 1), (9, 0, -1, -1)]
    assert (await txn_view(h, tid))[5] == kept
    await h.restart_coordinator()
    assert (await txn_view(h, tid))[5] == kept
    await h.coordinator.stop()
    remove_database(h.db_path(h.coordinator.coordinator_of(tid, 0)))
    await h.start_coordinator()
    assert (await txn_view(h, tid))[5] == kept
    # An expired producer is unknown: its next sequence is accepted wherever it resumes.
    answers = await h.commit("wal/2", [batch(tid, 0, producer_id=7, epoch=0, sequence=5)])
    assert answers[0].error_code == NONE
