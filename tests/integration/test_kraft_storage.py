"""KRaft node start-up on real processes: `storage format|info|random-uuid`, the formatted-storage
gate, nodes that refuse clearly, DescribeQuorum (55) and `metadata-quorum describe`."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafka.admin import KafkaAdminClient, NewTopic

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.storage.checkpoints import MetaProperties, kafka_uuid_to_str
from tests.integration.conftest import BrokerProcess, free_port

CLI_TIMEOUT_S = 60
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def kafka_ext(*args: str, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EXT_")}
    return subprocess.run([sys.executable, "-m", "kafka_ext", *args], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, cwd=cwd, env={**base, **(env or {})})


def properties(path: Path, settings: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
    return str(path)


def combined_self_voter(tmp_path: Path, port: int, controller_port: int) -> dict[str, str]:
    """A combined node whose controller.quorum.voters names only itself, on a CONTROLLER listener."""
    return {"node.id": "3", "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"3@127.0.0.1:{controller_port}",
            "log.dirs": f"{tmp_path / 'data'},{tmp_path / 'data2'}"}


def start(tmp_path: Path, settings: dict[str, str]) -> BrokerProcess:
    node = BrokerProcess(tmp_path / "data", settings)
    node.port = int(settings["listeners"].split(",")[0].rsplit(":", 1)[1])
    node.bootstrap = f"127.0.0.1:{node.port}"
    node.start()
    return node


def stop(node: BrokerProcess) -> None:
    assert node.stop() == 0, node.log()
    assert "Traceback" not in node.log(), node.log()


# -- storage random-uuid / format / info ------------------------------------------------------


def test_random_uuid_prints_a_22_character_base64_id() -> None:
    ids = {kafka_ext("storage", "random-uuid").stdout for _ in range(2)}
    assert len(ids) == 2
    for text in ids:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}\n", text)


def test_format_then_start_a_combined_node_voting_only_for_itself(tmp_path: Path) -> None:
    port, controller_port = free_port(), free_port()
    settings = combined_self_voter(tmp_path, port, controller_port)
    config = properties(tmp_path / "server.properties", settings)
    formatted = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config, "-r", "3.9")
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout.splitlines() == [
        f"Formatting metadata directory {tmp_path / 'data'} with metadata.version 3.9-IV0.",
        f"Formatting data directory {tmp_path / 'data2'} with metadata.version 3.9-IV0."]
    info = kafka_ext("storage", "info", "-c", config)
    assert info.returncode == 0, info.stdout
    assert f"cluster.id={CLUSTER}" in info.stdout and "node.id=3" in info.stdout

    node = start(tmp_path, settings)
    try:
        admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=30000)
        try:
            cluster = admin.describe_cluster()
            assert cluster["cluster_id"] == CLUSTER and cluster["controller_id"] == 3
            assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(3, port)]
            admin.create_topics([NewTopic("kraft-t", 2, 1)])
        finally:
            admin.close()
        status = kafka_ext("metadata-quorum", "--bootstrap-controller",
                           f"127.0.0.1:{controller_port}", "describe", "--status")
        assert status.returncode == 0, status.stderr
        lines = dict(line.split(":", 1) for line in status.stdout.splitlines())
        assert lines["ClusterId"].strip() == CLUSTER and lines["LeaderId"].strip() == "3"
        assert lines["CurrentVoters"].strip() == (
            f'[{{"id": 3, "endpoints": ["CONTROLLER://127.0.0.1:{controller_port}"]}}]')
    finally:
        stop(node)
    # The formatted metadata.version is what the controller committed first.
    assert b"metadata.version" in (tmp_path / "data" / "bootstrap.checkpoint").read_bytes()


def test_format_refuses_a_formatted_dir_unless_ignore_formatted(tmp_path: Path) -> None:
    settings = {"log.dirs": str(tmp_path / "a")}
    config = properties(tmp_path / "server.properties", settings)
    assert kafka_ext("storage", "format", "-t", CLUSTER, "-c", config).returncode == 0
    again = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config)
    assert again.returncode == 1
    assert f"Log directory {tmp_path / 'a'} is already formatted" in again.stderr
    ignored = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config, "-g",
                        "--override", f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'}")
    assert ignored.returncode == 0, ignored.stderr
    assert ignored.stdout.strip() == (
        f"Formatting data directory {tmp_path / 'b'} with metadata.version 4.0-IV3.")
    a, b = MetaProperties.read(tmp_path / "a"), MetaProperties.read(tmp_path / "b")
    assert a is not None and b is not None and a.cluster_id == b.cluster_id == CLUSTER


def test_format_refuses_bad_ids_flags_and_malformed_scram(tmp_path: Path) -> None:
    config = properties(tmp_path / "server.properties", {"log.dirs": str(tmp_path / "a")})
    bad_id = kafka_ext("storage", "format", "-t", "not-a-uuid", "-c", config)
    assert bad_id.returncode == 1 and "does not appear to be a valid UUID" in bad_id.stderr
    scram = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config,
                      "--add-scram", "SCRAM-SHA-256=[password=secret]")
    assert scram.returncode == 1 and "needs name=" in scram.stderr and "secret" not in scram.stderr
    iterations = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config, "--add-scram",
                           "SCRAM-SHA-512=[name=bob,password=secret,iterations=100]")
    assert iterations.returncode == 1 and "iterations must be between 4096" in iterations.stderr
    both = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config, "-s", "-N")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    assert not (tmp_path / "a").exists()


def test_controller_without_voters_must_choose_its_initial_quorum(tmp_path: Path) -> None:
    config = properties(tmp_path / "server.properties", {
        "node.id": "1", "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "log.dirs": str(tmp_path / "c")})
    refused = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config)
    assert refused.returncode == 1
    assert ("you must specify one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers") in refused.stderr


# -- start-up refusals ------------------------------------------------------------------------


def test_unformatted_node_refuses_to_start_naming_the_dir_and_the_fix(tmp_path: Path) -> None:
    config = properties(tmp_path / "server.properties", {
        "node.id": "4", "process.roles": "broker", "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.voters": "1@127.0.0.1:9093",
        "log.dirs": str(tmp_path / "b")})
    refused = kafka_ext("server", config)
    assert refused.returncode == 1, refused.stderr
    assert f"log dir {tmp_path / 'b'} is not formatted" in refused.stderr
    assert "kafka-ext storage format -t" in refused.stderr


def test_a_dynamic_quorum_of_several_controllers_says_it_is_not_served(tmp_path: Path) -> None:
    settings = {"node.id": "4", "process.roles": "broker",
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.bootstrap.servers": "127.0.0.1:9093,127.0.0.1:9094",
                "log.dirs": str(tmp_path / "broker")}
    config = properties(tmp_path / "broker.properties", settings)
    assert kafka_ext("storage", "format", "-t", CLUSTER, "-c", config).returncode == 0
    refused = kafka_ext("server", config)
    assert refused.returncode == 2, refused.stderr
    assert "dynamic quorum of several controllers" in refused.stderr
    assert "controller.quorum.voters" in refused.stderr


def test_dir_of_another_cluster_refuses_to_start(tmp_path: Path, broker_factory: Any) -> None:
    config = properties(tmp_path / "server.properties", {"log.dirs": str(tmp_path / "data")})
    assert kafka_ext("storage", "format", "-t", CLUSTER, "-c", config).returncode == 0
    refused = kafka_ext("server", config, "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                        "--override", "cluster.id=OkkLiO2dQ9-w28R9nTt1Xw")
    assert refused.returncode == 1
    assert (f"log dir {tmp_path / 'data'} belongs to cluster 'MkU3OEVBNTcwNTJENDM2Qk'"
            in refused.stderr)
    node = broker_factory()  # the formatted id is the one a plain start keeps
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=30000)
    try:
        assert admin.describe_cluster()["cluster_id"] == CLUSTER
    finally:
        admin.close()


# -- the embedded default -----------------------------------------------------------------------


def test_embedded_default_formats_itself_and_keeps_its_cluster_id(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EXT_")}
    env["KAFKA_EXT_LISTENERS"] = f"PLAINTEXT://127.0.0.1:{port}"  # 9092 may be taken here
    ids = []
    for _ in range(2):  # the second start keeps the id the first one formatted
        proc = subprocess.Popen([sys.executable, "-m", "kafka_ext", "server"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            ids.append(_wait_cluster_id(port, proc))
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
    meta = MetaProperties.read(tmp_path / "kafka-ext-data")
    assert meta is not None and meta.cluster_id == ids[0] == ids[1] and meta.node_id == 1
    assert (tmp_path / "kafka-ext-data" / "bootstrap.checkpoint").exists()
    info = kafka_ext("storage", "info", "-c",
                     properties(tmp_path / "p", {"log.dirs": str(tmp_path / "kafka-ext-data")}))
    assert f"cluster.id={ids[0]}" in info.stdout and info.returncode == 0


def _wait_cluster_id(port: int, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the embedded default exited"
        try:
            response = _send(port, ApiKey.DESCRIBE_CLUSTER, 0, "DescribeClusterRequest",
                             include_cluster_authorized_operations=False)
            return str(response.cluster_id)
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the embedded default did not answer")


# -- DescribeQuorum and metadata-quorum ----------------------------------------------------------


def _send(port: int, api_key: int, version: int, request_name: str, **fields: Any) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        return round_trip(sock, api_key, version, registry()[request_name].cls(**fields))


def _describe_quorum(port: int, version: int, topic: str = "__cluster_metadata",
                     partition: int = 0) -> Any:
    Request = registry()["DescribeQuorumRequest"].cls
    return _send(port, ApiKey.DESCRIBE_QUORUM, version, "DescribeQuorumRequest",
                 topics=[Request.TopicData(topic_name=topic, partitions=[
                     Request.TopicData.PartitionData(partition_index=partition)])])


def test_describe_quorum_every_version_reports_this_node_as_leader(broker: Any) -> None:
    for version in (0, 1, 2):
        response = _describe_quorum(broker.port, version)
        assert response.error_code == 0
        partition = response.topics[0].partitions[0]
        assert (partition.error_code, partition.leader_id) == (0, 1)
        assert [v.replica_id for v in partition.current_voters] == [1]
        assert partition.current_voters[0].log_end_offset == partition.high_watermark > 0
        assert partition.observers == []
        if version >= 2:
            assert [(n.node_id, [(lst.name, lst.port) for lst in n.listeners])
                    for n in response.nodes] == [(1, [("PLAINTEXT", broker.port)])]


def test_describe_quorum_of_another_partition_is_unknown_topic_or_partition(broker: Any) -> None:
    response = _describe_quorum(broker.port, 2, topic="orders", partition=3)
    assert response.error_code == 0
    partition = response.topics[0].partitions[0]
    assert (response.topics[0].topic_name, partition.partition_index) == ("orders", 3)
    assert partition.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_quorum_describe_against_a_running_node(broker: Any) -> None:
    before = _describe_quorum(broker.port, 2).topics[0].partitions[0].high_watermark
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("quorum-t", 3, 1)])
        cluster_id = admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()
    status = kafka_ext("metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe",
                       "--status")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
        "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    assert all(line[24:] and line[:24].endswith(" ") for line in lines)
    values = {line.split(":")[0]: line[24:] for line in lines}
    assert values["ClusterId"] == cluster_id and values["LeaderId"] == "1"
    assert int(values["HighWatermark"]) >= before + 4  # a TopicRecord and 3 PartitionRecords
    assert values["MaxFollowerLag"] == "0" and values["MaxFollowerLagTimeMs"] == "0"
    assert values["CurrentVoters"] == (
        f'[{{"id": 1, "endpoints": ["PLAINTEXT://127.0.0.1:{broker.port}"]}}]')
    assert values["CurrentObservers"] == "[]"

    replication = kafka_ext("metadata-quorum", "--bootstrap-server", broker.bootstrap,
                            "describe", "--replication")
    assert replication.returncode == 0, replication.stderr
    header, row = replication.stdout.splitlines()
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                              "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    cells = row.split()
    assert cells[0] == "1" and cells[1] == "AAAAAAAAAAAAAAAAAAAAAA"
    assert int(cells[2]) == int(values["HighWatermark"]) and cells[3] == "0"
    assert cells[6] == "Leader" and row.endswith("\t")

    both = kafka_ext("metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe",
                     "--status", "--replication")
    assert both.returncode == 2 and "Only one of --status or --replication" in both.stderr


def test_standalone_quorum_reports_its_directory_id(tmp_path: Path) -> None:
    port, controller_port = free_port(), free_port()
    settings = {"node.id": "2", "listeners": (f"PLAINTEXT://127.0.0.1:{port},"
                                              f"CONTROLLER://127.0.0.1:{controller_port}"),
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
                "log.dirs": str(tmp_path / "data")}
    config = properties(tmp_path / "server.properties", settings)
    formatted = kafka_ext("storage", "format", "-t", CLUSTER, "-c", config, "--standalone")
    assert formatted.returncode == 0, formatted.stderr
    assert "Formatting dynamic metadata voter directory" in formatted.stdout
    meta = MetaProperties.read(tmp_path / "data")
    assert meta is not None
    node = start(tmp_path, settings)
    try:
        status = kafka_ext("metadata-quorum", "--bootstrap-server", node.bootstrap, "describe",
                           "--status")
        assert status.returncode == 0, status.stderr
        assert (f'CurrentVoters:          [{{"id": 2, "directoryId": '
                f'"{kafka_uuid_to_str(meta.directory_id)}", "endpoints": '
                f'["CONTROLLER://127.0.0.1:{controller_port}"]}}]') in status.stdout
    finally:
        stop(node)
