"""`kafka-ext metadata-quorum`: kafka-metadata-quorum.sh's `describe --status|--replication`.

Sends DescribeCluster (for the cluster id, as Kafka's tool asks the admin client) and
DescribeQuorum (55) through our own codec, and prints what Kafka's MetadataQuorumCommand prints:
the aligned `Key:  value` lines of --status, the tab-separated table of --replication.
`--bootstrap-controller` asks DescribeCluster for controller endpoints (KIP-919).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from kafka_ext.cli.client_config import UsageError, read_properties_file
from kafka_ext.cli.tables import pretty_table
from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.server.config import parse_host_port
from kafka_ext.storage.checkpoints import kafka_uuid_to_str

METADATA_TOPIC = "__cluster_metadata"
CONNECT_TIMEOUT_S = 30.0
CONTROLLER_ENDPOINTS = 2  # DescribeCluster EndpointType (KIP-919)
_WANTED_VERSIONS = {ApiKey.DESCRIBE_QUORUM: 2, ApiKey.DESCRIBE_CLUSTER: 1}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `metadata-quorum` with kafka-metadata-quorum.sh's flags."""
    parser = subparsers.add_parser(
        "metadata-quorum", help="describe the KRaft metadata quorum (kafka-metadata-quorum.sh)",
        description="This tool describes kraft metadata quorum status.")
    connection = parser.add_mutually_exclusive_group(required=True)
    connection.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                            help="brokers to connect to")
    connection.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]",
                            help="controllers to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties (only security.protocol=PLAINTEXT is served)")
    commands = parser.add_subparsers(dest="quorum_command", metavar="COMMAND", required=True)
    describe = commands.add_parser("describe", help="describe the metadata quorum info")
    describe.add_argument("--status", action="store_true",
                          help="a short summary of the quorum status")
    describe.add_argument("--replication", action="store_true",
                          help="detailed information about the status of replication")
    describe.add_argument("--human-readable", action="store_true",
                          help="human-readable timestamps (with --replication)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.status and args.replication:
        raise UsageError("Only one of --status or --replication should be specified with "
                         "describe sub-command")
    if not args.status and not args.replication:
        raise UsageError("One of --status or --replication must be specified with describe "
                         "sub-command")
    if args.status and args.human_readable:
        raise UsageError("The option --human-readable is only supported along with "
                         "--replication")
    if args.command_config is not None:
        protocol = read_properties_file(args.command_config).get("security.protocol", "PLAINTEXT")
        if protocol.upper() != "PLAINTEXT":
            raise UsageError(f"security.protocol={protocol} is not supported yet; only PLAINTEXT")
    controller = args.bootstrap_controller is not None
    servers = args.bootstrap_controller if controller else args.bootstrap_server
    try:
        cluster_id, quorum = describe(servers, controller)
    except (OSError, QuorumError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if args.status:
        print(format_status(cluster_id, quorum))
    else:
        print(format_replication(quorum, args.human_readable, int(time.time() * 1000)), end="")
    return 0


class QuorumError(Exception):
    """The server answered with an error code."""


def describe(servers: str, controller: bool) -> tuple[str, Any]:
    """(cluster id, DescribeQuorumResponse) from the first of `servers` that answers."""
    reg = registry()
    last_error: OSError | None = None
    for entry in (s.strip() for s in servers.split(",") if s.strip()):
        try:
            host, port = parse_host_port(entry)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
                versions = _negotiate(sock)
                cluster = round_trip(
                    sock, ApiKey.DESCRIBE_CLUSTER, versions[ApiKey.DESCRIBE_CLUSTER],
                    reg["DescribeClusterRequest"].cls(
                        include_cluster_authorized_operations=False,
                        endpoint_type=CONTROLLER_ENDPOINTS if controller else 1),
                    correlation_id=2)
                _check(cluster.error_code, cluster.error_message)
                Request = reg["DescribeQuorumRequest"].cls
                quorum = round_trip(
                    sock, ApiKey.DESCRIBE_QUORUM, versions[ApiKey.DESCRIBE_QUORUM],
                    Request(topics=[Request.TopicData(
                        topic_name=METADATA_TOPIC,
                        partitions=[Request.TopicData.PartitionData(partition_index=0)])]),
                    correlation_id=3)
        except OSError as exc:
            last_error = exc
            continue
        _check(quorum.error_code, getattr(quorum, "error_message", None))
        partition = quorum.topics[0].partitions[0]
        _check(partition.error_code, getattr(partition, "error_message", None))
        return str(cluster.cluster_id), quorum
    raise last_error or OSError(f"no server in {servers!r}")


def _negotiate(sock: socket.socket) -> dict[int, int]:
    """The version of each request to send: the highest both sides speak."""
    reg = registry()
    answer = round_trip(sock, ApiKey.API_VERSIONS, 3, reg["ApiVersionsRequest"].cls(
        client_software_name="kafka-ext-metadata-quorum", client_software_version="0"))
    _check(answer.error_code, None)
    ranges = {k.api_key: k.max_version for k in answer.api_keys}
    versions: dict[int, int] = {}
    for key, ours in _WANTED_VERSIONS.items():
        if key not in ranges:
            raise QuorumError(f"the server does not serve {key.name}")
        versions[key] = min(ours, ranges[key])
    return versions


def _check(code: int, message: str | None) -> None:
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise QuorumError(name + (f": {message}" if message else ""))


def _partition(quorum: Any) -> Any:
    return quorum.topics[0].partitions[0]


def _endpoints(quorum: Any) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for node in getattr(quorum, "nodes", None) or ():
        out[node.node_id] = [f"{lst.name}://{_host(lst.host)}:{lst.port}" for lst in node.listeners]
    return out


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _replicas_text(replicas: Sequence[Any], endpoints: dict[int, list[str]]) -> str:
    """Kafka's `[{"id": 1, "directoryId": "...", "endpoints": ["NAME://host:port"]}]`; the
    directory id is left out when zero, the endpoints when unknown."""
    items = []
    for r in replicas:
        text = f'{{"id": {r.replica_id}'
        if r.replica_directory_id.int != 0:
            text += f', "directoryId": {json.dumps(kafka_uuid_to_str(r.replica_directory_id))}'
        if endpoints.get(r.replica_id):
            text += ', "endpoints": [' + ", ".join(
                json.dumps(e) for e in endpoints[r.replica_id]) + "]"
        items.append(text + "}")
    return "[" + ", ".join(items) + "]"


def format_status(cluster_id: str, quorum: Any) -> str:
    """--status: the lines of Kafka's handleDescribeStatus."""
    p = _partition(quorum)
    leader = next(v for v in p.current_voters if v.replica_id == p.leader_id)
    laggiest = min(p.current_voters, key=lambda v: v.log_end_offset)
    if laggiest is leader:
        lag_time_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and laggiest.last_caught_up_timestamp >= 0:
        lag_time_ms = leader.last_caught_up_timestamp - laggiest.last_caught_up_timestamp
    else:
        lag_time_ms = -1
    endpoints = _endpoints(quorum)
    rows = [("ClusterId", cluster_id), ("LeaderId", p.leader_id),
            ("LeaderEpoch", p.leader_epoch), ("HighWatermark", p.high_watermark),
            ("MaxFollowerLag", leader.log_end_offset - laggiest.log_end_offset),
            ("MaxFollowerLagTimeMs", lag_time_ms),
            ("CurrentVoters", _replicas_text(p.current_voters, endpoints)),
            ("CurrentObservers", _replicas_text(p.observers, endpoints))]
    return "\n".join(f"{name + ':':<24}{value}" for name, value in rows)


def format_replication(quorum: Any, human_readable: bool, now_ms: int) -> str:
    """--replication: Kafka's table (each cell padded to its column, then a tab)."""
    p = _partition(quorum)
    leader = next(v for v in p.current_voters if v.replica_id == p.leader_id)
    groups = [([leader], "Leader"),
              ([v for v in p.current_voters if v.replica_id != p.leader_id], "Follower"),
              (list(p.observers), "Observer")]

    def when(ts: int, what: str) -> str:
        if ts < 0:
            return "-1"
        if not human_readable:
            return str(ts)
        if not 0 < ts <= now_ms:
            raise QuorumError(f"Error while computing relative time, possible drift in system "
                              f"clock.\nCurrent timestamp is {now_ms}, {what} timestamp is {ts}")
        return f"{now_ms - ts} ms ago"

    rows: list[list[str]] = []
    for replicas, status in groups:
        for r in replicas:
            rows.append([str(r.replica_id), kafka_uuid_to_str(r.replica_directory_id),
                         str(r.log_end_offset), str(leader.log_end_offset - r.log_end_offset),
                         when(r.last_fetch_timestamp, "last fetch"),
                         when(r.last_caught_up_timestamp, "last caught up"), status])
    return pretty_table(["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                         "LastCaughtUpTimestamp", "Status"], rows)
