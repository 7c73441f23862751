"""`kafka-ext get-offsets`: kafka-get-offsets.sh (Kafka's GetOffsetShell) over confluent-kafka's
AdminClient.

Prints `topic:partition:offset` for every partition the filters select, sorted as Kafka sorts
them (by the text `topic-partition`, so `t-10` comes before `t-2`). The partitions are
`--topic REGEX` (a full match; all topics without it) with `--partitions 0,1`, or
`--topic-partitions` rules `REGEX:N`, `REGEX:N-M` (M excluded), `REGEX:N-`, `REGEX:-M`,
comma-separated; internal topics are included unless `--exclude-internal-topics`. `--time` is
-1/latest (the default), -2/earliest, -3/max-timestamp, -4/earliest-local or a timestamp in ms;
a partition without an answer (no record at or after the timestamp) prints nothing, one whose
lookup failed is skipped with Kafka's "Skip getting offsets" line on stderr. Errors print
"Error occurred: ..." and exit 1, as Kafka's tool.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_ext.cli.client_config import client_config
from kafka_ext.cli.delete_records import java_error

TIMEOUT_S = 30.0
INT_MAX = 2**31 - 1
UNKNOWN_OFFSET = -1
# Kafka's --topic-partitions rule: a topic regex, then nothing, ":N", ":N-M", ":N-" or ":-M".
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_TIME_WORDS = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4}
_TIME_HELP = ("-1 or latest / -2 or earliest / -3 or max-timestamp / -4 or earliest-local, or a "
              "specified long format timestamp")


class GetOffsetsError(Exception):
    """Kafka's TerseException: printed as "Error occurred: <message>", exit code 1."""


@dataclass(frozen=True, slots=True)
class PartitionRule:
    """One filter: topics matching `topic_regex`, partitions in [low, high)."""

    topic_regex: re.Pattern[str]
    low: int = 0
    high: int = INT_MAX
    only: frozenset[int] | None = None  # --partitions: exactly these (None: the range)

    def allows_topic(self, topic: str) -> bool:
        return self.topic_regex.fullmatch(topic) is not None

    def allows(self, topic: str, partition: int) -> bool:
        if not self.allows_topic(topic):
            return False
        if self.only is not None:
            return not self.only or partition in self.only
        return self.low <= partition < self.high


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `get-offsets` with kafka-get-offsets.sh's flags."""
    parser = subparsers.add_parser(
        "get-offsets", help="print the offsets of topic partitions (kafka-get-offsets.sh)",
        description="Print the offset of each selected topic partition at a point in time: "
                    "latest, earliest, max timestamp, or the first record at or after a "
                    "timestamp.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST1:PORT1,...",
                        help="broker(s) to bootstrap from")
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic (a regular expression); all topics when absent")
    parser.add_argument("--partitions", metavar="IDS",
                        help="comma separated partition ids; all partitions when absent")
    parser.add_argument("--topic-partitions", metavar="RULES",
                        help="comma separated rules topic1:1,topic2:0-3,topic3,topic4:5-,"
                             "topic5:-3 (a topic regex, then a partition or a range, upper "
                             "bound excluded)")
    parser.add_argument("--time", default="latest", metavar="TIME", help=_TIME_HELP)
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="leave internal topics out (they are included by default)")
    parser.set_defaults(run=run)


def offset_spec(text: str) -> OffsetSpec:
    """--time as an OffsetSpec. kafka-ext has no tiered storage, so earliest-local is the
    earliest offset (the broker answers -4 so too; librdkafka refuses to send -4)."""
    value = _TIME_WORDS.get(text)
    if value is None:
        try:
            value = int(text)
        except ValueError:
            raise GetOffsetsError(f"Malformed time argument {text}. Please use {_TIME_HELP}"
                                  ) from None
    if value in (-2, -4):
        return OffsetSpec.earliest()
    if value == -1:
        return OffsetSpec.latest()
    if value == -3:
        return OffsetSpec.max_timestamp()
    if value < 0:
        raise GetOffsetsError(f"Malformed time argument {text}. Please use {_TIME_HELP}")
    return OffsetSpec.for_timestamp(value)


def _topic_regex(text: str) -> re.Pattern[str]:
    """Kafka's IncludeList: commas mean alternatives, surrounding quotes are dropped."""
    cleaned = text.strip().replace(",", "|").strip("'\"")
    try:
        return re.compile(cleaned)
    except re.error as exc:
        raise GetOffsetsError(f"Invalid regular expression {text}: {exc}") from None


def partition_rules(args: argparse.Namespace) -> list[PartitionRule]:
    """The filters of --topic-partitions, or of --topic and --partitions."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise GetOffsetsError("--topic-partitions cannot be used with --topic or --partitions")
        rules = []
        for spec in args.topic_partitions.split(","):
            matched = _RULE.fullmatch(spec)
            if matched is None:
                raise GetOffsetsError(f"Invalid rule specification: {spec}")
            topic, single, low, high = (g or None for g in matched.groups())
            regex = _topic_regex(topic or ".*")
            if single is not None:
                rules.append(PartitionRule(regex, int(single), int(single) + 1))
            else:
                rules.append(PartitionRule(regex, int(low or 0), int(high or INT_MAX)))
        return rules
    only: frozenset[int] = frozenset()
    if args.partitions:
        try:
            only = frozenset(int(p) for p in args.partitions.split(","))
        except ValueError:
            raise GetOffsetsError("--partitions expects a comma separated list of numeric "
                                  f"partition ids, but received: {args.partitions}") from None
    return [PartitionRule(_topic_regex(args.topic or ".*"), only=only)]


def run(args: argparse.Namespace) -> int:
    try:
        spec = offset_spec(args.time)
        rules = partition_rules(args)
        conf: dict[str, str | int | float | bool] = dict(client_config(
            args.bootstrap_server, args.command_config, [], "--command-config"))
        conf["client.id"] = "GetOffsetShell"
        admin = AdminClient(conf)
        offsets = fetch_offsets(admin, rules, spec, args.exclude_internal_topics)
    except GetOffsetsError as exc:
        print(f"Error occurred: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:
        print(f"Error occurred: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 1
    for (topic, partition), offset in sorted(offsets.items(),
                                             key=lambda item: f"{item[0][0]}-{item[0][1]}"):
        print(f"{topic}:{partition}:{offset}")
    return 0


def fetch_offsets(admin: AdminClient, rules: list[PartitionRule], spec: OffsetSpec,
                  exclude_internal: bool) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of every selected partition that has an answer."""
    names = admin.list_topics(timeout=TIMEOUT_S).topics
    wanted = sorted(t for t in names if any(rule.allows_topic(t) for rule in rules))
    partitions: list[TopicPartition] = []
    if wanted:
        described = admin.describe_topics(TopicCollection(wanted), request_timeout=TIMEOUT_S)
        for topic, future in described.items():
            description = future.result(timeout=TIMEOUT_S)
            if exclude_internal and description.is_internal:
                continue
            partitions += [TopicPartition(topic, p.id) for p in description.partitions
                           if any(rule.allows(topic, p.id) for rule in rules)]
    if not partitions:
        raise GetOffsetsError("Could not match any topic-partitions with the specified filters")
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=TIMEOUT_S)
    offsets: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            offset = future.result(timeout=TIMEOUT_S).offset
        except KafkaException as exc:
            print(f"Skip getting offsets for topic-partition {tp.topic}-{tp.partition} due to "
                  f"error: {java_error(exc)}", file=sys.stderr)
            continue
        if offset != UNKNOWN_OFFSET:
            offsets[(tp.topic, tp.partition)] = offset
    return offsets
