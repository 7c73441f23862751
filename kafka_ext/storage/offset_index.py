"""The sparse offset -> file position index of one segment (`.index`); mirrors Kafka's OffsetIndex.

An entry maps a batch's last offset to the byte position where that batch starts, as Kafka
writes them, so Kafka's tools read our files. Entries are added every `index.interval.bytes`.
Not thread-safe (see AbstractIndex).
"""

from __future__ import annotations

import struct

from kafka_ext.storage.abstract_index import AbstractIndex

_ENTRY = struct.Struct(
    ">"
    "i"  # relative offset: batch last offset - segment base offset
    "i"  # position: byte position of the batch in the .log file
)


class OffsetIndex(AbstractIndex):
    """Entries strictly increasing in offset and in position."""

    __slots__ = ()

    entry_size = _ENTRY.size

    def entry(self, n: int) -> tuple[int, int]:
        """(absolute offset, position) of entry n."""
        assert self._map is not None
        relative, position = _ENTRY.unpack_from(self._map, n * _ENTRY.size)
        return self.base_offset + relative, position

    @property
    def last_entry(self) -> tuple[int, int]:
        """The last (offset, position), or (base_offset, 0) when empty."""
        if self._entries == 0:
            return self.base_offset, 0
        return self.entry(self._entries - 1)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must grow. Raises IndexError when the file is full."""
        if self._entries > 0:
            last_offset, last_position = self.entry(self._entries - 1)
            if offset <= last_offset or position <= last_position:
                raise ValueError(
                    f"index entry ({offset}, {position}) is not after ({last_offset}, {last_position})"
                )
        if self.is_full:
            raise IndexError(f"offset index {self.path} is full")
        assert self._map is not None
        _ENTRY.pack_into(
            self._map, self._entries * _ENTRY.size, self.relative_offset(offset), position
        )
        self._entries += 1

    def _last_at_or_below(self, target: int, field: int) -> int:
        """Index of the last entry whose field (0 offset, 1 position) <= target, or -1."""
        if self._entries == 0:
            return -1
        assert self._map is not None
        if field == 0:
            target -= self.base_offset
        lo, hi = 0, self._entries - 1
        if _ENTRY.unpack_from(self._map, 0)[field] > target:
            return -1
        while lo < hi:  # invariant: entry lo <= target
            mid = (lo + hi + 1) // 2
            if _ENTRY.unpack_from(self._map, mid * _ENTRY.size)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target_offset as (offset, position); (base_offset, 0) if none.

        The batch at that position ends at or before target_offset, so a scan from it finds the
        batch that holds target_offset.
        """
        n = self._last_at_or_below(target_offset, 0)
        return (self.base_offset, 0) if n < 0 else self.entry(n)

    def lookup_by_position(self, target_position: int) -> tuple[int, int]:
        """Largest entry with position <= target_position; (base_offset, 0) if none."""
        n = self._last_at_or_below(target_position, 1)
        return (self.base_offset, 0) if n < 0 else self.entry(n)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset >= offset (their batches are being removed)."""
        self.truncate_entries(self._last_at_or_below(offset - 1, 0) + 1)

    def sanity_check(self, log_size_bytes: int) -> bool:
        """Whether the entries can be trusted for a log of this size (else the index is rebuilt)."""
        if self._entries == 0:
            return True
        last_offset, last_position = self.entry(self._entries - 1)
        first_offset, _ = self.entry(0)
        return (
            first_offset >= self.base_offset
            and last_offset >= first_offset
            and last_position < log_size_bytes
        )
