"""Bad input on live sockets: the broker closes or answers the offending connection only.

Each test abuses the real broker over raw sockets (truncated frames, lying sizes, unknown keys
and versions, garbage bodies, corrupt batches) while a stock confluent-kafka producer and
consumer exchange numbered messages on their own connections; afterwards the consumer must have
read exactly what the producer sent, in order. Kafka's contract (DESIGN.md §9, "Bad input").
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kafka_ext.client.probe import read_response, recv_exact, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.framing import SIZE, decode_request_header, decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import CRC_POS, LENGTH_POS
from kafka_ext.protocol.records import Record, build_batch
from tests.unit.protocol.strategies import message_values

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_VERSIONS = 18

# How long a healthy broker may take to answer or to close a connection (generous: CI is slow).
ANSWER_TIMEOUT_S = 15.0
# How long a client waits for progress of the steady traffic before calling the broker stuck.
PROGRESS_TIMEOUT_S = 30.0
FUZZ_SEED = 20261122
FUZZ_FRAMES = 500
# A Fetch that decodes from garbage may long-poll; only short waits are awaited in the fuzz.
FUZZ_MAX_AWAITED_FETCH_WAIT_MS = 2000

_PREFIX_ONLY = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id


# -- raw protocol helpers --------------------------------------------------------------------


def connect(broker: Any) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S)


def api_versions_request() -> Any:
    return registry()["ApiVersionsRequest"].cls(client_software_name="bad-input-tests",
                                                client_software_version="1")


def assert_answers_api_versions(broker: Any) -> None:
    """A fresh connection still gets a normal ApiVersions v3 answer."""
    with connect(broker) as sock:
        response = round_trip(sock, API_VERSIONS, 3, api_versions_request())
    assert response.error_code == 0
    assert {k.api_key for k in response.api_keys} >= {API_PRODUCE, API_FETCH, API_VERSIONS}


def assert_closed_by_server(sock: socket.socket, what: str) -> None:
    """The server closes sock (EOF or reset) within the deadline, without answering."""
    sock.settimeout(ANSWER_TIMEOUT_S)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"{what}: connection still open after {ANSWER_TIMEOUT_S}s")
    assert data == b"", f"{what}: expected the connection closed, got {len(data)} bytes {data[:64]!r}"


def produce_request(topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
    cls = registry()["ProduceRequest"].cls
    return cls(transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=partition, records=records)])])


def produce_partition_response(sock: socket.socket, topic: str, records: bytes,
                               version: int = 9) -> Any:
    response = round_trip(sock, API_PRODUCE, version, produce_request(topic, 0, records))
    [topic_response] = response.responses
    [partition_response] = topic_response.partition_responses
    return partition_response


def latest_offset(broker: Any, topic: str, partition: int = 0) -> int:
    """ListOffsets v7 with LATEST (-1): the log end offset."""
    cls = registry()["ListOffsetsRequest"].cls
    request = cls(replica_id=-1, isolation_level=0, topics=[cls.ListOffsetsTopic(
        name=topic, partitions=[cls.ListOffsetsPartition(partition_index=partition,
                                                         current_leader_epoch=-1,
                                                         timestamp=-1)])])
    with connect(broker) as sock:
        response = round_trip(sock, API_LIST_OFFSETS, 7, request)
    [part] = response.topics[0].partitions
    assert part.error_code == 0
    return part.offset


def valid_batch(values: list[bytes]) -> bytearray:
    now_ms = int(time.time() * 1000)
    return bytearray(build_batch([Record(i, now_ms, None, v) for i, v in enumerate(values)]))


def advertised_ranges(broker: Any) -> dict[int, tuple[int, int]]:
    with connect(broker) as sock:
        response = round_trip(sock, API_VERSIONS, 3, api_versions_request())
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def create_topic(broker: Any, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result(timeout=60)


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- steady traffic on other connections -----------------------------------------------------


class SteadyTraffic:
    """A confluent-kafka producer and consumer exchanging numbered messages while tests abuse
    the broker on other sockets; `finish` checks that the consumer read exactly what was sent."""

    def __init__(self, broker: Any) -> None:
        self.topic = new_topic_name("steady")
        create_topic(broker, self.topic)
        self._producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                   "linger.ms": 0})
        self._consumer = Consumer({"bootstrap.servers": broker.bootstrap,
                                   "group.id": "bad-input-steady", "enable.auto.commit": False,
                                   "fetch.wait.max.ms": 50})
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self.sent = 0
        self.delivery_errors: list[str] = []
        self.received: list[bytes] = []
        self.consumer_errors: list[str] = []
        self._changed = threading.Condition()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._producer_thread = threading.Thread(target=self._produce_loop, daemon=True)
        self._consumer_thread = threading.Thread(target=self._consume_loop, daemon=True)
        self._producer_thread.start()
        self._consumer_thread.start()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.delivery_errors.append(str(err))

    def _produce_loop(self) -> None:
        while not self._stop_producing.is_set():
            self._producer.produce(self.topic, value=b"%08d" % self.sent, partition=0,
                                   on_delivery=self._on_delivery)
            self.sent += 1
            self._producer.poll(0.005)  # paces to a few hundred messages a second

    def _consume_loop(self) -> None:
        while not self._stop_consuming.is_set():
            msg = self._consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error() is not None:
                self.consumer_errors.append(str(msg.error()))
                continue
            with self._changed:
                self.received.append(msg.value())
                self._changed.notify_all()

    def wait_for_progress(self, count: int = 20) -> None:
        """Block until the consumer has read `count` more messages (the broker serves others)."""
        with self._changed:
            target = len(self.received) + count
            ok = self._changed.wait_for(lambda: len(self.received) >= target, PROGRESS_TIMEOUT_S)
        assert ok, (f"steady traffic stalled at {len(self.received)} messages "
                    f"(sent {self.sent}, delivery errors {self.delivery_errors[:3]})")

    def finish(self) -> None:
        """Stop producing, then assert the consumer read exactly the sent sequence, in order."""
        self._stop_producing.set()
        self._producer_thread.join(timeout=PROGRESS_TIMEOUT_S)
        remaining = self._producer.flush(PROGRESS_TIMEOUT_S)
        assert remaining == 0, f"{remaining} messages never delivered"
        assert self.delivery_errors == []
        with self._changed:
            self._changed.wait_for(lambda: len(self.received) >= self.sent, PROGRESS_TIMEOUT_S)
        self.close()
        assert self.consumer_errors == []
        assert self.sent > 0
        assert self.received == [b"%08d" % i for i in range(self.sent)]

    def close(self) -> None:
        self._stop_producing.set()
        self._stop_consuming.set()
        self._producer_thread.join(timeout=PROGRESS_TIMEOUT_S)
        self._consumer_thread.join(timeout=PROGRESS_TIMEOUT_S)
        self._consumer.close()


@pytest.fixture
def traffic(broker: Any) -> Iterator[SteadyTraffic]:
    steady = SteadyTraffic(broker)
    steady.wait_for_progress()
    yield steady
    steady.close()


def assert_no_traceback(broker: Any) -> None:
    log = broker.log()
    assert "Traceback" not in log, log


# -- framing ---------------------------------------------------------------------------------


def full_api_versions_frame(body_bytes: int) -> bytes:
    """A valid ApiVersions v3 request whose frame body is exactly body_bytes long."""
    base = len(encode_request(API_VERSIONS, 3, 7, "", api_versions_request())) - 4
    frame = encode_request(API_VERSIONS, 3, 7, "c" * (body_bytes - base), api_versions_request())
    assert len(frame) == 4 + body_bytes
    return frame


def test_truncated_frame_then_close_leaves_broker_serving(broker: Any,
                                                          traffic: SteadyTraffic) -> None:
    frame = full_api_versions_frame(100)
    for _ in range(20):
        with connect(broker) as sock:
            sock.sendall(frame[:4 + 50])
    assert_answers_api_versions(broker)
    traffic.wait_for_progress()
    traffic.finish()
    assert_no_traceback(broker)


def test_truncated_frame_held_open_does_not_block_other_clients(broker: Any,
                                                                traffic: SteadyTraffic) -> None:
    frame = full_api_versions_frame(100)
    holders = [connect(broker) for _ in range(10)]
    try:
        for sock in holders:
            sock.sendall(frame[:4 + 50])
        assert_answers_api_versions(broker)
        traffic.wait_for_progress()
        # The rest of the frame arrives late: the buffered half is kept, the request is served.
        for sock in holders:
            sock.sendall(frame[4 + 50:])
        for sock in holders:
            correlation_id, response = read_response(sock, API_VERSIONS, 3)
            assert (correlation_id, response.error_code) == (7, 0)
    finally:
        for sock in holders:
            sock.close()
    traffic.finish()


def test_request_sent_one_byte_at_a_time_is_answered(broker: Any) -> None:
    frame = full_api_versions_frame(100)
    with connect(broker) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(frame)):
            sock.sendall(frame[i:i + 1])
        correlation_id, response = read_response(sock, API_VERSIONS, 3)
    assert (correlation_id, response.error_code) == (7, 0)


@pytest.mark.parametrize("size", [0x7FFFFFFF, 0x7FFFFFFF - 3, 104857601],
                         ids=["2GiB", "2GiB-minus-3", "limit-plus-one"])
def test_size_prefix_above_limit_closes_before_body(broker: Any, traffic: SteadyTraffic,
                                                    size: int) -> None:
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(size))  # no body at all: the server must not wait for it
        assert_closed_by_server(sock, f"size prefix {size}")
    assert_answers_api_versions(broker)
    traffic.finish()


@pytest.mark.parametrize("size", [-1, -100, -0x80000000], ids=["-1", "-100", "int32-min"])
def test_negative_size_prefix_closes_connection(broker: Any, traffic: SteadyTraffic,
                                                size: int) -> None:
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(size) + b"\x00" * 16)
        assert_closed_by_server(sock, f"size prefix {size}")
    assert_answers_api_versions(broker)
    traffic.finish()


def test_frame_shorter_than_request_header_closes_connection(broker: Any) -> None:
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(3) + b"\x00\x12\x00")
        assert_closed_by_server(sock, "3-byte frame")
    assert_answers_api_versions(broker)


def test_empty_frame_closes_connection(broker: Any) -> None:
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(0))
        assert_closed_by_server(sock, "0-byte frame")
    assert_answers_api_versions(broker)


# -- API keys and versions -------------------------------------------------------------------


# 88/89 are Kafka 4.1's streams-group keys (KIP-1071), which we do not serve.
@pytest.mark.parametrize("api_key", [9999, -1, 88, 1000, 89], ids=lambda k: f"key{k}")
def test_unknown_or_unserved_api_key_closes_connection(broker: Any, traffic: SteadyTraffic,
                                                       api_key: int) -> None:
    advertised = advertised_ranges(broker)
    assert api_key not in advertised
    with connect(broker) as sock:
        sock.sendall(_PREFIX_ONLY.pack(10, api_key, 0, 5) + b"\xff\xff")
        assert_closed_by_server(sock, f"API key {api_key}")
    assert_answers_api_versions(broker)
    traffic.finish()


def test_unsupported_fetch_version_closes_connection(broker: Any) -> None:
    with connect(broker) as sock:
        sock.sendall(_PREFIX_ONLY.pack(10, API_FETCH, 99, 5) + b"\xff\xff")
        assert_closed_by_server(sock, "Fetch v99")
    assert_answers_api_versions(broker)


def test_produce_above_kafka_39s_versions_closes_connection(broker: Any) -> None:
    """Produce v12 is Kafka 4.0's, not 3.9's: a version we do not serve closes the connection,
    as Kafka's broker does for any version it does not know."""
    topic = new_topic_name("produce-v12")
    create_topic(broker, topic)
    header = struct.pack(">hhih", API_PRODUCE, 12, 5, 1) + b"t"
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(len(header) + 8) + header + b"\0" * 8)
        assert_closed_by_server(sock, "Produce v12")
    assert latest_offset(broker, topic) == 0
    assert_answers_api_versions(broker)


@pytest.mark.parametrize("records", [
    pytest.param(struct.pack(">qi", 0, 5) + b"\0" * 5, id="message smaller than its header"),
    pytest.param(struct.pack(">qi", 0, 14) + b"\0\0\0\0\x09" + b"\0" * 9, id="magic 9"),
    pytest.param(struct.pack(">qi", 0, 14) + b"\xde\xad\xbe\xef\0\0" + b"\xff" * 8,
                 id="bad crc"),
])
def test_produce_v2_garbage_message_set_is_corrupt_message_and_the_connection_stays(
        broker: Any, records: bytes) -> None:
    topic = new_topic_name("produce-v2-garbage")
    create_topic(broker, topic)
    with connect(broker) as sock:
        answer = produce_partition_response(sock, topic, records, version=2)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)
        answer = produce_partition_response(sock, topic, bytes(valid_batch([b"v2"])), version=2)
        assert (answer.error_code, answer.base_offset) == (0, 0)  # a v2 batch at v2, as Kafka
    assert latest_offset(broker, topic) == 1


def test_api_versions_unsupported_version_answers_v0_with_ranges(broker: Any) -> None:
    with connect(broker) as sock:
        sock.sendall(_PREFIX_ONLY.pack(10, API_VERSIONS, 99, 42) + b"\xff\xff")
        correlation_id, response = read_response(sock, API_VERSIONS, 0)
        assert correlation_id == 42
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[API_VERSIONS] == (0, 4)
        assert ranges[API_PRODUCE][1] >= 9 and ranges[API_FETCH][1] >= 12
        assert ranges == advertised_ranges(broker)
        # The connection stays usable: the client retries with a version we serve.
        assert round_trip(sock, API_VERSIONS, 3, api_versions_request()).error_code == 0


def test_malformed_metadata_body_closes_connection(broker: Any) -> None:
    frame = encode_request(API_METADATA, 12, 9, "t", registry()["MetadataRequest"].cls(
        topics=[registry()["MetadataRequest"].cls.MetadataRequestTopic(name="abc")]))
    cut = frame[4:len(frame) - 6]  # the topic array says 1 entry; its bytes are cut short
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(len(cut)) + cut)
        assert_closed_by_server(sock, "truncated Metadata v12 body")
    assert_answers_api_versions(broker)


def test_valid_request_before_malformed_one_is_answered_first(broker: Any) -> None:
    """Kafka reads one request at a time per connection, so the earlier answer is never lost."""
    good = encode_request(API_VERSIONS, 3, 1, "t", api_versions_request())
    bad = _PREFIX_ONLY.pack(10, 9999, 0, 2) + b"\xff\xff"
    with connect(broker) as sock:
        sock.sendall(good + bad)
        correlation_id, response = read_response(sock, API_VERSIONS, 3)
        assert (correlation_id, response.error_code) == (1, 0)
        assert_closed_by_server(sock, "API key 9999 after ApiVersions")


# -- garbage bodies for every advertised API -------------------------------------------------


@dataclass(slots=True)
class FuzzTally:
    closed: int = 0
    answered: int = 0
    silent: int = 0  # decoded requests that need no answer yet (acks=0, long-poll Fetch)


def _garbage_body(rng: random.Random, api_key: int, version: int) -> bytes:
    """Pure random bytes, or a valid default body with bytes flipped, cut or appended."""
    if rng.random() < 0.5:
        return rng.randbytes(rng.randint(0, 300))
    mtype = registry().requests[api_key]
    body = bytearray(mtype.encode(mtype.cls(), version)) if version in mtype.versions else bytearray()
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.5 and body:
            body[rng.randrange(len(body))] = rng.randrange(256)
        elif choice < 0.75 and body:
            del body[rng.randrange(len(body)):]
        else:
            body += rng.randbytes(rng.randint(1, 40))
    return bytes(body)


def _decoded(frame: bytes, api_key: int, version: int) -> Any | None:
    """What the broker's decoder makes of the frame (None if it raises DecodeError)."""
    mtype = registry().requests[api_key]
    if version not in mtype.versions:
        return None
    try:
        _, pos = decode_request_header(frame)
        request, _ = mtype.decode(frame, version, pos)
    except DecodeError:
        return None
    return request


def _check_garbage_frame(broker: Any, api_key: int, version: int, body: bytes,
                         correlation_id: int, tally: FuzzTally) -> None:
    frame = _frame_with_header(api_key, version, correlation_id, body)
    request = _decoded(frame[4:], api_key, version)
    what = f"key {api_key} v{version} body {body.hex()}"
    with connect(broker) as sock:
        sock.sendall(frame)
        if request is None:
            assert_closed_by_server(sock, what)
            tally.closed += 1
            return
        if api_key == API_FETCH and request.max_wait_ms > FUZZ_MAX_AWAITED_FETCH_WAIT_MS:
            tally.silent += 1
            return
        # A probe after it: answered in order if the garbage request left the connection open.
        sock.sendall(encode_request(API_VERSIONS, 3, correlation_id + 1, "fuzz",
                                    api_versions_request()))
        try:
            size = SIZE.unpack(recv_exact(sock, 4))[0]
        except (ConnectionError, ConnectionResetError):
            tally.closed += 1  # a decodable request the handler refused: closing is allowed
            return
        except TimeoutError:
            pytest.fail(f"{what}: neither answered nor closed in {ANSWER_TIMEOUT_S}s")
        data = recv_exact(sock, size)
        got_id = struct.unpack_from(">i", data)[0]
        if api_key == API_PRODUCE and request.acks == 0 and got_id == correlation_id + 1:
            tally.silent += 1
            return
        assert got_id == correlation_id, f"{what}: answered correlation id {got_id}"
        decode_response(data, api_key, version)
        tally.answered += 1
        probe_id, _ = read_response(sock, API_VERSIONS, 3)
        assert probe_id == correlation_id + 1


def _frame_with_header(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A well-formed request header (v1 or v2 as the version needs) followed by `body`."""
    mtype = registry().requests[api_key]
    flexible = version in mtype.versions and mtype.is_flexible(version)
    client_id = b"fuzz"
    header = (struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
              + (b"\x00" if flexible else b""))
    return SIZE.pack(len(header) + len(body)) + header + body


def test_garbage_bodies_for_every_advertised_api_close_or_answer(broker: Any,
                                                                 traffic: SteadyTraffic) -> None:
    rng = random.Random(FUZZ_SEED)
    ranges = advertised_ranges(broker)
    keys = sorted(ranges)
    tally = FuzzTally()
    for i in range(FUZZ_FRAMES):
        api_key = keys[i % len(keys)]
        low, high = ranges[api_key]
        version = rng.randint(low, high)
        body = _garbage_body(rng, api_key, version)
        _check_garbage_frame(broker, api_key, version, body, 1000 + 2 * i, tally)
        if i % 100 == 99:
            traffic.wait_for_progress(5)
    assert tally.closed + tally.answered + tally.silent == FUZZ_FRAMES
    assert tally.closed > 0 and tally.answered > 0
    assert_answers_api_versions(broker)
    traffic.finish()
    assert_no_traceback(broker)


# Well-formed requests with random field values: each deserves an answer, never a close.
_ADVERTISED_REQUESTS = [(key, version) for key, (low, high) in {
    0: (3, 11), 1: (4, 17), 2: (1, 10), 3: (0, 12), 18: (0, 4), 19: (2, 7), 20: (1, 6),
    21: (0, 2), 23: (2, 4), 32: (1, 4), 33: (0, 2), 35: (1, 4), 37: (0, 3), 44: (0, 1),
    60: (0, 1)}.items() for version in range(low, high + 1)]
RANDOM_REQUESTS = 600


@st.composite
def _well_formed_requests(draw: st.DrawFn) -> tuple[int, int, Any]:
    api_key, version = draw(st.sampled_from(_ADVERTISED_REQUESTS))
    name = registry().requests[api_key].name
    return api_key, version, draw(message_values(name, version, with_extensions=False))


@settings(max_examples=RANDOM_REQUESTS, derandomize=True, database=None, deadline=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(drawn=_well_formed_requests())
def test_random_well_formed_requests_are_answered(broker: Any, drawn: tuple[int, int, Any]) -> None:
    api_key, version, request = drawn
    if api_key == API_FETCH:
        request.max_wait_ms = min(request.max_wait_ms, 200)  # no long polls in this test
    if api_key == ApiKey.JOIN_GROUP:
        # A join into a group another example joined waits up to that member's rebalance
        # timeout (a long poll, as in Kafka): each example gets a group of its own.
        request.group_id = f"wf-{uuid.uuid4()}"
    what = f"{registry().requests[api_key].name} v{version}: {request!r}"[:2000]
    with connect(broker) as sock:
        sock.sendall(encode_request(api_key, version, 11, "wf", request))
        sock.sendall(encode_request(API_VERSIONS, 3, 12, "wf", api_versions_request()))
        try:
            size = SIZE.unpack(recv_exact(sock, 4))[0]
        except (ConnectionError, TimeoutError) as exc:
            if api_key == API_PRODUCE and request.acks == 0:
                return  # acks=0 with a failed partition: closing is how Kafka tells the producer
            pytest.fail(f"{what}: no answer ({exc!r})\n{broker.log()[-3000:]}")
        data = recv_exact(sock, size)
        correlation_id = struct.unpack_from(">i", data)[0]
        if api_key == API_PRODUCE and request.acks == 0:
            assert correlation_id == 12, what  # acks=0: only the probe is answered
            return
        assert correlation_id == 11, what
        decode_response(data, api_key, version)
        assert read_response(sock, API_VERSIONS, 3)[0] == 12, what
    assert "Traceback" not in broker.log(), broker.log()[-5000:]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_by_null_topic_name_before_v12_never_gets_an_undecodable_answer(
        broker: Any, version: int) -> None:
    """Topic names are nullable (lookup by id) only from v12; v10-11 answers must still parse."""
    cls = registry()["MetadataRequest"].cls
    request = cls(topics=[cls.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)],
                  allow_auto_topic_creation=False)
    with connect(broker) as sock:
        sock.sendall(encode_request(API_METADATA, version, 31, "t", request))
        try:
            size = SIZE.unpack(recv_exact(sock, 4))[0]
        except ConnectionError:
            return  # refusing the request outright is acceptable
        data = recv_exact(sock, size)
        try:
            correlation_id, response = decode_response(data, API_METADATA, version)
        except DecodeError as exc:
            pytest.fail(f"Metadata v{version} answer does not decode ({exc}): {data.hex()}")
        assert correlation_id == 31
        assert [t.error_code != 0 for t in response.topics] == [True]


def test_create_topics_with_too_many_partitions_gets_an_error_answer(broker: Any,
                                                                    traffic: SteadyTraffic) -> None:
    """A well-formed but excessive CreateTopics is refused per topic; the connection stays."""
    cls = registry()["CreateTopicsRequest"].cls
    request = cls(timeout_ms=30000, topics=[
        cls.CreatableTopic(name=new_topic_name("huge"), num_partitions=20000,
                           replication_factor=1)])
    with connect(broker) as sock:
        sock.sendall(encode_request(19, 7, 21, "t", request))
        try:
            correlation_id, response = read_response(sock, 19, 7)
        except ConnectionError:
            pytest.fail(f"CreateTopics of 20000 partitions closed the connection:\n"
                        f"{broker.log()[-3000:]}")
        assert correlation_id == 21
        [topic] = response.topics
        assert topic.error_code != 0
        assert round_trip(sock, API_VERSIONS, 3, api_versions_request(), 22).error_code == 0
    traffic.finish()


# -- corrupt record batches ------------------------------------------------------------------


def test_produce_with_flipped_crc_byte_is_corrupt_message_and_appends_nothing(
        broker: Any, traffic: SteadyTraffic) -> None:
    topic = new_topic_name("crc")
    create_topic(broker, topic)
    with connect(broker) as sock:
        first = produce_partition_response(sock, topic, bytes(valid_batch([b"a", b"b"])))
        assert (first.error_code, first.base_offset) == (0, 0)
        assert latest_offset(broker, topic) == 2
        for flipped_pos in (CRC_POS, CRC_POS + 3, 61 + 2):  # CRC field, and a covered byte
            batch = valid_batch([b"c", b"d", b"e"])
            batch[flipped_pos] ^= 0x01
            response = produce_partition_response(sock, topic, bytes(batch))
            assert response.error_code == ErrorCode.CORRUPT_MESSAGE == 2
            assert response.base_offset == -1
            assert latest_offset(broker, topic) == 2
        # The same connection keeps working, and offsets continue where they were.
        after = produce_partition_response(sock, topic, bytes(valid_batch([b"f"])))
        assert (after.error_code, after.base_offset) == (0, 2)
    assert latest_offset(broker, topic) == 3
    traffic.finish()


@pytest.mark.parametrize("length_delta", [1, 40, 1 << 20, -1, -20, -(1 << 20)],
                         ids=["past+1", "past+40", "past+1MiB", "short-1", "short-20",
                              "negative"])
def test_batch_length_that_lies_is_corrupt_message(broker: Any, length_delta: int) -> None:
    topic = new_topic_name("length")
    create_topic(broker, topic)
    batch = valid_batch([b"x" * 30, b"y" * 30])
    (length,) = struct.unpack_from(">i", batch, LENGTH_POS)
    struct.pack_into(">i", batch, LENGTH_POS, length + length_delta)  # the CRC does not cover it
    with connect(broker) as sock:
        response = produce_partition_response(sock, topic, bytes(batch))
        assert response.error_code == ErrorCode.CORRUPT_MESSAGE
        assert latest_offset(broker, topic) == 0
        ok = produce_partition_response(sock, topic, bytes(valid_batch([b"z"])))
        assert (ok.error_code, ok.base_offset) == (0, 0)


def test_records_field_shorter_than_batch_header_is_corrupt_message(broker: Any) -> None:
    topic = new_topic_name("stub")
    create_topic(broker, topic)
    with connect(broker) as sock:
        response = produce_partition_response(sock, topic, bytes(valid_batch([b"x"]))[:40])
        assert response.error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(broker, topic) == 0


def test_valid_batch_followed_by_torn_batch_appends_nothing(broker: Any) -> None:
    """Kafka validates the whole records field before appending any batch of it."""
    topic = new_topic_name("torn")
    create_topic(broker, topic)
    records = bytes(valid_batch([b"ok"])) + bytes(valid_batch([b"torn", b"tail"]))[:-5]
    with connect(broker) as sock:
        response = produce_partition_response(sock, topic, records)
        assert response.error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(broker, topic) == 0


def test_acks_zero_produce_of_corrupt_batch_closes_connection(broker: Any,
                                                              traffic: SteadyTraffic) -> None:
    topic = new_topic_name("acks0")
    create_topic(broker, topic)
    batch = valid_batch([b"a"])
    batch[CRC_POS] ^= 0xFF
    with connect(broker) as sock:
        sock.sendall(encode_request(API_PRODUCE, 9, 3, "t",
                                    produce_request(topic, 0, bytes(batch), acks=0)))
        assert_closed_by_server(sock, "acks=0 produce with a bad CRC")
    assert latest_offset(broker, topic) == 0
    traffic.finish()


def test_acks_zero_produce_of_valid_batch_appends_without_answer(broker: Any) -> None:
    topic = new_topic_name("acks0ok")
    create_topic(broker, topic)
    with connect(broker) as sock:
        sock.sendall(encode_request(API_PRODUCE, 9, 3, "t",
                                    produce_request(topic, 0, bytes(valid_batch([b"a"])), acks=0)))
        # No answer to acks=0; the next request's answer comes first and the data is there.
        assert round_trip(sock, API_VERSIONS, 3, api_versions_request(), 4).error_code == 0
    assert latest_offset(broker, topic) == 1


# -- connection limits -----------------------------------------------------------------------


def test_idle_connection_is_closed_after_connections_max_idle_ms(broker_factory: Any) -> None:
    broker = broker_factory({"connections.max.idle.ms": "500"})
    with connect(broker) as idle:
        started = time.monotonic()
        assert_closed_by_server(idle, "idle connection")
        assert time.monotonic() - started >= 0.4
    with connect(broker) as used:
        assert round_trip(used, API_VERSIONS, 3, api_versions_request()).error_code == 0
        assert_closed_by_server(used, "connection idle after one request")
    frame = full_api_versions_frame(100)
    with connect(broker) as half:
        half.sendall(frame[:54])
        assert_closed_by_server(half, "idle connection holding half a frame")
    assert_answers_api_versions(broker)


def test_request_above_socket_request_max_bytes_closes_connection(broker_factory: Any) -> None:
    broker = broker_factory({"socket.request.max.bytes": "1024"})
    with connect(broker) as sock:
        sock.sendall(full_api_versions_frame(1000))  # under the limit: answered
        correlation_id, response = read_response(sock, API_VERSIONS, 3)
        assert (correlation_id, response.error_code) == (7, 0)
    with connect(broker) as sock:
        sock.sendall(full_api_versions_frame(1024))  # exactly the limit: answered
        assert read_response(sock, API_VERSIONS, 3)[1].error_code == 0
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(2000))  # the prefix alone is enough to refuse it
        assert_closed_by_server(sock, "2000-byte frame, prefix only")
    with connect(broker) as sock:
        try:
            sock.sendall(full_api_versions_frame(2000))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before all 2004 bytes are written
        assert_closed_by_server(sock, "2000-byte frame")
    assert_answers_api_versions(broker)


def test_broker_restart_after_abuse_keeps_acknowledged_data(broker: Any) -> None:
    topic = new_topic_name("restart")
    create_topic(broker, topic)
    with connect(broker) as sock:
        assert produce_partition_response(sock, topic, bytes(valid_batch([b"1", b"2"]))).error_code == 0
        bad = valid_batch([b"3"])
        bad[CRC_POS] ^= 0x10
        assert produce_partition_response(sock, topic, bytes(bad)).error_code == 2
    with connect(broker) as sock:
        sock.sendall(SIZE.pack(0x7FFFFFFF))
        assert_closed_by_server(sock, "2GiB prefix")
    broker.restart()
    assert latest_offset(broker, topic) == 2
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bad-input-restart",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + PROGRESS_TIMEOUT_S
        while len(values) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == [b"1", b"2"]



def test_two_batches_for_one_partition_are_invalid_record_and_nothing_is_appended(
        broker: Any) -> None:
    """Kafka takes exactly one batch per partition from Produce v3 on."""
    topic = new_topic_name("two-batches")
    create_topic(broker, topic)
    with connect(broker) as sock:
        both = bytes(valid_batch([b"a"])) + bytes(valid_batch([b"b"]))
        response = produce_partition_response(sock, topic, both)
        assert response.error_code == ErrorCode.INVALID_RECORD
        assert latest_offset(broker, topic) == 0
        one = produce_partition_response(sock, topic, bytes(valid_batch([b"c"])))
        assert (one.error_code, one.base_offset) == (0, 0)
