"""QuorumController over a real `__cluster_metadata` UnifiedLog in a temp dir."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.cluster_control import BrokerListener
from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from kafka_ext.controller.quorum_controller import (
    METADATA_VERSION_FEATURE,
    ConfigChange,
    IsrChange,
    QuorumController,
    TopicCreation,
    rack_alternating,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server.config import format_config_value, validate_topic_config
from kafka_ext.storage.formatter import bootstrap_records
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _run_now(fn: Callable[[], Any]) -> Any:
    return fn()


def _normalise(name: str, value: str) -> str:
    """The broker's normaliser: validated by server.config, stored in canonical text form."""
    return format_config_value(validate_topic_config(name, value)) or ""


def _open_log(tmp_path: Path) -> UnifiedLog:
    return UnifiedLog(tmp_path / "__cluster_metadata-0", LogConfig())


def _controller(log: UnifiedLog, *, default_partitions: int = 3) -> QuorumController:
    controller = QuorumController(
        1, log, default_partitions=default_partitions, default_replication_factor=1,
        validate_topic_config=_normalise, run_blocking=_run_now)
    controller.load()
    return controller


async def _create(controller: QuorumController, *creations: TopicCreation,
                  validate_only: bool = False) -> list[Any]:
    return await controller.create_topics(list(creations), validate_only)


# -- bootstrap and load --------------------------------------------------------------------


async def test_bootstrap_records_the_metadata_version_once(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    assert controller.image.features[METADATA_VERSION_FEATURE] > 0
    end = metadata_log.log_end_offset
    await controller.bootstrap()
    assert metadata_log.log_end_offset == end == 2  # LeaderChange, then the bootstrap record


async def test_bootstrap_commits_the_formatted_bootstrap_records_and_reports_the_quorum(
        tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    controller = _controller(log)
    await controller.bootstrap(bootstrap_records(21, {"group.version": 1}))
    assert controller.image.features[METADATA_VERSION_FEATURE] == 21
    assert controller.image.features["group.version"] == 1
    status = controller.quorum.status(1234)
    # The LeaderChange record of epoch 1, then the two bootstrap records.
    assert (status.leader_id, status.leader_epoch, status.high_watermark) == (1, 1, 3)
    assert log.log_end_offset == 3
    assert [(v.replica_id, v.log_end_offset, v.last_fetch_timestamp_ms) for v in status.voters] == [
        (1, 3, 1234)]
    await controller.stop()
    log.close()


async def test_reloading_the_log_rebuilds_the_committed_image(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    controller = _controller(log)
    await controller.bootstrap()
    await _create(controller, TopicCreation("orders", 2, configs={"retention.ms": "5000"}),
                  TopicCreation("audit", 1))
    await controller.delete_topics(["audit"])
    await controller.create_partitions("orders", 4, None, validate_only=False)
    before = controller.image
    await controller.stop()
    log.close()

    reopened = _open_log(tmp_path)
    again = _controller(reopened)
    await again.start()  # a new epoch: its LeaderChange record is the only one added
    assert again.image == replace(before, offset=before.offset + 1)
    await again.bootstrap()  # not a fresh log: nothing appended
    assert reopened.log_end_offset == before.offset + 2
    await again.stop()
    reopened.close()


# -- create_topics -------------------------------------------------------------------------


async def test_create_topics_assigns_partitions_ids_and_configs(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders", 3, 1,
                                                       configs={"retention.ms": "60000"}))
    assert result.error == ErrorCode.NONE
    assert result.num_partitions == 3 and result.replication_factor == 1
    assert result.topic_id != uuid.UUID(int=0)
    assert result.configs == {"retention.ms": "60000"}
    topic = controller.image.topics_by_name["orders"]
    assert topic.topic_id == result.topic_id
    assert controller.image.topics_by_id[result.topic_id] is topic
    assert sorted(topic.partitions) == [0, 1, 2]
    for partition in topic.partitions.values():
        assert partition.replicas == (1,) and partition.isr == (1,)
        assert partition.leader == 1 and partition.leader_epoch == 0
    assert controller.image.topic_configs("orders") == {"retention.ms": "60000"}


async def test_create_topics_uses_the_defaults_for_minus_one(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders"))
    assert (result.error, result.num_partitions, result.replication_factor) == (
        ErrorCode.NONE, 3, 1)
    assert len(controller.image.topics_by_name["orders"].partitions) == 3


async def test_create_topics_stores_normalised_config_values(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation(
        "orders", 1, configs={"cleanup.policy": "compact, delete"}))
    assert result.error == ErrorCode.NONE
    assert controller.image.topic_configs("orders") == {"cleanup.policy": "compact,delete"}


async def test_create_topics_with_an_invalid_config_is_invalid_config(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    end = metadata_log.log_end_offset
    [result] = await _create(controller, TopicCreation(
        "orders", 1, configs={"retention.ms": "soon"}))
    assert result.error == ErrorCode.INVALID_CONFIG
    assert "orders" not in controller.image.topics_by_name
    assert metadata_log.log_end_offset == end


async def test_create_topics_with_explicit_assignments(controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders", assignments={0: [1], 1: [1]}))
    assert (result.error, result.num_partitions, result.replication_factor) == (
        ErrorCode.NONE, 2, 1)
    assert sorted(controller.image.topics_by_name["orders"].partitions) == [0, 1]


@pytest.mark.parametrize("assignments", [{0: [2]}, {0: [1, 1]}, {0: [1], 2: [1]}])
async def test_create_topics_rejects_bad_assignments(
        controller: QuorumController, assignments: dict[int, list[int]]) -> None:
    [result] = await _create(controller, TopicCreation("orders", assignments=assignments))
    assert result.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "orders" not in controller.image.topics_by_name


async def test_create_topics_rejects_assignments_with_a_partition_count(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders", 1, assignments={0: [1]}))
    assert result.error == ErrorCode.INVALID_REQUEST


async def test_create_topics_rejects_a_name_listed_twice_and_creates_neither(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    # Kafka (ControllerApis.createTopics) answers "Duplicate topic name." with INVALID_REQUEST
    # for a name listed twice and creates none of its entries; other topics go ahead.
    end = metadata_log.log_end_offset
    results = await _create(controller, TopicCreation("orders", 1), TopicCreation("orders", 2),
                            TopicCreation("audit", 1))
    by_name: dict[str, set[ErrorCode]] = {}
    for result in results:
        by_name.setdefault(result.name, set()).add(result.error)
    assert by_name == {"orders": {ErrorCode.INVALID_REQUEST}, "audit": {ErrorCode.NONE}}
    assert sorted(controller.image.topics_by_name) == ["audit"]
    assert metadata_log.log_end_offset > end


async def test_create_topics_rejects_an_existing_topic(controller: QuorumController) -> None:
    [first] = await _create(controller, TopicCreation("orders", 1))
    [again] = await _create(controller, TopicCreation("orders", 5))
    assert again.error == ErrorCode.TOPIC_ALREADY_EXISTS
    topic = controller.image.topics_by_name["orders"]
    assert topic.topic_id == first.topic_id and len(topic.partitions) == 1


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "with space", "é", "x" * 250])
async def test_create_topics_rejects_illegal_names(
        controller: QuorumController, name: str) -> None:
    [result] = await _create(controller, TopicCreation(name, 1))
    assert result.error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert result.message
    assert name not in controller.image.topics_by_name


async def test_create_topics_accepts_a_name_of_249_chars(controller: QuorumController) -> None:
    name = "a._-Z9" + "x" * 243
    [result] = await _create(controller, TopicCreation(name, 1))
    assert result.error == ErrorCode.NONE
    assert name in controller.image.topics_by_name


async def test_create_topics_rejects_replication_beyond_live_brokers(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders", 1, 2))
    assert result.error == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "orders" not in controller.image.topics_by_name


@pytest.mark.parametrize(("partitions", "factor", "error"), [
    (0, 1, ErrorCode.INVALID_PARTITIONS),
    (-5, 1, ErrorCode.INVALID_PARTITIONS),
    (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
])
async def test_create_topics_rejects_non_positive_counts(
        controller: QuorumController, partitions: int, factor: int, error: ErrorCode) -> None:
    [result] = await _create(controller, TopicCreation("orders", partitions, factor))
    assert result.error == error


async def _register(controller: QuorumController, *broker_ids: int) -> dict[int, int]:
    """Register and unfence brokers as their lifecycle managers would; their epochs."""
    epochs = {}
    for broker_id in broker_ids:
        epochs[broker_id] = await controller.register_broker(
            broker_id, uuid.uuid4(), [BrokerListener("PLAINTEXT", "h", 9090 + broker_id, 0)],
            None, [])
        answer = await controller.broker_heartbeat(broker_id, epochs[broker_id], 1 << 40,
                                                   want_fence=False, want_shutdown=False)
        assert not answer.is_fenced
    return epochs


async def test_create_topics_places_partitions_round_robin_over_live_brokers(
        controller: QuorumController) -> None:
    await _register(controller, 1, 2, 3)
    [result] = await _create(controller, TopicCreation("orders", 6, 1))
    assert result.error == ErrorCode.NONE
    partitions = controller.image.topics_by_name["orders"].partitions
    assert {p: partitions[p].leader for p in partitions} == {
        0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}


def _partition(controller: QuorumController, topic: str, partition: int) -> Any:
    return controller.image.topics_by_name[topic].partitions[partition]


async def test_replicated_partitions_are_placed_on_distinct_brokers_all_in_sync(
        controller: QuorumController) -> None:
    await _register(controller, 1, 2, 3)
    [result] = await _create(controller, TopicCreation("orders", 3, 3))
    assert result.error == ErrorCode.NONE
    for p in range(3):
        part = _partition(controller, "orders", p)
        assert sorted(part.replicas) == [1, 2, 3] and part.isr == part.replicas
        assert part.leader == part.replicas[0]
    assert {_partition(controller, "orders", p).leader for p in range(3)} == {1, 2, 3}


async def test_a_fenced_leader_leaves_the_isr_and_an_in_sync_replica_takes_over(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", 1, 3))
    before = _partition(controller, "orders", 0)
    leader = before.leader
    await controller.broker_heartbeat(leader, epochs[leader], 1 << 40, want_fence=True,
                                      want_shutdown=False)
    after = _partition(controller, "orders", 0)
    assert after.leader == next(r for r in before.replicas if r != leader)
    assert leader not in after.isr and len(after.isr) == 2
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch > before.partition_epoch


async def test_the_last_in_sync_replica_stays_in_the_isr_and_alone_may_lead_again(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 1, 2))
    part = _partition(controller, "orders", 0)
    first, second = part.replicas
    for broker in (second, first):  # the follower goes first, then the leader
        await controller.broker_heartbeat(broker, epochs[broker], 1 << 40, want_fence=True,
                                          want_shutdown=False)
    part = _partition(controller, "orders", 0)
    assert part.leader == -1 and part.isr == (first,)
    # The out-of-sync replica returning does not lead: it may have missed acknowledged writes.
    await controller.broker_heartbeat(second, epochs[second], 1 << 40, want_fence=False,
                                      want_shutdown=False)
    assert _partition(controller, "orders", 0).leader == -1
    await controller.broker_heartbeat(first, epochs[first], 1 << 40, want_fence=False,
                                      want_shutdown=False)
    part = _partition(controller, "orders", 0)
    assert part.leader == first and part.isr == (first,)


async def test_unclean_election_lets_an_out_of_sync_replica_lead(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 1, 2,
                                            configs={"unclean.leader.election.enable": "true"}))
    first, second = _partition(controller, "orders", 0).replicas
    for broker in (second, first):
        await controller.broker_heartbeat(broker, epochs[broker], 1 << 40, want_fence=True,
                                          want_shutdown=False)
    await controller.broker_heartbeat(second, epochs[second], 1 << 40, want_fence=False,
                                      want_shutdown=False)
    part = _partition(controller, "orders", 0)
    assert part.leader == second and part.isr == (second,)


async def test_alter_partition_changes_the_isr_only_from_the_current_leader_and_epochs(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", 1, 3))
    part = _partition(controller, "orders", 0)
    topic_id = controller.image.topics_by_name["orders"].topic_id
    leader, follower = part.leader, part.replicas[1]
    shrunk = tuple(r for r in part.isr if r != follower)

    async def alter(broker: int, isr: tuple[int, ...], *, leader_epoch: int | None = None,
                    partition_epoch: int | None = None) -> Any:
        now = _partition(controller, "orders", 0)
        [result] = await controller.alter_partition(broker, epochs[broker], [IsrChange(
            topic_id, 0, now.leader_epoch if leader_epoch is None else leader_epoch,
            now.partition_epoch if partition_epoch is None else partition_epoch, isr)])
        return result

    assert (await alter(follower, shrunk)).error == ErrorCode.INVALID_REQUEST  # not the leader
    assert (await alter(leader, shrunk, leader_epoch=part.leader_epoch - 1)).error == (
        ErrorCode.FENCED_LEADER_EPOCH)
    assert (await alter(leader, shrunk, partition_epoch=part.partition_epoch + 5)).error == (
        ErrorCode.INVALID_UPDATE_VERSION)
    assert (await alter(leader, (follower,))).error == ErrorCode.INVALID_REQUEST  # no leader
    assert (await alter(leader, (leader, 9))).error == ErrorCode.INVALID_REQUEST  # not a replica
    assert _partition(controller, "orders", 0) == part  # nothing changed
    result = await alter(leader, shrunk)
    assert result.error == ErrorCode.NONE and result.partition.isr == shrunk
    assert result.partition.partition_epoch == part.partition_epoch + 1
    assert result.partition.leader_epoch == part.leader_epoch
    # A fenced broker may not join; once unfenced it may.
    await controller.broker_heartbeat(follower, epochs[follower], 1 << 40, want_fence=True,
                                      want_shutdown=False)
    assert (await alter(leader, shrunk + (follower,))).error == ErrorCode.INELIGIBLE_REPLICA
    await controller.broker_heartbeat(follower, epochs[follower], 1 << 40, want_fence=False,
                                      want_shutdown=False)
    result = await alter(leader, shrunk + (follower,))
    assert result.error == ErrorCode.NONE and set(result.partition.isr) == {1, 2, 3}
    with pytest.raises(KafkaError) as caught:
        await controller.alter_partition(leader, epochs[leader] + 1, [])
    assert caught.value.code == ErrorCode.STALE_BROKER_EPOCH


async def test_alter_partition_refuses_a_new_member_fetching_with_another_broker_epoch(
        controller: QuorumController) -> None:
    """KIP-903: a member that joins must be the registered incarnation of its broker; -1 (or
    AlterPartition before v3, which names no epochs) is not checked."""
    epochs = await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", 1, 3))
    topic_id = controller.image.topics_by_name["orders"].topic_id
    part = _partition(controller, "orders", 0)
    leader, follower = part.leader, part.replicas[1]
    [shrunk] = await controller.alter_partition(leader, epochs[leader], [IsrChange(
        topic_id, 0, part.leader_epoch, part.partition_epoch,
        tuple(r for r in part.isr if r != follower))])
    assert shrunk.error == ErrorCode.NONE

    async def join(follower_epoch: int) -> Any:
        now = _partition(controller, "orders", 0)
        isr = (*now.isr, follower)
        given = tuple(follower_epoch if r == follower else epochs[r] for r in isr)
        [result] = await controller.alter_partition(leader, epochs[leader], [IsrChange(
            topic_id, 0, now.leader_epoch, now.partition_epoch, isr, given)])
        return result

    assert (await join(epochs[follower] - 1)).error == ErrorCode.INELIGIBLE_REPLICA
    assert follower not in _partition(controller, "orders", 0).isr
    assert (await join(-1)).error == ErrorCode.NONE
    assert follower in _partition(controller, "orders", 0).isr


async def test_controlled_shutdown_hands_replicated_leaderships_to_in_sync_replicas(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2, 3)
    await _create(controller, TopicCreation("orders", 3, 2))
    led = [p for p in range(3) if _partition(controller, "orders", p).leader == 2]
    assert led
    answer = await controller.broker_heartbeat(2, epochs[2], 1 << 40, want_fence=False,
                                               want_shutdown=True)
    assert answer.should_shut_down
    for p in range(3):
        part = _partition(controller, "orders", p)
        assert part.leader != 2 and part.leader >= 0 and 2 not in part.isr


async def test_a_broker_whose_session_expires_is_fenced_and_its_partitions_go_offline(
        controller: QuorumController) -> None:
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 4, 1))
    controller.heartbeats.touch(1, 1e18)  # broker 1 keeps heartbeating; 2 went silent
    controller.heartbeats.session_timeout_ms = -1
    await controller.fence_expired_brokers()
    assert controller.image.brokers[2].fenced and not controller.image.brokers[1].fenced
    partitions = controller.image.topics_by_name["orders"].partitions
    assert {p: partitions[p].leader for p in partitions} == {0: 1, 1: -1, 2: 1, 3: -1}
    assert controller.live_brokers == {1}


async def test_an_unfenced_broker_leads_its_partitions_again(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 2, 1))
    before = controller.image.topics_by_name["orders"].partitions[1].leader_epoch
    await controller.broker_heartbeat(2, epochs[2], 1 << 40, want_fence=True,
                                      want_shutdown=False)
    assert controller.image.topics_by_name["orders"].partitions[1].leader == -1
    await controller.broker_heartbeat(2, epochs[2], 1 << 40, want_fence=False,
                                      want_shutdown=False)
    part = controller.image.topics_by_name["orders"].partitions[1]
    assert part.leader == 2 and part.leader_epoch == before + 2


async def test_controlled_shutdown_moves_leaderships_then_lets_the_broker_go(
        controller: QuorumController) -> None:
    epochs = await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 2, 1))
    answer = await controller.broker_heartbeat(2, epochs[2], 1 << 40, want_fence=False,
                                               want_shutdown=True)
    assert answer.should_shut_down and answer.is_fenced
    assert controller.image.topics_by_name["orders"].partitions[1].leader == -1
    assert controller.live_brokers == {1}


async def test_registration_and_heartbeat_errors(controller: QuorumController) -> None:
    epochs = await _register(controller, 1)
    with pytest.raises(KafkaError) as caught:
        await controller.register_broker(1, uuid.uuid4(), [BrokerListener("P", "h", 1, 0)],
                                         None, [])
    assert caught.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    with pytest.raises(KafkaError) as caught:
        await controller.broker_heartbeat(1, epochs[1] + 7, 0, False, False)
    assert caught.value.code == ErrorCode.STALE_BROKER_EPOCH
    with pytest.raises(KafkaError) as caught:
        await controller.broker_heartbeat(9, 0, 0, False, False)
    assert caught.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED
    answer = await controller.broker_heartbeat(1, epochs[1], epochs[1] - 1, False, False)
    assert not answer.is_caught_up


async def test_create_topics_validate_only_writes_nothing(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    end = metadata_log.log_end_offset
    image = controller.image
    [result] = await _create(controller, TopicCreation("orders", 2, 1), validate_only=True)
    assert result.error == ErrorCode.NONE
    assert result.num_partitions == 2
    assert metadata_log.log_end_offset == end
    assert controller.image is image


async def test_create_topics_keeps_good_topics_when_one_fails(
        controller: QuorumController) -> None:
    results = await _create(controller, TopicCreation("good", 1), TopicCreation("bad/name", 1))
    assert [(r.name, r.error) for r in results] == [
        ("good", ErrorCode.NONE), ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    assert sorted(controller.image.topics_by_name) == ["good"]


async def test_create_topics_appends_one_batch_for_the_whole_request(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    end = metadata_log.log_end_offset
    await _create(controller, TopicCreation("a", 2, configs={"retention.ms": "1"}),
                  TopicCreation("b", 1))
    # a: TopicRecord + 2 PartitionRecords + 1 ConfigRecord; b: TopicRecord + 1 PartitionRecord
    assert metadata_log.log_end_offset == end + 6
    assert controller.image.offset == end + 5
    assert metadata_log.high_watermark == metadata_log.log_end_offset


# -- delete_topics -------------------------------------------------------------------------


async def test_delete_topics_removes_the_topic_and_its_configs(
        controller: QuorumController) -> None:
    [created] = await _create(controller, TopicCreation("orders", 2,
                                                        configs={"retention.ms": "1000"}))
    results = await controller.delete_topics(["orders", "missing"])
    assert results == {
        "orders": (ErrorCode.NONE, created.topic_id),
        "missing": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, uuid.UUID(int=0)),
    }
    assert "orders" not in controller.image.topics_by_name
    assert created.topic_id not in controller.image.topics_by_id
    assert controller.image.topic_configs("orders") == {}


async def test_a_deleted_topic_can_be_created_again_with_a_new_id(
        controller: QuorumController) -> None:
    [first] = await _create(controller, TopicCreation("orders", 1, configs={"retention.ms": "1"}))
    await controller.delete_topics(["orders"])
    [second] = await _create(controller, TopicCreation("orders", 2))
    assert second.error == ErrorCode.NONE and second.topic_id != first.topic_id
    assert controller.image.topic_configs("orders") == {}
    assert len(controller.image.topics_by_name["orders"].partitions) == 2


async def test_delete_topics_of_unknown_names_writes_nothing(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    end = metadata_log.log_end_offset
    await controller.delete_topics(["missing"])
    assert metadata_log.log_end_offset == end


# -- create_partitions ---------------------------------------------------------------------


async def test_create_partitions_grows_the_topic(controller: QuorumController) -> None:
    await _create(controller, TopicCreation("orders", 2))
    await controller.create_partitions("orders", 5, None, validate_only=False)
    partitions = controller.image.topics_by_name["orders"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(p.replicas == (1,) and p.leader == 1 for p in partitions.values())


async def test_create_partitions_with_assignments(controller: QuorumController) -> None:
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 1, 1))
    await controller.create_partitions("orders", 3, [[2], [1]], validate_only=False)
    partitions = controller.image.topics_by_name["orders"].partitions
    assert partitions[1].replicas == (2,) and partitions[1].leader == 2
    assert partitions[2].replicas == (1,) and partitions[2].leader == 1


@pytest.mark.parametrize("count", [1, 2])
async def test_create_partitions_rejects_shrink_and_same_count(
        controller: QuorumController, metadata_log: UnifiedLog, count: int) -> None:
    await _create(controller, TopicCreation("orders", 2))
    end = metadata_log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        await controller.create_partitions("orders", count, None, validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_PARTITIONS
    assert metadata_log.log_end_offset == end
    assert len(controller.image.topics_by_name["orders"].partitions) == 2


async def test_create_partitions_of_an_unknown_topic(controller: QuorumController) -> None:
    with pytest.raises(KafkaError) as caught:
        await controller.create_partitions("missing", 3, None, validate_only=False)
    assert caught.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("assignments", [[[1]], [[1], [1], [1]], [[7], [1]], [[1, 1], [1]]])
async def test_create_partitions_rejects_bad_assignments(
        controller: QuorumController, assignments: list[list[int]]) -> None:
    await _create(controller, TopicCreation("orders", 1))
    with pytest.raises(KafkaError) as caught:
        await controller.create_partitions("orders", 3, assignments, validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert len(controller.image.topics_by_name["orders"].partitions) == 1


async def test_create_partitions_validate_only_writes_nothing(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    await _create(controller, TopicCreation("orders", 1))
    end = metadata_log.log_end_offset
    await controller.create_partitions("orders", 4, None, validate_only=True)
    assert metadata_log.log_end_offset == end
    assert len(controller.image.topics_by_name["orders"].partitions) == 1


async def test_create_partitions_refuses_a_huge_count_before_placing_anything(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    """Found by the wire fuzzer: a count of 2**31 - 2 was placed partition by partition before
    Kafka's MAX_RECORDS_PER_USER_OP bound was checked (gigabytes, the event loop stalled)."""
    await _create(controller, TopicCreation("orders", 1))
    end = metadata_log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        await controller.create_partitions("orders", 2**31 - 2, None, validate_only=True)
    assert caught.value.code == ErrorCode.POLICY_VIOLATION
    assert metadata_log.log_end_offset == end


async def test_create_topics_refuses_a_huge_partition_count_before_placing_anything(
        controller: QuorumController) -> None:
    [result] = await _create(controller, TopicCreation("orders", 2**31 - 1))
    assert result.error == ErrorCode.POLICY_VIOLATION
    assert "orders" not in controller.image.topics_by_name


# -- alter_configs -------------------------------------------------------------------------


async def _topic_with_configs(controller: QuorumController, configs: dict[str, str]) -> None:
    [result] = await _create(controller, TopicCreation("orders", 1, configs=configs))
    assert result.error == ErrorCode.NONE


async def test_alter_configs_set_adds_and_overwrites(controller: QuorumController) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000"})
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("retention.ms", SET, "2000"),
        ConfigChange("segment.bytes", SET, "1048576"),
    ], validate_only=False)
    assert controller.image.topic_configs("orders") == {
        "retention.ms": "2000", "segment.bytes": "1048576"}


async def test_alter_configs_delete_removes_the_override(
        controller: QuorumController) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000", "segment.bytes": "1048576"})
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("retention.ms", DELETE, None),
        ConfigChange("max.message.bytes", DELETE, None),  # not set: nothing to do
    ], validate_only=False)
    assert controller.image.topic_configs("orders") == {"segment.bytes": "1048576"}


async def test_alter_configs_append_adds_missing_list_items(
        controller: QuorumController) -> None:
    await _topic_with_configs(controller, {"cleanup.policy": "delete"})
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("cleanup.policy", APPEND, "compact,delete")], validate_only=False)
    assert controller.image.topic_configs("orders") == {"cleanup.policy": "delete,compact"}


async def test_alter_configs_subtract_removes_list_items(controller: QuorumController) -> None:
    await _topic_with_configs(controller, {"cleanup.policy": "delete,compact"})
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("cleanup.policy", SUBTRACT, "delete")], validate_only=False)
    assert controller.image.topic_configs("orders") == {"cleanup.policy": "compact"}


@pytest.mark.parametrize("op", [APPEND, SUBTRACT])
async def test_alter_configs_append_and_subtract_apply_only_to_list_configs(
        controller: QuorumController, metadata_log: UnifiedLog, op: int) -> None:
    # Kafka refuses APPEND/SUBTRACT on a non-list config with INVALID_CONFIG, even when the
    # resulting text would happen to parse (here: no current value, append "5000").
    await _topic_with_configs(controller, {})
    end = metadata_log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(TOPIC_RESOURCE, "orders", [
            ConfigChange("retention.ms", op, "5000")], validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert metadata_log.log_end_offset == end


async def test_alter_configs_is_all_or_nothing(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000"})
    end = metadata_log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(TOPIC_RESOURCE, "orders", [
            ConfigChange("segment.bytes", SET, "1048576"),
            ConfigChange("retention.ms", SET, "not-a-number"),
        ], validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert metadata_log.log_end_offset == end
    assert controller.image.topic_configs("orders") == {"retention.ms": "1000"}


async def test_alter_configs_rejects_unknown_names_and_null_set(
        controller: QuorumController) -> None:
    await _topic_with_configs(controller, {})
    for change in (ConfigChange("no.such.config", SET, "1"),
                   ConfigChange("retention.ms", SET, None)):
        with pytest.raises(KafkaError) as caught:
            await controller.alter_configs(TOPIC_RESOURCE, "orders", [change],
                                           validate_only=False)
        assert caught.value.code == ErrorCode.INVALID_CONFIG


async def test_alter_configs_rejects_an_unknown_operation(controller: QuorumController) -> None:
    await _topic_with_configs(controller, {})
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(TOPIC_RESOURCE, "orders",
                                       [ConfigChange("retention.ms", 9, "1")], validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


async def test_alter_configs_of_an_unknown_topic(controller: QuorumController) -> None:
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(TOPIC_RESOURCE, "missing",
                                       [ConfigChange("retention.ms", SET, "1")],
                                       validate_only=False)
    assert caught.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_broker_config_changes_at_run_time_only_if_it_is_dynamic(
        controller: QuorumController) -> None:
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(BROKER_RESOURCE, "1",
                                       [ConfigChange("log.cleaner.threads", SET, "2")],
                                       validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert "log.cleaner.threads" in str(caught.value)
    assert controller.image.configs.get((BROKER_RESOURCE, "1"), {}) == {}
    await controller.alter_configs(BROKER_RESOURCE, "1",
                                   [ConfigChange("log.retention.ms", SET, "1")],
                                   validate_only=False)
    assert controller.image.configs[(BROKER_RESOURCE, "1")] == {"log.retention.ms": "1"}


async def test_alter_configs_replace_all_makes_the_changes_the_whole_set(
        controller: QuorumController) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000", "segment.bytes": "1048576"})
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("retention.ms", SET, "2000")], validate_only=False, replace_all=True)
    assert controller.image.topic_configs("orders") == {"retention.ms": "2000"}
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [], validate_only=False,
                                   replace_all=True)
    assert controller.image.topic_configs("orders") == {}


async def test_alter_configs_writes_only_what_changed(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000"})
    end = metadata_log.log_end_offset
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("retention.ms", SET, "1000")], validate_only=False)
    assert metadata_log.log_end_offset == end


async def test_alter_configs_validate_only_writes_nothing(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    await _topic_with_configs(controller, {"retention.ms": "1000"})
    end = metadata_log.log_end_offset
    await controller.alter_configs(TOPIC_RESOURCE, "orders", [
        ConfigChange("retention.ms", SET, "5000")], validate_only=True)
    assert metadata_log.log_end_offset == end
    assert controller.image.topic_configs("orders") == {"retention.ms": "1000"}


# -- listeners -----------------------------------------------------------------------------


async def test_listeners_get_the_old_and_new_image_of_each_commit(
        controller: QuorumController) -> None:
    seen: list[tuple[MetadataImage, MetadataImage]] = []
    controller.listeners.append(lambda old, new: seen.append((old, new)))
    start = controller.image
    await _create(controller, TopicCreation("orders", 1))
    await _create(controller, TopicCreation("orders", 1))  # already exists: no commit
    await controller.delete_topics(["orders"])
    assert len(seen) == 2
    (old1, new1), (old2, new2) = seen
    assert old1 is start and "orders" not in old1.topics_by_name
    assert "orders" in new1.topics_by_name
    assert old2 is new1 and "orders" not in new2.topics_by_name
    assert new2 is controller.image
    assert new1.offset < new2.offset


# -- snapshots (KIP-630) ----------------------------------------------------------------------


async def test_snapshot_lets_the_log_start_later_and_a_restart_rebuilds_the_image(
        tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    controller = QuorumController(
        1, log, default_partitions=2, default_replication_factor=1,
        validate_topic_config=_normalise, run_blocking=_run_now, snapshot_bytes=1)
    controller.load()
    await controller.bootstrap()
    for n in range(5):
        await _create(controller, TopicCreation(f"t{n}", 2, configs={"retention.ms": "5000"}))
        await asyncio.sleep(0)  # the snapshot task runs
    await controller.delete_topics(["t0"])
    await asyncio.sleep(0.05)
    snapshot = controller.raft.log.latest_snapshot_id()
    assert snapshot is not None and log.log_start_offset == snapshot.offset > 0
    before = controller.image
    await controller.stop()
    log.close()

    reopened = _open_log(tmp_path)
    again = _controller(reopened)
    assert again.image.offset >= snapshot.offset - 1  # loaded from the snapshot
    await again.start()
    assert sorted(again.image.topics_by_name) == sorted(before.topics_by_name) == [
        "t1", "t2", "t3", "t4"]
    assert again.image.configs == before.configs
    await again.stop()
    reopened.close()


async def test_diskless_topics_are_created_on_several_brokers_with_their_coordinators(
        controller: QuorumController) -> None:
    await _register(controller, 1, 2)
    [result] = await _create(controller, TopicCreation(
        "events", 2, configs={"diskless.enable": "true"}))
    assert result.error == ErrorCode.NONE
    partitions = controller.image.topics_by_name["events"].partitions
    assert all(p.is_diskless and p.diskless_coordinator >= 0 for p in partitions.values())


def test_rack_aware_order_takes_one_broker_from_each_rack_in_turn() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    assert rack_alternating([1, 2, 3, 4, 5], racks) == [1, 3, 5, 2, 4]
    assert rack_alternating([1, 2, 3], {}) == [1, 2, 3]


async def test_partitions_alternate_between_racks(controller: QuorumController) -> None:
    for broker_id, rack in ((1, "a"), (2, "a"), (3, "b"), (4, "b")):
        epoch = await controller.register_broker(
            broker_id, uuid.uuid4(), [BrokerListener("PLAINTEXT", "h", 9000 + broker_id, 0)],
            rack, [])
        await controller.broker_heartbeat(broker_id, epoch, 1 << 40, False, False)
    await _create(controller, TopicCreation("racked", 4, 1))
    partitions = controller.image.topics_by_name["racked"].partitions
    assert [partitions[p].leader for p in range(4)] == [1, 3, 2, 4]


async def test_create_partitions_starts_new_epochs_and_records_the_prior_ones(
        controller: QuorumController) -> None:
    """KIP-253: the existing partitions' leader epochs bump; new ones keep the old epochs."""
    await _register(controller, 1, 2)
    await _create(controller, TopicCreation("orders", 2, 1))
    before = {p: _partition(controller, "orders", p).leader_epoch for p in (0, 1)}
    await controller.create_partitions("orders", 4, None, validate_only=False)
    for p in (0, 1):
        assert _partition(controller, "orders", p).leader_epoch == before[p] + 1
    for p in (2, 3):
        assert _partition(controller, "orders", p).prior_leader_epochs == (
            (0, before[0]), (1, before[1]))
    assert _partition(controller, "orders", 0).prior_leader_epochs == ()
