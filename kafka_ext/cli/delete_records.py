"""`kafka-ext delete-records`: kafka-delete-records.sh (Kafka's DeleteRecordsCommand) over
confluent-kafka's AdminClient.

`--offset-json-file f.json` holds {"partitions":[{"topic":"t","partition":0,"offset":5}],
"version":1}: every record before `offset` goes (-1: up to the high watermark), so the
partition's low watermark (log start offset) moves there. Prints Kafka's lines: "Executing
records delete operation", "Records delete operation completed:", then per partition, in the
file's order, "partition: t-0<TAB>low_watermark: 5" or "partition: t-0<TAB>error: <the Java
exception Kafka's tool prints>". Exit code 1 when the file is malformed or a partition failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_ext.cli.client_config import UsageError, client_config
from kafka_ext.cli.consumer_groups import ERRORS

TIMEOUT_S = 30.0
SUPPORTED_VERSION = 1
JAVA_ERROR_PACKAGE = "org.apache.kafka.common.errors"
# Java exception class and message of the errors DeleteRecords answers, beside the group
# tool's table (Errors.java).
DELETE_RECORDS_ERRORS: dict[int, tuple[str, str]] = {
    **ERRORS,
    1: ("OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server."),
    6: ("NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the broker is not "
        "the current leader. For requests intended for any replica, this error indicates that "
        "the broker is not a replica of the topic partition."),
    7: ("TimeoutException", "The request timed out."),
    44: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    56: ("KafkaStorageException", "Disk error when trying to access log file on the disk."),
}


class DeleteRecordsError(Exception):
    """The offset JSON file is not what Kafka's tool accepts; exit code 1."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `delete-records` with kafka-delete-records.sh's flags."""
    parser = subparsers.add_parser(
        "delete-records", help="delete records before given offsets (kafka-delete-records.sh)",
        description="Delete every record before an offset in each partition a JSON file "
                    "names, moving the partitions' low watermarks there.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to bootstrap from")
    parser.add_argument("--offset-json-file", required=True, metavar="FILE",
                        help='{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}; '
                             'offset -1 deletes up to the high watermark')
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    parser.set_defaults(run=run)


def parse_offsets(text: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of the file, in its order; DeleteRecordsError as Kafka."""
    try:
        document = json.loads(text)
    except ValueError:
        raise DeleteRecordsError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise DeleteRecordsError("The input string is not a valid JSON object")
    version = document.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION:
        raise DeleteRecordsError(f"Not supported version field value {version}")
    if "partitions" not in document:
        raise DeleteRecordsError("Missing partitions field")
    offsets: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    try:
        for entry in document["partitions"]:
            key = (_typed(entry, "topic", str), _typed(entry, "partition", int))
            if key in offsets and f"{key[0]}-{key[1]}" not in duplicates:
                duplicates.append(f"{key[0]}-{key[1]}")
            offsets.setdefault(key, _typed(entry, "offset", int))
    except (TypeError, AttributeError):
        raise DeleteRecordsError("Expected a JSON array of partition objects") from None
    if duplicates:
        raise DeleteRecordsError("Offset json file contains duplicate topic partitions: "
                                 + ",".join(duplicates))
    return offsets


def _typed(entry: dict[str, Any], name: str, kind: type) -> Any:
    value = entry.get(name)
    if value is None:
        raise DeleteRecordsError(f"No such field exists: `{name}`")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DeleteRecordsError(f"Expected `{name}` to be a "
                                 f"{'string' if kind is str else 'number'}, got {value!r}")
    return value


def java_error(exc: KafkaException) -> str:
    """The ExecutionException message Kafka's tool prints for a failed partition."""
    error = exc.args[0] if exc.args else None
    code = error.code() if error is not None else None
    if code in DELETE_RECORDS_ERRORS:
        name, message = DELETE_RECORDS_ERRORS[code]
        return f"{JAVA_ERROR_PACKAGE}.{name}: {message}"
    return error.str() if error is not None else str(exc)


def run(args: argparse.Namespace) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.offset_json_file}: {exc.strerror}") from None
    try:
        offsets = parse_offsets(text)
    except DeleteRecordsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    conf: dict[str, str | int | float | bool] = dict(client_config(
        args.bootstrap_server, args.command_config, [], "--command-config"))
    admin = AdminClient(conf)
    print("Executing records delete operation")
    futures = admin.delete_records([TopicPartition(t, p, offset)
                                    for (t, p), offset in offsets.items()],
                                   request_timeout=TIMEOUT_S)
    print("Records delete operation completed:")
    by_partition = {(tp.topic, tp.partition): future for tp, future in futures.items()}
    failed = False
    for topic, partition in offsets:
        try:
            low_watermark = by_partition[(topic, partition)].result(timeout=TIMEOUT_S).low_watermark
        except KafkaException as exc:
            failed = True
            print(f"partition: {topic}-{partition}\terror: {java_error(exc)}")
            continue
        print(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")
    return 1 if failed else 0
