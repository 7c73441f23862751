"""ACLs on the group and admin APIs, with stock clients on a SASL_PLAINTEXT listener.

One broker runs Kafka's StandardAuthorizer with `User:admin` (and the broker's own PLAINTEXT
principal, `User:ANONYMOUS`) as super users. admin grants alice her groups (`alice-` prefix),
the topic `shared`, the topics she makes (`alice-` prefix) and DESCRIBE on the cluster; carol
may only see the group `alice-g3`; bob gets nothing. Each API must work for the principal its
ACLs allow and answer Kafka's error code to the others.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import SaslClient
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" '
        'user_carol="carol-secret";')
OMITTED = -(2**31)  # KIP-430: authorized operations not asked for
_reg = registry()


class AclBroker:
    """The broker and its SASL_PLAINTEXT listener."""

    def __init__(self, broker: BrokerProcess, sasl_port: int) -> None:
        self.broker = broker
        self.sasl_port = sasl_port

    def config(self, user: str) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": f"{user}-secret"}

    def admin(self, user: str) -> AdminClient:
        return AdminClient(self.config(user))


def _allow(resource: ResourceType, name: str, operation: AclOperation, user: str,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, name, pattern, f"User:{user}", "*", operation,
                      AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    root = tmp_path_factory.mktemp("acls")
    broker = BrokerProcess(root / "data")
    sasl_port = free_port()
    broker.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    })
    for served in serve_for_module(broker):
        secured = AclBroker(served, sasl_port)
        admin = secured.admin("admin")
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("shared", "secret")]
                                          ).values():
            future.result(20)
        group, topic, cluster = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.BROKER
        prefixed = ResourcePatternType.PREFIXED
        bindings = [
            _allow(group, "alice-", AclOperation.READ, "alice", prefixed),
            _allow(group, "alice-", AclOperation.DELETE, "alice", prefixed),
            _allow(topic, "shared", AclOperation.READ, "alice"),
            _allow(topic, "alice-", AclOperation.ALL, "alice", prefixed),
            _allow(cluster, "kafka-cluster", AclOperation.DESCRIBE, "alice"),
            _allow(group, "alice-g3", AclOperation.DESCRIBE, "carol"),
        ]
        for future in admin.create_acls(bindings).values():
            future.result(20)
        producer = Producer({**secured.config("admin"), "enable.idempotence": True})
        for i in range(3):
            producer.produce("shared", f"v{i}".encode())
        assert producer.flush(20) == 0
        yield secured


def _error_code(future: Any) -> int:
    """The Kafka error code a client future failed with."""
    with pytest.raises(KafkaException) as failed:
        future.result(20)
    return int(failed.value.args[0].code())


# -- raw requests as a SASL user ----------------------------------------------------------------

class _Session:
    """A logged-in SASL_PLAINTEXT connection for raw requests."""

    def __init__(self, port: int, user: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0
        assert self.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        token = SaslClient("PLAIN", user, f"{user}-secret").first()
        assert self.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token).error_code == 0

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        body = _reg.requests[api_key].cls(**fields)
        return round_trip(self.sock, api_key, version, body, self.correlation)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def sessions(acl_broker: AclBroker) -> Iterator[dict[str, _Session]]:
    opened = {user: _Session(acl_broker.sasl_port, user) for user in ("alice", "bob")}
    yield opened
    for session in opened.values():
        session.close()


# -- groups --------------------------------------------------------------------------------------

def test_alice_consumes_and_commits_in_her_group_and_bob_is_refused(
        acl_broker: AclBroker, sessions: dict[str, _Session]) -> None:
    consumer = Consumer({**acl_broker.config("alice"), "group.id": "alice-g1",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["shared"])
    seen: list[bytes | None] = []
    deadline = time.monotonic() + 15
    while len(seen) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())
    committed = consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == [b"v0", b"v1", b"v2"]
    assert [(tp.topic, tp.offset, tp.error) for tp in committed] == [("shared", 3, None)]
    bob = sessions["bob"]
    found = bob.call(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["alice-g1"])
    assert [(c.error_code, c.node_id) for c in found.coordinators] == [
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)]
    join = _reg.requests[ApiKey.JOIN_GROUP].cls
    joined = bob.call(ApiKey.JOIN_GROUP, 5, group_id="alice-g1", session_timeout_ms=10000,
                      rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
                      protocols=[join.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert joined.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    commit = _reg.requests[ApiKey.OFFSET_COMMIT].cls
    refused = bob.call(ApiKey.OFFSET_COMMIT, 8, group_id="alice-g1", topics=[
        commit.OffsetCommitRequestTopic(name="shared", partitions=[
            commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])])
    assert [p.error_code for t in refused.topics for p in t.partitions] == [
        ErrorCode.GROUP_AUTHORIZATION_FAILED]
    # alice may commit to her group, but not offsets of a topic she may not read.
    mixed = sessions["alice"].call(ApiKey.OFFSET_COMMIT, 8, group_id="alice-g2", topics=[
        commit.OffsetCommitRequestTopic(name=t, partitions=[
            commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
        for t in ("shared", "secret")])
    assert {t.name: t.partitions[0].error_code for t in mixed.topics} == {
        "shared": 0, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_group_admin_apis_follow_the_group_acls(acl_broker: AclBroker) -> None:
    # admin's groups: one alice may see (alice-g3), one she may not (zed).
    for group in ("alice-g3", "zed"):
        consumer = Consumer({**acl_broker.config("admin"), "group.id": group})
        consumer.commit(offsets=[TopicPartition("shared", 0, 1), TopicPartition("secret", 0, 1)],
                        asynchronous=False)
        consumer.close()
    alice, bob, carol = (acl_broker.admin(u) for u in ("alice", "bob", "carol"))
    # OffsetFetch: only the topics alice may describe.
    [fetched] = alice.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("alice-g3")]).values()
    assert [(tp.topic, tp.offset) for tp in fetched.result(20).topic_partitions] == [
        ("shared", 1)]
    [refused] = bob.list_consumer_group_offsets([ConsumerGroupTopicPartitions("alice-g3")]).values()
    assert _error_code(refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
    # DescribeGroups with KIP-430 authorized operations.
    described = alice.describe_consumer_groups(
        ["alice-g3", "zed"], include_authorized_operations=True)
    assert set(described["alice-g3"].result(20).authorized_operations) == {
        AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}
    assert _error_code(described["zed"]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    # ListGroups: everything with DESCRIBE on the cluster, else the groups one may describe.

    def listed(client: AdminClient) -> set[str]:
        groups = client.list_consumer_groups().result(20).valid
        return {g.group_id for g in groups} & {"alice-g3", "zed"}

    assert listed(alice) == {"alice-g3", "zed"}
    assert listed(carol) == {"alice-g3"}
    assert listed(bob) == set()
    # DeleteGroups: DELETE on the group.
    assert _error_code(bob.delete_consumer_groups(["alice-g3"])["alice-g3"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    alice.delete_consumer_groups(["alice-g3"])["alice-g3"].result(20)
    assert _error_code(alice.delete_consumer_groups(["zed"])["zed"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED


# -- topics and configs --------------------------------------------------------------------------

def test_topic_admin_apis_follow_the_topic_acls(acl_broker: AclBroker) -> None:
    alice, bob = acl_broker.admin("alice"), acl_broker.admin("bob")
    alice.create_topics([NewTopic("alice-t1", 1, 1)])["alice-t1"].result(20)
    assert _error_code(bob.create_topics([NewTopic("bob-t1", 1, 1)])["bob-t1"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    mine = ConfigResource(ConfigResource.Type.TOPIC, "alice-t1")
    configs = alice.describe_configs([mine])[mine].result(20)
    assert configs["cleanup.policy"].value == "delete"
    shared = ConfigResource(ConfigResource.Type.TOPIC, "shared")
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    refused = bob.describe_configs([shared, broker])
    assert _error_code(refused[shared]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _error_code(refused[broker]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    retention = ConfigEntry("retention.ms", "60000",
                            incremental_operation=AlterConfigOpType.SET)
    mine.add_incremental_config(retention)
    alice.incremental_alter_configs([mine])[mine].result(20)
    assert alice.describe_configs([mine])[mine].result(20)["retention.ms"].value == "60000"
    shared.add_incremental_config(retention)
    assert _error_code(bob.incremental_alter_configs([shared])[shared]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _error_code(bob.delete_topics(["shared"])["shared"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice.delete_topics(["alice-t1"])["alice-t1"].result(20)
    assert "shared" in acl_broker.admin("admin").list_topics(timeout=10).topics


# -- the cluster and producers -------------------------------------------------------------------

def test_cluster_apis_need_describe_on_the_cluster(acl_broker: AclBroker,
                                                  sessions: dict[str, _Session]) -> None:
    alice, bob = sessions["alice"], sessions["bob"]
    dirs = bob.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
    assert (dirs.error_code, dirs.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    dirs = alice.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
    assert dirs.error_code == 0
    assert {t.name for d in dirs.results for t in d.topics} >= {"shared", "secret"}
    for session, expected in ((bob, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                              (alice, ErrorCode.NONE)):
        listed = session.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=5000,
                              topics=None)
        assert (listed.error_code, listed.topics) == (expected, [])
    # KIP-430 through a stock client: alice may DESCRIBE the cluster and nothing else.
    client = acl_broker.admin("alice")  # kept: a collected client cancels its futures
    cluster = client.describe_cluster(include_authorized_operations=True).result(20)
    assert cluster.authorized_operations == [AclOperation.DESCRIBE]
    for session, asked, operations in ((bob, True, 0), (alice, False, OMITTED)):
        answer = session.call(ApiKey.DESCRIBE_CLUSTER, 1, endpoint_type=1,
                              include_cluster_authorized_operations=asked)
        assert (answer.error_code, answer.cluster_authorized_operations) == (0, operations)
        assert answer.brokers  # the brokers are no secret


def test_describe_producers_needs_read_on_the_topic(sessions: dict[str, _Session]) -> None:
    request = _reg.requests[ApiKey.DESCRIBE_PRODUCERS].cls
    topics = [request.TopicRequest(name="shared", partition_indexes=[0])]
    refused = sessions["bob"].call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=topics)
    assert [p.error_code for t in refused.topics for p in t.partitions] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    answer = sessions["alice"].call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=topics)
    [partition] = [p for t in answer.topics for p in t.partitions]
    assert partition.error_code == 0
    assert [p.last_sequence for p in partition.active_producers] == [2]  # admin's 3 records
