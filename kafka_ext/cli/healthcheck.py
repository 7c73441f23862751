"""`kafka-ext healthcheck`: the container's HEALTHCHECK, which asks the node, not the port.

It reads the node's configuration as `kafka-ext server` does (KAFKA_EXT_* variables, an
optional server.properties and --override) and asks the node on one of its own listeners:

- a broker (combined or not): ApiVersions, then Metadata, which must list this node among the
  live brokers (a broker opens its client listeners once unfenced, and is listed while it is);
- a controller-only node: ApiVersions, then DescribeQuorum on its controller listener, which
  must name a leader and this node as a voter.

Prints one line and exits 0 when healthy, 1 when not (Docker's HEALTHCHECK convention).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from kafka_ext.cli.docker_entrypoint import container_environment
from kafka_ext.cli.server_arguments import add_config_arguments
from kafka_ext.client.probe import PROBE_VERSION, api_versions_request, round_trip
from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.config import BrokerConfig, ConfigError, Listener, load_config

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
TIMEOUT_S = 5.0
METADATA_VERSION = 12
DESCRIBE_QUORUM_VERSION = 1
CLIENT_ID = "kafka-ext-healthcheck"
# A listener bound to every interface is asked on loopback, from inside the container.
_LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


class Unhealthy(Exception):
    """The node did not answer as a healthy node does; the message says what it answered."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `healthcheck` with `kafka-ext server`'s configuration arguments."""
    parser = subparsers.add_parser(
        "healthcheck", help="ask this node whether it serves (the container's HEALTHCHECK)",
        description="Read the node's configuration as `kafka-ext server` does and ask the node "
                    "itself: a broker must list itself in Metadata, a controller-only node must "
                    "see a quorum leader. Exits 0 when healthy, 1 when not.")
    add_config_arguments(parser)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to wait for each answer (default {TIMEOUT_S:g})")
    parser.set_defaults(run=run)


def probe_listener(config: BrokerConfig) -> Listener:
    """The listener to ask: a broker's first client listener, else the first controller one."""
    controllers = set(config.controller_listener_names)
    wanted = [lst for lst in config.listeners if (lst.name in controllers) != config.is_broker]
    if not wanted:
        raise Unhealthy("no listener to ask: listeners has none for this node's roles")
    listener = wanted[0]
    return listener._replace(host=_LOOPBACK.get(listener.host, listener.host))


def check_node(config: BrokerConfig, timeout_s: float = TIMEOUT_S) -> str:
    """Ask the node; what it answered when healthy, else Unhealthy saying why."""
    listener = probe_listener(config)
    where = f"{listener.name} listener {listener.host}:{listener.port}"
    try:
        with socket.create_connection((listener.host, listener.port), timeout=timeout_s) as sock:
            versions = round_trip(sock, ApiKey.API_VERSIONS, PROBE_VERSION,
                                  api_versions_request(), client_id=CLIENT_ID)
            if versions.error_code != 0:
                raise Unhealthy(f"ApiVersions on the {where} answered "
                                f"{_error_name(versions.error_code)}")
            ask = ask_broker if config.is_broker else ask_controller
            return ask(sock, config.node_id, where)
    except (OSError, KafkaError, DecodeError) as exc:
        raise Unhealthy(f"no answer on the {where}: {exc}") from exc


def ask_broker(sock: socket.socket, node_id: int, where: str) -> str:
    """Metadata must list `node_id` among the live brokers; what it said, else Unhealthy."""
    request = registry()["MetadataRequest"].cls(
        topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    answer = round_trip(sock, ApiKey.METADATA, METADATA_VERSION, request, 2, CLIENT_ID)
    live = sorted(b.node_id for b in answer.brokers)
    if node_id not in live:
        raise Unhealthy(f"Metadata on the {where} lists live brokers {live}, not node {node_id}")
    return f"node {node_id} is a live broker ({len(live)} live: {live}) on the {where}"


def ask_controller(sock: socket.socket, node_id: int, where: str) -> str:
    """DescribeQuorum must name a leader and `node_id` as a voter; what it said, else
    Unhealthy."""
    cls = registry()["DescribeQuorumRequest"].cls
    request = cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC,
                                        partitions=[cls.PartitionData(partition_index=0)])])
    answer = round_trip(sock, ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, request, 2,
                        CLIENT_ID)
    if answer.error_code != 0 or not answer.topics:
        raise Unhealthy(f"DescribeQuorum on the {where} answered "
                        f"{_error_name(answer.error_code)}")
    partition: Any = answer.topics[0].partitions[0]
    if partition.error_code != 0:
        raise Unhealthy(f"DescribeQuorum on the {where} answered "
                        f"{_error_name(partition.error_code)}")
    voters = sorted(v.replica_id for v in partition.current_voters)
    if partition.leader_id < 0:
        raise Unhealthy(f"the quorum has no leader (voters {voters}) on the {where}")
    if node_id not in voters:
        raise Unhealthy(f"node {node_id} is not one of the quorum's voters {voters}")
    return (f"controller {node_id} sees leader {partition.leader_id} in epoch "
            f"{partition.leader_epoch} on the {where}")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def run(args: argparse.Namespace) -> int:
    """Print `healthy: ...` and exit 0, or `unhealthy: ...` and exit 1."""
    try:
        env = container_environment(os.environ, args.config)  # as the entrypoint started it
        config = load_config(args.config, env, args.override)
        print(f"healthy: {check_node(config, args.timeout)}")
    except (ConfigError, Unhealthy) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return EXIT_UNHEALTHY
    return EXIT_HEALTHY
