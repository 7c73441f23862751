"""The container's entrypoint and healthcheck (kafka_ext/cli/docker_entrypoint.py and
healthcheck.py) on their own: image defaults, first-start formatting, the listener asked.
tests/cluster/test_compose_topology.py runs both as processes with the compose environments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from kafka_ext.cli.docker_entrypoint import (
    SINGLE_NODE_DEFAULTS,
    EntrypointError,
    container_environment,
    prepare_storage,
    server_argv,
)
from kafka_ext.cli.healthcheck import Unhealthy, check_node, probe_listener
from kafka_ext.server.config import BrokerConfig, Listener, load_config
from kafka_ext.storage.checkpoints import MetaProperties
from tests.integration.conftest import free_port

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
OTHER_CLUSTER_ID = "Y2x1c3Rlci10ZXN0LWlkMA"


def cluster_node(data_dir: Path, roles: str = "broker,controller") -> BrokerConfig:
    """Node 1 of a three-voter static quorum, as the compose file configures it."""
    listeners = {"broker,controller": "INTERNAL://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
                 "controller": "CONTROLLER://0.0.0.0:9093",
                 "broker": "INTERNAL://0.0.0.0:9092"}[roles]
    env = {
        "KAFKA_EXT_NODE_ID": "1" if "controller" in roles else "4",
        "KAFKA_EXT_PROCESS_ROLES": roles,
        "KAFKA_EXT_LISTENERS": listeners,
        "KAFKA_EXT_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_EXT_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_EXT_CONTROLLER_QUORUM_VOTERS": "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093",
        "KAFKA_EXT_LOG_DIRS": str(data_dir),
    }
    if roles != "controller":
        env["KAFKA_EXT_ADVERTISED_LISTENERS"] = "INTERNAL://kafka-1:9092"
        env["KAFKA_EXT_INTER_BROKER_LISTENER_NAME"] = "INTERNAL"
    return load_config(None, env)


# -- image defaults -----------------------------------------------------------------------------


def test_unconfigured_container_gets_the_single_node_defaults() -> None:
    env = container_environment({"PATH": "/usr/bin", "CLUSTER_ID": CLUSTER_ID}, None)
    assert env == {"PATH": "/usr/bin", "CLUSTER_ID": CLUSTER_ID, **SINGLE_NODE_DEFAULTS}
    config = load_config(None, env)
    assert config.is_self_quorum
    assert [(lst.host, lst.port) for lst in config.advertised_listeners] == [("localhost", 9092)]


@pytest.mark.parametrize(("env", "config_path"), [
    ({"KAFKA_EXT_NODE_ID": "2"}, None),
    ({}, "/etc/kafka-ext/server.properties"),
])
def test_any_configuration_turns_the_defaults_off(env: dict[str, str],
                                                  config_path: str | None) -> None:
    assert container_environment(env, config_path) == env


def test_entrypoint_passes_its_arguments_to_the_server() -> None:
    args = argparse.Namespace(config="/etc/kafka-ext/server.properties",
                              override=["num.partitions=3"], print_config=True)
    assert server_argv(args) == [sys.executable, "-m", "kafka_ext", "server",
                                 "/etc/kafka-ext/server.properties", "--override",
                                 "num.partitions=3", "--print-config"]


# -- first start ------------------------------------------------------------------------------


def test_first_start_formats_from_cluster_id(tmp_path: Path) -> None:
    config = cluster_node(tmp_path / "data")
    lines = prepare_storage(config, CLUSTER_ID)
    assert lines == [f"Formatting metadata directory {tmp_path / 'data'} with metadata.version "
                     "4.0-IV3."]
    meta = MetaProperties.read(tmp_path / "data")
    assert meta is not None and (meta.node_id, meta.cluster_id) == (1, CLUSTER_ID)


def test_restart_leaves_formatted_storage_alone(tmp_path: Path) -> None:
    config = cluster_node(tmp_path / "data")
    prepare_storage(config, CLUSTER_ID)
    before = (tmp_path / "data" / "meta.properties").read_text()
    assert prepare_storage(config, CLUSTER_ID) == [
        f"{tmp_path / 'data'} is formatted for cluster {CLUSTER_ID}; not formatting"]
    assert prepare_storage(config, None)[0].endswith("not formatting")  # the id is on disk
    assert (tmp_path / "data" / "meta.properties").read_text() == before


def test_volume_of_another_cluster_is_refused(tmp_path: Path) -> None:
    config = cluster_node(tmp_path / "data")
    prepare_storage(config, OTHER_CLUSTER_ID)
    with pytest.raises(EntrypointError, match=f"set CLUSTER_ID={OTHER_CLUSTER_ID}"):
        prepare_storage(config, CLUSTER_ID)


def test_missing_cluster_id_names_the_variable_and_the_tool(tmp_path: Path) -> None:
    config = cluster_node(tmp_path / "data")
    with pytest.raises(EntrypointError, match="CLUSTER_ID is not set.*random-uuid"):
        prepare_storage(config, "  ")
    assert not (tmp_path / "data").exists()


def test_malformed_cluster_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EntrypointError, match="CLUSTER_ID: Cluster ID string not-an-id"):
        prepare_storage(cluster_node(tmp_path / "data"), "not-an-id")


def test_single_node_formats_itself_without_cluster_id(tmp_path: Path) -> None:
    config = load_config(None, {"KAFKA_EXT_LOG_DIRS": str(tmp_path / "data")})
    assert prepare_storage(config, None) == [
        "a single node that is its own quorum formats itself at start"]
    assert MetaProperties.read(tmp_path / "data") is None


def test_controller_only_node_is_formatted_as_a_voter(tmp_path: Path) -> None:
    prepare_storage(cluster_node(tmp_path / "data", "controller"), CLUSTER_ID)
    meta = MetaProperties.read(tmp_path / "data")
    assert meta is not None and meta.cluster_id == CLUSTER_ID


# -- healthcheck ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("roles", "expected"), [
    ("broker,controller", Listener("INTERNAL", "127.0.0.1", 9092)),
    ("broker", Listener("INTERNAL", "127.0.0.1", 9092)),
    ("controller", Listener("CONTROLLER", "127.0.0.1", 9093)),
])
def test_healthcheck_asks_a_listener_of_the_node_s_role(tmp_path: Path, roles: str,
                                                         expected: Listener) -> None:
    assert probe_listener(cluster_node(tmp_path, roles)) == expected


def test_healthcheck_of_a_node_that_does_not_answer_is_unhealthy(tmp_path: Path) -> None:
    port = free_port()
    config = load_config(None, {"KAFKA_EXT_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
                                "KAFKA_EXT_LOG_DIRS": str(tmp_path)})
    with pytest.raises(Unhealthy, match=f"no answer on the PLAINTEXT listener 127.0.0.1:{port}"):
        check_node(config, timeout_s=1)
