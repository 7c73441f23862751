"""ShareCoordinator over real logs (MiniBroker): the topic it creates, state that a reload
rebuilds from the log, pruning, and the state of deleted topics dropped."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.coordinator.internal_topics import check_internal_topics
from kafka_ext.coordinator.share.coordinator import (
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    parse_coordinator_key,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from kafka_ext.share.persister import DeliveryState, SharePartitionKey, StateBatch
from kafka_ext.storage.checkpoints import kafka_uuid_to_str
from tests.unit.coordinator.mini_broker import MiniBroker

ACKNOWLEDGED = DeliveryState.ACKNOWLEDGED


class ShareBroker(MiniBroker):
    """MiniBroker plus the executor helper pruning uses."""

    async def run_blocking(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(fn)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


class Harness:
    def __init__(self, data: Path, overrides: dict[str, str] | None = None) -> None:
        self.data = data
        self.overrides = {"share.coordinator.state.topic.num.partitions": "3",
                          **(overrides or {})}
        self.broker: ShareBroker = None  # type: ignore[assignment]
        self.coordinator: ShareCoordinator = None  # type: ignore[assignment]

    async def start(self) -> None:
        self.broker = ShareBroker(self.data, self.overrides)
        await self.broker.start()
        self.coordinator = ShareCoordinator(self.broker)
        await self.coordinator.start()
        await self.coordinator.ensure_topic()
        await until(lambda: len(self.coordinator.runtime.loaded_partitions()) == 3)

    async def stop(self) -> None:
        await self.coordinator.stop()
        self.broker.stop()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def topic(self, name: str, partitions: int = 4) -> uuid.UUID:
        (result,) = await self.broker.controller.create_topics(
            [TopicCreation(name, partitions, 1)], validate_only=False)
        assert result.error == ErrorCode.NONE, result.message
        return result.topic_id


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path / "data")
    await harness.start()
    yield harness
    await harness.stop()


def _batch(first: int, last: int, state: DeliveryState = DeliveryState.AVAILABLE,
           count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


async def test_the_state_topic_is_created_with_the_coordinators_configs(h: Harness) -> None:
    image = h.broker.controller.image
    topic = image.topics_by_name[SHARE_GROUP_STATE_TOPIC]
    assert len(topic.partitions) == 3
    configs = image.topic_configs(SHARE_GROUP_STATE_TOPIC)
    assert configs["cleanup.policy"] == "delete"
    assert configs["retention.ms"] == "-1"
    assert configs["retention.bytes"] == "-1"


async def test_state_survives_a_reload_from_the_log(h: Harness) -> None:
    topic_id = await h.topic("t")
    keys = [SharePartitionKey(g, topic_id, p) for g in ("a", "b") for p in range(4)]
    for i, key in enumerate(keys):
        await h.coordinator.initialize(key, 1, 10 * i)
        await h.coordinator.read(key, 2)
        await h.coordinator.write(key, 1, 2, 10 * i + 1, [_batch(10 * i + 1, 10 * i + 5),
                                                          _batch(10 * i + 3, 10 * i + 3,
                                                                 ACKNOWLEDGED)], 1)
    await h.coordinator.delete(keys[0])
    before = {key: await h.coordinator.read(key, 2) for key in keys[1:]}
    await h.restart()
    after = {key: await h.coordinator.read(key, 2) for key in keys[1:]}
    assert after == before
    assert after[keys[1]].batches == [_batch(11, 12), _batch(13, 13, ACKNOWLEDGED),
                                      _batch(14, 15)]
    with pytest.raises(KafkaError) as info:
        await h.coordinator.read(keys[0], 2)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as info:
        await h.coordinator.read(keys[1], 1)  # the leader epoch survived too
    assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH


async def test_keys_not_led_here_are_not_coordinator(h: Harness) -> None:
    topic_id = await h.topic("t")
    key = SharePartitionKey("g", topic_id, 0)
    partition = h.coordinator.partition_for(key)
    h.coordinator.runtime._unload(partition)  # as when leadership moves away
    with pytest.raises(KafkaError) as info:
        await h.coordinator.initialize(key, 0, 0)
    assert info.value.code == ErrorCode.NOT_COORDINATOR


async def test_prune_deletes_records_no_key_needs_and_a_reload_gives_the_same_state(
        tmp_path: Path) -> None:
    h = Harness(tmp_path / "data",
                {"share.coordinator.snapshot.update.records.per.snapshot": "2",
                 "share.coordinator.state.topic.segment.bytes": "1024"})
    await h.start()
    try:
        topic_id = await h.topic("t", partitions=1)
        key = SharePartitionKey("g", topic_id, 0)
        partition = h.coordinator.partition_for(key)
        await h.coordinator.initialize(key, 0, 0)
        for i in range(30):
            await h.coordinator.write(key, 0, 0, i, [_batch(i, i + 3, ACKNOWLEDGED)], i)
        state = await h.coordinator.read(key, 0)
        start = await h.coordinator.prune(partition)
        assert start > 0
        plog = h.broker.replica_manager.partitions[(SHARE_GROUP_STATE_TOPIC, partition)].log
        assert plog.log_start_offset == start
        await h.restart()
        assert await h.coordinator.read(key, 0) == state
    finally:
        await h.stop()


async def test_a_deleted_topic_takes_its_share_state_with_it(h: Harness) -> None:
    gone, kept = await h.topic("gone"), await h.topic("kept")
    for topic_id in (gone, kept):
        for p in range(4):
            await h.coordinator.initialize(SharePartitionKey("g", topic_id, p), 0, 0)
    await h.broker.controller.delete_topics(["gone"])

    def states() -> set[uuid.UUID]:
        return {k.topic_id for _, shard in h.coordinator.runtime.shards() for k in shard.states}

    await until(lambda: states() == {kept})
    await h.restart()
    assert states() == {kept}


def test_coordinator_keys_parse_in_both_topic_id_forms() -> None:
    topic_id = uuid.uuid4()
    for text in (str(topic_id), kafka_uuid_to_str(topic_id)):
        assert parse_coordinator_key(f"grp:{text}:7") == SharePartitionKey("grp", topic_id, 7)
    for bad in ("grp", "grp:x:1", f"grp:{topic_id}", f":{topic_id}:1", f"grp:{topic_id}:-1",
                f"grp:{topic_id}:one", f"a:b:{topic_id}:1", f"grp:{topic_id}:99999999999"):
        with pytest.raises(KafkaError) as info:
            parse_coordinator_key(bad)
        assert info.value.code == ErrorCode.INVALID_REQUEST, bad


async def test_a_state_topic_found_compacted_gets_the_coordinators_configs_back(
        tmp_path: Path) -> None:
    """As a client's auto-creation (or an operator) might have left it: compaction would drop
    updates, retention would drop everything."""
    broker = Broker(build_config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                                  "log.dirs": str(tmp_path / "data"),
                                  "share.coordinator.state.topic.num.partitions": "3"}))
    await broker.start()
    try:
        (result,) = await broker.controller.create_topics([TopicCreation(
            SHARE_GROUP_STATE_TOPIC, 3, 1, configs={"cleanup.policy": "compact",
                                                     "retention.ms": "1000"})], False)
        assert result.error == ErrorCode.NONE
        await check_internal_topics(broker)
        configs = broker.controller.image.topic_configs(SHARE_GROUP_STATE_TOPIC)
        assert (configs["cleanup.policy"], configs["retention.ms"]) == ("delete", "-1")
        assert not broker.log_config_for(SHARE_GROUP_STATE_TOPIC).compacts
    finally:
        await broker.stop()
