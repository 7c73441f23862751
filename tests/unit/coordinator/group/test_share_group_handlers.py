"""The share group handlers (server/share_groups.py) on an in-process broker with the
StandardAuthorizer: Kafka's authorization order and error shapes, group.share.enable=false.
Handlers are called with a RequestContext directly (the dispatcher's routing of 76/77 is
tested with it); the broker has no share persister here, so nothing gets initialized."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.network.connection import KafkaConnection
from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclEntry, AclOperation, AclPermissionType, PatternType
from kafka_ext.security.acl import ResourceType as Res
from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.server import share_groups
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
Heartbeat = _reg.shadowed_requests[SHARE_GROUP_HEARTBEAT].cls
Describe = _reg.shadowed_requests[SHARE_GROUP_DESCRIBE].cls
DescribeOffsets = _reg.requests[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS].cls
AlterOffsets = _reg.requests[ApiKey.ALTER_SHARE_GROUP_OFFSETS].cls
DeleteOffsets = _reg.requests[ApiKey.DELETE_SHARE_GROUP_OFFSETS].cls


def _allow(resource: Res, name: str, operation: AclOperation) -> AclEntry:
    return AclEntry(resource, name, PatternType.LITERAL, "User:alice", "*", operation,
                    AclPermissionType.ALLOW)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(build_config({
        "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"), "log.cleaner.enable": "false",
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"}))
    await b.start()
    try:
        for name in ("shared", "secret"):
            (created,) = await b.controller.create_topics([TopicCreation(name, 1, 1)], False)
            assert created.error == ErrorCode.NONE, created.message
        acls = [_allow(Res.GROUP, "alice-q", AclOperation.READ),
                _allow(Res.GROUP, "alice-q", AclOperation.DESCRIBE),
                _allow(Res.TOPIC, "shared", AclOperation.DESCRIBE)]
        assert all(code == ErrorCode.NONE for code, _ in await b.controller.create_acls(acls))
        runtime = b.group_coordinator.runtime
        await runtime.ensure_topic()
        deadline = time.monotonic() + 10
        while runtime.loaded_partitions() != [0] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert runtime.loaded_partitions() == [0], "the group coordinator did not load"
        yield b
    finally:
        await b.stop()


def _ctx(broker: Broker, user: str, api_key: int, version: int) -> RequestContext:
    header = _reg["RequestHeader"].cls(request_api_key=api_key, request_api_version=version,
                                       correlation_id=1, client_id="share-cli")
    conn = KafkaConnection(broker.dispatcher.handle_frame, 1 << 20, lambda c: None)
    return RequestContext(header, version, broker, conn, principal=KafkaPrincipal("User", user),
                          client_host="10.0.0.7")


async def _heartbeat(broker: Broker, user: str, **fields: Any) -> Any:
    body = {"group_id": "alice-q", "member_id": "m-1", "member_epoch": 0,
            "subscribed_topic_names": ["shared"], **fields}
    return await share_groups.handle_share_group_heartbeat(
        _ctx(broker, user, SHARE_GROUP_HEARTBEAT, 1), Heartbeat(**body))


async def test_heartbeat_checks_the_group_the_member_id_then_the_topics(broker: Broker) -> None:
    denied = await _heartbeat(broker, "bob")
    assert (denied.error_code, denied.member_id, denied.member_epoch) == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED, None, 0)
    assert (await _heartbeat(broker, "alice", member_id="")).error_code == \
        ErrorCode.INVALID_REQUEST
    hidden = await _heartbeat(broker, "alice", subscribed_topic_names=["shared", "secret"])
    assert hidden.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    joined = await _heartbeat(broker, "alice")
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m-1", 1)
    assert joined.heartbeat_interval_ms == 5000 and joined.assignment is not None
    member = broker.group_coordinator.share_group_describe("alice-q").members["m-1"]
    assert (member.client_id, member.client_host) == ("share-cli", "/10.0.0.7")


async def test_describe_needs_describe_on_the_group_and_shows_its_operations(
        broker: Broker) -> None:
    await _heartbeat(broker, "alice")
    request = Describe(group_ids=["alice-q", "nobody", ""], include_authorized_operations=True)
    by_alice = await share_groups.handle_share_group_describe(
        _ctx(broker, "alice", SHARE_GROUP_DESCRIBE, 1), request)
    codes = [g.error_code for g in by_alice.groups]
    assert codes == [0, ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED]
    group = by_alice.groups[0]
    assert (group.group_state, group.group_epoch, group.assignor_name) == ("Stable", 1, "simple")
    assert group.authorized_operations == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    by_admin = await share_groups.handle_share_group_describe(
        _ctx(broker, "admin", SHARE_GROUP_DESCRIBE, 1), request)
    assert [g.error_code for g in by_admin.groups] == [
        0, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID]


async def test_offset_apis_authorize_the_group_and_each_topic(broker: Broker) -> None:
    described = await share_groups.handle_describe_share_group_offsets(
        _ctx(broker, "alice", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1), DescribeOffsets(groups=[
            DescribeOffsets.DescribeShareGroupOffsetsRequestGroup(group_id="alice-q", topics=[
                DescribeOffsets.DescribeShareGroupOffsetsRequestTopic(topic_name=t,
                                                                      partitions=[0])
                for t in ("shared", "secret")]),
            DescribeOffsets.DescribeShareGroupOffsetsRequestGroup(group_id="bob-q", topics=None)]))
    mine, theirs = described.groups
    assert theirs.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    codes = {t.topic_name: [p.error_code for p in t.partitions] for t in mine.topics}
    assert codes == {"shared": [0], "secret": [ErrorCode.TOPIC_AUTHORIZATION_FAILED]}
    altered = await share_groups.handle_alter_share_group_offsets(
        _ctx(broker, "alice", ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0), AlterOffsets(
            group_id="alice-q", topics=[AlterOffsets.AlterShareGroupOffsetsRequestTopic(
                topic_name="secret", partitions=[AlterOffsets.AlterShareGroupOffsetsRequestPartition(
                    partition_index=0, start_offset=0)])]))
    assert altered.error_code == 0
    assert altered.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    deleted = await share_groups.handle_delete_share_group_offsets(
        _ctx(broker, "alice", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0), DeleteOffsets(
            group_id="alice-q", topics=[]))
    assert deleted.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED  # DELETE, not READ


async def test_disabled_share_groups_answer_unsupported_version(broker: Broker) -> None:
    coordinator = broker.group_coordinator
    coordinator.config = dataclasses.replace(
        coordinator.config, share=dataclasses.replace(coordinator.config.share, enable=False))
    assert (await _heartbeat(broker, "admin")).error_code == ErrorCode.UNSUPPORTED_VERSION
    described = await share_groups.handle_share_group_describe(
        _ctx(broker, "admin", SHARE_GROUP_DESCRIBE, 1),
        Describe(group_ids=["a", "b"], include_authorized_operations=False))
    assert [g.error_code for g in described.groups] == [ErrorCode.UNSUPPORTED_VERSION] * 2
    deleted = await share_groups.handle_delete_share_group_offsets(
        _ctx(broker, "admin", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0),
        DeleteOffsets(group_id="a", topics=[]))
    assert deleted.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_share_version_is_the_finalized_level_and_on_when_never_finalized() -> None:
    """share.version as Kafka 4.2 gates share groups: a level finalized in the metadata log
    decides; a cluster that never finalized it serves them (on by default here);
    group.share.enable=false turns them off whatever the level."""
    from types import SimpleNamespace

    from kafka_ext.server.api_versions import share_version

    def broker(features: dict[str, int], enable: bool = True) -> Any:
        return SimpleNamespace(
            controller=SimpleNamespace(image=SimpleNamespace(features=features)),
            group_coordinator=SimpleNamespace(config=SimpleNamespace(
                share=SimpleNamespace(enable=enable))))

    assert share_version(broker({})) == 1
    assert share_version(broker({"share.version": 0})) == 0
    assert share_version(broker({"share.version": 1})) == 1
    assert share_version(broker({"share.version": 1}, enable=False)) == 0
