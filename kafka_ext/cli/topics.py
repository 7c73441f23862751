"""`kafka-ext topics`: kafka-topics.sh's flags and output, over confluent-kafka's AdminClient.

Output keeps kafka-topics.sh's plain layout ("Created topic t.", tab-separated describe lines)
because scripts parse it; `--describe --table` renders the same facts as a rich table for people.
A partition with inactive chunks (seed 000) gets one line per chunk under its line, then one
with its active chunk's start offset; the chunks come from Metadata v12's tagged fields, which
confluent-kafka does not read, so --describe also asks one broker through our codec
(cli/chunks.py).
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from kafka_ext.cli.broker_api_versions import BrokerError, negotiated_round_trip
from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.cli.chunks import (
    TRANSPORT_ERRORS,
    ChunkCommandError,
    ChunkRow,
    PartitionChunks,
    connect_bootstrap,
    partition_chunks,
)
from kafka_ext.cli.client_config import UsageError, client_config, parse_key_values
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.controller.image import MODE_NONE
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

REQUEST_TIMEOUT_S = 30.0
COLLISION_WARNING = (
    "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
    "could collide. To avoid issues it is best to use either, but not both.")


class TopicCommandError(Exception):
    """A failed admin operation; printed as kafka-topics.sh prints it, exit code 1."""


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition as --describe prints it; `chunks` only when it has inactive chunks."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    chunks: PartitionChunks | None = None
    # KIP-966's (ELR, last known ELR) from DescribeTopicPartitions; None: not known ("N/A").
    eligible: tuple[tuple[int, ...], tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One topic as --describe prints it; `configs` holds only the topic's own overrides."""

    name: str
    topic_id: str
    partitions: tuple[PartitionRow, ...]
    configs: tuple[tuple[str, str], ...]
    # The topic's effective min.insync.replicas; None when DescribeConfigs did not name it.
    min_isr: int | None = None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `topics` with kafka-topics.sh's flags."""
    parser = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics (kafka-topics.sh)",
        description="Create, delete, describe, or change a topic.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="create a new topic")
    actions.add_argument("--list", action="store_true", help="list all topics")
    actions.add_argument("--describe", action="store_true", help="describe topics")
    actions.add_argument("--alter", action="store_true",
                         help="change a topic's partition count (up, or down: seed 002)")
    actions.add_argument("--delete", action="store_true", help="delete topics")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (security settings and the like)")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="topic name; a regular expression for describe/alter/delete")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partition count for --create, or the new count for --alter")
    parser.add_argument("--delete-partitions-delay", type=int, default=0, metavar="MS",
                        help="with --alter to fewer partitions: keep the removed ones readable "
                             "(ReadOnly) this long before their data is deleted (default 0)")
    parser.add_argument("--replication-factor", type=int, metavar="R",
                        help="replication factor for --create")
    parser.add_argument("--replica-assignment", metavar="B1:B2,B3:B4,...",
                        help="with --create, or --alter with --partitions: each partition's "
                             "replicas by hand, partitions separated by commas and replicas by "
                             "colons, the first replica the preferred leader (with --alter the "
                             "list covers every partition; the existing ones are skipped)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic config override for --create (repeatable)")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter/--delete/--describe: do nothing if the topic is missing")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: do nothing if the topic already exists")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave out internal topics (__consumer_offsets, ...)")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions without a leader")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than the "
                             "topic's min.insync.replicas (or that have no leader)")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is exactly the topic's "
                             "min.insync.replicas")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only the topic lines of topics with config "
                             "overrides")
    parser.add_argument("--table", action="store_true",
                        help="with --describe: print a table instead of kafka-topics.sh lines")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Execute one topics action; 0 on success, 1 when the cluster refuses it."""
    _check_args(args)
    conf: dict[str, str | int | float | bool] = dict(
        client_config(args.bootstrap_server, args.command_config, [], "--command-config"))
    admin = AdminClient(conf)
    try:
        if args.create:
            _create(admin, args)
        elif args.list:
            for name in _list_topics(admin, args.exclude_internal):
                print(name)
        elif args.describe:
            _describe(admin, args)
        elif args.alter:
            _alter(admin, args)
        else:
            _delete(admin, args)
    except (TopicCommandError, KafkaException) as exc:
        print(f"Error while executing topic command : {_message(exc)}", file=sys.stderr)
        return 1
    return 0


ALTER_CONFIG_REFUSED = (
    'Option combination "[[bootstrap-server], [config]]" can\'t be used with option "[alter]" '
    "(To alter topic configurations, the kafka-configs tool can be used.)")
ACTIONS = ("create", "list", "describe", "alter", "delete")
# --describe's partition filters, which print partition lines only.
PARTITION_REPORTS = ("under-replicated-partitions", "under-min-isr-partitions",
                     "at-min-isr-partitions", "unavailable-partitions")


def _refused(used: str, other: str) -> UsageError:
    """kafka-topics.sh's message for two flags that do not combine."""
    return UsageError(f'Option "[{used}]" can\'t be used with option "[{other}]"')


def _is_set(args: argparse.Namespace, flag: str) -> bool:
    value = getattr(args, flag.replace("-", "_"))
    return value is not None and value is not False


def _check_kafka_combinations(args: argparse.Namespace) -> None:
    """The flag combinations kafka-topics.sh refuses, with its messages, in its order."""
    action = next(a for a in ACTIONS if getattr(args, a))
    if args.alter and args.config:
        raise UsageError(ALTER_CONFIG_REFUSED)
    if args.alter and args.partitions is None:
        raise UsageError('Missing required argument "[partitions]"')
    if args.replica_assignment is not None:
        if action not in ("create", "alter"):
            raise _refused("replica-assignment", action)
        for flag in ("partitions", "replication-factor") if args.create else ():
            if _is_set(args, flag):
                raise _refused("replica-assignment", flag)
    for flag in (*PARTITION_REPORTS, "topics-with-overrides"):
        if _is_set(args, flag) and action != "describe":
            raise _refused(flag, action)
    for flag in PARTITION_REPORTS:
        if _is_set(args, flag) and args.topics_with_overrides:
            raise _refused(flag, "topics-with-overrides")


def _check_args(args: argparse.Namespace) -> None:
    if (args.create or args.alter or args.delete) and not args.topic:
        raise UsageError("--topic is required with --create, --alter and --delete")
    _check_kafka_combinations(args)
    if args.config and not args.create:
        raise UsageError("--config is only valid with --create")
    if args.replication_factor is not None and not args.create:
        raise UsageError("--replication-factor is only valid with --create")
    if args.partitions is not None and not (args.create or args.alter):
        raise UsageError("--partitions is only valid with --create or --alter")
    if args.if_not_exists and not args.create:
        raise UsageError("--if-not-exists is only valid with --create")
    if args.if_exists and not (args.alter or args.delete or args.describe):
        raise UsageError("--if-exists is only valid with --alter, --delete or --describe")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    if args.delete_partitions_delay and not args.alter:
        raise UsageError("--delete-partitions-delay is only valid with --alter")
    if args.delete_partitions_delay < 0:
        raise UsageError("--delete-partitions-delay must not be negative")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise UsageError("--replication-factor must be at least 1")


def _message(exc: Exception) -> str:
    """The broker's message when there is one, else the error's name."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        return error.str() or error.name()
    return str(exc)


def _error_code(exc: KafkaException) -> int | None:
    if exc.args and isinstance(exc.args[0], KafkaError):
        code: int = exc.args[0].code()
        return code
    return None


def _list_topics(admin: AdminClient, exclude_internal: bool) -> list[str]:
    metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    names = sorted(metadata.topics)
    if exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    return names


def _matching_topics(admin: AdminClient, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Topics named by --topic, which kafka-topics.sh treats as a regular expression."""
    names = _list_topics(admin, exclude_internal)
    if pattern is None:
        return names
    try:
        regex = re.compile(pattern)
    except re.error:
        return [n for n in names if n == pattern]
    return [n for n in names if n == pattern or regex.fullmatch(n)]


def _require_topics(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    names = _matching_topics(admin, args.topic, args.exclude_internal)
    if not names and args.topic is not None and not args.if_exists:
        raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
    return names


def parse_replica_assignment(text: str) -> list[list[int]]:
    """`1:2,2:3`: partition 0 on brokers 1 and 2, partition 1 on 2 and 3; refused as
    kafka-topics.sh refuses a repeated broker or partitions of different sizes."""
    assignment: list[list[int]] = []
    for index, entry in enumerate(text.split(",")):
        brokers: list[int] = []
        for part in entry.split(":"):
            try:
                brokers.append(int(part.strip()))
            except ValueError:
                raise TopicCommandError(f'For input string: "{part.strip()}"') from None
        repeated = sorted({b for b in brokers if brokers.count(b) > 1})
        if repeated:
            raise TopicCommandError("Partition replica lists may not contain duplicate "
                                    f"entries: {','.join(map(str, repeated))}")
        if assignment and len(brokers) != len(assignment[0]):
            raise TopicCommandError(f"Partition {index} has different replication factor: "
                                    f"[{', '.join(map(str, brokers))}]")
        assignment.append(brokers)
    return assignment


def _replica_assignment(args: argparse.Namespace) -> list[list[int]] | None:
    """The parsed --replica-assignment; None when absent or empty (as kafka-topics.sh)."""
    return parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None


def _send(args: argparse.Namespace, api_key: ApiKey, request: Any) -> Any:
    """One admin request through our codec, with --command-config's security settings, to the
    bootstrap broker (which forwards it to the active controller), at the highest version both
    sides know: for what confluent-kafka's AdminClient cannot send (replica assignments)."""
    try:
        with open_connection(args.bootstrap_server, args.command_config,
                             REQUEST_TIMEOUT_S) as sock:
            return negotiated_round_trip(sock, api_key, request)
    except (OSError, SaslAuthenticationError, BrokerError) as exc:
        raise TopicCommandError(f"{api_key.name} to {args.bootstrap_server} failed: "
                                f"{exc}") from None


def _create_assigned(args: argparse.Namespace, assignment: list[list[int]],
                     configs: dict[str, str]) -> bool:
    """CreateTopics with the partitions' replicas (confluent-kafka's NewTopic refuses them);
    False when the topic exists and --if-not-exists is given."""
    Request = registry().requests[ApiKey.CREATE_TOPICS].cls
    request = Request(timeout_ms=int(REQUEST_TIMEOUT_S * 1000), topics=[Request.CreatableTopic(
        name=args.topic, num_partitions=-1, replication_factor=-1,
        assignments=[Request.CreatableReplicaAssignment(partition_index=p, broker_ids=replicas)
                     for p, replicas in enumerate(assignment)],
        configs=[Request.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])])
    (result,) = _send(args, ApiKey.CREATE_TOPICS, request).topics
    if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        return False
    if result.error_code:
        raise TopicCommandError(result.error_message or ErrorCode(result.error_code).name)
    return True


def _create(admin: AdminClient, args: argparse.Namespace) -> None:
    configs = parse_key_values(args.config, "--config")
    topic: str = args.topic
    assignment = _replica_assignment(args)
    if args.if_not_exists and topic in _list_topics(admin, exclude_internal=False):
        return
    if "." in topic or "_" in topic:
        print(COLLISION_WARNING)
    if assignment is not None:
        if _create_assigned(args, assignment, configs):
            print(f"Created topic {topic}.")
        return
    new_topic = NewTopic(
        topic,
        num_partitions=-1 if args.partitions is None else args.partitions,
        replication_factor=-1 if args.replication_factor is None else args.replication_factor,
        config=configs,
    )
    future = admin.create_topics([new_topic], request_timeout=REQUEST_TIMEOUT_S)[topic]
    try:
        future.result()
    except KafkaException as exc:
        if args.if_not_exists and _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise
    print(f"Created topic {topic}.")


KEYED_WARNING = ("WARNING: If partitions are {} for a topic that has a key, the partition "
                 "logic or ordering of the messages will be affected")
DISABLED_WARNING = ("WARNING: This feature is only enabled with Metadata version above 10 and "
                    "delete.topic.partition.enable turned on")
CHANGING_WARNING = "WARNING: The topic is currently under changes"


def _alter(admin: AdminClient, args: argparse.Namespace) -> None:
    """More partitions: CreatePartitions. Fewer: DeletePartitions of the highest-numbered
    ones (seed 002), ReadOnly for --delete-partitions-delay ms, then deleted."""
    names = _require_topics(admin, args)
    if not names:
        return
    counts = {name: len(admin.list_topics(name, timeout=REQUEST_TIMEOUT_S).topics[name].partitions)
              for name in names}
    growing = [n for n in names if args.partitions >= counts[n]]
    assignment = _replica_assignment(args)
    if growing:
        print(KEYED_WARNING.format("increased"))
    if growing and assignment is not None:
        _grow_assigned(args, {n: counts[n] for n in growing}, assignment)
    elif growing:
        futures = admin.create_partitions([NewPartitions(n, args.partitions) for n in growing],
                                          request_timeout=REQUEST_TIMEOUT_S)
        for name in growing:
            futures[name].result()
    shrinking = [n for n in names if args.partitions < counts[n]]
    if shrinking:
        print(KEYED_WARNING.format("decreased"))
        _delete_partitions(args, {n: list(range(args.partitions, counts[n])) for n in shrinking})


def _grow_assigned(args: argparse.Namespace, counts: dict[str, int],
                   assignment: list[list[int]]) -> None:
    """CreatePartitions with the new partitions' replicas: --replica-assignment lists every
    partition, so those a topic already has are skipped, as kafka-topics.sh does."""
    Request = registry().requests[ApiKey.CREATE_PARTITIONS].cls
    request = Request(timeout_ms=int(REQUEST_TIMEOUT_S * 1000), validate_only=False, topics=[
        Request.CreatePartitionsTopic(name=name, count=args.partitions, assignments=[
            Request.CreatePartitionsTopic.CreatePartitionsAssignment(broker_ids=replicas)
            for replicas in assignment[current:]])
        for name, current in counts.items()])
    for result in _send(args, ApiKey.CREATE_PARTITIONS, request).results:
        if result.error_code:
            raise TopicCommandError(result.error_message or ErrorCode(result.error_code).name)


def _delete_partitions(args: argparse.Namespace, partitions: dict[str, list[int]]) -> None:
    """DeletePartitions (our key 1000), sent with our codec to the bootstrap broker, which
    forwards it to the active controller."""
    Request = registry().requests[ApiKey.DELETE_PARTITIONS].cls
    request = Request(timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
                      delete_partitions_delay_ms=args.delete_partitions_delay,
                      topics=[Request.DeletePartitionsTopic(name=n, partitions=p)
                              for n, p in partitions.items()])
    host, _, port = args.bootstrap_server.split(",")[0].rpartition(":")
    with socket.create_connection((host or "localhost", int(port)),
                                  timeout=REQUEST_TIMEOUT_S) as sock:
        identify(sock)  # our client: the extension keys are served to it
        response = round_trip(sock, ApiKey.DELETE_PARTITIONS, 0, request)
    if response.error_code:
        raise TopicCommandError(response.error_message or ErrorCode(response.error_code).name)
    for topic in response.responses:
        for p in topic.partitions:
            error = ErrorCode(p.error_code)
            if error == ErrorCode.TOPIC_DELETION_DISABLED:
                print(DISABLED_WARNING)
            elif error == ErrorCode.INVALID_REQUEST and "already losing" in (p.error_message or ""):
                print(CHANGING_WARNING)
            if error != ErrorCode.NONE:
                raise TopicCommandError(p.error_message or error.name)
        modes = {p.status_code for p in topic.partitions}
        state = "deleted" if modes == {MODE_NONE} else (
            f"read-only for {args.delete_partitions_delay} ms, then deleted")
        first, last = topic.partitions[0].partition_index, topic.partitions[-1].partition_index
        which = f"Partition {first} of" if first == last else f"Partitions {first}-{last} of"
        print(f"{which} {topic.name} {'is' if first == last else 'are'} {state}.")


def _delete(admin: AdminClient, args: argparse.Namespace) -> None:
    names = _require_topics(admin, args)
    if not names:
        return
    futures = admin.delete_topics(names, request_timeout=REQUEST_TIMEOUT_S)
    for name in names:
        futures[name].result()


def _topic_configs(admin: AdminClient, names: list[str]
                   ) -> dict[str, tuple[tuple[tuple[str, str], ...], int | None]]:
    """Each topic's own config overrides (DYNAMIC_TOPIC_CONFIG entries), as --describe shows
    them, and its effective min.insync.replicas (for the min-ISR filters)."""
    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    out: dict[str, tuple[tuple[tuple[str, str], ...], int | None]] = {}
    for resource, future in futures.items():
        entries = future.result()
        overrides = sorted(
            (entry.name, "<sensitive>" if entry.is_sensitive else str(entry.value))
            for entry in entries.values()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        min_isr = entries.get("min.insync.replicas")
        out[resource.name] = (tuple(overrides),
                              None if min_isr is None or min_isr.value is None
                              else int(min_isr.value))
    return out


def describe_topics(admin: AdminClient, names: list[str],
                    chunks: dict[tuple[str, int], PartitionChunks] | None = None,
                    eligible: dict[tuple[str, int], EligibleLeaders] | None = None
                    ) -> list[TopicRow]:
    """Partition layout and overrides of the named topics, sorted by name; `chunks` are the
    inactive chunks of the partitions that have some (cli/chunks.py partition_chunks),
    `eligible` their eligible leader replicas (`eligible_leaders`)."""
    if not names:
        return []
    futures = admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
    configs = _topic_configs(admin, names)
    rows: list[TopicRow] = []
    for name in sorted(names):
        description = futures[name].result()
        partitions = tuple(
            PartitionRow(
                partition=p.id,
                leader=None if p.leader is None or p.leader.id < 0 else p.leader.id,
                replicas=tuple(node.id for node in p.replicas),
                isr=tuple(node.id for node in p.isr),
                chunks=(chunks or {}).get((name, p.id)),
                eligible=(eligible or {}).get((name, p.id)),
            )
            for p in sorted(description.partitions, key=lambda p: p.id))
        overrides, min_isr = configs.get(name, ((), None))
        rows.append(TopicRow(name, _kafka_uuid(str(description.topic_id)), partitions,
                             overrides, min_isr))
    return rows


def _kafka_uuid(text: str) -> str:
    """Kafka prints ids in URL-safe base64; confluent-kafka's Uuid uses the standard alphabet."""
    return text.replace("+", "-").replace("/", "_").rstrip("=")


def format_chunk_lines(chunks: PartitionChunks) -> list[str]:
    """Under a partition line: each inactive chunk, oldest first (offsets inclusive: read up to
    StopOffset, stored up to EndOffset), then where the active chunk starts."""
    lines = [f"\t\tChunk: inactive\tStartOffset: {c.start_offset}\tStopOffset: {c.stop_offset}"
             f"\tEndOffset: {c.end_offset}\tReplicas: {','.join(map(str, c.replicas))}"
             f"\tIsr: {','.join(map(str, c.isr))}" for c in chunks.chunks]
    lines.append(f"\t\tChunk: active\tStartOffset: {chunks.start_offset}")
    return lines


def format_topic_lines(row: TopicRow, partition_filter: set[int] | None = None) -> list[str]:
    """kafka-topics.sh --describe lines: one topic line then one line per partition, followed
    by its chunk lines when it has inactive chunks."""
    replication_factor = len(row.partitions[0].replicas) if row.partitions else 0
    configs = ",".join(f"{k}={v}" for k, v in row.configs)
    lines = [f"Topic: {row.name}\tTopicId: {row.topic_id}\tPartitionCount: {len(row.partitions)}"
             f"\tReplicationFactor: {replication_factor}\tConfigs: {configs}"]
    for p in row.partitions:
        if partition_filter is not None and p.partition not in partition_filter:
            continue
        leader = "none" if p.leader is None else str(p.leader)
        elr, last_known = (("N/A", "N/A") if p.eligible is None else
                           tuple(",".join(map(str, ids)) for ids in p.eligible))
        lines.append(
            f"\tTopic: {row.name}\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            f"\tElr: {elr}\tLastKnownElr: {last_known}")
        if p.chunks is not None:
            lines += format_chunk_lines(p.chunks)
    return lines


def _chunks(args: argparse.Namespace, names: list[str]
            ) -> dict[tuple[str, int], PartitionChunks]:
    """The partitions with inactive chunks; a warning on stderr (and no chunk lines) when no
    broker answers our Metadata request, which speaks PLAINTEXT only."""
    conf = client_config(args.bootstrap_server, args.command_config, [], "--command-config")
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        print(f"WARNING: partition chunks not shown: they are read over PLAINTEXT only, "
              f"not {protocol}", file=sys.stderr)
        return {}
    try:
        return partition_chunks(args.bootstrap_server, names, REQUEST_TIMEOUT_S)
    except (ChunkCommandError, UsageError) as exc:
        print(f"WARNING: partition chunks not shown: {exc}", file=sys.stderr)
        return {}


EligibleLeaders = tuple[tuple[int, ...], tuple[int, ...]]


def eligible_leaders(bootstrap: str, topics: list[str],
                     timeout_s: float = REQUEST_TIMEOUT_S
                     ) -> dict[tuple[str, int], EligibleLeaders]:
    """(ELR, last known ELR) of every partition of `topics`, from one bootstrap broker's
    DescribeTopicPartitions (KIP-966), page after page; ChunkCommandError when no broker
    answers."""
    Request = registry().requests[ApiKey.DESCRIBE_TOPIC_PARTITIONS].cls
    found: dict[tuple[str, int], EligibleLeaders] = {}
    if not topics:
        return found
    conn = connect_bootstrap(bootstrap, timeout_s)
    cursor = None
    try:
        while True:
            answer = conn.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, Request(
                topics=[Request.TopicRequest(name=t) for t in sorted(set(topics))],
                response_partition_limit=2000, cursor=cursor))
            for topic in answer.topics:
                for p in topic.partitions if not topic.error_code else ():
                    found[(topic.name, p.partition_index)] = (
                        tuple(p.eligible_leader_replicas or ()), tuple(p.last_known_elr or ()))
            if answer.next_cursor is None:
                return found
            cursor = Request.Cursor(topic_name=answer.next_cursor.topic_name,
                                    partition_index=answer.next_cursor.partition_index)
    except TRANSPORT_ERRORS as exc:
        raise ChunkCommandError(f"DescribeTopicPartitions from {conn.address} failed: "
                                f"{exc}") from None
    finally:
        conn.close()


def _eligible(args: argparse.Namespace, names: list[str]
              ) -> dict[tuple[str, int], EligibleLeaders]:
    """The partitions' ELR over PLAINTEXT, as `_chunks` reads chunks; none ("N/A") else."""
    conf = client_config(args.bootstrap_server, args.command_config, [], "--command-config")
    if conf.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        return {}
    try:
        return eligible_leaders(args.bootstrap_server, names)
    except (ChunkCommandError, UsageError):
        return {}


def _describe(admin: AdminClient, args: argparse.Namespace) -> None:
    names = _require_topics(admin, args)
    rows = describe_topics(admin, names, _chunks(args, names), _eligible(args, names))
    only_problems = any(_is_set(args, flag) for flag in PARTITION_REPORTS)
    if args.topics_with_overrides:
        rows = [row for row in rows if row.configs]
    if args.table:
        _print_table(rows)
        return
    for row in rows:
        if args.topics_with_overrides:  # topic lines only, as kafka-topics.sh
            print(format_topic_lines(row)[0])
        elif not only_problems:
            print("\n".join(format_topic_lines(row)))
        else:
            # With a partition filter kafka-topics.sh prints only the matching partition lines.
            for p in row.partitions:
                if _reported(args, row, p):
                    print("\n".join(format_topic_lines(row, {p.partition})[1:]))


def _reported(args: argparse.Namespace, row: TopicRow, p: PartitionRow) -> bool:
    """Whether a partition passes one of --describe's partition filters; a partition without
    a leader is under its min ISR whatever its ISR, as kafka-topics.sh counts it."""
    if args.under_replicated_partitions and len(p.isr) < len(p.replicas):
        return True
    if args.unavailable_partitions and p.leader is None:
        return True
    if row.min_isr is None:
        return False
    if args.under_min_isr_partitions and (p.leader is None or len(p.isr) < row.min_isr):
        return True
    return bool(args.at_min_isr_partitions and len(p.isr) == row.min_isr)


def _print_table(rows: list[TopicRow]) -> None:
    from rich.console import Console
    from rich.table import Table

    with_chunks = any(p.chunks is not None for row in rows for p in row.partitions)
    columns = ["Topic", "Partition", "Leader", "Replicas", "Isr", "Configs"]
    table = Table(*columns, *(["Chunks"] if with_chunks else []))
    for row in rows:
        configs = ",".join(f"{k}={v}" for k, v in row.configs)
        for p in row.partitions:
            cells = [row.name, str(p.partition), "none" if p.leader is None else str(p.leader),
                     ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                     configs if p.partition == 0 else ""]
            if with_chunks:
                cells.append("" if p.chunks is None else chunk_cell(p.chunks))
            table.add_row(*cells)
    Console().print(table)


def chunk_cell(chunks: PartitionChunks) -> str:
    """--table's Chunks cell: one line per inactive chunk, then the active chunk's start."""
    def line(c: ChunkRow) -> str:
        return (f"{c.start_offset}-{c.stop_offset} (end {c.end_offset}) on "
                f"{','.join(map(str, c.replicas))}, isr {','.join(map(str, c.isr))}")
    return "\n".join([*map(line, chunks.chunks), f"active from {chunks.start_offset}"])
