"""Consumer groups against the real broker: stock clients' groups, offsets, bad input.

Three consumers of each library (kafka-python, confluent-kafka eager and cooperative-sticky,
aiokafka) split a 6-partition topic, rebalance when one closes and when one is killed with
SIGKILL; committed offsets and their metadata survive a broker restart and consumers resume right
after them; a restarted static member gets its partitions back without a rebalance; a JoinGroup
with a foreign protocol type and an OffsetCommit from a gone generation get Kafka's codes while
another group carries on; admin clients list, describe, alter and delete groups; every version
of every group API answers. Raw requests use our own codec."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.integration.clients import (
    create_topic,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)
from tests.integration.group_member import GroupMember

PARTITIONS = 6
ALL_PARTITIONS = frozenset(range(PARTITIONS))
REBALANCE_TIMEOUT_S = 60.0
RESTART_COMMITTED = 4  # offset committed in each partition before the restart
RECORDS_PER_PARTITION = 10
LIBRARIES = ["kafka-python", "confluent", "aiokafka"]
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "200"}

_reg = registry()


@pytest.fixture
def group_broker(broker_factory: Any) -> Any:
    return broker_factory(BROKER_OVERRIDES)


# -- a member in a process we can SIGKILL ------------------------------------------------------

class MemberProcess:
    """`tests.integration.group_member` in a subprocess; `assignment` follows its reports."""

    def __init__(self, lib: str, bootstrap: str, topic: str, group: str) -> None:
        self.assignment: frozenset[int] = frozenset()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_member", lib, bootstrap, topic,
             group], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.assignment = frozenset(json.loads(line))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)


def split_among(*assignments: frozenset[int]) -> bool:
    """Every member owns something, nobody shares a partition, and nothing is left out."""
    union: set[int] = set()
    for a in assignments:
        if not a or union & a:
            return False
        union |= a
    return union == ALL_PARTITIONS


@pytest.fixture
def topic_with_records(group_broker: Any) -> str:
    topic = new_topic_name("groups")
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    produce_confluent(group_broker.bootstrap, topic,
                      make_records(PARTITIONS * RECORDS_PER_PARTITION, PARTITIONS))
    return topic


@pytest.mark.parametrize("lib", [*LIBRARIES, "confluent-cooperative"])
def test_three_consumers_split_partitions_and_rebalance_on_leave_and_kill(
        group_broker: Any, topic_with_records: str, lib: str) -> None:
    bootstrap, topic, group = group_broker.bootstrap, topic_with_records, new_topic_name(lib)
    doomed = MemberProcess(lib, bootstrap, topic, group)
    try:
        stays, leaves = (GroupMember(lib, bootstrap, topic, group) for _ in range(2))
        wait_until(lambda: split_among(stays.assignment, leaves.assignment, doomed.assignment),
                   REBALANCE_TIMEOUT_S, "three members to split the partitions")
        assert [len(m.assignment) for m in (stays, leaves, doomed)] == [2, 2, 2]

        leaves.close()
        wait_until(lambda: split_among(stays.assignment, doomed.assignment),
                   REBALANCE_TIMEOUT_S, "two members to share after one left")

        doomed.kill()  # no LeaveGroup: only its session timeout tells the coordinator
        wait_until(lambda: stays.assignment == ALL_PARTITIONS, REBALANCE_TIMEOUT_S,
                   "the last member to own everything after the kill")
        stays.close()
    finally:
        if doomed.proc.poll() is None:
            doomed.kill()


# -- committed offsets across a restart --------------------------------------------------------

def _metadata(lib: str, partition: int) -> str:
    return f"{lib}/checkpoint-{partition}"


def commit_as_member(lib: str, bootstrap: str, topic: str, group: str) -> None:
    """Join the group, then commit RESTART_COMMITTED with metadata in every partition."""
    if lib == "kafka-python":
        consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                       enable_auto_commit=False, auto_offset_reset="earliest")
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None
                   and len(consumer.assignment()) == PARTITIONS, REBALANCE_TIMEOUT_S, "join")
        consumer.commit({kafka.TopicPartition(topic, p): kafka.structs.OffsetAndMetadata(
            RESTART_COMMITTED, _metadata(lib, p), -1) for p in range(PARTITIONS)})
        consumer.close()
    elif lib == "confluent":
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.2) is not None
                   or len(consumer.assignment()) == PARTITIONS, REBALANCE_TIMEOUT_S, "join")
        wait_until(lambda: consumer.poll(0.1) is None and len(consumer.assignment()) == PARTITIONS,
                   REBALANCE_TIMEOUT_S, "assignment")
        consumer.commit(offsets=[
            confluent_kafka.TopicPartition(topic, p, RESTART_COMMITTED,
                                           metadata=_metadata(lib, p))
            for p in range(PARTITIONS)], asynchronous=False)
        consumer.close()
    else:
        async def run() -> None:
            consumer = aiokafka.AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                auto_offset_reset="earliest")
            await consumer.start()
            try:
                while len(consumer.assignment()) < PARTITIONS:
                    await consumer.getmany(timeout_ms=200)
                await consumer.commit({
                    aiokafka.TopicPartition(topic, p): aiokafka.structs.OffsetAndMetadata(
                        RESTART_COMMITTED, _metadata(lib, p)) for p in range(PARTITIONS)})
            finally:
                await consumer.stop()
        asyncio.run(run())


def consume_as_member(lib: str, bootstrap: str, topic: str, group: str,
                      count: int) -> list[tuple[int, int]]:
    """(partition, offset) of the first `count` records a fresh member of the group reads."""
    got: list[tuple[int, int]] = []
    if lib == "kafka-python":
        consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                       enable_auto_commit=False, auto_offset_reset="earliest")

        def poll_kafka_python() -> bool:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend((m.partition, m.offset) for m in batch)
            return len(got) >= count
        wait_until(poll_kafka_python, REBALANCE_TIMEOUT_S, f"{count} records")
        consumer.close()
    elif lib == "confluent":
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])

        def poll_confluent() -> bool:
            for msg in consumer.consume(100, 0.2):
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset()))
            return len(got) >= count
        wait_until(poll_confluent, REBALANCE_TIMEOUT_S, f"{count} records")
        consumer.close()
    else:
        async def run() -> None:
            consumer = aiokafka.AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                auto_offset_reset="earliest")
            await consumer.start()
            try:
                while len(got) < count:
                    for batch in (await consumer.getmany(timeout_ms=200)).values():
                        got.extend((m.partition, m.offset) for m in batch)
            finally:
                await consumer.stop()
        asyncio.run(asyncio.wait_for(run(), REBALANCE_TIMEOUT_S))
    return got


def test_committed_offsets_and_metadata_survive_restart_and_consumers_resume_after_them(
        group_broker: Any, topic_with_records: str) -> None:
    bootstrap, topic = group_broker.bootstrap, topic_with_records
    groups = {lib: new_topic_name(f"resume-{lib}") for lib in LIBRARIES}
    for lib, group in groups.items():
        commit_as_member(lib, bootstrap, topic, group)

    group_broker.restart()

    with raw_connection(group_broker) as sock:  # OffsetFetch v8: every group in one request
        Request = _reg["OffsetFetchRequest"].cls
        response = round_trip(sock, ApiKey.OFFSET_FETCH, 8, Request(groups=[
            Request.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups.values()]))
    fetched = {g.group_id: {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                            for t in g.topics for p in t.partitions}
               for g in response.groups if g.error_code == 0}
    for lib, group in groups.items():
        # confluent-kafka's TopicPartition sends its metadata with the C string's terminator;
        # the broker keeps the bytes it was given, as Kafka does.
        suffix = "\0" if lib == "confluent" else ""
        assert fetched[group] == {(topic, p): (RESTART_COMMITTED, _metadata(lib, p) + suffix)
                                  for p in range(PARTITIONS)}

    remaining = PARTITIONS * (RECORDS_PER_PARTITION - RESTART_COMMITTED)
    for lib, group in groups.items():
        got = consume_as_member(lib, bootstrap, topic, group, remaining)
        assert sorted(got) == [(p, o) for p in range(PARTITIONS)
                               for o in range(RESTART_COMMITTED, RECORDS_PER_PARTITION)], lib


# -- bad input ---------------------------------------------------------------------------------

class raw_connection:  # noqa: N801 - used as a context manager, like `open`
    def __init__(self, broker: Any) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)

    def __enter__(self) -> socket.socket:
        return self.sock

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def join(sock: socket.socket, group: str, member_id: str, protocol_type: str,
         metadata: bytes = b"m") -> Any:
    Request = _reg["JoinGroupRequest"].cls
    return round_trip(sock, ApiKey.JOIN_GROUP, 9, Request(
        group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
        member_id=member_id, group_instance_id=None, protocol_type=protocol_type,
        protocols=[Request.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        reason=None))


def commit(sock: socket.socket, group: str, generation: int, member_id: str, topic: str,
           offset: int) -> int:
    Request = _reg["OffsetCommitRequest"].cls
    response = round_trip(sock, ApiKey.OFFSET_COMMIT, 8, Request(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=None, topics=[Request.OffsetCommitRequestTopic(name=topic, partitions=[
            Request.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                 committed_leader_epoch=-1,
                                                 committed_metadata="raw")])]))
    (code,) = {p.error_code for t in response.topics for p in t.partitions}
    return int(code)


@pytest.fixture
def healthy_group(group_broker: Any, topic_with_records: str) -> Iterator[GroupMember]:
    member = GroupMember("confluent", group_broker.bootstrap, topic_with_records,
                         new_topic_name("healthy"))
    yield member
    member.close()


def test_foreign_protocol_type_and_gone_generation_get_kafka_codes_while_others_work(
        group_broker: Any, topic_with_records: str, healthy_group: GroupMember) -> None:
    group, topic = new_topic_name("bad-input"), topic_with_records
    with raw_connection(group_broker) as sock:
        Find = _reg["FindCoordinatorRequest"].cls
        found = round_trip(sock, ApiKey.FIND_COORDINATOR, 4,
                           Find(key_type=0, coordinator_keys=[group, "other"]))
        assert [(c.key, c.error_code, c.node_id, c.port) for c in found.coordinators] == [
            (group, 0, 1, group_broker.port), ("other", 0, 1, group_broker.port)]
        by_txn_id = round_trip(sock, ApiKey.FIND_COORDINATOR, 3, Find(key="txn-1", key_type=1))
        assert (by_txn_id.error_code, by_txn_id.node_id) == (0, 1)
        required = join(sock, group, "", "consumer")
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
        first = join(sock, group, required.member_id, "consumer")
        assert (first.error_code, first.generation_id) == (0, 1)
        Sync = _reg["SyncGroupRequest"].cls
        synced = round_trip(sock, ApiKey.SYNC_GROUP, 5, Sync(
            group_id=group, generation_id=1, member_id=first.member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=[Sync.SyncGroupRequestAssignment(member_id=first.member_id,
                                                         assignment=b"a")]))
        assert (synced.error_code, synced.assignment) == (0, b"a")

        foreign = join(sock, group, "", "connect")
        assert foreign.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        # The leader rejoins with new metadata: generation 1 is gone.
        second = join(sock, group, first.member_id, "consumer", metadata=b"changed")
        assert (second.error_code, second.generation_id) == (0, 2)
        assert commit(sock, group, 1, first.member_id, topic, 3) == ErrorCode.ILLEGAL_GENERATION
        # Generation 2 is CompletingRebalance until the leader syncs: Kafka refuses commits.
        assert commit(sock, group, 2, first.member_id, topic, 3) == \
            ErrorCode.REBALANCE_IN_PROGRESS
        synced = round_trip(sock, ApiKey.SYNC_GROUP, 5, Sync(
            group_id=group, generation_id=2, member_id=first.member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=[Sync.SyncGroupRequestAssignment(member_id=first.member_id,
                                                         assignment=b"b")]))
        assert (synced.error_code, synced.assignment) == (0, b"b")
        assert commit(sock, group, 2, first.member_id, topic, 3) == 0

        # The coordinator keeps serving: the other group has its partitions and commits work.
        wait_until(lambda: healthy_group.assignment == ALL_PARTITIONS, REBALANCE_TIMEOUT_S,
                   "the healthy group's member to own every partition")
        assert commit(sock, new_topic_name("simple"), -1, "", topic, 5) == 0


# -- admin tools -------------------------------------------------------------------------------

def test_admin_client_lists_describes_alters_and_deletes_groups(
        group_broker: Any, topic_with_records: str, healthy_group: GroupMember) -> None:
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    topic, simple = topic_with_records, new_topic_name("admin-simple")
    wait_until(lambda: healthy_group.assignment == ALL_PARTITIONS, REBALANCE_TIMEOUT_S,
               "the healthy group to be stable")
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        simple, [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 8)])])[simple].result()
    listed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(simple)])[simple].result()
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 7), (1, 8)]

    groups = {g.group_id: g.state for g in admin.list_consumer_groups().result().valid}
    assert groups[simple] == ConsumerGroupState.EMPTY
    stable = {g.group_id for g in admin.list_consumer_groups(
        states={ConsumerGroupState.STABLE}).result().valid}
    assert simple not in stable and len(stable) == 1

    (active,) = stable
    described = admin.describe_consumer_groups([active])[active].result()
    assert described.state == ConsumerGroupState.STABLE and described.partition_assignor
    (member,) = described.members
    assert {tp.partition for tp in member.assignment.topic_partitions} == ALL_PARTITIONS

    deleted = admin.delete_consumer_groups([simple, active])
    assert deleted[simple].result() is None
    with pytest.raises(confluent_kafka.KafkaException) as err:
        deleted[active].result()
    assert err.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
    assert simple not in {g.group_id for g in admin.list_consumer_groups().result().valid}


# -- every advertised version answers ----------------------------------------------------------

def _request(api: str, **fields: Any) -> Any:
    return _reg[f"{api}Request"].cls(**fields)


def test_every_version_of_every_group_api_answers_a_well_formed_response(
        group_broker: Any, topic_with_records: str) -> None:
    topic, group = topic_with_records, new_topic_name("versions")
    Commit = _reg["OffsetCommitRequest"].cls
    Fetch = _reg["OffsetFetchRequest"].cls
    Delete = _reg["OffsetDeleteRequest"].cls
    commit_topics = [Commit.OffsetCommitRequestTopic(name=topic, partitions=[
        Commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                            committed_metadata="v")])]
    with raw_connection(group_broker) as sock:
        for version in _reg["FindCoordinatorRequest"].versions:
            found = round_trip(sock, ApiKey.FIND_COORDINATOR, version, _request(
                "FindCoordinator", key=group, key_type=0, coordinator_keys=[group]))
            errors = ([c.error_code for c in found.coordinators] if version >= 4
                      else [found.error_code])
            assert errors == [0], version
        for version in _reg["OffsetCommitRequest"].versions:
            response = round_trip(sock, ApiKey.OFFSET_COMMIT, version, _request(
                "OffsetCommit", group_id=group, generation_id_or_member_epoch=-1, member_id="",
                topics=commit_topics))
            # v0 was ZooKeeper-stored: Kafka 3.9 in KRaft mode answers UNSUPPORTED_VERSION.
            expected = ErrorCode.UNSUPPORTED_VERSION if version == 0 else 0
            assert [p.error_code for t in response.topics for p in t.partitions] == [
                expected], version
        for version in _reg["OffsetFetchRequest"].versions:
            body = (_request("OffsetFetch", groups=[Fetch.OffsetFetchRequestGroup(
                group_id=group, topics=[Fetch.OffsetFetchRequestTopics(
                    name=topic, partition_indexes=[0])])]) if version >= 8 else
                _request("OffsetFetch", group_id=group, topics=[Fetch.OffsetFetchRequestTopic(
                    name=topic, partition_indexes=[0])]))
            response = round_trip(sock, ApiKey.OFFSET_FETCH, version, body)
            topics = response.groups[0].topics if version >= 8 else response.topics
            assert [(p.committed_offset, p.metadata, p.error_code)
                    for t in topics for p in t.partitions] == [
                (-1, "", ErrorCode.UNSUPPORTED_VERSION) if version == 0 else (1, "v", 0)], version
        for version in _reg["HeartbeatRequest"].versions:
            response = round_trip(sock, ApiKey.HEARTBEAT, version, _request(
                "Heartbeat", group_id=group, generation_id=1, member_id="ghost"))
            assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID, version
        for version in _reg["SyncGroupRequest"].versions:
            response = round_trip(sock, ApiKey.SYNC_GROUP, version, _request(
                "SyncGroup", group_id=group, generation_id=1, member_id="ghost",
                assignments=[]))
            assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID, version
        for version in _reg["JoinGroupRequest"].versions:
            response = round_trip(sock, ApiKey.JOIN_GROUP, version, _request(
                "JoinGroup", group_id=group, session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000, member_id="ghost", protocol_type="consumer",
                protocols=[]))
            assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL, version
        for version in _reg["LeaveGroupRequest"].versions:
            response = round_trip(sock, ApiKey.LEAVE_GROUP, version, _request(
                "LeaveGroup", group_id=group, member_id="ghost", members=[
                    _reg["LeaveGroupRequest"].cls.MemberIdentity(member_id="ghost")]))
            codes = ([m.error_code for m in response.members] if version >= 3
                     else [response.error_code])
            assert codes == [ErrorCode.UNKNOWN_MEMBER_ID], version
        for version in _reg["ListGroupsRequest"].versions:
            response = round_trip(sock, ApiKey.LIST_GROUPS, version, _request("ListGroups"))
            assert group in {g.group_id for g in response.groups}, version
        for version in _reg["DescribeGroupsRequest"].versions:
            response = round_trip(sock, ApiKey.DESCRIBE_GROUPS, version, _request(
                "DescribeGroups", groups=[group]))
            assert [(g.error_code, g.group_state) for g in response.groups] == [
                (0, "Empty")], version
        for version in _reg["TxnOffsetCommitRequest"].versions:
            response = round_trip(sock, ApiKey.TXN_OFFSET_COMMIT, version, _request(
                "TxnOffsetCommit", transactional_id="t", group_id=group, producer_id=-5,
                producer_epoch=0, topics=[]))
            assert response.topics == [], version
        for version in _reg["OffsetDeleteRequest"].versions:
            response = round_trip(sock, ApiKey.OFFSET_DELETE, version, _request(
                "OffsetDelete", group_id=group, topics=[Delete.OffsetDeleteRequestTopic(
                    name=topic, partitions=[Delete.OffsetDeleteRequestPartition(
                        partition_index=0)])]))
            assert [p.error_code for t in response.topics for p in t.partitions] == [0]
        for version in _reg["DeleteGroupsRequest"].versions:
            name = f"{group}-{version}"
            round_trip(sock, ApiKey.OFFSET_COMMIT, 8, _request(
                "OffsetCommit", group_id=name, generation_id_or_member_epoch=-1, member_id="",
                topics=commit_topics))
            response = round_trip(sock, ApiKey.DELETE_GROUPS, version, _request(
                "DeleteGroups", groups_names=[name, "never-existed"]))
            assert [(r.group_id, r.error_code) for r in response.results] == [
                (name, 0), ("never-existed", ErrorCode.GROUP_ID_NOT_FOUND)], version


# -- static membership (KIP-345) ---------------------------------------------------------------

class StaticMember:
    """A confluent consumer with a group.instance.id; records its assign/revoke callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, instance_id: str,
                 events: list[tuple[str, str, list[int]]], name: str) -> None:
        self.assignment: frozenset[int] = frozenset()
        self._stop = threading.Event()
        self._consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance_id,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self._consumer.subscribe(
            [topic],
            on_assign=lambda _c, ps: events.append((name, "assign", sorted(p.partition for p in ps))),
            on_revoke=lambda _c, ps: events.append((name, "revoke", sorted(p.partition for p in ps))))
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._consumer.poll(0.1)
            self.assignment = frozenset(p.partition for p in self._consumer.assignment())
        self._consumer.close()  # a static member sends no LeaveGroup

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
        group_broker: Any, topic_with_records: str) -> None:
    bootstrap, topic, group = group_broker.bootstrap, topic_with_records, new_topic_name("static")
    events: list[tuple[str, str, list[int]]] = []
    a = StaticMember(bootstrap, topic, group, "pod-a", events, "a")
    b = StaticMember(bootstrap, topic, group, "pod-b", events, "b")
    wait_until(lambda: split_among(a.assignment, b.assignment), REBALANCE_TIMEOUT_S,
               "two static members to split the partitions")
    owned_by_a = a.assignment
    a.close()
    restarted = StaticMember(bootstrap, topic, group, "pod-a", events, "a-restarted")
    wait_until(lambda: restarted.assignment, REBALANCE_TIMEOUT_S, "the restarted member's share")
    assert restarted.assignment == owned_by_a
    assert [e for e in events if e[0] == "b"] == [("b", "assign", sorted(b.assignment))]
    restarted.close()
    b.close()
