"""What the Raft core needs of its replicated log (Kafka's ReplicatedLog), as a Protocol.

The core never opens a file: it appends to the log's page-cache view, asks the driver for
flushes through `Flush` effects, and reads back what a follower asks for. Records are opaque
to it: whatever `read` returns is handed to a follower's `append_as_follower` unchanged.
Snapshots (KIP-630) are identified by their end offset and the epoch of the entry before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kafka_ext.raft.messages import OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """The control record a new leader appends at the start of its epoch (Kafka's
    LeaderChangeMessage): committing it commits everything before it (Raft §5.4.2)."""

    leader_id: int
    epoch: int
    voters: tuple[int, ...]


class RaftLog(Protocol):
    """One replica's copy of the log. Not thread-safe: only the core's driver touches it."""

    @property
    def log_start_offset(self) -> int:
        """First offset held in the log; the latest snapshot covers everything before it."""

    @property
    def log_end_offset(self) -> int:
        """One past the last entry, flushed or not."""

    def last_fetched_epoch(self) -> int:
        """Epoch of the last entry, or of the snapshot at the log start when the log is empty."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` the log knows and the end offset of its entries
        (Kafka's endOffsetForEpoch); (offset -1, epoch -1) when it knows none."""

    def append_as_leader(self, records: list[Any], epoch: int) -> int:
        """Append `records` in one batch at `epoch`; returns the offset after them."""

    def append_as_follower(self, records: Any) -> int:
        """Append what a leader's `read` returned, at the log end; returns the new end."""

    def read(self, offset: int, max_bytes: int) -> Any:
        """Whole entries from `offset` (falsy when there are none), at most about max_bytes."""

    def truncate_to(self, offset: int) -> None:
        """Remove every entry at or after `offset`, durably."""

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The newest complete snapshot, if any."""

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        """(total size, bytes from `position`) of a snapshot, or None if it does not exist."""

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int,
                             data: bytes) -> None:
        """Store part of a snapshot being downloaded from the leader."""

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Make a downloaded snapshot the log's start: every entry is removed and both the log
        start and end become the snapshot's offset (durably)."""
