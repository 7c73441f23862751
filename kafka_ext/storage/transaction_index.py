"""Aborted transactions per segment (`.txnindex`); mirrors Apache Kafka's TransactionIndex.

A segment's index lists, in marker order, every transaction an ABORT marker in that segment
ended: version, producer id, first offset, last offset (the marker) and the last stable offset
at that moment, 34 bytes each. read_committed fetches return the aborted transactions that
overlap the fetched range so consumers can drop their records. The file exists only for
segments that hold an ABORT marker. Not thread-safe, except `flush`, which may run in the
log's flush thread.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.storage.abstract_index import DELETED_SUFFIX

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0

_ENTRY = struct.Struct(
    ">"
    "h"  # version: 0
    "q"  # producerId: the producer whose transaction was aborted
    "q"  # firstOffset: first offset of the transaction in this partition
    "q"  # lastOffset: offset of the ABORT marker
    "q"  # lastStableOffset: the partition's LSO once the marker was written
)
ENTRY_SIZE = _ENTRY.size  # 34 bytes

assert ENTRY_SIZE == 34


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    """One aborted transaction of a partition (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        ABORTED_TXN_VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
        txn.last_stable_offset,
    )


def decode_aborted_txns(data: bytes | memoryview) -> tuple[list[AbortedTxn], int]:
    """Entries of an index file and the bytes they span; a torn last entry is left out.

    DecodeError for an entry of an unknown version (not an index we can trust)."""
    entries = []
    whole = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, whole, ENTRY_SIZE):
        version, producer_id, first_offset, last_offset, lso = _ENTRY.unpack_from(data, pos)
        if version != ABORTED_TXN_VERSION:
            raise DecodeError(f"aborted transaction entry at {pos} has version {version}")
        entries.append(AbortedTxn(producer_id, first_offset, last_offset, lso))
    return entries, whole


def filename_for(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class TransactionIndex:
    """The aborted transactions of one segment; entries ordered by last offset (marker)."""

    __slots__ = ("path", "base_offset", "entries", "_dirty")

    def __init__(self, path: Path, base_offset: int, entries: list[AbortedTxn] | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = entries or []
        self._dirty = False  # written since the last fsync

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Read an existing file; a torn tail (crash mid-write) is cut off; unreadable -> empty."""
        data = path.read_bytes()
        try:
            entries, whole = decode_aborted_txns(data)
        except DecodeError:
            entries, whole = [], 0
        if whole != len(data):
            os.truncate(path, whole)
        return cls(path, base_offset, entries)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry at the end of the file (created on the first entry)."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction ending at {txn.last_offset} is not after "
                f"{self.entries[-1].last_offset} in {self.path}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode_aborted_txn(txn))
        finally:
            os.close(fd)
        self.entries.append(txn)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is
        complete (an entry's last stable offset reached the bound: later segments cannot
        hold a transaction starting below it)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after offset (the log was truncated there)."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        os.truncate(self.path, len(kept) * ENTRY_SIZE)
        self._dirty = True

    def flush(self) -> None:
        """fsync the file if it changed since the last flush (blocks)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # deleted meanwhile
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, defer: bool = False) -> Path | None:
        """Remove the file; with defer rename it `*.deleted` and return it for later unlinking."""
        if defer:
            doomed = self.path.with_name(self.path.name + DELETED_SUFFIX)
            try:
                os.replace(self.path, doomed)
            except FileNotFoundError:
                return None
            return doomed
        self.path.unlink(missing_ok=True)
        return None


class TransactionIndexes:
    """The `.txnindex` files of one log, by segment base offset; only segments with an ABORT
    marker have one. Guarded by the partition's owner; `flush` may run in the flush thread."""

    __slots__ = ("dir", "_indexes", "_max_last_offset", "_lock")

    def __init__(self, directory: Path) -> None:
        """Load every `.txnindex` file of the directory."""
        self.dir = directory
        self._indexes: dict[int, TransactionIndex] = {}
        self._max_last_offset = -1  # largest marker offset indexed: the fetch fast path
        self._lock = threading.Lock()  # the index map, against a concurrent flush
        for name in os.listdir(directory):
            stem, suffix = os.path.splitext(name)
            if suffix == TXN_INDEX_SUFFIX and len(stem) == 20 and stem.isdigit():
                index = TransactionIndex.load(directory / name, int(stem))
                self._indexes[index.base_offset] = index
        self._indexes = dict(sorted(self._indexes.items()))
        self._refresh_max()

    def _refresh_max(self) -> None:
        self._max_last_offset = max(
            (index.entries[-1].last_offset for index in self._indexes.values() if index.entries),
            default=-1,
        )

    def entries(self) -> list[AbortedTxn]:
        """Every aborted transaction indexed, in segment then marker order."""
        return [txn for index in self._indexes.values() for txn in index.entries]

    def base_offsets(self) -> list[int]:
        return list(self._indexes)

    def append(self, segment_base_offset: int, txn: AbortedTxn) -> None:
        """Index an aborted transaction whose ABORT marker is in that segment."""
        index = self._indexes.get(segment_base_offset)
        if index is None:
            index = TransactionIndex(filename_for(self.dir, segment_base_offset), segment_base_offset)
            with self._lock:
                self._indexes = dict(sorted({**self._indexes, segment_base_offset: index}.items()))
        index.append(txn)
        self._max_last_offset = max(self._max_last_offset, txn.last_offset)

    def may_overlap(self, fetch_offset: int) -> bool:
        """False when no aborted transaction ends at or after fetch_offset (nothing to collect)."""
        return self._max_last_offset >= fetch_offset

    def collect(self, from_segment_base_offset: int, fetch_offset: int,
                upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), searching the
        indexes of the segment holding fetch_offset and the later ones (Kafka's order)."""
        if not self.may_overlap(fetch_offset):
            return []
        found: list[AbortedTxn] = []
        for base_offset, index in self._indexes.items():
            if base_offset < from_segment_base_offset:
                continue
            entries, complete = index.collect(fetch_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after offset, in every index."""
        for index in self._indexes.values():
            index.truncate_to(offset)
        self._refresh_max()

    def drop(self, segment_base_offset: int, defer: bool = False) -> Path | None:
        """Delete a segment's index with its segment; with defer, return the renamed file."""
        with self._lock:
            index = self._indexes.get(segment_base_offset)
            if index is None:
                return None
            self._indexes = {b: i for b, i in self._indexes.items() if b != segment_base_offset}
        self._refresh_max()
        return index.delete(defer)

    def retain(self, segment_base_offsets: set[int]) -> None:
        """Delete indexes whose segment does not exist (left by a crash mid-deletion)."""
        for base_offset in list(self._indexes):
            if base_offset not in segment_base_offsets:
                self.drop(base_offset)

    def drop_all(self) -> None:
        for base_offset in list(self._indexes):
            self.drop(base_offset)

    def flush(self) -> None:
        """fsync every index written since the last flush (blocks; any thread)."""
        with self._lock:
            indexes = list(self._indexes.values())
        for index in indexes:
            index.flush()


__all__ = [
    "ENTRY_SIZE",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "TransactionIndex",
    "TransactionIndexes",
    "decode_aborted_txns",
    "encode_aborted_txn",
]
