"""Fixtures for coordinator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.coordinator.mini_broker import MiniBroker


@pytest.fixture
async def mini_broker(tmp_path: Path) -> AsyncIterator[MiniBroker]:
    broker = MiniBroker(tmp_path / "data")
    await broker.start()
    yield broker
    broker.stop()
