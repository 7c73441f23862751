"""Each broker reads WAL objects through its own ObjectCache, bounded by its own
`diskless.fetch.cache.max.bytes` (issue 19 item 3)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kafka_ext.diskless.service import DisklessService
from kafka_ext.server.config import build_config


def _service(tmp_path: Path, node_id: int, cache_max_bytes: int) -> DisklessService:
    """The broker side of diskless topics, as broker `node_id` builds it from its config."""
    config = build_config({
        "node.id": str(node_id), "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / f"node{node_id}"),
        "diskless.storage.url": f"file://{tmp_path / 'objects'}",  # one store, shared
        "diskless.fetch.cache.max.bytes": str(cache_max_bytes)})
    broker = SimpleNamespace(config=config, node_id=node_id, run_blocking=asyncio.to_thread,
                             diskless_coordinator=SimpleNamespace())
    return DisklessService(broker)


async def test_each_broker_caches_within_its_own_configured_bound(tmp_path: Path) -> None:
    small, large = _service(tmp_path, 1, 100), _service(tmp_path, 2, 250)
    keys = [f"wal/000000000000{i}-x" for i in range(10)]
    for key in keys:
        await small.store.put(key, key.encode().ljust(40, b"."))
    # Concurrent misses of different objects: each load evicts down to the bound.
    for service in (small, large):
        read = await asyncio.gather(*(service.cache.get(key) for key in keys))
        assert [bytes(r)[:len(k)] for r, k in zip(read, keys, strict=True)] == \
            [k.encode() for k in keys]
    assert (small.cache.max_bytes, small.cache.size_bytes) == (100, 80)
    assert (large.cache.max_bytes, large.cache.size_bytes) == (250, 240)
    # Separate caches: what one broker read is not in the other's.
    assert sum(key in small.cache for key in keys) == 2
    assert sum(key in large.cache for key in keys) == 6
    evicted = next(key for key in keys if key not in small.cache)
    await small.cache.get(evicted)  # read again from the store, not from the other broker
    assert small.cache.misses == 11 and large.cache.misses == 10


async def test_a_zero_bound_caches_nothing_but_still_reads(tmp_path: Path) -> None:
    service = _service(tmp_path, 1, 0)
    await service.store.put("wal/0000000000001-x", b"object")
    assert bytes(await service.cache.get("wal/0000000000001-x")) == b"object"
    assert service.cache.size_bytes == 0 and "wal/0000000000001-x" not in service.cache
