"""One partition's log over its segments; mirrors Apache Kafka's UnifiedLog (local tier only).

Assigns offsets by patching batch headers in place, rolls segments, serves zero-copy reads,
answers ListOffsets and OffsetForLeaderEpoch, applies retention and DeleteRecords, recovers
after an unclean stop.

Concurrency: not thread-safe. Every call comes from the partition's owner on the event loop,
except `flush()`, which may run in an executor thread concurrently with `append_*`, `read`,
`roll` and the accessors. Operations that close segment files (retention, DeleteRecords,
truncation, `close`, `delete`) take `_segment_files_lock`, so they wait for a running flush.
Methods that block on disk: `flush`, `close`, `delete`, the constructor (load/recovery) and,
briefly, anything that deletes or truncates segments. Appends only write to the page cache.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BatchHeader,
    BytesLike,
    TimestampType,
    batch_size_at,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
)
from kafka_ext.storage.checkpoints import (
    PARTITION_METADATA_FILE,
    CorruptCheckpointError,
    PartitionMetadataFile,
)
from kafka_ext.storage.fetch_data_info import FetchDataInfo, LogOffsetMetadata
from kafka_ext.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    LeaderEpochFileCache,
)
from kafka_ext.storage.log_cleaner import complete_interrupted_swaps
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_validator import TimestampBounds, validate_batch_records
from kafka_ext.storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
    marker_of,
    rebuild_producer_state,
)
from kafka_ext.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from kafka_ext.storage.transaction_index import AbortedTxn, TransactionIndexes

logger = logging.getLogger(__name__)

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
NO_TIMESTAMP = -1

_STRAY_SUFFIXES = (".tmp", ".swap", ".deleted", ".cleaned")  # leftovers of an interrupted operation


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the default clock of logs."""
    return time.time_ns() // 1_000_000


CHUNK_DIR_MARK = "@"  # <topic>-<partition>@<start offset>: an inactive chunk replica (seed 000)


def chunk_dir_name(topic: str, partition: int, start_offset: int) -> str:
    return f"{topic}-{partition}{CHUNK_DIR_MARK}{start_offset}"


def parse_chunk_dir(dir_name: str) -> tuple[str, int, int] | None:
    """(topic, partition, start offset) of an inactive chunk's dir name, else None (topic
    names cannot hold the mark)."""
    name, mark, start = dir_name.rpartition(CHUNK_DIR_MARK)
    if not mark or not start.isdigit():
        return None
    topic, partition = parse_topic_partition(name)
    return topic, partition, int(start)


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """Split a partition dir name `<topic>-<partition>` (or a future replica's
    `<topic>-<partition>.move`, KIP-113, or a chunk's `<topic>-<partition>@<start>`);
    ValueError if it is not one."""
    dir_name = dir_name.split(CHUNK_DIR_MARK, 1)[0]
    topic, sep, partition = dir_name.removesuffix(".move").rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(slots=True, frozen=True)
class LogAppendInfo:
    """What an append did (Kafka's LogAppendInfo); offsets are inclusive."""

    first_offset: int
    last_offset: int
    max_timestamp: int  # largest batch max timestamp appended, -1 if none
    offset_of_max_timestamp: (
        int  # last offset of the batch with max_timestamp (Kafka's shallow offset)
    )
    log_append_time_ms: int  # the stamped time under LogAppendTime, -1 under CreateTime
    log_start_offset: int
    shallow_count: int  # batches appended
    valid_bytes: int


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer: the offset, its record's timestamp (-1 for earliest/latest), its epoch."""

    offset: int
    timestamp: int
    leader_epoch: int


class UnifiedLog:
    """Segments sorted by base offset, the last one active; log_start_offset <= high_watermark <= log_end_offset."""

    __slots__ = (
        "dir",
        "topic",
        "partition",
        "topic_id",
        "_config",
        "_clock_ms",
        "_segments",
        "_base_offsets",
        "_log_start_offset",
        "_log_end_offset",
        "_high_watermark",
        "_recovery_point",
        "_last_flush_ms",
        "_epoch_cache",
        "_segment_files_lock",
        "_closed",
        "_files_to_remove",
        "recovered_segments",
        "producer_state",
        "_txn_indexes",
    )

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        needs_recovery: bool = True,
        topic_id: uuid.UUID | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """Open (creating if absent) the partition dir and load it; segments from the one holding
        recovery_point on are re-validated when needs_recovery (no clean-shutdown marker).

        Raises KafkaError(INCONSISTENT_TOPIC_ID) when partition.metadata names another topic id.
        """
        self.dir = directory
        self.topic, self.partition = parse_topic_partition(directory.name)
        self._config = config
        self._clock_ms = clock_ms
        self._segment_files_lock = threading.Lock()
        self._closed = False  # set by close()/delete(), under the lock; flush then does nothing
        # Files of deleted segments, renamed `*.deleted`, waiting for `remove_deleted_files`.
        self._files_to_remove: list[Path] = []
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.recovered_segments = 0  # how many segments the load re-validated (observability)
        directory.mkdir(parents=True, exist_ok=True)
        self.topic_id = self._load_topic_id(topic_id)
        complete_interrupted_swaps(  # LogCleaner: a crash mid-swap reopens to the new segments
            directory, index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes)
        self._remove_stray_files()
        self._epoch_cache, epochs_lost = self._load_epoch_cache()
        if epochs_lost:
            needs_recovery, recovery_point = True, 0  # recovery re-derives epochs from batches
        self._load_segments(needs_recovery, recovery_point)
        self._log_end_offset = self.active_segment.next_offset
        first_base = self._segments[0].base_offset
        self._log_start_offset = max(first_base, min(log_start_offset, self._log_end_offset))
        self._high_watermark = self._log_start_offset
        self._recovery_point = self._log_end_offset
        self._last_flush_ms = clock_ms()
        self._epoch_cache.truncate_from_end(self._log_end_offset)
        self._epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state = ProducerStateManager(directory)
        self._txn_indexes = TransactionIndexes(directory)
        self._load_producer_state()

    # -- loading

    def _load_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        """Check partition.metadata against topic_id, writing it when absent."""
        metadata = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)
        stored = metadata.read()
        if stored is not None and topic_id is not None and stored != topic_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"{self.dir} belongs to topic id {stored}, not {topic_id}",
            )
        if stored is None and topic_id is not None:
            metadata.write(topic_id)
        return stored or topic_id

    def _remove_stray_files(self) -> None:
        for path in self.dir.iterdir():
            if path.name.endswith(_STRAY_SUFFIXES):
                path.unlink(missing_ok=True)

    def _load_epoch_cache(self) -> tuple[LeaderEpochFileCache, bool]:
        """The epoch cache, and whether its checkpoint was unreadable (then it is rebuilt)."""
        try:
            return LeaderEpochFileCache(self.dir), False
        except CorruptCheckpointError as exc:
            logger.warning("rebuilding leader epochs of %s from its batches: %s", self.dir, exc)
            (self.dir / LEADER_EPOCH_CHECKPOINT).unlink()
            return LeaderEpochFileCache(self.dir), True

    def _new_segment(self, base_offset: int, *, active: bool) -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_size_bytes=self._config.segment_index_bytes,
            active=active,
            created_ms=self._clock_ms(),
        )

    def _load_segments(self, needs_recovery: bool, recovery_point: int) -> None:
        """Open every segment, recover the unflushed ones and any with a bad index or torn tail."""
        base_offsets: list[int] = []
        for path in self.dir.iterdir():
            stem, suffix = os.path.splitext(path.name)
            if not (stem.isdigit() and len(stem) == 20):
                continue
            if suffix == LOG_SUFFIX:
                base_offsets.append(int(stem))
            elif (
                suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                and not path.with_suffix(LOG_SUFFIX).exists()
            ):
                path.unlink()  # an index whose segment is gone
        base_offsets.sort()
        segments = [self._new_segment(base, active=False) for base in base_offsets]
        first_unflushed = len(segments)
        if needs_recovery:
            first_unflushed = max(bisect.bisect_right(base_offsets, recovery_point) - 1, 0)
        kept: list[LogSegment] = []
        for n, segment in enumerate(segments):
            if (
                n >= first_unflushed
                or not segment.indexes_are_sane()
                or not segment.load_tail_state()
            ):
                self.recovered_segments += 1
                truncated = segment.recover(self._epoch_cache.assign)
                if truncated and n >= first_unflushed:
                    logger.warning(
                        "truncated %d corrupt or torn bytes from %s", truncated, segment.log_path
                    )
                    kept.append(segment)
                    for later in segments[n + 1 :]:
                        later.delete()  # after a torn batch nothing later can be trusted
                    break
                elif truncated:
                    logger.warning(
                        "truncated %d corrupt bytes from flushed segment %s",
                        truncated,
                        segment.log_path,
                    )
            kept.append(segment)
        if not kept:
            kept.append(self._new_segment(0, active=True))
        for segment in kept[:-1]:
            segment.on_become_inactive()
        kept[-1].on_become_active()
        self._set_segments(kept)

    def _load_producer_state(self) -> None:
        """Producer state as of the log end (Kafka's LogLoader): the newest readable snapshot
        at or below it, then the batch headers after it, re-indexing the aborted transactions
        found there. Runs at open (a clean shutdown leaves a snapshot at the end: no scan) and
        after a truncation. Blocks on disk."""
        state = self.producer_state
        leo = self._log_end_offset
        first_base = self._segments[0].base_offset
        self._txn_indexes.retain(set(self._base_offsets))
        state.delete_snapshots_outside(first_base, leo)
        start = state.load_snapshot(leo)
        if start < 0:
            start = first_base
        if start < leo:
            self._txn_indexes.truncate_to(start)
            if rebuild_producer_state(state, self._segments, start, self._index_aborted):
                state.take_snapshot(leo)  # the next recovery starts here

    def _set_segments(self, segments: list[LogSegment]) -> None:
        """Replace the segment list (copy-on-write, so a flush thread can iterate a snapshot)."""
        self._segments = segments
        self._base_offsets = [segment.base_offset for segment in segments]

    # -- accessors

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs; index sizes take effect for the next segment."""
        self._config = config

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Set by replication (or by the broker after an append for a single replica); clamped."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """First offset a read_committed consumer may not read yet: the first offset of the
        oldest undecided (or unreplicated) transaction, else the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset
        if first_unstable < 0 or first_unstable >= self._high_watermark:
            return self._high_watermark
        return max(first_unstable, self._log_start_offset)

    @property
    def recovery_point(self) -> int:
        """Offsets below it are fsynced; recovery re-validates from its segment on."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int:
        return self._epoch_cache.latest_epoch

    # -- appends

    def append_as_leader(
        self, records: BytesLike, leader_epoch: int, *, log_append_time_ms: int | None = None,
        in_place: bool = False, origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Assign offsets to already-validated batches and append them.

        Batches with a producer id pass the producer-state checks of `origin` first (see
        ProducerStateManager.check_batch); a CLIENT duplicate of one of the producer's last five
        batches is not appended: the result carries the original offsets.

        Patches each batch's base offset and partition leader epoch in one copy of `records`, or,
        with `in_place`, in `records` itself (it must then be writable and the caller's alone);
        under message.timestamp.type=LogAppendTime also stamps the time (log_append_time_ms,
        else the clock). Raises MESSAGE_TOO_LARGE for a batch over
        max.message.bytes, RECORD_LIST_TOO_LARGE for more than segment.bytes at once and
        RecordValidationError for records the topic refuses (see log_validator).
        """
        buf = memoryview(records) if in_place else bytearray(records)
        batches = self._whole_batches(buf)
        config = self._config
        # A replicated batch was validated by its leader, as Kafka's follower appends are.
        validate = origin is not AppendOrigin.REPLICATION
        timestamps = (TimestampBounds.around(self._clock_ms(),
                                             config.message_timestamp_before_max_ms,
                                             config.message_timestamp_after_max_ms)
                      if config.message_timestamp_type == TimestampType.CREATE_TIME else None)
        for pos, header in batches:
            if header.size_bytes > self._config.max_message_bytes:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {header.size_bytes} bytes exceeds max.message.bytes {self._config.max_message_bytes}",
                )
            if validate:  # keyless records on a compacted topic, timestamps (KIP-467)
                validate_batch_records(buf, pos, header, topic=self.topic,
                                       partition=self.partition, compacted=config.compacts,
                                       timestamps=timestamps)
            if header.producer_id >= 0:
                marker = marker_of(buf, pos) if header.is_control else None
                duplicate = self.producer_state.check_batch(header, origin, marker)
                if duplicate is not None:
                    return self._duplicate_append_info(duplicate)
        if len(buf) > self._config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"{len(buf)} bytes of batches exceed segment.bytes {self._config.segment_bytes}",
            )
        append_time = -1
        if self._config.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
            append_time = self._clock_ms() if log_append_time_ms is None else log_append_time_ms
        first_offset = next_offset = self._log_end_offset
        max_timestamp, offset_of_max = NO_TIMESTAMP, first_offset
        producer_batches: list[tuple[int, BatchHeader, int, int]] = []
        for pos, header in batches:
            set_base_offset(buf, pos, next_offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            timestamp = header.max_timestamp
            if append_time >= 0:
                set_log_append_time(buf, pos, append_time)
                timestamp = append_time
            if header.producer_id >= 0:
                producer_batches.append((pos, header, next_offset, timestamp))
            last_offset = next_offset + header.last_offset_delta
            if timestamp > max_timestamp:
                max_timestamp, offset_of_max = timestamp, last_offset
            next_offset = last_offset + 1
        self._epoch_cache.assign(leader_epoch, first_offset)
        self._append_group(buf, first_offset, next_offset - 1, max_timestamp)
        if producer_batches:
            self._update_producer_state(buf, producer_batches)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=next_offset - 1,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=append_time,
            log_start_offset=self._log_start_offset,
            shallow_count=len(batches),
            valid_bytes=len(buf),
        )

    def append_as_follower(self, records: BytesLike) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs (replication), validating CRCs.

        Raises OFFSET_OUT_OF_RANGE if they do not start at or after the log end offset or do not
        increase; batches larger than segment.bytes together are split across segments.
        """
        with memoryview(records) as view:
            batches = validate_batches(view, from_client=False)
            if not batches:
                leo = self._log_end_offset
                return LogAppendInfo(
                    leo, leo - 1, NO_TIMESTAMP, leo, -1, self._log_start_offset, 0, 0
                )
            expected = self._log_end_offset
            max_timestamp, offset_of_max = NO_TIMESTAMP, batches[0][1].base_offset
            group_start, group_first_offset = 0, batches[0][1].base_offset
            group_max_timestamp = NO_TIMESTAMP
            for n, (pos, header) in enumerate(batches):
                if header.base_offset < expected:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"follower batch at offset {header.base_offset} is below the expected {expected}",
                    )
                expected = header.next_offset
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                group_max_timestamp = max(group_max_timestamp, header.max_timestamp)
                end = pos + header.size_bytes
                following = batches[n + 1] if n + 1 < len(batches) else None
                if (
                    following is None
                    or following[0] + following[1].size_bytes - group_start
                    > self._config.segment_bytes
                ):
                    self._assign_epochs(batches, group_first_offset, header.last_offset)
                    self._append_group(
                        view[group_start:end],
                        group_first_offset,
                        header.last_offset,
                        group_max_timestamp,
                    )
                    self._update_producer_state(view, [
                        (p, h, h.base_offset, h.max_timestamp) for p, h in batches
                        if h.producer_id >= 0 and group_first_offset <= h.base_offset <= header.last_offset
                    ])
                    if following is not None:
                        group_start, group_first_offset = following[0], following[1].base_offset
                        group_max_timestamp = NO_TIMESTAMP
            first_offset = batches[0][1].base_offset
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=expected - 1,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            shallow_count=len(batches),
            valid_bytes=sum(header.size_bytes for _, header in batches),
        )

    def _update_producer_state(
        self, buf: BytesLike, batches: list[tuple[int, BatchHeader, int, int]]
    ) -> None:
        """Apply appended (position, header, first offset, timestamp) batches to the producer
        state; index the transactions ABORT markers among them ended."""
        state = self.producer_state
        for pos, header, first_offset, timestamp in batches:
            marker = marker_of(buf, pos) if header.is_control else None
            completed = state.update(header, first_offset, timestamp, marker)
            if completed is not None:
                segment_base = self._segments[self._segment_index(first_offset)].base_offset
                self._index_aborted(segment_base, completed, state.complete_txn(completed))

    def _index_aborted(
        self, segment_base_offset: int, completed: CompletedTxn, last_stable_offset: int
    ) -> None:
        """Write an aborted transaction to the .txnindex of the segment holding its marker."""
        if completed.is_aborted:
            self._txn_indexes.append(segment_base_offset, AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset,
                last_stable_offset,
            ))

    def _duplicate_append_info(self, duplicate: BatchMetadata) -> LogAppendInfo:
        """What a duplicate batch is answered with: the original batch's offsets (Kafka)."""
        log_append_time = -1
        if self._config.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
            log_append_time = duplicate.timestamp_ms
        return LogAppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp_ms,
            offset_of_max_timestamp=duplicate.last_offset,
            log_append_time_ms=log_append_time,
            log_start_offset=self._log_start_offset,
            shallow_count=0,
            valid_bytes=0,
        )

    def _assign_epochs(
        self, batches: list[tuple[int, BatchHeader]], first_offset: int, last_offset: int
    ) -> None:
        for _, header in batches:
            if (
                first_offset <= header.base_offset <= last_offset
                and header.partition_leader_epoch >= 0
            ):
                self._epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    @staticmethod
    def _whole_batches(buf: BytesLike) -> list[tuple[int, BatchHeader]]:
        """Batch headers of a buffer that must be whole batches back to back."""
        batches = list(iter_batch_headers(buf))
        end = batches[-1][0] + batches[-1][1].size_bytes if batches else 0
        if not batches or end != len(memoryview(buf)):
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"records are not whole batches (torn at byte {end})"
            )
        return batches

    def _append_group(
        self, records: BytesLike, first_offset: int, last_offset: int, max_timestamp: int
    ) -> None:
        """Append offset-assigned batches to the active segment, rolling first if needed."""
        segment = self._maybe_roll(
            len(memoryview(records)), first_offset, last_offset, max_timestamp
        )
        segment.append(records)
        self._log_end_offset = last_offset + 1

    def _maybe_roll(
        self, size_bytes: int, first_offset: int, last_offset: int, max_timestamp: int
    ) -> LogSegment:
        """Roll when segment.bytes would be exceeded, segment.ms passed, an index is full, or the
        offsets do not fit the segment's int32 relative offsets (Kafka's shouldRoll)."""
        segment = self.active_segment
        if not segment.can_hold(last_offset):
            return self.roll(first_offset)
        if segment.is_empty:
            return segment
        rolling_base = segment.rolling_based_timestamp_ms
        if rolling_base is not None and rolling_base >= 0:
            waited_ms = max_timestamp - rolling_base
        else:
            waited_ms = self._clock_ms() - segment.created_ms
        if (
            segment.size_bytes + size_bytes > self._config.segment_bytes
            or waited_ms > self._config.segment_ms
        ):
            return self.roll(first_offset)
        return segment

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at new_base_offset (default: the log end offset)."""
        base = self._log_end_offset if new_base_offset is None else new_base_offset
        active = self.active_segment
        segments = list(self._segments)
        if active.is_empty:
            if active.base_offset == base:
                return active
            with self._segment_files_lock:
                active.delete()
            segments.pop()
        else:
            active.on_become_inactive()
        segment = self._new_segment(base, active=True)
        segments.append(segment)
        self._set_segments(segments)
        if base == self._log_end_offset:
            self.producer_state.take_snapshot(base)  # recovery replays from here, as Kafka's
        return segment

    # -- reads

    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds offset (the first one if offset is below all)."""
        return max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from the one holding fetch_offset, at most max_bytes in total (the first
        batch may exceed it when min_one_message), below max_offset (exclusive, e.g. the high
        watermark). Records are mmap views. OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        leo = self._log_end_offset
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} is outside [{self._log_start_offset}, {leo}] of {self.topic}-{self.partition}",
            )
        limit_offset = leo if max_offset is None else min(max_offset, leo)
        segments = self._segments
        n = self._segment_index(fetch_offset)
        metadata = LogOffsetMetadata(fetch_offset, segments[n].base_offset, -1)
        result = FetchDataInfo(metadata, [])
        if fetch_offset >= limit_offset:
            return result
        remaining, offset = max_bytes, fetch_offset
        while n < len(segments):
            segment = segments[n]
            max_position: int | None = None
            if limit_offset < segment.next_offset:
                found = segment.translate_offset(limit_offset)
                max_position = found[0] if found is not None else segment.size_bytes
            info = segment.read(
                offset, remaining, max_position, min_one_message and not result.records
            )
            if info is not None:
                if not result.records:
                    result.fetch_offset_metadata = info.fetch_offset_metadata
                if not info.records:
                    break
                view = info.records[0]
                result.records.append(view)
                remaining -= len(view)
                ended_at = info.fetch_offset_metadata.relative_position_in_segment + len(view)
                if max_position is not None or ended_at < segment.size_bytes or remaining <= 0:
                    break
            n += 1
            if n < len(segments):
                offset = segments[n].base_offset
                if offset >= limit_offset:
                    break
        return result

    def collect_aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset) (read_committed)."""
        if not self._txn_indexes.may_overlap(fetch_offset):
            return []
        segment_base = self._segments[self._segment_index(fetch_offset)].base_offset
        return self._txn_indexes.collect(segment_base, fetch_offset, upper_bound_offset)

    def aborted_transactions_in(self, info: FetchDataInfo) -> list[AbortedTxn]:
        """Aborted transactions overlapping what `read` returned (Kafka's fetch upper bound:
        the offset after the last batch read); headers only, and only if any may overlap."""
        fetch_offset = info.fetch_offset_metadata.message_offset
        if not info.records or not self._txn_indexes.may_overlap(fetch_offset):
            return []
        last = info.records[-1]
        position, upper_bound = 0, fetch_offset
        while True:
            size = batch_size_at(last, position)
            if size is None or position + size > len(last):
                break
            if position + size == len(last):
                upper_bound = read_batch_header(last, position).next_offset
                break
            position += size
        return self.collect_aborted_transactions(fetch_offset, upper_bound)

    def aborted_transactions(self) -> list[AbortedTxn]:
        """Every aborted transaction indexed in this log, oldest first."""
        return self._txn_indexes.entries()

    def fetch_offset_by_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """ListOffsets: earliest (-2, -4), latest (-1), max-timestamp (-3), or the first record
        with timestamp >= timestamp_ms. Exact to the record (the matching batch is decoded).
        None when nothing qualifies (Kafka answers offset -1 then)."""
        if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            epoch = self._epoch_cache.epoch_for_offset(self._log_start_offset)
            return OffsetAndTimestamp(self._log_start_offset, NO_TIMESTAMP, epoch)
        if timestamp_ms == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(
                self._log_end_offset, NO_TIMESTAMP, self._epoch_cache.latest_epoch
            )
        if timestamp_ms == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for segment in self._segments:
                if segment.max_timestamp_ms >= 0 and (
                    best is None or segment.max_timestamp_ms > best.max_timestamp_ms
                ):
                    best = segment
            found = best.max_timestamp_record() if best is not None else None
            return None if found is None else OffsetAndTimestamp(found[1], found[0], found[2])
        if timestamp_ms < 0:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"unsupported ListOffsets timestamp {timestamp_ms}"
            )
        for segment in self._segments:
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
            if found is not None:
                return OffsetAndTimestamp(found[1], found[0], found[2])
        return None

    def legacy_offsets_before(self, timestamp_ms: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0, as Kafka: up to `max_num_offsets` offsets, highest first, from the
        last point at or before `timestamp_ms` (-1 the last, -2 the first) backwards. A point is
        a segment's base offset with its file's mtime, plus the log end offset stamped now when
        the active segment holds data: v0 predates record timestamps."""
        segments = self._segments
        points = [(max(s.base_offset, self._log_start_offset), s.last_modified_ms)
                  for s in segments]
        if segments[-1].size_bytes > 0:
            points.append((self._log_end_offset, self._clock_ms()))
        if timestamp_ms == LATEST_TIMESTAMP:
            start = len(points) - 1
        elif timestamp_ms == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp_ms:
                start -= 1
        picked = [points[i][0] for i in range(start, start - min(max_num_offsets, start + 1), -1)]
        return sorted(picked, reverse=True)

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """A new leader's epoch starts at its end offset, before it appends anything, so the
        epoch history always ends with the current epoch (Kafka's maybeAssignEpochStartOffset)."""
        self._epoch_cache.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), (-1, -1) when the epoch is unknown."""
        return self._epoch_cache.end_offset_for(leader_epoch, self._log_end_offset)

    # -- deletion of old data

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make offset the log start offset; returns the new log start offset.

        OFFSET_OUT_OF_RANGE when offset is negative or above the high watermark. The caller
        checkpoints log start offsets (LogManager.checkpoint_log_start_offsets).
        """
        if offset < 0 or offset > self._high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot delete records before {offset}: high watermark is {self._high_watermark}",
            )
        self.maybe_increment_log_start_offset(offset)
        return self._log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never past the log end) and delete segments wholly below it."""
        offset = min(offset, self._log_end_offset)
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._epoch_cache.truncate_from_start(offset)
        self._delete_log_start_offset_breached()
        return True

    def _delete_log_start_offset_breached(self) -> int:
        """Delete leading segments whose every offset is below the log start offset."""
        count = 0
        segments = self._segments
        while (
            count + 1 < len(segments) and segments[count + 1].base_offset <= self._log_start_offset
        ):
            count += 1
        return self._delete_oldest(count)

    def _delete_oldest(self, count: int) -> int:
        """Delete the first count segments (never the active one) and move the log start offset."""
        count = min(count, len(self._segments) - 1)
        if count <= 0:
            return 0
        doomed = self._segments[:count]
        self._set_segments(self._segments[count:])
        with self._segment_files_lock:
            for segment in doomed:
                self._files_to_remove += segment.delete(defer=True)
                txn_index = self._txn_indexes.drop(segment.base_offset, defer=True)
                if txn_index is not None:
                    self._files_to_remove.append(txn_index)
        self.producer_state.delete_snapshots_outside(
            self._segments[0].base_offset, self._log_end_offset
        )
        first_base = self._segments[0].base_offset
        if first_base > self._log_start_offset:
            self._log_start_offset = first_base
            self._high_watermark = max(self._high_watermark, first_base)
            self._recovery_point = max(self._recovery_point, first_base)
            self._epoch_cache.truncate_from_start(first_base)
        return count

    def delete_retention_segments(self, now_ms: int) -> int:
        """Delete old segments by retention.ms, retention.bytes and the log start offset.

        Never deletes the active segment. Returns how many segments were deleted.
        """
        deleted = self._delete_log_start_offset_breached()
        if not self._config.deletes_by_retention:
            return deleted
        retention_ms = self._config.retention_ms
        if retention_ms >= 0:
            count = 0
            for segment in self._segments[:-1]:
                if now_ms - segment.largest_timestamp_ms <= retention_ms:
                    break
                count += 1
            deleted += self._delete_oldest(count)
        retention_bytes = self._config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            count = 0
            for segment in self._segments[:-1]:
                if excess - segment.size_bytes < 0:
                    break
                excess -= segment.size_bytes
                count += 1
            deleted += self._delete_oldest(count)
        return deleted

    # -- truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets >= offset (a follower's divergence); True if any."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._log_end_offset:
            # A leader's epoch may start at the end with no batch in it yet: as a follower now,
            # it must go, or the leader answers the same DivergingEpoch forever (Kafka does so).
            self._epoch_cache.truncate_from_end(self._log_end_offset)
            return False
        if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        n = self._segment_index(offset)
        if self._segments[n].base_offset == offset:
            n -= 1  # that segment goes entirely
        doomed = self._segments[n + 1 :]
        self._set_segments(self._segments[: n + 1])
        with self._segment_files_lock:
            for segment in doomed:
                segment.delete()
            active = self.active_segment
            active.truncate_to(offset)
            active.on_become_active()
        self._log_end_offset = active.next_offset
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at offset."""
        with self._segment_files_lock:
            for segment in self._segments:
                segment.delete()
        self._set_segments([])
        self._set_segments([self._new_segment(offset, active=True)])
        self._log_start_offset = self._log_end_offset = offset
        self._epoch_cache.clear()
        self._txn_indexes.drop_all()
        self.producer_state.delete_all_snapshots()
        self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self._log_end_offset
        self._high_watermark = min(max(self._high_watermark, self._log_start_offset), leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._epoch_cache.truncate_from_end(leo)
        self._load_producer_state()  # drops snapshots and aborted txns past the new end
        # Replayed transactions whose markers are below the high watermark are stable again;
        # otherwise the last stable offset would fall back to their first offsets.
        self.producer_state.on_high_watermark_updated(self._high_watermark)

    # -- durability

    def pending_flush_offset(self, now_ms: int) -> int | None:
        """The offset the flush policy wants fsynced up to now, or None.

        flush.messages / flush.ms ask for the log end offset; otherwise rolled segments that are
        not yet fsynced ask for the active segment's base offset (Kafka flushes on roll).
        """
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed <= 0:
            return None
        if (
            unflushed >= self._config.flush_messages
            or now_ms - self._last_flush_ms >= self._config.flush_ms
        ):
            return self._log_end_offset
        if self._recovery_point < self.active_segment.base_offset:
            return self.active_segment.base_offset
        return None

    def needs_flush(self, now_ms: int) -> bool:
        """Whether `flush(pending_flush_offset(now_ms))` should run now."""
        return self.pending_flush_offset(now_ms) is not None

    def assume_unflushed_from(self, offset: int) -> None:
        """Offsets from `offset` on may not be on disk yet (this object was opened over files
        another one wrote without an fsync): the next `flush` syncs them."""
        self._recovery_point = max(min(self._recovery_point, offset), self._log_start_offset)

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync segments holding offsets below up_to_offset (default: everything) and advance the
        recovery point. Blocks: run it in an executor; safe against concurrent appends and reads.

        The lock is held only to pick the segments and duplicate their descriptors, never
        across an fsync: retention, truncation and close on the event loop must not wait for
        the disk. A closed log has nothing left to flush.
        """
        target = self._log_end_offset if up_to_offset is None else up_to_offset
        with self._segment_files_lock:
            if self._closed:
                return
            recovery_point = self._recovery_point
            if target <= recovery_point:
                return
            segments = self._segments
            fds: list[int] = []
            for n, segment in enumerate(segments):
                next_base = segments[n + 1].base_offset if n + 1 < len(segments) else None
                if segment.base_offset < target and (
                    next_base is None or next_base > recovery_point
                ):
                    fds += segment.duplicate_fds()
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        self._epoch_cache.flush()
        self._txn_indexes.flush()
        # Snapshots written on roll become durable before the recovery point passes them.
        self.producer_state.flush_snapshots(target)
        with self._segment_files_lock:
            # A truncation while we synced may have moved the end below target.
            self._recovery_point = max(self._recovery_point, min(target, self._log_end_offset))
            self._last_flush_ms = self._clock_ms()

    def replace_segments(
        self, old_segments: Sequence[LogSegment], open_replacement: Callable[[], LogSegment]
    ) -> LogSegment:
        """Swap one cleaned segment in for old_segments (consecutive, below the active one), on
        the loop (LogCleaner). The old files become `*.deleted` (see take_deleted_files) before
        open_replacement renames the replacement's `.swap` files into place and opens it."""
        segments = self._segments
        start = next((n for n, s in enumerate(segments) if s is old_segments[0]), len(segments))
        end = start + len(old_segments)
        if end >= len(segments) or any(
            a is not b for a, b in zip(segments[start:end], old_segments, strict=True)
        ):
            raise ValueError(f"{old_segments} are not consecutive inactive segments of {self}")
        with self._segment_files_lock:
            for segment in old_segments:
                self._files_to_remove += segment.delete(defer=True)
                txn_index = self._txn_indexes.drop(segment.base_offset, defer=True)
                if txn_index is not None:  # cleaning drops all aborted data it covers
                    self._files_to_remove.append(txn_index)
            replacement = open_replacement()
        self._set_segments(segments[:start] + [replacement] + segments[end:])
        # The merged-away segments' snapshots go with them; the replacement's base keeps its own.
        self.producer_state.delete_snapshots_in(replacement.base_offset + 1,
                                                segments[end].base_offset)
        return replacement

    def take_deleted_files(self) -> list[Path]:
        """The renamed files of segments deleted since the last call; the caller unlinks them
        (off the event loop). Whatever is never unlinked is removed at the next open."""
        files, self._files_to_remove = self._files_to_remove, []
        return files

    def close(self, *, sync_snapshot: bool = False) -> None:
        """Close every segment (the caller flushed first if it wanted durability), writing a
        producer snapshot at the end; sync_snapshot fsyncs it (clean shutdown, off the loop).
        Without it nothing is fsynced, so detaching a log on the loop (topic deletion, a failed
        dir, a replica move's swap) never waits for the disk."""
        with self._segment_files_lock:
            if not self._closed:
                # The clean-shutdown snapshot: the next open loads it and scans nothing.
                try:
                    self.producer_state.take_snapshot(self._log_end_offset, sync=sync_snapshot)
                    if sync_snapshot:
                        self._txn_indexes.flush()
                except OSError as exc:  # e.g. a failed log dir: the next open rebuilds
                    logger.warning("no producer snapshot for %s: %s", self.dir, exc)
            self._closed = True
            self._epoch_cache.flush()
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close and remove every file of this log and its directory (blocks)."""
        with self._segment_files_lock:
            self._closed = True
            for segment in self._segments:
                segment.delete()
            self._set_segments([])
            shutil.rmtree(self.dir, ignore_errors=False)

    def __repr__(self) -> str:
        return (
            f"UnifiedLog({self.topic}-{self.partition}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._log_end_offset}, segments={len(self._segments)})"
        )


__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "UNDEFINED_EPOCH",
    "LogAppendInfo",
    "OffsetAndTimestamp",
    "UnifiedLog",
    "parse_topic_partition",
    "wall_clock_ms",
]
