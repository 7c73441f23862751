"""The bin/ launchers (issue 21, item 3): Kafka's script names, run as the README is followed.

The launchers run from a copy of the checkout in a temporary directory (bin/ copied, the package
linked) with a bare PATH and no virtualenv activated, as librdkafka's test suite calls
`$KAFKA_PATH/bin/kafka-topics.sh`. A stand-in `python` records which interpreter a launcher
chose; one real run lists topics of a live broker through the checkout's `.venv`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.cli.main import build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = REPO_ROOT / "bin"
RUNNER = "_kafka-ext-run.sh"
TIMEOUT_S = 120.0
# Kafka's script name of a subcommand, where it is not kafka-<subcommand>.sh.
KAFKA_SCRIPT_NAMES = {"server": "kafka-server-start.sh"}
BARE_PATH = "/usr/bin:/bin"


def subcommands() -> list[str]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return sorted(action.choices)  # type: ignore[arg-type]


def kafka_script_name(subcommand: str) -> str:
    return KAFKA_SCRIPT_NAMES.get(subcommand, f"kafka-{subcommand}.sh")


def launched_subcommand(script: Path) -> str:
    """The subcommand a launcher hands to the runner (its exec line)."""
    [line] = [ln for ln in script.read_text().splitlines() if ln.startswith("exec ")]
    assert RUNNER in line, f"{script.name} does not use bin/{RUNNER}: {line}"
    return line.split()[2]


def copy_checkout(tmp_path: Path) -> Path:
    """A checkout without .venv: bin/ copied, the package and schemas linked."""
    checkout = tmp_path / "checkout"
    shutil.copytree(BIN, checkout / "bin")
    for name in ("kafka_ext", "protocol_schemas"):
        (checkout / name).symlink_to(REPO_ROOT / name)
    return checkout


def stand_in(path: Path, label: str) -> Path:
    """An executable that prints `label`, PYTHONPATH's first entry and its arguments."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{label} ${{PYTHONPATH%%:*}} $*"\n')
    path.chmod(0o755)
    return path


def run(script: Path, *args: str, path: str = BARE_PATH,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **(extra_env or {})}
    return subprocess.run([str(script), *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT_S, check=False, cwd="/")


# The container's own entry points (docker/Dockerfile): Kafka's image has no such scripts.
CONTAINER_ONLY = frozenset({"docker-entrypoint", "healthcheck"})


def test_every_subcommand_has_a_launcher_with_kafkas_script_name() -> None:
    launchers = {p.name: launched_subcommand(p) for p in BIN.glob("kafka-*.sh")}
    for subcommand in set(subcommands()) - CONTAINER_ONLY:
        assert launchers.get(kafka_script_name(subcommand)) == subcommand
    assert set(launchers.values()) <= set(subcommands())


@pytest.mark.parametrize("script", sorted(p.name for p in BIN.glob("kafka-*.sh")))
def test_each_launcher_prefers_the_checkouts_venv(tmp_path: Path, script: str) -> None:
    checkout = copy_checkout(tmp_path)
    stand_in(checkout / ".venv" / "bin" / "python", "venv")
    stand_in(tmp_path / "path" / "kafka-ext", "console-script")  # loses to the venv
    result = run(checkout / "bin" / script, "--flag", "a b",
                 path=f"{tmp_path / 'path'}:{BARE_PATH}")
    assert result.returncode == 0, result.stderr
    subcommand = launched_subcommand(BIN / script)
    assert result.stdout == f"venv {checkout} -m kafka_ext.cli.main {subcommand} --flag a b\n"


def test_without_a_venv_the_console_script_then_python3_are_used(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path)
    stand_in(tmp_path / "path" / "kafka-ext", "console-script")
    result = run(checkout / "bin" / "kafka-topics.sh", "--list",
                 path=f"{tmp_path / 'path'}:{BARE_PATH}")
    assert result.stdout == "console-script  topics --list\n"  # no PYTHONPATH: it is installed
    python = stand_in(tmp_path / "python" / "python3", "python3")
    result = run(checkout / "bin" / "kafka-topics.sh", "--list",
                 path=f"{python.parent}:{BARE_PATH}")
    assert result.stdout == f"python3 {checkout} -m kafka_ext.cli.main topics --list\n"


def test_a_symlinked_launcher_finds_its_checkout(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path)
    stand_in(checkout / ".venv" / "bin" / "python", "venv")
    link = tmp_path / "elsewhere" / "kafka-topics.sh"
    link.parent.mkdir()
    link.symlink_to(checkout / "bin" / "kafka-topics.sh")
    result = run(link, "--list")
    assert result.stdout == f"venv {checkout} -m kafka_ext.cli.main topics --list\n"


def test_kafka_topics_sh_works_against_a_broker_with_the_venv_not_activated(
        broker: Any, tmp_path: Path) -> None:
    """The issue's reproduction: a bare PATH whose python3 need not have confluent_kafka."""
    checkout = copy_checkout(tmp_path)
    (checkout / ".venv").symlink_to(Path(sys.prefix))  # the venv running these tests
    topic = f"launcher-{uuid.uuid4().hex[:8]}"
    script = checkout / "bin" / "kafka-topics.sh"
    created = run(script, "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic,
                  "--partitions", "2")
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {topic}.\n"
    listed = run(script, "--bootstrap-server", broker.bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()
