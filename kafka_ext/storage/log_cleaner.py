"""Log compaction for `cleanup.policy=compact` logs; mirrors Kafka's LogCleaner, LogCleanerManager
and Cleaner (KIP-534 delete horizons, KIP-354 max.compaction.lag.ms).

A cleaning keeps, for every key, the record with the highest offset, and rewrites the segments
from the log start to the first uncleanable offset (never the active segment, never past the
stable offset, never records younger than min.compaction.lag.ms) with their original offsets.
Three steps, as in Kafka: build a key -> last offset map over the dirty section; rewrite the
segments in groups into `<base>.log.cleaned` files (off the event loop); swap each group into the
live log on the loop (`.cleaned` -> `.swap` -> old files renamed `.deleted` -> `.swap` promoted),
so a crash at any point reopens to either the old or the new segments
(`complete_interrupted_swaps`, called while a UnifiedLog loads).

Concurrency: `LogCleaner` runs on the event loop and owns its checkpoints; the file work runs
through `run_blocking` on descriptors opened on the loop, so retention or a topic deletion
meanwhile only makes the swap's liveness check fail.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from kafka_ext.protocol.compression import compress
from kafka_ext.protocol.errors import DecodeError, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    BytesLike,
    Compression,
    TimestampType,
    attributes_for,
    iter_batch_headers,
    pack_batch_header,
    update_crc,
    validate_batch,
)
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    control_record_type,
    decode_records,
    encode_record,
)
from kafka_ext.storage.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    fsync_dir,
)
from kafka_ext.storage.offset_index import OffsetIndex
from kafka_ext.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from kafka_ext.storage.time_index import TimeIndex

if TYPE_CHECKING:  # log.py imports this module (swap recovery); these are for annotations only
    from kafka_ext.storage.log import UnifiedLog
    from kafka_ext.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]


class RunBlocking(Protocol):
    """The broker's executor helper: run a blocking call off the event loop."""

    def __call__(self, fn: Callable[[], T]) -> Awaitable[T]: ...


CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # per log dir: each log's first dirty offset
CLEANED_SUFFIX = ".cleaned"  # a cleaned segment being written; never trusted after a crash
TXN_INDEX_SUFFIX = ".txnindex"  # a segment's aborted-transaction index (producer state owns it)
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# The files of a cleaned segment, in swap order: the `.log` last, because its `.swap` is what
# recovery looks for, so every index must already be in place when it appears.
_CLEANED_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)
# Kafka sizes its key map as log.cleaner.dedupe.buffer.size / 24 bytes per entry (a 16-byte key
# hash and an 8-byte offset) filled to log.cleaner.io.buffer.load.factor (0.9).
_OFFSET_MAP_ENTRY_BYTES = 24
_OFFSET_MAP_LOAD_FACTOR = 0.9
_WRITE_CHUNK_BYTES = 1 << 20  # cleaned bytes buffered before one pwrite


# ---------------------------------------------------------------------------------------------
# Configuration and results


@dataclass(slots=True, frozen=True)
class CleanerConfig:
    """The broker-wide log.cleaner.* settings (per-log ones are in LogConfig)."""

    enable: bool = True  # log.cleaner.enable
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms: pause between rounds
    dedupe_buffer_size_bytes: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size

    @property
    def max_offset_map_entries(self) -> int:
        """Keys one cleaning may map (Kafka's offset map capacity for this buffer size)."""
        return max(int(self.dedupe_buffer_size_bytes / _OFFSET_MAP_ENTRY_BYTES
                       * _OFFSET_MAP_LOAD_FACTOR), 1)

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> CleanerConfig:
        """From the broker's typed config values (BrokerConfig.values)."""
        defaults = cls()

        def number(key: str, default: int) -> int:
            value = values.get(key, default)
            return value if isinstance(value, int) else default

        enable = values.get("log.cleaner.enable", defaults.enable)
        return cls(
            enable=bool(enable),
            backoff_ms=number("log.cleaner.backoff.ms", defaults.backoff_ms),
            dedupe_buffer_size_bytes=number("log.cleaner.dedupe.buffer.size",
                                            defaults.dedupe_buffer_size_bytes),
        )


@dataclass(slots=True, frozen=True)
class LogToClean:
    """How dirty one compacted log is (Kafka's LogToClean); offsets are segment bases."""

    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    must_clean_by_ms: int | None  # max.compaction.lag.ms deadline of the first dirty record

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning of one log did."""

    topic: str
    partition: int
    first_dirty_offset: int = 0
    end_offset: int = 0  # the next cleaning's first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_retained: int = 0
    segments_cleaned: int = 0
    groups_swapped: int = 0
    aborted: bool = False  # the log changed under the cleaning (retention, deletion, pause)


# ---------------------------------------------------------------------------------------------
# Crash recovery (called by UnifiedLog while it loads, before stray files are removed)


def complete_interrupted_swaps(
    directory: Path, *, index_interval_bytes: int, max_index_size_bytes: int
) -> list[int]:
    """Finish the swaps a crash interrupted (Kafka's LogLoader): a `<base>.log.swap` is a whole,
    fsynced cleaned segment, so the old segments it covers go and it takes their place, with
    indexes rebuilt from it. Returns the base offsets swapped in; `.cleaned` files are strays."""
    swapped: list[int] = []
    for swap in sorted(list(directory.iterdir())):
        stem = swap.name[:20]
        if swap.name != stem + LOG_SUFFIX + SWAP_SUFFIX or not stem.isdigit():
            continue
        base_offset = int(stem)
        next_offset = _next_offset_of_valid_batches(swap, base_offset)
        for path in list(directory.iterdir()):
            old_stem, suffix = os.path.splitext(path.name)
            if (suffix in _SEGMENT_SUFFIXES and old_stem.isdigit() and len(old_stem) == 20
                    and (int(old_stem) == base_offset
                         or base_offset <= int(old_stem) < next_offset)):
                path.unlink()  # a segment the cleaned one replaces
        prefix = directory / filename_prefix(base_offset)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            Path(f"{prefix}{suffix}{SWAP_SUFFIX}").unlink(missing_ok=True)  # rebuilt below
        txn_swap = Path(f"{prefix}{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}")
        if txn_swap.exists():
            os.replace(txn_swap, f"{prefix}{TXN_INDEX_SUFFIX}")
        os.replace(swap, f"{prefix}{LOG_SUFFIX}")
        segment = LogSegment(directory, base_offset, index_interval_bytes=index_interval_bytes,
                             max_index_size_bytes=max_index_size_bytes, active=False)
        segment.recover()
        segment.close()
        logger.warning("completed the interrupted swap of cleaned segment %s in %s",
                       base_offset, directory)
        swapped.append(base_offset)
    if swapped:
        fsync_dir(directory)
    return swapped


def _next_offset_of_valid_batches(path: Path, base_offset: int) -> int:
    """The offset after the last whole, valid batch of a segment file."""
    data = path.read_bytes()
    next_offset, pos = base_offset, 0
    while pos < len(data):
        try:
            header = validate_batch(data, pos)
        except KafkaError:
            break
        next_offset, pos = header.next_offset, pos + header.size_bytes
    return next_offset


# ---------------------------------------------------------------------------------------------
# Transactions seen by a cleaning (Kafka's CleanedTransactionMetadata)


@dataclass(slots=True, frozen=True)
class _AbortedTxn:
    """An aborted transaction: its producer, first data offset and ABORT marker offset."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _OngoingAbort:
    txn: _AbortedTxn
    observed_batch: bool = False  # some of its data batches were read (and dropped) this pass


class _TransactionTracker:
    """Walks batches in offset order and says which are aborted data and which markers may go."""

    __slots__ = ("_aborted", "_next", "_ongoing_aborted", "_ongoing_committed")

    def __init__(self, aborted: Sequence[_AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_aborted: dict[int, _OngoingAbort] = {}
        self._ongoing_committed: set[int] = set()

    def _start_aborted_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._ongoing_aborted[txn.producer_id] = _OngoingAbort(txn)
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Whether the batch belongs to an aborted transaction (it is dropped)."""
        self._start_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.observed_batch = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, control_type: ControlRecordType | None) -> bool:
        """Whether the marker may go (after its delete horizon): none of its transaction's data
        was read in this pass. control_type None is an emptied control batch: it may go."""
        self._start_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        if control_type == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(header.producer_id, None)
            return ongoing is None or not ongoing.observed_batch
        if control_type == ControlRecordType.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False


def _control_type(view: memoryview, pos: int, header: BatchHeader) -> ControlRecordType | None:
    """The type of a control batch's record (None when the cleaner emptied it)."""
    if header.records_count == 0:
        return None
    _, records = decode_records(view, pos)
    return control_record_type(records[0]) if records else None


# ---------------------------------------------------------------------------------------------
# Reading segments off the loop


@dataclass(slots=True)
class _SourceSegment:
    """A segment being cleaned: the live object (compared by identity at swap time, never
    touched off the loop) and a read-only descriptor of its file, opened on the loop."""

    segment: LogSegment
    base_offset: int
    size_bytes: int
    fd: int


def _batches(source: _SourceSegment, stop_offset: int) -> Iterator[tuple[memoryview, int,
                                                                          BatchHeader]]:
    """(segment view, position, header) of each batch below stop_offset (blocks: file reads)."""
    if source.size_bytes == 0:
        return
    # Never closed explicitly: callers may still hold slices; the map goes with the last one.
    view = memoryview(mmap.mmap(source.fd, source.size_bytes, access=mmap.ACCESS_READ))
    for pos, header in iter_batch_headers(view, 0, source.size_bytes):
        if header.base_offset >= stop_offset:
            return
        yield view, pos, header


@dataclass(slots=True)
class _Scan:
    """What a header pass over the cleanable range found."""

    aborted: list[_AbortedTxn] = field(default_factory=list)
    first_unresolved_txn_offset: int | None = None  # data whose marker lies past the range


def _scan_transactions(sources: Sequence[_SourceSegment], stop_offset: int) -> _Scan:
    """Aborted transactions below stop_offset, found from the batches themselves (the segments'
    `.txnindex` files are dropped as segments are cleaned); decodes only control batches."""
    scan = _Scan()
    open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
    for source in sources:
        for view, pos, header in _batches(source, stop_offset):
            if not header.has_producer_id:
                continue
            pid = header.producer_id
            if header.is_control:
                control_type = _control_type(view, pos, header)
                first = open_txns.pop(pid, None)
                if control_type == ControlRecordType.ABORT and first is not None:
                    scan.aborted.append(_AbortedTxn(pid, first, header.last_offset))
            elif header.is_transactional:
                open_txns.setdefault(pid, header.base_offset)
    if open_txns:
        scan.first_unresolved_txn_offset = min(open_txns.values())
    return scan


def _build_offset_map(sources: Sequence[_SourceSegment], start_offset: int, stop_offset: int,
                      aborted: Sequence[_AbortedTxn], capacity: int) -> tuple[dict[bytes, int], int]:
    """key -> last offset over [start_offset, stop_offset) skipping aborted data and markers;
    returns the map and its end offset (below stop_offset when the map filled up) (blocks)."""
    offsets: dict[bytes, int] = {}
    tracker = _TransactionTracker(aborted)
    for source in sources:
        for view, pos, header in _batches(source, stop_offset):
            if header.is_control:
                tracker.on_control_batch(header, _control_type(view, pos, header))
                continue
            if tracker.on_data_batch(header) or header.last_offset < start_offset:
                continue
            if offsets and len(offsets) + header.records_count > capacity:
                return offsets, header.base_offset  # full: later records stay uncleaned
            _, records = decode_records(view, pos)
            for record in records:  # per-record loop: compaction is about each record's key
                if record.key is not None and record.offset >= start_offset:
                    offsets[record.key] = record.offset
    return offsets, stop_offset


# ---------------------------------------------------------------------------------------------
# Writing a cleaned segment


class _CleanedSegmentWriter:
    """`<base>.log.cleaned` and its `.index.cleaned` / `.timeindex.cleaned`, indexed the way
    LogSegment.append indexes (so the swapped-in segment needs no rebuild). Blocking."""

    __slots__ = ("base_offset", "paths", "_fd", "_offset_index", "_time_index",
                 "_index_interval_bytes", "_buffer", "_size", "_since_index_entry",
                 "_max_timestamp_ms", "_offset_of_max_timestamp")

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_size_bytes: int) -> None:
        prefix = str(directory / filename_prefix(base_offset))
        self.base_offset = base_offset
        self.paths = [Path(prefix + suffix + CLEANED_SUFFIX) for suffix in _CLEANED_FILE_SUFFIXES]
        index_path, time_index_path, log_path = self.paths
        for path in self.paths:
            path.unlink(missing_ok=True)  # a leftover of an abandoned cleaning
        self._fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._offset_index = OffsetIndex(index_path, base_offset, max_index_size_bytes,
                                         writable=True)
        self._time_index = TimeIndex(time_index_path, base_offset, max_index_size_bytes,
                                     writable=True)
        self._index_interval_bytes = index_interval_bytes
        self._buffer = bytearray()
        self._size = 0
        self._since_index_entry = 0
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset

    @property
    def size_bytes(self) -> int:
        return self._size + len(self._buffer)

    def append(self, batch: BytesLike, header: BatchHeader) -> None:
        """Append one batch (header describes it as written)."""
        position = self.size_bytes
        if header.max_timestamp > self._max_timestamp_ms:
            self._max_timestamp_ms = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        room = not (self._offset_index.is_full or self._time_index.is_full)
        if self._since_index_entry > self._index_interval_bytes and room:
            self._offset_index.append(header.last_offset, position)
            self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp)
            self._since_index_entry = 0
        self._since_index_entry += header.size_bytes
        self._buffer += batch
        if len(self._buffer) >= _WRITE_CHUNK_BYTES:
            self._write_buffer()

    def _write_buffer(self) -> None:
        written = 0
        with memoryview(self._buffer) as view:
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], self._size + written)
        self._size += written
        self._buffer = bytearray()

    def finish(self) -> None:
        """Final time index entry, trimmed indexes, everything fsynced and closed."""
        self._write_buffer()
        self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp,
                                      skip_full_check=True)
        for index in (self._offset_index, self._time_index):
            index.trim_to_valid_size()
            index.flush()
            index.close()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def abandon(self) -> None:
        """Close (if open) and remove the files."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._offset_index.close()
            self._time_index.close()
        remove_files(self.paths)


def remove_files(paths: Sequence[Path]) -> None:
    """Unlink files that may already be gone (blocks)."""
    for path in paths:
        path.unlink(missing_ok=True)


def _remove_and_sync(paths: Sequence[Path], directory: Path) -> None:
    """Unlink the swapped-out files, then fsync the directory so the swap's renames last."""
    remove_files(paths)
    fsync_dir(directory)


_EMPTY_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD


def _empty_batch(header: BatchHeader) -> tuple[bytes, BatchHeader]:
    """The header alone, records removed: kept for a producer's last batch (idempotence)."""
    attributes = attributes_for(Compression.NONE, header.timestamp_type,
                                is_transactional=header.is_transactional,
                                is_control=header.is_control)
    empty = BatchHeader(
        base_offset=header.base_offset, batch_length=_EMPTY_BATCH_LENGTH,
        partition_leader_epoch=header.partition_leader_epoch, magic=CURRENT_MAGIC, crc=0,
        attributes=attributes, last_offset_delta=header.last_offset_delta,
        base_timestamp=NO_TIMESTAMP, max_timestamp=header.max_timestamp,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, records_count=0,
    )
    buf = bytearray(BATCH_OVERHEAD)
    pack_batch_header(buf, 0, empty)
    update_crc(buf, 0)
    return bytes(buf), empty


def _retained_batch(header: BatchHeader, records: Sequence[Record],
                    delete_horizon_ms: int | None) -> tuple[bytes, BatchHeader]:
    """The batch with only `records`, keeping its offsets range, producer fields, codec and
    timestamp type; with a delete horizon (KIP-534) baseTimestamp holds it."""
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(record.timestamp for record in records)
    section = bytearray()
    for record in records:
        encode_record(record, record.offset - header.base_offset,
                      record.timestamp - base_timestamp, section)
    payload = compress(header.compression, section)
    attributes = attributes_for(header.compression, header.timestamp_type,
                                is_transactional=header.is_transactional,
                                is_control=header.is_control,
                                has_delete_horizon=delete_horizon_ms is not None)
    rebuilt = BatchHeader(
        base_offset=header.base_offset, batch_length=BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch=header.partition_leader_epoch, magic=CURRENT_MAGIC, crc=0,
        attributes=attributes, last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, records_count=len(records),
    )
    buf = bytearray(BATCH_OVERHEAD + len(payload))
    pack_batch_header(buf, 0, rebuilt)
    buf[BATCH_OVERHEAD:] = payload
    update_crc(buf, 0)
    return bytes(buf), rebuilt


# ---------------------------------------------------------------------------------------------
# One cleaning of one log


@dataclass(slots=True)
class _Cleaning:
    """A cleaning in progress: built on the loop, worked off the loop one step at a time."""

    log: UnifiedLog
    directory: Path
    sources: list[_SourceSegment]  # log start segment .. last segment below the uncleanable offset
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    # Each producer's last data batch offset (None: only a marker) and epoch: that batch stays,
    # emptied if need be, so the producer's idempotence state survives (Kafka's lastRecords).
    last_batches: dict[int, tuple[int | None, int]]
    index_interval_bytes: int
    max_index_size_bytes: int
    max_group_bytes: int
    map_capacity: int
    stats: CleanerStats
    offset_map: dict[bytes, int] = field(default_factory=dict)
    end_offset: int = 0
    scan: _Scan = field(default_factory=_Scan)
    tracker: _TransactionTracker = field(default_factory=lambda: _TransactionTracker(()))
    earliest_delete_horizon_ms: int | None = None  # of what this cleaning kept

    def close_sources(self) -> None:
        for source in self.sources:
            if source.fd >= 0:
                os.close(source.fd)
                source.fd = -1

    # -- off the loop

    def build_offset_map(self) -> None:
        """Scan transactions, pull the uncleanable offset below unresolved ones, map the keys."""
        self.scan = _scan_transactions(self.sources, self.first_uncleanable_offset)
        unresolved = self.scan.first_unresolved_txn_offset
        if unresolved is not None:
            # A transaction whose marker is past the range: its fate is unknown, so nothing
            # from its segment on is cleaned yet (Kafka relies on the LSO for this).
            bases = [s.base_offset for s in self.sources]
            index = max(bisect.bisect_right(bases, unresolved) - 1, 0)
            self.first_uncleanable_offset = min(self.first_uncleanable_offset, bases[index])
            self.sources = self._trim_sources(self.first_uncleanable_offset)
            self.scan = _scan_transactions(self.sources, self.first_uncleanable_offset)
        start = max(self.first_dirty_offset, self.sources[0].base_offset if self.sources else 0)
        self.offset_map, self.end_offset = _build_offset_map(
            self.sources, start, self.first_uncleanable_offset, self.scan.aborted,
            self.map_capacity)
        self.tracker = _TransactionTracker(self.scan.aborted)
        self.stats.first_dirty_offset = self.first_dirty_offset
        self.stats.end_offset = self.end_offset

    def _trim_sources(self, stop_offset: int) -> list[_SourceSegment]:
        kept = [s for s in self.sources if s.base_offset < stop_offset]
        for source in self.sources[len(kept):]:
            os.close(source.fd)
            source.fd = -1
        return kept

    def groups(self) -> list[list[_SourceSegment]]:
        """Segments below the map's end, grouped so each group fits one segment (Kafka's
        groupSegmentsBySize: total size, index room and int32 relative offsets)."""
        candidates = [s for s in self.sources if s.base_offset < self.end_offset]
        next_bases = [s.base_offset for s in self.sources[1:]] + [self.first_uncleanable_offset]
        groups: list[list[_SourceSegment]] = []
        n = 0
        while n < len(candidates):
            group = [candidates[n]]
            size = candidates[n].size_bytes
            n += 1
            while n < len(candidates):
                following = candidates[n]
                last_offset = next_bases[n] - 1
                if (size + following.size_bytes > self.max_group_bytes
                        or last_offset - group[0].base_offset > MAX_RELATIVE_OFFSET):
                    break
                group.append(following)
                size += following.size_bytes
                n += 1
            groups.append(group)
        return groups

    def clean_group(self, group: Sequence[_SourceSegment]) -> _CleanedSegmentWriter:
        """Write the group's retained batches into `.cleaned` files (blocks)."""
        writer = _CleanedSegmentWriter(
            self.directory, group[0].base_offset, index_interval_bytes=self.index_interval_bytes,
            max_index_size_bytes=self.max_index_size_bytes)
        try:
            for source in group:
                self.stats.bytes_read += source.size_bytes
                for view, pos, header in _batches(source, self.first_uncleanable_offset):
                    kept = self._filter_batch(view, pos, header)
                    if kept is not None:
                        writer.append(*kept)
            writer.finish()
        except BaseException:
            writer.abandon()
            raise
        self.stats.bytes_written += writer.size_bytes
        self.stats.segments_cleaned += len(group)
        return writer

    def _filter_batch(self, view: memoryview, pos: int,
                      header: BatchHeader) -> tuple[BytesLike, BatchHeader] | None:
        """The batch as it stays after cleaning (itself, rebuilt, emptied) or None to drop it;
        Kafka's MemoryRecords.filterTo with the LogCleaner's retention rules."""
        self.stats.batches_read += 1
        original = view[pos:pos + header.size_bytes]
        horizon = header.base_timestamp if header.has_delete_horizon else None
        records: list[Record] = []
        if header.records_count:
            _, records = decode_records(view, pos)
        self.stats.records_read += len(records)
        # Tombstones and markers of emptied transactions wait for a delete horizon (KIP-534).
        awaits_horizon = False
        if header.is_control:
            control_type = control_record_type(records[0]) if records else None
            may_go = self.tracker.on_control_batch(header, control_type)
            expired = horizon is not None and horizon <= self.now_ms
            kept = [] if may_go and expired else records
            awaits_horizon = may_go and bool(kept)
        elif self.tracker.on_data_batch(header):
            kept = []
        else:
            kept = [r for r in records if self._retains(r, horizon)]
            awaits_horizon = any(r.value is None for r in kept)
        self.stats.records_retained += len(kept)
        if kept:
            needs_horizon = awaits_horizon and horizon is None
            if needs_horizon:
                horizon = self.now_ms + self.delete_retention_ms
            if awaits_horizon and horizon is not None:
                self._note_delete_horizon(horizon)
            if len(kept) == len(records) and not needs_horizon:
                return bytes(original), header  # a copy: the segment's map must be freeable
            return _retained_batch(header, kept, horizon)
        if self._is_last_batch_of_live_producer(header):
            return _empty_batch(header)
        return None

    def _retains(self, record: Record, horizon: int | None) -> bool:
        """Kafka's shouldRetainRecord: the latest offset of its key, and a tombstone only until
        its batch's delete horizon; records past the map's end always stay."""
        if record.offset >= self.end_offset:
            return True
        if record.key is None:
            return False  # a compacted log cannot keep a record it could never supersede
        if record.offset < self.offset_map.get(record.key, -1):
            return False
        return record.value is not None or horizon is None or self.now_ms < horizon

    def _is_last_batch_of_live_producer(self, header: BatchHeader) -> bool:
        last = self.last_batches.get(header.producer_id) if header.has_producer_id else None
        if last is None:
            return False
        last_data_offset, producer_epoch = last
        if last_data_offset is None:
            return header.is_control and header.producer_epoch == producer_epoch
        return header.last_offset == last_data_offset

    def _note_delete_horizon(self, horizon: int) -> None:
        if self.earliest_delete_horizon_ms is None or horizon < self.earliest_delete_horizon_ms:
            self.earliest_delete_horizon_ms = horizon


def _swap_in(cleaning: _Cleaning, group: Sequence[_SourceSegment],
             writer: _CleanedSegmentWriter) -> bool:
    """On the loop, no await: check the group is still live, then `.cleaned` -> `.swap`, old
    segments -> `.deleted`, `.swap` -> final names, open the new segment. False if it changed."""
    log = cleaning.log
    live = log.segments
    olds = [source.segment for source in group]
    try:
        start = next(n for n, segment in enumerate(live) if segment is olds[0])
    except StopIteration:
        return False
    window = live[start:start + len(olds)]
    if start + len(olds) >= len(live) or any(a is not b for a, b in zip(window, olds, strict=True)):
        return False
    prefix = str(log.dir / filename_prefix(writer.base_offset))
    try:
        for suffix in _CLEANED_FILE_SUFFIXES:  # the .log last: its .swap is recovery's trigger
            os.replace(prefix + suffix + CLEANED_SUFFIX, prefix + suffix + SWAP_SUFFIX)
    except OSError:
        # No `.swap` may outlive a swap that did not happen: a restart would promote it.
        remove_files([Path(prefix + suffix + SWAP_SUFFIX) for suffix in _CLEANED_FILE_SUFFIXES])
        raise

    def open_replacement() -> LogSegment:
        for suffix in _CLEANED_FILE_SUFFIXES:
            os.replace(prefix + suffix + SWAP_SUFFIX, prefix + suffix)
        segment = LogSegment(log.dir, writer.base_offset,
                             index_interval_bytes=cleaning.index_interval_bytes,
                             max_index_size_bytes=cleaning.max_index_size_bytes, active=False)
        segment.load_tail_state()
        return segment

    log.replace_segments(olds, open_replacement)
    return True


# ---------------------------------------------------------------------------------------------
# The cleaner


class LogCleaner:
    """Cleans the broker's compacted logs one at a time, dirtiest first (Kafka's LogCleaner with
    its LogCleanerManager). Loop-owned; the file work goes through run_blocking."""

    def __init__(self, log_manager: LogManager, config: CleanerConfig, *,
                 run_blocking: RunBlocking,
                 clock_ms: Callable[[], int] | None = None) -> None:
        """Other components keep a log out of cleaning with abort_and_pause/resume (a replica
        move copying its segments, as Kafka's abortAndPauseCleaning)."""
        self.log_manager = log_manager
        self.config = config
        self._run_blocking = run_blocking
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._checkpoints: dict[Path, dict[TopicPartition, int]] | None = None
        # Earliest delete horizon a cleaning left in each log: once passed, the log is cleaned
        # again even without dirty bytes, to drop its expired tombstones (KIP-534).
        self._delete_horizons: dict[TopicPartition, int] = {}
        # Pauses per log, counted as Kafka's LogCleaningPaused(n): each pauser resumes once.
        self._paused: dict[TopicPartition, int] = {}
        self._uncleanable: dict[TopicPartition, str] = {}  # logs a corrupt batch stopped
        self._cleaning: TopicPartition | None = None
        self.last_stats: list[CleanerStats] = []

    # -- control by other components

    def abort_and_pause(self, topic: str, partition: int) -> None:
        """Stop cleaning a log (a replica move, a truncation): a cleaning in flight never swaps.
        Pauses nest: the log is cleaned again once every pauser has called `resume`."""
        tp = (topic, partition)
        self._paused[tp] = self._paused.get(tp, 0) + 1

    def resume(self, topic: str, partition: int) -> None:
        """Undo one `abort_and_pause`."""
        tp = (topic, partition)
        count = self._paused.get(tp, 0)
        if count <= 1:
            self._paused.pop(tp, None)
        else:
            self._paused[tp] = count - 1

    def is_paused(self, tp: TopicPartition) -> bool:
        return tp in self._paused

    @property
    def uncleanable_partitions(self) -> dict[TopicPartition, str]:
        """Logs the cleaner gave up on (a corrupt batch), with the reason."""
        return dict(self._uncleanable)

    # -- checkpoints

    async def _load_checkpoints(self) -> dict[Path, dict[TopicPartition, int]]:
        if self._checkpoints is None:
            def read() -> dict[Path, dict[TopicPartition, int]]:
                result: dict[Path, dict[TopicPartition, int]] = {}
                for log_dir in self.log_manager.log_dirs:
                    try:
                        result[log_dir] = OffsetCheckpointFile(
                            log_dir / CLEANER_OFFSET_CHECKPOINT).read()
                    except (CorruptCheckpointError, OSError) as exc:
                        logger.warning("ignoring %s of %s: %s", CLEANER_OFFSET_CHECKPOINT,
                                       log_dir, exc)
                        result[log_dir] = {}
                return result
            self._checkpoints = await self._run_blocking(read)
        return self._checkpoints

    def first_dirty_offset(self, log: UnifiedLog) -> int:
        """The checkpointed end of the last cleaning, or the log start offset when it has none
        or it is out of the log's range (Kafka's cleanableOffsets)."""
        tp = (log.topic, log.partition)
        log_dir = self.log_manager.log_dir_of(*tp)
        checkpoint = None
        if self._checkpoints is not None and log_dir is not None:
            checkpoint = self._checkpoints.get(log_dir, {}).get(tp)
        if checkpoint is None or not log.log_start_offset <= checkpoint <= log.log_end_offset:
            return log.log_start_offset
        return checkpoint

    async def _write_checkpoint(self, log_dir: Path) -> None:
        checkpoints = await self._load_checkpoints()
        offsets = {tp: offset for tp, offset in checkpoints.get(log_dir, {}).items()
                   if self.log_manager.log_dir_of(*tp) == log_dir}
        checkpoints[log_dir] = offsets
        snapshot = dict(offsets)
        try:
            await self._run_blocking(
                lambda: OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(snapshot))
        except OSError as exc:
            logger.error("cannot write %s in %s: %s", CLEANER_OFFSET_CHECKPOINT, log_dir, exc)

    # -- choosing

    def log_to_clean(self, log: UnifiedLog, now_ms: int) -> LogToClean:
        """How dirty log is now (cheap: segment metadata only)."""
        config = log.config
        segments = log.segments
        bases = [s.base_offset for s in segments]
        first_dirty = self.first_dirty_offset(log)
        bound = min(segments[-1].base_offset, log.last_stable_offset)  # never past the LSO
        if config.min_compaction_lag_ms > 0:
            for segment in segments[:-1]:
                if (segment.base_offset >= first_dirty
                        and segment.largest_timestamp_ms > now_ms - config.min_compaction_lag_ms):
                    bound = min(bound, segment.base_offset)
                    break
        first_uncleanable = bases[max(bisect.bisect_right(bases, bound) - 1, 0)]
        clean_bytes = cleanable_bytes = 0
        must_clean_by_ms: int | None = None
        for n, segment in enumerate(segments):
            end = bases[n + 1] if n + 1 < len(bases) else log.log_end_offset
            if segment.base_offset >= first_uncleanable:
                break
            if segment.base_offset < first_dirty:
                clean_bytes += segment.size_bytes
            if end > first_dirty:
                cleanable_bytes += segment.size_bytes
                first_timestamp = segment.rolling_based_timestamp_ms
                if (must_clean_by_ms is None and first_timestamp is not None
                        and first_timestamp >= 0):
                    must_clean_by_ms = first_timestamp + config.max_compaction_lag_ms
        return LogToClean(log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                          must_clean_by_ms)

    def logs_to_clean(self, now_ms: int) -> list[LogToClean]:
        """Compacted logs that need a cleaning now, most urgent first: those past
        max.compaction.lag.ms, then by dirty ratio, then those with expired tombstones."""
        due: list[tuple[int, float, LogToClean]] = []
        for log in self.log_manager.all_logs():
            tp = (log.topic, log.partition)
            if not log.config.compacts or self.is_paused(tp) or tp in self._uncleanable:
                continue
            if self.log_manager.log_dir_of(*tp) is None:
                continue
            candidate = self.log_to_clean(log, now_ms)
            if candidate.first_uncleanable_offset <= log.log_start_offset:
                continue
            horizon = self._delete_horizons.get(tp)
            if candidate.cleanable_bytes > 0:
                if (candidate.must_clean_by_ms is not None
                        and candidate.must_clean_by_ms <= now_ms):
                    due.append((0, -candidate.cleanable_ratio, candidate))
                    continue
                if candidate.cleanable_ratio > log.config.min_cleanable_dirty_ratio:
                    due.append((1, -candidate.cleanable_ratio, candidate))
                    continue
            if horizon is not None and horizon <= now_ms:
                due.append((2, 0.0, candidate))
        due.sort(key=lambda item: (item[0], item[1]))
        return [candidate for _, _, candidate in due]

    # -- cleaning

    async def run_once(self) -> None:
        """One round (the broker's periodic job): clean every log that needs it, each once."""
        await self._load_checkpoints()
        stats: list[CleanerStats] = []
        for candidate in self.logs_to_clean(self._clock_ms()):
            log = candidate.log
            if self.log_manager.get_log(log.topic, log.partition) is not log:
                continue  # deleted or replaced while an earlier log was cleaned
            result = await self.clean(log)
            if result is not None:
                stats.append(result)
        self.last_stats = stats

    async def clean(self, log: UnifiedLog) -> CleanerStats | None:
        """Clean one log now, whatever its dirty ratio; None if it has nothing cleanable."""
        await self._load_checkpoints()
        tp = (log.topic, log.partition)
        if self._cleaning is not None:
            raise RuntimeError(f"the cleaner is already cleaning {self._cleaning}")
        now_ms = self._clock_ms()
        cleaning = self._start(log, self.log_to_clean(log, now_ms), now_ms)
        if cleaning is None:
            return None
        self._cleaning = tp
        started = time.monotonic()
        try:
            await self._run_blocking(cleaning.build_offset_map)
            stats = cleaning.stats
            for group in cleaning.groups():
                writer = await self._run_blocking(partial(cleaning.clean_group, group))
                swapped = not self.is_paused(tp) and (
                    self.log_manager.get_log(*tp) is log and _swap_in(cleaning, group, writer))
                if not swapped:
                    await self._run_blocking(partial(remove_files, writer.paths))
                    stats.aborted = True
                    break
                stats.groups_swapped += 1
            deleted = log.take_deleted_files()
            await self._run_blocking(partial(_remove_and_sync, deleted, log.dir))
        except (DecodeError, KafkaError) as exc:
            logger.error("cannot clean %s-%d, leaving it uncleaned until restart: %s",
                         *tp, exc)
            self._uncleanable[tp] = str(exc)
            return None
        except OSError as exc:
            self._on_io_error(log, exc)
            return None
        finally:
            self._cleaning = None
            cleaning.close_sources()
        if not stats.aborted:
            await self._finish(log, cleaning)
        logger.info(
            "cleaned %s-%d [%d, %d): %d segments, %d -> %d bytes, %d of %d records kept "
            "in %.3f s%s", tp[0], tp[1], stats.first_dirty_offset, stats.end_offset,
            stats.segments_cleaned, stats.bytes_read, stats.bytes_written,
            stats.records_retained, stats.records_read, time.monotonic() - started,
            " (aborted: the log changed)" if stats.aborted else "")
        return stats

    def _on_io_error(self, log: UnifiedLog, exc: OSError) -> None:
        """KIP-112, as Kafka's cleaner: an I/O error on a log still served takes its dir offline
        (a swap may be half done); one whose log was deleted or moved meanwhile is only logged."""
        tp = (log.topic, log.partition)
        log_dir = self.log_manager.report_io_error(log, exc)  # the rule lives there, once
        if log_dir is None:
            logger.warning("cleaning of %s-%d stopped: %s", *tp, exc)
        else:
            logger.error("cleaning of %s-%d failed on %s: %s", *tp, log_dir, exc)

    def _start(self, log: UnifiedLog, candidate: LogToClean, now_ms: int) -> _Cleaning | None:
        """Snapshot what to clean and open its files, on the loop."""
        segments = [s for s in log.segments[:-1]
                    if s.base_offset < candidate.first_uncleanable_offset]
        if not segments:
            return None
        config = log.config
        sources: list[_SourceSegment] = []
        try:
            for segment in segments:
                fd = os.open(segment.log_path, os.O_RDONLY)
                sources.append(_SourceSegment(segment, segment.base_offset, segment.size_bytes, fd))
        except OSError:
            for source in sources:
                os.close(source.fd)
            raise
        return _Cleaning(
            log=log, directory=log.dir, sources=sources,
            first_dirty_offset=max(candidate.first_dirty_offset, segments[0].base_offset),
            first_uncleanable_offset=candidate.first_uncleanable_offset,
            now_ms=now_ms, delete_retention_ms=config.delete_retention_ms,
            last_batches={
                pid: (entry.batches[-1].last_offset if entry.batches else None,
                      entry.producer_epoch)
                for pid, entry in log.producer_state.active_producers().items()},
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            max_group_bytes=config.segment_bytes, map_capacity=self.config.max_offset_map_entries,
            stats=CleanerStats(log.topic, log.partition),
        )

    async def _finish(self, log: UnifiedLog, cleaning: _Cleaning) -> None:
        """Remember the delete horizon and checkpoint the new first dirty offset."""
        tp = (log.topic, log.partition)
        if cleaning.earliest_delete_horizon_ms is None:
            self._delete_horizons.pop(tp, None)
        else:
            self._delete_horizons[tp] = cleaning.earliest_delete_horizon_ms
        log_dir = self.log_manager.log_dir_of(*tp)
        if (log_dir is None or self._checkpoints is None
                or cleaning.end_offset <= cleaning.first_dirty_offset):
            return  # nothing new was cleaned: the checkpoint stays
        self._checkpoints.setdefault(log_dir, {})[tp] = cleaning.end_offset
        await self._write_checkpoint(log_dir)


__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEANED_SUFFIX",
    "CleanerConfig",
    "CleanerStats",
    "LogCleaner",
    "LogToClean",
    "complete_interrupted_swaps",
]
