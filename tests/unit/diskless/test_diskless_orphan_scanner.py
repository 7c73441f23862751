"""OrphanScanner: the proposal's four steps over the real local store, with fake coordinators."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from kafka_ext.diskless.object_store import ObjectStore
from kafka_ext.diskless.orphan_scanner import OrphanScanner
from kafka_ext.protocol.errors import ErrorCode, KafkaError

GRACE_MS = 60_000
# The scanner's clock runs an hour ahead of the store's, so uploads made now look old.
NOW_MS = int(time.time() * 1000) + 3_600_000


def wal_key(created_ms: int) -> str:
    return f"wal/{created_ms:013d}-{uuid.uuid4().hex}"


class FakeCoordinators:
    def __init__(self, oldest_ms: int | None, known: set[str]) -> None:
        self.oldest_ms = oldest_ms
        self.known = known
        self.asked: list[list[str]] = []
        self.fail: KafkaError | None = None

    async def oldest_file_timestamp_ms(self) -> int | None:
        return self.oldest_ms

    async def files_known(self, keys: list[str]) -> set[str]:
        self.asked.append(keys)
        if self.fail is not None:
            raise self.fail
        return self.known & set(keys)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.from_url(f"file://{tmp_path}/objects")


def scanner_for(store: ObjectStore, coordinators: FakeCoordinators) -> OrphanScanner:
    return OrphanScanner(
        store,
        coordinators.oldest_file_timestamp_ms,
        coordinators.files_known,
        grace_period_ms=GRACE_MS,
        clock_ms=lambda: NOW_MS,
    )


async def keys_in(store: ObjectStore) -> set[str]:
    return {info.key for info in await store.list()}


async def test_only_old_objects_no_coordinator_knows_are_deleted(store: ObjectStore) -> None:
    old_known = wal_key(NOW_MS - 10 * GRACE_MS)
    old_orphan = wal_key(NOW_MS - 9 * GRACE_MS)
    young_orphan = wal_key(NOW_MS - GRACE_MS // 2)  # its commit may still be in flight
    for key in (old_known, old_orphan, young_orphan):
        await store.put(key, b"batch bytes")
    coordinators = FakeCoordinators(oldest_ms=None, known={old_known})  # threshold: now - grace
    assert await scanner_for(store, coordinators).scan_once() == [old_orphan]
    assert coordinators.asked == [sorted([old_known, old_orphan])]
    assert await keys_in(store) == {old_known, young_orphan}


async def test_threshold_is_the_oldest_file_plus_grace(store: ObjectStore) -> None:
    oldest_ms = NOW_MS - 10 * GRACE_MS
    before = wal_key(oldest_ms - GRACE_MS)
    within_grace = wal_key(oldest_ms + GRACE_MS // 2)
    after = wal_key(oldest_ms + 2 * GRACE_MS)  # newer than oldest + grace: not scanned yet
    for key in (before, within_grace, after):
        await store.put(key, b"x")
    coordinators = FakeCoordinators(oldest_ms=oldest_ms, known=set())
    scanner = scanner_for(store, coordinators)
    assert await scanner.threshold_ms() == oldest_ms + GRACE_MS
    assert sorted(await scanner.scan_once()) == sorted([before, within_grace])
    assert await keys_in(store) == {after}


async def test_threshold_never_passes_now_minus_grace(store: ObjectStore) -> None:
    coordinators = FakeCoordinators(oldest_ms=NOW_MS - 1_000, known=set())
    assert await scanner_for(store, coordinators).threshold_ms() == NOW_MS - GRACE_MS


async def test_objects_uploaded_recently_are_kept_even_if_their_key_looks_old(
    store: ObjectStore,
) -> None:
    backdated = wal_key(NOW_MS - 10 * GRACE_MS)
    await store.put(backdated, b"x")
    coordinators = FakeCoordinators(oldest_ms=None, known=set())
    real_clock = OrphanScanner(
        store,
        coordinators.oldest_file_timestamp_ms,
        coordinators.files_known,
        grace_period_ms=GRACE_MS,
    )
    assert await real_clock.scan_once() == []  # the store says it was written just now
    assert await keys_in(store) == {backdated}


async def test_keys_the_writer_does_not_make_are_left_alone(store: ObjectStore) -> None:
    for key in ("wal/notes.txt", "wal/0000000000001-NOTHEX", "other/0000000000001-" + "a" * 32):
        await store.put(key, b"x")
    coordinators = FakeCoordinators(oldest_ms=None, known=set())
    assert await scanner_for(store, coordinators).scan_once() == []
    assert coordinators.asked == [] and len(await keys_in(store)) == 3


async def test_a_failed_safety_check_deletes_nothing(store: ObjectStore) -> None:
    orphan = wal_key(NOW_MS - 10 * GRACE_MS)
    await store.put(orphan, b"x")
    coordinators = FakeCoordinators(oldest_ms=None, known=set())
    coordinators.fail = KafkaError(ErrorCode.NOT_COORDINATOR, "a coordinator is moving")
    with pytest.raises(KafkaError):
        await scanner_for(store, coordinators).scan_once()
    assert await keys_in(store) == {orphan}


async def test_an_empty_store_scans_cleanly(store: ObjectStore) -> None:
    coordinators = FakeCoordinators(oldest_ms=None, known=set())
    assert await scanner_for(store, coordinators).scan_once() == [] and coordinators.asked == []
