"""OrphanScanner: deletes WAL objects that no Diskless coordinator knows (KIP-1164 "Orphan files").

An orphan is an object a broker uploaded but never committed (it crashed in between, or every
commit failed and the on-the-spot delete failed too). The proposal's four steps, as read here:

1. Threshold. Ask the coordinators for the timestamp of the oldest file they have batches in
   (`oldest_file_timestamp_ms`) and add the grace period. We also cap the threshold at
   now - grace: an object younger than that may belong to a commit still in flight, and with
   no files at all (None) now - grace is the threshold on its own.
2. List the objects under `wal/` whose age (the later of the store's last-modified time and the
   creation time in the key) is before the threshold.
3. Safety check: ask the coordinators which of those keys they know (`files_known`, which the
   broker answers with DisklessDescribeFiles over every coordinator).
4. Delete the keys no coordinator knows.

A failure of step 1 or 3 aborts the scan before anything is deleted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

from kafka_ext.diskless.object_store import ObjectInfo, ObjectStore, ObjectStoreError
from kafka_ext.diskless.wal_writer import WAL_PREFIX

log = logging.getLogger(__name__)

_WAL_KEY = re.compile(r"wal/(\d{13})-[0-9a-f]{32}")  # what WalWriter names its objects
DESCRIBE_CHUNK_KEYS = 1000  # keys per files_known call, bounding one DisklessDescribeFiles request


class OrphanScanner:
    """One scan at a time; the broker's timer calls scan_once every orphan.scan.interval.ms."""

    __slots__ = (
        "_store",
        "_oldest_file_timestamp_ms",
        "_files_known",
        "grace_period_ms",
        "_clock_ms",
    )

    def __init__(
        self,
        store: ObjectStore,
        oldest_file_timestamp_ms: Callable[[], Awaitable[int | None]],
        files_known: Callable[[list[str]], Awaitable[set[str]]],
        *,
        grace_period_ms: int,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._store = store
        self._oldest_file_timestamp_ms = oldest_file_timestamp_ms
        self._files_known = files_known
        self.grace_period_ms = grace_period_ms
        self._clock_ms = clock_ms or _wall_clock_ms

    async def threshold_ms(self) -> int:
        """Step 1: objects older than this are candidates."""
        newest_safe_ms = self._clock_ms() - self.grace_period_ms
        oldest_ms = await self._oldest_file_timestamp_ms()
        if oldest_ms is None:
            return newest_safe_ms
        return min(oldest_ms + self.grace_period_ms, newest_safe_ms)

    async def scan_once(self) -> list[str]:
        """Run the four steps once; return the keys deleted.

        Raises ObjectStoreError when listing fails, and whatever files_known raises; a failed
        delete is logged and left for the next scan.
        """
        threshold_ms = await self.threshold_ms()
        candidates = sorted(
            info.key
            for info in await self._store.list(WAL_PREFIX)
            if _made_before(info, threshold_ms)
        )
        orphans: list[str] = []
        for start in range(0, len(candidates), DESCRIBE_CHUNK_KEYS):
            chunk = candidates[start : start + DESCRIBE_CHUNK_KEYS]
            known = await self._files_known(chunk)
            orphans.extend(key for key in chunk if key not in known)
        deleted: list[str] = []
        for key in orphans:
            try:
                await self._store.delete(key)
            except ObjectStoreError as exc:
                log.warning("could not delete orphan WAL object %s: %s", key, exc)
                continue
            deleted.append(key)
        return deleted


def _made_before(info: ObjectInfo, threshold_ms: int) -> bool:
    """Whether a WAL object is older than threshold_ms; keys WalWriter does not make are left alone.

    Its time is the later of the key's creation time and the store's last-modified time, so a
    clock skew between broker and store cannot make an object look old.
    """
    match = _WAL_KEY.fullmatch(info.key)
    if match is None:
        return False
    return max(int(match.group(1)), info.last_modified_ms) < threshold_ms


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
