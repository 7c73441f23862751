"""Per-partition producer state: idempotent sequences, producer epochs, ongoing transactions.

Mirrors Apache Kafka's ProducerStateManager, ProducerStateEntry and ProducerAppendInfo. The
state is built from batch headers only (a transaction marker's one control record is the
exception) and persisted in `<20-digit offset>.snapshot` files beside the segments, in Kafka's
layout (ProducerSnapshot v1: version, CRC-32C, entries); recovery loads the newest readable
snapshot and replays the batch headers after it (`rebuild_producer_state`).

Concurrency: not thread-safe; the partition's owner calls it on the event loop. Snapshot
writes and deletions touch small files and may block briefly; `flush_snapshots` (the fsync of
snapshots written on roll) runs in the log's flush thread.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crc32c import crc32c

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import BatchHeader, iter_batch_headers
from kafka_ext.protocol.records import (
    ControlRecordType,
    EndTxnMarker,
    decode_end_txn_marker,
    decode_records,
)
from kafka_ext.storage.checkpoints import fsync_dir

if TYPE_CHECKING:
    from kafka_ext.storage.segment import LogSegment

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # batches per producer remembered for duplicate detection (Kafka's)
MAX_SEQUENCE = 0x7FFFFFFF  # sequences wrap to 0 after Integer.MAX_VALUE
NO_OFFSET = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_VERSION = struct.Struct(">h")  # snapshot version, before the ProducerSnapshot message
_CRC = struct.Struct(">I")  # CRC-32C of every byte from the entries array to the end
_CRC_POS = 2  # after the int16 version
_ENTRIES_POS = 6  # after version and CRC: where the CRC's range starts


class AppendOrigin(enum.Enum):
    """Who appends a batch; it decides which producer-state checks apply (as in Kafka)."""

    CLIENT = "client"  # a producer's Produce request: sequence and epoch checks
    COORDINATOR = "coordinator"  # a coordinator's own records and transaction markers
    REPLICATION = "replication"  # a follower copying the leader: no checks


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence and offset ranges (Kafka's BatchMetadata)."""

    last_sequence: int
    last_offset: int
    offset_delta: int  # last offset - first offset (= last sequence - first sequence)
    timestamp_ms: int  # the batch's max timestamp

    @property
    def first_sequence(self) -> int:
        return decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def decrement_sequence(sequence: int, decrement: int) -> int:
    """sequence - decrement, wrapping below 0 to MAX_SEQUENCE as producers wrap upwards."""
    if sequence < 0:
        return sequence
    if sequence < decrement:
        return MAX_SEQUENCE - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == MAX_SEQUENCE)


def _new_batches() -> deque[BatchMetadata]:
    return deque(maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerStateEntry:
    """What one partition knows of one producer id: its epoch, last batches and open transaction."""

    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp_ms: int = -1
    current_txn_first_offset: int = NO_OFFSET  # first offset of its ongoing transaction, or -1
    batches: deque[BatchMetadata] = field(default_factory=_new_batches)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, producer_epoch: int, first_sequence: int,
                       last_sequence: int) -> BatchMetadata | None:
        """The remembered batch with exactly this epoch and sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_sequence == last_sequence and batch.first_sequence == first_sequence:
                return batch
        return None

    def update_epoch(self, producer_epoch: int) -> None:
        """A new epoch starts a new sequence space: forget the old epoch's batches."""
        if producer_epoch != self.producer_epoch:
            self.producer_epoch = producer_epoch
            self.batches.clear()


def _check_epoch_not_older(entry: ProducerStateEntry, producer_epoch: int) -> None:
    if producer_epoch < entry.producer_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"epoch {producer_epoch} of producer {entry.producer_id} is older than the last "
            f"seen epoch {entry.producer_epoch}",
        )


def check_client_sequence(entry: ProducerStateEntry | None, producer_epoch: int,
                          first_sequence: int, last_sequence: int) -> BatchMetadata | None:
    """Kafka's idempotence checks of a producer's batch against what a partition knows of it.

    Returns the original batch when it duplicates one of the producer's last five of the same
    epoch (answer its offsets, append nothing). Raises KafkaError INVALID_PRODUCER_EPOCH (an
    older epoch) or OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, or a new epoch not starting at 0).
    Shared by ProducerStateManager.check_batch and the diskless coordinator (KIP-1164).
    """
    if entry is None:
        # An unknown producer (new, or expired/deleted by retention) may start at any
        # sequence, as Kafka accepts since KIP-360.
        return None
    if producer_epoch == entry.producer_epoch:
        duplicate = entry.find_duplicate(producer_epoch, first_sequence, last_sequence)
        if duplicate is not None:
            return duplicate
    _check_epoch_not_older(entry, producer_epoch)
    if producer_epoch != entry.producer_epoch:
        if first_sequence != 0 and entry.producer_epoch >= 0:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"new epoch {producer_epoch} of producer {entry.producer_id} starts at sequence "
                f"{first_sequence}, not 0",
            )
    elif entry.producer_epoch >= 0 and not _in_sequence(entry.last_sequence, first_sequence):
        raise KafkaError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"out of order sequence number for producer {entry.producer_id}: {first_sequence} "
            f"(incoming), {entry.last_sequence} (current end)",
        )
    return None


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction a COMMIT or ABORT marker ended in this partition (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


def marker_of(buf: Any, pos: int) -> EndTxnMarker:
    """Decode the transaction marker of the control batch at pos (its one record only)."""
    _, records = decode_records(buf, pos, verify_crc=False)
    if not records:
        raise KafkaError(ErrorCode.INVALID_RECORD, "control batch without a control record")
    try:
        return decode_end_txn_marker(records[0])
    except DecodeError as exc:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"bad transaction marker: {exc}") from None


class ProducerStateManager:
    """Producer entries of one partition; ongoing transactions ordered by first offset.

    Owned by its UnifiedLog and touched on the event loop only. `_ongoing` maps the first offset
    of each open transaction to its producer, in offset order (transactions start at the log
    end). Completed transactions stay in `_unreplicated` until the high watermark passes their
    marker, so the last stable offset never moves past what followers have.
    """

    __slots__ = ("dir", "_producers", "_ongoing", "_unreplicated", "_snapshot_offsets",
                 "_unflushed_snapshots", "_flush_lock")

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id
        self._unreplicated: dict[int, int] = {}  # first offset -> marker offset
        self._snapshot_offsets: list[int] = sorted(_list_snapshots(directory))
        # Snapshots written without fsync (on roll), until the log's flush passes them; the
        # flush thread takes them under _flush_lock.
        self._unflushed_snapshots: set[int] = set()
        self._flush_lock = threading.Lock()

    # -- reading

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """Every producer id with state here (DescribeProducers); a copy of the map."""
        return dict(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def first_unstable_offset(self) -> int:
        """First offset of the oldest transaction not yet decided and replicated, or -1."""
        first = next(iter(self._ongoing)) if self._ongoing else NO_OFFSET
        if self._unreplicated:
            oldest = min(self._unreplicated)
            first = oldest if first < 0 else min(first, oldest)
        return first

    def ongoing_transactions(self) -> dict[int, int]:
        """First offset -> producer id of every open transaction, oldest first."""
        return dict(self._ongoing)

    # -- appends

    def check_batch(self, header: BatchHeader, origin: AppendOrigin,
                    marker: EndTxnMarker | None = None) -> BatchMetadata | None:
        """Kafka's producer checks for one batch about to be appended; changes nothing.

        Returns the original batch when a CLIENT batch duplicates one of the producer's last
        five (the caller answers its offsets and appends nothing). Raises KafkaError
        INVALID_PRODUCER_EPOCH (older epoch), OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, or a new
        epoch not starting at 0), INVALID_TXN_STATE (plain batch inside an open transaction)
        or TRANSACTION_COORDINATOR_FENCED (a marker from an older coordinator epoch).
        """
        if origin is AppendOrigin.REPLICATION:
            return None
        producer_id = header.producer_id
        entry = self._producers.get(producer_id)
        if entry is None:
            # An unknown producer (new, or expired/deleted by retention) may start at any
            # sequence, as Kafka accepts since KIP-360.
            return None
        epoch = header.producer_epoch
        if origin is AppendOrigin.CLIENT and marker is None:
            duplicate = check_client_sequence(entry, epoch, header.base_sequence,
                                              header.last_sequence)
            if duplicate is not None:
                return duplicate
        else:
            _check_epoch_not_older(entry, epoch)
        if marker is not None:
            if entry.coordinator_epoch > marker.coordinator_epoch:
                raise KafkaError(
                    ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                    f"marker for producer {producer_id} from coordinator epoch "
                    f"{marker.coordinator_epoch}, older than {entry.coordinator_epoch}",
                )
            return None
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"non-transactional batch from producer {producer_id} inside its transaction "
                f"started at {entry.current_txn_first_offset}",
            )
        return None

    def update(self, header: BatchHeader, first_offset: int, timestamp_ms: int,
               marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply an appended batch (its offsets start at first_offset) or transaction marker.

        Returns the transaction a marker ended, if the producer had one open here; the caller
        then passes it to `complete_txn` (after indexing an aborted one).
        """
        producer_id = header.producer_id
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        entry.update_epoch(header.producer_epoch)
        entry.last_timestamp_ms = timestamp_ms
        if marker is not None:
            completed = None
            if entry.current_txn_first_offset >= 0:
                completed = CompletedTxn(
                    producer_id, entry.current_txn_first_offset, first_offset,
                    marker.control_type == ControlRecordType.ABORT,
                )
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.current_txn_first_offset = NO_OFFSET
            return completed
        delta = header.last_offset_delta
        entry.batches.append(
            BatchMetadata(header.last_sequence, first_offset + delta, delta, timestamp_ms)
        )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = producer_id
        return None

    def complete_txn(self, completed: CompletedTxn) -> int:
        """Close a transaction ended by a marker; returns the last stable offset to index with it
        (the first offset of the oldest other open transaction, else past the marker)."""
        last_stable_offset = completed.last_offset + 1
        for first_offset, producer_id in self._ongoing.items():
            if producer_id != completed.producer_id:
                last_stable_offset = first_offset
                break
        self._ongoing.pop(completed.first_offset, None)
        self._unreplicated[completed.first_offset] = completed.last_offset
        return last_stable_offset

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark become stable."""
        if self._unreplicated:
            for first_offset, last_offset in list(self._unreplicated.items()):
                if last_offset < high_watermark:
                    del self._unreplicated[first_offset]

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for expiration_ms without an open transaction
        (producer.id.expiration.ms); returns how many."""
        expired = [
            producer_id for producer_id, entry in self._producers.items()
            if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp_ms >= expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        return len(expired)

    def clear(self) -> None:
        """Forget every producer and transaction (before a reload)."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    # -- snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    @property
    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files beside the segments, ascending."""
        return list(self._snapshot_offsets)

    @property
    def latest_snapshot_offset(self) -> int:
        return self._snapshot_offsets[-1] if self._snapshot_offsets else NO_OFFSET

    def take_snapshot(self, offset: int, *, sync: bool = False) -> Path:
        """Write the state as of offset (every batch below it applied) to `<offset>.snapshot`;
        atomic through a temp file; with sync also fsynced with its dir (clean shutdown),
        otherwise `flush_snapshots` syncs it once the log's flush passes offset (as Kafka
        flushes a roll's snapshot with the segments before the recovery point moves)."""
        path = self.snapshot_path(offset)
        data = encode_snapshot(self._producers.values())
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        with self._flush_lock:
            if sync:
                self._unflushed_snapshots.discard(offset)
            else:
                self._unflushed_snapshots.add(offset)
        if sync:
            fsync_dir(self.dir)
        if offset not in self._snapshot_offsets:
            self._snapshot_offsets.append(offset)
            self._snapshot_offsets.sort()
        return path

    @property
    def unflushed_snapshot_offsets(self) -> list[int]:
        """Offsets of snapshots written but not yet fsynced, ascending."""
        with self._flush_lock:
            return sorted(self._unflushed_snapshots)

    def flush_snapshots(self, up_to_offset: int) -> None:
        """fsync the unflushed snapshots at or below up_to_offset and their dir (blocks; the
        log's flush thread). One deleted meanwhile is skipped; on an error they all stay due."""
        with self._flush_lock:
            due = sorted(o for o in self._unflushed_snapshots if o <= up_to_offset)
            self._unflushed_snapshots.difference_update(due)
        if not due:
            return
        try:
            for offset in due:
                try:
                    fd = os.open(self.snapshot_path(offset), os.O_RDONLY)
                except FileNotFoundError:
                    continue  # deleted (retention, cleaning, truncation): nothing to keep
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                fsync_dir(self.dir)  # the renames that put them in place
            except FileNotFoundError:
                pass  # the log's dir was renamed away meanwhile (deleted or moved)
        except OSError:
            with self._flush_lock:
                self._unflushed_snapshots.update(due)  # the next flush tries them again
            raise

    def load_snapshot(self, max_offset: int) -> int:
        """Replace the state with the newest readable snapshot at or below max_offset; returns
        its offset, or -1 (state cleared) when there is none. Unreadable ones are deleted."""
        self.clear()
        for offset in reversed(self._snapshot_offsets):
            if offset > max_offset:
                continue
            path = self.snapshot_path(offset)
            try:
                entries = decode_snapshot(path.read_bytes())
            except (OSError, DecodeError) as exc:
                logger.warning("ignoring producer snapshot %s: %s", path, exc)
                self._remove_snapshot(offset)
                continue
            ongoing: list[tuple[int, int]] = []
            for entry in entries:
                self._producers[entry.producer_id] = entry
                if entry.current_txn_first_offset >= 0:
                    ongoing.append((entry.current_txn_first_offset, entry.producer_id))
            for first_offset, producer_id in sorted(ongoing):
                self._ongoing[first_offset] = producer_id
            return offset
        return NO_OFFSET

    def delete_snapshots_outside(self, low_offset: int, high_offset: int) -> None:
        """Delete snapshots below low_offset (their segments are gone) or above high_offset
        (the log was truncated below them)."""
        for offset in list(self._snapshot_offsets):
            if offset < low_offset or offset > high_offset:
                self._remove_snapshot(offset)

    def delete_snapshots_in(self, from_offset: int, to_offset: int) -> None:
        """Delete snapshots at offsets in [from_offset, to_offset): those of segments the
        cleaner merged away (Kafka deletes a replaced segment's snapshot with it)."""
        for offset in list(self._snapshot_offsets):
            if from_offset <= offset < to_offset:
                self._remove_snapshot(offset)

    def delete_all_snapshots(self) -> None:
        for offset in list(self._snapshot_offsets):
            self._remove_snapshot(offset)

    def _remove_snapshot(self, offset: int) -> None:
        self._snapshot_offsets.remove(offset)
        with self._flush_lock:
            self._unflushed_snapshots.discard(offset)
        self.snapshot_path(offset).unlink(missing_ok=True)


def _list_snapshots(directory: Path) -> list[int]:
    offsets = []
    if directory.is_dir():
        for name in os.listdir(directory):
            stem, suffix = os.path.splitext(name)
            if suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
    return offsets


# -- the snapshot format (pure)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's snapshot bytes: int16 version 1, uint32 CRC-32C, ProducerSnapshot entries.

    Kafka writes one entry per producer (its last batch). We write one per remembered batch,
    oldest first, so duplicates of all five are still recognised after a load; a reader that
    keeps the last entry per producer id (Kafka's) gets exactly Kafka's state."""
    message_type = registry()["ProducerSnapshot"]
    cls = message_type.cls
    raw_entries = []
    for entry in entries:
        batches = list(entry.batches) or [BatchMetadata(-1, NO_OFFSET, 0, entry.last_timestamp_ms)]
        for n, batch in enumerate(batches, 1):
            raw_entries.append(cls.ProducerEntry(
                producer_id=entry.producer_id,
                epoch=entry.producer_epoch,
                last_sequence=batch.last_sequence,
                last_offset=batch.last_offset,
                offset_delta=batch.offset_delta,
                timestamp=entry.last_timestamp_ms if n == len(batches) else batch.timestamp_ms,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_first_offset=entry.current_txn_first_offset,
            ))
    message = cls(crc=0, producer_entries=raw_entries)
    out = bytearray(_VERSION.pack(SNAPSHOT_VERSION))
    out += message_type.encode(message, SNAPSHOT_VERSION)
    _CRC.pack_into(out, _CRC_POS, crc32c(memoryview(out)[_ENTRIES_POS:]))
    return bytes(out)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; DecodeError for a wrong version, a bad CRC or torn content."""
    if len(data) < _ENTRIES_POS:
        raise DecodeError(f"producer snapshot of {len(data)} bytes is cut short")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise DecodeError(f"producer snapshot version {version}, expected {SNAPSHOT_VERSION}")
    (stored_crc,) = _CRC.unpack_from(data, _CRC_POS)
    actual_crc = crc32c(memoryview(data)[_ENTRIES_POS:])
    if stored_crc != actual_crc:
        raise DecodeError(f"producer snapshot CRC {stored_crc:#010x}, computed {actual_crc:#010x}")
    message = registry()["ProducerSnapshot"].decode_all(memoryview(data)[_VERSION.size:],
                                                       SNAPSHOT_VERSION)
    entries: dict[int, ProducerStateEntry] = {}
    for raw in message.producer_entries:
        entry = entries.get(raw.producer_id)
        if entry is None or entry.producer_epoch != raw.epoch:
            entry = entries[raw.producer_id] = ProducerStateEntry(raw.producer_id, raw.epoch)
        # Later entries of a producer id win, as in Kafka's reader; batches accumulate.
        entry.coordinator_epoch = raw.coordinator_epoch
        entry.last_timestamp_ms = raw.timestamp
        entry.current_txn_first_offset = raw.current_txn_first_offset
        if raw.last_offset >= 0:
            entry.batches.append(
                BatchMetadata(raw.last_sequence, raw.last_offset, raw.offset_delta, raw.timestamp)
            )
    return list(entries.values())


# -- recovery


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: Iterable[LogSegment],
    start_offset: int,
    on_completed: Callable[[int, CompletedTxn, int], None],
) -> int:
    """Replay the batch headers of segments from start_offset into state (no checks, as a
    follower would); each transaction a marker ends is reported as
    on_completed(segment base offset, txn, last stable offset) before it completes.
    Only markers are decoded (one control record each). Returns the batches replayed."""
    replayed = 0
    for segment in segments:
        if segment.next_offset <= start_offset or segment.size_bytes == 0:
            continue
        info = segment.read(max(start_offset, segment.base_offset), segment.size_bytes)
        if info is None or not info.records:
            continue
        view = info.records[0]
        for pos, header in iter_batch_headers(view):
            if header.last_offset < start_offset:
                continue
            replayed += 1
            if header.producer_id < 0:
                continue
            marker = None
            if header.is_control:
                try:
                    marker = marker_of(view, pos)
                except KafkaError as exc:  # not a transaction marker: nothing to replay
                    logger.warning("skipping control batch at %d: %s", header.base_offset, exc)
                    continue
            completed = state.update(header, header.base_offset, header.max_timestamp, marker)
            if completed is not None:
                on_completed(segment.base_offset, completed, state.complete_txn(completed))
        del view, info
    return replayed


__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "check_client_sequence",
    "decode_snapshot",
    "encode_snapshot",
    "marker_of",
    "rebuild_producer_state",
]
