"""An S3-compatible server on loopback for diskless tests: moto's server behind a TCP proxy.

moto keeps its buckets in process memory, so it cannot be stopped and restarted with its data.
Outages are made by the proxy instead: while it is "down" it resets every connection (the store
is refused) or holds them silent (the store hangs), and moto keeps the objects meanwhile.

    with S3Server() as s3:                 # or run_s3_server(log_dir)
        env = {**os.environ, **s3.env}     # for a broker subprocess
        ... diskless.storage.url = s3.url  # s3://kafka-ext/diskless
        with s3.unreachable():
            ...                            # produce must get a retriable error
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

STARTUP_TIMEOUT_S = 30.0
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProxyMode(Enum):
    FORWARD = "forward"  # pass bytes both ways
    RESET = "reset"  # refuse: accept then reset every connection at once
    BLACKHOLE = "blackhole"  # hang: accept and never answer
    HOLD_RESPONSES = "hold"  # requests reach moto, its answers wait until the next mode switch


class TcpProxy:
    """A threaded loopback TCP proxy whose upstream can be cut (RESET) or silenced (BLACKHOLE)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._mode = ProxyMode.FORWARD
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._stopped = False
        self._responses_flow = threading.Event()
        self._responses_flow.set()
        self.connections_refused = 0
        self._acceptor = threading.Thread(
            target=self._accept_forever, name="s3-proxy-accept", daemon=True
        )
        self._acceptor.start()

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    def set_mode(self, mode: ProxyMode) -> None:
        """Switch modes; every open connection is reset so no pooled connection outlives a switch
        (except into HOLD_RESPONSES, which keeps them so a pooled request still reaches moto)."""
        with self._lock:
            self._mode = mode
            if mode is ProxyMode.HOLD_RESPONSES:
                self._responses_flow.clear()
                return
            doomed = list(self._sockets)
            self._sockets.clear()
        self._responses_flow.set()
        for sock in doomed:
            _reset(sock)

    def close(self) -> None:
        self._stopped = True
        self.set_mode(ProxyMode.RESET)
        # accept() does not return when another thread closes the listener: wake it with a connect
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=1),
        ):
            pass
        self._acceptor.join(timeout=5)
        self._listener.close()

    def _accept_forever(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            if self._stopped:
                _reset(client)
                return
            with self._lock:
                mode = self._mode
                if mode is ProxyMode.BLACKHOLE:
                    self._sockets.add(client)
                    continue
            if mode is ProxyMode.RESET:
                self.connections_refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(src, dst, answers), name="s3-proxy-pump",
                    daemon=True,
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers:
                    self._responses_flow.wait()
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # either side was reset or closed: the other pump closes its end too
        finally:
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    with contextlib.suppress(OSError):
        sock.close()


class S3Server:
    """moto's S3 server on a free loopback port with one bucket, reached through `proxy`.

    A context manager: entering starts it (and creates the bucket), leaving stops it.
    """

    def __init__(
        self, log_dir: Path | None = None, *, bucket: str = "kafka-ext", prefix: str = "diskless"
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.moto_port = free_port()
        self.log_path = (log_dir or Path(tempfile.gettempdir())) / f"moto-{self.moto_port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.proxy: TcpProxy | None = None
        self.endpoint = ""  # http://127.0.0.1:<proxy port>, once started
        self.env: dict[str, str] = {}  # the AWS_* variables a broker needs to reach it

    @property
    def url(self) -> str:
        """The diskless.storage.url for this server."""
        return f"s3://{self.bucket}/{self.prefix}"

    def start(self) -> None:
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed once the process owns it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.moto_port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        log_file.close()
        _wait_ready(self.process, self.moto_port, self.log_path)
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.moto_port}/{self.bucket}", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        self.proxy = TcpProxy(self.moto_port)
        self.endpoint = f"http://127.0.0.1:{self.proxy.port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def __enter__(self) -> S3Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def unreachable(self, mode: ProxyMode = ProxyMode.RESET) -> Iterator[None]:
        """The store is down inside the block (refused or hanging); moto keeps its data."""
        assert self.proxy is not None, "the server is not started"
        self.proxy.set_mode(mode)
        try:
            yield
        finally:
            self.proxy.set_mode(ProxyMode.FORWARD)

    def count_objects_directly(self, prefix: str = "") -> int:
        """How many objects moto holds under the url, asked past the proxy (works in any mode)."""
        direct = {**self.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.moto_port}"}
        return self.count_objects(self.url, direct, prefix)

    @contextlib.contextmanager
    def environ(self) -> Iterator[None]:
        """Set the AWS_* variables in this process for the block (ObjectStore.from_url reads them)."""
        with _environ(self.env):
            yield

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @staticmethod
    def count_objects(url: str, env: dict[str, str], prefix: str = "") -> int:
        """How many objects are under `url` (+ `prefix`), reached with the AWS_* variables in env.

        Synchronous, for tests that are not coroutines (it runs its own event loop).
        """
        from kafka_ext.diskless.object_store import ObjectStore

        aws_env = {key: value for key, value in env.items() if key.startswith("AWS_")}
        with _environ(aws_env):
            store = ObjectStore.from_url(url)
            return len(asyncio.run(store.list(prefix)))


@contextlib.contextmanager
def run_s3_server(
    log_dir: Path | None = None, *, bucket: str = "kafka-ext", prefix: str = "diskless"
) -> Iterator[S3Server]:
    """`with S3Server(...)` as a function."""
    with S3Server(log_dir, bucket=bucket, prefix=prefix) as server:
        yield server


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_ready(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"moto server exited with {process.returncode}:\n{log_path.read_text()}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
                response.read()
            return
        except urllib.error.HTTPError:
            return  # it answers: ready
        except OSError:
            time.sleep(0.05)  # polling for start-up with a deadline, not timing
    raise RuntimeError(
        f"moto server did not start in {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()}"
    )
