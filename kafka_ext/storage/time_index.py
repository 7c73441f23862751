"""The sparse timestamp -> offset index of one segment (`.timeindex`); mirrors Kafka's TimeIndex.

Each entry holds the largest batch max timestamp seen so far in the segment and the last offset
of the batch that first reached it, so timestamps and offsets both increase. Not thread-safe
(see AbstractIndex).
"""

from __future__ import annotations

import struct

from kafka_ext.storage.abstract_index import AbstractIndex

_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp in ms: the segment's largest batch max timestamp so far
    "i"  # relative offset: last offset of the batch with that timestamp - segment base offset
)

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    """Entries strictly increasing in timestamp and non-decreasing in offset."""

    __slots__ = ()

    entry_size = _ENTRY.size

    def entry(self, n: int) -> tuple[int, int]:
        """(timestamp_ms, absolute offset) of entry n."""
        assert self._map is not None
        timestamp, relative = _ENTRY.unpack_from(self._map, n * _ENTRY.size)
        return timestamp, self.base_offset + relative

    @property
    def last_entry(self) -> tuple[int, int]:
        """The last (timestamp_ms, offset), or (-1, base_offset) when empty."""
        if self._entries == 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(self._entries - 1)

    def maybe_append(
        self, timestamp_ms: int, offset: int, *, skip_full_check: bool = False
    ) -> None:
        """Add (timestamp_ms, offset) if timestamp_ms is larger than the last entry's.

        skip_full_check lets the final entry of a rolled segment use the last slot even when a
        roll was triggered by a full index: there is always room because roll keeps one spare.
        """
        last_timestamp, last_offset = self.last_entry
        if self._entries > 0 and timestamp_ms <= last_timestamp:
            return
        if timestamp_ms < 0:
            return
        if offset < last_offset:
            raise ValueError(f"time index offset {offset} goes back from {last_offset}")
        if self.is_full:
            if not skip_full_check:
                raise IndexError(f"time index {self.path} is full")
            self.resize(self._length + _ENTRY.size)
        assert self._map is not None
        _ENTRY.pack_into(
            self._map, self._entries * _ENTRY.size, timestamp_ms, self.relative_offset(offset)
        )
        self._entries += 1

    def _last_index(self, target: int, field: int) -> int:
        """Index of the last entry whose field (0 timestamp, 1 relative offset) <= target, or -1."""
        if self._entries == 0:
            return -1
        assert self._map is not None
        if _ENTRY.unpack_from(self._map, 0)[field] > target:
            return -1
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _ENTRY.unpack_from(self._map, mid * _ENTRY.size)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def lookup(self, target_timestamp_ms: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target as (timestamp_ms, offset); (-1, base_offset) if none."""
        n = self._last_index(target_timestamp_ms, 0)
        return (NO_TIMESTAMP, self.base_offset) if n < 0 else self.entry(n)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset >= offset."""
        self.truncate_entries(self._last_index(offset - 1 - self.base_offset, 1) + 1)

    def sanity_check(self) -> bool:
        """Whether the entries can be trusted (else the index is rebuilt)."""
        if self._entries == 0:
            return True
        first_ts, first_offset = self.entry(0)
        last_ts, last_offset = self.entry(self._entries - 1)
        return (
            first_offset >= self.base_offset and last_offset >= first_offset and last_ts >= first_ts
        )
