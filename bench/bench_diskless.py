"""Diskless topics beside classic ones: throughput, produce latency, WAL objects per second.

Starts its own brokers (BenchBroker from bench_broker.py) and drives them with confluent-kafka,
then writes the "## Diskless topics" section of bench/RESULTS.md (only that section).

    python bench/bench_diskless.py             # everything, about 2.5 minutes
    python bench/bench_diskless.py --no-write  # print, leave RESULTS.md alone
    python bench/bench_diskless.py --no-s3     # skip the run against moto's S3 server

One broker with the defaults (diskless.wal.max.ms=250, 8 MiB objects, local object store)
holds a classic and a diskless topic of the same shape; throughput cases alternate between them
in interleaved rounds. Produce latency is the delivery report's arrival minus the send, per
message, at a fixed rate; it is measured again on a second broker with diskless.wal.max.ms=50.
WAL objects are counted in the store itself (files under <log dir>/objects/wal/, or a listing
of the S3 bucket) before and after each diskless run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from bench_broker import (  # noqa: E402
    BenchBroker,
    Latency,
    Throughput,
    _client_version,
    _load_average,
    create_topic,
    running_broker,
    write_section,
)

from kafka_ext.diskless.object_store import ObjectStore  # noqa: E402
from kafka_ext.diskless.wal_writer import WAL_PREFIX  # noqa: E402
from tests.s3_server import S3Server  # noqa: E402

SECTION_TITLE = "## Diskless topics"
PARTITIONS = 6
VALUE_BYTES = 1024
MESSAGES = 1_000_000  # per throughput run; 1 GB of values
S3_MESSAGES = 300_000  # moto keeps every object in its own Python process's memory
ROUNDS = 3  # interleaved throughput rounds; the median run is reported
CONSUME_TIMEOUT_S = 180.0
FLUSH_TIMEOUT_S = 180.0
LATENCY_RATE_PER_S = 1000
LATENCY_SECONDS = 10.0
LATENCY_WARMUP_S = 1.0  # deliveries of messages sent in the first second are dropped
LATENCY_ROUNDS = 3
DEFAULT_WAL_MAX_MS = 250
SHORT_WAL_MAX_MS = 50
PRODUCER_CONFIG = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                   "compression.type": "none", "enable.idempotence": False,
                   "queue.buffering.max.messages": 1_000_000,
                   "queue.buffering.max.kbytes": 1_048_576}
DISKLESS_CONFIG = {"diskless.enable": "true"}
KINDS = ("classic", "diskless")


# -- the object store ------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class WalObjects:
    """WAL objects a run added to the store, and how long the run took."""

    count: int
    size_bytes: int
    elapsed_s: float

    @property
    def per_s(self) -> float:
        return self.count / self.elapsed_s

    @property
    def bytes_per_object(self) -> float:
        return self.size_bytes / self.count if self.count else 0.0


ObjectListing = Callable[[], dict[str, int]]  # object key -> size in bytes


def local_listing(broker: BenchBroker) -> ObjectListing:
    """Files under the default local store of `broker`: <log dir>/objects/wal/."""
    wal_dir = broker.data_dir / "logs" / "objects" / WAL_PREFIX

    def listing() -> dict[str, int]:
        if not wal_dir.exists():
            return {}
        return {p.name: p.stat().st_size for p in wal_dir.iterdir() if p.is_file()}
    return listing


def s3_listing(server: S3Server) -> ObjectListing:
    """Objects under the bucket prefix's wal/, listed through the S3 API."""
    def listing() -> dict[str, int]:
        with server.environ():
            store = ObjectStore.from_url(server.url)
            infos = asyncio.run(store.list(WAL_PREFIX.rstrip("/")))
        return {info.key: info.size_bytes for info in infos}
    return listing


def added_objects(before: dict[str, int], after: dict[str, int], elapsed_s: float) -> WalObjects:
    """Objects present after and not before: deletions of older objects do not count."""
    new = {key: size for key, size in after.items() if key not in before}
    return WalObjects(len(new), sum(new.values()), elapsed_s)


# -- throughput ------------------------------------------------------------------------------


def create_diskless_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(topic, partitions, 1, config=DISKLESS_CONFIG)
    admin.create_topics([new_topic], operation_timeout=30)[topic].result(60)


def create(broker: BenchBroker, kind: str, topic: str) -> None:
    if kind == "diskless":
        create_diskless_topic(broker.bootstrap, topic, PARTITIONS)
    else:
        create_topic(broker.bootstrap, topic, PARTITIONS)


def delete_topic(broker: BenchBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)


def _warm_up(producer: Producer, topic: str) -> None:
    """Metadata, connections and (diskless) the partitions' registration before the clock."""
    producer.list_topics(topic, timeout=30)
    failed: list[object] = []
    producer.produce(topic, b"warm-up", on_delivery=lambda err, _msg: failed.append(err)
                     if err is not None else None)
    if producer.flush(60) or failed:
        raise RuntimeError(f"warm-up message to {topic} failed: {failed}")


@dataclass(slots=True)
class ProduceResult:
    throughput: Throughput
    per_partition: list[int]  # delivered messages, warm-up included
    objects: WalObjects | None


def run_produce(broker: BenchBroker, kind: str, topic: str, messages: int,
                listing: ObjectListing | None) -> ProduceResult:
    """`messages` values as fast as the client takes them, then flush; time includes flush."""
    create(broker, kind, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_CONFIG})
    _warm_up(producer, topic)
    per_partition = [0] * PARTITIONS  # the warm-up message is not counted here
    errors = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal errors
        if err is None:
            per_partition[msg.partition()] += 1  # type: ignore[attr-defined]
        else:
            errors += 1

    value = os.urandom(VALUE_BYTES)
    produce = producer.produce
    before = listing() if listing else {}
    cpu_before = broker.cpu_seconds()
    client_cpu_before = time.process_time()
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
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    elapsed_s = time.perf_counter() - started
    cpu_s = broker.cpu_seconds() - cpu_before
    client_cpu_s = time.process_time() - client_cpu_before
    objects = added_objects(before, listing(), elapsed_s) if listing else None
    if remaining:
        raise RuntimeError(f"produce {topic}: {remaining} messages not delivered in "
                           f"{FLUSH_TIMEOUT_S:.0f} s")
    throughput = Throughput(f"{kind} produce", messages, VALUE_BYTES, elapsed_s, cpu_s,
                            client_cpu_s, errors)
    return ProduceResult(throughput, per_partition, objects)


def run_consume(broker: BenchBroker, kind: str, topic: str, expected: list[int]) -> Throughput:
    """A fresh consumer assigns every partition from the beginning and reads it all back.

    `expected` is the produce run's per-partition delivery count; one warm-up message more
    sits in some partition, so the read stops at sum(expected) + 1.
    """
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760, "fetch.queue.backoff.ms": 1,
                         "queued.max.messages.kbytes": 262_144})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    total = sum(expected) + 1
    per_partition = [0] * PARTITIONS
    errors = 0
    cpu_before = broker.cpu_seconds()
    client_cpu_before = time.process_time()
    started = time.perf_counter()
    deadline = started + CONSUME_TIMEOUT_S
    received = 0
    try:
        while received < total and time.perf_counter() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is None:
                    per_partition[msg.partition()] += 1
                    received += 1
                else:
                    errors += 1
        elapsed_s = time.perf_counter() - started
        cpu_s = broker.cpu_seconds() - cpu_before
        client_cpu_s = time.process_time() - client_cpu_before
    finally:
        consumer.close()
    surplus = [got - want for got, want in zip(per_partition, expected, strict=True)]
    if sorted(surplus) != [0] * (PARTITIONS - 1) + [1]:
        raise RuntimeError(f"consume {topic}: per partition read {per_partition}, produced "
                           f"{expected} plus one warm-up message")
    return Throughput(f"{kind} consume", total - 1, VALUE_BYTES, elapsed_s, cpu_s, client_cpu_s,
                      errors)


@dataclass(slots=True)
class RoundsResult:
    produce: dict[str, list[Throughput]]
    consume: dict[str, list[Throughput]]
    objects: list[WalObjects]


def run_rounds(broker: BenchBroker) -> RoundsResult:
    """ROUNDS rounds of produce then consume of both kinds; the order of kinds alternates."""
    result = RoundsResult({k: [] for k in KINDS}, {k: [] for k in KINDS}, [])
    listing = local_listing(broker)
    for round_no in range(ROUNDS):
        kinds = KINDS if round_no % 2 == 0 else KINDS[::-1]
        delivered: dict[str, list[int]] = {}
        for kind in kinds:
            topic = f"bench-{kind}-{round_no}"
            run = run_produce(broker, kind, topic, MESSAGES,
                              listing if kind == "diskless" else None)
            result.produce[kind].append(run.throughput)
            delivered[kind] = run.per_partition
            if run.objects is not None:
                result.objects.append(run.objects)
            print(f"round {round_no} {_describe(run.throughput)}"
                  + (f", {_describe_objects(run.objects)}" if run.objects else ""), flush=True)
        for kind in kinds:
            topic = f"bench-{kind}-{round_no}"
            consumed = run_consume(broker, kind, topic, delivered[kind])
            result.consume[kind].append(consumed)
            print(f"round {round_no} {_describe(consumed)}", flush=True)
        # Dropping the topics drops their bytes, so the next round starts from the same state.
        for kind in kinds:
            delete_topic(broker, f"bench-{kind}-{round_no}")
    return result


# -- produce latency -------------------------------------------------------------------------


@dataclass(slots=True)
class LatencySamples:
    """One latency run: delivery latencies of the messages sent after the warm-up second."""

    latencies_ns: list[int]
    rate_per_s: float
    lost: int
    objects: WalObjects | None


def run_latency(broker: BenchBroker, kind: str, topic: str,
                listing: ObjectListing | None) -> LatencySamples:
    """LATENCY_RATE_PER_S messages a second for LATENCY_SECONDS; per message, the delivery
    report's arrival minus the send (both CLOCK_MONOTONIC in this process)."""
    create(broker, kind, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_CONFIG})
    _warm_up(producer, topic)
    samples: list[tuple[int, int]] = []  # (sent ns, latency ns)
    errors = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal errors
        now_ns = time.monotonic_ns()
        if err is not None:
            errors += 1
            return
        sent_ns = int.from_bytes(msg.value()[:8], "big")  # type: ignore[attr-defined]
        samples.append((sent_ns, now_ns - sent_ns))

    padding = os.urandom(VALUE_BYTES - 8)
    total = int(LATENCY_RATE_PER_S * LATENCY_SECONDS)
    interval_ns = 1_000_000_000 // LATENCY_RATE_PER_S
    before = listing() if listing else {}
    started_ns = time.monotonic_ns()
    for i in range(total):
        due_ns = started_ns + i * interval_ns
        while (now_ns := time.monotonic_ns()) < due_ns:
            producer.poll(max(0.0, (due_ns - now_ns) / 1e9 - 0.0002))
        producer.produce(topic, time.monotonic_ns().to_bytes(8, "big") + padding,
                         on_delivery=on_delivery)
        producer.poll(0)
    sent_for_s = (time.monotonic_ns() - started_ns) / 1e9
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    elapsed_s = (time.monotonic_ns() - started_ns) / 1e9
    objects = added_objects(before, listing(), elapsed_s) if listing else None
    delete_topic(broker, topic)
    if remaining or errors:
        raise RuntimeError(f"latency {topic}: {remaining} not delivered, {errors} errors")
    warm_ns = started_ns + int(LATENCY_WARMUP_S * 1e9)
    kept = [lat for sent, lat in samples if sent >= warm_ns]
    return LatencySamples(kept, total / sent_for_s, total - len(samples), objects)


def _latency_of(latencies_ns: list[int], rate_per_s: float, lost: int) -> Latency:
    ordered = sorted(latencies_ns)
    quantiles = statistics.quantiles(ordered, n=100, method="inclusive")
    return Latency(len(ordered), quantiles[49] / 1e6, quantiles[98] / 1e6, ordered[-1] / 1e6,
                   rate_per_s, lost)


@dataclass(slots=True)
class LatencyRun:
    """A latency case over all its rounds: quantiles of the pooled samples, and per round."""

    name: str
    latency: Latency
    rounds: list[Latency]
    objects: WalObjects | None


@dataclass(slots=True, frozen=True)
class LatencyCase:
    name: str
    broker: BenchBroker
    kind: str


def run_latency_rounds(cases: list[LatencyCase]) -> list[LatencyRun]:
    """Every case once per round, LATENCY_ROUNDS rounds; samples pooled per case."""
    runs: dict[str, list[LatencySamples]] = {case.name: [] for case in cases}
    for round_no in range(LATENCY_ROUNDS):
        for case in cases:
            listing = local_listing(case.broker) if case.kind == "diskless" else None
            run = run_latency(case.broker, case.kind, f"bench-latency-{case.kind}-{round_no}",
                              listing)
            runs[case.name].append(run)
            lat = _latency_of(run.latencies_ns, run.rate_per_s, run.lost)
            print(f"round {round_no} latency {case.name}: p50 {lat.p50_ms:.1f} ms, "
                  f"p99 {lat.p99_ms:.1f} ms"
                  + (f", {_describe_objects(run.objects)}" if run.objects else ""), flush=True)
    out = []
    for name, samples in runs.items():
        pooled = [lat for run in samples for lat in run.latencies_ns]
        latency = _latency_of(pooled, statistics.median(r.rate_per_s for r in samples),
                              sum(r.lost for r in samples))
        per_round = [_latency_of(r.latencies_ns, r.rate_per_s, r.lost) for r in samples]
        objects = None
        if samples[0].objects is not None:
            parts = [r.objects for r in samples if r.objects is not None]
            objects = WalObjects(sum(o.count for o in parts), sum(o.size_bytes for o in parts),
                                 sum(o.elapsed_s for o in parts))
        out.append(LatencyRun(name, latency, per_round, objects))
    return out


# -- S3 --------------------------------------------------------------------------------------


@dataclass(slots=True)
class S3Result:
    produce: Throughput
    consume: Throughput
    objects: WalObjects


def run_s3() -> S3Result:
    """One diskless produce and read-back with the store on moto's S3 server (loopback)."""
    with S3Server() as server, server.environ():
        with running_broker(overrides={"diskless.storage.url": server.url}) as broker:
            run = run_produce(broker, "diskless", "bench-diskless-s3", S3_MESSAGES,
                              s3_listing(server))
            assert run.objects is not None
            print(f"s3 {_describe(run.throughput)}, {_describe_objects(run.objects)}",
                  flush=True)
            consumed = run_consume(broker, "diskless", "bench-diskless-s3", run.per_partition)
            print(f"s3 {_describe(consumed)}", flush=True)
            _check_log(broker)
    return S3Result(run.throughput, consumed, run.objects)


# -- report ----------------------------------------------------------------------------------


def _describe(t: Throughput) -> str:
    return (f"{t.name}: {t.messages_per_s:,.0f} msg/s {t.mb_per_s:,.1f} MB/s, "
            f"broker CPU {t.broker_cpu_s / t.elapsed_s:.0%}")


def _describe_objects(o: WalObjects) -> str:
    return f"{o.count} objects, {o.per_s:.1f}/s, {o.bytes_per_object / 1e6:.2f} MB each"


def _median(runs: list[Throughput]) -> Throughput:
    return sorted(runs, key=lambda r: r.elapsed_s)[len(runs) // 2]


def _check_log(broker: BenchBroker) -> None:
    if "Traceback" in broker.log() or " ERROR " in broker.log():
        print(f"broker logged errors:\n{broker.log()}", file=sys.stderr)


@dataclass(slots=True)
class Report:
    rounds: RoundsResult
    latencies: list[LatencyRun]
    s3: S3Result | None
    load_before: str
    load_after: str
    wall_s: float


def _throughput_row(label: str, runs: list[Throughput], base: Throughput | None) -> str:
    t = _median(runs)
    ratio = f"{t.mb_per_s / base.mb_per_s:.2f}x" if base is not None else "1.00x"
    spread = ", ".join(f"{r.mb_per_s:,.0f}" for r in runs)
    return (f"| {label} | {t.messages_per_s:,.0f} | {t.mb_per_s:,.1f} | {ratio} | {spread} "
            f"| {t.broker_cpu_s / t.elapsed_s:.0%} | {t.client_cpu_s / t.elapsed_s:.0%} "
            f"| {t.cpu_s_per_gb:,.1f} |")


def render(report: Report) -> str:
    rounds = report.rounds
    classic_p = _median(rounds.produce["classic"])
    classic_c = _median(rounds.consume["classic"])
    objects = sorted(rounds.objects, key=lambda o: o.elapsed_s)[len(rounds.objects) // 2]
    lines = [
        SECTION_TITLE,
        "",
        f"`python bench/bench_diskless.py`, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} CPUs shared with other jobs, confluent-kafka {_client_version()}; "
        f"one broker on loopback with the local object store (`<log dir>/objects`), 10 Diskless "
        f"coordinators (the default), broker and clients on the same machine. Whole run "
        f"{report.wall_s:.0f} s; load average before/after: {report.load_before} / "
        f"{report.load_after}.",
        "",
        f"**Throughput** ({MESSAGES:,} messages of {VALUE_BYTES} B to {PARTITIONS} partitions "
        "per run, acks=all, linger.ms=5, batch.size=1 MB; then a fresh consumer assigns every "
        "partition and reads all back, max.partition.fetch.bytes=10 MiB; diskless.wal.max.ms="
        f"{DEFAULT_WAL_MAX_MS}, diskless.wal.max.bytes=8 MiB; median of {ROUNDS} interleaved "
        "rounds, topics deleted after each round; MB/s counts value bytes):",
        "",
        "| case | msg/s | MB/s | vs classic | MB/s of each round | broker CPU busy "
        "| client CPU busy | broker CPU s/GB |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
        _throughput_row("classic produce", rounds.produce["classic"], None),
        _throughput_row("diskless produce", rounds.produce["diskless"], classic_p),
        _throughput_row("classic consume", rounds.consume["classic"], None),
        _throughput_row("diskless consume", rounds.consume["diskless"], classic_c),
    ]
    if report.s3 is not None:
        lines += [
            _throughput_row(f"diskless produce, S3 (moto), {S3_MESSAGES:,} messages",
                            [report.s3.produce], classic_p),
            _throughput_row("diskless consume, S3 (moto)", [report.s3.consume], classic_c),
        ]
    lines += [
        "",
        "**WAL objects** (new objects in the store during each diskless run, per second of the "
        "run, and their mean size):",
        "",
        "| diskless run | objects | objects/s | MB per object |",
        "|---|---:|---:|---:|",
        f"| produce at full speed, local store (median round) | {objects.count:,} "
        f"| {objects.per_s:.1f} | {objects.bytes_per_object / 1e6:.2f} |",
    ]
    if report.s3 is not None:
        o = report.s3.objects
        lines.append(f"| produce at full speed, S3 (moto) | {o.count:,} | {o.per_s:.1f} "
                     f"| {o.bytes_per_object / 1e6:.2f} |")
    for run in report.latencies:
        if run.objects is not None:
            o = run.objects
            lines.append(f"| {run.name}, {LATENCY_RATE_PER_S:,} msg/s | {o.count:,} "
                         f"| {o.per_s:.1f} | {o.bytes_per_object / 1e6:.3f} |")
    lines += [
        "",
        f"**Produce latency** ({LATENCY_RATE_PER_S:,} msg/s of {VALUE_BYTES} B for "
        f"{LATENCY_SECONDS:.0f} s to {PARTITIONS} partitions, acks=all, linger.ms=5; latency = "
        "delivery report received minus produce() called, per message; messages sent in the "
        f"first {LATENCY_WARMUP_S:.0f} s dropped; {LATENCY_ROUNDS} interleaved rounds, "
        "quantiles of all their samples together and of each round):",
        "",
        "| topic | p50 ms | p99 ms | max ms | p50 / p99 of each round, ms | samples "
        "| sent msg/s |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for run in report.latencies:
        lat = run.latency
        each = ", ".join(f"{r.p50_ms:,.1f} / {r.p99_ms:,.1f}" for r in run.rounds)
        lines.append(f"| {run.name} | {lat.p50_ms:,.1f} | {lat.p99_ms:,.1f} | {lat.max_ms:,.1f} "
                     f"| {each} | {lat.samples:,} | {lat.rate_per_s:,.0f} |")
    lines += ["", "**Reading the numbers.** " + reading(report), ""]
    return "\n".join(lines)


def reading(report: Report) -> str:
    """The "Reading the numbers" paragraph, with this run's numbers in it."""
    rounds = report.rounds
    produce = {k: _median(rounds.produce[k]) for k in KINDS}
    consume = {k: _median(rounds.consume[k]) for k in KINDS}
    objects = sorted(rounds.objects, key=lambda o: o.elapsed_s)[len(rounds.objects) // 2]
    lat = {run.name: run for run in report.latencies}
    classic = lat["classic"].latency
    long_run = lat[f"diskless, wal.max.ms={DEFAULT_WAL_MAX_MS}"]
    short_run = lat[f"diskless, wal.max.ms={SHORT_WAL_MAX_MS}"]
    long_lat, short_lat = long_run.latency, short_run.latency
    classic_p99s = [r.p99_ms for r in lat["classic"].rounds]
    text = (
        f"*Latency.* A classic produce waits for its batch to linger (linger.ms=5, so "
        f"{classic.p50_ms:.1f} ms at p50)"
    )
    if max(classic_p99s) > 2 * min(classic_p99s):
        text += (f"; its p99 moved between {min(classic_p99s):.1f} and "
                 f"{max(classic_p99s):.1f} ms from round to round, which is the shared machine")
    text += (
        ". A diskless produce is answered only once its WAL object is sealed, uploaded and "
        "committed to every coordinator owning one of its batches. At 1,000 msg/s objects are "
        "sealed by age, so a message waits on average half of diskless.wal.max.ms for the seal: "
        f"p50 {long_lat.p50_ms:.0f} ms = {DEFAULT_WAL_MAX_MS / 2:.0f} + "
        f"{long_lat.p50_ms - DEFAULT_WAL_MAX_MS / 2:.0f} ms at {DEFAULT_WAL_MAX_MS} ms, "
        f"{short_lat.p50_ms:.0f} ms = {SHORT_WAL_MAX_MS / 2:.0f} + "
        f"{short_lat.p50_ms - SHORT_WAL_MAX_MS / 2:.0f} ms at {SHORT_WAL_MAX_MS} ms, the "
        "remainder being linger, upload and commit (an append to `__diskless_metadata` and a "
        "SQLite transaction per coordinator, in object order); p99 "
        f"({long_lat.p99_ms:.0f} / {short_lat.p99_ms:.0f} ms) is the whole interval plus the "
        "same. The interval dominates: cutting it five-fold cut p50 "
        f"{long_lat.p50_ms / short_lat.p50_ms:.1f}-fold and multiplied objects per second by "
    )
    if long_run.objects is not None and short_run.objects is not None:
        text += (f"{short_run.objects.per_s / long_run.objects.per_s:.1f} "
                 f"({long_run.objects.per_s:.1f} to {short_run.objects.per_s:.1f}; a new object "
                 "opens with the first batch after a seal, so slightly under 1000 / interval), "
                 "the cost/latency trade of the proposal. ")
    else:
        text += "about five. "
    busy = {name: t.client_cpu_s / t.elapsed_s for name, t in
            (("classic produce", produce["classic"]), ("classic consume", consume["classic"]),
             ("diskless consume", consume["diskless"]))}
    text += (
        f"*Produce throughput.* At full speed objects are sealed by size: "
        f"{objects.bytes_per_object / 1e6:.2f} MB on average, above the 8 MiB (8.39 MB) bound "
        "because the batch that crosses it goes in whole (batches of up to 1 MB here). "
        f"Diskless produce ran at {produce['diskless'].mb_per_s / produce['classic'].mb_per_s:.2f}x "
        f"classic and cost the broker {produce['diskless'].cpu_s_per_gb:.1f} CPU s per GB "
        f"against {produce['classic'].cpu_s_per_gb:.1f}: every object is assembled with one "
        "copy, written again into the store, and committed to up to six coordinators. Beyond "
        "CPU it is a pipeline: the WAL writer lets at most 32 MiB (about four objects) be "
        "buffered or uploading, commits objects strictly one after another, and holds every "
        "produce request until its object is committed, so the producer needs many requests "
        "in flight. "
    )
    broker_busy = produce["diskless"].broker_cpu_s / produce["diskless"].elapsed_s
    client_busy = produce["diskless"].client_cpu_s / produce["diskless"].elapsed_s
    if broker_busy >= 0.9:
        text += (f"Here the broker used {broker_busy:.0%} of a core, close to what its one "
                 "event loop can give, so broker CPU was the main bound. ")
    else:
        text += (f"With the broker at {broker_busy:.0%} and the client at {client_busy:.0%} of "
                 "a core, this run does not separate how much each part costs. ")
    if busy["classic produce"] >= 0.95:
        text += (f"Classic produce is bound by the client ({busy['classic produce']:.0%} of a "
                 "core in the Python produce() loop and librdkafka), so the ratio understates "
                 "the gap between the two broker paths. ")
    text += (
        f"*Consume.* Diskless consume ran at "
        f"{consume['diskless'].mb_per_s / consume['classic'].mb_per_s:.2f}x classic, the "
        f"broker spending {consume['diskless'].cpu_s_per_gb:.1f} CPU s per GB against "
        f"{consume['classic'].cpu_s_per_gb:.1f}: each fetch asks the coordinator where the "
        "batches are (DisklessFindBatches, a SQLite query) and slices them out of whole objects "
        "in the fetch cache, one store read per object serving the batches of all six "
        "partitions in it, each batch given its assigned base offset by an 8-byte prefix, not "
        "a copy. "
    )
    if max(busy["classic consume"], busy["diskless consume"]) < 0.95:
        text += ("Neither broker nor client uses a full core while consuming, so librdkafka's "
                 "one Fetch in flight per broker sets the pace of both kinds. ")
    else:
        text += "The client's CPU bounds both kinds of consume (see its column). "
    if report.s3 is not None:
        s3 = report.s3
        text += (
            "*S3.* moto is a Python server keeping every object in its own memory, behind the "
            "tests' Python TCP proxy; with the broker at "
            f"{s3.produce.broker_cpu_s / s3.produce.elapsed_s:.0%} and the client at "
            f"{s3.produce.client_cpu_s / s3.produce.elapsed_s:.0%} busy during produce, those "
            "rows measure moto, not S3 or the broker. "
        )
    text += (
        "*The machine.* Two cores are shared by the broker, the client and other people's test "
        "runs (load average above), so absolute numbers move by tens of percent between runs "
        "(see each round's column); the interleaved ratios are steadier."
    )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="leave RESULTS.md alone")
    parser.add_argument("--no-s3", action="store_true", help="skip the moto S3 run")
    args = parser.parse_args()
    load_before = _load_average()
    started = time.perf_counter()
    with running_broker() as broker:
        rounds = run_rounds(broker)
        # The second broker only runs for the latency rounds, so the cases can interleave.
        short_overrides = {"diskless.wal.max.ms": str(SHORT_WAL_MAX_MS)}
        with running_broker(overrides=short_overrides) as short_broker:
            latencies = run_latency_rounds([
                LatencyCase("classic", broker, "classic"),
                LatencyCase(f"diskless, wal.max.ms={DEFAULT_WAL_MAX_MS}", broker, "diskless"),
                LatencyCase(f"diskless, wal.max.ms={SHORT_WAL_MAX_MS}", short_broker,
                            "diskless"),
            ])
            _check_log(short_broker)
        _check_log(broker)
    s3 = None if args.no_s3 else run_s3()
    report = Report(rounds, latencies, s3, load_before, _load_average(),
                    time.perf_counter() - started)
    section = render(report)
    print(section)
    if not args.no_write:
        write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    try:
        main()
    except KafkaException as exc:
        sys.exit(f"benchmark failed: {exc}")
