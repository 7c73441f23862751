"""Every partition log of a broker across its log dirs (JBOD); mirrors Apache Kafka's LogManager.

Checks each dir's meta.properties at load (storage/formatter.py owns the rules), owns the per-dir checkpoints (recovery points, log start offsets,
high watermarks) and the `.kafka_cleanshutdown` marker that lets the next start skip recovery.
Concurrency: called from the event loop only. `load`, `close`, `delete_log`, the checkpoint
methods, `flush_dirty_logs` and `measure_disk_usage` block on disk; run them off the loop (or
before it starts).
A log's own `flush()` may run in an executor thread while the loop keeps using the manager.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    write_atomically,
)
from kafka_ext.storage.formatter import check_dir_identity
from kafka_ext.storage.log import (
    UnifiedLog,
    chunk_dir_name,
    parse_chunk_dir,
    parse_topic_partition,
    wall_clock_ms,
)
from kafka_ext.storage.log_config import LogConfig

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"  # <topic>-<partition>.<uuid hex>-delete: a log waiting for removal
MOVE_DIR_SUFFIX = ".move"  # a replica being moved here between log dirs (DESIGN.md §6)
MOVED_DELETE_SUFFIX = ".delete"  # the proposal's name for a moved-away source (KIP-113)
PLACEMENT_FEWEST_PARTITIONS = "fewest-partitions"  # log.dir.placement.policy values
PLACEMENT_MOST_FREE_BYTES = "most-free-bytes"
# Diskless topics keep WAL objects (default store) and coordinator state beside the partitions.
NON_PARTITION_DIRS = frozenset({"objects", "diskless"})

TopicPartition = tuple[str, int]
ChunkKey = tuple[str, int, int]  # (topic, partition, start offset)


@dataclass(slots=True, frozen=True)
class DiskUsage:
    """A log dir's file system space as last measured (statvfs): DescribeLogDirs, placement."""

    total_bytes: int
    usable_bytes: int


class LogManager:
    """Each loaded log lives in exactly one of `log_dirs`; the map is touched by the loop only."""

    __slots__ = (
        "log_dirs",
        "clean_shutdown_broker_epoch",
        "_marker_epochs",
        "node_id",
        "cluster_id",
        "default_config",
        "_topic_config",
        "_clock_ms",
        "_logs",
        "_log_dir_of",
        "_chunk_logs",
        "_checkpoint_lock",
        "_directory_ids",
        # JBOD (KIP-112/113, docs/jbod.md): dirs found failed, placement, crash-recovery leftovers.
        "offline_dirs",
        "offline_partitions",
        "placement_policy",
        "preferred_dirs",
        "pending_deletions",
        "future_dirs",
        "failure_listener",
        "disk_usage",
    )

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        *,
        node_id: int,
        cluster_id: str,
        default_config: LogConfig | None = None,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """topic_config(topic) gives the config of a log found on disk (default: default_config)."""
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs: tuple[Path, ...] = tuple(Path(d).resolve() for d in log_dirs)
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config
        self._clock_ms = clock_ms
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        # Inactive chunk replicas (seed 000) by (topic, partition, start offset): sealed logs,
        # never appended to, outside the partition checkpoints (each is flushed when sealed).
        self._chunk_logs: dict[ChunkKey, UnifiedLog] = {}
        # Checkpoint writes run in executor threads, several at once (two DeleteRecords, the
        # periodic job): they share one temporary file per checkpoint, so one at a time, as
        # Kafka's CheckpointFile.write is synchronized.
        self._checkpoint_lock = threading.Lock()
        self._directory_ids: dict[Path, uuid.UUID] = {}
        # Dirs that failed (at load or later): no log lives there any more, nothing goes there.
        self.offline_dirs: dict[Path, str] = {}
        # Partitions whose log was in an offline dir: never recreated elsewhere (no data loss).
        self.offline_partitions: set[TopicPartition] = set()
        self.placement_policy = PLACEMENT_FEWEST_PARTITIONS
        # AlterReplicaLogDirs for a partition not hosted yet: where create_log must put it.
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        # Found by load: `-delete`/`.delete` dirs to remove off the loop, `.move` dirs to resume.
        self.pending_deletions: list[Path] = []
        self.future_dirs: dict[TopicPartition, Path] = {}
        # Called (from any thread) with (log_dir, error) when an I/O error hits a dir.
        self.failure_listener: Callable[[Path, BaseException], None] | None = None
        # Space of the online dirs as last measured (`measure_disk_usage`, off the loop), so
        # placement on the loop never calls statvfs itself.
        self.disk_usage: dict[Path, DiskUsage] = {}
        # The broker epoch the last clean shutdown wrote in every log dir's marker; -1 when a
        # dir had none (a crash, kill -9) or they disagree. The controller takes a broker
        # registering without its last epoch out of every ELR (KIP-966).
        self.clean_shutdown_broker_epoch = -1
        self._marker_epochs: list[int] = []

    # -- start-up

    def load(self) -> None:
        """Check each dir's identity, queue `-delete` dirs for removal, open every partition log
        (recovering those of a dir without a clean-shutdown marker), then drop the markers.
        A dir that fails with OSError is offline (KIP-112); if all do, KAFKA_STORAGE_ERROR. Blocks."""
        for log_dir in self.log_dirs:
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                self._directory_ids[log_dir] = check_dir_identity(
                    log_dir, self.node_id, self.cluster_id, self._directory_ids.values())
            except OSError as exc:  # KIP-112: start with the dirs that work
                self._fail_at_load(log_dir, exc)
        for log_dir in self.online_dirs():
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                self._fail_at_load(log_dir, exc)
        if not self.online_dirs():
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"every log dir is offline: {self.offline_dirs}")
        epochs = set(self._marker_epochs)
        if len(self._marker_epochs) == len(self.online_dirs()) and len(epochs) == 1:
            self.clean_shutdown_broker_epoch = epochs.pop()
        self.measure_disk_usage()

    def _fail_at_load(self, log_dir: Path, exc: OSError) -> None:
        logger.error("log dir %s is offline (KIP-112): %s", log_dir, exc)
        self.offline_dirs[log_dir] = str(exc)
        for tp in [tp for tp, d in self._log_dir_of.items() if d == log_dir]:
            log = self._logs.pop(tp)
            del self._log_dir_of[tp]
            self.offline_partitions.add(tp)
            try:
                log.close()
            except OSError as close_exc:
                logger.warning("closing %s on failed dir %s: %s", log.dir, log_dir, close_exc)
        for tp in [tp for tp, d in self.future_dirs.items() if d.parent == log_dir]:
            del self.future_dirs[tp]

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        needs_recovery = not marker.exists()
        if not needs_recovery:
            self._marker_epochs.append(_marker_epoch(marker))
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
        log_start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
        high_watermarks = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).read()
        for path in sorted(log_dir.iterdir()):
            if not path.is_dir() or path.name in NON_PARTITION_DIRS:
                continue
            if path.name.endswith((DELETE_DIR_SUFFIX, MOVED_DELETE_SUFFIX)):
                self.pending_deletions.append(path)  # removed asynchronously after start
                continue
            chunk_key = parse_chunk_dir(path.name)
            if chunk_key is not None:
                self._load_chunk(path, chunk_key, needs_recovery)
                continue
            if path.name.endswith(MOVE_DIR_SUFFIX):
                try:  # the replica mover resumes (or completes) these: replica_mover.py
                    self.future_dirs[parse_topic_partition(path.name[: -len(MOVE_DIR_SUFFIX)])] = path
                except ValueError:
                    logger.warning("ignoring %s: not a partition directory", path)
                continue
            try:
                tp = parse_topic_partition(path.name)
            except ValueError:
                logger.warning("ignoring %s: not a partition directory", path)
                continue
            if tp in self._logs:
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"partition {tp[0]}-{tp[1]} is in both {self._log_dir_of[tp]} and {log_dir}",
                )
            log = UnifiedLog(
                path,
                self._config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_start_offsets.get(tp, 0),
                needs_recovery=needs_recovery,
                clock_ms=self._clock_ms,
            )
            log.high_watermark = high_watermarks.get(tp, 0)
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
        marker.unlink(missing_ok=True)  # from now on a crash must trigger recovery

    def _load_chunk(self, path: Path, key: ChunkKey, needs_recovery: bool) -> None:
        # A crash may have cut a chunk still being copied here: check all of it then.
        chunk = UnifiedLog(path, self._config_for(key[0]), needs_recovery=needs_recovery,
                           clock_ms=self._clock_ms)
        chunk.high_watermark = chunk.log_end_offset
        self._chunk_logs[key] = chunk

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config is not None else self.default_config

    # -- logs

    def has_directory_id(self, log_dir: Path) -> bool:
        """Whether `log_dir`'s meta.properties was read (a dir failing before has none)."""
        return log_dir in self._directory_ids

    def directory_id(self, log_dir: Path) -> uuid.UUID:
        """The directory.id of a loaded log dir (JBOD: AssignReplicasToDirs, DescribeLogDirs)."""
        return self._directory_ids[log_dir]

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self._logs.values())

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def logs_in_dir(self, log_dir: Path) -> list[UnifiedLog]:
        return [log for tp, log in self._logs.items() if self._log_dir_of[tp] == log_dir]

    def report_io_error(self, log: UnifiedLog, exc: OSError) -> Path | None:
        """KIP-112: an I/O error on `log` takes its dir offline (through `failure_listener`)
        only while `log` is still the log served for its partition; returns that dir, or None
        for a log deleted or moved away meanwhile, whose error says nothing about a served dir."""
        tp = (log.topic, log.partition)
        log_dir = self._log_dir_of.get(tp)
        listener = self.failure_listener
        if log_dir is None or self._logs.get(tp) is not log or listener is None:
            return None
        listener(log_dir, exc)
        return log_dir

    def measure_disk_usage(self) -> dict[Path, DiskUsage]:
        """statvfs every online dir and keep the result in `disk_usage` (blocks: off the loop).
        A dir that cannot be measured is left out: placement sees no free bytes there."""
        usage: dict[Path, DiskUsage] = {}
        for log_dir in self.online_dirs():
            try:
                measured = shutil.disk_usage(log_dir)
            except OSError:
                continue  # the probe or the next write reports the dir itself (KIP-112)
            usage[log_dir] = DiskUsage(measured.total, measured.free)
        self.disk_usage = usage  # one assignment: the loop sees the old map or the new one
        return usage

    def create_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
    ) -> UnifiedLog:
        """The partition's log, created in the log dir holding the fewest partitions if absent."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if (
                topic_id is not None
                and existing.topic_id is not None
                and existing.topic_id != topic_id
            ):
                raise KafkaError(
                    ErrorCode.INCONSISTENT_TOPIC_ID,
                    f"{topic}-{partition} exists with topic id {existing.topic_id}, not {topic_id}",
                )
            return existing
        if tp in self.offline_partitions:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{topic}-{partition} is in an offline log dir")
        log_dir = self.preferred_dirs.pop(tp, None)
        if log_dir is None or log_dir not in self._directory_ids or log_dir in self.offline_dirs:
            log_dir = self.place_new_log()
        log = UnifiedLog(
            log_dir / f"{topic}-{partition}",
            config or self._config_for(topic),
            needs_recovery=False,
            topic_id=topic_id,
            clock_ms=self._clock_ms,
        )
        self._logs[tp] = log
        self._log_dir_of[tp] = log_dir
        return log

    # -- inactive chunks (seed 000)

    def get_chunk_log(self, topic: str, partition: int, start_offset: int) -> UnifiedLog | None:
        return self._chunk_logs.get((topic, partition, start_offset))

    def chunk_logs(self) -> dict[ChunkKey, UnifiedLog]:
        return dict(self._chunk_logs)

    def seal_as_chunk(self, topic: str, partition: int, start_offset: int) -> UnifiedLog:
        """The partition's log becomes the inactive chunk starting at `start_offset`: renamed
        to `<topic>-<partition>@<start>` in the same log dir and reopened there. Its data stays
        where it is; the partition's next log starts empty. Quick: nothing is fsynced here, the
        caller flushes the chunk (and its dir) off the event loop. A crash before that finds
        the dir under either name: reloaded as the partition, it is sealed again; as a chunk,
        it is checked whole (no clean-shutdown marker)."""
        tp = (topic, partition)
        log = self._logs.pop(tp)
        del self._log_dir_of[tp]
        durable = log.recovery_point
        log.close()
        sealed_dir = log.dir.with_name(chunk_dir_name(topic, partition, start_offset))
        log.dir.rename(sealed_dir)
        chunk = UnifiedLog(sealed_dir, log.config, needs_recovery=False,
                           log_start_offset=log.log_start_offset, topic_id=log.topic_id,
                           clock_ms=self._clock_ms)
        chunk.assume_unflushed_from(durable)
        chunk.high_watermark = chunk.log_end_offset
        self._chunk_logs[(topic, partition, start_offset)] = chunk
        return chunk

    def create_chunk_log(self, topic: str, partition: int, start_offset: int,
                         topic_id: uuid.UUID, config: LogConfig) -> UnifiedLog:
        """An empty replica of an inactive chunk, starting at its start offset, for a copy of
        it (in the log dir a new partition would get)."""
        log_dir = self.place_new_log()
        chunk = UnifiedLog(log_dir / chunk_dir_name(topic, partition, start_offset), config,
                           needs_recovery=False, topic_id=topic_id, clock_ms=self._clock_ms)
        if start_offset > 0:
            chunk.truncate_fully_and_start_at(start_offset)
        self._chunk_logs[(topic, partition, start_offset)] = chunk
        return chunk

    def detach_chunk_log(self, topic: str, partition: int, start_offset: int) -> Path:
        """Close a chunk replica and rename it for removal, as `detach_log`; the caller removes
        the returned dir off the event loop."""
        log = self._chunk_logs.pop((topic, partition, start_offset))
        log.close()
        doomed = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        log.dir.rename(doomed)
        return doomed

    def online_dirs(self) -> list[Path]:
        """The configured dirs that are not offline, in configuration order."""
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def place_new_log(self) -> Path:
        """The online dir for a new partition: fewest partitions, or most free bytes (config),
        as `measure_disk_usage` last saw them (it runs off the loop; this runs on it)."""
        online = self.online_dirs()
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "no log dir is online")
        if self.placement_policy == PLACEMENT_MOST_FREE_BYTES:
            usage = self.disk_usage

            def free(d: Path) -> int:
                measured = usage.get(d)
                return -1 if measured is None else measured.usable_bytes

            return max(online, key=free)  # ties: the first configured dir
        counts = dict.fromkeys(online, 0)
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        return min(online, key=lambda d: counts[d])  # ties: the first configured dir

    def replace_log(self, log: UnifiedLog, log_dir: Path) -> None:
        """Point the partition at `log` in `log_dir` (a finished replica move swaps in its copy)."""
        tp = (log.topic, log.partition)
        self._logs[tp] = log
        self._log_dir_of[tp] = log_dir

    def mark_dir_offline(self, log_dir: Path, reason: str) -> list[TopicPartition]:
        """KIP-112: forget every log of a failed dir (closing what can be closed); returns them."""
        self.offline_dirs.setdefault(log_dir, reason)
        lost = [tp for tp, d in self._log_dir_of.items() if d == log_dir]
        for tp in lost:
            log = self._logs.pop(tp)
            del self._log_dir_of[tp]
            self.offline_partitions.add(tp)
            try:
                log.close()
            except OSError as exc:  # a dead disk may refuse even this; the fds go with the log
                logger.warning("closing %s on failed dir %s: %s", log.dir, log_dir, exc)
        return lost

    def delete_log(self, topic: str, partition: int) -> None:
        """Detach the log (see `detach_log`) and remove its files. Blocks."""
        shutil.rmtree(self.detach_log(topic, partition))

    def detach_log(self, topic: str, partition: int) -> Path:
        """Close the log and rename its dir to `<topic>-<partition>.<uuid>-delete`; quick.

        Returns that dir: the caller removes it (shutil.rmtree, off the event loop: a large log
        takes a while). If the removal never happens, the next `load` finishes it.
        """
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        if log is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no log for {topic}-{partition}"
            )
        del self._log_dir_of[tp]
        log.close()
        doomed = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        log.dir.rename(doomed)
        return doomed

    # -- periodic work

    def cleanup_logs(self, now_ms: int) -> int:
        """Apply retention to every log; returns the segments deleted."""
        return sum(log.delete_retention_segments(now_ms) for log in self._logs.values())

    def flush_dirty_logs(self, now_ms: int) -> None:
        """fsync every log whose flush policy asks for it (blocks: run in an executor)."""
        for log in list(self._logs.values()):
            offset = log.pending_flush_offset(now_ms)
            if offset is not None:
                log.flush(offset)

    def _write_checkpoint(self, name: str, value: Callable[[UnifiedLog], int]) -> None:
        # Runs in an executor while the loop may add or remove logs: work on a snapshot taken
        # by one C-level call (atomic under the GIL), never by iterating the live dicts.
        with self._checkpoint_lock:
            logs = list(self._logs.items())
            dir_of = dict(self._log_dir_of)
            for log_dir in self.online_dirs():
                offsets = {tp: value(log) for tp, log in logs if dir_of.get(tp) == log_dir}
                try:
                    OffsetCheckpointFile(log_dir / name).write(offsets)
                except OSError as exc:  # KIP-112: this dir fails; the others keep theirs
                    if self.failure_listener is None:
                        raise
                    self.failure_listener(log_dir, exc)

    def checkpoint_recovery_points(self) -> None:
        """Write recovery-point-offset-checkpoint in every log dir (blocks)."""
        self._write_checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        """Write log-start-offset-checkpoint in every log dir (blocks)."""
        self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        """Write replication-offset-checkpoint in every log dir (blocks)."""
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark)

    def close(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write all checkpoints, then the clean-shutdown markers. Blocks."""
        for log in self._logs.values():
            log.flush()
            log.close(sync_snapshot=True)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch})
        for log_dir in self.online_dirs():
            write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, marker)
        for log in self._chunk_logs.values():
            log.close(sync_snapshot=True)
        self._logs.clear()
        self._log_dir_of.clear()
        self._chunk_logs.clear()


def _marker_epoch(marker: Path) -> int:
    """The broker epoch a clean-shutdown marker holds; -1 if it is empty or unreadable (an
    older marker, or a torn write)."""
    try:
        return int(json.loads(marker.read_text() or "{}").get("brokerEpoch", -1))
    except (ValueError, AttributeError):
        return -1
