"""KIP-848 consumer groups with confluent-kafka `group.protocol=consumer` against the real broker.

Three members split a 6-partition topic (each partition owned by exactly one member); one
leaves, one is killed (SIGKILL) and the survivor takes over; every message is consumed exactly
once across the rebalances because each is committed before it is counted; committed offsets
survive a broker restart; ConsumerGroupDescribe (raw) shows members and assignments.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from typing import Any

import confluent_kafka
import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.integration.clients import create_topic, new_topic_name, wait_until
from tests.integration.kip848_member import consumer_config

PARTITIONS = 6
ALL = frozenset(range(PARTITIONS))
PER_PARTITION = 10
TIMEOUT_S = 30.0
OVERRIDES = {"group.consumer.session.timeout.ms": "3000",
             "group.consumer.heartbeat.interval.ms": "300"}


class Member:
    """`tests.integration.kip848_member` in a subprocess; follows its JSON reports."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.assignment: frozenset[int] = frozenset()
        self.consumed: list[tuple[int, int, str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.kip848_member", bootstrap, topic, group],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            report = json.loads(line)
            if "assignment" in report:
                self.assignment = frozenset(report["assignment"])
            else:
                self.consumed.append(tuple(report["consumed"]))  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the consumer: it leaves the group (member epoch -1)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=TIMEOUT_S)
        self._reader.join(timeout=TIMEOUT_S)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)
        self._reader.join(timeout=TIMEOUT_S)


def split_among(*assignments: frozenset[int]) -> bool:
    union: set[int] = set()
    for a in assignments:
        if not a or union & a:
            return False
        union |= a
    return union == ALL


def produce(bootstrap: str, topic: str, batch: str) -> set[str]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    values = set()
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{batch}-{p}-{i}"
            producer.produce(topic, value=value.encode(), partition=p)
            values.add(value)
    assert producer.flush(TIMEOUT_S) == 0
    return values


def describe(port: int, group: str) -> Any:
    """ConsumerGroupDescribe v0 over a raw socket."""
    request = registry()["ConsumerGroupDescribeRequest"].cls(
        group_ids=[group], include_authorized_operations=False)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        response = round_trip(sock, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, request)
    (described,) = response.groups
    return described


@pytest.fixture
def kip848_broker(broker_factory: Any) -> Any:
    return broker_factory(OVERRIDES)


def test_members_split_take_over_and_consume_each_message_once_across_a_restart(
        kip848_broker: Any) -> None:
    bootstrap, topic, group = kip848_broker.bootstrap, new_topic_name("kip848"), "kip848-group"
    create_topic(bootstrap, topic, PARTITIONS)
    members = [Member(bootstrap, topic, group) for _ in range(3)]
    stays, leaves, doomed = members
    try:
        # Revocations are incremental, so a disjoint cover such as 1+2+3 can be seen on the
        # way to the uniform assignor's target of 2 each.
        wait_until(lambda: split_among(*(m.assignment for m in members))
                   and sorted(len(m.assignment) for m in members) == [2, 2, 2], TIMEOUT_S,
                   "three members to split the partitions two each")

        # A member reports its assignment before its next heartbeat acknowledges it.
        described = wait_until(
            lambda: (d := describe(kip848_broker.port, group)).group_state == "Stable" and d,
            TIMEOUT_S, "the group to be Stable")
        assert (described.error_code, described.group_state, described.assignor_name) == (
            0, "Stable", "uniform")
        assert len(described.members) == 3
        for m in described.members:
            assert m.member_epoch == described.assignment_epoch
            assert [tp.topic_name for tp in m.assignment.topic_partitions] == [topic]
            assert m.assignment.topic_partitions[0].partitions == sorted(
                m.target_assignment.topic_partitions[0].partitions)
        owned = [p for m in described.members for p in m.assignment.topic_partitions[0].partitions]
        assert sorted(owned) == sorted(ALL)

        produced = produce(bootstrap, topic, "a")
        consumed = lambda: [c for m in members for c in m.consumed]  # noqa: E731
        wait_until(lambda: len(consumed()) >= len(produced), TIMEOUT_S, "batch a consumed")

        leaves.close()  # a rebalance with messages in flight
        produced |= produce(bootstrap, topic, "b")
        wait_until(lambda: split_among(stays.assignment, doomed.assignment), TIMEOUT_S,
                   "two members to share after one left")
        wait_until(lambda: len(consumed()) >= len(produced), TIMEOUT_S, "batch b consumed")

        doomed.kill()  # only the session timeout tells the coordinator
        wait_until(lambda: stays.assignment == ALL, TIMEOUT_S, "the survivor to own all")
        produced |= produce(bootstrap, topic, "c")
        wait_until(lambda: len(consumed()) >= len(produced), TIMEOUT_S, "batch c consumed")
        values = [v for _, _, v in consumed()]
        assert len(values) == len(set(values)) and set(values) == produced
        stays.close()
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.kill()

    kip848_broker.restart()
    consumer = confluent_kafka.Consumer(consumer_config(bootstrap, group))
    try:
        committed = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)],
            timeout=TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in committed} == {
            p: 3 * PER_PARTITION for p in range(PARTITIONS)}
        produced_after = produce(bootstrap, topic, "d")
        consumer.subscribe([topic])
        after: list[str] = []
        wait_until(lambda: _poll_into(consumer, after) >= len(produced_after), TIMEOUT_S,
                   "the restarted group to resume after its offsets")
        assert sorted(after) == sorted(produced_after)
    finally:
        consumer.close()


def _poll_into(consumer: confluent_kafka.Consumer, into: list[str]) -> int:
    msg = consumer.poll(0.2)
    if msg is not None and msg.error() is None:
        into.append(msg.value().decode())
    return len(into)
