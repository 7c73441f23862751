"""`kafka-ext verifiable-producer` (kafka-verifiable-producer.sh) against a real broker: its
JSON event lines, as Kafka's system tests parse them, checked against what a consumer reads;
stopped with SIGTERM, it flushes and reports."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import consume_confluent, create_topic, new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-verifiable-producer.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("vp") / "data"))


def events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_every_acknowledged_record_is_reported_where_it_landed(broker: BrokerProcess) -> None:
    topic = new_topic_name("vp")
    create_topic(broker.bootstrap, topic, partitions=2)
    done = subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, "--topic",
                           topic, "--max-messages", "200", "--value-prefix", "7",
                           "--repeating-keys", "5", "--acks", "-1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = events(done.stdout)
    assert [list(e)[:2] for e in lines] == [["timestamp", "name"]] * len(lines)
    assert lines[0]["name"] == "startup_complete"
    sends = [e for e in lines if e["name"] == "producer_send_success"]
    assert list(sends[0]) == ["timestamp", "name", "key", "value", "topic", "partition",
                              "offset"]
    assert sorted(int(str(e["value"]).split(".")[1]) for e in sends) == list(range(200))
    assert all(str(e["value"]).startswith("7.") for e in sends)
    assert {str(e["key"]) for e in sends} == {"0", "1", "2", "3", "4"}
    assert [e["name"] for e in lines[-2:]] == ["shutdown_complete", "tool_data"]
    summary = lines[-1]
    assert (summary["sent"], summary["acked"], summary["target_throughput"]) == (200, 200, -1)
    assert float(str(summary["avg_throughput"])) > 0
    # What the events say is what the log holds, partition and offset included.
    read = consume_confluent(broker.bootstrap, topic, {0: 0, 1: 0}, 200)
    assert sorted((m.partition, m.offset, (m.value or b"").decode()) for m in read) == sorted(
        (int(str(e["partition"])), int(str(e["offset"])), str(e["value"])) for e in sends)


def test_sigterm_stops_an_endless_run_with_its_summary(broker: BrokerProcess) -> None:
    topic = new_topic_name("vp-endless")
    create_topic(broker.bootstrap, topic)
    proc = subprocess.Popen([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, "--topic",
                             topic, "--throughput", "200"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["name"] == "startup_complete"
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = events(out)
    summary = lines[-1]
    assert summary["name"] == "tool_data" and summary["target_throughput"] == 200
    acked = sum(1 for e in lines if e["name"] == "producer_send_success")
    assert summary["acked"] == acked and 100 <= acked <= 600  # about 200 a second
