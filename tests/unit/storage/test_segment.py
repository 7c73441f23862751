"""LogSegment: appends, sparse indexes, zero-copy reads, recovery and truncation on real files."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from kafka_ext.protocol.record_batch import read_batch_header, set_base_offset
from kafka_ext.protocol.records import decode_all_batches
from kafka_ext.storage.segment import LogSegment


def _segment(
    path: Path, base_offset: int = 0, interval: int = 4096, index_bytes: int = 1024 * 1024
) -> LogSegment:
    return LogSegment(
        path,
        base_offset,
        index_interval_bytes=interval,
        max_index_size_bytes=index_bytes,
        active=True,
    )


def _append(segment: LogSegment, batch: bytes, base_offset: int) -> int:
    buf = bytearray(batch)
    set_base_offset(buf, 0, base_offset)
    segment.append(buf)
    return read_batch_header(buf).next_offset


def _fill(
    segment: LogSegment, make_batch, batches: int, per_batch: int = 5, value_size: int = 100
) -> list[int]:
    """Append batches of per_batch records; returns each batch's base offset."""
    offset, bases = segment.base_offset, []
    for n in range(batches):
        bases.append(offset)
        offset = _append(
            segment, make_batch(per_batch, timestamp_ms=1000 + n, value_size=value_size), offset
        )
    return bases


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 3, per_batch=5)
    info = segment.read(7, 1 << 20)
    assert info is not None
    batches = list(decode_all_batches(info.records[0]))
    assert [h.base_offset for h, _ in batches] == [5, 10]
    assert [r.offset for r in batches[0][1]] == [5, 6, 7, 8, 9]
    assert info.fetch_offset_metadata.relative_position_in_segment > 0


def test_read_returns_views_of_the_mmap_not_copies(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 2)
    info = segment.read(0, 1 << 20)
    assert info is not None
    view = info.records[0]
    assert isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap)
    assert view.readonly


def test_read_sees_bytes_appended_after_the_first_map(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 1)
    first = segment.read(0, 1 << 20)
    assert first is not None
    _append(segment, make_batch(2, value_size=50), segment.next_offset)
    later = segment.read(5, 1 << 20)
    assert later is not None
    [(header, records)] = list(decode_all_batches(later.records[0]))
    assert header.base_offset == 5 and [r.offset for r in records] == [5, 6]
    assert bytes(first.records[0]) == bytes(
        segment.read(0, len(first.records[0])).records[0]
    )  # old view intact


def test_read_stops_at_batch_boundary_within_max_size(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 4)
    batch_size = segment.size_bytes // 4
    info = segment.read(0, 2 * batch_size + batch_size // 2)
    assert info is not None and len(info.records[0]) == 2 * batch_size


def test_read_smaller_than_one_batch_needs_min_one_message(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 2)
    batch_size = segment.size_bytes // 2
    assert segment.read(0, 10).records == []
    info = segment.read(0, 10, min_one_message=True)
    assert info is not None and len(info.records[0]) == batch_size


def test_read_past_the_end_returns_none(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 1)
    assert segment.read(5, 1000) is None


def test_index_lookup_is_sparse(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=1000)
    _fill(segment, make_batch, 40, per_batch=2, value_size=200)  # ~480-byte batches
    entries = segment.offset_index.entries
    assert 0 < entries < 40
    # an entry roughly every two batches: interval 1000 bytes / ~480 bytes per batch
    assert 13 <= entries <= 20
    offset, position = segment.offset_index.lookup(41)
    assert offset <= 41
    header = read_batch_header(segment.read(offset, 1 << 20).records[0])
    assert header.last_offset == offset
    assert (
        segment.read(
            offset, 10, min_one_message=True
        ).fetch_offset_metadata.relative_position_in_segment
        == position
    )


def test_offset_index_entries_point_at_batch_starts(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=100)
    _fill(segment, make_batch, 10)
    data = segment.read(0, 1 << 20).records[0]
    for n in range(segment.offset_index.entries):
        offset, position = segment.offset_index.entry(n)
        assert read_batch_header(data, position).last_offset == offset


def test_indexes_are_preallocated_then_trimmed_when_inactive(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=100, index_bytes=64 * 1024)
    _fill(segment, make_batch, 10)
    assert os.path.getsize(segment.offset_index.path) == 64 * 1024
    segment.on_become_inactive()
    assert os.path.getsize(segment.offset_index.path) == 8 * segment.offset_index.entries
    assert os.path.getsize(segment.time_index.path) == 12 * segment.time_index.entries


def test_reopened_preallocated_index_counts_only_written_entries(
    tmp_path: Path, make_batch
) -> None:
    segment = _segment(tmp_path, interval=100)
    _fill(segment, make_batch, 10)
    entries = segment.offset_index.entries
    segment.flush()  # an unclean stop: the index stays preallocated
    reopened = _segment(tmp_path, interval=100)
    assert reopened.offset_index.entries == entries
    assert reopened.load_tail_state() and reopened.next_offset == 50


def test_find_offset_by_timestamp_returns_first_record_at_or_after(
    tmp_path: Path, make_batch
) -> None:
    segment = _segment(tmp_path, interval=100)
    offset = 0
    for n in range(10):
        offset = _append(
            segment, make_batch(timestamps=[n * 100 + i * 10 for i in range(5)]), offset
        )
    assert segment.find_offset_by_timestamp(325, 0) == (330, 18, -1)
    assert segment.find_offset_by_timestamp(0, 0) == (0, 0, -1)
    assert segment.find_offset_by_timestamp(10_000, 0) is None


def test_recovery_truncates_torn_tail(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=100)
    _fill(segment, make_batch, 5)
    good_size = segment.size_bytes
    segment.flush()
    with open(segment.log_path, "ab") as f:
        f.write(make_batch(3)[:40])
    reopened = _segment(tmp_path, interval=100)
    assert not reopened.load_tail_state()
    assert reopened.recover() == 40
    assert reopened.size_bytes == good_size == os.path.getsize(reopened.log_path)
    assert reopened.next_offset == 25


def test_recovery_truncates_at_corrupt_batch(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=100)
    _fill(segment, make_batch, 5)
    batch_size = segment.size_bytes // 5
    segment.close()
    with open(tmp_path / "00000000000000000000.log", "r+b") as f:
        f.seek(3 * batch_size + 70)
        f.write(b"\xff")
    reopened = _segment(tmp_path, interval=100)
    assert reopened.recover() == 2 * batch_size
    assert reopened.next_offset == 15
    assert all(reopened.offset_index.entry(n)[0] < 15 for n in range(reopened.offset_index.entries))


def test_truncate_to_removes_the_batch_holding_the_offset(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path, interval=100)
    _fill(segment, make_batch, 6)
    batch_size = segment.size_bytes // 6
    assert segment.truncate_to(15) == 3 * batch_size
    assert segment.next_offset == 15 and segment.size_bytes == 3 * batch_size
    assert segment.read(15, 1000) is None
    _append(segment, make_batch(5), 15)
    assert segment.next_offset == 20


def test_truncate_keeps_views_held_by_a_response_readable(tmp_path: Path, make_batch) -> None:
    segment = _segment(tmp_path)
    _fill(segment, make_batch, 4)
    info = segment.read(0, 1 << 20)
    held = info.records[0]
    before = bytes(held)
    segment.truncate_to(5)
    assert bytes(held) == before  # old inode still mapped: no SIGBUS, same bytes
    assert os.path.getsize(segment.log_path) == segment.size_bytes == len(before) // 4
    assert segment.read(0, 1 << 20).records[0].tobytes() == before[: len(before) // 4]
