"""Producer id blocks: QuorumController.allocate_producer_ids over a real metadata log, and
the ProducerIdManager that hands ids out of those blocks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.coordinator.txn.producer_id_manager import ProducerIdManager
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig


async def _run_now(fn: Callable[[], Any]) -> Any:
    return fn()


async def _controller(log_dir: Path) -> tuple[QuorumController, UnifiedLog]:
    log = UnifiedLog(log_dir, LogConfig())
    controller = QuorumController(1, log, default_partitions=1, default_replication_factor=1,
                                  validate_topic_config=lambda n, v: v, run_blocking=_run_now)
    controller.load()
    await controller.bootstrap()
    return controller, log


async def test_blocks_are_consecutive_and_the_image_keeps_the_next_free_id(
        tmp_path: Path) -> None:
    controller, log = await _controller(tmp_path / "__cluster_metadata-0")
    try:
        assert await controller.allocate_producer_ids(1000) == 0
        assert await controller.allocate_producer_ids(1000) == 1000
        assert controller.image.next_producer_id == 2000
    finally:
        log.close()


async def test_ids_never_repeat_across_a_restart(tmp_path: Path) -> None:
    log_dir = tmp_path / "__cluster_metadata-0"
    controller, log = await _controller(log_dir)
    first = await controller.allocate_producer_ids(1000)
    await controller.stop()
    log.close()
    controller, log = await _controller(log_dir)
    try:
        assert controller.image.next_producer_id == first + 1000
        assert await controller.allocate_producer_ids(10) == first + 1000
    finally:
        log.close()


async def test_a_non_positive_count_is_an_invalid_request(tmp_path: Path) -> None:
    controller, log = await _controller(tmp_path / "__cluster_metadata-0")
    try:
        with pytest.raises(KafkaError) as info:
            await controller.allocate_producer_ids(0)
        assert info.value.code == ErrorCode.INVALID_REQUEST
    finally:
        log.close()


async def test_manager_hands_out_ids_in_order_across_blocks() -> None:
    starts = iter([0, 10, 20, 30])
    calls: list[int] = []

    async def allocate(count: int) -> int:
        calls.append(count)
        return next(starts)

    manager = ProducerIdManager(allocate, block_size=10)
    ids = [await manager.generate() for _ in range(25)]
    assert ids == list(range(25))
    assert all(c == 10 for c in calls)


async def test_manager_prefetches_the_next_block_before_the_current_one_runs_out() -> None:
    starts = iter([100, 500])

    async def allocate(count: int) -> int:
        return next(starts)

    manager = ProducerIdManager(allocate, block_size=10)
    ids = [await manager.generate() for _ in range(10)]
    assert ids == list(range(100, 110))
    await manager.ensure_available()
    assert manager.next_id() == 500  # the prefetched block, taken without waiting


async def test_manager_reports_load_in_progress_when_no_block_is_in_hand() -> None:
    async def allocate(count: int) -> int:
        return 0

    manager = ProducerIdManager(allocate, block_size=10)
    with pytest.raises(KafkaError) as info:
        manager.next_id()
    assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await manager.ensure_available()
    assert manager.next_id() == 0
