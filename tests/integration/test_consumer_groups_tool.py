"""`kafka-ext consumer-groups` (bin/kafka-consumer-groups.sh) against the real broker: the
describe columns, members, resets refused for an active group and applied to an inactive one,
dry runs, offset deletion, group deletion and exit codes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import confluent_kafka
from clients import (
    ADMIN_TIMEOUT_S,
    confluent_admin,
    create_topic,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)

from tests.integration.conftest import BrokerProcess, run_cli

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-consumer-groups.sh"
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]


def groups_tool(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("consumer-groups", "--bootstrap-server", broker.bootstrap, *args)


def table(stdout: str) -> list[list[str]]:
    """The whitespace-split lines of a printed table, blank lines dropped."""
    return [line.split() for line in stdout.splitlines() if line.strip()]


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    admin = confluent_admin(broker.bootstrap)  # kept alive: its futures die with it
    futures = admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions(group)], request_timeout=ADMIN_TIMEOUT_S)
    answer = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def group_state(broker: BrokerProcess, group: str) -> str:
    admin = confluent_admin(broker.bootstrap)
    futures = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)
    return str(futures[group].result(timeout=ADMIN_TIMEOUT_S).state.name)


def test_consumer_groups_tool_against_a_broker(broker: BrokerProcess) -> None:
    topic, group = new_topic_name("cg"), new_topic_name("grp")
    create_topic(broker.bootstrap, topic, partitions=3)
    # 10 records per partition; record i has timestamp 1_600_000_000_000 + i, partition i % 3.
    produce_confluent(broker.bootstrap, topic, make_records(30, partitions=3))

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "cg-client",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 30:
        assert time.monotonic() < deadline, f"only {seen} of 30 records consumed"
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 4),
                             confluent_kafka.TopicPartition(topic, 1, 10)], asynchronous=False)
    member_id = consumer.memberid()
    try:
        listed = subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, "--list"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert group in listed.stdout.splitlines()

        described = groups_tool(broker, "--describe", "--group", group)
        assert described.returncode == 0, described.stderr
        assert described.stdout.startswith("\nGROUP ")
        assert table(described.stdout) == [
            OFFSETS_HEADER,
            [group, topic, "0", "4", "10", "6", member_id, "/127.0.0.1", "cg-client"],
            [group, topic, "1", "10", "10", "0", member_id, "/127.0.0.1", "cg-client"],
            [group, topic, "2", "-", "10", "-", member_id, "/127.0.0.1", "cg-client"],
        ]

        members = groups_tool(broker, "--describe", "--group", group, "--members")
        assert members.returncode == 0, members.stderr
        assert table(members.stdout) == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
            [group, member_id, "/127.0.0.1", "cg-client", "3"]]
        verbose = groups_tool(broker, "--describe", "--group", group, "--members", "--verbose")
        assert table(verbose.stdout)[1][-4:] == ["-", f"{topic}:0,1,2", "-", "-"]
        state = groups_tool(broker, "--describe", "--group", group, "--state")
        assert table(state.stdout)[1][-3:] == ["range", "Stable", "1"]

        refused = groups_tool(broker, "--reset-offsets", "--group", group, "--all-topics",
                              "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, but "
                "the current state is Stable.") in refused.stdout
        assert committed(broker, group) == {0: 4, 1: 10}
    finally:
        consumer.close()
    wait_until(lambda: group_state(broker, group) == "EMPTY", 30, "the group to become empty")

    empty = groups_tool(broker, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in empty.stderr
    assert table(empty.stdout)[1:] == [[group, topic, "0", "4", "10", "6", "-", "-", "-"],
                                       [group, topic, "1", "10", "10", "0", "-", "-", "-"]]

    dry = groups_tool(broker, "--reset-offsets", "--group", group, "--all-topics",
                      "--to-earliest")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "No action will be performed as the --execute option is missing" in dry.stderr
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                 [group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert committed(broker, group) == {0: 4, 1: 10}  # a dry run changes nothing

    done = groups_tool(broker, "--reset-offsets", "--group", group, "--all-topics",
                       "--to-earliest", "--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    assert table(done.stdout)[1:] == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert committed(broker, group) == {0: 0, 1: 0}

    shifted = groups_tool(broker, "--reset-offsets", "--group", group, "--topic",
                          f"{topic}:0,1", "--shift-by", "3", "--execute")
    assert shifted.returncode == 0, shifted.stdout + shifted.stderr
    assert committed(broker, group) == {0: 3, 1: 3}
    no_base = groups_tool(broker, "--reset-offsets", "--group", group, "--topic", topic,
                          "--shift-by", "1", "--execute")
    assert no_base.returncode == 2
    assert f"Cannot shift offset for partition {topic}-2" in no_base.stderr

    clamped = groups_tool(broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:2",
                          "--to-offset", "50", "--execute")
    assert clamped.returncode == 0, clamped.stdout + clamped.stderr
    assert (f"WARN New offset (50) is higher than latest offset for topic partition {topic}-2. "
            "Value will be set to 10.") in clamped.stderr
    assert table(clamped.stdout)[1:] == [[group, topic, "2", "10"]]
    assert committed(broker, group) == {0: 3, 1: 3, 2: 10}

    # 12:26:40.005 UTC is record 5's timestamp: the first records at or after it are records
    # 6 (partition 0, offset 2), 7 (partition 1, offset 2) and 5 (partition 2, offset 1).
    by_time = groups_tool(broker, "--reset-offsets", "--group", group, "--topic", topic,
                          "--to-datetime", "2020-09-13T12:26:40.005", "--execute")
    assert by_time.returncode == 0, by_time.stdout + by_time.stderr
    assert committed(broker, group) == {0: 2, 1: 2, 2: 1}
    exported = groups_tool(broker, "--reset-offsets", "--group", group, "--topic", topic,
                           "--to-latest", "--dry-run", "--export")
    assert exported.stdout == f"{topic},0,10\n{topic},1,10\n{topic},2,10\n\n"

    missing = groups_tool(broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:7",
                          "--to-latest", "--execute")
    assert missing.returncode == 1
    assert f'The partitions "{topic}-7" do not exist' in missing.stdout

    dropped = groups_tool(broker, "--delete-offsets", "--group", group, "--topic", topic)
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert table(dropped.stdout) == [
        ["Request", "succeeded", "for", "deleting", "offsets", "from", "group", f"{group}."],
        ["TOPIC", "PARTITION", "STATUS"], [topic, "0", "Successful"], [topic, "1", "Successful"],
        [topic, "2", "Successful"]]
    assert committed(broker, group) == {}

    deleted = groups_tool(broker, "--delete", "--group", group)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert deleted.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in groups_tool(broker, "--list").stdout.splitlines()
    gone = groups_tool(broker, "--describe", "--group", group)
    assert gone.returncode == 1
    assert f"Error: Consumer group '{group}' does not exist." in gone.stdout
    again = groups_tool(broker, "--delete", "--group", group)
    assert again.returncode == 1
    assert (f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors."
            "GroupIdNotFoundException: The group id does not exist.") in again.stdout

    usage = groups_tool(broker, "--describe")
    assert usage.returncode == 2
    assert "Option [describe] takes one of these options: [all-groups], [group]" in usage.stderr
