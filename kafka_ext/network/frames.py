"""Size-prefixed frames out of a byte stream, for an asyncio.BufferedProtocol.

Small frames are read into one scratch buffer and copied out once; a frame larger than the
scratch buffer gets a buffer of its own that the socket fills directly, so a megabyte of
records is never copied on its way in. A declared size is a claim, not a budget (DESIGN.md
principle 10): it is checked against the limit first, and the large frame's buffer is an
anonymous memory map of that size, whose pages the kernel backs only as the bytes arrive. A
prefix of 100 MiB followed by silence costs one mapping and no memory.

Large buffers come back through `give_back` once nothing views them any more. A few of them
are kept for reuse by a FrameBufferPool (a fresh megabyte costs a page fault per 4 KiB, which
is expensive in a VM), capped in count and size, and emptied of buffers nobody took for a few
seconds, so the memory of a burst goes back to the system; the others are unmapped at once.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable

from kafka_ext.protocol.framing import SIZE, FrameTooLarge

# Frames up to this size are gathered in the scratch buffer; larger ones get their own.
SCRATCH_BYTES = 64 * 1024
# Large-frame buffers kept for reuse by a pool of its own: at most this many, each at most
# this big.
POOLED_BUFFERS = 2
POOLED_BUFFER_MAX_BYTES = 8 * 1024 * 1024
# A pooled buffer nobody took for this long is unmapped.
POOLED_BUFFER_IDLE_S = 5.0
# Large buffers are mapped in whole multiples of this (pages nobody writes cost nothing), so
# one pooled buffer serves frames of slightly different sizes.
_BUFFER_GRANULE_BYTES = 64 * 1024

FrameBuffer = mmap.mmap

# Called with each whole frame (without its size prefix) and, for a large frame, the buffer it
# views (hand it to `give_back` when done; None: the frame is an independent bytes copy).
FrameCallback = Callable[[bytes | memoryview, FrameBuffer | None], None]


def _unmap(buffer: FrameBuffer) -> None:
    """Give a buffer's memory back to the system now, unless something still views it (then
    its last reference does)."""
    try:
        buffer.close()
    except BufferError:
        pass


class FrameBufferPool:
    """Large-frame buffers kept for reuse; shared by the connections of one event loop.

    Invariant: at most `max_buffers` buffers, none larger than `max_buffer_bytes`, none idle
    for longer than `idle_s` once `trim` has run (take and give_back run it too).
    """

    def __init__(self, max_buffers: int = POOLED_BUFFERS,
                 max_buffer_bytes: int = POOLED_BUFFER_MAX_BYTES,
                 idle_s: float = POOLED_BUFFER_IDLE_S) -> None:
        self.max_buffers = max_buffers
        self.max_buffer_bytes = max_buffer_bytes
        self._idle_s = idle_s
        self._free: list[tuple[FrameBuffer, float]] = []  # (buffer, when it was given back)
        self._closed = False

    def take(self, size: int) -> FrameBuffer:
        """A buffer of at least `size` bytes: a pooled one if one is large enough."""
        self.trim()
        best = None
        for i, (buffer, _) in enumerate(self._free):
            if len(buffer) >= size and (best is None or len(buffer) < len(self._free[best][0])):
                best = i
        if best is not None:
            return self._free.pop(best)[0]
        mapped = -(-max(size, 1) // _BUFFER_GRANULE_BYTES) * _BUFFER_GRANULE_BYTES
        return mmap.mmap(-1, mapped, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def give_back(self, buffer: FrameBuffer) -> None:
        """Keep `buffer` for reuse, or unmap it; the caller holds no view of it any more."""
        now = time.monotonic()
        self.trim(now)
        if buffer.closed:
            return
        if len(buffer) > self.max_buffer_bytes or self.max_buffers <= 0 or self._closed:
            _unmap(buffer)
            return
        if len(self._free) >= self.max_buffers:
            self._free.sort(key=lambda entry: len(entry[0]))
            if len(self._free[0][0]) > len(buffer):
                _unmap(buffer)  # keep the largest: they serve every smaller frame
                return
            _unmap(self._free.pop(0)[0])
        self._free.append((buffer, now))

    def trim(self, now: float | None = None) -> None:
        """Unmap the buffers nobody took for `idle_s`."""
        if not self._free:
            return
        deadline = (time.monotonic() if now is None else now) - self._idle_s
        kept = []
        for buffer, since in self._free:
            if since < deadline:
                _unmap(buffer)
            else:
                kept.append((buffer, since))
        self._free = kept

    def close(self) -> None:
        """Unmap every pooled buffer, and every buffer given back from now on."""
        self._closed = True
        for buffer, _ in self._free:
            _unmap(buffer)
        self._free = []

    @property
    def pooled_bytes(self) -> int:
        return sum(len(buffer) for buffer, _ in self._free)


def _closed(frame: bytes | memoryview, buffer: FrameBuffer | None) -> None:
    """Where frames go once the stream has ended: nowhere (nobody is there to answer)."""


class FrameAssembler:
    """Owned by one protocol on the event loop: its get_buffer / buffer_updated delegate here."""

    def __init__(self, max_frame_bytes: int, on_frame: FrameCallback,
                 buffers: FrameBufferPool | None = None) -> None:
        # Changeable: a SASL listener keeps it small until the client has logged in.
        self.max_frame_bytes = max_frame_bytes
        self._on_frame = on_frame
        self._buffers = buffers if buffers is not None else FrameBufferPool()
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._scratch_filled = 0
        self._large_frame: memoryview | None = None  # a frame bigger than the scratch buffer
        self._large_buffer: FrameBuffer | None = None  # what _large_frame views
        self._large_filled = 0

    @property
    def partial_frame_bytes(self) -> int:
        """Bytes received of a large frame not yet complete (the scratch buffer's are not
        counted: it is there whatever arrives)."""
        return self._large_filled if self._large_frame is not None else 0

    def get_buffer(self) -> memoryview:
        if self._large_frame is not None:
            return self._large_frame[self._large_filled:]
        return self._scratch_view[self._scratch_filled:]

    def buffer_updated(self, nbytes: int) -> None:
        """Deliver every frame `nbytes` more bytes completed; FrameTooLarge on a bad prefix."""
        large = self._large_frame
        if large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(large):
                buffer = self._large_buffer
                self._large_frame = self._large_buffer = None
                self._large_filled = 0
                self._on_frame(large, buffer)
            return
        self._scratch_filled += nbytes
        self._frames_from_scratch()

    def _frames_from_scratch(self) -> None:
        """Deliver every whole frame in the scratch buffer; keep the partial tail at its front."""
        view = self._scratch_view
        end = self._scratch_filled
        pos = 0
        while end - pos >= 4:
            (size,) = SIZE.unpack_from(view, pos)
            if not 0 <= size <= self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            body = pos + 4
            if end - body >= size:
                self._on_frame(bytes(view[body:body + size]), None)
                pos = body + size
                continue
            if 4 + size > len(view):  # will never fit: read the rest straight into its own buffer
                buffer = self._buffers.take(size)
                frame = memoryview(buffer)[:size]
                frame[:end - body] = view[body:end]
                self._large_frame, self._large_buffer = frame, buffer
                self._large_filled = end - body
                pos = end
            break
        if pos:
            view[:end - pos] = view[pos:end]
            self._scratch_filled = end - pos

    def give_back(self, buffer: FrameBuffer) -> None:
        """Return a large frame's buffer for reuse; the caller holds no view of it any more."""
        self._buffers.give_back(buffer)

    def close(self) -> None:
        """The stream ended: let go of the frame being read (delivered frames are their
        handlers' until they give them back), the scratch buffer and the callback, so
        nothing here keeps the connection alive in a cycle."""
        if self._large_frame is not None:
            self._large_frame.release()
            buffer = self._large_buffer
            self._large_frame = self._large_buffer = None
            self._large_filled = 0
            assert buffer is not None
            # Its pages go back to the system now, even if the transport still holds a view
            # of it (which keeps the mapping itself alive): nothing will read what they held.
            buffer.madvise(mmap.MADV_DONTNEED)
            self._buffers.give_back(buffer)
        self._scratch_filled = 0
        self._scratch_view.release()
        self._scratch = bytearray()
        self._scratch_view = memoryview(self._scratch)
        self._on_frame = _closed
