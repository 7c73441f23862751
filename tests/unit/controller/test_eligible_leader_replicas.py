"""Eligible leader replicas (KIP-966) on the real QuorumController: the ELR follows the ISR
below min.insync.replicas, a partition whose whole ISR is gone is led again by an ELR member
without an unclean election, an unclean shutdown takes a broker out of the ELR, and the ELR
survives a snapshot. With eligible.leader.replicas.version 0 nothing of this happens."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.cluster_control import BrokerListener
from kafka_ext.controller.image import ELR_VERSION_FEATURE
from kafka_ext.controller.partition_change import ElrRule, LeaderAndIsr, eligible_replicas
from kafka_ext.controller.quorum_controller import IsrChange, QuorumController, TopicCreation
from kafka_ext.controller.snapshot import image_records
from kafka_ext.storage.formatter import bootstrap_records
from tests.unit.controller.test_quorum_controller import _controller, _open_log, _register
from tests.unit.controller.test_snapshot import replay


@pytest.fixture
async def elr_controller(tmp_path: Path) -> Any:
    log = _open_log(tmp_path)
    controller = _controller(log)
    await controller.bootstrap(bootstrap_records(25, {ELR_VERSION_FEATURE: 1}))
    yield controller
    await controller.stop()
    log.close()


def _part(controller: QuorumController, topic: str = "orders") -> Any:
    return controller.image.topics_by_name[topic].partitions[0]


async def _fence(controller: QuorumController, epochs: dict[int, int], broker: int) -> None:
    await controller.broker_heartbeat(broker, epochs[broker], 1 << 40, want_fence=True,
                                      want_shutdown=False)


async def _unfence(controller: QuorumController, epochs: dict[int, int], broker: int) -> None:
    answer = await controller.broker_heartbeat(broker, epochs[broker], 1 << 40,
                                               want_fence=False, want_shutdown=False)
    assert not answer.is_fenced


async def _topic(controller: QuorumController, min_isr: int = 2) -> tuple[int, int, int]:
    await controller.create_topics([TopicCreation(
        "orders", 1, 3, configs={"min.insync.replicas": str(min_isr)})], False)
    a, b, c = _part(controller).replicas
    return a, b, c


async def test_the_isr_below_min_isr_leaves_its_members_eligible_and_they_lead_again(
        elr_controller: QuorumController) -> None:
    controller = elr_controller
    epochs = await _register(controller, 1, 2, 3)
    a, b, c = await _topic(controller)
    await _fence(controller, epochs, c)  # ISR 3 -> 2: still at min.insync.replicas
    part = _part(controller)
    assert (part.isr, part.elr, part.last_known_elr) == ((a, b), (), ())
    await _fence(controller, epochs, b)  # below it: b holds all that was committed
    part = _part(controller)
    assert (part.leader, part.isr, part.elr) == (a, (a,), (b,))
    await _fence(controller, epochs, a)  # the whole ISR gone: an empty ISR, no leader
    part = _part(controller)
    assert (part.leader, part.isr, part.elr) == (-1, (), (a, b))
    # c left while the ISR was at min.insync.replicas: it may lack committed records.
    await _unfence(controller, epochs, c)
    assert _part(controller).leader == -1
    # b comes back: elected from the ELR, a clean election; a stays eligible.
    await _unfence(controller, epochs, b)
    part = _part(controller)
    assert (part.leader, part.isr, part.elr) == (b, (b,), (a,))
    # The ISR grows back to min.insync.replicas: ELR and last known ELR are cleared.
    [result] = await controller.alter_partition(b, epochs[b], [IsrChange(
        part_topic_id(controller), 0, part.leader_epoch, part.partition_epoch, [b, c])])
    assert result.error == 0
    part = _part(controller)
    assert (part.isr, part.elr, part.last_known_elr) == ((b, c), (), ())


def part_topic_id(controller: QuorumController) -> uuid.UUID:
    return controller.image.topics_by_name["orders"].topic_id


async def test_an_unclean_shutdown_takes_a_broker_out_of_the_elr(
        elr_controller: QuorumController) -> None:
    controller = elr_controller
    epochs = await _register(controller, 1, 2, 3)
    a, b, c = await _topic(controller)
    for broker in (c, b, a):
        await _fence(controller, epochs, broker)
    assert _part(controller).elr == (a, b)
    listeners = [BrokerListener("PLAINTEXT", "h", 9090, 0)]
    # a restarts after a clean shutdown: it presents its last epoch and stays eligible.
    epochs[a] = await controller.register_broker(a, uuid.uuid4(), listeners, None, [],
                                                 previous_broker_epoch=epochs[a])
    assert _part(controller).elr == (a, b)
    # b restarts after kill -9 (no epoch): it may have lost unflushed records.
    epochs[b] = await controller.register_broker(b, uuid.uuid4(), listeners, None, [])
    part = _part(controller)
    assert (part.elr, part.last_known_elr) == ((a,), (b,))
    await _unfence(controller, epochs, b)
    assert _part(controller).leader == -1, "b is not eligible any more"
    await _unfence(controller, epochs, a)
    part = _part(controller)
    assert (part.leader, part.isr) == (a, (a,))


async def test_an_unclean_election_clears_the_elr(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    controller = _controller(log)
    await controller.bootstrap(bootstrap_records(25, {ELR_VERSION_FEATURE: 1}))
    epochs = await _register(controller, 1, 2, 3)
    await controller.create_topics([TopicCreation("orders", 1, 3, configs={
        "min.insync.replicas": "2", "unclean.leader.election.enable": "true"})], False)
    a, b, c = _part(controller).replicas
    for broker in (c, b, a):
        await _fence(controller, epochs, broker)
    listeners = [BrokerListener("PLAINTEXT", "h", 9090, 0)]
    for broker in (a, b):  # both back after kill -9: nobody eligible
        epochs[broker] = await controller.register_broker(broker, uuid.uuid4(), listeners,
                                                          None, [])
    assert _part(controller).elr == ()
    await _unfence(controller, epochs, c)  # unclean election allowed: c leads, alone
    part = _part(controller)
    assert (part.leader, part.isr, part.elr, part.last_known_elr) == (c, (c,), (), ())
    await controller.stop()
    log.close()


async def test_without_the_feature_the_last_member_stays_in_the_isr(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3)
    a, b, c = await _topic(controller)
    for broker in (c, b, a):
        await _fence(controller, epochs, broker)
    part = _part(controller)
    assert (part.leader, part.isr, part.elr, part.last_known_elr) == (-1, (a,), (), ())


async def test_the_elr_survives_a_snapshot(elr_controller: QuorumController) -> None:
    controller = elr_controller
    epochs = await _register(controller, 1, 2, 3)
    a, b, c = await _topic(controller)
    for broker in (c, b, a):
        await _fence(controller, epochs, broker)
    listeners = [BrokerListener("PLAINTEXT", "h", 9090, 0)]
    epochs[b] = await controller.register_broker(b, uuid.uuid4(), listeners, None, [])
    rebuilt = replay(image_records(controller.image))
    part = rebuilt.topics_by_name["orders"].partitions[0]
    assert (part.isr, part.elr, part.last_known_elr) == ((), (a,), (b,))


def test_the_elr_is_what_was_in_the_isr_or_elr_and_is_not_now() -> None:
    """The rule alone: in replica order; an unclean shutdown goes to the last known ELR."""
    from kafka_ext.controller.image import PartitionImage

    part = PartitionImage(0, (1, 2, 3, 4), (2, 4), 2, 5, 9, elr=(3,), last_known_elr=(1,))
    rule = ElrRule(min_isr=3)
    assert eligible_replicas(part, LeaderAndIsr(2, (2,)), part.replicas, rule) == (
        (3, 4), (1,))
    assert eligible_replicas(part, LeaderAndIsr(2, (2,)), part.replicas,
                             ElrRule(3, frozenset({4}))) == ((3,), (1, 4))
    assert eligible_replicas(part, LeaderAndIsr(2, (2, 3, 4)), part.replicas, rule) == ((), ())
    assert eligible_replicas(part, LeaderAndIsr(1, (1,), unclean=True), part.replicas,
                             rule) == ((), ())
    assert eligible_replicas(part, LeaderAndIsr(2, (2,)), part.replicas, None) == ((), ())
