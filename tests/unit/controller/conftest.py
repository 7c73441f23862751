"""Fixtures of the controller tests: a QuorumController over a real metadata log in a temp dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.storage.log import UnifiedLog
from tests.unit.controller.test_quorum_controller import _controller, _open_log


@pytest.fixture
async def metadata_log(tmp_path: Path) -> AsyncIterator[UnifiedLog]:
    log = _open_log(tmp_path)
    yield log
    log.close()


@pytest.fixture
async def controller(metadata_log: UnifiedLog) -> QuorumController:
    controller = _controller(metadata_log)
    await controller.bootstrap()
    return controller
