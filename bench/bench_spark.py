"""PySpark source benchmark: a batch read of 1 GiB with Spark local[2] beside one consumer.

Starts its own broker subprocess, writes 1 GiB of 1 KiB values over 6 partitions, then reads the
whole topic (a) with one confluent-kafka consumer in this process (assign + consume(10000),
summing value lengths) and (b) with `spark.read.format("kafka-ext")` on local[2]
(`count(*)`, `sum(length(value))`), alternating, and writes the "## PySpark source" section of
bench/RESULTS.md (only that section).

    python bench/bench_spark.py                 # ~1.5 minutes
    python bench/bench_spark.py --gib 0.25 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from bench_broker import BenchBroker, create_topic, running_broker, write_section  # noqa: E402

SECTION_TITLE = "## PySpark source"
TOPIC = "bench-spark"
PARTITIONS = 6
VALUE_BYTES = 1024
CONSUME_TIMEOUT_S = 600.0
TARGET_SPEEDUP = 1.5
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
CONSUMER = "confluent-kafka consumer"
CONSUMER_NO_GC = "confluent-kafka consumer, cyclic GC off"
SPARK = "spark local[2] kafka-ext"


@dataclass(slots=True)
class Run:
    """One full read of the topic."""

    reader: str
    rows: int
    value_bytes: int
    elapsed_s: float
    broker_cpu_s: float
    client_cpu_s: float = 0.0  # the reader's CPU seconds (consumer process, or JVM + workers)
    jvm_cpu_s: float = 0.0  # Spark only: the JVM's share
    workers_cpu_s: float = 0.0  # Spark only: the Python workers' share

    @property
    def client_cpu(self) -> str:
        if self.reader != SPARK:
            return f"{self.client_cpu_s:.1f} (this process)"
        return (f"{self.client_cpu_s:.1f} (JVM {self.jvm_cpu_s:.1f}, Python workers "
                f"{self.workers_cpu_s:.1f})")

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.elapsed_s / 1e6


@dataclass(slots=True)
class Report:
    rows: int
    produce_s: float
    load_before: str = ""
    runs: list[Run] = field(default_factory=list)

    def median(self, reader: str) -> Run:
        runs = sorted((r for r in self.runs if r.reader == reader), key=lambda r: r.elapsed_s)
        return runs[len(runs) // 2]


def produce(bootstrap: str, rows: int) -> float:
    """Write `rows` 1 KiB values round-robin over the partitions; returns seconds taken."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "enable.idempotence": False, "queue.buffering.max.kbytes": 262_144})
    value = b"v" * VALUE_BYTES
    started = time.perf_counter()
    for i in range(rows):
        while True:
            try:
                producer.produce(TOPIC, key=b"%010d" % i, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records undelivered")
    return time.perf_counter() - started


def read_with_consumer(broker: BenchBroker, rows: int, collect_garbage: bool = True) -> Run:
    """The baseline: one consumer, one process, every partition assigned. With
    `collect_garbage` False the cyclic GC is off during the read, as in the Spark tasks."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-spark",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760, "fetch.queue.backoff.ms": 1,
                         "queued.max.messages.kbytes": 262_144,
                         "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received = total_bytes = 0
    if not collect_garbage:
        gc.disable()
    cpu_before = broker.cpu_seconds()
    client_before = time.process_time()
    started = time.perf_counter()
    try:
        while received < rows:
            if time.perf_counter() - started > CONSUME_TIMEOUT_S:
                raise RuntimeError(f"consumer read {received} of {rows}")
            for msg in consumer.consume(min(10000, rows - received), 0.5):
                if msg.error() is not None:
                    raise RuntimeError(str(msg.error()))
                received += 1
                total_bytes += len(msg.value())
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
        consumer.close()
    name = CONSUMER if collect_garbage else CONSUMER_NO_GC
    return Run(name, received, total_bytes, elapsed, broker.cpu_seconds() - cpu_before,
               time.process_time() - client_before)


def spark_session():  # type: ignore[no-untyped-def]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafka_ext.spark

    spark = (SparkSession.builder.master("local[2]").appName("kafka-ext-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "2g")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafka_ext.spark.register(spark)
    return spark


def read_with_spark(spark, broker: BenchBroker, rows: int,  # type: ignore[no-untyped-def]
                    ending: str = "latest") -> Run:
    from pyspark.sql import functions as F

    df = (spark.read.format("kafka-ext").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", TOPIC).option("endingOffsets", ending).load())
    cpu_before = broker.cpu_seconds()
    spark_before = spark_cpu_seconds()
    started = time.perf_counter()
    (count, total_bytes), = df.agg(F.count("*"), F.sum(F.length("value"))).collect()
    elapsed = time.perf_counter() - started
    jvm_s, workers_s = (after - before for after, before in zip(spark_cpu_seconds(), spark_before,
                                                                 strict=True))
    if ending == "latest" and count != rows:
        raise RuntimeError(f"spark read {count} of {rows}")
    return Run(SPARK, count, int(total_bytes), elapsed, broker.cpu_seconds() - cpu_before,
               jvm_s + workers_s, jvm_s, workers_s)


def _process_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds incl. reaped children, command line), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        table[int(entry.name)] = (int(fields[1]), ticks / CLOCK_TICKS_PER_S, command)
    return table


def spark_cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far of this process's Spark JVM and of its Python workers (its children)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)

    def tree(pid: int) -> float:
        return table[pid][1] + sum(tree(child) for child in children.get(pid, []))

    jvm_s = workers_s = 0.0
    pending = list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        if "java" in table[pid][2]:
            workers = sum(tree(child) for child in children.get(pid, []))
            jvm_s += tree(pid) - workers
            workers_s += workers
        else:
            pending += children.get(pid, [])
    return jvm_s, workers_s


def render(report: Report, gib: float) -> str:
    import confluent_kafka
    import pyarrow
    import pyspark

    consumer, consumer_no_gc, spark = (report.median(CONSUMER), report.median(CONSUMER_NO_GC),
                                       report.median(SPARK))
    speedup = spark.rows_per_s / consumer.rows_per_s
    lines = [
        SECTION_TITLE, "",
        f"`python bench/bench_spark.py`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}, PySpark {pyspark.__version__}, pyarrow "
        f"{pyarrow.__version__}, confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
        f"{confluent_kafka.libversion()[0]}); broker, Spark (JVM + 2 Python workers) and the "
        f"consumer share the machine. Load average before/after: {report.load_before} / "
        f"{_load_average()}.", "",
        f"A batch read of {gib:g} GiB: {report.rows:,} records of {VALUE_BYTES} B values (10 B "
        f"keys) over {PARTITIONS} partitions, no compression, written in {report.produce_s:.1f} s. "
        f"Median of {len(report.runs) // 3} runs each, alternating; MB/s counts value bytes; "
        f"Spark's time includes planning (metadata + ListOffsets) and the aggregate "
        f"`count(*), sum(length(value))`.", "",
        "| reader | rows | rows/s | MB/s | seconds | reader CPU s | broker CPU s |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for run in (consumer, consumer_no_gc, spark):
        lines.append(f"| {run.reader} | {run.rows:,} | {run.rows_per_s:,.0f} | "
                     f"{run.mb_per_s:,.1f} | {run.elapsed_s:.2f} | {run.client_cpu} | "
                     f"{run.broker_cpu_s:.1f} |")
    lines += ["", "All runs (seconds): " + "; ".join(
        f"{r.reader}: {r.elapsed_s:.2f}" for r in report.runs), "",
        f"**Against the issue's target** (Spark local[2] >= {TARGET_SPEEDUP}x the single "
        f"consumer): {speedup:.2f}x — {'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}.", "",
        _reading(report, consumer, spark), ""]
    return "\n".join(lines)


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _reading(report: Report, consumer: Run, spark: Run) -> str:
    """Where the time goes, in CPU microseconds per record of the median runs."""
    def per_row(seconds: float) -> str:
        return f"{seconds / report.rows * 1e6:.1f}"

    total_spark = spark.client_cpu_s + spark.broker_cpu_s
    return (
        f"**Reading the numbers.** CPU per record: the single consumer "
        f"{per_row(consumer.client_cpu_s)} µs (librdkafka fetch and parse, one Python Message "
        f"object per record); the Spark read {per_row(spark.client_cpu_s)} µs — Python workers "
        f"{per_row(spark.workers_cpu_s)} µs (the same librdkafka consume, ~0.4 µs to move each "
        f"consume() batch into Arrow columns, Spark's Arrow IPC of the batch to the JVM) plus the "
        f"JVM {per_row(spark.jvm_cpu_s)} µs (Arrow batches to rows, copying every value, the "
        f"aggregate) — and the broker {per_row(spark.broker_cpu_s)} µs. With the broker, Spark "
        f"needs {total_spark:.1f} CPU s for the read, so on 2 cores it cannot finish in less "
        f"than {total_spark / 2:.1f} s even perfectly parallel, against the consumer's "
        f"{consumer.elapsed_s:.1f} s: the 1.5x target is out of reach on this machine because "
        f"Spark's Python data source path (Python worker -> Arrow -> JVM rows) costs about twice "
        f"the CPU of a bare consumer loop per record, and local[2]'s two task slots share the two "
        f"cores with the JVM, the broker and, here, other jobs (so runs vary by ~30%). The tasks "
        f"themselves scale: each reads its own partition range with its own consumer, so with a "
        f"core per task slot (local[N] on N+2 cores, or executors on other hosts) throughput "
        f"grows with the slots. Work done to get here: consume() never asks for more records than "
        f"the range holds (each task's last call used to wait out its 0.5 s timeout), the cyclic "
        f"GC is off inside tasks (~40% of a task was the collector rescanning message objects), "
        f"columns are built with C-level map() over Message accessors, and topic, partition and "
        f"dense offsets are built without a per-record call: one task path in one process went from "
        f"~60k to ~400k records/s.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of values to write and read")
    parser.add_argument("--runs", type=int, default=5, help="reads per reader")
    parser.add_argument("--no-write", action="store_true", help="leave RESULTS.md as it is")
    args = parser.parse_args()
    rows = int(args.gib * (1 << 30)) // VALUE_BYTES
    spark = spark_session()
    try:
        with running_broker() as broker:
            create_topic(broker.bootstrap, TOPIC, PARTITIONS)
            load_before = _load_average()
            report = Report(rows, produce(broker.bootstrap, rows), load_before)
            print(f"produced {rows:,} records in {report.produce_s:.1f} s", flush=True)
            # warm-up, not counted: Spark's Python workers on a small slice, then one whole read
            # so the JVM has compiled its hot paths (the first whole read is ~40% slower)
            small = json.dumps({TOPIC: {str(p): 1000 for p in range(PARTITIONS)}})
            read_with_spark(spark, broker, rows, ending=small)
            read_with_spark(spark, broker, rows)
            for _ in range(args.runs):
                for run in (read_with_consumer(broker, rows),
                            read_with_consumer(broker, rows, collect_garbage=False),
                            read_with_spark(spark, broker, rows)):
                    report.runs.append(run)
                    print(f"{run.reader}: {run.rows_per_s:,.0f} rows/s {run.mb_per_s:,.1f} MB/s "
                          f"{run.elapsed_s:.2f} s", flush=True)
    finally:
        spark.stop()
    section = render(report, args.gib)
    print(section)
    if not args.no_write:
        write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    main()
