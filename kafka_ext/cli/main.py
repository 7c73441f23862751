"""`kafka-ext` console script: the broker (`server`) and admin tools with Kafka's flags.

Each tool lives in its own module (topics.py, console_producer.py, console_consumer.py) and
registers one argparse subcommand; the broker itself is imported only when `server` runs so
that the admin tools start fast and work without the server's dependencies.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kafka_ext.cli import (
    acls,
    broker_api_versions,
    chunks,
    cluster,
    configs,
    console_consumer,
    console_producer,
    consumer_groups,
    consumer_perf_test,
    delegation_tokens,
    delete_records,
    docker_entrypoint,
    dump_log,
    e2e_latency,
    features,
    get_offsets,
    groups,
    healthcheck,
    leader_election,
    log_dirs,
    metadata_quorum,
    producer_perf_test,
    reassign_partitions,
    server_stop,
    share_groups,
    storage,
    topics,
    transactions,
    verifiable_consumer,
    verifiable_producer,
)
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.server_arguments import add_config_arguments
from kafka_ext.server.config import (
    ConfigError,
    format_config_value,
    is_sensitive,
    load_config,
)
from kafka_ext.storage.formatter import LogDirIdentityError

EXIT_CONFIG_ERROR = 2
EXIT_STORAGE_ERROR = 1


def _add_server_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "server", help="run a broker (and controller) from server.properties",
        description="Start a broker. With no file, a single-node broker that is its own "
                    "controller listens on localhost:9092 and stores data under ./kafka-ext-data. "
                    "KAFKA_EXT_* environment variables override the file (KAFKA_EXT_LOG_DIRS -> "
                    "log.dirs), and --override wins over both.")
    add_config_arguments(parser)
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as key=value lines and exit")
    parser.set_defaults(run=_run_server)


def _run_server(args: argparse.Namespace) -> int:
    """Load and validate the configuration, then hand it to the broker; config errors exit 2."""
    try:
        config = load_config(args.config, os.environ, args.override)
    except ConfigError as exc:
        print(f"kafka-ext: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if args.print_config:
        for name in sorted(config.values):
            text = format_config_value(config.values[name])
            if text is not None and is_sensitive(name):
                text = "[hidden]"  # as Kafka prints password values
            print(f"{name}={'' if text is None else text}")
        for name, text in sorted(config.listener_configs.items()):
            print(f"{name}={'[hidden]' if is_sensitive(name) else text}")
        return 0
    from kafka_ext.server.broker import run  # lazy: admin tools must not pay for the broker

    try:
        run(config)
    except ConfigError as exc:  # the broker may reject settings it checks late (e.g. meta.properties)
        print(f"kafka-ext: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except LogDirIdentityError as exc:  # unformatted, or formatted for another cluster or node
        print(f"kafka-ext: storage error: {exc}", file=sys.stderr)
        return EXIT_STORAGE_ERROR
    except KeyboardInterrupt:
        return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full `kafka-ext` argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="kafka-ext", description="A Kafka-protocol broker and its command-line tools.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_server_parser(subparsers)
    server_stop.add_parser(subparsers)
    topics.add_parser(subparsers)
    broker_api_versions.add_parser(subparsers)
    console_producer.add_parser(subparsers)
    console_consumer.add_parser(subparsers)
    log_dirs.add_parser(subparsers)
    reassign_partitions.add_parser(subparsers)
    leader_election.add_parser(subparsers)
    features.add_parser(subparsers)
    cluster.add_parser(subparsers)
    groups.add_parser(subparsers)
    e2e_latency.add_parser(subparsers)
    verifiable_producer.add_parser(subparsers)
    verifiable_consumer.add_parser(subparsers)
    transactions.add_parser(subparsers)
    acls.add_parser(subparsers)
    delegation_tokens.add_parser(subparsers)
    chunks.add_parser(subparsers)
    storage.add_parser(subparsers)
    metadata_quorum.add_parser(subparsers)
    configs.add_parser(subparsers)
    consumer_groups.add_parser(subparsers)
    share_groups.add_parser(subparsers)
    docker_entrypoint.add_parser(subparsers)
    healthcheck.add_parser(subparsers)
    dump_log.add_parser(subparsers)
    get_offsets.add_parser(subparsers)
    delete_records.add_parser(subparsers)
    producer_perf_test.add_parser(subparsers)
    consumer_perf_test.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kafka-ext` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except UsageError as exc:
        parser.exit(2, f"kafka-ext {args.command}: error: {exc}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
