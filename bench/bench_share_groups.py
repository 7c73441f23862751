"""Share groups (KIP-932): consuming one partition with 1, 4 and 16 share consumers, beside a
classic consumer group on 16 partitions, and what acknowledgements cost.

A broker subprocess holds a 1-partition topic and a 16-partition topic with the same records.
Each case starts its consumers as processes (confluent-kafka 2.16: ShareConsumer, or Consumer
for the classic group), which read until the group has seen every record; the figures are
records per second (from the first record any consumer got to the last one: joining the group
is not counted) and the broker's CPU per record (its utime + stime over the whole case, joins
included). Share consumers acknowledge in
implicit mode: with the next ShareFetch ("piggy-backed") or with a commit_sync after each
poll ("commit each poll", a ShareAcknowledge round trip per poll).

    python bench/bench_share_groups.py                  # prints a Markdown table
    python bench/bench_share_groups.py --records 50000
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import BenchBroker, running_broker  # noqa: E402
from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

VALUE = b"x" * 100
IDLE_S = 10.0  # a consumer that sees nothing for this long gives up


def _produce(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 1000, "compression.type": "none"})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=VALUE, partition=i % _partitions(topic))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _partitions(topic: str) -> int:
    return 16 if topic.endswith("16") else 1


def _consume(kind: str, bootstrap: str, group: str, topic: str, target: int,
             seen: multiprocessing.Value, first: multiprocessing.Value,  # type: ignore[valid-type]
             done: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    if kind == "classic":
        consumer: object = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "auto.offset.reset": "earliest"})
    else:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])  # type: ignore[attr-defined]
    idle_since = time.monotonic()
    while seen.value < target and time.monotonic() - idle_since < IDLE_S:  # type: ignore[attr-defined]
        if kind == "classic":
            got = consumer.consume(500, 0.5)  # type: ignore[attr-defined]
        else:
            got = consumer.poll(0.5) or []  # type: ignore[attr-defined]
        if not got:
            continue
        idle_since = time.monotonic()
        if kind == "share-commit":
            consumer.commit_sync()  # type: ignore[attr-defined]
        with seen.get_lock():  # type: ignore[attr-defined]
            if not seen.value:  # type: ignore[attr-defined]
                first.value = time.monotonic()  # type: ignore[attr-defined]
            seen.value += len(got)  # type: ignore[attr-defined]
            if seen.value >= target:  # type: ignore[attr-defined]
                done.value = time.monotonic()  # type: ignore[attr-defined]
    if kind != "classic":
        consumer.commit_sync()  # type: ignore[attr-defined]
    consumer.close()  # type: ignore[attr-defined]


@dataclass(slots=True)
class CaseResult:
    name: str
    consumers: int
    records: int
    seconds: float
    broker_cpu_s: float

    @property
    def per_second(self) -> float:
        return self.records / self.seconds

    @property
    def cpu_us_per_record(self) -> float:
        return self.broker_cpu_s / self.records * 1e6


def run_case(broker: BenchBroker, kind: str, topic: str, consumers: int, records: int,
             case_no: int) -> CaseResult:
    group = f"{kind}-{consumers}-{case_no}"
    if kind != "classic":
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.incremental_alter_configs([ConfigResource(
                ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                    "share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])]).values():
            future.result(30)
    seen = multiprocessing.Value("q", 0, lock=True)
    first, done = multiprocessing.Value("d", 0.0), multiprocessing.Value("d", 0.0)
    cpu_before = broker.cpu_seconds()
    procs = [multiprocessing.Process(target=_consume, args=(
        kind, broker.bootstrap, group, topic, records, seen, first, done))
        for _ in range(consumers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(600)
    cpu_s = broker.cpu_seconds() - cpu_before
    if seen.value < records:
        raise RuntimeError(f"{kind} x{consumers}: saw {seen.value} of {records} records")
    label = {"share": "share group, piggy-backed acks", "share-commit":
             "share group, commit each poll", "classic": "classic group, 16 partitions"}[kind]
    return CaseResult(label, consumers, records, done.value - first.value, cpu_s)


def render(results: list[CaseResult], records: int) -> str:
    lines = [f"{records} records of 100 bytes; consumers are processes on the same 2-core "
             "machine as the broker.", "",
             "| case | consumers | records/s | broker CPU µs/record |", "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.name} | {r.consumers} | {r.per_second:,.0f} | "
                     f"{r.cpu_us_per_record:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    results = []
    with running_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for topic, count in (("share1", 1), ("classic16", 16)):
            admin.create_topics([NewTopic(topic, count, 1)])[topic].result(30)
            _produce(broker.bootstrap, topic, args.records)
        case_no = 0
        for consumers in args.consumers:
            for kind, topic in (("share", "share1"), ("classic", "classic16")):
                case_no += 1
                results.append(run_case(broker, kind, topic, consumers, args.records, case_no))
        case_no += 1
        results.append(run_case(broker, "share-commit", "share1", 1, args.records, case_no))
    print(render(results, args.records))


if __name__ == "__main__":
    main()
