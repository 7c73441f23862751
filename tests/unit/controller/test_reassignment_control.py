"""Reassignments (KIP-455) and leader elections on a QuorumController over a real metadata log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka_ext.controller.partition_change import PREFERRED, UNCLEAN
from kafka_ext.controller.quorum_controller import IsrChange, QuorumController, TopicCreation
from kafka_ext.controller.snapshot import read_snapshot_image, write_snapshot
from kafka_ext.protocol.errors import ErrorCode
from tests.unit.controller.test_quorum_controller import _create, _partition, _register


async def _alter_isr(controller: QuorumController, epochs: dict[int, int], topic: str,
                     isr: tuple[int, ...]) -> Any:
    """The leader of topic-0 proposes `isr`, as its AlterPartitionManager would."""
    now = _partition(controller, topic, 0)
    topic_id = controller.image.topics_by_name[topic].topic_id
    [result] = await controller.alter_partition(now.leader, epochs[now.leader], [IsrChange(
        topic_id, 0, now.leader_epoch, now.partition_epoch, isr)])
    return result


async def _fence(controller: QuorumController, epochs: dict[int, int], broker: int,
                 fenced: bool = True) -> None:
    await controller.broker_heartbeat(broker, epochs[broker], 1 << 40, want_fence=fenced,
                                      want_shutdown=False)


async def test_a_reassignment_adds_then_completes_when_the_targets_are_in_sync(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3, 4)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    assert await controller.alter_partition_reassignments([("orders", 0, (3, 4))]) == [
        (ErrorCode.NONE, None)]
    part = _partition(controller, "orders", 0)
    assert part.replicas == (3, 4, 1, 2)  # the targets first, then the ones leaving
    assert (part.adding_replicas, part.removing_replicas) == ((3, 4), (1, 2))
    assert part.leader == 1 and part.isr == (1, 2)  # the old replicas serve meanwhile
    assert list(controller.ongoing_reassignments(None)) == ["orders"]
    # One target caught up: not complete yet.
    assert (await _alter_isr(controller, epochs, "orders", (1, 2, 3))).error == ErrorCode.NONE
    assert _partition(controller, "orders", 0).is_reassigning
    # Both: the targets become the replicas, the removed leader hands over to one of them.
    before = _partition(controller, "orders", 0)
    result = await _alter_isr(controller, epochs, "orders", (1, 2, 3, 4))
    assert result.error == ErrorCode.NONE
    part = _partition(controller, "orders", 0)
    assert part.replicas == (3, 4) and part.isr == (3, 4) and part.leader == 3
    assert not part.is_reassigning and part.leader_epoch == before.leader_epoch + 1
    assert controller.ongoing_reassignments(None) == {}


async def test_a_reassignment_within_the_isr_completes_at_once(
        controller: QuorumController) -> None:
    await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2, 3]}))
    await controller.alter_partition_reassignments([("orders", 0, (2, 3))])
    part = _partition(controller, "orders", 0)
    assert part.replicas == (2, 3) and part.isr == (2, 3) and part.leader == 2
    assert not part.is_reassigning


async def test_cancelling_restores_the_replicas_from_before(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", assignments={0: [1]}))
    before = _partition(controller, "orders", 0)
    await controller.alter_partition_reassignments([("orders", 0, (2, 3))])
    await _alter_isr(controller, epochs, "orders", (1, 2))  # one of two caught up
    assert await controller.alter_partition_reassignments([("orders", 0, None)]) == [
        (ErrorCode.NONE, None)]
    part = _partition(controller, "orders", 0)
    assert (part.replicas, part.isr, part.leader) == (before.replicas, (1,), 1)
    assert not part.is_reassigning
    [(code, _)] = await controller.alter_partition_reassignments([("orders", 0, None)])
    assert code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


async def test_asking_for_the_original_replicas_cancels(controller: QuorumController) -> None:
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1]}))
    await controller.alter_partition_reassignments([("orders", 0, (2,))])
    await controller.alter_partition_reassignments([("orders", 0, (1,))])
    part = _partition(controller, "orders", 0)
    assert part.replicas == (1,) and not part.is_reassigning


async def test_a_new_target_replaces_the_one_in_progress(controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3, 4)
    await _create(controller, TopicCreation("orders", assignments={0: [1]}))
    await controller.alter_partition_reassignments([("orders", 0, (2,))])
    await controller.alter_partition_reassignments([("orders", 0, (3, 4))])
    part = _partition(controller, "orders", 0)
    assert part.replicas == (3, 4, 2, 1)  # 2 had been added: now it is removed too
    assert (part.adding_replicas, part.removing_replicas) == ((3, 4), (2, 1))
    await _alter_isr(controller, epochs, "orders", (1, 3, 4))
    part = _partition(controller, "orders", 0)
    assert part.replicas == (3, 4) and part.leader == 3 and not part.is_reassigning


async def test_bad_reassignments_change_nothing(controller: QuorumController) -> None:
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1]}))
    offset = controller.image.offset
    outcome = await controller.alter_partition_reassignments([
        ("orders", 0, (2, 9)), ("orders", 0, ()), ("orders", 0, (2, 2)), ("orders", 5, (2,)),
        ("nope", 0, (2,))])
    assert [code for code, _ in outcome] == [
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert "9" in (outcome[0][1] or "")
    assert controller.image.offset == offset


async def test_a_snapshot_keeps_a_reassignment_in_progress(
        controller: QuorumController, tmp_path: Path) -> None:
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1]}))
    await controller.alter_partition_reassignments([("orders", 0, (2,))])
    path = write_snapshot(tmp_path, controller.image.offset + 1, 1, controller.image, 0)
    reloaded = read_snapshot_image(path).topics_by_name["orders"].partitions[0]
    assert reloaded == _partition(controller, "orders", 0)
    assert reloaded.adding_replicas == (2,) and reloaded.removing_replicas == (1,)


async def test_preferred_election_moves_leadership_back_once_the_replica_is_in_sync(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    await _fence(controller, epochs, 1)
    assert _partition(controller, "orders", 0).leader == 2
    await _fence(controller, epochs, 1, fenced=False)
    outcome = await controller.elect_leaders(PREFERRED, {"orders": [0]})
    assert outcome["orders"][0][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # not in sync
    await _alter_isr(controller, epochs, "orders", (2, 1))
    assert await controller.elect_leaders(PREFERRED, {"orders": [0]}) == {
        "orders": {0: (ErrorCode.NONE, None)}}
    assert _partition(controller, "orders", 0).leader == 1
    outcome = await controller.elect_leaders(PREFERRED, {"orders": [0], "nope": [0]})
    assert outcome["orders"][0][0] == ErrorCode.ELECTION_NOT_NEEDED
    assert outcome["nope"][0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # All partitions: those that needed no election are left out of the answer.
    assert await controller.elect_leaders(PREFERRED, None) == {}


async def test_balance_leaders_elects_every_imbalanced_partition(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2], 1: [1, 2]}))
    await _fence(controller, epochs, 1)
    await _fence(controller, epochs, 1, fenced=False)
    topic_id = controller.image.topics_by_name["orders"].topic_id
    for p in (0, 1):
        now = _partition(controller, "orders", p)
        await controller.alter_partition(2, epochs[2], [IsrChange(
            topic_id, p, now.leader_epoch, now.partition_epoch, (2, 1))])
    assert {_partition(controller, "orders", p).leader for p in (0, 1)} == {2}
    await controller.balance_leaders()
    assert {_partition(controller, "orders", p).leader for p in (0, 1)} == {1}


async def test_unclean_election_gives_a_leaderless_partition_an_alive_replica(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", assignments={0: [1, 2]}))
    await _fence(controller, epochs, 2)
    await _fence(controller, epochs, 1)
    assert _partition(controller, "orders", 0).leader == -1  # 1 stays the last ISR member
    outcome = await controller.elect_leaders(UNCLEAN, {"orders": [0]})
    assert outcome["orders"][0][0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    await _fence(controller, epochs, 2, fenced=False)
    assert _partition(controller, "orders", 0).leader == -1  # clean rules: 2 missed writes
    assert await controller.elect_leaders(UNCLEAN, {"orders": [0]}) == {
        "orders": {0: (ErrorCode.NONE, None)}}
    part = _partition(controller, "orders", 0)
    assert part.leader == 2 and part.isr == (2,)
    outcome = await controller.elect_leaders(UNCLEAN, {"orders": [0]})
    assert outcome["orders"][0][0] == ErrorCode.ELECTION_NOT_NEEDED
