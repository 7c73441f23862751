"""JBOD benchmark: replica move throughput between log dirs, with and without the throttle, and
produce latency (p50/p99) on the moving partition before and during a move.

Starts its own broker subprocess with two log dirs under one temp dir (both on the same disk
here, so a move reads and writes the same device), fills one partition, moves it with
AlterReplicaLogDirs (kafka-python), and times the move by polling DescribeLogDirs every 20 ms.
Writes the "## JBOD replica moves" section of bench/RESULTS.md (only that section).

    python bench/bench_jbod.py              # ~1 minute
    python bench/bench_jbod.py --fill-mib 64 --no-write
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))

from kafka_ext.client.probe import api_versions_ok  # noqa: E402

RESULTS_PATH = BENCH_DIR / "RESULTS.md"
SECTION_TITLE = "## JBOD replica moves"
TOPIC = "jbod-bench"
MESSAGE_BYTES = 1024
LATENCY_RATE_PER_S = 500
LATENCY_VALUE_BYTES = 100
POLL_S = 0.02


@dataclass(slots=True)
class MoveResult:
    case: str
    size_bytes: int
    seconds: float
    throttle_bytes_per_s: int | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    samples: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.size_bytes / self.seconds / 1e6


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(root: Path) -> tuple[subprocess.Popen[bytes], str, list[Path]]:
    port = free_port()
    dirs = [root / "disk0", root / "disk1"]
    args = [sys.executable, "-m", "kafka_ext", "server",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", "log.dirs=" + ",".join(map(str, dirs)),
            "--override", "log.segment.bytes=67108864"]
    log = open(root / "broker.log", "wb")  # noqa: SIM115 - lives as long as the broker
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    deadline = time.monotonic() + 60
    while not api_versions_ok("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((root / "broker.log").read_text())
        time.sleep(0.05)
    return proc, f"127.0.0.1:{port}", [d.resolve() for d in dirs]


def fill(bootstrap: str, size_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.size": 1_000_000, "acks": "1"})
    value = b"x" * MESSAGE_BYTES
    for _ in range(size_bytes // MESSAGE_BYTES):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


def where(admin: KafkaAdminClient) -> dict[bool, tuple[str, int]]:
    """{is_future: (dir, size)} of partition 0."""
    found = {}
    for d in admin.describe_log_dirs(topic_partitions=[TOPIC])[0]["log_dirs"]:
        for t in d["topics"]:
            for p in t["partitions"]:
                found[p["is_future_key"]] = (d["log_dir"], p["partition_size"])
    return found


def set_throttle(bootstrap: str, rate: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "intra.broker.throttled.rate", str(rate), incremental_operation=AlterConfigOpType.SET)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


class LatencyProbe:
    """acks=all sends at a fixed rate on a thread; delivery latency of each message."""

    def __init__(self, bootstrap: str) -> None:
        self.latencies_ms: list[float] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                   "acks": "all"})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        value = b"p" * LATENCY_VALUE_BYTES
        interval = 1 / LATENCY_RATE_PER_S
        next_send = time.perf_counter()
        while not self._stop.is_set():
            sent = time.perf_counter()

            def done(err: object, msg: object, sent: float = sent) -> None:
                if err is None:
                    self.latencies_ms.append((time.perf_counter() - sent) * 1000)
            self._producer.produce(TOPIC, value, partition=0, on_delivery=done)
            self._producer.poll(0)
            next_send += interval
            time.sleep(max(0.0, next_send - time.perf_counter()))
        self._producer.flush(30)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(60)
        return self.latencies_ms


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def move(admin: KafkaAdminClient, bootstrap: str, case: str, throttle: int | None,
         probe: bool) -> MoveResult:
    if throttle is not None:
        set_throttle(bootstrap, throttle)
    current = where(admin)[False]
    dirs = [d["log_dir"] for d in admin.describe_log_dirs()[0]["log_dirs"]]
    dest = next(d for d in dirs if d != current[0])
    latency = LatencyProbe(bootstrap) if probe else None
    start = time.perf_counter()
    result = admin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 0, 1): dest})
    assert all(e.__name__ == "NoError" for e in result.values()), result
    while True:
        state = where(admin)
        if True not in state and state[False][0] == dest:
            break
        time.sleep(POLL_S)
    seconds = time.perf_counter() - start
    out = MoveResult(case, current[1], seconds, throttle)
    if latency is not None:
        samples = latency.stop()
        out.samples = len(samples)
        if samples:
            out.p50_ms, out.p99_ms = percentile(samples, 0.5), percentile(samples, 0.99)
    return out


def baseline_latency(bootstrap: str, seconds: float) -> MoveResult:
    probe = LatencyProbe(bootstrap)
    time.sleep(seconds)
    samples = probe.stop()
    return MoveResult("no move (baseline)", 0, seconds, None, percentile(samples, 0.5),
                      percentile(samples, 0.99), len(samples))


def render(results: list[MoveResult], fill_mib: int, elapsed_s: float) -> str:
    lines = [
        SECTION_TITLE, "",
        f"`python bench/bench_jbod.py`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} "
        f"CPUs, Python {sys.version.split()[0]}; one partition of {fill_mib} MiB (1 KiB "
        "messages, 64 MiB segments) moved between two log dirs on the same disk; the move is "
        f"timed from the AlterReplicaLogDirs request to DescribeLogDirs showing it done (20 ms "
        f"polls). Latency: acks=all, linger.ms=0, {LATENCY_RATE_PER_S} msg/s of "
        f"{LATENCY_VALUE_BYTES} B to the moving partition. Whole run {elapsed_s:.0f} s.", "",
        "| case | throttle | moved MiB | seconds | MB/s | produce p50 ms | produce p99 ms | "
        "samples |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        throttle = "-" if r.throttle_bytes_per_s is None else \
            f"{r.throttle_bytes_per_s / 1e6:g} MB/s"
        mb = f"{r.mb_per_s:.1f}" if r.size_bytes else "-"
        moved = f"{r.size_bytes / 2**20:.0f}" if r.size_bytes else "-"
        p50 = "-" if r.p50_ms is None else f"{r.p50_ms:.2f}"
        p99 = "-" if r.p99_ms is None else f"{r.p99_ms:.2f}"
        lines.append(f"| {r.case} | {throttle} | {moved} | {r.seconds:.2f} | {mb} | {p50} | "
                     f"{p99} | {r.samples} |")
    return "\n".join(lines) + "\n" + READING


READING = """
Reading the numbers (2 shared CPUs; reruns vary a lot, e.g. the first unthrottled move ran at
183 MB/s in an earlier run, when the 512 MiB just produced was still being written back):

- Unthrottled moves copy page cache to page cache: rolled segments go through
  `copy_file_range` (no byte enters Python), so they run at memory speed until the kernel's
  dirty-page limits start throttling the writes; the disk then sets the pace.
- The throttle holds: 50 and 100 MB/s requested, 49-50 and 97-99 MB/s measured over the move.
- Produce latency on the moving partition: p50 does not move; p99 during a throttled move is
  in the baseline's range; an unthrottled move takes both CPUs and the disk for a fraction of a
  second, and the few hundred samples of that window put p99 at tens of ms. The swap itself
  holds the partition (the event loop) for 10-15 ms, logged per move.
"""


def write_section(text: str) -> None:
    content = RESULTS_PATH.read_text()
    start = content.find(SECTION_TITLE)
    if start < 0:
        content = content.rstrip("\n") + "\n\n" + text
    else:
        end = content.find("\n## ", start + len(SECTION_TITLE))
        content = content[:start] + text + ("" if end < 0 else content[end:])
    RESULTS_PATH.write_text(content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill-mib", type=int, default=512)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit RESULTS.md")
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-jbod-") as tmp:
        proc, bootstrap, _ = start_broker(Path(tmp))
        try:
            admin_client = AdminClient({"bootstrap.servers": bootstrap})
            admin_client.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
            fill(bootstrap, args.fill_mib * 2**20)
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            results = [
                move(admin, bootstrap, "move, unthrottled", None, probe=False),
                move(admin, bootstrap, "move, throttled", 50_000_000, probe=False),
                baseline_latency(bootstrap, 5.0),
                move(admin, bootstrap, "move during produce, throttled", 100_000_000,
                     probe=True),
            ]
            set_throttle(bootstrap, 2**62)
            results.append(move(admin, bootstrap, "move during produce, unthrottled", None,
                                probe=True))
            admin.close()
        finally:
            proc.terminate()
            proc.wait(60)
    text = render(results, args.fill_mib, time.monotonic() - began)
    print(text)
    if not args.no_write:
        write_section(text)


if __name__ == "__main__":
    main()
