"""Leader epoch -> start offset history of one partition; mirrors Kafka's LeaderEpochFileCache.

Backs OffsetForLeaderEpoch (KIP-101/279): a follower asks where an epoch ended to find where its
log diverged. Persisted as `leader-epoch-checkpoint`. Not thread-safe except `flush()`, which only
rewrites the file from a snapshot of the entries under a lock.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from kafka_ext.storage.checkpoints import LeaderEpochCheckpointFile

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Entries strictly increasing in epoch and in start offset."""

    __slots__ = ("_file", "_entries", "_dirty", "_file_lock")

    def __init__(self, partition_dir: Path) -> None:
        """Load the checkpoint; a malformed one raises CorruptCheckpointError to the log loader."""
        self._file = LeaderEpochCheckpointFile(partition_dir / LEADER_EPOCH_CHECKPOINT)
        self._entries: list[tuple[int, int]] = self._file.read()
        self._dirty = False
        self._file_lock = threading.Lock()  # one writer of the file: the loop or a flush thread

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the (epoch, start_offset) entries, oldest first."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that epoch starts at start_offset; drop entries it contradicts. True if changed.

        Later epochs, or entries starting at or after start_offset, are removed first, as a
        leader's history overrides a diverged follower's.
        """
        if epoch < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        kept = [(e, o) for e, o in self._entries if e < epoch and o < start_offset]
        kept.append((epoch, start_offset))
        self._entries = kept
        self._write()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka answers it.

        The latest epoch ends at the log end offset; an older one ends where the next higher
        epoch starts, reported with the largest known epoch <= requested; an unknown (too new)
        epoch gives (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1][0]:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            return requested_epoch, higher_start
        return epochs[higher - 1], higher_start

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that was leader when offset was appended, or -1."""
        starts = [o for _, o in self._entries]
        n = bisect.bisect_right(starts, offset)
        return self._entries[n - 1][0] if n else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after end_offset (the log was truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget history before start_offset, keeping the epoch that covers it (moved to start_offset)."""
        n = bisect.bisect_right([o for _, o in self._entries], start_offset)
        if n <= 1:
            return
        epoch, _ = self._entries[n - 1]
        self._entries = [(epoch, start_offset), *self._entries[n:]]
        self._write()

    def clear(self) -> None:
        """Drop every entry (the log was truncated fully)."""
        self._entries = []
        self._write()

    def _write(self) -> None:
        """Rewrite the file without fsync (rare: once per leader change); `flush` makes it durable."""
        with self._file_lock:
            self._file.write(self._entries, sync=False)
            self._dirty = True

    def flush(self) -> None:
        """fsync the checkpoint if it changed since the last flush (blocks)."""
        with self._file_lock:
            if self._dirty:
                self._dirty = False
                self._file.write(list(self._entries), sync=True)
