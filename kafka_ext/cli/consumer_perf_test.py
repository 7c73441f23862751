"""`kafka-ext consumer-perf-test`: kafka-consumer-perf-test.sh (Kafka's ConsumerPerformance)
over confluent-kafka's Consumer.

Consumes `--messages` records of `--topic` (or the topics matching `--include`) in consumer
group `--group` (default perf-consumer-<random>), from the earliest offset unless
`--from-latest` (when the group has no committed offset), and stops early when no record came
for `--timeout` ms (with Kafka's WARNING line). Prints Kafka's header (unless `--hide-header`)
and its result line: start and end time (`--date-format`, Java SimpleDateFormat letters, local
time), MB and records consumed and per second, the time spent joining the group
(rebalance.time.ms) and the rest (fetch.time.ms) with the rates over it. With
`--show-detailed-stats` a line per `--reporting-interval` ms instead of the result line.
Bytes are keys plus values, as Kafka counts them.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.perf_tools import (
    ProgressBar,
    StatisticsCollector,
    client_metrics,
    client_settings,
    new_client,
    print_metrics,
)

DEFAULT_FETCH_SIZE = 1024 * 1024
DEFAULT_SOCKET_BUFFER_SIZE = 2 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_REPORTING_INTERVAL_MS = 5000
DEFAULT_DATE_FORMAT = "yyyy-MM-dd HH:mm:ss:SSS"
DEFAULT_CLIENT_ID = "perf-consumer-client"
POLL_TIMEOUT_S = 0.1
POLL_BATCH = 500
STATISTICS_INTERVAL_MS = 500
MB = 1024 * 1024
HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
DETAILED_HEADER = "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"

# SimpleDateFormat's pattern letters: a run of letters, a quoted literal, or one other char.
_DATE_TOKEN = re.compile(r"([A-Za-z])\1*|'(?:[^']|'')*'|.")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def java_date_formatter(pattern: str) -> Callable[[int], str]:
    """A formatter of epoch ms in local time for a java.text.SimpleDateFormat pattern (the
    letters G y Y M L d D E u a H k K h m s S z Z X and quoted text)."""
    tokens = [m.group(0) for m in _DATE_TOKEN.finditer(pattern)]
    for token in tokens:
        if token[0].isalpha() and token[0] not in "GyYMLdDEuaHkKhmsSzZX":
            raise UsageError(f"Illegal pattern character '{token[0]}' in --date-format")

    def render(token: str, moment: datetime, millis: int) -> str:
        letter, width = token[0], len(token)
        if token.startswith("'"):
            return token[1:-1].replace("''", "'") if token != "''" else "'"
        if not letter.isalpha():
            return token
        if letter in "yY":
            return f"{moment.year % 100:02d}" if width == 2 else f"{moment.year:0{width}d}"
        if letter in "ML":
            if width >= 3:
                return moment.strftime("%B" if width >= 4 else "%b")
            return f"{moment.month:0{width}d}"
        if letter == "E":
            return moment.strftime("%A" if width >= 4 else "%a")
        if letter == "a":
            return moment.strftime("%p")
        if letter == "z":
            return moment.strftime("%Z")
        if letter in "ZX":
            return moment.strftime("%z")
        if letter == "G":
            return "AD"
        values = {"d": moment.day, "D": moment.timetuple().tm_yday, "u": moment.isoweekday(),
                  "H": moment.hour, "k": moment.hour or 24, "K": moment.hour % 12,
                  "h": moment.hour % 12 or 12, "m": moment.minute, "s": moment.second,
                  "S": millis}
        return f"{values[letter]:0{width}d}"

    def format_ms(epoch_ms: int) -> str:
        moment = datetime.fromtimestamp(epoch_ms / 1000).astimezone()
        return "".join(render(token, moment, epoch_ms % 1000) for token in tokens)

    return format_ms


def java_f4(value: float) -> str:
    """Java's %.4f, which prints Infinity and NaN where a rate divides by zero time."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.4f}"


def divide(numerator: float, denominator: float) -> float:
    """Java's double division: x/0 is Infinity (NaN for 0/0) instead of an error."""
    if denominator:
        return numerator / denominator
    return float("nan") if numerator == 0 else float("inf") * (1 if numerator > 0 else -1)


class RebalanceTimer:
    """Kafka's ConsumerPerfRebListener: the time from (re)joining until partitions come."""

    def __init__(self, start_ms: int) -> None:
        self.join_start_ms = start_ms
        self.join_time_ms = 0
        self.join_time_in_round_ms = 0
        self.assigned: set[tuple[str, int]] = set()

    def on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if not self.assigned:
            elapsed = now_ms() - self.join_start_ms
            self.join_time_ms += elapsed
            self.join_time_in_round_ms += elapsed
        self.assigned.update((p.topic, p.partition) for p in partitions)

    def on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update((p.topic, p.partition) for p in partitions)
        if not self.assigned:
            self.join_start_ms = now_ms()


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `consumer-perf-test` with kafka-consumer-perf-test.sh's flags."""
    parser = subparsers.add_parser(
        "consumer-perf-test", help="measure consumer throughput "
                                   "(kafka-consumer-perf-test.sh)",
        description="Consume records in a consumer group and report throughput and the time "
                    "spent joining the group.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to bootstrap from")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic to read")
    which.add_argument("--include", metavar="REGEX",
                       help="read every topic this regular expression matches")
    parser.add_argument("--messages", required=True, type=int, metavar="COUNT",
                        help="how many records to read")
    parser.add_argument("--group", default=f"perf-consumer-{random.randrange(100_000)}",
                        metavar="GID", help="consumer group id (default perf-consumer-<random>)")
    parser.add_argument("--fetch-size", type=int, default=DEFAULT_FETCH_SIZE, metavar="SIZE",
                        help="max.partition.fetch.bytes of the consumer")
    parser.add_argument("--from-latest", action="store_true",
                        help="start at the end of partitions the group has no offset for "
                             "(default: their start)")
    parser.add_argument("--socket-buffer-size", type=int, default=DEFAULT_SOCKET_BUFFER_SIZE,
                        metavar="SIZE", help="socket receive buffer bytes")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="CONFIG-FILE",
                        help="consumer properties file")
    parser.add_argument("--print-metrics", action="store_true", help="print the client's statistics at the end")
    parser.add_argument("--show-detailed-stats", action="store_true",
                        help="a line per reporting interval instead of one result line")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help="stop after this many ms without a record (default 10000)")
    parser.add_argument("--reporting-interval", type=int, default=DEFAULT_REPORTING_INTERVAL_MS,
                        metavar="INTERVAL_MS",
                        help="ms between --show-detailed-stats lines (default 5000)")
    parser.add_argument("--date-format", default=DEFAULT_DATE_FORMAT, metavar="FORMAT",
                        help="Java SimpleDateFormat pattern of the time fields")
    parser.add_argument("--hide-header", action="store_true",
                        help="leave out the header line")
    parser.set_defaults(run=run)


def consumer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Kafka's ConsumerPerfOptions.props as librdkafka settings."""
    settings = client_settings(args.consumer_config, [], "--consumer.config")
    settings.update({
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group,
        "socket.receive.buffer.bytes": args.socket_buffer_size,
        "max.partition.fetch.bytes": args.fetch_size,
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "check.crcs": False,
    })
    settings.setdefault("client.id", DEFAULT_CLIENT_ID)
    return settings


def run(args: argparse.Namespace) -> int:
    if args.reporting_interval <= 0:
        raise UsageError("Reporting interval must be greater than 0.")
    date_format = java_date_formatter(args.date_format)
    settings = consumer_settings(args)
    statistics = StatisticsCollector()
    if args.print_metrics:
        settings.update({"statistics.interval.ms": STATISTICS_INTERVAL_MS,
                         "stats_cb": statistics})
    if not args.hide_header:
        print((DETAILED_HEADER if args.show_detailed_stats else HEADER) + HEADER_TAIL,
              flush=True)
    try:
        consumer = new_client(Consumer, settings)
    except KafkaException as exc:
        print(f"Error: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 1
    start_ms = now_ms()
    timer = RebalanceTimer(start_ms)
    try:
        topics = [args.topic] if args.topic is not None else [f"^{args.include}"]
        consumer.subscribe(topics, on_assign=timer.on_assign, on_revoke=timer.on_revoke)
        messages, total_bytes = consume(consumer, args, timer, date_format)
        end_ms = now_ms()
        if args.print_metrics:
            deadline = time.monotonic() + 2 * STATISTICS_INTERVAL_MS / 1000
            while statistics.latest is None and time.monotonic() < deadline:
                consumer.poll(0.05)
    except KafkaException as exc:
        print(f"Error: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    elapsed_s = (end_ms - start_ms) / 1000
    fetch_time_ms = end_ms - start_ms - timer.join_time_ms
    if not args.show_detailed_stats:
        total_mb = total_bytes / MB
        print(", ".join([
            date_format(start_ms), date_format(end_ms), java_f4(total_mb),
            java_f4(divide(total_mb, elapsed_s)), str(messages),
            java_f4(divide(messages, elapsed_s)), str(timer.join_time_ms), str(fetch_time_ms),
            java_f4(divide(total_mb, fetch_time_ms / 1000)),
            java_f4(divide(messages, fetch_time_ms / 1000))]))
    if args.print_metrics:
        print_metrics(client_metrics(statistics.latest or {}, "consumer-metrics"))
    return 0


def consume(consumer: Consumer, args: argparse.Namespace, timer: RebalanceTimer,
            date_format: Callable[[int], str]) -> tuple[int, int]:
    """Kafka's consume loop: (records, bytes) read before --messages or --timeout."""
    messages = total_bytes = last_messages = last_bytes = 0
    current_ms = last_report_ms = last_consumed_ms = now_ms()
    with ProgressBar(f"consuming {args.topic or args.include}", args.messages) as progress:
        while messages < args.messages and current_ms - last_consumed_ms <= args.timeout:
            batch = consumer.consume(POLL_BATCH, POLL_TIMEOUT_S)
            current_ms = now_ms()
            records = []
            for m in batch:
                error = m.error()
                if error is None:
                    records.append(m)
                elif not error.retriable():
                    print(f"WARN {error.str()}", file=sys.stderr)
            if records:
                last_consumed_ms = current_ms
            for record in records:
                messages += 1
                total_bytes += len(record.key() or b"") + len(record.value() or b"")
                if current_ms - last_report_ms >= args.reporting_interval:
                    if args.show_detailed_stats:
                        print_progress(messages, last_messages, total_bytes, last_bytes,
                                       last_report_ms, current_ms, timer.join_time_in_round_ms,
                                       date_format)
                    timer.join_time_in_round_ms = 0
                    last_report_ms, last_messages, last_bytes = current_ms, messages, total_bytes
            progress.advance(len(records))
    if messages < args.messages:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
              f"({args.timeout} ms) exceeded. You can use the --timeout option to increase the "
              "timeout.")
    return messages, total_bytes


def print_progress(messages: int, last_messages: int, total_bytes: int, last_bytes: int,
                   start_ms: int, end_ms: int, join_time_ms: int,
                   date_format: Callable[[int], str]) -> None:
    """Kafka's --show-detailed-stats line of one reporting interval (thread id 0)."""
    elapsed_ms = end_ms - start_ms
    interval_mb = (total_bytes - last_bytes) / MB
    fetch_time_ms = elapsed_ms - join_time_ms
    fetch_mb_s = 0.0 if fetch_time_ms <= 0 else 1000.0 * interval_mb / fetch_time_ms
    fetch_msg_s = 0.0 if fetch_time_ms <= 0 else 1000.0 * (messages - last_messages) / fetch_time_ms
    print(", ".join([
        date_format(end_ms), "0", java_f4(total_bytes / MB),
        java_f4(divide(1000.0 * interval_mb, elapsed_ms)), str(messages),
        java_f4(divide(1000.0 * (messages - last_messages), elapsed_ms)), str(join_time_ms),
        str(fetch_time_ms), java_f4(fetch_mb_s), java_f4(fetch_msg_s)]), flush=True)
