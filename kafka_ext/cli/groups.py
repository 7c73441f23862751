"""`kafka-ext groups`: kafka-groups.sh (KIP-1043), the groups of every type.

`--list` lists every group of the cluster (ListGroups v5 at every broker, as Kafka's admin
client lists them) in Kafka's three columns GROUP, TYPE and PROTOCOL, each as wide as the
longest entry (at least 20). Filters, one kind at a time: `--group-type classic|consumer|share|
streams` (with `--protocol` too), `--protocol P`, `--consumer` (consumer groups of every kind:
type Consumer, or a Classic group whose protocol is "consumer" or empty), `--share`,
`--streams`.
"""

from __future__ import annotations

import argparse

from kafka_ext.cli.broker_connection import open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.consumer_groups import conflict
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 30.0
LIST_GROUPS_VERSION = 5  # with each group's type
MIN_COLUMN = 20
GROUP_TYPES = {"classic": "Classic", "consumer": "Consumer", "share": "Share",
               "streams": "Streams"}


class CommandFailed(Exception):
    pass


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "groups", help="list groups of every type (kafka-groups.sh)",
        description="This tool helps to list groups of all types.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--command-config", metavar="FILE", help="client properties file")
    parser.add_argument("--list", action="store_true", help="List the groups.")
    parser.add_argument("--group-type", metavar="TYPE",
                        help="Filter the groups based on group type. Valid types are: "
                             "'classic', 'consumer', 'share' and 'streams'.")
    parser.add_argument("--protocol", metavar="PROTOCOL",
                        help="Filter the groups based on protocol type.")
    parser.add_argument("--consumer", action="store_true",
                        help="Filter the groups to show all kinds of consumer groups, "
                             "including classic and simple consumer groups.")
    parser.add_argument("--share", action="store_true", help="Filter the groups to show "
                                                             "share groups.")
    parser.add_argument("--streams", action="store_true", help="Filter the groups to show "
                                                               "streams groups.")
    parser.set_defaults(run=run)


def check_args(args: argparse.Namespace) -> None:
    if not args.list:
        raise UsageError("Command must include exactly one action: --list.")
    if args.group_type is not None and args.group_type.lower() not in GROUP_TYPES:
        raise UsageError("--group-type must be a valid group type.")
    given = {"consumer": args.consumer, "group-type": args.group_type is not None,
             "protocol": args.protocol is not None, "share": args.share,
             "streams": args.streams}
    for alone in ("consumer", "share", "streams"):
        if given[alone]:
            for other, used in given.items():
                if used and other != alone:
                    raise conflict(alone, other)


def list_groups(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(group id, type, protocol) of every group of the cluster, one answer per broker."""
    Metadata = registry().requests[ApiKey.METADATA].cls
    ListGroups = registry().requests[ApiKey.LIST_GROUPS].cls
    with open_connection(args.bootstrap_server, args.command_config, TIMEOUT_S) as sock:
        identify(sock, "apache-kafka-java")
        brokers = round_trip(sock, ApiKey.METADATA, 12, Metadata(
            topics=[], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).brokers
    groups: dict[str, tuple[str, str, str]] = {}
    for broker in brokers:
        with open_connection(f"{broker.host}:{broker.port}", args.command_config,
                             TIMEOUT_S) as sock:
            identify(sock, "apache-kafka-java")
            answer = round_trip(sock, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                ListGroups(states_filter=[], types_filter=[]))
        if answer.error_code:
            raise CommandFailed(f"Error while executing groups command : "
                                f"{ErrorCode(answer.error_code).name}")
        for group in answer.groups:
            kind = GROUP_TYPES.get((group.group_type or "").lower(), "")
            groups[group.group_id] = (group.group_id, kind, group.protocol_type or "")
    return [groups[g] for g in sorted(groups)]


def shown(group: tuple[str, str, str], args: argparse.Namespace) -> bool:
    """Kafka's combined filter."""
    _, kind, protocol = group
    if args.group_type is not None:
        return (kind == GROUP_TYPES[args.group_type.lower()]
                and (args.protocol is None or protocol == args.protocol))
    if args.protocol is not None:
        return protocol == args.protocol
    if args.consumer:
        return protocol in ("consumer", "") or kind == "Consumer"
    if args.share:
        return kind == "Share"
    if args.streams:
        return kind == "Streams"
    return True


def format_groups(groups: list[tuple[str, str, str]]) -> str:
    """Kafka's layout: every column as wide as the widest entry (at least 20); each row's
    entries are followed by a space."""
    width = max([MIN_COLUMN, *(len(item) for group in groups for item in group)])
    lines = [" ".join(f"{h:<{width}}" for h in ("GROUP", "TYPE", "PROTOCOL"))]
    lines += ["".join(f"{item:<{width}} " for item in group) for group in groups]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    check_args(args)
    try:
        groups = [g for g in list_groups(args) if shown(g, args)]
    except CommandFailed as exc:
        print(exc)
        return 1
    print(format_groups(groups), end="")
    return 0


