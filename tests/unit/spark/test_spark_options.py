"""Option parsing of the `kafka-ext` Spark source: Spark's names and meanings; errors name them."""

from __future__ import annotations

import pytest

from kafka_ext.spark.options import (
    EARLIEST,
    LATEST,
    KafkaSourceOptionError,
    OffsetKind,
    SubscriptionKind,
    parse_options,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming: bool | None = None, **options: str):
    # Spark hands the options over with lower-cased keys.
    return parse_options({k.lower(): v for k, v in {**BOOTSTRAP, **options}.items()}, streaming)


def test_defaults_match_spark_kafka_source() -> None:
    options = parse(subscribe="a")
    assert options.starting.kind is OffsetKind.EARLIEST
    assert options.ending.kind is OffsetKind.LATEST
    assert options.fail_on_data_loss is True
    assert options.include_headers is False
    assert options.min_partitions is None
    assert options.max_offsets_per_trigger is None
    assert options.poll_timeout_ms == 120_000
    assert options.read_committed is False


def test_subscribe_splits_comma_separated_topics() -> None:
    options = parse(subscribe=" a, b ,c,")
    assert options.subscription.kind is SubscriptionKind.SUBSCRIBE
    assert options.subscription.topics == ("a", "b", "c")
    assert options.subscription.matches("b") and not options.subscription.matches("d")


def test_subscribe_pattern_matches_whole_topic_names() -> None:
    subscription = parse(subscribePattern="events-.*").subscription
    assert subscription.matches("events-1") and not subscription.matches("old-events-1")


def test_assign_parses_topic_partition_json() -> None:
    subscription = parse(assign='{"a":[1,0],"b":[2]}').subscription
    assert subscription.kind is SubscriptionKind.ASSIGN
    assert subscription.assigned == (("a", 0), ("a", 1), ("b", 2))


def test_kafka_options_lose_their_prefix() -> None:
    options = parse(subscribe="a", **{"kafka.isolation.level": "read_committed",
                                      "kafka.fetch.max.bytes": "1000"})
    assert options.consumer_config == {"bootstrap.servers": "127.0.0.1:9092",
                                       "isolation.level": "read_committed",
                                       "fetch.max.bytes": "1000"}
    assert options.read_committed


def test_specific_offsets_json_keeps_earliest_and_latest_sentinels() -> None:
    options = parse(subscribe="a", startingOffsets='{"a":{"0":23,"1":-2}}',
                    endingOffsets='{"a":{"0":50,"1":-1}}')
    assert options.starting.kind is OffsetKind.SPECIFIC
    assert dict(options.starting.offsets) == {("a", 0): 23, ("a", 1): EARLIEST}
    assert dict(options.ending.offsets) == {("a", 0): 50, ("a", 1): LATEST}


def test_timestamp_options_parse_to_their_kinds() -> None:
    options = parse(subscribe="a", startingTimestamp="1000",
                    endingOffsetsByTimestamp='{"a":{"0":2000}}')
    assert options.starting.kind is OffsetKind.GLOBAL_TIMESTAMP
    assert options.starting.timestamp_ms == 1000
    assert options.ending.kind is OffsetKind.TIMESTAMPS
    assert dict(options.ending.offsets) == {("a", 0): 2000}


def test_option_names_are_case_insensitive() -> None:
    options = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a",
                             "MINPARTITIONS": "4", "includeheaders": "TRUE"})
    assert options.min_partitions == 4 and options.include_headers


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "a", "startingOffset": "earliest"}, "startingOffset"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribe and subscribePattern"),
    ({}, "one of the options subscribe, subscribePattern, assign"),
    ({"subscribe": " , "}, "subscribe"),
    ({"subscribePattern": "(("}, "subscribePattern"),
    ({"assign": '{"a":0}'}, "assign"),
    ({"assign": "[1]"}, "assign"),
    ({"subscribe": "a", "startingOffsets": "{"}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "1"},
     "startingTimestamp and startingOffsets"),
    ({"subscribe": "a", "endingTimestamp": "1", "endingOffsetsByTimestamp": '{"a":{"0":1}}'},
     "endingTimestamp and endingOffsetsByTimestamp"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"},
     "startingOffsetsByTimestampStrategy"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, "kafka.value.deserializer"),
    ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
])
def test_bad_options_raise_naming_them(options: dict[str, str], named: str) -> None:
    with pytest.raises(KafkaSourceOptionError) as excinfo:
        parse(**options)
    assert named in str(excinfo.value)


def test_missing_bootstrap_servers_is_named() -> None:
    with pytest.raises(KafkaSourceOptionError, match="kafka.bootstrap.servers"):
        parse_options({"subscribe": "a"})


@pytest.mark.parametrize(("options", "named"), [
    ({"startingOffsets": "latest"}, "startingOffsets=latest"),
    ({"endingOffsets": "earliest"}, "endingOffsets=earliest"),
    ({"startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets"),
    ({"startingOffsets": '{"a":{"0":9}}', "endingOffsets": '{"a":{"0":3}}'},
     "startingOffsets and endingOffsets"),
    ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
])
def test_batch_rules_name_the_option(options: dict[str, str], named: str) -> None:
    parse(subscribe="a", **options)  # valid until the mode is known
    with pytest.raises(KafkaSourceOptionError) as excinfo:
        parse(streaming=False, subscribe="a", **options)
    assert named in str(excinfo.value)


@pytest.mark.parametrize("name", ["endingOffsets", "endingTimestamp"])
def test_stream_refuses_ending_positions(name: str) -> None:
    value = "latest" if name == "endingOffsets" else "5"
    with pytest.raises(KafkaSourceOptionError, match=name):
        parse(streaming=True, subscribe="a", **{name: value})


def test_stream_accepts_trigger_and_split_options() -> None:
    options = parse(streaming=True, subscribe="a", startingOffsets="latest",
                    maxOffsetsPerTrigger="1000", minPartitions="8",
                    maxRecordsPerPartition="100")
    assert options.max_offsets_per_trigger == 1000
    assert options.starting.kind is OffsetKind.LATEST


def test_stream_starts_at_latest_by_default_and_batch_at_earliest() -> None:
    assert parse(streaming=True, subscribe="a").starting.kind is OffsetKind.LATEST
    assert parse(streaming=False, subscribe="a").starting.kind is OffsetKind.EARLIEST
    assert parse(streaming=True, subscribe="a",
                 startingOffsets="earliest").starting.kind is OffsetKind.EARLIEST
