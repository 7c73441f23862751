"""The tree stays lint-clean (ruff) and type-clean (mypy), as STYLE.md asks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "kafka_ext", "tests", "bench", "tools")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing_in_the_package() -> None:
    result = _run("mypy", "kafka_ext")
    assert result.returncode == 0, result.stdout + result.stderr
