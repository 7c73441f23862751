"""Diskless partitions keep no log on the broker; the classic paths refuse them clearly.

Real LogManager, ReplicaManager and controller (tests/unit/coordinator/mini_broker.py).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.log_manager import LogManager
from tests.unit.coordinator.mini_broker import CLUSTER_ID, MiniBroker

DISKLESS: dict[str, str | None] = {"diskless.enable": "true"}


async def _create(broker: MiniBroker, name: str, partitions: int,
                  configs: dict[str, str | None] | None = None) -> None:
    (result,) = await broker.controller.create_topics(
        [TopicCreation(name, partitions, 1, configs=dict(configs or {}))], False)
    assert result.error == ErrorCode.NONE, result.message


async def test_a_diskless_topic_gets_no_log_and_no_partition_dir(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    try:
        await _create(broker, "orders", 3, DISKLESS)
        await _create(broker, "classic", 1)
        assert broker.log_manager.get_log("classic", 0) is not None
        assert all(broker.log_manager.get_log("orders", p) is None for p in range(3))
        assert not any(("orders", p) in broker.replica_manager.partitions for p in range(3))
        assert not list((tmp_path / "data").glob("orders-*"))
        assert broker.replica_manager.is_diskless("orders", 0)
        assert not broker.replica_manager.is_diskless("classic", 0)
        assert not broker.replica_manager.is_diskless("missing", 0)
    finally:
        broker.stop()


async def test_the_classic_path_refuses_a_diskless_partition_without_a_retriable_error(
        tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    try:
        await _create(broker, "orders", 1, DISKLESS)
        with pytest.raises(KafkaError) as refused:
            broker.replica_manager.leader_partition("orders", 0)
        assert refused.value.code == ErrorCode.INVALID_REQUEST
        assert not refused.value.code.retriable
        assert "diskless partition served by the diskless path" in (refused.value.message or "")
        with pytest.raises(KafkaError) as unknown:  # unknown partitions answer as before
            broker.replica_manager.leader_partition("orders", 1)
        assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        broker.stop()


async def test_deleting_a_diskless_topic_wakes_its_long_polling_fetches(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    try:
        await _create(broker, "orders", 1, DISKLESS)
        replicas = broker.replica_manager
        waiting = asyncio.ensure_future(replicas.wait_for_data([("orders", 0)], 60.0))
        await asyncio.sleep(0)  # let it register as a waiter
        await broker.controller.delete_topics(["orders"])
        await asyncio.wait_for(waiting, 5.0)  # woken by the deletion, not by the 60 s timeout
    finally:
        broker.stop()


def test_the_log_manager_skips_the_object_store_and_coordinator_dirs_silently(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    (data / "objects" / "wal").mkdir(parents=True)
    (data / "diskless").mkdir()
    (data / "junk").mkdir()
    manager = LogManager([data], node_id=1, cluster_id=CLUSTER_ID)
    with caplog.at_level(logging.WARNING, logger="kafka_ext.storage.log_manager"):
        manager.load()
    try:
        messages = [r.getMessage() for r in caplog.records]
        assert not any("objects" in m or "diskless" in m for m in messages)
        assert any("junk" in m for m in messages)  # other strangers are still reported
        assert manager.all_logs() == []
    finally:
        manager.close()
