"""Our asyncio client (`kafka_ext.client`) beside confluent-kafka, and the cost of KIP-253 gating.

Starts its own broker subprocess (temp data dir, free loopback port) and writes the
"## Our client" section of bench/RESULTS.md (only that section; the rest is left as it is).

    python bench/bench_client.py              # everything, about 4 minutes
    python bench/bench_client.py --quick      # a tenth of the messages, for a smoke run
    python bench/bench_client.py --no-write   # print, leave RESULTS.md alone

Part 1 produces a fixed number of messages with each client into its own topic of the same
shape (acks=1, linger 5 ms, 1 MB batches, no compression, idempotence off), then each client
reads the topic confluent-kafka wrote from the beginning with assign(), so every consumer
decodes the same bytes. Ours runs twice: as an application gets it, and with the garbage
collector set up as the broker sets up its own (`tune_garbage_collector`), which shows how much
of our client's time is CPython's cyclic collector. Part 2 reads keyed topics through a
one-member group of our consumer: without an expansion, after an expansion from 3 to 6
partitions with KIP-253's gating (the default), and after one with gating off; per-key order is
checked on every record.

Every measured client runs in its own spawned process, so its CPU time (time.process_time,
librdkafka's threads included) is its own and our event loop shares nothing with the driver.
The process connects and fetches metadata, reports ready, and starts its clock when the driver
answers "go"; the driver reads the broker's CPU time (/proc) around the same window.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from bench_broker import (  # noqa: E402
    BenchBroker,
    Throughput,
    _client_version,
    _load_average,
    create_topic,
    running_broker,
    write_section,
)

from kafka_ext.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402

SECTION_TITLE = "## Our client"
# A one-member group should form at once, not after the broker's default 3 s wait for others.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}
RUN_TIMEOUT_S = 300.0  # one client run, ready to result
LINGER_MS = 5
BATCH_BYTES = 1_000_000
YIELD_EVERY = 1000  # both producers hand control to their I/O every this many records
# confluent-kafka: the settings of bench_broker.py's produce and consume cases.
CONFLUENT_PRODUCER = {"acks": "1", "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES,
                      "compression.type": "none", "enable.idempotence": False,
                      "queue.buffering.max.messages": 1_000_000,
                      "queue.buffering.max.kbytes": 1_048_576}
CONFLUENT_CONSUMER = {"group.id": "bench-client", "enable.auto.commit": False,
                      "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                      "fetch.queue.backoff.ms": 1, "queued.max.messages.kbytes": 262_144}
CONFLUENT_CONSUME_BATCH = 10_000
# Ours, as close as its settings go. The buffer bounds what waits unsent (Kafka's
# buffer.memory); 256 MiB holds a whole 1 KiB case, as librdkafka's 1 GiB queue does.
OUR_PRODUCER: dict[str, Any] = {"acks": 1, "enable_idempotence": False, "linger_ms": LINGER_MS,
                                "batch_size_bytes": BATCH_BYTES, "compression": "none",
                                "buffer_memory_bytes": 256 * 1024 * 1024}
OUR_CONSUMER: dict[str, Any] = {"auto_offset_reset": "earliest", "fetch_max_bytes": 52_428_800,
                                "max_partition_fetch_bytes": 10_485_760,
                                "max_poll_records": 100_000}
POLL_TIMEOUT_MS = 500
# Part 2's member fetches with the client's defaults (Kafka's: 1 MiB per partition), so a fetch
# does not return whole partitions at once, which would hide reordering in (c).
GATING_CONSUMER: dict[str, Any] = {"auto_offset_reset": "earliest", "max_poll_records": 100_000}
# Part 2: keyed 100 B values; each carries (key number, that key's sequence number).
GATING_KEYS = 20_000
GATING_VALUE_BYTES = 100
GATING_PARTITIONS = 3
GATING_EXPANDED = 6
# Each gating topic is read this many times, interleaved (a, b, c, a, b, c, ...), each time by
# a new group: repeat reads differ by 10-20 % on the shared cores, so one read says little.
GATING_READS = 3
_KEY_SEQ = struct.Struct(">II")


# -- running a client in its own process -----------------------------------------------------


@dataclass(slots=True)
class ClientRun:
    """What a client process measured between "go" and its last record."""

    messages: int
    elapsed_s: float
    client_cpu_s: float
    errors: int = 0
    first_record_s: float = 0.0  # consumers: until the first record (join, positions, gates)
    assigned_s: float = 0.0  # group members: until the group assigned partitions
    violations: int = 0  # records of a key read after a newer record of that key
    new_partition_records: int = 0  # records read from partitions the expansion added


Worker = Callable[..., ClientRun]


def _wait_for_go(conn: Connection) -> None:
    """Connected, metadata known: tell the driver, and start when it says so."""
    conn.send("ready")
    if conn.recv() != "go":
        raise RuntimeError("driver did not say go")


def _tune_gc(tune: bool) -> None:
    """The broker's collector settings (freeze what the imports built, collect young objects
    less often); before the clients are built, so their objects stay in view."""
    if tune:
        from kafka_ext.server.broker import tune_garbage_collector
        tune_garbage_collector()


def _child(target: Worker, args: tuple[Any, ...], conn: Connection) -> None:
    try:
        conn.send(("ok", target(conn, *args)))
    except BaseException:  # the driver re-raises it with the traceback
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _receive(conn: Connection, what: str) -> Any:
    if not conn.poll(RUN_TIMEOUT_S):
        raise TimeoutError(f"{what}: no answer in {RUN_TIMEOUT_S:.0f} s")
    try:
        message = conn.recv()
    except EOFError:
        raise RuntimeError(f"{what}: the client process died") from None
    if isinstance(message, tuple) and message[0] == "error":
        raise RuntimeError(f"{what} failed in its process:\n{message[1]}")
    return message


def run_client(broker: BenchBroker, what: str, target: Worker, *args: Any
               ) -> tuple[ClientRun, float]:
    """Run `target(conn, *args)` in a spawned process; its result and the broker's CPU
    seconds from "go" to the result."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(target, args, there), name=what, daemon=True)
    proc.start()
    there.close()  # so a dead child reads as EOF here
    try:
        if _receive(here, what) != "ready":
            raise RuntimeError(f"{what}: unexpected first message")
        cpu_before = broker.cpu_seconds()
        here.send("go")
        status, run = _receive(here, what)
        broker_cpu_s = broker.cpu_seconds() - cpu_before
    finally:
        here.close()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert status == "ok"
    return run, broker_cpu_s


# -- the clients (each body runs in its own process) -----------------------------------------


def confluent_produce(conn: Connection, bootstrap: str, topic: str, value_bytes: int,
                      messages: int) -> ClientRun:
    """bench_broker.py's produce loop, for a fixed count: poll(0) every 1,000 records."""
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    producer = ConfluentProducer({"bootstrap.servers": bootstrap, **CONFLUENT_PRODUCER})
    producer.list_topics(topic, timeout=30)
    value = os.urandom(value_bytes)
    produce = producer.produce
    _wait_for_go(conn)
    cpu_before = time.process_time()
    started = time.perf_counter()
    sent = 0
    while sent < messages:
        for _ in range(min(YIELD_EVERY, messages - sent)):
            try:
                produce(topic, value, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.001)
                continue
            sent += 1
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_before
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return ClientRun(sent, elapsed_s, cpu_s, errors)


def confluent_consume(conn: Connection, bootstrap: str, topic: str, partitions: int,
                      expected: int) -> ClientRun:
    """bench_broker.py's consume loop: assign from the beginning, consume(10000) batches."""
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONSUMER})
    consumer.list_topics(topic, timeout=30)
    _wait_for_go(conn)
    # assign() after "go": librdkafka starts fetching in its threads as soon as it is assigned.
    cpu_before = time.process_time()
    started = time.perf_counter()
    consumer.assign([ConfluentTopicPartition(topic, p, OFFSET_BEGINNING)
                     for p in range(partitions)])
    received = errors = 0
    first_s = 0.0
    deadline = started + RUN_TIMEOUT_S
    try:
        while received < expected and time.perf_counter() < deadline:
            for msg in consumer.consume(CONFLUENT_CONSUME_BATCH, 0.5):
                if msg.error() is None:
                    received += 1
                else:
                    errors += 1
            if received and not first_s:
                first_s = time.perf_counter() - started
        elapsed_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_before
    finally:
        consumer.close()
    if received < expected:
        raise RuntimeError(f"{received} of {expected} messages in {RUN_TIMEOUT_S:.0f} s")
    return ClientRun(received, elapsed_s, cpu_s, errors, first_s)


def our_produce(conn: Connection, bootstrap: str, topic: str, value_bytes: int,
                messages: int, tune_gc: bool) -> ClientRun:
    _tune_gc(tune_gc)
    return asyncio.run(_our_produce(conn, bootstrap, topic, value_bytes, messages))


async def _our_produce(conn: Connection, bootstrap: str, topic: str, value_bytes: int,
                       messages: int) -> ClientRun:
    """enqueue() every record (futures not awaited, a callback counts failures), yield to
    the sender every 1,000 records as the confluent loop polls, then flush()."""
    errors = 0

    def on_done(future: asyncio.Future[Any]) -> None:
        nonlocal errors
        if future.cancelled() or future.exception() is not None:
            errors += 1

    async with Producer(bootstrap, **OUR_PRODUCER) as producer:
        await producer.topic_metadata(topic)
        value = os.urandom(value_bytes)
        enqueue = producer.enqueue
        _wait_for_go(conn)  # blocks the loop briefly, while nothing is in flight
        cpu_before = time.process_time()
        started = time.perf_counter()
        for i in range(messages):
            (await enqueue(topic, value)).add_done_callback(on_done)
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                # enqueue() only suspends on a full buffer: without this the sender would
                # not ship a batch before the buffer filled.
                await asyncio.sleep(0)
        await producer.flush()
        elapsed_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_before
    return ClientRun(messages - errors, elapsed_s, cpu_s, errors)


def our_consume(conn: Connection, bootstrap: str, topic: str, partitions: int,
                expected: int, tune_gc: bool) -> ClientRun:
    _tune_gc(tune_gc)
    return asyncio.run(_our_consume(conn, bootstrap, topic, partitions, expected))


async def _our_consume(conn: Connection, bootstrap: str, topic: str, partitions: int,
                       expected: int) -> ClientRun:
    """assign() every partition (no group: earliest), poll() until `expected` records."""
    async with Consumer(bootstrap, **OUR_CONSUMER) as consumer:
        await consumer.topic_metadata(topic)
        _wait_for_go(conn)
        cpu_before = time.process_time()
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        received = 0
        first_s = 0.0
        deadline = started + RUN_TIMEOUT_S
        while received < expected and time.perf_counter() < deadline:
            received += len(await consumer.poll(POLL_TIMEOUT_MS))
            if received and not first_s:
                first_s = time.perf_counter() - started
        elapsed_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_before
    if received < expected:
        raise RuntimeError(f"{received} of {expected} messages in {RUN_TIMEOUT_S:.0f} s")
    return ClientRun(received, elapsed_s, cpu_s, first_record_s=first_s)


def our_group_consume(conn: Connection, bootstrap: str, topic: str, group: str,
                      expected: int, gating: bool) -> ClientRun:
    return asyncio.run(_our_group_consume(conn, bootstrap, topic, group, expected, gating))


async def _our_group_consume(conn: Connection, bootstrap: str, topic: str, group: str,
                             expected: int, gating: bool) -> ClientRun:
    """One group member reads the topic from earliest; per-key order is checked after the
    clock stops, so the check costs the three runs nothing."""
    batches = []
    assigned_s = 0.0

    def on_assign(_partitions: set[TopicPartition]) -> None:
        nonlocal assigned_s
        assigned_s = time.perf_counter() - started

    async with Consumer(bootstrap, group_id=group, enable_auto_commit=False,
                        expansion_gating=gating, **GATING_CONSUMER) as consumer:
        await consumer.topic_metadata(topic)
        _wait_for_go(conn)
        cpu_before = time.process_time()
        started = time.perf_counter()
        consumer.subscribe([topic], on_assign=on_assign)
        received = 0
        first_s = 0.0
        deadline = started + RUN_TIMEOUT_S
        while received < expected and time.perf_counter() < deadline:
            records = await consumer.poll(POLL_TIMEOUT_MS)
            received += len(records)
            batches.append(records)
            if received and not first_s:
                first_s = time.perf_counter() - started
        elapsed_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_before
    if received < expected:
        raise RuntimeError(f"{received} of {expected} messages in {RUN_TIMEOUT_S:.0f} s")
    newest: dict[int, int] = {}
    violations = new_partition_records = 0
    for records in batches:
        for record in records:
            assert record.value is not None
            key, seq = _KEY_SEQ.unpack_from(record.value)
            if seq <= newest.get(key, -1):
                violations += 1
            else:
                newest[key] = seq
            if record.partition >= GATING_PARTITIONS:
                new_partition_records += 1
    return ClientRun(received, elapsed_s, cpu_s, 0, first_s, assigned_s, violations,
                     new_partition_records)


# -- driver-side helpers (our Admin and Producer, in this process, untimed) ------------------


async def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    async with Admin(bootstrap) as admin:
        listed = await admin.list_offsets(
            {TopicPartition(topic, p): "latest" for p in range(partitions)})
    return sum(entry.offset for entry in listed.values())


async def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    async with Admin(bootstrap) as admin:
        await admin.delete_topics(topics)


def check_stored(bootstrap: str, topic: str, partitions: int, expected: int) -> None:
    stored = asyncio.run(_end_offsets(bootstrap, topic, partitions))
    if stored != expected:
        raise RuntimeError(f"{topic}: {stored:,} records stored, {expected:,} produced")


def _keyed(i: int, keys: list[bytes], padding: bytes) -> tuple[bytes, bytes]:
    """Message i: key i mod GATING_KEYS, carrying that key's sequence number i div it."""
    key = i % GATING_KEYS
    return keys[key], _KEY_SEQ.pack(key, i // GATING_KEYS) + padding


async def fill_keyed_topic(bootstrap: str, topic: str, messages: int, expand: bool) -> None:
    """Half the messages into GATING_PARTITIONS partitions, the expansion (if any), then the
    other half through the same producer: its metadata still says 3 partitions, so its first
    batches are refused with INVALID_PARTITION_COUNT and their keys placed again by 6."""
    keys = [b"key-%05d" % k for k in range(GATING_KEYS)]
    padding = b"\x00" * (GATING_VALUE_BYTES - _KEY_SEQ.size)
    failed: list[BaseException] = []

    def on_done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            failed.append(future.exception())  # type: ignore[arg-type]

    async with Producer(bootstrap, **OUR_PRODUCER) as producer:
        half = messages // 2
        for first, last in ((0, half), (half, messages)):
            if first and expand:
                async with Admin(bootstrap) as admin:
                    await admin.create_partitions({topic: GATING_EXPANDED})
            for i in range(first, last):
                key, value = _keyed(i, keys, padding)
                (await producer.enqueue(topic, value, key=key)).add_done_callback(on_done)
                if i % YIELD_EVERY == YIELD_EVERY - 1:
                    await asyncio.sleep(0)
            await producer.flush()
    if failed:
        raise RuntimeError(f"{topic}: {len(failed)} records failed, first: {failed[0]!r}")


# -- part 1: ours beside confluent-kafka -----------------------------------------------------


@dataclass(slots=True, frozen=True)
class Shape:
    value_bytes: int
    partitions: int
    messages: int

    @property
    def name(self) -> str:
        size = "1k" if self.value_bytes == 1024 else f"{self.value_bytes}b"
        return f"{size}-p{self.partitions}"


CONFLUENT = "confluent-kafka"
OURS = "ours"
OURS_TUNED = "ours, broker's GC settings"
# Each client's producer and consumer body, and the arguments they take after the common ones.
PRODUCERS: dict[str, tuple[Worker, tuple[Any, ...]]] = {
    CONFLUENT: (confluent_produce, ()), OURS: (our_produce, (False,)),
    OURS_TUNED: (our_produce, (True,))}
CONSUMERS: dict[str, tuple[Worker, tuple[Any, ...]]] = {
    CONFLUENT: (confluent_consume, ()), OURS: (our_consume, (False,)),
    OURS_TUNED: (our_consume, (True,))}


@dataclass(slots=True)
class Compared:
    """One case measured with each client, keyed by client."""

    name: str
    runs: dict[str, Throughput] = field(default_factory=dict)

    def ratio(self, client: str) -> float:
        return self.runs[client].messages_per_s / self.runs[CONFLUENT].messages_per_s


def _throughput(name: str, run: ClientRun, value_bytes: int, broker_cpu_s: float) -> Throughput:
    return Throughput(name, run.messages, value_bytes, run.elapsed_s, broker_cpu_s,
                      run.client_cpu_s, run.errors)


def _log(client: str, t: Throughput) -> None:
    print(f"{t.name} {client}: {t.messages_per_s:,.0f} msg/s {t.mb_per_s:,.1f} MB/s, client cpu "
          f"{t.client_cpu_s:.2f} s, broker {t.cpu_s_per_gb:.1f} s/GB", flush=True)


def run_shape(broker: BenchBroker, shape: Shape) -> tuple[Compared, Compared]:
    """Produce with each client into its own topic; read confluent-kafka's topic with each.
    Each topic is deleted once read, so the next produce does not start under the previous
    one's dirty pages."""
    bootstrap = broker.bootstrap
    produced = Compared(f"produce-{shape.name}")
    consumed = Compared(f"consume-{shape.name}")
    for index, (client, (producer_fn, extra)) in enumerate(PRODUCERS.items()):
        topic = f"client-{shape.name}-{index}"
        create_topic(bootstrap, topic, shape.partitions)
        run, cpu = run_client(broker, f"{produced.name} {client}", producer_fn, bootstrap,
                              topic, shape.value_bytes, shape.messages, *extra)
        check_stored(bootstrap, topic, shape.partitions, shape.messages)
        produced.runs[client] = _throughput(produced.name, run, shape.value_bytes, cpu)
        _log(client, produced.runs[client])
        if client == CONFLUENT:
            for reader, (consumer_fn, extra) in CONSUMERS.items():
                run, cpu = run_client(broker, f"{consumed.name} {reader}", consumer_fn,
                                      bootstrap, topic, shape.partitions, shape.messages,
                                      *extra)
                consumed.runs[reader] = _throughput(consumed.name, run, shape.value_bytes, cpu)
                _log(reader, consumed.runs[reader])
        asyncio.run(_delete_topics(bootstrap, [topic]))
    return produced, consumed


# -- part 2: KIP-253 gating ------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class GatingCase:
    key: str
    name: str
    expand: bool
    gating: bool


GATING_CASES = [
    GatingCase("a", "(a) no expansion, 3 partitions", expand=False, gating=True),
    GatingCase("b", "(b) expanded 3 -> 6, gating on", expand=True, gating=True),
    GatingCase("c", "(c) expanded 3 -> 6, gating off", expand=True, gating=False),
]


@dataclass(slots=True)
class GatingResult:
    """Every read of one case's topic."""

    case: GatingCase
    reads: list[ClientRun] = field(default_factory=list)

    @property
    def median(self) -> ClientRun:
        return sorted(self.reads, key=lambda r: r.elapsed_s)[len(self.reads) // 2]

    @property
    def messages_per_s(self) -> float:
        """Of the median read."""
        return self.median.messages / self.median.elapsed_s

    @property
    def rates(self) -> list[float]:
        return [r.messages / r.elapsed_s for r in self.reads]


def fill_gating_topic(broker: BenchBroker, case: GatingCase, messages: int) -> str:
    topic = f"client-gating-{case.key}"
    create_topic(broker.bootstrap, topic, GATING_PARTITIONS)
    started = time.perf_counter()
    asyncio.run(fill_keyed_topic(broker.bootstrap, topic, messages, case.expand))
    partitions = GATING_EXPANDED if case.expand else GATING_PARTITIONS
    check_stored(broker.bootstrap, topic, partitions, messages)
    print(f"{case.name}: {messages:,} records written in {time.perf_counter() - started:.1f} s",
          flush=True)
    return topic


def read_gating_topic(broker: BenchBroker, case: GatingCase, topic: str, group: str,
                      messages: int) -> ClientRun:
    run, _ = run_client(broker, f"gating {case.name}", our_group_consume, broker.bootstrap,
                        topic, group, messages, case.gating)
    print(f"{case.name}: {run.messages / run.elapsed_s:,.0f} msg/s in {run.elapsed_s:.2f} s, "
          f"assigned after {run.assigned_s * 1000:.0f} ms, first record after "
          f"{run.first_record_s * 1000:.0f} ms, {run.violations} order violations, "
          f"{run.new_partition_records:,} from new partitions", flush=True)
    return run


def run_gating(broker: BenchBroker, messages: int) -> dict[str, GatingResult]:
    """Write each case's topic once, then read them in turn GATING_READS times."""
    topics = {case.key: fill_gating_topic(broker, case, messages) for case in GATING_CASES}
    results = {case.key: GatingResult(case) for case in GATING_CASES}
    for round_no in range(GATING_READS):
        for case in GATING_CASES:
            results[case.key].reads.append(read_gating_topic(
                broker, case, topics[case.key], f"bench-gating-{case.key}-{round_no}", messages))
    asyncio.run(_delete_topics(broker.bootstrap, list(topics.values())))
    return results


# -- report ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    quick: bool
    shapes: list[Shape]
    gating_messages: int
    produce: list[Compared] = field(default_factory=list)
    consume: list[Compared] = field(default_factory=list)
    gating: dict[str, GatingResult] = field(default_factory=dict)
    wall_s: float = 0.0
    load_before: str = ""
    load_after: str = ""


def _compared_rows(cases: list[Compared]) -> list[str]:
    out = ["| case | client | messages | msg/s | MB/s | client CPU s | client CPU µs/msg "
           "| client CPU busy | broker CPU s/GB | vs confluent-kafka |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in cases:
        for client, t in case.runs.items():
            ratio = "" if client == CONFLUENT else f"**{case.ratio(client):.2f}x**"
            out.append(f"| {t.name} | {client} | {t.messages:,} | {t.messages_per_s:,.0f} "
                       f"| {t.mb_per_s:,.1f} | {t.client_cpu_s:.2f} "
                       f"| {t.client_cpu_s / t.messages * 1e6:.1f} "
                       f"| {t.client_cpu_s / t.elapsed_s:.0%} | {t.cpu_s_per_gb:,.1f} "
                       f"| {ratio} |")
    return out


def _gating_rows(results: list[GatingResult]) -> list[str]:
    out = [f"| run | msg/s (median of {GATING_READS}) | msg/s (all reads) | consume s "
           "| assigned after ms | first record after ms | client CPU s "
           "| records from new partitions | per-key order violations (each read) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r.median
        out.append(f"| {r.case.name} | {r.messages_per_s:,.0f} "
                   f"| {', '.join(f'{rate:,.0f}' for rate in r.rates)} | {m.elapsed_s:.2f} "
                   f"| {m.assigned_s * 1000:,.0f} | {m.first_record_s * 1000:,.0f} "
                   f"| {m.client_cpu_s:.2f} | {m.new_partition_records:,} "
                   f"| {', '.join(f'{run.violations:,}' for run in r.reads)} |")
    return out


def _span(values: list[float], fmt: str = ".2f", unit: str = "x") -> str:
    low, high = min(values), max(values)
    if f"{low:{fmt}}" == f"{high:{fmt}}":
        return f"{low:{fmt}}{unit}"
    return f"{low:{fmt}}-{high:{fmt}}{unit}"


# Reads of one topic by one setup differ by this much here (2 shared cores): a smaller
# difference of the medians is not claimed, even when the reads happen not to overlap.
NOISE = 0.10


def _versus(mine: GatingResult, other: GatingResult, spread: float) -> str:
    """The median rates compared, claiming a difference only beyond the noise; `spread` is
    how much the reads of one topic differed in this run."""
    ratio = mine.messages_per_s / other.messages_per_s
    overlap = min(mine.rates) <= max(other.rates) and min(other.rates) <= max(mine.rates)
    if overlap or abs(ratio - 1) < NOISE:
        return (f"at the same rate within run-to-run noise ({ratio:.2f}x of the medians; "
                f"reads of one topic differ by up to {spread:.0%})")
    change = f"{1 - ratio:.0%} slower" if ratio < 1 else f"{ratio - 1:.0%} faster"
    return f"{change} ({ratio:.2f}x of the medians, every read)"


def _mean_s_per_gb(cases: list[Compared], client: str) -> float:
    return sum(c.runs[client].cpu_s_per_gb for c in cases) / len(cases)


def _reading(report: Report) -> str:
    """What the numbers show, computed from this run's numbers; the explanations come from
    profiling our client (py-spy, gc.callbacks) while writing this script."""
    produce, consume = report.produce, report.consume
    busy = [c.runs[OURS].client_cpu_s / c.runs[OURS].elapsed_s for c in produce + consume]
    produce_us = [c.runs[OURS].client_cpu_s / c.runs[OURS].messages * 1e6 for c in produce]
    their_us = [c.runs[CONFLUENT].client_cpu_s / c.runs[CONFLUENT].messages * 1e6
                for c in produce]
    consume_us = [c.runs[OURS].client_cpu_s / c.runs[OURS].messages * 1e6 for c in consume]
    worst = min(produce + consume, key=lambda c: c.ratio(OURS))
    tuned_produce = [c.runs[OURS_TUNED].messages_per_s / c.runs[OURS].messages_per_s
                     for c in produce]
    tuned_consume = [c.runs[OURS_TUNED].messages_per_s / c.runs[OURS].messages_per_s
                     for c in consume]
    parts = [
        "**Reading the numbers.** Our client reaches "
        f"{_span([c.ratio(OURS) for c in produce])} of confluent-kafka's produce rate and "
        f"{_span([c.ratio(OURS) for c in consume])} of its consume rate, furthest behind in "
        f"{worst.name} ({worst.ratio(OURS):.2f}x). Its process is busy "
        f"{_span(busy, '.0%', '')} of the time, so the limit is Python work per record in one "
        "event loop, where librdkafka works in C on its own threads. Our producer spends "
        f"{_span(produce_us, '.1f', ' µs')} of CPU per record whether values are 100 B or 1 KiB "
        f"(confluent-kafka {_span(their_us, '.1f', ' µs')}): the cost is per record (the "
        "`enqueue()` coroutine and future, placement, the accumulator, building the batch, "
        "completing every future), not per byte. In a py-spy profile, "
        "`TopicMetadata.writable_partitions`, which sorts the partitions again for every "
        "record, is about a tenth of it. Our consumer spends "
        f"{_span(consume_us, '.1f', ' µs')} per record, mostly in the pure-Python record "
        "decoder (varints, then a `Record` and a `ConsumerRecord` per record).",
        "With the broker's collector settings our producer is "
        f"{_span(tuned_produce)} as fast and our consumer {_span(tuned_consume)}. Every "
        "record waiting for its acknowledgement is several objects the cyclic collector "
        "tracks (a `PendingRecord`, its future, the done callbacks), hundreds of thousands "
        "of them at once here, and under CPython's default thresholds (700/10/10) full "
        "collections rescan them all again and again: counted with `gc.callbacks` for "
        "200,000 records of 100 B, 32 full collections took about 1.9 s of the producer's 5 CPU "
        "seconds, against 2 under the broker's settings. The broker tunes its collector at "
        "start; the client leaves that to the application.",
        "Broker CPU per GB: produce "
        f"{_mean_s_per_gb(produce, CONFLUENT):.1f} s/GB under confluent-kafka and "
        f"{_mean_s_per_gb(produce, OURS):.1f} under ours, consume "
        f"{_mean_s_per_gb(consume, CONFLUENT):.1f} and {_mean_s_per_gb(consume, OURS):.1f} "
        "(averages of the cases; the clock ticks are 10 ms, so short runs round). Our producer "
        "keeps at most one batch in flight per partition, with acks=1 and idempotence off too "
        "(the accumulator's rule), where librdkafka pipelines several."]
    a, b, c = (report.gating.get(k) for k in "abc")
    if a is not None and b is not None and c is not None:
        violations_b = sum(r.violations for r in b.reads)
        spread = max(max(r.rates) / min(r.rates) - 1 for r in (a, b, c))
        violations_c = [r.violations for r in c.reads]
        parts.append(
            "KIP-253's gating: against the same expansion with gating off, (b) read "
            f"{_versus(b, c, spread)}; against a topic never expanded, {_versus(b, a, spread)}. "
            "Gating adds a "
            "LeaderEpochsForPartition and an OffsetForLeaderEpoch round trip before the first "
            "fetch, then fetches the three prior partitions alone until they reach their "
            "thresholds; the total work, one decode per record, is the same. The first record "
            f"came after {b.median.first_record_s * 1000:.0f} ms with gating and "
            f"{c.median.first_record_s * 1000:.0f} ms without (the first fetch then asks for "
            "all six partitions). "
            + (f"With gating no record arrived after a newer record of its key; without it "
               f"{_span([float(v) for v in violations_c], ',.0f', '')} did per read "
               f"({_span([v / c.median.messages for v in violations_c], '.1%', '')} of the "
               "records): the reordering "
               "gating exists to prevent."
               if violations_b == 0 and min(violations_c) > 0 else
               f"Order violations: {violations_b:,} with gating over {GATING_READS} reads, "
               f"{sum(violations_c):,} without."))
    return " ".join(parts)


def render(report: Report) -> str:
    shapes = ", ".join(f"{s.name} {s.messages:,}" for s in report.shapes)
    command = "python bench/bench_client.py" + (" --quick" if report.quick else "")
    lines = [
        SECTION_TITLE, "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}, confluent-kafka {_client_version()}; one broker on "
        f"loopback, broker and clients share the machine. Whole run {report.wall_s:.0f} s; load "
        f"average before/after: {report.load_before} / {report.load_after} (other workers may "
        "share the CPUs, so repeat runs vary). Each client runs alone in its own spawned "
        "process; client CPU is that process's `time.process_time()` (librdkafka's threads "
        "included), broker CPU its utime+stime from /proc over the same window.", "",
        f"**Settings.** Producers: acks=1, linger 5 ms, batch size {BATCH_BYTES:,} B, no "
        "compression, idempotence off, unkeyed records, each into its own topic; "
        "confluent-kafka `produce()` with a delivery callback and `poll(0)` every "
        f"{YIELD_EVERY:,} records (bench_broker.py's loop), ours `await enqueue()` with a "
        f"done callback on each future and `asyncio.sleep(0)` every {YIELD_EVERY:,} records, "
        f"buffer_memory_bytes={OUR_PRODUCER['buffer_memory_bytes'] // 2**20} MiB; time "
        "includes the final flush, and the stored record count is checked afterwards. "
        "Consumers: `assign()` every partition from the beginning of the topic confluent-kafka "
        "wrote (the same bytes for each), fetch.max.bytes 50 MiB, 10 MiB per partition; "
        f"confluent-kafka `consume({CONFLUENT_CONSUME_BATCH:,})`, ours `poll()` with "
        f"max_poll_records={OUR_CONSUMER['max_poll_records']:,}; time includes assign and "
        f"the offset lookup. \"{OURS_TUNED}\": the same code after "
        "`kafka_ext.server.broker.tune_garbage_collector()` (`gc.freeze()` after the imports, "
        f"thresholds 50,000/20/50). Messages per case: {shapes}. MB/s counts value bytes.", "",
        "**Produce:**", ""]
    lines += _compared_rows(report.produce)
    lines += ["", "**Consume:**", ""]
    lines += _compared_rows(report.consume)
    lines += [
        "",
        "**KIP-253 gating** (our consumer, one member of a new group: subscribe and read from "
        f"earliest until all {report.gating_messages:,} records arrived; {GATING_KEYS:,} keys, "
        f"{GATING_VALUE_BYTES} B values carrying the key's sequence number; each run its own "
        f"topic of {GATING_PARTITIONS} partitions written by our producer, read "
        f"{GATING_READS} times in turn with the other runs' topics, each time by a new group "
        "(so from earliest, with no committed offsets). In (b) and (c) "
        f"half the records were written, the topic grown to {GATING_EXPANDED} with our Admin's "
        "`create_partitions`, and the other half written by the same producer, whose first "
        "batches after the expansion are refused with INVALID_PARTITION_COUNT and placed "
        "again by 6. Fetch sizes are the client's defaults (1 MiB per partition), "
        f"max_poll_records={GATING_CONSUMER['max_poll_records']:,}, "
        "group.initial.rebalance.delay.ms=0. Order is checked after the clock stops; a "
        "violation is a record read after a newer record of its key):", ""]
    lines += _gating_rows(list(report.gating.values()))
    a, b, c = (report.gating.get(k) for k in "abc")
    if a is not None and b is not None and c is not None:
        lines += ["", "Throughput ratios of the medians: (b)/(a) = "
                  f"**{b.messages_per_s / a.messages_per_s:.2f}x**, (b)/(c) = "
                  f"**{b.messages_per_s / c.messages_per_s:.2f}x**."]
    lines += ["", _reading(report), ""]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--no-write", action="store_true", help="leave RESULTS.md alone")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    shapes = [Shape(1024, 1, 300_000 // scale), Shape(100, 1, 1_000_000 // scale),
              Shape(1024, 6, 300_000 // scale)]
    report = Report(args.quick, shapes, 600_000 // scale, load_before=_load_average())
    started = time.perf_counter()
    with running_broker(overrides=BROKER_OVERRIDES) as broker:
        for shape in shapes:
            produced, consumed = run_shape(broker, shape)
            report.produce.append(produced)
            report.consume.append(consumed)
        report.gating = run_gating(broker, report.gating_messages)
        if "Traceback" in broker.log():
            print(f"broker logged a traceback:\n{broker.log()}", file=sys.stderr)
    report.wall_s = time.perf_counter() - started
    report.load_after = _load_average()
    section = render(report)
    print(section)
    if not args.no_write:
        write_section(section, title=SECTION_TITLE)


if __name__ == "__main__":
    try:
        main()
    except KafkaException as exc:
        sys.exit(f"benchmark failed: {exc}")
