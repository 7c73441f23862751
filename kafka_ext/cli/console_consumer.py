"""`kafka-ext console-consumer`: kafka-console-consumer.sh, records printed one per line.

Without --group the consumer assigns partitions itself (all partitions from metadata, or the one
given with --partition) and starts at the beginning or end, so no group coordinator is needed;
with --group it subscribes. Output follows Kafka's DefaultMessageFormatter; the count goes to
stderr as "Processed a total of N messages".
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kafka_ext.cli.client_config import UsageError, client_config, parse_key_values

POLL_S = 0.1
METADATA_TIMEOUT_S = 5.0
METADATA_RETRY_S = 0.2


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

    def format(self, message: Message) -> bytes:
        """One record as bytes, columns joined by key.separator and ended by line.separator."""
        columns: list[bytes] = []
        if self.print_timestamp:
            kind, ts = message.timestamp()
            if kind == TIMESTAMP_CREATE_TIME:
                columns.append(b"CreateTime:%d" % ts)
            elif kind == TIMESTAMP_LOG_APPEND_TIME:
                columns.append(b"LogAppendTime:%d" % ts)
            else:
                columns.append(b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(b"Partition:%d" % (message.partition() or 0))
        if self.print_offset:
            columns.append(b"Offset:%d" % (message.offset() or 0))
        if self.print_headers:
            headers = message.headers()
            pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
            columns.append(self.headers_separator.join(
                name.encode() + self.headers_key_separator + self._bytes(value)
                for name, value in pairs) if pairs else b"NO_HEADERS")
        if self.print_key:
            columns.append(self._bytes(message.key()))
        if self.print_value:
            columns.append(self._bytes(message.value()))
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


def _start_offset(args: argparse.Namespace) -> int:
    """librdkafka start position for directly assigned partitions."""
    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    text = args.offset.strip().lower()
    if text == "earliest":
        return OFFSET_BEGINNING
    if text == "latest":
        return OFFSET_END
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


def _consumer_config(args: argparse.Namespace) -> dict[str, str]:
    config = {
        "client.id": "console-consumer",
        "isolation.level": args.isolation_level,
        "enable.partition.eof": "false",
    }
    if args.group is None:
        # confluent-kafka insists on a group id even for assign(); it is never used to commit.
        config.update({
            "group.id": f"console-consumer-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
        })
    else:
        config.update({
            "group.id": args.group,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        })
    config.update(client_config(args.bootstrap_server, args.consumer_config,
                                args.consumer_property, "--consumer-property"))
    return config


def _partitions(consumer: Consumer, topic: str, deadline: float | None) -> list[int]:
    """Partition ids of `topic`, waiting for it to exist until `deadline` (None: forever)."""
    while True:
        metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        info = metadata.topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            return sorted(info.partitions)
        if deadline is not None and time.monotonic() >= deadline:
            raise KafkaException(info.error if info is not None and info.error is not None
                                 else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                 f"topic {topic} not found"))
        time.sleep(METADATA_RETRY_S)  # the topic may be created any moment; ask again


def run(args: argparse.Namespace) -> int:
    """Print records until --max-messages, --timeout-ms, or a signal; then print the count."""
    _check_args(args)
    formatter = MessageFormatter.from_properties(parse_key_values(args.property, "--property"))
    start = _start_offset(args)
    consumer = Consumer(_consumer_config(args))
    timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = signal.signal(signal.SIGTERM, stop)
    count = 0
    code = 0
    try:
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            ids = ([args.partition] if args.partition is not None
                   else _partitions(consumer, args.topic, deadline))
            consumer.assign([TopicPartition(args.topic, p, start) for p in ids])
        count = _consume(consumer, formatter, sys.stdout.buffer, args.max_messages, timeout_s,
                         lambda: stopping)
    except KeyboardInterrupt:
        pass
    except KafkaException as exc:
        print(f"ERROR Error processing message, terminating consumer process: {exc.args[0]}",
              file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


def _consume(consumer: Consumer, formatter: MessageFormatter, out: BinaryIO,
             max_messages: int | None, timeout_s: float | None,
             stopping: Callable[[], bool]) -> int:
    """Poll and print; returns the number of records printed."""
    count = 0
    last_record = time.monotonic()
    while (max_messages is None or count < max_messages) and not stopping():
        message = consumer.poll(POLL_S)
        if message is None:
            if timeout_s is not None and time.monotonic() - last_record >= timeout_s:
                break
            continue
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            print(f"WARN {error.str()}", file=sys.stderr)  # transient: librdkafka retries
            continue
        out.write(formatter.format(message))
        out.flush()
        count += 1
        last_record = time.monotonic()
    return count
