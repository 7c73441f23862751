"""`kafka-ext share-groups` (bin/kafka-share-groups.sh, KIP-932) against the real broker with
confluent-kafka ShareConsumers: list, describe (members, offsets, state), resets of an empty
group that a new consumer then reads from, offset and group deletion, and Kafka's refusals."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import confluent_admin, create_topic, new_topic_name, wait_until
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.integration.conftest import BrokerProcess, run_cli, serve_for_module

RECORDS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-tool") / "data", {
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.share.heartbeat.interval.ms": "500",
    })
    yield from serve_for_module(b)


def tool(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("share-groups", "--bootstrap-server", broker.bootstrap, *args)


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def tool_until(broker: BrokerProcess, done: Any, what: str, *args: str
               ) -> subprocess.CompletedProcess[str]:
    """The tool's first run whose output `done` accepts (the group settles after a poll)."""
    def attempt() -> subprocess.CompletedProcess[str] | None:
        result = tool(broker, *args)
        return result if done(result.stdout) else None
    return wait_until(attempt, 10, what)


def earliest_group(bootstrap: str, prefix: str) -> str:
    group = new_topic_name(prefix)
    admin = confluent_admin(bootstrap)  # kept: the futures die with their client
    entry = ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        future.result(20)
    return group


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str, client_id: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "client.id": client_id})
    consumer.subscribe([topic])
    return consumer


def consume(consumer: ShareConsumer, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records delivered"
        for message in consumer.poll(0.5) or []:
            assert message.error() is None, message.error()
            got.append(message)
    return got


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess) -> str:
    name = new_topic_name("share-tool")
    create_topic(broker.bootstrap, name, partitions=1)
    produce(broker.bootstrap, name, RECORDS)
    return name


def test_list_and_describe_a_live_group_then_reset_and_delete_it(
        broker: BrokerProcess, topic: str) -> None:
    group = earliest_group(broker.bootstrap, "share-tool-grp")
    consumer = share_consumer(broker.bootstrap, group, topic, "tool-client")
    try:
        assert len(consume(consumer, RECORDS)) == RECORDS
        consumer.commit_sync()

        listed = tool(broker, "--list")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert group in listed.stdout.splitlines()
        with_state = tool(broker, "--list", "--state")
        assert ["GROUP", "STATE"] in table(with_state.stdout)
        assert [group, "Stable"] in table(with_state.stdout)
        assert group not in tool(broker, "--list", "--state", "empty").stdout

        members = tool_until(broker, lambda out: f"{topic}:0" in out, "the member's assignment",
                             "--describe", "--group", group, "--members")
        assert members.returncode == 0
        rows = table(members.stdout)
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                           "ASSIGNMENT"]
        assert rows[1][0] == group and rows[1][3:] == ["tool-client", "1", f"{topic}:0"]
        verbose = table(tool(broker, "--describe", "--group", group, "--members",
                             "--verbose").stdout)
        assert verbose[0][5] == "MEMBER-EPOCH" and int(verbose[1][5]) > 0

        offsets = tool_until(broker, lambda out: [group, topic, "0", str(RECORDS), "0"]
                             in table(out), "the start offset past the acknowledged records",
                             "--describe", "--group", group)
        assert offsets.returncode == 0 and offsets.stdout.startswith("\nGROUP ")
        assert table(offsets.stdout)[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET",
                                            "LAG"]
        state = table(tool(broker, "--describe", "--group", group, "--state").stdout)
        assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert state[1][0] == group and state[1][-2:] == ["Stable", "1"]

        refused = tool(broker, "--reset-offsets", "--group", group, "--topic", topic,
                       "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert refused.stderr.strip() == f"Share group '{group}' is not empty."
        not_deleted = tool(broker, "--delete", "--group", group)
        assert not_deleted.returncode == 1
        assert not_deleted.stdout == (
            "\nError: Deletion of some share groups failed:\n"
            f"* Group '{group}' could not be deleted due to: "
            "org.apache.kafka.common.errors.GroupNotEmptyException: "
            f"Share group '{group}' is not EMPTY.\n")
    finally:
        consumer.close()

    wait_until(lambda: [group, "Empty"] in table(tool(broker, "--list", "--state").stdout),
               15, "the group to be empty")
    dry = tool(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
               "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                 [group, topic, "0", "0"]]
    assert [group, topic, "0", str(RECORDS), "0"] in table(
        tool(broker, "--describe", "--group", group, "--offsets").stdout)
    reset = tool(broker, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                 "--execute")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert [group, topic, "0", "0"] in table(reset.stdout)
    assert [group, topic, "0", "0", str(RECORDS)] in table(
        tool(broker, "--describe", "--group", group).stdout)

    again = share_consumer(broker.bootstrap, group, topic, "tool-client-2")
    try:
        values = sorted(int(m.value()) for m in consume(again, RECORDS))
        assert values == list(range(RECORDS))
        again.commit_sync()
    finally:
        again.close()
    wait_until(lambda: [group, "Empty"] in table(tool(broker, "--list", "--state").stdout),
               15, "the group to be empty again")

    deleted_offsets = tool(broker, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted_offsets.returncode == 0, deleted_offsets.stdout
    assert table(deleted_offsets.stdout) == [["TOPIC", "STATUS"], [topic, "Successful"]]
    assert "has no offset information" in tool(broker, "--describe", "--group", group).stdout

    deleted = tool(broker, "--delete", "--group", group)
    assert deleted.returncode == 0, deleted.stdout
    assert deleted.stdout == f"Deletion of requested share groups ('{group}') was successful.\n"
    assert group not in tool(broker, "--list").stdout.splitlines()


def test_unknown_groups_and_bad_flags_are_refused_with_kafkas_messages(
        broker: BrokerProcess) -> None:
    missing = tool(broker, "--delete", "--group", "no-such-share-group")
    assert missing.returncode == 1
    assert ("* Group 'no-such-share-group' could not be deleted due to: "
            "org.apache.kafka.common.errors.GroupIdNotFoundException: Group "
            "'no-such-share-group' is not a share group.") in missing.stdout
    described = tool(broker, "--describe", "--group", "no-such-share-group")
    assert described.returncode == 1
    assert described.stdout.startswith("\nError: Executing share group command failed due to "
                                       "org.apache.kafka.common.errors.GroupIdNotFoundException")
    usage = tool(broker, "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest")
    assert usage.returncode == 2
    assert "Option [reset-offsets] takes the option: [execute] or [dry-run]" in usage.stderr
    both = tool(broker, "--list", "--delete", "--all-groups")
    assert both.returncode == 2 and "exactly one action" in both.stderr
    assert tool(broker, "--list", "--state", "rebalancing").returncode == 2


def test_launcher_runs_the_tool(broker: BrokerProcess) -> None:
    launcher = Path(__file__).resolve().parents[2] / "bin" / "kafka-share-groups.sh"
    done = subprocess.run([str(launcher), "--bootstrap-server", broker.bootstrap, "--list"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
