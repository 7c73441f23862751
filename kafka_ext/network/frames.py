"""Size-prefixed frames out of a byte stream, for an asyncio.BufferedProtocol.

Small frames are read into one scratch buffer and copied out once; a frame larger than the
scratch buffer gets a bytearray of its own that the socket fills directly, so a megabyte of
records is never copied on its way in. The size is checked against the limit before that buffer
is allocated, so a lying prefix costs nothing. Large buffers come back through `give_back` once
nothing views them any more: a fresh megabyte costs a page fault per 4 KiB (expensive in a VM).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka_ext.protocol.framing import SIZE, FrameTooLarge

# Frames up to this size are gathered in the scratch buffer; larger ones get their own.
SCRATCH_BYTES = 64 * 1024
# Large-frame buffers kept for reuse: at most this many, each at most this big.
POOLED_BUFFERS = 2
POOLED_BUFFER_MAX_BYTES = 8 * 1024 * 1024

# Called with each whole frame (without its size prefix) and, for a large frame, the bytearray
# it views (hand it to `give_back` when done; None: the frame is an independent bytes copy).
FrameCallback = Callable[[bytes | memoryview, bytearray | None], None]


class FrameAssembler:
    """Owned by one protocol on the event loop: its get_buffer / buffer_updated delegate here."""

    def __init__(self, max_frame_bytes: int, on_frame: FrameCallback,
                 pooled_buffer_max_bytes: int = POOLED_BUFFER_MAX_BYTES) -> None:
        # Changeable: a SASL listener keeps it small until the client has logged in.
        self.max_frame_bytes = max_frame_bytes
        self._on_frame = on_frame
        self._pooled_buffer_max_bytes = pooled_buffer_max_bytes
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._scratch_filled = 0
        self._large_frame: memoryview | None = None  # a frame bigger than the scratch buffer
        self._large_buffer: bytearray | None = None  # what _large_frame views
        self._large_filled = 0
        self._free_buffers: list[bytearray] = []

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
                buffer = self._take_buffer(size)
                frame = memoryview(buffer)[:size]
                frame[:end - body] = view[body:end]
                self._large_frame, self._large_buffer = frame, buffer
                self._large_filled = end - body
                pos = end
            break
        if pos:
            view[:end - pos] = view[pos:end]
            self._scratch_filled = end - pos

    def _take_buffer(self, size: int) -> bytearray:
        for i, buffer in enumerate(self._free_buffers):
            if len(buffer) >= size:
                return self._free_buffers.pop(i)
        return bytearray(size)

    def give_back(self, buffer: bytearray) -> None:
        """Return a large frame's buffer for reuse; the caller holds no view of it any more."""
        if len(buffer) <= self._pooled_buffer_max_bytes:
            if len(self._free_buffers) >= POOLED_BUFFERS:
                self._free_buffers.sort(key=len)
                self._free_buffers.pop(0)  # keep the largest: they serve every smaller frame
            self._free_buffers.append(buffer)
