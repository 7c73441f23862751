"""FrameAssembler: whatever way the socket splits the stream, every frame comes out whole, once,
in order; large frames land in buffers of their own that come back for reuse."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.network.frames import SCRATCH_BYTES, FrameAssembler, FrameBuffer, FrameBufferPool
from kafka_ext.protocol.framing import FrameTooLarge


def _feed(assembler: FrameAssembler, stream: bytes, cuts: list[int]) -> None:
    """Push `stream` through get_buffer/buffer_updated, at most each cut's size per read."""
    pos, turn = 0, 0
    while pos < len(stream):
        target = assembler.get_buffer()
        n = min(len(target), len(stream) - pos, max(1, cuts[turn % len(cuts)]))
        target[:n] = stream[pos:pos + n]
        assembler.buffer_updated(n)
        pos += n
        turn += 1


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 7, 500, SCRATCH_BYTES - 4, SCRATCH_BYTES,
                                        3 * SCRATCH_BYTES + 5]), min_size=1, max_size=8),
       cuts=st.lists(st.integers(1, 2 * SCRATCH_BYTES), min_size=1, max_size=5))
def test_frames_come_out_whole_and_in_order(sizes: list[int], cuts: list[int]) -> None:
    bodies = [bytes([n % 251]) * size for n, size in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    received: list[bytes] = []
    large: list[FrameBuffer] = []  # kept alive here, so their ids stay distinct

    def on_frame(frame: bytes | memoryview, buffer: FrameBuffer | None) -> None:
        received.append(bytes(frame))
        if buffer is not None:
            assert len(frame) > SCRATCH_BYTES - 4  # only frames the scratch cannot hold
            large.append(buffer)
            assembler.give_back(buffer)

    assembler = FrameAssembler(1 << 20, on_frame)
    _feed(assembler, stream, cuts)
    assert received == bodies
    # A large frame gets a new buffer only when it is larger than every earlier one: otherwise
    # a buffer given back serves it.
    large_sizes = [len(b) for b in bodies if len(b) > SCRATCH_BYTES - 4]
    new_maxima = sum(1 for i, size in enumerate(large_sizes) if size > max(large_sizes[:i],
                                                                           default=-1))
    assert len({id(b) for b in large}) <= new_maxima


def test_a_size_above_the_limit_is_refused_before_anything_is_allocated() -> None:
    assembler = FrameAssembler(1000, lambda frame, buffer: None)
    target = assembler.get_buffer()
    target[:4] = struct.pack(">i", 1001)
    with pytest.raises(FrameTooLarge):
        assembler.buffer_updated(4)
    negative = FrameAssembler(1000, lambda frame, buffer: None)
    negative.get_buffer()[:4] = struct.pack(">i", -1)
    with pytest.raises(FrameTooLarge):
        negative.buffer_updated(4)


def test_buffers_above_the_pooled_size_are_unmapped_when_given_back() -> None:
    kept: list[FrameBuffer] = []
    pool = FrameBufferPool(max_buffer_bytes=SCRATCH_BYTES * 2)
    assembler = FrameAssembler(1 << 22, lambda frame, buffer: kept.append(buffer), pool)
    for size in (SCRATCH_BYTES * 4, SCRATCH_BYTES * 4):
        _feed(assembler, struct.pack(">i", size) + b"x" * size, [1 << 20])
        assembler.give_back(kept[-1])
    assert kept[0] is not kept[1]
    assert kept[0].closed and kept[1].closed
    assert pool.pooled_bytes == 0


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_declared_size_costs_no_memory_until_its_bytes_arrive() -> None:
    """Twenty 100 MiB prefixes followed by 1 KiB each: resident memory grows by far less than
    one of them (the kernel backs a frame's pages only as they are written)."""
    before = _rss_bytes()
    assemblers = []
    for _ in range(20):
        assembler = FrameAssembler(100 << 20, lambda frame, buffer: None)
        _feed(assembler, struct.pack(">i", 100 << 20) + b"x" * 1024, [1 << 20])
        assert assembler.partial_frame_bytes == 1024
        assemblers.append(assembler)
    assert _rss_bytes() - before < 16 << 20
    for assembler in assemblers:
        assembler.close()
        assert assembler.partial_frame_bytes == 0


def test_a_frame_cut_short_by_close_gives_its_buffer_back() -> None:
    pool = FrameBufferPool()
    assembler = FrameAssembler(1 << 22, lambda frame, buffer: None, pool)
    _feed(assembler, struct.pack(">i", 1 << 20) + b"x" * 5000, [1 << 20])
    assembler.close()
    assert pool.pooled_bytes >= 1 << 20
    assert assembler.get_buffer() is not None  # reading starts over with a fresh prefix


def test_the_pool_keeps_at_most_its_count_and_prefers_the_largest() -> None:
    pool = FrameBufferPool(max_buffers=2, max_buffer_bytes=1 << 22)
    buffers = [pool.take(size) for size in (100_000, 300_000, 600_000)]
    for buffer in buffers:
        pool.give_back(buffer)
    assert buffers[0].closed  # the smallest made way
    assert not buffers[1].closed and not buffers[2].closed
    assert pool.take(250_000) is buffers[1]  # the smallest that fits
    assert pool.take(250_000) is buffers[2]


def test_pooled_buffers_idle_past_the_limit_are_unmapped() -> None:
    pool = FrameBufferPool(idle_s=0.5)
    buffer = pool.take(1 << 20)
    pool.give_back(buffer)
    pool.trim(time.monotonic() + 0.1)
    assert not buffer.closed
    pool.trim(time.monotonic() + 1.0)
    assert buffer.closed and pool.pooled_bytes == 0


def test_a_closed_pool_unmaps_what_is_given_back() -> None:
    pool = FrameBufferPool()
    kept, returned = pool.take(1 << 20), pool.take(1 << 20)
    pool.give_back(kept)
    pool.close()
    pool.give_back(returned)
    assert kept.closed and returned.closed
