"""Driver side of the `kafka-ext` source: topic-partitions and offsets from the cluster.

Plays the part of Spark's `KafkaOffsetReaderAdmin`: metadata (partitions and leaders) and
ListOffsets (earliest, latest, by timestamp) through a confluent-kafka AdminClient, with the
isolation level of `kafka.isolation.level` so read_committed reads end at the last stable offset.
Also Spark's offset JSON for streaming checkpoints: {"topic":{"0":23,"1":45}}.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as AdminOffsetSpec

from kafka_ext.client.metadata import ClusterMetadata, cluster_from_response
from kafka_ext.client.metadata import TopicPartition as ClientTopicPartition
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.spark.options import (
    EARLIEST,
    LATEST,
    KafkaSourceOptionError,
    KafkaSourceOptions,
    OffsetKind,
    OffsetSpec,
    SubscriptionKind,
)
from kafka_ext.spark.planning import (
    ChunkLocator,
    ChunkPiece,
    LeaderLocator,
    ReplicaLocation,
    ReplicaLocator,
)

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
PartitionOffsets = dict[TopicPartitionKey, int]

ADMIN_TIMEOUT_S = 30.0
NO_OFFSET = -1  # ListOffsets by timestamp: no record at or after the timestamp

# librdkafka properties an AdminClient takes from the user's kafka.* options: how to reach and
# authenticate to brokers. Consumer-only properties would only draw warnings there.
_CONNECTION_PREFIXES = ("bootstrap.servers", "client.", "security.", "ssl.", "sasl.", "socket.",
                        "broker.", "api.version", "metadata.", "reconnect.", "retry.backoff",
                        "connections.", "topic.metadata", "allow.auto.create.topics")


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} as Spark's Kafka offset JSON object, sorted."""
    document: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def offsets_from_json(document: Mapping[str, Any] | str) -> PartitionOffsets:
    """The inverse of offsets_to_json; also accepts the JSON text."""
    parsed: Mapping[str, Any] = json.loads(document) if isinstance(document, str) else document
    return {(topic, int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()}


class KafkaOffsetReader:
    """Answers "which partitions, which offsets" for one source; the driver's only client.

    Not thread-safe; each planner (batch reader, stream reader) owns one and closes it.
    """

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        config: dict[str, str | int | float | bool] = {
            k: v for k, v in options.consumer_config.items() if k.startswith(_CONNECTION_PREFIXES)}
        self._admin = AdminClient(config)
        self._isolation = (IsolationLevel.READ_COMMITTED if options.read_committed
                           else IsolationLevel.READ_UNCOMMITTED)

    def close(self) -> None:
        """Nothing to flush: an AdminClient is freed with its last reference."""

    def partitions(self) -> dict[TopicPartitionKey, ReplicaLocation | None]:
        """Every existing partition of the subscription, with its leader (None if it has none)."""
        metadata = self._retry("fetch metadata",
                               lambda: self._admin.list_topics(timeout=ADMIN_TIMEOUT_S))
        brokers = {node_id: ReplicaLocation(node_id, b.host, b.port)
                   for node_id, b in metadata.brokers.items()}
        subscription = self.options.subscription
        result: dict[TopicPartitionKey, ReplicaLocation | None] = {}
        for name, topic in metadata.topics.items():
            if topic.error is not None or not subscription.matches(name):
                continue
            if subscription.kind is SubscriptionKind.SUBSCRIBE_PATTERN and name.startswith("__"):
                continue  # internal topics are never matched by a pattern, as in Kafka's consumer
            for partition_id, partition in topic.partitions.items():
                if (subscription.kind is SubscriptionKind.ASSIGN
                        and (name, partition_id) not in subscription.assigned):
                    continue
                result[(name, partition_id)] = brokers.get(partition.leader)
        return result

    def replica_locator(self, leaders: Mapping[TopicPartitionKey, ReplicaLocation | None]
                        ) -> ReplicaLocator:
        """Where planned ranges are read: each partition's leader, or for the offsets of an
        inactive chunk (seed 000) the replica of it a reader is sent to. Chunks are in
        Metadata's tagged fields, which librdkafka does not read: one Metadata request goes
        through our codec (PLAINTEXT only; without it every range is read via the leader,
        which sends librdkafka to the chunk's replica itself)."""
        cluster = _cluster_metadata(str(self.options.consumer_config.get("bootstrap.servers", "")),
                                    sorted({topic for topic, _ in leaders}))
        if cluster is None:
            return LeaderLocator(leaders)
        chunks: dict[TopicPartitionKey, list[ChunkPiece]] = {}
        for topic, partition in leaders:
            info = cluster.partition(ClientTopicPartition(topic, partition))
            for chunk in info.chunks if info is not None else ():
                node = cluster.read_node_of(ClientTopicPartition(topic, partition),
                                            chunk.start_offset)
                broker = cluster.brokers.get(node)
                replica = (None if broker is None
                           else ReplicaLocation(node, broker.host, broker.port))
                chunks.setdefault((topic, partition), []).append(
                    ChunkPiece(chunk.start_offset, chunk.stop_offset + 1, replica))
        return ChunkLocator(leaders, chunks) if chunks else LeaderLocator(leaders)

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Log start offsets; a partition that no longer exists is left out of every answer."""
        return self._list_offsets({tp: AdminOffsetSpec.earliest() for tp in partitions})

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Latest offsets: the high watermark, or the last stable offset under read_committed."""
        return self._list_offsets({tp: AdminOffsetSpec.latest() for tp in partitions})

    def for_timestamps(self, timestamps: Mapping[TopicPartitionKey, int]) -> PartitionOffsets:
        """First offset whose timestamp is >= the given one; NO_OFFSET where there is none."""
        return self._list_offsets({tp: AdminOffsetSpec.for_timestamp(ts)
                                   for tp, ts in timestamps.items()})

    def resolve(self, spec: OffsetSpec, partitions: Iterable[TopicPartitionKey], *,
                starting: bool) -> PartitionOffsets:
        """Concrete offsets of `spec` for exactly `partitions` (a starting or an ending side)."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        if spec.kind is OffsetKind.EARLIEST:
            return self.earliest(wanted)
        if spec.kind is OffsetKind.LATEST:
            return self.latest(wanted)
        if spec.kind is OffsetKind.GLOBAL_TIMESTAMP:
            return self._by_timestamp(spec, {tp: spec.timestamp_ms for tp in wanted}, starting)
        _check_covers(spec, wanted)
        if spec.kind is OffsetKind.TIMESTAMPS:
            return self._by_timestamp(spec, {tp: spec.offsets[tp] for tp in wanted}, starting)
        given = {tp: spec.offsets[tp] for tp in wanted}
        earliest = self.earliest([tp for tp, o in given.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in given.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in given.items()}

    def _by_timestamp(self, spec: OffsetSpec, timestamps: dict[TopicPartitionKey, int],
                      starting: bool) -> PartitionOffsets:
        found = self.for_timestamps(timestamps)
        missing = [tp for tp, offset in found.items() if offset == NO_OFFSET]
        if missing and starting and not self.options.starting_timestamp_strategy_latest:
            raise KafkaSourceOptionError(
                f"option {spec.option}: no record at or after the timestamp in "
                f"{', '.join(f'{t}-{p}' for t, p in missing)}; set "
                f"startingOffsetsByTimestampStrategy=latest to start those at the latest offset")
        # Spark's rule: an ending timestamp past the last record means the latest offset.
        latest = self.latest(missing)
        return {tp: latest.get(tp, offset) for tp, offset in found.items()}

    def _list_offsets(self, specs: dict[TopicPartitionKey, Any]) -> PartitionOffsets:
        if not specs:
            return {}

        def attempt() -> PartitionOffsets:
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): s for (t, p), s in specs.items()},
                isolation_level=self._isolation, request_timeout=ADMIN_TIMEOUT_S)
            offsets: PartitionOffsets = {}
            for tp, future in futures.items():
                try:
                    offsets[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as exc:
                    if not _gone(exc):
                        raise
            return offsets

        return self._retry("list offsets", attempt)

    def _retry(self, what: str, call: Any) -> Any:
        """Retry client errors fetchOffset.numRetries times, fetchOffset.retryIntervalMs apart."""
        tries = self.options.fetch_offset_num_retries + 1
        for attempt in range(tries):
            try:
                return call()
            except KafkaException as exc:
                if attempt == tries - 1 or not _retriable(exc):
                    raise
                log.warning("kafka-ext source: %s failed (%s); retrying", what, exc)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")


def _cluster_metadata(bootstrap: str, topics: list[str]) -> ClusterMetadata | None:
    """The topics' metadata with their chunks, from the first bootstrap broker that answers
    Metadata v12 through our codec; None when none does (or the listener is not PLAINTEXT)."""
    Request = registry().requests[ApiKey.METADATA].cls
    request = Request(topics=[Request.MetadataRequestTopic(name=t) for t in topics],
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    for address in filter(None, (a.strip() for a in bootstrap.split(","))):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=ADMIN_TIMEOUT_S) as sock:
                sock.settimeout(ADMIN_TIMEOUT_S)
                identify(sock)
                return cluster_from_response(round_trip(sock, ApiKey.METADATA, 12, request, 1))
        except (OSError, ValueError, KafkaError, DecodeError) as exc:
            log.debug("chunk metadata from %s: %s", address, exc)
    return None


def _gone(exc: KafkaException) -> bool:
    """The partition (or its whole topic) no longer exists: callers treat it as deleted."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, confluent_kafka.KafkaError) and error.code() in (
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, confluent_kafka.KafkaError._UNKNOWN_TOPIC,
        confluent_kafka.KafkaError._UNKNOWN_PARTITION)


def _retriable(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    if not isinstance(error, confluent_kafka.KafkaError):
        return False
    return bool(error.retriable()) or error.code() in (
        confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError._TIMED_OUT,
        confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
        confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION)


def _check_covers(spec: OffsetSpec, partitions: list[TopicPartitionKey]) -> None:
    """Spark's rule: per-partition JSON must name every partition the subscription has."""
    missing = [tp for tp in partitions if tp not in spec.offsets]
    unknown = sorted(set(spec.offsets) - set(partitions))
    if unknown:
        raise KafkaSourceOptionError(
            f"option {spec.option} names partitions the subscription does not have: "
            f"{', '.join(f'{t}-{p}' for t, p in unknown)}")
    if missing:
        raise KafkaSourceOptionError(
            f"option {spec.option} must give every partition of the subscription; missing "
            f"{', '.join(f'{t}-{p}' for t, p in missing)} (use -2 for earliest, -1 for latest)")
