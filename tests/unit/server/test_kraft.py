"""Start-up in KRaft mode (server/kraft.py) and what DescribeQuorum / metadata-quorum show."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kafka_ext.cli.metadata_quorum import format_replication, format_status
from kafka_ext.controller.quorum_status import QuorumStatus, ReplicaStatus, VoterEndpoint
from kafka_ext.server.config import BrokerConfig, ConfigError, build_config
from kafka_ext.server.kraft import DYNAMIC_QUORUM_REFUSAL, prepare_storage, storage_layout
from kafka_ext.server.quorum import describe_quorum_response
from kafka_ext.storage.checkpoints import MetaProperties
from kafka_ext.storage.formatter import (
    DynamicVoter,
    FormatRequest,
    LogDirIdentityError,
    format_storage,
    read_bootstrap_records,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def config(tmp_path: Path, **raw: str) -> BrokerConfig:
    return build_config({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
                         **{k.replace("_", "."): v for k, v in raw.items()}})


def broker_only(tmp_path: Path) -> BrokerConfig:
    return config(tmp_path, process_roles="broker", node_id="4",
                  listeners="PLAINTEXT://127.0.0.1:9092", controller_listener_names="CONTROLLER",
                  controller_quorum_voters="1@127.0.0.1:9093")


def dynamic_combined(tmp_path: Path) -> BrokerConfig:
    return config(tmp_path, node_id="1", controller_listener_names="CONTROLLER",
                  listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                  controller_quorum_bootstrap_servers="127.0.0.1:9093")


def test_embedded_default_formats_its_metadata_dir_on_first_start(tmp_path: Path) -> None:
    node = config(tmp_path)
    cluster_id, voters = prepare_storage(node)
    assert voters is None and cluster_id == node.cluster_id
    meta = MetaProperties.read(tmp_path / "a")
    assert meta is not None and meta.cluster_id == cluster_id
    assert read_bootstrap_records(tmp_path / "a") is not None
    assert MetaProperties.read(tmp_path / "b") is None  # the LogManager formats it as it loads
    again = config(tmp_path)  # a new generated id each load: the formatted one wins
    assert prepare_storage(again)[0] == cluster_id


def test_unformatted_node_that_is_not_its_own_quorum_is_refused_naming_the_dir(
        tmp_path: Path) -> None:
    with pytest.raises(LogDirIdentityError, match="storage format") as err:
        prepare_storage(broker_only(tmp_path))
    assert f"log dir {tmp_path / 'a'} is not formatted" in str(err.value)


def test_formatted_broker_of_a_static_quorum_is_served(tmp_path: Path) -> None:
    node = broker_only(tmp_path)
    format_storage(storage_layout(node), FormatRequest(CLUSTER))
    assert prepare_storage(node) == (CLUSTER, None)


def test_a_dynamic_quorum_of_several_controllers_is_refused(tmp_path: Path) -> None:
    node = config(tmp_path, process_roles="broker", node_id="4",
                  listeners="PLAINTEXT://127.0.0.1:9092", controller_listener_names="CONTROLLER",
                  controller_quorum_bootstrap_servers="127.0.0.1:9093,127.0.0.1:9094")
    format_storage(storage_layout(node), FormatRequest(CLUSTER))
    with pytest.raises(ConfigError, match="controller.quorum.voters") as err:
        prepare_storage(node)
    assert DYNAMIC_QUORUM_REFUSAL in str(err.value)


def test_configured_cluster_id_must_match_the_formatted_one(tmp_path: Path) -> None:
    node = broker_only(tmp_path)
    format_storage(storage_layout(node), FormatRequest(CLUSTER))
    other = config(tmp_path, process_roles="broker", node_id="4",
                   listeners="PLAINTEXT://127.0.0.1:9092", controller_listener_names="CONTROLLER",
                   controller_quorum_voters="1@127.0.0.1:9093", cluster_id="other")
    with pytest.raises(LogDirIdentityError, match="belongs to cluster"):
        prepare_storage(other)


def test_combined_node_formatted_standalone_is_a_quorum_of_itself(tmp_path: Path) -> None:
    node = dynamic_combined(tmp_path)
    voter = DynamicVoter(1, "127.0.0.1", 9093, uuid.uuid4())
    format_storage(storage_layout(node), FormatRequest(CLUSTER, initial_controllers=[voter],
                                                       controller_listener_name="CONTROLLER"))
    assert prepare_storage(node) == (CLUSTER, [voter])


def test_combined_node_formatted_with_other_voters_is_refused_as_multi_node(
        tmp_path: Path) -> None:
    node = dynamic_combined(tmp_path)
    voters = [DynamicVoter(1, "127.0.0.1", 9093, uuid.uuid4()),
              DynamicVoter(2, "127.0.0.2", 9093, uuid.uuid4())]
    format_storage(storage_layout(node), FormatRequest(CLUSTER, initial_controllers=voters,
                                                       controller_listener_name="CONTROLLER"))
    with pytest.raises(ConfigError, match="not served yet"):
        prepare_storage(node)


def test_metadata_log_dir_outside_log_dirs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be one of log.dirs") as err:
        prepare_storage(config(tmp_path, metadata_log_dir=str(tmp_path / "m")))
    assert err.value.key == "metadata.log.dir"


# -- DescribeQuorum and the tool's output -----------------------------------------------------

DIR_1 = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
STATUS = QuorumStatus(
    leader_id=1, leader_epoch=7, high_watermark=120,
    voters=(ReplicaStatus(1, DIR_1, 125, 1_700_000_000_500, 1_700_000_000_500),
            ReplicaStatus(2, uuid.UUID(int=0), 100, 1_700_000_000_400, 1_700_000_000_100),
            ReplicaStatus(3, uuid.UUID(int=0), 125, -1, -1)),
    observers=(ReplicaStatus(4, uuid.UUID(int=0), 90, 1_700_000_000_450, -1),),
    endpoints=(VoterEndpoint(1, "CONTROLLER", "c1", 9093), VoterEndpoint(2, "CONTROLLER", "c2", 9093)))


def test_status_prints_kafkas_lines() -> None:
    text = format_status("MkU3OEVBNTcwNTJENDM2Qk", describe_quorum_response(STATUS))
    assert text.splitlines() == [
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qk",
        "LeaderId:               1",
        "LeaderEpoch:            7",
        "HighWatermark:          120",
        "MaxFollowerLag:         25",
        "MaxFollowerLagTimeMs:   400",
        'CurrentVoters:          [{"id": 1, "directoryId": "ASNFZ4mrze8BI0VniavN7w", '
        '"endpoints": ["CONTROLLER://c1:9093"]}, {"id": 2, "endpoints": '
        '["CONTROLLER://c2:9093"]}, {"id": 3}]',
        'CurrentObservers:       [{"id": 4}]',
    ]


def test_replication_prints_kafkas_tab_separated_table() -> None:
    text = format_replication(describe_quorum_response(STATUS), False, 1_700_000_001_000)
    rows = [line.split("\t") for line in text.splitlines()]
    assert [cell.strip() for cell in rows[0]] == [
        "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
        "LastCaughtUpTimestamp", "Status", ""]
    assert [[cell.strip() for cell in row][:7] for row in rows[1:]] == [
        ["1", "ASNFZ4mrze8BI0VniavN7w", "125", "0", "1700000000500", "1700000000500", "Leader"],
        ["2", "AAAAAAAAAAAAAAAAAAAAAA", "100", "25", "1700000000400", "1700000000100", "Follower"],
        ["3", "AAAAAAAAAAAAAAAAAAAAAA", "125", "0", "-1", "-1", "Follower"],
        ["4", "AAAAAAAAAAAAAAAAAAAAAA", "90", "35", "1700000000450", "-1", "Observer"]]
    assert len({len(row[2]) for row in rows}) == 1  # every cell padded to its column
    human = format_replication(describe_quorum_response(STATUS), True, 1_700_000_001_000)
    assert "500 ms ago" in human.splitlines()[1] and "-1" in human.splitlines()[3]
