"""One log segment: a `.log` file of record batches with its `.index` and `.timeindex`.

Mirrors Apache Kafka's LogSegment. Appends go through the file descriptor (`os.pwrite`); reads
return `memoryview` slices of a read-only mmap of the file, remapped (never closed while views
may be exported) when a read needs bytes past the current map. Not thread-safe: one caller (the
partition's event loop) makes every call; only `flush()` may run in another thread at the same
time as `append`/`read`, because it only fsyncs file descriptors that stay open until `close()`.
Blocking methods: `flush`, `close`, `delete`, `recover`, `truncate_to` (file I/O).
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    BytesLike,
    TimestampType,
    iter_batch_headers,
    read_batch_header,
    validate_batch,
)
from kafka_ext.protocol.records import decode_records
from kafka_ext.storage.abstract_index import DELETED_SUFFIX
from kafka_ext.storage.fetch_data_info import FetchDataInfo, LogOffsetMetadata
from kafka_ext.storage.offset_index import OffsetIndex
from kafka_ext.storage.time_index import NO_TIMESTAMP, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SWAP_SUFFIX = ".swap"
MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # index entries store offsets relative to the base in an int32


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded base offset that names every file of a segment."""
    return f"{offset:020d}"


class LogSegment:
    """Batches [base_offset, next_offset) stored at [0, size_bytes) of the .log file, in offset order."""

    __slots__ = (
        "base_offset",
        "log_path",
        "offset_index",
        "time_index",
        "index_interval_bytes",
        "created_ms",
        "next_offset",
        "max_timestamp_ms",
        "offset_of_max_timestamp",
        "rolling_based_timestamp_ms",
        "_fd",
        "_size",
        "_bytes_since_last_index_entry",
        "_map",
        "_map_view",
        "_map_size",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size_bytes: int,
        active: bool,
        created_ms: int | None = None,
    ) -> None:
        """Open (creating if absent) the segment's files; `active` preallocates the indexes."""
        prefix = filename_prefix(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / (prefix + LOG_SUFFIX)
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = int(time.time() * 1000) if created_ms is None else created_ms
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            directory / (prefix + INDEX_SUFFIX), base_offset, max_index_size_bytes, writable=active
        )
        self.time_index = TimeIndex(
            directory / (prefix + TIME_INDEX_SUFFIX),
            base_offset,
            max_index_size_bytes,
            writable=active,
        )
        self._map: mmap.mmap | None = None
        self._map_view: memoryview | None = None
        self._map_size = 0
        self.next_offset = base_offset
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp_ms: int | None = None
        self._bytes_since_last_index_entry = 0

    # -- state

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def largest_timestamp_ms(self) -> int:
        """Largest batch max timestamp, or the file's mtime when no batch has one (retention.ms)."""
        if self.max_timestamp_ms >= 0:
            return self.max_timestamp_ms
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        """The log file's mtime (ms): what ListOffsets v0 compares timestamps with."""
        return int(os.fstat(self._fd).st_mtime * 1000)

    def indexes_are_sane(self) -> bool:
        """Whether both indexes look consistent with the log (else recovery rebuilds them)."""
        return self.offset_index.sanity_check(max(self._size, 1)) and self.time_index.sanity_check()

    def load_tail_state(self) -> bool:
        """Rebuild in-memory state from the indexes plus a scan of batches after the last index entry.

        Returns False when the scan stops before the end of the file (a torn tail: recover).
        """
        timestamp, offset = self.time_index.last_entry
        self.max_timestamp_ms, self.offset_of_max_timestamp = timestamp, offset
        self.next_offset = self.base_offset
        _, position = self.offset_index.last_entry
        end = position
        self.rolling_based_timestamp_ms = None
        if self._size < BATCH_OVERHEAD:
            self._bytes_since_last_index_entry = 0
            return self._size == 0 and position == 0
        view = self._mapped(self._size)
        self.rolling_based_timestamp_ms = read_batch_header(view, 0).max_timestamp
        for pos, header in iter_batch_headers(view, position, self._size):
            self._note_batch(header)
            end = pos + header.size_bytes
        del view
        self._bytes_since_last_index_entry = end - position
        return end == self._size

    def _note_batch(self, header: BatchHeader) -> None:
        """Fold one appended batch into next_offset and the max timestamp so far."""
        self.next_offset = header.next_offset
        if header.max_timestamp > self.max_timestamp_ms:
            self.max_timestamp_ms = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    # -- map management (zero-copy reads)

    def _mapped(self, end: int) -> memoryview:
        """A view of the mmap covering [0, end); remaps (a new mmap) when the file grew past it."""
        if self._map_view is None or end > self._map_size:
            # Drop (never close) the old map: fetch responses may still hold views into it.
            self._map = mmap.mmap(self._fd, self._size, access=mmap.ACCESS_READ)
            self._map_view = memoryview(self._map)
            self._map_size = self._size
        return self._map_view

    def _release_map(self) -> bool:
        """Forget the map; True if it had no exported views (so the file may shrink in place)."""
        if self._map is None:
            return True
        assert self._map_view is not None
        self._map_view.release()
        closed = True
        try:
            self._map.close()
        except BufferError:
            closed = False  # a response still holds views: refcounting frees it later
        self._map, self._map_view, self._map_size = None, None, 0
        return closed

    def _truncate_file(self, position: int) -> None:
        """Cut the .log file to position without breaking views a response may still hold.

        Shrinking a file under a live mapping would SIGBUS its readers, so when views exist the
        kept prefix is copied to a new file that replaces this one; the old inode lives on
        until the last view is released.
        """
        if self._release_map():
            os.ftruncate(self._fd, position)
        else:
            swap_path = self.log_path.with_name(self.log_path.name + SWAP_SUFFIX)
            new_fd = os.open(swap_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            copied = 0
            while copied < position:
                copied += os.copy_file_range(self._fd, new_fd, position - copied, copied, copied)
            os.replace(swap_path, self.log_path)
            os.close(self._fd)
            self._fd = new_fd
        self._size = position

    # -- appends

    def append(self, records: BytesLike) -> None:
        """Append whole, offset-assigned batches at the end; add a sparse index entry per interval.

        The caller checked that offsets follow next_offset and fit this segment (`can_hold`).
        """
        with memoryview(records) as view:
            batches = list(iter_batch_headers(view))
            end = batches[-1][0] + batches[-1][1].size_bytes if batches else 0
            if end != len(view):
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE, f"torn batch at byte {end} of an append"
                )
            if self._size == 0 and batches:
                self.rolling_based_timestamp_ms = batches[0][1].max_timestamp
            for pos, header in batches:
                self._note_batch(header)
                room = not (self.offset_index.is_full or self.time_index.is_full)
                if self._bytes_since_last_index_entry > self.index_interval_bytes and room:
                    self.offset_index.append(header.last_offset, self._size + pos)
                    self.time_index.maybe_append(
                        self.max_timestamp_ms, self.offset_of_max_timestamp
                    )
                    self._bytes_since_last_index_entry = 0
                self._bytes_since_last_index_entry += header.size_bytes
            written = 0
            while written < end:
                written += os.pwrite(self._fd, view[written:end], self._size + written)
        self._size += end

    def can_hold(self, last_offset: int) -> bool:
        """Whether last_offset fits the indexes' int32 relative offsets and the indexes have room."""
        return (
            last_offset - self.base_offset <= MAX_RELATIVE_OFFSET
            and not self.offset_index.is_full
            and not self.time_index.is_full
        )

    # -- reads

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= offset, or None past the end."""
        if self._size == 0:
            return None
        _, position = self.offset_index.lookup(offset)
        view = self._mapped(self._size)
        for pos, header in iter_batch_headers(view, max(position, start_position), self._size):
            if header.last_offset >= offset:
                return pos, header
        return None

    def _end_of_whole_batches(self, start: int, limit: int) -> int:
        """The largest batch boundary <= limit, starting at the boundary start (>= start)."""
        _, position = self.offset_index.lookup_by_position(limit)
        position = max(position, start)
        if position >= limit:
            return start if position > limit else position
        view = self._mapped(self._size)
        end = position
        for pos, header in iter_batch_headers(view, position, limit):
            end = pos + header.size_bytes
        return end

    def read(
        self,
        start_offset: int,
        max_size_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding start_offset, up to max_size_bytes and max_position.

        None when start_offset is past this segment. min_one_message returns the first batch even
        when it alone exceeds max_size_bytes (Kafka's KIP-74 rule). The one slice is a view of
        the mmap, not a copy.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, header = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start)
        end_limit = self._size if max_position is None else min(max_position, self._size)
        if start >= end_limit:
            return FetchDataInfo(metadata, [])
        end = self._end_of_whole_batches(start, min(end_limit, start + max(max_size_bytes, 0)))
        if end == start and min_one_message:
            end = min(start + header.size_bytes, end_limit)
        if end == start:
            return FetchDataInfo(metadata, [])
        return FetchDataInfo(metadata, [self._mapped(end)[start:end]])

    def find_offset_by_timestamp(
        self, timestamp_ms: int, start_offset: int
    ) -> tuple[int, int, int] | None:
        """(timestamp_ms, offset, leader_epoch) of the first record with timestamp >= timestamp_ms.

        Uses the time index to skip ahead, scans batch headers, then decodes the one batch found
        to pick the exact record, as Kafka does. None if no record here qualifies.
        """
        if self._size == 0:
            return None
        _, indexed_offset = self.time_index.lookup(timestamp_ms)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        view = self._mapped(self._size)
        for pos, header in iter_batch_headers(view, position, self._size):
            if header.max_timestamp >= timestamp_ms and header.last_offset >= start_offset:
                return self._first_record_at_or_after(view, pos, header, timestamp_ms, start_offset)
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(timestamp_ms, offset, leader_epoch) of the first record with this segment's max timestamp."""
        if self.max_timestamp_ms < 0:
            return None
        found = self.translate_offset(self.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        return self._first_record_at_or_after(
            self._mapped(self._size), pos, header, self.max_timestamp_ms, header.base_offset
        )

    @staticmethod
    def _first_record_at_or_after(
        view: memoryview, pos: int, header: BatchHeader, timestamp_ms: int, start_offset: int
    ) -> tuple[int, int, int]:
        """Decode one batch (ListOffsets only, never on produce/fetch) to find the exact record."""
        epoch = header.partition_leader_epoch
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return header.max_timestamp, max(header.base_offset, start_offset), epoch
        _, records = decode_records(view, pos, verify_crc=False)
        for record in records:  # per-record loop: ListOffsets needs the record, not the batch
            if record.timestamp >= timestamp_ms and record.offset >= start_offset:
                return record.timestamp, record.offset, epoch
        return header.max_timestamp, max(header.base_offset, start_offset), epoch

    # -- recovery and truncation

    def recover(self, on_batch_epoch: Callable[[int, int], object] | None = None) -> int:
        """Re-validate every batch (CRC etc.), rebuild both indexes, cut a torn or corrupt tail.

        on_batch_epoch, if given, is called as f(partition_leader_epoch, base_offset) for each
        valid batch so the leader-epoch cache can be rebuilt. Returns the bytes truncated.
        """
        self.on_become_active()  # room for every entry; the log trims a segment that is not last
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp_ms, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.rolling_based_timestamp_ms = None
        self._bytes_since_last_index_entry = 0
        valid = 0
        if self._size > 0:
            view = self._mapped(self._size)
            while valid < self._size:
                try:
                    header = validate_batch(view, valid)
                except KafkaError:
                    break  # torn or corrupt: everything from here on is dropped
                if (
                    header.base_offset < self.next_offset
                    or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
                ):
                    break
                if valid == 0:
                    self.rolling_based_timestamp_ms = header.max_timestamp
                self._note_batch(header)
                room = not (self.offset_index.is_full or self.time_index.is_full)
                if self._bytes_since_last_index_entry > self.index_interval_bytes and room:
                    self.offset_index.append(header.last_offset, valid)
                    self.time_index.maybe_append(
                        self.max_timestamp_ms, self.offset_of_max_timestamp
                    )
                    self._bytes_since_last_index_entry = 0
                self._bytes_since_last_index_entry += header.size_bytes
                if on_batch_epoch is not None and header.partition_leader_epoch >= 0:
                    on_batch_epoch(header.partition_leader_epoch, header.base_offset)
                valid += header.size_bytes
            del view
        truncated = self._size - valid
        if truncated:
            self._truncate_file(valid)
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding offset and everything after it; returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self._size - position
        self._truncate_file(position)
        self.load_tail_state()
        return removed

    # -- lifecycle

    def on_become_active(self) -> None:
        """Preallocate the indexes again: appends resume here (after a truncation)."""
        self.offset_index.resize(self.offset_index.max_index_size_bytes)
        self.time_index.resize(self.time_index.max_index_size_bytes)

    def on_become_inactive(self) -> None:
        """Record the final max timestamp and trim the indexes: the segment was rolled."""
        self.time_index.maybe_append(
            self.max_timestamp_ms, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def duplicate_fds(self) -> list[int]:
        """New descriptors of the log and both index files: fsyncing them flushes this segment
        even if it is closed or deleted meanwhile. The caller closes them."""
        return [os.dup(self._fd), self.offset_index.duplicate_fd(), self.time_index.duplicate_fd()]

    def flush(self) -> None:
        """fsync the log and both indexes (blocks; safe against a concurrent append)."""
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Write the final time index entry, trim the indexes and close every file."""
        self.time_index.maybe_append(
            self.max_timestamp_ms, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.close()
        self.time_index.close()
        self._release_map()
        os.close(self._fd)
        self._fd = -1

    def delete(self, defer: bool = False) -> list[Path]:
        """Close and remove every file; views still held stay readable (the inode outlives them).

        With `defer` the files are only renamed to `*.deleted` (quick) and returned: unlinking a
        large file takes a while, so the caller does it off the event loop, as Kafka does."""
        self._release_map()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        doomed: list[Path] = []
        if defer:
            deleted_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
            os.replace(self.log_path, deleted_log)
            doomed.append(deleted_log)
        else:
            self.log_path.unlink(missing_ok=True)
        for index in (self.offset_index, self.time_index):
            path = index.delete(defer)
            if path is not None:
                doomed.append(path)
        return doomed

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self._size}, next_offset={self.next_offset})"
