"""Broker and topic configuration: mirrors Kafka's KafkaConfig, LogConfig and ConfigDef.

A broker reads `server.properties` (Java properties syntax, Kafka's key names), then `KAFKA_EXT_*`
environment variables, then command-line overrides; later sources win. Every key must be known
and every value must parse and validate, otherwise `ConfigError` names the key and the value so
start-up stops with that message. Topic configs (CreateTopics, AlterConfigs) are validated here
too, and DescribeConfigs entries (value, source, synonyms, type, documentation) are built here.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import NamedTuple

from kafka_ext.network.connection_quotas import parse_overrides
from kafka_ext.storage.formatter import random_uuid

_log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

ENV_PREFIX = "KAFKA_EXT_"
DEFAULT_LOG_DIR = "./kafka-ext-data"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Keys under this prefix configure one listener (`listener.name.sasl_ssl.ssl.keystore.location`);
# they are accepted as strings and handed to the network layer unchanged.
LISTENER_PREFIX = "listener.name."


class ConfigError(ValueError):
    """A configuration key is unknown or its value is malformed; the message names both."""

    def __init__(self, message: str, key: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value


class ConfigType(IntEnum):
    """Kafka's ConfigType numbers, as DescribeConfigs v3+ reports them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Kafka's ConfigSource numbers, as DescribeConfigs v1+ reports them."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6  # a logger's level (server/log4j_controller.py)
    GROUP_CONFIG = 8  # a group's own override (KIP-848/KIP-932 group configs)


# ---------------------------------------------------------------------------------------------
# Validators: each returns None when the typed value is acceptable, else the reason it is not.

Validator = Callable[[object], "str | None"]


@dataclass(frozen=True, slots=True)
class Between:
    """A number within [minimum, maximum]; either bound may be open (None)."""

    minimum: int | float | None = None
    maximum: int | float | None = None

    def __call__(self, value: object) -> str | None:
        if value is None:
            return None
        assert isinstance(value, int | float)
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum}"
        return None


def at_least(minimum: int | float) -> Between:
    """A number no smaller than `minimum`."""
    return Between(minimum, None)


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string from a fixed set; compared case-sensitively, as Kafka does."""

    choices: tuple[str, ...]

    def __call__(self, value: object) -> str | None:
        if value is None or value in self.choices:
            return None
        return f"must be one of {', '.join(self.choices)}"


@dataclass(frozen=True, slots=True)
class SubsetOf:
    """A list whose every element comes from a fixed set, without repeats."""

    choices: tuple[str, ...]
    non_empty: bool = False

    def __call__(self, value: object) -> str | None:
        if value is None:
            return None
        assert isinstance(value, tuple)
        if self.non_empty and not value:
            return "must not be empty"
        for item in value:
            if item not in self.choices:
                return f"{item!r} is not one of {', '.join(self.choices)}"
        if len(set(value)) != len(value):
            return "must not repeat an element"
        return None


def throttled_replica_list(value: object) -> str | None:
    """leader/follower.replication.throttled.replicas: "*" or partition:broker pairs."""
    if value is None or value == ("*",):
        return None
    assert isinstance(value, tuple)
    for item in value:
        partition, _, broker = str(item).partition(":")
        if not (partition.strip().isdigit() and broker.strip().isdigit()):
            return f"{item!r} is not partition:broker (or use * for all replicas)"
    return None


def _non_empty_list(value: object) -> str | None:
    if value is not None and not value:
        return "must not be empty"
    return None


def _non_empty_string(value: object) -> str | None:
    if value is not None and not str(value).strip():
        return "must not be empty"
    return None


class Listener(NamedTuple):
    """One `NAME://host:port` entry of listeners/advertised.listeners; host "" binds every interface."""

    name: str
    host: str
    port: int


class QuorumVoter(NamedTuple):
    """One `id@host:port` entry of controller.quorum.voters."""

    node_id: int
    host: str
    port: int


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:\[\]/]*):([0-9]+)$")
_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]/@]+):([0-9]+)$")
_VOTER_RE = re.compile(r"^([0-9]+)@(\[[0-9A-Fa-f:.]+\]|[^:\[\]/@]+):([0-9]+)$")


def _port(text: str) -> int:
    port = int(text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return port


def parse_listener(text: str) -> Listener:
    """Parse `NAME://host:port` (IPv6 hosts in brackets); raise ValueError when malformed."""
    match = _LISTENER_RE.match(text)
    if match is None:
        raise ValueError(f"listener {text!r} is not of the form NAME://host:port")
    return Listener(match[1].upper(), match[2].strip("[]"), _port(match[3]))


def parse_host_port(text: str) -> tuple[str, int]:
    """Parse `host:port` (IPv6 hosts in brackets); raise ValueError when malformed."""
    match = _HOST_PORT_RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not of the form host:port")
    return match[1].strip("[]"), _port(match[2])


def parse_quorum_voter(text: str) -> QuorumVoter:
    """Parse `id@host:port`; raise ValueError when malformed."""
    match = _VOTER_RE.match(text)
    if match is None:
        raise ValueError(f"voter {text!r} is not of the form id@host:port")
    return QuorumVoter(int(match[1]), match[2].strip("[]"), _port(match[3]))


def _each(parse: Callable[[str], object]) -> Validator:
    """Validate every element of a list with a parser that raises ValueError."""

    def check(value: object) -> str | None:
        if value is None:
            return None
        assert isinstance(value, tuple)
        for item in value:
            try:
                parse(item)
            except ValueError as exc:
                return str(exc)
        return None

    return check


def _valid_listeners(value: object) -> str | None:
    problem = _each(parse_listener)(value)
    if problem is not None or value is None:
        return problem
    assert isinstance(value, tuple)
    names = [parse_listener(item).name for item in value]
    if len(set(names)) != len(names):
        return "each listener name may appear only once"
    return None


def _valid_protocol_map(value: object) -> str | None:
    if value is None:
        return None
    assert isinstance(value, tuple)
    for item in value:
        name, sep, protocol = item.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_]+", name):
            return f"entry {item!r} is not of the form LISTENER_NAME:SECURITY_PROTOCOL"
        if protocol.upper() not in SECURITY_PROTOCOLS:
            return f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
    return None


def _valid_storage_url(value: object) -> str | None:
    if value is None:
        return None
    text = str(value)
    if text.startswith("file://") and len(text) > len("file://"):
        return None
    if re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?", text):
        return None
    return "must be file://<path> or s3://<bucket>[/<prefix>]"


def _valid_cluster_id(value: object) -> str | None:
    if value is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", str(value)):
        return "must be non-empty and contain only letters, digits, '-' and '_'"
    return None


# ---------------------------------------------------------------------------------------------
# Definitions


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One known key: its type, default (typed; None is Kafka's null), validator and meaning.

    `unit` is the class of value ("ms", "bytes", "count", ...) so docs and tools can say it.
    """

    name: str
    type: ConfigType
    default: object
    doc: str
    unit: str = ""
    validator: Validator | None = None

    @property
    def sensitive(self) -> bool:
        """Whether DescribeConfigs must hide the value (passwords, private keys)."""
        return self.type is ConfigType.PASSWORD


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic-level key and the broker keys it falls back to, most specific first.

    The topic default is the first of `broker_synonyms` with a value (scaled to this key's unit),
    else `default`. `create_only` keys may be given to CreateTopics but never altered.
    """

    name: str
    type: ConfigType
    default: object
    doc: str
    unit: str = ""
    validator: Validator | None = None
    broker_synonyms: tuple[str, ...] = ()
    create_only: bool = False


_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
# replica.selector.class values: Kafka's class names, as operators write them.
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
_I = ConfigType.INT
_SH = ConfigType.SHORT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE
_LI = ConfigType.LIST
_P = ConfigType.PASSWORD

MIB = 1024 * 1024
GIB = 1024 * MIB
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
IGNORED = " Accepted for compatibility and ignored: kafka-ext serves all I/O from one event loop."


def _d(name: str, type_: ConfigType, default: object, doc: str, unit: str = "",
       validator: Validator | None = None) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, unit, validator)


_BROKER_DEFS: tuple[ConfigDef, ...] = (
    # Identity and roles
    _d("node.id", _I, 1, "This node's id, unique in the cluster; also its voter id when it is a controller.",
       "id", at_least(0)),
    _d("process.roles", _LI, ("broker", "controller"),
       "The roles this process plays: broker, controller, or both (the embedded single-node default).",
       "", SubsetOf(("broker", "controller"), non_empty=True)),
    _d("cluster.id", _S, None,
       "Cluster id; when absent one is generated, and the id recorded in meta.properties wins.", "",
       _valid_cluster_id),
    _d("broker.rack", _S, None, "Rack of this broker, used to spread replicas across racks.", ""),
    # Listeners
    _d("listeners", _LI, ("PLAINTEXT://localhost:9092",),
       "Addresses to accept connections on, as NAME://host:port; an empty host binds every interface.",
       "", _valid_listeners),
    _d("advertised.listeners", _LI, None,
       "Addresses given to clients in metadata; defaults to the non-controller listeners.", "",
       _valid_listeners),
    _d("listener.security.protocol.map", _LI,
       ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL",
        "CONTROLLER:PLAINTEXT"),
       "Security protocol of each listener name, as NAME:PROTOCOL pairs.", "", _valid_protocol_map),
    _d("controller.listener.names", _LI, (),
       "Listener names the controller serves on; a broker-only node connects to controllers with the first.",
       ""),
    _d("controller.quorum.voters", _LI, (),
       "The controller quorum as id@host:port entries; empty means this node is its own quorum.", "",
       _each(parse_quorum_voter)),
    _d("controller.quorum.bootstrap.servers", _LI, (),
       "host:port entries used to discover the controller quorum (KIP-853).", "",
       _each(parse_host_port)),
    _d("inter.broker.listener.name", _S, None,
       "Listener brokers use to talk to each other; when unset, the listener named after "
       "security.inter.broker.protocol. Set at most one of the two.", ""),
    _d("security.inter.broker.protocol", _S, "PLAINTEXT",
       "Security protocol brokers use to talk to each other, naming the listener when "
       "inter.broker.listener.name is unset.", "", OneOf(SECURITY_PROTOCOLS)),
    _d("num.network.threads", _I, 3, "Number of network threads." + IGNORED, "count", at_least(1)),
    _d("num.io.threads", _I, 8, "Number of request handler threads." + IGNORED, "count", at_least(1)),
    _d("background.threads", _I, 10, "Number of background threads." + IGNORED, "count", at_least(1)),
    _d("num.recovery.threads.per.data.dir", _I, 2,
       "Threads per log dir for log recovery at start-up and flushing at shutdown.", "count",
       at_least(1)),
    _d("socket.send.buffer.bytes", _I, 102400, "SO_SNDBUF of accepted sockets; -1 keeps the OS default.",
       "bytes", at_least(-1)),
    _d("socket.receive.buffer.bytes", _I, 102400,
       "SO_RCVBUF of accepted sockets; -1 keeps the OS default.", "bytes", at_least(-1)),
    _d("socket.request.max.bytes", _I, 104857600,
       "Largest request frame accepted; a larger declared size closes the connection.", "bytes",
       at_least(1)),
    _d("connections.max.idle.ms", _L, 600000, "Idle connections are closed after this long.", "ms"),
    _d("queued.max.requests", _I, 500,
       "Requests in flight per broker before reading from sockets pauses.", "count", at_least(1)),
    # Kafka's default is -1 (no limit); ours bounds memory under hostile clients (DESIGN.md
    # principle 10, docs/security.md "Limits"). -1 still means no limit.
    _d("queued.max.request.bytes", _L, 268435456,
       "Request bytes being read and queued across all connections; when spent, reading pauses "
       "on connections that want more until memory is freed (each connection may always hold "
       "64 KiB). -1: no limit.", "bytes", at_least(-1)),
    _d("max.connections", _I, INT_MAX, "Connections accepted at once across all listeners.", "count",
       at_least(0)),
    _d("max.connections.per.ip", _I, INT_MAX, "Connections accepted at once from one address.",
       "count", at_least(0)),
    _d("max.connections.per.ip.overrides", _S, "",
       "Per-address connection limits as host:count pairs separated by commas.", ""),
    # Metrics for Prometheus (server/metrics.py, docs/metrics.md)
    _d("prometheus.metrics.port", _I, 0,
       "Port of the Prometheus endpoint http://<prometheus.metrics.host>:<port>/metrics; 0 "
       "serves none.", "", Between(0, 65535)),
    _d("prometheus.metrics.host", _S, "",
       "Address the Prometheus endpoint binds; empty binds every interface.", ""),
    # Log directories
    _d("log.dirs", _LI, None, "Directories holding partition logs (JBOD); overrides log.dir.", "",
       _non_empty_list),
    _d("log.dir", _S, DEFAULT_LOG_DIR, "Single log directory, used when log.dirs is not set.", "",
       _non_empty_string),
    _d("metadata.log.dir", _S, None,
       "Directory of the __cluster_metadata log; defaults to the first log dir.", ""),
    # Topic defaults
    _d("num.partitions", _I, 1, "Partitions of a topic created without a partition count.", "count",
       at_least(1)),
    _d("default.replication.factor", _I, 1,
       "Replication factor of a topic created without one.", "count", at_least(1)),
    _d("min.insync.replicas", _I, 1,
       "With acks=all, a produce fails unless this many replicas are in sync.", "count", at_least(1)),
    _d("auto.create.topics.enable", _B, True,
       "Create a topic with default settings when a client asks for metadata of a missing one.", ""),
    _d("max.request.partition.size.limit", _I, 2000,
       "Partitions one DescribeTopicPartitions answer lists at most.", "count", at_least(1)),
    _d("delete.topic.enable", _B, True, "Allow DeleteTopics; when false deletion is refused.", ""),
    _d("unclean.leader.election.enable", _B, False,
       "Allow an out-of-sync replica to become leader, accepting data loss over unavailability.", ""),
    _d("auto.leader.rebalance.enable", _B, True,
       "Move leadership back to preferred replicas in the background.", ""),
    _d("leader.imbalance.check.interval.seconds", _L, 300,
       "How often the active controller moves leaderships back to preferred replicas.", "s",
       at_least(1)),
    _d("compression.type", _S, "producer",
       "Compression of stored batches; 'producer' keeps whatever the producer used.", "",
       OneOf(COMPRESSION_TYPES)),
    _d("log.cleanup.policy", _LI, ("delete",),
       "What happens to old segments: delete them, compact them by key, or both.", "",
       SubsetOf(CLEANUP_POLICIES, non_empty=True)),
    # Segments and indexes
    _d("log.segment.bytes", _I, GIB, "A segment rolls when it would grow past this size.", "bytes",
       at_least(14)),
    _d("log.roll.ms", _L, None, "A segment rolls once its first batch is this old; overrides log.roll.hours.",
       "ms", at_least(1)),
    _d("log.roll.hours", _I, 168, "A segment rolls once its first batch is this old.", "hours",
       at_least(1)),
    _d("log.roll.jitter.ms", _L, None,
       "Random amount subtracted from the roll time to spread rolls out; overrides log.roll.jitter.hours.",
       "ms", at_least(0)),
    _d("log.roll.jitter.hours", _I, 0, "Random amount subtracted from the roll time.", "hours",
       at_least(0)),
    _d("log.index.interval.bytes", _I, 4096,
       "Bytes appended between two offset index entries; smaller means denser indexes.", "bytes",
       at_least(0)),
    _d("log.index.size.max.bytes", _I, 10 * MIB,
       "Largest offset or time index file; a full index rolls the segment.", "bytes", at_least(4)),
    _d("log.preallocate", _B, False, "Preallocate segment files at their full size when created.", ""),
    _d("log.segment.delete.delay.ms", _L, 60000,
       "How long a deleted segment waits, renamed .deleted, before its files are removed.", "ms",
       at_least(0)),
    # Retention
    _d("log.retention.ms", _L, None,
       "Delete segments older than this; -1 keeps them forever. Overrides minutes and hours.", "ms",
       at_least(-1)),
    _d("log.retention.minutes", _I, None,
       "Delete segments older than this; overrides log.retention.hours.", "minutes", at_least(-1)),
    _d("log.retention.hours", _I, 168, "Delete segments older than this.", "hours", at_least(-1)),
    _d("log.retention.bytes", _L, -1,
       "Delete the oldest segments while a partition is larger than this; -1 means no limit.",
       "bytes", at_least(-1)),
    _d("log.retention.check.interval.ms", _L, 300000,
       "How often logs are checked for segments to delete.", "ms", at_least(1)),
    # Flushing and checkpoints
    _d("log.flush.interval.messages", _L, LONG_MAX,
       "fsync a partition after this many messages; by default the OS decides (replication is the durability).",
       "count", at_least(1)),
    _d("log.flush.interval.ms", _L, None,
       "fsync a partition after data has waited this long; defaults to log.flush.scheduler.interval.ms.",
       "ms", at_least(0)),
    _d("log.flush.scheduler.interval.ms", _L, LONG_MAX,
       "How often the flusher checks whether a log needs an fsync.", "ms", at_least(0)),
    _d("log.flush.offset.checkpoint.interval.ms", _I, 60000,
       "How often recovery points are written to recovery-point-offset-checkpoint.", "ms",
       at_least(0)),
    _d("log.flush.start.offset.checkpoint.interval.ms", _I, 60000,
       "How often log start offsets are written to log-start-offset-checkpoint.", "ms", at_least(0)),
    # Messages
    _d("message.max.bytes", _I, 1048588, "Largest record batch a topic accepts.", "bytes",
       at_least(0)),
    _d("log.message.timestamp.type", _S, "CreateTime",
       "Whether stored timestamps are the producer's (CreateTime) or the broker's (LogAppendTime).",
       "", OneOf(TIMESTAMP_TYPES)),
    _d("log.message.timestamp.before.max.ms", _L, LONG_MAX,
       "Reject a batch whose timestamp is further than this in the past (CreateTime only).", "ms",
       at_least(0)),
    _d("log.message.timestamp.after.max.ms", _L, 3600000,
       "Reject a batch whose timestamp is further than this in the future (CreateTime only).", "ms",
       at_least(0)),
    # Compaction
    _d("log.cleaner.enable", _B, True, "Run the log cleaner for compacted topics.", ""),
    _d("log.cleaner.threads", _I, 1, "Number of log cleaner tasks.", "count", at_least(0)),
    _d("log.cleaner.backoff.ms", _L, 15000, "Pause of the cleaner when there is nothing to clean.",
       "ms", at_least(0)),
    _d("log.cleaner.dedupe.buffer.size", _L, 134217728, "Memory for the cleaner's key map.", "bytes",
       at_least(0)),
    _d("log.cleaner.delete.retention.ms", _L, 86400000,
       "How long tombstones stay in a compacted log after cleaning.", "ms", at_least(0)),
    _d("log.cleaner.min.cleanable.ratio", _D, 0.5,
       "Dirty fraction of a log above which it is compacted.", "ratio", Between(0, 1)),
    _d("log.cleaner.min.compaction.lag.ms", _L, 0,
       "A record stays uncompacted at least this long.", "ms", at_least(0)),
    _d("log.cleaner.max.compaction.lag.ms", _L, LONG_MAX,
       "A record becomes eligible for compaction at the latest after this long.", "ms",
       at_least(1)),
    # Replication
    _d("replica.lag.time.max.ms", _L, 30000,
       "A follower that has not caught up for this long leaves the ISR.", "ms", at_least(1)),
    _d("replica.fetch.max.bytes", _I, MIB, "Bytes a follower asks for per partition.", "bytes",
       at_least(0)),
    _d("replica.fetch.response.max.bytes", _I, 10 * MIB, "Bytes a follower asks for per fetch.",
       "bytes", at_least(0)),
    _d("replica.fetch.wait.max.ms", _I, 500, "How long a follower fetch may wait for data.", "ms",
       at_least(0)),
    _d("replica.fetch.min.bytes", _I, 1, "Bytes a follower fetch waits for.", "bytes", at_least(1)),
    _d("replica.fetch.backoff.ms", _I, 1000, "Pause of a follower after a failed fetch.", "ms",
       at_least(0)),
    _d("replica.socket.timeout.ms", _I, 30000, "Socket timeout of follower fetches.", "ms"),
    _d("replica.high.watermark.checkpoint.interval.ms", _L, 5000,
       "How often high watermarks are written to replication-offset-checkpoint.", "ms",
       at_least(1)),
    _d("num.replica.fetchers", _I, 1, "Fetcher tasks per source broker.", "count", at_least(1)),
    _d("replica.selector.class", _S, None,
       "How a leader picks the replica a consumer reads from (KIP-392); unset: the leader.", "",
       OneOf((LEADER_SELECTOR, RACK_AWARE_SELECTOR))),
    _d("fetch.max.bytes", _I, 55 * MIB, "Largest fetch response the broker builds.", "bytes",
       at_least(1024)),
    # Controller and metadata
    _d("broker.heartbeat.interval.ms", _I, 2000, "How often a broker heartbeats the controller.",
       "ms", at_least(1)),
    _d("broker.session.timeout.ms", _I, 9000,
       "A broker without a heartbeat for this long is fenced.", "ms", at_least(1)),
    _d("broker.heartbeat.connection.loss.timeout.ms", _I, 500,
       "A broker whose heartbeat connection to the active controller closed (its process died, "
       "or the link was reset) is fenced after this long unless it heartbeats again on another "
       "connection; a link that goes silent without closing still waits for "
       "broker.session.timeout.ms. -1 turns this off (kafka-ext's own, docs/cluster.md).",
       "ms", at_least(-1)),
    _d("controller.quorum.election.timeout.ms", _I, 1000,
       "How long a voter waits for a leader before it starts an election.", "ms", at_least(1)),
    _d("controller.quorum.election.backoff.max.ms", _I, 1000,
       "Longest pause before a new election after a failed one.", "ms", at_least(1)),
    _d("controller.quorum.fetch.timeout.ms", _I, 2000,
       "A voter without a successful fetch for this long becomes a candidate.", "ms", at_least(1)),
    _d("controller.quorum.request.timeout.ms", _I, 2000, "Timeout of quorum requests.", "ms",
       at_least(1)),
    _d("controller.quorum.retry.backoff.ms", _I, 20, "Pause before retrying a quorum request.", "ms",
       at_least(0)),
    _d("metadata.log.segment.bytes", _I, GIB, "Segment size of the __cluster_metadata log.", "bytes",
       at_least(12)),
    _d("metadata.log.max.record.bytes.between.snapshots", _L, 20 * MIB,
       "Metadata log bytes appended before a new snapshot is written.", "bytes", at_least(1)),
    _d("metadata.log.max.snapshot.interval.ms", _L, 3600000,
       "Longest time between snapshots while new metadata records arrive (0: by size only).",
       "ms", at_least(0)),
    _d("metadata.max.retention.bytes", _L, 100 * MIB,
       "Metadata log size kept before old snapshots and segments go.", "bytes", at_least(-1)),
    _d("metadata.max.retention.ms", _L, 604800000,
       "Age of metadata log segments and snapshots before they go.", "ms", at_least(-1)),
    # Group coordinator
    _d("group.initial.rebalance.delay.ms", _I, 3000,
       "How long the first rebalance of an empty group waits for more members.", "ms",
       at_least(0)),
    _d("group.min.session.timeout.ms", _I, 6000, "Smallest session timeout a member may ask for.",
       "ms", at_least(0)),
    _d("group.max.session.timeout.ms", _I, 1800000, "Largest session timeout a member may ask for.",
       "ms", at_least(0)),
    _d("group.max.size", _I, INT_MAX, "Members a consumer group may have.", "count", at_least(1)),
    _d("group.consumer.session.timeout.ms", _I, 45000,
       "KIP-848 consumer groups: a member without a heartbeat for this long is removed.", "ms",
       at_least(1)),
    _d("group.consumer.heartbeat.interval.ms", _I, 5000,
       "KIP-848 consumer groups: how often members are told to heartbeat.", "ms", at_least(1)),
    _d("group.consumer.assignors", _LI, ("uniform", "range"),
       "KIP-848 server-side assignors; the first is used unless a member asks for another.", "",
       SubsetOf(("uniform", "range"), non_empty=True)),
    _d("group.consumer.max.size", _I, INT_MAX, "Members a KIP-848 consumer group may have.",
       "count", at_least(1)),
    # Share groups (KIP-932), Kafka 4.2's names and defaults; on by default here (issue 30).
    _d("group.share.enable", _B, True,
       "Serve share groups (ShareGroupHeartbeat and the share APIs); Kafka's share.version.", ""),
    _d("group.share.session.timeout.ms", _I, 45000,
       "Share groups: a member without a heartbeat for this long is removed.", "ms",
       at_least(1)),
    _d("group.share.min.session.timeout.ms", _I, 45000,
       "Smallest share.session.timeout.ms a share group may be given.", "ms", at_least(1)),
    _d("group.share.max.session.timeout.ms", _I, 60000,
       "Largest share.session.timeout.ms a share group may be given.", "ms", at_least(1)),
    _d("group.share.heartbeat.interval.ms", _I, 5000,
       "Share groups: how often members are told to heartbeat.", "ms", at_least(1)),
    _d("group.share.min.heartbeat.interval.ms", _I, 5000,
       "Smallest share.heartbeat.interval.ms a share group may be given.", "ms", at_least(1)),
    _d("group.share.max.heartbeat.interval.ms", _I, 15000,
       "Largest share.heartbeat.interval.ms a share group may be given.", "ms", at_least(1)),
    _d("group.share.max.size", _I, 200, "Members a share group may have.", "count",
       Between(1, 1000)),
    _d("group.share.assignors", _LI, ("simple",),
       "Share groups' server-side assignors; the first is used.", "",
       SubsetOf(("simple",), non_empty=True)),
    _d("group.share.record.lock.duration.ms", _I, 30000,
       "How long a share consumer holds an acquired record before it is redelivered.", "ms",
       Between(1000, 3600000)),
    _d("group.share.min.record.lock.duration.ms", _I, 15000,
       "Smallest share.record.lock.duration.ms a share group may be given.", "ms",
       Between(1000, 30000)),
    _d("group.share.max.record.lock.duration.ms", _I, 60000,
       "Largest share.record.lock.duration.ms a share group may be given.", "ms",
       Between(30000, 3600000)),
    _d("group.share.delivery.count.limit", _I, 5,
       "Deliveries of a record to a share group before it is archived.", "count",
       Between(2, 10)),
    _d("group.share.min.delivery.count.limit", _I, 2,
       "Smallest share.delivery.count.limit a share group may be given (KIP-1240).", "count",
       Between(2, 10)),
    _d("group.share.max.delivery.count.limit", _I, 10,
       "Largest share.delivery.count.limit a share group may be given (KIP-1240).", "count",
       Between(2, 10)),
    _d("group.share.partition.max.record.locks", _I, 2000,
       "Records of one share-partition that may be acquired (in flight) at once.", "count",
       Between(100, 10000)),
    _d("group.share.min.partition.max.record.locks", _I, 100,
       "Smallest share.partition.max.record.locks a share group may be given (KIP-1240).",
       "count", Between(100, 10000)),
    _d("group.share.max.partition.max.record.locks", _I, 10000,
       "Largest share.partition.max.record.locks a share group may be given (KIP-1240).",
       "count", Between(100, 10000)),
    _d("group.share.max.share.sessions", _I, 2000, "Share sessions a broker keeps at once.",
       "count", at_least(1)),
    _d("group.share.initialize.retry.interval.ms", _I, 30000,
       "How long a share-partition's state initialization may run before it is tried again.",
       "ms", at_least(1)),
    _d("offsets.topic.num.partitions", _I, 50, "Partitions of __consumer_offsets.", "count",
       at_least(1)),
    _d("offsets.topic.replication.factor", _SH, 1,
       "Replication factor of __consumer_offsets (1 so a single broker works out of the box).",
       "count", at_least(1)),
    _d("offsets.topic.segment.bytes", _I, 100 * MIB, "Segment size of __consumer_offsets.", "bytes",
       at_least(1)),
    _d("offsets.retention.minutes", _I, 10080,
       "Committed offsets of an empty group are dropped after this long.", "minutes", at_least(1)),
    _d("offsets.retention.check.interval.ms", _L, 600000, "How often stale offsets are looked for.",
       "ms", at_least(1)),
    _d("offsets.commit.timeout.ms", _I, 5000,
       "An offset commit waits at most this long for replication.", "ms", at_least(1)),
    # Transactions and producer state
    _d("transaction.state.log.num.partitions", _I, 50, "Partitions of __transaction_state.", "count",
       at_least(1)),
    _d("transaction.state.log.replication.factor", _SH, 1,
       "Replication factor of __transaction_state (1 so a single broker works out of the box).",
       "count", at_least(1)),
    _d("transaction.state.log.min.isr", _I, 1, "min.insync.replicas of __transaction_state.", "count",
       at_least(1)),
    _d("transaction.state.log.segment.bytes", _I, 100 * MIB, "Segment size of __transaction_state.",
       "bytes", at_least(1)),
    # The share coordinator (KIP-932) and __share_group_state, Kafka 4.2's names.
    _d("share.coordinator.state.topic.num.partitions", _I, 50,
       "Partitions of __share_group_state (should not change after deployment).", "count",
       at_least(1)),
    _d("share.coordinator.state.topic.replication.factor", _SH, 1,
       "Replication factor of __share_group_state (Kafka's default is 3; 1 so a single broker "
       "works out of the box, as for __consumer_offsets).", "count", at_least(1)),
    _d("share.coordinator.state.topic.min.isr", _SH, 1,
       "min.insync.replicas of __share_group_state (Kafka's default is 2; 1 here, as "
       "transaction.state.log.min.isr).", "count", at_least(1)),
    _d("share.coordinator.state.topic.segment.bytes", _I, 100 * MIB,
       "Segment size of __share_group_state.", "bytes", at_least(1)),
    _d("share.coordinator.state.topic.compression.codec", _I, 0,
       "Compression of __share_group_state's batches: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.",
       "", Between(0, 4)),
    _d("share.coordinator.state.topic.prune.interval.ms", _I, 300000,
       "How often the share coordinator deletes the __share_group_state records no "
       "share-partition needs any more.", "ms", at_least(1)),
    _d("share.coordinator.cold.partition.snapshot.interval.ms", _I, 300000,
       "A share-partition not written for this long is snapshotted again, so its old records "
       "can be pruned.", "ms", at_least(1)),
    _d("share.coordinator.snapshot.update.records.per.snapshot", _I, 500,
       "Update records the share coordinator writes for a share-partition between two "
       "snapshots of it.", "count", Between(0, 500)),
    _d("share.coordinator.write.timeout.ms", _I, 5000,
       "How long a share coordinator write waits for the replicas of __share_group_state.",
       "ms", at_least(1)),
    _d("share.coordinator.load.buffer.size", _I, 5 * MIB,
       "Kafka's read size when loading __share_group_state. Accepted for compatibility; "
       "the coordinator runtime loads in steps of its own (1 MiB).", "bytes", at_least(1)),
    _d("share.coordinator.append.linger.ms", _I, 5,
       "Kafka's wait for share coordinator writes to share a batch. Accepted for "
       "compatibility; each write is appended at once.", "ms", at_least(-1)),
    _d("share.coordinator.threads", _I, 1, "Threads of Kafka's share coordinator." + IGNORED,
       "count", at_least(1)),
    _d("transaction.max.timeout.ms", _I, 900000, "Largest transaction timeout a producer may ask for.",
       "ms", at_least(1)),
    _d("transactional.id.expiration.ms", _I, 604800000,
       "A transactional id unused for this long is forgotten.", "ms", at_least(1)),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000,
       "How often timed-out transactions are aborted.", "ms", at_least(1)),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000,
       "How often expired transactional ids are removed.", "ms", at_least(1)),
    _d("producer.id.expiration.ms", _I, 86400000,
       "Idempotent producer state unused for this long is dropped.", "ms", at_least(1)),
    _d("producer.id.expiration.check.interval.ms", _I, 600000,
       "How often expired producer state is looked for.", "ms", at_least(1)),
    # Security
    _d("super.users", _S, "", "Principals allowed everything, separated by ';' (User:admin;User:ops).", ""),
    _d("allow.everyone.if.no.acl.found", _B, False,
       "Allow an operation on a resource that has no ACL at all.", ""),
    _d("authorizer.class.name", _S, "",
       "Empty disables authorization; Kafka's StandardAuthorizer class name enables the ACLs "
       "kept in the cluster metadata.", "", OneOf(("", STANDARD_AUTHORIZER))),
    _d("sasl.enabled.mechanisms", _LI, SASL_MECHANISMS, "SASL mechanisms offered to clients.", "",
       SubsetOf(SASL_MECHANISMS)),
    _d("sasl.mechanism.inter.broker.protocol", _S, "PLAIN",
       "SASL mechanism brokers use with each other.", "", OneOf(SASL_MECHANISMS)),
    _d("sasl.mechanism.controller.protocol", _S, "PLAIN",
       "SASL mechanism used towards controllers.", "", OneOf(SASL_MECHANISMS)),
    _d("ssl.keystore.location", _S, None, "PEM file with this broker's certificate chain and key.", ""),
    _d("ssl.keystore.password", _P, None, "Password of the keystore file.", ""),
    _d("ssl.key.password", _P, None, "Password of the private key.", ""),
    _d("ssl.keystore.type", _S, "PEM", "Keystore format; only PEM is supported.", "", OneOf(("PEM",))),
    _d("ssl.keystore.certificate.chain", _P, None, "Certificate chain as inline PEM.", ""),
    _d("ssl.keystore.key", _P, None, "Private key as inline PEM.", ""),
    _d("ssl.truststore.location", _S, None, "PEM file with the certificates trusted for clients.", ""),
    _d("ssl.truststore.password", _P, None, "Password of the truststore file.", ""),
    _d("ssl.truststore.type", _S, "PEM", "Truststore format; only PEM is supported.", "",
       OneOf(("PEM",))),
    _d("ssl.truststore.certificates", _P, None, "Trusted certificates as inline PEM.", ""),
    _d("ssl.client.auth", _S, "none", "Whether clients must present a certificate.", "",
       OneOf(("required", "requested", "none"))),
    _d("ssl.enabled.protocols", _LI, ("TLSv1.2", "TLSv1.3"), "TLS versions accepted.", "",
       SubsetOf(("TLSv1.2", "TLSv1.3"), non_empty=True)),
    _d("ssl.protocol", _S, "TLSv1.3", "Preferred TLS version.", "", OneOf(("TLSv1.2", "TLSv1.3"))),
    _d("ssl.cipher.suites", _LI, (), "Cipher suites allowed; empty keeps the ssl module's defaults.", ""),
    _d("ssl.endpoint.identification.algorithm", _S, "https",
       "Host name verification towards other brokers; empty disables it.", ""),
    _d("ssl.principal.mapping.rules", _S, "DEFAULT",
       "Rules turning a client certificate's subject into a principal name "
       "(RULE:pattern/replacement/[LU], comma-separated, DEFAULT keeps the whole subject).", ""),
    _d("sasl.jaas.config", _P, None,
       "JAAS login for SASL: the credentials this node presents to other nodes and, for PLAIN, "
       "the user_NAME=\"password\" entries it accepts (listener.name.<l>.<mechanism>."
       "sasl.jaas.config overrides it per listener and mechanism).", ""),
    _d("connections.max.reauth.ms", _L, 0,
       "Longest SASL session before the client must re-authenticate (KIP-368); 0 never.", "ms",
       at_least(0)),
    _d("sasl.server.max.receive.size", _I, 524288,
       "Largest request read from a client that has not completed its SASL login.", "bytes",
       at_least(1)),
    _d("connection.failed.authentication.delay.ms", _I, 100,
       "Delay before the answer to a failed authentication, which then closes the connection.",
       "ms", at_least(0)),
    # Delegation tokens (KIP-48, docs/security.md): on exactly when the secret key is set.
    _d("delegation.token.secret.key", _P, None,
       "Secret key that signs delegation tokens (HmacSHA512 of the token id); the same on every "
       "node of the cluster. Unset: the token APIs answer DELEGATION_TOKEN_AUTH_DISABLED.", ""),
    _d("delegation.token.max.lifetime.ms", _L, 7 * 24 * 3600 * 1000,
       "Longest a delegation token lives, renewals included.", "ms", at_least(1)),
    _d("delegation.token.expiry.time.ms", _L, 24 * 3600 * 1000,
       "How long a delegation token is valid before it must be renewed.", "ms", at_least(1)),
    _d("delegation.token.expiry.check.interval.ms", _L, 3600 * 1000,
       "How often the active controller removes expired delegation tokens.", "ms", at_least(1)),
    # Client quotas (docs/quotas.md)
    _d("quota.window.num", _I, 11, "Samples kept for client quota rates.", "count", at_least(1)),
    _d("quota.window.size.seconds", _I, 1, "Time span of each client quota sample.", "s",
       at_least(1)),
    _d("controller.quota.window.num", _I, 11,
       "Samples for controller mutation quotas (the token bucket holds this many windows).",
       "count", at_least(1)),
    _d("controller.quota.window.size.seconds", _I, 1,
       "Time span of each controller mutation quota sample.", "s", at_least(1)),
    # Proposals: replica movement between log dirs (JBOD)
    _d("leader.replication.throttled.rate", _L, LONG_MAX,
       "Bytes per second this broker sends, as leader, to the throttled replicas of its "
       "partitions (leader.replication.throttled.replicas); dynamic.", "bytes/s", at_least(1)),
    _d("follower.replication.throttled.rate", _L, LONG_MAX,
       "Bytes per second this broker fetches, as follower, for its throttled replicas "
       "(follower.replication.throttled.replicas); dynamic.", "bytes/s", at_least(1)),
    _d("intra.broker.throttled.rate", _L, LONG_MAX,
       "Bytes per second all replica moves between log dirs of this broker may copy together.",
       "bytes/s", at_least(1)),
    _d("num.replica.move.threads", _I, None,
       "Replica moves between log dirs that run at once; defaults to the number of log dirs.",
       "count", at_least(1)),
    _d("log.dir.placement.policy", _S, "fewest-partitions",
       "Where a new partition's log goes: the online log dir with the fewest partitions, or "
       "the one with the most free bytes.", "", OneOf(("fewest-partitions", "most-free-bytes"))),
    _d("log.dir.failure.check.interval.ms", _L, 1000,
       "How often each online log dir is probed (listed, meta.properties read); a failed probe "
       "takes the dir offline as an I/O error would (KIP-112).", "ms", at_least(10)),
    # Proposals: partition reduction
    _d("delete.topic.partition.enable", _B, True,
       "Allow removing partitions from a topic (DeletePartitions, --alter --partitions <smaller>).", ""),
    _d("delete.topic.partition.interval.delay.ms", _L, 300000,
       "How often the active controller moves partitions being deleted on (ReadOnly to None "
       "after their delay, then out of the topic).", "ms", at_least(1)),
    # Proposals: diskless topics
    _d("diskless.metadata.topic.num.partitions", _I, 10,
       "Partitions of __diskless_metadata, that is the number of diskless coordinators.", "count",
       at_least(1)),
    _d("diskless.metadata.topic.replication.factor", _SH, 1,
       "Replication factor of __diskless_metadata (1 so a single broker works out of the box).",
       "count", at_least(1)),
    _d("diskless.coordinator.orphan.scan.interval.ms", _L, 300000,
       "How often a diskless coordinator looks for objects no batch refers to.", "ms", at_least(1)),
    _d("diskless.coordinator.orphan.scan.grace.period.ms", _L, 600000,
       "An unreferenced object younger than this is left alone (its commit may be in flight).",
       "ms", at_least(0)),
    _d("diskless.storage.url", _S, None,
       "Object store of diskless topics: file://<dir> (default <first log dir>/objects) or s3://bucket/prefix.",
       "", _valid_storage_url),
    _d("diskless.wal.max.bytes", _I, 8 * MIB,
       "A diskless WAL object is uploaded once it holds this many bytes.", "bytes", at_least(1)),
    _d("diskless.wal.max.ms", _L, 250,
       "A diskless WAL object is uploaded at the latest this long after its first batch.", "ms",
       at_least(1)),
    _d("diskless.file.deletion.grace.ms", _L, 60000,
       "A WAL object no coordinator needs any more is deleted this long after, so that "
       "consumers reading it can finish.", "ms", at_least(0)),
    _d("diskless.fetch.cache.max.bytes", _L, 256 * MIB,
       "Bytes of WAL objects a broker keeps in memory for diskless fetches.", "bytes",
       at_least(0)),
    _d("diskless.metadata.snapshot.interval.records", _L, 100000,
       "A diskless coordinator snapshots its SQLite state and prunes its __diskless_metadata "
       "partition after this many new records.", "records", at_least(1)),
)

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}

# Broker keys that stand for the same setting in another unit, most specific first; the first
# with a value wins. The factor converts the synonym's unit to the first key's unit.
BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                         ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "log.roll.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "log.flush.interval.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
}
_SYNONYM_OF: dict[str, str] = {
    member: head for head, members in BROKER_SYNONYMS.items() for member, _ in members
}


def _effective(values: Mapping[str, object], head: str) -> object:
    """First non-null value among `head`'s synonyms, scaled to its unit; negatives stay -1."""
    for name, factor in BROKER_SYNONYMS.get(head, ((head, 1),)):
        value = values[name]
        if value is not None:
            if factor != 1:
                assert isinstance(value, int)
                return -1 if value < 0 else min(value * factor, LONG_MAX)
            return value
    return None


def _t(name: str, type_: ConfigType, synonyms: tuple[str, ...], doc: str, unit: str = "",
       validator: Validator | None = None, default: object = None,
       create_only: bool = False) -> TopicConfigDef:
    if synonyms and default is None:
        defaults = {name: d.default for name, d in BROKER_CONFIGS.items()}
        default = _effective(defaults, _SYNONYM_OF.get(synonyms[0], synonyms[0]))
    return TopicConfigDef(name, type_, default, doc, unit, validator, synonyms, create_only)


_TOPIC_DEFS: tuple[TopicConfigDef, ...] = (
    _t("cleanup.policy", _LI, ("log.cleanup.policy",),
       "delete removes old segments, compact keeps the last record per key; both may be given.", "",
       SubsetOf(CLEANUP_POLICIES, non_empty=True)),
    _t("compression.type", _S, ("compression.type",),
       "Compression of stored batches; 'producer' keeps the producer's.", "", OneOf(COMPRESSION_TYPES)),
    _t("delete.retention.ms", _L, ("log.cleaner.delete.retention.ms",),
       "How long tombstones survive compaction.", "ms", at_least(0)),
    _t("file.delete.delay.ms", _L, ("log.segment.delete.delay.ms",),
       "How long a deleted segment's files linger before removal.", "ms", at_least(0)),
    _t("flush.messages", _L, ("log.flush.interval.messages",),
       "fsync after this many messages.", "count", at_least(1)),
    _t("flush.ms", _L, ("log.flush.interval.ms",), "fsync after data has waited this long.", "ms",
       at_least(0)),
    _t("index.interval.bytes", _I, ("log.index.interval.bytes",),
       "Bytes between two offset index entries.", "bytes", at_least(0)),
    _t("max.message.bytes", _I, ("message.max.bytes",), "Largest record batch accepted.", "bytes",
       at_least(0)),
    _t("message.timestamp.type", _S, ("log.message.timestamp.type",),
       "CreateTime keeps producer timestamps; LogAppendTime stamps batches with broker time.", "",
       OneOf(TIMESTAMP_TYPES)),
    _t("message.timestamp.before.max.ms", _L, ("log.message.timestamp.before.max.ms",),
       "Reject batches whose timestamp is further in the past than this.", "ms", at_least(0)),
    _t("message.timestamp.after.max.ms", _L, ("log.message.timestamp.after.max.ms",),
       "Reject batches whose timestamp is further in the future than this.", "ms", at_least(0)),
    _t("min.insync.replicas", _I, ("min.insync.replicas",),
       "In-sync replicas an acks=all produce needs.", "count", at_least(1)),
    _t("retention.bytes", _L, ("log.retention.bytes",),
       "Partition size above which the oldest segments go; -1 means no limit.", "bytes",
       at_least(-1)),
    _t("retention.ms", _L, ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
       "Age after which segments go; -1 keeps them forever.", "ms", at_least(-1)),
    _t("segment.bytes", _I, ("log.segment.bytes",), "Size at which a segment rolls.", "bytes",
       at_least(14)),
    _t("segment.index.bytes", _I, ("log.index.size.max.bytes",), "Largest index file.", "bytes",
       at_least(4)),
    _t("segment.ms", _L, ("log.roll.ms", "log.roll.hours"), "Age at which a segment rolls.", "ms",
       at_least(1)),
    _t("segment.jitter.ms", _L, ("log.roll.jitter.ms", "log.roll.jitter.hours"),
       "Random amount subtracted from segment.ms.", "ms", at_least(0)),
    _t("leader.replication.throttled.replicas", _LI, (),
       "Replicas (partition:broker, or *) whose leader sends them data within "
       "leader.replication.throttled.rate while they are out of sync.", "",
       throttled_replica_list, default=()),
    _t("follower.replication.throttled.replicas", _LI, (),
       "Replicas (partition:broker, or *) that fetch within follower.replication.throttled.rate "
       "while they are out of sync.", "", throttled_replica_list, default=()),
    _t("unclean.leader.election.enable", _B, ("unclean.leader.election.enable",),
       "Allow an out-of-sync replica to lead, accepting data loss.", ""),
    _t("min.cleanable.dirty.ratio", _D, ("log.cleaner.min.cleanable.ratio",),
       "Dirty fraction above which the log is compacted.", "ratio", Between(0, 1)),
    _t("min.compaction.lag.ms", _L, ("log.cleaner.min.compaction.lag.ms",),
       "Records stay uncompacted at least this long.", "ms", at_least(0)),
    _t("max.compaction.lag.ms", _L, ("log.cleaner.max.compaction.lag.ms",),
       "Records become eligible for compaction at the latest after this long.", "ms", at_least(1)),
    _t("preallocate", _B, ("log.preallocate",), "Preallocate segment files.", ""),
    _t("diskless.enable", _B, (),
       "Store this topic's data in the object store instead of local segments; fixed at creation.",
       "", None, default=False, create_only=True),
)

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _TOPIC_DEFS}

# Broker key -> topic key it is the default of, for DescribeConfigs synonyms.
TOPIC_CONFIG_OF_BROKER_KEY: dict[str, str] = {
    synonym: d.name for d in _TOPIC_DEFS for synonym in d.broker_synonyms
}


# ---------------------------------------------------------------------------------------------
# Java properties syntax


def _is_continued(line: str) -> bool:
    """A line continues when it ends with an odd number of backslashes."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:  # a lone trailing backslash is dropped, as Java does
            break
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ConfigError(f"malformed \\uxxxx escape in {text!r}", None, text)
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped '=', ':' or whitespace."""
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    while i < n and line[i] in " \t\f":
        i += 1
    if i < n and line[i] in "=:":
        i += 1
        while i < n and line[i] in " \t\f":
            i += 1
    return key, line[i:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text: `#`/`!` comments, `k=v`, `k: v`, `k v`, continuations, escapes.

    Later occurrences of a key replace earlier ones, as java.util.Properties does.
    """
    lines = re.split(r"\r\n|\r|\n", text)
    props: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        logical = line
        while _is_continued(logical):
            logical = logical[:-1]
            if i >= len(lines):
                break
            logical += lines[i].lstrip(" \t\f")
            i += 1
        key, value = _split_key_value(logical)
        props[_unescape(key)] = _unescape(value)
    return props


def env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    """Map `KAFKA_EXT_LOG_DIRS=...` to `{"log.dirs": ...}`: lower-case, '_' becomes '.'."""
    out: dict[str, str] = {}
    for var, value in env.items():
        if var.startswith(ENV_PREFIX) and len(var) > len(ENV_PREFIX):
            out[var[len(ENV_PREFIX):].lower().replace("_", ".")] = value
    return out


# ---------------------------------------------------------------------------------------------
# Typed values

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INT_RANGES = {
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}


def is_sensitive(name: str) -> bool:
    """Whether a broker key's value is secret: a password-typed key, also under a listener's
    prefix (`listener.name.<l>.ssl.key.password`), and any JAAS config (it holds passwords)."""
    if name.startswith(LISTENER_PREFIX):
        name = name[len(LISTENER_PREFIX):].partition(".")[2]
    definition = BROKER_CONFIGS.get(name)
    return (definition is not None and definition.sensitive) or name.endswith("sasl.jaas.config")


def parse_value(name: str, type_: ConfigType, raw: str,
                validator: Validator | None = None) -> object:
    """Turn the text form of `name` into its typed value and validate it, or raise ConfigError."""
    text = raw.strip()
    value: object
    if type_ is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise _invalid(name, raw, "expected true or false")
        value = lowered == "true"
    elif type_ in _INT_RANGES:
        if not _INT_RE.fullmatch(text):
            raise _invalid(name, raw, f"not a number of type {type_.name}")
        value = int(text)
        low, high = _INT_RANGES[type_]
        if not low <= value <= high:
            raise _invalid(name, raw, f"out of range for type {type_.name}")
    elif type_ is ConfigType.DOUBLE:
        if not _DOUBLE_RE.fullmatch(text):
            raise _invalid(name, raw, "not a number of type DOUBLE")
        value = float(text)
    elif type_ is ConfigType.LIST:
        value = tuple(item.strip() for item in text.split(",") if item.strip())
    else:
        value = text
    if validator is not None:
        problem = validator(value)
        if problem is not None:
            raise _invalid(name, raw, problem)
    return value


def _invalid(name: str, raw: object, reason: str) -> ConfigError:
    return ConfigError(f"invalid value {raw!r} for configuration {name}: {reason}", name, raw)


def format_config_value(value: object) -> str | None:
    """The wire/text form of a typed value: lists comma-joined, booleans lower-case, None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Broker configuration


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's validated configuration; immutable once loaded.

    Typed attributes hold *effective* values (synonyms resolved, defaults derived); `values`
    holds every known key's configured-or-default typed value as DescribeConfigs reports it, and
    `sources` says for each whether it was set (STATIC_BROKER_CONFIG) or defaulted.
    """

    node_id: int
    process_roles: tuple[str, ...]
    cluster_id: str
    cluster_id_generated: bool
    broker_rack: str | None
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    listener_security_protocol_map: dict[str, str]
    controller_listener_names: tuple[str, ...]
    controller_quorum_voters: tuple[QuorumVoter, ...]
    controller_quorum_bootstrap_servers: tuple[tuple[str, int], ...]
    inter_broker_listener_name: str | None
    listener_configs: dict[str, str]
    log_dirs: list[Path]
    metadata_log_dir: Path
    num_partitions: int
    default_replication_factor: int
    min_insync_replicas: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    unclean_leader_election_enable: bool
    compression_type: str
    log_cleanup_policy: tuple[str, ...]
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_jitter_ms: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_message_timestamp_type: str
    message_max_bytes: int
    socket_request_max_bytes: int
    connections_max_idle_ms: int
    queued_max_requests: int
    queued_max_request_bytes: int
    replica_lag_time_max_ms: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_retention_ms: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    producer_id_expiration_ms: int
    intra_broker_throttled_rate: int
    num_replica_move_threads: int
    delete_topic_partition_enable: bool
    delete_topic_partition_interval_delay_ms: int
    diskless_metadata_topic_num_partitions: int
    diskless_metadata_topic_replication_factor: int
    diskless_coordinator_orphan_scan_interval_ms: int
    diskless_coordinator_orphan_scan_grace_period_ms: int
    diskless_storage_url: str
    diskless_wal_max_bytes: int
    diskless_wal_max_ms: int
    diskless_file_deletion_grace_ms: int
    diskless_fetch_cache_max_bytes: int
    diskless_metadata_snapshot_interval_records: int
    values: dict[str, object] = field(repr=False)
    sources: dict[str, ConfigSource] = field(repr=False)

    @property
    def is_broker(self) -> bool:
        """Whether this process serves clients (process.roles contains broker)."""
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        """Whether this process is a controller quorum voter (process.roles contains controller)."""
        return "controller" in self.process_roles

    @property
    def is_self_quorum(self) -> bool:
        """Whether this is a single combined node voting for itself: process.roles=broker,
        controller with no quorum configured (the embedded default) or voters naming only it."""
        if not (self.is_broker and self.is_controller):
            return False
        if not self.controller_quorum_voters:
            return not self.controller_quorum_bootstrap_servers
        return [v.node_id for v in self.controller_quorum_voters] == [self.node_id]

    @property
    def controller_listeners(self) -> tuple[Listener, ...]:
        """This controller's listeners as other nodes reach them (advertised.listeners wins)."""
        advertised = {parse_listener(v).name: parse_listener(v)
                      for v in _strings(self.values["advertised.listeners"] or ())}
        return tuple(advertised.get(lst.name, _wildcard_to_hostname(lst))
                     for lst in self.listeners if lst.name in self.controller_listener_names)

    def listener_setting(self, listener_name: str, key: str) -> object:
        """`key` as one listener sees it: `listener.name.<listener>.<key>` when set (parsed with
        the key's type), else the broker-wide value (None for a key only listeners have, such
        as `plain.sasl.jaas.config`)."""
        text = self.listener_configs.get(f"{LISTENER_PREFIX}{listener_name.lower()}.{key}")
        definition = BROKER_CONFIGS.get(key)
        if text is None:
            return self.values.get(key)
        if definition is None:
            return text
        return parse_value(f"{LISTENER_PREFIX}{listener_name.lower()}.{key}", definition.type,
                           text, definition.validator)

    def security_protocol(self, listener_name: str) -> str:
        """Security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) of a listener name."""
        return self.listener_security_protocol_map[listener_name.upper()]

    def get(self, name: str) -> object:
        """The configured-or-default typed value of a known broker key."""
        return self.values[name]

    def topic_defaults(self) -> dict[str, object]:
        """Every topic config's default as this broker derives it."""
        return topic_config_defaults(self)


def _parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} is not of the form key=value", None, pair)
        out[key.strip()] = value
    return out


def load_config(path: str | os.PathLike[str] | None, env: Mapping[str, str],
                overrides: Mapping[str, str] | Iterable[str] | None = None) -> BrokerConfig:
    """Load server.properties (if any), then KAFKA_EXT_* from `env`, then `overrides`.

    `overrides` is a mapping or `key=value` strings (`--override`). Raises ConfigError naming the
    key and value on an unknown key, a malformed value, or settings that contradict each other.
    """
    raw: dict[str, str] = {}
    origin: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", None, str(path)) from exc
        for key, value in parse_properties(text).items():
            raw[key] = value
            origin[key] = str(path)
    for key, value in env_overrides(env).items():
        raw[key] = value
        origin[key] = ENV_PREFIX + key.upper().replace(".", "_")
    if overrides is not None:
        pairs = dict(overrides) if isinstance(overrides, Mapping) else _parse_overrides(overrides)
        for key, value in pairs.items():
            raw[key] = value
            origin[key] = "--override"
    return build_config(raw, origin)


def build_config(raw: Mapping[str, str], origin: Mapping[str, str] | None = None) -> BrokerConfig:
    """Validate raw text settings into a BrokerConfig; `origin` names where each key came from."""
    origin = origin or {}
    values: dict[str, object] = {name: d.default for name, d in BROKER_CONFIGS.items()}
    sources: dict[str, ConfigSource] = dict.fromkeys(BROKER_CONFIGS, ConfigSource.DEFAULT_CONFIG)
    listener_configs: dict[str, str] = {}
    for key, text in raw.items():
        if key.startswith(LISTENER_PREFIX) and len(key) > len(LISTENER_PREFIX):
            listener_configs[key] = text
            continue
        definition = BROKER_CONFIGS.get(key)
        if definition is None:
            where = f" (from {origin[key]})" if key in origin else ""
            raise ConfigError(f"unknown configuration {key!r}{where}", key, text)
        try:
            values[key] = parse_value(key, definition.type, text, definition.validator)
        except ConfigError as exc:
            if key in origin:
                raise ConfigError(f"{exc} (from {origin[key]})", key, text) from None
            raise
        sources[key] = ConfigSource.STATIC_BROKER_CONFIG
    return _assemble(values, sources, listener_configs)


def _wildcard_to_hostname(listener: Listener) -> Listener:
    if listener.host in ("", "0.0.0.0", "::"):
        return listener._replace(host=socket.gethostname())
    return listener


class _KRaftSettings(NamedTuple):
    node_id: int
    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    protocol_map: dict[str, str]
    controller_names: tuple[str, ...]
    voters: tuple[QuorumVoter, ...]
    bootstrap: tuple[tuple[str, int], ...]
    inter_broker: str | None


_SECURED_PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
_NON_ROUTABLE_HOSTS = ("", "0.0.0.0", "::")


def _check_kraft(values: dict[str, object], sources: Mapping[str, ConfigSource],
                 fail: Callable[[str, str], ConfigError]) -> _KRaftSettings:
    """KafkaConfig.validateValues' KRaft rules (3.9/4.x): roles, listeners, quorum, advertising.

    The one departure: a combined node with neither controller.quorum.voters nor
    controller.quorum.bootstrap.servers is the embedded single node, its own quorum, and may
    leave node.id and controller.listener.names unset; its inter-broker listener defaults to
    its first broker listener (docs/cluster.md).
    """
    roles = set(_strings(values["process.roles"]))
    is_broker, is_controller = "broker" in roles, "controller" in roles
    controller_names = tuple(n.upper() for n in _strings(values["controller.listener.names"]))
    listeners = tuple(parse_listener(item) for item in _strings(values["listeners"]))
    voters = tuple(parse_quorum_voter(v) for v in _strings(values["controller.quorum.voters"]))
    bootstrap = tuple(
        parse_host_port(v) for v in _strings(values["controller.quorum.bootstrap.servers"]))
    node_id = _as_int(values["node.id"])
    embedded = is_broker and is_controller and not voters and not bootstrap

    # Security protocols: Kafka maps controller listeners to PLAINTEXT when the map is left at
    # its default and nothing uses SSL or SASL.
    protocol_map: dict[str, str] = {}
    for item in _strings(values["listener.security.protocol.map"]):
        name, _, protocol = item.partition(":")
        if name.upper() in protocol_map:
            raise fail("listener.security.protocol.map", f"listener {name} is mapped twice")
        protocol_map[name.upper()] = protocol.upper()
    if (sources["listener.security.protocol.map"] is ConfigSource.DEFAULT_CONFIG
            and not any(n in _SECURED_PROTOCOLS
                        for n in (*controller_names, *(lst.name for lst in listeners)))):
        for name in controller_names:
            protocol_map.setdefault(name, "PLAINTEXT")

    if not listeners:
        raise fail("listeners", "at least one listener is needed")
    for listener in listeners:
        if listener.name not in protocol_map:
            raise fail("listeners",
                       f"listener {listener.name} is not in listener.security.protocol.map")
    ports = [lst.port for lst in listeners if lst.port != 0]
    if len(set(ports)) != len(ports):
        raise fail("listeners", "two listeners use the same port")
    listener_names = {lst.name for lst in listeners}
    for name in controller_names:
        if name not in protocol_map:
            raise fail("controller.listener.names",
                       f"controller listener {name} is not in listener.security.protocol.map")

    # The quorum.
    voter_ids = [v.node_id for v in voters]
    if len(set(voter_ids)) != len(voter_ids):
        raise fail("controller.quorum.voters", "a voter id appears twice")
    if not embedded and not voters and not bootstrap:
        raise fail("controller.quorum.voters",
                   "either controller.quorum.bootstrap.servers must list the bootstrap "
                   "controllers or controller.quorum.voters must list the controllers, when "
                   f"process.roles={','.join(_strings(values['process.roles']))}")
    if not embedded and sources["node.id"] is ConfigSource.DEFAULT_CONFIG:
        raise ConfigError("missing required configuration node.id: every node of a "
                          "multi-node cluster needs one (only the embedded single node, with no "
                          "controller.quorum.voters or controller.quorum.bootstrap.servers, may "
                          "leave it unset)", "node.id", None)
    if is_controller:
        if voters and node_id not in voter_ids:
            raise fail("controller.quorum.voters",
                       f"node.id {node_id} is a controller but not one of the voters "
                       f"{sorted(voter_ids)}")
        for name in controller_names:
            if name not in listener_names:
                raise fail("controller.listener.names",
                           f"a controller must listen on {name}, which is not in listeners")
        if not embedded and not controller_names:
            raise fail("controller.listener.names",
                       "must name at least one listener of 'listeners' when this node is a "
                       "controller of a multi-node quorum")
        if not is_broker:
            others = [lst.name for lst in listeners if lst.name not in controller_names]
            if others:
                raise fail("listeners",
                           "must only contain the controller listeners of "
                           f"controller.listener.names when process.roles=controller, not "
                           f"{','.join(others)}")
    else:
        if node_id in voter_ids:
            raise fail("controller.quorum.voters",
                       f"node.id {node_id} is a voter, but process.roles is only broker")
        if not controller_names:
            raise fail("controller.listener.names",
                       "a broker-only node needs the controllers' listener name")
        for name in controller_names:
            if name in listener_names:
                raise fail("controller.listener.names",
                           f"{name} is a controller listener, so it must not be in listeners "
                           "when process.roles is only broker")

    # What is advertised to clients (brokers) and other controllers.
    advertised_value = values["advertised.listeners"]
    if advertised_value is None:
        advertised_all = tuple(_wildcard_to_hostname(lst) for lst in listeners)
    else:
        advertised_all = tuple(parse_listener(v) for v in _strings(advertised_value))
        names = [lst.name for lst in advertised_all]
        if len(set(names)) != len(names):
            raise fail("advertised.listeners", "each listener name may appear only once")
        for lst in advertised_all:
            if lst.name not in listener_names:
                raise fail("advertised.listeners", f"listener {lst.name} is not in listeners")
            if lst.host in _NON_ROUTABLE_HOSTS:
                raise fail("advertised.listeners", f"{lst.name} must advertise a routable host, "
                                                   f"not the meta-address {lst.host!r}")
    advertised = tuple(lst for lst in advertised_all if lst.name not in controller_names)

    inter_broker = values["inter.broker.listener.name"]
    if inter_broker is not None:
        inter_broker = str(inter_broker).upper()
        if sources["security.inter.broker.protocol"] is not ConfigSource.DEFAULT_CONFIG:
            raise fail("inter.broker.listener.name", "only one of inter.broker.listener.name and "
                                                     "security.inter.broker.protocol may be set")
        if inter_broker not in protocol_map:
            raise fail("inter.broker.listener.name",
                       f"listener {inter_broker} is not in listener.security.protocol.map")
    if is_broker:
        if not advertised:
            raise fail("listeners", "a broker needs at least one listener that is not a "
                                    "controller's (are all of them in controller.listener.names?)")
        key = "inter.broker.listener.name"
        if (inter_broker is None and embedded
                and sources["security.inter.broker.protocol"] is ConfigSource.DEFAULT_CONFIG):
            inter_broker = advertised[0].name  # a single node has no broker to talk to
        elif inter_broker is None:
            key = "security.inter.broker.protocol"
            inter_broker = str(values["security.inter.broker.protocol"])
        if inter_broker not in {lst.name for lst in advertised}:
            raise fail(key, f"the inter-broker listener {inter_broker} must be one of the "
                            "advertised broker listeners: "
                            f"{','.join(lst.name for lst in advertised)}")
    return _KRaftSettings(node_id, listeners, advertised, protocol_map, controller_names, voters,
                          bootstrap, None if inter_broker is None else str(inter_broker))


def _assemble(values: dict[str, object], sources: dict[str, ConfigSource],
              listener_configs: dict[str, str]) -> BrokerConfig:
    """Resolve synonyms and derived defaults, then check that settings agree with each other."""

    def fail(key: str, reason: str) -> ConfigError:
        return _invalid(key, format_config_value(values[key]), reason)

    roles = _strings(values["process.roles"])
    kraft = _check_kraft(values, sources, fail)
    listeners, advertised, protocol_map = kraft.listeners, kraft.advertised, kraft.protocol_map
    controller_names, voters = kraft.controller_names, kraft.voters
    bootstrap, inter_broker, node_id = kraft.bootstrap, kraft.inter_broker, kraft.node_id

    dirs_value = values["log.dirs"]
    dir_texts = _strings(dirs_value) if dirs_value is not None else (str(values["log.dir"]),)
    log_dirs = [Path(d).expanduser().absolute() for d in dir_texts]
    if len(set(log_dirs)) != len(log_dirs):
        raise fail("log.dirs" if dirs_value is not None else "log.dir", "a directory is listed twice")
    values["log.dirs"] = tuple(str(d) for d in log_dirs)
    metadata_dir_value = values["metadata.log.dir"]
    metadata_log_dir = (Path(str(metadata_dir_value)).expanduser().absolute()
                        if metadata_dir_value is not None else log_dirs[0])

    cluster_id = values["cluster.id"]
    cluster_id_generated = cluster_id is None
    if cluster_id is None:
        cluster_id = random_uuid()  # as `kafka-ext storage random-uuid` prints
        values["cluster.id"] = cluster_id

    storage_url = values["diskless.storage.url"]
    if storage_url is None:
        storage_url = (log_dirs[0] / "objects").as_uri()
        values["diskless.storage.url"] = storage_url

    move_threads = values["num.replica.move.threads"]
    if move_threads is None:
        move_threads = len(log_dirs)
        values["num.replica.move.threads"] = move_threads

    if _as_int(values["group.min.session.timeout.ms"]) > _as_int(
            values["group.max.session.timeout.ms"]):
        raise fail("group.min.session.timeout.ms", "must not exceed group.max.session.timeout.ms")
    queued_bytes = _as_int(values["queued.max.request.bytes"])
    if 0 <= queued_bytes < _as_int(values["socket.request.max.bytes"]):  # as Kafka requires
        raise fail("queued.max.request.bytes", "must be -1 or at least socket.request.max.bytes")
    try:
        parse_overrides(str(values["max.connections.per.ip.overrides"] or ""))
    except ValueError as exc:
        raise fail("max.connections.per.ip.overrides", str(exc)) from None

    def i(name: str) -> int:
        value = values[name]
        assert isinstance(value, int), name
        return value

    def b(name: str) -> bool:
        value = values[name]
        assert isinstance(value, bool), name
        return value

    def s(name: str) -> str:
        return str(values[name])

    def eff(head: str) -> int:
        value = _effective(values, head)
        assert isinstance(value, int), head
        return value

    rack = values["broker.rack"]
    return BrokerConfig(
        node_id=node_id,
        process_roles=roles,
        cluster_id=str(cluster_id),
        cluster_id_generated=cluster_id_generated,
        broker_rack=None if rack is None else str(rack),
        listeners=listeners,
        advertised_listeners=advertised,
        listener_security_protocol_map=protocol_map,
        controller_listener_names=controller_names,
        controller_quorum_voters=voters,
        controller_quorum_bootstrap_servers=bootstrap,
        inter_broker_listener_name=None if inter_broker is None else str(inter_broker),
        listener_configs=listener_configs,
        log_dirs=log_dirs,
        metadata_log_dir=metadata_log_dir,
        num_partitions=i("num.partitions"),
        default_replication_factor=i("default.replication.factor"),
        min_insync_replicas=i("min.insync.replicas"),
        auto_create_topics_enable=b("auto.create.topics.enable"),
        delete_topic_enable=b("delete.topic.enable"),
        unclean_leader_election_enable=b("unclean.leader.election.enable"),
        compression_type=s("compression.type"),
        log_cleanup_policy=_strings(values["log.cleanup.policy"]),
        log_segment_bytes=i("log.segment.bytes"),
        log_roll_ms=eff("log.roll.ms"),
        log_roll_jitter_ms=eff("log.roll.jitter.ms"),
        log_index_interval_bytes=i("log.index.interval.bytes"),
        log_index_size_max_bytes=i("log.index.size.max.bytes"),
        log_retention_ms=eff("log.retention.ms"),
        log_retention_bytes=i("log.retention.bytes"),
        log_retention_check_interval_ms=i("log.retention.check.interval.ms"),
        log_flush_interval_messages=i("log.flush.interval.messages"),
        log_flush_interval_ms=eff("log.flush.interval.ms"),
        log_flush_scheduler_interval_ms=i("log.flush.scheduler.interval.ms"),
        log_flush_offset_checkpoint_interval_ms=i("log.flush.offset.checkpoint.interval.ms"),
        log_message_timestamp_type=s("log.message.timestamp.type"),
        message_max_bytes=i("message.max.bytes"),
        socket_request_max_bytes=i("socket.request.max.bytes"),
        connections_max_idle_ms=i("connections.max.idle.ms"),
        queued_max_requests=i("queued.max.requests"),
        queued_max_request_bytes=i("queued.max.request.bytes"),
        replica_lag_time_max_ms=i("replica.lag.time.max.ms"),
        group_initial_rebalance_delay_ms=i("group.initial.rebalance.delay.ms"),
        group_min_session_timeout_ms=i("group.min.session.timeout.ms"),
        group_max_session_timeout_ms=i("group.max.session.timeout.ms"),
        offsets_topic_num_partitions=i("offsets.topic.num.partitions"),
        offsets_topic_replication_factor=i("offsets.topic.replication.factor"),
        offsets_retention_ms=i("offsets.retention.minutes") * 60_000,
        transaction_state_log_num_partitions=i("transaction.state.log.num.partitions"),
        transaction_state_log_replication_factor=i("transaction.state.log.replication.factor"),
        transaction_state_log_min_isr=i("transaction.state.log.min.isr"),
        transaction_max_timeout_ms=i("transaction.max.timeout.ms"),
        transactional_id_expiration_ms=i("transactional.id.expiration.ms"),
        producer_id_expiration_ms=i("producer.id.expiration.ms"),
        intra_broker_throttled_rate=i("intra.broker.throttled.rate"),
        num_replica_move_threads=i("num.replica.move.threads"),
        delete_topic_partition_enable=b("delete.topic.partition.enable"),
        delete_topic_partition_interval_delay_ms=i("delete.topic.partition.interval.delay.ms"),
        diskless_metadata_topic_num_partitions=i("diskless.metadata.topic.num.partitions"),
        diskless_metadata_topic_replication_factor=i(
            "diskless.metadata.topic.replication.factor"),
        diskless_coordinator_orphan_scan_interval_ms=i(
            "diskless.coordinator.orphan.scan.interval.ms"),
        diskless_coordinator_orphan_scan_grace_period_ms=i(
            "diskless.coordinator.orphan.scan.grace.period.ms"),
        diskless_storage_url=s("diskless.storage.url"),
        diskless_wal_max_bytes=i("diskless.wal.max.bytes"),
        diskless_wal_max_ms=i("diskless.wal.max.ms"),
        diskless_file_deletion_grace_ms=i("diskless.file.deletion.grace.ms"),
        diskless_fetch_cache_max_bytes=i("diskless.fetch.cache.max.bytes"),
        diskless_metadata_snapshot_interval_records=i(
            "diskless.metadata.snapshot.interval.records"),
        values=values,
        sources=sources,
    )


def _strings(value: object) -> tuple[str, ...]:
    assert isinstance(value, tuple)
    return tuple(str(item) for item in value)


def _as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


# ---------------------------------------------------------------------------------------------
# Topic configuration


def validate_topic_config(name: str, value: str | None) -> object:
    """Parse and validate one topic config; return its typed value or raise ConfigError.

    CreateTopics/AlterConfigs handlers answer INVALID_CONFIG with the error's message; store
    `format_config_value(result)` as the canonical text form.
    """
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"unknown topic configuration {name!r}", name, value)
    if value is None:
        raise ConfigError(f"null value is not supported for topic configuration {name}", name, None)
    return parse_value(name, definition.type, value, definition.validator)


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, object]:
    """Validate a whole set of topic overrides, including rules between keys."""
    typed = {name: validate_topic_config(name, value) for name, value in configs.items()}
    low = typed.get("min.compaction.lag.ms")
    high = typed.get("max.compaction.lag.ms")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        raise ConfigError(
            f"min.compaction.lag.ms ({low}) must not exceed max.compaction.lag.ms ({high})",
            "min.compaction.lag.ms", configs["min.compaction.lag.ms"])
    return typed


def _topic_default(values: Mapping[str, object], definition: TopicConfigDef) -> object:
    """The broker-derived default of a topic key: its first broker synonym with a value."""
    for synonym in definition.broker_synonyms:
        value = _effective(values, _SYNONYM_OF.get(synonym, synonym))
        if value is not None:
            return value
    return definition.default


def topic_config_defaults(config: BrokerConfig | DynamicBrokerConfig) -> dict[str, object]:
    """Every topic config's default on this broker (broker synonyms applied), with the dynamic
    broker configs on top when `config` carries them."""
    values = config.values
    return {name: _topic_default(values, d) for name, d in TOPIC_CONFIGS.items()}


def effective_topic_config(config: BrokerConfig | DynamicBrokerConfig,
                           overrides: Mapping[str, str]) -> dict[str, object]:
    """A topic's full typed configuration: broker-derived defaults plus its own overrides."""
    merged = topic_config_defaults(config)
    merged.update(validate_topic_configs(overrides))
    return merged


# ---------------------------------------------------------------------------------------------
# DescribeConfigs


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One place a value could come from, in the order Kafka applies them."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs result entry; `value` is None for sensitive or null values."""

    name: str
    value: str | None
    read_only: bool
    is_sensitive: bool
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    config_type: ConfigType
    documentation: str | None

    @property
    def is_default(self) -> bool:
        """DescribeConfigs v0's IsDefault flag."""
        return self.source is ConfigSource.DEFAULT_CONFIG


# ---------------------------------------------------------------------------------------------
# Dynamic broker configs (Kafka's DynamicBrokerConfig)

# Broker configs IncrementalAlterConfigs/AlterConfigs may change at run time: ConfigRecords on
# the BROKER resource named after a broker id (that broker) or "" (the cluster-wide default).
# They are Kafka's DynamicBrokerConfig.AllDynamicConfigs less what kafka-ext cannot apply
# without a restart: thread counts, listeners and their TLS/SASL settings, connection limits,
# log.cleaner.threads, log.roll.jitter.ms, log.preallocate, log.segment.delete.delay.ms.
#
# The topic defaults (Kafka's DynamicLogConfig: the first broker synonym of each topic config):
# a topic without an override of its own takes them into its LogConfig at once.
DYNAMIC_LOG_CONFIGS = frozenset({
    "log.cleanup.policy", "compression.type", "log.cleaner.delete.retention.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.index.interval.bytes",
    "message.max.bytes", "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "min.insync.replicas", "log.retention.bytes",
    "log.retention.ms", "log.segment.bytes", "log.index.size.max.bytes", "log.roll.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
    # read by the controller when it elects a leader (QuorumController.unclean_allowed)
    "unclean.leader.election.enable",
})
# Kafka's LogCleaner.RECONFIGURABLE_CONFIGS the cleaner reads per round.
DYNAMIC_CLEANER_CONFIGS = frozenset({"log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size"})
# Kafka's DynamicReplicationConfig throttles (docs/jbod.md, docs/replication.md).
DYNAMIC_REPLICATION_CONFIGS = frozenset({"intra.broker.throttled.rate",
                                         "leader.replication.throttled.rate",
                                         "follower.replication.throttled.rate"})
# Kafka's DynamicProducerStateManagerConfig: read by each producer expiration pass.
DYNAMIC_PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms"})
DYNAMIC_BROKER_CONFIGS = (DYNAMIC_LOG_CONFIGS | DYNAMIC_CLEANER_CONFIGS
                          | DYNAMIC_REPLICATION_CONFIGS | DYNAMIC_PRODUCER_STATE_CONFIGS)


def check_dynamic_broker_configs(names: Iterable[str]) -> None:
    """ConfigError naming every key that cannot change at run time, in Kafka's words
    (DynamicBrokerConfig.validateConfigs, which prints a Scala Set)."""
    refused = sorted(n for n in set(names) if n not in DYNAMIC_BROKER_CONFIGS)
    if refused:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(refused)})",
                          refused[0])


def validate_dynamic_broker_config(name: str, value: str) -> str:
    """The normalised text of a run-time broker config change; ConfigError if not allowed."""
    check_dynamic_broker_configs([name])
    definition = BROKER_CONFIGS[name]
    return format_config_value(parse_value(name, definition.type, value,
                                           definition.validator)) or ""


@dataclass(frozen=True, slots=True)
class DynamicBrokerConfig:
    """This broker's configs as they stand at run time (Kafka's DynamicBrokerConfig): a dynamic
    key's ConfigRecord on this broker's id wins over its record on "" (the cluster default),
    which wins over server.properties, which wins over Kafka's default.

    Immutable: the broker builds a new one when either dynamic layer changes, so whoever holds
    one reads a consistent set. Records for keys this build does not change at run time, or
    with values it cannot parse, are left out (logged by `of`).
    """

    static: BrokerConfig
    node_overrides: Mapping[str, str]  # applied ConfigRecords on BROKER "<node.id>", as text
    cluster_overrides: Mapping[str, str]  # applied ConfigRecords on BROKER "", as text
    values: Mapping[str, object]  # every broker key, typed, the dynamic values applied

    @classmethod
    def of(cls, static: BrokerConfig, node_overrides: Mapping[str, str] | None = None,
           cluster_overrides: Mapping[str, str] | None = None) -> DynamicBrokerConfig:
        values = dict(static.values)
        layers: list[dict[str, str]] = []
        for overrides in (cluster_overrides or {}, node_overrides or {}):  # the node's last
            applied: dict[str, str] = {}
            for name, text in overrides.items():
                definition = BROKER_CONFIGS.get(name)
                if definition is None or name not in DYNAMIC_BROKER_CONFIGS:
                    _log.warning("ignoring dynamic broker config %s: not changeable at run "
                                 "time in this version", name)
                    continue
                try:
                    values[name] = parse_value(name, definition.type, text,
                                               definition.validator)
                except ConfigError as exc:
                    _log.warning("ignoring dynamic broker config %s=%s: %s", name, text, exc)
                    continue
                applied[name] = text
            layers.append(applied)
        return cls(static, layers[1], layers[0], values)

    def effective(self, name: str) -> object:
        """A key's value now; for a key with synonyms (log.retention.ms), the first that is
        set, in the first key's unit."""
        return _effective(self.values, _SYNONYM_OF.get(name, name))

    def topic_defaults(self) -> dict[str, object]:
        """Every topic config's default now (what a topic without its own override uses)."""
        return topic_config_defaults(self)


def _dynamic(config: BrokerConfig | DynamicBrokerConfig) -> DynamicBrokerConfig:
    return config if isinstance(config, DynamicBrokerConfig) else DynamicBrokerConfig.of(config)


def _broker_synonyms(config: DynamicBrokerConfig, head: str,
                     per_broker: bool = True) -> tuple[ConfigSynonym, ...]:
    """Where `head`'s value may come from, in Kafka's order (ConfigHelper.configSynonyms):
    every synonym's per-broker dynamic value (unless describing the cluster default), then
    every one's cluster-default dynamic value, then the static ones."""
    members = [name for name, _ in BROKER_SYNONYMS.get(head, ((head, 1),))]
    out: list[ConfigSynonym] = []
    layers = [(config.cluster_overrides, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    if per_broker:
        layers.insert(0, (config.node_overrides, ConfigSource.DYNAMIC_BROKER_CONFIG))
    for overrides, source in layers:
        out += [ConfigSynonym(name, None if BROKER_CONFIGS[name].sensitive else overrides[name],
                              source)
                for name in members if name in overrides]
    static = config.static
    for name in members:
        value = static.values[name]
        if value is None:
            continue
        text = None if BROKER_CONFIGS[name].sensitive else format_config_value(value)
        out.append(ConfigSynonym(name, text, static.sources[name]))
    return tuple(out)


def describe_broker_configs(config: BrokerConfig | DynamicBrokerConfig,
                            names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for this broker (resource name its id): every key's value now,
    dynamic keys writable, with their synonyms (Kafka's ConfigHelper, perBrokerConfig).

    `names` None means every key; unknown names are left out, as Kafka does.
    """
    dynamic = _dynamic(config)
    wanted = BROKER_CONFIGS.keys() if names is None else [n for n in names if n in BROKER_CONFIGS]
    entries: list[ConfigEntry] = []
    for name in wanted:
        definition = BROKER_CONFIGS[name]
        head = _SYNONYM_OF.get(name, name)
        if head == name:
            synonyms = _broker_synonyms(dynamic, name)
            value = _effective(dynamic.values, name)
        else:
            synonyms = tuple(s for s in _broker_synonyms(dynamic, head) if s.name == name)
            value = dynamic.values[name]
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            name=name,
            value=None if definition.sensitive else format_config_value(value),
            read_only=name not in DYNAMIC_BROKER_CONFIGS,
            is_sensitive=definition.sensitive,
            source=source,
            synonyms=synonyms,
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries


def describe_broker_default_configs(config: DynamicBrokerConfig,
                                    names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for the cluster-wide default (resource name ""): only the keys
    set there, without per-broker synonyms, as Kafka answers."""
    wanted = (config.cluster_overrides.keys() if names is None
              else [n for n in names if n in config.cluster_overrides])
    entries: list[ConfigEntry] = []
    for name in wanted:
        definition = BROKER_CONFIGS[name]
        synonyms = _broker_synonyms(config, name, per_broker=False)
        entries.append(ConfigEntry(
            name=name,
            value=None if definition.sensitive else config.cluster_overrides[name],
            read_only=False,
            is_sensitive=definition.sensitive,
            source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            synonyms=synonyms,
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries


def describe_topic_configs(config: BrokerConfig | DynamicBrokerConfig,
                           overrides: Mapping[str, str],
                           names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for a topic with the given stored overrides (text form).

    Synonyms list the topic override, then the broker keys it falls back to, each level's
    (per-broker dynamic, cluster-default dynamic, static) most specific first.
    """
    dynamic = _dynamic(config)
    wanted = TOPIC_CONFIGS.keys() if names is None else [n for n in names if n in TOPIC_CONFIGS]
    entries: list[ConfigEntry] = []
    for name in wanted:
        definition = TOPIC_CONFIGS[name]
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        seen_heads: set[str] = set()
        for synonym in definition.broker_synonyms:
            head = _SYNONYM_OF.get(synonym, synonym)
            if head in seen_heads:
                continue
            seen_heads.add(head)
            synonyms.extend(_broker_synonyms(dynamic, head))
        if name in overrides:
            value = format_config_value(validate_topic_config(name, overrides[name]))
        else:
            value = format_config_value(_topic_default(dynamic.values, definition))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            name=name,
            value=value,
            read_only=definition.create_only,
            is_sensitive=False,
            source=source,
            synonyms=tuple(synonyms),
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries
