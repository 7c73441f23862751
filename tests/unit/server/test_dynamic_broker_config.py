"""Dynamic broker configs (Kafka's DynamicBrokerConfig): which keys change at run time, their
precedence (this broker's record, then the cluster default's, then server.properties) and how
DescribeConfigs reports them. The controller's side is in
tests/unit/controller/test_broker_config_control.py."""

from __future__ import annotations

import dataclasses

import pytest

from kafka_ext.server.config import (
    DYNAMIC_LOG_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigSource,
    DynamicBrokerConfig,
    build_config,
    check_dynamic_broker_configs,
    describe_broker_configs,
    describe_broker_default_configs,
    describe_topic_configs,
)
from kafka_ext.storage.log_config import LogConfig

STATIC = build_config({"log.retention.hours": "1", "log.segment.bytes": "8192"})


def test_broker_record_wins_over_cluster_default_which_wins_over_static() -> None:
    both = DynamicBrokerConfig.of(STATIC, {"log.retention.ms": "2000"},
                                  {"log.retention.ms": "3000", "log.segment.bytes": "4096"})
    assert both.effective("log.retention.ms") == 2000
    assert both.topic_defaults()["retention.ms"] == 2000
    assert both.topic_defaults()["segment.bytes"] == 4096
    cluster_only = DynamicBrokerConfig.of(STATIC, {}, {"log.retention.ms": "3000"})
    assert cluster_only.topic_defaults()["retention.ms"] == 3000
    static_only = DynamicBrokerConfig.of(STATIC)
    assert static_only.topic_defaults()["retention.ms"] == 3_600_000  # log.retention.hours=1
    assert static_only.topic_defaults()["segment.bytes"] == 8192


def test_records_this_version_cannot_apply_are_left_out() -> None:
    dynamic = DynamicBrokerConfig.of(
        STATIC, {"num.io.threads": "4", "log.segment.bytes": "lots", "no.such.key": "1"},
        {"log.retention.ms": "-5"})
    assert dynamic.node_overrides == {} and dynamic.cluster_overrides == {}
    assert dynamic.values == STATIC.values


def test_topic_without_override_reports_the_dynamic_value_it_inherits() -> None:
    dynamic = DynamicBrokerConfig.of(STATIC, {"log.retention.ms": "2000"},
                                     {"log.retention.ms": "3000"})
    [entry] = describe_topic_configs(dynamic, {}, ["retention.ms"])
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "2000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
    ]
    [overridden] = describe_topic_configs(dynamic, {"retention.ms": "5"}, ["retention.ms"])
    assert (overridden.value, overridden.source) == ("5", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    cluster_only = DynamicBrokerConfig.of(STATIC, {}, {"log.retention.ms": "3000"})
    [entry] = describe_topic_configs(cluster_only, {}, ["retention.ms"])
    assert (entry.value, entry.source) == ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_broker_describe_marks_dynamic_keys_writable_and_the_default_lists_only_its_own() -> None:
    dynamic = DynamicBrokerConfig.of(STATIC, {"log.segment.bytes": "2048"},
                                     {"log.segment.bytes": "4096", "log.retention.ms": "3000"})
    entries = {e.name: e for e in describe_broker_configs(
        dynamic, ["log.segment.bytes", "log.retention.hours", "log.cleaner.threads"])}
    segment = entries["log.segment.bytes"]
    assert (segment.value, segment.source, segment.read_only) == (
        "2048", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [s.source for s in segment.synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG]
    assert entries["log.retention.hours"].read_only  # only the ms key is dynamic, as in Kafka
    assert entries["log.cleaner.threads"].read_only
    defaults = {e.name: e for e in describe_broker_default_configs(dynamic)}
    assert set(defaults) == {"log.segment.bytes", "log.retention.ms"}
    assert defaults["log.segment.bytes"].value == "4096"
    assert [s.source for s in defaults["log.segment.bytes"].synonyms] == [
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG]


def test_keys_that_cannot_change_at_run_time_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically: "
                                          r"Set\(log.cleaner.threads, num.io.threads\)$"):
        check_dynamic_broker_configs(["num.io.threads", "log.segment.bytes",
                                      "log.cleaner.threads"])


def test_every_dynamic_log_config_is_the_broker_default_of_a_log_config_field() -> None:
    fields = {f.name for f in dataclasses.fields(LogConfig)}
    for name in DYNAMIC_LOG_CONFIGS - {"unclean.leader.election.enable"}:  # the controller's
        topics = [t for t, d in TOPIC_CONFIGS.items() if d.broker_synonyms[:1] == (name,)]
        assert topics and topics[0].replace(".", "_") in fields, name
