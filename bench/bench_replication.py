"""Partition replication benchmark (issue 14 item 9), on real processes on loopback:

1. acks=all produce throughput with replication.factor 3 beside 1 on the same 3-node cluster;
2. CPU per GB of the leader (produce) and of each follower (replicate), from /proc;
3. end-to-end latency at 1,000 msg/s with RF 3 and acks=all (RF 1 beside it);
4. unavailability after kill -9 of a partition leader (RF 3, min.insync.replicas=2), until an
   idempotent acks=all producer's next send succeeds; median and max over --kills rounds;
5. reassignment copy rate against `kafka-ext reassign-partitions --throttle`.

One cluster of three combined (broker + controller) `kafka-ext server` processes from
tests/cluster/conftest.py, with the short failover timeouts of the cluster tests. Writes the
"## Partition replication" section of bench/RESULTS.md (only that section, and only when every
measurement ran).

    python bench/bench_replication.py                  # everything: 6 minutes on a quiet
                                                       # machine, ~10 with reruns
    python bench/bench_replication.py --quick          # smaller sizes, 3 kills, ~2 minutes
    python bench/bench_replication.py --only throughput cpu --no-write --replica-lag-ms 2000
                                                       # the tests' ISR lag: followers drop out
    python bench/bench_replication.py --only cpu --no-write --profile-dir /tmp/prof
                                                       # brokers under cProfile

By default replica fetches go straight from broker to broker: the cluster's inter-broker proxy
(a Python relay in this process, there so tests can cut links) is taken out of the advertised
REPLICATION listener before the nodes start. `--through-proxy` keeps it.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
from kafka_ext.client.probe import round_trip  # noqa: E402
from kafka_ext.protocol.api_keys import ApiKey  # noqa: E402
from kafka_ext.protocol.messages import registry  # noqa: E402
from kafka_ext.server.config import BROKER_CONFIGS  # noqa: E402
from tests.cluster.conftest import FAST_QUORUM, Cluster, Node  # noqa: E402

RESULTS_PATH = BENCH_DIR / "RESULTS.md"
SECTION_TITLE = "## Partition replication"
MEASUREMENTS = ("throughput", "cpu", "latency", "reassign", "failover")
REPORT_FIELD = {"throughput": "throughput", "cpu": "cpu", "latency": "latency",
                "reassign": "moves"}
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
VALUE_BYTES = 1024
PARTITIONS = 3
# The producer of the throughput and CPU runs (bench_broker.py's, with acks=all).
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
            "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576}
# tests/cluster/test_replication.py's REPLICATION, but with Kafka's default
# replica.lag.time.max.ms: with the tests' 2 s, followers that fall a few MB behind a full-speed
# producer on these two shared cores leave the ISR, and acks=all then waits for the leader only
# (--replica-lag-ms 2000 shows it). Failover does not depend on it: the controller fences a
# killed broker after broker.session.timeout.ms. Leaderships stay where the benchmark puts them.
CLUSTER_CONFIG = {"replica.lag.time.max.ms": "30000", "replica.fetch.wait.max.ms": "200",
                  "auto.leader.rebalance.enable": "false"}
LATENCY_RATE_PER_S = 1000
LATENCY_WARMUP_S = 1.0  # samples sent in the first second (connections, metadata) are dropped
FAILOVER_RATE_PER_S = 1000
FAILOVER_VALUE_BYTES = 100
POLL_S = 0.01
THROTTLE_BURST_S = 1.0  # replication_quota.BURST_S: a throttle lets a second's worth through at once
ISR_TIMEOUT_S = 120.0
METADATA_VERSION = 12
_METADATA_REQUEST = registry()["MetadataRequest"].cls
_ZERO_UUID = uuid.UUID(int=0)  # Metadata v10+ names topics by name when the id is zero
_SEND_TS = struct.Struct(">q")  # the producer's CLOCK_MONOTONIC ns, first 8 bytes of a value
# cProfile in every broker (--profile-dir): Node.start passes the environment on, and this
# sitecustomize.py (first on PYTHONPATH) profiles the main thread until the process exits.
_PROFILE_HOOK = """\
import atexit, cProfile, os
_dir = os.environ.get("BENCH_PROFILE_DIR")
if _dir:
    _profile = cProfile.Profile()
    _profile.enable()
    atexit.register(lambda: _profile.dump_stats(os.path.join(_dir, f"{os.getpid()}.prof")))
"""


# -- the cluster -----------------------------------------------------------------------------


def cpu_seconds(node: Node) -> float:
    """utime + stime of the node's process, from /proc/<pid>/stat (psutil is not here)."""
    assert node.proc is not None
    stat = Path(f"/proc/{node.proc.pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S  # stat fields 14 and 15


def cpu_snapshot(cluster: Cluster) -> dict[int, float]:
    return {n.node_id: cpu_seconds(n) for n in cluster.brokers}


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (user, nice, system, irq, softirq)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / CLOCK_TICKS_PER_S


class Disturbance:
    """Share of the machine's CPUs that processes outside this benchmark used while a
    measurement ran: the machine's busy time minus the brokers', this process's and its
    finished children's (clients in subprocesses, the CLI)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        t = os.times()
        ours = sum(cpu_snapshot(self.cluster).values()) + t.user + t.system + \
            t.children_user + t.children_system
        return time.monotonic(), machine_busy_s(), ours

    def others(self) -> float:
        """Other processes' CPU seconds per second of the measurement, over all CPUs (0-1)."""
        wall, busy, ours = (b - a for a, b in zip(self._start, self._sample(), strict=True))
        return max(0.0, busy - ours) / wall / (os.cpu_count() or 1)


def bypass_inter_broker_proxy(cluster: Cluster) -> bool:
    """Advertise each broker's own inter-broker listener instead of the test proxy in front of
    it (before the nodes start); False when the config has no such proxy to take out."""
    changed = False
    for node in cluster.brokers:
        path: Path = node.config_path
        settings = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        name = settings.get("inter.broker.listener.name")
        if name is None or "advertised.listeners" not in settings:
            continue
        own = {e.split("://")[0]: e for e in settings["listeners"].split(",")}
        advertised = [own[name] if e.startswith(name + "://") else e
                      for e in settings["advertised.listeners"].split(",")]
        if advertised != settings["advertised.listeners"].split(","):
            settings["advertised.listeners"] = ",".join(advertised)
            path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            changed = True
    return changed


def start_cluster(root: Path, through_proxy: bool, profile_dir: Path | None) -> tuple[Cluster, bool]:
    cluster = Cluster(root, combined=3, extra=CLUSTER_CONFIG)
    direct = False if through_proxy else bypass_inter_broker_proxy(cluster)
    if profile_dir is not None:
        hook = root / "profile-hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(_PROFILE_HOOK)
        profile_dir.mkdir(parents=True, exist_ok=True)
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "BENCH_PROFILE_DIR")}
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook),
                                                                 saved["PYTHONPATH"]]))
        os.environ["BENCH_PROFILE_DIR"] = str(profile_dir)
        try:
            cluster.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    else:
        cluster.start()
    return cluster, direct


_topic_numbers = itertools.count()


def unique(prefix: str) -> str:
    """A topic name never used before in this run: a deleted topic's name may still be taken."""
    return f"{prefix}-{next(_topic_numbers)}"


_admins: dict[str, AdminClient] = {}


def admin(node: Node) -> AdminClient:
    """One admin client per broker for the whole run (a new one costs ~100 ms to connect)."""
    client = _admins.get(node.bootstrap)
    if client is None:
        client = _admins[node.bootstrap] = AdminClient({"bootstrap.servers": node.bootstrap})
    return client


def create_topic(node: Node, name: str, assignment: list[list[int]],
                 config: dict[str, str] | None = None) -> None:
    """A topic with an explicit replica assignment (the first replica leads), usable on every
    broker before this returns."""
    client = admin(node)  # kept alive until the answer: a dropped client cancels its futures
    client.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment,
                                   config=config or {})], operation_timeout=30)[name].result(30)
    for broker in node.cluster.brokers:
        wait_for(functools.partial(topic_ready, broker, name, len(assignment)), 30,
                 f"{name} on broker {broker.node_id}")


def topic_ready(node: Node, topic: str, partitions: int) -> bool:
    """Every partition of `topic` has its first replica as leader and all replicas in sync."""
    state = partition_state(node, topic)
    return len(state) == partitions and all(
        leader == replicas[0] and len(isr) == len(replicas)
        for leader, replicas, isr in state.values())


def delete_topic(node: Node, name: str) -> None:
    client = admin(node)
    client.delete_topics([name], operation_timeout=30)[name].result(30)


def partition_state(node: Node, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, ISR) as this broker's own Metadata says ({} while it does
    not know the topic). A raw request on a connection of its own: an admin client may send
    its Metadata to any broker it is connected to, and brokers learn changes at different
    times."""
    request = _METADATA_REQUEST(
        topics=[_METADATA_REQUEST.MetadataRequestTopic(name=topic, topic_id=_ZERO_UUID)],
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=10) as sock:
        answer = round_trip(sock, ApiKey.METADATA, METADATA_VERSION, request,
                            client_id="bench-replication")
    found = answer.topics[0]
    if found.error_code:
        return {}
    return {p.partition_index: (p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes))
            for p in found.partitions}


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def active_controller(cluster: Cluster) -> int:
    return cluster.wait_for_leader(cluster.brokers)


# -- 1 and 2: throughput and CPU -------------------------------------------------------------


@dataclass(slots=True)
class ProduceRun:
    topic: str
    messages: int
    seconds: float
    client_cpu_s: float
    broker_cpu_s: dict[int, float]  # node id -> CPU seconds, until the followers had it all
    isr_shrinks: int  # ISR shrinks the leaders logged for the topic during the run

    @property
    def value_bytes(self) -> int:
        return self.messages * VALUE_BYTES

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / 1e6

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.seconds

    def cpu_s_per_gb(self, node_id: int) -> float:
        return self.broker_cpu_s[node_id] / (self.value_bytes / 1e9)


def produce_run(cluster: Cluster, topic: str, messages: int) -> ProduceRun:
    """`messages` 1 KiB values as fast as the client goes, then flush; time includes flush."""
    bootstrap = cluster.brokers[0].bootstrap
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    producer.list_topics(topic, timeout=30)
    partitions = PARTITIONS
    # Metadata, connections and one acknowledged value per partition before the clock: a
    # follower that fetched before its leader knew the new topic waits out
    # replica.fetch.backoff.ms (1 s), and acks=all with it.
    for partition in range(partitions):
        producer.produce(topic, b"warm-up", partition=partition)
    if producer.flush(30):
        raise RuntimeError(f"{topic}: the warm-up values were not acknowledged")
    value = os.urandom(VALUE_BYTES)
    produce = producer.produce
    cpu_before = cpu_snapshot(cluster)
    client_before = time.process_time()
    started = time.perf_counter()
    sent = 0
    while sent < messages:
        try:
            produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.001)
            continue
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(300)
    seconds = time.perf_counter() - started
    client_cpu_s = time.process_time() - client_before
    # A follower that fell out of the ISR may still be copying: its CPU counts until it is back.
    try:
        wait_for(functools.partial(topic_ready, cluster.brokers[0], topic, partitions), 120,
                 f"{topic}'s followers back in the ISR")
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; (leader, replicas, ISR) per partition now: "
                           f"{partition_state(cluster.brokers[0], topic)}") from None
    cpu_after = cpu_snapshot(cluster)
    if remaining or errors:
        raise RuntimeError(f"{topic}: {remaining} not delivered, {errors} failed")
    return ProduceRun(topic, messages, seconds, client_cpu_s,
                      {n: cpu_after[n] - cpu_before[n] for n in cpu_before},
                      isr_shrinks(cluster, topic))


def isr_shrinks(cluster: Cluster, topic: str) -> int:
    """ISR shrinks of `topic`'s partitions in the brokers' logs (replica_manager logs each)."""
    pattern = re.compile(rf"\] INFO \S+: {re.escape(topic)}-\d+: broker\(s\) .* fell behind")
    return sum(len(pattern.findall(node.log_path.read_text(errors="replace")))
               for node in cluster.brokers)


def spread(factor: int) -> list[list[int]]:
    """PARTITIONS partitions, leaders on brokers 1, 2, 3 in turn, followers on the next ones."""
    return [[(p + r) % 3 + 1 for r in range(factor)] for p in range(PARTITIONS)]


def bench_throughput(cluster: Cluster, messages: int, rounds: int) -> dict[int, list[ProduceRun]]:
    """RF 1 and RF 3 interleaved, a fresh topic per run (deleted after it)."""
    runs: dict[int, list[ProduceRun]] = {1: [], 3: []}
    node = cluster.brokers[0]
    for _ in range(rounds):
        for factor in (1, 3):
            topic = unique(f"throughput-rf{factor}")
            create_topic(node, topic, spread(factor))
            run = produce_run(cluster, topic, messages)
            delete_topic(node, topic)
            runs[factor].append(run)
            print(f"throughput RF {factor}: {run.msg_per_s:,.0f} msg/s {run.mb_per_s:.1f} MB/s "
                  f"(client CPU {run.client_cpu_s:.1f} s)", flush=True)
    return runs


@dataclass(slots=True)
class CpuResult:
    leader: int
    followers: list[int]
    controller: int
    rf1: list[ProduceRun] = field(default_factory=list)  # every partition on the leader alone
    rf3: list[ProduceRun] = field(default_factory=list)  # leader plus the two followers
    idle_cpu_per_s: dict[int, float] = field(default_factory=dict)


def bench_cpu(cluster: Cluster, messages: int, rounds: int) -> CpuResult:
    """One broker leads every partition (explicit assignment), so per-process CPU splits into
    the produce path (leader) and the replication path (followers). RF 1 on the same leader
    gives the produce path alone."""
    node = cluster.brokers[0]
    controller = active_controller(cluster)
    # Lead from a broker that is not the active controller, when we can choose.
    leader = next((b.node_id for b in cluster.brokers if b.node_id != controller),
                  cluster.brokers[0].node_id)
    followers = [b.node_id for b in cluster.brokers if b.node_id != leader]
    result = CpuResult(leader, followers, controller)
    before = cpu_snapshot(cluster)
    time.sleep(3)
    after = cpu_snapshot(cluster)
    result.idle_cpu_per_s = {n: (after[n] - before[n]) / 3 for n in before}
    for _ in range(rounds):
        for factor, runs in ((1, result.rf1), (3, result.rf3)):
            topic = unique(f"cpu-rf{factor}")
            create_topic(node, topic, [[leader, *followers][:factor]] * PARTITIONS)
            run = produce_run(cluster, topic, messages)
            delete_topic(node, topic)
            runs.append(run)
            print(f"cpu RF {factor}: {run.mb_per_s:.1f} MB/s, CPU s/GB " + ", ".join(
                f"node {i}: {run.cpu_s_per_gb(i):.2f}" for i in sorted(run.broker_cpu_s)),
                flush=True)
    return result


# -- 3: end-to-end latency -------------------------------------------------------------------


@dataclass(slots=True)
class Latency:
    factor: int
    samples: int
    e2e_ms: tuple[float, float, float]  # p50, p99, max: consumer receive - producer send
    ack_ms: tuple[float, float, float]  # p50, p99, max: delivery report - producer send
    sent_per_s: float
    lost: int


def _latency_consumer(bootstrap: str, topic: str, expected: int, seconds: float,
                      ready: Connection, results: Connection) -> None:
    """In its own process (no GIL shared with the producer): receive time - send time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    consumer.poll(0.5)
    ready.send(True)
    samples: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds + 60
    while len(samples) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        now = time.monotonic_ns()
        value = msg.value()
        assert value is not None
        sent = _SEND_TS.unpack_from(value)[0]
        samples.append((sent, now - sent))
    consumer.close()
    results.send(samples)


def _record_ack(acks: list[tuple[int, int]], sent_ns: int, err: Any, _msg: Any) -> None:
    """Delivery report: (send time, ack latency) of an acknowledged value."""
    if err is None:
        acks.append((sent_ns, time.monotonic_ns() - sent_ns))


def quantiles_ms(values_ns: list[int]) -> tuple[float, float, float]:
    ordered = sorted(values_ns)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return q[49] / 1e6, q[98] / 1e6, ordered[-1] / 1e6


def bench_latency(cluster: Cluster, factor: int, seconds: float) -> Latency:
    """LATENCY_RATE_PER_S paced sends of 1 KiB, acks=all, linger.ms=0, to one partition;
    the consumer reads from the leader in another process."""
    topic = unique(f"latency-rf{factor}")
    leader = cluster.brokers[1]
    create_topic(leader, topic, [spread(factor)[1]])  # led by broker 2
    total = int(LATENCY_RATE_PER_S * seconds)
    ctx = multiprocessing.get_context("spawn")
    ready_recv, ready_send = ctx.Pipe(duplex=False)
    results_recv, results_send = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=_latency_consumer, args=(
        leader.bootstrap, topic, total + 1, seconds, ready_send, results_send))
    consumer.start()
    ready_recv.recv()
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False})
    producer.list_topics(topic, timeout=30)
    padding = b"\x00" * (VALUE_BYTES - _SEND_TS.size)
    # One acknowledged value before the clock: a follower that fetched before the leader knew
    # the new topic waits out replica.fetch.backoff.ms (1 s), and acks=all with it.
    producer.produce(topic, _SEND_TS.pack(0) + padding, partition=0)
    if producer.flush(30):
        raise RuntimeError(f"{topic}: the first value was not acknowledged")
    acks: list[tuple[int, int]] = []
    interval_ns = 1_000_000_000 // LATENCY_RATE_PER_S
    started_ns = time.monotonic_ns()
    for i in range(total):
        due_ns = started_ns + i * interval_ns
        while (now_ns := time.monotonic_ns()) < due_ns:
            producer.poll(max(0.0, (due_ns - now_ns) / 1e9 - 0.0002))
        sent_ns = time.monotonic_ns()
        producer.produce(topic, _SEND_TS.pack(sent_ns) + padding, partition=0,
                         on_delivery=functools.partial(_record_ack, acks, sent_ns))
        producer.poll(0)
    producer.flush(30)
    sent_per_s = total / ((time.monotonic_ns() - started_ns) / 1e9)
    samples = results_recv.recv()
    consumer.join()
    delete_topic(leader, topic)
    warm_ns = started_ns + int(LATENCY_WARMUP_S * 1e9)
    e2e = [lat for sent, lat in samples if sent >= warm_ns]
    acked = [lat for sent, lat in acks if sent >= warm_ns]
    if not e2e or not acked:
        raise RuntimeError("no latency samples")
    result = Latency(factor, len(e2e), quantiles_ms(e2e), quantiles_ms(acked), sent_per_s,
                     total + 1 - len(samples))
    print(f"latency RF {factor}: end-to-end p50 {result.e2e_ms[0]:.2f} ms p99 "
          f"{result.e2e_ms[1]:.2f} ms max {result.e2e_ms[2]:.2f} ms", flush=True)
    return result


# -- 4: unavailability after kill -9 of the leader -------------------------------------------


@dataclass(slots=True)
class KillRound:
    victim: int
    was_controller: bool
    unavailable_s: float  # kill -> first acknowledgement of a value sent after the kill
    new_leader_s: float  # kill -> a surviving broker's Metadata names a new leader
    everywhere_s: float  # kill -> both surviving brokers' Metadata do
    rejoin_s: float  # restart -> the restarted broker back in the ISR


def paced(producer: Producer, rate_per_s: int, stop: Event) -> Iterator[int]:
    """0, 1, 2, ... each at its time for `rate_per_s`, the producer polled in between, until
    `stop`."""
    interval_ns = 1_000_000_000 // rate_per_s
    started_ns = time.monotonic_ns()
    i = 0
    while not stop.is_set():
        due_ns = started_ns + i * interval_ns
        while (now_ns := time.monotonic_ns()) < due_ns:
            producer.poll(max(0.0, (due_ns - now_ns) / 1e9 - 0.0002))
        yield i
        producer.poll(0)
        i += 1


def _failover_producer(bootstrap: str, topic: str, stop: Event, results: Connection) -> None:
    """Paced idempotent acks=all sends until `stop`; (send ns, ack ns) of each, and errors."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 300_000})
    producer.list_topics(topic, timeout=30)
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def report(sent_ns: int, err: Any, _msg: Any) -> None:
        if err is None:
            acked.append((sent_ns, time.monotonic_ns()))
        else:
            errors.append(str(err))

    value = b"x" * FAILOVER_VALUE_BYTES
    for _ in paced(producer, FAILOVER_RATE_PER_S, stop):
        producer.produce(topic, value, partition=0,
                         on_delivery=functools.partial(report, time.monotonic_ns()))
    producer.flush(300)
    results.send((acked, errors))


def in_isr(node: Node, topic: str, broker_id: int) -> bool:
    state = partition_state(node, topic)
    return bool(state) and broker_id in state[0][2]


def bench_failover(cluster: Cluster, kills: int) -> tuple[list[KillRound], list[str]]:
    topic = unique("failover")
    node = cluster.brokers[0]
    create_topic(node, topic, [[1, 2, 3]], {"min.insync.replicas": "2"})
    ctx = multiprocessing.get_context("spawn")
    results_recv, results_send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    producer = ctx.Process(target=_failover_producer,
                           args=(",".join(b.bootstrap for b in cluster.brokers), topic, stop,
                                 results_send))
    producer.start()
    time.sleep(3)  # the producer's start-up and first acknowledgements
    rounds: list[tuple[int, bool, int, float, float, float]] = []
    try:
        for n in range(kills):
            controller = active_controller(cluster)
            leader = partition_state(node, topic)[0][0]
            victim = cluster.nodes[leader]
            survivors = [b for b in cluster.brokers if b.node_id != leader]
            kill_ns = time.monotonic_ns()
            victim.kill()
            seen: dict[int, float] = {}  # survivor -> seconds until its Metadata names a leader
            while len(seen) < len(survivors):
                for survivor in survivors:
                    state = partition_state(survivor, topic)
                    if (survivor.node_id not in seen and state
                            and state[0][0] not in (-1, leader)):
                        seen[survivor.node_id] = (time.monotonic_ns() - kill_ns) / 1e9
                time.sleep(0.005)
            new_leader_s, everywhere_s = min(seen.values()), max(seen.values())
            time.sleep(2)  # let the producer get through before the restart
            restarted = time.monotonic()
            victim.start()
            victim.wait_ready()
            wait_for(functools.partial(in_isr, survivors[0], topic, leader), ISR_TIMEOUT_S,
                     f"broker {leader} back in the ISR")
            rejoin_s = time.monotonic() - restarted
            rounds.append((leader, leader == controller, kill_ns, new_leader_s, everywhere_s,
                           rejoin_s))
            print(f"kill {n + 1}: broker {leader} (controller: {leader == controller}), new "
                  f"leader in a survivor's metadata after {new_leader_s:.2f} s, in both after "
                  f"{everywhere_s:.2f} s, back in the ISR {rejoin_s:.1f} s after its restart",
                  flush=True)
            node = survivors[0]
            time.sleep(1)
    finally:
        stop.set()
        acked, errors = results_recv.recv()
        producer.join()
    out = []
    for victim_id, was_controller, kill_ns, new_leader_s, everywhere_s, rejoin_s in rounds:
        after = [ack for sent, ack in acked if sent >= kill_ns]
        if not after:
            raise RuntimeError(f"nothing acknowledged after the kill of {victim_id}")
        out.append(KillRound(victim_id, was_controller, (min(after) - kill_ns) / 1e9,
                             new_leader_s, everywhere_s, rejoin_s))
        print(f"kill of {victim_id}: unavailable {out[-1].unavailable_s:.2f} s", flush=True)
    delete_topic(node, topic)
    return out, errors


# -- fast fencing: kill -9 with Kafka's default timeouts (issue 33 item 3) ------------------


FENCING_TITLE = "## Broker failover with Kafka's default timeouts"
GRACE_CONFIG = "broker.heartbeat.connection.loss.timeout.ms"
# Kafka's defaults for every timeout on the path (the cluster tests shorten them: FAST_QUORUM).
KAFKA_TIMEOUTS = {"controller.quorum.election.timeout.ms": "1000",
                  "controller.quorum.fetch.timeout.ms": "2000",
                  "controller.quorum.request.timeout.ms": "2000",
                  "controller.quorum.election.backoff.max.ms": "1000",
                  "broker.heartbeat.interval.ms": "2000", "broker.session.timeout.ms": "9000",
                  "replica.lag.time.max.ms": "30000", "replica.fetch.wait.max.ms": "500",
                  "auto.leader.rebalance.enable": "false"}
FENCING_RATE_PER_S = 600  # 200 per partition
FENCING_AFTER_KILL_S = 4.0  # how long the producer goes on after the kill, past the slowest
FENCING_AFTER_KILL_OFF_S = 16.0  # ... when fencing waits for the session


@dataclass(slots=True)
class FencingRound:
    victim: int
    dead_leader_s: float  # kill -> first ack of a value sent after it, on the victim's partition
    alive_leaders_s: list[float]  # the same on the two partitions whose leaders stayed alive
    alive_gap_s: float  # the longest gap between two acks there, from a second before the kill
    isr_shrunk_s: float  # kill -> a surviving leader's Metadata has it out of the ISR
    new_leader_s: float  # kill -> a survivor's Metadata names another leader of its partition


def _fencing_producer(bootstrap: str, topic: str, ready: Event, stop: Event,
                      results: Connection) -> None:
    """Paced idempotent acks=all sends to partitions 0, 1, 2 in turn until `stop`;
    (partition, send ns, ack ns) of each acknowledged one, and the errors. `ready` once
    acknowledgements flow (a spawned process takes seconds to start on a busy machine)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 300_000})
    producer.list_topics(topic, timeout=30)
    acked: list[tuple[int, int, int]] = []
    errors: list[str] = []

    def report(partition: int, sent_ns: int, err: Any, _msg: Any) -> None:
        if err is None:
            acked.append((partition, sent_ns, time.monotonic_ns()))
            if len(acked) == 100:
                ready.set()
        else:
            errors.append(str(err))

    for i in paced(producer, FENCING_RATE_PER_S, stop):
        partition = i % PARTITIONS
        producer.produce(topic, b"x" * FAILOVER_VALUE_BYTES, partition=partition,
                         on_delivery=functools.partial(report, partition, time.monotonic_ns()))
    producer.flush(300)
    results.send((acked, errors))


def _fencing_round(cluster: Cluster, victim: Node, after_kill_s: float
                   ) -> tuple[FencingRound, list[str]]:
    """A fresh topic whose partition 0 the victim leads and whose partitions 1 and 2 count it
    in their ISR; a producer writes all three; kill -9 the victim; restart it once done."""
    controller = active_controller(cluster)
    w, c = [b.node_id for b in cluster.brokers if b is not victim]
    v = victim.node_id
    topic = unique("fencing")
    node = cluster.nodes[c]
    create_topic(node, topic, [[v, w, c], [w, v, c], [c, v, w]], {"min.insync.replicas": "2"})
    ctx = multiprocessing.get_context("spawn")
    results_recv, results_send = ctx.Pipe(duplex=False)
    ready, stop = ctx.Event(), ctx.Event()
    producer = ctx.Process(target=_fencing_producer, args=(
        ",".join(b.bootstrap for b in cluster.brokers), topic, ready, stop, results_send))
    producer.start()
    if not ready.wait(120):
        raise RuntimeError("the producer did not start")
    time.sleep(2)  # steady acknowledgements
    kill_ns = time.monotonic_ns()
    victim.kill()
    isr_shrunk_s = new_leader_s = -1.0
    deadline = time.monotonic() + after_kill_s
    while time.monotonic() < deadline:
        elapsed_s = (time.monotonic_ns() - kill_ns) / 1e9
        if isr_shrunk_s < 0 and v not in partition_state(cluster.nodes[w], topic)[1][2]:
            isr_shrunk_s = elapsed_s
        if new_leader_s < 0 and partition_state(node, topic)[0][0] not in (-1, v):
            new_leader_s = elapsed_s
        time.sleep(0.005)
    stop.set()
    acked, errors = results_recv.recv()
    producer.join()
    victim.start()
    victim.wait_ready()
    wait_for(functools.partial(in_isr, node, topic, v), ISR_TIMEOUT_S,
             f"broker {v} back in the ISR")
    delete_topic(node, topic)

    def first_after(partition: int) -> float:
        after = [ack for p, sent, ack in acked if p == partition and sent >= kill_ns]
        if not after:
            raise RuntimeError(f"nothing acknowledged on {partition} after the kill of {v}")
        return (min(after) - kill_ns) / 1e9

    gaps = []
    for partition in (1, 2):
        acks = sorted(ack for p, _, ack in acked if p == partition
                      and ack >= kill_ns - 1_000_000_000)
        gaps += [(b - a) / 1e9 for a, b in itertools.pairwise(acks)]
    result = FencingRound(v, first_after(0), [first_after(1), first_after(2)], max(gaps),
                          isr_shrunk_s, new_leader_s)
    print(f"kill -9 of {v} (controller {controller}): partition 0 back after "
          f"{result.dead_leader_s:.2f} s, partitions 1 and 2 after "
          f"{', '.join(f'{s:.2f}' for s in result.alive_leaders_s)} s (longest gap "
          f"{result.alive_gap_s:.2f} s), out of the ISR after {isr_shrunk_s:.2f} s, new "
          f"leader after {new_leader_s:.2f} s", flush=True)
    return result, errors


def bench_fast_fencing(root: Path, grace: str, kills: int, through_proxy: bool
                       ) -> tuple[list[FencingRound], list[str]]:
    """`kills` rounds on a cluster of three combined nodes with Kafka's default timeouts and
    broker.heartbeat.connection.loss.timeout.ms=`grace`; each kills a broker that is not the
    active controller (alternating between the two)."""
    cluster = Cluster(root, combined=3, extra={**KAFKA_TIMEOUTS, GRACE_CONFIG: grace})
    if not through_proxy:
        bypass_inter_broker_proxy(cluster)
    cluster.start()
    rounds: list[FencingRound] = []
    errors: list[str] = []
    after_kill_s = FENCING_AFTER_KILL_OFF_S if grace == "-1" else FENCING_AFTER_KILL_S
    try:
        for n in range(kills):
            controller = active_controller(cluster)
            others = [b for b in cluster.brokers if b.node_id != controller]
            round_, round_errors = _fencing_round(cluster, others[n % len(others)],
                                                  after_kill_s)
            rounds.append(round_)
            errors += round_errors
    finally:
        problems = cluster.close()
    for problem in problems:
        print(problem, file=sys.stderr)
    return rounds, errors


def render_fast_fencing(args: argparse.Namespace, fast: list[FencingRound],
                        slow: list[FencingRound], errors: list[str], wall_s: float,
                        load: tuple[str, str]) -> str:
    def row(label: str, pick: Any) -> str:
        on = [x for r in fast for x in pick(r)]
        off = [x for r in slow for x in pick(r)]
        med_on, med_off = statistics.median(on), statistics.median(off)
        return (f"| {label} | **{_ms(med_on)}** ({_ms(min(on))}-{_ms(max(on))}) | "
                f"{_ms(med_off)} ({_ms(min(off))}-{_ms(max(off))}) | {med_off / med_on:.1f}x |")

    grace = args.grace_ms
    return "\n".join([
        FENCING_TITLE, "",
        f"`python bench/bench_replication.py --fast-fencing --kills {args.kills}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {_machine()}. Three combined `kafka-ext server` "
        "processes on loopback with Kafka's default timeouts ("
        + ", ".join(f"{k}={v}" for k, v in KAFKA_TIMEOUTS.items()) + "). Each round creates a "
        "topic of 3 partitions, RF 3, min.insync.replicas=2: partition 0 led by the broker "
        "about to die, partitions 1 and 2 led by the two others with it in their ISR; an "
        "idempotent acks=all confluent-kafka producer in another process (linger.ms=0, "
        f"librdkafka's default retry, backoff and metadata settings) sends {FENCING_RATE_PER_S} "
        f"msg/s of {FAILOVER_VALUE_BYTES} B to the three in turn; then kill -9 of "
        "partition 0's leader, never the active controller (that is a controller failover, "
        "below), once the producer's acknowledgements flow (100 of them, then 2 s); the broker "
        "is restarted and back in the ISR before the next round. "
        f"*on*: {GRACE_CONFIG}={grace}"
        + (" (the default)" if grace == BROKER_GRACE_DEFAULT else "")
        + "; *off*: -1, fencing waits for "
        f"broker.session.timeout.ms as in Kafka. {len(fast)} and {len(slow)} rounds; load "
        f"average {load[0]} before, {load[1]} after; whole run {wall_s:.0f} s.", "",
        "| kill -9 of a partition leader until ... | on: median (min-max) | off: median "
        "(min-max) | off / on |",
        "|---|---:|---:|---:|",
        row("the first acknowledgement of a value sent after the kill, on its partition",
            lambda r: [r.dead_leader_s]),
        row("the same on the partitions whose leaders stayed alive (acks=all stall)",
            lambda r: r.alive_leaders_s),
        row("the longest gap between two acknowledgements there", lambda r: [r.alive_gap_s]),
        row("a surviving leader's Metadata has it out of the ISR", lambda r: [r.isr_shrunk_s]),
        row("a survivor's Metadata names a new leader of its partition",
            lambda r: [r.new_leader_s]),
        "", f"Producer delivery errors: {len(errors)}"
        + (f" ({'; '.join(sorted(set(errors))[:3])})" if errors else "") + ".", "",
        FENCING_READING,
    ])


BROKER_GRACE_DEFAULT = str(BROKER_CONFIGS[GRACE_CONFIG].default)
FENCING_READING = """**Reading the numbers** (by hand, from the run above, an earlier run of 7 + 7 rounds while other
people's tests kept the two cores busy (load average 6-7), and 7 rounds with the grace at 200 ms):

- *Grace on.* The controller reads the killed broker's FIN on its heartbeat connection at once
  and fences it 500 ms later; the quorum commit (FenceBrokerRecord, and the PartitionChangeRecords
  that move its leaderships and take it out of the ISRs) and the brokers' next metadata fetch
  add 12-79 ms here (0.1-0.5 s on the busy machine). The partitions whose leaders stayed alive
  waited only for the dead follower to leave their ISR: their acks=all writes stalled 0.53 s
  (goal: under 1 s; 0.87 s median on the busy machine), 14.4x less than with the session. The
  dead leader's own partition needs the producer to find the new leader: librdkafka refreshes
  Metadata after the leader's connection is refused, backing off from retry.backoff.ms (100 ms)
  doubling to retry.backoff.max.ms (1 s), so the refresh that sees the new leader comes about
  0.6-0.7, 1.5 or 2.5 s after the kill, whichever follows the fence: 0.71 s median (goal: under
  2 s), 10.9x less than with the session; the slowest round (1.49 s) just missed the 0.7 s
  refresh. On the busy machine: 1.56 s median (1.36-2.57 s).
- *Grace at 200 ms* (`--grace-ms 200`, 7 rounds, load average about 2): survivors' Metadata
  0.25 s median, stall on the live leaders' partitions 0.27 s, first acknowledgement on the dead
  leader's partition 0.50 s (0.27-1.51 s). The default stays at 500 ms: the grace must cover a
  live broker's reconnect and heartbeat on a busy event loop (TLS and SASL included), and a
  broker fenced by mistake loses its leaderships and ISR places until it heartbeats again.
- *Grace off* (Kafka's behaviour): the session ends 9 s after the last heartbeat before the
  kill, heartbeats come every 2 s, so the fence lands 7-9 s after it, and every partition that
  counted the broker in its ISR stalls as long (7.6 s median). Issue 33 reports 12.5-14.0 s
  (median 13.5 s) for the same kill, tried by hand with an idempotent acks=all confluent-kafka
  producer on an earlier tree; the *off* rounds here are this tree with the grace turned off.
- *Not covered*: a kill of the active controller when it is also a broker (combined node): its
  broker heartbeats in process, the new controller never sees a connection of it close and gives
  it a full session after the election (this bench never kills the active controller; the
  "Partition replication" section's failover rows have that case with the tests' short
  timeouts). Nor a host crash or a partition that drops packets: no FIN, the session decides.
"""


# -- 5: reassignment copy rate ---------------------------------------------------------------


@dataclass(slots=True)
class Reassignment:
    throttle_bytes_per_s: int | None
    size_bytes: int
    first_byte_s: float  # the reassignment listed -> the new replica's log is not empty
    copy_s: float  # the reassignment listed -> the new replica's log as long as the source's
    done_s: float  # the reassignment listed -> no longer listed (in the ISR, completed)

    @property
    def mb_per_s(self) -> float:
        """From the first byte on the new replica to the last."""
        return self.size_bytes / max(self.copy_s - self.first_byte_s, 1e-3) / 1e6


def fill(node: Node, topic: str, size_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": node.bootstrap, **PRODUCER, "acks": "1"})
    value = os.urandom(VALUE_BYTES)
    for _ in range(size_bytes // VALUE_BYTES):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


class LogGrowth:
    """Samples the size of a replica's log files every 2 ms on a thread: when the first byte and
    when `target_bytes` arrived (perf_counter times)."""

    def __init__(self, directory: Path, target_bytes: int) -> None:
        self.directory = directory
        self.target_bytes = target_bytes
        self.first_byte: float | None = None
        self.complete: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            size = sum(f.stat().st_size for f in self.directory.glob("*.log"))
            now = time.perf_counter()
            if size and self.first_byte is None:
                self.first_byte = now
            if size >= self.target_bytes and self.target_bytes:
                self.complete = now
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def reassign(cluster: Cluster, root: Path, size_bytes: int, throttle: int | None) -> Reassignment:
    """Fill one partition on broker 1, move it to broker 2 with the CLI (--no-wait), and time it:
    ListPartitionReassignments every POLL_S from the active controller (a broker forwarding it
    answers only once its own metadata has caught up, which can add half a second), and the
    new replica's log size every 2 ms. --verify clears the throttles afterwards."""
    source, dest = cluster.nodes[1], cluster.nodes[2]
    topic = unique("moving")
    create_topic(source, topic, [[source.node_id]])
    fill(source, topic, size_bytes)
    log_bytes = sum(f.stat().st_size for f in (source.data_dir / f"{topic}-0").glob("*.log"))
    plan = root / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [dest.node_id]}]}))
    # Metadata from the active controller names it as the controller, so the admin client's
    # requests go there and are not forwarded.
    watcher = KafkaAdminClient(
        bootstrap_servers=cluster.nodes[active_controller(cluster)].bootstrap)
    watcher.list_partition_reassignments()  # connected before the clock
    growth = LogGrowth(dest.data_dir / f"{topic}-0", log_bytes)
    cli = [sys.executable, "-m", "kafka_ext", "reassign-partitions", "--bootstrap-server",
           source.bootstrap, "--reassignment-json-file", str(plan)]
    run = subprocess.Popen(cli + ["--execute", "--no-wait"] + (
        [] if throttle is None else ["--throttle", str(throttle)]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started: float | None = None
    try:
        while True:
            listed = bool(watcher.list_partition_reassignments())
            now = time.perf_counter()
            exited = run.poll() is not None
            if exited and run.returncode != 0:
                raise RuntimeError(f"reassign-partitions failed: {run.communicate()}")
            if started is None and (listed or exited):
                started = now  # exited unlisted: done before we saw it, or not started yet
            if exited and not listed:
                break
            time.sleep(POLL_S)
    finally:
        growth.stop()
        watcher.close()
    assert started is not None
    # The listing is seen up to one poll late; a copy seen starting before it starts the clock.
    start = min(started, growth.first_byte or started)
    done_s = now - start
    first_byte_s = (growth.first_byte or start) - start
    copy_s = (growth.complete or growth.first_byte or start) - start
    run.communicate()
    verify = subprocess.run(cli + ["--verify"], capture_output=True, text=True, timeout=60)
    if verify.returncode != 0:
        raise RuntimeError(f"--verify: {verify.stdout}{verify.stderr}")
    wait_for(lambda: partition_state(dest, topic).get(0, (-1, [], []))[1] == [dest.node_id], 10,
             f"{topic} on broker {dest.node_id} alone")
    delete_topic(source, topic)
    print(f"reassignment, throttle {throttle}: {log_bytes / 1e6:.0f} MB, first byte after "
          f"{first_byte_s:.2f} s, all after {copy_s:.2f} s, done after {done_s:.2f} s", flush=True)
    return Reassignment(throttle, log_bytes, first_byte_s, copy_s, done_s)


def bench_reassignment(cluster: Cluster, root: Path, size_bytes: int,
                       throttles: list[int | None]) -> list[Reassignment]:
    """An empty partition first (what a move costs besides the copy), then one per throttle."""
    return [reassign(cluster, root, 0, None)] + [reassign(cluster, root, size_bytes, t)
                                                 for t in throttles]


# -- report ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    args: argparse.Namespace
    direct: bool = False
    throughput: dict[int, list[ProduceRun]] = field(default_factory=dict)
    cpu: CpuResult | None = None
    latency: list[Latency] = field(default_factory=list)
    kills: list[KillRound] = field(default_factory=list)
    producer_errors: list[str] = field(default_factory=list)
    moves: list[Reassignment] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    disturbance: dict[str, list[float]] = field(default_factory=dict)  # per attempt, 0-1
    wall_s: float = 0.0
    load_before: str = ""
    load_after: str = ""


def median_run(runs: list[ProduceRun]) -> ProduceRun:
    return sorted(runs, key=lambda r: r.mb_per_s)[len(runs) // 2]


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.+)", cpuinfo)
    import confluent_kafka
    return (f"{os.cpu_count()} CPUs ({model.group(1).strip() if model else 'unknown'}), "
            f"Python {sys.version.split()[0]}, confluent-kafka {confluent_kafka.version()[0]} "
            f"(librdkafka {confluent_kafka.libversion()[0]})")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


READING = """
**Reading the numbers** (written by hand from the run above and from the investigations behind
it; runs with other jobs on the cores gave RF 3 / RF 1 ratios of 0.44-0.59):

- *Throughput.* RF 3 costs the brokers about four times the CPU per GB of RF 1 (three appends,
  two followers' fetches served, two fetch-and-append paths: table 2). Three brokers and the
  Python client share two cores: RF 1 is bound by the client (124% of a core), RF 3 by the
  machine. The ratio is a CPU ratio on this box, not a protocol limit. With the cluster tests'
  replica.lag.time.max.ms=2000 the followers fell a few MB behind a full-speed producer and left
  the ISR in one or two of every three RF 3 runs (acks=all then waits for the leader alone),
  hence Kafka's 30 s here.
- *Follower CPU: 1.10-1.12x the produce path* (it was 1.6x before the follower's Fetch answers
  were read into pooled buffers: `network/frames.py`, a BufferedProtocol shared with client
  connections, the records appended as views of the received frame). py-spy on a follower now:
  about two thirds of its busy time is the `pwrite` of the append itself, the kernel copying
  into the page cache, which the leader's produce path pays too; the rest is the event loop,
  CRC checks and the per-fetch bookkeeping. The remaining 10% is within what three brokers'
  writes cost the page cache against one's; the issue's "at most 1x" is not quite met. The
  leader with two followers costs 2x its produce path: about 0.4 CPU s per GB sent to a
  follower, mostly writing the segment mmap's pages to sockets, and a segment that grew is
  mapped anew for the next fetch (many minor faults on the leader).
- *Latency.* An acks=all record waits for a follower round trip: its parked fetch wakes, the
  answer goes out, the follower appends and fetches again, which moves the high watermark;
  three processes on two cores make each hop a wake-up (p50 3.8 ms against 0.5 ms with RF 1).
  One acknowledged value is sent before the clock: a follower whose first fetch for a new topic
  reaches the leader before the leader's metadata has the topic is refused (UNKNOWN_TOPIC_ID)
  and waits replica.fetch.backoff.ms (1 s), as Kafka's follower does; without that warm-up
  acks=all stalled up to a second right after a topic creation.
- *Failover* (4.1 s median, 6.0 s in the round where the killed leader was also the active
  controller: a controller election on top). The controller fences a broker at its session
  deadline (3 s after its last heartbeat, so 2.5-3 s after the kill; Kafka schedules the fence
  the same way), and both survivors name the new leader within milliseconds of each other (2.8 s
  median). The last 1.3 s is the producer finding the new leader (librdkafka's metadata refresh
  and retry backoff) and the remaining follower's first fetch from it. Before this run the fence
  ran every half session (+0-1.5 s) and the second survivor learned the leader 0.5 s after the
  first (next point): 5.6 s median.
- *Reassignment.* The throttle holds to a few hundredths of a second: the copy takes size /
  throttle less the one second's worth the token bucket lets through at once, so short copies
  show a little above the throttle. Unthrottled, 101 MB crossed in 0.15 s. The rest is fixed
  cost: the move is done 0.02-0.2 s after the last byte (the follower's ISR join and the
  controller's completion reaching the brokers), an empty partition's after 0.2 s (0.7 s
  before the metadata fix below).
- *Metadata on the other nodes.* The raft leader used to park a fetch at its log end without
  asking whether the fetching node knew the current high watermark: the fetch that advanced it
  completed the other parked fetches, then parked itself, so its sender learned the new high
  watermark only at the next append or after fetch_max_wait_ms (500 ms): a config change was
  visible on the controller after 1-4 ms and on the other nodes after a median 505 ms. The
  leader now answers at once a fetch from a replica it has not yet sent the current high
  watermark (`raft/core.py`, `_handle_fetch_request`), which it knows from what it answered
  last; Kafka closed the same gap in KIP-1166 by having Fetch carry the follower's high
  watermark (KAFKA-14145).
"""


def _isr_note(runs: list[ProduceRun]) -> str:
    shrunk = [x for x in runs if x.isr_shrinks]
    if not shrunk:
        return (f"No follower left the ISR in these {len(runs)} RF 3 runs (the brokers log "
                "every shrink), so every acknowledgement waited for all three replicas.")
    return (f"Followers left the ISR in {len(shrunk)} of {len(runs)} RF 3 runs "
            f"({sum(x.isr_shrinks for x in shrunk)} partition shrinks in the brokers' logs): "
            "those acknowledgements did not wait for them; CPU counts until they were back.")


def _others(r: Report, name: str) -> str:
    """How much of the machine other processes took while a measurement ran."""
    shares = r.disturbance.get(name, [])
    if len(shares) == 1:
        return f"; other processes used {shares[0]:.0%} of the two CPUs meanwhile"
    if len(shares) == 2:
        shown = "second" if shares[1] < shares[0] else "first"
        return (f"; other processes used {shares[0]:.0%} of the two CPUs during the first run, "
                f"so it ran once more at the end ({shares[1]:.0%}); the {shown} is shown")
    return ""


def render(r: Report) -> str:
    a = r.args
    command = "python bench/bench_replication.py" + (" --quick" if a.quick else "")
    link = ("replica fetches go straight from broker to broker (the cluster tests' "
            "inter-broker proxy is taken out of the advertised REPLICATION listener)"
            if r.direct else "replica fetches go through the cluster tests' inter-broker proxy "
            "(a Python relay in the benchmark process)")
    lines = [
        SECTION_TITLE, "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}, {_machine()}. One cluster of three "
        "combined (broker + controller) `kafka-ext server` processes on loopback "
        f"(tests/cluster/conftest.py's Cluster); {link}. Settings: the cluster tests' quorum "
        f"timeouts ({', '.join(f'{k}={v}' for k, v in FAST_QUORUM.items())}) and "
        f"{', '.join(f'{k}={v}' for k, v in CLUSTER_CONFIG.items())} (the lag time is Kafka's "
        "default, not the tests' 2 s: see the reading below); everything else default "
        "(replica.fetch.max.bytes=1 MiB, num.replica.fetchers=1). **Bench note:** the brokers, "
        "the clients and other people's test runs share the two cores, so each measurement "
        "below says how much of the machine other processes took while it ran (machine busy "
        "time from /proc/stat minus ours), and one that lost more than "
        f"{a.rerun_above:.0%} ran once more at the end; load average {r.load_before} before, "
        f"{r.load_after} after; whole run {r.wall_s:.0f} s. MB = 10^6 bytes of values.", "",
    ]
    if r.throughput:
        rf1, rf3 = median_run(r.throughput[1]), median_run(r.throughput[3])
        rounds = len(r.throughput[1])
        lines += [
            f"**1. acks=all produce, RF 3 beside RF 1** ({rf1.messages:,} messages of "
            f"{VALUE_BYTES} B per run to {PARTITIONS} partitions led by brokers 1, 2 and 3 (with "
            "RF 3 each broker leads one partition and follows two); confluent-kafka in the "
            "benchmark process, "
            + ", ".join(f"{k}={v}" for k, v in PRODUCER.items() if k.startswith(("linger", "batch")))
            + ", no compression, not idempotent; time from the first send to the end of flush; "
            f"median of {rounds} interleaved round{'s' if rounds > 1 else ''}, a fresh topic per "
            f"run{_others(r, 'throughput')}):", "",
            "| replication factor | msg/s | MB/s | vs RF 1 | MB/s of each round | brokers' CPU "
            "s per GB | client CPU busy |",
            "|---|---:|---:|---:|---|---:|---:|",
        ]
        for factor, run in ((1, rf1), (3, rf3)):
            each = ", ".join(f"{x.mb_per_s:.0f}" for x in r.throughput[factor])
            cluster_cpu = sum(run.broker_cpu_s.values()) / (run.value_bytes / 1e9)
            lines.append(f"| {factor} | {run.msg_per_s:,.0f} | {run.mb_per_s:.1f} | "
                         f"**{run.mb_per_s / rf1.mb_per_s:.2f}x** | {each} | {cluster_cpu:.1f} | "
                         f"{run.client_cpu_s / run.seconds:.0%} |")
        lines += ["", _isr_note(r.throughput[3]), ""]
    if r.cpu is not None:
        c = r.cpu
        rf1, rf3 = median_run(c.rf1), median_run(c.rf3)
        lead_rf1 = statistics.median(x.cpu_s_per_gb(c.leader) for x in c.rf1)
        lead_rf3 = statistics.median(x.cpu_s_per_gb(c.leader) for x in c.rf3)
        lines += [
            f"**2. CPU per GB, leader and followers** (broker {c.leader} leads all "
            f"{PARTITIONS} partitions and brokers {c.followers[0]} and {c.followers[1]} follow "
            f"them all, by explicit replica assignment; broker {c.controller} is the active "
            f"controller; the producer of table 1, {rf3.messages:,} messages per run; CPU = "
            "utime + stime of each broker process from /proc/<pid>/stat over the run, per GB "
            "of values produced (each follower replicates all of them); RF 1 on the same "
            "leader is the produce path alone; median of "
            f"{len(c.rf3)} run{'s' if len(c.rf3) > 1 else ''} each; idle CPU before the runs: "
            + ", ".join(f"broker {n} {v:.1%}" for n, v in sorted(c.idle_cpu_per_s.items()))
            + f"{_others(r, 'cpu')}):", "",
            "| process | role | CPU s per GB | vs the produce path (RF 1 leader) | CPU busy |",
            "|---|---|---:|---:|---:|",
            f"| broker {c.leader}, RF 1 | leader: produce path only ({rf1.mb_per_s:.0f} MB/s) "
            f"| {lead_rf1:.2f} | 1.00x | {rf1.broker_cpu_s[c.leader] / rf1.seconds:.0%} |",
            f"| broker {c.leader}, RF 3 | leader: produce, and fetches of two followers "
            f"({rf3.mb_per_s:.0f} MB/s) | {lead_rf3:.2f} | {lead_rf3 / lead_rf1:.2f}x | "
            f"{rf3.broker_cpu_s[c.leader] / rf3.seconds:.0%} |",
        ]
        for f in c.followers:
            per_gb = statistics.median(x.cpu_s_per_gb(f) for x in c.rf3)
            lines.append(f"| broker {f}, RF 3 | follower: fetch and append | {per_gb:.2f} | "
                         f"**{per_gb / lead_rf1:.2f}x** ({per_gb / lead_rf3:.2f}x the RF 3 "
                         f"leader) | {rf3.broker_cpu_s[f] / rf3.seconds:.0%} |")
        lines += ["", _isr_note(c.rf3), ""]
    if r.latency:
        lines += [
            f"**3. End-to-end latency at {LATENCY_RATE_PER_S:,} msg/s** (one partition led by "
            f"broker 2, {VALUE_BYTES} B values stamped with the send time, acks=all, "
            f"linger.ms=0, {a.latency_seconds:.0f} s per case; a consumer in another process "
            "reads from the leader (read_uncommitted: it gets a record once the high watermark "
            "passes it) and computes receive - send on the same monotonic clock; the producer's "
            "delivery report latency beside it; the first "
            f"{LATENCY_WARMUP_S:.0f} s dropped{_others(r, 'latency')}):", "",
            "| replication factor | end-to-end p50 | p99 | max | ack p50 | ack p99 | ack max | "
            "samples | sent msg/s | not received |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for lat in r.latency:
            e, k = lat.e2e_ms, lat.ack_ms
            lines.append(f"| {lat.factor} | {e[0]:.2f} ms | **{e[1]:.2f} ms** | {e[2]:.1f} ms | "
                         f"{k[0]:.2f} ms | {k[1]:.2f} ms | {k[2]:.1f} ms | {lat.samples:,} | "
                         f"{lat.sent_per_s:,.0f} | {lat.lost} |")
        lines.append("")
    if r.kills:
        ks = r.kills
        un = [k.unavailable_s for k in ks]
        meta = [k.new_leader_s for k in ks]
        both_meta = [k.everywhere_s for k in ks]
        rejoin = [k.rejoin_s for k in ks]
        lines += [
            "**4. kill -9 of the partition leader** (one partition, RF 3, "
            "min.insync.replicas=2; an idempotent acks=all producer in another process "
            f"(linger.ms=0, librdkafka's default retry, backoff and metadata settings) sends "
            f"{FAILOVER_RATE_PER_S:,} msg/s of {FAILOVER_VALUE_BYTES} B throughout; each round "
            "kills the current leader, polls both surviving brokers' Metadata every 5 ms, restarts "
            "the killed broker 2 s after a new leader shows and waits until it is back in the "
            f"ISR; {len(ks)} rounds):", "",
            "| measurement | median | max | min |",
            "|---|---:|---:|---:|",
            f"| kill until the first acknowledgement of a value sent after the kill "
            f"(unavailability) | **{_ms(statistics.median(un))}** | **{_ms(max(un))}** | "
            f"{_ms(min(un))} |",
            f"| kill until a surviving broker's Metadata names a new leader | "
            f"{_ms(statistics.median(meta))} | {_ms(max(meta))} | {_ms(min(meta))} |",
            f"| kill until both surviving brokers' Metadata name it | "
            f"{_ms(statistics.median(both_meta))} | {_ms(max(both_meta))} | "
            f"{_ms(min(both_meta))} |",
            f"| restart of the killed broker until it is back in the ISR | "
            f"{_ms(statistics.median(rejoin))} | {_ms(max(rejoin))} | {_ms(min(rejoin))} |",
        ]
        for label, group in (("the leader was not the active controller",
                              [k.unavailable_s for k in ks if not k.was_controller]),
                             ("the leader was also the active controller",
                              [k.unavailable_s for k in ks if k.was_controller])):
            if group and len(group) < len(ks):
                lines.append(f"| unavailability, the {len(group)} rounds where {label} | "
                             f"{_ms(statistics.median(group))} | {_ms(max(group))} | "
                             f"{_ms(min(group))} |")
        if all(not k.was_controller for k in ks):
            lines.append("| (the killed leader was never the active controller) | | | |")
        elif all(k.was_controller for k in ks):
            lines.append("| (the killed leader was the active controller every time) | | | |")
        lines += ["", f"Producer delivery errors over all rounds: {len(r.producer_errors)}"
                  + (f" ({'; '.join(sorted(set(r.producer_errors))[:3])})"
                     if r.producer_errors else "") + ".", ""]
    if r.moves:
        empty, moves = r.moves[0], r.moves[1:]
        lines += [
            f"**5. Reassignment copy rate** (one partition of {VALUE_BYTES} B values on broker "
            "1 moved to broker 2 with `kafka-ext reassign-partitions --execute --no-wait "
            "[--throttle B/s]`; clocks start when ListPartitionReassignments, polled every "
            f"{POLL_S * 1000:.0f} ms at the active controller, first lists the reassignment; "
            "the copy runs from when "
            "broker 2's log stops being empty (*first byte*) until it holds as many bytes as the "
            "source's, *done* when the reassignment is no "
            "longer listed (the new replica joined the ISR and the controller completed it); "
            "MB = the source's log bytes; `--verify` clears the throttles after each case. The "
            "expected copy time is size / throttle less the one second's worth a throttle lets "
            f"through at once. An empty partition is done after {empty.done_s * 1000:.0f} ms"
            f"{_others(r, 'reassign')}):", "",
            "| throttle | MB moved | first byte s | copy s (first to last byte) | expected copy s | "
            "copy MB/s | done s |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for m in moves:
            t = m.throttle_bytes_per_s
            expected = "-" if t is None else \
                f"{max(m.size_bytes / t - THROTTLE_BURST_S, 0):.2f}"
            lines.append(f"| {'unthrottled' if t is None else f'{t / 1e6:g} MB/s'} | "
                         f"{m.size_bytes / 1e6:.0f} | {m.first_byte_s:.2f} | "
                         f"{m.copy_s - m.first_byte_s:.2f} | {expected} | **{m.mb_per_s:.1f}** | "
                         f"{m.done_s:.2f} |")
        lines.append("")
    if r.problems:
        lines += ["Problems the cluster reported at shutdown: "
                  + "; ".join(p.splitlines()[0] for p in r.problems), ""]
    return "\n".join(lines) + READING


def write_section(section: str, path: Path = RESULTS_PATH, title: str = SECTION_TITLE) -> None:
    """Replace this benchmark's section of RESULTS.md (or append it); other sections stay."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(title + "\n")
    if start == -1:
        new_text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        following = text.find("\n## ", start + len(title))
        tail = text[following + 1:] if following != -1 else ""
        new_text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    path.write_text(new_text)


# -- main ------------------------------------------------------------------------------------


def parse_throttles(text: str) -> list[int | None]:
    """'5,20,0' (MB/s, 0 = unthrottled) -> bytes/s or None."""
    return [None if float(t) == 0 else int(float(t) * 1e6) for t in text.split(",")]


def run_all(report: Report, cluster: Cluster, root: Path) -> None:
    """Every measurement asked for, failover last but one (it kills brokers); then, once more,
    each one other processes disturbed (above --rerun-above of the CPUs), keeping the quieter
    attempt."""
    args = report.args
    throttles = parse_throttles(args.throttles)

    def measure(name: str) -> tuple[float, Any]:
        disturbance = Disturbance(cluster)
        if name == "throughput":
            result: Any = bench_throughput(cluster, args.messages, args.rounds)
        elif name == "cpu":
            result = bench_cpu(cluster, args.messages, args.rounds)
        elif name == "latency":
            result = [bench_latency(cluster, f, args.latency_seconds) for f in (1, 3)]
        else:
            result = bench_reassignment(cluster, root, int(args.fill_mb * 1e6), throttles)
        share = disturbance.others()
        print(f"{name}: other processes used {share:.0%} of the CPUs", flush=True)
        return share, result

    kept: dict[str, tuple[float, Any]] = {}
    for name in MEASUREMENTS:
        if name in args.only and name != "failover":
            kept[name] = measure(name)
            report.disturbance[name] = [kept[name][0]]
    if "failover" in args.only:
        report.kills, report.producer_errors = bench_failover(cluster, args.kills)
    for name, (share, _) in list(kept.items()):
        if share > args.rerun_above:
            print(f"{name} again: the first run was disturbed", flush=True)
            again = measure(name)
            report.disturbance[name].append(again[0])
            if again[0] < share:
                kept[name] = again
    for name, (_, result) in kept.items():
        setattr(report, REPORT_FIELD[name], result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one round, 3 kills: a couple of minutes")
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS))
    parser.add_argument("--messages", type=int, default=None,
                        help="messages per throughput/CPU run (500,000; quick 100,000)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds of the throughput/CPU runs (5; quick 1)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="20; quick 5")
    parser.add_argument("--kills", type=int, default=None, help="20; quick 3")
    parser.add_argument("--fill-mb", type=float, default=None,
                        help="partition size for the reassignment (100; quick 25)")
    parser.add_argument("--throttles", default="5,20,0",
                        help="reassignment throttles in MB/s, 0 = unthrottled")
    parser.add_argument("--replica-lag-ms", type=int, default=None,
                        help="replica.lag.time.max.ms (Kafka's 30000)")
    parser.add_argument("--through-proxy", action="store_true",
                        help="keep the cluster tests' inter-broker proxy on replication links")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="run the brokers under cProfile, dumps here (<pid>.prof)")
    parser.add_argument("--rerun-above", type=float, default=0.25,
                        help="run a measurement once more at the end when other processes used "
                             "more than this share of the CPUs during it (0.25)")
    parser.add_argument("--no-write", action="store_true", help="print, leave RESULTS.md alone")
    parser.add_argument("--fast-fencing", action="store_true",
                        help="only kill -9 of a partition leader with Kafka's default timeouts, "
                             f"{GRACE_CONFIG} on and off (--kills each, default 5); writes "
                             "its own section")
    parser.add_argument("--grace-only", action="store_true",
                        help="with --fast-fencing: the rounds with the grace on only, printed")
    parser.add_argument("--grace-ms", default=BROKER_GRACE_DEFAULT,
                        help=f"with --fast-fencing: {GRACE_CONFIG} of the rounds with it on")
    args = parser.parse_args()
    if args.fast_fencing:
        main_fast_fencing(args)
        return
    quick = args.quick
    if args.replica_lag_ms is not None:
        CLUSTER_CONFIG["replica.lag.time.max.ms"] = str(args.replica_lag_ms)
    for name, full, small in (("messages", 500_000, 100_000), ("rounds", 5, 1),
                              ("latency_seconds", 20.0, 5.0), ("kills", 20, 3),
                              ("fill_mb", 100.0, 25.0)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    report = Report(args, load_before=_load_average())
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    try:
        cluster, report.direct = start_cluster(root / "cluster", args.through_proxy,
                                               args.profile_dir)
        try:
            run_all(report, cluster, root)
        finally:
            report.problems = cluster.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.wall_s = time.perf_counter() - began
    report.load_after = _load_average()
    for problem in report.problems:
        print(problem, file=sys.stderr)
    section = render(report)
    print(section)
    if not args.no_write and set(args.only) == set(MEASUREMENTS):
        write_section(section)


def main_fast_fencing(args: argparse.Namespace) -> None:
    args.kills = args.kills or 5
    load_before = _load_average()
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-fencing-"))
    try:
        fast, errors = bench_fast_fencing(root / "on", args.grace_ms, args.kills,
                                          args.through_proxy)
        slow: list[FencingRound] = []
        if not args.grace_only:
            slow, slow_errors = bench_fast_fencing(root / "off", "-1", args.kills,
                                                   args.through_proxy)
            errors += slow_errors
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not slow:
        for r in fast:
            print(r)
        return
    section = render_fast_fencing(args, fast, slow, errors, time.perf_counter() - began,
                                  (load_before, _load_average()))
    print(section)
    if not args.no_write:
        write_section(section, title=FENCING_TITLE)


if __name__ == "__main__":
    main()
