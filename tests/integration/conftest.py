"""Fixtures that run the real broker as a subprocess on a free loopback port.

The broker is started with `python -m kafka_ext server`, waited for with an ApiVersions
round trip, and stopped with SIGTERM; a crash or an unclean exit fails the test and the broker's
log is printed.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_ext.client.probe import api_versions_ok

STARTUP_TIMEOUT_S = 30.0


# Listener ports come from below the kernel's ephemeral range (ip_local_port_range, 32768-60999
# by default). A port picked from that range and released again can be taken as the local port
# of any outgoing connection before the broker binds it: "address already in use" at start-up,
# seen in CI with a dozen processes connecting at once.
_LISTEN_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never handed out twice by this process."""
    for _ in range(10_000):
        port = random.choice(_LISTEN_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


class BrokerProcess:
    """A kafka-ext broker subprocess with its own data directory."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(data_dir),
            **(overrides or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "kafka_ext", "server"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EXT_")}
        self.proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        log_file.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            if api_versions_ok("127.0.0.1", self.port):
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker did not answer within {STARTUP_TIMEOUT_S}s:\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9: an unclean stop, no flush, no checkpoints."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """`kafka-ext <argv>` run in this process, as a finished process: a Python start-up per
    call costs about a second, and tests call the tools many times (the launchers are run as
    processes by test_launchers.py)."""
    from kafka_ext.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # usage errors leave as on the shell
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def serve_for_module(b: BrokerProcess) -> Iterator[BrokerProcess]:
    """Body of a module-scoped broker fixture: start `b`, yield it, then stop it and fail on
    an unclean exit or a logged traceback, as broker_factory does."""
    b.start()
    yield b
    code = b.stop()
    assert code == 0, f"broker exited with {code}:\n{b.log()}"
    assert "Traceback" not in b.log(), f"broker logged a traceback:\n{b.log()}"


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, name: str = "data") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, overrides)
        b.start()
        started.append(b)
        return b

    yield make
    failures = []
    for b in started:
        code = b.stop()
        if code not in (0, -9):
            failures.append(f"broker exited with {code}:\n{b.log()}")
        elif "Traceback" in b.log():
            failures.append(f"broker logged a traceback:\n{b.log()}")
    if failures:
        pytest.fail("\n\n".join(failures))


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
