"""`kafka-ext configs --entity-type groups` (kafka-configs.sh on GROUP resources, KIP-848 and
KIP-932) against the real broker: Kafka's describe layout for a group's dynamic configs and for
all of them, alters and deletes, Kafka's refusals, and a share consumer honouring a config the
tool set."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from clients import create_topic, new_topic_name, wait_until
from confluent_kafka import Producer, ShareConsumer

from tests.integration.conftest import BrokerProcess, run_cli, serve_for_module


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("configs-groups") / "data", {
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
    })
    yield from serve_for_module(b)


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("configs", "--bootstrap-server", broker.bootstrap, *args)


def test_group_config_alter_then_describe_shows_dynamic_ones_and_all_with_defaults(
        broker: BrokerProcess) -> None:
    group = new_topic_name("cfg-group")  # a group need not exist to have configs
    done = configs(broker, "--alter", "--entity-type", "groups", "--entity-name", group,
                   "--add-config", "share.auto.offset.reset=earliest,"
                   "share.record.lock.duration.ms=20000")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Completed updating config for group {group}.\n"

    described = configs(broker, "--describe", "--entity-type", "groups", "--entity-name", group)
    assert described.returncode == 0, described.stderr
    overrides = [entry("share.auto.offset.reset", "earliest", "DYNAMIC_GROUP_CONFIG"),
                 entry("share.record.lock.duration.ms", "20000", "DYNAMIC_GROUP_CONFIG")]
    assert described.stdout.splitlines() == [f"Dynamic configs for group {group} are:",
                                             *overrides]

    every = configs(broker, "--describe", "--group", group, "--all")
    assert every.returncode == 0, every.stderr
    defaults = [entry(name, value, "DEFAULT_CONFIG") for name, value in (
        ("share.delivery.count.limit", "5"), ("share.heartbeat.interval.ms", "5000"),
        ("share.isolation.level", "read_uncommitted"),
        ("share.partition.max.record.locks", "2000"), ("share.session.timeout.ms", "45000"))]
    assert every.stdout.splitlines() == [f"All configs for group {group} are:",
                                         *sorted(overrides + defaults)]


def entry(name: str, value: str, source: str) -> str:
    """A describe line of kafka-configs.sh: a group config has itself as its one synonym."""
    return f"  {name}={value} sensitive=false synonyms={{{source}:{name}={value}}}"


def test_group_config_delete_and_kafkas_refusals(broker: BrokerProcess) -> None:
    group = new_topic_name("cfg-group")
    assert configs(broker, "--alter", "--group", group, "--add-config",
                   "share.isolation.level=read_committed").returncode == 0
    done = configs(broker, "--alter", "--group", group, "--delete-config",
                   "share.isolation.level")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Completed updating config for group {group}.\n"
    assert configs(broker, "--describe", "--group", group).stdout.splitlines() == [
        f"Dynamic configs for group {group} are:"]

    unset = configs(broker, "--alter", "--group", group, "--delete-config",
                    "share.isolation.level")
    assert unset.returncode == 1
    assert unset.stderr.endswith("\nInvalid config(s): share.isolation.level\n")

    too_low = configs(broker, "--alter", "--group", group, "--add-config",
                      "share.record.lock.duration.ms=1000")
    assert too_low.returncode == 1
    assert too_low.stderr.endswith(
        "\nINVALID_CONFIG: share.record.lock.duration.ms must be greater than or equal to "
        "group.share.min.record.lock.duration.ms\n")
    unknown = configs(broker, "--alter", "--group", group, "--add-config", "retention.ms=5")
    assert unknown.returncode == 1
    assert unknown.stderr.endswith("\nINVALID_CONFIG: Unknown group config name: retention.ms\n")
    # Nothing was set by the refused alters.
    assert configs(broker, "--describe", "--group", group).stdout.splitlines() == [
        f"Dynamic configs for group {group} are:"]

    for action in ("--alter", "--describe"):
        default = configs(broker, action, "--entity-type", "groups", "--entity-default",
                          "--add-config", "share.isolation.level=read_committed")
        assert default.returncode == 2
    described = configs(broker, "--describe", "--entity-type", "groups", "--entity-default")
    assert "--entity-default must not be specified with --describe of groups" in described.stderr
    altered = configs(broker, "--alter", "--entity-type", "groups", "--entity-default",
                      "--add-config", "share.isolation.level=read_committed")
    assert "An entity name must be specified with --alter of groups" in altered.stderr


def test_share_group_reads_from_earliest_set_by_the_tool_and_describe_lists_every_group(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("cfg-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    group = new_topic_name("workers")
    assert configs(broker, "--alter", "--group", group, "--add-config",
                   "share.auto.offset.reset=earliest").returncode == 0

    # The records predate the group: only `earliest` delivers them.
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    try:
        got: list[tuple[int | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < deadline, f"only {got} delivered"
            for message in consumer.poll(0.5) or []:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
        assert sorted(got) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]

        def listed() -> list[str] | None:
            lines = configs(broker, "--describe", "--entity-type", "groups").stdout.splitlines()
            return lines if f"Dynamic configs for group {group} are:" in lines else None
        lines = wait_until(listed, 20, "the share group in the describe of every group")
    finally:
        consumer.close()
    at = lines.index(f"Dynamic configs for group {group} are:")
    assert lines[at + 1] == entry("share.auto.offset.reset", "earliest", "DYNAMIC_GROUP_CONFIG")
    headers = [line for line in lines if not line.startswith("  ")]
    assert headers == sorted(headers)
    assert all(h.startswith("Dynamic configs for group ") for h in headers)
