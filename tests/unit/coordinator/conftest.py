"""Fixtures for coordinator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.coordinator.mini_broker import MiniBroker
from tests.unit.coordinator.test_diskless_coordinator import Harness


@pytest.fixture
async def mini_broker(tmp_path: Path) -> AsyncIterator[MiniBroker]:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    yield broker
    broker.stop()


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    """A started Diskless coordinator over a MiniBroker (test_diskless_coordinator.Harness)."""
    harness = Harness(tmp_path)
    await harness.start()
    yield harness
    await harness.coordinator.stop()
    harness.broker.stop()
