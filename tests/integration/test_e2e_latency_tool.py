"""`kafka-ext e2e-latency` (kafka-e2e-latency.sh) against a real broker: Kafka's arguments,
progress and summary lines; the topic is created when missing; refusals as Kafka's."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-e2e-latency.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("e2e") / "data"))


def e2e(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), *args], capture_output=True, text=True, timeout=120)


def test_latency_of_1200_records_with_kafkas_lines(broker: BrokerProcess) -> None:
    topic = new_topic_name("e2e")
    done = e2e(broker.bootstrap, topic, "1200", "all", "100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (f'Topic "{topic}" does not exist. Will create topic with 1 '
                        "partition(s) and replication factor = 1")
    assert [line.split("\t")[0] for line in lines[1:3]] == ["0", "1000"]
    assert all(float(line.split("\t")[1]) > 0 for line in lines[1:3])
    assert re.fullmatch(r"Avg latency: \d+\.\d{4} ms", lines[3]), lines[3]
    found = re.fullmatch(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)", lines[4])
    assert found is not None, lines[4]
    p50, p99, p999 = map(int, found.groups())
    assert p50 <= p99 <= p999
    # Again on the topic now there: no creation line, acks=1.
    again = e2e(broker.bootstrap, topic, "3", "1", "10")
    assert again.returncode == 0 and again.stdout.startswith("0\t"), again.stderr


def test_kafkas_refusals(broker: BrokerProcess) -> None:
    usage = e2e(broker.bootstrap, "t")
    assert usage.returncode == 1 and usage.stderr.startswith("USAGE: java ")
    acks = e2e(broker.bootstrap, "t", "1", "0", "10")
    assert (acks.returncode, acks.stderr) == (
        1, "Latency testing requires synchronous acknowledgement. Please use 1 or all\n")
