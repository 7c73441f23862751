"""Warm followers: each broker keeps the SQLite database of every Diskless coordinator it
follows (a replica, not the leader, of that `__diskless_metadata` partition) applied up to its
replica's high watermark.

KIP-1164 has the leader apply replicated records to its database; a follower that became the
leader would otherwise replay every record since it last led the coordinator (all of them if it
never did) before serving. With the database kept warm, its load replays only the records that
reached its log after the last catch-up round, so a failover costs about the same at any age.

Only records below the replica's high watermark are applied: those are committed, never
truncated by a leader change, so the database never holds a record the log later loses. The
applied offset goes in the same SQLite transaction as the records (DisklessStore.apply), which
is what the shard's load resumes from. When the runtime starts loading the coordinator here
(this broker became its leader), `release` hands the database over to the shard first; when the
shard unloads (leadership moved away), the next round opens it again as a follower.

Loop-owned: rounds run on the event loop, each chunk of records is one synchronous SQLite
transaction of small indexed statements, as on the leader.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kafka_ext.coordinator.diskless.records import DisklessRecord, decode
from kafka_ext.coordinator.diskless.state import AppliedChanges, DisklessStore
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.record_batch import iter_batch_headers
from kafka_ext.protocol.records import decode_records

log = logging.getLogger(__name__)

CATCH_UP_INTERVAL_S = 0.1
CHUNK_BYTES = 1 << 20
RESTORE_RETRY_S = 30.0  # after a failed restore (no snapshot covers the log start yet)


class WarmFollowers:
    """Catches the databases of followed coordinators up with their replicas' logs."""

    def __init__(self, broker: Any, topic: str, db_path: Callable[[int], Path],
                 led_here: Callable[[int], bool], clock_ms: Callable[[], int],
                 db_lock: Callable[[int], asyncio.Lock] | None = None,
                 restore: Callable[[int, int, int], Awaitable[bool]] | None = None,
                 on_applied: Callable[[AppliedChanges], None] | None = None,
                 interval_s: float = CATCH_UP_INTERVAL_S) -> None:
        self.broker = broker
        self.topic = topic
        self._db_path = db_path
        self._led_here = led_here
        self._clock_ms = clock_ms
        self._db_lock = db_lock
        # (coordinator id, log start, log end) -> usable: replaces a database the log no
        # longer continues with a snapshot (DisklessCoordinator.restore_database).
        self._restore = restore
        self._on_applied = on_applied  # wakes fetches waiting here on the changed partitions
        self.interval_s = interval_s
        self._stores: dict[int, DisklessStore] = {}
        self._restore_not_before: dict[int, float] = {}  # monotonic time, after a failure
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for coordinator_id in list(self._stores):
            self.release(coordinator_id)

    def release(self, coordinator_id: int) -> None:
        """Close the follower's connection to the coordinator's database (its shard is about to
        open it as the leader's)."""
        store = self._stores.pop(coordinator_id, None)
        if store is not None:
            store.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.catch_up_all()
            except Exception:  # a bug must not stop the followers for good
                log.exception("warm diskless followers: catch-up round failed")

    async def catch_up_all(self) -> int:
        """One round over every followed coordinator; returns the records applied."""
        applied = 0
        for (topic, coordinator_id), hosted in list(self.broker.replica_manager.partitions.items()):
            if topic == self.topic and not self._led_here(coordinator_id):
                applied += await self.catch_up(coordinator_id, hosted.log)
        return applied

    async def catch_up(self, coordinator_id: int, plog: Any) -> int:
        """Apply the committed records the database lacks, chunk by chunk."""
        store = self._stores.get(coordinator_id)
        if store is None:
            try:
                store = self._stores[coordinator_id] = DisklessStore(self._db_path(coordinator_id))
            except sqlite3.Error as exc:
                log.error("diskless coordinator %d: cannot open its database as a follower: %s",
                          coordinator_id, exc)
                return 0
        count = 0
        while True:
            offset = store.applied_offset + 1
            end = plog.high_watermark
            if offset >= end:
                return count
            if offset < plog.log_start_offset:
                # The log was pruned past it (this replica was away): restore a snapshot.
                await self._restore_behind(coordinator_id, plog)
                return count
            records, last_read = self._read(plog, offset, end)
            if last_read < offset:
                return count
            if self._stores.get(coordinator_id) is not store:
                return count  # released meanwhile: the shard owns the database now
            try:
                # Through the last offset read: records the leader's replay skips too
                # (undecodable, unknown types) must not hold the applied offset back.
                changes = store.apply(records, self._clock_ms(), through_offset=last_read)
            except sqlite3.Error as exc:
                log.error("diskless coordinator %d: follower apply at offset %d failed: %s",
                          coordinator_id, offset, exc)
                return count
            count += len(records)
            if self._on_applied is not None:
                self._on_applied(changes)
            await asyncio.sleep(0)
            if self._stores.get(coordinator_id) is not store:
                return count

    async def _restore_behind(self, coordinator_id: int, plog: Any) -> None:
        """Replace a database the log no longer continues with the newest snapshot; the next
        round opens it and applies the log after it."""
        if self._restore is None or self._db_lock is None:
            return
        if time.monotonic() < self._restore_not_before.get(coordinator_id, 0.0):
            return
        async with self._db_lock(coordinator_id):
            if self._led_here(coordinator_id):
                return  # its load restores it
            self.release(coordinator_id)
            log.info("diskless coordinator %d: follower database behind the log start %d; "
                     "restoring a snapshot", coordinator_id, plog.log_start_offset)
            if await self._restore(coordinator_id, plog.log_start_offset, plog.high_watermark):
                self._restore_not_before.pop(coordinator_id, None)
            else:
                self._restore_not_before[coordinator_id] = time.monotonic() + RESTORE_RETRY_S

    def _read(self, plog: Any, offset: int, end: int
              ) -> tuple[list[tuple[int, DisklessRecord]], int]:
        """The decodable records in [offset, end) of the next chunk (at least one batch when
        any is there) and the last offset the chunk covers (offset - 1: nothing read)."""
        info = plog.read(offset, CHUNK_BYTES, max_offset=end, min_one_message=True)
        out: list[tuple[int, DisklessRecord]] = []
        last_read = offset - 1
        for view in info.records:
            try:
                for pos, header in iter_batch_headers(view):
                    last_read = max(last_read, min(header.last_offset, end - 1))
                    if header.is_control:
                        continue
                    try:
                        _, records = decode_records(view, pos)
                    except DecodeError as exc:
                        log.error("%s: skipping an undecodable batch at offset %d: %s",
                                  self.topic, header.base_offset, exc)
                        continue
                    for record in records:
                        if offset <= record.offset < end and record.key is not None:
                            decoded = _decoded(record.key, record.value, record.offset)
                            if decoded is not None:
                                out.append((record.offset, decoded))
            finally:
                view.release()
        return out, last_read


def _decoded(key: bytes, value: bytes | None, offset: int) -> DisklessRecord | None:
    try:
        return decode(key, value)
    except DecodeError as exc:
        log.error("__diskless_metadata: skipping the record at offset %d: %s", offset, exc)
        return None
