"""`kafka-ext docker-entrypoint`: what the container image runs (docker/Dockerfile ENTRYPOINT).

As Apache Kafka's official image does: the node is configured by the environment
(`KAFKA_EXT_<KEY>`, dots as underscores), its storage is formatted on first start from
`CLUSTER_ID` (the same id on every node of a cluster), and then the process becomes
`kafka-ext server` with the same arguments (exec, so the broker is PID 1 and gets SIGTERM).

A container given no `KAFKA_EXT_*` variable and no server.properties runs the single-node
defaults below, reachable on the published port 9092 as `localhost:9092`; any variable given
turns them off, so a cluster node states its whole configuration (Kafka's image behaves the
same way). The single node formats itself, so it needs no CLUSTER_ID (one given is used).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from kafka_ext.cli.server_arguments import add_config_arguments
from kafka_ext.server.config import ENV_PREFIX, BrokerConfig, ConfigError, load_config
from kafka_ext.server.kraft import storage_layout
from kafka_ext.storage.checkpoints import CorruptCheckpointError, MetaProperties
from kafka_ext.storage.formatter import (
    FormatError,
    FormatRequest,
    format_storage,
    parse_cluster_id,
)

CLUSTER_ID_VARIABLE = "CLUSTER_ID"
EXIT_CONFIG_ERROR = 2  # as `kafka-ext server`
EXIT_STORAGE_ERROR = 1  # as `kafka-ext storage format`
# The image's single node: every interface of the container, advertised as the host sees the
# published port (`docker run -p 9092:9092`).
SINGLE_NODE_DEFAULTS = {
    "KAFKA_EXT_LISTENERS": "PLAINTEXT://0.0.0.0:9092",
    "KAFKA_EXT_ADVERTISED_LISTENERS": "PLAINTEXT://localhost:9092",
}


class EntrypointError(Exception):
    """The container cannot start; the message says why and what to set."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `docker-entrypoint`; it takes `kafka-ext server`'s arguments and passes them on."""
    parser = subparsers.add_parser(
        "docker-entrypoint", help="the container image's entrypoint: format, then run the server",
        description="Format this node's storage on first start from the CLUSTER_ID environment "
                    "variable (configuration from KAFKA_EXT_* variables, as `kafka-ext server` "
                    "reads it), then exec `kafka-ext server` with the same arguments.")
    add_config_arguments(parser)
    parser.add_argument("--print-config", action="store_true",
                        help="format if needed, print the effective configuration and exit")
    parser.set_defaults(run=run)


def container_environment(env: Mapping[str, str], config_path: str | None) -> dict[str, str]:
    """`env` with the single-node defaults added when nothing configures the node."""
    configured = config_path is not None or any(
        name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX) for name in env)
    return dict(env) if configured else {**SINGLE_NODE_DEFAULTS, **env}


def prepare_storage(config: BrokerConfig, cluster_id_text: str | None) -> list[str]:
    """Format the node's unformatted dirs with CLUSTER_ID; the lines to print.

    Formatted dirs are left alone (`storage format --ignore-formatted`), so a restarted
    container keeps its data; a metadata log dir formatted for another cluster is refused here
    rather than joined to a cluster the other nodes do not belong to.
    """
    layout = storage_layout(config)
    try:
        meta = MetaProperties.read(layout.metadata_log_dir)
    except (OSError, CorruptCheckpointError) as exc:
        raise EntrypointError(f"cannot read {layout.metadata_log_dir}/meta.properties: {exc}"
                              ) from exc
    cluster_id = _cluster_id(cluster_id_text)
    if meta is not None:
        if cluster_id is not None and cluster_id != meta.cluster_id:
            raise EntrypointError(
                f"{layout.metadata_log_dir} is formatted for cluster {meta.cluster_id}, but "
                f"{CLUSTER_ID_VARIABLE} is {cluster_id}: set {CLUSTER_ID_VARIABLE}="
                f"{meta.cluster_id}, or remove the volume to start a new cluster (its data goes)")
        return [f"{layout.metadata_log_dir} is formatted for cluster {meta.cluster_id}; "
                "not formatting"]
    if cluster_id is None:
        if config.is_self_quorum:
            return ["a single node that is its own quorum formats itself at start"]
        raise EntrypointError(
            f"{CLUSTER_ID_VARIABLE} is not set and {layout.metadata_log_dir} is not formatted: "
            f"every node of a cluster is formatted with the same id on its first start; set "
            f"{CLUSTER_ID_VARIABLE} to one made by `kafka-ext storage random-uuid` on every node")
    if not config.cluster_id_generated and config.cluster_id != cluster_id:
        raise EntrypointError(f"cluster.id is {config.cluster_id}, which is not "
                              f"{CLUSTER_ID_VARIABLE} {cluster_id}")
    if config.is_controller and not (config.controller_quorum_voters or config.is_self_quorum):
        raise EntrypointError(
            "a controller without controller.quorum.voters: the image formats static quorums "
            "only; set KAFKA_EXT_CONTROLLER_QUORUM_VOTERS (docs/cluster.md)")
    names = config.controller_listener_names
    request = FormatRequest(cluster_id, controller_listener_name=names[0] if names else None,
                            ignore_formatted=True)
    try:
        return format_storage(layout, request)
    except (FormatError, OSError) as exc:
        raise EntrypointError(f"cannot format: {exc}") from exc


def _cluster_id(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_cluster_id(text.strip())
    except FormatError as exc:
        raise EntrypointError(f"{CLUSTER_ID_VARIABLE}: {exc}") from None


def server_argv(args: argparse.Namespace) -> list[str]:
    """The `kafka-ext server` command line for the entrypoint's own arguments."""
    argv = [sys.executable, "-m", "kafka_ext", "server"]
    if args.config is not None:
        argv.append(args.config)
    for pair in args.override:
        argv += ["--override", pair]
    if args.print_config:
        argv.append("--print-config")
    return argv


def run(args: argparse.Namespace) -> int:
    """Prepare the storage, then become `kafka-ext server`; returns only on failure."""
    env = container_environment(os.environ, args.config)
    try:
        config = load_config(args.config, env, args.override)
    except ConfigError as exc:
        print(f"kafka-ext: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        lines = prepare_storage(config, env.get(CLUSTER_ID_VARIABLE))
    except EntrypointError as exc:
        print(f"kafka-ext: {exc}", file=sys.stderr)
        return EXIT_STORAGE_ERROR
    print("\n".join(lines), flush=True)  # before exec: buffered output would be lost
    argv = server_argv(args)
    os.execve(argv[0], argv, env)
    return 0  # not reached: execve replaces the process or raises

