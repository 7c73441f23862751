"""`kafka-ext topics` (kafka-topics.sh) flags against one real broker (node 1): replica
assignments by hand, the min-ISR partition filters, --topics-with-overrides, and the flag
combinations kafka-topics.sh refuses, with its messages. Assignments over several brokers are
in test_topics_tool_cluster.py."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import BrokerProcess, run_cli, serve_for_module

ALTER_CONFIG_REFUSED = (
    'Option combination "[[bootstrap-server], [config]]" can\'t be used with option "[alter]" '
    "(To alter topic configurations, the kafka-configs tool can be used.)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("topics-flags") / "data"))


def topics(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("topics", "--bootstrap-server", broker.bootstrap, *args)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def partition_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("\tTopic: ")]


def test_replica_assignment_places_every_partition_and_they_carry_records(
        broker: BrokerProcess) -> None:
    topic = name("assigned")
    assert ok(topics(broker, "--create", "--topic", topic, "--replica-assignment", "1,1,1",
                     "--config", "retention.ms=600000")) == f"Created topic {topic}.\n"
    out = ok(topics(broker, "--describe", "--topic", topic))
    head = out.splitlines()[0]
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=600000" in head
    assert [line.split("\tElr:")[0] for line in partition_lines(out)] == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]

    # Grown by hand: the list names every partition, the existing three are skipped.
    assert ok(topics(broker, "--alter", "--topic", topic, "--partitions", "4",
                     "--replica-assignment", "1,1,1,1")).startswith("WARNING: If partitions")
    lines = partition_lines(ok(topics(broker, "--describe", "--topic", topic)))
    assert len(lines) == 4 and "\tPartition: 3\tLeader: 1\tReplicas: 1\tIsr: 1\t" in lines[3]

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(4):
        producer.produce(topic, value=f"v{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"),
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        got: dict[int, list[bytes]] = {}
        while sum(map(len, got.values())) < 4:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None
            got.setdefault(msg.partition(), []).append(msg.value())
    finally:
        consumer.close()
    assert got == {p: [f"v{p}".encode()] for p in range(4)}


def test_alter_with_too_short_an_assignment_is_refused_by_the_controller(
        broker: BrokerProcess) -> None:
    topic = name("short")
    ok(topics(broker, "--create", "--topic", topic, "--replica-assignment", "1"))
    done = topics(broker, "--alter", "--topic", topic, "--partitions", "3",
                  "--replica-assignment", "1,1")
    assert done.returncode == 1
    assert done.stderr == ("Error while executing topic command : Attempted to add 2 additional "
                           "partition(s), but only 1 assignment(s) were specified.\n")
    assert "\tPartitionCount: 1\t" in ok(topics(broker, "--describe", "--topic", topic))


@pytest.mark.parametrize(("assignment", "message"), [
    ("1:1", "Partition replica lists may not contain duplicate entries: 1"),
    ("1,1:2", "Partition 1 has different replication factor: [1, 2]"),
    ("1,x", 'For input string: "x"'),
    ("9", "Partition 0 names unknown brokers [9]"),
])
def test_bad_assignments_fail_with_kafka_topics_messages(broker: BrokerProcess, assignment: str,
                                                         message: str) -> None:
    topic = name("bad-assignment")
    done = topics(broker, "--create", "--topic", topic, "--replica-assignment", assignment)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"Error while executing topic command : {message}\n"
    assert topic not in ok(topics(broker, "--list")).splitlines()


def test_existing_topic_with_assignment_fails_unless_if_not_exists(broker: BrokerProcess) -> None:
    topic = name("assigned-twice")
    ok(topics(broker, "--create", "--topic", topic, "--replica-assignment", "1"))
    # The topic list would skip it; the race it guards against is the broker's answer.
    done = topics(broker, "--create", "--topic", topic, "--replica-assignment", "1,1")
    assert done.returncode == 1
    assert done.stderr == (f"Error while executing topic command : Topic '{topic}' already "
                           "exists.\n")
    assert ok(topics(broker, "--create", "--topic", topic, "--replica-assignment", "1,1",
                     "--if-not-exists")) == ""
    assert "\tPartitionCount: 1\t" in ok(topics(broker, "--describe", "--topic", topic))


def test_min_isr_filters_compare_the_isr_with_each_topics_min_insync_replicas(
        broker: BrokerProcess) -> None:
    under, at, plain = name("min-isr-under"), name("min-isr-at"), name("min-isr-plain")
    ok(topics(broker, "--create", "--topic", under, "--partitions", "2",
              "--config", "min.insync.replicas=2"))
    ok(topics(broker, "--create", "--topic", at, "--partitions", "1",
              "--config", "min.insync.replicas=1"))
    ok(topics(broker, "--create", "--topic", plain, "--partitions", "1",
              "--config", "min.insync.replicas=1", "--config", "retention.ms=1000000"))
    pattern = f"({under}|{at}|{plain})"

    lines = partition_lines(ok(topics(broker, "--describe", "--topic", pattern,
                                      "--under-min-isr-partitions")))
    assert [line.split("\tLeader:")[0] for line in lines] == [
        f"\tTopic: {under}\tPartition: 0", f"\tTopic: {under}\tPartition: 1"]
    # Partition lines only: no topic line, as with --under-replicated-partitions.
    out = ok(topics(broker, "--describe", "--topic", pattern, "--at-min-isr-partitions"))
    assert out.splitlines() == partition_lines(out)
    assert [line.split("\tLeader:")[0] for line in partition_lines(out)] == [
        f"\tTopic: {at}\tPartition: 0", f"\tTopic: {plain}\tPartition: 0"]
    assert ok(topics(broker, "--describe", "--topic", plain, "--under-min-isr-partitions")) == ""


def test_topics_with_overrides_prints_only_topic_lines_of_overridden_topics(
        broker: BrokerProcess) -> None:
    plain, tuned = name("no-overrides"), name("overrides")
    ok(topics(broker, "--create", "--topic", plain, "--partitions", "2"))
    ok(topics(broker, "--create", "--topic", tuned, "--partitions", "2",
              "--config", "cleanup.policy=compact", "--config", "retention.ms=123456"))
    out = ok(topics(broker, "--describe", "--topic", f"({plain}|{tuned})",
                    "--topics-with-overrides"))
    (line,) = out.splitlines()
    assert line.startswith(f"Topic: {tuned}\tTopicId: ")
    assert line.endswith("\tPartitionCount: 2\tReplicationFactor: 1"
                         "\tConfigs: cleanup.policy=compact,retention.ms=123456")


def test_exclude_internal_leaves_out_internal_topics(broker: BrokerProcess) -> None:
    topic = name("visible")
    ok(topics(broker, "--create", "--topic", topic))
    # A group commit creates __consumer_offsets.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g")})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    assert "__consumer_offsets" in ok(topics(broker, "--list")).splitlines()
    listed = ok(topics(broker, "--list", "--exclude-internal")).splitlines()
    assert topic in listed and not [n for n in listed if n.startswith("__")]


@pytest.mark.parametrize(("args", "message"), [
    (["--alter", "--topic", "t", "--partitions", "3", "--config", "retention.ms=1"],
     ALTER_CONFIG_REFUSED),
    (["--alter", "--topic", "t", "--config", "retention.ms=1"], ALTER_CONFIG_REFUSED),
    (["--alter", "--topic", "t"], 'Missing required argument "[partitions]"'),
    (["--create", "--topic", "t", "--replica-assignment", "1", "--partitions", "1"],
     'Option "[replica-assignment]" can\'t be used with option "[partitions]"'),
    (["--create", "--topic", "t", "--replica-assignment", "1", "--replication-factor", "1"],
     'Option "[replica-assignment]" can\'t be used with option "[replication-factor]"'),
    (["--describe", "--replica-assignment", "1"],
     'Option "[replica-assignment]" can\'t be used with option "[describe]"'),
    (["--list", "--under-min-isr-partitions"],
     'Option "[under-min-isr-partitions]" can\'t be used with option "[list]"'),
    (["--delete", "--topic", "t", "--at-min-isr-partitions"],
     'Option "[at-min-isr-partitions]" can\'t be used with option "[delete]"'),
    (["--describe", "--at-min-isr-partitions", "--topics-with-overrides"],
     'Option "[at-min-isr-partitions]" can\'t be used with option "[topics-with-overrides]"'),
    (["--describe", "--unavailable-partitions", "--topics-with-overrides"],
     'Option "[unavailable-partitions]" can\'t be used with option "[topics-with-overrides]"'),
    (["--list", "--topics-with-overrides"],
     'Option "[topics-with-overrides]" can\'t be used with option "[list]"'),
])
def test_combinations_kafka_topics_refuses_are_usage_errors(broker: BrokerProcess,
                                                            args: list[str],
                                                            message: str) -> None:
    done = topics(broker, *args)
    assert done.returncode == 2
    assert done.stderr == f"kafka-ext topics: error: {message}\n"
