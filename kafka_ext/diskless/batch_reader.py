"""BatchReader: turns DisklessFindBatches answers into fetchable bytes, as Kafka's fetch reads a log.

Each batch is a byte range of a WAL object holding the producer's batch with base offset 0;
the reader gives it the coordinator's assigned base offset without copying the body: an 8-byte
prefix plus a view of the rest (baseOffset lies outside the CRC). LogAppendTime topics also get
the commit time stamped in, which changes CRC-covered bytes and so needs a copy of that batch.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kafka_ext.diskless.object_cache import ObjectCache
from kafka_ext.diskless.object_store import ObjectStoreError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    CURRENT_MAGIC,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    set_base_offset,
    set_log_append_time,
)

_BASE_OFFSET = struct.Struct(">q")  # baseOffset: the first 8 bytes of a batch
_LENGTH = struct.Struct(">i")  # batchLength: bytes after itself
_BASE_OFFSET_SIZE = _BASE_OFFSET.size


class BatchReader:
    """Reads batches through the shared ObjectCache; stateless apart from it."""

    __slots__ = ("_cache",)

    def __init__(self, cache: ObjectCache) -> None:
        self._cache = cache

    async def read(
        self, batches: list[Any], *, stamp_log_append_time: bool
    ) -> list[memoryview | bytes]:
        """Buffers whose concatenation is `batches` in order, base offsets patched.

        `batches` are DisklessFindBatchesResponse batch entries; `stamp_log_append_time` (the
        topic uses LogAppendTime) writes each LogAppendTimestamp in. Raises ObjectStoreError (an
        OSError) when an object cannot be read or does not hold the batch it should.
        """
        keys = list(dict.fromkeys(batch.object_key for batch in batches))
        loaded = await asyncio.gather(
            *(self._cache.get(key) for key in keys), return_exceptions=True
        )
        objects = dict(zip(keys, loaded, strict=True))
        out: list[memoryview | bytes] = []
        for batch in batches:
            view = _batch_view(objects[batch.object_key], batch)
            if stamp_log_append_time and batch.log_append_timestamp >= 0:
                copy = bytearray(view)
                set_base_offset(copy, 0, batch.base_offset)
                set_log_append_time(copy, 0, batch.log_append_timestamp)
                out.append(memoryview(copy))
            else:
                out.append(_BASE_OFFSET.pack(batch.base_offset))
                out.append(view[_BASE_OFFSET_SIZE:])
        return out


def _batch_view(data: memoryview | BaseException, batch: Any) -> memoryview:
    """The batch's bytes in its object, checked against the entry so a bad object never leaks out."""
    if isinstance(data, BaseException):
        raise data  # the first failed read, as the store raised it
    start = batch.byte_offset
    end = start + batch.byte_size
    if start < 0 or batch.byte_size < BATCH_OVERHEAD or end > len(data):
        raise ObjectStoreError(
            f"{batch.object_key}: batch [{start}, {end}) does not fit the {len(data)}-byte object"
        )
    view = data[start:end]
    (batch_length,) = _LENGTH.unpack_from(view, LENGTH_POS)
    if batch_length + LOG_OVERHEAD != batch.byte_size or view[MAGIC_POS] != CURRENT_MAGIC:
        raise ObjectStoreError(
            f"{batch.object_key}: no v2 batch of {batch.byte_size} bytes at {start}"
        )
    return view
