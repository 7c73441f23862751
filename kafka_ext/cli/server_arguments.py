"""The arguments that say where a node's configuration comes from, as `kafka-ext server` takes
them: shared by `server`, `docker-entrypoint` and `healthcheck`, which must read the same
configuration (server.properties, then KAFKA_EXT_* variables, then --override)."""

from __future__ import annotations

import argparse


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`[server.properties]` and repeatable `--override KEY=VALUE`."""
    parser.add_argument("config", nargs="?", metavar="server.properties",
                        help="broker configuration in Java properties syntax")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set one configuration key (repeatable)")
