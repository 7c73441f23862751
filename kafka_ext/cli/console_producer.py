"""`kafka-ext console-producer`: kafka-console-producer.sh, one record per stdin line.

Lines are bytes: nothing is decoded, so any encoding round-trips. Reader properties follow
Kafka's LineMessageReader (parse.key, key.separator, parse.headers, null.marker, ignore.error).
Records go through our own client (`kafka_ext.client.Producer`), so each Produce names the
topic's partition count (KIP-253) and partitions that take no writes are skipped (partition
reduction); keyed records are partitioned with Kafka's murmur2, as Java's producer does.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from kafka_ext.cli.client_config import (
    UsageError,
    our_client_overrides,
    parse_key_values,
)
from kafka_ext.client.accumulator import RecordMetadata
from kafka_ext.client.config import PRODUCER_PROPERTIES
from kafka_ext.client.producer import Producer
from kafka_ext.protocol.errors import KafkaError

FLUSH_TIMEOUT_S = 60.0
READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class LineRecord:
    """One record parsed from an input line."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class LineReader:
    """Splits stdin lines into records as Kafka's LineMessageReader does."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        """Build from `--property k=v` values; unknown properties are ignored like Kafka does."""
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        marker = props.get("null.marker")
        reader = cls(
            parse_key=flag("parse.key"),
            key_separator=props.get("key.separator", "\t").encode(),
            parse_headers=flag("parse.headers"),
            headers_delimiter=props.get("headers.delimiter", "\t").encode(),
            headers_separator=props.get("headers.separator", ",").encode(),
            headers_key_separator=props.get("headers.key.separator", ":").encode(),
            null_marker=None if marker is None else marker.encode(),
            ignore_error=flag("ignore.error"),
        )
        if not reader.key_separator:
            raise UsageError("key.separator must not be empty")
        return reader

    def _nullable(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def parse(self, line: bytes, line_number: int) -> LineRecord:
        """Parse one line (without its line terminator); raise UsageError on a malformed line."""
        rest = line
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"No headers delimiter found on line number {line_number}: "
                                     f"'{line.decode(errors='replace')}'")
            else:
                headers = self._headers(head, line_number)
                rest = tail
        key: bytes | None = None
        if self.parse_key:
            key_part, sep, value_part = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"No key separator found on line number {line_number}: "
                                     f"'{line.decode(errors='replace')}'")
                return LineRecord(None, self._nullable(rest), headers)
            return LineRecord(self._nullable(key_part), self._nullable(value_part), headers)
        return LineRecord(key, self._nullable(rest), headers)

    def _headers(self, text: bytes, line_number: int) -> tuple[tuple[str, bytes | None], ...]:
        if not text:
            return ()
        out: list[tuple[str, bytes | None]] = []
        for item in text.split(self.headers_separator):
            name, sep, value = item.partition(self.headers_key_separator)
            if not name:
                raise UsageError(f"Header key cannot be empty on line number {line_number}")
            out.append((name.decode(), self._nullable(value) if sep else None))
        return tuple(out)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `console-producer` with kafka-console-producer.sh's flags."""
    parser = subparsers.add_parser(
        "console-producer", help="send stdin lines as records (kafka-console-producer.sh)",
        description="Read lines from standard input and send each as a record to a topic.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", "--reader-property", dest="property", action="append",
                        default=[], metavar="KEY=VALUE",
                        help="line reader setting: parse.key, key.separator, parse.headers, ...")
    parser.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="producer client setting (repeatable)")
    parser.add_argument("--producer.config", "--command-config", dest="producer_config",
                        metavar="FILE", help="producer client properties file")
    parser.add_argument("--request-required-acks", default="-1", metavar="ACKS",
                        help="acks: 0, 1 or -1/all (default -1)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", default=None,
                        choices=("none", "gzip", "snappy", "lz4", "zstd"))
    parser.add_argument("--timeout", type=int, default=1000, metavar="MS",
                        help="linger time before a batch is sent (default 1000)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="records per batch")
    parser.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    parser.set_defaults(run=run)


def _producer_config(args: argparse.Namespace) -> dict[str, Any]:
    """Producer arguments from the flags, then the properties file, then --producer-property."""
    config: dict[str, Any] = {
        "acks": "all" if args.request_required_acks in ("-1", "all") else args.request_required_acks,
        "linger_ms": args.timeout,
        "client_id": "console-producer",
    }
    if args.compression_codec is not None:
        config["compression"] = args.compression_codec
    if args.batch_size is not None:
        config["batch_max_records"] = args.batch_size
    config.update(our_client_overrides(args.producer_config, args.producer_property,
                                       "--producer-property", PRODUCER_PROPERTIES))
    config["bootstrap_servers"] = args.bootstrap_server
    return config


def _strip_terminator(raw: bytes) -> bytes:
    """A line without its terminator (\\n or \\r\\n), as BufferedReader.readLine gives it."""
    if raw.endswith(b"\r\n"):
        return raw[:-2]
    if raw.endswith(b"\n"):
        return raw[:-1]
    return raw


async def _read_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of `stream` read in chunks off the event loop, so the producer keeps sending
    while stdin is quiet."""
    loop = asyncio.get_running_loop()
    read = getattr(stream, "read1", stream.read)
    pending = b""
    while True:
        chunk = await loop.run_in_executor(None, read, READ_CHUNK_BYTES)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield _strip_terminator(line + b"\n")
    if pending:
        yield pending


def run(args: argparse.Namespace) -> int:
    """Send every stdin line; 0 when all were acknowledged, 1 otherwise."""
    reader = LineReader.from_properties(parse_key_values(args.property, "--property"))
    config = _producer_config(args)
    try:
        return asyncio.run(_send_lines(args, reader, config, sys.stdin.buffer))
    except KeyboardInterrupt:
        return 130


async def _send_lines(args: argparse.Namespace, reader: LineReader, config: dict[str, Any],
                      stream: BinaryIO) -> int:
    try:
        producer = Producer(**config)
    except ValueError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1
    failures: list[str] = []
    waiting: set[asyncio.Future[RecordMetadata]] = set()

    def on_delivery(record: LineRecord, future: asyncio.Future[RecordMetadata]) -> None:
        waiting.discard(future)
        error = future.exception()
        if error is not None:
            failures.append(_failure(args.topic, record, error))

    code = 0
    try:
        number = 0
        async for line in _read_lines(stream):
            number += 1
            record = reader.parse(line, number)
            try:
                future = await producer.enqueue(args.topic, record.value, key=record.key,
                                                headers=list(record.headers))
            except KafkaError as exc:
                failures.append(_failure(args.topic, record, exc))
                break
            waiting.add(future)
            future.add_done_callback(functools.partial(on_delivery, record))
            if args.sync:
                await asyncio.wait([future])
    except UsageError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        code = 1
    try:
        await asyncio.wait_for(producer.flush(), FLUSH_TIMEOUT_S)
    except TimeoutError:
        pass
    remaining = len(waiting)
    await producer.close()
    for failure in failures:
        print(failure, file=sys.stderr)
    if remaining:
        print(f"ERROR {remaining} records were not acknowledged within {FLUSH_TIMEOUT_S:.0f} s",
              file=sys.stderr)
    if failures or remaining:
        code = code or 1
    return code


def _failure(topic: str, record: LineRecord, error: BaseException) -> str:
    key, value = record.key, record.value
    return (f"Error when sending message to topic {topic} with key: "
            f"{'null' if key is None else len(key)} bytes, value: "
            f"{'null' if value is None else len(value)} bytes with error: {error}")
