"""Protocol codec speed: our compiled codec beside kio on the same three messages.

Run `python bench/bench_codec.py`. Prints a table (µs per encode/decode, best of 5) and writes it
as the "## Protocol codec" section of bench/RESULTS.md, leaving other sections alone.
The ratio column is kio's time over ours: above 1 means we are faster.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import os
import platform
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kio.schema.errors import ErrorCode  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.primitive import Records  # noqa: E402

from kafka_ext.protocol.messages import MessageType, registry  # noqa: E402

# kio's classes take phantom int/str types; plain values encode the same, so type them as Any.
kio_fetch: Any = importlib.import_module("kio.schema.fetch.v16.response")
kio_metadata: Any = importlib.import_module("kio.schema.metadata.v12.response")
kio_produce: Any = importlib.import_module("kio.schema.produce.v11.request")

RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION_TITLE = "## Protocol codec"
REPEATS = 5
TARGET_REPEAT_SECONDS = 0.2  # each of the 5 timed runs lasts about this long
TARGET_RATIO = 3.0


@dataclass(slots=True)
class Case:
    """One message built identically in both libraries."""

    label: str
    mtype: MessageType
    version: int
    ours: Any
    kio: Any


# -- the three messages --------------------------------------------------------------------

def produce_case() -> Case:
    """Produce v11: 1 topic, 10 partitions, a 1 KiB records blob each."""
    mtype = registry()["ProduceRequest"]
    blob = bytes(range(256)) * 4
    topic_cls = mtype.cls.TopicProduceData
    ours = mtype.cls(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        topic_cls(name="bench-topic", partition_data=[
            topic_cls.PartitionProduceData(index=i, records=blob) for i in range(10)])])
    kio = kio_produce.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(milliseconds=30000),
        topic_data=(kio_produce.TopicProduceData(name="bench-topic", partition_data=tuple(
            kio_produce.PartitionProduceData(index=i, records=Records(blob))
            for i in range(10))),))
    return Case("Produce request v11, 10 x 1 KiB", mtype, 11, ours, kio)


def fetch_case() -> Case:
    """Fetch v16 response: 100 partitions (10 topics x 10), 64-byte records each."""
    mtype = registry()["FetchResponse"]
    topic_cls = mtype.cls.FetchableTopicResponse
    records = b"r" * 64
    topic_ids = [uuid.UUID(int=t + 1) for t in range(10)]
    ours = mtype.cls(throttle_time_ms=0, error_code=0, session_id=7, responses=[
        topic_cls(topic_id=topic_ids[t], partitions=[
            topic_cls.PartitionData(partition_index=p, error_code=0, high_watermark=1000 + p,
                                    last_stable_offset=1000 + p, log_start_offset=0,
                                    aborted_transactions=None, preferred_read_replica=-1,
                                    records=records)
            for p in range(10)])
        for t in range(10)])
    kio = kio_fetch.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=7,
        responses=tuple(kio_fetch.FetchableTopicResponse(topic_id=topic_ids[t], partitions=tuple(
            kio_fetch.PartitionData(partition_index=p, error_code=ErrorCode.none,
                                    high_watermark=1000 + p, last_stable_offset=1000 + p,
                                    log_start_offset=0, aborted_transactions=None,
                                    preferred_read_replica=-1, records=Records(records))
            for p in range(10))) for t in range(10)))
    return Case("Fetch response v16, 100 partitions", mtype, 16, ours, kio)


def metadata_case() -> Case:
    """Metadata v12 response: 3 brokers, 10 topics x 100 partitions, 3 replicas."""
    mtype = registry()["MetadataResponse"]
    topic_cls = mtype.cls.MetadataResponseTopic
    part_cls = topic_cls.MetadataResponsePartition
    broker_cls = mtype.cls.MetadataResponseBroker

    def replicas(p: int) -> list[int]:
        return [(p + r) % 3 for r in range(3)]

    ours = mtype.cls(
        throttle_time_ms=0, cluster_id="bench-cluster", controller_id=0,
        brokers=[broker_cls(node_id=b, host=f"broker-{b}.local", port=9092, rack=None)
                 for b in range(3)],
        topics=[topic_cls(error_code=0, name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1),
                          is_internal=False, topic_authorized_operations=-2147483648,
                          partitions=[part_cls(error_code=0, partition_index=p,
                                               leader_id=p % 3, leader_epoch=5,
                                               replica_nodes=replicas(p), isr_nodes=replicas(p),
                                               offline_replicas=[])
                                      for p in range(100)])
                for t in range(10)])
    kio = kio_metadata.MetadataResponse(
        throttle_time=datetime.timedelta(0), cluster_id="bench-cluster", controller_id=0,
        brokers=tuple(kio_metadata.MetadataResponseBroker(
            node_id=b, host=f"broker-{b}.local", port=9092, rack=None) for b in range(3)),
        topics=tuple(kio_metadata.MetadataResponseTopic(
            error_code=ErrorCode.none, name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1),
            is_internal=False, topic_authorized_operations=-2147483648,
            partitions=tuple(kio_metadata.MetadataResponsePartition(
                error_code=ErrorCode.none, partition_index=p, leader_id=p % 3, leader_epoch=5,
                replica_nodes=tuple(replicas(p)), isr_nodes=tuple(replicas(p)),
                offline_replicas=()) for p in range(100)))
            for t in range(10)))
    return Case("Metadata response v12, 1,000 partitions", mtype, 12, ours, kio)


# -- timing --------------------------------------------------------------------------------

def best_us_per_op(op: Callable[[], Any]) -> float:
    """Best of REPEATS runs, each long enough to swamp timer overhead, in µs per call."""
    op()
    iterations = 1
    while True:
        start = time.perf_counter()
        for _ in range(iterations):
            op()
        elapsed = time.perf_counter() - start
        if elapsed >= TARGET_REPEAT_SECONDS / 4:
            break
        iterations *= 2
    iterations = max(1, int(iterations * TARGET_REPEAT_SECONDS / elapsed))
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(iterations):
            op()
        best = min(best, time.perf_counter() - start)
    return best / iterations * 1e6


def kio_encoder(case: Case) -> Callable[[], bytes]:
    write = entity_writer(type(case.kio))

    def encode() -> bytes:
        buffer = io.BytesIO()
        write(buffer, case.kio)
        return buffer.getvalue()
    return encode


@dataclass(slots=True)
class Row:
    label: str
    size_bytes: int
    operation: str
    ours_us: float
    kio_us: float

    @property
    def ratio(self) -> float:
        return self.kio_us / self.ours_us


def measure_decode_with_broker_gc(cases: list[Case]) -> list[Row]:
    """Decode again after applying the broker's start-up GC settings (gc.freeze, a larger
    young-generation threshold): the conditions a request decode actually runs in."""
    from kafka_ext.server.broker import tune_garbage_collector

    tune_garbage_collector()
    return [_decode_row(case, "decode, broker GC") for case in cases]


def _decode_row(case: Case, operation: str) -> Row:
    data = case.mtype.encode(case.ours, case.version)
    kio_bytes = kio_encoder(case)()
    read = entity_reader(type(case.kio))
    mtype, version = case.mtype, case.version
    ours = best_us_per_op(lambda: mtype.decode(data, version))
    theirs = best_us_per_op(lambda: read(kio_bytes, 0))
    return Row(case.label, len(data), operation, ours, theirs)


def measure(case: Case) -> list[Row]:
    ours_bytes = case.mtype.encode(case.ours, case.version)
    kio_encode = kio_encoder(case)
    kio_bytes = kio_encode()
    if ours_bytes != kio_bytes:
        raise SystemExit(f"{case.label}: the two libraries encode different bytes")
    read = entity_reader(type(case.kio))
    mtype, version = case.mtype, case.version
    encode_ours = best_us_per_op(lambda: mtype.encode(case.ours, version))
    encode_kio = best_us_per_op(kio_encode)
    decode_ours = best_us_per_op(lambda: mtype.decode(ours_bytes, version))
    decode_kio = best_us_per_op(lambda: read(kio_bytes, 0))
    return [Row(case.label, len(ours_bytes), "encode", encode_ours, encode_kio),
            Row(case.label, len(ours_bytes), "decode", decode_ours, decode_kio)]


# -- report --------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    lines = ["| message | bytes | op | ours µs/op | kio µs/op | kio / ours |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        flag = "" if r.ratio >= TARGET_RATIO else " (below 3x)"
        lines.append(f"| {r.label} | {r.size_bytes:,} | {r.operation} | {r.ours_us:,.1f} | "
                     f"{r.kio_us:,.1f} | {r.ratio:.2f}x{flag} |")
    return "\n".join(lines)


def section(rows: list[Row], notes: str) -> str:
    import kio

    env = (f"Python {platform.python_version()} on {platform.machine()}, "
           f"{os.cpu_count()} CPUs, kio {kio.__version__}; "
           f"{datetime.date.today().isoformat()}; best of {REPEATS} runs of "
           f"~{TARGET_REPEAT_SECONDS:.1f} s each.")
    body = [SECTION_TITLE, "",
            "`python bench/bench_codec.py`: our compiled codec (pure Python, generated per "
            "version) beside kio 0.6.5 (Python writers, Rust-native readers) on identical "
            "messages; the script checks both encode the same bytes before timing. Our decode "
            "returns records as memoryviews (no copy). Target: kio / ours >= 3x.", "",
            env, "", table(rows), ""]
    if notes:
        body += [notes.strip(), ""]
    return "\n".join(body)


def write_results(text: str) -> None:
    """Replace our section of RESULTS.md (or add it), keeping every other section."""
    if RESULTS.exists():
        current = RESULTS.read_text()
    else:
        current = "# Benchmarks\n\nNumbers from the scripts in `bench/`; rerun them to update.\n"
    pattern = re.compile(rf"^{re.escape(SECTION_TITLE)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text + "\n", current, count=1)
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(updated.rstrip("\n") + "\n")


# Where the time goes (cProfile, see the codec report); kept beside the numbers.
NOTES = """
Reading the numbers (the 2 CPUs are shared with other jobs: reruns vary by up to ~30%):

- Encode: above 3x on all three. kio encodes in pure Python (dataclass introspection +
  BytesIO). Our generated encoders inline one-byte varints, pack []int32 with a cached
  `struct.Struct` per element count, and test each tagged field against its default field by
  field (it was a freshly built default instance compared with the generic `__eq__`, 0.58 µs
  per check, ~70% of Fetch encode); when all are default they write one zero byte.
- Decode: below kio on all three, far from the 3x target, and a pure-Python decoder will not
  get there: kio decodes with a Rust extension (`_kio_native`). The generated decoders already
  inline the one-byte varint, array count checks, records slices and the empty tagged-field
  section; with the cyclic GC off, Metadata decode went from ~1.6 to ~0.75 ms.
- About 60% of the Metadata decode time under the default collector settings is CPython's
  cyclic garbage collector, not the decoder: each partition leaves six GC-tracked containers
  (the object and its lists), while kio builds tuples the collector stops tracking. The broker
  therefore freezes its start-up heap and raises the young-generation threshold
  (`tune_garbage_collector`); the "decode, broker GC" rows measure decode under those settings.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows: list[Row] = []
    cases = [build() for build in (produce_case, fetch_case, metadata_case)]
    for case in cases:
        rows.extend(measure(case))
    rows.extend(measure_decode_with_broker_gc(cases))
    for row in rows:
        print(f"{row.label:42} {row.operation:18} ours {row.ours_us:10.1f} µs   "
              f"kio {row.kio_us:10.1f} µs   {row.ratio:6.2f}x", flush=True)
    print()
    print(table(rows))
    if not args.no_write:
        write_results(section(rows, NOTES))
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
