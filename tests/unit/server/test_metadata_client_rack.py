"""Metadata leads a client to the diskless produce gateways of its rack (issue 19 item 3): the
rack comes from a `diskless_az=` marker in the client id or from the RackId of a Fetch on the
same connection, and without one the answer is the rack-less one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_ext.client.probe import api_versions_request
from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC
from kafka_ext.network.connection import KafkaConnection
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.framing import encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.server.broker import Broker, Node
from kafka_ext.server.config import build_config
from kafka_ext.server.dispatcher import CLIENT_RACK, RequestContext
from kafka_ext.server.metadata import handle_metadata

_reg = registry()
_Metadata = _reg["MetadataRequest"].cls
_Fetch = _reg["FetchRequest"].cls

# Six brokers in racks a, b, c; coordinator 0 is led by broker 4 (rack a), coordinator 1 by
# broker 2 (rack b). Two coordinators, six brokers, three racks: one gateway per rack each,
# 0 -> [4, 5, 6] and 1 -> [2, 1, 3] (gateways.py).
NODES = [Node(n, "127.0.0.1", 9000 + n, "abc"[(n - 1) % 3]) for n in range(1, 7)]
RACK_OF = {n.node_id: n.rack for n in NODES}


def _partition(partition_id: int, coordinator: int, leader: int = -1,
               diskless: bool = True) -> Any:
    return SimpleNamespace(partition_id=partition_id, is_diskless=diskless,
                           diskless_coordinator=coordinator, leader=leader, leader_epoch=3,
                           replicas=[leader], isr=[leader], mode=0, start_offset=0, chunks=[])


def _image() -> Any:
    topics = {
        DISKLESS_METADATA_TOPIC: SimpleNamespace(
            name=DISKLESS_METADATA_TOPIC, topic_id=uuid.uuid4(), partitions={
                0: _partition(0, -1, leader=4, diskless=False),
                1: _partition(1, -1, leader=2, diskless=False)}),
        "orders": SimpleNamespace(name="orders", topic_id=uuid.uuid4(), partitions={
            0: _partition(0, 0), 1: _partition(1, 1), 2: _partition(2, 0)}),
    }
    return SimpleNamespace(topics_by_name=topics, topics_by_id={})


def _context(client_id: str, state: dict[str, Any] | None = None,
             forwarded: bool = False) -> RequestContext:
    broker = SimpleNamespace(controller=SimpleNamespace(image=_image()), authorizer=None,
                             cluster_id="c", node_id=1, live_nodes=lambda listener: NODES)
    connection = SimpleNamespace(state=state or {}, security=SimpleNamespace(
        listener=SimpleNamespace(listener="PLAINTEXT")))
    return RequestContext(SimpleNamespace(client_id=client_id), 12,
                          broker, connection, forwarded=forwarded)  # type: ignore[arg-type]


async def _orders(ctx: RequestContext) -> list[Any]:
    request = _Metadata(topics=[_Metadata.MetadataRequestTopic(name="orders")],
                        allow_auto_topic_creation=False)
    response = await handle_metadata(ctx, request)
    return list(response.topics[0].partitions)


async def test_without_a_rack_the_coordinators_own_broker_leads() -> None:
    partitions = await _orders(_context("app-1"))
    assert [p.leader_id for p in partitions] == [4, 2, 4]
    assert partitions[0].replica_nodes == [4, 5, 6]
    assert partitions[1].preferred_produce_brokers == [2, 1, 3]


async def test_a_diskless_az_marker_makes_a_gateway_of_that_rack_the_leader() -> None:
    for rack, leaders in {"a": [4, 1, 4], "b": [5, 2, 5], "c": [6, 3, 6]}.items():
        partitions = await _orders(_context(f"app-1,diskless_az={rack}"))
        assert [p.leader_id for p in partitions] == leaders
        for p in partitions:
            assert RACK_OF[p.leader_id] == rack
            assert p.replica_nodes == p.isr_nodes == p.preferred_produce_brokers
            assert p.replica_nodes[0] == p.leader_id
    partitions = await _orders(_context("diskless_az=c,app-1"))
    # The rack's gateway, then the others in the rack-less order.
    assert partitions[0].preferred_produce_brokers == [6, 4, 5]
    assert partitions[1].preferred_produce_brokers == [3, 2, 1]


async def test_a_rack_without_a_live_gateway_gets_the_rackless_answer() -> None:
    partitions = await _orders(_context("app-1,diskless_az=elsewhere"))
    assert [p.leader_id for p in partitions] == [4, 2, 4]
    assert partitions[0].replica_nodes == [4, 5, 6]


async def test_the_rack_a_fetch_named_on_the_connection_is_used_and_the_marker_wins() -> None:
    assert [p.leader_id for p in await _orders(_context("c", {CLIENT_RACK: "c"}))] == [6, 3, 6]
    assert [p.leader_id for p in await _orders(
        _context("c,diskless_az=b", {CLIENT_RACK: "c"}))] == [5, 2, 5]


def test_a_forwarding_nodes_connection_says_nothing_of_the_clients_rack() -> None:
    assert _context("c", {CLIENT_RACK: "c"}, forwarded=True).client_rack is None
    assert _context("x diskless_az=b", {CLIENT_RACK: "c"}, forwarded=True).client_rack == "b"
    assert _context("c").client_rack is None


# -- Fetch remembers the rack on its connection ----------------------------------------------


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(build_config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                             "log.dirs": str(tmp_path / "data"),
                             "log.cleaner.enable": "false"}))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def _fetch(broker: Broker, conn: KafkaConnection, version: int, rack_id: str) -> None:
    request = _Fetch(replica_id=-1, replica_state=_Fetch.ReplicaState(replica_id=-1),
                     max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                     session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[],
                     rack_id=rack_id)
    assert await broker.dispatcher.handle_frame(
        conn, encode_request(ApiKey.FETCH, version, 8, "consumer", request)[4:]) is not None


async def test_a_consumers_fetch_rack_is_remembered_on_its_connection(broker: Broker) -> None:
    conn = KafkaConnection(broker.dispatcher.handle_frame, 1 << 20, lambda c: None)
    await broker.dispatcher.handle_frame(conn, encode_request(
        ApiKey.API_VERSIONS, 3, 6, "consumer", api_versions_request(CLIENT_SOFTWARE_NAME))[4:])
    await _fetch(broker, conn, 12, "")
    assert CLIENT_RACK not in conn.state
    await _fetch(broker, conn, 12, "rack-b")
    assert conn.state[CLIENT_RACK] == "rack-b"
    await _fetch(broker, conn, 12, "")  # a fetch that names none forgets nothing
    assert conn.state[CLIENT_RACK] == "rack-b"
