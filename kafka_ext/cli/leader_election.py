"""`kafka-ext leader-election`: kafka-leader-election.sh (ElectLeaders, KIP-460).

`--election-type PREFERRED` gives leadership back to each partition's first replica when it is
alive and in sync; `UNCLEAN` gives a partition without a leader any alive replica (writes it
missed are lost). The partitions are `--topic T --partition P`, `--path-to-json-file f.json`
({"partitions":[{"topic":..,"partition":..}]}) or `--all-topic-partitions`. Prints Kafka's
lines; exits 1 when an election failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.log_dirs import admin_client
from kafka_ext.controller.partition_change import PREFERRED, UNCLEAN
from kafka_ext.protocol.errors import ErrorCode

ELECTION_TYPES = {"PREFERRED": PREFERRED, "UNCLEAN": UNCLEAN}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "leader-election", help="elect preferred or unclean leaders (kafka-leader-election.sh)",
        description="Move partition leadership to preferred replicas, or give leaderless "
                    "partitions an out-of-sync leader.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--command-config", "--admin.config", dest="command_config",
                        metavar="FILE", help="client properties file")
    parser.add_argument("--election-type", required=True, type=str.upper,
                        choices=sorted(ELECTION_TYPES), help="PREFERRED or UNCLEAN")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic (with --partition)")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='{"partitions":[{"topic":..,"partition":..}]}')
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition that needs an election")
    parser.add_argument("--partition", type=int, help="with --topic")
    parser.set_defaults(run=run)


def wanted_partitions(args: argparse.Namespace) -> dict[str, list[int]] | None:
    """{topic: [partitions]} to elect, None for all; UsageError for a bad selection."""
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("--partition is required with --topic")
        return {args.topic: [args.partition]}
    try:
        with open(args.path_to_json_file, encoding="utf-8") as f:
            document = json.load(f)
        wanted: dict[str, list[int]] = {}
        for entry in document["partitions"]:
            wanted.setdefault(str(entry["topic"]), []).append(int(entry["partition"]))
    except OSError as exc:
        raise UsageError(f"cannot read {args.path_to_json_file}: {exc.strerror}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed partitions JSON: {exc}") from None
    return wanted


def run(args: argparse.Namespace) -> int:
    wanted = wanted_partitions(args)
    election = args.election_type
    admin = admin_client(args.bootstrap_server, args.command_config)
    try:
        response: Any = admin.elect_leaders(ELECTION_TYPES[election], wanted, raise_errors=False)
    finally:
        admin.close()
    if getattr(response, "error_code", 0):
        print(f"Error completing leader election ({election}): "
              f"{ErrorCode(response.error_code).name}", file=sys.stderr)
        return 1
    elected, not_needed, failed = [], [], []
    for topic in response.replica_election_results:
        for p in topic.partition_result:
            name = f"{topic.topic}-{p.partition_id}"
            if p.error_code == ErrorCode.NONE:
                elected.append(name)
            elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                not_needed.append(name)
            else:
                failed.append((name, ErrorCode(p.error_code).name, p.error_message))
    if elected:
        print(f"Successfully completed leader election ({election}) for partitions "
              + ", ".join(elected))
    if not_needed:
        print("Valid replica already elected for partitions " + ", ".join(not_needed))
    if not (elected or not_needed or failed):
        print(f"No partitions needed a leader election ({election}).")
    for name, error, message in failed:
        print(f"Error completing leader election ({election}) for partition: {name}: "
              f"{error}{': ' + message if message else ''}", file=sys.stderr)
    return 1 if failed else 0
