"""Share group membership and admin against the real broker (KIP-932): confluent-kafka's
ShareConsumer joins and leaves; ListGroups with the "share" type (kafka-python), DescribeGroups
of a share group, DeleteGroups; group configs through DescribeConfigs/IncrementalAlterConfigs
on GROUP resources (kafka-python, confluent-kafka); ShareGroupDescribe and the offsets APIs
(90-92) in raw frames encoded with Kafka's schemas, since no stock Python client sends them.

The offsets APIs go through the real share coordinator (`__share_group_state`); records
delivered to share consumers are tests/integration/test_share_consumer.py's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, NewTopic

from kafka_ext.client.probe import identify, recv_exact, round_trip
from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import SIZE
from kafka_ext.protocol.messages import registry
from tests.integration.conftest import BrokerProcess, serve_for_module

TIMEOUT_S = 20.0
GROUP = "share-admin-app"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = Path(tmp_path_factory.mktemp("share-groups")) / "data"
    yield from serve_for_module(BrokerProcess(data, {"offsets.topic.num.partitions": "1"}))


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    client.create_topics([NewTopic("jobs", 2, 1)])
    yield client
    client.close()


def _connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
    identify(sock, "apache-kafka-java")  # a stock client: 76/77 are the share group APIs
    return sock


def _shadowed_round_trip(sock: socket.socket, api_key: int, body: Any) -> Any:
    """One request on 76/77 with Kafka's schema (v1, header v2)."""
    reg = registry()
    header = reg["RequestHeader"]
    out = bytearray(4)
    header.encode_into(header.cls(request_api_key=api_key, request_api_version=1,
                                  correlation_id=7, client_id="share-admin"), 2, out, None)
    reg.shadowed_requests[api_key].encode_into(body, 1, out, None)
    SIZE.pack_into(out, 0, len(out) - 4)
    sock.sendall(bytes(out))
    (size,) = SIZE.unpack(recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    answer, pos = reg["ResponseHeader"].decode(frame, 1)
    assert answer.correlation_id == 7
    body_out, end = reg.shadowed_responses[api_key].decode(frame, 1, pos)
    assert end == len(frame)
    return body_out


def _coordinator_ready(broker: BrokerProcess, group_id: str) -> None:
    """What a client does first: FindCoordinator (which creates __consumer_offsets), until the
    group's coordinator answers."""
    find = registry().requests[ApiKey.FIND_COORDINATOR].cls

    def found() -> bool:
        with _connect(broker) as sock:
            answer = round_trip(sock, ApiKey.FIND_COORDINATOR, 4,
                                find(key_type=0, coordinator_keys=[group_id]))
        return answer.coordinators[0].error_code == 0 and \
            _describe(broker, group_id).error_code not in (
                ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE)

    _until(found, f"the coordinator of {group_id}")


def _describe(broker: BrokerProcess, group_id: str) -> Any:
    cls = registry().shadowed_requests[SHARE_GROUP_DESCRIBE].cls
    with _connect(broker) as sock:
        response = _shadowed_round_trip(sock, SHARE_GROUP_DESCRIBE,
                                        cls(group_ids=[group_id],
                                            include_authorized_operations=True))
    (described,) = response.groups
    return described


def _until(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_stock_client_is_shown_the_share_group_apis(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        response = identify(sock, "apache-kafka-java")
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[SHARE_GROUP_HEARTBEAT] == (1, 1)
    assert versions[SHARE_GROUP_DESCRIBE] == (1, 1)
    assert versions[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS] == (0, 1)
    assert versions[ApiKey.ALTER_SHARE_GROUP_OFFSETS] == (0, 0)
    assert versions[ApiKey.DELETE_SHARE_GROUP_OFFSETS] == (0, 0)


def test_a_share_consumer_joins_is_listed_and_described_then_leaves(
        broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                              "client.id": "share-admin-consumer"})
    try:
        consumer.subscribe(["jobs"])

        def joined() -> Any:
            consumer.poll(0.2)
            described = _describe(broker, GROUP)
            return described if described.error_code == 0 and described.members else None

        described = _until(joined, "the share consumer to join")
        assert described.group_state == "Stable" and described.assignor_name == "simple"
        (member,) = described.members
        assert member.client_id == "share-admin-consumer"
        assert member.subscribed_topic_names == ["jobs"] and member.member_epoch >= 1
        assert described.authorized_operations not in (0, -2147483648)

        def assigned() -> Any:  # once the share coordinator initialized both share-partitions
            consumer.poll(0.2)
            (m,) = _describe(broker, GROUP).members
            return sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions
                          for p in tp.partitions)

        assert _until(assigned, "the assignment") == [("jobs", 0), ("jobs", 1)]
        listed = {g["group_id"]: g for g in admin.list_groups(types_filter=["share"])}
        assert (listed[GROUP]["group_type"], listed[GROUP]["group_state"],
                listed[GROUP]["protocol_type"]) == ("share", "Stable", "share")
        assert GROUP not in {g["group_id"] for g in admin.list_groups(types_filter=["consumer"])}
        classic_view = admin.describe_groups([GROUP])[GROUP]  # DescribeGroups: Dead, as Kafka
        assert (classic_view["group_state"], classic_view["members"]) == ("Dead", [])
    finally:
        consumer.close()
    _until(lambda: _describe(broker, GROUP).group_state == "Empty", "the member to leave")


def test_group_configs_are_set_described_and_bounded(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.record.lock.duration.ms", "20000",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)
    (described,) = admin.describe_configs(
        [ConfigResource(ResourceType.GROUP, "configured-group")]).values()
    values = {name: (e.value, ConfigSource(e.source))
              for name, e in described.result(TIMEOUT_S).items()}
    assert values["share.auto.offset.reset"] == ("earliest", ConfigSource.GROUP_CONFIG)
    assert values["share.record.lock.duration.ms"] == ("20000", ConfigSource.GROUP_CONFIG)
    assert values["share.isolation.level"] == ("read_uncommitted", ConfigSource.DEFAULT_CONFIG)
    assert values["share.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:  # kafka-python's describe_configs knows GROUP resources too
        seen = kp.describe_configs([KpConfigResource(ConfigResourceType.GROUP,
                                                     "configured-group")])
        assert "earliest" in repr(seen)
    finally:
        kp.close()
    too_short = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "1000",  # below group.share.min.*
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="INVALID_CONFIG|record.lock.duration"):
        for future in admin.incremental_alter_configs([too_short]).values():
            future.result(TIMEOUT_S)
    bad_reset = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "by_duration:yesterday",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="INVALID_CONFIG|auto.offset.reset"):
        for future in admin.incremental_alter_configs([bad_reset]).values():
            future.result(TIMEOUT_S)


def test_offsets_apis_answer_for_unknown_groups_and_topics(broker: BrokerProcess,
                                                           admin: KafkaAdminClient) -> None:
    reg = registry()
    Describe = reg.requests[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS].cls
    Alter = reg.requests[ApiKey.ALTER_SHARE_GROUP_OFFSETS].cls
    Delete = reg.requests[ApiKey.DELETE_SHARE_GROUP_OFFSETS].cls
    _coordinator_ready(broker, "nobody")
    _coordinator_ready(broker, "alter-app")
    with _connect(broker) as sock:
        described = round_trip(sock, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, Describe(groups=[
            Describe.DescribeShareGroupOffsetsRequestGroup(group_id="nobody", topics=None),
            Describe.DescribeShareGroupOffsetsRequestGroup(group_id="nobody", topics=[
                Describe.DescribeShareGroupOffsetsRequestTopic(topic_name="jobs",
                                                               partitions=[0])])]))
        everything, asked = described.groups
        assert (everything.error_code, everything.topics) == (0, [])
        (topic,) = asked.topics
        (partition,) = topic.partitions
        assert (topic.topic_name, partition.start_offset, partition.lag) == ("jobs", -1, -1)
        deleted = round_trip(sock, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, Delete(
            group_id="nobody", topics=[Delete.DeleteShareGroupOffsetsRequestTopic(
                topic_name="jobs")]))
        assert deleted.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        altered = round_trip(sock, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, Alter(
            group_id="alter-app", topics=[Alter.AlterShareGroupOffsetsRequestTopic(
                topic_name="missing", partitions=[Alter.AlterShareGroupOffsetsRequestPartition(
                    partition_index=0, start_offset=5)])]))
        assert altered.error_code == 0
        (result,) = altered.responses
        assert result.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_groups_deletes_an_empty_share_group(broker: BrokerProcess,
                                                    admin: KafkaAdminClient) -> None:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "doomed"})
    try:
        consumer.subscribe(["jobs"])

        def joined() -> bool:
            consumer.poll(0.2)
            return bool(_describe(broker, "doomed").members)

        _until(joined, "the share consumer to join")
        busy = admin.delete_groups(["doomed"])
        assert busy == {"doomed": "NonEmptyGroupError"}
    finally:
        consumer.close()
    _until(lambda: _describe(broker, "doomed").group_state == "Empty", "the member to leave")
    deleted = admin.delete_groups(["doomed"])
    assert deleted == {"doomed": "OK"}
    assert _describe(broker, "doomed").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_offsets_are_altered_described_with_lag_and_deleted(broker: BrokerProcess,
                                                            admin: KafkaAdminClient) -> None:
    """Through the share coordinator: AlterShareGroupOffsets initializes the share-partition at
    the given offset, DescribeShareGroupOffsets v1 shows it with its lag (end offset - start
    offset - records already delivered), DeleteShareGroupOffsets forgets it."""
    admin.create_topics([NewTopic("lagged", 1, 1)])
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("lagged", value=b"%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    reg = registry()
    Describe = reg.requests[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS].cls
    Alter = reg.requests[ApiKey.ALTER_SHARE_GROUP_OFFSETS].cls
    Delete = reg.requests[ApiKey.DELETE_SHARE_GROUP_OFFSETS].cls
    everything = Describe(groups=[Describe.DescribeShareGroupOffsetsRequestGroup(
        group_id="offsets-app", topics=None)])
    _coordinator_ready(broker, "offsets-app")
    with _connect(broker) as sock:
        altered = round_trip(sock, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, Alter(
            group_id="offsets-app", topics=[Alter.AlterShareGroupOffsetsRequestTopic(
                topic_name="lagged", partitions=[Alter.AlterShareGroupOffsetsRequestPartition(
                    partition_index=0, start_offset=4)])]))
        assert (altered.error_code, altered.responses[0].partitions[0].error_code) == (0, 0)
        (group,) = round_trip(sock, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, everything).groups
        assert group.error_code == 0
        (topic,) = group.topics
        (partition,) = topic.partitions
        assert (topic.topic_name, partition.partition_index, partition.error_code) == (
            "lagged", 0, 0)
        assert partition.start_offset == 4
        assert partition.lag == 10 - 4  # end offset - start offset - delivered (none yet)
        assert _describe(broker, "offsets-app").group_state == "Empty"
        deleted = round_trip(sock, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, Delete(
            group_id="offsets-app", topics=[Delete.DeleteShareGroupOffsetsRequestTopic(
                topic_name="lagged")]))
        assert [(t.topic_name, t.error_code) for t in deleted.responses] == [("lagged", 0)]
        (group,) = round_trip(sock, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, everything).groups
        assert (group.error_code, group.topics) == (0, [])
    assert admin.delete_groups(["offsets-app"]) == {"offsets-app": "OK"}
