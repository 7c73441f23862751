"""Fixed-size-entry index files shared by the offset and time indexes; mirrors Kafka's AbstractIndex.

The file is memory-mapped and preallocated to `segment.index.bytes` while its segment is active,
then trimmed to the used entries. Entries are sorted on both fields, so lookups binary-search.
Not thread-safe: the owning LogSegment's caller serialises every call except `flush()`, which
fsyncs the file descriptor and is safe against concurrent appends and resizes (the fd never
changes until `close()`).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

# Files renamed for removal in the background; a start removes any left behind.
DELETED_SUFFIX = ".deleted"


class AbstractIndex:
    """Entries [0, entries) of `entry_size` bytes each; bytes after them are zero or unused."""

    __slots__ = (
        "path",
        "base_offset",
        "max_index_size_bytes",
        "_fd",
        "_map",
        "_length",
        "_entries",
    )

    entry_size: int = 0  # set by subclasses

    def __init__(
        self, path: Path, base_offset: int, max_index_size_bytes: int, *, writable: bool
    ) -> None:
        """Open or create the index; writable=True preallocates it for appends (the active segment)."""
        self.path = path
        self.base_offset = base_offset
        self.max_index_size_bytes = max_index_size_bytes
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._map: mmap.mmap | None = None
        self._length = 0
        size = os.fstat(self._fd).st_size
        self._remap(size - size % self.entry_size)
        self._entries = self._count_entries()
        if writable:
            self.resize(max_index_size_bytes)

    # -- file and map management

    def _remap(self, length: int) -> None:
        """Set the file to length bytes and map it (no map for an empty file: mmap refuses 0)."""
        if self._map is not None:
            self._map.close()  # never exported: lookups only unpack_from it
            self._map = None
        os.ftruncate(self._fd, length)
        self._length = length
        if length > 0:
            self._map = mmap.mmap(self._fd, length)

    def resize(self, size_bytes: int) -> None:
        """Grow (preallocate) or shrink the file, rounded down to whole entries, keeping entries."""
        length = max(size_bytes - size_bytes % self.entry_size, self._entries * self.entry_size)
        if length != self._length:
            self._remap(length)

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the used entries: done when the segment stops being active."""
        self.resize(self._entries * self.entry_size)

    def _count_entries(self) -> int:
        """Entries in a freshly opened file: all of a trimmed file, the non-zero prefix of a preallocated one.

        Entry 0 may legitimately be zero only in the key field; from entry 1 on the key field is
        strictly increasing hence non-zero, so the zero padding is found by binary search.
        """
        slots = self._length // self.entry_size
        if slots == 0:
            return 0
        if self._is_empty_slot(0):
            return 0
        lo, hi = 1, slots  # first empty slot is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_empty_slot(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _is_empty_slot(self, n: int) -> bool:
        """Whether slot n holds the zero padding of a preallocated file."""
        assert self._map is not None
        start = n * self.entry_size
        return self._map[start : start + self.entry_size] == bytes(self.entry_size)

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        """Bytes of used entries."""
        return self._entries * self.entry_size

    def relative_offset(self, offset: int) -> int:
        """offset - base_offset, which must fit an int32 (the segment rolls before it would not)."""
        relative = offset - self.base_offset
        if not 0 <= relative <= 0x7FFFFFFF:
            raise ValueError(
                f"offset {offset} does not fit index with base offset {self.base_offset}"
            )
        return relative

    def truncate_entries(self, count: int) -> None:
        """Keep the first count entries and zero the rest, so a reopen counts them right."""
        count = max(0, min(count, self._entries))
        if self._map is not None and count < self._entries:
            start, end = count * self.entry_size, self._entries * self.entry_size
            self._map[start:end] = bytes(end - start)
        self._entries = count

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index from the log)."""
        self.truncate_entries(0)

    def flush(self) -> None:
        """Write dirty mapped pages to disk (blocks: fsync of the fd flushes the page cache)."""
        os.fsync(self._fd)

    def duplicate_fd(self) -> int:
        """A new descriptor of the index file, for an fsync that must not hold the log's lock."""
        return os.dup(self._fd)

    def close(self) -> None:
        """Trim to the used entries, unmap and close the file."""
        self.trim_to_valid_size()
        if self._map is not None:
            self._map.close()
            self._map = None
        os.close(self._fd)
        self._fd = -1

    def delete(self, defer: bool = False) -> Path | None:
        """Close (if open) and remove the file; with `defer`, rename it to `<name>.deleted`
        instead and return that path for the caller to unlink off the event loop."""
        if self._fd >= 0:
            if self._map is not None:
                self._map.close()
                self._map = None
            os.close(self._fd)
            self._fd = -1
        if not defer:
            self.path.unlink(missing_ok=True)
            return None
        doomed = self.path.with_name(self.path.name + DELETED_SUFFIX)
        os.replace(self.path, doomed)
        return doomed

    def rename(self, path: Path) -> None:
        """Move the file, keeping it open."""
        os.replace(self.path, path)
        self.path = path
