"""A broker's life as the controller sees it (Kafka's BrokerLifecycleManager), and the
controller's answers: BrokerRegistration (62) and BrokerHeartbeat (63).

At start the broker registers its listeners, rack and log dirs with the active controller and
heartbeats every broker.heartbeat.interval.ms with the metadata offset it has applied; the
controller unfences it once it has caught up, and it finishes starting then. A broker whose
heartbeats stop is fenced after broker.session.timeout.ms. On SIGTERM it asks for a controlled
shutdown: its leaderships move first, then the controller lets it go.

Registration and heartbeats have a connection of their own (`Broker.heartbeat_channels`, as
Kafka's BrokerLifecycleManager has its own channel), and the active controller watches it: once
it closes, the broker is fenced after broker.heartbeat.connection.loss.timeout.ms unless it
heartbeats again on a new one, which a live broker does at once (`controller_connection_lost`).
So a broker whose process dies is fenced within that grace, not a whole session.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.cluster_control import IN_PROCESS, BrokerListener, HeartbeatAnswer
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

if TYPE_CHECKING:
    from kafka_ext.network.connection import KafkaConnection
    from kafka_ext.server.broker import Broker
    from kafka_ext.server.dispatcher import RequestContext

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.2
# A heartbeat asked for at once (its connection closed, a log dir went offline) still starts
# this long after the one before: a controller that drops each connection is not asked in a loop.
HEARTBEAT_AGAIN_MIN_S = 0.05
CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0
_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# What goes on the broker's own connection to the controller (Broker.heartbeat_channels).
_LIFECYCLE_APIS = frozenset({ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT})
# KafkaConnection.state key: the controller watches this connection close.
_WATCHED = "broker_heartbeat_connection"
_reg = registry()


class BrokerLifecycleManager:
    """Registration and heartbeats of this broker; owned by the broker's event loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        # What a registration presents as the epoch before it (KIP-966): the last clean
        # shutdown's at start, then this process's own (a re-registration lost nothing).
        self.previous_broker_epoch = -1
        self.fenced = True
        self._unfenced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        config = broker.config
        self.interval_s = int(str(config.values["broker.heartbeat.interval.ms"])) / 1000
        self.session_timeout_s = int(str(config.values["broker.session.timeout.ms"])) / 1000
        self._want_shutdown = False
        self._heartbeat_now = asyncio.Event()

    async def start(self) -> None:
        """Register, then heartbeat until unfenced (this broker then serves)."""
        self.previous_broker_epoch = self.broker.log_manager.clean_shutdown_broker_epoch
        self.broker_epoch = await self._with_retries(self._register)
        log.info("registered with the controller (broker epoch %d)", self.broker_epoch)
        self._task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        await self._unfenced.wait()
        log.info("unfenced by the controller")

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away, and wait until it says
        the broker may stop. Bounded: a controller that has not answered for a broker session
        (broker.session.timeout.ms) has fenced this broker or is gone (the last nodes of a
        cluster stopping have no quorum left), and nothing can move the leaderships then."""
        if self._task is None:
            return
        self._want_shutdown = True
        deadline = time.monotonic() + CONTROLLED_SHUTDOWN_TIMEOUT_S
        last_answer = time.monotonic()
        while time.monotonic() < deadline:
            try:
                answer = await asyncio.wait_for(self._heartbeat(), self.session_timeout_s)
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                if time.monotonic() - last_answer > self.session_timeout_s:
                    log.warning("controlled shutdown: no controller answer for %.0f s (%s); "
                                "stopping without it", self.session_timeout_s, exc)
                    break
                log.debug("controlled shutdown: %s; retrying", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            last_answer = time.monotonic()
            if answer.should_shut_down:
                log.info("controlled shutdown done: the controller moved our leaderships")
                break
            await asyncio.sleep(RETRY_BACKOFF_S)
        else:
            log.warning("controlled shutdown did not finish in %.0f s; stopping anyway",
                        CONTROLLED_SHUTDOWN_TIMEOUT_S)
        await self.stop()

    def heartbeat_now(self) -> None:
        """Send the next heartbeat at once (a log dir went offline: the controller must know)."""
        self._heartbeat_now.set()

    def controller_connection_lost(self, node_id: int) -> None:
        """A connection of heartbeat_channels closed. When it goes to the active controller,
        heartbeat again at once, on a new one, before the controller's
        broker.heartbeat.connection.loss.timeout.ms takes this broker for dead (a heartbeat
        on it may have arrived although its answer did not). That is this node itself when a
        heartbeat sent while it did not lead reached it leading again: the next one, in
        process, tells it no connection is to be watched. Connections to controllers of
        earlier terms do not matter."""
        if node_id == self.broker.controller.raft.leader_id:
            log.debug("connection to controller %d lost: heartbeating at once", node_id)
            self._heartbeat_now.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._heartbeat_now.clear()  # this heartbeat carries what was asked for so far
            started = loop.time()
            try:
                answer = await self._heartbeat()
            except KafkaError as exc:
                if exc.code in (ErrorCode.STALE_BROKER_EPOCH,
                                ErrorCode.BROKER_ID_NOT_REGISTERED):
                    log.warning("the controller lost our registration (%s): registering again",
                                exc.code.name)
                    self.broker_epoch = await self._with_retries(self._register)
                    continue
                log.debug("heartbeat failed: %s", exc)
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.debug("heartbeat failed: %s", exc)
            else:
                if answer.is_fenced != self.fenced:
                    log.info("the controller %s this broker",
                             "fenced" if answer.is_fenced else "unfenced")
                self.fenced = answer.is_fenced
                if not answer.is_fenced:
                    self._unfenced.set()
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(),
                                       self.interval_s if not self.fenced else RETRY_BACKOFF_S)
            except TimeoutError:
                pass
            else:
                await asyncio.sleep(started + HEARTBEAT_AGAIN_MIN_S - loop.time())

    async def _with_retries(self, call: Any) -> Any:
        while True:
            try:
                return await call()
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                log.info("waiting for the controller: %s", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _register(self) -> int:
        broker = self.broker
        cls = _reg["BrokerRegistrationRequest"].cls
        request = cls(broker_id=broker.node_id, cluster_id=broker.cluster_id,
                      incarnation_id=self.incarnation_id,
                      listeners=[cls.Listener(name=lst.name, host=lst.host, port=lst.port,
                                              security_protocol=lst.security_protocol)
                                 for lst in self.listeners()],
                      features=[], rack=broker.config.broker_rack,
                      log_dirs=broker.log_dir_failures.online_directory_ids(),
                      previous_broker_epoch=self.previous_broker_epoch)
        response = await self._to_controller(ApiKey.BROKER_REGISTRATION, 4, request)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "registration refused")
        self.previous_broker_epoch = int(response.broker_epoch)
        return int(response.broker_epoch)

    async def _heartbeat(self) -> HeartbeatAnswer:
        broker = self.broker
        request = _reg["BrokerHeartbeatRequest"].cls(
            broker_id=broker.node_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=broker.controller.raft.applied_offset,
            want_fence=False, want_shut_down=self._want_shutdown,
            offline_log_dirs=broker.log_dir_failures.offline_directory_ids())
        response = await self._to_controller(ApiKey.BROKER_HEARTBEAT, 1, request)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "heartbeat refused")
        return HeartbeatAnswer(response.is_caught_up, response.is_fenced,
                               response.should_shut_down)

    async def _to_controller(self, api_key: int, version: int, request: Any) -> Any:
        local = (answer_broker_registration if api_key == ApiKey.BROKER_REGISTRATION
                 else answer_broker_heartbeat)
        return await self.to_controller(api_key, version, request, local)

    async def to_controller(self, api_key: int, version: int, request: Any,
                            local: Callable[[Broker, Any], Awaitable[Any]]) -> Any:
        """The active controller's answer: `local`'s (this node's own handler) when it leads
        the quorum. NOT_CONTROLLER while there is no leader; ConnectionError, TimeoutError.
        Registration and heartbeats go on the broker's own connection to it."""
        broker = self.broker
        raft = broker.controller.raft
        if raft.is_leader:
            return await local(broker, request)
        if raft.leader_id < 0:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no active controller yet")
        channels = (broker.heartbeat_channels if api_key in _LIFECYCLE_APIS
                    else broker.node_channels)
        return await channels.request(raft.leader_id, api_key, version, request,
                                      raft.config.request_timeout_ms / 1000)

    def listeners(self) -> list[BrokerListener]:
        """The listeners clients reach this broker on (advertised, controller ones aside)."""
        config = self.broker.config
        bound = dict(zip((lst.name for lst in config.listeners), self.broker.bound_ports,
                         strict=False))
        return [BrokerListener(lst.name, lst.host or "localhost",
                               lst.port or bound.get(lst.name, 0),
                               _SECURITY_PROTOCOLS.get(config.security_protocol(lst.name), 0))
                for lst in config.advertised_listeners
                if lst.name not in config.controller_listener_names]


# -- the controller's side --------------------------------------------------------------------

async def answer_broker_registration(broker: Broker, request: Any,
                                     connection: Hashable | None = IN_PROCESS) -> Any:
    """`connection`: the one the request came on; IN_PROCESS for this node's own broker,
    None when not known (forwarded)."""
    Response = _reg["BrokerRegistrationResponse"].cls
    if request.cluster_id != broker.cluster_id:
        return Response(throttle_time_ms=0, error_code=ErrorCode.INCONSISTENT_CLUSTER_ID,
                        broker_epoch=-1)
    try:
        epoch = await broker.controller.register_broker(
            request.broker_id, request.incarnation_id,
            [BrokerListener(lst.name, lst.host, lst.port, lst.security_protocol)
             for lst in request.listeners], request.rack, list(request.log_dirs or ()),
            connection, request.previous_broker_epoch)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, broker_epoch=-1)
    return Response(throttle_time_ms=0, error_code=0, broker_epoch=epoch)


async def answer_broker_heartbeat(broker: Broker, request: Any,
                                  connection: Hashable | None = IN_PROCESS) -> Any:
    """`connection`: as answer_broker_registration's."""
    Response = _reg["BrokerHeartbeatResponse"].cls
    try:
        answer = await broker.controller.broker_heartbeat(
            request.broker_id, request.broker_epoch, request.current_metadata_offset,
            request.want_fence, request.want_shut_down, list(request.offline_log_dirs or ()),
            connection)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, is_caught_up=False,
                        is_fenced=True, should_shut_down=False)
    return Response(throttle_time_ms=0, error_code=0, is_caught_up=answer.is_caught_up,
                    is_fenced=answer.is_fenced, should_shut_down=answer.should_shut_down)


async def handle_broker_registration(ctx: RequestContext, request: Any) -> Any:
    return await answer_broker_registration(ctx.broker, request, _watched_connection(ctx))


async def handle_broker_heartbeat(ctx: RequestContext, request: Any) -> Any:
    return await answer_broker_heartbeat(ctx.broker, request, _watched_connection(ctx))


def _watched_connection(ctx: RequestContext) -> KafkaConnection | None:
    """The connection a broker's own registration or heartbeat came on, which the controller
    is told of when it closes; None for one another node forwarded (its connection is that
    node's)."""
    if ctx.forwarded:
        return None
    connection = ctx.connection
    if not connection.state.get(_WATCHED):
        connection.state[_WATCHED] = True
        controller = ctx.broker.controller
        connection.lost_callbacks.append(controller.broker_connection_lost)
    return connection
