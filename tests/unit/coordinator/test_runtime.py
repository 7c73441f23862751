"""CoordinatorRuntime over real logs: topic creation, writes, replay, transactions, timers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafka_ext.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorRuntime,
    java_string_hash,
    partition_for_key,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import decode_all_batches
from tests.unit.coordinator.mini_broker import MiniBroker

TOPIC = "__test_state"


@dataclass
class KeyValueShard:
    """A tiny tenant: key -> value, with transactional writes pending until their marker."""

    partition: int
    state: dict[bytes, bytes] = field(default_factory=dict)
    pending: dict[int, dict[bytes, bytes | None]] = field(default_factory=dict)
    replayed: list[int] = field(default_factory=list)
    loaded: bool = False
    unloaded: bool = False

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        self.replayed.append(offset)
        if producer_id != -1:
            self.pending.setdefault(producer_id, {})[key] = value
        elif value is None:
            self.state.pop(key, None)
        else:
            self.state[key] = value

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, committed: bool,
                               offset: int) -> None:
        for key, value in self.pending.pop(producer_id, {}).items():
            if committed and value is not None:
                self.state[key] = value

    def on_loaded(self) -> None:
        self.loaded = True

    def on_unloaded(self) -> None:
        self.unloaded = True


def put(key: bytes, value: bytes | None, answer: str = "ok"):
    def op(shard: KeyValueShard) -> CoordinatorResult[str]:
        return CoordinatorResult([(key, value)], answer)
    return op


def _runtime(broker: MiniBroker, partitions: int = 3) -> CoordinatorRuntime[KeyValueShard]:
    return CoordinatorRuntime(broker, TOPIC, partitions,
                              {"cleanup.policy": "compact", "segment.bytes": "1048576"},
                              KeyValueShard)


async def _loaded(runtime: CoordinatorRuntime[KeyValueShard], partition: int) -> KeyValueShard:
    while runtime.is_loading(partition):
        await asyncio.sleep(0)
    return runtime.shard(partition)


def _log_keys(broker: MiniBroker, partition: int) -> list[bytes | None]:
    plog = broker.replica_manager.partitions[(TOPIC, partition)].log
    info = plog.read(0, 1 << 24)
    return [r.key for view in info.records for _, records in decode_all_batches(view)
            for r in records]


def test_partition_for_follows_java_string_hash_code() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("\u00e9t\u00e9") == 3 * 0 + (233 * 31 + 116) * 31 + 233
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert partition_for_key("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert partition_for_key("hello", 50) == 99162322 % 50
    assert partition_for_key("my-group", 50) == abs(java_string_hash("my-group")) % 50


async def test_ensure_topic_creates_a_compacted_topic_once(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker, partitions=4)
    await runtime.ensure_topic()
    await runtime.ensure_topic()
    image = mini_broker.controller.image
    assert len(image.topics_by_name[TOPIC].partitions) == 4
    assert image.topic_configs(TOPIC)["cleanup.policy"] == "compact"
    assert image.topic_configs(TOPIC)["segment.bytes"] == "1048576"


async def test_shards_load_when_topic_appears_and_unknown_partitions_are_not_ours(
        mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    with pytest.raises(KafkaError) as err:
        runtime.shard(0)
    assert err.value.code == ErrorCode.NOT_COORDINATOR
    await runtime.ensure_topic()
    shards = [await _loaded(runtime, p) for p in range(3)]
    assert all(s.loaded for s in shards) and runtime.loaded_partitions() == [0, 1, 2]
    with pytest.raises(KafkaError) as err:
        runtime.shard(3)
    assert err.value.code == ErrorCode.NOT_COORDINATOR
    await runtime.stop()
    assert all(s.unloaded for s in shards)


async def test_write_appends_one_batch_replays_and_answers(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    shard = await _loaded(runtime, 1)

    def two_records(s: KeyValueShard) -> CoordinatorResult[int]:
        return CoordinatorResult([(b"a", b"1"), (b"b", b"2")], len(s.state))

    assert await runtime.write(1, two_records) == 0
    assert shard.state == {b"a": b"1", b"b": b"2"} and shard.replayed == [0, 1]
    plog = mini_broker.replica_manager.partitions[(TOPIC, 1)].log
    headers = [h for view in plog.read(0, 1 << 20).records for h, _ in decode_all_batches(view)]
    assert [(h.base_offset, h.records_count) for h in headers] == [(0, 2)]
    assert await runtime.write(1, lambda s: CoordinatorResult([], "nothing")) == "nothing"
    assert plog.log_end_offset == 2
    await runtime.stop()


async def test_failed_operation_appends_nothing(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    await _loaded(runtime, 0)

    def refuse(shard: KeyValueShard) -> CoordinatorResult[None]:
        raise KafkaError(ErrorCode.ILLEGAL_GENERATION, "stale")

    with pytest.raises(KafkaError) as err:
        await runtime.write(0, refuse)
    assert err.value.code == ErrorCode.ILLEGAL_GENERATION
    assert _log_keys(mini_broker, 0) == []
    await runtime.stop()


async def test_concurrent_writes_apply_in_call_order(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    shard = await _loaded(runtime, 2)
    seen: list[int] = []

    def op(i: int):
        def run(s: KeyValueShard) -> CoordinatorResult[int]:
            seen.append(len(s.state))  # every earlier write is already applied
            return CoordinatorResult([(b"k%d" % i, b"v")], i)
        return run

    answers = await asyncio.gather(*(runtime.write(2, op(i)) for i in range(20)))
    assert answers == list(range(20)) and seen == list(range(20))
    assert _log_keys(mini_broker, 2) == [b"k%d" % i for i in range(20)]
    assert len(shard.state) == 20
    await runtime.stop()


async def test_state_is_rebuilt_from_the_log_after_restart(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    runtime = _runtime(broker)
    await runtime.start()
    await runtime.ensure_topic()
    await _loaded(runtime, 0)
    for i in range(50):
        await runtime.write(0, put(b"k%d" % (i % 10), b"v%d" % i))
    await runtime.write(0, put(b"k3", None))  # tombstone
    await runtime.write(0, put(b"t", b"committed"), producer_id=7, producer_epoch=0,
                        transactional=True)
    await runtime.write_end_transaction(0, 7, 0, coordinator_epoch=0, committed=True)
    await runtime.write(0, put(b"u", b"aborted"), producer_id=8, producer_epoch=0,
                        transactional=True)
    await runtime.write_end_transaction(0, 8, 0, coordinator_epoch=0, committed=False)
    await runtime.write(0, put(b"w", b"open"), producer_id=9, producer_epoch=0,
                        transactional=True)
    before = runtime.shard(0)
    expected = dict(before.state)
    await runtime.stop()
    broker.stop()

    restarted = MiniBroker(tmp_path / "data")
    await restarted.start()
    runtime = _runtime(restarted)
    await runtime.start()
    assert runtime.is_loading(0)  # a non-empty log loads in a task, refusing requests meanwhile
    with pytest.raises(KafkaError) as err:
        runtime.shard(0)
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    shard = await _loaded(runtime, 0)
    assert shard.loaded and shard.state == expected
    assert b"k3" not in shard.state and shard.state[b"t"] == b"committed"
    assert b"u" not in shard.state and shard.pending == {9: {b"w": b"open"}}
    await runtime.stop()
    restarted.stop()


async def test_load_replays_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    runtime = _runtime(broker, partitions=1)
    await runtime.start()
    await runtime.ensure_topic()
    await _loaded(runtime, 0)
    for i in range(30):
        await runtime.write(0, put(b"k%d" % i, b"x" * 100))
    await runtime.stop()
    monkeypatch.setattr("kafka_ext.coordinator.runtime.LOAD_CHUNK_BYTES", 300)
    runtime = _runtime(broker, partitions=1)
    await runtime.start()
    steps = 0
    while runtime.is_loading(0):
        steps += 1
        await asyncio.sleep(0)
    assert steps > 5  # the load yielded to the loop many times
    assert sorted(runtime.shard(0).state) == sorted(b"k%d" % i for i in range(30))
    await runtime.stop()
    broker.stop()


async def test_transactional_records_apply_only_after_commit(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    shard = await _loaded(runtime, 0)
    await runtime.write(0, put(b"a", b"1"), producer_id=5, producer_epoch=2, transactional=True)
    assert shard.state == {} and shard.pending == {5: {b"a": b"1"}}
    offset = await runtime.write_end_transaction(0, 5, 2, coordinator_epoch=0, committed=True)
    assert offset == 1 and shard.state == {b"a": b"1"}
    plog = mini_broker.replica_manager.partitions[(TOPIC, 0)].log
    headers = [h for view in plog.read(0, 1 << 20).records for h, _ in decode_all_batches(view)]
    assert [(h.producer_id, h.producer_epoch, h.is_transactional, h.is_control)
            for h in headers] == [(5, 2, True, False), (5, 2, True, True)]
    await runtime.stop()


async def test_timers_fire_replace_and_cancel(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    await _loaded(runtime, 0)
    fired: list[str] = []
    done = asyncio.Event()

    async def finish() -> None:
        fired.append("last")
        done.set()

    runtime.schedule(0, "a", 0, lambda: fired.append("a-old"))
    runtime.schedule(0, "a", 0, lambda: fired.append("a"))  # replaces the first
    runtime.schedule(0, "b", 0, lambda: fired.append("b"))
    runtime.cancel(0, "b")
    runtime.schedule(0, "z", 1, finish)
    await asyncio.wait_for(done.wait(), 5)
    assert fired == ["a", "last"]
    assert not runtime.has_timer(0, "a")
    await runtime.stop()


async def test_deleting_the_topic_unloads_shards_and_their_timers(mini_broker: MiniBroker) -> None:
    runtime = _runtime(mini_broker)
    await runtime.start()
    await runtime.ensure_topic()
    shard = await _loaded(runtime, 0)
    runtime.schedule(0, "session", 60_000, lambda: None)
    await mini_broker.controller.delete_topics([TOPIC])
    assert shard.unloaded and not runtime.has_timer(0, "session")
    with pytest.raises(KafkaError) as err:
        await runtime.write(0, put(b"a", b"1"))
    assert err.value.code == ErrorCode.NOT_COORDINATOR
    await runtime.stop()
