"""SharePersisterClient through a real in-process broker: the local path (this broker is the
key's share coordinator), the wire path (83-87 over the broker's own inter-broker channels,
through the dispatcher and handlers), retries, and FindCoordinator's SHARE key type."""

from __future__ import annotations

import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.client.probe import api_versions_request
from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.coordinator.share.coordinator import SHARE_GROUP_STATE_TOPIC
from kafka_ext.network.connection import KafkaConnection
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.framing import decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from kafka_ext.share.persister import (
    DeliveryState,
    SharePartitionKey,
    ShareState,
    ShareStateSummary,
    StateBatch,
)
from kafka_ext.share.persister_client import SharePersisterClient

_reg = registry()


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(build_config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                             "log.dirs": str(tmp_path / "data"), "log.cleaner.enable": "false",
                             "share.coordinator.state.topic.num.partitions": "3"}))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


class Elsewhere:
    """The broker as another node of its cluster would see it: the same metadata and
    inter-broker channels under another node id, so every call goes over the wire."""

    node_id = 99

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)


async def _topic(broker: Broker, name: str = "t", partitions: int = 2) -> uuid.UUID:
    (result,) = await broker.controller.create_topics(
        [TopicCreation(name, partitions, 1)], validate_only=False)
    assert result.error == ErrorCode.NONE, result.message
    return result.topic_id


async def _remote(broker: Broker, timeout_s: float = 15.0) -> SharePersisterClient:
    client = SharePersisterClient(Elsewhere(broker), timeout_s=timeout_s)
    await client.start()
    return client


async def _life_of_a_key(persister: Any, key: SharePartitionKey) -> list[Any]:
    """Initialize, read as leader 0 and 1, write, summarize, fence, delete: what each gave."""
    seen: list[Any] = []
    await persister.initialize(key, 1, -1)
    seen.append(await persister.read(key, 0))
    await persister.write(key, 1, 1, 5, [StateBatch(5, 9, DeliveryState.AVAILABLE, 1),
                                         StateBatch(7, 7, DeliveryState.ACKNOWLEDGED, 1)], 1)
    seen.append(await persister.read(key, 1))
    seen.append(await persister.read_summary(key))
    for call in (lambda: persister.read(key, 0), lambda: persister.write(key, 0, 1, 5, [])):
        with pytest.raises(KafkaError) as info:
            await call()
        seen.append(info.value.code)
    await persister.delete(key)
    with pytest.raises(KafkaError) as info:
        await persister.read_summary(key)
    seen.append(info.value.code)
    return seen


EXPECTED = [
    ShareState(1, -1, []),
    ShareState(1, 5, [StateBatch(5, 6, DeliveryState.AVAILABLE, 1),
                      StateBatch(7, 7, DeliveryState.ACKNOWLEDGED, 1),
                      StateBatch(8, 9, DeliveryState.AVAILABLE, 1)]),
    ShareStateSummary(1, 1, 5, 1),
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.FENCED_STATE_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
]


async def test_the_local_path_creates_the_state_topic_and_serves_every_call(
        broker: Broker) -> None:
    topic_id = await _topic(broker)
    assert SHARE_GROUP_STATE_TOPIC not in broker.controller.image.topics_by_name
    assert await _life_of_a_key(broker.share_persister,
                                SharePartitionKey("g", topic_id, 0)) == EXPECTED
    assert SHARE_GROUP_STATE_TOPIC in broker.controller.image.topics_by_name


async def test_the_wire_path_gives_the_same_answers(broker: Broker) -> None:
    topic_id = await _topic(broker)
    remote = await _remote(broker)
    try:
        assert await _life_of_a_key(remote, SharePartitionKey("g", topic_id, 1)) == EXPECTED
    finally:
        await remote.stop()


async def test_both_paths_see_one_state(broker: Broker) -> None:
    topic_id = await _topic(broker)
    key = SharePartitionKey("g", topic_id, 0)
    remote = await _remote(broker)
    try:
        await broker.share_persister.initialize(key, 0, 3)
        await remote.write(key, 0, 0, 3, [StateBatch(3, 4, DeliveryState.ARCHIVED, 5)])
        assert await broker.share_persister.read(key, 0) == ShareState(
            0, 3, [StateBatch(3, 4, DeliveryState.ARCHIVED, 5)])
    finally:
        await remote.stop()


async def test_a_coordinator_that_stays_away_fails_the_call_at_its_deadline(
        broker: Broker) -> None:
    topic_id = await _topic(broker)
    key = SharePartitionKey("g", topic_id, 0)
    await broker.share_persister.initialize(key, 0, 0)
    broker.share_coordinator.runtime._unload(broker.share_coordinator.partition_for(key))
    for persister in (SharePersisterClient(broker, timeout_s=0.3), await _remote(broker, 0.3)):
        await persister.start()
        try:
            with pytest.raises(KafkaError) as info:
                await persister.read(key, 0)
            # The last answer, or (a loaded machine) the last attempt that found no answer.
            assert info.value.code in (ErrorCode.NOT_COORDINATOR,
                                       ErrorCode.COORDINATOR_NOT_AVAILABLE)
        finally:
            await persister.stop()


# -- FindCoordinator, key type 2 ---------------------------------------------------------------

async def _call(broker: Broker, api_key: int, version: int, body: Any) -> Any:
    conn = KafkaConnection(broker.dispatcher.handle_frame, 1 << 20, lambda c: None)
    await broker.dispatcher.handle_frame(conn, encode_request(
        ApiKey.API_VERSIONS, 3, 6, "unit-test", api_versions_request(NODE_SOFTWARE_NAME))[4:])
    parts = await broker.dispatcher.handle_frame(
        conn, encode_request(api_key, version, 7, "unit-test", body)[4:])
    assert parts is not None
    data = b"".join(bytes(p) for p in parts)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    _, response = decode_response(data[4:], api_key, version)
    return response


async def test_find_coordinator_share_keys_name_the_state_partitions_leader(
        broker: Broker) -> None:
    topic_id = await _topic(broker)
    good = SharePartitionKey("g", topic_id, 1).coordinator_key()
    request = _reg.requests[ApiKey.FIND_COORDINATOR].cls(
        key_type=2, coordinator_keys=[good, "g:not-a-topic-id:1", "no-colons"])
    response = await _call(broker, ApiKey.FIND_COORDINATOR, 6, request)
    by_key = {c.key: (c.error_code, c.node_id) for c in response.coordinators}
    assert by_key[good] == (ErrorCode.NONE, 1)
    assert by_key["g:not-a-topic-id:1"][0] == ErrorCode.INVALID_REQUEST
    assert by_key["no-colons"][0] == ErrorCode.INVALID_REQUEST
    assert SHARE_GROUP_STATE_TOPIC in broker.controller.image.topics_by_name  # made on first use
    old = await _call(broker, ApiKey.FIND_COORDINATOR, 5, _reg.requests[
        ApiKey.FIND_COORDINATOR].cls(key_type=2, coordinator_keys=[good]))
    assert old.coordinators[0].error_code == ErrorCode.INVALID_REQUEST  # share keys need v6


async def test_the_handlers_answer_each_partition_with_its_own_error(broker: Broker) -> None:
    topic_id = await _topic(broker)
    await broker.share_persister.initialize(SharePartitionKey("g", topic_id, 0), 0, 0)
    req = _reg.requests[ApiKey.READ_SHARE_GROUP_STATE].cls
    response = await _call(broker, ApiKey.READ_SHARE_GROUP_STATE, 0, req(
        group_id="g", topics=[req.ReadStateData(topic_id=topic_id, partitions=[
            req.PartitionData(partition=p, leader_epoch=0) for p in (0, 1, 5)])]))
    codes = [(p.partition, p.error_code) for t in response.results for p in t.partitions]
    assert codes == [(0, ErrorCode.NONE), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                     (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    empty_group = await _call(broker, ApiKey.READ_SHARE_GROUP_STATE, 0, req(
        group_id="", topics=[req.ReadStateData(topic_id=topic_id, partitions=[
            req.PartitionData(partition=0, leader_epoch=0)])]))
    assert empty_group.results[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
