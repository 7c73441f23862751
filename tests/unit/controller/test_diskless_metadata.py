"""Diskless topics in the metadata (KIP-1164): each partition is mapped to a coordinator.

QuorumController over a real `__cluster_metadata` UnifiedLog in a temp dir: the mapping is in
the PartitionRecords, so it survives a replay of the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kafka_ext.controller.image import TOPIC_RESOURCE, TopicImage
from kafka_ext.controller.quorum_controller import (
    DISKLESS_METADATA_TOPIC,
    ConfigChange,
    QuorumController,
    TopicCreation,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server.config import format_config_value, validate_topic_config
from kafka_ext.storage.log import UnifiedLog

SET, DELETE = 0, 1
COORDINATORS = 4
DISKLESS: dict[str, str | None] = {"diskless.enable": "true"}


async def _run_now(fn: Callable[[], Any]) -> Any:
    return fn()


def _normalise(name: str, value: str) -> str:
    return format_config_value(validate_topic_config(name, value)) or ""


def _controller(log: UnifiedLog, coordinators: int = COORDINATORS) -> QuorumController:
    controller = QuorumController(
        1, log, default_partitions=1, default_replication_factor=1,
        validate_topic_config=_normalise, run_blocking=_run_now,
        diskless_coordinators=coordinators)
    controller.load()
    return controller


@pytest.fixture
async def controller(metadata_log: UnifiedLog) -> QuorumController:
    """The diskless controller over conftest's metadata log."""
    controller = _controller(metadata_log)
    await controller.bootstrap()
    return controller


async def _create(controller: QuorumController, name: str, partitions: int,
                  configs: dict[str, str | None] | None = None) -> TopicImage:
    (result,) = await controller.create_topics(
        [TopicCreation(name, partitions, 1, configs=dict(configs or {}))], False)
    assert result.error == ErrorCode.NONE, result.message
    return controller.image.topics_by_name[name]


def _mapping(topic: TopicImage) -> list[int]:
    return [topic.partitions[p].diskless_coordinator for p in sorted(topic.partitions)]


def _is_round_robin(mapping: list[int], coordinators: int) -> bool:
    return all((b - a) % coordinators == 1 for a, b in zip(mapping, mapping[1:], strict=False))


async def test_diskless_topic_partitions_are_spread_round_robin_over_the_coordinators(
        controller: QuorumController) -> None:
    topic = await _create(controller, "orders", 6, DISKLESS)
    mapping = _mapping(topic)
    assert all(0 <= c < COORDINATORS for c in mapping)
    assert _is_round_robin(mapping, COORDINATORS)
    assert set(mapping) == set(range(COORDINATORS))
    assert all(p.is_diskless for p in topic.partitions.values())


async def test_the_round_robin_starts_at_a_coordinator_derived_from_the_topic_id(
        controller: QuorumController) -> None:
    starts = set()
    for i in range(16):
        topic = await _create(controller, f"t{i}", 1, DISKLESS)
        assert _mapping(topic) == [topic.topic_id.int % COORDINATORS]
        starts.add(_mapping(topic)[0])
    assert len(starts) > 1  # one-partition topics do not all land on coordinator 0


async def test_classic_topics_keep_no_coordinator(controller: QuorumController) -> None:
    classic = await _create(controller, "classic", 3)
    explicit = await _create(controller, "explicit", 2, {"diskless.enable": "false"})
    assert _mapping(classic) == [-1, -1, -1] and _mapping(explicit) == [-1, -1]
    assert not any(p.is_diskless for p in classic.partitions.values())


async def test_added_partitions_continue_the_topic_round_robin(
        controller: QuorumController) -> None:
    before = _mapping(await _create(controller, "orders", 3, DISKLESS))
    await controller.create_partitions("orders", 7, None, validate_only=False)
    after = _mapping(controller.image.topics_by_name["orders"])
    assert after[:3] == before and len(after) == 7
    assert _is_round_robin(after, COORDINATORS)


async def test_added_partitions_of_a_classic_topic_stay_classic(
        controller: QuorumController) -> None:
    await _create(controller, "classic", 1)
    await controller.create_partitions("classic", 3, [[1], [1]], validate_only=False)
    assert _mapping(controller.image.topics_by_name["classic"]) == [-1, -1, -1]


async def test_the_mapping_is_replayed_from_the_metadata_log(
        controller: QuorumController, metadata_log: UnifiedLog) -> None:
    await _create(controller, "orders", 5, DISKLESS)
    await _create(controller, "classic", 2)
    await controller.create_partitions("orders", 8, None, validate_only=False)
    expected = {name: _mapping(controller.image.topics_by_name[name])
                for name in ("orders", "classic")}
    await controller.stop()
    replayed = _controller(metadata_log)
    await replayed.start()
    assert {name: _mapping(replayed.image.topics_by_name[name])
            for name in ("orders", "classic")} == expected
    assert expected["classic"] == [-1, -1]


async def test_an_existing_metadata_topic_decides_the_coordinator_count(
        controller: QuorumController) -> None:
    # The config says 4, but __diskless_metadata was created with 3 partitions: only 3 exist.
    await _create(controller, DISKLESS_METADATA_TOPIC, 3)
    mapping = _mapping(await _create(controller, "orders", 9, DISKLESS))
    assert set(mapping) == {0, 1, 2} and _is_round_robin(mapping, 3)


async def test_diskless_enable_cannot_be_changed_after_creation(
        controller: QuorumController) -> None:
    await _create(controller, "orders", 1, DISKLESS)
    await _create(controller, "classic", 1)
    for name, change in (("orders", ConfigChange("diskless.enable", SET, "false")),
                         ("orders", ConfigChange("diskless.enable", DELETE, None)),
                         ("classic", ConfigChange("diskless.enable", SET, "true"))):
        with pytest.raises(KafkaError) as failure:
            await controller.alter_configs(TOPIC_RESOURCE, name, [change], validate_only=False)
        assert failure.value.code == ErrorCode.INVALID_CONFIG
        assert "diskless.enable" in (failure.value.message or "")
    assert controller.image.topic_configs("orders")["diskless.enable"] == "true"
    # Other configs of a diskless topic still change, and an unchanged value is no change.
    await controller.alter_configs(TOPIC_RESOURCE, "orders",
                                   [ConfigChange("retention.ms", SET, "60000"),
                                    ConfigChange("diskless.enable", SET, "true")],
                                   validate_only=False)
    assert controller.image.topic_configs("orders")["retention.ms"] == "60000"


async def test_a_diskless_topic_cannot_be_compacted(controller: QuorumController) -> None:
    (result,) = await controller.create_topics([TopicCreation(
        "orders", 1, 1, configs={**DISKLESS, "cleanup.policy": "delete,compact"})], False)
    assert result.error == ErrorCode.INVALID_CONFIG and "orders" not in controller.image.topics_by_name
    await _create(controller, "orders", 1, DISKLESS)
    with pytest.raises(KafkaError) as refused:
        await controller.alter_configs(TOPIC_RESOURCE, "orders",
                                       [ConfigChange("cleanup.policy", SET, "compact")],
                                       validate_only=False)
    assert refused.value.code == ErrorCode.INVALID_CONFIG


async def test_coordinator_topics_cannot_be_diskless(controller: QuorumController) -> None:
    for name in (DISKLESS_METADATA_TOPIC, "__consumer_offsets", "__transaction_state"):
        (result,) = await controller.create_topics(
            [TopicCreation(name, 1, 1, configs=dict(DISKLESS))], False)
        assert result.error == ErrorCode.INVALID_CONFIG, name
