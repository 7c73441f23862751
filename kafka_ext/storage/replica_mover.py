"""ReplicaMover: moves a partition's log to another log dir of this broker while it serves (KIP-113).

Mirrors Kafka's ReplicaAlterLogDirsManager/ReplicaAlterLogDirsThread. A move copies into
`<dest>/<topic>-<partition>.move`: first the source's rolled segments file by file with
`os.copy_file_range` (zero-copy, in the executor), then the batches appended since, through a
future UnifiedLog (`append_as_follower`, in the executor). Every copied byte passes one
shared throttle (`intra.broker.throttled.rate`, read again on every wait, so a change applies at
once); at most `num.replica.move.threads` moves copy at a time. Once the copy has caught up, the
swap runs without yielding to the event loop — the loop is the partition's lock: no produce,
fetch or retention interleaves — so it copies the last few batches, renames the source to
`<topic>-<partition>.<uuid>-delete`, renames the `.move` dir into place and reopens it there.
While a move copies, the LogCleaner leaves the partition alone (abort_and_pause, resumed when the
move ends, as Kafka's ReplicaAlterLogDirsThread does): a cleaning swap would replace segments
the copy is reading file by file.
Everything here runs on the event loop except the blocking work it hands to `run_blocking`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_manager import DELETE_DIR_SUFFIX, MOVE_DIR_SUFFIX, LogManager

if TYPE_CHECKING:
    from kafka_ext.storage.log_cleaner import LogCleaner

logger = logging.getLogger(__name__)
T = TypeVar("T")

TopicPartition = tuple[str, int]
ANY_LOG_DIR = "any"  # AlterReplicaLogDirs/reassignment JSON: no preference, cancels a move
MAX_CHUNK_BYTES = 1 << 20  # one executor call copies at most this much
MIN_CHUNK_BYTES = 4096  # ... and at least this much, however low the throttle
THROTTLE_POLL_S = 0.1  # a throttled wait re-reads the rate and the cancel flag this often
# Test hook: the step at which the broker SIGKILLs itself (tests/integration/test_jbod.py).
CRASH_AT_ENV = "KEXT_TEST_MOVER_CRASH_AT"
MOVE_STEPS = ("copy", "before-swap", "after-source-rename", "after-future-rename")


class MoveThrottle:
    """One byte budget for all moves (a token bucket that may go into debt); loop only."""

    __slots__ = ("rate_bytes_per_s", "_tokens", "_last_s")

    def __init__(self, rate_bytes_per_s: Callable[[], int]) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._tokens = 0.0
        self._last_s = time.monotonic()

    def _refill(self) -> float:
        rate = max(self.rate_bytes_per_s(), 1)
        now = time.monotonic()
        # Idle time buys at most one step's worth of burst; debt (negative tokens) is paid off
        # at the current rate, so a rate change applies to the very next wait.
        self._tokens = min(self._tokens + (now - self._last_s) * rate, float(self.chunk_bytes()))
        self._last_s = now
        return rate

    def chunk_bytes(self) -> int:
        """How much one copy step should take: about a quarter second's worth at the rate."""
        return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, self.rate_bytes_per_s() // 4))

    async def acquire(self, size_bytes: int, stopped: Callable[[], bool]) -> bool:
        """Wait until `size_bytes` may be copied; False if `stopped()` turned true meanwhile."""
        while True:
            if stopped():
                return False
            rate = self._refill()
            if self._tokens >= 0:
                self._tokens -= size_bytes
                return True
            await asyncio.sleep(min(THROTTLE_POLL_S, -self._tokens / rate))


@dataclass(slots=True)
class ReplicaMove:
    """One partition moving to `dest_dir`; its fields are touched by the loop only."""

    topic: str
    partition: int
    dest_dir: Path
    future_dir: Path
    state: str = "queued"  # queued, copying, catching-up, swapping, done, cancelled, failed
    copied_bytes: int = 0
    next_offset: int = 0  # first offset not yet in the future replica
    future_log: UnifiedLog | None = None
    cancelled: bool = False
    keep_files: bool = False  # stop without removing `.move` (shutdown, failed dir)
    cleaning_paused: bool = False  # this move holds one LogCleaner pause of the partition
    swap_ms: float = 0.0  # how long the swap kept the event loop (the partition's lock)
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size_bytes(self) -> int:
        future = self.future_log
        return future.size_bytes if future is not None else self.copied_bytes


class ReplicaMover:
    """The moves of one broker, keyed by partition; at most one move per partition."""

    def __init__(self, log_manager: LogManager, replica_manager: Any,
                 run_blocking: Callable[[Callable[[], T]], Awaitable[T]],
                 remove_dir: Callable[[Path], None], rate_bytes_per_s: Callable[[], int],
                 max_concurrent_moves: int,
                 on_dir_failure: Callable[[Path, BaseException], None],
                 log_cleaner: LogCleaner | None = None) -> None:
        self.log_manager = log_manager
        self.log_cleaner = log_cleaner
        self.replica_manager = replica_manager
        self.run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]] = run_blocking
        self.remove_dir = remove_dir
        self.throttle = MoveThrottle(rate_bytes_per_s)
        self.on_dir_failure = on_dir_failure
        self.moves: dict[TopicPartition, ReplicaMove] = {}
        self._slots = asyncio.Semaphore(max_concurrent_moves)
        self._resume: dict[TopicPartition, Path] = {}
        self._crash_at = os.environ.get(CRASH_AT_ENV, "")

    # -- requests ----------------------------------------------------------------------------

    def alter_replica_log_dir(self, topic: str, partition: int, path: str) -> ErrorCode:
        """AlterReplicaLogDirs for one partition: start, redirect or (with "any") cancel a move."""
        tp = (topic, partition)
        if path == ANY_LOG_DIR:
            self.log_manager.preferred_dirs.pop(tp, None)
            self.cancel(tp)
            return ErrorCode.NONE
        dest = self._configured_dir(path)
        if dest is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if dest in self.log_manager.offline_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if tp in self.log_manager.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            # KIP-113: remembered, so the replica is created there when the metadata brings it.
            self.log_manager.preferred_dirs[tp] = dest
            return ErrorCode.REPLICA_NOT_AVAILABLE
        current = self.log_manager.log_dir_of(topic, partition)
        existing = self.moves.get(tp)
        if existing is not None and not existing.done.is_set():
            if existing.dest_dir == dest:
                return ErrorCode.NONE
            self.cancel(tp)
        if current == dest:
            return ErrorCode.NONE
        try:
            self._start(tp, dest)
        except OSError as exc:
            self.on_dir_failure(dest, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _configured_dir(self, path: str) -> Path | None:
        if not os.path.isabs(path):
            return None
        wanted = Path(os.path.normpath(path))
        for log_dir in self.log_manager.log_dirs:
            if log_dir == wanted or log_dir == wanted.resolve():
                return log_dir
        return None

    def cancel(self, tp: TopicPartition, *, keep_files: bool = False) -> None:
        """Stop a move (cooperatively: the task notices at its next step and cleans up)."""
        move = self.moves.get(tp)
        if move is not None and not move.done.is_set():
            move.cancelled = True
            move.keep_files = move.keep_files or keep_files

    def _start(self, tp: TopicPartition, dest: Path) -> ReplicaMove:
        future_dir = dest / f"{tp[0]}-{tp[1]}{MOVE_DIR_SUFFIX}"
        # At once (one mkdir), so a crash while the move waits for a slot still resumes it.
        future_dir.mkdir(exist_ok=True)
        move = ReplicaMove(tp[0], tp[1], dest, future_dir)
        self.moves[tp] = move
        move.task = asyncio.get_running_loop().create_task(self._run(move))
        logger.info("moving %s-%d to %s", tp[0], tp[1], dest)
        return move

    # -- start-up: crash recovery (the proposal's four cases) --------------------------------

    def recover(self) -> None:
        """Act on the `.move` dirs load found (blocks: run before serving, off the loop).

        Both `tp` and `tp.move` on good dirs: the move starts again (`resume_pending`). Only
        `tp.move` and no offline dir: it is the partition, renamed into place. Only `tp.move`
        with an offline dir: the partition is offline and `.move` is left alone.
        """
        lm = self.log_manager
        for tp, move_dir in sorted(lm.future_dirs.items()):
            dest = move_dir.parent
            if lm.get_log(*tp) is not None:
                logger.info("resuming the move of %s-%d to %s", tp[0], tp[1], dest)
                self._resume[tp] = dest
            elif not lm.offline_dirs and tp not in lm.offline_partitions:
                final = dest / f"{tp[0]}-{tp[1]}"
                logger.warning("completing the interrupted move of %s-%d: %s -> %s",
                               tp[0], tp[1], move_dir, final)
                move_dir.rename(final)
                log = UnifiedLog(final, lm.default_config, needs_recovery=True)
                lm.replace_log(log, dest)
            else:
                logger.error("%s-%d is offline: its only copy is %s and a log dir is offline",
                             tp[0], tp[1], move_dir)
                lm.offline_partitions.add(tp)
        lm.future_dirs.clear()

    def resume_pending(self) -> None:
        """Restart the moves `recover` found half done, once the partitions are hosted."""
        pending, self._resume = self._resume, {}
        for tp, dest in pending.items():
            if tp in self.replica_manager.partitions and tp not in self.moves:
                try:
                    self._start(tp, dest)
                except OSError as exc:
                    self.on_dir_failure(dest, exc)
            else:  # the partition went away (topic deleted while we were down)
                self.remove_dir(self._doom(dest / f"{tp[0]}-{tp[1]}{MOVE_DIR_SUFFIX}"))

    # -- the move ----------------------------------------------------------------------------

    def _crash_point(self, step: str) -> None:
        if self._crash_at == step:  # tests only: kill -9 at a precise step of a move
            logger.warning("test hook %s=%s: killing the broker", CRASH_AT_ENV, step)
            os.kill(os.getpid(), signal.SIGKILL)

    def _source(self, move: ReplicaMove) -> Any:
        """The partition being moved (replication.Partition), or None once it is gone."""
        return self.replica_manager.partitions.get(move.tp)

    def _stopped(self, move: ReplicaMove) -> bool:
        return move.cancelled or self._source(move) is None

    async def _run(self, move: ReplicaMove) -> None:
        try:
            async with self._slots:
                await self._move(move)
        except OSError as exc:
            move.state = "failed"
            failed_dir = self._dir_of_error(move, exc)
            logger.error("moving %s-%d to %s failed: %s", move.topic, move.partition,
                         move.dest_dir, exc)
            self._close_future(move)
            self.on_dir_failure(failed_dir, exc)
        except KafkaError as exc:
            move.state = "failed"
            logger.error("moving %s-%d to %s failed: %s", move.topic, move.partition,
                         move.dest_dir, exc)
            self._abandon(move)
        except Exception:  # a bug must not leave a half-open future log behind
            move.state = "failed"
            logger.exception("moving %s-%d to %s failed", move.topic, move.partition,
                             move.dest_dir)
            self._abandon(move)
        finally:
            if move.cleaning_paused and self.log_cleaner is not None:
                self.log_cleaner.resume(move.topic, move.partition)
                move.cleaning_paused = False
            move.done.set()
            if self.moves.get(move.tp) is move:
                del self.moves[move.tp]

    def _dir_of_error(self, move: ReplicaMove, exc: OSError) -> Path:
        name = str(exc.filename or "")
        for log_dir in self.log_manager.log_dirs:
            if name.startswith(str(log_dir) + os.sep):
                return log_dir
        return move.dest_dir

    async def _move(self, move: ReplicaMove) -> None:
        move.state = "copying"
        if self.log_cleaner is not None:  # before the first segment is listed
            self.log_cleaner.abort_and_pause(move.topic, move.partition)
            move.cleaning_paused = True
        await self.run_blocking(lambda: _fresh_dir(move.future_dir))
        if not await self._copy_rolled_segments(move):
            return self._abandon(move)
        move.state = "catching-up"
        await self._open_future(move)
        if not await self._catch_up(move):
            return self._abandon(move)
        future = move.future_log
        assert future is not None
        await self.run_blocking(future.flush)  # the swap then only has the last batches to sync
        if self._stopped(move):
            return self._abandon(move)
        move.state = "swapping"
        self._swap(move)
        move.state = "done"
        self.replica_manager.check_directory(move.topic, move.partition)  # KIP-858

    async def _copy_rolled_segments(self, move: ReplicaMove) -> bool:
        """Copy each rolled (immutable) segment's files whole; False if the move stopped."""
        hosted = self._source(move)
        if hosted is None:
            return False
        move.next_offset = hosted.log.segments[0].base_offset
        while True:
            hosted = self._source(move)
            if hosted is None or move.cancelled:
                return False
            rolled = [s for s in hosted.log.segments[:-1] if s.base_offset >= move.next_offset]
            if not rolled:
                return True
            segment = rolled[0]
            stem = segment.log_path.with_suffix("")
            for path in (stem.with_name(stem.name + suffix) for suffix in _SEGMENT_FILE_SUFFIXES):
                if not await self._copy_file(move, path, move.future_dir / path.name):
                    return False
            move.next_offset = segment.next_offset

    async def _copy_file(self, move: ReplicaMove, source: Path, target: Path) -> bool:
        """Copy one file in throttled chunks with copy_file_range (sendfile as the fallback)."""
        try:
            src_fd = await self.run_blocking(lambda: os.open(source, os.O_RDONLY))
        except FileNotFoundError:  # retention removed it (cleaning is paused): move on
            return True
        try:
            dst_fd = await self.run_blocking(
                lambda: os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            try:
                size = os.fstat(src_fd).st_size
                position = 0
                while position < size:
                    chunk = min(self.throttle.chunk_bytes(), size - position)
                    if not await self.throttle.acquire(chunk, lambda: self._stopped(move)):
                        return False
                    copied = await self.run_blocking(
                        functools.partial(_copy_range, src_fd, dst_fd, position, chunk))
                    position += copied
                    move.copied_bytes += copied
                    self._crash_point("copy")
                    if copied < chunk:
                        break  # the file shrank since it was opened: all of it is copied
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)
        return True

    async def _open_future(self, move: ReplicaMove) -> None:
        """Open the copied segments as the future log, with the source's epochs below its end."""
        hosted = self._source(move)
        if hosted is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the partition went away")
        source = hosted.log
        config, topic_id = source.config, source.topic_id
        start = source.log_start_offset
        future: UnifiedLog = await self.run_blocking(
            lambda: UnifiedLog(move.future_dir, config, needs_recovery=False,
                               log_start_offset=start, topic_id=topic_id))
        if future.log_end_offset == 0 and future.size_bytes == 0:
            # Nothing rolled was copied: start where the source's first segment starts.
            base = source.segments[0].base_offset
            await self.run_blocking(lambda: future.truncate_fully_and_start_at(base))
        for epoch, start_offset in source.leader_epoch_cache.entries:
            if start_offset < future.log_end_offset:
                future.leader_epoch_cache.assign(epoch, start_offset)
        move.future_log = future

    async def _catch_up(self, move: ReplicaMove) -> bool:
        """Append the source's batches after the future's end until a read finds the end."""
        future = move.future_log
        assert future is not None
        while True:
            hosted = self._source(move)
            if hosted is None or move.cancelled:
                return False
            source_end = hosted.log.log_end_offset
            views = _read_from(hosted.log, future.log_end_offset, self.throttle.chunk_bytes())
            size = sum(len(v) for v in views)
            if size == 0:
                return True
            if not await self.throttle.acquire(size, lambda: self._stopped(move)):
                return False
            await self.run_blocking(functools.partial(_append_all, future, views))
            move.copied_bytes += size
            self._crash_point("copy")
            if future.log_end_offset >= source_end:
                return True  # what was appended meanwhile is the swap's to copy: little

    def _swap(self, move: ReplicaMove) -> None:
        """The partition's lock: runs to the end without yielding, so nothing interleaves."""
        hosted = self._source(move)
        future = move.future_log
        assert hosted is not None and future is not None
        source = hosted.log
        began = time.perf_counter()
        _append_all(future, _read_from(source, future.log_end_offset, 1 << 62))
        flushed = future.recovery_point
        future.close()
        self._crash_point("before-swap")
        doomed = self.log_manager.detach_log(move.topic, move.partition)
        try:
            # Producer state: closing the source snapshotted it at its end; that snapshot (the
            # same name as the future's own, which saw only part of the history) wins.
            snapshot = doomed / f"{source.log_end_offset:020d}{SNAPSHOT_SUFFIX}"
            if snapshot.exists():
                shutil.copyfile(snapshot, move.future_dir / snapshot.name)
            self._crash_point("after-source-rename")
            final = move.dest_dir / f"{move.topic}-{move.partition}"
            move.future_dir.rename(final)
            self._crash_point("after-future-rename")
            moved = UnifiedLog(final, source.config, recovery_point=flushed,
                               log_start_offset=source.log_start_offset, needs_recovery=False,
                               topic_id=source.topic_id)
        except OSError as exc:
            # Half swapped: serve nothing rather than a closed log; a restart recovers it
            # (only `.move` or only the renamed copy is left: the crash-recovery cases).
            self.replica_manager.partitions.pop(move.tp, None)
            self.replica_manager.storage_errors[move.tp] = f"replica move failed: {exc}"
            self.log_manager.offline_partitions.add(move.tp)
            raise
        moved.high_watermark = source.high_watermark
        self.log_manager.replace_log(moved, move.dest_dir)
        hosted.log = moved
        move.future_log = None
        self.remove_dir(doomed)
        asyncio.ensure_future(self._flush_moved(move, moved))
        move.swap_ms = (time.perf_counter() - began) * 1000
        logger.info("moved %s-%d to %s (%d bytes copied; the swap held the partition %.1f ms)",
                    move.topic, move.partition, move.dest_dir, move.copied_bytes, move.swap_ms)

    async def _flush_moved(self, move: ReplicaMove, moved: UnifiedLog) -> None:
        """fsync what the swap appended (the reopened log counts it as flushed) and the renames.

        Through fds of its own: the loop may close or delete the log meanwhile."""
        paths = [moved.active_segment.log_path, moved.dir, move.dest_dir]
        try:
            await self.run_blocking(functools.partial(_fsync_paths, paths))
        except OSError as exc:
            hosted = self.replica_manager.partitions.get(move.tp)
            if hosted is not None and hosted.log is moved:
                self.on_dir_failure(move.dest_dir, exc)
            else:
                logger.info("no fsync after moving %s-%d: the log is gone (%s)", move.topic,
                            move.partition, exc)

    # -- stopping ----------------------------------------------------------------------------

    def _close_future(self, move: ReplicaMove) -> None:
        future, move.future_log = move.future_log, None
        if future is not None:
            try:
                future.close()
            except OSError as exc:
                logger.warning("closing the future log %s: %s", move.future_dir, exc)

    def _abandon(self, move: ReplicaMove) -> None:
        """A stopped move: close its future log; remove `.move` unless told to keep it."""
        self._close_future(move)
        move.state = "cancelled"
        if move.keep_files or move.dest_dir in self.log_manager.offline_dirs:
            return
        try:
            self.remove_dir(self._doom(move.future_dir))
        except OSError as exc:
            logger.warning("could not remove %s: %s", move.future_dir, exc)
        logger.info("cancelled the move of %s-%d to %s", move.topic, move.partition,
                    move.dest_dir)

    @staticmethod
    def _doom(path: Path) -> Path:
        """Rename a dir to `<name>.<uuid>-delete` (quick) for removal off the loop."""
        doomed = path.with_name(f"{path.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        path.rename(doomed)
        return doomed

    def on_dir_offline(self, log_dir: Path) -> None:
        """KIP-113: a move stops when its source or destination dir goes offline."""
        for tp, move in list(self.moves.items()):
            source = self.log_manager.log_dir_of(*tp)
            if move.dest_dir == log_dir or source is None or source == log_dir:
                self.cancel(tp, keep_files=True)

    async def close(self) -> None:
        """Stop every move, keeping `.move` dirs: the next start resumes them."""
        for tp in list(self.moves):
            self.cancel(tp, keep_files=True)
        tasks = [m.task for m in self.moves.values() if m.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


SNAPSHOT_SUFFIX = ".snapshot"  # producer state (storage/producer_state.py)
# The files of a rolled segment, copied whole; a missing one (no .txnindex yet) is skipped.
_SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", SNAPSHOT_SUFFIX)


def _fresh_dir(path: Path) -> None:
    """An empty `.move` dir (a resumed move starts its copy again from scratch)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def _fsync_paths(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _copy_range(src_fd: int, dst_fd: int, position: int, size_bytes: int) -> int:
    """Copy [position, position + size) between two files in the kernel; bytes copied."""
    copied = 0
    while copied < size_bytes:
        offset = position + copied
        try:
            n = os.copy_file_range(src_fd, dst_fd, size_bytes - copied, offset, offset)
        except OSError as exc:
            if exc.errno not in (18, 38, 95):  # EXDEV, ENOSYS, EOPNOTSUPP: use sendfile
                raise
            os.lseek(dst_fd, offset, os.SEEK_SET)
            n = os.sendfile(dst_fd, src_fd, offset, size_bytes - copied)
        if n == 0:
            break  # the file is shorter than it was (a concurrent truncation)
        copied += n
    return copied


def _read_from(source: UnifiedLog, offset: int, max_bytes: int) -> list[memoryview]:
    """Whole batches of `source` from `offset` (or its log start offset), as mmap views."""
    if offset >= source.log_end_offset:
        return []
    return list(source.read(max(offset, source.log_start_offset), max_bytes,
                            min_one_message=True).records)


def _append_all(future: UnifiedLog, views: list[memoryview]) -> None:
    for view in views:
        future.append_as_follower(view)
