"""KIP-848 consumer groups: assignors, reconciliation, epochs, offsets and replay over real logs."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.coordinator.group.assignors import (
    AssignmentMember,
    RangeAssignor,
    UniformAssignor,
)
from kafka_ext.coordinator.group.consumer_group import (
    ConsumerGroupMember,
    MemberState,
    reconcile,
)
from kafka_ext.coordinator.group.consumer_group_manager import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    _compile,
)
from kafka_ext.coordinator.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    OffsetCommitEntry,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from tests.unit.coordinator.mini_broker import MiniBroker
from tests.unit.coordinator.test_group_coordinator import Clock, until

GROUP = "kip848-app"
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _flat(assignment: dict[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


# -- assignors (pure) --------------------------------------------------------------------------

def test_uniform_assignor_balances_partitions_within_one() -> None:
    members = [AssignmentMember(f"m{i}", frozenset({T1, T2})) for i in range(4)]
    out = UniformAssignor().assign(members, {T1: 6, T2: 3}, {})
    sizes = sorted(len(_flat(a)) for a in out.values())
    assert sizes == [2, 2, 2, 3]
    everything = [tp for a in out.values() for tp in _flat(a)]
    assert sorted(everything) == sorted({(T1, p) for p in range(6)} | {(T2, p) for p in range(3)})


def test_uniform_assignor_keeps_partitions_of_members_that_stay() -> None:
    two = [AssignmentMember(m, frozenset({T1})) for m in ("a", "b")]
    before = UniformAssignor().assign(two, {T1: 6}, {})
    three = two + [AssignmentMember("c", frozenset({T1}))]
    after = UniformAssignor().assign(three, {T1: 6}, before)
    assert [len(_flat(after[m])) for m in ("a", "b", "c")] == [2, 2, 2]
    assert _flat(after["a"]) <= _flat(before["a"]) and _flat(after["b"]) <= _flat(before["b"])


def test_uniform_assignor_gives_a_topic_only_to_its_subscribers() -> None:
    members = [AssignmentMember("a", frozenset({T1})), AssignmentMember("b", frozenset({T1, T2}))]
    out = UniformAssignor().assign(members, {T1: 2, T2: 2}, {})
    assert T2 not in out["a"]
    assert _flat(out["a"]) | _flat(out["b"]) == {(T1, 0), (T1, 1), (T2, 0), (T2, 1)}
    assert abs(len(_flat(out["a"])) - len(_flat(out["b"]))) <= 1 or T2 in out["b"]


def test_range_assignor_gives_contiguous_ranges_and_copartitions_topics() -> None:
    members = [AssignmentMember(m, frozenset({T1, T2})) for m in ("b", "a", "c")]
    out = RangeAssignor().assign(members, {T1: 7, T2: 7}, {})
    assert out["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert out["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}
    assert out["c"] == {T1: frozenset({5, 6}), T2: frozenset({5, 6})}


# -- reconciliation (pure) ---------------------------------------------------------------------

def test_member_revokes_before_its_epoch_moves_and_new_partitions_wait_for_release() -> None:
    old_owner = ConsumerGroupMember("a", member_epoch=1, assigned={T1: frozenset({0, 1})})
    newcomer = ConsumerGroupMember("b", member_epoch=0)
    # Target at epoch 2: a keeps 0, b gets 1.
    a2 = reconcile(old_owner, 2, {T1: frozenset({0})}, {}, None)
    assert (a2.state, a2.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 1)
    assert a2.assigned == {T1: frozenset({0})} and a2.pending_revocation == {T1: frozenset({1})}
    b2 = reconcile(newcomer, 2, {T1: frozenset({1})}, {(T1, 0): "a", (T1, 1): "a"}, None)
    assert (b2.state, b2.member_epoch, b2.assigned) == (
        MemberState.UNRELEASED_PARTITIONS, 2, {})
    # a still reports partition 1: nothing moves.
    assert reconcile(a2, 2, {T1: frozenset({0})}, {}, {T1: frozenset({0, 1})}) == a2
    a3 = reconcile(a2, 2, {T1: frozenset({0})}, {}, {T1: frozenset({0})})
    assert (a3.state, a3.member_epoch, a3.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    b3 = reconcile(b2, 2, {T1: frozenset({1})}, {(T1, 0): "a"}, {})
    assert (b3.state, b3.assigned) == (MemberState.STABLE, {T1: frozenset({1})})


# -- the coordinator over real logs ------------------------------------------------------------

class CgHarness:
    def __init__(self, broker: MiniBroker, clock: Clock | None = None, **consumer: Any) -> None:
        self.broker = broker
        self.clock = clock or Clock()
        defaults: dict[str, Any] = dict(session_timeout_ms=60_000, heartbeat_interval_ms=500)
        defaults.update(consumer)
        self.coordinator = GroupCoordinator(
            broker, GroupConfig(num_partitions=3, initial_rebalance_delay_ms=0,
                                min_session_timeout_ms=10,
                                offsets_retention_ms=60_000,
                                offsets_retention_check_interval_ms=3_600_000,
                                consumer=ConsumerGroupConfig(**defaults)), self.clock)

    async def start(self) -> None:
        await self.coordinator.start()
        await self.coordinator.runtime.ensure_topic()
        runtime = self.coordinator.runtime
        await until(lambda: len(runtime.loaded_partitions()) == 3)

    async def topic(self, name: str, partitions: int) -> uuid.UUID:
        (result,) = await self.broker.controller.create_topics(
            [TopicCreation(name, partitions, 1)], validate_only=False)
        assert result.error == ErrorCode.NONE
        return result.topic_id

    async def hb(self, member_id: str, epoch: int, *, topics: list[str] | None = None,
                 owned: dict[uuid.UUID, frozenset[int]] | None = None, regex: str | None = None,
                 assignor: str | None = None, instance: str | None = None,
                 rebalance_timeout_ms: int = 30_000) -> HeartbeatResult:
        return await self.coordinator.consumer_group_heartbeat(HeartbeatRequest(
            group_id=GROUP, member_id=member_id, member_epoch=epoch, instance_id=instance,
            rebalance_timeout_ms=rebalance_timeout_ms if epoch == 0 else -1,
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex, server_assignor=assignor, owned=owned,
            client_id="cli", client_host="/127.0.0.1"))

    def group(self) -> Any:
        return self.coordinator.consumer_group_describe(GROUP)


@pytest.fixture
async def cg(mini_broker: MiniBroker) -> AsyncIterator[CgHarness]:
    h = CgHarness(mini_broker)
    await h.start()
    yield h
    await h.coordinator.stop()


async def _converge(h: CgHarness, members: dict[str, int],
                    owned: dict[str, dict[uuid.UUID, frozenset[int]]]) -> None:
    """Heartbeat every member (reporting what it holds) until the group is Stable; checks at
    every step that no partition is held by two members."""
    for _ in range(20):
        for member_id in list(members):
            r = await h.hb(member_id, members[member_id], owned=owned[member_id])
            members[member_id] = r.member_epoch
            if r.assignment is not None:
                owned[member_id] = r.assignment
            held = [tp for a in owned.values() for tp in _flat(a)]
            assert len(held) == len(set(held)), "a partition is owned by two members"
        if h.group().state.value == "Stable":
            return
    raise AssertionError("group did not converge")


async def test_three_members_split_six_partitions_and_a_leaver_hands_over(cg: CgHarness) -> None:
    tid = await cg.topic("orders", 6)
    epochs: dict[str, int] = {}
    owned: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for name in ("a", "b", "c"):
        r = await cg.hb(name, 0, topics=["orders"])
        assert r.member_id == name and r.heartbeat_interval_ms == 500
        epochs[name], owned[name] = r.member_epoch, r.assignment or {}
    await _converge(cg, epochs, owned)
    assert sorted(len(_flat(a)) for a in owned.values()) == [2, 2, 2]
    assert set().union(*(_flat(a) for a in owned.values())) == {(tid, p) for p in range(6)}
    group = cg.group()
    assert group.group_epoch == group.assignment_epoch == max(epochs.values()) == 3
    left = await cg.hb("c", -1)
    assert left.member_epoch == -1
    del epochs["c"], owned["c"]
    await _converge(cg, epochs, owned)
    assert set().union(*(_flat(a) for a in owned.values())) == {(tid, p) for p in range(6)}
    assert sorted(cg.group().members) == ["a", "b"]


async def test_epochs_fence_stale_and_unknown_members(cg: CgHarness) -> None:
    await cg.topic("orders", 2)
    r = await cg.hb("a", 0, topics=["orders"])
    with pytest.raises(KafkaError) as fenced:
        await cg.hb("a", r.member_epoch + 1)
    assert fenced.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KafkaError) as unknown:
        await cg.hb("ghost", 3)
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as bad:
        await cg.hb("b", 0, topics=["orders"], assignor="sticky")
    assert bad.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert (await cg.hb("a", r.member_epoch)).member_epoch == r.member_epoch


async def test_empty_member_id_gets_one_from_the_coordinator(cg: CgHarness) -> None:
    await cg.topic("orders", 1)
    r = await cg.hb("", 0, topics=["orders"])
    assert r.member_id and r.member_epoch == 1 and r.assignment


async def test_offset_commits_need_the_current_member_epoch(cg: CgHarness) -> None:
    await cg.topic("orders", 2)
    r = await cg.hb("a", 0, topics=["orders"])

    async def commit(epoch: int, member: str = "a", version: int = 9) -> list[ErrorCode]:
        return await cg.coordinator.commit_offsets(
            group_id=GROUP, generation_id=epoch, member_id=member, group_instance_id=None,
            retention_time_ms=-1, entries=[OffsetCommitEntry("orders", 0, 42)],
            api_version=version)

    assert await commit(r.member_epoch) == [ErrorCode.NONE]
    for epoch, member, code in ((r.member_epoch - 1, "a", ErrorCode.STALE_MEMBER_EPOCH),
                                (r.member_epoch, "zz", ErrorCode.UNKNOWN_MEMBER_ID)):
        with pytest.raises(KafkaError) as err:
            await commit(epoch, member)
        assert err.value.code == code
    with pytest.raises(KafkaError) as err:
        cg.coordinator.fetch_offsets(GROUP, None, False, member_id="a",
                                     member_epoch=r.member_epoch + 5)
    assert err.value.code == ErrorCode.STALE_MEMBER_EPOCH
    fetched = cg.coordinator.fetch_offsets(GROUP, None, False, member_id="a",
                                           member_epoch=r.member_epoch)
    assert [(f.topic, f.partition, f.offset) for f in fetched] == [("orders", 0, 42)]


async def test_classic_and_consumer_groups_do_not_mix(cg: CgHarness) -> None:
    await cg.topic("orders", 1)
    await cg.hb("a", 0, topics=["orders"])
    joined = await cg.coordinator.join_group(
        group_id=GROUP, member_id="", group_instance_id=None, client_id="c", client_host="/h",
        session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
        protocols=[("range", b"")], api_version=9)
    assert joined.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    error, listed = cg.coordinator.list_groups(set(), {"consumer"})
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [(GROUP, "consumer", "Stable")]
    described = cg.coordinator.describe_group(GROUP)  # DescribeGroups v0-v5: classic only
    assert (described.error, described.state, described.members) == (ErrorCode.NONE, "Dead", [])
    assert await cg.coordinator.delete_group(GROUP) == ErrorCode.NON_EMPTY_GROUP
    await cg.hb("a", -1)
    assert await cg.coordinator.delete_group(GROUP) == ErrorCode.NONE
    with pytest.raises(KafkaError):
        cg.group()


async def test_an_empty_classic_group_with_offsets_upgrades_and_keeps_them(cg: CgHarness
                                                                          ) -> None:
    await cg.topic("orders", 1)
    await cg.coordinator.commit_offsets(
        group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, entries=[OffsetCommitEntry("orders", 0, 7)], api_version=9)
    r = await cg.hb("a", 0, topics=["orders"])
    assert r.member_epoch == 1
    assert [f.offset for f in cg.coordinator.fetch_offsets(GROUP, None, False)] == [7]
    shard = cg.coordinator.runtime.shard(cg.coordinator.partition_for(GROUP))
    assert shard.group(GROUP) is None and shard.consumer_group(GROUP) is not None


async def test_new_partitions_and_regex_subscriptions_recompute_the_target(cg: CgHarness
                                                                         ) -> None:
    tid = await cg.topic("events-a", 1)
    r = await cg.hb("a", 0, regex="events-.*")
    assert _flat(r.assignment or {}) == {(tid, 0)}
    tid_b = await cg.topic("events-b", 2)
    await cg.broker.controller.create_partitions("events-a", 3, None, False)
    await until(lambda: sorted(t.num_partitions for t in
                               cg.group().subscription_metadata.values()) == [2, 3],
                "target recomputed")
    r = await cg.hb("a", r.member_epoch, owned=r.assignment)
    assert _flat(r.assignment or {}) == {(tid, 0), (tid, 1), (tid, 2), (tid_b, 0), (tid_b, 1)}


async def test_session_timeout_frees_the_partitions_of_a_silent_member(
        mini_broker: MiniBroker) -> None:
    h = CgHarness(mini_broker, session_timeout_ms=100)
    await h.start()
    try:
        await h.topic("orders", 2)
        await h.hb("a", 0, topics=["orders"])
        await until(lambda: not h.group().members, "member expired")
        assert h.group().state.value == "Empty"
    finally:
        await h.coordinator.stop()


async def test_consumer_groups_survive_a_restart(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = CgHarness(broker)
    await h.start()
    tid = await h.topic("orders", 4)
    ra = await h.hb("a", 0, topics=["orders"], assignor="range")
    rb = await h.hb("b", 0, topics=["orders"])
    epochs = {"a": ra.member_epoch, "b": rb.member_epoch}
    owned = {"a": ra.assignment or {}, "b": rb.assignment or {}}
    await _converge(h, epochs, owned)
    before = h.group()
    snapshot = (before.group_epoch, before.assignment_epoch,
                {m: (x.member_epoch, x.assigned, x.subscribed_topic_names, x.server_assignor)
                 for m, x in before.members.items()}, dict(before.target))
    await h.coordinator.commit_offsets(
        group_id=GROUP, generation_id=epochs["a"], member_id="a", group_instance_id=None,
        retention_time_ms=-1, entries=[OffsetCommitEntry("orders", 0, 5)], api_version=9)
    await h.coordinator.stop()
    broker.stop()

    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = CgHarness(broker)
    await h.start()
    try:
        after = h.group()
        assert (after.group_epoch, after.assignment_epoch,
                {m: (x.member_epoch, x.assigned, x.subscribed_topic_names, x.server_assignor)
                 for m, x in after.members.items()}, dict(after.target)) == snapshot
        assert after.state.value == "Stable"
        assert _flat(after.members["a"].assigned) == {(tid, 0), (tid, 1)}  # range
        r = await h.hb("a", epochs["a"])
        assert r.member_epoch == epochs["a"]
        assert [f.offset for f in h.coordinator.fetch_offsets(GROUP, None, False)] == [5]
    finally:
        await h.coordinator.stop()
        broker.stop()


async def test_static_member_rejoins_under_a_new_id_with_its_partitions(cg: CgHarness) -> None:
    await cg.topic("orders", 4)
    a = await cg.hb("a", 0, topics=["orders"], instance="pod-a")
    b = await cg.hb("b", 0, topics=["orders"], instance="pod-b")
    epochs = {"a": a.member_epoch, "b": b.member_epoch}
    owned = {"a": a.assignment or {}, "b": b.assignment or {}}
    await _converge(cg, epochs, owned)
    with pytest.raises(KafkaError) as held:
        await cg.hb("a2", 0, topics=["orders"], instance="pod-a")
    assert held.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    left = await cg.hb("a", -2, instance="pod-a")
    assert left.member_epoch == -2
    assert cg.group().members["a"].assigned == owned["a"]  # kept while it restarts
    back = await cg.hb("a2", 0, topics=["orders"], instance="pod-a")
    assert back.assignment == owned["a"]
    assert sorted(cg.group().members) == ["a2", "b"]


async def test_member_that_does_not_revoke_in_time_is_removed(cg: CgHarness) -> None:
    tid = await cg.topic("orders", 2)
    a = await cg.hb("a", 0, topics=["orders"], rebalance_timeout_ms=100)
    assert _flat(a.assignment or {}) == {(tid, 0), (tid, 1)}
    b = await cg.hb("b", 0, topics=["orders"])
    assert b.assignment == {}  # a still holds both
    r = await cg.hb("a", a.member_epoch, owned=a.assignment)  # told to give one up
    assert len(_flat(r.assignment or {})) == 1
    assert cg.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    await until(lambda: "a" not in cg.group().members, "a fenced by its rebalance timeout")
    b2 = await cg.hb("b", b.member_epoch, owned={})
    assert _flat(b2.assignment or {}) == {(tid, 0), (tid, 1)}


async def test_previous_epoch_is_accepted_when_the_member_owns_no_more_than_assigned(
        cg: CgHarness) -> None:
    tid = await cg.topic("orders", 2)
    a = await cg.hb("a", 0, topics=["orders"])
    await cg.topic("other", 1)
    moved = await cg.hb("a", a.member_epoch, topics=["orders", "other"], owned=a.assignment)
    assert moved.member_epoch == a.member_epoch + 1  # its answer is "lost"
    again = await cg.hb("a", a.member_epoch, owned={tid: frozenset({0})})
    assert again.member_epoch == moved.member_epoch
    with pytest.raises(KafkaError) as fenced:
        await cg.hb("a", a.member_epoch)  # no owned partitions: cannot tell, fenced
    assert fenced.value.code == ErrorCode.FENCED_MEMBER_EPOCH


@pytest.mark.parametrize(("kw", "code"), [
    (dict(member_id="a", epoch=0, topics=None), ErrorCode.INVALID_REQUEST),
    (dict(member_id="", epoch=3, topics=None), ErrorCode.INVALID_REQUEST),
    (dict(member_id="a", epoch=-3, topics=None), ErrorCode.INVALID_REQUEST),
    (dict(member_id="a", epoch=-2, topics=None), ErrorCode.INVALID_REQUEST),
    (dict(member_id="a", epoch=0, topics=None, regex="(unclosed"),
     ErrorCode.INVALID_REGULAR_EXPRESSION),
])
async def test_malformed_heartbeats_get_kafkas_codes(cg: CgHarness, kw: dict[str, Any],
                                                      code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as err:
        await cg.hb(kw.pop("member_id"), kw.pop("epoch"), **kw)
    assert err.value.code == code


async def test_offsets_of_an_empty_consumer_group_expire_and_the_group_goes(
        mini_broker: MiniBroker) -> None:
    clock = Clock()
    h = CgHarness(mini_broker, clock)
    await h.start()
    try:
        await h.topic("orders", 1)
        r = await h.hb("a", 0, topics=["orders"])
        await h.coordinator.commit_offsets(
            group_id=GROUP, generation_id=r.member_epoch, member_id="a", group_instance_id=None,
            retention_time_ms=-1, entries=[OffsetCommitEntry("orders", 0, 9)], api_version=9)
        partition = h.coordinator.partition_for(GROUP)
        clock.now_ms += 120_000
        await h.coordinator.expire_offsets(partition)
        assert [f.offset for f in h.coordinator.fetch_offsets(GROUP, None, False)] == [9]
        await h.hb("a", -1)
        await h.coordinator.expire_offsets(partition)
        assert h.coordinator.fetch_offsets(GROUP, None, False) == []
        with pytest.raises(KafkaError):
            h.group()
    finally:
        await h.coordinator.stop()


def test_assignors_are_deterministic_for_any_member_order() -> None:
    members = [AssignmentMember(m, frozenset({T1})) for m in ("x", "y", "z")]
    outs = [UniformAssignor().assign(list(order), {T1: 8}, {})
            for order in itertools.permutations(members)]
    assert all(o == outs[0] for o in outs)


async def test_an_upgraded_group_comes_back_as_a_consumer_group_after_a_restart(
        tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = CgHarness(broker)
    await h.start()
    await h.topic("orders", 1)
    await h.coordinator.commit_offsets(
        group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, entries=[OffsetCommitEntry("orders", 0, 7)], api_version=9)
    await h.hb("a", 0, topics=["orders"])
    await h.coordinator.stop()
    broker.stop()

    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = CgHarness(broker)
    await h.start()
    try:
        shard = h.coordinator.runtime.shard(h.coordinator.partition_for(GROUP))
        assert shard.group(GROUP) is None and sorted(shard.consumer_group(GROUP).members) == ["a"]
        assert [f.offset for f in h.coordinator.fetch_offsets(GROUP, None, False)] == [7]
    finally:
        await h.coordinator.stop()
        broker.stop()


async def test_a_steady_heartbeat_matches_each_distinct_regex_once_not_per_member(
        cg: CgHarness) -> None:
    await cg.topic("events-a", 1)
    for i in range(8):
        await cg.topic(f"other-{i}", 1)
    for i in range(30):
        await cg.hb(f"m{i}", 0, regex="events-.*")
    epoch = cg.group().members["m0"].member_epoch
    before = _compile.cache_info()
    await cg.hb("m0", epoch)
    after = _compile.cache_info()
    # Work per heartbeat grows with the distinct patterns, not with members x topics.
    assert (after.hits + after.misses) - (before.hits + before.misses) <= 2
