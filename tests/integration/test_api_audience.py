"""ApiVersions per audience: stock clients see Kafka's client APIs only (issue 21, item 1).

Each stock client's own "what does the broker support" call runs against the real broker
(kafka-python's table ends at key 92 and used to raise on the diskless keys), then raw bytes
check what our own client name and a node name are shown, and that Kafka's share-group
requests on keys 76/77 from a stock connection get UNSUPPORTED_VERSION, never a chunk answer.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import socket
from typing import Any

import pytest
from aiokafka.conn import create_conn
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from kafka_ext.client.probe import (
    api_versions_request,
    identify,
    recv_exact,
    round_trip,
)
from kafka_ext.protocol.api_keys import (
    CLIENT_SOFTWARE_NAME,
    NODE_SOFTWARE_NAME,
    ApiKey,
    Audience,
    audience,
    supported_versions,
)
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import SIZE
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 15.0
# Keys Kafka 4.x gives to share groups; to us they are CreateChunks / AlterChunkAssignments.
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE = 76, 77


def connect(broker: Any) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)


def advertised_to(broker: Any, software_name: str) -> dict[int, tuple[int, int]]:
    with connect(broker) as sock:
        response = identify(sock, software_name)
    assert response.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def assert_client_keys_only(keys: set[int]) -> None:
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS} <= keys
    # 76/77 are shown with Kafka's meaning (share groups), every other key is client-facing.
    assert {k for k in keys if audience(k) != Audience.CLIENT} <= set(
        registry().shadowed_requests)
    assert max(keys) <= 92, "kafka-python 3.0.12's key table ends at 92"


# -- stock clients ----------------------------------------------------------------------------


def test_kafka_python_admin_api_versions(broker: Any) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        versions = admin.api_versions()  # raised ValueError: 93 is not a valid ApiKey
    finally:
        admin.close()
    assert_client_keys_only({int(k) for k in versions})
    assert versions[ApiKey.PRODUCE] == advertised_to(broker, "kafka-python")[ApiKey.PRODUCE]


def test_confluent_kafka_sees_only_client_apis(broker: Any) -> None:
    """librdkafka logs the ApiVersions answer it parsed ("Broker API support")."""
    out = io.StringIO()
    logger = logging.getLogger(f"{__name__}.librdkafka")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "debug": "feature",
                             "logger": logger})
        metadata = admin.list_topics(timeout=TIMEOUT_S)
        assert metadata.brokers
        seen: dict[int, tuple[int, int]] = {}
        pattern = re.compile(r"ApiKey \S+ \((\d+)\) Versions (\d+)\.\.(\d+)")
        for _ in range(50):  # the log lines arrive through poll()
            admin.poll(0.1)
            seen = {int(k): (int(lo), int(hi)) for k, lo, hi in pattern.findall(out.getvalue())}
            if ApiKey.API_VERSIONS in seen:
                break
    finally:
        logger.removeHandler(handler)
    assert seen == advertised_to(broker, "confluent-kafka-python")
    assert_client_keys_only(set(seen))


def test_aiokafka_version_lookup(broker: Any) -> None:
    async def lookup() -> dict[int, tuple[int, int]]:
        conn = await create_conn("127.0.0.1", broker.port)
        try:
            return dict(conn._versions)  # what its ApiVersions lookup at connect stored
        finally:
            conn.close()

    versions = asyncio.run(lookup())
    assert_client_keys_only(set(versions))
    assert versions == advertised_to(broker, "aiokafka")


# -- raw bytes: who is shown what --------------------------------------------------------------


def test_our_client_and_nodes_see_more_than_a_stock_client(broker: Any) -> None:
    stock = advertised_to(broker, "some-stock-client")
    ours = advertised_to(broker, CLIENT_SOFTWARE_NAME)
    node = advertised_to(broker, NODE_SOFTWARE_NAME)
    assert_client_keys_only(set(stock))
    shadowed = set(registry().shadowed_requests)  # 76/77: share groups to stock clients
    assert {k: v for k, v in stock.items() if k not in shadowed}.items() <= ours.items() \
        <= node.items()
    for key in shadowed:
        assert stock[key] == supported_versions(key, shadowed=True) != ours[key]
    assert {audience(k) for k in ours.keys() - stock.keys()} <= {Audience.EXTENSION}
    assert {audience(k) for k in node.keys() - ours.keys()} <= {Audience.NODE}
    diskless = {k for k in ApiKey if k.name.startswith("DISKLESS_")}
    assert diskless <= node.keys()
    assert not diskless & ours.keys()
    with connect(broker) as sock:  # ApiVersions before v3 names no software: a stock client
        old = round_trip(sock, ApiKey.API_VERSIONS, 2, registry()["ApiVersionsRequest"].cls())
    assert {k.api_key for k in old.api_keys} == stock.keys()


def test_an_inter_node_api_from_a_stock_client_closes_only_that_connection(broker: Any) -> None:
    cls = registry().requests[ApiKey.DISKLESS_DESCRIBE_FILES].cls
    with connect(broker) as sock:
        identify(sock, "some-stock-client")
        with pytest.raises(ConnectionError):
            round_trip(sock, ApiKey.DISKLESS_DESCRIBE_FILES, 0, cls(), correlation_id=2)
    with connect(broker) as sock:
        identify(sock, NODE_SOFTWARE_NAME)
        response = round_trip(sock, ApiKey.DISKLESS_DESCRIBE_FILES, 0, cls(), correlation_id=2)
        assert response.files == []


def share_group_frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A request frame on key 76/77 encoded with Kafka's share-group schema (header v2)."""
    reg = registry()
    header_type = reg["RequestHeader"]
    out = bytearray(4)
    header_type.encode_into(header_type.cls(request_api_key=api_key, request_api_version=version,
                                            correlation_id=correlation_id,
                                            client_id="share-consumer"), 2, out, None)
    reg.shadowed_requests[api_key].encode_into(body, version, out, None)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def read_share_group_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    reg = registry()
    (size,) = SIZE.unpack(recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    header, pos = reg["ResponseHeader"].decode(frame, 1)
    body, end = reg.shadowed_responses[api_key].decode(frame, version, pos)
    assert end == len(frame)
    return header.correlation_id, body


@pytest.mark.parametrize("identified", [True, False], ids=["after-api-versions", "first-request"])
def test_a_stock_share_group_heartbeat_is_served_as_kafka_s(broker: Any, identified: bool) -> None:
    """Key 76 from a stock connection is Kafka's ShareGroupHeartbeat, never CreateChunks: its
    answer is Kafka's response (here: this node must first create __consumer_offsets, which a
    client's FindCoordinator does), and the connection stays usable."""
    heartbeat = registry().shadowed_requests[SHARE_GROUP_HEARTBEAT].cls(
        group_id="share-group", member_id="m-1", member_epoch=0, subscribed_topic_names=["t"])
    with connect(broker) as sock:
        if identified:
            identify(sock, "apache-kafka-java")
        sock.sendall(share_group_frame(SHARE_GROUP_HEARTBEAT, 1, 41, heartbeat))
        correlation_id, response = read_share_group_response(sock, SHARE_GROUP_HEARTBEAT, 1)
        assert correlation_id == 41
        assert response.error_code in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR,
                                       ErrorCode.COORDINATOR_NOT_AVAILABLE)
        assert round_trip(sock, ApiKey.API_VERSIONS, 3, api_versions_request("x"), 42
                          ).error_code == 0
    assert "Traceback" not in broker.log()


def test_share_group_heartbeat_v0_is_not_served(broker: Any) -> None:
    """v0 was Kafka 4.0's early access, removed in 4.1: a version we do not serve closes the
    connection, as for any API."""
    heartbeat = registry().shadowed_requests[SHARE_GROUP_HEARTBEAT].cls(
        group_id="g", member_id="m", member_epoch=0)
    frame = bytearray(share_group_frame(SHARE_GROUP_HEARTBEAT, 1, 7, heartbeat))
    frame[6:8] = b"\x00\x00"  # request_api_version 0
    with connect(broker) as sock:
        identify(sock, "apache-kafka-java")
        sock.sendall(bytes(frame))
        with pytest.raises(ConnectionError):
            read_share_group_response(sock, SHARE_GROUP_HEARTBEAT, 1)


def test_a_stock_share_group_describe_answers_per_group(broker: Any) -> None:
    describe = registry().shadowed_requests[SHARE_GROUP_DESCRIBE].cls(group_ids=["a", "b"])
    with connect(broker) as sock:
        identify(sock, "apache-kafka-java")
        sock.sendall(share_group_frame(SHARE_GROUP_DESCRIBE, 1, 5, describe))
        correlation_id, response = read_share_group_response(sock, SHARE_GROUP_DESCRIBE, 1)
        assert correlation_id == 5
        assert [g.group_id for g in response.groups] == ["a", "b"]
        assert round_trip(sock, ApiKey.API_VERSIONS, 3, api_versions_request("x"), 6
                          ).error_code == 0


def test_a_share_group_heartbeat_is_never_decoded_as_create_chunks_for_a_stock_client(
        broker: Any) -> None:
    """A CreateChunks v0 frame from a stock connection is read as Kafka's request on key 76,
    whose v0 we do not serve: the connection closes; never a CreateChunks answer."""
    reg = registry()
    create_chunks = reg.requests[ApiKey.CREATE_CHUNKS]
    header = reg["RequestHeader"]
    frame = bytearray(4)
    header.encode_into(header.cls(request_api_key=SHARE_GROUP_HEARTBEAT, request_api_version=0,
                                  correlation_id=9, client_id="c"), 2, frame, None)
    frame += create_chunks.encode(create_chunks.cls(topic_partitions=[
        create_chunks.cls.CreateChunksTopicPartition(topic_name="t", partition_id=0)]), 0)
    SIZE.pack_into(frame, 0, len(frame) - 4)
    with connect(broker) as sock:
        identify(sock, "apache-kafka-java")
        sock.sendall(frame)
        with pytest.raises(ConnectionError):
            read_share_group_response(sock, SHARE_GROUP_HEARTBEAT, 1)
    with connect(broker) as sock:  # the broker itself is fine
        assert identify(sock).error_code == 0


def test_api_versions_carries_the_features_kafka_clients_read(broker: Any) -> None:
    """KIP-584: from v3, the supported and finalized features, as Kafka's admin clients read
    them (Admin.describeFeatures); share.version 1 is in force by default (share groups on)."""
    with connect(broker) as sock:
        response = identify(sock, "apache-kafka-java")
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    assert supported["share.version"] == (0, 1)
    assert supported["metadata.version"] == (7, 25)
    assert "transaction.version" not in supported  # KIP-890's protocol is not served
    finalized = {f.name: (f.min_version_level, f.max_version_level)
                 for f in response.finalized_features}
    assert finalized["share.version"] == (1, 1)
    level = finalized["metadata.version"][0]
    assert finalized["metadata.version"] == (level, level) and 7 <= level <= 25
    assert response.finalized_features_epoch >= 0
