"""The request versions Kafka 3.9 serves below Kafka 4.0's floors, as raw bytes on live sockets.

FindCoordinator v0 (kafka-go's hard-coded group lookup), JoinGroup v0-1, OffsetCommit v0-1,
OffsetFetch v0, ListOffsets v0, CreateTopics v0-1, DeleteTopics v0, DeleteGroups v0,
OffsetForLeaderEpoch v0-1, DescribeConfigs v0, AlterReplicaLogDirs v0 and DescribeLogDirs v0
against the real broker, each answer asserted field by field. Every request we send and every
answer we get is also read and written by two independent codecs where they have that message
version: kio (generated from Kafka 4.x's definitions, so it lacks most removed versions) and
kafka-python's hand-written per-version structs (`kafka.protocol.old`), so the bytes are
Kafka's and not only our own reading of the schema.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import kafka.protocol.old
import pytest

from kafka_ext.client.probe import recv_exact
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import SIZE, encode_request, response_header_version
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.protocol.schema import StructSpec
from tests.integration.clients import new_topic_name, wait_until
from tests.unit.protocol.test_codec_vs_kio import kio_class, kio_decode, kio_encode, to_kio

ANSWER_TIMEOUT_S = 15.0
EXPIRY_TIMEOUT_S = 30.0
_reg = registry()


# -- raw round trips, cross-checked with kio ---------------------------------------------------

def _kio_agrees(name: str, version: int, obj: Any, data: bytes) -> None:
    """kio reads `data` as `obj` and writes `obj` as `data` (when kio has this version)."""
    kio_cls = kio_class(name, version)
    if kio_cls is None:
        return
    theirs = to_kio(_reg[name].spec.struct, kio_cls, obj, version)
    assert kio_decode(kio_cls, data) == theirs, f"{name} v{version}: kio reads it differently"
    assert kio_encode(theirs) == data, f"{name} v{version}: kio writes it differently"


# kafka-python structs that disagree with Kafka's own definitions (their bug, not a check of ours).
KAFKA_PYTHON_WRONG = {
    "DescribeLogDirsRequest_v0": "Partitions is []int32 in Kafka, a single int32 in kafka-python",
}


@cache
def _kafka_python_structs() -> dict[str, Any]:
    """kafka-python's hand-written message structs by name, e.g. "ListOffsetsResponse_v0"."""
    found: dict[str, Any] = {}
    for module in pkgutil.iter_modules(kafka.protocol.old.__path__):
        loaded = importlib.import_module(f"kafka.protocol.old.{module.name}")
        for name, value in vars(loaded).items():
            if (isinstance(value, type) and hasattr(value, "SCHEMA") and "_v" in name
                    and name not in KAFKA_PYTHON_WRONG):
                found[name] = value
    return found


def _plain(spec: StructSpec, obj: Any, version: int) -> list[Any]:
    """The values of `obj`'s fields at `version` in wire order, structs as nested lists."""
    values: list[Any] = []
    for f in spec.fields:
        if version not in f.versions:
            continue
        value = getattr(obj, f.attr)
        if f.struct is not None:
            struct = f.struct
            value = (None if value is None else [_plain(struct, v, version) for v in value]
                     if f.is_array else _plain(struct, value, version))
        elif f.is_array and value is not None:
            value = list(value)
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        values.append(value)
    return values


def _lists(value: Any) -> Any:
    """kafka-python's decoded tuples as lists, to compare with `_plain`."""
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def _kafka_python_agrees(name: str, version: int, obj: Any, data: bytes) -> None:
    """kafka-python reads `data` as `obj` and writes `obj` as `data` (when it has this version)."""
    struct = _kafka_python_structs().get(f"{name}_v{version}")
    if struct is None or getattr(struct, "FLEXIBLE_VERSION", False):
        return
    ours = _plain(_reg[name].spec.struct, obj, version)
    assert _lists(struct.SCHEMA.decode(io.BytesIO(data))) == ours, (
        f"{name} v{version}: kafka-python reads it differently")
    assert struct.SCHEMA.encode(ours) == data, f"{name} v{version}: kafka-python writes it differently"


def _codecs_agree(name: str, version: int, obj: Any, data: bytes) -> None:
    _kio_agrees(name, version, obj, data)
    _kafka_python_agrees(name, version, obj, data)


class Conn:
    """One connection to the broker speaking any API at any version."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation_id = 0

    def call(self, api: str, version: int, **fields: Any) -> Any:
        """Send `api`'s request at `version`; return the decoded answer."""
        request_type = _reg[f"{api}Request"]
        request = request_type.cls(**fields)
        key = request_type.spec.api_key
        assert key is not None
        _codecs_agree(f"{api}Request", version, request, request_type.encode(request, version))
        self.correlation_id += 1
        self.sock.sendall(encode_request(key, version, self.correlation_id, "old-versions",
                                         request))
        (size,) = SIZE.unpack(recv_exact(self.sock, SIZE.size))
        frame = recv_exact(self.sock, size)
        header, pos = _reg["ResponseHeader"].decode(frame, response_header_version(key, version))
        assert header.correlation_id == self.correlation_id
        response_type = _reg[f"{api}Response"]
        body = response_type.decode_all(frame[pos:], version)
        _codecs_agree(f"{api}Response", version, body, frame[pos:])
        return body


@contextmanager
def connection(broker: Any) -> Iterator[Conn]:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S) as sock:
        yield Conn(sock)


def create_topic(conn: Conn, topic: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    Req = _reg["CreateTopicsRequest"].cls
    response = conn.call("CreateTopics", 0, timeout_ms=30_000, topics=[Req.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[Req.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])
    assert [(t.name, t.error_code) for t in response.topics] == [(topic, 0)]


def produce(conn: Conn, topic: str, values: list[bytes], partition: int = 0) -> int:
    """Append `values` as a v2 batch with Produce v3; the base offset."""
    Req = _reg["ProduceRequest"].cls
    now_ms = int(time.time() * 1000)
    batch = build_batch([Record(i, now_ms, None, v) for i, v in enumerate(values)])
    response = conn.call("Produce", 3, transactional_id=None, acks=-1, timeout_ms=30_000,
                         topic_data=[Req.TopicProduceData(name=topic, partition_data=[
                             Req.PartitionProduceData(index=partition, records=batch)])])
    [part] = response.responses[0].partition_responses
    assert part.error_code == 0
    return int(part.base_offset)


def find_coordinator(conn: Conn, group: str) -> None:
    """FindCoordinator v0, as a client does before any group call (it creates the offsets topic)."""
    assert conn.call("FindCoordinator", 0, key=group).error_code == 0


def metadata_topics(conn: Conn) -> set[str]:
    return {t.name for t in conn.call("Metadata", 1, topics=None).topics}


def commit(conn: Conn, version: int, group: str, topic: str, offsets: dict[int, int],
           **fields: Any) -> list[tuple[int, int]]:
    """OffsetCommit of `offsets` (partition -> offset); (partition, error) per partition."""
    Req = _reg["OffsetCommitRequest"].cls
    partition_fields = {k: fields.pop(k) for k in ("commit_timestamp",) if k in fields}
    response = conn.call("OffsetCommit", version, group_id=group, topics=[
        Req.OffsetCommitRequestTopic(name=topic, partitions=[
            Req.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                             committed_metadata=f"m{o}", **partition_fields)
            for p, o in offsets.items()])], **fields)
    assert [t.name for t in response.topics] == [topic]
    return [(p.partition_index, p.error_code) for p in response.topics[0].partitions]


def fetch_committed(conn: Conn, version: int, group: str, topic: str,
                    partitions: list[int]) -> list[tuple[int, int, str, int]]:
    """OffsetFetch v1-v7 of `partitions`: (partition, offset, metadata, error) each."""
    Req = _reg["OffsetFetchRequest"].cls
    response = conn.call("OffsetFetch", version, group_id=group, topics=[
        Req.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)])
    return [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for t in response.topics for p in t.partitions]


# -- ApiVersions -------------------------------------------------------------------------------

# Kafka 3.9's lowest version of each API whose floor issue 23 lowered here (the highest is ours).
KAFKA_39_LOWEST = {
    ApiKey.PRODUCE: 0, ApiKey.FETCH: 0, ApiKey.LIST_OFFSETS: 0, ApiKey.OFFSET_COMMIT: 0, ApiKey.OFFSET_FETCH: 0,
    ApiKey.FIND_COORDINATOR: 0, ApiKey.JOIN_GROUP: 0, ApiKey.CREATE_TOPICS: 0,
    ApiKey.DELETE_TOPICS: 0, ApiKey.OFFSET_FOR_LEADER_EPOCH: 0, ApiKey.DESCRIBE_CONFIGS: 0,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 0, ApiKey.DESCRIBE_LOG_DIRS: 0, ApiKey.DELETE_GROUPS: 0,
}


def test_api_versions_advertises_kafka_39s_lowest_versions(broker: Any) -> None:
    with connection(broker) as conn:
        response = conn.call("ApiVersions", 0)
    assert response.error_code == 0
    lowest = {k.api_key: k.min_version for k in response.api_keys}
    assert {key: lowest[key] for key in KAFKA_39_LOWEST} == KAFKA_39_LOWEST


# -- FindCoordinator v0, JoinGroup v0-1 --------------------------------------------------------

def test_find_coordinator_v0_gets_a_v0_answer_naming_this_broker(broker: Any) -> None:
    """kafka-go sends v0 whatever the broker advertises (issue 23)."""
    with connection(broker) as conn:
        [node] = conn.call("Metadata", 1, topics=[]).brokers
        found = conn.call("FindCoordinator", 0, key=new_topic_name("kafka-go-group"))
    assert (found.error_code, found.node_id, found.host, found.port) == (
        0, node.node_id, "127.0.0.1", broker.port)
    assert node.port == broker.port


@pytest.mark.parametrize("version", [0, 1])
def test_join_group_v0_and_v1_elect_the_only_member_leader_and_sync(broker: Any,
                                                                    version: int) -> None:
    group = new_topic_name("join-old")
    Join = _reg["JoinGroupRequest"].cls
    protocols = [Join.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00sub")]
    with connection(broker) as conn:
        find_coordinator(conn, group)
        joined = conn.call("JoinGroup", version, group_id=group, session_timeout_ms=10_000,
                           rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
                           protocols=protocols)
        assert joined.error_code == 0
        assert (joined.generation_id, joined.protocol_name, joined.leader) == (
            1, "range", joined.member_id)
        assert joined.member_id.startswith("old-versions-")
        assert [(m.member_id, bytes(m.metadata)) for m in joined.members] == [
            (joined.member_id, b"\x00\x00sub")]
        Sync = _reg["SyncGroupRequest"].cls
        synced = conn.call("SyncGroup", 0, group_id=group, generation_id=1,
                           member_id=joined.member_id, assignments=[Sync.SyncGroupRequestAssignment(
                               member_id=joined.member_id, assignment=b"mine")])
        assert (synced.error_code, bytes(synced.assignment)) == (0, b"mine")
        described = conn.call("DescribeGroups", 0, groups=[group])
        [g] = described.groups
        assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
            0, "Stable", "consumer", "range")
        assert [m.member_id for m in g.members] == [joined.member_id]
        heartbeat = conn.call("Heartbeat", 0, group_id=group, generation_id=1,
                              member_id=joined.member_id)
        assert heartbeat.error_code == 0


# -- OffsetCommit v0-v4, OffsetFetch v0 --------------------------------------------------------

def test_offset_commit_and_fetch_v0_get_unsupported_version_per_partition_as_kafka_39(
        broker: Any) -> None:
    """v0 offsets lived in ZooKeeper; Kafka 3.9 in KRaft mode answers UNSUPPORTED_VERSION for
    every partition, unknown topics included once one topic is known, and stores nothing."""
    topic, group = new_topic_name("commit-v0"), new_topic_name("group-v0")
    Req = _reg["OffsetCommitRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic, partitions=2)
        find_coordinator(conn, group)
        assert commit(conn, 0, group, topic, {0: 5, 1: 6}) == [
            (0, ErrorCode.UNSUPPORTED_VERSION), (1, ErrorCode.UNSUPPORTED_VERSION)]
        response = conn.call("OffsetCommit", 0, group_id=group, topics=[
            Req.OffsetCommitRequestTopic(name=topic, partitions=[
                Req.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)]),
            Req.OffsetCommitRequestTopic(name="no-such-topic", partitions=[
                Req.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
        assert [(t.name, [p.error_code for p in t.partitions]) for t in response.topics] == [
            (topic, [ErrorCode.UNSUPPORTED_VERSION]),
            ("no-such-topic", [ErrorCode.UNSUPPORTED_VERSION])]
        assert commit(conn, 0, group, "no-such-topic", {0: 1}) == [
            (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert fetch_committed(conn, 0, group, topic, [0, 1]) == [
            (0, -1, "", ErrorCode.UNSUPPORTED_VERSION), (1, -1, "", ErrorCode.UNSUPPORTED_VERSION)]
        assert fetch_committed(conn, 1, group, topic, [0, 1]) == [(0, -1, "", 0), (1, -1, "", 0)]


def test_offset_commit_v1_checks_generation_and_member_of_a_joined_group(broker: Any) -> None:
    topic, group = new_topic_name("commit-v1"), new_topic_name("group-v1")
    Join = _reg["JoinGroupRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic)
        find_coordinator(conn, group)
        joined = conn.call("JoinGroup", 1, group_id=group, session_timeout_ms=10_000,
                           rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
                           protocols=[Join.JoinGroupRequestProtocol(name="range", metadata=b"")])
        assert joined.error_code == 0
        member = joined.member_id
        assert commit(conn, 1, group, topic, {0: 3}, generation_id_or_member_epoch=1,
                      member_id="someone-else") == [(0, ErrorCode.UNKNOWN_MEMBER_ID)]
        assert commit(conn, 1, group, topic, {0: 3}, generation_id_or_member_epoch=7,
                      member_id=member) == [(0, ErrorCode.ILLEGAL_GENERATION)]
        assert commit(conn, 1, group, topic, {0: 3}, generation_id_or_member_epoch=1,
                      member_id=member) == [(0, ErrorCode.REBALANCE_IN_PROGRESS)]
        synced = conn.call("SyncGroup", 0, group_id=group, generation_id=1, member_id=member,
                           assignments=[])
        assert synced.error_code == 0
        assert commit(conn, 1, group, topic, {0: 3}, generation_id_or_member_epoch=1,
                      member_id=member, commit_timestamp=-1) == [(0, 0)]
        assert fetch_committed(conn, 1, group, topic, [0]) == [(0, 3, "m3", 0)]


def test_offset_commit_v1_commit_timestamp_and_v2_retention_time_decide_expiry(
        broker_factory: Any) -> None:
    """A simple group's offsets expire offsets.retention.minutes after their commit time, which
    v1 may set per partition; v2-v4 may instead give a retention time of their own."""
    broker = broker_factory({"offsets.retention.check.interval.ms": "200"})
    topic, group = new_topic_name("expiry"), new_topic_name("group-expiry")
    long_ago_ms = 1_000_000  # 1970: older than any retention
    with connection(broker) as conn:
        create_topic(conn, topic, partitions=4)
        find_coordinator(conn, group)
        assert commit(conn, 1, group, topic, {0: 10}, generation_id_or_member_epoch=-1,
                      member_id="", commit_timestamp=long_ago_ms) == [(0, 0)]
        assert commit(conn, 1, group, topic, {1: 11}, generation_id_or_member_epoch=-1,
                      member_id="", commit_timestamp=-1) == [(1, 0)]
        assert commit(conn, 2, group, topic, {2: 12}, generation_id_or_member_epoch=-1,
                      member_id="", retention_time_ms=1) == [(2, 0)]
        assert commit(conn, 4, group, topic, {3: 13}, generation_id_or_member_epoch=-1,
                      member_id="", retention_time_ms=-1) == [(3, 0)]

        def expired() -> list[tuple[int, int, str, int]] | None:
            got = fetch_committed(conn, 2, group, topic, [0, 1, 2, 3])
            return got if got[0][1] == -1 and got[2][1] == -1 else None

        assert wait_until(expired, EXPIRY_TIMEOUT_S, "the old offsets to expire") == [
            (0, -1, "", 0), (1, 11, "m11", 0), (2, -1, "", 0), (3, 13, "m13", 0)]


# -- ListOffsets v0 ----------------------------------------------------------------------------

def _list_v0(conn: Conn, topic: str, timestamp: int, max_num_offsets: int,
             partition: int = 0, replica_id: int = -1) -> tuple[int, list[int]]:
    Req = _reg["ListOffsetsRequest"].cls
    response = conn.call("ListOffsets", 0, replica_id=replica_id, topics=[Req.ListOffsetsTopic(
        name=topic, partitions=[Req.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, max_num_offsets=max_num_offsets)])])
    [t] = response.topics
    [p] = t.partitions
    assert (t.name, p.partition_index) == (topic, partition)
    return p.error_code, list(p.old_style_offsets)


def test_list_offsets_v0_answers_old_style_offsets_by_segment(broker: Any) -> None:
    topic = new_topic_name("list-v0")
    with connection(broker) as conn:
        create_topic(conn, topic, configs={"segment.bytes": "1048576"})
        assert _list_v0(conn, topic, -1, 10) == (0, [0])
        assert _list_v0(conn, topic, -2, 10) == (0, [0])
        produce(conn, topic, [b"a", b"b", b"c"])
        produce(conn, topic, [b"d", b"e"])
        # One segment from 0 holding data: the log end offset then the segment's base offset.
        assert _list_v0(conn, topic, -1, 10) == (0, [5, 0])
        assert _list_v0(conn, topic, -1, 1) == (0, [5])
        assert _list_v0(conn, topic, -2, 10) == (0, [0])
        assert _list_v0(conn, topic, -1, 0) == (0, [])
        in_an_hour = int(time.time() * 1000) + 3_600_000
        assert _list_v0(conn, topic, in_an_hour, 10) == (0, [5, 0])
        # Before the segment was last written: nothing.
        assert _list_v0(conn, topic, 1_000, 10) == (0, [])
        # v0 knows -1 and -2 only; -3 (max timestamp) came with v7.
        assert _list_v0(conn, topic, -3, 10) == (ErrorCode.UNSUPPORTED_VERSION, [])
        assert _list_v0(conn, topic, -1, 10, partition=9) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        assert _list_v0(conn, "no-such-topic", -1, 10) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


@pytest.mark.parametrize(("timestamp", "since"), [(-3, 7), (-4, 8), (-5, 9), (-6, None)])
def test_list_offsets_special_timestamps_need_the_version_that_brought_them(
        broker: Any, timestamp: int, since: int | None) -> None:
    topic = new_topic_name("list-special")
    Req = _reg["ListOffsetsRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic)
        produce(conn, topic, [b"a", b"b"])
        for version in range(1, _reg["ListOffsetsRequest"].versions.highest + 1):
            response = conn.call("ListOffsets", version, replica_id=-1, topics=[
                Req.ListOffsetsTopic(name=topic, partitions=[Req.ListOffsetsPartition(
                    partition_index=0, timestamp=timestamp)])])
            [p] = response.topics[0].partitions
            supported = since is not None and version >= since
            assert (p.error_code == 0) == supported, version
            if not supported:
                assert (p.error_code, p.offset, p.timestamp) == (
                    ErrorCode.UNSUPPORTED_VERSION, -1, -1), version


# -- admin: CreateTopics v0-1, DeleteTopics v0, DeleteGroups v0, DescribeConfigs v0 ------------

def test_create_topics_v0_and_v1_and_delete_topics_v0(broker: Any) -> None:
    Req = _reg["CreateTopicsRequest"].cls
    created, checked = new_topic_name("create-v0"), new_topic_name("validate-v1")

    def creatable(name: str, partitions: int = 2) -> Any:
        return Req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                  assignments=[], configs=[])

    with connection(broker) as conn:
        v0 = conn.call("CreateTopics", 0, timeout_ms=30_000, topics=[creatable(created)])
        assert [(t.name, t.error_code) for t in v0.topics] == [(created, 0)]
        v1 = conn.call("CreateTopics", 1, timeout_ms=30_000, validate_only=True,
                       topics=[creatable(checked)])
        assert [(t.name, t.error_code, t.error_message) for t in v1.topics] == [
            (checked, 0, None)]
        again = conn.call("CreateTopics", 1, timeout_ms=30_000, topics=[creatable(created)])
        [result] = again.topics
        assert (result.name, result.error_code) == (created, ErrorCode.TOPIC_ALREADY_EXISTS)
        assert result.error_message
        bad = conn.call("CreateTopics", 0, timeout_ms=30_000,
                        topics=[creatable(new_topic_name("zero"), partitions=0)])
        assert [t.error_code for t in bad.topics] == [ErrorCode.INVALID_PARTITIONS]
        topics = metadata_topics(conn)
        assert created in topics and checked not in topics

        deleted = conn.call("DeleteTopics", 0, timeout_ms=30_000,
                            topic_names=[created, "no-such-topic"])
        assert sorted((r.name, r.error_code) for r in deleted.responses) == sorted([
            (created, 0), ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])
        wait_until(lambda: created not in metadata_topics(conn), ANSWER_TIMEOUT_S,
                   f"{created} to disappear from metadata")


def test_delete_topics_v0_to_v2_with_deletion_disabled_get_invalid_request(
        broker_factory: Any) -> None:
    """TOPIC_DELETION_DISABLED came with DeleteTopics v3; Kafka answers older versions
    INVALID_REQUEST, and the topic stays."""
    broker = broker_factory({"delete.topic.enable": "false"})
    topic = new_topic_name("undeletable")
    with connection(broker) as conn:
        create_topic(conn, topic)
        for version in range(4):
            response = conn.call("DeleteTopics", version, timeout_ms=30_000,
                                 topic_names=[topic])
            expected = (ErrorCode.TOPIC_DELETION_DISABLED if version >= 3
                        else ErrorCode.INVALID_REQUEST)
            assert [(r.name, r.error_code) for r in response.responses] == [
                (topic, expected)], version
        assert topic in metadata_topics(conn)


def test_delete_groups_v0(broker: Any) -> None:
    topic, group = new_topic_name("delete-groups"), new_topic_name("group-del")
    with connection(broker) as conn:
        create_topic(conn, topic)
        find_coordinator(conn, group)
        assert commit(conn, 2, group, topic, {0: 1}, generation_id_or_member_epoch=-1,
                      member_id="") == [(0, 0)]
        response = conn.call("DeleteGroups", 0, groups_names=[group, "never-existed"])
        assert [(r.group_id, r.error_code) for r in response.results] == [
            (group, 0), ("never-existed", ErrorCode.GROUP_ID_NOT_FOUND)]
        assert fetch_committed(conn, 2, group, topic, [0]) == [(0, -1, "", 0)]


def test_describe_configs_v0_says_is_default_instead_of_config_source(broker: Any) -> None:
    topic = new_topic_name("configs-v0")
    Req = _reg["DescribeConfigsRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic, configs={"retention.ms": "123456"})
        response = conn.call("DescribeConfigs", 0, resources=[
            Req.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                        configuration_keys=["retention.ms", "cleanup.policy"]),
            # broker 1 itself: the cluster default ("") lists only the keys set there, as Kafka
            Req.DescribeConfigsResource(resource_type=4, resource_name="1",
                                        configuration_keys=["log.dirs", "num.partitions"])])
    topic_result, broker_result = response.results
    assert (topic_result.error_code, topic_result.resource_type, topic_result.resource_name) == (
        0, 2, topic)
    assert sorted((c.name, c.value, c.is_default, c.read_only) for c in topic_result.configs) == [
        ("cleanup.policy", "delete", True, False), ("retention.ms", "123456", False, False)]
    assert (broker_result.error_code, broker_result.resource_type) == (0, 4)
    # log.dirs is set on the command line (a static broker config), num.partitions is not.
    assert sorted((c.name, c.value, c.is_default) for c in broker_result.configs) == [
        ("log.dirs", str(broker.data_dir), False), ("num.partitions", "1", True)]


# -- OffsetForLeaderEpoch v0-1 -----------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_and_v1(broker: Any, version: int) -> None:
    topic = new_topic_name("epochs-old")
    Req = _reg["OffsetForLeaderEpochRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic)
        produce(conn, topic, [b"x"] * 4)
        response = conn.call("OffsetForLeaderEpoch", version, topics=[Req.OffsetForLeaderTopic(
            topic=topic, partitions=[Req.OffsetForLeaderPartition(partition=0, leader_epoch=0),
                                     Req.OffsetForLeaderPartition(partition=3,
                                                                  leader_epoch=0)])])
    [t] = response.topics
    got = [(p.partition, p.error_code, p.end_offset) for p in t.partitions]
    assert got == [(0, 0, 4), (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    if version == 1:
        assert [p.leader_epoch for p in t.partitions] == [0, -1]


# -- log dirs: DescribeLogDirs v0, AlterReplicaLogDirs v0 --------------------------------------

def test_describe_log_dirs_v0_and_alter_replica_log_dirs_v0(broker: Any) -> None:
    topic = new_topic_name("log-dirs-v0")
    log_dir = str(broker.data_dir)
    Alter = _reg["AlterReplicaLogDirsRequest"].cls
    with connection(broker) as conn:
        create_topic(conn, topic)
        produce(conn, topic, [b"payload"])
        Describe = _reg["DescribeLogDirsRequest"].cls
        described = conn.call("DescribeLogDirs", 0, topics=[Describe.DescribableLogDirTopic(
            topic=topic, partitions=[0])])
        [result] = described.results
        assert (result.error_code, result.log_dir) == (0, log_dir)
        [t] = result.topics
        [p] = t.partitions
        assert (t.name, p.partition_index, p.offset_lag, p.is_future_key) == (
            topic, 0, 0, False)
        assert p.partition_size > len(b"payload")
        missing = f"/nonexistent-{uuid.uuid4().hex}"
        for path, code in ((log_dir, 0), (missing, ErrorCode.LOG_DIR_NOT_FOUND)):
            altered = conn.call("AlterReplicaLogDirs", 0, dirs=[Alter.AlterReplicaLogDir(
                path=path, topics=[Alter.AlterReplicaLogDirTopic(name=topic, partitions=[0])])])
            assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions])
                    for r in altered.results] == [(topic, [(0, code)])], path
