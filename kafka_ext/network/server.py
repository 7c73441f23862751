"""The listening side: accepts connections on every listener and reaps idle ones.

Mirrors Kafka's SocketServer: one acceptor per listener, `connections.max.idle.ms` enforced by a
periodic sweep that closes connections with nothing in flight and no bytes for that long.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kafka_ext.network.connection import FrameHandler, KafkaConnection
from kafka_ext.security.session import PLAINTEXT_LISTENER, ListenerSecurity

log = logging.getLogger(__name__)

# A client that has not finished its TLS handshake by then is dropped.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class SocketServer:
    """Owned by the broker; all methods run on the event loop."""

    def __init__(self, handler: FrameHandler, max_request_bytes: int, max_idle_ms: int) -> None:
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._max_idle_s = max_idle_ms / 1000
        self._servers: list[asyncio.base_events.Server] = []
        self.connections: set[KafkaConnection] = set()
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
        conn = KafkaConnection(self._handler, self._max_request_bytes, self.connections.discard,
                               security)
        self.connections.add(conn)
        return conn

    async def _reap_idle(self) -> None:
        interval = max(0.05, min(self._max_idle_s / 4, 5.0))
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self._max_idle_s
            for conn in list(self.connections):
                if conn.idle and conn.last_active < deadline:
                    log.info("closing idle connection %s", conn.peer)
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
