"""`kafka-ext features`: kafka-features.sh (KIP-584), over ApiVersions and UpdateFeatures.

- `describe`: every feature the broker supports, its range and finalized level, and the epoch
  of the finalized features, one line each as Kafka prints them (metadata.version by release).
- `upgrade` / `downgrade` (`--unsafe` for a lossy one) / `disable` (level 0): `--metadata
  RELEASE` and `--feature NAME=LEVEL` (repeatable; `upgrade` also `--release-version
  RELEASE`), `--dry-run` to have the controller validate only. One line per feature; exit 1,
  after "N out of M operation(s) failed.", when the controller refused.
- `version-mapping [--release-version RELEASE]`: the feature levels a release stands for.

`--command-config` takes the client properties of the other tools (TLS, SASL).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafka_ext.cli.broker_connection import open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.controller.features import (
    SAFE_DOWNGRADE,
    SUPPORTED_FEATURES,
    UNSAFE_DOWNGRADE,
    UPGRADE,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.storage.formatter import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    METADATA_VERSIONS,
    FormatError,
    parse_release_version,
)

TIMEOUT_S = 30.0
UPDATE_FEATURES_VERSION = 1
# The levels in force, whatever the release, of the features `storage format` finalizes only
# when asked (--feature): the consumer group protocol and share groups are served unless a
# level of 0 turns them off; the others are off.
RELEASE_DEFAULTS = {"group.version": 1, "share.version": 1}
_RELEASE_OF_LEVEL = {level: name for name, level in METADATA_VERSIONS.items()}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "features", help="describe and change finalized feature levels (kafka-features.sh)",
        description="Describe the cluster's features, and upgrade, downgrade or disable them.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT")
    parser.add_argument("--command-config", metavar="FILE", help="client properties file")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("describe", help="describe the features")
    for action, what in (("upgrade", "upgrade"), ("downgrade", "downgrade")):
        sub = actions.add_parser(action, help=f"{what} one or more features")
        sub.add_argument("--metadata", metavar="RELEASE",
                         help=f"the metadata.version to {what} to (e.g. 3.9-IV0)")
        sub.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                         dest="features", help=f"a feature to {what}; repeatable")
        if action == "upgrade":
            sub.add_argument("--release-version", metavar="RELEASE",
                             help="every feature to its level in this release")
        else:
            sub.add_argument("--unsafe", action="store_true",
                             help="allow a downgrade that may lose metadata")
        sub.add_argument("--dry-run", action="store_true", help="validate only")
    disable = actions.add_parser("disable", help="disable one or more features")
    disable.add_argument("--feature", action="append", default=[], metavar="NAME",
                         dest="features", required=True, help="a feature to disable")
    disable.add_argument("--unsafe", action="store_true",
                         help="allow a downgrade that may lose metadata")
    disable.add_argument("--dry-run", action="store_true", help="validate only")
    mapping = actions.add_parser("version-mapping",
                                 help="the feature levels of a release")
    mapping.add_argument("--release-version", metavar="RELEASE",
                         help=f"default: {LATEST_METADATA_VERSION}")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "version-mapping":
        return version_mapping(args.release_version or LATEST_METADATA_VERSION)
    if not args.bootstrap_server:
        raise UsageError("--bootstrap-server is required")
    if args.action == "describe":
        return describe(args)
    return update(args, planned_updates(args))


def metadata_level(release: str) -> int:
    """A metadata.version level from a release name ("3.9-IV0", or "3.9" for its last)."""
    try:
        return parse_release_version(release)[1]
    except FormatError as exc:
        raise UsageError(str(exc)) from None


def release_name(level: int) -> str:
    return _RELEASE_OF_LEVEL.get(level, str(level))


def release_levels(release: str) -> dict[str, int]:
    """The level of every feature in a release: its metadata.version and our defaults."""
    levels = {METADATA_VERSION_FEATURE: metadata_level(release)}
    for name in sorted(SUPPORTED_FEATURES):
        if name != METADATA_VERSION_FEATURE:
            levels[name] = RELEASE_DEFAULTS.get(name, 0)
    return levels


def version_mapping(release: str) -> int:
    for name, level in release_levels(release).items():
        suffix = f" ({release_name(level)})" if name == METADATA_VERSION_FEATURE else ""
        print(f"{name}={level}{suffix}")
    return 0


def planned_updates(args: argparse.Namespace) -> dict[str, int]:
    """feature -> level the command asks for; UsageError for a malformed one."""
    wanted: dict[str, int] = {}
    if args.action == "disable":
        for name in args.features:
            wanted[name] = 0
        return wanted
    if getattr(args, "release_version", None):
        if args.metadata or args.features:
            raise UsageError("Can not specify `release-version` with other feature flags.")
        return release_levels(args.release_version)
    if args.metadata:
        wanted[METADATA_VERSION_FEATURE] = metadata_level(args.metadata)
    for entry in args.features:
        name, sep, level = entry.partition("=")
        if not sep or not name or not level.strip().lstrip("-").isdigit():
            raise UsageError(f"Can't parse feature={entry!r}. The format is NAME=LEVEL.")
        if name in wanted:
            raise UsageError(f"Feature {name} was specified more than once.")
        wanted[name] = int(level)
    if not wanted:
        raise UsageError("You must specify at least one feature to "
                         f"{args.action}.")
    return wanted


def _connection(args: argparse.Namespace) -> Any:
    return open_connection(args.bootstrap_server, args.command_config, TIMEOUT_S)


def describe(args: argparse.Namespace) -> int:
    with _connection(args) as sock:
        answer = identify(sock, "apache-kafka-java")
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    epoch = answer.finalized_features_epoch
    for feature in sorted(answer.supported_features, key=lambda f: f.name):
        level = finalized.get(feature.name, 0)
        low, high = feature.min_version, feature.max_version
        if feature.name == METADATA_VERSION_FEATURE:
            low, high, level = release_name(low), release_name(high), release_name(level)
        print(f"Feature: {feature.name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: "
              f"{high}\tFinalizedVersionLevel: {level}\tEpoch: {epoch if epoch >= 0 else '-'}")
    return 0


def update(args: argparse.Namespace, wanted: dict[str, int]) -> int:
    """Send the changes in one UpdateFeatures; Kafka's line for each, and its summary."""
    Request = registry().requests[ApiKey.UPDATE_FEATURES].cls
    kind = {"upgrade": UPGRADE, "downgrade": SAFE_DOWNGRADE, "disable": SAFE_DOWNGRADE}[
        args.action]
    if getattr(args, "unsafe", False):
        kind = UNSAFE_DOWNGRADE
    request = Request(timeout_ms=int(TIMEOUT_S * 1000), validate_only=args.dry_run,
                      feature_updates=[Request.FeatureUpdateKey(
                          feature=name, max_version_level=level, upgrade_type=kind)
                          for name, level in wanted.items()])
    with _connection(args) as sock:
        identify(sock, "apache-kafka-java")
        answer = round_trip(sock, ApiKey.UPDATE_FEATURES, UPDATE_FEATURES_VERSION, request, 1)
    errors = {r.feature: (r.error_code, r.error_message) for r in answer.results}
    failed = 0
    verb = {"upgrade": "upgraded", "downgrade": "downgraded", "disable": "disabled"}[args.action]
    for name, level in wanted.items():
        code, message = errors.get(name, (answer.error_code, answer.error_message))
        shown = release_name(level) if name == METADATA_VERSION_FEATURE else str(level)
        target = "" if args.action == "disable" else f" to {shown}"
        if code:
            failed += 1
            reason = message or ErrorCode(code).name
            print(f"Could not {args.action} {name}{target}. {reason}")
        elif args.dry_run:
            print(f"{name} can be {verb}{target}.")
        else:
            print(f"{name} was {verb}{target}.")
    if failed:
        print(f"{failed} out of {len(wanted)} operation(s) failed.", file=sys.stderr)
        return 1
    return 0
