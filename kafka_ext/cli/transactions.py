"""`kafka-ext transactions`: kafka-transactions.sh (KIP-664), finding and aborting hanging
transactions, with Kafka's subcommands, tables and messages.

- `list [--duration-filter MS]`: every transaction of every coordinator (ListTransactions at each
  broker): TransactionalId, Coordinator, ProducerId, TransactionState.
- `describe --transactional-id ID`: its coordinator's DescribeTransactions.
- `describe-producers --topic T --partition P [--broker-id N]`: the partition's active
  producers (DescribeProducers at its leader, or at the replica on broker N).
- `find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]`:
  open transactions older than the timeout (15 minutes) whose transaction coordinator does not
  hold the partition in the producer's transaction: what no coordinator will ever end, and
  what blocks every read_committed consumer at the partition's last stable offset.
- `abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E
  --coordinator-epoch C)`: an ABORT marker for that transaction (WriteTxnMarkers to the
  partition's leader, as Kafka's admin client sends it); with --start-offset the producer is
  the one whose open transaction starts there.

Tables are Kafka's (tables.pretty_table); failures print Kafka's message on stderr, exit 1.
`--command-config` takes the client properties of the other tools.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka_ext.cli.broker_connection import open_connection
from kafka_ext.cli.tables import pretty_table
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 30.0
FIND_COORDINATOR_VERSION = 4  # CoordinatorKeys
TRANSACTION_KEY_TYPE = 1
WRITE_TXN_MARKERS_VERSION = 1
ABORT = False  # WriteTxnMarkers' TransactionResult


class CommandFailed(Exception):
    """Kafka's printErrorAndExit: the message goes to stderr, exit 1."""


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """An active producer of a partition with a transaction open there."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "transactions", help="find and abort hanging transactions (kafka-transactions.sh)",
        description="This tool is used to analyze the transactional state of producers in the "
                    "cluster. It can be used to detect and recover from hanging transactions.")
    parser.add_argument("--bootstrap-server", required=True, metavar="host:port")
    parser.add_argument("--command-config", metavar="FILE")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int, metavar="MS")
    describe = commands.add_parser("describe",
                                   help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)
    producers = commands.add_parser(
        "describe-producers",
        help="describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int)
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int)
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES")
    hanging.add_argument("--topic")
    hanging.add_argument("--partition", type=int)
    abort = commands.add_parser("abort", help="abort a hanging transaction (requires "
                                              "administrative privileges)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster(args.bootstrap_server, args.command_config)
    try:
        output = COMMANDS[args.command](cluster, args)
    except CommandFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        cluster.close()
    sys.stdout.write(output)
    return 0


class Cluster:
    """Connections to the brokers, opened on first use, and the cluster's metadata."""

    def __init__(self, bootstrap: str, command_config: str | None) -> None:
        self.command_config = command_config
        self.bootstrap = self._open(bootstrap)
        self._to: dict[int, Any] = {}
        Metadata = registry().requests[ApiKey.METADATA].cls
        self.metadata = round_trip(self.bootstrap, ApiKey.METADATA, 12, Metadata(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        self.brokers = {b.node_id: b for b in self.metadata.brokers}

    def _open(self, address: str) -> Any:
        sock = open_connection(address, self.command_config, TIMEOUT_S)
        identify(sock, "apache-kafka-java")
        return sock

    def to(self, broker_id: int) -> Any:
        if broker_id not in self._to:
            broker = self.brokers.get(broker_id)
            if broker is None:
                raise CommandFailed(f"Broker {broker_id} is not in the cluster's metadata")
            self._to[broker_id] = self._open(f"{broker.host}:{broker.port}")
        return self._to[broker_id]

    def call(self, broker_id: int, api_key: int, version: int, body: Any) -> Any:
        return round_trip(self.to(broker_id), api_key, version, body)

    def leader(self, topic: str, partition: int) -> int:
        for t in self.metadata.topics:
            if t.name == topic:
                for p in t.partitions:
                    if p.partition_index == partition and p.leader_id >= 0:
                        return int(p.leader_id)
        raise CommandFailed(f"{topic}-{partition} has no leader in the cluster's metadata")

    def partitions(self, topics: Iterable[str] | None, broker_id: int | None
                   ) -> list[tuple[str, int]]:
        """The partitions of `topics` (every topic, internal ones too, when None), those with
        a replica on `broker_id` when given."""
        wanted = None if topics is None else set(topics)
        return sorted((t.name, p.partition_index) for t in self.metadata.topics
                      if t.error_code == 0 and (wanted is None or t.name in wanted)
                      for p in t.partitions
                      if broker_id is None or broker_id in p.replica_nodes)

    def close(self) -> None:
        for sock in [self.bootstrap, *self._to.values()]:
            sock.close()


# -- list / describe --------------------------------------------------------------------------

def list_transactions(cluster: Cluster, args: argparse.Namespace) -> str:
    Request = registry().requests[ApiKey.LIST_TRANSACTIONS].cls
    rows = []
    for broker_id in sorted(cluster.brokers):
        answer = cluster.call(broker_id, ApiKey.LIST_TRANSACTIONS, 1, Request(
            state_filters=[], producer_id_filters=[],
            duration_filter=-1 if args.duration_filter is None else args.duration_filter))
        if answer.error_code:
            raise CommandFailed(_failure("Failed to list transactions", answer.error_code))
        rows += [[s.transactional_id, str(broker_id), str(s.producer_id), s.transaction_state]
                 for s in answer.transaction_states]
    return pretty_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                        rows)


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    Request = registry().requests[ApiKey.FIND_COORDINATOR].cls
    answer = round_trip(cluster.bootstrap, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                        Request(key_type=TRANSACTION_KEY_TYPE,
                                coordinator_keys=[transactional_id]))
    [found] = answer.coordinators
    if found.error_code:
        raise CommandFailed(_failure(f"Failed to describe transaction state of "
                                     f"transactional-id `{transactional_id}`",
                                     found.error_code, found.error_message))
    return int(found.node_id)


def describe_transactions(cluster: Cluster, transactional_ids: Iterable[str]) -> dict[str, Any]:
    """Each transactional id's TransactionState from its coordinator; None when unknown."""
    Request = registry().requests[ApiKey.DESCRIBE_TRANSACTIONS].cls
    found: dict[str, Any] = {}
    for transactional_id in transactional_ids:
        coordinator = coordinator_of(cluster, transactional_id)
        answer = cluster.call(coordinator, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                              Request(transactional_ids=[transactional_id]))
        [state] = answer.transaction_states
        if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            found[transactional_id] = None
        elif state.error_code:
            raise CommandFailed(_failure(f"Failed to describe transaction state of "
                                         f"transactional-id `{transactional_id}`",
                                         state.error_code))
        else:
            found[transactional_id] = (coordinator, state)
    return found


def describe(cluster: Cluster, args: argparse.Namespace) -> str:
    found = describe_transactions(cluster, [args.transactional_id])[args.transactional_id]
    if found is None:
        raise CommandFailed(_failure(f"Failed to describe transaction state of transactional-id "
                                     f"`{args.transactional_id}`",
                                     ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
    coordinator, state = found
    started = state.transaction_start_time_ms
    row = [str(coordinator), args.transactional_id, str(state.producer_id),
           str(state.producer_epoch), state.transaction_state,
           str(state.transaction_timeout_ms),
           str(started) if started >= 0 else "None",
           str(int(time.time() * 1000) - started) if started >= 0 else "None",
           ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)]
    return pretty_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                         "TransactionState", "TransactionTimeoutMs",
                         "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                         "TopicPartitions"], [row])


# -- producers ----------------------------------------------------------------------------------

def active_producers(cluster: Cluster, partitions: list[tuple[str, int]],
                     broker_id: int | None) -> dict[tuple[str, int], list[Any]]:
    """Each partition's active producers, from its leader (or the replica on `broker_id`)."""
    Request = registry().requests[ApiKey.DESCRIBE_PRODUCERS].cls
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for tp in partitions:
        by_broker.setdefault(broker_id if broker_id is not None else cluster.leader(*tp),
                             []).append(tp)
    found: dict[tuple[str, int], list[Any]] = {}
    for target, tps in by_broker.items():
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        answer = cluster.call(target, ApiKey.DESCRIBE_PRODUCERS, 0, Request(topics=[
            Request.TopicRequest(name=t, partition_indexes=ps) for t, ps in topics.items()]))
        for topic in answer.topics:
            for p in topic.partitions:
                if p.error_code:
                    where = f"broker {broker_id}" if broker_id is not None else "leader"
                    raise CommandFailed(_failure(
                        f"Failed to describe producers for partition {topic.name}-"
                        f"{p.partition_index} on {where}", p.error_code, p.error_message))
                found[(topic.name, p.partition_index)] = list(p.active_producers)
    return found


def describe_producers(cluster: Cluster, args: argparse.Namespace) -> str:
    tp = (args.topic, args.partition)
    producers = active_producers(cluster, [tp], args.broker_id)[tp]
    rows = [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
             str(p.last_sequence), str(p.last_timestamp),
             str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"]
            for p in producers]
    return pretty_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                         "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"], rows)


# -- find-hanging -------------------------------------------------------------------------------

def find_hanging(cluster: Cluster, args: argparse.Namespace) -> str:
    if args.topic is None and args.broker_id is None:
        raise CommandFailed("The `find-hanging` command requires either --topic or "
                            "--broker-id to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise CommandFailed("The --partition argument requires --topic to be provided")
    if args.topic is not None and args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        partitions = cluster.partitions(None if args.topic is None else [args.topic],
                                        args.broker_id)
    now_ms = int(time.time() * 1000)
    candidates = [
        OpenTransaction(tp[0], tp[1], p.producer_id, p.producer_epoch, p.coordinator_epoch,
                        p.current_txn_start_offset, p.last_timestamp)
        for tp, producers in active_producers(cluster, partitions, args.broker_id).items()
        for p in producers
        if p.current_txn_start_offset >= 0
        and now_ms - p.last_timestamp > args.max_transaction_timeout * 60_000]
    transactional_ids = transactional_ids_of(cluster, {c.producer_id for c in candidates})
    descriptions = describe_transactions(cluster, set(transactional_ids.values()))
    rows = [[t.topic, str(t.partition), str(t.producer_id), str(t.producer_epoch),
             str(t.coordinator_epoch), str(t.start_offset), str(t.last_timestamp),
             str((now_ms - t.last_timestamp) // 60_000)]
            for t in hanging(candidates, transactional_ids, descriptions)]
    return pretty_table(["Topic", "Partition", "ProducerId", "ProducerEpoch",
                         "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"],
                        rows)


def transactional_ids_of(cluster: Cluster, producer_ids: set[int]) -> dict[int, str]:
    """producer id -> transactional id, for those a coordinator lists."""
    if not producer_ids:
        return {}
    Request = registry().requests[ApiKey.LIST_TRANSACTIONS].cls
    found: dict[int, str] = {}
    for broker_id in sorted(cluster.brokers):
        answer = cluster.call(broker_id, ApiKey.LIST_TRANSACTIONS, 1, Request(
            state_filters=[], producer_id_filters=sorted(producer_ids), duration_filter=-1))
        if answer.error_code:
            raise CommandFailed(_failure(f"Failed to list transactions for "
                                         f"{len(producer_ids)} producers", answer.error_code))
        for state in answer.transaction_states:
            if state.producer_id in producer_ids:
                found[state.producer_id] = state.transactional_id
    return found


def hanging(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, Any]) -> list[OpenTransaction]:
    """Kafka's rule: an open transaction hangs unless its producer's coordinator holds the
    partition in the transaction it describes (that one the coordinator ends, or times out)."""
    out = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer_id)
        described = descriptions.get(transactional_id) if transactional_id else None
        if described is None or not any(
                t.topic == candidate.topic and candidate.partition in t.partitions
                for t in described[1].topics):
            out.append(candidate)
    return out


# -- abort --------------------------------------------------------------------------------------

def abort(cluster: Cluster, args: argparse.Namespace) -> str:
    tp = (args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CommandFailed("The transaction to abort must be identified either with "
                            "--start-offset (for brokers on 3.0 or above) or with "
                            "--producer-id, --producer-epoch, and --coordinator-epoch (for "
                            "older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise CommandFailed("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CommandFailed("Missing required argument --coordinator-epoch")
        spec = (args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0))
    else:
        producers = active_producers(cluster, [tp], None)[tp]
        found = next((p for p in producers if p.current_txn_start_offset == args.start_offset),
                     None)
        if found is None:
            raise CommandFailed(f"Could not find any open transactions starting at offset "
                                f"{args.start_offset} on partition {args.topic}-"
                                f"{args.partition}")
        spec = (found.producer_id, found.producer_epoch, max(found.coordinator_epoch, 0))
    producer_id, producer_epoch, coordinator_epoch = spec
    Request = registry().requests[ApiKey.WRITE_TXN_MARKERS].cls
    answer = cluster.call(cluster.leader(*tp), ApiKey.WRITE_TXN_MARKERS,
                          WRITE_TXN_MARKERS_VERSION, Request(markers=[Request.WritableTxnMarker(
                              producer_id=producer_id, producer_epoch=producer_epoch,
                              transaction_result=ABORT, coordinator_epoch=coordinator_epoch,
                              topics=[Request.WritableTxnMarkerTopic(
                                  name=args.topic, partition_indexes=[args.partition])])]))
    code = answer.markers[0].topics[0].partitions[0].error_code
    if code:
        raise CommandFailed(_failure(
            f"Failed to abort transaction AbortTransactionSpec(topicPartition={args.topic}-"
            f"{args.partition}, producerId={producer_id}, producerEpoch={producer_epoch}, "
            f"coordinatorEpoch={coordinator_epoch})", code))
    return ""


def _failure(message: str, code: int, detail: str | None = None) -> str:
    """Kafka's printErrorAndExit(message, cause)."""
    reason = detail or ErrorCode(code).name
    return f"{message}: {reason}. Enable debug logging for additional detail."


COMMANDS = {"list": list_transactions, "describe": describe,
            "describe-producers": describe_producers, "find-hanging": find_hanging,
            "abort": abort}

