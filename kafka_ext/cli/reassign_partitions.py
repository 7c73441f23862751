"""`kafka-ext reassign-partitions`: kafka-reassign-partitions.sh with `log_dirs` (KIP-113).

`--execute --reassignment-json-file f.json` sends AlterReplicaLogDirs for every replica whose
`log_dirs` entry is an absolute path ("any" cancels a move in progress there), retries the
replicas a broker answers REPLICA_NOT_AVAILABLE for until `--timeout` seconds (default 10, as
the proposal says), then shows a progress bar until the moves finish (`--no-wait` skips it).
`--verify` asks each broker with DescribeLogDirs whether every replica is in its directory; it
exits 0 when all are, 1 otherwise. Moving replicas between brokers (a `replicas` list unlike
the current one) needs AlterPartitionReassignments, which this single-node broker does not
serve yet: such a file is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from kafka_ext.cli.client_config import UsageError, client_config
from kafka_ext.cli.log_dirs import admin_client

ANY = "any"
REPLICA_NOT_AVAILABLE = 9
DEFAULT_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2


class ReassignmentError(Exception):
    """A broker refused a move or the file asks for something we cannot do; exit code 1."""


@dataclass(frozen=True, slots=True)
class ReplicaTarget:
    """One replica of the JSON file and the log dir it should live in."""

    topic: str
    partition: int
    broker: int
    log_dir: str  # an absolute path or "any"

    @property
    def tpr(self) -> TopicPartitionReplica:
        return TopicPartitionReplica(self.topic, self.partition, self.broker)

    def __str__(self) -> str:
        return (f"TopicPartitionReplica(topic={self.topic}, partition={self.partition}, "
                f"replica={self.broker})")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `reassign-partitions` with kafka-reassign-partitions.sh's flags."""
    parser = subparsers.add_parser(
        "reassign-partitions", help="move replicas between log dirs (kafka-reassign-partitions.sh)",
        description="Move partition replicas to the log directories a reassignment JSON file "
                    "names, and verify where they are.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--execute", action="store_true", help="start the reassignment")
    actions.add_argument("--verify", action="store_true",
                         help="check whether the replicas are in their log directories")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE", help="client properties file")
    parser.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                        help='{"version":1,"partitions":[{"topic":..,"partition":..,'
                             '"replicas":[..],"log_dirs":[..]}]}')
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long to retry replicas not created yet (default 10)")
    parser.add_argument("--no-wait", action="store_true",
                        help="with --execute: return once the moves started, no progress bar")
    parser.set_defaults(run=run)


def parse_reassignment(text: str) -> list[ReplicaTarget]:
    """The replicas of a reassignment JSON document; UsageError when it is malformed."""
    try:
        document = json.loads(text)
        partitions = document["partitions"]
        targets = []
        for entry in partitions:
            topic, partition = str(entry["topic"]), int(entry["partition"])
            replicas = [int(r) for r in entry["replicas"]]
            dirs = entry.get("log_dirs") or [ANY] * len(replicas)
            if len(dirs) != len(replicas):
                raise UsageError(f"{topic}-{partition}: log_dirs must have one entry per replica")
            for broker, log_dir in zip(replicas, dirs, strict=True):
                if log_dir != ANY and not os.path.isabs(log_dir):
                    raise UsageError(f"{topic}-{partition}: log dir {log_dir!r} must be \"any\" "
                                     "or an absolute path")
                targets.append(ReplicaTarget(topic, partition, broker, log_dir))
        return targets
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed reassignment JSON: {exc}") from None


def check_replicas_unchanged(bootstrap: str, config: dict[str, str],
                             targets: list[ReplicaTarget]) -> None:
    """Refuse moves between brokers: only log dirs may change here."""
    settings: dict[str, str | int | float | bool] = {**config, "bootstrap.servers": bootstrap}
    admin = AdminClient(settings)
    wanted: dict[tuple[str, int], list[int]] = {}
    for t in targets:
        wanted.setdefault((t.topic, t.partition), []).append(t.broker)
    metadata = admin.list_topics(timeout=30)
    for (topic, partition), replicas in wanted.items():
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            raise ReassignmentError(f"Topic partition {topic}-{partition} does not exist")
        current = list(found.partitions[partition].replicas)
        if sorted(current) != sorted(replicas):
            raise ReassignmentError(
                f"{topic}-{partition}: replicas {replicas} differ from the current {current}; "
                "moving replicas between brokers is not supported by this broker")


def alter_log_dirs(admin: KafkaAdminClient, targets: list[ReplicaTarget],
                   timeout_s: float) -> None:
    """Send AlterReplicaLogDirs; retry REPLICA_NOT_AVAILABLE until the timeout (KIP-113)."""
    pending = {t.tpr: t.log_dir for t in targets}  # "any" too: it cancels a move
    deadline = time.monotonic() + timeout_s
    while pending:
        results = admin.alter_replica_log_dirs(pending)
        retry = {}
        for tpr, error in results.items():
            code = getattr(error, "errno", 0)
            if code == REPLICA_NOT_AVAILABLE:
                retry[tpr] = pending[tpr]
            elif code != 0:
                raise ReassignmentError(f"moving {tpr} to {pending[tpr]} failed: {error.__name__}")
        if retry and time.monotonic() > deadline:
            raise ReassignmentError("timed out waiting for replicas to be created: "
                                    + ", ".join(str(t) for t in retry))
        pending = retry
        if pending:
            time.sleep(POLL_INTERVAL_S)


def replica_states(admin: KafkaAdminClient, targets: list[ReplicaTarget]
                   ) -> dict[ReplicaTarget, tuple[str, int, int]]:
    """Per target with a directory: ("done" | "moving" | "elsewhere", copied, total bytes)."""
    topics: dict[str, list[int]] = {}
    brokers = sorted({t.broker for t in targets})
    for t in targets:
        topics.setdefault(t.topic, []).append(t.partition)
    answers = admin.describe_log_dirs(topic_partitions=topics, brokers=brokers)
    # (broker, topic, partition) -> [(dir, is_future, size)]
    seen: dict[tuple[int, str, int], list[tuple[str, bool, int]]] = {}
    for answer in answers:
        for d in answer["log_dirs"]:
            for topic in d["topics"]:
                for p in topic["partitions"]:
                    seen.setdefault((answer["broker"], topic["name"], p["partition_index"]),
                                    []).append((d["log_dir"], p["is_future_key"],
                                                p["partition_size"]))
    states = {}
    for t in targets:
        if t.log_dir == ANY:
            continue
        replicas = seen.get((t.broker, t.topic, t.partition), [])
        wanted = os.path.normpath(t.log_dir)
        current = [(d, size) for d, future, size in replicas if not future]
        future = [(d, size) for d, fut, size in replicas if fut]
        total = current[0][1] if current else 0
        if any(os.path.normpath(d) == wanted for d, _ in current):
            states[t] = ("done", total, total)
        elif any(os.path.normpath(d) == wanted for d, _ in future):
            states[t] = ("moving", min(future[0][1], total), max(total, 1))
        else:
            states[t] = ("elsewhere", 0, max(total, 1))
    return states


def wait_with_progress(admin: KafkaAdminClient, targets: list[ReplicaTarget]) -> None:
    """A rich progress bar of copied bytes until every replica is in its directory."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=None, transient=False) as progress:
        tasks: dict[ReplicaTarget, Any] = {}
        while True:
            states = replica_states(admin, targets)
            for target, (_state, copied, total) in states.items():
                if target not in tasks:
                    tasks[target] = progress.add_task(f"{target.topic}-{target.partition}",
                                                      total=total)
                progress.update(tasks[target], completed=copied, total=total)
            if all(s[0] == "done" for s in states.values()):
                return
            if any(s[0] == "elsewhere" for s in states.values()):
                stuck = [str(t) for t, s in states.items() if s[0] == "elsewhere"]
                raise ReassignmentError("moves stopped (cancelled, or a log dir failed): "
                                        + ", ".join(stuck))
            time.sleep(POLL_INTERVAL_S)


def run(args: argparse.Namespace) -> int:
    try:
        with open(args.reassignment_json_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.reassignment_json_file}: {exc.strerror}") from exc
    targets = parse_reassignment(text)
    admin = admin_client(args.bootstrap_server, args.command_config)
    try:
        if args.verify:
            return verify(admin, targets)
        check_replicas_unchanged(args.bootstrap_server,
                                 client_config(args.bootstrap_server, args.command_config, [],
                                               "--command-config"), targets)
        alter_log_dirs(admin, targets, args.timeout)
        print("Successfully started partition reassignment for "
              + ", ".join(sorted({f"{t.topic}-{t.partition}" for t in targets})))
        if not args.no_wait and any(t.log_dir != ANY for t in targets):
            wait_with_progress(admin, targets)
            print("All replicas are in their log directories.")
        return 0
    except ReassignmentError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    finally:
        admin.close()


def verify(admin: KafkaAdminClient, targets: list[ReplicaTarget]) -> int:
    """Kafka's --verify lines for each replica with a directory; 0 when all are done."""
    states = replica_states(admin, targets)
    complete = True
    for target, (state, _, _) in states.items():
        if state == "done":
            print(f"Reassignment of replica {target} completed successfully.")
        elif state == "moving":
            complete = False
            print(f"Reassignment of replica {target} is still in progress.")
        else:
            complete = False
            print(f"Reassignment of replica {target} is not in log dir {target.log_dir}.")
    return 0 if complete else 1
