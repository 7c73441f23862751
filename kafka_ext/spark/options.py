"""Options of the `kafka-ext` data source: Spark's Kafka source names and meanings, checked early.

Mirrors the option set of Spark's `KafkaSourceProvider`. Parsing is pure (a mapping of strings in,
a frozen `KafkaSourceOptions` out) so every rule is unit-tested without a JVM. Unlike Spark's
source, an unknown option or a contradictory pair is an error naming the option(s), not ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

EARLIEST = -2
"""Kafka's (and Spark's JSON) sentinel for "the earliest offset" of a partition."""
LATEST = -1
"""Kafka's (and Spark's JSON) sentinel for "the latest offset" of a partition."""

KAFKA_PREFIX = "kafka."
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000

# Source options by their lower-cased key (Spark hands options over lower-cased) -> Spark's name.
_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "maxOffsetsPerTrigger",
        "minPartitions",
        "maxRecordsPerPartition",
        "failOnDataLoss",
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "groupIdPrefix",
    )
}

# Consumer properties the source owns itself; Spark's Kafka source refuses the same ones.
_FORBIDDEN_KAFKA_OPTIONS = {
    "auto.offset.reset": "set startingOffsets instead",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "enable.auto.commit": "the source never commits offsets to Kafka",
    "interceptor.classes": "interceptors would see and could change the raw records",
    "group.instance.id": "the source never joins a consumer group",
}

_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class KafkaSourceOptionError(ValueError):
    """An unknown, malformed or contradictory option; the message names the option(s)."""


class SubscriptionKind(Enum):
    """Which of Spark's three subscription options chose the topic-partitions."""

    SUBSCRIBE = "subscribe"
    SUBSCRIBE_PATTERN = "subscribePattern"
    ASSIGN = "assign"


@dataclass(frozen=True, slots=True)
class Subscription:
    """The topic-partitions a query reads: a topic list, a regex over names, or fixed partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """True when `topic` is in the subscription (assign: when one of its partitions is)."""
        if self.kind is SubscriptionKind.SUBSCRIBE:
            return topic in self.topics
        if self.kind is SubscriptionKind.SUBSCRIBE_PATTERN:
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


class OffsetKind(Enum):
    """How a starting or ending position was given."""

    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC = "specific"  # per-partition offsets (EARLIEST/LATEST sentinels allowed)
    TIMESTAMPS = "timestamps"  # per-partition timestamps in ms
    GLOBAL_TIMESTAMP = "global_timestamp"  # one timestamp in ms for every partition


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A starting or ending position as the user gave it, before it is resolved against a broker."""

    kind: OffsetKind
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # SPECIFIC / TIMESTAMPS
    timestamp_ms: int = 0  # GLOBAL_TIMESTAMP
    option: str = ""  # the option it came from, for error messages


EARLIEST_SPEC = OffsetSpec(OffsetKind.EARLIEST)
LATEST_SPEC = OffsetSpec(OffsetKind.LATEST)


@dataclass(frozen=True, slots=True)
class KafkaSourceOptions:
    """Every option of one `spark.read(Stream).format("kafka-ext")` call, parsed and checked."""

    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    consumer_config: Mapping[str, str]  # the kafka.* options without the prefix
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    starting_timestamp_strategy_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX

    @property
    def bootstrap_servers(self) -> str:
        return self.consumer_config["bootstrap.servers"]

    @property
    def read_committed(self) -> bool:
        return self.consumer_config.get("isolation.level") == "read_committed"


def parse_options(raw: Mapping[str, str], streaming: bool | None = None) -> KafkaSourceOptions:
    """Check and parse the options of one read.

    `streaming` None checks only the rules common to batch and streaming (what `load()` can know);
    True/False also applies the rules of that mode. Raises KafkaSourceOptionError naming options.
    """
    given: dict[str, str] = {}
    consumer_config: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in raw.items():
        lowered = key.lower()
        if lowered.startswith(KAFKA_PREFIX):
            consumer_config[lowered[len(KAFKA_PREFIX):]] = value
        elif lowered in _SOURCE_OPTIONS:
            given[_SOURCE_OPTIONS[lowered]] = value
        else:
            unknown.append(key)
    if unknown:
        raise KafkaSourceOptionError(
            f"unknown option(s) {', '.join(sorted(unknown))} for the kafka-ext source; "
            f"options are kafka.* (consumer properties) and "
            f"{', '.join(sorted(_SOURCE_OPTIONS.values()))}")
    _check_consumer_config(consumer_config)
    subscription = _parse_subscription(given)
    starting = _parse_position(given, "starting")
    if streaming and not starting.option:
        starting = LATEST_SPEC  # Spark's default for a stream: only records that arrive from now
    ending = _parse_position(given, "ending")
    options = KafkaSourceOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        consumer_config=consumer_config,
        fail_on_data_loss=_parse_bool(given, "failOnDataLoss", True),
        include_headers=_parse_bool(given, "includeHeaders", False),
        min_partitions=_parse_positive_int(given, "minPartitions"),
        max_records_per_partition=_parse_positive_int(given, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_parse_positive_int(given, "maxOffsetsPerTrigger"),
        starting_timestamp_strategy_latest=_parse_timestamp_strategy(given),
        poll_timeout_ms=_parse_positive_int(given, "kafkaConsumer.pollTimeoutMs")
        or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_num_retries=_parse_non_negative_int(
            given, "fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_NUM_RETRIES),
        fetch_offset_retry_interval_ms=_parse_non_negative_int(
            given, "fetchOffset.retryIntervalMs", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        group_id_prefix=given.get("groupIdPrefix", DEFAULT_GROUP_ID_PREFIX),
    )
    if streaming is True:
        _check_streaming(options, given)
    elif streaming is False:
        _check_batch(options, given)
    return options


def _check_consumer_config(config: dict[str, str]) -> None:
    if not config.get("bootstrap.servers", "").strip():
        raise KafkaSourceOptionError("option kafka.bootstrap.servers must be set")
    for key, why in _FORBIDDEN_KAFKA_OPTIONS.items():
        if key in config:
            raise KafkaSourceOptionError(f"option kafka.{key} is not supported: {why}")
    level = config.get("isolation.level")
    if level is not None and level not in _ISOLATION_LEVELS:
        raise KafkaSourceOptionError(
            f"option kafka.isolation.level must be one of {', '.join(_ISOLATION_LEVELS)}, "
            f"not {level!r}")


def _parse_subscription(given: dict[str, str]) -> Subscription:
    chosen = [k.value for k in SubscriptionKind if k.value in given]
    if len(chosen) != 1:
        names = ", ".join(k.value for k in SubscriptionKind)
        if not chosen:
            raise KafkaSourceOptionError(f"one of the options {names} must be set")
        raise KafkaSourceOptionError(
            f"options {' and '.join(chosen)} contradict each other: set only one of {names}")
    kind = SubscriptionKind(chosen[0])
    value = given[kind.value]
    if kind is SubscriptionKind.SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise KafkaSourceOptionError(f"option subscribe names no topic: {value!r}")
        return Subscription(kind, topics=topics)
    if kind is SubscriptionKind.SUBSCRIBE_PATTERN:
        if not value.strip():
            raise KafkaSourceOptionError("option subscribePattern is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise KafkaSourceOptionError(
                f"option subscribePattern is not a regular expression: {exc}") from exc
        return Subscription(kind, pattern=value)
    document = _parse_json_object(value, "assign")
    assigned: list[tuple[str, int]] = []
    for topic, partitions in document.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions):
            raise KafkaSourceOptionError(
                f"option assign: topic {topic!r} must map to a list of partition numbers, "
                f'as in {{"{topic}":[0,1]}}')
        assigned += [(topic, p) for p in partitions]
    if not assigned:
        raise KafkaSourceOptionError("option assign names no partition")
    return Subscription(kind, assigned=tuple(sorted(set(assigned))))


def _parse_position(given: dict[str, str], side: str) -> OffsetSpec:
    """startingOffsets / startingOffsetsByTimestamp / startingTimestamp (or the ending ones)."""
    names = (f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets")
    chosen = [n for n in names if n in given]
    if len(chosen) > 1:
        raise KafkaSourceOptionError(
            f"options {' and '.join(chosen)} contradict each other: set only one of them")
    if not chosen:
        return OffsetSpec(OffsetKind.EARLIEST if side == "starting" else OffsetKind.LATEST)
    name = chosen[0]
    value = given[name].strip()
    if name.endswith("ByTimestamp"):
        return OffsetSpec(OffsetKind.TIMESTAMPS, offsets=_parse_partition_longs(value, name),
                          option=name)
    if name.endswith("Timestamp"):
        return OffsetSpec(OffsetKind.GLOBAL_TIMESTAMP, timestamp_ms=_parse_long(value, name),
                          option=name)
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(OffsetKind(lowered), option=name)
    offsets = _parse_partition_longs(value, name)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise KafkaSourceOptionError(
                f"option {name}: offset {offset} of {topic}-{partition} is not an offset, "
                f"-2 (earliest) or -1 (latest)")
    return OffsetSpec(OffsetKind.SPECIFIC, offsets=offsets, option=name)


def _parse_partition_longs(value: str, name: str) -> dict[tuple[str, int], int]:
    """Spark's per-partition JSON: {"topic":{"0":23,"1":-1}}."""
    document = _parse_json_object(value, name)
    result: dict[tuple[str, int], int] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise KafkaSourceOptionError(
                f'option {name}: topic {topic!r} must map to {{"partition": number}}, '
                f'as in {{"{topic}":{{"0":23}}}}')
        for partition, number in partitions.items():
            try:
                partition_id = int(partition)
            except ValueError:
                partition_id = -1
            if partition_id < 0 or not isinstance(number, int) or isinstance(number, bool):
                raise KafkaSourceOptionError(
                    f"option {name}: {topic!r} partition {partition!r} -> {number!r} is not "
                    f"a partition number mapped to an integer")
            result[(topic, partition_id)] = number
    if not result:
        raise KafkaSourceOptionError(f"option {name} names no partition")
    return result


def _parse_json_object(value: str, name: str) -> dict[str, object]:
    try:
        document = json.loads(value)
    except json.JSONDecodeError as exc:
        raise KafkaSourceOptionError(f"option {name} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise KafkaSourceOptionError(f"option {name} must be a JSON object, not {value!r}")
    return document


def _parse_bool(given: dict[str, str], name: str, default: bool) -> bool:
    value = given.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise KafkaSourceOptionError(f"option {name} must be true or false, not {value!r}")
    return lowered == "true"


def _parse_long(value: str, name: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise KafkaSourceOptionError(f"option {name} must be an integer, not {value!r}") from None


def _parse_positive_int(given: dict[str, str], name: str) -> int | None:
    value = given.get(name)
    if value is None:
        return None
    number = _parse_long(value, name)
    if number <= 0:
        raise KafkaSourceOptionError(f"option {name} must be positive, not {value!r}")
    return number


def _parse_non_negative_int(given: dict[str, str], name: str, default: int) -> int:
    value = given.get(name)
    if value is None:
        return default
    number = _parse_long(value, name)
    if number < 0:
        raise KafkaSourceOptionError(f"option {name} must not be negative, not {value!r}")
    return number


def _parse_timestamp_strategy(given: dict[str, str]) -> bool:
    value = given.get("startingOffsetsByTimestampStrategy")
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered not in ("error", "latest"):
        raise KafkaSourceOptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, not {value!r}")
    return lowered == "latest"


def _check_batch(options: KafkaSourceOptions, given: dict[str, str]) -> None:
    """Rules of `spark.read`: a batch has a fixed range, earliest <= start <= end <= latest."""
    if "maxOffsetsPerTrigger" in given:
        raise KafkaSourceOptionError(
            "option maxOffsetsPerTrigger applies to streaming reads only (spark.readStream)")
    starting, ending = options.starting, options.ending
    if starting.kind is OffsetKind.LATEST:
        raise KafkaSourceOptionError(
            "option startingOffsets=latest is not valid for a batch read (it would read nothing)")
    if ending.kind is OffsetKind.EARLIEST:
        raise KafkaSourceOptionError(
            "option endingOffsets=earliest is not valid for a batch read (it would read nothing)")
    if starting.kind is OffsetKind.SPECIFIC:
        for (topic, partition), offset in starting.offsets.items():
            if offset == LATEST:
                raise KafkaSourceOptionError(
                    f"option startingOffsets: -1 (latest) for {topic}-{partition} is not valid "
                    f"for a batch read")
    if ending.kind is OffsetKind.SPECIFIC:
        for (topic, partition), offset in ending.offsets.items():
            if offset == EARLIEST:
                raise KafkaSourceOptionError(
                    f"option endingOffsets: -2 (earliest) for {topic}-{partition} is not valid "
                    f"for a batch read")
    if starting.kind is OffsetKind.SPECIFIC and ending.kind is OffsetKind.SPECIFIC:
        for tp, end in ending.offsets.items():
            start = starting.offsets.get(tp)
            if start is not None and start >= 0 and end >= 0 and start > end:
                raise KafkaSourceOptionError(
                    f"options startingOffsets and endingOffsets contradict each other: "
                    f"{tp[0]}-{tp[1]} starts at {start} after it ends at {end}")


def _check_streaming(options: KafkaSourceOptions, given: dict[str, str]) -> None:
    """Rules of `spark.readStream`: a stream has no end; Spark's Kafka source refuses the same."""
    for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
        if name in given:
            raise KafkaSourceOptionError(
                f"option {name} applies to batch reads only (spark.read), not to a stream")
