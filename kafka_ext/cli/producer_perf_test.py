"""`kafka-ext producer-perf-test`: kafka-producer-perf-test.sh (Kafka's ProducerPerformance)
over confluent-kafka's Producer.

Sends `--num-records` values to `--topic` (no key): `--record-size` bytes of random capital
letters (new ones each record, as Kafka), or payloads of `--payload-file` split at
`--payload-delimiter` (picked at random), or `--payload-monotonic` (the record's number), at
most `--throughput` records/s (-1: no limit). Client settings come from `--producer.config`
then `--producer-props k=v ...` (Java property names; librdkafka shares most of them).
Transactions when a transactional id is given (`--transactional-id`, or `transactional.id` in
the properties) or `--transaction-duration-ms`: each transaction commits once it is that old
(default 3000 ms). Every 5 s Kafka's window line goes to stdout ("N records sent, R records/sec
(M MB/sec), A ms avg latency, X ms max latency."), at the end its summary line with the 50th,
95th, 99th and 99.9th latency percentiles (one more for `--warmup-records`' steady state), then
the metrics table with `--print-metrics`. Latency is from the send call to the delivery report.
A record that could not be delivered is reported on stderr and makes the exit code 1 (Kafka's
tool prints a stack trace and exits 0).
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import sys
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.perf_tools import (
    ProgressBar,
    StatisticsCollector,
    client_metrics,
    client_settings,
    new_client,
    print_metrics,
)

REPORTING_INTERVAL_MS = 5000
MAX_LATENCY_SAMPLES = 500_000
DEFAULT_TRANSACTION_DURATION_MS = 3000
DEFAULT_TRANSACTION_ID_PREFIX = "performance-producer-"
DEFAULT_CLIENT_ID = "perf-producer-client"
STATISTICS_INTERVAL_MS = 500
FLUSH_TIMEOUT_S = 300.0
# Byte i of random data becomes capital letter i % 26: Kafka's payloads are 'A' + nextInt(26).
_LETTERS = bytes(ord("A") + i % 26 for i in range(256))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a 5 s window, sampled latencies."""

    def __init__(self, num_records: int, steady_state: bool) -> None:
        self.start_ms = self.window_start_ms = now_ms()
        self.sampling = num_records // min(num_records, MAX_LATENCY_SAMPLES)
        self.latencies: list[int] = []
        self.iteration = self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total_latency = 0
        self.window_max_latency = 0
        self.steady_state = steady_state
        self.quiet = False

    def record(self, latency_ms: int, size_bytes: int, time_ms: int) -> None:
        self.count += 1
        self.bytes += size_bytes
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size_bytes
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        if time_ms - self.window_start_ms >= REPORTING_INTERVAL_MS:
            if self.steady_state and self.count == self.window_count:
                print("In steady state.")
            if not self.quiet:
                self.print_window()
            self.new_window()
        self.iteration += 1

    def print_window(self) -> None:
        elapsed_ms = max(now_ms() - self.window_start_ms, 1)
        print(f"{self.window_count} records sent, "
              f"{1000.0 * self.window_count / elapsed_ms:.1f} records/sec "
              f"({1000.0 * self.window_bytes / elapsed_ms / (1024 * 1024):.2f} MB/sec), "
              f"{self.window_total_latency / max(self.window_count, 1):.1f} ms avg latency, "
              f"{float(self.window_max_latency):.1f} ms max latency.", flush=True)

    def new_window(self) -> None:
        self.window_start_ms = now_ms()
        self.window_count = self.window_bytes = 0
        self.window_total_latency = self.window_max_latency = 0

    def print_total(self) -> None:
        elapsed_ms = max(now_ms() - self.start_ms, 1)
        p50, p95, p99, p999 = percentiles(self.latencies, 0.5, 0.95, 0.99, 0.999)
        print(f"{self.count}{' steady state' if self.steady_state else ''} records sent, "
              f"{1000.0 * self.count / elapsed_ms:f} records/sec "
              f"({1000.0 * self.bytes / elapsed_ms / (1024 * 1024):.2f} MB/sec), "
              f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, "
              f"{float(self.max_latency):.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
              f"{p99} ms 99th, {p999} ms 99.9th.", flush=True)


def percentiles(latencies: list[int], *fractions: float) -> list[int]:
    """Kafka's pick: the sorted sample at index int(fraction * size); 0 without samples."""
    ordered = sorted(latencies)
    if not ordered:
        return [0 for _ in fractions]
    return [ordered[int(fraction * len(ordered))] for fraction in fractions]


class Throttler:
    """Keeps sends at `throughput` records/s at most (negative: no limit), polling the
    producer while it waits so delivery reports keep flowing."""

    def __init__(self, throughput: float, start_s: float) -> None:
        self.throughput = throughput
        self.start_s = start_s

    def wait(self, sent: int, producer: Producer) -> None:
        if self.throughput < 0:
            return
        if self.throughput == 0:  # Kafka's tool then sends nothing more, ever
            while True:
                producer.poll(1.0)
        due_s = self.start_s + sent / self.throughput
        while (ahead_s := due_s - time.monotonic()) > 0:
            producer.poll(ahead_s)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `producer-perf-test` with kafka-producer-perf-test.sh's flags."""
    parser = subparsers.add_parser(
        "producer-perf-test", help="measure producer throughput and latency "
                                   "(kafka-producer-perf-test.sh)",
        description="Send records as fast as allowed and report throughput and latency "
                    "percentiles. A transactional id (--transactional-id, or transactional.id "
                    "in the properties) or --transaction-duration-ms sends in transactions.")
    parser.add_argument("--topic", required=True, metavar="TOPIC",
                        help="the topic to send to")
    parser.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS",
                        help="how many records to send")
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                         help="bytes of each record's random payload")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="UTF-8 file of payloads, one picked at random per message")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="payload is the message's number, counting up")
    parser.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                        help="delimiter of the payloads in --payload-file (default: new line)")
    parser.add_argument("--throughput", required=True, type=float, metavar="THROUGHPUT",
                        help="at most this many messages/sec; -1 for no limit")
    parser.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                        help="producer properties (bootstrap.servers=..), over --producer.config")
    parser.add_argument("--producer.config", dest="producer_config", metavar="CONFIG-FILE",
                        help="producer properties file")
    parser.add_argument("--print-metrics", action="store_true",
                        help="print the client's statistics at the end")
    parser.add_argument("--transactional-id", metavar="TRANSACTIONAL-ID",
                        help="the transactional id to use (over transactional.id)")
    parser.add_argument("--transaction-duration-ms", type=int, metavar="TRANSACTION-DURATION",
                        help="the max age of each transaction (default 3000 with transactions)")
    parser.add_argument("--warmup-records", type=int, default=0, metavar="WARMUP-RECORDS",
                        help="records left out of the steady-state summary printed at the end")
    parser.set_defaults(run=run)


def producer_settings(args: argparse.Namespace) -> tuple[dict[str, Any], int | None]:
    """librdkafka settings from the flags, and the transaction duration (None: none)."""
    if args.num_records <= 0:
        raise UsageError("--num-records should be greater than zero")
    if args.warmup_records >= args.num_records:
        raise UsageError("The value for --warmup-records must be strictly fewer than the number "
                         "of records in the test, --num-records.")
    if args.record_size is not None and args.record_size <= 0:
        raise UsageError("--record-size should be greater than zero")
    if args.producer_props is None and args.producer_config is None:
        raise UsageError("Either --producer-props or --producer.config must be specified.")
    if args.transaction_duration_ms is not None and args.transaction_duration_ms <= 0:
        raise UsageError("--transaction-duration-ms should be greater than zero")
    settings = client_settings(args.producer_config, args.producer_props or [],
                               "--producer-props")
    settings.setdefault("client.id", DEFAULT_CLIENT_ID)
    duration_ms = args.transaction_duration_ms
    if duration_ms is not None or args.transactional_id or "transactional.id" in settings:
        settings["transactional.id"] = (args.transactional_id or settings.get("transactional.id")
                                        or DEFAULT_TRANSACTION_ID_PREFIX + base64.urlsafe_b64encode(
                                            uuid.uuid4().bytes).rstrip(b"=").decode())
        duration_ms = duration_ms or DEFAULT_TRANSACTION_DURATION_MS
    if "bootstrap.servers" not in settings:
        raise UsageError("bootstrap.servers must be given in --producer-props or "
                         "--producer.config")
    return settings, duration_ms


def read_payloads(path: str, delimiter: str) -> list[bytes]:
    """The payloads of --payload-file, announced as Kafka's tool does."""
    file = Path(path)
    print(f"Reading payloads from: {file.absolute()}")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if not text:
        raise UsageError("File does not exist or empty file provided.")
    payloads = [p.encode() for p in text.split("\n" if delimiter == "\\n" else delimiter) if p]
    print(f"Number of messages read: {len(payloads)}")
    return payloads


def run(args: argparse.Namespace) -> int:
    settings, duration_ms = producer_settings(args)
    payloads = read_payloads(args.payload_file, args.payload_delimiter) \
        if args.payload_file is not None else []
    statistics = StatisticsCollector()
    if args.print_metrics:
        settings.update({"statistics.interval.ms": STATISTICS_INTERVAL_MS,
                         "stats_cb": statistics})
    errors: list[KafkaError] = []
    try:
        producer = new_client(Producer, settings)
        if duration_ms is not None:
            producer.init_transactions()
        if args.warmup_records > 0:
            print(f"Warmup first {args.warmup_records} records. Steady state results will print "
                  "after the complete test summary.")
        stats = Stats(args.num_records, steady_state=False)
        steady: list[Stats] = []
        with ProgressBar(f"producing to {args.topic}", args.num_records) as progress:

            def delivered(send_ms: int, size_bytes: int, in_steady_state: bool,
                          err: KafkaError | None, _msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                    print(f"{err.name()}: {err.str()}", file=sys.stderr)
                    return
                time_ms = now_ms()
                stats.record(time_ms - send_ms, size_bytes, time_ms)
                if in_steady_state:
                    steady[0].record(time_ms - send_ms, size_bytes, time_ms)
                progress.advance()

            send_records(args, producer, payloads, duration_ms, stats, steady, delivered)
            if producer.flush(FLUSH_TIMEOUT_S):
                print(f"{len(producer)} records were still undelivered after "
                      f"{FLUSH_TIMEOUT_S:.0f} s", file=sys.stderr)
                return 1
        stats.print_total()
        for steady_stats in steady:
            steady_stats.print_total()
        if args.print_metrics:
            deadline = time.monotonic() + 2 * STATISTICS_INTERVAL_MS / 1000
            while statistics.latest is None and time.monotonic() < deadline:
                producer.poll(0.05)
            print_metrics(client_metrics(statistics.latest or {}, "producer-metrics"))
    except KafkaException as exc:
        print(f"Error: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 1
    return 1 if errors else 0


def send_records(args: argparse.Namespace, producer: Producer, payloads: list[bytes],
                 duration_ms: int | None, stats: Stats, steady: list[Stats],
                 delivered: Any) -> None:
    """Kafka's send loop: payload, transaction boundaries, send, throttle."""
    chooser = random.Random(0)  # Kafka's SplittableRandom(0): the same picks every run
    throttler = Throttler(args.throughput, time.monotonic())
    in_transaction = False
    transaction_start_ms = 0
    for i in range(args.num_records):
        if payloads:
            payload = payloads[chooser.randrange(len(payloads))]
        elif args.record_size is not None:
            payload = os.urandom(args.record_size).translate(_LETTERS)
        else:
            payload = str(i).encode()
        if duration_ms is not None and not in_transaction:
            producer.begin_transaction()
            in_transaction, transaction_start_ms = True, now_ms()
        send_ms = now_ms()
        if args.warmup_records > 0 and i == args.warmup_records:
            steady.append(Stats(args.num_records - args.warmup_records, steady_state=True))
            stats.quiet = True
        callback = partial(delivered, send_ms, len(payload), bool(steady))
        while True:
            try:
                producer.produce(args.topic, value=payload, on_delivery=callback)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
        producer.poll(0)
        if duration_ms is not None and duration_ms <= send_ms - transaction_start_ms:
            producer.commit_transaction()
            in_transaction = False
        throttler.wait(i + 1, producer)
    if in_transaction:
        producer.commit_transaction()
