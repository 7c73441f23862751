"""The producer's choice of partition: Kafka's murmur2 for keyed records, sticky for the rest.

Mirrors Kafka's `BuiltInPartitioner` (Kafka 3.x): a keyed record goes to
`toPositive(murmur2(key)) % n`, so our producer and Java's (and librdkafka's `murmur2_random`)
put a key in the same partition; an unkeyed record sticks to one partition until about a batch
worth of bytes went there (KIP-480), then another is picked at random.

Partition reduction (seed 002): ReadOnly and None partitions are filtered out for writes, so
`n` counts the writable partitions and a key maps into them. Only the highest-numbered
partitions of a topic can be reduced (docs/protocol.md), so the writable ones are always
0..n-1 and a key lands where it will live once the reduction completes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

_M = 0x5BD1E995  # murmur2's mixing constant
_SEED = 0x9747B28C  # Kafka's seed
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: a signed 32-bit hash, bit for bit as Java computes it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs, which overflows)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, writable: Sequence[int]) -> int:
    """The partition of a keyed record among the writable partitions (ascending)."""
    if not writable:
        raise ValueError("no writable partition")
    return writable[to_positive(murmur2(key)) % len(writable)]


class StickyPartitioner:
    """Where unkeyed records go: one partition per topic until `batch_size_bytes` went there.

    Owned by one producer; not thread-safe.
    """

    def __init__(self, batch_size_bytes: int, rng: random.Random | None = None) -> None:
        self.batch_size_bytes = batch_size_bytes
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}
        self._bytes: dict[str, int] = {}

    def partition(self, topic: str, writable: Sequence[int], size_bytes: int) -> int:
        """The partition for an unkeyed record of `size_bytes` among `writable`."""
        if not writable:
            raise ValueError("no writable partition")
        current = self._current.get(topic)
        if current is None or current not in writable or (
                self._bytes.get(topic, 0) >= self.batch_size_bytes):
            choices = [p for p in writable if p != current] or list(writable)
            current = self._rng.choice(choices)
            self._current[topic] = current
            self._bytes[topic] = 0
        self._bytes[topic] = self._bytes.get(topic, 0) + size_bytes
        return current
