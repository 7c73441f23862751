"""bin/kafka-broker-api-versions.sh (`kafka-ext broker-api-versions`) against a real broker:
Kafka's layout, the versions a stock client is offered with the Java client's names and usable
versions, and the broker's rack. Several brokers: test_topics_tool_cluster.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_ext.cli.broker_api_versions import format_api_versions
from tests.integration.conftest import BrokerProcess, run_cli, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-broker-api-versions.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("api-versions") / "data",
                                              {"broker.rack": "rack-a"}))


def test_report_has_kafkas_layout_names_and_usable_versions(broker: BrokerProcess) -> None:
    done = subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{broker.bootstrap} (id: 1 rack: rack-a) -> ("
    assert lines[-1] == ")"
    body = lines[1:-1]
    assert all(line.startswith("\t") for line in body)
    assert all(line.endswith(",") for line in body[:-1]) and not body[-1].endswith(",")
    entries = [line.strip("\t,") for line in body]
    assert entries[:4] == ["Produce(0): 0 to 11 [usable: 11]", "Fetch(1): 0 to 17 [usable: 17]",
                           "ListOffsets(2): 0 to 10 [usable: 10]",
                           "Metadata(3): 0 to 12 [usable: 12]"]
    assert "ApiVersions(18): 0 to 4 [usable: 4]" in entries
    assert "OffsetDelete(47): 0 [usable: 0]" in entries
    # A key the Java client knows and the broker does not serve; Kafka's share-group meaning
    # of key 76, as a stock client sees it; no extension key (DeletePartitions, 1000).
    assert "StreamsGroupHeartbeat(88): UNSUPPORTED" in entries
    assert "ShareGroupHeartbeat(76): 1 [usable: 1]" in entries
    assert not [e for e in entries if e.startswith(("UNKNOWN", "CreateChunks"))]
    keys = [int(e.split("(", 1)[1].split(")", 1)[0]) for e in entries]
    assert keys == sorted(keys)


def test_missing_bootstrap_server_is_a_usage_error_and_a_dead_one_fails() -> None:
    assert run_cli("broker-api-versions").returncode == 2
    done = run_cli("broker-api-versions", "--bootstrap-server", "127.0.0.1:1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("Request METADATA failed on brokers 127.0.0.1:1: ")


def test_keys_outside_the_java_clients_range_are_marked_unusable() -> None:
    text = format_api_versions({0: (14, 15), 1: (0, 3), 3: (0, 99), 500: (0, 2)})
    lines = text.splitlines()
    assert lines[0] == "(" and lines[-1] == ")"
    assert lines[1:4] == ["\tProduce(0): 14 to 15 [unusable: node too new],",
                          "\tFetch(1): 0 to 3 [unusable: node too old],",
                          "\tListOffsets(2): UNSUPPORTED,"]
    assert "\tMetadata(3): 0 to 99 [usable: 13]," in lines
    assert lines[-2] == "\tUNKNOWN(500): 0 to 2"
