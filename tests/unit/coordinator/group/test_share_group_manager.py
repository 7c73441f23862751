"""Share groups on the group coordinator over real logs: membership, initialization through the
persister, admin, type conflicts and replay. The persister is a test double of the
SharePersister protocol (kafka_ext/share/persister.py): the share coordinator is not part of
these tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import ConfigChange, TopicCreation
from kafka_ext.coordinator.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    OffsetCommitEntry,
)
from kafka_ext.coordinator.group.share_group_manager import (
    ShareGroupSettings,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.group_config import GROUP_RESOURCE, share_group_configs
from kafka_ext.share.persister import (
    SharePartitionKey,
    ShareState,
    ShareStateSummary,
    StateBatch,
)
from tests.unit.coordinator.mini_broker import MiniBroker
from tests.unit.coordinator.test_group_coordinator import Clock, until

GROUP = "queue-app"


class FakePersister:
    """Keeps share state in a dict; `fail` keys raise, `gate` holds initializations back."""

    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, ShareState] = {}
        self.initialized: list[tuple[SharePartitionKey, int, int]] = []
        self.deleted: list[SharePartitionKey] = []
        self.fail: dict[SharePartitionKey, ErrorCode] = {}
        self.gate = asyncio.Event()
        self.gate.set()

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        await self.gate.wait()
        if key in self.fail:
            raise KafkaError(self.fail[key], "injected")
        self.initialized.append((key, state_epoch, start_offset))
        self.states[key] = ShareState(state_epoch, start_offset)

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ShareState:
        if key not in self.states:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no state")
        return self.states[key]

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        self.states[key] = ShareState(state_epoch, start_offset, batches)

    async def delete(self, key: SharePartitionKey) -> None:
        if key in self.fail:
            raise KafkaError(self.fail[key], "injected")
        self.deleted.append(key)
        self.states.pop(key, None)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1
                           ) -> ShareStateSummary:
        state = await self.read(key, leader_epoch)
        return ShareStateSummary(state.state_epoch, 0, state.start_offset, 3)


class Harness:
    def __init__(self, broker: Any, persister: FakePersister | None, clock: Clock | None = None,
                 **share: Any) -> None:
        self.broker = broker
        broker.share_persister = persister
        self.persister = persister
        self.clock = clock or Clock()
        self.coordinator = GroupCoordinator(
            broker, GroupConfig(num_partitions=3, initial_rebalance_delay_ms=0,
                                min_session_timeout_ms=10,
                                offsets_retention_check_interval_ms=3_600_000,
                                share=ShareGroupSettings(**share)), self.clock)

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

    async def hb(self, member_id: str, epoch: int, topics: list[str] | None = None,
                 group: str = GROUP) -> ShareHeartbeatResult:
        return await self.coordinator.share_group_heartbeat(ShareHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch,
            subscribed_topic_names=topics, client_id="share-cli", client_host="/127.0.0.1"))

    def group(self, group: str = GROUP) -> Any:
        return self.coordinator.share_group_describe(group)

    async def initialized(self, count: int) -> None:
        """Wait until the background initialization has recorded `count` partitions."""
        await until(lambda: sum(len(ps) for ps in self.group().initialized_partitions()
                                .values()) == count, "share-partitions initialized")


@pytest.fixture
async def sg(mini_broker: MiniBroker) -> AsyncIterator[Harness]:
    h = Harness(mini_broker, FakePersister())
    await h.start()
    yield h
    await h.coordinator.stop()


def _flat(assignment: dict[uuid.UUID, frozenset[int]] | None) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in (assignment or {}).items() for p in ps}


async def test_a_member_is_assigned_its_partitions_once_their_state_is_initialized(
        sg: Harness) -> None:
    tid = await sg.topic("jobs", 2)
    joined = await sg.hb("m1", 0, ["jobs"])
    assert (joined.member_id, joined.member_epoch, joined.assignment) == ("m1", 1, {})
    assert joined.heartbeat_interval_ms == 5000  # group.share.heartbeat.interval.ms
    await sg.initialized(2)
    assert sg.persister is not None
    assert sorted((k.topic_id, k.partition, epoch, start)
                  for k, epoch, start in sg.persister.initialized) == [
        (tid, 0, 1, -1), (tid, 1, 1, -1)]  # the group epoch as state epoch, start unresolved
    again = await sg.hb("m1", joined.member_epoch)
    assert again.member_epoch == 2 and again.assignment == {tid: frozenset({0, 1})}
    steady = await sg.hb("m1", again.member_epoch)
    assert (steady.member_epoch, steady.assignment) == (2, None)  # unchanged: not sent
    group = sg.group()
    assert (group.state.value, group.group_epoch, group.assignment_epoch) == ("Stable", 2, 2)


async def test_members_outnumbering_partitions_all_get_the_partition(sg: Harness) -> None:
    tid = await sg.topic("jobs", 1)
    epochs = {m: (await sg.hb(m, 0, ["jobs"])).member_epoch for m in ("a", "b", "c")}
    await sg.initialized(1)
    got = {}
    for m in epochs:
        result = await sg.hb(m, epochs[m])
        got[m] = result.assignment
    assert got == {m: {tid: frozenset({0})} for m in epochs}


async def test_a_leaver_s_partitions_go_to_the_others_at_their_next_heartbeat(
        sg: Harness) -> None:
    tid = await sg.topic("jobs", 4)
    await sg.hb("a", 0, ["jobs"])
    await sg.hb("b", 0, ["jobs"])
    await sg.initialized(4)
    a = await sg.hb("a", sg.group().members["a"].member_epoch)
    b = await sg.hb("b", sg.group().members["b"].member_epoch)
    assert len(_flat(a.assignment)) == len(_flat(sg.group().members["b"].assigned)) == 2
    assert b.member_epoch == a.member_epoch
    left = await sg.hb("b", -1)
    assert (left.member_epoch, left.heartbeat_interval_ms) == (-1, 0)
    a = await sg.hb("a", a.member_epoch)
    assert _flat(a.assignment) == {(tid, p) for p in range(4)}
    await sg.hb("a", -1)
    assert sg.group().state.value == "Empty"


async def test_epochs_and_unknown_members_are_refused_as_kafka_does(sg: Harness) -> None:
    await sg.topic("jobs", 1)
    with pytest.raises(KafkaError) as missing:
        await sg.hb("m1", 3, ["jobs"])
    assert missing.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    joined = await sg.hb("m1", 0, ["jobs"])
    for member, epoch, code in (("ghost", 1, ErrorCode.UNKNOWN_MEMBER_ID),
                                ("m1", joined.member_epoch + 1, ErrorCode.FENCED_MEMBER_EPOCH),
                                ("ghost", -1, ErrorCode.UNKNOWN_MEMBER_ID)):
        with pytest.raises(KafkaError) as err:
            await sg.hb(member, epoch)
        assert err.value.code == code, (member, epoch)
    await sg.initialized(1)
    moved = await sg.hb("m1", joined.member_epoch)
    # The previous epoch is still taken (the answer with the bump may have been lost).
    assert (await sg.hb("m1", joined.member_epoch)).member_epoch == moved.member_epoch


async def test_bad_requests_are_invalid_request(sg: Harness) -> None:
    for member, epoch, topics in (("", 0, ["jobs"]), ("x" * 37, 0, ["jobs"]), ("m", 0, None),
                                  ("m", 0, []), ("m", -2, None)):
        with pytest.raises(KafkaError) as err:
            await sg.hb(member, epoch, topics)
        assert err.value.code == ErrorCode.INVALID_REQUEST, (member, epoch, topics)


async def test_group_share_max_size_refuses_one_more_member(mini_broker: MiniBroker) -> None:
    h = Harness(mini_broker, FakePersister(), max_size=2)
    await h.start()
    try:
        await h.topic("jobs", 1)
        await h.hb("a", 0, ["jobs"])
        b = await h.hb("b", 0, ["jobs"])
        with pytest.raises(KafkaError) as err:
            await h.hb("c", 0, ["jobs"])
        assert err.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert (await h.hb("b", b.member_epoch)).member_id == "b"  # members still heartbeat
    finally:
        await h.coordinator.stop()


async def test_a_silent_member_is_removed_at_its_session_timeout(tmp_path: Path) -> None:
    broker = MiniBroker(tmp_path / "data", {"group.share.session.timeout.ms": "300",
                                            "group.share.heartbeat.interval.ms": "100",
                                            "group.share.min.session.timeout.ms": "1",
                                            "group.share.min.heartbeat.interval.ms": "1"})
    await broker.start()
    h = Harness(broker, FakePersister())
    await h.start()
    try:
        await h.topic("jobs", 1)
        joined = await h.hb("a", 0, ["jobs"])
        assert joined.heartbeat_interval_ms == 100
        await until(lambda: not h.group().members, "member fenced")
        assert h.group().group_epoch == joined.member_epoch + 1
    finally:
        await h.coordinator.stop()
        broker.stop()


async def test_group_configs_override_the_broker_defaults(sg: Harness) -> None:
    await sg.broker.controller.alter_configs(
        GROUP_RESOURCE, GROUP, [ConfigChange("share.heartbeat.interval.ms", 0, "7000"),
                                ConfigChange("share.isolation.level", 0, "read_committed")],
        validate_only=False)
    config = share_group_configs(sg.broker, GROUP)
    assert (config.heartbeat_interval_ms, config.isolation_level) == (7000, 1)
    assert share_group_configs(sg.broker, "other").heartbeat_interval_ms == 5000
    await sg.topic("jobs", 1)
    assert (await sg.hb("m1", 0, ["jobs"])).heartbeat_interval_ms == 7000


async def test_a_failed_initialization_is_retried_after_the_retry_interval(sg: Harness) -> None:
    tid = await sg.topic("jobs", 2)
    assert sg.persister is not None
    sg.persister.fail[SharePartitionKey(GROUP, tid, 1)] = ErrorCode.COORDINATOR_NOT_AVAILABLE
    joined = await sg.hb("m1", 0, ["jobs"])
    await sg.initialized(1)
    meta = sg.group().share_partitions
    assert meta.initializing == {}  # the failed one is no longer initializing: retried
    got = await sg.hb("m1", joined.member_epoch)
    assert _flat(got.assignment) == {(tid, 0)}
    del sg.persister.fail[SharePartitionKey(GROUP, tid, 1)]
    await sg.hb("m1", got.member_epoch)
    await sg.initialized(2)
    final = await sg.hb("m1", sg.group().members["m1"].member_epoch)
    assert _flat(final.assignment) == {(tid, 0), (tid, 1)}


async def test_initializing_partitions_are_not_asked_twice_within_the_retry_interval(
        sg: Harness) -> None:
    await sg.topic("jobs", 1)
    assert sg.persister is not None
    sg.persister.gate.clear()  # the share coordinator is slow to answer
    joined = await sg.hb("m1", 0, ["jobs"])
    await sg.hb("m1", joined.member_epoch)
    meta = sg.group().share_partitions
    assert meta is not None and sum(len(t.partitions) for t in meta.initializing.values()) == 1
    sg.persister.gate.set()
    await sg.initialized(1)
    assert len(sg.persister.initialized) == 1


async def test_share_groups_are_rebuilt_from_their_records(tmp_path: Path) -> None:
    persister = FakePersister()
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = Harness(broker, persister)
    await h.start()
    tid = await h.topic("jobs", 3)
    await h.hb("a", 0, ["jobs"])
    await h.hb("b", 0, ["jobs"])
    await h.initialized(3)
    for m in ("a", "b"):
        await h.hb(m, h.group().members[m].member_epoch)
    before = h.group()
    snapshot = (before.group_epoch, before.assignment_epoch, before.metadata_hash,
                dict(before.members), dict(before.target), before.initialized_partitions())
    await h.coordinator.stop()
    broker.stop()

    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    h = Harness(broker, persister)
    await h.start()
    try:
        after = h.group()
        assert (after.group_epoch, after.assignment_epoch, after.metadata_hash,
                dict(after.members), dict(after.target), after.initialized_partitions()) == snapshot
        assert snapshot[5] == {tid: frozenset({0, 1, 2})}
        listed = h.coordinator.list_groups(set(), {"share"})[1]
        assert [(g.group_id, g.group_type, g.protocol_type, g.state) for g in listed] == [
            (GROUP, "share", "share", "Stable")]
    finally:
        await h.coordinator.stop()
        broker.stop()


async def test_a_group_id_is_one_type_only(sg: Harness) -> None:
    await sg.topic("jobs", 1)
    # A simple (memberless) classic group: an offset commit implies it.
    await sg.coordinator.commit_offsets(
        group_id="classic", generation_id=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, entries=[OffsetCommitEntry("jobs", 0, 1)], api_version=9)
    with pytest.raises(KafkaError) as err:
        await sg.hb("m1", 0, ["jobs"], group="classic")
    assert err.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    await sg.hb("m1", 0, ["jobs"])
    rejoined = await sg.coordinator.join_group(
        group_id=GROUP, member_id="", group_instance_id=None, client_id="c", client_host="/h",
        session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
        protocols=[("range", b"")], api_version=9)
    assert rejoined.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    with pytest.raises(KafkaError) as commit:
        await sg.coordinator.commit_offsets(group_id=GROUP, generation_id=-1, member_id="",
                                            group_instance_id=None, retention_time_ms=-1,
                                            entries=[], api_version=9)
    assert commit.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    described = sg.coordinator.describe_group(GROUP)  # DescribeGroups: classic groups only
    assert (described.error, described.state) == (ErrorCode.NONE, "Dead")
    with pytest.raises(KafkaError) as not_share:
        sg.coordinator.share_group_describe("classic")
    assert not_share.value.code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_alter_offsets_needs_an_empty_group_and_restarts_the_state_there(
        sg: Harness) -> None:
    tid = await sg.topic("jobs", 2)
    joined = await sg.hb("m1", 0, ["jobs"])
    await sg.initialized(2)
    with pytest.raises(KafkaError) as busy:
        await sg.coordinator.alter_share_group_offsets(GROUP, [("jobs", [(0, 10)])])
    assert busy.value.code == ErrorCode.NON_EMPTY_GROUP
    await sg.hb("m1", -1)
    results = await sg.coordinator.alter_share_group_offsets(
        GROUP, [("jobs", [(0, 10), (5, 1)]), ("nope", [(0, 1)])])
    by_name = {r.name: r for r in results}
    assert by_name["jobs"].topic_id == tid
    assert by_name["jobs"].partitions[0] == (ErrorCode.NONE, None)
    assert by_name["jobs"].partitions[5][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["nope"].partitions[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert sg.persister is not None
    key, epoch, start = sg.persister.initialized[-1]
    assert (key.partition, start) == (0, 10) and epoch == sg.group().group_epoch
    assert epoch > joined.member_epoch  # newer than the state epoch it replaces
    offsets = await sg.coordinator.describe_share_group_offsets(GROUP, None)
    assert [(t.name, [(p.partition, p.summary.start_offset if p.summary else None)
                      for p in t.partitions]) for t in offsets] == [("jobs", [(0, 10), (1, -1)])]


async def test_alter_offsets_of_a_new_group_creates_it_empty(sg: Harness) -> None:
    await sg.topic("jobs", 1)
    await sg.coordinator.alter_share_group_offsets("fresh", [("jobs", [(0, 3)])])
    group = sg.group("fresh")
    assert group.state.value == "Empty" and len(group.initialized_partitions()) == 1


async def test_describe_offsets_answers_minus_one_where_there_is_no_state(sg: Harness) -> None:
    await sg.topic("jobs", 2)
    offsets = await sg.coordinator.describe_share_group_offsets(
        "nobody", [("jobs", [0, 1]), ("missing", [0])])
    assert [(t.name, t.topic_id.int == 0, [p.summary for p in t.partitions]) for t in offsets] == [
        ("jobs", False, [None, None]), ("missing", True, [None])]


async def test_delete_offsets_forgets_whole_topics_of_an_empty_group(sg: Harness) -> None:
    tid = await sg.topic("jobs", 2)
    await sg.topic("other", 1)
    await sg.hb("m1", 0, ["jobs"])
    await sg.initialized(2)
    with pytest.raises(KafkaError) as busy:
        await sg.coordinator.delete_share_group_offsets(GROUP, ["jobs"])
    assert busy.value.code == ErrorCode.NON_EMPTY_GROUP
    await sg.hb("m1", -1)
    results = await sg.coordinator.delete_share_group_offsets(GROUP, ["jobs", "other", "nope"])
    assert [(r.name, r.error) for r in results] == [
        ("jobs", ErrorCode.NONE), ("other", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert results[0].topic_id == tid
    assert sg.persister is not None
    assert sorted(k.partition for k in sg.persister.deleted) == [0, 1]
    meta = sg.group().share_partitions
    assert meta is not None and meta.initialized == {} and meta.deleting == {}
    with pytest.raises(KafkaError) as unknown:
        await sg.coordinator.delete_share_group_offsets("nobody", ["jobs"])
    assert unknown.value.code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_delete_groups_deletes_an_empty_share_group_with_its_state(sg: Harness) -> None:
    tid = await sg.topic("jobs", 2)
    await sg.hb("m1", 0, ["jobs"])
    await sg.initialized(2)
    assert await sg.coordinator.delete_group(GROUP) == ErrorCode.NON_EMPTY_GROUP
    await sg.hb("m1", -1)
    assert sg.persister is not None
    sg.persister.fail[SharePartitionKey(GROUP, tid, 1)] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await sg.coordinator.delete_group(GROUP) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert sg.group().share_partitions.deleting == {tid: "jobs"}  # kept for the retry
    del sg.persister.fail[SharePartitionKey(GROUP, tid, 1)]
    assert await sg.coordinator.delete_group(GROUP) == ErrorCode.NONE
    assert sg.persister.states == {}
    with pytest.raises(KafkaError):
        sg.group()
    assert sg.coordinator.list_groups(set(), set())[1] == []


async def test_a_deleted_topic_leaves_the_share_state_metadata(sg: Harness) -> None:
    await sg.topic("jobs", 1)
    await sg.topic("keep", 1)
    await sg.hb("m1", 0, ["jobs", "keep"])
    await sg.initialized(2)
    await sg.broker.controller.delete_topics(["jobs"])
    await until(lambda: len(sg.group().initialized_partitions()) == 1, "jobs dropped")
    result = await sg.hb("m1", sg.group().members["m1"].member_epoch)
    assert len(_flat(result.assignment)) == 1  # the epoch moved: only "keep" is left


async def test_without_a_persister_nothing_is_initialized_or_assigned(
        mini_broker: MiniBroker) -> None:
    h = Harness(mini_broker, None)
    await h.start()
    try:
        await h.topic("jobs", 1)
        joined = await h.hb("m1", 0, ["jobs"])
        again = await h.hb("m1", joined.member_epoch)
        assert again.assignment is None and h.group().share_partitions is None
    finally:
        await h.coordinator.stop()
