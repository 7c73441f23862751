"""Request receive path: what cutting size-prefixed frames out of a socket costs, per frame size.

A sender process writes frames of one size over loopback TCP as fast as it can; the receiver is
an asyncio BufferedProtocol on uvloop that cuts them with `kafka_ext.network.frames` and hands
each buffer back at once, as a handler does when it has answered. Small frames go through the
scratch buffer (one copy); large ones are read straight into a buffer of their own (pooled, or
fresh: the kernel's page faults are the cost of a fresh one). The receiver's CPU seconds per GB
is the figure: the bytes are never looked at, so it is the framing and the buffers alone.

    python bench/bench_network.py                 # prints a Markdown table
    python bench/bench_network.py --sizes 1048576 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_ext.network.frames import FrameAssembler  # noqa: E402

DEFAULT_SIZES = (16 * 1024, 1024 * 1024, 8 * 1024 * 1024, 32 * 1024 * 1024)
DEFAULT_SECONDS = 4.0


def _send_frames(port: int, frame_bytes: int, seconds: float) -> None:
    body = os.urandom(min(frame_bytes, 1 << 20)) * max(1, frame_bytes >> 20)
    frame = struct.pack(">i", len(body)) + body
    # Several frames per sendall for small sizes, so the sender is not the bottleneck.
    chunk = frame * max(1, (1 << 20) // len(frame))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sock.sendall(chunk)


@dataclass(slots=True)
class ReceiveResult:
    frame_bytes: int
    frames: int
    total_bytes: int
    elapsed_s: float
    cpu_s: float

    @property
    def mb_per_s(self) -> float:
        return self.total_bytes / self.elapsed_s / 1e6

    @property
    def cpu_s_per_gb(self) -> float:
        return self.cpu_s / (self.total_bytes / 1e9)


class _Receiver(asyncio.BufferedProtocol):
    def __init__(self, done: asyncio.Future[None]) -> None:
        self.frames = 0
        self.total_bytes = 0
        self.first_at = 0.0
        self._done = done
        self._assembler = FrameAssembler(256 * 1024 * 1024, self._on_frame)

    def _on_frame(self, frame: bytes | memoryview, buffer: object) -> None:
        if not self.frames:
            self.first_at = time.perf_counter()
        self.frames += 1
        self.total_bytes += len(frame) + 4
        if buffer is not None:
            del frame
            self._assembler.give_back(buffer)  # type: ignore[arg-type]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._assembler.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._assembler.buffer_updated(nbytes)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def _receive(frame_bytes: int, seconds: float) -> ReceiveResult:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    receiver = _Receiver(done)
    server = await loop.create_server(lambda: receiver, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sender = multiprocessing.get_context("spawn").Process(
        target=_send_frames, args=(port, frame_bytes, seconds))
    before = resource.getrusage(resource.RUSAGE_SELF)
    sender.start()
    await done
    end = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    sender.join()
    server.close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ReceiveResult(frame_bytes, receiver.frames, receiver.total_bytes,
                         end - receiver.first_at, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    parser.add_argument("--rounds", type=int, default=3, help="median of this many per size")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    print("| frame size | MB/s (median) | receiver CPU s per GB (median) | rounds (MB/s) |")
    print("|---:|---:|---:|---|")
    for size in args.sizes:
        results = [asyncio.run(_receive(size, args.seconds)) for _ in range(args.rounds)]
        results.sort(key=lambda r: r.cpu_s_per_gb)
        middle = results[len(results) // 2]
        rounds = ", ".join(f"{r.mb_per_s:,.0f}" for r in results)
        print(f"| {size:,} B | {middle.mb_per_s:,.0f} | {middle.cpu_s_per_gb:.3f} | {rounds} |")


if __name__ == "__main__":
    main()
