"""`kafka-ext verifiable-consumer` (kafka-verifiable-consumer.sh) against a real broker, fed by
verifiable-producer: its JSON event lines, as Kafka's system tests parse them, for both group
protocols; what it reports consumed and committed is what the log and the group hold."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from tests.integration.clients import confluent_consumer, create_topic, new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module

BIN = Path(__file__).resolve().parents[2] / "bin"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("vc") / "data",
                                              {"offsets.topic.num.partitions": "1"}))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_reports_what_it_consumed_and_committed(broker: BrokerProcess,
                                                         protocol: str) -> None:
    topic, group = new_topic_name("vc"), new_topic_name("vc-group")
    create_topic(broker.bootstrap, topic, partitions=3)
    produced = subprocess.run([str(BIN / "kafka-verifiable-producer.sh"), "--bootstrap-server",
                               broker.bootstrap, "--topic", topic, "--max-messages", "300"],
                              capture_output=True, text=True, timeout=120)
    assert produced.returncode == 0, produced.stderr
    done = subprocess.run([str(BIN / "kafka-verifiable-consumer.sh"), "--bootstrap-server",
                           broker.bootstrap, "--topic", topic, "--group-id", group,
                           "--group-protocol", protocol, "--max-messages", "300", "--verbose"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    names = [e["name"] for e in lines]
    assert names[0] == "startup_complete" and names[-1] == "shutdown_complete"
    assigned = [e for e in lines if e["name"] == "partitions_assigned"]
    assert {(p["topic"], p["partition"]) for e in assigned for p in e["partitions"]} == {
        (topic, 0), (topic, 1), (topic, 2)}
    consumed = [e for e in lines if e["name"] == "records_consumed"]
    assert sum(e["count"] for e in consumed) == 300
    summary = consumed[0]["partitions"][0]
    assert list(summary) == ["topic", "partition", "count", "minOffset", "maxOffset"]
    records = [e for e in lines if e["name"] == "record_data"]
    assert list(records[0]) == ["timestamp", "name", "key", "value", "topic", "partition",
                                "offset"]
    assert sorted(int(e["value"]) for e in records) == list(range(300))
    commits = [e for e in lines if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)
    assert list(commits[0]) == ["timestamp", "name", "offsets", "success"]
    last = {(o["topic"], o["partition"]): o["offset"] for e in commits for o in e["offsets"]}
    # The group holds what it said it committed: past every record of each partition.
    ends = {p: max(e["offset"] for e in records if e["partition"] == p) + 1 for p in range(3)}
    assert last == {(topic, p): end for p, end in ends.items()}
    checker = confluent_consumer(broker.bootstrap, {"group.id": group})
    try:
        held = checker.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    finally:
        checker.close()
    assert {p.partition: p.offset for p in held} == ends
