"""Stock clients through a partition reduction (seed 002): confluent-kafka, kafka-python,
aiokafka and kafkajs, each producing keyed and unkeyed records with acks=all while partitions 2-3
of 4 turn ReadOnly and then leave the topic, and each reading with a group consumer and an
assigned one. What each client does is tabled in docs/partition-count.md ("What each stock
client does"); these tests pin it down.

The broker's choice under test: a ReadOnly (or None) partition keeps its leader in Metadata and
answers produce with PARTITION_NOT_WRITABLE (1001, unknown to stock clients, so not retried);
a removed partition is gone from Metadata and answers UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient
from kafka.partitioner.default import murmur2

from kafka_ext.protocol.errors import ErrorCode
from tests.integration.clients import create_topic, wait_until
from tests.integration.conftest import BrokerProcess

CLI = [sys.executable, "-m", "kafka_ext"]
BROKER = {"delete.topic.partition.interval.delay.ms": "300",
          "group.initial.rebalance.delay.ms": "0"}
DELAY_MS = 3000
PARTITIONS = 4
KEPT = 2  # partitions 2-3 are removed
PREFILL = 20  # records per partition before the reduction
KEY_COUNT = 10
SEND_INTERVAL_S = 0.02
AFTER_GONE_S = 1.5  # how long the producers go on once the partitions are gone
FAST_FAILURE_S = 3.5  # a refused write is answered at once: well before any client timeout
# Client timeouts, short so that records stuck on a removed partition finish inside the test.
CLIENT_TIMEOUT_MS = 5000
KAFKAJS_VERSION = "2.2.4"
KAFKAJS_CACHE = Path.home() / ".cache" / "kafka-ext-tests" / f"kafkajs-{KAFKAJS_VERSION}"
KAFKAJS_SCRIPT = Path(__file__).parent / "js" / "reduction_client.js"

Record = tuple[int, int, str]  # partition, offset, value


@dataclass(slots=True)
class Sent:
    """One record a producer tried, and how it ended (monotonic seconds)."""

    value: str
    keyed: bool
    sent_s: float
    done_s: float | None = None
    partition: int | None = None  # where the client put it, when the client tells
    offset: int | None = None
    error: Any = None
    attempts: int = 1

    @property
    def acked(self) -> bool:
        return self.done_s is not None and self.error is None

    @property
    def latency_s(self) -> float:
        assert self.done_s is not None
        return self.done_s - self.sent_s


@dataclass
class Consumed:
    """What one consumer read, in order, and what happened to it."""

    records: list[Record] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    assignments: list[list[int]] = field(default_factory=list)


@dataclass
class Reduction:
    """Partitions 2-3 of `topic` removed with a delay while producers and consumers run."""

    altered_s: float = 0.0
    gone_s: float = 0.0
    read_only: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # 2-3, frozen
    kept: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # 0-1 at the end


class Worker(threading.Thread):
    """A client loop in a thread; an exception it raises fails the test."""

    def __init__(self, target: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._target_fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc


def _started(*workers: Worker) -> list[Worker]:
    for worker in workers:
        worker.start()
    return list(workers)


def _key(i: int) -> bytes:
    return b"key-%d" % (i % KEY_COUNT)


def _java_partition(key: bytes, count: int = PARTITIONS) -> int:
    """The partition of a keyed record for clients that hash as Kafka's Java client does."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def _partition_count(broker: BrokerProcess, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _read_log(broker: BrokerProcess, topic: str,
              partitions: Iterable[int]) -> dict[int, list[tuple[int, str]]]:
    """Everything in the partitions up to their end offsets now, with a neutral reader."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in partitions]
    got: dict[int, list[tuple[int, str]]] = {tp.partition: [] for tp in tps}
    try:
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} to {end}"
            for tp, messages in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [(m.offset, m.value.decode()) for m in messages
                                      if m.offset < end[tp]]
    finally:
        consumer.close()
    return got


def _prefill(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for p in range(PARTITIONS):
        for i in range(PREFILL):
            producer.produce(topic, b"pre-%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0


def _reduce_under_load(broker: BrokerProcess, topic: str, producers: list[Worker],
                       producing: Callable[[], bool], stop_producing: threading.Event,
                       start_consumers: Callable[[], list[Worker]],
                       read_everything: Callable[[dict[int, list[tuple[int, str]]]], bool],
                       stop_consuming: threading.Event) -> Reduction:
    """Start the producers, reduce the topic to KEPT partitions, start the consumers while
    2-3 are ReadOnly, go on producing AFTER_GONE_S once they are gone, and wait until the
    consumers have read every record of the ReadOnly partitions and of the kept ones."""
    reduction = Reduction()
    _prefill(broker, topic)
    for worker in producers:
        worker.start()
    wait_until(producing, 30, "the producers' first acknowledgements")
    reduction.altered_s = time.monotonic()
    run = subprocess.run(CLI + ["topics", "--bootstrap-server", broker.bootstrap, "--alter",
                                "--topic", topic, "--partitions", str(KEPT),
                                "--delete-partitions-delay", str(DELAY_MS)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    reduction.read_only = _read_log(broker, topic, range(KEPT, PARTITIONS))  # no more writes
    consumers = start_consumers()
    wait_until(lambda: _partition_count(broker, topic) == KEPT, 30, "partitions 2-3 gone")
    reduction.gone_s = time.monotonic()
    time.sleep(AFTER_GONE_S)  # a run length, not a wait for a condition
    stop_producing.set()
    for worker in producers:
        worker.join(60)
        assert not worker.is_alive(), "a producer did not finish"
        assert worker.failure is None, repr(worker.failure)
    reduction.kept = _read_log(broker, topic, range(KEPT))
    expected = {**reduction.read_only, **reduction.kept}
    try:
        wait_until(lambda: read_everything(expected), 30, "the consumers to read everything")
    finally:
        stop_consuming.set()
        for worker in consumers:
            worker.join(30)
    for worker in consumers:
        assert worker.failure is None, repr(worker.failure)
    return reduction


def _first_reads(records: list[Record]) -> dict[int, list[tuple[int, str]]]:
    """Per partition, the records in the order first read (a rebalance may deliver again)."""
    seen: set[tuple[int, int]] = set()
    out: dict[int, list[tuple[int, str]]] = {}
    for partition, offset, value in records:
        if (partition, offset) not in seen:
            seen.add((partition, offset))
            out.setdefault(partition, []).append((offset, value))
    return out


def _has_read(consumed: Consumed, expected: dict[int, list[tuple[int, str]]]) -> bool:
    reads = _first_reads(list(consumed.records))
    return all(len(reads.get(p, [])) >= len(log) for p, log in expected.items())


def _assert_read_everything(name: str, consumed: Consumed, reduction: Reduction) -> None:
    """Every record of the ReadOnly partitions and of the kept ones, each partition in offset
    order from 0, values as in the log, and no error surfaced to the application."""
    reads = _first_reads(consumed.records)
    for partition, log in {**reduction.read_only, **reduction.kept}.items():
        assert [offset for offset, _ in log] == list(range(len(log))), (partition, log[:3])
        assert reads.get(partition) == log, f"{name} consumer, partition {partition}"
    assert consumed.errors == [], f"{name} consumer: {consumed.errors[:5]}"


def _assert_rebalanced_to_kept(group: Consumed) -> None:
    """The group got all four partitions, then only the kept ones once the count dropped (an
    empty assignment from a join before the member had the topic's metadata is no matter)."""
    assignments = [a for a in group.assignments if a]
    assert assignments[0] == [0, 1, 2, 3] and assignments[-1] == [0, 1], group.assignments


def _assert_acked_in_log(sent: list[Sent], reduction: Reduction,
                         allowed_duplicates: Collection[str] = ()) -> None:
    """Each acknowledged record is at its partition and offset, once; records written before
    the reduction to 2-3 were read from the ReadOnly partitions."""
    logs = {**reduction.read_only, **reduction.kept}
    counts = Counter(v for log in logs.values() for _, v in log)
    for s in sent:
        if s.acked:
            assert s.partition is not None and s.offset is not None
            assert (s.offset, s.value) in logs[s.partition], s
            if s.value not in allowed_duplicates:
                assert counts[s.value] == 1, (s, counts[s.value])


def _slow(refused: list[Sent]) -> list[Sent]:
    """Refused writes that were not answered at once."""
    return [s for s in refused if s.latency_s >= FAST_FAILURE_S]


def _during_read_only(s: Sent, reduction: Reduction) -> bool:
    """Sent after the reduction started and answered before the partitions were gone."""
    return (s.sent_s > reduction.altered_s + 0.2 and s.done_s is not None
            and s.done_s < reduction.gone_s)


# --- confluent-kafka (librdkafka) ------------------------------------------------------------


def test_confluent_kafka_fails_read_only_writes_at_once_and_keeps_all_partitions(
        broker_factory: Any) -> None:
    broker = broker_factory(BROKER)
    topic = "shrink-confluent"
    sent: list[Sent] = []
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    group, assigned = Consumed(), Consumed()

    def produce() -> None:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": CLIENT_TIMEOUT_MS})
        i = 0
        while not stop_producing.is_set():
            for keyed in (True, False):
                s = Sent(("k-%d" if keyed else "u-%d") % i, keyed, time.monotonic())
                sent.append(s)

                def delivered(err: Any, msg: Any, s: Sent = s) -> None:
                    s.done_s, s.partition, s.error = time.monotonic(), msg.partition(), err
                    s.offset = msg.offset() if err is None else None

                producer.produce(topic, s.value.encode(), key=_key(i) if keyed else None,
                                 on_delivery=delivered)
            producer.poll(SEND_INTERVAL_S)
            i += 1
        assert producer.flush(CLIENT_TIMEOUT_MS / 1000 + 10) == 0

    def consume(consumed: Consumed, in_group: bool) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-readers",
            "auto.offset.reset": "earliest"})
        if in_group:
            consumer.subscribe([topic], on_assign=lambda _c, parts: consumed.assignments.append(
                sorted(p.partition for p in parts)))
        else:
            consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                             for p in range(PARTITIONS)])
        try:
            while not stop_consuming.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    consumed.errors.append(str(msg.error()))
                else:
                    consumed.records.append((msg.partition(), msg.offset(), msg.value().decode()))
        finally:
            consumer.close()

    reduction = _reduce_under_load(
        broker, topic, [Worker(produce)], lambda: any(s.acked for s in sent), stop_producing,
        lambda: _started(Worker(lambda: consume(group, True)),
                         Worker(lambda: consume(assigned, False))),
        lambda expected: _has_read(group, expected) and _has_read(assigned, expected),
        stop_consuming)

    _assert_acked_in_log(sent, reduction)
    failed = [s for s in sent if not s.acked]
    assert all(s.partition is not None and s.partition >= KEPT for s in failed), failed[:3]
    # ReadOnly: refused at once with the broker's code, which librdkafka does not retry.
    refused = [s for s in failed if _during_read_only(s, reduction)]
    assert refused and {s.error.code() for s in refused} == {ErrorCode.PARTITION_NOT_WRITABLE}
    assert not any(s.error.retriable() for s in refused)
    assert _slow(refused) == [], (reduction.altered_s, reduction.gone_s)
    assert {s.keyed for s in refused} == {True, False}  # the sticky partitioner picks them too
    # Gone: librdkafka never lowers a topic's partition count (same topic id), so it goes on
    # putting keyed and unkeyed records on 2-3; they are retried until message.timeout.ms.
    late = [s for s in sent if s.sent_s > reduction.gone_s + 0.5]
    stuck = [s for s in late if s.partition is not None and s.partition >= KEPT]
    assert stuck and {s.keyed for s in stuck} == {True, False}
    assert {s.error.code() for s in stuck} == {confluent_kafka.KafkaError._MSG_TIMED_OUT}
    assert min(s.latency_s for s in stuck) > CLIENT_TIMEOUT_MS / 1000 - 0.5
    _assert_read_everything("group", group, reduction)
    _assert_read_everything("assigned", assigned, reduction)
    # Never rebalanced: the count never dropped for librdkafka.
    assert [a for a in group.assignments if a] == [[0, 1, 2, 3]], group.assignments


# --- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_idempotent_producer_dies_on_the_first_read_only_write(
        broker_factory: Any) -> None:
    """kafka-python's default producer is idempotent; it takes any non-retriable produce error
    as fatal, so its first write to a ReadOnly partition fails every later send. A producer
    with enable_idempotence=False fails only the records put on the ReadOnly partitions."""
    broker = broker_factory(BROKER)
    topic = "shrink-kafka-python"
    sent: dict[bool, list[Sent]] = {True: [], False: []}  # by idempotence
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    group, assigned = Consumed(), Consumed()

    def produce(idempotent: bool) -> None:
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5,
            enable_idempotence=idempotent, request_timeout_ms=CLIENT_TIMEOUT_MS - 1000,
            delivery_timeout_ms=CLIENT_TIMEOUT_MS)
        prefix = "i" if idempotent else "p"
        i = 0
        while not stop_producing.is_set():
            for keyed in (True, False):
                s = Sent(f"{prefix}{'k' if keyed else 'u'}-{i}", keyed, time.monotonic())
                sent[idempotent].append(s)

                def ok(md: Any, s: Sent = s) -> None:
                    s.partition, s.offset, s.done_s = md.partition, md.offset, time.monotonic()

                def failed(exc: Exception, s: Sent = s) -> None:
                    s.error, s.done_s = exc, time.monotonic()

                future = producer.send(topic, s.value.encode(), key=_key(i) if keyed else None)
                future.add_callback(ok)
                future.add_errback(failed)
            i += 1
            time.sleep(SEND_INTERVAL_S)
        producer.flush(CLIENT_TIMEOUT_MS / 1000 + 10)
        producer.close()

    def consume(consumed: Consumed, in_group: bool) -> None:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=f"{topic}-readers" if in_group else None,
            auto_offset_reset="earliest")
        if in_group:
            class Listener(kafka.ConsumerRebalanceListener):
                def on_partitions_assigned(self, assigned: Any) -> None:
                    consumed.assignments.append(sorted(tp.partition for tp in assigned))

                def on_partitions_revoked(self, revoked: Any) -> None:
                    pass

            consumer.subscribe([topic], listener=Listener())
        else:
            consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        try:
            while not stop_consuming.is_set():
                try:
                    batches = consumer.poll(timeout_ms=100)
                except kafka.errors.KafkaError as exc:
                    consumed.errors.append(repr(exc))
                    continue
                for messages in batches.values():
                    consumed.records += [(m.partition, m.offset, m.value.decode())
                                         for m in messages]
        finally:
            consumer.close()

    reduction = _reduce_under_load(
        broker, topic, [Worker(lambda: produce(True)), Worker(lambda: produce(False))],
        lambda: all(any(s.acked for s in sent[idem]) for idem in sent), stop_producing,
        lambda: _started(Worker(lambda: consume(group, True)),
                         Worker(lambda: consume(assigned, False))),
        lambda expected: _has_read(group, expected) and _has_read(assigned, expected),
        stop_consuming)

    for records in sent.values():
        _assert_acked_in_log(records, reduction)
        assert all(s.done_s is not None for s in records)
    # enable_idempotence=False: the ReadOnly partitions' records fail at once with an error
    # class made up for the unknown code; keys that map to 0-1 never fail.
    plain = sent[False]
    refused = [s for s in plain if _during_read_only(s, reduction) and not s.acked]
    assert refused and {type(s.error).__name__ for s in refused} == {"UnrecognizedBrokerError"}
    assert {s.error.errno for s in refused} == {ErrorCode.PARTITION_NOT_WRITABLE}
    assert not any(s.error.retriable for s in refused)
    assert _slow(refused) == [], (reduction.altered_s, reduction.gone_s)
    assert not [s for s in plain if s.keyed and not s.acked
                and _java_partition(_key(int(s.value.split("-")[1]))) < KEPT]
    # Gone: UNKNOWN_TOPIC_OR_PARTITION makes it refresh its metadata; records sent afterwards
    # go to 0-1 only, and a batch still in flight for 2-3 fails at delivery_timeout_ms.
    late = [s for s in plain if s.sent_s > reduction.gone_s + 0.5]
    assert late and all(s.acked and s.partition is not None and s.partition < KEPT for s in late)
    for s in plain:
        if not s.acked and type(s.error).__name__ != "UnrecognizedBrokerError":
            assert isinstance(s.error, kafka.errors.KafkaTimeoutError), s
            assert s.latency_s > CLIENT_TIMEOUT_MS / 1000 - 0.5, s
        elif not s.acked:
            assert s.latency_s < FAST_FAILURE_S, s
    # Default (idempotent): the first refusal is fatal; nothing sent after it is acknowledged.
    idempotent = sent[True]
    first_failure = min(s.done_s for s in idempotent if s.done_s is not None and not s.acked)
    assert first_failure < reduction.gone_s
    after = [s for s in idempotent if s.sent_s > first_failure + 0.1]
    assert after and not any(s.acked for s in after)
    assert any(s.keyed and _java_partition(_key(int(s.value.split("-")[1]))) < KEPT
               for s in after)  # records for the kept partitions fail too
    _assert_read_everything("group", group, reduction)
    _assert_read_everything("assigned", assigned, reduction)
    _assert_rebalanced_to_kept(group)


# --- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_fails_read_only_writes_at_once_and_follows_the_smaller_count(
        broker_factory: Any) -> None:
    broker = broker_factory(BROKER)
    topic = "shrink-aiokafka"
    sent: list[Sent] = []
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    group, assigned = Consumed(), Consumed()

    async def produce() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                             linger_ms=5, request_timeout_ms=CLIENT_TIMEOUT_MS)
        await producer.start()
        pending = []
        i = 0
        try:
            while not stop_producing.is_set():
                for keyed in (True, False):
                    s = Sent(("k-%d" if keyed else "u-%d") % i, keyed, time.monotonic())
                    sent.append(s)
                    future = await producer.send(topic, s.value.encode(),
                                                 key=_key(i) if keyed else None)

                    def done(future: Any, s: Sent = s) -> None:
                        s.done_s = time.monotonic()
                        if future.exception() is not None:
                            s.error = future.exception()
                        else:
                            s.partition, s.offset = future.result().partition, future.result().offset

                    future.add_done_callback(done)
                    pending.append(future)
                i += 1
                await asyncio.sleep(SEND_INTERVAL_S)
            await asyncio.wait(pending, timeout=CLIENT_TIMEOUT_MS / 1000 + 10)
        finally:
            await producer.stop()

    async def consume(consumed: Consumed, in_group: bool) -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=f"{topic}-readers" if in_group else None,
            auto_offset_reset="earliest")
        await consumer.start()
        try:
            if in_group:
                class Listener(aiokafka.ConsumerRebalanceListener):
                    async def on_partitions_assigned(self, assigned: Any) -> None:
                        consumed.assignments.append(sorted(tp.partition for tp in assigned))

                    async def on_partitions_revoked(self, revoked: Any) -> None:
                        pass

                consumer.subscribe([topic], listener=Listener())
            else:
                partitions = [aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
                consumer.assign(partitions)
                await consumer.seek_to_beginning(*partitions)
            while not stop_consuming.is_set():
                try:
                    batches = await consumer.getmany(timeout_ms=100)
                except aiokafka.errors.KafkaError as exc:
                    consumed.errors.append(repr(exc))
                    continue
                for messages in batches.values():
                    consumed.records += [(m.partition, m.offset, m.value.decode())
                                         for m in messages]
        finally:
            await consumer.stop()

    reduction = _reduce_under_load(
        broker, topic, [Worker(lambda: asyncio.run(produce()))],
        lambda: any(s.acked for s in sent), stop_producing,
        lambda: _started(Worker(lambda: asyncio.run(consume(group, True))),
                         Worker(lambda: asyncio.run(consume(assigned, False)))),
        lambda expected: _has_read(group, expected) and _has_read(assigned, expected),
        stop_consuming)

    _assert_acked_in_log(sent, reduction)
    assert all(s.done_s is not None for s in sent)
    # ReadOnly: aiokafka maps the unknown code to UnknownError (the code is lost), not retried.
    refused = [s for s in sent if _during_read_only(s, reduction) and not s.acked]
    assert refused and {type(s.error) for s in refused} == {aiokafka.errors.UnknownError}
    assert _slow(refused) == [], (reduction.altered_s, reduction.gone_s)
    assert {s.keyed for s in refused} == {True, False}
    assert not [s for s in sent if s.keyed and not s.acked
                and _java_partition(_key(int(s.value.split("-")[1]))) < KEPT]
    # Gone: it refreshes on UNKNOWN_TOPIC_OR_PARTITION; later records go to 0-1 only; a batch
    # in flight for 2-3 is retried until request_timeout_ms.
    late = [s for s in sent if s.sent_s > reduction.gone_s + 0.5]
    assert late and all(s.acked and s.partition is not None and s.partition < KEPT for s in late)
    for s in sent:
        if not s.acked and not isinstance(s.error, aiokafka.errors.UnknownError):
            assert s.error.retriable and s.latency_s > CLIENT_TIMEOUT_MS / 1000 - 0.5, s
        elif not s.acked:
            assert s.latency_s < FAST_FAILURE_S, s
    _assert_read_everything("group", group, reduction)
    _assert_read_everything("assigned", assigned, reduction)
    _assert_rebalanced_to_kept(group)


# --- kafkajs ---------------------------------------------------------------------------------


def _kafkajs_modules() -> Path:
    """kafkajs@KAFKAJS_VERSION installed once into a cache outside the repository."""
    package = KAFKAJS_CACHE / "node_modules" / "kafkajs" / "package.json"
    if not package.exists():
        if shutil.which("node") is None or shutil.which("npm") is None:
            pytest.fail("the kafkajs test needs node and npm on PATH")
        KAFKAJS_CACHE.mkdir(parents=True, exist_ok=True)
        run = subprocess.run(["npm", "install", "--prefix", str(KAFKAJS_CACHE), "--no-audit",
                              "--no-fund", f"kafkajs@{KAFKAJS_VERSION}"],
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0 or not package.exists():
            pytest.fail(f"npm could not install kafkajs@{KAFKAJS_VERSION} into {KAFKAJS_CACHE}: "
                        f"is the npm registry reachable?\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    version = json.loads(package.read_text())["version"]
    assert version == KAFKAJS_VERSION, f"{KAFKAJS_CACHE} holds kafkajs {version}"
    return KAFKAJS_CACHE / "node_modules"


class NodeClient:
    """tests/integration/js/reduction_client.js in a subprocess; its JSON lines are collected
    as they come (times are the Python side's monotonic clock)."""

    def __init__(self, modules: Path, **options: Any) -> None:
        env = {**os.environ, "NODE_PATH": str(modules)}
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(["node", str(KAFKAJS_SCRIPT), json.dumps(options)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self._clock = (time.monotonic(), time.time() * 1000)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def monotonic(self, epoch_ms: float) -> float:
        return self._clock[0] + (epoch_ms - self._clock[1]) / 1000

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.proc.wait(60)
        self._reader.join(10)
        stderr = self.proc.stderr.read() if self.proc.stderr else ""
        assert self.proc.returncode == 0, f"{self.lines[-3:]}\n{stderr}"
        assert self.lines[-1] == {"done": True}, self.lines[-3:]


def test_kafkajs_fails_whole_sends_with_a_read_only_record(broker_factory: Any) -> None:
    """kafkajs fails a whole send() when one partition of its request fails: with the unknown
    code at once (records for the kept partitions were written all the same), and once the
    partitions are gone it retries the whole request after UNKNOWN_TOPIC_OR_PARTITION, which
    can write a kept partition's record twice. Its group consumer rejoins with 0-1."""
    modules = _kafkajs_modules()
    broker = broker_factory(BROKER)
    topic = "shrink-kafkajs"
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    clients: dict[str, NodeClient] = {}
    group = Consumed()

    def run_node(name: str, stop: threading.Event, **options: Any) -> Worker:
        def run() -> None:
            clients[name] = NodeClient(modules, bootstrap=broker.bootstrap, topic=topic,
                                       **options)
            stop.wait()
            clients[name].stop()
        return Worker(run)

    def sent() -> list[Sent]:
        node = clients.get("producer")
        if node is None:
            return []
        out: list[Sent] = []
        for line in list(node.lines):
            if "value" in line:
                out.append(Sent(line["value"], line["keyed"], node.monotonic(line["sentAt"]),
                                node.monotonic(line["doneAt"]), line.get("partition"),
                                line.get("offset"), line.get("error"), int(line["attempts"])))
        return out

    def group_read(expected: dict[int, list[tuple[int, str]]]) -> bool:
        node = clients["consumer"]
        group.records = [(x["partition"], x["offset"], x["value"]) for x in list(node.lines)
                         if "value" in x]
        group.assignments = [x["assigned"] for x in list(node.lines) if "assigned" in x]
        group.errors = [x["crash"] for x in list(node.lines) if "crash" in x]
        return _has_read(group, expected)

    def start_consumer() -> list[Worker]:
        worker = run_node("consumer", stop_consuming, mode="consume", group=f"{topic}-readers")
        worker.start()
        return [worker]

    reduction = _reduce_under_load(
        broker, topic, [run_node("producer", stop_producing, mode="produce")],
        lambda: any(s.acked for s in sent()), stop_producing, start_consumer, group_read,
        stop_consuming)

    group_read({})  # what the consumer read up to its stop
    records = sent()
    retried = {s.value for s in records if s.attempts > 1}
    _assert_acked_in_log(records, reduction, allowed_duplicates=retried)
    # ReadOnly: the send fails at once, not retried, with the code's number only in the text.
    refused = [s for s in records if _during_read_only(s, reduction) and not s.acked]
    assert refused and {(s.error["type"], s.error["retriable"], s.error["message"])
                        for s in refused} == {
        ("KAFKAJS_UNKNOWN_ERROR_CODE", False, "Unknown error code 1001")}
    assert {s.attempts for s in refused} == {1}
    assert _slow(refused) == [], (reduction.altered_s, reduction.gone_s)
    # The failed send's record for a kept partition was written all the same, once.
    kept_values = Counter(v for log in reduction.kept.values() for _, v in log)
    written_anyway = [s for s in refused if s.partition is not None and s.partition < KEPT]
    assert written_anyway and all(kept_values[s.value] == 1 for s in written_anyway)
    # Any record written twice comes from a send retried once the partitions were gone.
    assert {v for v, n in kept_values.items() if n > 1} <= retried
    assert all(s.sent_s > reduction.gone_s - 1.0 for s in records if s.attempts > 1)
    # Gone: it refreshed its metadata; later records go to 0-1 only and are acknowledged.
    late = [s for s in records if s.sent_s > reduction.gone_s + 0.5]
    assert late and all(s.acked and s.partition is not None and s.partition < KEPT for s in late)
    _assert_read_everything("kafkajs group", group, reduction)
    _assert_rebalanced_to_kept(group)
