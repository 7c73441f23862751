"""`kafka-ext cluster`: kafka-cluster.sh, the cluster's id and the unregistration of brokers.

- `cluster-id --bootstrap-server B`: "Cluster ID: <id>" (DescribeCluster).
- `unregister --bootstrap-server B --id N`: UnregisterBroker, for a broker that is gone for
  good: it leaves every ISR and the cluster's registrations. "Broker N is no longer
  registered."; Kafka's exception line and exit 1 when refused (BROKER_ID_NOT_REGISTERED, ...).

`--config FILE` (or `--command-config`) takes the client properties of the other tools.
"""

from __future__ import annotations

import argparse
import sys

from kafka_ext.cli.broker_connection import open_connection
from kafka_ext.cli.java_errors import java_error
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 30.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster", help="the cluster id, and unregistering brokers (kafka-cluster.sh)",
        description="Get information about and perform administrative tasks on a cluster.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, what in (("cluster-id", "Get information about the ID of a cluster."),
                       ("unregister", "Unregister a broker.")):
        sub = actions.add_parser(name, help=what, description=what)
        sub.add_argument("--bootstrap-server", "-b", required=True, metavar="HOST:PORT")
        sub.add_argument("--config", "-c", "--command-config", dest="command_config",
                         metavar="FILE", help="client properties file")
        if name == "unregister":
            sub.add_argument("--id", "-i", type=int, required=True, metavar="ID",
                             help="the ID of the broker to unregister")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_connection(args.bootstrap_server, args.command_config, TIMEOUT_S) as sock:
        identify(sock, "apache-kafka-java")
        if args.action == "cluster-id":
            Request = registry().requests[ApiKey.DESCRIBE_CLUSTER].cls
            answer = round_trip(sock, ApiKey.DESCRIBE_CLUSTER, 0, Request(
                include_cluster_authorized_operations=False), 1)
            if answer.error_code:
                return _failed(answer.error_code, answer.error_message)
            print(f"Cluster ID: {answer.cluster_id}")
            return 0
        Request = registry().requests[ApiKey.UNREGISTER_BROKER].cls
        answer = round_trip(sock, ApiKey.UNREGISTER_BROKER, 0, Request(broker_id=args.id), 1)
    if answer.error_code:
        return _failed(answer.error_code, answer.error_message)
    print(f"Broker {args.id} is no longer registered.")
    return 0


def _failed(code: int, message: str | None) -> int:
    print(java_error(ErrorCode(code).name, message), file=sys.stderr)
    return 1
