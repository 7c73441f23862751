"""The raw loopback limit: one TCP sender process and one receiver process, large sends.

Every broker throughput in `bench_broker.py` is reported as a fraction of this number, so the
table says how close the broker gets to what the machine's loopback can carry at all.
Run alone: `python bench/loopback.py` prints MB/s.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

SEND_CHUNK_BYTES = 1 << 20  # one sendall per MiB: the large-send case, not per-message costs
RECV_BUFFER_BYTES = 1 << 20
DEFAULT_TOTAL_BYTES = 1 << 30  # 1 GiB
DEFAULT_MAX_SECONDS = 10.0


@dataclass(slots=True, frozen=True)
class LoopbackResult:
    """Bytes the receiver read and the seconds from its first to its last byte."""

    total_bytes: int
    elapsed_s: float

    @property
    def mb_per_s(self) -> float:
        return self.total_bytes / self.elapsed_s / 1e6


def _receive(listener: socket.socket, results: Connection) -> None:
    """Accept one connection and read until EOF; report (bytes, seconds)."""
    conn, _ = listener.accept()
    buf = bytearray(RECV_BUFFER_BYTES)
    view = memoryview(buf)
    total_bytes = 0
    first = conn.recv_into(view)
    started = time.perf_counter()
    total_bytes += first
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        total_bytes += n
    elapsed_s = time.perf_counter() - started
    conn.close()
    results.send((total_bytes, elapsed_s))


def _send(port: int, total_bytes: int, max_seconds: float) -> None:
    """Send total_bytes in 1 MiB chunks, or stop at max_seconds."""
    payload = b"\x5a" * SEND_CHUNK_BYTES
    deadline = time.perf_counter() + max_seconds
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = 0
        while sent < total_bytes and time.perf_counter() < deadline:
            sock.sendall(payload)
            sent += len(payload)


def measure_loopback(total_bytes: int = DEFAULT_TOTAL_BYTES,
                     max_seconds: float = DEFAULT_MAX_SECONDS) -> LoopbackResult:
    """Run the sender and receiver as two processes over 127.0.0.1."""
    ctx = multiprocessing.get_context("spawn")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    parent_end, child_end = ctx.Pipe(duplex=False)
    receiver = ctx.Process(target=_receive, args=(listener, child_end))
    receiver.start()
    listener.close()
    sender = ctx.Process(target=_send, args=(port, total_bytes, max_seconds))
    sender.start()
    sender.join()
    received_bytes, elapsed_s = parent_end.recv()
    receiver.join()
    return LoopbackResult(received_bytes, elapsed_s)


if __name__ == "__main__":
    result = measure_loopback()
    print(f"loopback: {result.total_bytes / 2**20:.0f} MiB in {result.elapsed_s:.2f} s "
          f"= {result.mb_per_s:.0f} MB/s")
