"""`kafka-ext server-stop` (bin/kafka-server-stop.sh): signal this user's `kafka-ext server`
processes, as Kafka's script signals the JVMs running kafka.Kafka.

SIGTERM unless $SIGNAL names another signal (Kafka's script reads the same variable); a node
stopped with SIGTERM shuts down cleanly. `--node-id` and `--process-role` (Kafka 3.7+) pick
nodes by their effective configuration: each process's server.properties (relative to its
working directory), KAFKA_EXT_* environment and --override arguments, read from /proc and
resolved the way `kafka-ext server` resolves them. Like Kafka's script it does not wait for
the processes to exit. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.server_arguments import add_config_arguments
from kafka_ext.server.config import BrokerConfig, ConfigError, load_config

PROC = Path("/proc")
# How `kafka-ext server` is started: `python -m kafka_ext server`, `python -m
# kafka_ext.cli.main server` (the bin/ launchers), or the `kafka-ext` console script.
SERVER_MODULES = ("kafka_ext", "kafka_ext.cli.main")
CONSOLE_SCRIPT = "kafka-ext"
BOTH_FILTERS_NOTE = ("When both node-id and process-role are provided, the value for node-id "
                     "will take precedence")


@dataclass(frozen=True, slots=True)
class ServerProcess:
    """A running `kafka-ext server` and the arguments after `server`."""

    pid: int
    cwd: Path
    arguments: list[str]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `server-stop` with kafka-server-stop.sh's flags."""
    parser = subparsers.add_parser(
        "server-stop", help="stop this user's kafka-ext servers (kafka-server-stop.sh)",
        description="Send SIGTERM (or $SIGNAL) to this user's `kafka-ext server` processes: all "
                    "of them, or the one node --node-id names, or the nodes of "
                    "--process-role.")
    parser.add_argument("--process-role", metavar="ROLES",
                        help="only the nodes whose process.roles is ROLES (broker, controller, "
                             "or broker,controller)")
    parser.add_argument("--node-id", type=int, metavar="ID",
                        help="only the node whose node.id is ID; wins over --process-role")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """0 when the processes were signalled (or none matched a filter); 1 when no server runs."""
    signum = _signal(os.environ.get("SIGNAL", "TERM"))
    if args.node_id is not None and args.process_role is not None:
        print(BOTH_FILTERS_NOTE)
    servers = list(server_processes())
    if not servers:
        print("No kafka server to stop")
        return 1
    for server in servers:
        if args.node_id is None and args.process_role is None or _matches(server, args):
            try:
                os.kill(server.pid, signum)
            except ProcessLookupError:  # exited meanwhile
                pass
    return 0


def _signal(name: str) -> int:
    """A signal from $SIGNAL: a name with or without SIG (TERM, SIGKILL) or a number."""
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    try:
        return int(signal.Signals[text if text.startswith("SIG") else f"SIG{text}"])
    except KeyError:
        raise UsageError(f"SIGNAL={name} names no signal") from None


def _matches(server: ServerProcess, args: argparse.Namespace) -> bool:
    config = node_config(server)
    if config is None:
        return False
    if args.node_id is not None:
        return config.node_id == args.node_id
    wanted = {r.strip() for r in args.process_role.split(",") if r.strip()}
    return set(config.process_roles) == wanted


def server_processes() -> Iterator[ServerProcess]:
    """This user's running `kafka-ext server` processes."""
    uid = os.getuid()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = (entry / "cwd").resolve()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        arguments = server_arguments(argv)
        if arguments is not None:
            yield ServerProcess(int(entry.name), cwd, arguments)


def server_arguments(argv: list[str]) -> list[str] | None:
    """The arguments after `server` when `argv` runs `kafka-ext server`, else None."""
    for i, arg in enumerate(argv[:-1]):
        starts_kafka_ext = (
            (arg == "-m" and i + 2 < len(argv) and argv[i + 1] in SERVER_MODULES
             and argv[i + 2] == "server")
            or (Path(arg).name == CONSOLE_SCRIPT and argv[i + 1] == "server"))
        if starts_kafka_ext:
            rest = argv[i + 3:] if arg == "-m" else argv[i + 2:]
            return [a for a in rest if a]  # cmdline ends with a NUL
    return None


def node_config(server: ServerProcess) -> BrokerConfig | None:
    """A server's effective configuration, as it resolved it at start; None (with a warning)
    when it cannot be read back, e.g. its server.properties is gone."""
    parser = argparse.ArgumentParser(add_help=False)
    add_config_arguments(parser)
    known, _ = parser.parse_known_args(server.arguments)
    try:
        environ = (PROC / str(server.pid) / "environ").read_bytes().decode(errors="replace")
        env = dict(e.split("=", 1) for e in environ.split("\0") if "=" in e)
        path = None if known.config is None else server.cwd / known.config
        return load_config(path, env, known.override)
    except (OSError, ConfigError) as exc:
        print(f"WARNING: cannot read the configuration of kafka-ext server {server.pid}: {exc}",
              file=sys.stderr)
        return None
