"""One client connection: frames requests, runs handlers concurrently, answers in order.

Kafka's contract: responses on a connection go out in request order, yet a slow request (a
long-polling fetch) must not stop the decoding of the next ones. Each frame gets a slot in a
queue; handlers fill their slot whenever they finish and the head of the queue is flushed.

Receiving is a BufferedProtocol cutting frames with network/frames.py: a 1 MiB produce is read
straight into a (pooled) buffer of its own and never copied on its way in, and a size prefix
above `socket.request.max.bytes` closes the connection before anything is allocated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from kafka_ext.network.frames import FrameAssembler
from kafka_ext.protocol.framing import FrameTooLarge
from kafka_ext.security.principal import NoMappingRule
from kafka_ext.security.session import PLAINTEXT_LISTENER, ListenerSecurity

log = logging.getLogger(__name__)

# A request handler: frame in, response buffers out (None: no response, e.g. acks=0 produce).
FrameHandler = Callable[["KafkaConnection", bytes | memoryview], Awaitable[list[Any] | None]]

# Stop reading from a client that has this many requests in flight (pipelining bound).
MAX_IN_FLIGHT_REQUESTS = 256


class CloseConnection(Exception):
    """Raised by a handler when the only safe answer is to drop this connection."""


class _Slot:
    __slots__ = ("done", "parts")

    def __init__(self) -> None:
        self.done = False
        self.parts: list[Any] | None = None


class KafkaConnection(asyncio.BufferedProtocol):
    """Guarded by the event loop: every callback and task runs on it."""

    def __init__(self, handler: FrameHandler, max_request_bytes: int,
                 on_close: Callable[[KafkaConnection], None],
                 listener: ListenerSecurity = PLAINTEXT_LISTENER) -> None:
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._on_close = on_close
        self._frames = FrameAssembler(max_request_bytes, self._start)
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._transport: asyncio.Transport | None = None
        self._write_paused = False
        self._read_paused = False
        self._throttle_timer: asyncio.TimerHandle | None = None  # KIP-219 mute, see throttle()
        self._throttled_until = 0.0
        self.closed = False
        self._close_when_flushed = False
        self.security = listener.new_connection()
        if not self.security.authenticated:
            # Kafka's sasl.server.max.receive.size: a client that has not logged in cannot
            # make the broker allocate a request-sized buffer.
            self._frames.max_frame_bytes = min(max_request_bytes, listener.max_receive_bytes)
        self.peer: str = "?"
        self.host = ""  # the client's address, as ACLs name hosts
        self.last_active = time.monotonic()
        # Per-connection state handlers may keep (e.g. SASL, client software name).
        self.state: dict[str, Any] = {}
        # When the frame being dispatched was complete (time.perf_counter()), set just before
        # its handler runs: the request queue time of server/metrics.py.
        self.received_at = 0.0

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's: no subclass
        self._transport = stream
        peer = stream.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else ""
        stream.set_write_buffer_limits(high=4 * 1024 * 1024)
        if self.security.listener.protocol == "SSL":
            # The TLS handshake is over by now: the client certificate (if any) names it.
            try:
                self.security.principal = self.security.listener.certificate_principal(
                    stream.get_extra_info("ssl_object"))
            except NoMappingRule as exc:
                log.warning("closing %s: %s", self.peer, exc)
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._end_throttle()
        for task in self._tasks:
            task.cancel()
        self._slots.clear()
        self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self._frames.buffer_updated(nbytes)
        except FrameTooLarge as exc:
            log.warning("closing %s: %s", self.peer, exc.message)
            self.close()
            return
        self._update_reading()

    # -- requests ----------------------------------------------------------------------------

    def _start(self, frame: bytes | memoryview, buffer: bytearray | None) -> None:
        slot = _Slot()
        self._slots.append(slot)
        task = asyncio.get_running_loop().create_task(
            self._run(slot, frame, buffer, time.perf_counter()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, slot: _Slot, frame: bytes | memoryview,
                   buffer: bytearray | None, received_at: float) -> None:
        self.received_at = received_at  # the dispatcher reads it before its first await
        try:
            slot.parts = await self._handler(self, frame)
        except CloseConnection as exc:
            log.info("closing %s: %s", self.peer, exc)
            self.close()
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # the dispatcher answers errors itself; this is a bug: drop only this client
            log.exception("unexpected failure serving %s; closing the connection", self.peer)
            self.close()
            return
        finally:
            # Handlers keep nothing of a request once they have answered: the bytes are free.
            if buffer is not None:
                self._frames.give_back(buffer)
        slot.done = True
        self._flush()

    def _flush(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        slots = self._slots
        while slots and slots[0].done:
            parts = slots.popleft().parts
            if parts:
                transport.writelines(parts)
        if self._close_when_flushed and not slots:
            self.close()  # the transport sends what it buffered before it closes
            return
        self.last_active = time.monotonic()
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        should_pause = (self._write_paused or len(self._slots) >= MAX_IN_FLIGHT_REQUESTS
                        or self._throttle_timer is not None)
        if should_pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            transport.resume_reading()
            self._read_paused = False

    # -- client quotas (KIP-219) -------------------------------------------------------------

    def throttle(self, throttle_time_ms: int) -> None:
        """Read nothing more from this client for `throttle_time_ms` (its response still goes
        out at once): Kafka mutes a throttled channel the same way. A longer throttle wins."""
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_time_ms / 1000
        if until <= self._throttled_until or self.closed:
            return
        self._throttled_until = until
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = loop.call_at(until, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
            self._update_reading()

    @property
    def throttled(self) -> bool:
        """Whether reading is muted by a quota throttle."""
        return self._throttle_timer is not None

    @property
    def idle(self) -> bool:
        return not self._slots

    def authenticated(self) -> None:
        """The client has logged in: requests up to socket.request.max.bytes are read now."""
        self._frames.max_frame_bytes = self._max_request_bytes

    def close_after_answers(self) -> None:
        """Close once every answer due so far is sent (a failed authentication's last word)."""
        self._close_when_flushed = True
        if self._transport is not None and not self.closed:
            self._transport.pause_reading()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()
