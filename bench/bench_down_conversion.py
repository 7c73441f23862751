"""Down-conversion benchmark: what a Fetch v3 consumer (message format v1) costs beside Fetch v12.

One broker; confluent-kafka writes v2 batches to one-partition topics (1 KiB and 100 B values,
uncompressed, and 1 KiB gzip). One consumer then reads each topic from offset 0 to its end with
raw Fetch requests, once at v12 (v2 batches, zero copy) and once at v3 (converted to magic 1
messages by the broker), 1 MiB per partition per request as Kafka's clients default to. The
consumer only walks offsets to find where to fetch next, so the rate is the broker's. Writes the
"## Down-conversion (Fetch v0-3)" section of bench/RESULTS.md.

    python bench/bench_down_conversion.py
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from bench_broker import (  # noqa: E402
    BenchBroker,
    _client_version,
    _load_average,
    create_topic,
    running_broker,
    write_section,
)

from kafka_ext.client.probe import round_trip  # noqa: E402
from kafka_ext.protocol.api_keys import ApiKey  # noqa: E402
from kafka_ext.protocol.messages import registry  # noqa: E402
from kafka_ext.protocol.record_batch import iter_batch_headers  # noqa: E402

SECTION_TITLE = "## Down-conversion (Fetch v0-3)"
TOTAL_BYTES = 64 * 1024 * 1024  # value bytes written per case
PARTITION_MAX_BYTES = 1024 * 1024
ROUNDS = 3
_ENTRY = struct.Struct(">qi")  # a v0/v1 message set entry: offset, size
NOTES = """\
Reading the numbers: the v3 cost is per message and in pure Python. Each v2 record is decoded
(`records.decode_records`, about two thirds of the time) and written again as a magic 1 message
with its own CRC-32 (zlib); a compressed batch is also inflated and compressed again with its
codec, into one wrapper. So small messages pay most, and Fetch v3 runs at a few percent of
Fetch v12, which sends segment slices without copying them (its gzip row moves only the
compressed bytes, hence its rate). What one v3 request converts is bounded by its limits (here
1 MiB) and, for a compressed batch, by that batch's inflated records, never by the partition's
size. The v12 path does not pay for any of it: the conversion is chosen once per request."""


@dataclass(slots=True, frozen=True)
class Case:
    """Values of one size written with one codec, to a topic of their own."""

    value_bytes: int
    compression: str

    def label(self) -> str:
        return f"{'1 KiB' if self.value_bytes == 1024 else f'{self.value_bytes} B'}, {self.compression}"

    def topic(self) -> str:
        return f"bench-down-{self.value_bytes}-{self.compression}"

    def messages(self) -> int:
        return TOTAL_BYTES // self.value_bytes


CASES = [Case(1024, "none"), Case(100, "none"), Case(1024, "gzip")]


@dataclass(slots=True)
class Read:
    version: int
    elapsed_s: float
    response_bytes: int
    broker_cpu_s: float


def write(broker: BenchBroker, case: Case) -> None:
    create_topic(broker.bootstrap, case.topic(), 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "batch.size": 1_000_000, "compression.type": case.compression,
                         "enable.idempotence": False})
    value = b"x" * case.value_bytes
    for i in range(case.messages()):
        while True:
            try:
                producer.produce(case.topic(), value, key=b"%08d" % i)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _next_offset(version: int, records: memoryview) -> int | None:
    """The offset after the last message or batch in a Fetch answer's records."""
    last = None
    if version >= 4:
        for _, header in iter_batch_headers(records):
            last = header.next_offset
        return last
    pos = 0
    while pos + _ENTRY.size <= len(records):
        offset, size = _ENTRY.unpack_from(records, pos)
        if pos + _ENTRY.size + size > len(records):
            break
        last = offset + 1  # a wrapper carries its last inner offset
        pos += _ENTRY.size + size
    return last


def read_all(broker: BenchBroker, case: Case, version: int) -> Read:
    """Fetch the whole partition from 0 at `version`, one request at a time."""
    Request = registry()["FetchRequest"].cls
    host, port = broker.bootstrap.rsplit(":", 1)
    offset = 0
    response_bytes = 0
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        while offset < case.messages():
            request = Request(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52_428_800,
                              isolation_level=0, session_id=0, session_epoch=-1, topics=[
                                  Request.FetchTopic(topic=case.topic(), partitions=[
                                      Request.FetchPartition(
                                          partition=0, fetch_offset=offset,
                                          partition_max_bytes=PARTITION_MAX_BYTES)])],
                              forgotten_topics_data=[], rack_id="")
            response = round_trip(sock, ApiKey.FETCH, version, request)
            [partition] = response.responses[0].partitions
            assert partition.error_code == 0, partition
            records = memoryview(partition.records)
            response_bytes += len(records)
            following = _next_offset(version, records)
            assert following is not None and following > offset, (version, offset)
            offset = following
    return Read(version, time.perf_counter() - started, response_bytes,
                broker.cpu_seconds() - cpu_before)


def main() -> None:
    results: dict[tuple[str, int], Read] = {}
    load_before = _load_average()
    with running_broker() as broker:
        for case in CASES:
            write(broker, case)
        for _ in range(ROUNDS):  # interleaved, so both versions see the same machine
            for case in CASES:
                for version in (12, 3):
                    read = read_all(broker, case, version)
                    best = results.get((case.label(), version))
                    if best is None or read.elapsed_s < best.elapsed_s:
                        results[(case.label(), version)] = read
    lines = [SECTION_TITLE, "",
             "`python bench/bench_down_conversion.py`: one broker, confluent-kafka writes "
             f"{TOTAL_BYTES // 2**20} MiB of values (keyed, 8-byte keys) per one-partition "
             "topic as v2 batches (linger.ms=5, batch.size=1 MB); one consumer reads each topic "
             "from 0 to its end with raw Fetch requests, 1 MiB per partition per request, at "
             "v12 (v2 batches, zero copy) and at v3 (magic 1 messages converted by the broker). "
             "MB/s counts value bytes over wall time; the client only walks offsets, so the "
             "rate is the broker's.", "",
             f"Python {sys.version.split()[0]}, 2 CPUs shared with other jobs, client "
             f"{_client_version()}, load average {load_before} / {_load_average()}, "
             f"{time.strftime('%Y-%m-%d')}; best of {ROUNDS} interleaved rounds.", "",
             "| values | Fetch v12 MB/s | Fetch v3 MB/s | v3 / v12 | v3 µs/message "
             "| v3 answer bytes / v12 | broker CPU s/GB v12 | broker CPU s/GB v3 |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case in CASES:
        v12, v3 = results[(case.label(), 12)], results[(case.label(), 3)]
        gb = TOTAL_BYTES / 1e9
        rate = [TOTAL_BYTES / r.elapsed_s / 1e6 for r in (v12, v3)]
        lines.append(f"| {case.label()} | {rate[0]:,.1f} | {rate[1]:,.1f} | {rate[1] / rate[0]:.3f} "
                     f"| {v3.elapsed_s / case.messages() * 1e6:.1f} "
                     f"| {v3.response_bytes / v12.response_bytes:.2f} "
                     f"| {v12.broker_cpu_s / gb:.1f} | {v3.broker_cpu_s / gb:.1f} |")
    lines += ["", NOTES, ""]
    section = "\n".join(lines)
    print(section)
    write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    main()
