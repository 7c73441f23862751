"""KafkaMetadataLog: the Raft core's RaftLog over the `__cluster_metadata-0` partition log and
its snapshot files (Kafka's KafkaMetadataLog).

Entries are record batches: a leader appends the metadata records the controller gives it
(one batch per append, committed atomically) or a LeaderChange control batch; a follower
appends the leader's batches as they came. Snapshots are `<end offset>-<epoch>.checkpoint`
files beside the segments (controller/snapshot.py writes them); one being downloaded from the
leader is a `.checkpoint.part` until it is whole. The log never starts before its oldest
snapshot's end: `delete_before_snapshot` moves the log start there. Runs on the event loop;
the driver flushes it off the loop.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from kafka_ext.controller.metadata_log import build_metadata_batch
from kafka_ext.controller.snapshot import (
    PARTIAL_SUFFIX,
    SNAPSHOT_SUFFIX,
    delete_snapshot,
    list_snapshots,
    snapshot_path,
)
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import ControlRecordType, build_batch, control_record
from kafka_ext.raft.log import LeaderChange
from kafka_ext.raft.messages import OffsetAndEpoch
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

def leader_change_batch(change: LeaderChange) -> bytes:
    """The control batch a new leader opens its epoch with (LeaderChangeMessage, type 2)."""
    mtype = registry()["LeaderChangeMessage"]
    cls = mtype.cls
    message = cls(version=0, leader_id=change.leader_id,
                  voters=[cls.Voter(voter_id=v) for v in change.voters],
                  granting_voters=[])
    value = bytearray()
    mtype.encode_into(message, 0, value, None)
    return build_batch([control_record(ControlRecordType.LEADER_CHANGE, bytes(value),
                                       timestamp_ms=int(time.time() * 1000))], is_control=True)


class KafkaMetadataLog:
    """RaftLog (kafka_ext/raft/log.py) over one UnifiedLog; not thread-safe (event loop)."""

    def __init__(self, partition_log: UnifiedLog) -> None:
        self.log = partition_log
        self.dir: Path = partition_log.dir
        # Complete snapshots, oldest first; leftovers of a crash are removed.
        self.snapshots = [OffsetAndEpoch(epoch, offset)
                          for offset, epoch in list_snapshots(self.dir)]
        self._partial_sizes: dict[OffsetAndEpoch, int] = {}
        latest = self.latest_snapshot_id()
        if latest is not None and latest.offset > partition_log.log_end_offset:
            # A snapshot installed from the leader, but the crash came before the log followed.
            partition_log.truncate_fully_and_start_at(latest.offset)
        elif latest is not None and latest.offset > partition_log.log_start_offset:
            partition_log.maybe_increment_log_start_offset(latest.offset)

    # -- RaftLog -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.log.log_end_offset)

    def _start_epoch(self) -> int:
        """Epoch of the entry just before the log start: the snapshot's there."""
        start = self.log.log_start_offset
        for snapshot in self.snapshots:
            if snapshot.offset == start:
                return snapshot.epoch
        return 0

    def last_fetched_epoch(self) -> int:
        if self.log.log_end_offset > self.log.log_start_offset:
            entries = self.log.leader_epoch_cache.entries
            if entries:
                return int(entries[-1][0])
        return self._start_epoch()

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        entries = self.log.leader_epoch_cache.entries
        found: OffsetAndEpoch | None = None
        for n, (entry_epoch, _start) in enumerate(entries):
            if entry_epoch > epoch:
                break
            end = entries[n + 1][1] if n + 1 < len(entries) else self.log.log_end_offset
            found = OffsetAndEpoch(entry_epoch, end)
        if found is not None:
            return found
        start = self.log.log_start_offset
        start_epoch = self._start_epoch()
        if start > 0 and start_epoch <= epoch:
            return OffsetAndEpoch(start_epoch, start)
        return OffsetAndEpoch(-1, -1)

    def append_as_leader(self, records: list[Any], epoch: int) -> int:
        if len(records) == 1 and isinstance(records[0], LeaderChange):
            batch = leader_change_batch(records[0])
        else:
            batch = build_metadata_batch(records)
        info = self.log.append_as_leader(batch, epoch, in_place=False,
                                         origin=AppendOrigin.COORDINATOR)
        return int(info.last_offset) + 1

    def append_as_follower(self, records: Any) -> int:
        self.log.append_as_follower(records)
        return int(self.log.log_end_offset)

    def read(self, offset: int, max_bytes: int) -> Any:
        info = self.log.read(offset, max_bytes, min_one_message=True)
        return info.records or None

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self.snapshots[-1] if self.snapshots else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        if snapshot_id not in self.snapshots:
            return None
        path = self.snapshot_path(snapshot_id)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(position)
                return size, f.read(max_bytes)
        except FileNotFoundError:
            return None

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int,
                             data: bytes) -> None:
        path = self._partial_path(snapshot_id)
        if position == 0:
            self._partial_sizes[snapshot_id] = 0
            path.write_bytes(b"")
        if self._partial_sizes.get(snapshot_id) != position:
            raise ValueError(f"snapshot chunk at {position}, have "
                             f"{self._partial_sizes.get(snapshot_id)}")
        with path.open("ab") as f:
            f.write(data)
        self._partial_sizes[snapshot_id] = position + len(data)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        part = self._partial_path(snapshot_id)
        final = self.snapshot_path(snapshot_id)
        with part.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(part, final)
        _fsync_dir(self.dir)
        self._partial_sizes.pop(snapshot_id, None)
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        self.log.high_watermark = snapshot_id.offset
        for old in [s for s in self.snapshots if s != snapshot_id]:
            self._delete_snapshot_file(old)
        self.snapshots = [snapshot_id]

    # -- snapshots the local state machine writes ------------------------------------------

    def snapshot_path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return snapshot_path(self.dir, snapshot_id.offset, snapshot_id.epoch)

    def _partial_path(self, snapshot_id: OffsetAndEpoch) -> Path:
        """Where a snapshot downloaded from the leader is written until it is whole."""
        final = self.snapshot_path(snapshot_id)
        return final.with_name(final.name.removesuffix(SNAPSHOT_SUFFIX) + PARTIAL_SUFFIX)

    def add_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """A snapshot file was written (durably) at `snapshot_path(snapshot_id)`."""
        if snapshot_id not in self.snapshots:
            self.snapshots.append(snapshot_id)
            self.snapshots.sort(key=lambda s: s.offset)

    def delete_before_snapshot(self, keep_snapshots: int = 2) -> None:
        """Start the log at the latest snapshot, and keep only the newest `keep_snapshots`
        snapshot files (an older one may still be in a follower's download)."""
        latest = self.latest_snapshot_id()
        if latest is None:
            return
        if latest.offset <= self.log.recovery_point:  # only what a durable log also covers
            self.log.maybe_increment_log_start_offset(latest.offset)
        for old in self.snapshots[:-keep_snapshots]:
            if old.offset < self.log.log_start_offset:
                self._delete_snapshot_file(old)
                self.snapshots.remove(old)

    def _delete_snapshot_file(self, snapshot_id: OffsetAndEpoch) -> None:
        try:
            delete_snapshot(self.dir, snapshot_id.offset, snapshot_id.epoch)
        except OSError as exc:
            log.warning("could not delete snapshot %s: %s", snapshot_id, exc)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
