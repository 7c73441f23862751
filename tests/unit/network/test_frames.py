"""FrameAssembler: whatever way the socket splits the stream, every frame comes out whole, once,
in order; large frames land in buffers of their own that come back for reuse."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.network.frames import SCRATCH_BYTES, FrameAssembler
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
    large: list[bytearray] = []  # kept alive here, so their ids stay distinct

    def on_frame(frame: bytes | memoryview, buffer: bytearray | None) -> None:
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


def test_buffers_above_the_pooled_size_are_not_kept() -> None:
    kept: list[bytearray] = []
    assembler = FrameAssembler(1 << 22, lambda frame, buffer: kept.append(buffer or bytearray()),
                               pooled_buffer_max_bytes=SCRATCH_BYTES * 2)
    for size in (SCRATCH_BYTES * 4, SCRATCH_BYTES * 4):
        _feed(assembler, struct.pack(">i", size) + b"x" * size, [1 << 20])
        assembler.give_back(kept[-1])
    assert kept[0] is not kept[1]
