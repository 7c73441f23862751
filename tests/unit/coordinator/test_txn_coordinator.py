"""TransactionCoordinator over the real runtime, logs and controller (no sockets)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kafka_ext.controller.image import TOPIC_RESOURCE
from kafka_ext.controller.quorum_controller import ConfigChange, TopicCreation
from kafka_ext.coordinator.txn import coordinator as coordinator_module
from kafka_ext.coordinator.txn.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
)
from kafka_ext.coordinator.txn.metadata import TransactionState
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.storage.producer_state import AppendOrigin
from tests.unit.coordinator.mini_broker import MiniBroker

S = TransactionState
OVERRIDES = {"transaction.state.log.num.partitions": "3"}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[MiniBroker]:
    b = MiniBroker(tmp_path / "data", OVERRIDES)
    await b.start()
    (result,) = await b.controller.create_topics([TopicCreation("data", 2, 1)], False)
    assert result.error == ErrorCode.NONE
    yield b
    b.stop()


async def _coordinator(broker: MiniBroker) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(broker)
    broker.txn_coordinator = coordinator  # type: ignore[attr-defined]
    await coordinator.start()
    await coordinator.ensure_topic()
    for p in range(3):
        while coordinator.runtime.is_loading(p):
            await asyncio.sleep(0)
    return coordinator


@pytest.fixture
async def coordinator(broker: MiniBroker) -> AsyncIterator[TransactionCoordinator]:
    c = await _coordinator(broker)
    yield c
    await c.stop()


def _produce_transactional(broker: MiniBroker, partition: int, pid: int, epoch: int,
                           sequence: int, values: list[bytes]) -> None:
    records = [Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)]
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                        is_transactional=True)
    broker.replica_manager.append_records("data", partition, batch, origin=AppendOrigin.CLIENT)


async def _settle(coordinator: TransactionCoordinator) -> None:
    """Wait for the marker writers in flight (each ends by logging its Complete state)."""
    while coordinator._completions:
        await asyncio.gather(*coordinator._completions.values())


async def test_idempotent_producers_get_distinct_ids_at_epoch_zero(
        coordinator: TransactionCoordinator) -> None:
    first = await coordinator.init_producer_id(None, 60_000)
    second = await coordinator.init_producer_id(None, 60_000)
    assert first.producer_epoch == second.producer_epoch == 0
    assert first.producer_id != second.producer_id


async def test_timeout_above_the_maximum_is_invalid_transaction_timeout(
        coordinator: TransactionCoordinator) -> None:
    for timeout_ms in (0, coordinator.max_txn_timeout_ms + 1):
        with pytest.raises(KafkaError) as info:
            await coordinator.init_producer_id("tx", timeout_ms)
        assert info.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


async def test_commit_writes_markers_and_the_last_stable_offset_passes_the_data(
        broker: MiniBroker, coordinator: TransactionCoordinator) -> None:
    ids = await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions_to_txn("tx", ids.producer_id, ids.producer_epoch,
                                            [("data", 0), ("data", 1)])
    _produce_transactional(broker, 0, ids.producer_id, ids.producer_epoch, 0, [b"a", b"b"])
    plog = broker.replica_manager.partitions[("data", 0)].log
    assert plog.last_stable_offset == 0
    await coordinator.end_txn("tx", ids.producer_id, ids.producer_epoch, True)
    await _settle(coordinator)
    assert coordinator.describe("tx").state == S.COMPLETE_COMMIT
    assert plog.log_end_offset == 3  # two records and the COMMIT marker
    assert plog.last_stable_offset == 3
    other = broker.replica_manager.partitions[("data", 1)].log
    assert other.log_end_offset == 1  # a partition added without data gets its marker too


async def _poll(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Yield to the loop until `condition` holds; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_a_refused_complete_write_is_retried_while_the_shard_stays_loaded(
        broker: MiniBroker, coordinator: TransactionCoordinator,
        caplog: pytest.LogCaptureFixture) -> None:
    ids = await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions_to_txn("tx", ids.producer_id, ids.producer_epoch,
                                            [("data", 0)])
    _produce_transactional(broker, 0, ids.producer_id, ids.producer_epoch, 0, [b"a"])
    partition = coordinator.partition_for("tx")
    # Log PrepareCommit without starting the markers, then make __transaction_state refuse
    # every batch (max.message.bytes=1: MESSAGE_TOO_LARGE, which Kafka's coordinator retries).
    prepared = await coordinator.runtime.write(partition, lambda s: s.end_transaction(
        "tx", ids.producer_id, ids.producer_epoch, True, coordinator_module.now_ms()))
    await broker.controller.alter_configs(
        TOPIC_RESOURCE, TRANSACTION_STATE_TOPIC, [ConfigChange("max.message.bytes", 0, "1")],
        False)
    caplog.set_level(logging.INFO, logger=coordinator_module.__name__)
    assert prepared.metadata is not None
    coordinator._start_completion(partition, prepared.metadata)
    plog = broker.replica_manager.partitions[("data", 0)].log
    await _poll(lambda: plog.last_stable_offset == 2, "the COMMIT marker")
    await _poll(lambda: any("tx" in r.getMessage() for r in caplog.records),
                "the refused CompleteCommit write")
    assert coordinator.describe("tx").state == S.PREPARE_COMMIT
    await broker.controller.alter_configs(
        TOPIC_RESOURCE, TRANSACTION_STATE_TOPIC, [ConfigChange("max.message.bytes", 1, None)],
        False)
    await _poll(lambda: coordinator.describe("tx").state == S.COMPLETE_COMMIT,
                "CompleteCommit logged by a retry")
    await _settle(coordinator)
    assert plog.log_end_offset == 2  # the data and one COMMIT marker: no marker written twice


async def test_a_partition_deleted_during_the_transaction_does_not_hold_its_end(
        broker: MiniBroker, coordinator: TransactionCoordinator) -> None:
    (created,) = await broker.controller.create_topics([TopicCreation("doomed", 1, 1)], False)
    assert created.error == ErrorCode.NONE
    ids = await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions_to_txn("tx", ids.producer_id, ids.producer_epoch,
                                            [("doomed", 0), ("data", 0)])
    _produce_transactional(broker, 0, ids.producer_id, ids.producer_epoch, 0, [b"a"])
    assert (await broker.controller.delete_topics(["doomed"]))["doomed"][0] == ErrorCode.NONE
    assert ("doomed", 0) not in broker.replica_manager.partitions
    await coordinator.end_txn("tx", ids.producer_id, ids.producer_epoch, False)
    await _settle(coordinator)
    assert coordinator.describe("tx").state == S.COMPLETE_ABORT
    plog = broker.replica_manager.partitions[("data", 0)].log
    assert plog.last_stable_offset == plog.log_end_offset == 2  # data + ABORT marker


async def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(
        broker: MiniBroker, coordinator: TransactionCoordinator) -> None:
    old = await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions_to_txn("tx", old.producer_id, old.producer_epoch,
                                            [("data", 0)])
    _produce_transactional(broker, 0, old.producer_id, old.producer_epoch, 0, [b"x"])
    with pytest.raises(KafkaError) as info:
        await coordinator.init_producer_id("tx", 60_000)
    assert info.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
    await _settle(coordinator)
    assert coordinator.describe("tx").state == S.COMPLETE_ABORT
    new = await coordinator.init_producer_id("tx", 60_000)
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    with pytest.raises(KafkaError) as info:
        await coordinator.end_txn("tx", old.producer_id, old.producer_epoch, True)
    assert info.value.code == ErrorCode.PRODUCER_FENCED
    plog = broker.replica_manager.partitions[("data", 0)].log
    assert plog.last_stable_offset == plog.log_end_offset == 2  # data + ABORT marker


async def test_state_and_pending_markers_survive_a_coordinator_restart(
        broker: MiniBroker, coordinator: TransactionCoordinator) -> None:
    ids = await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions_to_txn("tx", ids.producer_id, ids.producer_epoch,
                                            [("data", 1)])
    _produce_transactional(broker, 1, ids.producer_id, ids.producer_epoch, 0, [b"x"])
    partition = coordinator.partition_for("tx")
    # Log PrepareCommit without writing the markers, as if the broker died right after.
    await coordinator.runtime.write(partition, lambda s: s.end_transaction(
        "tx", ids.producer_id, ids.producer_epoch, True, coordinator_module.now_ms()))
    await coordinator.stop()
    restarted = await _coordinator(broker)
    try:
        await _settle(restarted)
        meta = restarted.describe("tx")
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (
            S.COMPLETE_COMMIT, ids.producer_id, ids.producer_epoch)
        assert broker.replica_manager.partitions[("data", 1)].log.last_stable_offset == 2
        again = await restarted.init_producer_id("tx", 60_000)
        assert again.producer_epoch == ids.producer_epoch + 1
    finally:
        await restarted.stop()


async def test_a_timed_out_transaction_is_aborted_by_the_periodic_check(
        broker: MiniBroker, coordinator: TransactionCoordinator,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ids = await coordinator.init_producer_id("slow", 1000)
    await coordinator.add_partitions_to_txn("slow", ids.producer_id, ids.producer_epoch,
                                            [("data", 0)])
    started = coordinator.describe("slow").txn_start_timestamp_ms
    partition = coordinator.partition_for("slow")
    monkeypatch.setattr(coordinator_module, "now_ms", lambda: started + 1001)
    await coordinator._abort_timed_out(partition)
    await _settle(coordinator)
    meta = coordinator.describe("slow")
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, ids.producer_epoch + 1)
    with pytest.raises(KafkaError) as info:
        await coordinator.end_txn("slow", ids.producer_id, ids.producer_epoch, True)
    assert info.value.code == ErrorCode.PRODUCER_FENCED


async def test_idle_transactional_ids_expire(
        coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    await coordinator.init_producer_id("idle", 1000)
    updated = coordinator.describe("idle").txn_last_update_timestamp_ms
    monkeypatch.setattr(coordinator_module, "now_ms",
                        lambda: updated + coordinator.transactional_id_expiration_ms)
    await coordinator._expire_transactional_ids(coordinator.partition_for("idle"))
    with pytest.raises(KafkaError) as info:
        coordinator.describe("idle")
    assert info.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


async def test_list_filters_by_state_and_producer_id(
        coordinator: TransactionCoordinator) -> None:
    a = await coordinator.init_producer_id("a", 60_000)
    await coordinator.init_producer_id("b", 60_000)
    await coordinator.add_partitions_to_txn("a", a.producer_id, a.producer_epoch, [("data", 0)])
    assert {m.transactional_id for m in coordinator.list_transactions(None, None)} == {"a", "b"}
    ongoing = coordinator.list_transactions(frozenset({S.ONGOING}), None)
    assert [m.transactional_id for m in ongoing] == ["a"]
    by_pid = coordinator.list_transactions(None, frozenset({a.producer_id}))
    assert [m.transactional_id for m in by_pid] == ["a"]


async def test_requests_for_ids_of_partitions_not_led_here_are_not_coordinator(
        broker: MiniBroker) -> None:
    coordinator = TransactionCoordinator(broker)
    await coordinator.start()  # no __transaction_state yet
    try:
        with pytest.raises(KafkaError) as info:
            await coordinator.init_producer_id("tx", 1000)
        assert info.value.code == ErrorCode.NOT_COORDINATOR
        assert TRANSACTION_STATE_TOPIC not in broker.controller.image.topics_by_name
    finally:
        await coordinator.stop()

