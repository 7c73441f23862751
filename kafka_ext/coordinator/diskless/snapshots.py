"""Coordinator snapshots in the object store, for every replica to fetch (KIP-1164's "followers
will be able to fetch these snapshots", KIP-630's role here).

A leader's snapshot (a consistent SQLite copy, `<id>-<applied offset>.sqlite` in its snapshot
directory) is uploaded to `diskless-snapshots/<id>/<applied offset, 20 digits>.sqlite` in the
diskless object store, which every broker already reads. Once uploaded, the leader may prune
its `__diskless_metadata` partition, even with several replicas: a replica
whose database is missing or behind the pruned log start (a follower that was down, a new
leader, a replaced disk) downloads the newest snapshot that the log continues and replays the
log after it. The newest SNAPSHOTS_KEPT per coordinator stay, and the log is pruned only up
to the older of them: a follower a little behind the newest snapshot catches up from its log
instead of downloading one. The orphan scanner lists only `wal/`, so it never sees them.

A snapshot is read into memory whole to upload and download it (obstore's put and get); the
database holds batch metadata, not data, so it is small beside the WAL objects.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kafka_ext.diskless.object_store import ObjectStore, ObjectStoreError

log = logging.getLogger(__name__)

SNAPSHOT_PREFIX = "diskless-snapshots/"
SNAPSHOTS_KEPT = 2


def snapshot_key(coordinator_id: int, applied_offset: int) -> str:
    return f"{SNAPSHOT_PREFIX}{coordinator_id}/{applied_offset:020d}.sqlite"


class RemoteSnapshots:
    """Upload, find and download one broker's view of the coordinators' snapshots."""

    def __init__(self, store: ObjectStore,
                 run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]]) -> None:
        self.store = store
        self._run_blocking = run_blocking

    async def offsets(self, coordinator_id: int) -> list[int]:
        """Applied offsets of the coordinator's snapshots in the store, ascending."""
        prefix = f"{SNAPSHOT_PREFIX}{coordinator_id}/"
        found = []
        for info in await self.store.list(prefix):
            name = info.key.rpartition("/")[2]
            stem = name.removesuffix(".sqlite")
            if name.endswith(".sqlite") and stem.isdigit():
                found.append(int(stem))
        return sorted(found)

    async def upload(self, coordinator_id: int, applied_offset: int, path: Path) -> list[int]:
        """Put the snapshot file, then delete the coordinator's older snapshots beyond the
        newest SNAPSHOTS_KEPT; returns the offsets kept. Raises ObjectStoreError or OSError
        when the put fails."""
        data = await self._run_blocking(path.read_bytes)
        await self.store.put(snapshot_key(coordinator_id, applied_offset), data)
        offsets = await self.offsets(coordinator_id)
        for old in offsets[:-SNAPSHOTS_KEPT]:
            try:
                await self.store.delete(snapshot_key(coordinator_id, old))
            except ObjectStoreError as exc:
                log.warning("could not delete the old snapshot %s: %s",
                            snapshot_key(coordinator_id, old), exc)
        return offsets[-SNAPSHOTS_KEPT:]

    async def download_newest(self, coordinator_id: int, low: int, high: int,
                              target: Path) -> int | None:
        """Write the newest snapshot whose applied offset is in [low, high] to `target`;
        its offset, or None when the store has none in range."""
        usable = [o for o in await self.offsets(coordinator_id) if low <= o <= high]
        if not usable:
            return None
        offset = usable[-1]
        data = await self.store.get(snapshot_key(coordinator_id, offset))

        def write() -> None:
            tmp = target.with_name(target.name + ".download")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            tmp.replace(target)

        await self._run_blocking(write)
        return offset
