"""Share groups' group configs (share/group_config.py): validation against the broker's
group.share.* bounds, effective values, and DescribeConfigs entries."""

from __future__ import annotations

import pytest

from kafka_ext.server.config import ConfigError, ConfigSource, build_config
from kafka_ext.share.group_config import (
    AutoOffsetReset,
    ShareGroupConfig,
    describe_group_configs,
    parse_iso8601_duration_ms,
    validate_group_configs,
)

BROKER = build_config({"log.dirs": "/tmp/unused", "node.id": "1",
                       "listeners": "PLAINTEXT://127.0.0.1:0"}).values


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1S", 1000), ("P1D", 86_400_000), ("PT1H30M", 5_400_000), ("PT0.5S", 500),
    ("pt2m", 120_000), ("P1DT1S", 86_401_000)])
def test_iso8601_durations_parse_as_java_does(text: str, ms: int) -> None:
    assert parse_iso8601_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "-PT1S", "PT-5S", "yesterday"])
def test_bad_or_negative_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso8601_duration_ms(text)


def test_auto_offset_reset_strategies() -> None:
    assert AutoOffsetReset.parse("Earliest") == AutoOffsetReset("earliest")
    assert AutoOffsetReset.parse("by_duration:PT10M") == AutoOffsetReset("by_duration", 600_000)
    with pytest.raises(ValueError):
        AutoOffsetReset.parse("none")  # a consumer's option, not a share group's


def test_overrides_are_checked_against_the_broker_bounds() -> None:
    assert validate_group_configs({"share.record.lock.duration.ms": " 20000 "}, BROKER) == {
        "share.record.lock.duration.ms": "20000"}
    for configs, fragment in (
            ({"share.record.lock.duration.ms": "10000"}, "greater than or equal"),
            ({"share.session.timeout.ms": "70000"}, "less than or equal"),
            ({"share.delivery.count.limit": "11"}, "less than or equal"),
            ({"share.partition.max.record.locks": "abc"}, "Not a number"),
            ({"share.isolation.level": "serializable"}, "share.isolation.level"),
            ({"share.auto.offset.reset": "by_duration:-PT1S"}, "negative"),
            ({"consumer.unknown": "1"}, "Unknown group config name")):
        with pytest.raises(ConfigError, match=fragment):
            validate_group_configs(configs, BROKER)
    wide = {**BROKER, "group.share.max.heartbeat.interval.ms": 60000}
    with pytest.raises(ConfigError, match="greater than share.heartbeat.interval.ms"):
        validate_group_configs({"share.heartbeat.interval.ms": "50000"}, wide)


def test_effective_configs_fall_back_to_the_broker() -> None:
    config = ShareGroupConfig.resolve({"share.delivery.count.limit": "3",
                                       "share.record.lock.duration.ms": "1"}, BROKER)
    assert (config.delivery_count_limit, config.record_lock_duration_ms,
            config.partition_max_record_locks, config.session_timeout_ms,
            config.heartbeat_interval_ms, config.isolation_level) == (3, 30000, 2000, 45000,
                                                                      5000, 0)
    assert config.auto_offset_reset == AutoOffsetReset("latest")


def test_describe_shows_overrides_as_group_config_and_the_rest_as_defaults() -> None:
    entries = {e.name: e for e in describe_group_configs(
        {"share.isolation.level": "read_committed"}, BROKER)}
    assert entries["share.isolation.level"].source == ConfigSource.GROUP_CONFIG
    assert entries["share.isolation.level"].value == "read_committed"
    assert (entries["share.heartbeat.interval.ms"].value,
            entries["share.heartbeat.interval.ms"].source) == ("5000", ConfigSource.DEFAULT_CONFIG)
    only = describe_group_configs({}, BROKER, ["share.auto.offset.reset", "nope"])
    assert [e.name for e in only] == ["share.auto.offset.reset"]
