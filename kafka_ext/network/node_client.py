"""Outbound connections from this node to the other nodes of the cluster (Kafka's NetworkClient
as the controllers and brokers use it among themselves).

One connection per peer, opened on first use and again after a failure; requests are
pipelined on it and answers matched by correlation id. A connection first identifies itself
with ApiVersions as NODE_SOFTWARE_NAME, which is how the peer shows it the inter-broker APIs,
then logs in when the peer's listener asks for SASL (over TLS when it asks for that). A SASL
session with a lifetime (KIP-368) is replaced by a fresh connection before it ends.
A failure fails the requests in flight with ConnectionError; callers retry on their own timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from kafka_ext.client.probe import PROBE_VERSION, api_versions_request
from kafka_ext.network.frames import FrameAssembler, FrameBuffer, FrameBufferPool
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.framing import SIZE, FrameTooLarge, decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import AuthenticationFailed, SaslClient
from kafka_ext.security.session import PLAINTEXT_CLIENT, NodeClientSecurity

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
# Pooled answer buffers up to this size: a follower's fetch answer is at most
# replica.fetch.response.max.bytes (10 MiB by default) plus its framing.
MAX_POOLED_RESPONSE_BYTES = 16 * 1024 * 1024
CONNECT_TIMEOUT_S = 2.0
_reg = registry()


class NodeConnection(asyncio.BufferedProtocol):
    """One open connection to a peer; owned by the event loop.

    Answers are cut with network/frames.py: a large Fetch answer is read straight into a pooled
    buffer, and its records reach the follower's log as views of that buffer (see `leased`).
    """

    def __init__(self, node_id: int, client_id: str) -> None:
        self.node_id = node_id
        # Told the node id once the connection closes (NodeChannels sets it once connected).
        self.on_lost: Callable[[int], None] | None = None
        self._client_id = client_id
        self._correlation = itertools.count(1)
        # correlation id -> (api key, version, leased, future of the answer)
        self._pending: dict[int, tuple[int, int, bool, asyncio.Future[Any]]] = {}
        self._buffers = FrameBufferPool(max_buffer_bytes=MAX_POOLED_RESPONSE_BYTES)
        self._frames = FrameAssembler(MAX_RESPONSE_BYTES, self._answer, self._buffers)
        self._transport: asyncio.Transport | None = None
        self._error: BaseException = ConnectionError(f"connection to node {node_id} closed")
        self.closed = False
        # When to stop sending on it: a little before its SASL session ends (None: never).
        self.retire_at: float | None = None
        self._retired = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's: no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._error = ConnectionError(f"connection to node {self.node_id} failed: {exc}")
        self._fail()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._frames.buffer_updated(nbytes)
        except (FrameTooLarge, DecodeError) as exc:
            self._error = ConnectionError(f"connection to node {self.node_id} failed: {exc}")
            self._fail()

    def _answer(self, frame: bytes | memoryview, buffer: FrameBuffer | None) -> None:
        correlation_id = SIZE.unpack_from(frame, 0)[0]
        pending = self._pending.get(correlation_id)
        if pending is None:
            raise DecodeError(f"answer to unknown request {correlation_id}")
        api_key, api_version, leased, future = pending
        _, body = decode_response(frame, api_key, api_version)
        if not future.done():
            future.set_result((body, buffer) if leased else body)
        if self._retired and len(self._pending) <= 1:  # this answer was the last in flight
            asyncio.get_running_loop().call_soon(self._fail)

    # -- requests ----------------------------------------------------------------------------

    async def request(self, api_key: int, api_version: int, body: Any,
                      leased: bool = False) -> Any:
        """Send one request and wait for its answer; ConnectionError if the link fails.
        `leased`: answer (body, buffer) and let the caller hand the buffer back (`give_back`)."""
        if self.closed or self._transport is None:
            raise ConnectionError(f"connection to node {self.node_id} is closed")
        correlation_id = next(self._correlation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, api_version, leased, future)
        self._transport.write(encode_request(api_key, api_version, correlation_id,
                                             self._client_id, body))
        try:
            return await future
        finally:
            self._pending.pop(correlation_id, None)

    def give_back(self, buffer: FrameBuffer | None) -> None:
        """A leased answer's buffer, of which the caller keeps no view, is free for reuse."""
        if buffer is not None:
            self._frames.give_back(buffer)

    def retire(self) -> None:
        """Send nothing more; close once the answers in flight are in."""
        self._retired = True
        if not self._pending:
            self._fail()

    def _fail(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.on_lost is not None:
            self.on_lost(self.node_id)
        for _, _, _, future in self._pending.values():
            if not future.done():
                future.set_exception(self._error)
        self._pending.clear()
        self._frames.close()
        self._buffers.close()  # answers still leased are unmapped when given back
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail()


class NodeChannels:
    """Connections to the peers whose addresses `endpoint_of` knows; owned by the event loop."""

    def __init__(self, endpoint_of: Callable[[int], tuple[str, int] | None],
                 client_id: str, security: NodeClientSecurity = PLAINTEXT_CLIENT,
                 on_connection_lost: Callable[[int], None] | None = None) -> None:
        """`on_connection_lost(node id)`: called when a connection that was open for requests
        closes, whoever closed it (BrokerLifecycleManager heartbeats again at once); not for
        one that failed while connecting, so a peer that accepts and drops connections is
        not dialled in a loop."""
        self._on_connection_lost = on_connection_lost
        self._endpoint_of = endpoint_of
        self._client_id = client_id
        self._security = security
        self._connections: dict[int, NodeConnection] = {}
        self._connecting: dict[int, asyncio.Task[NodeConnection]] = {}

    async def request(self, node_id: int, api_key: int, api_version: int, body: Any,
                      timeout_s: float) -> Any:
        """One request to node `node_id`; ConnectionError / TimeoutError when it cannot be had."""
        async with asyncio.timeout(timeout_s):
            connection = await self._connection(node_id)
            return await connection.request(api_key, api_version, body)

    async def _connection(self, node_id: int) -> NodeConnection:
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            if connection.retire_at is None or time.monotonic() < connection.retire_at:
                return connection
            del self._connections[node_id]
            connection.retire()
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(node_id))
            self._connecting[node_id] = task
            task.add_done_callback(lambda done: self._connect_done(node_id, done))
        return await asyncio.shield(task)

    def _connect_done(self, node_id: int, task: asyncio.Task[NodeConnection]) -> None:
        """Forget a finished connect. Its callers may all have given up while the shield kept
        it going (timed out, or cancelled by a shutdown): its failure is retrieved here, since
        nobody awaits it any more, and the next request connects again."""
        self._connecting.pop(node_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.debug("connecting to node %d failed: %s", node_id, task.exception())

    @contextlib.asynccontextmanager
    async def leased(self, node_id: int, api_key: int, api_version: int, body: Any,
                     timeout_s: float) -> AsyncIterator[Any]:
        """`request`, for an answer whose byte fields (Fetch records) the caller reads as views
        of the received frame: inside the block the answer is valid; after it the frame's
        buffer is reused for a later answer, so nothing of it may be kept."""
        async with asyncio.timeout(timeout_s):
            connection = await self._connection(node_id)
            answer, buffer = await connection.request(api_key, api_version, body, leased=True)
        try:
            yield answer
        finally:
            connection.give_back(buffer)

    async def _connect(self, node_id: int) -> NodeConnection:
        endpoint = self._endpoint_of(node_id)
        if endpoint is None:
            raise ConnectionError(f"no known address for node {node_id}")
        host, port = endpoint
        loop = asyncio.get_running_loop()
        security = self._security
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, connection = await loop.create_connection(
                lambda: NodeConnection(node_id, self._client_id), host, port,
                ssl=security.ssl_context,
                server_hostname=host if security.ssl_context is not None else None)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                answer = await connection.request(ApiKey.API_VERSIONS, PROBE_VERSION,
                                                  api_versions_request(NODE_SOFTWARE_NAME))
                if answer.error_code:
                    raise ConnectionError(f"node {node_id} refused ApiVersions: "
                                          f"{answer.error_code}")
                if security.mechanism is not None:
                    await _log_in(connection, security)
        except BaseException:
            await connection.close()
            raise
        old = self._connections.get(node_id)
        if old is not None:
            await old.close()
        connection.on_lost = self._on_connection_lost
        self._connections[node_id] = connection
        return connection

    async def close(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
        for connection in list(self._connections.values()):
            await connection.close()
        self._connections.clear()


async def _log_in(connection: NodeConnection, security: NodeClientSecurity) -> None:
    """SaslHandshake v1 and SaslAuthenticate v2 rounds until the mechanism completes; sets
    when the connection must be retired (a tenth before its session lifetime ends)."""
    assert security.mechanism is not None
    handshake = _reg.requests[ApiKey.SASL_HANDSHAKE].cls(mechanism=security.mechanism)
    answer = await connection.request(ApiKey.SASL_HANDSHAKE, 1, handshake)
    if answer.error_code:
        raise ConnectionError(f"node {connection.node_id} does not offer SASL mechanism "
                              f"{security.mechanism} (error {answer.error_code})")
    client = SaslClient(security.mechanism, security.username, security.password)
    token: bytes | None = client.first()
    authenticate = _reg.requests[ApiKey.SASL_AUTHENTICATE].cls
    while token is not None:
        answer = await connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                          authenticate(auth_bytes=token))
        if answer.error_code:
            raise ConnectionError(f"node {connection.node_id} refused this node's "
                                  f"{security.mechanism} login: {answer.error_message}")
        try:
            token = client.answer(bytes(answer.auth_bytes))
        except AuthenticationFailed as exc:
            raise ConnectionError(f"node {connection.node_id}: {exc}") from None
    if answer.session_lifetime_ms > 0:
        connection.retire_at = time.monotonic() + answer.session_lifetime_ms * 0.9 / 1000
