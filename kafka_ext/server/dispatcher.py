"""RequestDispatcher: frame -> header -> handler -> response buffers.

Mirrors Kafka's RequestChannel/KafkaApis split: handlers are `handle_<api>(ctx, request)`
coroutines registered per API key and return the response message (or None for no response).
What the dispatcher decides itself, as Kafka does: an unknown key or a version we do not serve
closes the connection, except ApiVersions, which answers UNSUPPORTED_VERSION in v0 so the
client can pick a version (KIP-511); a body that does not decode closes the connection.
A key outside the connection's audience (api_keys.Audience, set by its ApiVersions) is not
served to it: on 76/77 (CreateChunks/AlterChunkAssignments to our own client) a stock client's
request is Kafka's ShareGroupHeartbeat/ShareGroupDescribe, decoded with Kafka's schema and served
by the handler registered with `register_shadowed`; any other such key closes the connection, as
Kafka does for an API its listener does not enable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_ext.diskless.gateways import client_id_rack
from kafka_ext.network.connection import CloseConnection, KafkaConnection
from kafka_ext.protocol.api_keys import ApiKey, Audience, audience
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.framing import (
    encode_response,
    peek_request_prefix,
)
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.security.principal import ANONYMOUS, KafkaPrincipal
from kafka_ext.server.authentication import raw_token
from kafka_ext.server.authorization import cluster_authorized
from kafka_ext.server.client_quota_manager import (
    REQUEST_QUOTA_EXEMPT,
    HandlerTimer,
    throttle_response,
)
from kafka_ext.server.metrics import RequestMetrics

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker

log = logging.getLogger(__name__)

# What a SASL listener serves before the login completes (or after its session expired).
_BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                                    ApiKey.SASL_AUTHENTICATE})

# Requests only nodes send (Raft, registration, forwarding, replication, diskless
# coordinators, transaction markers, share-group state): Kafka requires CLUSTER_ACTION on the
# cluster for them. WriteTxnMarkers and the share-state keys 83-87 are on Kafka's broker
# listener, so stock clients see them advertised, as on Kafka. (Fetch from a follower is
# checked by the fetch handler: the same key serves consumers.)
CLUSTER_ACTION_APIS = frozenset(
    {key for key in ApiKey if audience(key) == Audience.NODE} | {
        ApiKey.WRITE_TXN_MARKERS, ApiKey.INITIALIZE_SHARE_GROUP_STATE,
        ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
        ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY})

# KafkaConnection.state key: the peer's Audience, set by its ApiVersions v3+ request.
PEER_AUDIENCE = "peer_audience"
# KafkaConnection.state key: the RackId a consumer's Fetch (v11+) named on this connection.
CLIENT_RACK = "client_rack"


def peer_audience_of(conn: KafkaConnection) -> Audience:
    """The audience of a connection's peer: CLIENT until its ApiVersions names it as ours."""
    peer: Audience = conn.state.get(PEER_AUDIENCE, Audience.CLIENT)
    return peer

@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: Any
    api_version: int
    broker: Broker
    connection: KafkaConnection
    # Client quotas: the request's size, and the throttle a handler decided (the dispatcher
    # sets it in the response and mutes the connection for it, KIP-219).
    size_bytes: int = 0
    throttle_time_ms: int = 0
    # KIP-590: a request another broker forwarded in an Envelope (answered here, never
    # forwarded again; its throttle goes back in the answer, not onto the node's connection).
    forwarded: bool = False
    # Who sent it, and from where (the Envelope's principal and client address when forwarded).
    principal: KafkaPrincipal = ANONYMOUS
    client_host: str = ""

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def client_rack(self) -> str | None:
        """The client's rack: a `diskless_az=` marker in its client id, else the RackId its
        Fetch named on this connection (not a forwarding node's); None when unknown."""
        marked = client_id_rack(self.client_id)
        if marked is not None or self.forwarded:
            return marked
        rack: str | None = self.connection.state.get(CLIENT_RACK)
        return rack

    @property
    def listener_name(self) -> str:
        """The listener the request came in on: its answers name brokers by that listener."""
        return self.connection.security.listener.listener


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


class _ForwardedError(Exception):
    """A forwarded request failed as a whole (NOT_CONTROLLER): the Envelope carries it."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


class RequestDispatcher:
    """Routes frames to handlers; the only place that turns a request into buffers."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.handlers: dict[int, Handler] = {}
        # Kafka's APIs on keys that mean one of ours to our own peers: served to the peers
        # below the key's audience, with Kafka's schema (registry().shadowed_requests).
        self.shadowed_handlers: dict[int, Handler] = {}
        self._registry = registry()
        self.request_metrics = RequestMetrics()  # Prometheus (server/metrics.py)

    def register(self, api_key: int, handler: Handler) -> None:
        self.handlers[api_key] = handler

    def register_shadowed(self, api_key: int, handler: Handler) -> None:
        """Serve Kafka's API on `api_key` (share groups on 76/77) to stock clients."""
        assert api_key in self._registry.shadowed_requests, api_key
        self.shadowed_handlers[api_key] = handler

    async def handle_frame(self, conn: KafkaConnection, frame: bytes | memoryview
                           ) -> list[Any] | None:
        security = conn.security
        if security.raw_tokens and security.exchange is not None:
            return await raw_token(conn, frame)  # SaslHandshake v0: bare SASL tokens follow
        return await self._dispatch(conn, frame, forwarded=False)

    async def handle_forwarded(self, conn: KafkaConnection, frame: bytes | memoryview,
                               principal: KafkaPrincipal, client_host: str
                               ) -> list[Any] | None:
        """A request another node forwarded in an Envelope for `principal` (that node passed
        the audience check); the answer frame, or None when the request could not be decoded."""
        try:
            return await self._dispatch(conn, frame, forwarded=True, principal=principal,
                                        client_host=client_host)
        except CloseConnection as exc:
            log.warning("forwarded request refused: %s", exc)
            return None
        except _ForwardedError as exc:
            raise exc.error from None

    async def _dispatch(self, conn: KafkaConnection, frame: bytes | memoryview,
                        forwarded: bool, principal: KafkaPrincipal | None = None,
                        client_host: str | None = None) -> list[Any] | None:
        try:
            api_key, api_version, correlation_id = peek_request_prefix(frame)
        except DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        security = conn.security
        if not forwarded and (not security.authenticated or (
                security.session_expires_at is not None and security.session_expired())) \
                and api_key not in _BEFORE_AUTHENTICATION:
            raise CloseConnection(f"API key {api_key} before SASL authentication completed"
                                  if not security.authenticated else
                                  "SASL session expired without re-authentication")
        if not forwarded and audience(api_key) > peer_audience_of(conn):
            handler = self.shadowed_handlers.get(api_key)
            shadowed = True
            if handler is None:
                raise CloseConnection(f"API key {api_key} is not served to this client")
            request_type = self._registry.shadowed_requests[api_key]
            response_type = self._registry.shadowed_responses[api_key]
        else:
            known = self._registry.requests.get(api_key)
            handler = self.handlers.get(api_key)
            shadowed = False
            if handler is None or known is None:
                raise CloseConnection(f"unsupported API key {api_key}")
            request_type, response_type = known, self._registry.responses[api_key]
        if api_version not in request_type.versions:
            if api_key == ApiKey.API_VERSIONS:
                return self._api_versions_fallback(correlation_id)
            raise CloseConnection(f"unsupported version {api_version} of API {api_key}")
        try:
            header, pos = self._registry["RequestHeader"].decode(
                frame, 2 if request_type.is_flexible(api_version) else 1)
            # Trailing bytes are ignored, as Kafka's parser does: librdkafka's all-topics
            # Metadata v12 request carries three of them.
            request, _ = request_type.decode(frame, api_version, pos)
        except DecodeError as exc:
            log.debug("malformed frame from %s: %s", conn.peer, bytes(frame[:256]).hex())
            raise CloseConnection(f"malformed {request_type.name} v{api_version}: "
                                  f"{exc.message}") from None
        ctx = RequestContext(header, api_version, self.broker, conn, len(frame),
                             forwarded=forwarded,
                             principal=principal or conn.security.principal,
                             client_host=client_host or conn.host)
        timer = None
        # RequestMetrics: the frame's arrival (read before any await) and the handler's start
        arrived, started = conn.received_at, time.perf_counter()
        try:
            if api_key in CLUSTER_ACTION_APIS and not cluster_authorized(
                    ctx, AclOperation.CLUSTER_ACTION):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 f"{ctx.principal} may not send inter-broker requests")
            if self.broker.quotas.request.enabled and api_key not in REQUEST_QUOTA_EXEMPT:
                timer = HandlerTimer(handler(ctx, request))
                response = await timer
            else:
                response = await handler(ctx, request)
        except CloseConnection:
            raise
        except KafkaError as exc:
            if forwarded and exc.code == ErrorCode.NOT_CONTROLLER:
                raise _ForwardedError(exc) from None  # the Envelope says so; the sender retries
            response = _error_response(response_type, api_version, exc.code)
            if response is None:
                raise CloseConnection(f"{request_type.name} failed: {exc}") from None
        except Exception:
            log.exception("%s v%d from %s (client %s) failed", request_type.name, api_version,
                          conn.peer, header.client_id)
            response = _error_response(response_type, api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
            if response is None:
                raise CloseConnection("unexpected server error") from None
        if timer is not None or ctx.throttle_time_ms:
            throttle_response(ctx, response, timer)
        # -- RequestMetrics (server/metrics.py); a forwarded request counts as its Envelope --
        handled = time.perf_counter()
        header_version = (0 if api_key == ApiKey.API_VERSIONS  # always v0 (KIP-511)
                          else 1 if response_type.is_flexible(api_version) else 0)
        parts = None if response is None else encode_response(
            correlation_id, header_version, response_type, api_version, response)
        if not forwarded:
            self.request_metrics.record(
                api_key, api_version, request, arrived, started, handled,
                name=request_type.name.removesuffix("Request") if shadowed else None)
        return parts

    def _api_versions_fallback(self, correlation_id: int) -> list[Any]:
        from kafka_ext.server.api_versions import api_versions_response
        body = api_versions_response(self.handlers, Audience.CLIENT, ErrorCode.UNSUPPORTED_VERSION,
                                     self.shadowed_handlers)
        response_type = self._registry.responses[ApiKey.API_VERSIONS]
        return encode_response(correlation_id, 0, response_type, 0, body)


def _error_response(response_type: Any, api_version: int, code: ErrorCode) -> Any:
    """A response carrying `code` at top level, when this version has a top-level error code;
    None otherwise (the caller closes the connection rather than claim success)."""
    for f in response_type.spec.struct.fields:
        if f.attr == "error_code" and api_version in f.versions:
            return response_type.cls(error_code=int(code))
    return None
