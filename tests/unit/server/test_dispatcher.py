"""RequestDispatcher: frames in, response buffers out, with Kafka's rules for bad requests."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_ext.network.connection import CloseConnection, KafkaConnection
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.framing import decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.server.api_versions import handle_api_versions
from kafka_ext.server.client_quota_manager import QuotaManagers
from kafka_ext.server.dispatcher import RequestContext, RequestDispatcher

FETCH, METADATA, API_VERSIONS = 1, 3, 18
_PREFIX = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id


def _request_cls(api_key: int) -> Any:
    return registry().requests[api_key].cls


def _response_cls(api_key: int) -> Any:
    return registry().responses[api_key].cls


def _frame(api_key: int, version: int, correlation_id: int = 7, body: Any = None,
           client_id: str | None = "unit-test") -> bytes:
    """A request frame without its size prefix, as KafkaConnection hands it over."""
    body = _request_cls(api_key)() if body is None else body
    return encode_request(api_key, version, correlation_id, client_id, body)[4:]


def _decode(parts: list[Any] | None, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, body) of the buffers a handler produced, checking the size prefix."""
    assert parts is not None
    data = b"".join(bytes(p) for p in parts)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return decode_response(data[4:], api_key, version)


class Setup:
    """A dispatcher over a stand-in broker, a connection object, and the calls handlers saw."""

    def __init__(self) -> None:
        self.broker = SimpleNamespace(  # no quota configured; a cluster with no features yet
            quotas=QuotaManagers({}),
            controller=SimpleNamespace(image=SimpleNamespace(features={}, offset=-1)),
            group_coordinator=SimpleNamespace(config=SimpleNamespace(
                share=SimpleNamespace(enable=True))))
        self.dispatcher = RequestDispatcher(self.broker)
        self.broker.dispatcher = self.dispatcher
        self.conn = KafkaConnection(self.dispatcher.handle_frame, 1 << 20, lambda c: None)
        self.seen: list[tuple[RequestContext, Any]] = []

    def register(self, api_key: int, response: Any = None, raises: Exception | None = None
                 ) -> None:
        async def handler(ctx: RequestContext, request: Any) -> Any:
            self.seen.append((ctx, request))
            if raises is not None:
                raise raises
            return response

        self.dispatcher.register(api_key, handler)

    async def handle(self, frame: bytes) -> list[Any] | None:
        return await self.dispatcher.handle_frame(self.conn, frame)


@pytest.fixture
def setup() -> Setup:
    return Setup()


async def test_a_request_reaches_its_handler_and_the_answer_echoes_the_correlation_id(
        setup: Setup) -> None:
    metadata = _response_cls(METADATA)
    setup.register(METADATA, response=metadata(throttle_time_ms=0, brokers=[], topics=[]))
    request = _request_cls(METADATA)(topics=[_request_cls(METADATA).MetadataRequestTopic(
        name="orders")], allow_auto_topic_creation=False)
    parts = await setup.handle(_frame(METADATA, 12, correlation_id=4242, body=request))
    correlation_id, body = _decode(parts, METADATA, 12)
    assert correlation_id == 4242
    assert body.topics == [] and body.brokers == []
    [(ctx, seen)] = setup.seen
    assert ctx.api_version == 12 and ctx.client_id == "unit-test"
    assert ctx.header.correlation_id == 4242
    assert ctx.broker is setup.broker and ctx.connection is setup.conn
    assert [t.name for t in seen.topics] == ["orders"]
    assert seen.allow_auto_topic_creation is False


async def test_a_handler_answering_none_sends_nothing(setup: Setup) -> None:
    setup.register(METADATA, response=None)
    assert await setup.handle(_frame(METADATA, 1)) is None
    assert len(setup.seen) == 1


async def test_trailing_bytes_after_the_body_are_ignored(setup: Setup) -> None:
    # librdkafka's all-topics Metadata v12 request carries three extra bytes.
    setup.register(METADATA, response=_response_cls(METADATA)(brokers=[], topics=[]))
    frame = _frame(METADATA, 12, correlation_id=3) + b"\x00\x00\x00"
    correlation_id, _ = _decode(await setup.handle(frame), METADATA, 12)
    assert correlation_id == 3 and len(setup.seen) == 1


async def test_an_unknown_api_key_closes_the_connection(setup: Setup) -> None:
    with pytest.raises(CloseConnection):
        await setup.handle(_PREFIX.pack(9999, 0, 1) + b"\x00\x00")


async def test_a_known_api_without_a_handler_closes_the_connection(setup: Setup) -> None:
    with pytest.raises(CloseConnection):
        await setup.handle(_frame(METADATA, 12))


async def test_an_unsupported_version_closes_the_connection(setup: Setup) -> None:
    setup.register(METADATA, response=None)
    with pytest.raises(CloseConnection):
        await setup.handle(_PREFIX.pack(METADATA, 99, 1) + b"\x00\x00")
    assert setup.seen == []


async def test_a_frame_shorter_than_a_header_closes_the_connection(setup: Setup) -> None:
    setup.register(METADATA, response=None)
    with pytest.raises(CloseConnection):
        await setup.handle(b"\x00\x03\x00")


async def test_a_body_that_does_not_decode_closes_the_connection(setup: Setup) -> None:
    setup.register(METADATA, response=None)
    request = _request_cls(METADATA)(topics=[_request_cls(METADATA).MetadataRequestTopic(
        name="orders")])
    frame = _frame(METADATA, 12, body=request)
    with pytest.raises(CloseConnection):
        await setup.handle(frame[:len(frame) - 6])
    assert setup.seen == []


async def test_api_versions_of_an_unsupported_version_answers_v0_unsupported_version(
        setup: Setup) -> None:
    setup.register(API_VERSIONS, response=None)
    setup.register(METADATA, response=None)
    # A future client's ApiVersions v99: only the prefix is readable, the rest is unknown.
    parts = await setup.handle(_PREFIX.pack(API_VERSIONS, 99, 31) + b"\x00\x09whatever\x00")
    correlation_id, body = _decode(parts, API_VERSIONS, 0)
    assert correlation_id == 31
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert set(ranges) == {API_VERSIONS, METADATA}
    low, high = ranges[API_VERSIONS]
    assert low == 0 and high >= 3
    assert setup.seen == []


async def test_api_versions_answers_the_ranges_of_registered_handlers(setup: Setup) -> None:
    setup.dispatcher.register(API_VERSIONS, handle_api_versions)
    setup.register(METADATA, response=None)
    body = _request_cls(API_VERSIONS)(client_software_name="kafka-ext-tests",
                                      client_software_version="1.0")
    correlation_id, response = _decode(
        await setup.handle(_frame(API_VERSIONS, 3, correlation_id=5, body=body)), API_VERSIONS, 3)
    assert correlation_id == 5 and response.error_code == 0
    assert {k.api_key for k in response.api_keys} == {API_VERSIONS, METADATA}


async def test_a_kafka_error_becomes_a_top_level_error_response(setup: Setup) -> None:
    setup.register(FETCH, raises=KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "gone"))
    correlation_id, body = _decode(await setup.handle(_frame(FETCH, 12, correlation_id=9)),
                                   FETCH, 12)
    assert correlation_id == 9
    assert body.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_an_unexpected_failure_becomes_unknown_server_error(setup: Setup) -> None:
    setup.register(FETCH, raises=RuntimeError("bug in a handler"))
    _, body = _decode(await setup.handle(_frame(FETCH, 12)), FETCH, 12)
    assert body.error_code == ErrorCode.UNKNOWN_SERVER_ERROR


async def test_a_kafka_error_without_a_top_level_error_code_closes_the_connection(
        setup: Setup) -> None:
    setup.register(METADATA, raises=KafkaError(ErrorCode.NOT_CONTROLLER, "no"))
    with pytest.raises(CloseConnection):
        await setup.handle(_frame(METADATA, 12))


@pytest.mark.parametrize("version", [4, 6])
async def test_a_kafka_error_at_a_version_without_the_error_field_is_not_answered_as_success(
        setup: Setup, version: int) -> None:
    # FetchResponse has its top-level ErrorCode from v7 only: an answer at v4-v6 must carry the
    # code per partition or the connection must close; an empty success hides the failure.
    setup.register(FETCH, raises=KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved"))
    request = _request_cls(FETCH)(max_wait_ms=0, min_bytes=1, topics=[
        _request_cls(FETCH).FetchTopic(topic="orders", partitions=[
            _request_cls(FETCH).FetchPartition(partition=0, fetch_offset=0,
                                               partition_max_bytes=1024)])])
    try:
        parts = await setup.handle(_frame(FETCH, version, body=request))
    except CloseConnection:
        return
    _, body = _decode(parts, FETCH, version)
    codes = [p.error_code for t in body.responses for p in t.partitions]
    assert codes and all(code == ErrorCode.NOT_LEADER_OR_FOLLOWER for code in codes)
