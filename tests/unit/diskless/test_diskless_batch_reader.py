"""ObjectCache (LRU by bytes, single-flight) and BatchReader (offset patching, LogAppendTime)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.diskless.batch_reader import BatchReader
from kafka_ext.diskless.object_cache import ObjectCache
from kafka_ext.diskless.object_store import ObjectNotFoundError, ObjectStore, ObjectStoreError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import TimestampType, crc_is_valid, read_batch_header
from kafka_ext.protocol.records import build_batch, decode_all_batches, records_for

_BatchInfo: Any = registry()["DisklessFindBatchesResponse"].cls.DisklessFindBatchesBatchInfo


class CountingStore(ObjectStore):
    """The real local store, counting whole-object reads and able to hold them at a gate."""

    def __init__(self, root: Path) -> None:
        inner = ObjectStore.from_url(f"file://{root}")
        super().__init__(inner._store, inner.description)
        self.gets: list[str] = []
        self.gate: asyncio.Event | None = None

    async def get(self, key: str) -> memoryview:
        self.gets.append(key)
        if self.gate is not None:
            await self.gate.wait()
        return await super().get(key)


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(tmp_path / "objects")


async def put_object(store: ObjectStore, key: str, batches: list[bytes]) -> list[Any]:
    """Upload batches back to back as WalWriter does; FindBatches entries for them, offsets 0-based."""
    await store.put(key, b"".join(batches))
    entries: list[Any] = []
    pos = 0
    for produced in batches:
        header = read_batch_header(produced)
        entries.append(
            _BatchInfo(
                batch_id=len(entries),
                object_key=key,
                magic=2,
                byte_offset=pos,
                byte_size=len(produced),
                base_offset=0,
                last_offset=header.last_offset_delta,
                log_append_timestamp=-1,
                batch_max_timestamp=header.max_timestamp,
                timestamp_type=0,
            )
        )
        pos += len(produced)
    return entries


def assigned(entry: Any, base_offset: int, log_append_time_ms: int = -1) -> Any:
    return entry.replace(
        base_offset=base_offset,
        last_offset=base_offset + entry.last_offset - entry.base_offset,
        log_append_timestamp=log_append_time_ms,
    )


async def test_read_patches_base_offsets_to_the_assigned_ones(store: CountingStore) -> None:
    produced = [
        build_batch(records_for([b"a0", b"a1"], timestamp_ms=10)),
        build_batch(records_for([b"b0"], timestamp_ms=20)),
    ]
    other = [build_batch(records_for([b"c0", b"c1", b"c2"], timestamp_ms=30))]
    first = await put_object(store, "wal/0000000000001-x", produced)
    second = await put_object(store, "wal/0000000000002-y", other)
    reader = BatchReader(ObjectCache(store, 1 << 20))
    buffers = await reader.read(
        [assigned(first[0], 100), assigned(first[1], 102), assigned(second[0], 103)],
        stamp_log_append_time=False,
    )
    decoded = list(decode_all_batches(b"".join(buffers)))
    assert [[(r.offset, r.value, r.timestamp) for r in records] for _, records in decoded] == [
        [(100, b"a0", 10), (101, b"a1", 10)],
        [(102, b"b0", 20)],
        [(103, b"c0", 30), (104, b"c1", 30), (105, b"c2", 30)],
    ]
    assert all(header.timestamp_type == TimestampType.CREATE_TIME for header, _ in decoded)


async def test_read_does_not_copy_batch_bodies(store: CountingStore) -> None:
    produced = build_batch(records_for([b"v" * 1000]))
    [entry] = await put_object(store, "wal/0000000000001-x", [produced])
    cache = ObjectCache(store, 1 << 20)
    buffers = await BatchReader(cache).read([assigned(entry, 5)], stamp_log_append_time=False)
    prefix, body = buffers
    cached = await cache.get("wal/0000000000001-x")
    assert len(prefix) == 8 and isinstance(body, memoryview) and body.obj is cached.obj
    assert bytes(body) == produced[8:]


async def test_log_append_time_is_stamped_with_a_valid_crc(store: CountingStore) -> None:
    entries = await put_object(
        store, "wal/0000000000001-x", [build_batch(records_for([b"x", b"y"], timestamp_ms=1_000))]
    )
    buffers = await BatchReader(ObjectCache(store, 1 << 20)).read(
        [assigned(entries[0], 7, log_append_time_ms=99_999)], stamp_log_append_time=True
    )
    data = b"".join(buffers)
    assert crc_is_valid(data)
    [(header, records)] = list(decode_all_batches(data))
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME and header.max_timestamp == 99_999
    assert header.base_offset == 7 and [r.offset for r in records] == [7, 8]
    # the object in the store is untouched
    assert read_batch_header(await store.get("wal/0000000000001-x")).max_timestamp == 1_000


async def test_concurrent_misses_share_one_store_read(store: CountingStore) -> None:
    await store.put("k", b"object")
    cache = ObjectCache(store, 1 << 20)
    store.gate = asyncio.Event()
    readers = [asyncio.ensure_future(cache.get("k")) for _ in range(5)]
    await asyncio.sleep(0)
    store.gate.set()
    assert [bytes(v) for v in await asyncio.gather(*readers)] == [b"object"] * 5
    assert store.gets == ["k"] and cache.misses == 1
    assert bytes(await cache.get("k")) == b"object" and store.gets == ["k"] and cache.hits == 1


async def test_a_cancelled_reader_does_not_cancel_the_shared_read(store: CountingStore) -> None:
    await store.put("k", b"object")
    cache = ObjectCache(store, 1 << 20)
    store.gate = asyncio.Event()
    quitter = asyncio.ensure_future(cache.get("k"))
    stayer = asyncio.ensure_future(cache.get("k"))
    await asyncio.sleep(0)
    quitter.cancel()
    store.gate.set()
    assert bytes(await stayer) == b"object" and quitter.cancelled() and "k" in cache


async def test_cache_evicts_least_recently_used_objects_by_bytes(store: CountingStore) -> None:
    for key in "abc":
        await store.put(key, key.encode() * 40)
    cache = ObjectCache(store, 100)
    await cache.get("a")
    await cache.get("b")
    await cache.get("a")  # a is now the most recently used
    await cache.get("c")  # 120 bytes > 100: b goes
    assert ("a" in cache, "b" in cache, "c" in cache) == (True, False, True)
    assert cache.size_bytes == 80
    await cache.get("b")
    assert store.gets == ["a", "b", "c", "b"]


async def test_object_larger_than_the_cache_is_read_but_not_kept(store: CountingStore) -> None:
    await store.put("big", b"x" * 200)
    cache = ObjectCache(store, 100)
    assert len(await cache.get("big")) == 200
    assert "big" not in cache and cache.size_bytes == 0


async def test_failed_read_is_not_cached(store: CountingStore) -> None:
    cache = ObjectCache(store, 100)
    with pytest.raises(ObjectNotFoundError):
        await cache.get("later")
    await store.put("later", b"now")
    assert bytes(await cache.get("later")) == b"now"


async def test_missing_object_fails_the_read_with_a_store_error(store: CountingStore) -> None:
    [entry] = await put_object(store, "wal/0000000000001-x", [build_batch(records_for([b"a"]))])
    await store.delete("wal/0000000000001-x")
    with pytest.raises(ObjectStoreError, match="wal/0000000000001-x"):
        await BatchReader(ObjectCache(store, 1 << 20)).read(
            [assigned(entry, 0)], stamp_log_append_time=False
        )


async def test_entry_that_does_not_match_the_object_is_a_store_error(store: CountingStore) -> None:
    [entry] = await put_object(store, "wal/0000000000001-x", [build_batch(records_for([b"a"]))])
    reader = BatchReader(ObjectCache(store, 1 << 20))
    for bad in (
        entry.replace(byte_size=entry.byte_size + 1),
        entry.replace(byte_offset=3),
        entry.replace(byte_size=10),
    ):
        with pytest.raises(ObjectStoreError, match="wal/0000000000001-x"):
            await reader.read([bad], stamp_log_append_time=False)
