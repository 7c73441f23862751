"""`kafka-ext chunks`: kafka-chunks.sh of the chunks proposal (seed 000's ChunkCommand).

- `create --create-chunk-json-file f.json` ({"partitions":[{"topic":..,"partition":..,
  "replicas":[..]}]}) closes the active chunk of each partition and opens a new one on
  `replicas`. Each entry goes to its partition's current leader (a Metadata request finds it;
  the leader fills in the offsets), one CreateChunks per leader; entries a broker refuses
  because it no longer leads the partition are retried against the new leader a few times.
- `alter --alter-chunk-json-file f.json` ({"chunks":[{"topic":..,"partition":..,
  "startOffset":..,"replicas":[..],"chunkEpoch":..}]}, chunkEpoch optional, -1 = not checked)
  moves the replicas of inactive chunks: one AlterChunkAssignments to the bootstrap broker,
  which forwards it to the active controller. The new replicas copy the chunk before the old
  ones drop it; `kafka-ext topics --describe` shows where each chunk is.

Both print one line per entry and exit 1 when any failed (2 for a malformed file). The requests
(our keys 76 and 77) go through our codec on connections that name our client (probe.identify):
only those are served the extension APIs. `partition_chunks` reads the chunks Metadata v12
carries in tagged fields, for `kafka-ext topics --describe`.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.cli.client_config import UsageError
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.messages import registry

REQUEST_TIMEOUT_S = 30.0
# What a request over a blocking socket may raise: the socket's errors (timeouts, a closed
# connection) and an answer our codec cannot decode.
TRANSPORT_ERRORS = (OSError, DecodeError)
# A leader waits up to 10 s per entry for its followers before closing a chunk
# (server/chunks.py CATCH_UP_TIMEOUT_S); entries to one leader are handled one after another.
CATCH_UP_PER_ENTRY_S = 10.0
METADATA_VERSION = 12  # flexible (v9+): the chunks are tagged fields of the partitions
CREATE_ATTEMPTS = 5
RETRY_BACKOFF_S = 0.5
# Refusals that mean "ask the partition's new leader": the broker did nothing.
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})
Partition = tuple[str, int]


class ChunkCommandError(Exception):
    """The cluster cannot be asked (no broker reachable, the keys not served); exit code 1."""


@dataclass(frozen=True, slots=True)
class NewChunk:
    """One entry of the create file: a new active chunk of a partition on `replicas`."""

    topic: str
    partition: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChunkMove:
    """One entry of the alter file: the inactive chunk starting at `start_offset` to
    `replicas` (`chunk_epoch` -1: not checked)."""

    topic: str
    partition: int
    start_offset: int
    replicas: tuple[int, ...]
    chunk_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """An inactive chunk as Metadata shows it (offsets inclusive)."""

    start_offset: int
    stop_offset: int
    end_offset: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PartitionChunks:
    """A partition's active chunk start and its inactive chunks, oldest first."""

    start_offset: int
    chunks: tuple[ChunkRow, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to one entry: ErrorCode.NONE, or the refusal and its message."""

    error: ErrorCode
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE

    def describe(self) -> str:
        return f"{self.error.name}: {self.message}" if self.message else self.error.name


def outcome_of(code: int, message: str | None) -> Outcome:
    """An answer's error code and message; a code we do not know keeps its number."""
    try:
        return Outcome(ErrorCode(code), message)
    except ValueError:
        return Outcome(ErrorCode.UNKNOWN_SERVER_ERROR,
                       f"error code {code}" + (f": {message}" if message else ""))


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `chunks` with the proposal's kafka-chunks.sh flags."""
    parser = subparsers.add_parser(
        "chunks", help="create partition chunks and move their replicas (kafka-chunks.sh)",
        description="Close the active chunk of partitions and open a new one on other brokers "
                    "(create), or move the replicas of inactive chunks (alter).")
    parser.add_argument("action", choices=("create", "alter"),
                        help="create: new active chunks; alter: move inactive chunks")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--create-chunk-json-file", metavar="FILE",
                        help='with create: {"partitions":[{"topic":..,"partition":..,'
                             '"replicas":[..]}]}')
    parser.add_argument("--alter-chunk-json-file", metavar="FILE",
                        help='with alter: {"chunks":[{"topic":..,"partition":..,'
                             '"startOffset":..,"replicas":[..]}]} ("chunkEpoch" optional)')
    parser.set_defaults(run=run)


# -- the JSON files ------------------------------------------------------------------------------


def _field(entry: dict[str, Any], where: str, name: str) -> Any:
    if name not in entry:
        raise UsageError(f"{where}: missing field \"{name}\"")
    return entry[name]


def _int(value: Any, where: str, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where}: \"{name}\" must be an integer, got {json.dumps(value)}")
    if value < minimum:
        raise UsageError(f"{where}: \"{name}\" must be at least {minimum}, got {value}")
    return value


def _entries(text: str, key: str, fields: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """(where, entry) of the document's `key` list; UsageError for a malformed document or an
    entry with unknown fields (a misspelled "chunkEpoch" must not pass unchecked)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"expected a JSON object with a \"{key}\" list")
    unknown = sorted(set(document) - {key, "version"})
    if unknown:
        raise UsageError(f"unknown field \"{unknown[0]}\" (expected \"{key}\")")
    entries = _field(document, "the file", key)
    if not isinstance(entries, list):
        raise UsageError(f"\"{key}\" must be a list, got {json.dumps(entries)}")
    if not entries:
        raise UsageError(f"\"{key}\" is empty: nothing to do")
    found = []
    for index, entry in enumerate(entries):
        where = f"{key}[{index}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: expected an object, got {json.dumps(entry)}")
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise UsageError(f"{where}: unknown field \"{unknown[0]}\" (expected "
                             + ", ".join(f'"{f}"' for f in sorted(fields)) + ")")
        found.append((where, entry))
    return found


def _topic_partition(entry: dict[str, Any], where: str) -> Partition:
    topic = _field(entry, where, "topic")
    if not isinstance(topic, str) or not topic:
        raise UsageError(f"{where}: \"topic\" must be a non-empty string, got {json.dumps(topic)}")
    return topic, _int(_field(entry, where, "partition"), where, "partition", 0)


def _replicas(entry: dict[str, Any], where: str) -> tuple[int, ...]:
    replicas = _field(entry, where, "replicas")
    if not isinstance(replicas, list) or not replicas:
        raise UsageError(f"{where}: \"replicas\" must be a non-empty list of broker ids, got "
                         f"{json.dumps(replicas)}")
    ids = tuple(_int(r, where, "replicas", 0) for r in replicas)
    if len(set(ids)) != len(ids):
        raise UsageError(f"{where}: \"replicas\" {list(ids)} names a broker twice")
    return ids


def parse_create(text: str) -> list[NewChunk]:
    """The entries of a create-chunk JSON document, in the file's order; UsageError when it
    is malformed or names a partition twice."""
    wanted: list[NewChunk] = []
    seen: dict[Partition, str] = {}
    for where, entry in _entries(text, "partitions", {"topic", "partition", "replicas"}):
        topic, partition = _topic_partition(entry, where)
        if (topic, partition) in seen:
            raise UsageError(f"{where}: {topic}-{partition} is already listed in "
                             f"{seen[(topic, partition)]}")
        seen[(topic, partition)] = where
        wanted.append(NewChunk(topic, partition, _replicas(entry, where)))
    return wanted


def parse_alter(text: str) -> list[ChunkMove]:
    """The entries of an alter-chunk JSON document, in the file's order; UsageError when it is
    malformed or names a chunk (topic, partition, startOffset) twice."""
    wanted: list[ChunkMove] = []
    seen: dict[tuple[str, int, int], str] = {}
    fields = {"topic", "partition", "startOffset", "replicas", "chunkEpoch"}
    for where, entry in _entries(text, "chunks", fields):
        topic, partition = _topic_partition(entry, where)
        start = _int(_field(entry, where, "startOffset"), where, "startOffset", 0)
        epoch = _int(entry.get("chunkEpoch", -1), where, "chunkEpoch", -1)
        if (topic, partition, start) in seen:
            raise UsageError(f"{where}: the chunk of {topic}-{partition} starting at {start} "
                             f"is already listed in {seen[(topic, partition, start)]}")
        seen[(topic, partition, start)] = where
        wanted.append(ChunkMove(topic, partition, start, _replicas(entry, where), epoch))
    return wanted


def _read(path: str | None, flag: str, action: str) -> str:
    if path is None:
        raise UsageError(f"{flag} is required with {action}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


# -- talking to brokers --------------------------------------------------------------------------


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """(host, port) of each comma-separated HOST:PORT ([v6]:PORT too); UsageError otherwise."""
    found = []
    for item in bootstrap.split(","):
        item = item.strip()
        host, _, port = item.rpartition(":")
        if not item or not port.isdigit():
            raise UsageError(f"--bootstrap-server {bootstrap!r}: expected HOST:PORT[,HOST:PORT]")
        found.append((host.strip("[]") or "localhost", int(port)))
    return found


class BrokerConnection:
    """A blocking connection that named our client (ApiVersions v3): the extension keys are
    served on it. Requests are answered in order, one at a time."""

    def __init__(self, host: str, port: int, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.address = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            versions = identify(self.sock)
        except DecodeError as exc:  # not a Kafka broker
            self.sock.close()
            raise ConnectionError(f"not a Kafka answer to ApiVersions: {exc}") from None
        except BaseException:
            self.sock.close()
            raise
        self.api_keys = {k.api_key for k in versions.api_keys} if not versions.error_code \
            else set()
        self._correlation = 0

    def request(self, api_key: int, version: int, body: Any,
                timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        self._correlation += 1
        self.sock.settimeout(timeout_s)
        return round_trip(self.sock, api_key, version, body, self._correlation)

    def require(self, api_key: ApiKey) -> None:
        if api_key not in self.api_keys:
            raise ChunkCommandError(f"the broker at {self.address} does not serve "
                                    f"{api_key.name} (API key {int(api_key)}): not a kafka-ext "
                                    "broker with chunks")

    def close(self) -> None:
        self.sock.close()


def connect_bootstrap(bootstrap: str, timeout_s: float = REQUEST_TIMEOUT_S) -> BrokerConnection:
    """A connection to the first reachable --bootstrap-server broker."""
    failures = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            return BrokerConnection(host, port, timeout_s)
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc}")
    raise ChunkCommandError("cannot reach any bootstrap server: " + "; ".join(failures))


def metadata(conn: BrokerConnection, topics: Iterable[str]) -> Any:
    """Metadata v12 of `topics` (never auto-created) from one broker."""
    Request = registry().requests[ApiKey.METADATA].cls
    return conn.request(ApiKey.METADATA, METADATA_VERSION, Request(
        topics=[Request.MetadataRequestTopic(name=t) for t in sorted(set(topics))],
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def chunks_by_partition(answer: Any) -> dict[Partition, PartitionChunks]:
    """The chunks of every partition of a Metadata answer that has inactive chunks."""
    found = {}
    for topic in answer.topics:
        if topic.error_code or topic.name is None:
            continue
        for p in topic.partitions:
            if p.chunks:
                found[(topic.name, p.partition_index)] = PartitionChunks(p.start_offset, tuple(
                    ChunkRow(c.start_offset, c.stop_offset, c.end_offset,
                             tuple(c.replica_nodes), tuple(c.isr_nodes)) for c in p.chunks))
    return found


def partition_chunks(bootstrap: str, topics: list[str],
                     timeout_s: float = REQUEST_TIMEOUT_S) -> dict[Partition, PartitionChunks]:
    """The partitions of `topics` with inactive chunks, from one bootstrap broker's Metadata;
    ChunkCommandError when no broker answers."""
    if not topics:
        return {}
    conn = connect_bootstrap(bootstrap, timeout_s)
    try:
        return chunks_by_partition(metadata(conn, topics))
    except TRANSPORT_ERRORS as exc:
        raise ChunkCommandError(f"Metadata from {conn.address} failed: {exc}") from None
    finally:
        conn.close()


def leaders(answer: Any, wanted: Iterable[Partition]
            ) -> tuple[dict[Partition, int], dict[Partition, Outcome]]:
    """(leader per partition, refusal per partition without a usable one) of a Metadata
    answer; LEADER_NOT_AVAILABLE for a leaderless partition (retriable)."""
    topics = {t.name: t for t in answer.topics}
    led: dict[Partition, int] = {}
    refused: dict[Partition, Outcome] = {}
    for topic, partition in wanted:
        found = topics.get(topic)
        if found is None or found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            refused[(topic, partition)] = Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  f"topic {topic} does not exist")
            continue
        if found.error_code:
            refused[(topic, partition)] = outcome_of(found.error_code, None)
            continue
        part = next((p for p in found.partitions if p.partition_index == partition), None)
        if part is None:
            refused[(topic, partition)] = Outcome(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic} has no partition {partition}")
        elif part.leader_id < 0:
            refused[(topic, partition)] = Outcome(ErrorCode.LEADER_NOT_AVAILABLE,
                                                  f"{topic}-{partition} has no leader")
        else:
            led[(topic, partition)] = part.leader_id
    return led, refused


def group_by_leader(entries: Iterable[NewChunk], led: dict[Partition, int]
                    ) -> dict[int, list[NewChunk]]:
    """The entries with a known leader, per leader, in the file's order."""
    groups: dict[int, list[NewChunk]] = {}
    for entry in entries:
        leader = led.get((entry.topic, entry.partition))
        if leader is not None:
            groups.setdefault(leader, []).append(entry)
    return groups


# SendCreate(leader id, (host, port), entries) -> an outcome per entry; raises OSError when
# the leader cannot be reached (nothing was sent: safe to retry) and Unanswered after sending.
SendCreate = Callable[[int, tuple[str, int], list[NewChunk]], list[Outcome]]


class Unanswered(Exception):
    """CreateChunks was sent but no answer came: the chunk may or may not exist now, so the
    entries are not retried (a second chunk would be created)."""


def send_create_chunks(leader: int, address: tuple[str, int],
                       entries: list[NewChunk]) -> list[Outcome]:
    """One CreateChunks to the leader `leader` at `address`: an outcome per entry."""
    Request = registry().requests[ApiKey.CREATE_CHUNKS].cls
    conn = BrokerConnection(*address)  # OSError: nothing sent, safe to retry
    try:
        try:
            conn.require(ApiKey.CREATE_CHUNKS)
        except ChunkCommandError as exc:
            return [Outcome(ErrorCode.UNSUPPORTED_VERSION, str(exc))] * len(entries)
        body = Request(topic_partitions=[Request.CreateChunksTopicPartition(
            topic_name=e.topic, partition_id=e.partition, broker_ids=list(e.replicas),
            start_offset=-1, start_timestamp=-1, prev_stop_offset=-1) for e in entries])
        timeout = REQUEST_TIMEOUT_S + CATCH_UP_PER_ENTRY_S * len(entries)
        try:
            answer = conn.request(ApiKey.CREATE_CHUNKS, 0, body, timeout)
        except TRANSPORT_ERRORS as exc:
            raise Unanswered(f"no answer from broker {leader} at {conn.address}: {exc}; "
                              "check with kafka-ext topics --describe whether the chunk was "
                              "created") from None
    finally:
        conn.close()
    by_partition = {(r.topic_name, r.partition_id): outcome_of(r.error_code, r.error_message)
                    for r in answer.results}
    return [by_partition.get((e.topic, e.partition),
                             Outcome(ErrorCode.UNKNOWN_SERVER_ERROR, "no result in the answer"))
            for e in entries]


def create_chunks(bootstrap: BrokerConnection, entries: list[NewChunk],
                  send: SendCreate = send_create_chunks, attempts: int = CREATE_ATTEMPTS,
                  backoff_s: float = RETRY_BACKOFF_S) -> dict[Partition, Outcome]:
    """Send each entry to its partition's leader; entries refused because the leader moved
    (or unreachable before anything was sent) are retried with fresh metadata up to
    `attempts` rounds. An outcome per partition."""
    outcomes: dict[Partition, Outcome] = {}
    pending = list(entries)
    for attempt in range(attempts):
        retry: set[Partition] = set()
        if attempt:
            time.sleep(backoff_s)
            try:
                answer = metadata(bootstrap, {e.topic for e in pending})
            except TRANSPORT_ERRORS:
                break  # keep the refusals we have rather than lose the other entries' results
        else:
            answer = metadata(bootstrap, {e.topic for e in pending})
        addresses = {b.node_id: (b.host, b.port) for b in answer.brokers}
        led, refused = leaders(answer, [(e.topic, e.partition) for e in pending])
        outcomes.update(refused)
        retry.update(tp for tp, o in refused.items() if o.error in RETRIABLE)
        for leader, group in group_by_leader(pending, led).items():
            keys = [(e.topic, e.partition) for e in group]
            if leader not in addresses:
                answers = [Outcome(ErrorCode.LEADER_NOT_AVAILABLE,
                                   f"leader {leader} is not a live broker")] * len(group)
            else:
                host, port = addresses[leader]
                try:
                    answers = send(leader, (host, port), group)
                except OSError as exc:  # nothing was sent: retry, the leader may have moved
                    answers = [Outcome(ErrorCode.NETWORK_EXCEPTION, f"cannot reach broker "
                                       f"{leader} at {host}:{port}: {exc}")] * len(group)
                    retry.update(keys)
                except Unanswered as exc:
                    answers = [Outcome(ErrorCode.NETWORK_EXCEPTION, str(exc))] * len(group)
            for key, outcome in zip(keys, answers, strict=True):
                outcomes[key] = outcome
                if outcome.error in RETRIABLE:
                    retry.add(key)
        pending = [e for e in pending if (e.topic, e.partition) in retry]
        if not pending:
            break
    return outcomes


def alter_chunks(conn: BrokerConnection, moves: list[ChunkMove]
                 ) -> dict[tuple[str, int, int], Outcome]:
    """One AlterChunkAssignments to the bootstrap broker: an outcome per chunk."""
    conn.require(ApiKey.ALTER_CHUNK_ASSIGNMENTS)
    Request = registry().requests[ApiKey.ALTER_CHUNK_ASSIGNMENTS].cls
    answer = conn.request(ApiKey.ALTER_CHUNK_ASSIGNMENTS, 0, Request(chunks=[
        Request.AlterChunkAssignment(topic_name=m.topic, partition_id=m.partition,
                                     start_offset=m.start_offset, chunk_epoch=m.chunk_epoch,
                                     broker_ids=list(m.replicas)) for m in moves]))
    found = {(r.topic_name, r.partition_id, r.start_offset): outcome_of(r.error_code,
                                                                        r.error_message)
             for r in answer.results}
    return {(m.topic, m.partition, m.start_offset): found.get(
        (m.topic, m.partition, m.start_offset),
        Outcome(ErrorCode.UNKNOWN_SERVER_ERROR, "no result in the answer")) for m in moves}


# -- the output ----------------------------------------------------------------------------------


def create_line(entry: NewChunk, outcome: Outcome) -> str:
    name = f"{entry.topic}-{entry.partition}"
    if outcome.ok:
        return f"Created a chunk of {name} on brokers {list(entry.replicas)}"
    return f"Failed to create a chunk of {name}: {outcome.describe()}"


def alter_line(move: ChunkMove, outcome: Outcome) -> str:
    name = f"{move.topic}-{move.partition}"
    if outcome.ok:
        return (f"Started moving the chunk of {name} starting at offset {move.start_offset} "
                f"to brokers {list(move.replicas)}")
    return (f"Failed to move the chunk of {name} starting at offset {move.start_offset}: "
            f"{outcome.describe()}")


# -- the actions ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.action == "create":
        if args.alter_chunk_json_file is not None:
            raise UsageError("--alter-chunk-json-file is only valid with alter")
        entries: list[Any] = parse_create(
            _read(args.create_chunk_json_file, "--create-chunk-json-file", "create"))
    else:
        if args.create_chunk_json_file is not None:
            raise UsageError("--create-chunk-json-file is only valid with create")
        entries = parse_alter(
            _read(args.alter_chunk_json_file, "--alter-chunk-json-file", "alter"))
    try:
        conn = connect_bootstrap(args.bootstrap_server)
        try:
            if args.action == "create":
                return _report_create(entries, create_chunks(conn, entries))
            return _report_alter(entries, alter_chunks(conn, entries))
        except TRANSPORT_ERRORS as exc:
            raise ChunkCommandError(f"request to {conn.address} failed: {exc}") from None
        finally:
            conn.close()
    except ChunkCommandError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def _report_create(entries: list[NewChunk], outcomes: dict[Partition, Outcome]) -> int:
    failed = False
    for entry in entries:
        outcome = outcomes[(entry.topic, entry.partition)]
        failed |= not outcome.ok
        print(create_line(entry, outcome), file=sys.stdout if outcome.ok else sys.stderr)
    return 1 if failed else 0


def _report_alter(moves: list[ChunkMove],
                  outcomes: dict[tuple[str, int, int], Outcome]) -> int:
    failed = False
    for move in moves:
        outcome = outcomes[(move.topic, move.partition, move.start_offset)]
        failed |= not outcome.ok
        print(alter_line(move, outcome), file=sys.stdout if outcome.ok else sys.stderr)
    if not failed:
        print("The new replicas copy the chunks before the old ones drop them; follow the moves "
              "with kafka-ext topics --describe.")
    return 1 if failed else 0
