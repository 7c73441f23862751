"""`kafka-ext groups` (kafka-groups.sh, KIP-1043) against a real broker holding a group of each
kind a stock client makes: classic (kafka-python), consumer (confluent-kafka with the KIP-848
protocol), share (confluent-kafka's ShareConsumer) and a simple group that only committed
offsets; Kafka's columns and filters."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import kafka
import pytest
from confluent_kafka import Consumer, ShareConsumer, TopicPartition

from tests.integration.clients import create_topic, new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-groups.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("groups") / "data", {
        "offsets.topic.num.partitions": "1", "group.share.heartbeat.interval.ms": "500"}))


def groups_tool(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def made(broker: BrokerProcess) -> dict[str, str]:
    """One group of each kind: name -> kind."""
    topic = new_topic_name("groups-tool")
    create_topic(broker.bootstrap, topic)
    names = {kind: new_topic_name(f"g-{kind}") for kind in ("classic", "consumer", "share",
                                                             "simple")}
    classic = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                  group_id=names["classic"])
    classic.poll(timeout_ms=3000)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": names["consumer"],
                         "group.protocol": "consumer"})
    consumer.subscribe([topic])
    share = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": names["share"]})
    share.subscribe([topic])
    simple = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": names["simple"]})
    simple.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        share.poll(0.2)
        if all(n in groups_tool(broker, "--list").stdout for n in names.values()):
            break
    yield {name: kind for kind, name in names.items()}
    for client in (consumer, share, simple):
        client.close()
    classic.close()


def rows(done: subprocess.CompletedProcess[str], names: dict[str, str]) -> dict[str, list[str]]:
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:]
            if line.split()[0] in names}


def test_list_shows_every_type_in_kafkas_columns(broker: BrokerProcess,
                                                 made: dict[str, str]) -> None:
    done = groups_tool(broker, "--list")
    header, *lines = done.stdout.splitlines()
    width = max(20, *(len(n) for n in made))
    assert header == f"{'GROUP':<{width}} {'TYPE':<{width}} {'PROTOCOL':<{width}}"
    assert all(line.endswith(" ") for line in lines)  # each entry is followed by a space
    by_kind = {kind: rows(done, made)[name] for name, kind in made.items()}
    assert by_kind == {"classic": ["Classic", "consumer"], "consumer": ["Consumer", "consumer"],
                       "share": ["Share", "share"], "simple": ["Classic"]}


def test_filters_pick_the_kinds_kafka_picks(broker: BrokerProcess, made: dict[str, str]) -> None:
    kinds = {name: kind for name, kind in made.items()}

    def listed(*flags: str) -> set[str]:
        return {kinds[n] for n in rows(groups_tool(broker, "--list", *flags), made)}

    assert listed("--consumer") == {"classic", "consumer", "simple"}
    assert listed("--share") == {"share"}
    assert listed("--streams") == set()
    assert listed("--group-type", "classic") == {"classic", "simple"}
    assert listed("--group-type", "Consumer") == {"consumer"}
    assert listed("--group-type", "classic", "--protocol", "consumer") == {"classic"}
    assert listed("--protocol", "share") == {"share"}
    bad = groups_tool(broker, "--list", "--share", "--consumer")
    assert bad.returncode == 2
    assert 'Option "[consumer]" can\'t be used with option "[share]"' in bad.stderr
    assert "--group-type must be a valid group type." in groups_tool(
        broker, "--list", "--group-type", "queue").stderr
    assert "exactly one action: --list" in groups_tool(broker).stderr
