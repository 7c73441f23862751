"""Fixtures for storage tests: real v2 batches from the protocol builder, and a settable clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_ext.protocol.records import Record, build_batch

BatchFactory = Callable[..., bytes]


def _make_batch(
    count: int = 1,
    *,
    timestamp_ms: int = 1_000,
    timestamps: list[int] | None = None,
    base_offset: int = 0,
    value_size: int = 10,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A batch of count records valued b'v<i>' padded to value_size, with the given timestamps."""
    stamps = timestamps or [timestamp_ms] * count
    records = [
        Record(base_offset + i, stamps[i], None, f"v{i}".encode().ljust(value_size, b"x"))
        for i in range(len(stamps))
    ]
    return build_batch(
        records, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch
    )


@pytest.fixture
def make_batch() -> BatchFactory:
    return _make_batch


class Clock:
    """A clock the test moves by hand (no sleeping)."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()
