"""AutoTopicCreationManager: what a Metadata request is answered while a creation is under way,
and which shape each topic is created with."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafka_ext.controller.quorum_controller import TopicCreation, TopicCreationResult
from kafka_ext.coordinator.runtime import CoordinatorRuntime
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.server.auto_topic_creation import AutoTopicCreationManager


class _Controller:
    """Records creations and holds each until `release` is set (the controller's commit)."""

    def __init__(self) -> None:
        self.created: list[TopicCreation] = []
        self.release = asyncio.Event()

    async def create_topics(self, creations: list[TopicCreation],
                            validate_only: bool) -> list[TopicCreationResult]:
        await self.release.wait()
        self.created += creations
        return [TopicCreationResult(c.name) for c in creations]


def _broker() -> Any:
    tasks: list[asyncio.Task[Any]] = []
    broker = SimpleNamespace(controller=_Controller(), tasks=tasks,
                             spawn=lambda coro: tasks.append(asyncio.ensure_future(coro)))
    broker.group_coordinator = SimpleNamespace(runtime=CoordinatorRuntime(
        broker, "__consumer_offsets", 7, {"cleanup.policy": "compact"}, lambda p: None,
        replication_factor=1))
    broker.txn_coordinator = SimpleNamespace(runtime=CoordinatorRuntime(
        broker, "__transaction_state", 5, {"cleanup.policy": "compact"}, lambda p: None))
    return broker


async def test_a_name_in_flight_is_unknown_until_the_controller_answers() -> None:
    broker = _broker()
    manager = AutoTopicCreationManager(broker)
    assert manager.create_topics(["orders"]) == [("orders", ErrorCode.LEADER_NOT_AVAILABLE)]
    assert manager.create_topics(["orders"]) == [("orders", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    broker.controller.release.set()
    await asyncio.gather(*broker.tasks)
    assert [c.name for c in broker.controller.created] == ["orders"]  # created once
    assert manager.create_topics(["orders"]) == [("orders", ErrorCode.LEADER_NOT_AVAILABLE)]


async def test_internal_topics_get_their_coordinators_shape_others_the_defaults() -> None:
    broker = _broker()
    broker.controller.release.set()
    manager = AutoTopicCreationManager(broker)
    answers = manager.create_topics(["__consumer_offsets", "__transaction_state", "plain",
                                     "__cluster_metadata", "__diskless_metadata", "bad name"])
    assert answers == [("__consumer_offsets", ErrorCode.LEADER_NOT_AVAILABLE),
                       ("__transaction_state", ErrorCode.LEADER_NOT_AVAILABLE),
                       ("plain", ErrorCode.LEADER_NOT_AVAILABLE),
                       ("__cluster_metadata", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                       ("__diskless_metadata", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                       ("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    await asyncio.gather(*broker.tasks)
    assert [(c.name, c.num_partitions, c.replication_factor, c.configs)
            for c in broker.controller.created] == [
        ("__consumer_offsets", 7, 1, {"cleanup.policy": "compact"}),
        ("__transaction_state", 5, -1, {"cleanup.policy": "compact"}),
        ("plain", -1, -1, {}),
    ]
