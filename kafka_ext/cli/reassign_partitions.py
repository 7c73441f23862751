"""`kafka-ext reassign-partitions`: kafka-reassign-partitions.sh, replicas between brokers
(KIP-455) and between log dirs (KIP-113).

- `--generate --topics-to-move-json-file t.json --broker-list 1,2,3` prints the current
  assignment and a proposed one over those brokers (racks alternate unless
  `--disable-rack-aware`), in the reassignment JSON format.
- `--execute --reassignment-json-file f.json` sends AlterPartitionReassignments for every
  partition whose `replicas` differ from the current ones (refused while one of them is being
  reassigned, unless `--additional`), and AlterReplicaLogDirs for every replica whose `log_dirs`
  entry is an absolute path ("any" cancels a move there; replicas a broker does not host yet are
  retried until `--timeout` seconds). It prints the current assignment for a rollback, then shows
  a progress bar of the bytes copied until everything is in place (`--no-wait` returns at once).
  `--throttle` bytes/s sets `leader/follower.replication.throttled.rate` on every broker involved
  and the topics' `leader/follower.replication.throttled.replicas` (the current replicas send,
  the added ones fetch); `--replica-alter-log-dirs-throttle` sets `intra.broker.throttled.rate`.
- `--verify` reports each partition and replica; once all are done it clears the throttles
  (unless `--preserve-throttles`). Exit 0 when everything is done, 1 otherwise.
- `--cancel` cancels the file's reassignments in progress; `--list` shows those in progress.

Everything goes through kafka-python's admin client, a stock client of the broker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition, TopicPartitionReplica
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.log_dirs import admin_client
from kafka_ext.controller.quorum_controller import rack_alternating
from kafka_ext.replication.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)

ANY = "any"
REPLICA_NOT_AVAILABLE = 9
DEFAULT_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2
INTRA_BROKER_RATE = "intra.broker.throttled.rate"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, INTRA_BROKER_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
Partition = tuple[str, int]


class ReassignmentError(Exception):
    """A broker refused a change or the file asks for something we cannot do; exit code 1."""


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
        "reassign-partitions",
        help="move replicas between brokers and log dirs (kafka-reassign-partitions.sh)",
        description="Move partition replicas to the brokers and log directories a reassignment "
                    "JSON file names, follow and verify the moves, or propose a plan.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--generate", action="store_true",
                         help="propose an assignment of --topics-to-move-json-file's topics "
                              "over --broker-list")
    actions.add_argument("--execute", action="store_true", help="start the reassignment")
    actions.add_argument("--verify", action="store_true",
                         help="check whether the reassignment has completed")
    actions.add_argument("--cancel", action="store_true",
                         help="cancel the file's reassignments in progress")
    actions.add_argument("--list", action="store_true", help="list reassignments in progress")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE", help="client properties file")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help='{"version":1,"partitions":[{"topic":..,"partition":..,'
                             '"replicas":[..],"log_dirs":[..]}]}')
    parser.add_argument("--topics-to-move-json-file", metavar="FILE",
                        help='with --generate: {"version":1,"topics":[{"topic":..}]}')
    parser.add_argument("--broker-list", metavar="IDS",
                        help="with --generate: the brokers to spread the replicas over, 1,2,3")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="with --generate: ignore broker.rack")
    parser.add_argument("--throttle", type=int, default=-1, metavar="BYTES/S",
                        help="with --execute: limit replication between brokers for the move")
    parser.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1,
                        metavar="BYTES/S",
                        help="with --execute: limit copying between log dirs of a broker")
    parser.add_argument("--additional", action="store_true",
                        help="with --execute: allow changing reassignments in progress")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="with --verify/--cancel: leave the throttles in place")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long to retry replicas not created yet (default 10)")
    parser.add_argument("--no-wait", action="store_true",
                        help="with --execute: return once the moves started, no progress bar")
    parser.set_defaults(run=run)


# -- the JSON files ------------------------------------------------------------------------------


def parse_reassignment(text: str) -> list[ReplicaTarget]:
    """The replicas of a reassignment JSON document, in the file's order; UsageError when it
    is malformed."""
    try:
        document = json.loads(text)
        partitions = document["partitions"]
        targets = []
        seen: set[Partition] = set()
        for entry in partitions:
            topic, partition = str(entry["topic"]), int(entry["partition"])
            if (topic, partition) in seen:
                raise UsageError(f"{topic}-{partition} is listed twice")
            seen.add((topic, partition))
            replicas = [int(r) for r in entry["replicas"]]
            if not replicas or len(set(replicas)) != len(replicas):
                raise UsageError(f"{topic}-{partition}: replicas must be distinct broker ids")
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


def target_replicas(targets: list[ReplicaTarget]) -> dict[Partition, list[int]]:
    wanted: dict[Partition, list[int]] = {}
    for t in targets:
        wanted.setdefault((t.topic, t.partition), []).append(t.broker)
    return wanted


def assignment_json(assignment: dict[Partition, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas,
         "log_dirs": [ANY] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())]}, separators=(",", ":"))


def _read(path: str | None, flag: str) -> str:
    if path is None:
        raise UsageError(f"{flag} is required")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc


# -- the cluster as it is ----------------------------------------------------------------------


def current_assignment(admin: KafkaAdminClient, topics: Iterable[str]
                       ) -> dict[Partition, list[int]]:
    """Each partition's replicas now, in order; ReassignmentError for an unknown topic."""
    found: dict[Partition, list[int]] = {}
    for topic in admin.describe_topics(sorted(set(topics))):
        if topic.get("error_code"):
            raise ReassignmentError(f"Topic {topic['name']} does not exist")
        for p in topic["partitions"]:
            found[(topic["name"], p["partition_index"])] = list(p["replica_nodes"])
    return found


def ongoing(admin: KafkaAdminClient, partitions: Iterable[Partition] | None = None
            ) -> dict[Partition, dict[str, list[int]]]:
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    return {(tp.topic, tp.partition): state
            for tp, state in admin.list_partition_reassignments(wanted).items()}


def generate(admin: KafkaAdminClient, topics: list[str], brokers: list[int],
             rack_aware: bool) -> tuple[dict[Partition, list[int]], dict[Partition, list[int]]]:
    """(current, proposed): each partition keeps its replication factor, spread round-robin
    over `brokers` (racks alternating), shifted by one broker per partition."""
    current = current_assignment(admin, topics)
    racks: dict[int, str] = {}
    if rack_aware:
        racks = {b["broker_id"]: b["rack"] for b in admin.describe_cluster()["brokers"]
                 if b.get("rack")}
    order = rack_alternating(sorted(brokers), racks)
    proposed = {}
    for (topic, partition), replicas in current.items():
        if len(replicas) > len(order):
            raise ReassignmentError(f"{topic}-{partition} has {len(replicas)} replicas but "
                                    f"only {len(order)} brokers are listed")
        proposed[(topic, partition)] = [order[(partition + i) % len(order)]
                                        for i in range(len(replicas))]
    return current, proposed


# -- throttles ---------------------------------------------------------------------------------


def set_throttles(admin: KafkaAdminClient, current: dict[Partition, list[int]],
                  moving: dict[Partition, list[int]], rate: int, log_dirs_rate: int) -> None:
    """Kafka's throttle layout: the rate on every broker that sends or receives, the current
    replicas throttled as leaders, the added ones as followers."""
    set_op = AlterConfigOp.SET
    if rate >= 0:
        leaders: dict[str, list[str]] = {}
        followers: dict[str, list[str]] = {}
        for (topic, partition), target in moving.items():
            before = current[(topic, partition)]
            leaders.setdefault(topic, []).extend(f"{partition}:{b}" for b in before)
            followers.setdefault(topic, []).extend(
                f"{partition}:{b}" for b in target if b not in before)
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            LEADER_REPLICAS: (set_op, ",".join(leaders[topic])),
            **({FOLLOWER_REPLICAS: (set_op, ",".join(followers[topic]))}
               if followers.get(topic) else {})}) for topic in sorted(leaders)]
        brokers = sorted({b for tp, target in moving.items() for b in target + current[tp]})
        resources += [ConfigResource(ConfigResourceType.BROKER, str(b), configs={
            LEADER_RATE: (set_op, str(rate)), FOLLOWER_RATE: (set_op, str(rate))})
            for b in brokers]
        _alter_configs(admin, resources)
        print(f"The inter-broker throttle limit was set to {rate} B/s")
    if log_dirs_rate >= 0:
        brokers = sorted({b for target in moving.values() for b in target}
                         | {b for replicas in current.values() for b in replicas})
        _alter_configs(admin, [ConfigResource(ConfigResourceType.BROKER, str(b), configs={
            INTRA_BROKER_RATE: (set_op, str(log_dirs_rate))}) for b in brokers])
        print(f"The replica-alter-dir throttle limit was set to {log_dirs_rate} B/s")


def clear_throttles(admin: KafkaAdminClient, topics: Iterable[str]) -> None:
    """Remove every throttle a reassignment may have set: on all brokers, and on `topics`."""
    delete = AlterConfigOp.DELETE
    brokers = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
    _alter_configs(admin, [ConfigResource(ConfigResourceType.BROKER, str(b), configs={
        name: (delete, None) for name in BROKER_THROTTLES}) for b in brokers])
    print("Clearing broker-level throttles on brokers " + ",".join(map(str, brokers)))
    names = sorted(set(topics))
    _alter_configs(admin, [ConfigResource(ConfigResourceType.TOPIC, t, configs={
        name: (delete, None) for name in TOPIC_THROTTLES}) for t in names])
    for topic in names:
        print(f"Clearing topic-level throttles on topic {topic}")


def _alter_configs(admin: KafkaAdminClient, resources: list[ConfigResource]) -> None:
    if not resources:
        return
    # The broker validates the names; kafka-python's own check would cost a DescribeConfigs.
    outcome = admin.alter_configs(resources, raise_on_unknown=False, incremental=True)
    for resource_type, by_name in outcome.items():
        for name, result in by_name.items():
            if result != "OK":
                raise ReassignmentError(f"changing the throttle of {resource_type} {name} "
                                        f"failed: {result}")


# -- moves between log dirs ---------------------------------------------------------------------


def alter_log_dirs(admin: KafkaAdminClient, targets: list[ReplicaTarget],
                   timeout_s: float) -> None:
    """Send AlterReplicaLogDirs; retry REPLICA_NOT_AVAILABLE until the timeout (KIP-113): a
    replica a reassignment adds exists only once its broker has seen the change."""
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


def _sizes(admin: KafkaAdminClient, partitions: Iterable[Partition], brokers: Iterable[int]
           ) -> dict[tuple[int, str, int], list[tuple[str, bool, int]]]:
    """(broker, topic, partition) -> [(log dir, is future, size in bytes)] (DescribeLogDirs)."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    seen: dict[tuple[int, str, int], list[tuple[str, bool, int]]] = {}
    wanted = sorted(set(brokers))
    if not topics or not wanted:
        return seen
    for answer in admin.describe_log_dirs(topic_partitions=topics, brokers=wanted):
        for d in answer["log_dirs"]:
            for topic in d["topics"]:
                for p in topic["partitions"]:
                    seen.setdefault((answer["broker"], topic["name"], p["partition_index"]),
                                    []).append((d["log_dir"], p["is_future_key"],
                                                p["partition_size"]))
    return seen


def replica_states(admin: KafkaAdminClient, targets: list[ReplicaTarget]
                   ) -> dict[ReplicaTarget, tuple[str, int, int]]:
    """Per target with a directory: ("done" | "moving" | "elsewhere", copied, total bytes)."""
    with_dirs = [t for t in targets if t.log_dir != ANY]
    seen = _sizes(admin, {(t.topic, t.partition) for t in with_dirs},
                  {t.broker for t in with_dirs})
    states = {}
    for t in with_dirs:
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


# -- following the moves ------------------------------------------------------------------------


def copy_progress(admin: KafkaAdminClient, moving: dict[Partition, list[int]],
                  in_progress: dict[Partition, dict[str, list[int]]]
                  ) -> dict[Partition, tuple[int, int]]:
    """(copied, total bytes) per partition moving between brokers: what its adding replicas
    hold against the size of the largest replica it had."""
    adding = {tp: state["adding_replicas"] for tp, state in in_progress.items() if tp in moving}
    brokers = {b for tp in adding for b in in_progress[tp]["replicas"]}
    seen = _sizes(admin, adding, brokers)
    progress = {}
    for tp, new in adding.items():
        state = in_progress[tp]
        def size(broker: int, tp: Partition = tp) -> int:
            return max((s for _, future, s in seen.get((broker, *tp), []) if not future),
                       default=0)
        source = max((size(b) for b in state["replicas"] if b not in new), default=0)
        total = max(source * len(new), 1)
        progress[tp] = (min(sum(size(b) for b in new), total), total)
    return progress


def wait_with_progress(admin: KafkaAdminClient, moving: dict[Partition, list[int]],
                       targets: list[ReplicaTarget]) -> None:
    """A rich progress bar of copied bytes per partition until every reassignment has
    completed and every replica is in its log dir."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=None, transient=False) as progress:
        tasks: dict[Any, Any] = {}

        def show(key: Any, description: str, copied: int, total: int) -> None:
            if key not in tasks:
                tasks[key] = progress.add_task(description, total=total)
            progress.update(tasks[key], completed=copied, total=total)

        while True:
            in_progress = ongoing(admin, moving) if moving else {}
            for tp, (copied, total) in copy_progress(admin, moving, in_progress).items():
                show(tp, f"{tp[0]}-{tp[1]}", copied, total)
            for tp in moving:
                if tp not in in_progress and tp in tasks:
                    total = int(progress.tasks[tasks[tp]].total or 1)
                    show(tp, f"{tp[0]}-{tp[1]}", total, total)
            states = replica_states(admin, targets)
            for target, (_state, copied, total) in states.items():
                show(target, f"{target.topic}-{target.partition} on broker {target.broker}",
                     copied, total)
            if any(s[0] == "elsewhere" for s in states.values()) and not in_progress:
                stuck = [str(t) for t, s in states.items() if s[0] == "elsewhere"]
                raise ReassignmentError("moves stopped (cancelled, or a log dir failed): "
                                        + ", ".join(stuck))
            if not in_progress and all(s[0] == "done" for s in states.values()):
                return
            time.sleep(POLL_INTERVAL_S)


# -- the actions --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args.bootstrap_server, args.command_config)
    try:
        if args.list:
            return list_ongoing(admin)
        if args.generate:
            return run_generate(admin, args)
        targets = parse_reassignment(_read(args.reassignment_json_file,
                                           "--reassignment-json-file"))
        if args.verify:
            return verify(admin, targets, args.preserve_throttles)
        if args.cancel:
            return cancel(admin, targets, args.preserve_throttles)
        return execute(admin, targets, args)
    except ReassignmentError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    finally:
        admin.close()


def run_generate(admin: KafkaAdminClient, args: argparse.Namespace) -> int:
    try:
        document = json.loads(_read(args.topics_to_move_json_file, "--topics-to-move-json-file"))
        topics = [str(t["topic"]) for t in document["topics"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed topics-to-move JSON: {exc}") from None
    if args.broker_list is None:
        raise UsageError("--broker-list is required with --generate")
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--broker-list {args.broker_list!r} is not a list of ids") from None
    current, proposed = generate(admin, topics, brokers, not args.disable_rack_aware)
    print(f"Current partition replica assignment\n{assignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{assignment_json(proposed)}")
    return 0


def execute(admin: KafkaAdminClient, targets: list[ReplicaTarget],
            args: argparse.Namespace) -> int:
    wanted = target_replicas(targets)
    current = current_assignment(admin, {topic for topic, _ in wanted})
    missing = [tp for tp in wanted if tp not in current]
    if missing:
        raise ReassignmentError(f"Topic partition {missing[0][0]}-{missing[0][1]} does not exist")
    moving = {tp: replicas for tp, replicas in wanted.items() if current[tp] != replicas}
    if moving and not args.additional and ongoing(admin, moving):
        raise ReassignmentError("Cannot execute because there is an existing partition "
                                "assignment. Use --additional to override this and create a "
                                "new partition assignment in addition to the existing one.")
    print(f"Current partition replica assignment\n\n{assignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    set_throttles(admin, current, moving, args.throttle, args.replica_alter_log_dirs_throttle)
    if moving:
        if args.throttle >= 0:
            print("Warning: You must run --verify periodically, until the reassignment "
                  "completes, to ensure the throttle is removed.")
        results = admin.alter_partition_reassignments(
            {TopicPartition(t, p): replicas for (t, p), replicas in moving.items()})
        failed = {tp: error for tp, error in results.items() if error is not None}
        if failed:
            raise ReassignmentError("; ".join(f"{tp.topic}-{tp.partition}: {error.__name__}"
                                              for tp, error in failed.items()))
    alter_log_dirs(admin, [t for t in targets if t.log_dir != ANY], args.timeout)
    print("Successfully started partition reassignments for "
          + ",".join(f"{t}-{p}" for t, p in sorted(wanted)))
    if not args.no_wait:
        wait_with_progress(admin, moving, targets)
        print("All partitions are on their replicas and in their log directories; run --verify "
              "to clear any throttle.")
    return 0


def verify(admin: KafkaAdminClient, targets: list[ReplicaTarget],
           preserve_throttles: bool) -> int:
    """Kafka's --verify lines for each partition and each replica with a directory; 0 when
    everything is done (and then the throttles go)."""
    wanted = target_replicas(targets)
    current = current_assignment(admin, {topic for topic, _ in wanted})
    in_progress = ongoing(admin, wanted)
    complete = True
    print("Status of partition reassignment:")
    for (topic, partition), replicas in sorted(wanted.items()):
        if (topic, partition) in in_progress:
            complete = False
            print(f"Reassignment of partition {topic}-{partition} is still in progress.")
        elif current.get((topic, partition)) == replicas:
            print(f"Reassignment of partition {topic}-{partition} is completed.")
        else:
            complete = False
            now = ",".join(map(str, current.get((topic, partition), [])))
            print(f"There is no active reassignment of partition {topic}-{partition}, but "
                  f"replica set is {now} rather than {','.join(map(str, replicas))}.")
    for target, (state, _, _) in replica_states(admin, targets).items():
        if state == "done":
            print(f"Reassignment of replica {target} completed successfully.")
        elif state == "moving":
            complete = False
            print(f"Reassignment of replica {target} is still in progress.")
        else:
            complete = False
            print(f"Reassignment of replica {target} is not in log dir {target.log_dir}.")
    if complete and not preserve_throttles:
        clear_throttles(admin, {topic for topic, _ in wanted})
    return 0 if complete else 1


def cancel(admin: KafkaAdminClient, targets: list[ReplicaTarget],
           preserve_throttles: bool) -> int:
    wanted = target_replicas(targets)
    in_progress = ongoing(admin, wanted)
    if in_progress:
        results = admin.alter_partition_reassignments(
            {TopicPartition(t, p): None for t, p in in_progress})
        failed = {tp: error for tp, error in results.items() if error is not None}
        if failed:
            raise ReassignmentError("; ".join(f"{tp.topic}-{tp.partition}: {error.__name__}"
                                              for tp, error in failed.items()))
        print("Successfully cancelled partition reassignments for: "
              + ",".join(f"{t}-{p}" for t, p in sorted(in_progress)))
    else:
        print("None of the specified partition reassignments are active.")
    if not preserve_throttles:
        clear_throttles(admin, {topic for topic, _ in wanted})
    return 0


def list_ongoing(admin: KafkaAdminClient) -> int:
    in_progress = ongoing(admin)
    if not in_progress:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), state in sorted(in_progress.items()):
        print(f"{topic}-{partition}: replicas: {','.join(map(str, state['replicas']))}. "
              f"adding: {','.join(map(str, state['adding_replicas']))}. "
              f"removing: {','.join(map(str, state['removing_replicas']))}.")
    return 0
