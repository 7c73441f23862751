"""`kafka-ext e2e-latency`: kafka-e2e-latency.sh (Kafka's EndToEndLatency), the time from a
produce to its consumption, one record at a time.

`broker_list topic num_messages producer_acks message_size_bytes [properties_file]`, as Kafka's
tool takes them: acks 1 or all; the topic is created (1 partition, replication factor 1) when
it does not exist. Each record (random capital letters) is produced synchronously and then
polled for by a consumer at the end of every partition; "i<TAB>ms" every 1000 records, then
"Avg latency: X ms" and "Percentiles: 50th = A, 99th = B, 99.9th = C" (whole ms). A poll that
finds nothing in 60 s, another record, or more than one fails the run (exit 1). The clients are
confluent-kafka's; the properties file holds Java client properties, as for the perf tools.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.cli.perf_tools import client_settings, new_client

POLL_TIMEOUT_S = 60.0
USAGE = ("USAGE: java org.apache.kafka.tools.EndToEndLatency broker_list topic num_messages "
         "producer_acks message_size_bytes [optional] properties_file")


class LatencyTestFailed(Exception):
    pass


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "e2e-latency", help="end-to-end latency, one record at a time (kafka-e2e-latency.sh)",
        description="Measure the time from producing a record to consuming it.")
    parser.add_argument("arguments", nargs="*", metavar="ARG",
                        help="broker_list topic num_messages producer_acks message_size_bytes "
                             "[properties_file]")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if len(args.arguments) not in (5, 6):
        print(USAGE, file=sys.stderr)
        return 1
    brokers, topic, count_text, acks, size_text, *rest = args.arguments
    if acks not in ("1", "all"):
        print("Latency testing requires synchronous acknowledgement. Please use 1 or all",
              file=sys.stderr)
        return 1
    try:
        latencies_ns = measure(brokers, topic, int(count_text), acks, int(size_text),
                               rest[0] if rest and rest[0].strip() else None)
    except (LatencyTestFailed, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(summary(latencies_ns), end="")
    return 0


def measure(brokers: str, topic: str, count: int, acks: str, size: int,
            properties_file: str | None) -> list[int]:
    """Each record's produce-to-consume time in ns; progress lines on the way."""
    settings = {**client_settings(properties_file, [], "properties_file"),
                "bootstrap.servers": brokers}
    admin = new_client(AdminClient, dict(settings))
    if topic not in admin.list_topics(timeout=30).topics:
        print(f'Topic "{topic}" does not exist. Will create topic with 1 partition(s) and '
              "replication factor = 1")
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = new_client(Producer, {**settings, "linger.ms": 0, "acks": acks})
    consumer = new_client(Consumer, {**settings, "group.id": f"test-group-{int(time.time() * 1000)}",
                                     "enable.auto.commit": False, "fetch.wait.max.ms": 0,
                                     "auto.offset.reset": "latest"})
    try:
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        # At the end of each partition, resolved now (Kafka's tool asks position() for it):
        # a record produced before the consumer knew its position would be skipped.
        consumer.assign([TopicPartition(topic, p, consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=30)[1]) for p in sorted(partitions)])
        rng = random.Random(0)
        latencies = []
        for i in range(count):
            message = bytes([rng.randrange(26) + 65]) * size
            begin = time.perf_counter_ns()
            _produce_synchronously(producer, topic, message)
            records = _poll(consumer)
            elapsed = time.perf_counter_ns() - begin
            _validate(records, message)
            if i % 1000 == 0:
                print(f"{i}\t{elapsed / 1000.0 / 1000.0}")
            latencies.append(elapsed)
        return latencies
    finally:
        consumer.close()


def _produce_synchronously(producer: Producer, topic: str, message: bytes) -> None:
    outcome: list[object] = []
    producer.produce(topic, value=message, on_delivery=lambda err, _: outcome.append(err))
    while not outcome:
        producer.poll(0.1)
    if outcome[0] is not None:
        raise LatencyTestFailed(f"the produce failed: {outcome[0]}")


def _poll(consumer: Consumer) -> list[Message]:
    """What one poll gets, as a Java consumer's poll returns: the first record (waiting up to
    60 s for it), and any others already there."""
    first = consumer.poll(POLL_TIMEOUT_S)
    if first is None:
        return []
    records = [first, *consumer.consume(num_messages=100, timeout=0)]
    for record in records:
        if record.error() is not None:
            raise LatencyTestFailed(f"the consumer failed: {record.error()}")
    return records


def _validate(records: list[Message], sent: bytes) -> None:
    """Kafka's checks: one record, and the one sent."""
    if not records:
        raise LatencyTestFailed("poll() timed out before finding a result (timeout:[60000])")
    read = records[0].value() or b""
    if read != sent:
        raise LatencyTestFailed(f"The message read [{read.decode(errors='replace')}] did not "
                                f"match the message sent [{sent.decode()}]")
    if len(records) != 1:
        raise LatencyTestFailed("Only one result was expected during this test. We found "
                                f"[{len(records)}]")


def summary(latencies_ns: list[int]) -> str:
    """Kafka's last two lines: the mean in ms, and the percentiles in whole ms."""
    count = len(latencies_ns)
    whole_ms = sorted(ns // 1_000_000 for ns in latencies_ns)
    p50, p99, p999 = (whole_ms[int(count * q)] for q in (0.5, 0.99, 0.999))
    return (f"Avg latency: {sum(latencies_ns) / count / 1000.0 / 1000.0:.4f} ms\n"
            f"Percentiles: 50th = {p50}, 99th = {p99}, 99.9th = {p999}\n")
