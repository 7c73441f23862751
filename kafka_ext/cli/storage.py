"""`kafka-ext storage`: kafka-storage.sh's `format`, `random-uuid` and `info` subcommands.

`format` reads server.properties the way `kafka-ext server` does (KAFKA_EXT_* and --override
included), so it formats exactly the dirs the node will use; the rules live in
storage/formatter.py. Failures print one line to stderr and exit 1, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import SCRAM_MECHANISMS, credential_from_spec, parse_scram_spec
from kafka_ext.server.config import BrokerConfig, ConfigError, load_config
from kafka_ext.server.kraft import storage_layout
from kafka_ext.storage.formatter import (
    LATEST_METADATA_VERSION,
    DynamicVoter,
    FormatError,
    FormatRequest,
    format_storage,
    new_directory_id,
    parse_cluster_id,
    parse_features,
    parse_initial_controllers,
    parse_release_version,
    random_uuid,
    storage_info,
)

EXIT_FAILURE = 1


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `storage` with kafka-storage.sh's subcommands and flags."""
    parser = subparsers.add_parser(
        "storage", help="format log dirs and inspect them (kafka-storage.sh)",
        description="The KRaft storage tool: format this node's log dirs with a cluster id "
                    "before its first start, print a new id, or show what the dirs hold.")
    commands = parser.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)

    fmt = commands.add_parser("format", help="format the log dirs of server.properties")
    fmt.add_argument("--config", "-c", required=True, metavar="FILE",
                     help="the node's server.properties")
    fmt.add_argument("--cluster-id", "-t", required=True, metavar="ID",
                     help="the cluster id (see `kafka-ext storage random-uuid`)")
    fmt.add_argument("--add-scram", "-S", action="append", default=[], metavar="SCRAM",
                     help="a SCRAM credential the cluster starts with, e.g. "
                          "'SCRAM-SHA-256=[name=alice,password=alice-secret]' (repeatable)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="format the unformatted dirs and leave formatted ones as they are")
    fmt.add_argument("--release-version", "-r", metavar="VERSION",
                     help="the metadata.version to start with, e.g. 3.9 or 4.0-IV3 "
                          "(default: the latest)")
    fmt.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL",
                     help="a feature level to start with (repeatable), e.g. kraft.version=1")
    voters = fmt.add_mutually_exclusive_group()
    voters.add_argument("--standalone", "-s", action="store_true",
                        help="this controller alone is the initial KIP-853 quorum")
    voters.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRID,...",
                        help="the initial KIP-853 quorum")
    voters.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="a controller that joins an existing KIP-853 quorum later")
    fmt.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="set one configuration key (repeatable), as `kafka-ext server` takes it")
    fmt.set_defaults(run=run_format)

    uuid_parser = commands.add_parser("random-uuid", help="print a new random cluster id")
    uuid_parser.set_defaults(run=run_random_uuid)

    info = commands.add_parser("info", help="show what the log dirs of server.properties hold")
    info.add_argument("--config", "-c", required=True, metavar="FILE",
                      help="the node's server.properties")
    info.set_defaults(run=run_info)


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return EXIT_FAILURE


def run_random_uuid(args: argparse.Namespace) -> int:
    print(random_uuid())
    return 0


def run_info(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, os.environ)
    except ConfigError as exc:
        return _fail(f"config error: {exc}")
    lines, problems = storage_info(storage_layout(config))
    print("\n".join(lines))
    return EXIT_FAILURE if problems else 0


def run_format(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, os.environ, args.override)
    except ConfigError as exc:
        return _fail(f"config error: {exc}")
    try:
        request = _format_request(args, config)
        lines = format_storage(storage_layout(config), request)
    except FormatError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot format: {exc}")
    print("\n".join(lines))
    return 0


def _format_request(args: argparse.Namespace, config: BrokerConfig) -> FormatRequest:
    """Kafka's StorageTool checks between the flags and the configuration."""
    cluster_id = parse_cluster_id(args.cluster_id)
    if not config.cluster_id_generated and config.cluster_id != cluster_id:
        raise FormatError(f"cluster.id in the configuration is {config.cluster_id}, which "
                          f"is not the --cluster-id {cluster_id}")
    scram_records = [_scram_record(spec) for spec in args.add_scram]
    release_version = (parse_release_version(args.release_version)[0]
                       if args.release_version else LATEST_METADATA_VERSION)
    features = parse_features(args.feature)
    dynamic = args.standalone or args.initial_controllers is not None or args.no_initial_controllers
    if dynamic and config.controller_quorum_voters:
        raise FormatError("--standalone, --initial-controllers and --no-initial-controllers "
                          "describe a dynamic (KIP-853) quorum, but controller.quorum.voters is "
                          "set: remove the flag, or replace controller.quorum.voters with "
                          "controller.quorum.bootstrap.servers")
    initial: list[DynamicVoter] | None = None
    if args.standalone:
        initial = [_standalone_voter(config)]
    elif args.initial_controllers is not None:
        initial = parse_initial_controllers(args.initial_controllers)
    elif (config.is_controller and not args.no_initial_controllers
          and not config.controller_quorum_voters and not config.is_self_quorum):
        raise FormatError("Because controller.quorum.voters is not set on this controller, you "
                          "must specify one of the following: --standalone, "
                          "--initial-controllers, or --no-initial-controllers.")
    names = config.controller_listener_names
    return FormatRequest(cluster_id, release_version, features, initial,
                         names[0] if names else None, args.ignore_formatted, scram_records)


def _scram_record(spec: str) -> Any:
    """--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]' as the
    UserScramCredentialRecord the cluster starts with."""
    try:
        mechanism, fields = parse_scram_spec(spec)
        name = fields.pop("name", "")
        if not name:
            raise ValueError("a SCRAM credential needs name=...")
        credential = credential_from_spec(mechanism, fields)
    except ValueError as exc:
        raise FormatError(f"--add-scram: {exc}") from None
    return registry()["UserScramCredentialRecord"].cls(
        name=name, mechanism=SCRAM_MECHANISMS[mechanism], salt=credential.salt,
        stored_key=credential.stored_key, server_key=credential.server_key,
        iterations=credential.iterations)


def _standalone_voter(config: BrokerConfig) -> DynamicVoter:
    """--standalone: this controller, on its first controller listener, a new directory id."""
    if not config.is_controller:
        raise FormatError("You can only use --standalone on a controller.")
    listeners = config.controller_listeners
    if not listeners:
        raise FormatError("--standalone needs controller.listener.names to name one of "
                          "listeners: that listener is the voter's endpoint")
    return DynamicVoter(config.node_id, listeners[0].host, listeners[0].port, new_directory_id())
