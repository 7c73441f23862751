"""ObjectCache: whole WAL objects kept in memory for diskless fetches, bounded by total bytes.

Consumers of many partitions read the same few recent objects, so caching whole objects turns
their reads into one store GET each (KIP-1163's fetch path; issue 7 point 3).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from kafka_ext.diskless.object_store import ObjectStore


class ObjectCache:
    """An LRU of whole objects by bytes; used from one event loop only.

    Concurrent misses of one key share a single store read; an object larger than the whole
    cache is returned but not kept. Returned views stay valid after eviction.
    """

    __slots__ = ("_store", "max_bytes", "_objects", "_loading", "_size_bytes", "hits", "misses")

    def __init__(self, store: ObjectStore, max_bytes: int) -> None:
        self._store = store
        self.max_bytes = max_bytes
        self._objects: OrderedDict[str, memoryview] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Task[memoryview]] = {}
        self._size_bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        """Bytes of the objects kept now."""
        return self._size_bytes

    def __contains__(self, key: str) -> bool:
        return key in self._objects

    async def get(self, key: str) -> memoryview:
        """The whole object; raises ObjectStoreError when the store read fails (nothing cached)."""
        cached = self._objects.get(key)
        if cached is not None:
            self._objects.move_to_end(key)
            self.hits += 1
            return cached
        load = self._loading.get(key)
        if load is None:
            self.misses += 1
            load = asyncio.get_running_loop().create_task(
                self._load(key), name=f"diskless-read-{key}"
            )
            self._loading[key] = load
        # shield: one reader giving up must not cancel the read the others wait for
        return await asyncio.shield(load)

    async def _load(self, key: str) -> memoryview:
        try:
            data = await self._store.get(key)
        finally:
            del self._loading[key]
        if len(data) <= self.max_bytes:
            self._objects[key] = data
            self._size_bytes += len(data)
            while self._size_bytes > self.max_bytes:
                _, evicted = self._objects.popitem(last=False)
                self._size_bytes -= len(evicted)
        return data

    def invalidate(self, key: str) -> None:
        """Forget one object (deleted from the store)."""
        evicted = self._objects.pop(key, None)
        if evicted is not None:
            self._size_bytes -= len(evicted)
