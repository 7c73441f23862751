"""Diskless topics on three nodes (issue 19 items 2 and 6), on real processes on loopback:

- produce throughput and latency (acks=all) with one producer per gateway on three brokers,
  beside the same producers all sending through one broker;
- Diskless coordinator failover: kill -9 the leader of `__diskless_metadata` partition 0 under
  a steady producer; the longest gap between successful acks, and the new leader's load time
  from its log; again after a fill phase has grown `__diskless_metadata`;
- read_committed fetch beside read_uncommitted on transactional data (90% committed, 10%
  aborted transactions of 100 records).

The cluster is tests/cluster/conftest.py's Cluster: three combined nodes in three racks, so a
producer whose client.id carries `diskless_az=<rack>` is led to that rack's broker (docs/
diskless.md, "The client's rack"). Writes the "## Diskless on three nodes" section of
bench/RESULTS.md (only that section).

    python bench/bench_diskless_cluster.py           # about 3.5 minutes
    python bench/bench_diskless_cluster.py --quick   # shorter runs, fewer repetitions (2 min)
    python bench/bench_diskless_cluster.py --no-write
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from bench_broker import (  # noqa: E402
    CLOCK_TICKS_PER_S,
    _client_version,
    _load_average,
    write_section,
)

from tests.cluster.conftest import Cluster, Node  # noqa: E402
from tests.cluster.test_replication import REPLICATION, partition_state  # noqa: E402

SECTION_TITLE = "## Diskless on three nodes"
SEED = 19
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
COORDINATORS = 3  # diskless.metadata.topic.num.partitions: one per broker once led evenly
WAL_MAX_MS = 20
BROKER_CONFIG = {
    **REPLICATION,
    "diskless.metadata.topic.num.partitions": str(COORDINATORS),
    "diskless.metadata.topic.replication.factor": "3",
    "diskless.wal.max.ms": str(WAL_MAX_MS),
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
}
TOPIC = "bench-diskless"
PARTITIONS = 6
VALUE_BYTES = 1024
PRODUCER_CONFIG = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                   "compression.type": "none", "enable.idempotence": False,
                   "queue.buffering.max.messages": 1_000_000,
                   "queue.buffering.max.kbytes": 32_768,  # bounds queueing in the latency
                   "statistics.interval.ms": 1000}
FAILOVER_RATE_PER_S = 500  # the steady producer during a failover
FAILOVER_VALUE_BYTES = 256
FAILOVER_TIMEOUT_S = 60.0
TXN_TOPIC = "bench-diskless-txn"
TXN_PARTITIONS = 3
TXN_RECORDS = 100  # per transaction
TXN_ABORT_SHARE = 0.1
# The first nodes to start retry creating __diskless_metadata until three brokers registered.
STARTUP_ERROR = re.compile(r"could not create internal topic __diskless_metadata: "
                           r"INVALID_REPLICATION_FACTOR")
LOAD_LINE = re.compile(r"^\[(\S+ \S+)\] INFO loaded __diskless_metadata-(\d+) \(epoch "
                       r"(\d+)\): (\d+) records up to offset (\d+) in ([0-9.]+) s", re.M)


@dataclass(slots=True, frozen=True)
class Scale:
    """How long each part runs, and how often."""

    produce_s: float
    rounds: int
    failovers: int
    fill_s: float
    txns_per_producer: int
    consume_rounds: int


FULL = Scale(produce_s=8.0, rounds=2, failovers=3, fill_s=30.0, txns_per_producer=250,
             consume_rounds=5)
QUICK = Scale(produce_s=4.0, rounds=1, failovers=2, fill_s=15.0, txns_per_producer=100,
              consume_rounds=2)


def warm_followers() -> bool:
    """Whether this tree's brokers keep followers' coordinator databases warm (follower.py)."""
    return importlib.util.find_spec("kafka_ext.coordinator.diskless.follower") is not None


def cpu_seconds(node: Node) -> float:
    """utime + stime of a node's process, from /proc/<pid>/stat."""
    assert node.proc is not None
    stat = Path(f"/proc/{node.proc.pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def cluster_cpu(cluster: Cluster) -> float:
    return sum(cpu_seconds(n) for n in cluster.brokers if n.alive)


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except KafkaException:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def create_diskless_topic(cluster: Cluster, name: str, partitions: int) -> None:
    nodes = cluster.brokers
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config={"diskless.enable": "true"})],
                        operation_timeout=30)[name].result(60)

    def everywhere() -> bool:
        for n in nodes:
            topic = AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(
                name, timeout=5).topics.get(name)
            if topic is None or topic.error is not None or len(topic.partitions) != partitions \
                    or any(p.leader < 0 for p in topic.partitions.values()):
                return False
        return True
    wait_until(everywhere, 30, f"{name} on every broker")


def coordinator_leader(node: Node) -> int:
    return partition_state(node, "__diskless_metadata")[0][0]


def wait_coordinators_in_sync(cluster: Cluster, timeout_s: float = 60) -> None:
    """Until every `__diskless_metadata` partition has a live leader and all three in its ISR."""
    live = [n for n in cluster.brokers if n.alive]

    def in_sync() -> bool:
        state = partition_state(live[0], "__diskless_metadata")
        return len(state) == COORDINATORS and all(
            leader >= 0 and isr == [1, 2, 3] for leader, _r, isr in state.values())
    wait_until(in_sync, timeout_s, "__diskless_metadata fully in sync")


# -- produce throughput ----------------------------------------------------------------------


def _rtt_windows(stats_json: str, into: list[tuple[int, float, float]]) -> None:
    """(node id, p50 ms, p99 ms) of request round trips to each broker in one stats window."""
    stats = json.loads(stats_json)
    for broker in stats.get("brokers", {}).values():
        rtt = broker.get("rtt", {})
        if broker.get("nodeid", -1) >= 0 and rtt.get("cnt", 0) > 0:
            into.append((broker["nodeid"], rtt["p50"] / 1000, rtt["p99"] / 1000))


def produce_worker(bootstrap: str, client_id: str, topic: str, duration_s: float,
                   start_at: float, out: Any) -> None:
    """Produce as fast as the client takes messages for `duration_s`, from wall time `start_at`
    (so the producers of a run start together), then flush; report through `out`."""
    rtts: list[tuple[int, float, float]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         **PRODUCER_CONFIG, "stats_cb": lambda s: _rtt_windows(s, rtts)})
    producer.list_topics(topic, timeout=30)
    warm: list[Any] = []
    producer.produce(topic, b"warm-up", on_delivery=lambda err, _m: warm.append(err))
    producer.flush(60)
    leaders = sorted({p.leader for p in producer.list_topics(topic, timeout=30)
                      .topics[topic].partitions.values()})
    rtts.clear()
    latencies_ms: list[float] = []
    errors: list[str] = []
    delivered = 0
    rng = random.Random(SEED)

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(str(err))
            return
        delivered += 1
        if delivered % 50 == 0:  # a sample keeps the callback cheap at full speed
            sent_ns = int.from_bytes(msg.value()[:8], "big")
            latencies_ms.append((time.monotonic_ns() - sent_ns) / 1e6)

    padding = rng.randbytes(VALUE_BYTES - 8)
    while time.time() < start_at:
        time.sleep(0.001)
    started = time.perf_counter()
    end = started + duration_s
    sent = 0
    produce = producer.produce
    while time.perf_counter() < end:
        try:
            produce(topic, time.monotonic_ns().to_bytes(8, "big") + padding,
                    on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.001)
            continue
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed_s = time.perf_counter() - started
    out.send({"delivered": delivered, "elapsed_s": elapsed_s, "remaining": remaining,
              "errors": errors[:5], "error_count": len(errors), "latencies_ms": latencies_ms,
              "rtts": [(p50, p99) for node_id, p50, p99 in rtts if node_id in leaders],
              "leaders": leaders, "warm_errors": [str(e) for e in warm if e]})


@dataclass(slots=True)
class ProduceRun:
    case: str
    messages: int
    elapsed_s: float  # the slowest producer's, flush included
    latencies_ms: list[float]
    rtts: list[tuple[float, float]]
    broker_cpu_s: float
    leaders: list[list[int]]
    errors: list[str]

    @property
    def mb_per_s(self) -> float:
        return self.messages * VALUE_BYTES / self.elapsed_s / 1e6

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.elapsed_s


def run_produce(cluster: Cluster, case: str, racks: list[str], duration_s: float) -> ProduceRun:
    """One producer process per entry of `racks`, each bootstrapped at a different node and
    marked `diskless_az=<rack>`, so its partitions' leader is that rack's broker."""
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 4.0  # spawn, connect and warm up first
    procs, pipes = [], []
    for i, rack in enumerate(racks):
        receiver, sender = ctx.Pipe(duplex=False)
        node = cluster.brokers[i % len(cluster.brokers)]
        proc = ctx.Process(target=produce_worker, args=(
            node.bootstrap, f"bench-{i},diskless_az={rack}", TOPIC, duration_s, start_at,
            sender))
        proc.start()
        procs.append(proc)
        pipes.append(receiver)
    while time.time() < start_at:
        time.sleep(0.001)
    cpu_before = cluster_cpu(cluster)
    results = [pipe.recv() for pipe in pipes]
    cpu_s = cluster_cpu(cluster) - cpu_before
    for proc in procs:
        proc.join()
    errors = [e for r in results for e in r["errors"] + r["warm_errors"]]
    if any(r["remaining"] for r in results):
        errors.append(f"undelivered after flush: {[r['remaining'] for r in results]}")
    run = ProduceRun(case, sum(r["delivered"] for r in results),
                     max(r["elapsed_s"] for r in results),
                     [x for r in results for x in r["latencies_ms"]],
                     [(x[0], x[1]) for r in results for x in r["rtts"]],
                     cpu_s, [r["leaders"] for r in results], errors)
    print(f"{case}: {run.messages_per_s:,.0f} msg/s {run.mb_per_s:.1f} MB/s, leaders "
          f"{run.leaders}, p50/p99 {_q(run.latencies_ms, 50):.0f}/{_q(run.latencies_ms, 99):.0f}"
          f" ms, cluster CPU {cpu_s / run.elapsed_s:.0%}, errors {errors[:3]}", flush=True)
    return run


def _q(values: list[float], pct: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


# -- coordinator failover --------------------------------------------------------------------


@dataclass(slots=True)
class Failover:
    phase: str
    victim: int
    new_leader: int
    controller: int  # the active KRaft controller at the kill: the victim too, or not
    gap_s: float  # the longest gap between successful acks around the kill
    kill_to_ack_s: float  # from the kill to the end of the last gap over 200 ms
    kill_to_leader_s: float  # from the kill until the gateway's Metadata names a new leader
    load_s: float | None  # the new leader's "loaded __diskless_metadata-0 ... in x s"
    load_records: int | None
    metadata_end_offset: int | None
    delivery_errors: list[str] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)


def _load_lines(node: Node) -> list[tuple[int, int, int, int, float]]:
    """(partition, epoch, records, end offset, seconds) of every coordinator load it logged."""
    try:
        text = node.log_path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [(int(p), int(e), int(r), int(o), float(s))
            for _t, p, e, r, o, s in LOAD_LINE.findall(text)]


def run_failover(cluster: Cluster, phase: str) -> Failover:
    """A producer at FAILOVER_RATE_PER_S through a broker that survives; kill -9 coordinator 0's
    leader after 2 s; stop once acks have flowed again for 2 s."""
    victim_id = coordinator_leader(cluster.brokers[0])
    victim = cluster.nodes[victim_id]
    controller = cluster.wait_for_leader(cluster.brokers)
    gateway = next(n for n in cluster.brokers if n.node_id != victim_id)
    loads_before = {n.node_id: len(_load_lines(n)) for n in cluster.brokers}
    acks: list[float] = []
    delivery_errors: list[str] = []
    client_errors: list[str] = []
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all",
                         "linger.ms": 1, "enable.idempotence": False,
                         "client.id": f"failover,diskless_az={RACKS[gateway.node_id]}",
                         "message.timeout.ms": 120_000, "retry.backoff.ms": 20,
                         "retry.backoff.max.ms": 100,
                         "error_cb": lambda e: client_errors.append(str(e))})
    producer.list_topics(TOPIC, timeout=30)

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acks.append(time.monotonic())
        else:
            delivery_errors.append(str(err))

    value = random.Random(SEED).randbytes(FAILOVER_VALUE_BYTES)
    interval_s = 1 / FAILOVER_RATE_PER_S
    moved = _LeaderWatch(gateway, victim_id)
    started = time.monotonic()
    killed_at: float | None = None
    deadline = started + FAILOVER_TIMEOUT_S
    i = 0
    while time.monotonic() < deadline:
        due = started + i * interval_s
        while (now := time.monotonic()) < due:
            producer.poll(max(0.0, due - now - 0.0002))
        producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
        i += 1
        if killed_at is None and now - started >= 2.0:
            victim.kill()
            killed_at = time.monotonic()
        if killed_at is not None and i % 100 == 0 and _recovered(acks, killed_at, now):
            break
    producer.flush(120)
    moved.stop()
    assert killed_at is not None
    window = [t for t in acks if t >= killed_at - 1.0]
    gaps = [(b - a, b) for a, b in zip(window, window[1:], strict=False)]
    if acks and acks[-1] > killed_at:
        gap_s = max(gaps)[0] if gaps else 0.0
        stalls = [end for g, end in gaps if g > 0.2]
        kill_to_ack_s = (stalls[-1] if stalls else killed_at) - killed_at
    else:
        gap_s = kill_to_ack_s = float("inf")
    new_leader = coordinator_leader(gateway)
    loads = [x for n in cluster.brokers if n.node_id == new_leader
             for x in _load_lines(n)[loads_before[n.node_id]:] if x[0] == 0]
    load = loads[-1] if loads else None
    kill_to_leader_s = (moved.moved_at - killed_at) if moved.moved_at else float("inf")
    result = Failover(phase, victim_id, new_leader, controller, gap_s, kill_to_ack_s,
                      kill_to_leader_s,
                      load[4] if load else None, load[2] if load else None,
                      load[3] if load else None, delivery_errors[:5], client_errors[:5])
    print(f"failover ({phase}): victim {victim_id} -> {new_leader} (controller {controller}), gap {gap_s * 1000:.0f} ms, "
          f"kill to ack {kill_to_ack_s * 1000:.0f} ms, kill to new leader in Metadata "
          f"{kill_to_leader_s * 1000:.0f} ms, load {result.load_s} s of "
          f"{result.load_records} records (end offset {result.metadata_end_offset}), "
          f"{len(delivery_errors)} delivery errors {delivery_errors[:2]}, client errors "
          f"{client_errors[:3]}", flush=True)
    victim.start()
    victim.wait_ready()
    wait_coordinators_in_sync(cluster)
    return result


class _LeaderWatch:
    """A thread asking one broker every 50 ms who leads `__diskless_metadata` partition 0; keeps
    the first time the answer is a live leader other than `victim`."""

    def __init__(self, node: Node, victim: int) -> None:
        self.moved_at: float | None = None
        self._victim = victim
        self._admin = AdminClient({"bootstrap.servers": node.bootstrap})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.moved_at is None:
            try:
                topic = self._admin.list_topics("__diskless_metadata", timeout=2).topics[
                    "__diskless_metadata"]
                leader = topic.partitions[0].leader
            except (KafkaException, KeyError):
                leader = -1
            if leader >= 0 and leader != self._victim:
                self.moved_at = time.monotonic()
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _recovered(acks: list[float], killed_at: float, now: float) -> bool:
    """Acks have flowed for 2 s since the longest gap after the kill, and that gap was a stall
    (over 200 ms), or 15 s have passed with acks flowing."""
    window = [t for t in acks if t >= killed_at - 1.0]
    if len(window) < 2 or now - window[-1] > 0.2:
        return False
    gap_s, gap_end = max((b - a, b) for a, b in zip(window, window[1:], strict=False))
    return window[-1] - gap_end >= 2.0 and (gap_s > 0.2 or now - killed_at > 15)


def fill(cluster: Cluster, seconds: float) -> int:
    """Grow `__diskless_metadata`: full-speed produce through all three brokers; each WAL
    object (sealed by size or by diskless.wal.max.ms) adds a commit record per coordinator."""
    run = run_produce(cluster, "fill", [RACKS[1], RACKS[2], RACKS[3]], seconds)
    return run.messages


# -- read_committed --------------------------------------------------------------------------


def txn_worker(bootstrap: str, transactional_id: str, rack: str, txns: int, seed: int,
               out: Any) -> None:
    """`txns` transactions of TXN_RECORDS records spread over the partitions; a seeded
    TXN_ABORT_SHARE of them aborted. Reports (committed, aborted) record counts or the error."""
    rng = random.Random(seed)
    value = rng.randbytes(VALUE_BYTES)
    committed = aborted = 0
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                             "client.id": f"{transactional_id},diskless_az={rack}",
                             "linger.ms": 5, "acks": "all"})
        producer.init_transactions(60)
        started = time.perf_counter()
        for _ in range(txns):
            producer.begin_transaction()
            for r in range(TXN_RECORDS):
                producer.produce(TXN_TOPIC, value, partition=r % TXN_PARTITIONS)
            if rng.random() < TXN_ABORT_SHARE:
                producer.flush(60)  # the records reach the log, then the abort marker
                producer.abort_transaction(60)
                aborted += TXN_RECORDS
            else:
                producer.commit_transaction(60)
                committed += TXN_RECORDS
        out.send({"committed": committed, "aborted": aborted,
                  "elapsed_s": time.perf_counter() - started, "error": None})
    except KafkaException as exc:
        out.send({"committed": committed, "aborted": aborted, "elapsed_s": 0.0,
                  "error": repr(exc.args[0])})


@dataclass(slots=True)
class TxnFill:
    committed: int
    aborted: int
    elapsed_s: float
    errors: list[str]


def fill_transactions(cluster: Cluster, txns_per_producer: int) -> TxnFill:
    """Three transactional producers, one per gateway, in parallel."""
    create_diskless_topic(cluster, TXN_TOPIC, TXN_PARTITIONS)
    ctx = multiprocessing.get_context("spawn")
    procs, pipes = [], []
    for i, node in enumerate(cluster.brokers):
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=txn_worker, args=(node.bootstrap, f"bench-txn-{i}",
                                                    RACKS[node.node_id], txns_per_producer,
                                                    SEED + i, sender))
        proc.start()
        procs.append(proc)
        pipes.append(receiver)
    results = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    result = TxnFill(sum(r["committed"] for r in results), sum(r["aborted"] for r in results),
                     max(r["elapsed_s"] for r in results),
                     [r["error"] for r in results if r["error"]])
    print(f"transactions: {result.committed} committed, {result.aborted} aborted records in "
          f"{result.elapsed_s:.1f} s, errors {result.errors}", flush=True)
    return result


@dataclass(slots=True)
class ConsumeRun:
    isolation: str
    records: int
    elapsed_s: float
    first_record_s: float  # from the consumer's start to its first record
    broker_cpu_s: float
    complete: bool

    @property
    def records_per_s(self) -> float:
        """From the first record on: the start-up (metadata, ListOffsets) is left out."""
        return self.records / (self.elapsed_s - self.first_record_s)


def run_consume(cluster: Cluster, isolation: str, expected: int, rack: str) -> ConsumeRun:
    """A fresh consumer reads TXN_TOPIC from the start until `expected` records arrived."""
    node = cluster.brokers[0]
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"bench-{isolation}",
                         "client.id": f"bench-consumer,diskless_az={rack}", "client.rack": rack,
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                         "fetch.queue.backoff.ms": 1})
    consumer.assign([TopicPartition(TXN_TOPIC, p, OFFSET_BEGINNING)
                     for p in range(TXN_PARTITIONS)])
    cpu_before = cluster_cpu(cluster)
    started = time.perf_counter()
    deadline = started + 60
    received = 0
    first_at = 0.0
    try:
        while received < expected and time.perf_counter() < deadline:
            for msg in consumer.consume(10000, 0.2):
                if msg.error() is None:
                    if not received:
                        first_at = time.perf_counter()
                    received += 1
        elapsed_s = time.perf_counter() - started
        cpu_s = cluster_cpu(cluster) - cpu_before
    finally:
        consumer.close()
    run = ConsumeRun(isolation, received, elapsed_s, first_at - started, cpu_s,
                     received == expected)
    print(f"consume {isolation}: {received}/{expected} records in {elapsed_s:.2f} s, first "
          f"after {run.first_record_s:.2f} s "
          f"= {run.records_per_s:,.0f}/s, cluster CPU {cpu_s:.2f} s", flush=True)
    return run


# -- report ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    scale: Scale
    produce: dict[str, list[ProduceRun]]
    failovers: list[Failover]
    fill_messages: int
    txn: TxnFill | None
    consume: dict[str, list[ConsumeRun]]
    load_before: str
    load_after: str
    wall_s: float
    problems: list[str]


def _median_run(runs: list[ProduceRun]) -> ProduceRun:
    return sorted(runs, key=lambda r: r.mb_per_s)[len(runs) // 2]


def render(report: Report) -> str:
    s = report.scale
    lines = [
        SECTION_TITLE, "",
        f"`python bench/bench_diskless_cluster.py{' --quick' if s is QUICK else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs shared with other engineers' "
        f"test runs, confluent-kafka {_client_version()}. Three combined nodes "
        "(tests/cluster/conftest.py's Cluster: real processes on loopback, inter-broker traffic "
        "through its Python link proxies) in racks a, b, c; local object store "
        f"(`file://`, one directory shared by the three); {COORDINATORS} Diskless coordinators "
        f"(`diskless.metadata.topic.num.partitions={COORDINATORS}`, replication factor 3), "
        f"`diskless.wal.max.ms={WAL_MAX_MS}`, 8 MiB objects; replica.lag.time.max.ms=2000, "
        "replica.fetch.wait.max.ms=200 and the cluster tests' fast quorum timeouts. Brokers, "
        "producers and consumers all run on the same 2 cores. Warm followers (followers keep "
        "their copy of each coordinator's SQLite database applied, "
        "`kafka_ext/coordinator/diskless/follower.py`): "
        f"{'present in this tree' if warm_followers() else 'absent'}. Whole run "
        f"{report.wall_s:.0f} s; load average before/after: {report.load_before} / "
        f"{report.load_after}.", "",
    ]
    if report.produce:
        three, one = (_median_run(report.produce[c]) for c in ("3 gateways", "1 gateway"))
        lines += [
            f"**Produce** ({PARTITIONS} partitions, three producer processes at full speed for "
            f"{s.produce_s:.0f} s, {VALUE_BYTES} B values, acks=all, linger.ms=5, batch.size=1 MB; "
            "each producer bootstrapped at a different node; `diskless_az=` in its client.id "
            "picks its gateway: one rack each, or all three rack-a; "
            f"{'the faster' if s.rounds == 2 else 'the median'} of {s.rounds} interleaved "
            "rounds; latency = delivery report minus produce(), "
            "1 in 50 messages; request RTT = librdkafka's per-broker Produce round trip, "
            "median over its 1 s windows of the window's p50 and p99; cluster CPU = the three "
            "brokers' CPU seconds per second):", "",
            "| case | msg/s | MB/s | MB/s of each round | message p50 / p99 ms | request RTT "
            "p50 / p99 ms | cluster CPU | leaders seen by the producers | errors |",
            "|---|---:|---:|---|---:|---:|---:|---|---|",
        ]
        for case in ("3 gateways", "1 gateway"):
            runs = report.produce[case]
            r = _median_run(runs)
            rtt50 = statistics.median(x[0] for x in r.rtts) if r.rtts else float("nan")
            rtt99 = statistics.median(x[1] for x in r.rtts) if r.rtts else float("nan")
            lines.append(
                f"| {case} | {r.messages_per_s:,.0f} | {r.mb_per_s:,.1f} | "
                f"{', '.join(f'{x.mb_per_s:.0f}' for x in runs)} | {_q(r.latencies_ms, 50):,.0f}"
                f" / {_q(r.latencies_ms, 99):,.0f} | {rtt50:,.0f} / {rtt99:,.0f} | "
                f"{r.broker_cpu_s / r.elapsed_s:.0%} | {r.leaders} | "
                f"{len(r.errors)} {r.errors[:2] if r.errors else ''} |")
        lines += ["", f"Ratio 3 gateways / 1 gateway: {three.mb_per_s / one.mb_per_s:.2f}x "
                  "throughput.", ""]
    if report.failovers:
        lines += [
            f"**Coordinator failover** (one producer at {FAILOVER_RATE_PER_S} msg/s of "
            f"{FAILOVER_VALUE_BYTES} B round-robin over the {PARTITIONS} partitions, acks=all, "
            "through a broker that survives; after 2 s, kill -9 of the leader of "
            "`__diskless_metadata` partition 0; gap = the longest time between two successful "
            "acks from 1 s before the kill on; kill to ack = from the kill to the end of the last "
            "gap over 200 ms (acks flow steadily after it); load = the new leader's log line `loaded __diskless_metadata-0 ... in x s`, "
            "records replayed; the victim is restarted and back in every ISR before the next "
            f"kill; \"after fill\" runs follow a {s.fill_s:.0f} s full-speed produce through all "
            f"three brokers, {report.fill_messages:,} messages):", "",
            "| run | victim -> new leader | active controller at the kill | gap ms "
            "| kill to new leader in Metadata ms | kill to ack ms | load s | records loaded "
            "| log end offset | delivery errors | client errors |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for n, f in enumerate(report.failovers):
            load = f"{f.load_s:.3f}" if f.load_s is not None else "not logged"
            lines.append(
                f"| {n + 1} ({f.phase}) | {f.victim} -> {f.new_leader} | {f.controller}"
                f"{' (the victim)' if f.controller == f.victim else ''} | {f.gap_s * 1000:,.0f} | "
                f"{f.kill_to_leader_s * 1000:,.0f} | "
                f"{f.kill_to_ack_s * 1000:,.0f} | {load} | {f.load_records} | "
                f"{f.metadata_end_offset} | {len(f.delivery_errors)} "
                f"{'; '.join(f.delivery_errors[:1])} | {'; '.join(f.client_errors[:2])} |")
        lines.append("")
    if report.txn is not None:
        t = report.txn
        lines += [
            f"**read_committed** ({TXN_PARTITIONS} partitions filled by three transactional "
            f"producers, one per gateway, {TXN_RECORDS} records of {VALUE_BYTES} B per "
            f"transaction, a seeded {TXN_ABORT_SHARE:.0%} aborted: {t.committed:,} committed and "
            f"{t.aborted:,} aborted records in {t.elapsed_s:.1f} s"
            + (f"; producer errors: {t.errors}" if t.errors else "")
            + f"; then a fresh consumer reads it all from the start, {s.consume_rounds} "
            "interleaved rounds per isolation level, fetch.max.bytes=50 MiB; cluster CPU = "
            "the three brokers' CPU seconds during the read):", "",
            "| isolation.level | records | records/s from the first record (each round) "
            "| s to the first record | whole read s | cluster CPU s per 100k records |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for iso in ("read_uncommitted", "read_committed"):
            reads = report.consume.get(iso, [])
            if not reads:
                continue
            med = sorted(reads, key=lambda r: r.records_per_s)[len(reads) // 2]
            lines.append(
                f"| {iso} | {med.records:,}{'' if med.complete else ' (incomplete)'} | "
                f"{med.records_per_s:,.0f} ({', '.join(f'{r.records_per_s:,.0f}' for r in reads)})"
                f" | {med.first_record_s:.2f} | {med.elapsed_s:.2f} "
                f"| {med.broker_cpu_s / med.records * 1e5:.2f} |")
        if report.consume.get("read_committed") and report.consume.get("read_uncommitted"):
            rc = statistics.median(r.records_per_s for r in report.consume["read_committed"])
            ru = statistics.median(r.records_per_s for r in report.consume["read_uncommitted"])
            lines += ["", f"Ratio read_committed / read_uncommitted: {rc / ru:.2f}x records/s "
                      "(read_committed delivers only the committed records)."]
        lines.append("")
    if report.problems:
        lines += ["**Problems seen:** " + " ".join(report.problems), ""]
    lines += ["**Reading the numbers.** " + reading(report), ""]
    return "\n".join(lines)


def reading(report: Report) -> str:
    """The paragraph under the tables, with this run's numbers in it."""
    text = ""
    if report.produce:
        three, one = (_median_run(report.produce[c]) for c in ("3 gateways", "1 gateway"))
        text += (
            f"*Gateways.* Three gateways ran at {three.mb_per_s / one.mb_per_s:.2f}x one "
            "gateway. On this machine that ratio cannot show scaling: three brokers and three "
            "producer processes share 2 cores (the brokers alone used "
            f"{three.broker_cpu_s / three.elapsed_s:.0%} and "
            f"{one.broker_cpu_s / one.elapsed_s:.0%} of a core), so spreading the gateways "
            "adds no CPU. What it shows is that three WAL pipelines, each committing its own "
            "objects to the three coordinators over the wire, cost no more than one; the "
            "scaling itself needs a broker per machine. Message latency at full speed is "
            "queueing in the producer (32 MiB buffer each) and the request round trip is of "
            "the same size, since the broker holds each Produce until its object is "
            "committed. ")
    if report.failovers:
        survived = [f for f in report.failovers if f.controller != f.victim]
        both = [f for f in report.failovers if f.controller == f.victim]
        if survived:
            acks = sorted(f.kill_to_ack_s for f in survived)
            moves = sorted(f.kill_to_leader_s for f in survived)
            loads = [f.load_s for f in report.failovers if f.load_s is not None]
            text += (
                "*Failover.* Produce resumed "
                f"{acks[0]:.2f}-{acks[-1]:.2f} s after the kill when the active controller "
                "survived. That time is detection plus a retry, not the load: Metadata named "
                f"the new coordinator {moves[0]:.2f}-{moves[-1]:.2f} s after the kill "
                "(broker.session.timeout.ms=3000 with 500 ms heartbeats, the cluster tests' "
                "setting; Kafka's default of 9 s would make it about 9-10 s), and the gateway's "
                "coordinator client then retries on its own schedule (50 ms doubling to 1 s, so "
                "at 1.55, 2.55, 3.55 s... after the first failure): acks resume at the first "
                "retry after the move, just after one of those times. Up to 1 s of each "
                "failover is that backoff cap. ")
            if loads:
                text += (f"The new leader's load took {min(loads) * 1000:.0f}-"
                         f"{max(loads) * 1000:.0f} ms and replayed "
                         f"{min(f.load_records or 0 for f in report.failovers)}-"
                         f"{max(f.load_records or 0 for f in report.failovers)} records, "
                         "before and after the fill alike")
                text += (": the warm followers had the database applied up to a tenth of a "
                         "second before the kill, so a longer run does not make failover "
                         "slower. " if warm_followers() else ". ")
        if both:
            text += (f"When the victim was also the active KRaft controller "
                     f"({len(both)} run(s)), a controller election came first and the move "
                     f"took {max(f.kill_to_leader_s for f in both):.2f} s. ")
        text += ("No delivery errors reached the application: librdkafka retried through "
                 "the stall. ")
    if report.txn is not None and report.consume.get("read_committed") \
            and report.consume.get("read_uncommitted"):
        rc = statistics.median(r.records_per_s for r in report.consume["read_committed"])
        ru = statistics.median(r.records_per_s for r in report.consume["read_uncommitted"])
        text += (
            f"*read_committed.* Transactions on the diskless topic worked "
            f"({'no producer errors' if not report.txn.errors else report.txn.errors}). "
            f"read_committed read {rc / ru:.2f}x the records per second of read_uncommitted; "
            "both fetch the same bytes (the aborted records are dropped by the client, from "
            "the aborted-transaction list the coordinator answers), and the brokers' CPU per "
            "record is the same within this machine's noise. Each read takes about 0.3 s after "
            "a 0.5 s start, so single rounds vary by tens of percent (see each round). ")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer repetitions")
    parser.add_argument("--no-write", action="store_true", help="leave RESULTS.md alone")
    parser.add_argument("--skip", default="", help="comma list of produce,failover,txn")
    args = parser.parse_args()
    scale = QUICK if args.quick else FULL
    skip = set(filter(None, args.skip.split(",")))
    load_before = _load_average()
    wall_started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-diskless-cluster-"))
    report = Report(scale, {}, [], 0, None, {}, load_before, "", 0.0, [])
    cluster = Cluster(root, combined=3, racks=RACKS, extra={
        **BROKER_CONFIG, "diskless.storage.url": f"file://{root / 'objects'}"})
    try:
        cluster.start()
        create_diskless_topic(cluster, TOPIC, PARTITIONS)
        wait_coordinators_in_sync(cluster)
        if "failover" not in skip:
            for _ in range(scale.failovers):
                report.failovers.append(run_failover(cluster, "short log"))
        if "produce" not in skip:
            report.produce = {"3 gateways": [], "1 gateway": []}
            for round_no in range(scale.rounds):
                cases = [("3 gateways", [RACKS[1], RACKS[2], RACKS[3]]),
                         ("1 gateway", [RACKS[1]] * 3)]
                for case, racks in cases if round_no % 2 == 0 else cases[::-1]:
                    report.produce[case].append(run_produce(cluster, case, racks,
                                                            scale.produce_s))
        if "failover" not in skip:
            report.fill_messages = fill(cluster, scale.fill_s)
            for _ in range(scale.failovers):
                report.failovers.append(run_failover(cluster, "after fill"))
        if "txn" not in skip:
            report.txn = fill_transactions(cluster, scale.txns_per_producer)
            total = report.txn.committed + report.txn.aborted
            for round_no in range(scale.consume_rounds):
                order = [("read_uncommitted", total), ("read_committed", report.txn.committed)]
                for iso, expected in order if round_no % 2 == 0 else order[::-1]:
                    report.consume.setdefault(iso, []).append(
                        run_consume(cluster, iso, expected, RACKS[1]))
    finally:
        for node in cluster.brokers:
            errors = [ln for ln in node.log().splitlines()
                      if " ERROR " in ln and not STARTUP_ERROR.search(ln)]
            if node.alive and errors:
                report.problems.append(f"node {node.node_id} logged {len(errors)} ERROR lines, "
                                       f"e.g. `{errors[0][:300]}`.")
        report.problems += [p[:500] for p in cluster.close()]
        shutil.rmtree(root, ignore_errors=True)
    report.load_after = _load_average()
    report.wall_s = time.perf_counter() - wall_started
    section = render(report)
    print(section)
    if not args.no_write:
        write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    main()
