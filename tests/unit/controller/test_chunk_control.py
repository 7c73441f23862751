"""Chunks (seed 000) in the controller: CreateChunks and AlterChunkAssignments records over a
real metadata log, the proposal's refusals, and the chunks surviving a snapshot."""

from __future__ import annotations

from pathlib import Path

from kafka_ext.controller.chunk_control import ChunkChange, ChunkCreation
from kafka_ext.controller.image import UNASSIGNED_DIR
from kafka_ext.controller.quorum_controller import QuorumController, TopicCreation
from kafka_ext.controller.snapshot import read_snapshot_image, write_snapshot
from kafka_ext.protocol.errors import ErrorCode
from tests.unit.controller.test_quorum_controller import _create, _partition, _register


def _creation(brokers: tuple[int, ...], start: int, end: int | None = None,
              stop: int | None = None) -> ChunkCreation:
    return ChunkCreation("orders", 0, brokers, start, 1000 + start,
                         start - 1 if stop is None else stop,
                         start - 1 if end is None else end)


async def test_create_chunks_closes_the_active_chunk_and_opens_one_on_new_replicas(
        controller: QuorumController) -> None:
    await _register(controller, 0, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [0]}))
    before = _partition(controller, "orders", 0)
    # 10 records at 0-9 and an open transaction at 8-9: readers stop at 7, the next chunk
    # starts at 8 and copies 8-9.
    assert await controller.create_chunks([_creation((1,), 8, end=9)]) == [(ErrorCode.NONE, None)]
    part = _partition(controller, "orders", 0)
    assert (part.replicas, part.isr, part.leader) == ((1,), (1,), 1)
    assert part.leader_epoch == before.leader_epoch + 1
    assert (part.start_offset, part.start_timestamp) == (8, 1008)
    assert part.directories == (UNASSIGNED_DIR,)
    [chunk] = part.chunks
    assert (chunk.start_offset, chunk.stop_offset, chunk.end_offset) == (0, 7, 9)
    assert (chunk.replicas, chunk.isr, chunk.chunk_epoch) == ((0,), (0,), 0)
    assert chunk.partition_epoch == before.partition_epoch
    assert part.chunk_at(5) == chunk and part.chunk_at(8) is None and part.chunk_at(9) is None
    # The same request again (a retry after the controller died before answering): done.
    assert await controller.create_chunks([_creation((1,), 8, end=9)]) == [(ErrorCode.NONE, None)]
    assert _partition(controller, "orders", 0) == part
    # A second chunk: it starts where the active one did.
    assert await controller.create_chunks([_creation((2,), 20)]) == [(ErrorCode.NONE, None)]
    part = _partition(controller, "orders", 0)
    assert [(c.start_offset, c.stop_offset, c.replicas) for c in part.chunks] == [
        (0, 7, (0,)), (8, 19, (1,))]
    assert part.chunk_at(8) == part.chunks[1]


async def test_create_chunks_refuses_what_the_proposal_refuses_and_changes_nothing(
        controller: QuorumController) -> None:
    await _register(controller, 0, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [0, 1]}))
    before = _partition(controller, "orders", 0)
    results = await controller.create_chunks([
        _creation((1,), 5),  # one replica for a partition of two
        _creation((1, 1), 5),  # the same broker twice
        _creation((1, 7), 5),  # no broker 7
        _creation((1, 2), 0),  # nothing to close
        _creation((1, 2), 5, stop=2),  # the next chunk must start right after the stop
        ChunkCreation("nope", 0, (1, 2), 5, 0, 4, 4),
    ])
    assert [code for code, _ in results] == [
        ErrorCode.INVALID_CHUNK_ASSIGNMENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert all(message for _, message in results)
    assert _partition(controller, "orders", 0) == before


async def test_alter_chunk_assignments_moves_a_chunk_through_adding_replicas(
        controller: QuorumController) -> None:
    await _register(controller, 0, 1, 2, 3)
    await _create(controller, TopicCreation("orders", assignments={0: [0, 1]}))
    await controller.create_chunks([_creation((2, 3), 10)])
    assert await controller.alter_chunk_assignments([ChunkChange("orders", 0, 0, 0, (1, 2))]) == [
        (ErrorCode.NONE, None)]
    [chunk] = _partition(controller, "orders", 0).chunks
    assert chunk.replicas == (1, 2, 0) and chunk.adding_replicas == (2,)
    assert chunk.removing_replicas == (0,) and chunk.chunk_epoch == 1
    assert chunk.readable_replicas == (0, 1)  # broker 2 is still copying
    # The wrong epoch, an unknown chunk, a move while one is in progress: refused.
    results = await controller.alter_chunk_assignments([
        ChunkChange("orders", 0, 0, 0, (1, 3)), ChunkChange("orders", 0, 3, -1, (1, 3)),
        ChunkChange("orders", 0, 0, 1, (1, 3))])
    assert [code for code, _ in results] == [ErrorCode.INVALID_CHUNK_ASSIGNMENT,
                                             ErrorCode.CHUNK_NOT_FOUND,
                                             ErrorCode.REASSIGNMENT_IN_PROGRESS]
    # Broker 2 has copied it all: the move completes and broker 0 leaves.
    assert await controller.alter_chunk_assignments([
        ChunkChange("orders", 0, 0, caught_up_replica=2)]) == [(ErrorCode.NONE, None)]
    [chunk] = _partition(controller, "orders", 0).chunks
    assert (chunk.replicas, chunk.isr, chunk.adding_replicas, chunk.removing_replicas) == (
        (1, 2), (1, 2), (), ())
    assert chunk.chunk_epoch == 2


async def test_chunks_survive_a_snapshot(controller: QuorumController, tmp_path: Path) -> None:
    await _register(controller, 0, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [0]}))
    await controller.create_chunks([_creation((1,), 8, end=9)])
    await controller.alter_chunk_assignments([ChunkChange("orders", 0, 0, 0, (2,))])
    path = write_snapshot(tmp_path, controller.image.offset + 1, 1, controller.image, 0)
    restored = read_snapshot_image(path)
    assert restored.topics_by_name["orders"].partitions == \
        controller.image.topics_by_name["orders"].partitions


async def test_replicas_whose_copy_is_gone_leave_and_the_last_removes_the_chunk(
        controller: QuorumController) -> None:
    await _register(controller, 0, 1, 2, 3)
    await _create(controller, TopicCreation("orders", assignments={0: [0, 1]}))
    await controller.create_chunks([_creation((2, 3), 10)])
    await controller.alter_chunk_assignments([ChunkChange("orders", 0, 0, removed_replica=0)])
    [chunk] = _partition(controller, "orders", 0).chunks
    assert (chunk.replicas, chunk.isr) == ((1,), (1,))
    await controller.alter_chunk_assignments([ChunkChange("orders", 0, 0, removed_replica=1)])
    assert _partition(controller, "orders", 0).chunks == ()
    assert await controller.alter_chunk_assignments([
        ChunkChange("orders", 0, 0, removed_replica=1)]) == [
        (ErrorCode.CHUNK_NOT_FOUND, "orders-0 has no inactive chunk starting at 0")]
