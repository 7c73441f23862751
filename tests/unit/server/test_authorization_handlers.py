"""Kafka's authorization checks in the group, admin, log dir, reassignment, quota, producer,
partition-count and chunk handlers (server/authorization.py decides; each handler answers with
Kafka's error code and shape).

The broker runs in this process with the StandardAuthorizer on; requests go through its real
dispatcher as encoded frames, on connections whose principal the test sets. `User:admin` is a
super user; alice holds the ACLs below, carol a little on the cluster, bob nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import (
    CLUSTER_NAME,
    RESOURCE_OPERATIONS,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from tests.unit.server.test_diskless_handlers import _call as call_as

_reg = registry()
OMITTED = -(2**31)  # KIP-430: authorized operations not asked for
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def _allow(user: str, resource: ResourceType, name: str, operation: AclOperation,
           pattern: PatternType = LITERAL) -> AclEntry:
    return AclEntry(resource, name, pattern, f"User:{user}", "*", operation,
                    AclPermissionType.ALLOW)


ACLS = [
    *(_allow("alice", ResourceType.GROUP, "alice-", op, PREFIXED)
      for op in (AclOperation.READ, AclOperation.DELETE)),
    _allow("alice", ResourceType.TOPIC, "shared", AclOperation.READ),
    *(_allow("alice", ResourceType.TOPIC, "alice-", op, PREFIXED)
      for op in (AclOperation.READ, AclOperation.CREATE, AclOperation.DELETE,
                 AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)),
    _allow("alice", ResourceType.TOPIC, "blind-", AclOperation.CREATE, PREFIXED),
    _allow("alice", ResourceType.TRANSACTIONAL_ID, "alice-txn", AclOperation.WRITE),
    *(_allow("carol", ResourceType.CLUSTER, CLUSTER_NAME, op)
      for op in (AclOperation.DESCRIBE, AclOperation.ALTER)),
    _allow("node", ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION),
]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(build_config({
        "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"), "log.cleaner.enable": "false",
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"}))
    await b.start()
    try:
        for name in ("shared", "secret"):
            (created,) = await b.controller.create_topics([TopicCreation(name, 1, 1)], False)
            assert created.error == ErrorCode.NONE, created.message
        assert all(code == ErrorCode.NONE for code, _ in await b.controller.create_acls(ACLS))
        runtime = b.group_coordinator.runtime
        await runtime.ensure_topic()
        deadline = time.monotonic() + 10
        while runtime.loaded_partitions() != [0] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert runtime.loaded_partitions() == [0], "the group coordinator did not load"
        yield b
    finally:
        await b.stop()


async def _call(broker: Broker, user: str, api_key: int, version: int, **fields: Any) -> Any:
    """One request from `user` on a fresh connection (our own client's, so the extension
    APIs are served too)."""
    return await call_as(broker, api_key, version, _reg.requests[api_key].cls(**fields),
                         CLIENT_SOFTWARE_NAME, KafkaPrincipal("User", user))


def _cls(api_key: int) -> Any:
    return _reg.requests[api_key].cls


def _bits(*operations: AclOperation) -> int:
    return sum(1 << op for op in operations)


def _codes(topics: Any, name: str = "name", partitions: str = "partitions",
           index: str = "partition_index") -> dict[tuple[str, int], int]:
    return {(getattr(t, name), getattr(p, index)): p.error_code
            for t in topics for p in getattr(t, partitions)}


async def _commit(broker: Broker, user: str, group: str, *topics: str, version: int = 8) -> Any:
    req = _cls(ApiKey.OFFSET_COMMIT)
    return await _call(broker, user, ApiKey.OFFSET_COMMIT, version, group_id=group, topics=[
        req.OffsetCommitRequestTopic(name=t, partitions=[req.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_metadata="m")]) for t in topics])


# -- groups ------------------------------------------------------------------------------------

async def test_find_coordinator_needs_describe_on_the_group_transactional_id_or_topic(
        broker: Broker) -> None:
    for key_type, key, user, expected in [(0, "alice-g", "bob", GROUP_DENIED),
                                          (0, "alice-g", "alice", ErrorCode.NONE),
                                          (1, "alice-txn", "bob", TXN_DENIED),
                                          (1, "alice-txn", "alice", ErrorCode.NONE),
                                          # a diskless coordinator: DESCRIBE on its topic
                                          (100, "0", "bob", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]:
        answer = await _call(broker, user, ApiKey.FIND_COORDINATOR, 4, key_type=key_type,
                             coordinator_keys=[key])
        [found] = answer.coordinators
        assert (found.key, found.error_code) == (key, expected)
        assert (found.node_id == -1) == (expected != ErrorCode.NONE)
    single = await _call(broker, "bob", ApiKey.FIND_COORDINATOR, 3, key_type=0, key="alice-g")
    assert (single.error_code, single.node_id, single.host) == (GROUP_DENIED, -1, "")


async def test_classic_group_apis_need_read_on_the_group(broker: Broker) -> None:
    join = _cls(ApiKey.JOIN_GROUP)
    protocols = [join.JoinGroupRequestProtocol(name="range", metadata=b"")]
    for user, expected in [("bob", GROUP_DENIED), ("alice", ErrorCode.MEMBER_ID_REQUIRED)]:
        answer = await _call(broker, user, ApiKey.JOIN_GROUP, 5, group_id="alice-g",
                             session_timeout_ms=10000, rebalance_timeout_ms=10000,
                             member_id="", protocol_type="consumer", protocols=protocols)
        assert answer.error_code == expected
    fields = {"group_id": "alice-g", "generation_id": 1, "member_id": "m"}
    assert (await _call(broker, "bob", ApiKey.SYNC_GROUP, 3, **fields)).error_code == GROUP_DENIED
    assert (await _call(broker, "bob", ApiKey.HEARTBEAT, 3, **fields)).error_code == GROUP_DENIED
    leave = _cls(ApiKey.LEAVE_GROUP)
    left = await _call(broker, "bob", ApiKey.LEAVE_GROUP, 3, group_id="alice-g",
                       members=[leave.MemberIdentity(member_id="m")])
    assert (left.error_code, left.members) == (GROUP_DENIED, [])


async def test_offset_commit_checks_the_group_then_each_topic(broker: Broker) -> None:
    refused = await _commit(broker, "bob", "alice-c", "shared", "secret")
    assert _codes(refused.topics) == {("shared", 0): GROUP_DENIED, ("secret", 0): GROUP_DENIED}
    # Authorization before existence: an unknown topic alice may not read is refused, one
    # she may read is unknown.
    answer = await _commit(broker, "alice", "alice-c", "shared", "secret", "missing",
                           "alice-missing")
    assert _codes(answer.topics) == {
        ("shared", 0): ErrorCode.NONE, ("secret", 0): TOPIC_DENIED,
        ("missing", 0): TOPIC_DENIED, ("alice-missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # v0 (ZooKeeper-stored in Kafka) still answers refused topics as refused.
    old = await _commit(broker, "alice", "alice-c", "shared", "secret", version=0)
    assert _codes(old.topics) == {("shared", 0): ErrorCode.UNSUPPORTED_VERSION,
                                  ("secret", 0): TOPIC_DENIED}


async def test_offset_fetch_hides_the_offsets_of_topics_the_principal_may_not_describe(
        broker: Broker) -> None:
    assert set(_codes((await _commit(broker, "admin", "alice-f", "shared", "secret")).topics)
               .values()) == {ErrorCode.NONE}
    req = _cls(ApiKey.OFFSET_FETCH)
    every = req.OffsetFetchRequestGroup(group_id="alice-f", topics=None)
    named = req.OffsetFetchRequestGroup(group_id="alice-f", topics=[
        req.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=[0])
        for t in ("shared", "secret")])
    answer = await _call(broker, "alice", ApiKey.OFFSET_FETCH, 8, groups=[every, named])
    listed, asked = answer.groups
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in listed.topics] == [
        ("shared", [5])]
    assert {(t.name, p.committed_offset, p.error_code) for t in asked.topics
            for p in t.partitions} == {("shared", 5, 0), ("secret", -1, TOPIC_DENIED)}
    refused = await _call(broker, "bob", ApiKey.OFFSET_FETCH, 8, groups=[every])
    assert [(g.error_code, g.topics) for g in refused.groups] == [(GROUP_DENIED, [])]
    # v2-v7: a top-level error; v1 has none, so every partition asked for carries it.
    topic = req.OffsetFetchRequestTopic(name="shared", partition_indexes=[0])
    v5 = await _call(broker, "bob", ApiKey.OFFSET_FETCH, 5, group_id="alice-f", topics=[topic])
    assert (v5.error_code, v5.topics) == (GROUP_DENIED, [])
    v1 = await _call(broker, "bob", ApiKey.OFFSET_FETCH, 1, group_id="alice-f", topics=[topic])
    assert _codes(v1.topics) == {("shared", 0): GROUP_DENIED}


async def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(
        broker: Broker) -> None:
    await _commit(broker, "admin", "alice-d", "shared", "secret")
    req = _cls(ApiKey.OFFSET_DELETE)
    topics = [req.OffsetDeleteRequestTopic(name=t, partitions=[
        req.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])
        for t in ("shared", "secret")]
    refused = await _call(broker, "bob", ApiKey.OFFSET_DELETE, 0, group_id="alice-d",
                          topics=topics)
    assert (refused.error_code, refused.topics) == (GROUP_DENIED, [])
    answer = await _call(broker, "alice", ApiKey.OFFSET_DELETE, 0, group_id="alice-d",
                         topics=topics)
    assert answer.error_code == 0
    assert _codes(answer.topics) == {("shared", 0): ErrorCode.NONE, ("secret", 0): TOPIC_DENIED}


async def test_txn_offset_commit_checks_the_transactional_id_then_the_group_then_topics(
        broker: Broker) -> None:
    req = _cls(ApiKey.TXN_OFFSET_COMMIT)
    topics = [req.TxnOffsetCommitRequestTopic(name=t, partitions=[
        req.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1)]) for t in ("shared", "secret")]

    async def commit(user: str, transactional_id: str, group: str) -> dict[tuple[str, int], int]:
        answer = await _call(broker, user, ApiKey.TXN_OFFSET_COMMIT, 3,
                             transactional_id=transactional_id, group_id=group, producer_id=7,
                             producer_epoch=0, topics=topics)
        return _codes(answer.topics)

    assert set((await commit("bob", "alice-txn", "alice-t")).values()) == {TXN_DENIED}
    assert set((await commit("alice", "alice-txn", "bob-t")).values()) == {GROUP_DENIED}
    codes = await commit("alice", "alice-txn", "alice-t")
    assert codes[("secret", 0)] == TOPIC_DENIED
    assert codes[("shared", 0)] not in (TOPIC_DENIED, GROUP_DENIED, TXN_DENIED)


async def test_list_and_describe_groups_show_only_describable_groups(broker: Broker) -> None:
    for group in ("alice-l", "zed"):
        await _commit(broker, "admin", group, "shared")

    async def listed(user: str) -> set[str]:
        answer = await _call(broker, user, ApiKey.LIST_GROUPS, 4, states_filter=[])
        return {g.group_id for g in answer.groups} & {"alice-l", "zed"}

    assert await listed("alice") == {"alice-l"}
    assert await listed("carol") == {"alice-l", "zed"}  # DESCRIBE on the cluster: all of them
    assert await listed("bob") == set()
    answer = await _call(broker, "alice", ApiKey.DESCRIBE_GROUPS, 5, groups=["alice-l", "zed"],
                         include_authorized_operations=True)
    mine, other = answer.groups
    assert (mine.error_code, mine.authorized_operations) == (0, _bits(
        AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE))
    assert (other.group_id, other.error_code, other.authorized_operations, other.members) == (
        "zed", GROUP_DENIED, OMITTED, [])
    unasked = await _call(broker, "admin", ApiKey.DESCRIBE_GROUPS, 5, groups=["zed"],
                          include_authorized_operations=False)
    assert [(g.error_code, g.authorized_operations) for g in unasked.groups] == [(0, OMITTED)]
    everything = await _call(broker, "admin", ApiKey.DESCRIBE_GROUPS, 5, groups=["zed"],
                             include_authorized_operations=True)
    assert everything.groups[0].authorized_operations == _bits(
        *RESOURCE_OPERATIONS[ResourceType.GROUP])


async def test_delete_groups_needs_delete_on_each_group(broker: Broker) -> None:
    for group in ("alice-x", "zed"):
        await _commit(broker, "admin", group, "shared")
    answer = await _call(broker, "alice", ApiKey.DELETE_GROUPS, 2, groups_names=["alice-x", "zed"])
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("alice-x", ErrorCode.NONE), ("zed", GROUP_DENIED)]


async def test_consumer_group_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(
        broker: Broker) -> None:
    async def heartbeat(user: str, group: str, topics: list[str]) -> Any:
        return await _call(broker, user, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, group_id=group,
                           member_id="", member_epoch=0, rebalance_timeout_ms=10000,
                           subscribed_topic_names=topics, topic_partitions=[])

    assert (await heartbeat("bob", "alice-k", ["shared"])).error_code == GROUP_DENIED
    assert (await heartbeat("alice", "alice-k", ["shared", "secret"])).error_code == TOPIC_DENIED
    joined = await heartbeat("alice", "alice-k", ["shared"])
    assert (joined.error_code, joined.member_epoch > 0) == (0, True)
    # ConsumerGroupDescribe: DESCRIBE on the group, and on every topic its members are given.
    assert (await heartbeat("admin", "alice-s", ["secret"])).error_code == 0
    answer = await _call(broker, "alice", ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                         group_ids=["alice-k", "alice-s", "zed"],
                         include_authorized_operations=True)
    mine, hidden, other = answer.groups
    assert (mine.error_code, len(mine.members), mine.authorized_operations) == (
        0, 1, _bits(AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE))
    assert (hidden.error_code, hidden.members) == (TOPIC_DENIED, [])
    assert (other.error_code, other.authorized_operations) == (GROUP_DENIED, OMITTED)


# -- topics, records, configs, the cluster -----------------------------------------------------

async def test_create_topics_needs_create_and_shows_configs_only_with_describe_configs(
        broker: Broker) -> None:
    req = _cls(ApiKey.CREATE_TOPICS)

    def topic(name: str) -> Any:
        return req.CreatableTopic(name=name, num_partitions=1, replication_factor=1)

    answer = await _call(broker, "alice", ApiKey.CREATE_TOPICS, 7, timeout_ms=5000, topics=[
        topic("alice-new"), topic("blind-new"), topic("bob-new"), topic("dup"), topic("dup")])
    seen, blind, refused, *dups = answer.topics
    assert (seen.error_code, seen.topic_config_error_code, seen.num_partitions) == (0, 0, 1)
    assert seen.configs
    assert (blind.error_code, blind.topic_config_error_code, blind.num_partitions,
            blind.replication_factor, blind.configs) == (0, TOPIC_DENIED, -1, -1, [])
    assert (refused.name, refused.error_code) == ("bob-new", TOPIC_DENIED)
    # A name listed twice is invalid whoever asks, as in Kafka.
    assert [d.error_code for d in dups] == [ErrorCode.INVALID_REQUEST] * 2
    assert "blind-new" in broker.controller.image.topics_by_name
    assert "bob-new" not in broker.controller.image.topics_by_name


async def test_delete_topics_by_name_and_by_id(broker: Broker) -> None:
    await broker.controller.create_topics([TopicCreation("alice-gone", 1, 1)], False)
    topics = broker.controller.image.topics_by_name
    state = _cls(ApiKey.DELETE_TOPICS).DeleteTopicState
    unknown_id = uuid.uuid4()

    async def delete(user: str, *entries: tuple[str | None, uuid.UUID]) -> list[Any]:
        answer = await _call(broker, user, ApiKey.DELETE_TOPICS, 6, timeout_ms=5000,
                             topics=[state(name=n, topic_id=i) for n, i in entries])
        return [(r.name, r.error_code) for r in answer.responses]

    zero = uuid.UUID(int=0)
    assert await delete("bob", ("shared", zero), ("missing", zero)) == [
        ("shared", TOPIC_DENIED), ("missing", TOPIC_DENIED)]
    assert await delete("alice", ("alice-missing", zero)) == [
        ("alice-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # By id: the name only for a topic the principal may describe; an unknown id is unknown.
    shared_id = topics["shared"].topic_id
    assert await delete("bob", (None, shared_id), (None, unknown_id)) == [
        (None, TOPIC_DENIED), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert await delete("alice", (None, shared_id), (None, topics["alice-gone"].topic_id)) == [
        ("shared", TOPIC_DENIED), ("alice-gone", ErrorCode.NONE)]
    assert "shared" in topics and "alice-gone" not in broker.controller.image.topics_by_name


async def test_create_partitions_and_delete_records_need_alter_and_delete_on_the_topic(
        broker: Broker) -> None:
    await broker.controller.create_topics([TopicCreation("alice-p", 1, 1)], False)
    req = _cls(ApiKey.CREATE_PARTITIONS)
    answer = await _call(broker, "alice", ApiKey.CREATE_PARTITIONS, 3, timeout_ms=5000,
                         validate_only=False, topics=[
                             req.CreatePartitionsTopic(name=t, count=2, assignments=None)
                             for t in ("alice-p", "shared")])
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("alice-p", ErrorCode.NONE), ("shared", TOPIC_DENIED)]
    records = _cls(ApiKey.DELETE_RECORDS)
    answer = await _call(broker, "alice", ApiKey.DELETE_RECORDS, 2, timeout_ms=5000, topics=[
        records.DeleteRecordsTopic(name=t, partitions=[
            records.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=-1)])
        for t in ("alice-p", "shared")])
    assert {(t.name, p.error_code, p.low_watermark) for t in answer.topics
            for p in t.partitions} == {("alice-p", 0, 0), ("shared", TOPIC_DENIED, -1)}


async def test_configs_are_authorized_per_resource(broker: Broker) -> None:
    await broker.controller.create_topics([TopicCreation("alice-cfg", 1, 1)], False)
    req = _cls(ApiKey.DESCRIBE_CONFIGS)
    resources = [req.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                             configuration_keys=None)
                 for kind, name in ((2, "alice-cfg"), (2, "shared"), (4, "1"), (8, "1"))]
    answer = await _call(broker, "alice", ApiKey.DESCRIBE_CONFIGS, 4, resources=resources)
    codes = [(r.resource_name, r.error_code) for r in answer.results]
    assert codes == [("alice-cfg", 0), ("shared", TOPIC_DENIED), ("1", CLUSTER_DENIED),
                     ("1", CLUSTER_DENIED)]
    assert answer.results[0].configs and not answer.results[1].configs
    alter = _cls(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    changes = [alter.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
        alter.AlterConfigsResource.AlterableConfig(name="retention.ms" if kind == 2 else
                                                   "log.cleaner.threads",
                                                   config_operation=0, value="1000")])
        for kind, name in ((2, "alice-cfg"), (2, "shared"), (4, ""))]
    answer = await _call(broker, "alice", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
                         validate_only=False, resources=changes)
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [
        ("alice-cfg", 0), ("shared", TOPIC_DENIED), ("", CLUSTER_DENIED)]
    assert broker.controller.image.topic_configs("alice-cfg")["retention.ms"] == "1000"
    legacy = _cls(ApiKey.ALTER_CONFIGS)
    answer = await _call(broker, "bob", ApiKey.ALTER_CONFIGS, 2, validate_only=False, resources=[
        legacy.AlterConfigsResource(resource_type=2, resource_name="shared", configs=[
            legacy.AlterConfigsResource.AlterableConfig(name="retention.ms", value="1")])])
    assert [r.error_code for r in answer.responses] == [TOPIC_DENIED]


async def test_describe_cluster_reports_cluster_operations_when_asked(broker: Broker) -> None:
    async def operations(user: str, asked: bool = True) -> int:
        answer = await _call(broker, user, ApiKey.DESCRIBE_CLUSTER, 1,
                             include_cluster_authorized_operations=asked, endpoint_type=1)
        assert answer.error_code == 0 and answer.brokers
        return int(answer.cluster_authorized_operations)

    assert await operations("admin") == _bits(*RESOURCE_OPERATIONS[ResourceType.CLUSTER])
    assert await operations("carol") == _bits(AclOperation.DESCRIBE, AclOperation.ALTER)
    assert await operations("node") == 0  # no DESCRIBE on the cluster: nothing at all
    assert await operations("admin", asked=False) == OMITTED


async def test_cluster_apis_need_describe_or_alter_on_the_cluster(broker: Broker) -> None:
    dirs = await _call(broker, "bob", ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
    assert (dirs.error_code, dirs.results) == (CLUSTER_DENIED, [])
    dirs = await _call(broker, "carol", ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
    assert dirs.error_code == 0 and dirs.results
    move = _cls(ApiKey.ALTER_REPLICA_LOG_DIRS)
    moved = await _call(broker, "bob", ApiKey.ALTER_REPLICA_LOG_DIRS, 2, dirs=[
        move.AlterReplicaLogDir(path="/elsewhere", topics=[
            move.AlterReplicaLogDir.AlterReplicaLogDirTopic(name="shared", partitions=[0])])])
    assert _codes(moved.results, "topic_name") == {("shared", 0): CLUSTER_DENIED}
    listed = await _call(broker, "bob", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=5000,
                         topics=None)
    assert (listed.error_code, listed.topics) == (CLUSTER_DENIED, [])
    listed = await _call(broker, "carol", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                         timeout_ms=5000, topics=None)
    assert listed.error_code == 0
    reassign = _cls(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    answer = await _call(broker, "bob", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                         timeout_ms=5000, topics=[reassign.ReassignableTopic(name="shared",
                             partitions=[reassign.ReassignableTopic.ReassignablePartition(
                                 partition_index=0, replicas=[1])])])
    assert answer.error_code == CLUSTER_DENIED
    assert _codes(answer.responses) == {("shared", 0): CLUSTER_DENIED}
    elect = _cls(ApiKey.ELECT_LEADERS)
    answer = await _call(broker, "bob", ApiKey.ELECT_LEADERS, 2, election_type=0,
                         timeout_ms=5000, topic_partitions=[
                             elect.TopicPartitions(topic="shared", partitions=[0])])
    assert answer.error_code == CLUSTER_DENIED
    assert _codes(answer.replica_election_results, "topic", "partition_result",
                  "partition_id") == {("shared", 0): CLUSTER_DENIED}


async def test_client_quotas_need_describe_configs_and_alter_configs_on_the_cluster(
        broker: Broker) -> None:
    for user, expected in [("carol", CLUSTER_DENIED), ("admin", ErrorCode.NONE)]:
        answer = await _call(broker, user, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, components=[],
                             strict=False)
        assert answer.error_code == expected
    quotas = _cls(ApiKey.ALTER_CLIENT_QUOTAS)
    answer = await _call(broker, "carol", ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=True,
                         entries=[quotas.EntryData(
                             entity=[quotas.EntryData.EntityData(entity_type="user",
                                                                 entity_name="bob")],
                             ops=[quotas.EntryData.OpData(key="producer_byte_rate",
                                                          value=1024.0, remove=False)])])
    assert [(e.error_code, [x.entity_name for x in e.entity]) for e in answer.entries] == [
        (CLUSTER_DENIED, ["bob"])]


async def test_describe_producers_needs_read_on_the_topic(broker: Broker) -> None:
    req = _cls(ApiKey.DESCRIBE_PRODUCERS)
    for user, expected in [("bob", TOPIC_DENIED), ("alice", ErrorCode.NONE)]:
        answer = await _call(broker, user, ApiKey.DESCRIBE_PRODUCERS, 0, topics=[
            req.TopicRequest(name="shared", partition_indexes=[0])])
        assert _codes(answer.topics) == {("shared", 0): expected}


# -- our own APIs --------------------------------------------------------------------------------

async def test_partition_count_apis_need_describe_and_alter_on_the_topic(broker: Broker) -> None:
    epochs = _cls(ApiKey.LEADER_EPOCHS_FOR_PARTITION)
    for user, expected in [("bob", TOPIC_DENIED), ("alice", ErrorCode.NONE)]:
        answer = await _call(broker, user, ApiKey.LEADER_EPOCHS_FOR_PARTITION, 0, topics=[
            epochs.LeaderEpochsForPartitionRequestTopic(topic="shared", partitions=[0])])
        assert _codes(answer.topics, "topic", index="partition") == {("shared", 0): expected}
    delete = _cls(ApiKey.DELETE_PARTITIONS)
    answer = await _call(broker, "bob", ApiKey.DELETE_PARTITIONS, 0,
                         delete_partitions_delay_ms=0, topics=[
                             delete.DeletePartitionsTopic(name="shared", partitions=[0])])
    assert _codes(answer.responses) == {("shared", 0): TOPIC_DENIED}


async def test_chunk_apis_need_alter_and_let_nodes_report_with_cluster_action(
        broker: Broker) -> None:
    create = _cls(ApiKey.CREATE_CHUNKS)
    answer = await _call(broker, "bob", ApiKey.CREATE_CHUNKS, 0, topic_partitions=[
        create.CreateChunksTopicPartition(topic_name="shared", partition_id=0, broker_ids=[1])])
    assert [(r.topic_name, r.error_code) for r in answer.results] == [("shared", TOPIC_DENIED)]
    alter = _cls(ApiKey.ALTER_CHUNK_ASSIGNMENTS)
    chunk = alter.AlterChunkAssignment(topic_name="shared", partition_id=0, start_offset=0,
                                       chunk_epoch=-1, broker_ids=[], caught_up_replica=1)
    refused = await _call(broker, "bob", ApiKey.ALTER_CHUNK_ASSIGNMENTS, 0, chunks=[chunk])
    assert [r.error_code for r in refused.results] == [CLUSTER_DENIED]
    # A replica reporting as its node (CLUSTER_ACTION) reaches the controller, which judges.
    reported = await _call(broker, "node", ApiKey.ALTER_CHUNK_ASSIGNMENTS, 0, chunks=[chunk])
    assert [r.error_code for r in reported.results] != [CLUSTER_DENIED]
