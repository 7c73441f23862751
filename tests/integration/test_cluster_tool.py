"""`kafka-ext cluster` (kafka-cluster.sh) against a real broker: the cluster id, and an
unregistration refused for a broker that is not registered. Unregistering a real broker of a
cluster is in tests/cluster/test_elr_cluster.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess, serve_for_module

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-cluster.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("cluster-tool") / "data"))


def cluster_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), *args], capture_output=True, text=True, timeout=60)


def test_cluster_id_is_the_one_the_storage_was_formatted_with(broker: BrokerProcess) -> None:
    done = cluster_tool("cluster-id", "--bootstrap-server", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    meta = (broker.data_dir / "meta.properties").read_text()
    cluster_id = next(line.split("=", 1)[1] for line in meta.splitlines()
                      if line.startswith("cluster.id="))
    assert done.stdout == f"Cluster ID: {cluster_id}\n"


def test_unregistering_an_unknown_broker_is_refused(broker: BrokerProcess) -> None:
    done = cluster_tool("unregister", "--bootstrap-server", broker.bootstrap, "--id", "7")
    assert done.returncode == 1
    assert done.stderr == ("org.apache.kafka.common.errors.BrokerIdNotRegisteredException: "
                           "Broker ID 7 is not currently registered\n")
    usage = cluster_tool("unregister", "--bootstrap-server", broker.bootstrap)
    assert usage.returncode == 2 and "--id" in usage.stderr
