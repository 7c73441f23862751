"""Dynamic broker configs against the real broker: set per broker and as the cluster default with
`kafka-ext configs` and with confluent-kafka's admin client, described with Kafka's sources,
taken at once by topics without their own override, kept across a restart (they are metadata
records), refused by name for keys that cannot change at run time; and broker-logger levels
through the tool.

The tool runs in this process (its `main`, as the console script calls it): an interpreter
start-up per call would cost most of this module's time budget."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from clients import (
    ADMIN_TIMEOUT_S,
    confluent_admin,
    create_topic,
    make_records,
    new_topic_name,
    produce_confluent,
    segment_files,
    wait_until,
    watermarks_confluent,
)
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from confluent_kafka.admin import ConfigSource as Source

from kafka_ext.cli.main import main
from tests.integration.conftest import BrokerProcess, serve_for_module

Tool = Callable[..., tuple[int, str, str]]  # (*args) -> (exit code, stdout, stderr)
NO_DYNAMIC_CONFIGS = ["Dynamic configs for broker 1 are:",
                      "Default configs for brokers in the cluster are:"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Retention checked five times a second, so a lowered log.retention.ms shows at once.
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("dynamic") / "data",
                                              {"log.retention.check.interval.ms": "200"}))


@pytest.fixture
def kafka_configs(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> Tool:
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main(["configs", "--bootstrap-server", broker.bootstrap, *args])
        except SystemExit as exc:  # usage errors leave as on the shell
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err
    return run


def broker_entity(name: str | None) -> list[str]:
    """The tool's flags for broker `name`, or for the cluster default when None."""
    return ["--entity-type", "brokers",
            *(["--entity-default"] if name is None else ["--entity-name", name])]


def alter_broker(kafka_configs: Tool, name: str | None, *change: str) -> None:
    """`--alter` with `--add-config k=v` or `--delete-config k` on a broker or the default."""
    code, _, err = kafka_configs(*broker_entity(name), "--alter", *change)
    assert code == 0, err


def confluent_alter(broker: BrokerProcess, name: str, key: str, value: str | None) -> None:
    """IncrementalAlterConfigs of broker `name` from confluent-kafka: SET, or DELETE for None."""
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value or "", incremental_operation=op)])
    admin = confluent_admin(broker.bootstrap)  # kept: the future fails once it is collected
    admin.incremental_alter_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)


def described(broker: BrokerProcess, kind: ResourceType, name: str, key: str) -> ConfigEntry:
    resource = ConfigResource(kind, name)
    admin = confluent_admin(broker.bootstrap)
    entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    entry: ConfigEntry = entries[key]
    return entry


def test_cluster_default_and_broker_value_are_described_with_their_sources(
        broker: BrokerProcess, kafka_configs: Tool) -> None:
    topic = new_topic_name("inherits")
    create_topic(broker.bootstrap, topic)
    alter_broker(kafka_configs, None, "--add-config", "log.retention.ms=604800001")
    alter_broker(kafka_configs, "1", "--add-config", "log.retention.ms=604800002")
    try:
        code, out, _ = kafka_configs("--entity-type", "brokers", "--describe")
        assert code == 0 and out.splitlines() == [
            "Dynamic configs for broker 1 are:",
            "  log.retention.ms=604800002 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.ms=604800002, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms="
            "604800001, DEFAULT_CONFIG:log.retention.hours=168}",
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=604800001 sensitive=false synonyms={"
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=604800001, "
            "DEFAULT_CONFIG:log.retention.hours=168}",
        ]
        entry = described(broker, ResourceType.BROKER, "1", "log.retention.ms")
        assert (entry.value, entry.source, entry.is_read_only) == (
            "604800002", Source.DYNAMIC_BROKER_CONFIG.value, False)
        inherited = described(broker, ResourceType.TOPIC, topic, "retention.ms")
        assert (inherited.value, inherited.source) == (
            "604800002", Source.DYNAMIC_BROKER_CONFIG.value)
        alter_broker(kafka_configs, "1", "--delete-config", "log.retention.ms")
        inherited = described(broker, ResourceType.TOPIC, topic, "retention.ms")
        assert (inherited.value, inherited.source) == (
            "604800001", Source.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    finally:
        alter_broker(kafka_configs, None, "--delete-config", "log.retention.ms")
    assert described(broker, ResourceType.TOPIC, topic, "retention.ms").source == \
        Source.DEFAULT_CONFIG.value


def test_confluent_admin_client_sets_broker_configs_incrementally(
        broker: BrokerProcess, kafka_configs: Tool) -> None:
    # Neither confluent-kafka nor kafka-python can name the cluster default (""): the tool does.
    confluent_alter(broker, "1", "log.retention.bytes", "1073741824")
    confluent_alter(broker, "1", "log.cleaner.backoff.ms", "1000")
    try:
        _, out, _ = kafka_configs(*broker_entity("1"), "--describe")
        assert out.splitlines() == [
            "Dynamic configs for broker 1 are:",
            "  log.cleaner.backoff.ms=1000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.cleaner.backoff.ms=1000, DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}",
            "  log.retention.bytes=1073741824 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.bytes=1073741824, DEFAULT_CONFIG:log.retention.bytes=-1}",
        ]
    finally:
        confluent_alter(broker, "1", "log.retention.bytes", None)
        confluent_alter(broker, "1", "log.cleaner.backoff.ms", None)
    assert kafka_configs("--entity-type", "brokers", "--describe")[1].splitlines() == \
        NO_DYNAMIC_CONFIGS


def test_lowered_segment_size_and_retention_apply_to_an_existing_topic(
        broker: BrokerProcess, kafka_configs: Tool) -> None:
    topic = new_topic_name("shrinks")
    create_topic(broker.bootstrap, topic)
    now_ms = int(time.time() * 1000)
    produce_confluent(broker.bootstrap, topic, make_records(10, base_timestamp_ms=now_ms))
    assert len(segment_files(broker.data_dir, topic, 0)) == 1
    confluent_alter(broker, "1", "log.segment.bytes", "2048")
    try:
        records = make_records(60, base_timestamp_ms=now_ms, value_size_bytes=200)
        produce_confluent(broker.bootstrap, topic, records, {"linger.ms": 0, "batch.size": 1000})
        wait_until(lambda: len(segment_files(broker.data_dir, topic, 0)) >= 4, ADMIN_TIMEOUT_S,
                   "segments of at most 2 KiB")
        alter_broker(kafka_configs, None, "--add-config", "log.retention.ms=500")
        try:
            wait_until(lambda: watermarks_confluent(broker.bootstrap, topic, 0)[0] > 0,
                       ADMIN_TIMEOUT_S, "retention to delete the old segments")
        finally:
            alter_broker(kafka_configs, None, "--delete-config", "log.retention.ms")
    finally:
        confluent_alter(broker, "1", "log.segment.bytes", None)


def test_dynamic_configs_are_kept_across_a_restart(broker: BrokerProcess,
                                                   kafka_configs: Tool) -> None:
    alter_broker(kafka_configs, "1", "--add-config", "message.max.bytes=2000000")
    try:
        broker.restart()
        _, out, _ = kafka_configs("--broker", "1", "--describe")
        assert ("  message.max.bytes=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
                "message.max.bytes=2000000, DEFAULT_CONFIG:message.max.bytes=1048588}"
                ) in out.splitlines()
        topic = new_topic_name("after-restart")
        create_topic(broker.bootstrap, topic)
        inherited = described(broker, ResourceType.TOPIC, topic, "max.message.bytes")
        assert (inherited.value, inherited.source) == (
            "2000000", Source.DYNAMIC_BROKER_CONFIG.value)
    finally:
        alter_broker(kafka_configs, "1", "--delete-config", "message.max.bytes")


def test_a_config_that_cannot_change_at_run_time_is_refused_naming_it(
        broker: BrokerProcess, kafka_configs: Tool) -> None:
    code, _, err = kafka_configs(*broker_entity("1"), "--alter", "--add-config",
                                 "log.cleaner.threads=2")
    assert code == 1
    assert ("INVALID_CONFIG: Cannot update these configs dynamically: Set(log.cleaner.threads)"
            in err)
    with pytest.raises(KafkaException, match=r"Set\(log.preallocate\)"):
        confluent_alter(broker, "1", "log.preallocate", "true")
    assert kafka_configs("--entity-type", "brokers", "--describe")[1].splitlines() == \
        NO_DYNAMIC_CONFIGS


def test_broker_logger_levels_are_described_and_changed_with_the_tool(
        kafka_configs: Tool) -> None:
    logger = "kafka_ext.server.broker"
    code, out, err = kafka_configs("--broker-logger", "1", "--alter", "--add-config",
                                   f"{logger}=DEBUG")
    assert (code, out) == (0, "Completed updating config for broker-logger 1.\n"), err
    code, out, _ = kafka_configs("--entity-type", "broker-loggers", "--entity-name", "1",
                                 "--describe")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "Dynamic configs for broker-logger 1 are:"
    assert "  root=INFO sensitive=false synonyms={}" in lines
    assert f"  {logger}=DEBUG sensitive=false synonyms={{}}" in lines
    code, _, err = kafka_configs("--broker-logger", "1", "--alter", "--delete-config", logger)
    assert code == 0, err
    code, _, err = kafka_configs("--broker-logger", "1", "--alter", "--add-config",
                                 "no.such.logger=DEBUG")
    assert code == 1 and "Invalid broker logger(s): no.such.logger" in err
