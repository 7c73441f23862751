"""`kafka-ext console-consumer`: kafka-console-consumer.sh, records printed one per line.

Without --group the consumer assigns partitions itself (all readable partitions from metadata,
or the one given with --partition) and starts at the beginning or end, so no group coordinator
is needed; with --group it subscribes. Output follows Kafka's DefaultMessageFormatter; the count
goes to stderr as "Processed a total of N messages".

Records come through our own client (`kafka_ext.client.Consumer`): with --group, partitions
added to the topic are read in KIP-253's order (a new partition waits until the records before
the expansion are read from the older ones), and partitions in mode None (partition
reduction) are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from kafka_ext.cli.client_config import UsageError, our_client_overrides, parse_key_values
from kafka_ext.client.config import CONSUMER_PROPERTIES
from kafka_ext.client.consumer import Consumer
from kafka_ext.client.fetcher import ConsumerRecord
from kafka_ext.client.metadata import TopicPartition
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import TimestampType

POLL_S = 0.1
METADATA_RETRY_S = 0.2
START_EARLIEST = "earliest"
START_LATEST = "latest"


@dataclass(frozen=True, slots=True)
class MessageFormatter:
    """Kafka's DefaultMessageFormatter: optional timestamp, partition, offset, headers, key columns."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MessageFormatter:
        """Build from `--property k=v` values."""
        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, "true" if default else "false").strip().lower() == "true"

        return cls(
            print_timestamp=flag("print.timestamp"),
            print_partition=flag("print.partition"),
            print_offset=flag("print.offset"),
            print_headers=flag("print.headers"),
            print_key=flag("print.key"),
            print_value=flag("print.value", default=True),
            key_separator=props.get("key.separator", "\t").encode(),
            line_separator=props.get("line.separator", "\n").encode(),
            headers_separator=props.get("headers.separator", ",").encode(),
            headers_key_separator=props.get("headers.key.separator", ":").encode(),
            null_literal=props.get("null.literal", "null").encode(),
        )

    def format(self, record: ConsumerRecord) -> bytes:
        """One record as bytes, columns joined by key.separator and ended by line.separator."""
        columns: list[bytes] = []
        if self.print_timestamp:
            if record.timestamp_type == TimestampType.LOG_APPEND_TIME:
                columns.append(b"LogAppendTime:%d" % record.timestamp)
            else:
                columns.append(b"CreateTime:%d" % record.timestamp)
        if self.print_partition:
            columns.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            columns.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            columns.append(self.headers_separator.join(
                name.encode() + self.headers_key_separator + self._bytes(value)
                for name, value in record.headers) if record.headers else b"NO_HEADERS")
        if self.print_key:
            columns.append(self._bytes(record.key))
        if self.print_value:
            columns.append(self._bytes(record.value))
        return self.key_separator.join(columns) + self.line_separator

    def _bytes(self, data: bytes | str | None) -> bytes:
        if data is None:
            return self.null_literal
        return data.encode() if isinstance(data, str) else data


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `console-consumer` with kafka-console-consumer.sh's flags."""
    parser = subparsers.add_parser(
        "console-consumer", help="print records of a topic (kafka-console-consumer.sh)",
        description="Read records from a topic and print them to standard output.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="consumer group; without it partitions are assigned directly")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset instead of the end")
    parser.add_argument("--partition", type=int, metavar="P", help="read only this partition")
    parser.add_argument("--offset", default=None, metavar="OFFSET",
                        help="with --partition: earliest, latest or an offset (default latest)")
    parser.add_argument("--max-messages", type=int, metavar="N",
                        help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="exit when no record arrives for this long")
    parser.add_argument("--property", "--formatter-property", dest="property", action="append",
                        default=[], metavar="KEY=VALUE",
                        help="formatter setting: print.key, print.timestamp, key.separator, ...")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="consumer client setting (repeatable)")
    parser.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                        metavar="FILE", help="consumer client properties file")
    parser.add_argument("--isolation-level", default="read_uncommitted",
                        choices=("read_uncommitted", "read_committed"))
    parser.set_defaults(run=run)


def _start_offset(args: argparse.Namespace) -> int | str:
    """Where directly assigned partitions start: earliest, latest, or an offset."""
    if args.offset is None:
        return START_EARLIEST if args.from_beginning else START_LATEST
    text = args.offset.strip().lower()
    if text in (START_EARLIEST, START_LATEST):
        return text
    if text.isdigit():
        return int(text)
    raise UsageError(f"--offset must be earliest, latest or a non-negative number, got {args.offset!r}")


def _check_args(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise UsageError("--from-beginning and --offset cannot be given together")
    if args.group is not None and args.partition is not None:
        raise UsageError("--group and --partition cannot be given together")
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must not be negative")


def _consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    """Consumer arguments from the flags, then the properties file, then --consumer-property.
    A `group.id` property names the group of --group; without --group there is no group."""
    config: dict[str, Any] = {
        "client_id": "console-consumer",
        "isolation_level": args.isolation_level,
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
    }
    config.update(our_client_overrides(args.consumer_config, args.consumer_property,
                                       "--consumer-property", CONSUMER_PROPERTIES))
    if args.group is None:
        config.pop("group_id", None)
    else:
        config.setdefault("group_id", args.group)
    config["bootstrap_servers"] = args.bootstrap_server
    return config


async def _partitions(consumer: Consumer, topic: str, deadline: float | None) -> list[int]:
    """Readable partition ids of `topic`, waiting for it to exist until `deadline` (None:
    forever)."""
    while True:
        meta = await consumer.topic_metadata(topic)
        if meta is not None and meta.readable_partitions:
            return meta.readable_partitions
        if deadline is not None and time.monotonic() >= deadline:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} not found")
        await asyncio.sleep(METADATA_RETRY_S)  # the topic may be created any moment; ask again


def run(args: argparse.Namespace) -> int:
    """Print records until --max-messages, --timeout-ms, or a signal; then print the count."""
    _check_args(args)
    formatter = MessageFormatter.from_properties(parse_key_values(args.property, "--property"))
    start = _start_offset(args)
    config = _consumer_config(args)
    return asyncio.run(_run(args, formatter, start, config))


async def _run(args: argparse.Namespace, formatter: MessageFormatter, start: int | str,
               config: dict[str, Any]) -> int:
    timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    count = 0
    code = 0
    consumer: Consumer | None = None
    try:
        consumer = Consumer(**config)
        await consumer.start()
        if "group_id" in config:
            consumer.subscribe([args.topic])
        else:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            ids = ([args.partition] if args.partition is not None
                   else await _partitions(consumer, args.topic, deadline))
            partitions = [TopicPartition(args.topic, p) for p in ids]
            consumer.assign(partitions)
            for tp in partitions:
                if start == START_EARLIEST:
                    consumer.seek_to_beginning(tp)
                elif start == START_LATEST:
                    consumer.seek_to_end(tp)
                else:
                    assert isinstance(start, int)
                    consumer.seek(tp, start)
        count = await _consume(consumer, formatter, sys.stdout.buffer, args.max_messages,
                               timeout_s, lambda: stopping)
    except (KafkaError, ValueError) as exc:
        print(f"ERROR Error processing message, terminating consumer process: {exc}",
              file=sys.stderr)
        code = 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if consumer is not None:
            await consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


async def _consume(consumer: Consumer, formatter: MessageFormatter, out: BinaryIO,
                   max_messages: int | None, timeout_s: float | None,
                   stopping: Callable[[], bool]) -> int:
    """Poll and print; returns the number of records printed."""
    count = 0
    last_record = time.monotonic()
    while (max_messages is None or count < max_messages) and not stopping():
        wanted = None if max_messages is None else max_messages - count
        records = await consumer.poll(int(POLL_S * 1000), max_records=wanted)
        if not records:
            if timeout_s is not None and time.monotonic() - last_record >= timeout_s:
                break
            continue
        for record in records:
            out.write(formatter.format(record))
        out.flush()
        count += len(records)
        last_record = time.monotonic()
    return count
