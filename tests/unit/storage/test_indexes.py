"""OffsetIndex and TimeIndex on their own: binary search, truncation, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_ext.storage.offset_index import OffsetIndex
from kafka_ext.storage.time_index import TimeIndex


def test_offset_index_lookup_finds_largest_entry_at_or_below(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100, 4096, writable=True)
    for n in range(1, 50):
        index.append(100 + n * 10, n * 1000)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(105) == (100, 0)
    assert index.lookup(110) == (110, 1000)
    assert index.lookup(255) == (250, 15000)
    assert index.lookup(10_000) == (590, 49000)
    assert index.lookup_by_position(15500) == (250, 15000)


def test_offset_index_rejects_unordered_entries_and_fills_up(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 16, writable=True)
    index.append(5, 100)
    with pytest.raises(ValueError):
        index.append(5, 200)
    index.append(6, 200)
    assert index.is_full
    with pytest.raises(IndexError):
        index.append(7, 300)


def test_offset_index_truncate_and_reopen(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=True)
    for n in range(1, 11):
        index.append(n * 10, n * 100)
    index.truncate_to(55)
    assert index.entries == 5 and index.lookup(1000) == (50, 500)
    index.close()
    assert (tmp_path / "x.index").stat().st_size == 40
    reopened = OffsetIndex(tmp_path / "x.index", 0, 4096, writable=False)
    assert reopened.entries == 5 and reopened.last_entry == (50, 500)


def test_time_index_keeps_only_increasing_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", 0, 4096, writable=True)
    index.maybe_append(1000, 3)
    index.maybe_append(1000, 5)
    index.maybe_append(900, 6)
    index.maybe_append(2000, 9)
    assert index.entries == 2
    assert index.lookup(1500) == (1000, 3)
    assert index.lookup(999) == (-1, 0)
    index.truncate_to(9)
    assert index.entries == 1 and index.last_entry == (1000, 3)
