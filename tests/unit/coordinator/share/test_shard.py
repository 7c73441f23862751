"""ShareCoordinatorShard: operations, fencing, snapshots, tombstones, and replay equivalence.

Each operation's records are replayed into the shard as the runtime would after the append;
a second shard that replays the whole log (or the log from `last_redundant_offset` on, as after
a prune) must end in exactly the same state.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.controller.image import MetadataImage, PartitionImage, TopicImage
from kafka_ext.coordinator.runtime import CoordinatorResult
from kafka_ext.coordinator.share.records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    read_share_state_key,
)
from kafka_ext.coordinator.share.shard import ShareCoordinatorShard, ShareShardConfig
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.persister import DeliveryState, SharePartitionKey, StateBatch

TOPIC = uuid.UUID(int=1)
OTHER_TOPIC = uuid.UUID(int=2)
KEY = SharePartitionKey("g", TOPIC, 0)
AVAILABLE, ACKNOWLEDGED = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED


def _image(*topics: uuid.UUID, partitions: int = 2) -> MetadataImage:
    by_id = {t: TopicImage(f"t{t.int}", t, {p: PartitionImage(p, (1,), (1,), 1, 0, 0)
                                              for p in range(partitions)}) for t in topics}
    return MetadataImage(topics_by_name={t.name: t for t in by_id.values()}, topics_by_id=by_id)


class Log:
    """The records a shard's operations wrote, with offsets, replayed as they are appended."""

    def __init__(self, per_snapshot: int = 500, image: MetadataImage | None = None) -> None:
        self.image = image or _image(TOPIC, OTHER_TOPIC)
        self.per_snapshot = per_snapshot
        self.shard = self.new_shard()
        self.records: list[tuple[int, bytes, bytes | None]] = []

    def new_shard(self) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(0, ShareShardConfig(self.per_snapshot), lambda: self.image)

    def apply(self, result: CoordinatorResult[Any], committed: bool = True) -> Any:
        """Append and replay the records; committed at once, as on one replica, unless not."""
        for key, value in result.records:
            offset = len(self.records)
            self.records.append((offset, key, value))
            self.shard.replay(offset, -1, -1, key, value)
        if committed:
            self.shard.on_committed(len(self.records))
        return result.response

    def replayed(self, from_offset: int = 0) -> ShareCoordinatorShard:
        shard = self.new_shard()
        for offset, key, value in self.records[from_offset:]:
            shard.replay(offset, -1, -1, key, value)
        shard.on_committed(len(self.records))
        return shard

    def types(self) -> list[int]:
        return [read_share_state_key(k)[0] for _, k, _ in self.records]


def _batch(first: int, last: int, state: DeliveryState = AVAILABLE,
           count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


def _error(fn: Any) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        fn()
    return info.value.code


# -- initialize and read -----------------------------------------------------------------------

def test_initialize_writes_a_snapshot_and_read_returns_it() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 3, 100, now_ms=1))
    state = log.apply(log.shard.read(KEY, 0, now_ms=2))
    assert (state.state_epoch, state.start_offset, state.batches) == (3, 100, [])
    assert log.types() == [SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE]  # epoch 0 logged


def test_initialize_with_an_older_state_epoch_is_fenced() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 5, 0, now_ms=1))
    assert _error(lambda: log.shard.initialize(KEY, 4, 0, now_ms=2)) == ErrorCode.FENCED_STATE_EPOCH
    log.apply(log.shard.initialize(KEY, 5, 7, now_ms=2))  # the same epoch may start again
    assert log.shard.states[KEY].start_offset == 7


def test_initialize_drops_the_batches_of_the_state_before() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.write(KEY, 0, 0, 0, -1, [_batch(0, 9)], now_ms=2))
    log.apply(log.shard.initialize(KEY, 1, 50, now_ms=3))
    state = log.apply(log.shard.read(KEY, 0, now_ms=4))
    assert (state.state_epoch, state.start_offset, state.batches) == (1, 50, [])


def test_uninitialized_keys_are_unknown_to_read_write_and_summary() -> None:
    shard = Log().shard
    for call in (lambda: shard.read(KEY, 0, now_ms=1),
                 lambda: shard.write(KEY, 0, 0, 0, -1, [], now_ms=1),
                 lambda: shard.read_summary(KEY)):
        assert _error(call) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_topic_or_partition_the_metadata_lacks_is_unknown() -> None:
    shard = Log().shard
    missing_topic = SharePartitionKey("g", uuid.UUID(int=99), 0)
    missing_partition = SharePartitionKey("g", TOPIC, 7)
    for key in (missing_topic, missing_partition):
        assert _error(lambda k=key: shard.initialize(k, 0, 0, now_ms=1)) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert _error(lambda k=key: shard.delete(k)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_negative_partition_is_an_invalid_request() -> None:
    key = SharePartitionKey("g", TOPIC, -1)
    assert _error(lambda: Log().shard.initialize(key, 0, 0, now_ms=1)) == ErrorCode.INVALID_REQUEST


# -- leader epochs -----------------------------------------------------------------------------

def test_a_read_by_a_newer_leader_logs_its_epoch_and_fences_the_older_one() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.read(KEY, 3, now_ms=2))
    assert log.shard.states[KEY].leader_epoch == 3
    assert _error(lambda: log.shard.read(KEY, 2, now_ms=3)) == ErrorCode.FENCED_LEADER_EPOCH
    assert _error(lambda: log.shard.write(KEY, 0, 2, 0, -1, [], now_ms=3)) == (
        ErrorCode.FENCED_LEADER_EPOCH)
    assert log.shard.read(KEY, 3, now_ms=3).records == []  # the same leader again: nothing
    assert log.replayed().states == log.shard.states


def test_a_write_by_a_newer_leader_moves_the_epoch() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.write(KEY, 0, 4, 0, -1, [_batch(0, 0)], now_ms=2))
    assert log.shard.read_summary(KEY).leader_epoch == 4
    assert _error(lambda: log.shard.read(KEY, 3, now_ms=3)) == ErrorCode.FENCED_LEADER_EPOCH


# -- writes ------------------------------------------------------------------------------------

def test_a_write_with_an_older_state_epoch_is_fenced() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 2, 0, now_ms=1))
    assert _error(lambda: log.shard.write(KEY, 1, 0, 0, -1, [], now_ms=2)) == (
        ErrorCode.FENCED_STATE_EPOCH)


def test_writes_merge_batches_and_move_the_start_offset() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.write(KEY, 0, 0, 0, 0, [_batch(0, 9)], now_ms=2))
    log.apply(log.shard.write(KEY, 0, 0, -1, 3, [_batch(2, 4, ACKNOWLEDGED)], now_ms=3))
    log.apply(log.shard.write(KEY, 0, 0, 3, 2, [_batch(10, 12, count=2)], now_ms=4))
    state = log.shard.read(KEY, 0, now_ms=5).response
    assert state.start_offset == 3
    assert state.batches == [_batch(3, 4, ACKNOWLEDGED), _batch(5, 9), _batch(10, 12, count=2)]
    assert log.shard.read_summary(KEY).delivery_complete_count == 2
    assert log.types() == [SHARE_SNAPSHOT_RECORD_TYPE] + [SHARE_UPDATE_RECORD_TYPE] * 3


def test_a_write_that_leaves_fields_at_minus_one_keeps_them() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 10, now_ms=1))
    log.apply(log.shard.write(KEY, 0, 0, 20, 5, [], now_ms=2))
    log.apply(log.shard.write(KEY, 0, 0, -1, -1, [_batch(20, 21)], now_ms=3))
    summary = log.shard.read_summary(KEY)
    assert (summary.start_offset, summary.delivery_complete_count) == (20, 5)


def test_a_batch_that_is_not_a_range_is_an_invalid_request() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    assert _error(lambda: log.shard.write(KEY, 0, 0, 0, -1, [_batch(5, 4)], now_ms=2)) == (
        ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("per_snapshot", [0, 1, 3])
def test_a_snapshot_follows_every_n_updates(per_snapshot: int) -> None:
    log = Log(per_snapshot=per_snapshot)
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    for i in range(8):
        log.apply(log.shard.write(KEY, 0, 0, -1, -1, [_batch(i, i, ACKNOWLEDGED)], now_ms=2 + i))
    expected = [SHARE_SNAPSHOT_RECORD_TYPE]
    for _ in range(8):
        updates = len(expected) - 1 - max(i for i, t in enumerate(expected)
                                          if t == SHARE_SNAPSHOT_RECORD_TYPE)
        expected.append(SHARE_UPDATE_RECORD_TYPE if updates < per_snapshot
                        else SHARE_SNAPSHOT_RECORD_TYPE)
    assert log.types() == expected
    assert log.shard.states[KEY].batches == (_batch(0, 7, ACKNOWLEDGED),)
    assert log.replayed().states == log.shard.states


def test_a_write_that_raises_the_state_epoch_is_a_snapshot() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.write(KEY, 1, 0, 0, -1, [_batch(0, 1)], now_ms=2))
    assert log.types()[-1] == SHARE_SNAPSHOT_RECORD_TYPE
    assert _error(lambda: log.shard.write(KEY, 0, 0, 0, -1, [], now_ms=3)) == (
        ErrorCode.FENCED_STATE_EPOCH)


# -- delete ------------------------------------------------------------------------------------

def test_delete_writes_a_tombstone_and_forgets_the_key() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.delete(KEY))
    assert log.records[-1][2] is None
    assert KEY not in log.shard.states
    assert _error(lambda: log.shard.read(KEY, 0, now_ms=2)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert log.shard.delete(KEY).records == []  # nothing to delete: NONE, nothing written
    assert log.replayed().states == {}


def test_a_deleted_key_starts_afresh_when_initialized_again() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 4, 0, now_ms=1))
    log.apply(log.shard.read(KEY, 9, now_ms=1))
    log.apply(log.shard.delete(KEY))
    log.apply(log.shard.initialize(KEY, 0, 5, now_ms=2))  # epochs of the old state are gone
    assert log.apply(log.shard.read(KEY, 0, now_ms=3)).start_offset == 5


def test_delete_topics_tombstones_every_key_of_those_topics() -> None:
    log = Log()
    keys = [SharePartitionKey(g, t, p) for g in ("a", "b") for t in (TOPIC, OTHER_TOPIC)
            for p in (0, 1)]
    for k in keys:
        log.apply(log.shard.initialize(k, 0, 0, now_ms=1))
    assert log.apply(log.shard.delete_topics({OTHER_TOPIC})) == 4
    assert set(log.shard.states) == {k for k in keys if k.topic_id == TOPIC}
    assert log.replayed().states == log.shard.states


# -- pruning and cold snapshots ----------------------------------------------------------------

def test_records_below_the_last_redundant_offset_are_not_needed() -> None:
    log = Log(per_snapshot=2)
    other = SharePartitionKey("h", TOPIC, 1)
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.initialize(other, 0, 0, now_ms=1))
    for i in range(7):
        log.apply(log.shard.write(KEY, 0, 0, -1, -1, [_batch(i, i, ACKNOWLEDGED)], now_ms=2))
    assert log.shard.last_redundant_offset() == 1  # `other`'s only snapshot holds it back
    log.apply(log.shard.write(other, 0, 0, -1, -1, [_batch(0, 0)], now_ms=3))
    log.apply(log.shard.write(other, 0, 0, -1, -1, [_batch(1, 1)], now_ms=3))
    log.apply(log.shard.write(other, 0, 0, -1, -1, [_batch(2, 2)], now_ms=3))  # a snapshot
    prune = log.shard.last_redundant_offset()
    assert prune > 1
    assert log.replayed(prune).states == log.shard.states


def test_only_committed_snapshots_move_the_prune_point() -> None:
    """A snapshot still replicating could be lost in a failover: the snapshot before it and
    the records after that stay until it is committed."""
    log = Log(per_snapshot=0)
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.write(KEY, 0, 0, -1, -1, [_batch(0, 0)], now_ms=2), committed=False)
    assert log.shard.last_redundant_offset() == 0
    log.shard.on_committed(len(log.records))
    assert log.shard.last_redundant_offset() == 1
    log.apply(log.shard.delete(KEY), committed=False)
    assert log.shard.last_redundant_offset() == 1  # the tombstone is not committed yet
    log.shard.on_committed(len(log.records))
    assert log.shard.last_redundant_offset() == 3


def test_with_no_live_key_everything_committed_is_redundant() -> None:
    log = Log()
    log.apply(log.shard.initialize(KEY, 0, 0, now_ms=1))
    log.apply(log.shard.delete(KEY))
    assert log.shard.last_redundant_offset() == len(log.records)


def test_cold_keys_are_snapshotted_again_until_every_key_is_a_cold_snapshot() -> None:
    log = Log()
    cold, warm = KEY, SharePartitionKey("h", TOPIC, 1)
    log.apply(log.shard.initialize(cold, 0, 0, now_ms=1000))
    log.apply(log.shard.initialize(warm, 0, 0, now_ms=9000))
    assert log.apply(log.shard.snapshot_cold_partitions(now_ms=10000, interval_ms=5000)) == 1
    assert log.shard.states[cold].write_timestamp_ms == 10000
    assert log.shard.states[cold].create_timestamp_ms == 1000
    assert log.shard.last_redundant_offset() == 1  # `warm` now holds the prune back
    # `warm` is not a cold snapshot yet, so every stale key is snapshotted again (Kafka's rule).
    assert log.apply(log.shard.snapshot_cold_partitions(now_ms=20000, interval_ms=5000)) == 2
    # Every key now is one: the partition is quiet, snapshots would not help the prune.
    assert log.shard.snapshot_cold_partitions(now_ms=40000, interval_ms=5000).records == []
    assert log.replayed().states == log.shard.states


# -- replay equivalence over random histories --------------------------------------------------

_KEYS = [KEY, SharePartitionKey("g", TOPIC, 1), SharePartitionKey("h", OTHER_TOPIC, 0)]
_keys = st.sampled_from(_KEYS)
_states = st.sampled_from([AVAILABLE, DeliveryState.ACQUIRED, ACKNOWLEDGED, DeliveryState.ARCHIVED])
_batches = st.lists(st.builds(lambda f, n, s, c: StateBatch(f, f + n, s, c), st.integers(0, 40),
                              st.integers(0, 8), _states, st.integers(0, 3)), max_size=3)
_write = st.tuples(st.just("write"), _keys, st.integers(0, 2), st.integers(0, 3),
                  st.integers(-1, 30), st.integers(-1, 10), _batches)
_ops = st.lists(st.one_of(
    st.tuples(st.just("initialize"), _keys, st.integers(0, 1), st.integers(-1, 20)),
    st.tuples(st.just("read"), _keys, st.integers(0, 3)),
    _write, _write, _write,
    st.tuples(st.just("delete"), _keys),
    st.tuples(st.just("cold"), st.integers(0, 3)),
    st.tuples(st.just("drop_topic"),),
), min_size=5, max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, per_snapshot=st.sampled_from([0, 1, 2, 500]))
def test_replay_rebuilds_the_live_state_from_the_start_and_from_the_prune_point(
        ops: list[tuple[Any, ...]], per_snapshot: int) -> None:
    log = Log(per_snapshot=per_snapshot)
    now = 0
    for key in _KEYS:
        log.apply(log.shard.initialize(key, 0, 0, now_ms=now))
    for op in ops:
        now += 1000
        shard = log.shard
        try:
            if op[0] == "initialize":
                log.apply(shard.initialize(op[1], op[2], op[3], now_ms=now))
            elif op[0] == "read":
                log.apply(shard.read(op[1], op[2], now_ms=now))
            elif op[0] == "write":
                _, key, state_epoch, leader_epoch, start, count, batches = op
                log.apply(shard.write(key, state_epoch, leader_epoch, start, count, batches,
                                      now_ms=now))
            elif op[0] == "delete":
                log.apply(shard.delete(op[1]))
            elif op[0] == "cold":
                log.apply(shard.snapshot_cold_partitions(now_ms=now, interval_ms=op[1] * 1000))
            else:
                log.apply(shard.delete_topics({OTHER_TOPIC}))
        except KafkaError:
            pass
    assert log.replayed().states == log.shard.states
    pruned = log.replayed(log.shard.last_redundant_offset())
    assert pruned.states == log.shard.states
    assert pruned.updates_since_snapshot == {
        k: v for k, v in log.shard.updates_since_snapshot.items() if k in log.shard.states}
