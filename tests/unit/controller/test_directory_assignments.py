"""KIP-858 on the controller: where replicas live, and what a failed log dir takes away."""

from __future__ import annotations

import uuid

from kafka_ext.controller.cluster_control import BrokerListener
from kafka_ext.controller.image import UNASSIGNED_DIR
from kafka_ext.controller.quorum_controller import IsrChange, QuorumController, TopicCreation
from kafka_ext.protocol.errors import ErrorCode
from tests.unit.controller.test_quorum_controller import _create, _partition

DIRS = {b: (uuid.UUID(int=b * 10 + 1), uuid.UUID(int=b * 10 + 2)) for b in (1, 2, 3)}


async def _register_with_dirs(controller: QuorumController, dirs: dict[int, tuple[uuid.UUID, ...]]
                              ) -> dict[int, int]:
    epochs = {}
    for broker_id, log_dirs in dirs.items():
        epochs[broker_id] = await controller.register_broker(
            broker_id, uuid.uuid4(), [BrokerListener("PLAINTEXT", "h", 9090 + broker_id, 0)],
            None, list(log_dirs))
        await controller.broker_heartbeat(broker_id, epochs[broker_id], 1 << 40,
                                          want_fence=False, want_shutdown=False)
    return epochs


async def test_a_broker_with_one_dir_gets_its_replicas_placed_there(
        controller: QuorumController) -> None:
    await _register_with_dirs(controller, {1: DIRS[1][:1], 2: DIRS[2]})
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    assert _partition(controller, "orders", 0).directories == (DIRS[1][0], UNASSIGNED_DIR)


async def test_assignments_are_recorded_and_checked(controller: QuorumController) -> None:
    epochs = await _register_with_dirs(controller, DIRS)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2], 1: [2, 3]}))
    topic_id = controller.image.topics_by_name["orders"].topic_id
    errors = await controller.assign_replicas_to_dirs(2, epochs[2], [
        (DIRS[2][1], topic_id, 0), (DIRS[2][0], topic_id, 1), (DIRS[2][0], uuid.uuid4(), 0),
        (DIRS[2][0], topic_id, 7), (DIRS[1][0], topic_id, 1)])
    assert errors == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_ID,
                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LOG_DIR_NOT_FOUND]
    assert _partition(controller, "orders", 0).directories == (UNASSIGNED_DIR, DIRS[2][1])
    assert _partition(controller, "orders", 1).directory_of(2) == DIRS[2][0]
    [error] = await controller.assign_replicas_to_dirs(1, epochs[1], [(DIRS[1][0], topic_id, 1)])
    assert error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # 1 holds no replica of partition 1


async def test_a_failed_dir_moves_leaderships_and_isr_places_of_its_replicas_only(
        controller: QuorumController) -> None:
    epochs = await _register_with_dirs(controller, DIRS)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2], 1: [1, 3]}))
    topic_id = controller.image.topics_by_name["orders"].topic_id
    await controller.assign_replicas_to_dirs(1, epochs[1], [
        (DIRS[1][0], topic_id, 0), (DIRS[1][1], topic_id, 1)])
    await controller.mark_log_dirs_offline(1, [DIRS[1][0]])
    on_failed, elsewhere = _partition(controller, "orders", 0), _partition(controller, "orders", 1)
    assert on_failed.leader == 2 and on_failed.isr == (2,)
    assert elsewhere.leader == 1 and elsewhere.isr == (1, 3)  # its dir is fine
    # It may not come back into the ISR, nor lead, while its replica's dir is offline.
    [result] = await controller.alter_partition(2, epochs[2], [IsrChange(
        topic_id, 0, on_failed.leader_epoch, on_failed.partition_epoch, (2, 1))])
    assert result.error == ErrorCode.INELIGIBLE_REPLICA
    await controller.broker_heartbeat(2, epochs[2], 1 << 40, want_fence=True,
                                      want_shutdown=False)
    part = _partition(controller, "orders", 0)
    assert part.leader == -1 and part.isr == (2,)  # 2 was the last in sync: no leader


async def test_a_replica_placed_in_an_offline_dir_leaves_the_isr(
        controller: QuorumController) -> None:
    epochs = await _register_with_dirs(controller, DIRS)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    await controller.mark_log_dirs_offline(1, [DIRS[1][1]])
    topic_id = controller.image.topics_by_name["orders"].topic_id
    await controller.assign_replicas_to_dirs(1, epochs[1], [(DIRS[1][1], topic_id, 0)])
    part = _partition(controller, "orders", 0)
    assert part.leader == 2 and part.isr == (2,)


async def test_directories_follow_their_replicas_through_a_reassignment(
        controller: QuorumController) -> None:
    epochs = await _register_with_dirs(controller, DIRS)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    topic_id = controller.image.topics_by_name["orders"].topic_id
    await controller.assign_replicas_to_dirs(1, epochs[1], [(DIRS[1][1], topic_id, 0)])
    await controller.alter_partition_reassignments([("orders", 0, (3, 1))])
    part = _partition(controller, "orders", 0)
    assert part.replicas == (3, 1, 2)
    assert part.directories == (UNASSIGNED_DIR, DIRS[1][1], UNASSIGNED_DIR)
