"""`kafka-ext verifiable-consumer`: Kafka's VerifiableConsumer, whose JSON event lines Kafka's
system tests (and ours) parse to follow a group member: its assignments, what it consumed and
what it committed.

Subscribes to `--topic` in `--group-id` (`--group-protocol classic|consumer`, with
`--assignment-strategy` for classic and `--group-remote-assignor` for consumer,
`--group-instance-id`, `--session-timeout`, `--reset-policy`), consumes up to `--max-messages`
(-1: until SIGTERM or SIGINT) and, unless `--enable-autocommit`, commits synchronously after
every batch. One JSON object a line, fields in Kafka's order: `startup_complete`;
`partitions_assigned` / `partitions_revoked` (partitions: topic, partition);
`records_consumed` (count; partitions: topic, partition, count, minOffset, maxOffset), with
`--verbose` a `record_data` line for each record first; `offsets_committed` (offsets: topic,
partition, offset; error when it failed; success); `shutdown_complete`. The consumer is
confluent-kafka's; `--consumer.config` holds Java client properties.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafka_ext.cli.perf_tools import client_settings, new_client

# Kafka's assignor class names, as librdkafka names them.
ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
POLL_S = 0.5


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verifiable-consumer", help="consume as a group member, printing its events as JSON",
        description="This tool consumes messages from a specific topic and emits consumer "
                    "events (e.g. group rebalances, received messages, and offsets committed) "
                    "as JSON objects to STDOUT.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST1:PORT1[,HOST2:PORT2]")
    parser.add_argument("--topic", required=True, metavar="TOPIC")
    parser.add_argument("--group-protocol", default="classic", type=str.lower,
                        choices=("classic", "consumer"), metavar="GROUP_PROTOCOL")
    parser.add_argument("--group-remote-assignor", default="uniform",
                        metavar="GROUP_REMOTE_ASSIGNOR")
    parser.add_argument("--group-id", required=True, metavar="GROUP_ID")
    parser.add_argument("--group-instance-id", metavar="GROUP_INSTANCE_ID")
    parser.add_argument("--max-messages", type=int, default=-1, metavar="MAX-MESSAGES")
    parser.add_argument("--session-timeout", type=int, default=30000, metavar="TIMEOUT_MS")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--enable-autocommit", action="store_true", dest="auto_commit")
    parser.add_argument("--reset-policy", default="earliest",
                        choices=("earliest", "latest", "none"))
    parser.add_argument("--assignment-strategy",
                        default="org.apache.kafka.clients.consumer.RangeAssignor")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="CONFIG_FILE")
    parser.set_defaults(run=run)


def emit(name: str, **fields: Any) -> None:
    """One event line, flushed: timestamp and name first, compact as Jackson writes it."""
    print(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields},
                     separators=(",", ":")), flush=True)


def _partitions(partitions: list[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": p.topic, "partition": p.partition} for p in partitions]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    conf = {**client_settings(args.consumer_config, [], "--consumer.config"),
            "bootstrap.servers": args.bootstrap_server, "group.id": args.group_id,
            "enable.auto.commit": args.auto_commit,
            "auto.offset.reset": "error" if args.reset_policy == "none" else args.reset_policy}
    if args.group_protocol == "consumer":
        conf["group.protocol"] = "consumer"
        conf["group.remote.assignor"] = args.group_remote_assignor
    else:
        conf["session.timeout.ms"] = args.session_timeout
        conf["partition.assignment.strategy"] = ASSIGNORS.get(args.assignment_strategy,
                                                              args.assignment_strategy)
    if args.group_instance_id is not None:
        conf["group.instance.id"] = args.group_instance_id
    return conf


def run(args: argparse.Namespace) -> int:
    consumer = new_client(Consumer, settings(args))
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumed = 0
    limit = args.max_messages if args.max_messages >= 0 else None
    emit("startup_complete")
    consumer.subscribe([args.topic],
                       on_assign=lambda _, ps: emit("partitions_assigned",
                                                    partitions=_partitions(ps)),
                       on_revoke=lambda _, ps: emit("partitions_revoked",
                                                    partitions=_partitions(ps)))
    try:
        while not stopping and (limit is None or consumed < limit):
            batch = [m for m in consumer.consume(num_messages=500, timeout=POLL_S)
                     if m.error() is None]
            if not batch:
                continue
            if limit is not None:
                batch = batch[:limit - consumed]
            consumed += len(batch)
            offsets = records_consumed(batch, args.verbose)
            if not args.auto_commit:
                commit(consumer, offsets)
    finally:
        consumer.close()
        emit("shutdown_complete")
    return 0


def records_consumed(batch: list[Any], verbose: bool) -> list[TopicPartition]:
    """Print what a poll got, per partition in the order they came; the offsets to commit."""
    summaries: dict[tuple[str, int], dict[str, Any]] = {}
    for message in batch:
        if verbose:
            emit("record_data", key=_text(message.key()), value=_text(message.value()),
                 topic=message.topic(), partition=message.partition(), offset=message.offset())
        key = (message.topic(), message.partition())
        summary = summaries.setdefault(key, {"topic": key[0], "partition": key[1], "count": 0,
                                             "minOffset": message.offset()})
        summary["count"] += 1
        summary["maxOffset"] = message.offset()
    emit("records_consumed", count=len(batch), partitions=list(summaries.values()))
    return [TopicPartition(s["topic"], s["partition"], s["maxOffset"] + 1)
            for s in summaries.values()]


def commit(consumer: Consumer, offsets: list[TopicPartition]) -> None:
    committed = [{"topic": p.topic, "partition": p.partition, "offset": p.offset}
                 for p in offsets]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        emit("offsets_committed", offsets=committed, error=exc.args[0].str(), success=False)
        return
    emit("offsets_committed", offsets=committed, success=True)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="replace")
