"""The pure parts of get-offsets, delete-records, producer-perf-test and consumer-perf-test:
Kafka's filters, JSON file, summary lines, percentiles and date formats."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator

import pytest

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.consumer_perf_test import divide, java_date_formatter, java_f4
from kafka_ext.cli.delete_records import DeleteRecordsError, parse_offsets
from kafka_ext.cli.get_offsets import GetOffsetsError, offset_spec, partition_rules
from kafka_ext.cli.main import build_parser
from kafka_ext.cli.perf_tools import client_metrics, print_metrics
from kafka_ext.cli.producer_perf_test import Stats, percentiles, producer_settings

SUMMARY = re.compile(r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), "
                     r"\d+\.\d\d ms avg latency, \d+\.\d\d ms max latency, \d+ ms 50th, "
                     r"\d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")


def args_of(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_topic_partition_rules_select_as_kafka() -> None:
    rules = partition_rules(args_of("get-offsets", "--bootstrap-server", "h:1",
                                    "--topic-partitions", "a.*:1,b:2-4,c:5-,:-1"))
    allowed = {(t, p) for t in ("ab", "b", "c", "x") for p in range(8)
               if any(rule.allows(t, p) for rule in rules)}
    assert allowed == {("ab", 1), ("b", 2), ("b", 3), ("c", 5), ("c", 6), ("c", 7),
                       ("ab", 0), ("b", 0), ("c", 0), ("x", 0)}  # ":-1": partition 0 of all


def test_topic_and_partitions_filter() -> None:
    [rule] = partition_rules(args_of("get-offsets", "--bootstrap-server", "h:1",
                                     "--topic", "orders", "--partitions", "0,2"))
    assert [rule.allows("orders", p) for p in range(3)] == [True, False, True]
    assert not rule.allows_topic("orders-2")  # the regex must match the whole name
    [everything] = partition_rules(args_of("get-offsets", "--bootstrap-server", "h:1"))
    assert everything.allows("anything", 99)


@pytest.mark.parametrize("argv, message", [
    (("--topic-partitions", "a:1", "--topic", "a"),
     "--topic-partitions cannot be used with --topic or --partitions"),
    (("--partitions", "0,x"), "--partitions expects a comma separated list of numeric "
                              "partition ids, but received: 0,x"),
    (("--topic-partitions", "a:x"), "Invalid rule specification: a:x"),
])
def test_bad_filters_are_kafkas_errors(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(GetOffsetsError, match=re.escape(message)):
        partition_rules(args_of("get-offsets", "--bootstrap-server", "h:1", *argv))


def test_time_words_and_numbers() -> None:
    assert offset_spec("earliest") is offset_spec("-2") is offset_spec("-4")
    assert offset_spec("latest") is offset_spec("-1")
    assert offset_spec("max-timestamp") is offset_spec("-3")
    with pytest.raises(GetOffsetsError, match="Malformed time argument soon"):
        offset_spec("soon")


def test_offset_json_file_is_read_in_order() -> None:
    text = ('{"partitions":[{"topic":"t","partition":1,"offset":5},'
            '{"topic":"s","partition":0,"offset":-1}],"version":1}')
    assert list(parse_offsets(text).items()) == [(("t", 1), 5), (("s", 0), -1)]
    assert parse_offsets('{"partitions":[]}') == {}  # no version: 1, as Kafka


@pytest.mark.parametrize("text, message", [
    ("{", "The input string is not a valid JSON"),
    ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
    ('{"version":1}', "Missing partitions field"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":1},'
     '{"topic":"t","partition":0,"offset":2}]}',
     "Offset json file contains duplicate topic partitions: t-0"),
    ('{"partitions":[{"topic":"t","offset":1}]}', "No such field exists: `partition`"),
])
def test_malformed_offset_json_files(text: str, message: str) -> None:
    with pytest.raises(DeleteRecordsError, match=re.escape(message)):
        parse_offsets(text)


def test_percentiles_pick_as_kafka() -> None:
    latencies = list(range(100, 0, -1))
    assert percentiles(latencies, 0.5, 0.95, 0.99, 0.999) == [51, 96, 100, 100]
    assert percentiles([], 0.5) == [0]


def test_summary_line_has_kafkas_format(capsys: pytest.CaptureFixture[str]) -> None:
    stats = Stats(3, steady_state=False)
    for latency in (1, 2, 9):
        stats.record(latency, 100, stats.start_ms)
    stats.print_total()
    line = capsys.readouterr().out.strip()
    assert SUMMARY.match(line), line
    assert ", 4.00 ms avg latency, 9.00 ms max latency, 2 ms 50th, 9 ms 95th," in line


def test_producer_settings_turn_on_transactions() -> None:
    settings, duration_ms = producer_settings(args_of(
        "producer-perf-test", "--topic", "t", "--num-records", "5", "--record-size", "10",
        "--throughput", "-1", "--producer-props", "bootstrap.servers=h:1", "acks=all",
        "--transaction-duration-ms", "100"))
    assert duration_ms == 100 and settings["acks"] == "all"
    assert settings["transactional.id"].startswith("performance-producer-")
    assert settings["client.id"] == "perf-producer-client"
    settings, duration_ms = producer_settings(args_of(
        "producer-perf-test", "--topic", "t", "--num-records", "5", "--payload-monotonic",
        "--throughput", "-1", "--producer-props", "bootstrap.servers=h:1",
        "transactional.id=mine"))
    assert (settings["transactional.id"], duration_ms) == ("mine", 3000)


@pytest.mark.parametrize("extra, message", [
    (("--num-records", "0"), "--num-records should be greater than zero"),
    (("--num-records", "5", "--warmup-records", "5"), "strictly fewer"),
])
def test_producer_usage_errors(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        producer_settings(args_of("producer-perf-test", "--topic", "t", "--record-size", "1",
                                  "--throughput", "-1", "--producer-props",
                                  "bootstrap.servers=h:1", *extra))


@pytest.fixture
def utc() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()


def test_java_date_formats(utc: None) -> None:
    at = 1_600_000_000_123  # 2020-09-13 12:26:40.123 UTC, a Sunday
    assert java_date_formatter("yyyy-MM-dd HH:mm:ss:SSS")(at) == "2020-09-13 12:26:40:123"
    assert java_date_formatter("yy/M/d h:mm a 'at' EEE, MMM")(at) == \
        "20/9/13 12:26 PM at Sun, Sep"
    assert java_date_formatter("''HH''")(at) == "'12'"
    with pytest.raises(UsageError, match="Illegal pattern character 'b'"):
        java_date_formatter("bb")


def test_java_number_formats() -> None:
    assert java_f4(divide(1, 3)) == "0.3333"
    assert java_f4(divide(1, 0)) == "Infinity" and java_f4(divide(0, 0)) == "NaN"


def test_metrics_table(capsys: pytest.CaptureFixture[str]) -> None:
    print_metrics(client_metrics({"client_id": "c", "tx": 3, "name": "x", "ok": True},
                                 "producer-metrics"))
    assert capsys.readouterr().out.splitlines() == [
        "", "Metric Name                         Value",
        "producer-metrics:tx:{client-id=c} : 3.000"]
