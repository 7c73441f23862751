"""Broker liveness at the active controller, on a clock the tests drive: the session
(broker.session.timeout.ms) and the heartbeat connection (broker.heartbeat.connection.loss.
timeout.ms), in BrokerHeartbeats alone and through QuorumController's fencing, which moves
leaderships and shrinks ISRs as a session timeout does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_ext.client.probe import PROBE_VERSION, api_versions_request
from kafka_ext.controller.cluster_control import IN_PROCESS, BrokerHeartbeats, BrokerListener
from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.quorum_controller import QuorumController, TopicCreation
from kafka_ext.network.connection import KafkaConnection
from kafka_ext.network.node_client import NodeChannels
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.framing import decode_request_header, encode_response
from kafka_ext.protocol.messages import registry
from kafka_ext.server.broker_lifecycle import (
    BrokerLifecycleManager,
    handle_broker_heartbeat,
    handle_broker_registration,
)
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.storage.log import UnifiedLog
from tests.unit.controller.test_quorum_controller import _normalise, _open_log, _run_now

SESSION_MS = 9000  # Kafka's broker.session.timeout.ms
GRACE_MS = 500  # broker.heartbeat.connection.loss.timeout.ms
CAUGHT_UP = 1 << 40  # a metadata offset past any broker epoch


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000.0

    def __call__(self) -> float:
        return self.now_ms

    def advance(self, ms: float) -> None:
        self.now_ms += ms


# -- BrokerHeartbeats alone ----------------------------------------------------------------


def _image(*broker_ids: int, epoch: int = 10) -> MetadataImage:
    reg = registry()
    records: list[tuple[str, Any]] = []
    for broker_id in broker_ids:
        records.append(("RegisterBrokerRecord", reg["RegisterBrokerRecord"].cls(
            broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=epoch + broker_id,
            end_points=[], features=[], rack=None, fenced=False, in_controlled_shutdown=False,
            log_dirs=[])))
    return MetadataImage().apply_all(0, records)


def test_a_lost_heartbeat_connection_expires_the_session_after_the_grace() -> None:
    image = _image(1, 2)
    beats = BrokerHeartbeats(SESSION_MS, GRACE_MS)
    beats.reset([1, 2], 0)
    beats.heard_on(1, 11, "conn-1")
    beats.heard_on(2, 12, "conn-2")
    assert beats.connection_lost("conn-2", 100) == [2]
    assert beats.next_expiry_ms(image, 100) == 100 + GRACE_MS
    assert beats.expired(image, 100 + GRACE_MS) == []
    assert beats.expired(image, 101 + GRACE_MS) == [2]


def test_a_heartbeat_on_a_new_connection_within_the_grace_ends_it() -> None:
    image = _image(1)
    beats = BrokerHeartbeats(SESSION_MS, GRACE_MS)
    beats.reset([1], 0)
    beats.heard_on(1, 11, "a")
    beats.connection_lost("a", 100)
    beats.touch(1, 400)
    beats.heard_on(1, 11, "b")
    assert beats.expired(image, 5000) == []
    assert beats.next_expiry_ms(image, 5000) == 400 + SESSION_MS
    # The new connection is the one watched from now on.
    assert beats.connection_lost("b", 6000) == [1]
    assert beats.expired(image, 6001 + GRACE_MS) == [1]


def test_a_connection_the_broker_no_longer_heartbeats_on_is_stale() -> None:
    image = _image(1)
    beats = BrokerHeartbeats(SESSION_MS, GRACE_MS)
    beats.reset([1], 0)
    beats.heard_on(1, 11, "old")
    beats.heard_on(1, 11, "new")  # both open; the broker moved to the new one
    assert beats.connection_lost("old", 100) == []
    assert beats.connection_lost("never-used", 100) == []
    assert beats.expired(image, 100 + 10 * GRACE_MS) == []


def test_a_loss_of_an_earlier_incarnation_is_not_counted_against_the_registered_one() -> None:
    beats = BrokerHeartbeats(SESSION_MS, GRACE_MS)
    beats.reset([1], 0)
    beats.heard_on(1, 3, "incarnation-at-3")
    beats.connection_lost("incarnation-at-3", 100)
    image = _image(1)  # registered since with epoch 11, nothing heard of it yet
    assert beats.expired(image, 100 + 10 * GRACE_MS) == []


def test_a_new_controller_term_forgets_the_connections_of_the_last() -> None:
    image = _image(1)
    beats = BrokerHeartbeats(SESSION_MS, GRACE_MS)
    beats.reset([1], 0)
    beats.heard_on(1, 11, "to-the-old-term")
    beats.connection_lost("to-the-old-term", 100)
    beats.reset([1], 200)  # this node leads again, in a new term
    assert beats.expired(image, 200 + SESSION_MS) == []
    assert beats.next_expiry_ms(image, 300) == 200 + SESSION_MS
    beats.heard_on(1, 11, "kept-open")  # a connection from the old term, heard again
    assert beats.connection_lost("to-the-old-term", 400) == []


def test_connection_loss_ignored_when_turned_off() -> None:
    image = _image(1)
    beats = BrokerHeartbeats(SESSION_MS, -1)
    beats.reset([1], 0)
    beats.heard_on(1, 11, "a")
    beats.connection_lost("a", 100)
    assert beats.expired(image, SESSION_MS) == []
    assert beats.expired(image, SESSION_MS + 1) == [1]


def test_a_fenced_broker_is_not_fenced_again() -> None:
    image = _image(1)
    fenced = image.apply_all(image.offset + 1, [("FenceBrokerRecord", registry()[
        "FenceBrokerRecord"].cls(id=1, epoch=11))])
    beats = BrokerHeartbeats(SESSION_MS, 0)
    beats.reset([1], 0)
    beats.heard_on(1, 11, "a")
    beats.connection_lost("a", 100)
    assert beats.expired(image, 101) == [1]
    assert beats.expired(fenced, 101) == [] and beats.next_expiry_ms(fenced, 101) is None


# -- QuorumController: fencing on a clock --------------------------------------------------


@pytest.fixture
async def metadata_log(tmp_path: Path) -> AsyncIterator[UnifiedLog]:
    log = _open_log(tmp_path)
    yield log
    log.close()


def _liveness_controller(log: UnifiedLog, grace_ms: int) -> tuple[QuorumController, Clock]:
    controller = QuorumController(
        1, log, default_partitions=3, default_replication_factor=3,
        validate_topic_config=_normalise, run_blocking=_run_now,
        broker_session_timeout_ms=SESSION_MS, broker_connection_loss_timeout_ms=grace_ms)
    controller.load()
    clock = Clock()
    controller.clock_ms = clock
    return controller, clock


@pytest.fixture
async def cluster(metadata_log: UnifiedLog) -> tuple[QuorumController, Clock, dict[int, int]]:
    """Brokers 1-3 registered and unfenced, each heartbeating on connection "conn-<id>", and
    "orders" with 3 partitions of 3 replicas led by 1, 2 and 3."""
    controller, clock = _liveness_controller(metadata_log, GRACE_MS)
    await controller.bootstrap()
    epochs = {b: await _join(controller, b, f"conn-{b}") for b in (1, 2, 3)}
    [created] = await controller.create_topics([TopicCreation("orders", 3, 3)], False)
    assert created.error == ErrorCode.NONE
    return controller, clock, epochs


async def _join(controller: QuorumController, broker_id: int, connection: Hashable) -> int:
    epoch = await controller.register_broker(
        broker_id, uuid.uuid4(), [BrokerListener("PLAINTEXT", "h", 9090 + broker_id, 0)], None,
        [], connection)
    await _beat(controller, broker_id, epoch, connection)
    return epoch


async def _beat(controller: QuorumController, broker_id: int, epoch: int,
                connection: Hashable) -> None:
    answer = await controller.broker_heartbeat(broker_id, epoch, CAUGHT_UP, False, False,
                                               None, connection)
    assert not answer.is_fenced


def _fenced(controller: QuorumController) -> set[int]:
    return {b.broker_id for b in controller.image.brokers.values() if b.fenced}


def _partitions(controller: QuorumController) -> dict[int, tuple[int, tuple[int, ...]]]:
    parts = controller.image.topics_by_name["orders"].partitions
    return {p: (part.leader, part.isr) for p, part in parts.items()}


async def test_connection_lost_then_fenced_after_the_grace_with_leaderships_and_isrs_moved(
        cluster: tuple[QuorumController, Clock, dict[int, int]]) -> None:
    controller, clock, _ = cluster
    before = _partitions(controller)
    controller.broker_connection_lost("conn-2")
    assert controller.seconds_until_a_session_expires() == pytest.approx((GRACE_MS + 1) / 1000)
    clock.advance(GRACE_MS)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set()
    clock.advance(1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {2}
    for partition, (leader, isr) in _partitions(controller).items():
        # Leaders that stayed alive keep leading with 2 out of the ISR (their high watermark
        # no longer waits for it); 2's own partition moved to an in-sync replica.
        assert set(isr) == {1, 3}
        was = before[partition][0]
        assert leader == was if was != 2 else leader in (1, 3)
    assert controller.live_brokers == {1, 3}


async def test_connection_lost_then_heartbeat_on_a_new_connection_within_the_grace(
        cluster: tuple[QuorumController, Clock, dict[int, int]]) -> None:
    controller, clock, epochs = cluster
    before = _partitions(controller)
    controller.broker_connection_lost("conn-2")
    clock.advance(GRACE_MS - 1)
    await _beat(controller, 2, epochs[2], "conn-2b")
    clock.advance(SESSION_MS - GRACE_MS + 1)  # long past the grace: t0 + 9000
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set() and _partitions(controller) == before
    clock.advance(1)  # brokers 1 and 3 last heartbeat at t0: their sessions end, not 2's
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {1, 3}


async def test_a_stale_connection_closing_after_a_new_registration_fences_nobody(
        cluster: tuple[QuorumController, Clock, dict[int, int]]) -> None:
    controller, clock, epochs = cluster
    # Broker 2 goes silent with its connection open (a pause); its session ends.
    clock.advance(SESSION_MS + 1)
    for broker_id in (1, 3):
        await _beat(controller, broker_id, epochs[broker_id], f"conn-{broker_id}")
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {2}
    # It comes back as a new incarnation on a new connection, and is unfenced.
    new_epoch = await _join(controller, 2, "conn-2-restarted")
    assert new_epoch != epochs[2]
    # The old process's heartbeat, late, on the old connection: refused, and not watched.
    with pytest.raises(KafkaError) as refused:
        await controller.broker_heartbeat(2, epochs[2], CAUGHT_UP, False, False, None,
                                          "conn-2")
    assert refused.value.code == ErrorCode.STALE_BROKER_EPOCH
    controller.broker_connection_lost("conn-2")  # the old connection closes at last
    clock.advance(10 * GRACE_MS)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set()


async def test_with_the_grace_turned_off_only_the_session_timeout_fences(
        metadata_log: UnifiedLog) -> None:
    controller, clock = _liveness_controller(metadata_log, -1)
    await controller.bootstrap()
    epochs = {b: await _join(controller, b, f"conn-{b}") for b in (1, 2)}
    controller.broker_connection_lost("conn-2")
    assert controller.seconds_until_a_session_expires() == pytest.approx(SESSION_MS / 2000)
    clock.advance(SESSION_MS)
    await _beat(controller, 1, epochs[1], "conn-1")
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set()
    clock.advance(1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {2}


async def test_a_grace_of_zero_fences_at_the_next_timer_wake(
        metadata_log: UnifiedLog) -> None:
    controller, clock = _liveness_controller(metadata_log, 0)
    await controller.bootstrap()
    await _join(controller, 2, "conn-2")
    controller.broker_connection_lost("conn-2")
    assert controller.seconds_until_a_session_expires() == pytest.approx(0.001)
    clock.advance(1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {2}


async def test_the_active_controllers_own_broker_has_only_its_session(
        metadata_log: UnifiedLog) -> None:
    """A combined node's broker asks its own controller in process while that leads: the
    connection it heartbeat on before (to itself, while it did not lead) is no longer
    watched, and only its session fences it."""
    controller, clock = _liveness_controller(metadata_log, GRACE_MS)
    await controller.bootstrap()
    epoch = await _join(controller, 1, "conn-1-to-itself")
    await _beat(controller, 1, epoch, IN_PROCESS)
    controller.broker_connection_lost("conn-1-to-itself")
    clock.advance(SESSION_MS)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set()
    clock.advance(1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {1}


async def test_the_fencing_timer_wakes_when_a_heartbeat_connection_closes(
        cluster: tuple[QuorumController, Clock, dict[int, int]]) -> None:
    controller, _, _ = cluster
    sleeping = asyncio.ensure_future(controller.wait_for_a_session_deadline())
    await asyncio.sleep(0)
    assert not sleeping.done()  # until the sessions' deadline, seconds away
    controller.broker_connection_lost("conn-3")
    await asyncio.wait_for(sleeping, 5)


# -- the wiring: the connection a request came on, watched until it closes -----------------


def _context(controller: QuorumController, connection: KafkaConnection) -> Any:
    return RequestContext(header=None, api_version=0,
                          broker=SimpleNamespace(controller=controller, cluster_id="c"),
                          connection=connection)


async def test_the_connection_a_heartbeat_came_on_is_watched_until_it_closes(
        metadata_log: UnifiedLog) -> None:
    controller, clock = _liveness_controller(metadata_log, GRACE_MS)
    await controller.bootstrap()
    reg = registry()
    connection = KafkaConnection(_no_handler, 1 << 20, lambda _: None)
    ctx = _context(controller, connection)
    Registration = reg["BrokerRegistrationRequest"].cls
    registered = await handle_broker_registration(ctx, Registration(
        broker_id=2, cluster_id="c", incarnation_id=uuid.uuid4(),
        listeners=[Registration.Listener(name="PLAINTEXT", host="h", port=1,
                                         security_protocol=0)],
        features=[], rack=None, log_dirs=[], previous_broker_epoch=-1))
    assert registered.error_code == 0
    heartbeat = reg["BrokerHeartbeatRequest"].cls(
        broker_id=2, broker_epoch=registered.broker_epoch, current_metadata_offset=CAUGHT_UP,
        want_fence=False, want_shut_down=False, offline_log_dirs=[])
    answered = await handle_broker_heartbeat(ctx, heartbeat)
    assert answered.error_code == 0 and not answered.is_fenced
    assert len(connection.lost_callbacks) == 1  # one watch per connection
    connection.connection_lost(None)
    clock.advance(GRACE_MS + 1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == {2}


async def test_a_forwarded_heartbeat_does_not_watch_the_forwarding_nodes_connection(
        cluster: tuple[QuorumController, Clock, dict[int, int]]) -> None:
    controller, clock, epochs = cluster
    connection = KafkaConnection(_no_handler, 1 << 20, lambda _: None)
    ctx = _context(controller, connection)
    ctx.forwarded = True
    heartbeat = registry()["BrokerHeartbeatRequest"].cls(
        broker_id=3, broker_epoch=epochs[3], current_metadata_offset=CAUGHT_UP,
        want_fence=False, want_shut_down=False, offline_log_dirs=[])
    await handle_broker_heartbeat(ctx, heartbeat)
    assert connection.lost_callbacks == []
    connection.connection_lost(None)
    clock.advance(GRACE_MS + 1)
    await controller.fence_expired_brokers()
    assert _fenced(controller) == set()


async def _no_handler(connection: KafkaConnection, frame: Any) -> None:
    return None


# -- the broker's side: heartbeat again at once ------------------------------------------


async def test_a_broker_heartbeats_at_once_when_its_active_controllers_connection_closes(
        ) -> None:
    config = SimpleNamespace(values={"broker.heartbeat.interval.ms": 2000,
                                     "broker.session.timeout.ms": SESSION_MS})
    raft = SimpleNamespace(leader_id=1, is_leader=False)
    lifecycle = BrokerLifecycleManager(SimpleNamespace(config=config, controller=SimpleNamespace(
        raft=raft)))
    lifecycle.controller_connection_lost(3)  # a controller of an earlier term
    assert not lifecycle._heartbeat_now.is_set()
    lifecycle.controller_connection_lost(1)
    assert lifecycle._heartbeat_now.is_set()
    lifecycle._heartbeat_now.clear()
    # This node leads now; a heartbeat it sent itself over a connection while it did not may
    # have arrived: the next one, in process, replaces what the controller watches.
    raft.leader_id = 2
    raft.is_leader = True
    lifecycle.controller_connection_lost(2)
    assert lifecycle._heartbeat_now.is_set()


async def test_node_channels_report_the_loss_of_connections_that_were_open_only() -> None:
    """A connection that served requests is reported when it closes; one that failed while
    connecting (the peer accepted and dropped it) is not, so nobody redials in a loop."""
    lost: list[int] = []
    answering = True

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if answering:
            size = int.from_bytes(await reader.readexactly(4), "big")
            header, _ = decode_request_header(await reader.readexactly(size))
            answer = registry().responses[ApiKey.API_VERSIONS]
            writer.writelines(encode_response(header.correlation_id, 0, answer, PROBE_VERSION,
                                              answer.cls(error_code=0, api_keys=[],
                                                         throttle_time_ms=0)))
            await writer.drain()
        writer.close()  # then the peer goes away

    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    channels = NodeChannels(lambda _: ("127.0.0.1", port), "kafka-ext-heartbeat-9",
                            on_connection_lost=lost.append)
    try:
        with pytest.raises(ConnectionError):
            await channels.request(1, ApiKey.API_VERSIONS, PROBE_VERSION,
                                   api_versions_request(NODE_SOFTWARE_NAME), 5)
        assert lost == [1]
        answering = False
        with pytest.raises(ConnectionError):
            await channels.request(1, ApiKey.API_VERSIONS, PROBE_VERSION,
                                   api_versions_request(NODE_SOFTWARE_NAME), 5)
        assert lost == [1]
    finally:
        await channels.close()
        server.close()
        await server.wait_closed()
