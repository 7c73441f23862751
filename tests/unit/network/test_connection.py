"""KafkaConnection on a real asyncio loop, with a recording transport in place of a socket."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafka_ext.network.connection import (
    MAX_IN_FLIGHT_REQUESTS,
    CloseConnection,
    KafkaConnection,
)
from kafka_ext.network.memory_pool import RequestMemoryPool

_SIZE = struct.Struct(">i")  # frame length prefix


class RecordingTransport:
    """The transport calls KafkaConnection makes, recorded; close() reports loss like asyncio."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.reading = True
        self.pause_calls = 0
        self.resume_calls = 0
        self.closed = False
        self.write_buffer_high: int | None = None
        self.protocol: KafkaConnection | None = None

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, parts: list[Any]) -> None:
        for part in parts:
            self.written += part

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pause_calls += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True
        self.resume_calls += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.protocol is not None
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.write_buffer_high = high


Handler = Callable[[KafkaConnection, bytes], Awaitable[list[Any] | None]]


def _feed(conn: KafkaConnection, data: bytes) -> None:
    """Deliver bytes as the event loop does for a BufferedProtocol: into get_buffer's view."""
    pos = 0
    while pos < len(data) and not conn.closed:
        target = conn.get_buffer(len(data) - pos)
        n = min(len(target), len(data) - pos)
        target[:n] = data[pos:pos + n]
        conn.buffer_updated(n)
        pos += n


def _frame(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


def _responses(written: bytes | bytearray) -> list[bytes]:
    """Split what was written into response bodies (each echoed with a b'r:' prefix)."""
    out, pos = [], 0
    while pos < len(written):
        (size,) = _SIZE.unpack_from(written, pos)
        out.append(bytes(written[pos + 4:pos + 4 + size]))
        pos += 4 + size
    assert pos == len(written)
    return out


async def _echo(conn: KafkaConnection, frame: bytes) -> list[Any]:
    body = b"r:" + frame
    return [_SIZE.pack(len(body)), memoryview(body)]


class Harness:
    """A connection wired to a RecordingTransport; records on_close calls."""

    def __init__(self, handler: Handler, max_request_bytes: int = 1024) -> None:
        self.closed_with: list[KafkaConnection] = []
        self.conn = KafkaConnection(handler, max_request_bytes, self.closed_with.append)
        self.transport = RecordingTransport()
        self.transport.protocol = self.conn
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    async def settle(self, until: Callable[[], bool]) -> None:
        """Let the loop run until `until()` holds (bounded number of turns, no sleeping)."""
        for _ in range(1000):
            if until():
                return
            await asyncio.sleep(0)
        raise AssertionError("condition never held")


async def test_connection_made_records_the_peer_and_bounds_the_write_buffer() -> None:
    h = Harness(_echo)
    assert h.conn.peer == "127.0.0.1:50000"
    assert h.transport.write_buffer_high is not None and h.transport.write_buffer_high > 0


async def test_one_frame_gets_one_response() -> None:
    h = Harness(_echo)
    _feed(h.conn, _frame(b"hello"))
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:hello"]


async def test_several_frames_in_one_read_all_run() -> None:
    h = Harness(_echo)
    _feed(h.conn, b"".join(_frame(b"req%d" % i) for i in range(5)))
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:req%d" % i for i in range(5)]


async def test_a_frame_split_across_many_reads_is_assembled() -> None:
    h = Harness(_echo)
    data = _frame(b"split-body") + _frame(b"next")
    for i in range(len(data)):  # one byte at a time, the size prefix included
        _feed(h.conn, data[i:i + 1])
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:split-body", b"r:next"]


async def test_a_trailing_partial_frame_waits_for_its_rest() -> None:
    h = Harness(_echo)
    whole, partial = _frame(b"first"), _frame(b"second")
    _feed(h.conn, whole + partial[:6])
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:first"]
    _feed(h.conn, partial[6:])
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:first", b"r:second"]


async def test_an_empty_frame_is_handed_to_the_handler() -> None:
    h = Harness(_echo)
    _feed(h.conn, _frame(b""))
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:"]


async def test_responses_go_out_in_request_order_when_handlers_finish_out_of_order() -> None:
    release_first = asyncio.Event()
    finished: list[bytes] = []

    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        if frame == b"slow":
            await release_first.wait()
        finished.append(frame)
        return await _echo(conn, frame)

    h = Harness(handler)
    _feed(h.conn, _frame(b"slow") + _frame(b"fast1"))
    _feed(h.conn, _frame(b"fast2"))
    await h.settle(lambda: finished == [b"fast1", b"fast2"])
    assert h.transport.written == b""  # the later answers wait for the first
    assert not h.conn.idle
    release_first.set()
    await h.settle(lambda: h.conn.idle)
    assert finished == [b"fast1", b"fast2", b"slow"]
    assert _responses(h.transport.written) == [b"r:slow", b"r:fast1", b"r:fast2"]


async def test_a_request_without_response_keeps_the_order_of_the_others() -> None:
    release_first = asyncio.Event()
    finished: list[bytes] = []

    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any] | None:
        if frame == b"slow":
            await release_first.wait()
        finished.append(frame)
        if frame == b"acks0":
            return None
        return await _echo(conn, frame)

    h = Harness(handler)
    _feed(h.conn, _frame(b"slow") + _frame(b"acks0") + _frame(b"after"))
    await h.settle(lambda: finished == [b"acks0", b"after"])
    assert h.transport.written == b""
    release_first.set()
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:slow", b"r:after"]


@pytest.mark.parametrize("prefix", [b"\x80\x00\x00\x00", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff"],
                         ids=["2GiB", "2GiB-1", "minus-1"])
async def test_a_lying_size_prefix_closes_on_the_prefix_alone(prefix: bytes) -> None:
    calls: list[bytes] = []

    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        calls.append(frame)
        return []

    h = Harness(handler)
    _feed(h.conn, prefix)  # no body byte sent: the close must not wait for one
    assert h.transport.closed
    await h.settle(lambda: bool(h.closed_with))
    assert h.closed_with == [h.conn] and h.conn.closed
    assert calls == [] and h.transport.written == b""


async def test_a_size_above_max_request_bytes_closes_before_the_body_arrives() -> None:
    h = Harness(_echo, max_request_bytes=100)
    _feed(h.conn, _SIZE.pack(101))
    assert h.transport.closed


async def test_a_size_of_exactly_max_request_bytes_is_served() -> None:
    h = Harness(_echo, max_request_bytes=100)
    _feed(h.conn, _frame(b"m" * 100))
    await h.settle(lambda: h.conn.idle)
    assert not h.transport.closed
    assert _responses(h.transport.written) == [b"r:" + b"m" * 100]


async def test_an_oversized_frame_drops_the_connection_with_its_pending_answers() -> None:
    h = Harness(_echo, max_request_bytes=100)
    _feed(h.conn, _frame(b"ok") + _SIZE.pack(1 << 20))
    assert h.transport.closed
    await h.settle(lambda: bool(h.closed_with))
    # The connection is gone, so nothing more may be written for it.
    assert h.transport.written == b""


async def test_a_handler_raising_close_connection_closes_it() -> None:
    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        raise CloseConnection("unsupported API key 999")

    h = Harness(handler)
    _feed(h.conn, _frame(b"bad"))
    await h.settle(lambda: bool(h.closed_with))
    assert h.transport.closed and h.transport.written == b""


async def test_a_handler_bug_closes_only_this_connection() -> None:
    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        raise RuntimeError("bug")

    h = Harness(handler)
    other = Harness(_echo)
    _feed(h.conn, _frame(b"boom"))
    _feed(other.conn, _frame(b"fine"))
    await h.settle(lambda: bool(h.closed_with) and other.conn.idle)
    assert h.transport.closed
    assert not other.transport.closed
    assert _responses(other.transport.written) == [b"r:fine"]


async def test_connection_lost_cancels_running_handlers() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return []

    h = Harness(handler)
    _feed(h.conn, _frame(b"long-poll"))
    await started.wait()
    h.conn.connection_lost(None)
    await cancelled.wait()
    assert h.closed_with == [h.conn]
    assert h.transport.written == b""


async def test_pause_writing_pauses_reading_until_resume_writing() -> None:
    h = Harness(_echo)
    h.conn.pause_writing()
    assert not h.transport.reading
    h.conn.resume_writing()
    assert h.transport.reading
    assert (h.transport.pause_calls, h.transport.resume_calls) == (1, 1)


async def test_too_many_requests_in_flight_pause_reading_until_answered() -> None:
    release = asyncio.Event()

    async def handler(conn: KafkaConnection, frame: bytes) -> list[Any]:
        await release.wait()
        return await _echo(conn, frame)

    h = Harness(handler)
    frames = [_frame(b"%d" % i) for i in range(MAX_IN_FLIGHT_REQUESTS)]
    _feed(h.conn, b"".join(frames[:-1]))
    assert h.transport.reading
    _feed(h.conn, frames[-1])
    assert not h.transport.reading
    release.set()
    await h.settle(lambda: h.conn.idle)
    assert h.transport.reading
    assert (h.transport.pause_calls, h.transport.resume_calls) == (1, 1)
    assert _responses(h.transport.written) == [b"r:%d" % i for i in range(MAX_IN_FLIGHT_REQUESTS)]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
async def test_pipelined_frames_in_arbitrary_chunks_come_back_in_order(chunk: int) -> None:
    h = Harness(_echo)
    data = b"".join(_frame(b"m%03d" % i + b"z" * (i % 5)) for i in range(40))
    for pos in range(0, len(data), chunk):
        _feed(h.conn, data[pos:pos + chunk])
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:m%03d" % i + b"z" * (i % 5) for i in range(40)]


# -- client quotas (KIP-219) ----------------------------------------------------------------------


async def _echo_and_throttle(conn: KafkaConnection, frame: bytes) -> list[Any]:
    """Answer, then throttle for as many ms as the frame says (the dispatcher's order)."""
    parts = await _echo(conn, frame)
    conn.throttle(int(frame))
    return parts


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.001)


async def test_a_throttled_connection_answers_then_stops_reading_until_the_throttle_ends(
        ) -> None:
    h = Harness(_echo_and_throttle)
    _feed(h.conn, _frame(b"20"))
    await h.settle(lambda: h.conn.idle)
    assert _responses(h.transport.written) == [b"r:20"]  # the answer is not held back
    assert h.conn.throttled and not h.transport.reading
    await _until(lambda: h.transport.reading)
    assert not h.conn.throttled


async def test_a_shorter_throttle_does_not_cut_a_longer_one() -> None:
    h = Harness(_echo_and_throttle)
    _feed(h.conn, _frame(b"60000"))
    await h.settle(lambda: h.conn.idle)
    h.conn.throttle(1)
    await asyncio.sleep(0.01)
    assert h.conn.throttled and not h.transport.reading
    h.conn.close()
    await h.settle(lambda: bool(h.closed_with))
    assert not h.conn.throttled  # the timer went with the connection


# -- the memory pool (queued.max.request.bytes) -----------------------------------------------


def _pooled_harness(handler: Handler, memory: RequestMemoryPool) -> Harness:
    h = Harness(handler, max_request_bytes=64 << 20)
    h.conn = KafkaConnection(handler, 64 << 20, h.closed_with.append, memory=memory)
    h.transport = RecordingTransport()
    h.transport.protocol = h.conn
    h.conn.connection_made(h.transport)  # type: ignore[arg-type]
    return h


async def test_a_lying_prefix_charges_nothing_to_the_memory_pool() -> None:
    memory = RequestMemoryPool(1 << 20)
    h = _pooled_harness(_echo, memory)
    _feed(h.conn, _SIZE.pack(50 << 20) + b"x" * 100)
    assert memory.used_bytes == h.conn.held_bytes == 100
    assert h.transport.reading


async def test_a_spent_pool_pauses_the_connection_that_wants_more_until_memory_returns() -> None:
    release = asyncio.Event()

    async def slow(conn: KafkaConnection, frame: bytes) -> list[Any]:
        await release.wait()
        return await _echo(conn, frame)

    memory = RequestMemoryPool(1 << 20)
    holder = _pooled_harness(slow, memory)
    _feed(holder.conn, _frame(b"a" * (1 << 20)))  # a whole 1 MiB request, queued in its handler
    assert memory.exhausted and not holder.transport.reading
    reader = _pooled_harness(_echo, memory)
    _feed(reader.conn, _SIZE.pack(2 << 20) + b"b" * (128 << 10))  # past its guaranteed share
    assert not reader.transport.reading and reader.conn.muted_for_memory
    release.set()
    await reader.settle(lambda: reader.transport.reading)
    assert not memory.exhausted and memory.used_bytes == reader.conn.held_bytes == 128 << 10


async def test_small_requests_are_read_while_the_pool_is_spent() -> None:
    """Each connection may hold 64 KiB whatever the pool says: clients parking half-sent
    large requests cannot stop anyone's metadata or heartbeat requests."""
    memory = RequestMemoryPool(1 << 20)
    hog = _pooled_harness(_echo, memory)
    _feed(hog.conn, _SIZE.pack(8 << 20) + b"x" * (2 << 20))
    assert memory.exhausted and not hog.transport.reading
    bystander = _pooled_harness(_echo, memory)
    for i in range(20):
        _feed(bystander.conn, _frame(b"small %d" % i))
        await bystander.settle(lambda: bystander.conn.idle)
    assert bystander.transport.reading
    assert _responses(bystander.transport.written) == [b"r:small %d" % i for i in range(20)]


async def test_a_closed_connection_gives_its_memory_back_and_wakes_the_muted() -> None:
    memory = RequestMemoryPool(1 << 20)
    hog = _pooled_harness(_echo, memory)
    _feed(hog.conn, _SIZE.pack(8 << 20) + b"x" * (2 << 20))
    other = _pooled_harness(_echo, memory)
    _feed(other.conn, _SIZE.pack(8 << 20) + b"y" * (100 << 10))
    assert not other.transport.reading
    hog.transport.close()
    await other.settle(lambda: other.transport.reading)
    assert memory.used_bytes == 100 << 10 and memory.muted_connections == 0


async def test_half_read_frames_larger_than_the_pool_together_all_complete() -> None:
    """Two 1.5 MiB requests against a 1 MiB pool: charged as they arrive they would wait for
    each other forever; one at a time finishes its frame past the budget instead."""
    memory = RequestMemoryPool(1 << 20, finisher_overdraft_bytes=2 << 20)
    first, second = _pooled_harness(_echo, memory), _pooled_harness(_echo, memory)
    bodies = [b"a" * (3 << 19), b"b" * (3 << 19)]
    frames = [_frame(body) for body in bodies]
    half = len(frames[0]) // 2
    _feed(first.conn, frames[0][:half])
    _feed(second.conn, frames[1][:half])
    assert memory.exhausted
    assert second.transport.reading  # it took the turn to finish its frame
    _feed(first.conn, b"a")  # the first one wants more: it waits behind the finisher
    assert not first.transport.reading and first.conn.muted_for_memory
    _feed(second.conn, frames[1][half:])
    await second.settle(lambda: second.conn.idle and first.transport.reading)
    _feed(first.conn, frames[0][half + 1:])
    await first.settle(lambda: first.conn.idle)
    assert _responses(first.transport.written) == [b"r:" + bodies[0]]
    assert _responses(second.transport.written) == [b"r:" + bodies[1]]
    assert memory.used_bytes == 0


async def test_a_finisher_that_stalls_hands_its_turn_to_the_next() -> None:
    memory = RequestMemoryPool(1 << 20, finisher_overdraft_bytes=4 << 20)
    staller, waiter = _pooled_harness(_echo, memory), _pooled_harness(_echo, memory)
    _feed(staller.conn, _SIZE.pack(2 << 20) + b"s" * (3 << 19))  # past the budget: finisher
    assert staller.transport.reading
    _feed(waiter.conn, _SIZE.pack(2 << 20) + b"w" * (128 << 10))
    assert not waiter.transport.reading
    memory.check_finisher()  # the staller got bytes since the turn began
    assert staller.transport.reading and not waiter.transport.reading
    memory.check_finisher()  # nothing since: the turn passes
    assert waiter.transport.reading and not staller.transport.reading


async def test_finishers_stop_at_their_overdraft() -> None:
    memory = RequestMemoryPool(1 << 20, finisher_overdraft_bytes=1 << 20)
    first = _pooled_harness(_echo, memory)
    _feed(first.conn, _SIZE.pack(8 << 20) + b"x" * (3 << 19))
    assert first.transport.reading  # the finisher, 0.5 MiB over
    _feed(first.conn, b"x" * (1 << 20))
    assert not first.transport.reading  # 1.5 MiB over: it waits like the others
