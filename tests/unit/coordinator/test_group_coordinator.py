"""GroupCoordinator over real logs: the classic protocol, offsets, transactions, replay, expiry."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.coordinator.group.classic_group import JoinResult, parse_subscription_topics
from kafka_ext.coordinator.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    OffsetCommitEntry,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import decode_all_batches
from tests.unit.coordinator.mini_broker import MiniBroker

NONE = int(ErrorCode.NONE)
GROUP = "orders-app"
DEADLINE_S = 5.0


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


class Harness:
    """A started GroupCoordinator on a MiniBroker, with helpers shaped like the requests."""

    def __init__(self, broker: MiniBroker, config: GroupConfig, clock: Clock) -> None:
        self.broker = broker
        self.clock = clock
        self.coordinator = GroupCoordinator(broker, config, clock)

    async def start(self) -> None:
        await self.coordinator.start()
        await self.coordinator.runtime.ensure_topic()
        runtime = self.coordinator.runtime
        await until(lambda: not any(runtime.is_loading(p) for p in range(3)))

    async def join(self, member_id: str = "", *, group: str = GROUP, instance: str | None = None,
                   protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
                   rebalance_ms: int = 10_000, protocol_type: str = "consumer",
                   version: int = 9, client_id: str = "client") -> JoinResult:
        return await self.coordinator.join_group(
            group_id=group, member_id=member_id, group_instance_id=instance,
            client_id=client_id, client_host="/127.0.0.1", session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type,
            protocols=protocols if protocols is not None else [("range", subscription("t"))],
            api_version=version)

    async def join_new(self, **kw: Any) -> JoinResult:
        """A fresh member: MEMBER_ID_REQUIRED, then the join with the id it was given."""
        first = await self.join(**kw)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        return await self.join(first.member_id, **kw)

    async def sync(self, result: JoinResult, assignments: dict[str, bytes] | None = None,
                   *, group: str = GROUP, instance: str | None = None) -> Any:
        return await self.coordinator.sync_group(
            group_id=group, generation_id=result.generation_id, member_id=result.member_id,
            group_instance_id=instance, protocol_type="consumer",
            protocol_name=result.protocol_name,
            assignments=list((assignments or {}).items()))

    async def heartbeat(self, result: JoinResult, *, group: str = GROUP,
                        instance: str | None = None) -> ErrorCode:
        return await self.coordinator.heartbeat(
            group_id=group, generation_id=result.generation_id, member_id=result.member_id,
            group_instance_id=instance)

    async def stable_group(self, count: int, **kw: Any) -> list[JoinResult]:
        """`count` members joined and synced; the leader assigns b'a<i>' to the i-th member."""
        firsts = [await self.join(**kw) for _ in range(count)]
        results = await asyncio.gather(*(self.join(f.member_id, **kw) for f in firsts))
        leader = next(r for r in results if r.members)
        assignments = {r.member_id: b"a%d" % i for i, r in enumerate(results)}
        syncs = await asyncio.gather(*(
            self.sync(r, assignments if r is leader else None) for r in results))
        assert [s.error for s in syncs] == [NONE] * count
        assert [s.assignment for s in syncs] == [assignments[r.member_id] for r in results]
        return list(results)

    async def commit(self, result: JoinResult | None, offsets: dict[tuple[str, int], int], *,
                     group: str = GROUP, metadata: str | None = "", generation: int | None = None,
                     member_id: str | None = None) -> list[ErrorCode]:
        return await self.coordinator.commit_offsets(
            group_id=group,
            generation_id=generation if generation is not None else (
                result.generation_id if result else -1),
            member_id=member_id if member_id is not None else (result.member_id if result else ""),
            group_instance_id=None, retention_time_ms=-1,
            entries=[OffsetCommitEntry(t, p, o, 3, metadata) for (t, p), o in offsets.items()],
            api_version=8)

    def fetched(self, group: str = GROUP, partitions: list[tuple[str, int]] | None = None,
                require_stable: bool = False) -> dict[tuple[str, int], tuple[int, str, int]]:
        return {(f.topic, f.partition): (f.offset, f.metadata, f.error)
                for f in self.coordinator.fetch_offsets(group, partitions, require_stable)}

    async def stop(self) -> None:
        await self.coordinator.stop()


async def until(condition: Callable[[], Any], what: str = "condition") -> Any:
    """Poll the loop until `condition()` holds; fail after the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def until_async(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _config(**kw: Any) -> GroupConfig:
    defaults: dict[str, Any] = dict(num_partitions=3, initial_rebalance_delay_ms=0,
                                    min_session_timeout_ms=10, max_session_timeout_ms=60_000,
                                    offsets_retention_check_interval_ms=3_600_000)
    defaults.update(kw)
    return GroupConfig(**defaults)


@pytest.fixture
async def harness(mini_broker: MiniBroker) -> AsyncIterator[Harness]:
    h = Harness(mini_broker, _config(), Clock())
    await h.start()
    yield h
    await h.stop()


# -- JoinGroup / SyncGroup ---------------------------------------------------------------------

async def test_first_join_is_told_its_member_id_then_leads_generation_one(harness: Harness
                                                                          ) -> None:
    first = await harness.join(client_id="app")
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("app-")
    joined = await harness.join(first.member_id)
    assert (joined.error, joined.generation_id, joined.leader_id) == (NONE, 1, first.member_id)
    assert joined.protocol_name == "range" and joined.protocol_type == "consumer"
    assert joined.members == [(first.member_id, None, subscription("t"))]
    synced = await harness.sync(joined, {first.member_id: b"mine"})
    assert (synced.error, synced.assignment) == (NONE, b"mine")
    assert harness.coordinator.describe_group(GROUP).state == "Stable"


async def test_join_before_v4_needs_no_member_id_round(harness: Harness) -> None:
    joined = await harness.join(version=3)
    assert joined.error == NONE and joined.generation_id == 1 and joined.member_id


async def test_members_joining_together_share_a_generation_and_get_their_assignments(
        harness: Harness) -> None:
    members = await harness.stable_group(3)
    assert {m.generation_id for m in members} == {1}
    assert sum(1 for m in members if m.members) == 1  # only the leader sees the member list
    leader = next(m for m in members if m.members)
    assert sorted(m for m, _, _ in leader.members) == sorted(m.member_id for m in members)
    assert all(m.leader_id == leader.member_id for m in members)


async def test_follower_sync_waits_for_the_leader(harness: Harness) -> None:
    firsts = [await harness.join() for _ in range(2)]
    results = await asyncio.gather(*(harness.join(f.member_id) for f in firsts))
    leader = next(r for r in results if r.members)
    follower = next(r for r in results if not r.members)
    follower_sync = asyncio.ensure_future(harness.sync(follower))
    await asyncio.sleep(0)
    assert not follower_sync.done()
    await harness.sync(leader, {follower.member_id: b"f", leader.member_id: b"l"})
    assert (await follower_sync).assignment == b"f"


async def test_heartbeat_during_rebalance_says_so_and_rejoin_completes_it(harness: Harness
                                                                          ) -> None:
    (a,) = await harness.stable_group(1)
    newcomer = await harness.join()
    b_join = asyncio.ensure_future(harness.join(newcomer.member_id))
    await until(lambda: harness.coordinator.describe_group(GROUP).state == "PreparingRebalance")
    assert await harness.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
    a2 = await harness.join(a.member_id)
    b2 = await b_join
    assert a2.generation_id == b2.generation_id == 2
    assert await harness.heartbeat(a) == ErrorCode.ILLEGAL_GENERATION


async def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(
        harness: Harness) -> None:
    a, b = await harness.stable_group(2, rebalance_ms=100)
    rejoined = await harness.join(a.member_id, rebalance_ms=100)  # b never rejoins
    assert rejoined.generation_id == 2
    assert [m for m, _, _ in rejoined.members] == [a.member_id]
    assert await harness.heartbeat(b) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_silent_member_expires_and_the_rest_rebalance(harness: Harness) -> None:
    a, b = await harness.stable_group(2, session_ms=60)

    async def a_told_to_rebalance() -> bool:
        return await harness.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS

    await until_async(a_told_to_rebalance, "b's session to expire")
    rejoined = await harness.join(a.member_id, session_ms=60)
    assert rejoined.generation_id == 2 and [m for m, _, _ in rejoined.members] == [a.member_id]
    assert await harness.heartbeat(b) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_initial_rebalance_delay_gathers_members_of_an_empty_group(
        mini_broker: MiniBroker) -> None:
    h = Harness(mini_broker, _config(initial_rebalance_delay_ms=50), Clock())
    await h.start()
    firsts = [await h.join() for _ in range(3)]
    first_join = asyncio.ensure_future(h.join(firsts[0].member_id))
    await asyncio.sleep(0)
    others = [asyncio.ensure_future(h.join(f.member_id)) for f in firsts[1:]]
    results = [await first_join] + [await o for o in others]
    assert {r.generation_id for r in results} == {1}
    assert len(next(r for r in results if r.members).members) == 3
    await h.stop()


async def test_concurrent_joins_during_a_rebalance_never_get_unknown_member_id(
        harness: Harness) -> None:
    members = await harness.stable_group(2)

    async def newcomer() -> JoinResult:
        return await harness.join_new()

    async def rejoin(r: JoinResult) -> JoinResult:
        return await harness.join(r.member_id)

    results = await asyncio.gather(*(newcomer() for _ in range(5)),
                                   *(rejoin(m) for m in members))
    assert [r.error for r in results] == [NONE] * 7
    assert {r.generation_id for r in results} == {2}
    leader = next(r for r in results if r.members)
    assert len(leader.members) == 7


async def test_leave_removes_members_and_reports_unknown_ones(harness: Harness) -> None:
    a, b = await harness.stable_group(2)
    error, errors = await harness.coordinator.leave_group(
        GROUP, [(b.member_id, None), ("ghost", None)])
    assert error == ErrorCode.NONE and errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    rejoined = await harness.join(a.member_id)
    assert rejoined.generation_id == 2 and len(rejoined.members) == 1
    error, errors = await harness.coordinator.leave_group("no-such-group", [("x", None)])
    assert error == ErrorCode.UNKNOWN_MEMBER_ID


async def test_leaving_last_member_empties_the_group(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    await harness.coordinator.leave_group(GROUP, [(a.member_id, None)])
    described = harness.coordinator.describe_group(GROUP)
    assert described.state == "Empty" and described.members == []


async def test_static_member_restart_keeps_its_assignment_without_rebalance(harness: Harness
                                                                            ) -> None:
    first = await harness.join(instance="pod-1")  # static members skip MEMBER_ID_REQUIRED
    assert first.error == NONE and first.member_id.startswith("pod-1-")
    await harness.sync(first, {first.member_id: b"p0"}, instance="pod-1")
    restarted = await harness.join(instance="pod-1")
    assert restarted.error == NONE and restarted.member_id != first.member_id
    assert restarted.generation_id == 1 and restarted.skip_assignment  # it leads: no reassign
    assert harness.coordinator.describe_group(GROUP).state == "Stable"
    synced = await harness.sync(restarted, instance="pod-1")
    assert (synced.error, synced.assignment) == (NONE, b"p0")
    assert await harness.heartbeat(first, instance="pod-1") == ErrorCode.FENCED_INSTANCE_ID


async def test_static_member_replaced_during_a_rebalance_fences_the_old_request(
        harness: Harness) -> None:
    a = await harness.join(instance="pod-a")  # alone: generation 1 at once
    c_first = await harness.join()
    c_join = asyncio.ensure_future(harness.join(c_first.member_id))
    await until(lambda: harness.coordinator.describe_group(GROUP).state == "PreparingRebalance")
    a = await harness.join(a.member_id, instance="pod-a")
    c = await c_join
    await asyncio.gather(harness.sync(a, {a.member_id: b"x", c.member_id: b"y"},
                                      instance="pod-a"), harness.sync(c))
    group = harness.coordinator.runtime.shard(harness.coordinator.partition_for(GROUP)
                                              ).groups[GROUP]
    b_first = await harness.join()
    pending_b = asyncio.ensure_future(harness.join(b_first.member_id))
    old_rejoin = asyncio.ensure_future(harness.join(a.member_id, instance="pod-a"))
    await until(lambda: group.members[a.member_id].is_awaiting_join, "a's rejoin")
    replaced = asyncio.ensure_future(harness.join(instance="pod-a"))  # pod-a restarted
    assert (await old_rejoin).error == ErrorCode.FENCED_INSTANCE_ID
    c3 = await harness.join(c.member_id)  # the last member rejoins: the join phase ends
    results = [await replaced, await pending_b, c3]
    assert [r.error for r in results] == [NONE] * 3
    assert {r.generation_id for r in results} == {3}
    assert results[0].member_id not in (a.member_id, "")


async def test_known_member_id_with_another_instance_id_is_fenced(harness: Harness) -> None:
    a = await harness.join(instance="pod-1")
    b_join = asyncio.ensure_future(harness.join(instance="pod-2"))
    group = harness.coordinator.runtime.shard(harness.coordinator.partition_for(GROUP)
                                              ).groups[GROUP]
    await until(lambda: "pod-2" in group.static_members, "pod-2 to join")
    wrong = await harness.join(a.member_id, instance="pod-2")
    assert wrong.error == ErrorCode.FENCED_INSTANCE_ID
    await harness.join(a.member_id, instance="pod-1")
    assert (await b_join).error == NONE


async def test_protocol_type_mismatch_is_refused_and_other_groups_keep_working(
        harness: Harness) -> None:
    await harness.stable_group(1)
    refused = await harness.join(protocol_type="connect")
    assert refused.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    no_common = await harness.join(protocols=[("sticky", b"")])
    assert no_common.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    other = await harness.join_new(group="other-group", protocol_type="connect")
    assert other.error == NONE and other.protocol_type == "connect"


async def test_protocols_all_members_share_follow_members_joining_and_leaving(
        harness: Harness) -> None:
    only_range = [("range", subscription("t"))]
    both = [("range", subscription("t")), ("roundrobin", subscription("t"))]
    only_rr = [("roundrobin", subscription("t"))]
    a, b = await asyncio.gather(harness.join_new(protocols=only_range),
                                harness.join_new(protocols=both))
    refused = await harness.join(protocols=only_rr)
    assert refused.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # a cannot use roundrobin
    await harness.coordinator.leave_group(GROUP, [(a.member_id, None)])
    b2 = await harness.join(b.member_id, protocols=both)
    await harness.sync(b2, {b2.member_id: b""})
    c_first = await harness.join(protocols=only_rr)
    assert c_first.error == ErrorCode.MEMBER_ID_REQUIRED  # now every member lists roundrobin
    b3, c = await asyncio.gather(harness.join(b.member_id, protocols=both),
                                 harness.join(c_first.member_id, protocols=only_rr))
    assert (b3.error, c.error, c.protocol_name) == (NONE, NONE, "roundrobin")


async def test_sync_with_another_protocol_name_is_inconsistent(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    result = await harness.coordinator.sync_group(
        group_id=GROUP, generation_id=a.generation_id, member_id=a.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="roundrobin",
        assignments=[])
    assert result.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


async def test_group_max_size_refuses_the_extra_member(mini_broker: MiniBroker) -> None:
    h = Harness(mini_broker, _config(max_size=1), Clock())
    await h.start()
    await h.stable_group(1)
    refused = await h.join()
    assert refused.error == ErrorCode.GROUP_MAX_SIZE_REACHED
    await h.stop()


async def test_session_timeout_outside_the_broker_bounds_is_invalid(harness: Harness) -> None:
    assert (await harness.join(session_ms=5)).error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await harness.join(session_ms=120_000)).error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await harness.join(group="")).error == ErrorCode.INVALID_GROUP_ID


async def test_requests_for_a_partition_this_node_does_not_lead_are_not_coordinator(
        mini_broker: MiniBroker) -> None:
    h = Harness(mini_broker, _config(), Clock())
    await h.coordinator.start()  # the internal topic does not exist yet
    with pytest.raises(KafkaError) as err:
        await h.join()
    assert err.value.code == ErrorCode.NOT_COORDINATOR
    await h.stop()


async def test_pending_joins_and_syncs_are_answered_not_coordinator_on_unload(
        harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    newcomer = await harness.join()
    pending_join = asyncio.ensure_future(harness.join(newcomer.member_id))
    await until(lambda: harness.coordinator.describe_group(GROUP).state == "PreparingRebalance")
    await harness.coordinator.runtime.stop()
    assert (await pending_join).error == ErrorCode.NOT_COORDINATOR


async def test_leader_sync_in_flight_when_the_shard_moves_leaves_the_next_load_alone(
        harness: Harness) -> None:
    stable = await harness.stable_group(2)
    leader = next(r for r in stable if r.members)
    follower = next(r for r in stable if not r.members)
    rejoined = await asyncio.gather(harness.join(leader.member_id),
                                    harness.join(follower.member_id))
    new_leader = next(r for r in rejoined if r.members)
    assert harness.coordinator.describe_group(GROUP).state == "CompletingRebalance"
    runtime = harness.coordinator.runtime
    partition = harness.coordinator.partition_for(GROUP)
    group = runtime.shard(partition).groups[GROUP]
    old_lock = runtime._contexts[partition].write_lock
    await old_lock.acquire()  # an earlier write still waits for its replicas
    sync = asyncio.ensure_future(harness.sync(new_leader, {r.member_id: b"x" for r in rejoined}))
    await until(lambda: group.members[new_leader.member_id].is_awaiting_sync, "the leader's sync")
    await runtime.stop()  # the partition moves away and comes back: a new shard loads
    await runtime.start()
    await until(lambda: partition in runtime.loaded_partitions(), "the reload")
    old_lock.release()
    assert (await sync).error == ErrorCode.NOT_COORDINATOR
    # The old group's failed store must not start a rebalance on the newly loaded shard.
    assert not runtime.has_timer(partition, f"join\0{GROUP}")
    assert harness.coordinator.describe_group(GROUP).state == "Stable"
    assert await harness.heartbeat(stable[0]) == ErrorCode.NONE


async def test_rebalance_while_the_leaders_sync_is_stored_sends_everyone_back_to_join(
        harness: Harness) -> None:
    stable = await harness.stable_group(2)
    leader = next(r for r in stable if r.members)
    follower = next(r for r in stable if not r.members)
    rejoined = await asyncio.gather(harness.join(leader.member_id),
                                    harness.join(follower.member_id))
    new_leader = next(r for r in rejoined if r.members)
    new_follower = next(r for r in rejoined if not r.members)
    runtime = harness.coordinator.runtime
    partition = harness.coordinator.partition_for(GROUP)
    group = runtime.shard(partition).groups[GROUP]
    lock = runtime._contexts[partition].write_lock
    await lock.acquire()  # an earlier write still waits for its replicas
    follower_sync = asyncio.ensure_future(harness.sync(new_follower))
    leader_sync = asyncio.ensure_future(
        harness.sync(new_leader, {r.member_id: b"x" for r in rejoined}))
    await until(lambda: group.members[new_leader.member_id].is_awaiting_sync, "the leader's sync")
    newcomer = await harness.join()
    newcomer_join = asyncio.ensure_future(harness.join(newcomer.member_id))
    await until(lambda: group.state.value == "PreparingRebalance", "the rebalance")
    assert (await asyncio.wait_for(follower_sync, DEADLINE_S)).error == \
        ErrorCode.REBALANCE_IN_PROGRESS
    lock.release()  # the leader's stale store goes through
    assert (await asyncio.wait_for(leader_sync, DEADLINE_S)).error == \
        ErrorCode.REBALANCE_IN_PROGRESS
    assert group.state.value == "PreparingRebalance"  # the stale store did not stabilise it
    third = await asyncio.wait_for(asyncio.gather(
        harness.join(new_leader.member_id), harness.join(new_follower.member_id),
        newcomer_join), DEADLINE_S)
    assert [r.error for r in third] == [NONE] * 3 and {r.generation_id for r in third} == {3}


async def test_the_record_of_a_group_that_empties_is_the_empty_group(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    await harness.coordinator.leave_group(GROUP, [(a.member_id, None)])  # Empty: stored later
    joined = await harness.join(instance="pod-1")  # arrives before that write runs
    assert joined.error == NONE
    runtime = harness.coordinator.runtime
    partition = harness.coordinator.partition_for(GROUP)
    await runtime.stop()  # reload from the log: the group as last stored
    await runtime.start()
    await until(lambda: partition in runtime.loaded_partitions(), "the reload")
    described = harness.coordinator.describe_group(GROUP)
    assert (described.state, described.members) == ("Empty", [])


# -- offsets -----------------------------------------------------------------------------------

async def test_commit_checks_generation_and_member(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    assert await harness.commit(a, {("t", 0): 5}, metadata="m-1") == [ErrorCode.NONE]
    with pytest.raises(KafkaError) as err:
        await harness.commit(a, {("t", 0): 6}, generation=a.generation_id + 1)
    assert err.value.code == ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as err:
        await harness.commit(a, {("t", 0): 6}, member_id="ghost")
    assert err.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as err:  # a simple commit into an active group
        await harness.commit(None, {("t", 0): 6})
    assert err.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.fetched()[("t", 0)] == (5, "m-1", NONE)


async def test_commit_from_a_generation_that_is_gone_is_illegal(harness: Harness) -> None:
    a, b = await harness.stable_group(2)
    await harness.coordinator.leave_group(GROUP, [(b.member_id, None)])
    a2 = await harness.join(a.member_id)
    await harness.sync(a2, {a2.member_id: b""})
    with pytest.raises(KafkaError) as err:
        await harness.commit(a, {("t", 0): 1})
    assert err.value.code == ErrorCode.ILLEGAL_GENERATION


async def test_commit_while_preparing_rebalance_is_accepted_for_the_current_generation(
        harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    newcomer = await harness.join()
    pending = asyncio.ensure_future(harness.join(newcomer.member_id))
    await until(lambda: harness.coordinator.describe_group(GROUP).state == "PreparingRebalance")
    # An eager consumer commits what it processed before it rejoins (Kafka accepts this).
    assert await harness.commit(a, {("t", 0): 1}) == [ErrorCode.NONE]
    assert harness.fetched() == {("t", 0): (1, "", NONE)}
    await harness.join(a.member_id)
    await pending


async def test_commit_while_completing_rebalance_is_rebalance_in_progress(harness: Harness
                                                                          ) -> None:
    (a,) = await harness.stable_group(1)
    newcomer = await harness.join()
    pending = asyncio.ensure_future(harness.join(newcomer.member_id))
    await until(lambda: harness.coordinator.describe_group(GROUP).state == "PreparingRebalance")
    a2 = await harness.join(a.member_id)
    await pending
    assert harness.coordinator.describe_group(GROUP).state == "CompletingRebalance"
    with pytest.raises(KafkaError) as err:
        await harness.commit(a2, {("t", 0): 1})
    assert err.value.code == ErrorCode.REBALANCE_IN_PROGRESS
    assert harness.fetched() == {}


async def test_commit_from_a_member_extends_its_session(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    runtime = harness.coordinator.runtime
    timers = runtime._contexts[harness.coordinator.partition_for(GROUP)].timers
    key = f"heartbeat\0{GROUP}\0{a.member_id}"
    before = timers[key].when()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await until(lambda: loop.time() > started, "the loop clock to move")
    assert await harness.commit(a, {("t", 0): 1}) == [ErrorCode.NONE]
    assert timers[key].when() > before


async def test_simple_commits_need_no_group_and_metadata_round_trips(harness: Harness) -> None:
    errors = await harness.commit(None, {("t", 0): 10, ("t", 1): 20}, group="simple",
                                  metadata="checkpoint\u00e9")
    assert errors == [ErrorCode.NONE, ErrorCode.NONE]
    assert harness.fetched("simple") == {("t", 0): (10, "checkpoint\u00e9", NONE),
                                         ("t", 1): (20, "checkpoint\u00e9", NONE)}
    assert harness.fetched("simple", [("t", 1), ("t", 7)]) == {
        ("t", 1): (20, "checkpoint\u00e9", NONE), ("t", 7): (-1, "", NONE)}
    assert harness.fetched("never-seen", [("t", 0)]) == {("t", 0): (-1, "", NONE)}
    with pytest.raises(KafkaError) as err:  # a generation for a group that does not exist
        await harness.commit(None, {("t", 0): 1}, group="nope", generation=3)
    assert err.value.code == ErrorCode.ILLEGAL_GENERATION


async def test_oversized_commit_metadata_is_refused_per_partition(harness: Harness) -> None:
    errors = await harness.coordinator.commit_offsets(
        group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, api_version=8,
        entries=[OffsetCommitEntry("t", 0, 1, -1, "x" * 5000), OffsetCommitEntry("t", 1, 2)])
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE]
    assert harness.fetched("simple") == {("t", 1): (2, "", NONE)}


async def test_transactional_offsets_show_after_commit_marker_only(harness: Harness) -> None:
    coordinator = harness.coordinator
    partition = coordinator.partition_for("txn-group")
    await harness.commit(None, {("t", 0): 1}, group="txn-group")
    errors = await coordinator.commit_transactional_offsets(
        group_id="txn-group", producer_id=42, producer_epoch=0, generation_id=-1, member_id="",
        group_instance_id=None, entries=[OffsetCommitEntry("t", 0, 100, -1, "txn")])
    assert errors == [ErrorCode.NONE]
    assert harness.fetched("txn-group")[("t", 0)] == (1, "", NONE)
    assert harness.fetched("txn-group", require_stable=True)[("t", 0)] == (
        -1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT))
    await coordinator.complete_transaction(partition, 42, 0, 0, committed=True)
    assert harness.fetched("txn-group", require_stable=True)[("t", 0)] == (100, "txn", NONE)

    await coordinator.commit_transactional_offsets(
        group_id="txn-group", producer_id=43, producer_epoch=0, generation_id=-1, member_id="",
        group_instance_id=None, entries=[OffsetCommitEntry("t", 0, 500)])
    await coordinator.complete_transaction(partition, 43, 0, 0, committed=False)
    assert harness.fetched("txn-group", require_stable=True)[("t", 0)] == (100, "txn", NONE)


async def test_offset_delete_refuses_subscribed_topics_of_active_groups(harness: Harness
                                                                        ) -> None:
    (a,) = await harness.stable_group(1, protocols=[("range", subscription("t"))])
    await harness.commit(a, {("t", 0): 1, ("u", 0): 2})
    errors = await harness.coordinator.delete_offsets(GROUP, [("t", 0), ("u", 0)])
    assert errors == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ErrorCode.NONE]
    assert set(harness.fetched()) == {("t", 0)}
    await harness.coordinator.leave_group(GROUP, [(a.member_id, None)])
    assert await harness.coordinator.delete_offsets(GROUP, [("t", 0)]) == [ErrorCode.NONE]
    assert harness.fetched() == {}
    with pytest.raises(KafkaError) as err:
        await harness.coordinator.delete_offsets("nope", [("t", 0)])
    assert err.value.code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_delete_groups_only_deletes_empty_groups(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    await harness.commit(a, {("t", 0): 1})
    assert await harness.coordinator.delete_group(GROUP) == ErrorCode.NON_EMPTY_GROUP
    await harness.coordinator.leave_group(GROUP, [(a.member_id, None)])
    assert await harness.coordinator.delete_group(GROUP) == ErrorCode.NONE
    assert harness.fetched() == {}
    assert harness.coordinator.describe_group(GROUP).state == "Dead"
    assert await harness.coordinator.delete_group(GROUP) == ErrorCode.GROUP_ID_NOT_FOUND


async def test_list_and_describe_groups(harness: Harness) -> None:
    (a,) = await harness.stable_group(1)
    await harness.commit(None, {("t", 0): 1}, group="simple")
    error, listed = harness.coordinator.list_groups(set(), set())
    assert error == ErrorCode.NONE
    assert sorted((g.group_id, g.protocol_type, g.state) for g in listed) == [
        (GROUP, "consumer", "Stable"), ("simple", "", "Empty")]
    _, stable = harness.coordinator.list_groups({"stable"}, set())
    assert [g.group_id for g in stable] == [GROUP]
    _, consumer_type = harness.coordinator.list_groups(set(), {"consumer"})
    assert consumer_type == []  # classic groups only
    described = harness.coordinator.describe_group(GROUP)
    assert (described.state, described.protocol_type, described.protocol_data) == (
        "Stable", "consumer", "range")
    (member,) = described.members
    assert (member.member_id, member.client_id, member.metadata, member.assignment) == (
        a.member_id, "client", subscription("t"), b"a0")


# -- replay and expiry ------------------------------------------------------------------------

async def test_groups_and_offsets_survive_a_restart(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = Harness(broker, _config(), Clock())
    await h.start()
    a, b = await h.stable_group(2, session_ms=30_000)
    await h.commit(a, {("t", 0): 11, ("t", 1): 12}, metadata="meta")
    await h.commit(None, {("t", 0): 3}, group="gone")
    assert await h.coordinator.delete_group("gone") == ErrorCode.NONE
    await h.commit(None, {("t", 5): 9}, group="kept")
    await h.stop()
    broker.stop()

    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = Harness(broker, _config(), Clock())
    await h.start()
    described = h.coordinator.describe_group(GROUP)
    assert described.state == "Stable"
    assert sorted((m.member_id, m.assignment) for m in described.members) == sorted(
        [(a.member_id, b"a0"), (b.member_id, b"a1")])
    assert h.fetched() == {("t", 0): (11, "meta", NONE), ("t", 1): (12, "meta", NONE)}
    assert h.fetched("kept") == {("t", 5): (9, "", NONE)}
    assert h.coordinator.describe_group("gone").state == "Dead"
    # Loaded members carry on with their generation, and may commit with it.
    assert await h.heartbeat(a) == ErrorCode.NONE
    follower = b if a.members else a
    rejoined = await h.join(follower.member_id)  # same protocols: the current generation
    assert (rejoined.error, rejoined.generation_id) == (NONE, follower.generation_id)
    assert await h.commit(a, {("t", 0): 13}) == [ErrorCode.NONE]
    await h.stop()
    broker.stop()


async def test_offsets_of_an_empty_group_expire_after_retention(mini_broker: MiniBroker
                                                                ) -> None:
    clock = Clock()
    h = Harness(mini_broker, _config(offsets_retention_ms=60_000), clock)
    await h.start()
    (a,) = await h.stable_group(1)
    await h.commit(a, {("t", 0): 1})
    await h.commit(None, {("u", 0): 2}, group="simple")
    clock.now_ms += 120_000
    group_partition = h.coordinator.partition_for(GROUP)
    await h.coordinator.expire_offsets(group_partition)
    assert h.fetched() == {("t", 0): (1, "", NONE)}  # a Stable group keeps subscribed offsets
    await h.coordinator.leave_group(GROUP, [(a.member_id, None)])  # empty from "now"
    clock.now_ms += 30_000
    await h.coordinator.expire_offsets(group_partition)
    assert h.fetched() == {("t", 0): (1, "", NONE)}
    clock.now_ms += 30_000
    for p in range(3):
        await h.coordinator.expire_offsets(p)
    assert h.fetched() == {} and h.fetched("simple") == {}
    assert h.coordinator.describe_group(GROUP).state == "Dead"
    plog = mini_broker.replica_manager.partitions[("__consumer_offsets", group_partition)].log
    values = [r.value for view in plog.read(0, 1 << 24).records
              for _, records in decode_all_batches(view) for r in records]
    assert values[-2:] == [None, None]  # the offset's and the group's tombstones
    await h.stop()


async def test_explicit_retention_time_never_expires_offsets_a_stable_group_reads(
        mini_broker: MiniBroker) -> None:
    clock = Clock()
    h = Harness(mini_broker, _config(), clock)
    await h.start()
    (a,) = await h.stable_group(1)  # subscribed to "t"
    errors = await h.coordinator.commit_offsets(
        group_id=GROUP, generation_id=a.generation_id, member_id=a.member_id,
        group_instance_id=None, retention_time_ms=1000, api_version=2,
        entries=[OffsetCommitEntry("t", 0, 5), OffsetCommitEntry("gone", 0, 6)])
    assert errors == [ErrorCode.NONE, ErrorCode.NONE]
    clock.now_ms += 5000
    await h.coordinator.expire_offsets(h.coordinator.partition_for(GROUP))
    # Kafka: a Stable consumer group loses only offsets of topics it no longer subscribes to.
    assert h.fetched() == {("t", 0): (5, "", NONE)}
    await h.stop()


def test_consumer_subscription_topics_are_read_and_garbage_is_unknown() -> None:
    assert parse_subscription_topics(subscription("a", "bb")) == ["a", "bb"]
    assert parse_subscription_topics(b"\x00") is None
    assert parse_subscription_topics(struct.pack(">hi", 0, 1000)) is None


async def test_offset_expiry_writes_small_batches(mini_broker: MiniBroker,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kafka_ext.coordinator.group.coordinator.MAX_RECORDS_PER_WRITE", 3)
    clock = Clock()
    h = Harness(mini_broker, _config(offsets_retention_ms=1000), clock)
    await h.start()
    await h.commit(None, {("t", p): p for p in range(10)}, group="simple")
    clock.now_ms += 5000
    partition = h.coordinator.partition_for("simple")
    assert await h.coordinator.expire_offsets(partition) == 11  # ten offsets and the group
    assert h.fetched("simple") == {}
    plog = mini_broker.replica_manager.partitions[("__consumer_offsets", partition)].log
    sizes = [header.records_count for view in plog.read(0, 1 << 24).records
             for header, _ in decode_all_batches(view)]
    assert sizes == [10, 3, 3, 3, 2]
    await h.stop()


async def test_offsets_of_a_deleted_topic_are_removed(harness: Harness) -> None:
    controller = harness.broker.controller
    await controller.create_topics([TopicCreation("doomed", 2, 1), TopicCreation("kept", 1, 1)],
                                   validate_only=False)
    await harness.commit(None, {("doomed", 0): 1, ("doomed", 1): 2, ("kept", 0): 3})
    await controller.delete_topics(["doomed"])
    await until(lambda: ("doomed", 0) not in harness.fetched(), "the tombstones")
    assert harness.fetched() == {("kept", 0): (3, "", NONE)}
