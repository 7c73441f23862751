"""QuorumController: validates metadata changes, appends their records, replays them.

Records reach `__cluster_metadata` through the Raft quorum (kafka_ext/raft): the active
controller is the quorum's leader; it appends a change's records as one batch and answers
once they are committed and applied here. Every node applies committed records the same way
(`apply_committed`), or loads a snapshot the leader sent (`load_snapshot`). Operations are
serialised by one lock, as Kafka's controller runs its event queue on one thread. Listeners are
told (old image, new image) after every change; the broker creates and deletes logs there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafka_ext.controller.chunk_control import (
    ChunkChange,
    ChunkCreation,
    chunk_change_records,
    create_chunk_records,
)
from kafka_ext.controller.client_quota_control import (
    QuotaAlteration,
    QuotaEntity,
    alter_client_quotas,
)
from kafka_ext.controller.cluster_control import (
    BrokerHeartbeats,
    BrokerListener,
    HeartbeatAnswer,
    alive_brokers,
    check_broker_epoch,
    controlled_shutdown_records,
    eligible_brokers,
    fence_records,
    leads_anything,
    offline_dir_records,
    registration_records,
    unfence_records,
    unregister_records,
)
from kafka_ext.controller.features import FeatureUpdate, feature_records
from kafka_ext.controller.image import (
    BROKER_RESOURCE,
    MODE_NONE,
    READ_ONLY,
    TOPIC_RESOURCE,
    UNASSIGNED_DIR,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from kafka_ext.controller.metadata_log import METADATA_TOPIC, replay
from kafka_ext.controller.partition_change import (
    LEADER_UNCHANGED,
    PREFERRED,
    ElrRule,
    elect_leader,
    isr_change,
    reassign,
)
from kafka_ext.controller.quorum_status import QuorumStatusSource, RaftQuorumStatus
from kafka_ext.controller.security_control import (
    ScramDeletion,
    ScramUpsertion,
    acl_creation_records,
    acl_deletion_records,
    scram_changes,
)
from kafka_ext.controller.snapshot import read_snapshot_image, write_snapshot
from kafka_ext.network.node_client import NodeChannels
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.raft.kafka_metadata_log import KafkaMetadataLog
from kafka_ext.raft.messages import OffsetAndEpoch, ReplicaKey
from kafka_ext.raft.raft_manager import RaftManager
from kafka_ext.security.acl import AclEntry, AclFilter
from kafka_ext.server.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigType,
    check_dynamic_broker_configs,
    validate_dynamic_broker_config,
)
from kafka_ext.share.group_config import GROUP_RESOURCE

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
# Kafka's controller bounds the records one request may generate (MAX_RECORDS_PER_USER_OP).
MAX_RECORDS_PER_USER_OP = 10000
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION_LEVEL = 25  # 4.0-IV3, when the dirs hold no bootstrap.checkpoint
# Kafka's controller refuses a block that would pass Long.MAX_VALUE minus one block.
MAX_PRODUCER_ID = (1 << 63) - 1

ImageListener = Callable[[MetadataImage, MetadataImage], None]
# KIP-599: called with a topic's partition mutations before they are recorded; raises
# KafkaError(THROTTLING_QUOTA_EXCEEDED) to refuse that topic (Kafka's applyPartitionChangeQuota).
MutationQuota = Callable[[int], None]
TopicConfigValidator = Callable[[str, str], str]


# Topics only the broker itself may create.
RESERVED_TOPICS = frozenset({METADATA_TOPIC})
# KIP-1164: a coordinator id is a partition of this topic (the diskless coordinator, which
# imports this module, uses this name).
DISKLESS_METADATA_TOPIC = "__diskless_metadata"
DISKLESS_ENABLE_CONFIG = "diskless.enable"
UNCLEAN_CONFIG = "unclean.leader.election.enable"
MIN_INSYNC_CONFIG = "min.insync.replicas"
# The coordinators' own topics keep local logs.
_NEVER_DISKLESS = frozenset({METADATA_TOPIC, DISKLESS_METADATA_TOPIC, "__consumer_offsets",
                             "__transaction_state"})


def check_topic_name(name: str) -> None:
    """Kafka's topic name rules: 1-249 chars of [a-zA-Z0-9._-], not "." or ".."."""
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name {name!r} contains characters other than ASCII "
                         "alphanumerics, '.', '_' and '-'")


@dataclass(slots=True)
class TopicCreation:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(slots=True)
class TopicCreationResult:
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic_id: uuid.UUID = ZERO_UUID
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition: the ISR its leader proposes, with the epochs it
    holds (both must be the controller's current ones)."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # KIP-903 (AlterPartition v3): each member's broker epoch as its fetches carried it, in
    # new_isr's order; -1 (or none given) is not checked.
    new_isr_epochs: tuple[int, ...] = ()


@dataclass(slots=True)
class IsrChangeResult:
    change: IsrChange
    error: ErrorCode
    partition: PartitionImage | None = None  # the partition after the change, when it applied


@dataclass(slots=True)
class ConfigChange:
    """One IncrementalAlterConfigs operation: SET 0, DELETE 1, APPEND 2, SUBTRACT 3."""

    name: str
    op: int
    value: str | None


def rack_alternating(brokers: list[int], racks: dict[int, str]) -> list[int]:
    """Brokers in an order that takes one from each rack in turn (Kafka's rack-aware
    assignment: racks sorted by name, brokers by id within a rack); unchanged without racks."""
    if not racks:
        return brokers
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        by_rack.setdefault(racks.get(broker, ""), []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    ordered: list[int] = []
    for n in range(max(len(q) for q in queues)):
        ordered += [q[n] for q in queues if n < len(q)]
    return ordered


def diskless_coordinator_of(topic_id: uuid.UUID, partition: int, coordinators: int) -> int:
    """The coordinator of a new diskless partition: round robin from a per-topic start.

    The start comes from the topic id, so small topics do not all land on coordinator 0, and
    partitions added later continue the same round robin.
    """
    return (topic_id.int + partition) % coordinators


def _check_diskless_configs(topic: str, configs: dict[str, str]) -> None:
    """KIP-1150: diskless topics are not compacted, and internal topics are never diskless."""
    if configs.get(DISKLESS_ENABLE_CONFIG) != "true":
        return
    if topic in _NEVER_DISKLESS:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"internal topic {topic} cannot be diskless")
    if "compact" in configs.get("cleanup.policy", "").split(","):
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         "diskless topics cannot be compacted (cleanup.policy=compact)")


def image_from_log(metadata_log: Any) -> MetadataImage:
    """What a `__cluster_metadata` log holds, committed or not: its latest snapshot and every
    record after it (offline inspection of a stopped node's log; blocking)."""
    metadata = KafkaMetadataLog(metadata_log)
    snapshot = metadata.latest_snapshot_id()
    image = (read_snapshot_image(metadata.snapshot_path(snapshot)) if snapshot is not None
             else MetadataImage())
    records = [(name, record) for _, name, record in replay(metadata_log, image.offset + 1)]
    if records:
        image = image.apply_all(image.offset + 1, records)
    return replace(image, offset=max(image.offset, metadata_log.log_end_offset - 1))


class QuorumController:
    """Owns `__cluster_metadata`; guarded by its lock."""

    def __init__(self, node_id: int, metadata_log: Any, *, default_partitions: int,
                 default_replication_factor: int, validate_topic_config: TopicConfigValidator,
                 run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]],
                 diskless_coordinators: int = 10, raft: RaftManager | None = None,
                 snapshot_bytes: int = 20 * 1024 * 1024,
                 snapshot_interval_ms: int = 3600000,
                 broker_session_timeout_ms: int = 9000,
                 broker_connection_loss_timeout_ms: int = -1, is_broker: bool = True,
                 unclean_leader_election: bool = False, min_insync_replicas: int = 1) -> None:
        """`raft` is the node's metadata quorum member; without one, this node is a quorum of
        itself (the embedded single node, and unit tests)."""
        self.node_id = node_id
        self.log = metadata_log
        if raft is None:
            raft = RaftManager(ReplicaKey(node_id), [ReplicaKey(node_id)],
                               KafkaMetadataLog(metadata_log), metadata_log.dir, "",
                               NodeChannels(lambda _: None, "kafka-ext-controller"),
                               run_blocking)
        self.raft = raft
        raft.state_machine = self
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.validate_topic_config = validate_topic_config
        self.run_blocking = run_blocking
        # diskless.metadata.topic.num.partitions: used until __diskless_metadata exists.
        self.diskless_coordinators = diskless_coordinators
        self.image = MetadataImage()
        self.listeners: list[ImageListener] = []
        self.heartbeats = BrokerHeartbeats(broker_session_timeout_ms,
                                           broker_connection_loss_timeout_ms)
        # Set when a lost heartbeat connection brings a session deadline closer: the fencing
        # timer (wait_for_a_session_deadline) sleeps again from it.
        self._session_deadline_moved = asyncio.Event()
        self.is_broker = is_broker  # process.roles has broker: may place on itself
        self.unclean_leader_election = unclean_leader_election  # the static broker default
        self.min_insync_replicas = min_insync_replicas  # the static broker default
        self._heartbeats_epoch = -1  # the quorum epoch the heartbeat clocks belong to
        # DescribeQuorum's source: this node alone until the Raft core feeds it (the broker
        # gives it the voter's directory id and endpoints).
        self.quorum: QuorumStatusSource = RaftQuorumStatus(raft, ZERO_UUID, tuple)
        self._lock = asyncio.Lock()
        self._records = registry()
        self._started = False
        # KIP-630: a snapshot after this many bytes of new records, or this long (0: never).
        self.snapshot_bytes = snapshot_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        self._snapshot_task: asyncio.Task[None] | None = None
        # KIP-590: where a node that does not lead the quorum sends the changes it makes for
        # itself (server/forwarding.py's ForwardingManager; None: a quorum of this node).
        self.forwarder: Any = None
        self._bytes_at_snapshot = 0
        self._last_snapshot_ms = time.monotonic() * 1000

    # -- start-up ----------------------------------------------------------------------------

    def load(self) -> None:
        """Load the latest snapshot into the image (blocking; before `start`). Committed
        records after it are applied as the quorum learns they are committed."""
        snapshot = self.raft.log.latest_snapshot_id()
        if snapshot is not None:
            self.image = read_snapshot_image(self.raft.log.snapshot_path(snapshot))
        log.info("loaded __cluster_metadata snapshot up to offset %d: %d topics",
                 self.image.offset, len(self.image.topics_by_name))

    async def start(self) -> None:
        """Join the quorum and wait until this node has applied what is committed."""
        if self._started:
            return
        self._started = True
        self.raft.start(self.image.offset + 1)
        await self.raft.wait_caught_up()
        log.info("caught up with __cluster_metadata at offset %d (leader %d, epoch %d)",
                 self.image.offset, self.raft.leader_id, self.raft.epoch)

    async def stop(self) -> None:
        if self._started:
            await self.raft.stop()

    async def bootstrap(self, records: list[Any] | None = None) -> None:
        """On a fresh cluster, commit the bootstrap metadata `storage format` wrote
        (bootstrap.checkpoint: metadata.version and features), else the latest metadata.version.
        Only the active controller writes it, once."""
        await self.start()
        if METADATA_VERSION_FEATURE in self.image.features or not self.raft.is_leader:
            return
        if not records:
            records = [self._record("FeatureLevelRecord", name=METADATA_VERSION_FEATURE,
                                    feature_level=METADATA_VERSION_LEVEL)]
        async with self._lock:
            if METADATA_VERSION_FEATURE not in self.image.features:
                await self._commit(list(records))

    # -- the replicated state machine (RaftManager calls these) ---------------------------

    def apply_committed(self, first_offset: int, end_offset: int) -> None:
        """Apply committed records [first_offset, end_offset) to the image, then tell the
        listeners. Raft's control records (LeaderChange) take offsets but change nothing."""
        old = image = self.image
        records = [(name, record) for _, name, record in
                   replay(self.log, first_offset, end_offset)]
        if records:  # one delta for all of them: each part of the image is copied once
            image = image.apply_all(first_offset, records)
        image = replace(image, offset=end_offset - 1)
        self.log.high_watermark = end_offset
        self._publish(old, image)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Write a snapshot of the image once enough records arrived since the last one
        (metadata.log.max.record.bytes.between.snapshots / .max.snapshot.interval.ms), off the
        loop; then the log may start at it."""
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        grown = self.log.size_bytes - self._bytes_at_snapshot
        age_ms = time.monotonic() * 1000 - self._last_snapshot_ms
        if grown <= 0 or (grown < self.snapshot_bytes and not (
                self.snapshot_interval_ms and age_ms >= self.snapshot_interval_ms)):
            return
        image = self.image
        end_offset = image.offset + 1
        latest = self.raft.log.latest_snapshot_id()
        if end_offset <= 0 or (latest is not None and latest.offset >= end_offset):
            return
        epoch = self.log.leader_epoch_cache.epoch_for_offset(image.offset)
        if epoch < 0:
            return  # the entry is before the log start: the latest snapshot already has it
        snapshot_id = OffsetAndEpoch(epoch, end_offset)
        self._bytes_at_snapshot = self.log.size_bytes
        self._last_snapshot_ms = time.monotonic() * 1000
        self._snapshot_task = asyncio.ensure_future(self._write_snapshot(image, snapshot_id))

    async def _write_snapshot(self, image: MetadataImage, snapshot_id: OffsetAndEpoch) -> None:
        try:
            await self.run_blocking(lambda: write_snapshot(
                self.raft.log.dir, snapshot_id.offset, snapshot_id.epoch, image,
                int(time.time() * 1000)))
        except OSError as exc:
            log.error("could not write the metadata snapshot %s: %s", snapshot_id, exc)
            return
        self.raft.log.add_snapshot(snapshot_id)
        self.raft.log.delete_before_snapshot()
        self._bytes_at_snapshot = self.log.size_bytes
        log.info("wrote metadata snapshot at offset %d (epoch %d)", snapshot_id.offset,
                 snapshot_id.epoch)

    def load_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """The leader sent a snapshot: it replaces the image."""
        image = read_snapshot_image(self.raft.log.snapshot_path(snapshot_id))
        self._publish(self.image, image)

    def _publish(self, old: MetadataImage, image: MetadataImage) -> None:
        self.image = image
        for listener in self.listeners:
            try:
                listener(old, image)
            except Exception:  # committed is committed: one listener's bug must not undo it
                log.exception("metadata listener %r failed at offset %d", listener, image.offset)

    # -- topics ------------------------------------------------------------------------------

    @property
    def live_brokers(self) -> set[int]:
        """Unfenced registered brokers: where partitions are placed and led. A combined node no
        broker has registered with yet (tools, unit tests) places on its own node."""
        if not self.image.brokers:
            return {self.node_id} if self.is_broker else set()
        return {b.broker_id for b in self.image.live_brokers()
                if not b.in_controlled_shutdown}

    def _forwards(self) -> bool:
        """Whether a change asked of this node must go to the active controller."""
        return self.forwarder is not None and not self.raft.is_leader

    async def create_topics(self, creations: list[TopicCreation], validate_only: bool,
                            mutation_quota: MutationQuota | None = None
                            ) -> list[TopicCreationResult]:
        if self._forwards() and not validate_only:
            forwarded: list[TopicCreationResult] = await self.forwarder.create_topics(creations)
            return forwarded
        async with self._lock:
            results: list[TopicCreationResult] = []
            records: list[Any] = []
            # As Kafka: every entry of a name listed twice fails; the other topics go ahead.
            counts = Counter(c.name for c in creations)
            for creation in creations:
                result = TopicCreationResult(creation.name)
                results.append(result)
                try:
                    if counts[creation.name] > 1:
                        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                    topic_records = self._topic_records(creation, result)
                    if mutation_quota is not None:
                        mutation_quota(result.num_partitions)
                except KafkaError as exc:
                    results[-1] = TopicCreationResult(creation.name, exc.code, exc.message)
                    continue
                if len(records) + len(topic_records) > MAX_RECORDS_PER_USER_OP:
                    results[-1] = TopicCreationResult(
                        creation.name, ErrorCode.POLICY_VIOLATION,
                        "Excessively large number of partitions per request.")
                    continue
                if not validate_only:
                    records.extend(topic_records)
            if records:
                await self._commit(records)
            return results

    def _topic_records(self, creation: TopicCreation, result: TopicCreationResult) -> list[Any]:
        check_topic_name(creation.name)
        if creation.name in RESERVED_TOPICS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Creation of internal topic {creation.name} is prohibited.")
        if creation.name in self.image.topics_by_name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{creation.name}' already exists.")
        collision = self._colliding_topic(creation.name)
        if collision is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{creation.name}' collides with existing topic: {collision}")
        if creation.assignments:
            assignments = creation.assignments
            if creation.num_partitions != -1 or creation.replication_factor != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Both numPartitions or "
                                 "replicationFactor and replicasAssignments were set.")
            if sorted(assignments) != list(range(len(assignments))):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "Partitions must be numbered consecutively from 0")
            self._check_replicas(assignments)
        else:
            partitions = (self.default_partitions if creation.num_partitions == -1
                          else creation.num_partitions)
            factor = (self.default_replication_factor if creation.replication_factor == -1
                      else creation.replication_factor)
            if partitions <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value.")
            if factor <= 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0.")
            if factor > len(self.live_brokers):
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Unable to replicate the partition {factor} time(s): The "
                                 f"target replication factor of {factor} cannot be reached "
                                 f"because only {len(self.live_brokers)} broker(s) are registered.")
            if partitions > MAX_RECORDS_PER_USER_OP:  # refused before placing 2**31 of them
                raise KafkaError(ErrorCode.POLICY_VIOLATION,
                                 "Excessively large number of partitions per request.")
            assignments = self._place(partitions, factor)
        configs = self._validated_configs(creation.configs)
        _check_diskless_configs(creation.name, configs)
        topic_id = uuid.uuid4()
        result.topic_id = topic_id
        result.num_partitions = len(assignments)
        result.replication_factor = len(assignments[0])
        result.configs = configs
        coordinators = self._diskless_coordinator_count(configs)
        records: list[Any] = [self._record("TopicRecord", name=creation.name, topic_id=topic_id)]
        records += [self._partition_record(topic_id, p, replicas, coordinators)
                    for p, replicas in sorted(assignments.items())]
        records += [self._record("ConfigRecord", resource_type=TOPIC_RESOURCE,
                                 resource_name=creation.name, name=k, value=v)
                    for k, v in configs.items()]
        return records

    def _colliding_topic(self, name: str) -> str | None:
        """Kafka refuses names equal but for '.' and '_' (their metric names would collide)."""
        if "." not in name and "_" not in name:
            return None
        key = name.replace(".", "_")
        for existing in self.image.topics_by_name:
            if existing.replace(".", "_") == key:
                return existing
        return None

    def _check_replicas(self, assignments: dict[int, list[int]]) -> None:
        for partition, replicas in assignments.items():
            if not replicas or len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {partition} has an empty or duplicate replica list")
            unknown = [r for r in replicas if r not in self.live_brokers]
            if unknown:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {partition} names unknown brokers {unknown}")

    def _place(self, partitions: int, factor: int, first: int = 0) -> dict[int, list[int]]:
        """Round-robin over live brokers, shifted per partition as Kafka's placer does; with
        racks (broker.rack) the brokers alternate between racks, so consecutive partitions and
        a partition's replicas land on different racks."""
        brokers = rack_alternating(sorted(self.live_brokers), {
            b: r.rack for b, r in self.image.brokers.items() if r.rack})
        return {p: [brokers[(p + i) % len(brokers)] for i in range(factor)]
                for p in range(first, first + partitions)}

    def _partition_record(self, topic_id: uuid.UUID, partition: int, replicas: list[int],
                          diskless_coordinators: int = 0,
                          prior_leader_epochs: list[tuple[int, int]] | None = None) -> Any:
        """A new partition; of a diskless topic (coordinators > 0) mapped to its coordinator;
        added to an existing topic, with the older partitions' leader epochs (KIP-253)."""
        PriorLeaderEpoch = self._records["PartitionRecord"].cls.PriorLeaderEpoch
        coordinator = (diskless_coordinator_of(topic_id, partition, diskless_coordinators)
                       if diskless_coordinators > 0 else -1)
        # KIP-858: a broker with one log dir has its replicas there; others say where.
        directories = [self._only_dir(b) for b in replicas]
        return self._record("PartitionRecord", partition_id=partition, topic_id=topic_id,
                            replicas=list(replicas), isr=list(replicas), leader=replicas[0],
                            leader_epoch=0, partition_epoch=0, diskless_coordinator=coordinator,
                            directories=directories if any(
                                d != UNASSIGNED_DIR for d in directories) else [],
                            prior_leader_epochs=[PriorLeaderEpoch(partition=p, leader_epoch=e)
                                                 for p, e in prior_leader_epochs or ()])

    def _only_dir(self, broker_id: int) -> uuid.UUID:
        online = self.image.broker_log_dirs.get(broker_id, ())
        return online[0] if len(online) == 1 else UNASSIGNED_DIR

    def _diskless_coordinator_count(self, configs: dict[str, str]) -> int:
        """How many coordinators the partitions of a topic with `configs` spread over; 0: classic.

        The partitions of __diskless_metadata once it exists (as Kafka's coordinators use the
        topic's partition count, not the config, after creation), else the configured count.
        """
        if configs.get(DISKLESS_ENABLE_CONFIG) != "true":
            return 0
        existing = self.image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
        if existing is not None and existing.partitions:
            return len(existing.partitions)
        return self.diskless_coordinators

    def _validated_configs(self, configs: dict[str, str | None]) -> dict[str, str]:
        out = {}
        for name, value in configs.items():
            if value is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Null value not supported for topic configs: {name}")
            try:
                out[name] = self.validate_topic_config(name, value)
            except ConfigError as exc:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return out

    async def delete_topics(self, names: list[str], mutation_quota: MutationQuota | None = None
                            ) -> dict[str, tuple[ErrorCode, uuid.UUID]]:
        """Remove topics by name; answers per name with the error and the topic id."""
        async with self._lock:
            results: dict[str, tuple[ErrorCode, uuid.UUID]] = {}
            records = []
            for name in names:
                topic = self.image.topics_by_name.get(name)
                if topic is None:
                    results[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ZERO_UUID)
                    continue
                if mutation_quota is not None:
                    try:
                        mutation_quota(len(topic.partitions))
                    except KafkaError as exc:
                        results[name] = (exc.code, topic.topic_id)
                        continue
                results[name] = (ErrorCode.NONE, topic.topic_id)
                records.append(self._record("RemoveTopicRecord", topic_id=topic.topic_id))
            if records:
                await self._commit(records)
            return results

    async def create_partitions(self, topic_name: str, count: int,
                                assignments: list[list[int]] | None, validate_only: bool,
                                mutation_quota: MutationQuota | None = None) -> None:
        """Grow a topic to `count` partitions; raises KafkaError with Kafka's code."""
        async with self._lock:
            topic = self.image.topics_by_name.get(topic_name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{topic_name}' does not exist.")
            if topic.deletion is not None:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"{topic_name} is losing partitions {topic.deletion.first_removed} "
                                 "and up; add partitions once that is done")
            current = len(topic.partitions)
            if count < current:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"The topic {topic_name} currently has {current} partition(s); "
                                 f"{count} would not be an increase.")
            if count == current:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic already has {current} partition(s).")
            if count - current > MAX_RECORDS_PER_USER_OP:  # refused before placing them
                raise KafkaError(ErrorCode.POLICY_VIOLATION,
                                 "Excessively large number of partitions per request.")
            if assignments is not None:
                if len(assignments) != count - current:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"Attempted to add {count - current} additional partition(s), "
                                     f"but only {len(assignments)} assignment(s) were specified.")
                new = {current + i: list(r) for i, r in enumerate(assignments)}
                self._check_replicas(new)
            else:
                new = self._place(count - current, topic.replication_factor, first=current)
            if len(new) > MAX_RECORDS_PER_USER_OP:
                raise KafkaError(ErrorCode.POLICY_VIOLATION,
                                 "Excessively large number of partitions per request.")
            if mutation_quota is not None:
                mutation_quota(len(new))
            if validate_only:
                return
            coordinators = (self._diskless_coordinator_count(self.image.topic_configs(topic_name))
                            if any(p.is_diskless for p in topic.partitions.values()) else 0)
            # KIP-253: every existing partition starts a new leader epoch, and each new one
            # remembers the epochs they had until now: a consumer reads a new partition only
            # once it has read what the older ones got under those epochs.
            prior = [] if coordinators else [  # diskless partitions have no leader epochs
                (p.partition_id, p.leader_epoch)
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)]
            bumps = [self._record("PartitionChangeRecord", topic_id=topic.topic_id,
                                  partition_id=p.partition_id, leader=p.leader)
                     for p in topic.partitions.values() if not p.is_diskless]
            await self._commit(bumps + [
                self._partition_record(topic.topic_id, p, r, coordinators, prior)
                for p, r in sorted(new.items())])

    # -- chunks (seed 000, controller/chunk_control.py) ----------------------------------------

    async def create_chunks(self, requests: list[ChunkCreation]) -> list[tuple[ErrorCode, str | None]]:
        """Close the active chunk of each partition at the offsets its leader gave and open the
        next one on the given brokers; one (error, message) per request, the valid ones
        committed in one batch (each partition's two records together: all or none)."""
        return await self._chunk_changes(requests, create_chunk_records)

    async def alter_chunk_assignments(self, changes: list[ChunkChange]
                                      ) -> list[tuple[ErrorCode, str | None]]:
        """Move chunks to new replicas, or take a replica's report (it holds all of a chunk
        it was added to, or retention deleted its copy); one (error, message) per change,
        the valid ones committed in one batch."""
        return await self._chunk_changes(changes, chunk_change_records)

    async def _chunk_changes(self, entries: Sequence[ChunkCreation | ChunkChange],
                             records_of: Callable[..., list[Any]]
                             ) -> list[tuple[ErrorCode, str | None]]:
        async with self._lock:
            registered = set(self.image.brokers) or {self.node_id}
            outcome: list[tuple[ErrorCode, str | None]] = []
            records: list[Any] = []
            for entry in entries:
                try:
                    topic, part = self._reassignable(entry.topic, entry.partition)
                    records += records_of(topic, part, entry, registered)
                except KafkaError as exc:
                    outcome.append((exc.code, exc.message or None))
                    continue
                log.info("chunks of %s-%d: %s", entry.topic, entry.partition, entry)
                outcome.append((ErrorCode.NONE, None))
            if records:
                await self._commit(records)
            return outcome

    # -- partition reduction (seed 002) -------------------------------------------------------

    async def delete_partitions(self, topic_name: str, partitions: list[int], delay_ms: int,
                                now_ms: int) -> int:
        """Start removing a tail of the topic's partitions: ReadOnly for `delay_ms`, then None
        and gone (`advance_partition_deletions`); with no delay None at once. Returns their
        mode now; KafkaError with the reason otherwise, and nothing changes."""
        async with self._lock:
            topic = self.image.topics_by_name.get(topic_name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{topic_name}' does not exist.")
            if topic_name in _NEVER_DISKLESS or topic_name.startswith("__"):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{topic_name} is an internal topic: its partitions stay")
            if any(p.is_diskless for p in topic.partitions.values()):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{topic_name} is diskless: its partitions cannot be deleted")
            if topic.deletion is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{topic_name} is already losing partitions "
                                 f"{topic.deletion.first_removed} and up")
            if any(p.is_reassigning for p in topic.partitions.values()):
                raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                 f"{topic_name} has a reassignment in progress")
            if delay_ms < 0:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"negative delay {delay_ms} ms")
            count = len(topic.partitions)
            wanted = sorted(set(partitions))
            if len(wanted) != len(partitions) or not wanted:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "name each partition to delete once")
            if wanted[-1] >= count or wanted[0] < 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"{topic_name} has {count} partition(s): 0 to {count - 1}")
            if wanted != list(range(wanted[0], count)):
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "only the highest-numbered partitions can be deleted, "
                                 f"{wanted[0]} to {count - 1} here")
            if wanted[0] == 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"deleting every partition of {topic_name} would leave none; "
                                 "delete the topic instead")
            mode = READ_ONLY if delay_ms > 0 else MODE_NONE
            await self._commit([
                self._record("DeleteTopicPartitionsRecord", topic_id=topic.topic_id,
                             delete_partitions=wanted[0],
                             delete_partitions_delay_timestamp=now_ms + delay_ms,
                             create_timestamp=now_ms),
                *(self._record("PartitionChangeRecord", topic_id=topic.topic_id,
                               partition_id=p, leader=LEADER_UNCHANGED, mode=mode)
                  for p in wanted)])
            log.info("deleting partitions %d-%d of %s: %s", wanted[0], count - 1, topic_name,
                     f"ReadOnly for {delay_ms} ms" if delay_ms else "now")
            return mode

    async def advance_partition_deletions(self, now_ms: int) -> None:
        """The delayed-deletion task (active controller, every
        delete.topic.partition.interval.delay.ms): ReadOnly partitions whose delay is over turn
        None; partitions already None leave their topic (brokers delete their data). A new
        active controller picks up where the last one stopped: the state is in the image."""
        if not self.raft.is_leader:
            return
        async with self._lock:
            records: list[Any] = []
            for topic in self.image.topics_by_name.values():
                deletion = topic.deletion
                if deletion is None:
                    continue
                removed = [p for i, p in topic.partitions.items() if i >= deletion.first_removed]
                if all(p.mode == MODE_NONE for p in removed):
                    records.append(self._record("RemoveTopicPartitionsRecord",
                                                topic_id=topic.topic_id,
                                                partition_count=deletion.first_removed))
                    log.info("partitions %d and up of %s are gone", deletion.first_removed,
                             topic.name)
                elif now_ms >= deletion.delete_at_ms:
                    records += [self._record("PartitionChangeRecord", topic_id=topic.topic_id,
                                             partition_id=p.partition_id,
                                             leader=LEADER_UNCHANGED, mode=MODE_NONE)
                                for p in removed if p.mode != MODE_NONE]
                    log.info("partitions %d and up of %s: their delay is over, deleting "
                             "their data", deletion.first_removed, topic.name)
            if records:
                try:
                    await self._commit(records)
                except KafkaError as exc:  # leadership moved: the next controller goes on
                    log.info("could not advance partition deletions: %s", exc)

    # -- configs -----------------------------------------------------------------------------

    async def alter_configs(self, rtype: int, rname: str, changes: list[ConfigChange],
                            validate_only: bool, replace_all: bool = False) -> None:
        """Apply config changes to one resource, all or nothing; raises KafkaError.

        `replace_all` (AlterConfigs) makes `changes` the resource's whole set of overrides.
        """
        if self._forwards() and rtype == TOPIC_RESOURCE and not replace_all:
            await self.forwarder.alter_topic_configs(
                rname, [(c.name, c.op, c.value) for c in changes])
            return
        async with self._lock:
            records = self._config_records(rtype, rname, changes, replace_all)
            if records and not validate_only:
                await self._commit(records)

    def _config_records(self, rtype: int, rname: str, changes: list[ConfigChange],
                        replace_all: bool) -> list[Any]:
        records: list[Any] = []
        if rtype == TOPIC_RESOURCE and rname not in self.image.topics_by_name:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic {rname} does not exist")
        if rtype not in (TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        current = dict(self.image.configs.get((rtype, rname), {}))
        desired = {} if replace_all else dict(current)
        for change in changes:
            if change.op == 0:
                if change.value is None:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value for {change.name}")
                desired[change.name] = change.value
            elif change.op == 1:
                desired.pop(change.name, None)
            elif change.op in (2, 3):
                definitions = TOPIC_CONFIGS if rtype == TOPIC_RESOURCE else BROKER_CONFIGS
                definition = definitions.get(change.name)
                if definition is None or definition.type != ConfigType.LIST:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, "Config value append/subtract is "
                                     f"not allowed for config key {change.name}")
                items = [x for x in desired.get(change.name, "").split(",") if x]
                for value in (change.value or "").split(","):
                    if change.op == 2 and value and value not in items:
                        items.append(value)
                    elif change.op == 3 and value in items:
                        items.remove(value)
                desired[change.name] = ",".join(items)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {change.op}")
        if rtype == TOPIC_RESOURCE:
            for name, value in list(desired.items()):
                try:
                    desired[name] = self.validate_topic_config(name, value)
                except ConfigError as exc:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
            for name in desired.keys() | current.keys():  # diskless.enable: fixed at creation
                definition = TOPIC_CONFIGS.get(name)
                if (definition is not None and definition.create_only
                        and desired.get(name) != current.get(name)):
                    raise KafkaError(ErrorCode.INVALID_CONFIG,
                                     f"{name} can only be set when the topic is created")
            _check_diskless_configs(rname, desired)
        elif rtype == GROUP_RESOURCE:
            pass  # checked by the handler against the group.share.* bounds (share/group_config.py)
        else:  # dynamic broker configs: this broker's ("<id>") or the cluster default ("")
            changed = {n: v for n, v in desired.items() if current.get(n) != v}
            try:
                # Only what this request sets: a record a key no longer dynamic left may go.
                check_dynamic_broker_configs(changed)
                for name, value in changed.items():
                    desired[name] = validate_dynamic_broker_config(name, value)
            except ConfigError as exc:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        for name in current.keys() - desired.keys():
            records.append(self._record("ConfigRecord", resource_type=rtype, resource_name=rname,
                                        name=name, value=None))
        for name, value in desired.items():
            if current.get(name) != value:
                records.append(self._record("ConfigRecord", resource_type=rtype,
                                            resource_name=rname, name=name, value=value))
        return records

    # -- client quotas (KIP-546) -------------------------------------------------------------

    async def alter_client_quotas(self, alterations: list[QuotaAlteration], validate_only: bool
                                  ) -> dict[QuotaEntity, KafkaError | None]:
        """Validate every entity's ops, then commit the ClientQuotaRecords of the valid ones
        in one batch (none when `validate_only`); the outcome per entity."""
        async with self._lock:
            changes, results = alter_client_quotas(self.image.client_quotas, alterations)
            if changes and not validate_only:
                await self._commit([self._record(
                    "ClientQuotaRecord", entity=[self._records["ClientQuotaRecord"].cls.EntityData(
                        entity_type=t, entity_name=n) for t, n in c.entity],
                    key=c.key, value=0.0 if c.value is None else c.value,
                    remove=c.value is None) for c in changes])
            return results

    # -- security: SCRAM credentials and ACLs (docs/security.md) ------------------------------

    async def alter_user_scram_credentials(self, deletions: list[ScramDeletion],
                                           upsertions: list[ScramUpsertion]
                                           ) -> dict[str, tuple[ErrorCode, str | None]]:
        """Commit every valid user's credential changes in one batch; the outcome per user."""
        async with self._lock:
            records, outcomes = scram_changes(self.image, deletions, upsertions)
            if records:
                await self._commit(records)
            return outcomes

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker (kafka-cluster.sh unregister): a broker gone for good leaves the
        ISRs and the registrations; BROKER_ID_NOT_REGISTERED when it was not registered."""
        async with self._lock:
            await self._commit(unregister_records(self.image, broker_id, self))
            log.info("broker %d unregistered", broker_id)

    async def update_features(self, updates: list[FeatureUpdate], validate_only: bool) -> None:
        """UpdateFeatures: every change committed together, or KafkaError
        INVALID_UPDATE_VERSION for the first refused (controller/features.py)."""
        async with self._lock:
            records = feature_records(self.image, self.node_id, updates)
            if records and not validate_only:
                await self._commit(records)
                for update in updates:
                    log.info("feature %s finalized at level %d", update.name, update.level)

    async def create_acls(self, acls: list[AclEntry]) -> list[tuple[ErrorCode, str | None]]:
        async with self._lock:
            records, outcomes = acl_creation_records(self.image, acls)
            if records:
                await self._commit(records)
            return outcomes

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclEntry]]:
        """Remove every ACL a filter matches; the ACLs each filter matched."""
        async with self._lock:
            records, matched = acl_deletion_records(self.image, filters)
            if records:
                await self._commit(records)
            return matched

    async def change_delegation_tokens(self, change: Callable[[MetadataImage],
                                                              tuple[list[Any], Any]]) -> Any:
        """Commit the records `change` makes of the image (a rule of controller/
        delegation_tokens.py, KIP-48) under the controller lock; its answer."""
        async with self._lock:
            records, answer = change(self.image)
            if records:
                await self._commit(records)
            return answer

    # -- brokers (BrokerRegistration 62, BrokerHeartbeat 63) ---------------------------------

    def clock_ms(self) -> float:
        """The clock of broker sessions (monotonic ms); tests and simulations set their own."""
        return time.monotonic() * 1000

    def _heartbeat_clock(self) -> BrokerHeartbeats:
        """The heartbeat clocks, restarted whenever this node starts a new term as leader."""
        if self._heartbeats_epoch != self.raft.epoch:
            self._heartbeats_epoch = self.raft.epoch
            self.heartbeats.reset(list(self.image.brokers), self.clock_ms())
        return self.heartbeats

    def _heard_on(self, broker_id: int, broker_epoch: int, connection: Hashable | None) -> None:
        """Watch the connection a request of the broker's registered incarnation came on (the
        active controller only: another node's view of a connection says nothing)."""
        known = self.image.brokers.get(broker_id)
        if (connection is not None and self.raft.is_leader and known is not None
                and known.broker_epoch == broker_epoch):
            self._heartbeat_clock().heard_on(broker_id, broker_epoch, connection)

    def broker_connection_lost(self, connection: Hashable) -> None:
        """A connection brokers heartbeat on closed. Each broker whose registered incarnation
        heartbeat last on it is fenced broker.heartbeat.connection.loss.timeout.ms from now
        unless it heartbeats again on another connection first; a stale connection (its broker
        heartbeats on a newer one, or registered again) changes nothing."""
        if not self.raft.is_leader:
            return
        heartbeats = self._heartbeat_clock()
        lost = heartbeats.connection_lost(connection, self.clock_ms())
        if lost and heartbeats.connection_loss_timeout_ms >= 0:
            log.info("the heartbeat connection of broker(s) %s closed: fencing in %d ms unless "
                     "they heartbeat again", ", ".join(map(str, lost)),
                     heartbeats.connection_loss_timeout_ms)
            self._session_deadline_moved.set()

    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID,
                              listeners: list[BrokerListener], rack: str | None,
                              log_dirs: list[uuid.UUID], connection: Hashable | None = None,
                              previous_broker_epoch: int = -1) -> int:
        """Register (or re-register) a broker, fenced; returns its broker epoch (the offset of
        its registration record, as Kafka's). `connection`: the one the request came on, which
        the controller watches from now (cluster_control.IN_PROCESS: this node's own broker,
        whose calls no socket carries; None: not known). `previous_broker_epoch`: the epoch
        its clean shutdown recorded, -1 after an unclean one (KIP-966)."""
        async with self._lock:
            heartbeats = self._heartbeat_clock()
            alive = heartbeats.alive(self.image, broker_id, self.clock_ms())
            broker_epoch = self.raft.log.log_end_offset
            records = registration_records(self.image, broker_id, incarnation_id, broker_epoch,
                                           listeners, rack, log_dirs, alive, self,
                                           previous_broker_epoch)
            await self._commit(records)
            heartbeats.touch(broker_id, self.clock_ms())
            self._heard_on(broker_id, broker_epoch, connection)
            log.info("broker %d registered (epoch %d)", broker_id, broker_epoch)
            return broker_epoch

    async def broker_heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int,
                               want_fence: bool, want_shutdown: bool,
                               offline_log_dirs: list[uuid.UUID] | None = None,
                               connection: Hashable | None = None) -> HeartbeatAnswer:
        """Keep a broker's session; record the log dirs it reports offline; unfence it once it
        has caught up, run its controlled shutdown when it asks (leaderships move first, then
        it may stop). `connection`: the one the heartbeat came on (see register_broker)."""
        # On arrival, not once the lock is ours: a broker whose heartbeat is here is alive,
        # however long a commit ahead of it holds the lock (the fencing timer waits for it too).
        self._heartbeat_clock().touch(broker_id, self.clock_ms())
        self._heard_on(broker_id, broker_epoch, connection)
        async with self._lock:
            known = check_broker_epoch(self.image, broker_id, broker_epoch)
            if offline_log_dirs:
                await self._mark_log_dirs_offline(broker_id, offline_log_dirs)
            caught_up = metadata_offset >= known.broker_epoch
            if want_shutdown:
                if not known.fenced:
                    records = controlled_shutdown_records(self.image, broker_id, self)
                    if records:
                        await self._commit(records)
                    if not leads_anything(self.image, broker_id):
                        await self._commit(fence_records(self.image, broker_id, self))
                        log.info("broker %d finished its controlled shutdown", broker_id)
                known = self.image.brokers[broker_id]
                return HeartbeatAnswer(caught_up, known.fenced, known.fenced)
            if known.fenced and caught_up and not want_fence:
                await self._commit(unfence_records(self.image, broker_id, self))
                log.info("broker %d unfenced", broker_id)
            elif not known.fenced and want_fence:
                await self._commit(fence_records(self.image, broker_id, self))
            return HeartbeatAnswer(caught_up, self.image.brokers[broker_id].fenced, False)

    def seconds_until_a_session_expires(self) -> float:
        """How long the fencing timer may sleep: until the earliest session deadline (as
        Kafka's rescheduleMaybeFenceStaleBrokers), at most half a session while this node is
        not the active controller or no broker is unfenced."""
        longest = self.heartbeats.session_timeout_ms / 2000
        if not self.raft.is_leader:
            return longest
        now_ms = self.clock_ms()
        deadline = self._heartbeat_clock().next_expiry_ms(self.image, now_ms)
        if deadline is None:
            return longest
        # expired() wants the session strictly exceeded: wake just after the deadline.
        return min(max((deadline + 1 - now_ms) / 1000, 0.001), longest)

    async def wait_for_a_session_deadline(self) -> None:
        """Sleep as seconds_until_a_session_expires says, or less when a heartbeat connection
        closes meanwhile (its grace may end first): the fencing timer's wait before each
        fence_expired_brokers."""
        moved = self._session_deadline_moved
        moved.clear()  # before the deadline is read: a loss noted later wakes the sleep
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(moved.wait(), self.seconds_until_a_session_expires())

    async def fence_expired_brokers(self) -> None:
        """Fence every broker whose session timed out (broker.session.timeout.ms), or whose
        heartbeat connection closed longer ago than broker.heartbeat.connection.loss.timeout.ms
        without its coming back; run by the active controller on a timer."""
        if not self.raft.is_leader:
            return
        async with self._lock:
            heartbeats = self._heartbeat_clock()
            for broker_id in heartbeats.expired(self.image, self.clock_ms()):
                now_ms = self.clock_ms()  # the commits before this one took time
                if broker_id not in heartbeats.expired(self.image, now_ms):
                    continue  # it heartbeat while an earlier fence committed
                lost_ms = heartbeats.connection_lost_ms(self.image.brokers[broker_id])
                grace_ms = heartbeats.connection_loss_timeout_ms
                if lost_ms is not None and now_ms - lost_ms > grace_ms:
                    log.warning("fencing broker %d: its heartbeat connection closed %d ms ago "
                                "and it has not heartbeat since", broker_id, now_ms - lost_ms)
                else:
                    log.warning("fencing broker %d: no heartbeat for %d ms", broker_id,
                                self.heartbeats.session_timeout_ms)
                try:
                    await self._commit(fence_records(self.image, broker_id,
                                                     self))
                except KafkaError as exc:  # leadership moved: the next controller fences
                    if exc.code != ErrorCode.NOT_CONTROLLER:
                        raise
                    log.info("could not fence broker %d: %s", broker_id, exc)
                    return

    def unclean_allowed(self, topic: str) -> bool:
        """unclean.leader.election.enable of a topic (`_topic_config`)."""
        value = self._topic_config(topic, UNCLEAN_CONFIG)
        return self.unclean_leader_election if value is None else value == "true"

    def elr_rule(self, topic: str, unclean_shutdown: frozenset[int] = frozenset()
                 ) -> ElrRule | None:
        """KIP-966's rule for a topic's partitions: its min.insync.replicas; None while
        eligible.leader.replicas.version is not 1 (cluster_control.ElectionPolicy)."""
        if not self.image.elr_enabled:
            return None
        value = self._topic_config(topic, MIN_INSYNC_CONFIG)
        min_isr = self.min_insync_replicas if value is None else int(value)
        return ElrRule(min_isr, unclean_shutdown)

    def _topic_config(self, topic: str, name: str) -> str | None:
        """A topic config as the controller resolves it: the topic's own, else this
        controller's dynamic one, else the cluster's dynamic default (Kafka's
        KafkaConfigSchema.resolveEffectiveTopicConfigs); None: the static default applies."""
        configs = self.image.configs
        for resource in ((TOPIC_RESOURCE, topic), (BROKER_RESOURCE, str(self.node_id)),
                         (BROKER_RESOURCE, "")):
            value = configs.get(resource, {}).get(name)
            if value is not None:
                return value
        return None

    # -- ISR changes (AlterPartition 56, KIP-497) ----------------------------------------------

    async def alter_partition(self, broker_id: int, broker_epoch: int,
                              changes: list[IsrChange]) -> list[IsrChangeResult]:
        """Apply the ISRs a partition leader proposes; each is checked against the partition
        as it is now (leader, leader epoch, partition epoch, eligible members) and committed,
        the valid ones in one batch. STALE_BROKER_EPOCH for the whole request is raised."""
        async with self._lock:
            check_broker_epoch(self.image, broker_id, broker_epoch)
            alive = alive_brokers(self.image)
            results: list[IsrChangeResult] = []
            records: list[Any] = []
            for change in changes:
                try:
                    topic, part = self._partition_for_isr_change(broker_id, change, alive)
                except KafkaError as exc:
                    results.append(IsrChangeResult(change, exc.code))
                    continue
                record = isr_change(topic.topic_id, part, tuple(change.new_isr),
                                    eligible_brokers(self.image, part, alive),
                                    self.unclean_allowed(topic.name),
                                    self.elr_rule(topic.name))
                if record is not None:
                    if record.replicas is not None:
                        log.info("reassignment of %s-%d completes: replicas %s", topic.name,
                                 part.partition_id, record.replicas)
                    records.append(record)
                results.append(IsrChangeResult(change, ErrorCode.NONE))
            if records:
                await self._commit(records)
            for result in results:
                if result.error == ErrorCode.NONE:
                    result.partition = self.image.topics_by_id[
                        result.change.topic_id].partitions[result.change.partition]
            return results

    def _partition_for_isr_change(self, broker_id: int, change: IsrChange, alive: set[int]
                                  ) -> tuple[TopicImage, PartitionImage]:
        topic = self.image.topics_by_id.get(change.topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, str(change.topic_id))
        part = topic.partitions.get(change.partition)
        if part is None or part.is_diskless:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{topic.name}-{change.partition}")
        if part.leader != broker_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"broker {broker_id} does not lead {topic.name}-{change.partition}")
        if change.leader_epoch != part.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {change.leader_epoch} "
                             f"is not {part.leader_epoch}")
        if change.partition_epoch != part.partition_epoch:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"partition epoch "
                             f"{change.partition_epoch} is not {part.partition_epoch}")
        new_isr = change.new_isr
        if (not new_isr or broker_id not in new_isr or len(set(new_isr)) != len(new_isr)
                or any(r not in part.replicas for r in new_isr)):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"ISR {list(new_isr)} is not a set of "
                             f"replicas {list(part.replicas)} holding the leader")
        eligible = eligible_brokers(self.image, part, alive)
        if any(r not in eligible and r not in part.isr for r in new_isr):
            raise KafkaError(ErrorCode.INELIGIBLE_REPLICA, "a fenced or shutting-down broker, "
                             "or one whose log dir is offline, "
                             f"cannot join the ISR ({list(new_isr)})")
        for r, epoch in zip(new_isr, change.new_isr_epochs, strict=False):
            if r in part.isr or epoch == -1:
                continue
            registered = self.image.brokers[r].broker_epoch  # eligible: it is registered
            if epoch != registered:
                # KIP-903: the fetches that made it look in sync came from another incarnation.
                raise KafkaError(ErrorCode.INELIGIBLE_REPLICA, f"broker {r} fetched with epoch "
                                 f"{epoch}, it is registered with {registered}")
        return topic, part

    # -- reassignments (AlterPartitionReassignments 45, ListPartitionReassignments 46) -------

    async def alter_partition_reassignments(
            self, changes: list[tuple[str, int, tuple[int, ...] | None]]
    ) -> list[tuple[ErrorCode, str | None]]:
        """Start (target replicas) or cancel (None) the reassignment of each (topic, partition);
        one (error, message) per change, the valid ones committed in one batch."""
        async with self._lock:
            alive = alive_brokers(self.image)
            registered = set(self.image.brokers) or {self.node_id}
            outcome: list[tuple[ErrorCode, str | None]] = []
            records: list[Any] = []
            for topic_name, partition, target in changes:
                try:
                    topic, part = self._reassignable(topic_name, partition)
                    unknown = [r for r in target or () if r not in registered]
                    if unknown:
                        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"no broker {unknown[0]} is registered")
                    change = reassign(topic.topic_id, part, target,
                                      eligible_brokers(self.image, part, alive),
                                      self.unclean_allowed(topic_name),
                                      self.elr_rule(topic_name))
                except KafkaError as exc:
                    outcome.append((exc.code, exc.message or None))
                    continue
                if change is not None:
                    records.append(change[0])
                    log.info("%s reassignment of %s-%d: replicas %s", "cancelling"
                             if target is None else "starting", topic_name, partition,
                             list(target) if target is not None else "as before")
                outcome.append((ErrorCode.NONE, None))
            if records:
                await self._commit(records)
            return outcome

    def _reassignable(self, topic_name: str, partition: int
                      ) -> tuple[TopicImage, PartitionImage]:
        topic = self.image.topics_by_name.get(topic_name)
        part = topic.partitions.get(partition) if topic is not None else None
        if topic is None or part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{topic_name}-{partition} does not exist")
        if part.is_diskless:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{topic_name}-{partition} is diskless: "
                             "its data lives in object storage, not on replicas")
        return topic, part

    def ongoing_reassignments(self, wanted: dict[str, list[int]] | None
                              ) -> dict[str, list[PartitionImage]]:
        """The partitions being reassigned, of every topic or of `wanted` ones, by topic."""
        found: dict[str, list[PartitionImage]] = {}
        for name, topic in self.image.topics_by_name.items():
            if wanted is not None and name not in wanted:
                continue
            ids = wanted[name] if wanted is not None else sorted(topic.partitions)
            parts = [topic.partitions[p] for p in ids
                     if p in topic.partitions and topic.partitions[p].is_reassigning]
            if parts:
                found[name] = parts
        return found

    # -- leader elections (ElectLeaders 43, auto.leader.rebalance.enable) --------------------

    async def elect_leaders(self, election_type: int,
                            wanted: dict[str, list[int]] | None
                            ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        """Run a preferred or unclean election on each wanted partition (None: every
        partition, and then only those an election was needed for are answered)."""
        async with self._lock:
            alive = alive_brokers(self.image)
            outcome: dict[str, dict[int, tuple[ErrorCode, str | None]]] = {}
            records: list[Any] = []
            targets = wanted if wanted is not None else {
                name: sorted(t.partitions) for name, t in self.image.topics_by_name.items()}
            for name, partitions in targets.items():
                topic = self.image.topics_by_name.get(name)
                for partition in dict.fromkeys(partitions):  # each once
                    part = topic.partitions.get(partition) if topic is not None else None
                    try:
                        if topic is None or part is None:
                            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             f"{name}-{partition} does not exist")
                        if part.is_diskless:
                            raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED, "")
                        records.append(elect_leader(topic.topic_id, part, election_type,
                                                    eligible_brokers(self.image, part, alive),
                                                    self.elr_rule(name)))
                        if election_type != PREFERRED:
                            log.warning("unclean election asked for %s-%d: acknowledged "
                                        "writes its new leader missed are lost", name, partition)
                        error: tuple[ErrorCode, str | None] = (ErrorCode.NONE, None)
                    except KafkaError as exc:
                        if wanted is None and exc.code == ErrorCode.ELECTION_NOT_NEEDED:
                            continue
                        error = (exc.code, exc.message or None)
                    outcome.setdefault(name, {})[partition] = error
            if records:
                await self._commit(records)
            return outcome

    async def balance_leaders(self) -> None:
        """auto.leader.rebalance.enable: give every partition whose preferred replica is alive
        and in sync but does not lead back to it (the active controller, on a timer)."""
        if not self.raft.is_leader:
            return
        alive = alive_brokers(self.image)
        imbalanced = {name: [p.partition_id for p in t.partitions.values()
                             if not p.is_diskless and p.leader != p.replicas[0]
                             and p.replicas[0] in eligible_brokers(self.image, p, alive)
                             and p.replicas[0] in p.isr]
                      for name, t in self.image.topics_by_name.items()}
        imbalanced = {name: parts for name, parts in imbalanced.items() if parts}
        if not imbalanced:
            return
        try:
            elected = await self.elect_leaders(PREFERRED, imbalanced)
        except KafkaError as exc:  # leadership moved: the next controller balances
            log.info("could not balance partition leaders: %s", exc)
            return
        moved = sum(1 for parts in elected.values() for code, _ in parts.values()
                    if code == ErrorCode.NONE)
        if moved:
            log.info("moved %d partition leadership(s) back to their preferred replicas", moved)

    # -- producer ids ------------------------------------------------------------------------

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` consecutive producer ids and return the first (AllocateProducerIds).

        The ProducerIdsRecord stores the next free id in the metadata log, so a restart never
        hands out an id twice.
        """
        if count <= 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"cannot allocate {count} producer ids")
        if self._forwards():  # the controller hands out blocks of its own size (1000)
            first: int = await self.forwarder.allocate_producer_ids()
            return first
        async with self._lock:
            first = self.image.next_producer_id
            if first > MAX_PRODUCER_ID - count:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds.")
            await self._commit([self._record("ProducerIdsRecord", broker_id=self.node_id,
                                             broker_epoch=-1, next_producer_id=first + count)])
            return first

    # -- log dirs (JBOD, KIP-858) ---------------------------------------------------------------

    async def mark_log_dirs_offline(self, broker_id: int,
                                    offline_dirs: list[uuid.UUID]) -> None:
        """Take the dirs a broker reports offline (BrokerHeartbeat OfflineLogDirs) out of its
        online ones: a BrokerRegistrationChangeRecord (v2 LogDirs) lists those left. A dir comes
        back only with the broker's next registration, as in Kafka."""
        async with self._lock:
            await self._mark_log_dirs_offline(broker_id, offline_dirs)

    async def _mark_log_dirs_offline(self, broker_id: int, offline_dirs: list[uuid.UUID]) -> None:
        online = self.image.broker_log_dirs.get(broker_id, ())
        remaining = [d for d in online if d not in offline_dirs]
        if len(remaining) == len(online):
            return
        known = self.image.brokers.get(broker_id)
        log.warning("broker %d reports log dir(s) %s offline", broker_id,
                    ", ".join(str(d) for d in online if d in offline_dirs))
        await self._commit([self._record(
            "BrokerRegistrationChangeRecord", broker_id=broker_id,
            broker_epoch=known.broker_epoch if known is not None else 0, log_dirs=remaining)])
        # Its replicas in those dirs hold nothing usable now: leaderships and ISR places move.
        records = offline_dir_records(self.image, broker_id, self)
        if records:
            log.warning("broker %d: %d partition(s) on offline log dirs lose it as leader or "
                        "in-sync replica", broker_id, len(records))
            await self._commit(records)

    async def assign_replicas_to_dirs(
            self, broker_id: int, broker_epoch: int,
            assignments: list[tuple[uuid.UUID, uuid.UUID, int]]) -> list[ErrorCode]:
        """AssignReplicasToDirs (KIP-858): record the log dir each (dir id, topic id, partition)
        replica of the broker lives in; one error per assignment, the valid ones committed in
        one batch. A replica placed in a dir that is offline leaves the ISR at once."""
        async with self._lock:
            check_broker_epoch(self.image, broker_id, broker_epoch)
            online = set(self.image.broker_log_dirs.get(broker_id, ()))
            offline = set(self.image.offline_log_dirs.get(broker_id, ()))
            errors: list[ErrorCode] = []
            changed: dict[tuple[uuid.UUID, int], list[uuid.UUID]] = {}
            for directory, topic_id, partition in assignments:
                topic = self.image.topics_by_id.get(topic_id)
                part = topic.partitions.get(partition) if topic is not None else None
                if topic is None:
                    errors.append(ErrorCode.UNKNOWN_TOPIC_ID)
                elif part is None:
                    errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif broker_id not in part.replicas:
                    errors.append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                elif directory not in online | offline:
                    errors.append(ErrorCode.LOG_DIR_NOT_FOUND)
                else:
                    errors.append(ErrorCode.NONE)
                    dirs = changed.setdefault((topic_id, partition), list(
                        part.directories or [UNASSIGNED_DIR] * len(part.replicas)))
                    dirs[part.replicas.index(broker_id)] = directory
            records = [self._record("PartitionChangeRecord", topic_id=topic_id,
                                    partition_id=partition, leader=LEADER_UNCHANGED,
                                    directories=dirs)
                       for (topic_id, partition), dirs in changed.items()
                       if tuple(dirs) != self.image.topics_by_id[topic_id].partitions[
                           partition].directories]
            if records:
                await self._commit(records)
                moved = offline_dir_records(self.image, broker_id, self)
                if moved:
                    await self._commit(moved)
            return errors

    # -- commit ------------------------------------------------------------------------------

    def _record(self, record_type: str, /, **fields: Any) -> Any:
        return self._records[record_type].cls(**fields)

    async def _commit(self, records: list[Any]) -> None:
        """Append the records as one batch through the quorum and wait until they are
        committed and applied to the image; NOT_CONTROLLER when this node does not lead the
        quorum (or stops leading it before they commit), KAFKA_STORAGE_ERROR when the
        metadata log cannot be written."""
        await self.start()
        try:
            end_offset = self.raft.append(records)
        except OSError as exc:
            log.error("could not append %d metadata record(s): %s", len(records), exc)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"the metadata log could not be written: {exc}") from exc
        await self.raft.wait_applied(end_offset)
