"""One client connection: frames requests, runs handlers concurrently, answers in order.

Kafka's contract: responses on a connection go out in request order, yet a slow request (a
long-polling fetch) must not stop the decoding of the next ones. Each frame gets a slot in a
queue; handlers fill their slot whenever they finish and the head of the queue is flushed.

Receiving is a BufferedProtocol cutting frames with network/frames.py: a 1 MiB produce is read
straight into a (pooled) buffer of its own and never copied on its way in, and a size prefix
above `socket.request.max.bytes` (or, before a SASL login, `sasl.server.max.receive.size`)
closes the connection before anything is allocated. What has arrived of a request, and every
request until its handler has answered, is charged to the broker's RequestMemoryPool
(`queued.max.request.bytes`); when it is spent, reading pauses here until memory comes back.
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from kafka_ext.network.frames import FrameAssembler, FrameBuffer, FrameBufferPool
from kafka_ext.network.memory_pool import RequestMemoryPool
from kafka_ext.protocol.framing import FrameTooLarge
from kafka_ext.security.principal import NoMappingRule
from kafka_ext.security.session import PLAINTEXT_LISTENER, ListenerSecurity

log = logging.getLogger(__name__)

# A request handler: frame in, response buffers out (None: no response, e.g. acks=0 produce).
FrameHandler = Callable[["KafkaConnection", bytes | memoryview], Awaitable[list[Any] | None]]

# The peer shut its side down: Linux's poll event; elsewhere only a reset (POLLHUP) is seen.
_POLL_PEER_GONE = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR

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
                 listener: ListenerSecurity = PLAINTEXT_LISTENER,
                 memory: RequestMemoryPool | None = None,
                 buffers: FrameBufferPool | None = None,
                 on_open: Callable[[KafkaConnection], bool] | None = None) -> None:
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._on_close = on_close
        self._on_open = on_open  # False: the connection is refused (too many of them)
        self._frames = FrameAssembler(max_request_bytes, self._start, buffers)
        self._memory = memory if memory is not None else RequestMemoryPool(-1)
        self._queued_bytes = 0  # of the requests whose handlers have not answered yet
        self._held_bytes = 0  # what this connection has charged to the memory pool
        self._memory_muted = False
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
        # Called once the connection is lost, whichever side closed it (the active controller
        # watches the connections brokers heartbeat on: server/broker_lifecycle.py).
        self.lost_callbacks: list[Callable[[KafkaConnection], None]] = []
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
        if self._on_open is not None and not self._on_open(self):
            self.close()
            return
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
        self._frames.close()
        self._queued_bytes = 0  # the cancelled handlers' frames are freed as they unwind
        self._charge_memory()
        self._memory.forget(self)
        self._transport = None  # no cycle through the transport: the connection dies with it
        self._on_close(self)
        for callback in self.lost_callbacks:
            callback(self)

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
        self._charge_memory()
        self._update_reading()

    # -- requests ----------------------------------------------------------------------------

    def _start(self, frame: bytes | memoryview, buffer: FrameBuffer | None) -> None:
        self._queued_bytes += len(frame)
        slot = _Slot()
        self._slots.append(slot)
        task = asyncio.get_running_loop().create_task(
            self._run(slot, frame, buffer, time.perf_counter()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, slot: _Slot, frame: bytes | memoryview,
                   buffer: FrameBuffer | None, received_at: float) -> None:
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
            size = len(frame)
            del frame
            if buffer is not None:
                self._frames.give_back(buffer)
            if not self.closed:
                self._queued_bytes -= size
                self._charge_memory()
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
        self._memory_muted = not self._memory.may_read(
            self, self._held_bytes, self._frames.partial_frame_bytes > 0, self._update_reading)
        should_pause = (self._write_paused or len(self._slots) >= MAX_IN_FLIGHT_REQUESTS
                        or self._throttle_timer is not None or self._memory_muted)
        if should_pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            transport.resume_reading()
            self._read_paused = False

    def _charge_memory(self) -> None:
        """Bring what this connection has charged to the memory pool up to date."""
        partial = self._frames.partial_frame_bytes
        held = self._queued_bytes + partial
        if held != self._held_bytes:
            self._memory.charge(self, held - self._held_bytes)
            self._held_bytes = held
        if not partial:
            self._memory.frame_done(self)

    @property
    def held_bytes(self) -> int:
        """Request bytes this connection holds: read so far of a frame, or queued."""
        return self._held_bytes

    @property
    def muted_for_memory(self) -> bool:
        return self._memory_muted

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

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    def peer_gone(self) -> bool:
        """Whether the peer closed or reset this connection. A transport that is not reading
        never sees the FIN, so a client that fills the memory pool and leaves would keep its
        memory until the idle sweep; the socket server asks the socket instead (POLLRDHUP
        reports the peer's close even while unread bytes sit before it)."""
        transport = self._transport
        if transport is None or self.closed:
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), _POLL_PEER_GONE)
        return any(events & _POLL_PEER_GONE for _, events in poller.poll(0))

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
