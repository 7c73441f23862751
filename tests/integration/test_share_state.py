"""The share coordinator's APIs (83-87) against the real broker, sent as a node sends them.

Raw requests identified as `kafka-ext-node` (the persister of another broker): FindCoordinator
with key type SHARE finds the coordinator, Initialize/Read/Write/Delete/ReadSummary at each
version change and report the state, and the state survives kill -9 and a start on the same
data directory (a Write is answered only once its record is in the log).
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 15.0
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.COORDINATOR_NOT_AVAILABLE}
_reg = registry()
_Init = _reg.requests[ApiKey.INITIALIZE_SHARE_GROUP_STATE].cls
_Read = _reg.requests[ApiKey.READ_SHARE_GROUP_STATE].cls
_Write = _reg.requests[ApiKey.WRITE_SHARE_GROUP_STATE].cls
_Delete = _reg.requests[ApiKey.DELETE_SHARE_GROUP_STATE].cls
_Summary = _reg.requests[ApiKey.READ_SHARE_GROUP_STATE_SUMMARY].cls


class Node:
    """A connection that introduced itself as another node of the cluster."""

    def __init__(self, broker: Any) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
        self.correlation = 1
        answer = identify(self.sock, NODE_SOFTWARE_NAME)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation += 1
        return round_trip(self.sock, api_key, version, body, self.correlation)

    def partition_call(self, api_key: int, version: int, body: Any) -> Any:
        """One key's request, sent again while its coordinator loads; its partition's answer."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            (topic,) = self.call(api_key, version, body).results
            (answer,) = topic.partitions
            if answer.error_code not in RETRIABLE or time.monotonic() > deadline:
                return answer
            time.sleep(0.05)

    def close(self) -> None:
        self.sock.close()


def _create_topic(node: Node, name: str, partitions: int) -> uuid.UUID:
    cls = _reg.requests[ApiKey.CREATE_TOPICS].cls
    response = node.call(ApiKey.CREATE_TOPICS, 7, cls(timeout_ms=30_000, topics=[
        cls.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                           assignments=[], configs=[])]))
    (topic,) = response.topics
    assert topic.error_code == 0, topic.error_message
    return topic.topic_id


def _init(group: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
          start_offset: int) -> Any:
    return _Init(group_id=group, topics=[_Init.InitializeStateData(topic_id=topic_id, partitions=[
        _Init.PartitionData(partition=partition, state_epoch=state_epoch,
                            start_offset=start_offset)])])


def _read(group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> Any:
    return _Read(group_id=group, topics=[_Read.ReadStateData(topic_id=topic_id, partitions=[
        _Read.PartitionData(partition=partition, leader_epoch=leader_epoch)])])


def _write(group: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
           leader_epoch: int, start_offset: int, batches: list[tuple[int, int, int, int]],
           count: int = -1) -> Any:
    return _Write(group_id=group, topics=[_Write.WriteStateData(topic_id=topic_id, partitions=[
        _Write.PartitionData(partition=partition, state_epoch=state_epoch,
                             leader_epoch=leader_epoch,
                             start_offset=start_offset, delivery_complete_count=count,
                             state_batches=[_Write.StateBatch(
                                 first_offset=f, last_offset=last, delivery_state=s,
                                 delivery_count=c) for f, last, s, c in batches])])])


def _summary(group: str, topic_id: uuid.UUID, partition: int) -> Any:
    return _Summary(group_id=group, topics=[_Summary.ReadStateSummaryData(
        topic_id=topic_id, partitions=[_Summary.PartitionData(partition=partition,
                                                              leader_epoch=-1)])])


def _batches(answer: Any) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in answer.state_batches]


def test_nodes_are_shown_the_share_state_apis_at_kafkas_versions(broker: Any) -> None:
    node = Node(broker)
    try:
        assert {k: node.versions.get(k) for k in range(83, 88)} == {
            83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1)}
    finally:
        node.close()


def _find_coordinator(node: Node, *keys: str) -> list[Any]:
    """FindCoordinator v6 with key type SHARE, as a persister asks before it sends 83-87; the
    first ask creates __share_group_state, so it is asked again until a leader is named."""
    cls = _reg.requests[ApiKey.FIND_COORDINATOR].cls
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = node.call(ApiKey.FIND_COORDINATOR, 6,
                          cls(key_type=2, coordinator_keys=list(keys))).coordinators
        if all(c.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE for c in found):
            return list(found)
        assert time.monotonic() < deadline, "no share coordinator"
        time.sleep(0.05)


def test_find_coordinator_finds_the_share_coordinator_of_a_key(broker: Any) -> None:
    node = Node(broker)
    try:
        topic_id = _create_topic(node, "find-share", 1)
        found, bad = _find_coordinator(node, f"g:{topic_id}:0", "g:0")
        assert (found.error_code, found.node_id, found.port) == (0, 1, broker.port)
        assert bad.error_code == ErrorCode.INVALID_REQUEST
    finally:
        node.close()


def test_share_state_survives_kill_9_and_a_restart(broker: Any) -> None:
    node = Node(broker)
    try:
        topic_id = _create_topic(node, "share-state", 2)
        for found in _find_coordinator(node, f"g:{topic_id}:0", f"g:{topic_id}:1"):
            assert (found.error_code, found.node_id) == (0, 1)
        init = node.partition_call(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                                   _init("g", topic_id, 0, 1, 10))
        assert init.error_code == 0, init.error_message
        assert node.partition_call(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                                   _init("g", topic_id, 1, 0, 0)).error_code == 0
        read = node.partition_call(ApiKey.READ_SHARE_GROUP_STATE, 0, _read("g", topic_id, 0, 3))
        assert (read.error_code, read.state_epoch, read.start_offset) == (0, 1, 10)
        written = _write("g", topic_id, 0, 1, 3, 12, [(12, 19, 0, 1), (13, 14, 2, 1)], count=2)
        assert node.partition_call(ApiKey.WRITE_SHARE_GROUP_STATE, 1, written).error_code == 0
        # v0 has no DeliveryCompleteCount: the count written before stays.
        assert node.partition_call(ApiKey.WRITE_SHARE_GROUP_STATE, 0, _write(
            "g", topic_id, 0, 1, 3, -1, [(19, 19, 4, 5)])).error_code == 0
        assert node.partition_call(ApiKey.DELETE_SHARE_GROUP_STATE, 0, _Delete(
            group_id="g", topics=[_Delete.DeleteStateData(topic_id=topic_id, partitions=[
                _Delete.PartitionData(partition=1)])])).error_code == 0
    finally:
        node.close()

    broker.kill()
    broker.start()

    node = Node(broker)
    try:
        read = node.partition_call(ApiKey.READ_SHARE_GROUP_STATE, 0, _read("g", topic_id, 0, 3))
        assert (read.error_code, read.state_epoch, read.start_offset) == (0, 1, 12)
        assert _batches(read) == [(12, 12, 0, 1), (13, 14, 2, 1), (15, 18, 0, 1), (19, 19, 4, 5)]
        fenced = node.partition_call(ApiKey.READ_SHARE_GROUP_STATE, 0,
                                     _read("g", topic_id, 0, 2))
        assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
        stale = node.partition_call(ApiKey.WRITE_SHARE_GROUP_STATE, 1,
                                    _write("g", topic_id, 0, 0, 3, -1, []))
        assert stale.error_code == ErrorCode.FENCED_STATE_EPOCH
        for version, count in ((0, None), (1, 2)):
            summary = node.partition_call(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, version,
                                          _summary("g", topic_id, 0))
            assert (summary.error_code, summary.state_epoch, summary.leader_epoch,
                    summary.start_offset) == (0, 1, 3, 12)
            if count is not None:
                assert summary.delivery_complete_count == count
        gone = node.partition_call(ApiKey.READ_SHARE_GROUP_STATE, 0, _read("g", topic_id, 1, 0))
        assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        node.close()
