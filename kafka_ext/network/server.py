"""The listening side: accepts connections on every listener and reaps idle ones.

Mirrors Kafka's SocketServer: one acceptor per listener, `connections.max.idle.ms` enforced by a
periodic sweep that closes connections with nothing in flight and no bytes for that long (and
paused ones whose peer has gone), and one memory pool (`queued.max.request.bytes`) and one
pool of large-frame buffers shared by every connection; the sweep also unmaps the pooled
buffers nobody used for a few seconds and gives the C heap's free pages back.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from typing import Any

from kafka_ext.network.connection import FrameHandler, KafkaConnection
from kafka_ext.network.connection_quotas import ConnectionQuotas, TooManyConnections
from kafka_ext.network.frames import FrameBufferPool
from kafka_ext.network.memory_pool import RequestMemoryPool
from kafka_ext.security.session import PLAINTEXT_LISTENER, ListenerSecurity

log = logging.getLogger(__name__)


def _heap_trimmer() -> Any:
    """glibc's malloc_trim, or None elsewhere (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


# The C heap keeps what closed connections freed (TLS buffers, small request copies) mapped
# unless asked: the sweep after connections closed gives it back (a few ms on a 100 MB heap).
_MALLOC_TRIM = _heap_trimmer()

# A client that has not finished its TLS handshake by then is dropped.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# Large request buffers kept for reuse across all connections: what a steady stream of 1 MiB
# produces needs, and at most 32 MiB of resident memory when idle, until the sweep unmaps them.
POOLED_REQUEST_BUFFERS = 4
POOLED_REQUEST_BUFFER_MAX_BYTES = 8 * 1024 * 1024
# The sweep runs at least this often (it is what returns pooled buffers to the system).
SWEEP_INTERVAL_MAX_S = 1.0


class SocketServer:
    """Owned by the broker; all methods run on the event loop."""

    def __init__(self, handler: FrameHandler, max_request_bytes: int, max_idle_ms: int,
                 queued_max_request_bytes: int = -1,
                 quotas: ConnectionQuotas | None = None) -> None:
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._max_idle_s = max_idle_ms / 1000
        self.memory = RequestMemoryPool(queued_max_request_bytes, max_request_bytes)
        self.buffers = FrameBufferPool(POOLED_REQUEST_BUFFERS, POOLED_REQUEST_BUFFER_MAX_BYTES)
        self._servers: list[asyncio.base_events.Server] = []
        self.connections: set[KafkaConnection] = set()
        self.quotas = quotas
        self._admitted: set[KafkaConnection] = set()  # counted by the quotas
        self._closed_since_sweep = 0
        self._reaper: asyncio.Task[None] | None = None

    async def listen(self, host: str, port: int,
                     security: ListenerSecurity = PLAINTEXT_LISTENER) -> int:
        """Start accepting on host:port; returns the bound port (useful when port is 0).
        An SSL or SASL_SSL listener runs the TLS handshake before the connection is made."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: self._new_connection(security), host or None, port, reuse_address=True,
            backlog=1024, ssl=security.ssl_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if security.ssl_context else None)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        log.info("listening on %s:%d (%s, %s)", host, bound, security.listener, security.protocol)
        if self._reaper is None:
            self._reaper = loop.create_task(self._reap_idle())
        return bound

    def _new_connection(self, security: ListenerSecurity) -> KafkaConnection:
        conn = KafkaConnection(self._handler, self._max_request_bytes, self._connection_closed,
                               security, self.memory, self.buffers, self._admit)
        self.connections.add(conn)
        return conn

    def _admit(self, conn: KafkaConnection) -> bool:
        if self.quotas is None:
            return True
        try:
            self.quotas.admit(conn.host, conn.security.listener.listener)
        except TooManyConnections as exc:
            log.info("closing %s: %s", conn.peer, exc)
            return False
        self._admitted.add(conn)
        return True

    def _connection_closed(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)
        self._closed_since_sweep += 1
        if conn in self._admitted:
            self._admitted.discard(conn)
            assert self.quotas is not None
            self.quotas.release(conn.host, conn.security.listener.listener)

    async def _reap_idle(self) -> None:
        interval = max(0.05, min(self._max_idle_s / 4, SWEEP_INTERVAL_MAX_S))
        while True:
            await asyncio.sleep(interval)
            self.buffers.trim()
            self.memory.check_finisher()
            if self._closed_since_sweep and _MALLOC_TRIM is not None:
                _MALLOC_TRIM(0)
            self._closed_since_sweep = 0
            deadline = time.monotonic() - self._max_idle_s
            for conn in list(self.connections):
                if conn.idle and conn.last_active < deadline:
                    log.info("closing idle connection %s", conn.peer)
                    conn.close()
                elif conn.reading_paused and conn.peer_gone():
                    log.info("closing %s: the peer left while reading was paused", conn.peer)
                    conn.close()

    async def close(self) -> None:
        """Stop accepting, then close every connection."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            await server.wait_closed()
        if self._reaper is not None:
            self._reaper.cancel()
        self.buffers.close()
