"""The diskless APIs on the broker: registration of 93-98/100, Metadata's produce gateways,
FindCoordinator for diskless coordinators, `__diskless_metadata` as an internal topic, and the
start-up clean-up of logs of partitions that became diskless.

The broker runs in this process; requests go through its real dispatcher as encoded frames.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiokafka
import aiokafka.structs
import confluent_kafka.admin
import kafka
import pytest

from kafka_ext.client.probe import api_versions_request
from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC, TopicCreation
from kafka_ext.coordinator.diskless.coordinator import DisklessCoordinator
from kafka_ext.network.connection import KafkaConnection
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.server.auto_topic_creation import AutoTopicCreationManager
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from kafka_ext.server.diskless import HANDLERS, error_response
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.server.groups import DISKLESS_KEY_TYPE, handle_find_coordinator
from kafka_ext.server.metadata import _missing_topics

DISKLESS_KEYS = [93, 94, 95, 96, 97, 98, 100]
DISKLESS: dict[str, str | None] = {"diskless.enable": "true"}
_reg = registry()


def _config(data: Path) -> Any:
    return build_config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                         "log.dirs": str(data), "log.cleaner.enable": "false",
                         "diskless.metadata.topic.num.partitions": "3"})


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(_config(tmp_path / "data"))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def _call(broker: Broker, api_key: int, version: int, body: Any,
                software_name: str = NODE_SOFTWARE_NAME,
                principal: KafkaPrincipal | None = None) -> Any:
    """One request on a fresh connection that named itself `software_name` (a node: the
    diskless APIs are inter-node ones) in ApiVersions v3 first; as `principal` if given."""
    conn = KafkaConnection(broker.dispatcher.handle_frame, 1 << 20, lambda c: None)
    if principal is not None:
        conn.security.principal = principal
    await broker.dispatcher.handle_frame(conn, encode_request(
        ApiKey.API_VERSIONS, 3, 6, "unit-test", api_versions_request(software_name))[4:])
    parts = await broker.dispatcher.handle_frame(
        conn, encode_request(api_key, version, 7, "unit-test", body)[4:])
    assert parts is not None
    data = b"".join(bytes(p) for p in parts)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    correlation_id, response = decode_response(data[4:], api_key, version)
    assert correlation_id == 7
    return response


def _request(api_key: int) -> Any:
    return _reg.requests[api_key].cls


async def _create(broker: Broker, name: str, partitions: int,
                  configs: dict[str, str | None] | None = None) -> None:
    (result,) = await broker.controller.create_topics(
        [TopicCreation(name, partitions, 1, configs=dict(configs or {}))], False)
    assert result.error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS), result.message


# -- the seven APIs --------------------------------------------------------------------------


async def test_api_versions_advertises_the_seven_diskless_apis_at_version_zero_to_nodes_only(
        broker: Broker) -> None:
    response = await _call(broker, ApiKey.API_VERSIONS, 3,
                           api_versions_request(NODE_SOFTWARE_NAME))
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {k: advertised.get(k) for k in DISKLESS_KEYS} == dict.fromkeys(DISKLESS_KEYS, (0, 0))
    assert sorted(HANDLERS) == DISKLESS_KEYS
    for name in ("t", CLIENT_SOFTWARE_NAME):  # a stock client, our own client: not shown
        response = await _call(broker, ApiKey.API_VERSIONS, 3, api_versions_request(name),
                               software_name=name)
        assert not {k.api_key for k in response.api_keys} & set(DISKLESS_KEYS)


def _requests_for_unknown_entries() -> dict[int, Any]:
    """One request per API naming a topic id and an object no coordinator knows."""
    topic_id = uuid.uuid4()
    return {
        93: _request(93)(topics=[_request(93).DisklessCreatablePartitions(
            topic_id=topic_id, name="nowhere", num_partitions=2)]),
        94: _request(94)(topics=[_request(94).DisklessDeletableTopicState(topic_id=topic_id)]),
        95: _request(95)(object_key="wal/unknown", object_format=1, file_size=10, owner_ids=[0],
                         batches=[_request(95).DisklessCommitBatch(
                             magic=2, topic_id=topic_id, partition_index=0, byte_offset=0,
                             size=10, base_offset=0, last_offset=0, batch_max_timestamp=0,
                             producer_id=-1, producer_epoch=-1, base_sequence=-1,
                             last_sequence=-1)]),
        96: _request(96)(topics=[_request(96).DisklessDeleteRecordsTopic(
            topic_id=topic_id, partitions=[_request(96).DisklessDeleteRecordsPartition(
                partition_index=0, offset=1)])]),
        97: _request(97)(topics=[_request(97).DisklessListOffsetsTopic(
            topic_id=topic_id, partitions=[_request(97).DisklessListOffsetsPartition(
                partition_index=0, timestamp=-1)])]),
        98: _request(98)(fetch_max_bytes=1024, max_batches_per_partition=10, topics=[
            _request(98).DisklessFindBatchesTopic(topic_id=topic_id, partitions=[
                _request(98).DisklessFindBatchesPartition(partition_index=0, offset=0,
                                                          max_partition_fetch_bytes=1024)])]),
        100: _request(100)(files=[_request(100).DisklessDescribeFileEntry(
            object_key="wal/unknown")]),
    }


def _entry_codes(api_key: int, response: Any) -> list[int]:
    """The error code of every entry of a diskless response."""
    if api_key == 93:
        return [t.error_code for t in response.topics]
    if api_key == 94:
        return [t.error_code for t in response.responses]
    if api_key == 95:
        return [b.error_code for b in response.batches]
    if api_key == 100:
        return [f.error_code for f in response.files]
    return [p.error_code for t in response.topics for p in t.partitions]


async def test_each_api_answers_every_entry_of_an_unknown_topic_with_an_error(
        broker: Broker) -> None:
    for api_key, request in _requests_for_unknown_entries().items():
        response = await _call(broker, api_key, 0, request)
        codes = _entry_codes(api_key, response)
        assert len(codes) == 1, api_key
        if api_key == 100:  # an object no shard knows: no live batches
            assert not response.files[0].has_live_batches
            assert response.files[0].object_key == "wal/unknown"
        elif api_key != 94:  # deleting an unknown topic may be a no-op success
            assert codes != [0], api_key


@pytest.fixture
async def coordinator(broker: Broker) -> AsyncIterator[Any]:
    """The broker's DisklessCoordinator, started here if the broker does not start one."""
    running = getattr(broker, "diskless_coordinator", None)
    if running is not None:
        yield running
        return
    started = DisklessCoordinator(broker)
    broker.diskless_coordinator = started  # type: ignore[attr-defined]
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


async def test_the_apis_reach_the_coordinator_hosting_the_partitions(
        broker: Broker, coordinator: Any) -> None:
    await _create(broker, "orders", 3, DISKLESS)
    topic = broker.controller.image.topics_by_name["orders"]
    deadline = time.monotonic() + 10
    while not all(coordinator.hosts(p.diskless_coordinator) for p in topic.partitions.values()):
        assert time.monotonic() < deadline, "the diskless shards did not load"
        await asyncio.sleep(0.01)
    create = _request(93)
    created = await _call(broker, 93, 0, create(topics=[create.DisklessCreatablePartitions(
        topic_id=topic.topic_id, name="orders", num_partitions=3)]))
    assert [t.error_code for t in created.topics] == [0]
    offsets = _request(97)
    listed = await _call(broker, 97, 0, offsets(topics=[offsets.DisklessListOffsetsTopic(
        topic_id=topic.topic_id, partitions=[offsets.DisklessListOffsetsPartition(
            partition_index=p, timestamp=-1) for p in range(3)])]))
    assert [(p.partition_index, p.error_code, p.offset) for p in listed.topics[0].partitions] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_error_responses_fail_every_entry_and_encode() -> None:
    for api_key, request in _requests_for_unknown_entries().items():
        response = error_response(ApiKey(api_key), request, ErrorCode.NOT_COORDINATOR, "moved")
        assert _entry_codes(api_key, response) == [int(ErrorCode.NOT_COORDINATOR)]
        encoded = _reg.responses[api_key].encode(response, 0)
        decoded, _ = _reg.responses[api_key].decode(encoded, 0)
        assert _entry_codes(api_key, decoded) == [int(ErrorCode.NOT_COORDINATOR)]


# -- Metadata --------------------------------------------------------------------------------


def _metadata_request(*names: str) -> Any:
    cls = _reg["MetadataRequest"].cls
    return cls(topics=[cls.MetadataRequestTopic(name=n) for n in names],
               allow_auto_topic_creation=False)


async def test_metadata_gives_diskless_partitions_their_produce_gateways(broker: Broker) -> None:
    await _create(broker, "orders", 3, DISKLESS)
    await _create(broker, "classic", 1)
    response = await _call(broker, ApiKey.METADATA, 12, _metadata_request("orders", "classic"))
    topics = {t.name: t for t in response.topics}
    # One broker: it is every coordinator's only gateway, whether __diskless_metadata exists.
    assert [p.preferred_produce_brokers for p in topics["orders"].partitions] == [[1]] * 3
    assert topics["classic"].partitions[0].preferred_produce_brokers == []
    assert not topics["orders"].is_internal


async def test_metadata_before_version_nine_has_no_gateways_and_still_decodes(
        broker: Broker) -> None:
    await _create(broker, "orders", 1, DISKLESS)
    response = await _call(broker, ApiKey.METADATA, 8, _metadata_request("orders"))
    assert response.topics[0].partitions[0].preferred_produce_brokers == []


async def test_diskless_metadata_topic_is_internal_and_refuses_client_produce(
        broker: Broker) -> None:
    await _create(broker, DISKLESS_METADATA_TOPIC, 3)
    response = await _call(broker, ApiKey.METADATA, 12, _metadata_request(DISKLESS_METADATA_TOPIC))
    assert response.topics[0].is_internal
    produce = _reg["ProduceRequest"].cls
    request = produce(acks=-1, timeout_ms=1000, topic_data=[produce.TopicProduceData(
        name=DISKLESS_METADATA_TOPIC, partition_data=[produce.PartitionProduceData(
            index=0, records=b"")])])
    answer = await _call(broker, ApiKey.PRODUCE, 9, request)
    code = answer.responses[0].partition_responses[0].error_code
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_a_metadata_request_never_auto_creates_the_diskless_metadata_topic() -> None:
    # A stand-in broker: the real one may already have created the topic at start.
    broker = SimpleNamespace(
        config=SimpleNamespace(auto_create_topics_enable=True), authorizer=None,
        controller=SimpleNamespace(image=MetadataImage()))
    broker.auto_topic_creation = AutoTopicCreationManager(broker)
    ctx = RequestContext(header=None, api_version=12, broker=broker,  # type: ignore[arg-type]
                         connection=None)  # type: ignore[arg-type]
    cls = _reg["MetadataRequest"].cls
    (answer,) = _missing_topics(ctx, cls(allow_auto_topic_creation=True),
                                [DISKLESS_METADATA_TOPIC])
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert answer.is_internal


# -- FindCoordinator -------------------------------------------------------------------------


async def test_find_coordinator_locates_a_diskless_coordinator_by_its_id(
        broker: Broker) -> None:
    await _create(broker, DISKLESS_METADATA_TOPIC, 3)
    partitions = len(broker.controller.image.topics_by_name[DISKLESS_METADATA_TOPIC].partitions)
    cls = _reg["FindCoordinatorRequest"].cls
    response = await _call(broker, ApiKey.FIND_COORDINATOR, 4, cls(
        key_type=DISKLESS_KEY_TYPE, coordinator_keys=["0", str(partitions - 1),
                                                      str(partitions), "x1"]))
    found = {c.key: c for c in response.coordinators}
    port = broker.live_nodes()[0].port
    for key in ("0", str(partitions - 1)):
        assert (found[key].error_code, found[key].node_id, found[key].port) == (0, 1, port)
    assert found[str(partitions)].error_code == ErrorCode.INVALID_REQUEST
    assert found["x1"].error_code == ErrorCode.INVALID_REQUEST
    single = await _call(broker, ApiKey.FIND_COORDINATOR, 3,
                         cls(key_type=DISKLESS_KEY_TYPE, key="0"))
    assert (single.error_code, single.node_id) == (0, 1)


async def test_find_coordinator_before_the_metadata_topic_exists_is_retriable() -> None:
    # A stand-in broker whose (real, empty) image has no __diskless_metadata yet.
    broker = SimpleNamespace(controller=SimpleNamespace(image=MetadataImage()),
                             live_nodes=lambda: [], authorizer=None)
    ctx = RequestContext(header=None, api_version=3, broker=broker,  # type: ignore[arg-type]
                         connection=None)  # type: ignore[arg-type]
    cls = _reg["FindCoordinatorRequest"].cls
    response = await handle_find_coordinator(ctx, cls(key_type=DISKLESS_KEY_TYPE, key="0"))
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert ErrorCode(response.error_code).retriable


# -- start-up clean-up -----------------------------------------------------------------------


async def test_a_log_left_for_a_partition_now_diskless_is_deleted_at_start(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Broker(_config(data))
    await first.start()
    await _create(first, "orders", 1)
    await first.stop()
    kept = tmp_path / "orders-0"
    shutil.copytree(data / "orders-0", kept)  # as if its deletion had not finished
    second = Broker(_config(data))
    await second.start()
    await second.controller.delete_topics(["orders"])
    await _create(second, "orders", 1, DISKLESS)
    await second.stop()
    shutil.copytree(kept, data / "orders-0")
    third = Broker(_config(data))
    await third.start()
    try:
        assert third.log_manager.get_log("orders", 0) is None
        assert "orders" in third.controller.image.topics_by_name
    finally:
        await third.stop()
    assert not (data / "orders-0").exists()


# -- stock clients parse the tagged field ------------------------------------------------------


async def test_stock_clients_read_metadata_carrying_produce_gateways(broker: Broker) -> None:
    """PreferredProduceBrokers is a tagged field (tag 10003): librdkafka, kafka-python and
    aiokafka must skip it and still see the diskless topic's partitions and leaders."""
    await _create(broker, "orders", 3, DISKLESS)
    bootstrap = f"127.0.0.1:{broker.bound_ports[0]}"

    def confluent_partitions() -> list[tuple[int, int]]:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        topic = admin.list_topics("orders", timeout=10).topics["orders"]
        assert topic.error is None
        return sorted((p.id, p.leader) for p in topic.partitions.values())

    def kafka_python_partitions() -> list[tuple[int, int]]:
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            (topic,) = admin.describe_topics(["orders"])
        finally:
            admin.close()
        assert topic["error_code"] == 0
        return sorted((p["partition_index"], p["leader_id"]) for p in topic["partitions"])

    expected = [(0, 1), (1, 1), (2, 1)]
    assert await asyncio.to_thread(confluent_partitions) == expected
    assert await asyncio.to_thread(kafka_python_partitions) == expected
    client = aiokafka.AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        assert sorted(client.cluster.partitions_for_topic("orders") or ()) == [0, 1, 2]
        assert client.cluster.leader_for_partition(
            aiokafka.structs.TopicPartition("orders", 0)) == 1
    finally:
        await client.close()
