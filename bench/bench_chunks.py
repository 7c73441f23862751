"""Partition chunks benchmark (issue 15 item 9), on one cluster of three real processes:

1. the time to create a chunk against the partition's size (RF 1, the partition on broker 1,
   the new chunk on broker 2): from sending CreateChunks until broker 2 acknowledges an
   acks=all produce of the partition, and the CreateChunks round trip alone; beside it the
   time to move a partition of the same size from broker 1 to broker 3 with
   `kafka-ext reassign-partitions` (unthrottled) until the reassignment completes;
2. Spark (local[2], the `kafka-ext` source) batch-read throughput of one partition whose data
   lives in three chunks on three brokers, beside the same data in one partition on one leader.

Three combined (broker + controller) `kafka-ext server` processes from
tests/cluster/conftest.py, started as bench_replication.py starts them (replica fetches straight
from broker to broker, not through the tests' proxy). Writes the "## Partition chunks" section of
bench/RESULTS.md (only that section).

    python bench/bench_chunks.py                # 10 MB / 1 GB / 5 GB, Spark 600 MB: ~3 min
    python bench/bench_chunks.py --quick --no-write   # 10 / 100 / 300 MB, Spark 60 MB
    python bench/bench_chunks.py --sizes 10,2000 --spark-mb 0 --no-write   # part 1 only

Each case fills a fresh topic (deleted after it, its directories gone before the next case);
sizes that would not fit on the disk with a margin are refused before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

from bench_replication import (  # noqa: E402
    CLUSTER_CONFIG,
    FAST_QUORUM,
    POLL_S,
    Disturbance,
    LogGrowth,
    _load_average,
    _machine,
    active_controller,
    cpu_snapshot,
    create_topic,
    delete_topic,
    fill,
    partition_state,
    start_cluster,
    topic_ready,
    unique,
    wait_for,
    write_section,
)
from bench_replication import VALUE_BYTES as SPARK_VALUE_BYTES  # noqa: E402
from bench_spark import _process_table, spark_cpu_seconds, spark_session  # noqa: E402

from kafka_ext.client.probe import identify, round_trip  # noqa: E402
from kafka_ext.protocol.api_keys import ApiKey  # noqa: E402
from kafka_ext.protocol.errors import ErrorCode  # noqa: E402
from kafka_ext.protocol.messages import registry  # noqa: E402
from kafka_ext.protocol.records import Record, build_batch  # noqa: E402
from tests.cluster.conftest import Cluster, Node  # noqa: E402
from tests.cluster.test_chunks import chunks_of, create_chunk  # noqa: E402

SECTION_TITLE = "## Partition chunks"
SIZES_MB = (10, 1_000, 5_000)
QUICK_SIZES_MB = (10, 100, 300)
SPARK_MB, QUICK_SPARK_MB = 600, 60
FILL_VALUE_BYTES = 100_000
# 1 MiB batches (ten 100 KB values), acks=1: filling is not what is measured.
FILL_PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1_048_576,
                 "message.max.bytes": 1_048_588, "compression.type": "none",
                 "enable.idempotence": False, "queue.buffering.max.kbytes": 1_048_576}
PRODUCE_VERSION = 9
MOVE_TIMEOUT_S = 1_800.0
WRITABLE_TIMEOUT_S = 60.0
# Disk a case may need beyond its data: the move case holds two copies at once.
DISK_MARGIN_BYTES = 3_000_000_000
DISK_SLACK = 1.1  # log and index overhead over the values, and rounding
# What broker 2 may answer a produce before it leads the new chunk.
NOT_YET = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
           ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS}
_PRODUCE = registry().requests[ApiKey.PRODUCE].cls
_groups = itertools.count()


# -- helpers ---------------------------------------------------------------------------------


class SparkAwareDisturbance(Disturbance):
    """bench_replication's Disturbance, with this process's Spark JVM and Python workers
    counted as ours (they are not reaped children, so os.times() does not see them)."""

    def _sample(self) -> tuple[float, float, float]:
        wall, busy, ours = super()._sample()
        return wall, busy, ours + sum(spark_cpu_seconds())


class RawProducer:
    """Produce v9 with acks=all over one connection of our codec: the broker's own answer, with
    no client-side metadata refresh or retry backoff in between."""

    def __init__(self, node: Node) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.client_port), timeout=30)
        identify(self.sock)
        self._ids = itertools.count(1)

    def produce(self, topic: str, value: bytes = b"probe") -> int:
        batch = build_batch([Record(0, int(time.time() * 1000), None, value)])
        answer = round_trip(self.sock, ApiKey.PRODUCE, PRODUCE_VERSION, _PRODUCE(
            transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
                _PRODUCE.TopicProduceData(name=topic, partition_data=[
                    _PRODUCE.PartitionProduceData(index=0, records=batch)])]),
            next(self._ids), client_id="bench-chunks")
        return int(answer.responses[0].partition_responses[0].error_code)

    def until_accepted(self, topic: str, started: float) -> tuple[float, int]:
        """Produce every 2 ms until one is acknowledged: (perf_counter then, refusals)."""
        refused = 0
        while True:
            code = self.produce(topic)
            now = time.perf_counter()
            if code == ErrorCode.NONE:
                return now, refused
            if code not in NOT_YET:
                raise RuntimeError(f"{topic}: produce answered {ErrorCode(code).name}")
            if now - started > WRITABLE_TIMEOUT_S:
                raise RuntimeError(f"{topic}: not writable after {WRITABLE_TIMEOUT_S:.0f} s")
            refused += 1
            time.sleep(0.002)

    def close(self) -> None:
        self.sock.close()


class StallProbe:
    """ApiVersions round trips to one broker every 5 ms on a thread: the longest one, i.e. how
    long the broker's event loop did not answer (its metadata listener runs on it)."""

    def __init__(self, node: Node) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.client_port), timeout=30)
        identify(self.sock)
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for n in itertools.count(1):
            if self._stop.wait(0.005):
                return
            started = time.perf_counter()
            identify(self.sock, correlation_id=n)
            self.longest = max(self.longest, time.perf_counter() - started)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.longest


def dirty_mb() -> float:
    """Dirty + Writeback page cache, MB (/proc/meminfo): what an fsync may have to write."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(info[k].split()[0]) for k in ("Dirty", "Writeback")) * 1024 / 1e6


def log_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.log"))


def fill_partition(node: Node, topic: str, size_bytes: int) -> float:
    """`size_bytes` of FILL_VALUE_BYTES values into partition 0; seconds until flushed."""
    producer = Producer({"bootstrap.servers": node.bootstrap, **FILL_PRODUCER})
    producer.list_topics(topic, timeout=30)
    value = os.urandom(FILL_VALUE_BYTES)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    started = time.perf_counter()
    for _ in range(max(1, size_bytes // FILL_VALUE_BYTES)):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    remaining = producer.flush(1_800)
    if remaining or failed:
        raise RuntimeError(f"{topic}: {remaining} undelivered, {len(failed)} failed "
                           f"({'; '.join(sorted(set(failed))[:3])})")
    return time.perf_counter() - started


def timed_sync() -> float:
    started = time.perf_counter()
    os.sync()
    return time.perf_counter() - started


def drop_topic(cluster: Cluster, topic: str) -> None:
    """Delete the topic and wait until no broker holds a directory of it (disk space back)."""
    delete_topic(cluster.brokers[0], topic)

    def gone() -> bool:
        return not any(any(n.data_dir.glob(f"{topic}-*")) for n in cluster.brokers)

    wait_for(gone, 120, f"{topic}'s directories removed")


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_disk(path: Path, need_bytes: int, what: str) -> None:
    free = disk_free(path)
    if need_bytes * DISK_SLACK + DISK_MARGIN_BYTES > free:
        raise RuntimeError(f"{what} needs ~{need_bytes * DISK_SLACK / 1e9:.1f} GB plus a "
                           f"{DISK_MARGIN_BYTES / 1e9:.0f} GB margin; {free / 1e9:.1f} GB free")


def measured(cluster: Cluster, call: Callable[[], Any]) -> tuple[Any, float]:
    """(call's result, other processes' share of the CPUs while it ran)."""
    disturbance = SparkAwareDisturbance(cluster)
    result = call()
    return result, disturbance.others()


# -- 1: chunk creation against a move -------------------------------------------------------


@dataclass(slots=True)
class Fill:
    log_bytes: int
    seconds: float
    sync_s: float | None = None  # os.sync() after the fill, when one ran

    @property
    def mb_per_s(self) -> float:
        return self.log_bytes / self.seconds / 1e6


@dataclass(slots=True)
class ChunkCase:
    target_bytes: int
    clean: bool  # os.sync() ran between the fill and CreateChunks
    fill: Fill
    dirty_mb: float  # Dirty + Writeback when CreateChunks was sent
    round_trip_s: float  # CreateChunks sent -> its answer (connect and ApiVersions included)
    writable_s: float  # CreateChunks sent -> broker 2 acknowledges an acks=all produce
    refused: int  # produces broker 2 refused before
    stock_s: float  # CreateChunks sent -> a confluent-kafka acks=all record sent at the answer
    start_offset: int  # the new active chunk's start
    stall_s: float  # broker 1's longest ApiVersions round trip meanwhile
    stall2_s: float  # broker 2's
    others: float = 0.0


@dataclass(slots=True)
class MoveCase:
    target_bytes: int
    fill: Fill
    first_byte_s: float  # reassignment listed -> broker 3's log not empty
    copy_s: float  # listed -> broker 3's log as long as broker 1's
    done_s: float  # listed -> no longer listed
    writable_s: float  # listed -> broker 3 (the new leader) acknowledges an acks=all produce
    others: float = 0.0

    @property
    def copy_mb_per_s(self) -> float:
        return self.fill.log_bytes / max(self.copy_s - self.first_byte_s, 1e-3) / 1e6


def chunk_case(cluster: Cluster, size_bytes: int, clean: bool) -> ChunkCase:
    """Fill a partition on broker 1, then CreateChunks onto broker 2, timed three ways from
    the moment it is sent: its answer; broker 2's first acknowledgement of a raw acks=all
    Produce (polled every 2 ms on a connection opened before); and a warmed confluent-kafka
    producer's record sent when the answer came (librdkafka learns the new leader itself)."""
    n1, n2 = cluster.nodes[1], cluster.nodes[2]
    topic = unique(f"chunk-{size_bytes // 1_000_000}mb")
    create_topic(n1, topic, [[1]])
    seconds = fill_partition(n1, topic, size_bytes)
    filled = Fill(log_bytes(n1.data_dir / f"{topic}-0"), seconds)
    stock = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.brokers),
                      "acks": "all", "linger.ms": 0, "enable.idempotence": False})
    stock.produce(topic, b"warm-up", partition=0)  # metadata and a connection to broker 1
    if stock.flush(30):
        raise RuntimeError(f"{topic}: the warm-up record was not acknowledged")
    raw = RawProducer(n2)
    try:
        if raw.produce(topic) not in NOT_YET:  # a connection in use; broker 2 refuses
            raise RuntimeError(f"{topic}: broker 2 took a produce before the chunk")
        if clean:
            filled.sync_s = timed_sync()
        dirty = dirty_mb()
        answer: dict[str, Any] = {}
        delivery: list[Any] = []

        def close_chunk() -> None:
            answer["result"] = create_chunk(n1, topic, 0, [2])
            answer["at"] = time.perf_counter()
            stock.produce(topic, b"after", partition=0,
                          on_delivery=lambda err, _msg: delivery.append(err))
            answer["stock_left"] = stock.flush(60)
            answer["stock_at"] = time.perf_counter()

        thread = threading.Thread(target=close_chunk)
        probe, probe2 = StallProbe(n1), StallProbe(n2)
        started = time.perf_counter()
        thread.start()
        writable_at, refused = raw.until_accepted(topic, started)
        thread.join()
        stall, stall2 = probe.stop(), probe2.stop()
    finally:
        raw.close()
    if answer.get("result") != (0, None):
        raise RuntimeError(f"{topic}: CreateChunks answered {answer.get('result')}")
    if answer["stock_left"] or delivery != [None]:
        raise RuntimeError(f"{topic}: the record after the chunk: {delivery}")
    start, chunks = chunks_of(n2, topic, 0)
    if [c.replica_nodes for c in chunks] != [[1]] or partition_state(n2, topic)[0][0] != 2:
        raise RuntimeError(f"{topic}: unexpected chunks {chunks}")
    drop_topic(cluster, topic)
    case = ChunkCase(size_bytes, clean, filled, dirty, answer["at"] - started,
                     writable_at - started, refused, answer["stock_at"] - started, start,
                     stall, stall2)
    print(f"chunk of {filled.log_bytes / 1e6:,.0f} MB ({'after sync' if clean else 'just filled'}"
          f", {dirty:,.0f} MB dirty; fill {seconds:.1f} s): CreateChunks answered after "
          f"{case.round_trip_s * 1000:.1f} ms, broker 2 writable after "
          f"{case.writable_s * 1000:.1f} ms, stock producer after {case.stock_s * 1000:.0f} ms; "
          f"longest ApiVersions meanwhile: broker 1 {stall * 1000:.0f} ms, broker 2 "
          f"{stall2 * 1000:.0f} ms", flush=True)
    return case


def move_case(cluster: Cluster, root: Path, size_bytes: int) -> MoveCase:
    """Fill a partition on broker 1 and move it to broker 3 with the CLI (`--execute --no-wait`,
    unthrottled), timed as bench_replication.reassign times it (clock from the first listing by
    ListPartitionReassignments at the active controller, or broker 3's first byte if earlier),
    and until broker 3, the new leader, acknowledges an acks=all produce."""
    source, dest = cluster.nodes[1], cluster.nodes[3]
    topic = unique(f"move-{size_bytes // 1_000_000}mb")
    create_topic(source, topic, [[1]])
    seconds = fill_partition(source, topic, size_bytes)
    filled = Fill(log_bytes(source.data_dir / f"{topic}-0"), seconds, timed_sync())
    plan = root / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [dest.node_id]}]}))
    watcher = KafkaAdminClient(
        bootstrap_servers=cluster.nodes[active_controller(cluster)].bootstrap)
    watcher.list_partition_reassignments()  # connected before the clock
    raw = RawProducer(dest)
    growth = LogGrowth(dest.data_dir / f"{topic}-0", filled.log_bytes)
    run = subprocess.Popen([sys.executable, "-m", "kafka_ext", "reassign-partitions",
                            "--bootstrap-server", source.bootstrap, "--reassignment-json-file",
                            str(plan), "--execute", "--no-wait"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listed_at: float | None = None
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    try:
        while True:
            listed = bool(watcher.list_partition_reassignments())
            now = time.perf_counter()
            exited = run.poll() is not None
            if exited and run.returncode != 0:
                raise RuntimeError(f"reassign-partitions failed: {run.communicate()}")
            if listed_at is None and (listed or exited):
                listed_at = now
            if exited and not listed:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: the move did not finish in {MOVE_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        done_at = now
        writable_at, _ = raw.until_accepted(topic, time.perf_counter())
    finally:
        growth.stop()
        watcher.close()
        raw.close()
    run.communicate()
    assert listed_at is not None
    start = min(listed_at, growth.first_byte or listed_at)
    first_byte = (growth.first_byte or start) - start
    copy = (growth.complete or growth.first_byte or start) - start
    wait_for(lambda: partition_state(dest, topic).get(0, (-1, [], []))[1] == [dest.node_id], 10,
             f"{topic} on broker {dest.node_id} alone")
    drop_topic(cluster, topic)
    case = MoveCase(size_bytes, filled, first_byte, copy, done_at - start, writable_at - start)
    print(f"move of {filled.log_bytes / 1e6:,.0f} MB (fill {seconds:.1f} s, sync "
          f"{filled.sync_s:.1f} s): first byte {first_byte:.2f} s, copied {copy:.2f} s "
          f"({case.copy_mb_per_s:.0f} MB/s), done {case.done_s:.2f} s, broker 3 writable "
          f"{case.writable_s:.2f} s", flush=True)
    return case


# -- 2: Spark reads of three chunks on three brokers -----------------------------------------

CHUNKED = "one partition: 3 chunks on brokers 1, 2, 3"
ONE = "one partition on broker 1"
ONE_SPLIT = "one partition on broker 1, minPartitions=3"


@dataclass(slots=True)
class SparkRead:
    layout: str
    rows: int
    value_bytes: int
    seconds: float
    tasks: int  # tasks of the scan stage
    broker_cpu_s: dict[int, float]
    spark_cpu_s: float  # JVM + Python workers
    others: float = 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / 1e6


@dataclass(slots=True)
class TaskAlone:
    node: int  # the broker the task was sent to (-1: the leader, wherever it is)
    rows: int
    seconds: float


@dataclass(slots=True)
class SparkData:
    rows: int
    chunk_starts: list[int]
    chunk_replicas: list[list[int]]
    fill_s: float
    single_fill_s: float
    lease_notices: int = 0
    alone: dict[str, list[list[TaskAlone]]] = field(default_factory=dict)  # layout -> rounds

    def alone_s(self, layout: str) -> float:
        """Median over the rounds of the time to read every task, one after another."""
        return statistics.median(sum(t.seconds for t in tasks) for tasks in self.alone[layout])


def build_spark_topics(cluster: Cluster, total_bytes: int) -> tuple[str, str, SparkData]:
    """The chunked partition (a third on broker 1, chunk onto broker 2, a third, chunk onto
    broker 3, the last third: the active chunk on broker 3) and the same records in one
    partition led by broker 1; bench_replication.fill's 1 KiB values."""
    n1, n2, n3 = (cluster.nodes[i] for i in (1, 2, 3))
    rows = total_bytes // SPARK_VALUE_BYTES
    third = rows // 3
    chunked = unique("spark-chunks")
    create_topic(n1, chunked, [[1]])
    started = time.perf_counter()
    for leader, following, count in ((n1, 2, third), (n2, 3, third), (n3, None, rows - 2 * third)):
        fill(leader, chunked, count * SPARK_VALUE_BYTES)
        if following is not None:
            result = create_chunk(leader, chunked, 0, [following])
            if result != (0, None):
                raise RuntimeError(f"CreateChunks onto broker {following}: {result}")
            for broker in cluster.brokers:
                wait_for(lambda b=broker, f=following: partition_state(b, chunked).get(
                    0, (-1,))[0] == f, 30, f"broker {following} leading {chunked}")
    fill_s = time.perf_counter() - started
    start, chunks = chunks_of(n1, chunked, 0)
    if [c.replica_nodes for c in chunks] != [[1], [2]]:
        raise RuntimeError(f"{chunked}: unexpected chunks {chunks}")
    single = unique("spark-one")
    create_topic(n1, single, [[1]])
    started = time.perf_counter()
    fill(n1, single, rows * SPARK_VALUE_BYTES)
    single_fill_s = time.perf_counter() - started
    assert topic_ready(n1, single, 1)
    data = SparkData(rows, [c.start_offset for c in chunks] + [start],
                     [c.replica_nodes for c in chunks] + [[3]], fill_s, single_fill_s)
    print(f"spark data: {rows:,} records of {SPARK_VALUE_BYTES} B, chunks start at "
          f"{data.chunk_starts}; filled in {fill_s:.1f} s (chunked) and {single_fill_s:.1f} s",
          flush=True)
    return chunked, single, data


def spark_read(spark: Any, cluster: Cluster, topic: str, rows: int, layout: str,
               options: dict[str, str]) -> SparkRead:
    """`count(*), sum(length(value))` of the whole topic; the scan stage's task count from
    Spark's status tracker (the read runs in a job group of its own)."""
    from pyspark.sql import functions as F

    context = spark.sparkContext
    group = f"bench-chunks-{next(_groups)}"
    context.setJobGroup(group, layout)
    reader = (spark.read.format("kafka-ext")
              .option("kafka.bootstrap.servers", ",".join(b.bootstrap for b in cluster.brokers))
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    brokers_before = cpu_snapshot(cluster)
    spark_before = sum(spark_cpu_seconds())
    started = time.perf_counter()
    (count, total_bytes), = df.agg(F.count("*"), F.sum(F.length("value"))).collect()
    seconds = time.perf_counter() - started
    spark_s = sum(spark_cpu_seconds()) - spark_before
    brokers_after = cpu_snapshot(cluster)
    if count != rows:
        raise RuntimeError(f"{layout}: spark read {count} of {rows}")
    tracker = context.statusTracker()
    stage_tasks = [info.numTasks for job in tracker.getJobIdsForGroup(group)
                   if (job_info := tracker.getJobInfo(job)) is not None
                   for stage in job_info.stageIds
                   if (info := tracker.getStageInfo(stage)) is not None]
    return SparkRead(layout, count, int(total_bytes), seconds, max(stage_tasks, default=-1),
                     {n: brokers_after[n] - brokers_before[n] for n in brokers_before}, spark_s)


LEASE_NOTICE = "lease changing too quickly"


@contextlib.contextmanager
def stderr_into(path: Path) -> Iterator[None]:
    """fd 2 into `path` (the Spark JVM and its workers inherit it), then back; what was
    written is echoed to the real stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("wb") as out:
        os.dup2(out.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        sys.stderr.write(path.read_text(errors="replace"))


def bench_spark_reads(cluster: Cluster, total_bytes: int, runs: int, root: Path
                      ) -> tuple[SparkData, list[SparkRead]]:
    chunked, single, data = build_spark_topics(cluster, total_bytes)
    layouts = ((CHUNKED, chunked, {}), (ONE, single, {}),
               (ONE_SPLIT, single, {"minPartitions": "3"}))
    log = root / "spark-stderr.log"
    with stderr_into(log):
        reads = spark_reads(cluster, layouts, data, runs)
        for layout, topic, options in (layouts[0], layouts[2]):
            data.alone[layout] = [tasks_alone(cluster, topic, options) for _ in range(runs)]
    # librdkafka's notice when a Fetch answer names a preferred replica other than the last
    # one within a minute: a task's prefetch past its chunk's end is sent on to the next one.
    data.lease_notices = log.read_text(errors="replace").count(LEASE_NOTICE)
    for topic in (chunked, single):
        drop_topic(cluster, topic)
    return data, reads


def tasks_alone(cluster: Cluster, topic: str, options: dict[str, str]) -> list[TaskAlone]:
    """The source's planned tasks read one after another in this process by its own task
    code (`reader.read_task`), without Spark: what the read path itself costs."""
    from kafka_ext.spark.options import parse_options
    from kafka_ext.spark.reader import read_task
    from kafka_ext.spark.source import KafkaBatchReader, arrow_schema, kafka_schema

    schema = kafka_schema()
    parsed = parse_options({"kafka.bootstrap.servers": ",".join(b.bootstrap
                                                                 for b in cluster.brokers),
                            "subscribe": topic, **options}, streaming=False)
    done = []
    parts: list[Any] = KafkaBatchReader(parsed, schema).partitions()
    for part in parts:
        task = part.task
        started = time.perf_counter()
        rows = sum(batch.num_rows
                   for batch in read_task(task, part.read_config, arrow_schema(schema)))
        done.append(TaskAlone(task.replica.node_id if task.replica else -1, rows,
                              time.perf_counter() - started))
    return done


def spark_reads(cluster: Cluster, layouts: tuple[tuple[str, str, dict[str, str]], ...],
                data: SparkData, runs: int) -> list[SparkRead]:
    spark = spark_session()
    reads: list[SparkRead] = []
    try:
        # Not counted: the Python workers start and the JVM compiles its hot paths.
        for layout, topic, options in layouts[:2]:
            spark_read(spark, cluster, topic, data.rows, layout, options)
        for _ in range(runs):
            for layout, topic, options in layouts:
                read, others = measured(cluster, lambda la=layout, t=topic, o=options:
                                        spark_read(spark, cluster, t, data.rows, la, o))
                read.others = others
                reads.append(read)
                print(f"{layout}: {read.rows_per_s:,.0f} records/s {read.mb_per_s:.1f} MB/s "
                      f"{read.seconds:.2f} s, {read.tasks} tasks, brokers' CPU " + ", ".join(
                          f"{n}: {s:.1f} s" for n, s in sorted(read.broker_cpu_s.items()))
                      + f", others {others:.0%}", flush=True)
    finally:
        spark.stop()
    return reads


# -- report ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    args: argparse.Namespace
    sizes: list[int]
    refused_sizes: list[int] = field(default_factory=list)
    chunks: list[ChunkCase] = field(default_factory=list)
    moves: list[MoveCase] = field(default_factory=list)
    spark_data: SparkData | None = None
    spark: list[SparkRead] = field(default_factory=list)
    controller: int = -1
    load_before: str = ""
    load_after: str = ""
    others_cpu: list[tuple[str, float]] = field(default_factory=list)  # (command, CPU s)
    log_findings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    free_before: int = 0


def other_processes(before: dict[int, tuple[int, float, str]],
                    after: dict[int, tuple[int, float, str]]) -> list[tuple[str, float]]:
    """The busiest processes outside this benchmark's tree over the run: (command, CPU s)."""
    ours = {os.getpid()}
    changed = True
    while changed:  # this process's descendants: brokers, CLI runs, Spark and its workers
        grown = {pid for pid, (parent, _, _) in after.items() if parent in ours}
        changed = not grown <= ours
        ours |= grown
    used: Counter[str] = Counter()
    for pid, (_, cpu_s, command) in after.items():
        if pid in ours or not command:
            continue
        spent = cpu_s - (before[pid][1] if pid in before else 0.0)
        if spent > 1.0:
            used[" ".join(command.split()[:6])[:90]] += spent
    return used.most_common(3)


_LOG_LINE = re.compile(r"^\[[^\]]+\] (WARNING|ERROR|CRITICAL) (\S+): (.*)$")


def log_findings(cluster: Cluster) -> list[str]:
    """WARNING and worse lines of the brokers' logs, grouped (numbers and names masked)."""
    seen: Counter[str] = Counter()
    for node in cluster.brokers:
        for line in node.log_path.read_text(errors="replace").splitlines():
            found = _LOG_LINE.match(line)
            if found:
                text = re.sub(r"\d+", "N", found.group(3))[:140]
                seen[f"node {node.node_id} {found.group(1)} {found.group(2)}: {text}"] += 1
    return [f"{line} (x{count})" for line, count in seen.most_common(12)]


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


def _t(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _median_read(reads: list[SparkRead], layout: str) -> SparkRead:
    chosen = sorted((r for r in reads if r.layout == layout), key=lambda r: r.seconds)
    return chosen[len(chosen) // 2]


def render(r: Report) -> str:
    a = r.args
    command = "python bench/bench_chunks.py" + (" --quick" if a.quick else "")
    others = "; ".join(f"`{c}` {s:,.0f} CPU s" for c, s in r.others_cpu) or "none seen"
    lines = [
        SECTION_TITLE, "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}, {_machine()}. One cluster of three "
        "combined (broker + controller) `kafka-ext server` processes on loopback (tests/cluster/"
        "conftest.py's Cluster, started by bench_replication.py's `start_cluster`: replica "
        "fetches straight from broker to broker), the quorum timeouts of the cluster tests "
        f"({', '.join(f'{k}={v}' for k, v in FAST_QUORUM.items())}) and "
        f"{', '.join(f'{k}={v}' for k, v in CLUSTER_CONFIG.items())}; everything else default "
        "(log.segment.bytes=1 GiB, Kafka's flush policy: a segment is fsynced when it rolls, "
        f"replica.fetch.max.bytes=1 MiB). Broker {r.controller} was the active controller. The "
        "three brokers, the clients, the Spark JVM and its workers and any other job share the "
        "machine's two cores; *others* is the share of the two CPUs other processes used while a "
        "measurement ran (machine busy time from /proc/stat minus ours). Load average "
        f"{r.load_before} before, {r.load_after} after; busiest other processes over the run: "
        f"{others}. Whole run {r.wall_s:.0f} s; {r.free_before / 1e9:.0f} GB free on the disk "
        "before it. MB = 10^6 bytes.", "",
    ]
    if r.refused_sizes:
        lines += ["Refused for want of disk space: " + ", ".join(_mb(s) for s in r.refused_sizes)
                  + ".", ""]
    if r.chunks or r.moves:
        lines += [
            "**1. A new chunk against a move, by partition size** (RF 1; a fresh topic per case, "
            f"its partition on broker 1 filled with {FILL_VALUE_BYTES // 1000} KB values in 1 MiB "
            "batches, acks=1, by confluent-kafka, then deleted. *Chunk*: CreateChunks to broker 1 "
            "(the leader) moving the partition's writes to broker 2; the clock starts when it is "
            "sent (our codec, a fresh connection: connect and ApiVersions are inside the round "
            "trip); *writable*: broker 2 acknowledges an acks=all Produce of the partition (raw "
            "requests on a connection opened before, every 2 ms from the start); *stock "
            "producer*: a warmed confluent-kafka acks=all producer whose record is sent when "
            "CreateChunks answers (it goes to broker 1, is refused, and librdkafka refreshes its "
            "metadata). *Just filled*: CreateChunks right after the fill, the log's unsynced tail "
            "still in the page cache; *after sync*: `os.sync()` first. *Move*: `kafka-ext "
            "reassign-partitions --execute --no-wait` to broker 3, unthrottled, after "
            "`os.sync()`; clock from the first ListPartitionReassignments listing (polled every "
            f"{POLL_S * 1000:.0f} ms at the active controller; the CLI's start-up is outside) or "
            "broker 3's first byte if earlier; *done*: no longer listed; *writable*: broker 3, "
            "the new leader, acknowledges an acks=all Produce):", "",
            "| partition | chunk: CreateChunks answered, just filled | writable on broker 2, "
            "just filled | CreateChunks answered, after sync | writable on broker 2, after sync "
            "| move to broker 3: done | writable on broker 3 | move done / chunk writable "
            "(after sync) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for size in r.sizes:
            dirty = next((c for c in r.chunks if c.target_bytes == size and not c.clean), None)
            clean = next((c for c in r.chunks if c.target_bytes == size and c.clean), None)
            move = next((m for m in r.moves if m.target_bytes == size), None)
            shown = (dirty or clean or move)
            if shown is None:
                continue
            cells = [_mb(shown.fill.log_bytes)]
            for c in (dirty, clean):
                cells += ["-", "-"] if c is None else [_t(c.round_trip_s),
                                                       f"**{_t(c.writable_s)}**"]
            cells += ["-", "-"] if move is None else [f"**{_t(move.done_s)}**",
                                                      _t(move.writable_s)]
            cells.append(f"{move.done_s / clean.writable_s:,.0f}x"
                         if move is not None and clean is not None else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "", "Details (fill = the producer's time for the values, MB/s of log bytes; sync = "
            "`os.sync()` after it; dirty = Dirty + Writeback in /proc/meminfo when CreateChunks "
            "was sent; refused = produces broker 2 refused before it led the new chunk; broker 1 "
            "stalled = the longest of ApiVersions round trips sent to it every 5 ms from "
            "CreateChunks until the stock producer's delivery (the same for broker 2); others = "
            "over the whole case, fill included):", "",
            "| case | partition | fill | sync | dirty page cache | CreateChunks answered | "
            "writable | refused | stock producer delivered | broker 1 stalled | broker 2 stalled "
            "| copy: first byte / last byte | copy MB/s | others |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for c in r.chunks:
            sync = "-" if c.fill.sync_s is None else f"{c.fill.sync_s:.1f} s"
            lines.append(
                f"| chunk, {'after sync' if c.clean else 'just filled'} | "
                f"{_mb(c.fill.log_bytes)} | {c.fill.seconds:.1f} s ({c.fill.mb_per_s:.0f} MB/s) "
                f"| {sync} | {c.dirty_mb:,.0f} MB | {_t(c.round_trip_s)} | {_t(c.writable_s)} | "
                f"{c.refused} | {_t(c.stock_s)} | {_t(c.stall_s)} | {_t(c.stall2_s)} | - | - | "
                f"{c.others:.0%} |")
        for m in r.moves:
            lines.append(
                f"| move | {_mb(m.fill.log_bytes)} | {m.fill.seconds:.1f} s "
                f"({m.fill.mb_per_s:.0f} MB/s) | {m.fill.sync_s or 0:.1f} s | - | - | "
                f"{_t(m.writable_s)} | - | - | - | - | {_t(m.first_byte_s)} / {_t(m.copy_s)} | "
                f"{m.copy_mb_per_s:,.0f} | {m.others:.0%} |")
        lines.append("")
    if r.spark and r.spark_data is not None:
        d = r.spark_data
        total = d.rows * SPARK_VALUE_BYTES
        layout_of = ", ".join(f"offsets {s:,}+ on broker {'/'.join(map(str, rep))}"
                              for s, rep in zip(d.chunk_starts, d.chunk_replicas, strict=True))
        lines += [
            f"**2. Spark batch read of {_mb(total)}** ({d.rows:,} records of "
            f"{SPARK_VALUE_BYTES} B values, RF 1, from bench_replication.py's `fill`; *3 chunks*: "
            f"the partition was created on broker 1 and a chunk created onto broker 2, then onto "
            f"broker 3, after each third ({layout_of}; the last is the active chunk), filled in "
            f"{d.fill_s:.1f} s; the same records in a one-partition topic led by broker 1, filled "
            f"in {d.single_fill_s:.1f} s. `spark.read.format(\"kafka-ext\")` with local[2] as in "
            "bench_spark.py, bootstrap = the three brokers, `count(*), sum(length(value))`; "
            "time includes planning; one unmeasured read of each topic first, then "
            f"{a.runs} rounds alternating the three reads; the median read of each is shown; "
            "tasks = the scan stage's task count from Spark's status tracker; CPU from "
            "/proc):", "",
            "| data | tasks | records/s | MB/s | seconds | vs one partition | brokers' CPU s "
            "(1 / 2 / 3) | Spark CPU s (JVM + workers) | others | seconds of each read |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
        ]
        base = _median_read(r.spark, ONE)
        for layout in (CHUNKED, ONE, ONE_SPLIT):
            if not any(x.layout == layout for x in r.spark):
                continue
            m = _median_read(r.spark, layout)
            each = ", ".join(f"{x.seconds:.2f}" for x in r.spark if x.layout == layout)
            cpu = " / ".join(f"{m.broker_cpu_s[n]:.2f}" for n in sorted(m.broker_cpu_s))
            lines.append(f"| {layout} | {m.tasks} | {m.rows_per_s:,.0f} | **{m.mb_per_s:.1f}** | "
                         f"{m.seconds:.2f} | {m.rows_per_s / base.rows_per_s:.2f}x | {cpu} | "
                         f"{m.spark_cpu_s:.1f} | {m.others:.0%} | {each} |")
        if d.alone:
            lines += ["", "Without Spark: the planned tasks read one after another in the "
                      "benchmark process by the source's own task code (`reader.read_task`: a "
                      "librdkafka consumer, its records into Arrow batches), median of "
                      f"{len(next(iter(d.alone.values())))} rounds:", "",
                      "| data | each task (the broker it reads from) | all tasks | records/s |",
                      "|---|---|---:|---:|"]
        for layout, rounds in d.alone.items():
            per_task = ", ".join(
                f"{statistics.median(x[i].seconds for x in rounds):.2f} s ({rounds[0][i].node})"
                for i in range(len(rounds[0])))
            lines.append(f"| {layout} | {per_task} | {d.alone_s(layout):.2f} s | "
                         f"{d.rows / d.alone_s(layout):,.0f} |")
        lines += ["", f"librdkafka in the Spark tasks logged {d.lease_notices} \"preferred replica "
                  "... lease changing too quickly ... backing off next fetch\" notices over the "
                  "run (a task bootstrapped at a chunk's replica prefetches past the chunk's end "
                  "and is sent on to the next chunk's replica; the task stops at its end offset "
                  "anyway).", ""]
    if r.log_findings:
        lines += ["Warnings and errors in the brokers' logs over the run (grouped; numbers "
                  "masked as N): " + "; ".join(f"`{x}`" for x in r.log_findings) + ".", ""]
    else:
        lines += ["The brokers logged no warning or error over the run.", ""]
    if r.problems:
        lines += ["Problems the cluster reported at shutdown: "
                  + "; ".join(p.splitlines()[0] for p in r.problems), ""]
    lines += [reading(r), ""]
    return "\n".join(lines)


def _cores(read: SparkRead) -> float:
    """Share of the two cores the read's processes (brokers and Spark) kept busy."""
    return (sum(read.broker_cpu_s.values()) + read.spark_cpu_s) / read.seconds / 2


def reading(r: Report) -> str:
    """The reading of the numbers, its figures (and the words that compare them) from this run."""
    parts = ["**Reading the numbers.**"]
    clean = [c for c in r.chunks if c.clean]
    dirty = [c for c in r.chunks if not c.clean]
    if clean:
        fast, slow = min(c.writable_s for c in clean), max(c.writable_s for c in clean)
        flat = slow < 3 * fast or slow - fast < 0.05
        parts.append(
            f"*Chunk creation* after a sync took {', '.join(_t(c.writable_s) for c in clean)} "
            f"until broker 2 acknowledged an acks=all write, for "
            f"{', '.join(_mb(c.fill.log_bytes) for c in clean)}: "
            + ("flat in the partition's size. " if flat else "not flat here; see the others "
               "column for what else ran. ")
            + "Nothing is copied: broker 1 refuses appends, the controller commits a ChunkRecord "
            "and a PartitionChangeRecord, broker 2 opens an empty log at the start offset when "
            "its metadata shows it leads, and broker 1 seals its log in place (a rename; the fsync "
            "of its tail runs in the background). "
            "What bounds it is metadata: the forward to the controller, the quorum commit and "
            "the brokers' next metadata fetches, on cores that three brokers share; "
            f"CreateChunks itself answered after {', '.join(_t(c.round_trip_s) for c in clean)}.")
    if r.moves:
        small, large = r.moves[0], r.moves[-1]
        ratio = (f", {large.done_s / clean[-1].writable_s:,.0f}x the chunk's"
                 if clean else "")
        parts.append(
            f"*The move grows with the data:* {', '.join(_t(m.done_s) for m in r.moves)} for "
            f"{', '.join(_mb(m.fill.log_bytes) for m in r.moves)} ({_t(large.done_s)} at the "
            f"largest size{ratio}). Broker 3 copies every byte through replica fetches (1 MiB "
            f"per partition per fetch) at {large.copy_mb_per_s:,.0f} MB/s for the largest; the "
            "source is in the page cache, so the copy is bound by the leader's reads and the "
            "follower's fetch-and-append path on the shared cores, not by the disk; a small "
            f"move is fixed cost ({_t(small.done_s)}: the ISR join and the controller's "
            "completion reaching the brokers).")
    if dirty:
        worst = max(dirty, key=lambda c: c.stall_s)
        held = [c for c in dirty if c.writable_s > 0.1 and max(c.stall_s, c.stall2_s) > 0.05]
        free = [c for c in dirty if c.writable_s <= 0.1 and max(c.stall_s, c.stall2_s) > 0.05]
        per_mb = [c.stall_s / c.dirty_mb for c in dirty if c.dirty_mb > 100]

        def case(c: ChunkCase) -> str:
            return (f"{_mb(c.fill.log_bytes)} with {c.dirty_mb:,.0f} MB dirty: answered after "
                    f"{_t(c.round_trip_s)}, broker 1 stalled {_t(c.stall_s)}, broker 2 "
                    f"writable after {_t(c.writable_s)}")

        text = (
            "*Just filled.* The seal renames the closed chunk's log and reopens it at once; the "
            "fsync of its unsynced tail runs in the background, off broker 1's event loop (the "
            "stalled column: the longest answer; "
            f"{_t(max(c.stall_s for c in clean))} at most after a sync). Right after a fill: "
            + "; ".join(case(c) for c in dirty) + ". ")
        if per_mb and worst.stall_s > 0.05:
            text += (f"Broker 1 still stalled up to {_t(worst.stall_s)} "
                     f"(~{statistics.median(per_mb) * 1000:.2f} ms per dirty MB): with one "
                     "filesystem under three brokers, the metadata writes on the loop (the "
                     "rename, the new log's files) wait behind the background fsync in the "
                     "journal; ")
        else:
            text += "The dirty bytes no longer stall broker 1: "
        text += ("a partition written over hours has only its active segment's recent tail "
                 "(bounded by log.segment.bytes) past its recovery point anyway. ")
        if free:
            text += ("Broker 2 took writes long before the seal ended in "
                     + ", ".join(_mb(c.fill.log_bytes) for c in free)
                     + ": the new chunk does not wait for the old one. ")
        for c in held:
            why = []
            if c.stall2_s > 0.5 * c.writable_s:
                why.append(
                    f"broker 2's own loop stalled {_t(c.stall2_s)}: it creates the new chunk's "
                    "log in its metadata listener, which fsyncs the log's partition.metadata, "
                    "and on this machine's one shared filesystem that small fsync likely waits "
                    "behind broker 1's large background one (the journal); brokers on their own "
                    "disks would not wait for each other")
            if r.controller == 1 and c.stall_s > 0.05:
                why.append(
                    "broker 1 was also the active controller (the quorum leader), so its stalled "
                    "loop held back the commit's news to broker 2 if it had not fetched it "
                    "before the stall began")
            text += (f"In {_mb(c.fill.log_bytes)} broker 2 became writable only after "
                     f"{_t(c.writable_s)}: " + ("; ".join(why) if why else
                                               "why is not shown by this run") + ". ")
        trouble = [x for x in r.log_findings if re.search(r"fenc|elect|heartbeat", x, re.I)]
        limits = (f"the quorum fetch timeout "
                  f"({FAST_QUORUM['controller.quorum.fetch.timeout.ms']} ms here) and the "
                  f"broker session timeout ({FAST_QUORUM['broker.session.timeout.ms']} ms)")
        longest = max(max(c.stall_s, c.stall2_s) for c in dirty)
        text += (f"The longest stall of either broker was {_t(longest)}; " + (
            f"the brokers logged quorum or session trouble ({len(trouble)} kinds of line, "
            "listed above). " if trouble else
            f"no broker logged an election, a missed heartbeat or a fencing ({limits} are the "
            "limits that matter)."))
        parts.append(text)
    if r.chunks:
        stock = [c.stock_s - c.round_trip_s for c in r.chunks]
        parts.append(
            f"*A stock producer* whose record was sent when CreateChunks answered had it "
            f"delivered {_t(min(stock))} to {_t(max(stock))} later: broker 1 refuses it "
            "(NOT_LEADER_OR_FOLLOWER), librdkafka refreshes its metadata and retries to broker "
            "2 after its backoff, as after any leader change.")
    if r.spark:
        chunked, one, split = (_median_read(r.spark, x) for x in (CHUNKED, ONE, ONE_SPLIT))
        ratio = chunked.rows_per_s / one.rows_per_s
        split_ratio = split.rows_per_s / one.rows_per_s
        verdict = ("faster than" if ratio >= 1.15 else "slower than" if ratio <= 0.87
                   else "about as fast as")
        vs_split = chunked.rows_per_s / split.rows_per_s
        brokers_s = sum(chunked.broker_cpu_s.values())
        d = r.spark_data
        alone_alike = None
        alone = ""
        if d is not None and CHUNKED in d.alone and ONE_SPLIT in d.alone:
            a_c, a_s = d.alone_s(CHUNKED), d.alone_s(ONE_SPLIT)
            alone_alike = abs(a_c / a_s - 1) < 0.2
            alone = (f"read without Spark, one after another, the chunk tasks took {a_c:.2f} s "
                     f"and the one leader's three ranges {a_s:.2f} s"
                     + (": the read path is about as fast from the chunks' brokers (an inactive "
                        "chunk's task is first sent from the leader to the chunk's replica "
                        "with PreferredReadReplica, one round trip)" if alone_alike else
                        f" ({a_c / a_s:.2f}x): the chunk read path itself differs"))
        if abs(vs_split - 1) < 0.15:
            spread = ("spreading the chunks over three brokers gained nothing here that cutting "
                      "the one partition into as many tasks did not: the read is bound by the "
                      "cores Spark shares, not by any one broker" + (f"; {alone}" if alone
                                                                      else ""))
        elif vs_split > 1:
            spread = (f"reading from three brokers beat three tasks on one leader by "
                      f"{vs_split:.2f}x" + (f"; {alone}" if alone else ""))
        else:
            runs = sorted(x.seconds for x in r.spark if x.layout == CHUNKED)
            overlap = runs[0] <= split.seconds
            spread = (f"the chunked read was {vs_split:.2f}x the three tasks on one leader "
                      + (f"(its runs, {runs[0]:.2f}-{runs[-1]:.2f} s, overlap the split read's "
                         f"{split.seconds:.2f} s)" if overlap else "in every run")
                      + (f"; {alone}" if alone else "")
                      + ("; so the gap is in how the tasks ran under Spark on the shared "
                         "cores, which this run does not break down" if alone_alike else ""))
        parts.append(
            f"*Spark.* The chunked partition was read by {chunked.tasks} tasks (one per chunk, "
            f"each from the chunk's broker) at {chunked.rows_per_s:,.0f} records/s, "
            f"{chunked.mb_per_s:.1f} MB/s: {verdict} the one partition read by "
            f"{one.tasks} task from its leader ({one.mb_per_s:.1f} MB/s, {ratio:.2f}x), and "
            f"the one partition cut into {split.tasks} offset ranges on its leader did "
            f"{split.mb_per_s:.1f} MB/s ({split_ratio:.2f}x). The brokers and Spark kept "
            f"{_cores(chunked):.0%} of the two cores busy during the chunked read and "
            f"{_cores(one):.0%} during the single-task one (brokers {brokers_s:.2f} and "
            f"{sum(one.broker_cpu_s.values()):.2f} CPU s, Spark {chunked.spark_cpu_s:.1f} and "
            f"{one.spark_cpu_s:.1f})"
            + (f", while other processes took {statistics.median(x.others for x in r.spark):.0%} "
               "of the CPUs (median over the reads): the Spark numbers are lower than a quiet "
               "machine's" if statistics.median(x.others for x in r.spark) > 0.2 else "")
            + (": serving from the page cache costs the brokers little, the work is Spark's "
               "(a Python worker's librdkafka consume into Arrow, the JVM's rows and aggregate)"
               if brokers_s < 0.25 * chunked.spark_cpu_s else "")
            + ". local[2] runs two tasks at a time, beside the JVM, on two cores shared with "
            f"the brokers, and three equal tasks take two waves; {spread}. Chunks on different "
            "brokers pay off where brokers and task slots have cores (and disks) of their own.")
    return " ".join(parts)


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 / 100 / 300 MB partitions, 60 MB for Spark")
    parser.add_argument("--sizes", default=None,
                        help="partition sizes in MB, comma-separated (10,1000,5000)")
    parser.add_argument("--spark-mb", type=float, default=None,
                        help="MB of values for the Spark reads (600; quick 60; 0: skip)")
    parser.add_argument("--runs", type=int, default=3, help="Spark reads per layout (median)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the cluster's directory (node logs) and print its path")
    parser.add_argument("--no-write", action="store_true", help="print, leave RESULTS.md alone")
    args = parser.parse_args()
    sizes_mb = ([float(s) for s in args.sizes.split(",")] if args.sizes
                else QUICK_SIZES_MB if args.quick else SIZES_MB)
    if args.spark_mb is None:
        args.spark_mb = QUICK_SPARK_MB if args.quick else SPARK_MB
    root = Path(tempfile.mkdtemp(prefix="bench-chunks-"))
    report = Report(args, [int(s * 1e6) for s in sizes_mb], load_before=_load_average(),
                    free_before=disk_free(root))
    for size in list(report.sizes):  # the move case holds two copies
        try:
            check_disk(root, 2 * size, f"a {_mb(size)} partition")
        except RuntimeError as exc:
            print(f"refused: {exc}", file=sys.stderr)
            report.sizes.remove(size)
            report.refused_sizes.append(size)
    if args.spark_mb:
        check_disk(root, int(2 * args.spark_mb * 1e6), "the Spark data")
    processes_before = _process_table()
    began = time.perf_counter()
    try:
        cluster, _direct = start_cluster(root / "cluster", False, None)
        try:
            report.controller = active_controller(cluster)
            for size in report.sizes:
                for run in (lambda s=size: chunk_case(cluster, s, clean=False),
                            lambda s=size: chunk_case(cluster, s, clean=True),
                            lambda s=size: move_case(cluster, root, s)):
                    check_disk(root, 2 * size, f"a {_mb(size)} partition")
                    case, others = measured(cluster, run)
                    case.others = others
                    (report.moves if isinstance(case, MoveCase) else report.chunks).append(case)
            if args.spark_mb:
                report.spark_data, report.spark = bench_spark_reads(
                    cluster, int(args.spark_mb * 1e6), args.runs, root)
            report.others_cpu = other_processes(processes_before, _process_table())
        finally:
            report.problems = cluster.close()
            report.log_findings = log_findings(cluster)
    finally:
        if args.keep:
            print(f"cluster kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    report.wall_s = time.perf_counter() - began
    report.load_after = _load_average()
    for line in report.problems + report.log_findings:
        print(line, file=sys.stderr)
    section = render(report)
    print(section)
    if not args.no_write:
        write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    main()
