"""Warm followers (kafka_ext/coordinator/diskless/follower.py): a broker following a Diskless
coordinator keeps its database applied up to its replica's high watermark, so becoming the
leader replays nothing it already had."""

from __future__ import annotations

from pathlib import Path

from kafka_ext.coordinator.diskless.follower import WarmFollowers
from kafka_ext.coordinator.diskless.snapshots import (
    SNAPSHOT_PREFIX,
    SNAPSHOTS_KEPT,
    RemoteSnapshots,
    snapshot_key,
)
from kafka_ext.coordinator.diskless.state import AppliedChanges, remove_database
from kafka_ext.diskless.object_store import ObjectStore
from tests.unit.coordinator.test_diskless_coordinator import Harness, _workload, batch, until


async def test_a_follower_database_is_kept_warm_and_the_load_replays_nothing(
        h: Harness) -> None:
    tid, keys = await _workload(h)
    before = await h.view(tid, 3, keys)
    await h.coordinator.stop()  # this node leads nothing now: it is a follower of both
    for c in (0, 1):
        remove_database(h.db_path(c))
    led: set[int] = set()
    changed: list[AppliedChanges] = []
    followers = WarmFollowers(h.broker, "__diskless_metadata", h.coordinator.db_path,
                              led.__contains__, h.clock, on_applied=changed.append)
    applied = await followers.catch_up_all()
    assert applied == sum(h.metadata_log(c).high_watermark for c in (0, 1))
    # What each round changed is told (the coordinator wakes fetches waiting on it).
    assert set().union(*(c.partitions for c in changed)) == {(tid, p) for p in range(3)}
    assert await followers.catch_up_all() == 0  # nothing new
    await followers.stop()
    assert [h.applied_offset(c) for c in (0, 1)] == [
        h.metadata_log(c).high_watermark - 1 for c in (0, 1)]
    await h.start_coordinator()
    assert [h.coordinator.runtime.shard(c).replayed_at_load for c in (0, 1)] == [0, 0]
    assert await h.view(tid, 3, keys) == before


async def test_the_coordinator_follows_what_it_does_not_lead_and_hands_over_on_load(
        h: Harness) -> None:
    tid, _ = await _workload(h)
    cid = h.coordinator.coordinator_of(tid, 0)
    # Leadership of `cid` moves away (the runtime unloads it): the database is followed.
    h.coordinator.runtime._unload(cid)
    assert not h.coordinator.runtime.leads(cid)
    end = h.metadata_log(cid).high_watermark
    await h.coordinator.followers.catch_up_all()
    assert h.applied_offset(cid) == end - 1
    assert cid in h.coordinator.followers._stores
    # It comes back: the follower lets go of the database before the shard opens it.
    h.coordinator.runtime._load(cid, 0)
    assert cid not in h.coordinator.followers._stores
    await until(lambda: h.coordinator.hosts(cid))
    assert h.coordinator.runtime.shard(cid).replayed_at_load == 0
    [answer] = await h.commit("wal/after", [batch(tid, 0)])
    assert answer.error_code == 0
    assert (await h.find(tid, 0, 0)).high_watermark == answer.assigned_base_offset + 1


def _with_remote_snapshots(h: Harness, root: Path) -> ObjectStore:
    """Upload snapshots to a local object store, from now on and after restarts."""
    store = h.snapshot_store = ObjectStore.from_url(f"file://{root}")
    h.coordinator.remote_snapshots = RemoteSnapshots(store, h.broker.run_blocking)
    return store


def _drop_local_state(h: Harness, coordinator_id: int) -> None:
    remove_database(h.db_path(coordinator_id))
    for _, path in h.coordinator.snapshot_paths(coordinator_id):
        remove_database(path)


async def test_uploaded_snapshots_let_a_replica_without_state_restore_after_pruning(
        h: Harness, tmp_path: Path) -> None:
    store = _with_remote_snapshots(h, tmp_path / "objects")
    tid, keys = await _workload(h)
    cid = h.coordinator.coordinator_of(tid, 0)
    offsets = []
    for i in range(3):
        await h.commit(f"wal/s{i}", [batch(tid, 0)])
        keys.append(f"wal/s{i}")
        offsets.append(await h.coordinator.take_snapshot(cid))
    assert h.metadata_log(cid).log_start_offset == offsets[-1] + 1  # pruned
    uploaded = sorted(i.key for i in await store.list(SNAPSHOT_PREFIX))
    assert uploaded == [snapshot_key(cid, o) for o in offsets[-SNAPSHOTS_KEPT:]]
    await h.commit("wal/tail", [batch(tid, 0)])  # after the snapshot
    keys.append("wal/tail")
    before = await h.view(tid, 3, keys)

    # A new leader with neither database nor local snapshot restores from the store.
    await h.coordinator.stop()
    _drop_local_state(h, cid)
    await h.start_coordinator()
    assert await h.view(tid, 3, keys) == before
    assert h.coordinator.runtime.shard(cid).replayed_at_load == (
        h.metadata_log(cid).log_end_offset - 1 - offsets[-1])

    # A follower that lost its state does the same, then stays warm.
    h.coordinator.runtime._unload(cid)
    _drop_local_state(h, cid)
    await h.coordinator.followers.catch_up_all()  # restores the snapshot
    await h.coordinator.followers.catch_up_all()  # applies the log after it
    assert h.applied_offset(cid) == h.metadata_log(cid).high_watermark - 1
    h.coordinator.runtime._load(cid, 0)
    await until(lambda: h.coordinator.hosts(cid))
    assert h.coordinator.runtime.shard(cid).replayed_at_load == 0
    assert await h.view(tid, 3, keys) == before


async def test_with_several_replicas_the_log_is_kept_back_to_the_previous_snapshot(
        h: Harness, tmp_path: Path) -> None:
    _with_remote_snapshots(h, tmp_path / "objects")
    h.coordinator._sole_replica = lambda coordinator_id: False  # type: ignore[method-assign]
    tid, _ = await _workload(h)
    cid = h.coordinator.coordinator_of(tid, 0)
    first = await h.coordinator.take_snapshot(cid)
    assert h.metadata_log(cid).log_start_offset == 0  # one snapshot: nothing older to prune to
    await h.commit("wal/s", [batch(tid, 0)])
    await h.coordinator.take_snapshot(cid)
    assert h.metadata_log(cid).log_start_offset == first + 1
