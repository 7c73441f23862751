"""MetadataImage: the cluster's state as of one offset of `__cluster_metadata`; never mutated.

Mirrors Kafka's MetadataImage/MetadataDelta: records are applied to a MetadataDelta, which
copies each part of the image at most once however many records touch it, and `apply` returns
the new image; request handlers keep reading the image they started with. Applying N records
costs O(N + size of the parts they touch), so replaying a large log stays linear.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kafka_ext.controller import delegation_tokens
from kafka_ext.security.acl import AclEntry
from kafka_ext.security.delegation_token import TokenInformation
from kafka_ext.security.sasl import SCRAM_MECHANISM_NAMES, ScramCredential

# Partition reduction (seed 002): a partition's mode.
READ_WRITE = 0
READ_ONLY = 1  # readable until it is deleted; not written
MODE_NONE = -1  # being deleted: neither read nor written
MODE_UNCHANGED = -2  # PartitionChangeRecord's Mode when it does not change
# KIP-858's directory id of a replica no broker has placed in a log dir yet.
UNASSIGNED_DIR = uuid.UUID(int=0)
# KIP-966: at level 1 the controller keeps each partition's eligible leader replicas.
ELR_VERSION_FEATURE = "eligible.leader.replicas.version"
# ConfigResource types on the wire (DescribeConfigs and ConfigRecord).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(slots=True, frozen=True)
class ChunkImage:
    """An inactive chunk of a partition (ChunkRecord, seed 000): immutable offsets
    [start_offset, end_offset] held by every one of its replicas, read up to stop_offset
    (inclusive; the rest, open transactions when it was closed, is read from the next chunk).
    It has no leader; any replica serves it."""

    start_offset: int
    start_timestamp: int
    stop_offset: int
    end_offset: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    directories: tuple[uuid.UUID, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    chunk_epoch: int = 0  # bumped by each ChunkChangeRecord; AlterChunkAssignments checks it
    partition_epoch: int = -1  # the partition's epoch when the chunk was closed
    # When it was closed: its largest record timestamp and its bytes, for retention (-1: unknown).
    max_timestamp: int = -1
    size_bytes: int = -1

    def holds(self, offset: int) -> bool:
        """Whether a reader at `offset` reads it from this chunk."""
        return self.start_offset <= offset <= self.stop_offset

    @property
    def readable_replicas(self) -> tuple[int, ...]:
        """Replicas that hold the whole chunk (a replica being added is still copying)."""
        return tuple(r for r in self.isr if r not in self.adding_replicas)


@dataclass(slots=True, frozen=True)
class PartitionImage:
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # Diskless topics: the partition of __diskless_metadata whose coordinator owns this
    # partition (PartitionRecord's DisklessCoordinator tag); -1 for a classic partition.
    diskless_coordinator: int = -1
    # A reassignment in progress (KIP-455): `replicas` holds the target replicas followed by
    # the ones being removed; `adding_replicas` are the targets that were not replicas before.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    # KIP-858: the log dir id of each replica, in replica order (UNASSIGNED_DIR while its
    # broker has not said); empty when no replica has been assigned one.
    directories: tuple[uuid.UUID, ...] = ()
    # KIP-253: the leader epoch each partition that existed before this one had when this one
    # was added, (partition, leader epoch) pairs; empty for a topic's first partitions.
    prior_leader_epochs: tuple[tuple[int, int], ...] = ()
    mode: int = READ_WRITE  # partition reduction: READ_ONLY / MODE_NONE while being removed
    # Chunks (seed 000): where the active chunk (this record's replicas) starts, -1 before the
    # first chunk was created; the inactive chunks before it, by start offset.
    start_offset: int = -1
    start_timestamp: int = -1
    chunks: tuple[ChunkImage, ...] = ()
    # KIP-966: replicas out of the ISR that hold every committed record (the ISR went below
    # min.insync.replicas when they left it, so the high watermark stopped), and those that
    # were last known to, for an operator's recovery. Empty unless
    # eligible.leader.replicas.version is 1.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def writable(self) -> bool:
        return self.mode == READ_WRITE

    @property
    def is_diskless(self) -> bool:
        return self.diskless_coordinator >= 0

    def directory_of(self, replica: int) -> uuid.UUID:
        """The log dir id the replica on broker `replica` lives in, UNASSIGNED_DIR if unknown."""
        for broker, directory in zip(self.replicas, self.directories, strict=False):
            if broker == replica:
                return directory
        return UNASSIGNED_DIR

    def chunk_at(self, offset: int) -> ChunkImage | None:
        """The inactive chunk a reader at `offset` reads from; None: the active chunk's (or no
        chunk's: below the first one, past the end)."""
        if self.start_offset < 0 or offset >= self.start_offset:
            return None
        return next((c for c in self.chunks if c.holds(offset)), None)

    def chunk_starting_at(self, start_offset: int) -> ChunkImage | None:
        return next((c for c in self.chunks if c.start_offset == start_offset), None)

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where a reassignment in progress moves the partition (its replicas when none)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress: what cancelling it restores."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(slots=True, frozen=True)
class PartitionDeletion:
    """A partition reduction in progress (DeleteTopicPartitionsRecord): partitions from
    `first_removed` on are ReadOnly until `delete_at_ms` (wall clock), then None, then gone."""

    first_removed: int
    delete_at_ms: int
    requested_ms: int


@dataclass(slots=True, frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage]
    deletion: PartitionDeletion | None = None

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first else 0


@dataclass(slots=True, frozen=True)
class BrokerEndpoint:
    listener_name: str
    host: str
    port: int
    security_protocol: int


@dataclass(slots=True, frozen=True)
class BrokerRegistration:
    """A registered broker (RegisterBrokerRecord): how clients reach it, and whether the
    controller has fenced it (no leaderships, not in Metadata) or it is shutting down."""

    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)


@dataclass(slots=True, frozen=True)
class MetadataImage:
    offset: int = -1
    topics_by_name: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    # (resource type, resource name) -> {config name: value}; "" name = cluster default.
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    # The first producer id no broker has been given yet (ProducerIdsRecord.NextProducerId).
    next_producer_id: int = 0
    # KIP-858: each broker's online log dir ids (RegisterBrokerRecord / BrokerRegistrationChange
    # Record LogDirs) and the ids that left that set, i.e. dirs that went offline (docs/jbod.md).
    broker_log_dirs: dict[int, tuple[uuid.UUID, ...]] = field(default_factory=dict)
    offline_log_dirs: dict[int, tuple[uuid.UUID, ...]] = field(default_factory=dict)
    # Client quotas (ClientQuotaRecord): entity ((type, name) pairs sorted by type; a None
    # name is the default) -> {quota key: value}. See controller/client_quota_control.py.
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = field(
        default_factory=dict)
    # Registered brokers by id (RegisterBrokerRecord, fenced / unfenced / unregistered).
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    # SCRAM logins (UserScramCredentialRecord): user -> mechanism name -> credential.
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    # ACLs (AccessControlEntryRecord) by their id; see security/acl.py.
    acls: dict[uuid.UUID, AclEntry] = field(default_factory=dict)
    # Delegation tokens (DelegationTokenRecord) by token id; controller/delegation_tokens.py.
    delegation_tokens: dict[str, TokenInformation] = field(default_factory=dict)

    @property
    def elr_enabled(self) -> bool:
        return self.features.get(ELR_VERSION_FEATURE, 0) >= 1

    def live_brokers(self) -> list[BrokerRegistration]:
        """Registered, unfenced brokers: the ones that may lead partitions, by id."""
        return sorted((b for b in self.brokers.values() if not b.fenced),
                      key=lambda b: b.broker_id)

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), {})

    def replicas_on_offline_dirs(self, part: PartitionImage) -> set[int]:
        """The replicas of `part` whose assigned log dir their broker reported offline: they
        hold no usable copy, so they may neither lead nor stay in the ISR (KIP-858)."""
        return {r for r, d in zip(part.replicas, part.directories, strict=False)
                if d in self.offline_log_dirs.get(r, ())}

    def is_diskless(self, topic: str, partition: int) -> bool:
        """Whether the partition exists and is mapped to a diskless coordinator."""
        known = self.topics_by_name.get(topic)
        part = known.partitions.get(partition) if known is not None else None
        return part is not None and part.is_diskless

    def apply(self, offset: int, record_name: str, record: Any) -> MetadataImage:
        """The image after one record; unknown record types leave it unchanged."""
        return self.apply_all(offset, [(record_name, record)])

    def apply_all(self, first_offset: int, records: Iterable[tuple[str, Any]]) -> MetadataImage:
        """The image after records at first_offset, first_offset + 1, ...; one copy per part."""
        delta = MetadataDelta(self)
        count = 0
        for name, record in records:
            count += 1
            apply = _APPLIERS.get(name)
            if apply is not None:
                apply(delta, record)
        return delta.image(first_offset + count - 1)


class MetadataDelta:
    """Changes on top of an image, built record by record; owned by one apply_all call."""

    def __init__(self, base: MetadataImage) -> None:
        self.base = base
        self._by_name: dict[str, TopicImage] | None = None
        self._by_id: dict[uuid.UUID, TopicImage] | None = None
        self._configs: dict[tuple[int, str], dict[str, str]] | None = None
        self._features: dict[str, int] | None = None
        self._log_dirs: tuple[dict[int, tuple[uuid.UUID, ...]],
                              dict[int, tuple[uuid.UUID, ...]]] | None = None
        self.next_producer_id: int | None = None  # set by ProducerIdsRecord
        self._client_quotas: dict[tuple[tuple[str, str | None], ...],
                                  dict[str, float]] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._scram: dict[str, dict[str, ScramCredential]] | None = None
        self._acls: dict[uuid.UUID, AclEntry] | None = None
        self._tokens: dict[str, TokenInformation] | None = None
        # Topics whose partitions dict this delta already copied (safe to mutate), by id.
        self._own_partitions: set[uuid.UUID] = set()

    def topics(self) -> tuple[dict[str, TopicImage], dict[uuid.UUID, TopicImage]]:
        if self._by_name is None or self._by_id is None:
            self._by_name = dict(self.base.topics_by_name)
            self._by_id = dict(self.base.topics_by_id)
        return self._by_name, self._by_id

    def add_topic(self, name: str, topic_id: uuid.UUID) -> None:
        self.put_topic(TopicImage(name, topic_id, {}))
        self._own_partitions.add(topic_id)  # a new, empty dict of its own

    def put_topic(self, topic: TopicImage) -> None:
        by_name, by_id = self.topics()
        by_name[topic.name] = topic
        by_id[topic.topic_id] = topic

    def partitions_of(self, topic_id: uuid.UUID) -> dict[int, PartitionImage]:
        """The topic's partitions, as a dict this delta may change."""
        _, by_id = self.topics()
        topic = by_id[topic_id]
        if topic_id not in self._own_partitions:
            topic = replace(topic, partitions=dict(topic.partitions))
            self.put_topic(topic)
            self._own_partitions.add(topic_id)
        return topic.partitions

    def configs(self) -> dict[tuple[int, str], dict[str, str]]:
        if self._configs is None:
            self._configs = dict(self.base.configs)
        return self._configs

    def features(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self.base.features)
        return self._features

    def client_quotas(self) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        if self._client_quotas is None:
            self._client_quotas = dict(self.base.client_quotas)
        return self._client_quotas

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        if self._scram is None:
            self._scram = dict(self.base.scram_credentials)
        return self._scram

    def acls(self) -> dict[uuid.UUID, AclEntry]:
        if self._acls is None:
            self._acls = dict(self.base.acls)
        return self._acls

    def delegation_tokens(self) -> dict[str, TokenInformation]:
        if self._tokens is None:
            self._tokens = dict(self.base.delegation_tokens)
        return self._tokens

    def brokers(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.base.brokers)
        return self._brokers

    def log_dirs(self) -> tuple[dict[int, tuple[uuid.UUID, ...]], dict[int, tuple[uuid.UUID, ...]]]:
        """(online dirs per broker, offline dirs per broker), as dicts this delta may change."""
        if self._log_dirs is None:
            self._log_dirs = (dict(self.base.broker_log_dirs), dict(self.base.offline_log_dirs))
        return self._log_dirs

    def image(self, offset: int) -> MetadataImage:
        base = self.base
        online, offline = ((base.broker_log_dirs, base.offline_log_dirs)
                           if self._log_dirs is None else self._log_dirs)
        return MetadataImage(
            offset=max(offset, base.offset),
            topics_by_name=base.topics_by_name if self._by_name is None else self._by_name,
            topics_by_id=base.topics_by_id if self._by_id is None else self._by_id,
            configs=base.configs if self._configs is None else self._configs,
            features=base.features if self._features is None else self._features,
            next_producer_id=(base.next_producer_id if self.next_producer_id is None
                              else self.next_producer_id),
            broker_log_dirs=online,
            offline_log_dirs=offline,
            client_quotas=(base.client_quotas if self._client_quotas is None
                           else self._client_quotas),
            brokers=base.brokers if self._brokers is None else self._brokers,
            scram_credentials=base.scram_credentials if self._scram is None else self._scram,
            acls=base.acls if self._acls is None else self._acls,
            delegation_tokens=(base.delegation_tokens if self._tokens is None
                               else self._tokens),
        )


def _apply_topic(delta: MetadataDelta, record: Any) -> None:
    delta.add_topic(record.name, record.topic_id)


def _apply_partition(delta: MetadataDelta, record: Any) -> None:
    delta.partitions_of(record.topic_id)[record.partition_id] = PartitionImage(
        record.partition_id, tuple(record.replicas), tuple(record.isr), record.leader,
        record.leader_epoch, record.partition_epoch, record.diskless_coordinator,
        tuple(record.adding_replicas or ()), tuple(record.removing_replicas or ()),
        tuple(record.directories or ()),
        tuple((e.partition, e.leader_epoch) for e in record.prior_leader_epochs or ()),
        record.mode, record.start_offset, record.start_timestamp,
        elr=tuple(record.eligible_leader_replicas or ()),
        last_known_elr=tuple(record.last_known_elr or ()))


def _apply_partition_change(delta: MetadataDelta, record: Any) -> None:
    partitions = delta.partitions_of(record.topic_id)
    old = partitions[record.partition_id]
    changes: dict[str, Any] = {"partition_epoch": old.partition_epoch + 1}
    if record.isr is not None:
        changes["isr"] = tuple(record.isr)
    if record.replicas is not None:
        changes["replicas"] = tuple(record.replicas)
    if record.adding_replicas is not None:
        changes["adding_replicas"] = tuple(record.adding_replicas)
    if record.removing_replicas is not None:
        changes["removing_replicas"] = tuple(record.removing_replicas)
    if record.directories is not None:
        changes["directories"] = tuple(record.directories)
    if record.eligible_leader_replicas is not None:
        changes["elr"] = tuple(record.eligible_leader_replicas)
    if record.last_known_elr is not None:
        changes["last_known_elr"] = tuple(record.last_known_elr)
    if record.mode != MODE_UNCHANGED:
        changes["mode"] = record.mode
    if record.leader != -2:  # -2: leader unchanged
        changes["leader"] = record.leader
        changes["leader_epoch"] = old.leader_epoch + 1
    if record.start_offset != -1:  # a new active chunk (seed 000)
        changes["start_offset"] = record.start_offset
        changes["start_timestamp"] = record.start_timestamp
    partitions[record.partition_id] = replace(old, **changes)


def _apply_chunk(delta: MetadataDelta, record: Any) -> None:
    """A chunk closed (or, from a snapshot, restored): it joins the partition's chunks."""
    partitions = delta.partitions_of(record.topic_id)
    old = partitions[record.partition_id]
    chunk = ChunkImage(
        record.start_offset, record.start_timestamp, record.stop_offset, record.end_offset,
        tuple(record.replicas), tuple(record.isr), tuple(record.directories or ()),
        tuple(record.adding_replicas or ()), tuple(record.removing_replicas or ()),
        record.chunk_epoch, record.epoch, record.max_timestamp, record.size_bytes)
    others = [c for c in old.chunks if c.start_offset != chunk.start_offset]
    partitions[record.partition_id] = replace(old, chunks=tuple(sorted(
        [*others, chunk], key=lambda c: c.start_offset)))


def _apply_chunk_change(delta: MetadataDelta, record: Any) -> None:
    """New replicas of an inactive chunk; a chunk left with none is gone."""
    partitions = delta.partitions_of(record.topic_id)
    old = partitions[record.partition_id]
    chunk = old.chunk_starting_at(record.start_offset)
    if chunk is None:
        return
    changes: dict[str, Any] = {"chunk_epoch": record.epoch}
    for name in ("replicas", "isr", "directories", "adding_replicas", "removing_replicas"):
        value = getattr(record, name)
        if value is not None:
            changes[name] = tuple(value)
    changed = replace(chunk, **changes)
    chunks = [c for c in old.chunks if c is not chunk]
    if changed.replicas:
        chunks.append(changed)
    partitions[record.partition_id] = replace(old, chunks=tuple(sorted(
        chunks, key=lambda c: c.start_offset)))


def _apply_delete_topic_partitions(delta: MetadataDelta, record: Any) -> None:
    _, by_id = delta.topics()
    topic = by_id.get(record.topic_id)
    if topic is not None:
        delta.put_topic(replace(topic, deletion=PartitionDeletion(
            record.delete_partitions, record.delete_partitions_delay_timestamp,
            record.create_timestamp)))


def _apply_remove_topic_partitions(delta: MetadataDelta, record: Any) -> None:
    """The reduction is done: partitions from the new count on leave the topic."""
    partitions = delta.partitions_of(record.topic_id)
    for index in [p for p in partitions if p >= record.partition_count]:
        del partitions[index]
    _, by_id = delta.topics()
    delta.put_topic(replace(by_id[record.topic_id], deletion=None))


def _apply_remove_topic(delta: MetadataDelta, record: Any) -> None:
    by_name, by_id = delta.topics()
    topic = by_id.pop(record.topic_id, None)
    if topic is None:
        return
    del by_name[topic.name]
    delta.configs().pop((TOPIC_RESOURCE, topic.name), None)


def _apply_config(delta: MetadataDelta, record: Any) -> None:
    configs = delta.configs()
    key = (record.resource_type, record.resource_name)
    values = dict(configs.get(key, {}))
    if record.value is None:
        values.pop(record.name, None)
    else:
        values[record.name] = record.value
    configs[key] = values


def _apply_feature_level(delta: MetadataDelta, record: Any) -> None:
    delta.features()[record.name] = record.feature_level


def _apply_producer_ids(delta: MetadataDelta, record: Any) -> None:
    # Blocks only move forward: an older record replayed late never hands out ids again.
    current = (delta.base.next_producer_id if delta.next_producer_id is None
               else delta.next_producer_id)
    delta.next_producer_id = max(current, record.next_producer_id)


def _apply_broker_log_dirs(delta: MetadataDelta, record: Any) -> None:
    """KIP-858: a dir that was registered and is no longer listed is offline until it returns."""
    dirs = getattr(record, "log_dirs", None)
    if dirs is None:
        return
    online, offline = delta.log_dirs()
    broker = record.broker_id
    known = set(online.get(broker, ())) | set(offline.get(broker, ()))
    online[broker] = tuple(dirs)
    offline[broker] = tuple(sorted(known - set(dirs), key=str))


def _apply_register_broker(delta: MetadataDelta, record: Any) -> None:
    delta.brokers()[record.broker_id] = BrokerRegistration(
        record.broker_id, record.broker_epoch, record.incarnation_id,
        tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol)
              for e in record.end_points),
        record.rack, bool(record.fenced), bool(record.in_controlled_shutdown))
    if record.log_dirs:
        _apply_broker_log_dirs(delta, record)


def _set_fenced(delta: MetadataDelta, broker_id: int, fenced: bool) -> None:
    brokers = delta.brokers()
    known = brokers.get(broker_id)
    if known is not None:
        brokers[broker_id] = replace(known, fenced=fenced,
                                     in_controlled_shutdown=known.in_controlled_shutdown
                                     and fenced)


def _apply_broker_change(delta: MetadataDelta, record: Any) -> None:
    """Fenced / InControlledShutdown: 1 sets, -1 clears, 0 leaves it (Kafka's encoding)."""
    if record.fenced:
        _set_fenced(delta, record.broker_id, record.fenced > 0)
    if record.in_controlled_shutdown:
        brokers = delta.brokers()
        known = brokers.get(record.broker_id)
        if known is not None:
            brokers[record.broker_id] = replace(
                known, in_controlled_shutdown=record.in_controlled_shutdown > 0)
    if record.log_dirs or not (record.fenced or record.in_controlled_shutdown):
        _apply_broker_log_dirs(delta, record)


def _apply_unregister_broker(delta: MetadataDelta, record: Any) -> None:
    delta.brokers().pop(record.broker_id, None)


def _apply_client_quota(delta: MetadataDelta, record: Any) -> None:
    quotas = delta.client_quotas()
    entity = tuple(sorted({e.entity_type: e.entity_name for e in record.entity}.items()))
    values = dict(quotas.get(entity, {}))
    if record.remove:
        values.pop(record.key, None)
    else:
        values[record.key] = record.value
    if values:
        quotas[entity] = values
    else:
        quotas.pop(entity, None)


def _apply_scram_credential(delta: MetadataDelta, record: Any) -> None:
    credentials = delta.scram_credentials()
    mechanisms = dict(credentials.get(record.name, {}))
    mechanisms[SCRAM_MECHANISM_NAMES[record.mechanism]] = ScramCredential(
        bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), record.iterations)
    credentials[record.name] = mechanisms


def _apply_remove_scram_credential(delta: MetadataDelta, record: Any) -> None:
    credentials = delta.scram_credentials()
    mechanisms = dict(credentials.get(record.name, {}))
    mechanisms.pop(SCRAM_MECHANISM_NAMES.get(record.mechanism, ""), None)
    if mechanisms:
        credentials[record.name] = mechanisms
    else:
        credentials.pop(record.name, None)


def _apply_acl(delta: MetadataDelta, record: Any) -> None:
    delta.acls()[record.id] = AclEntry(
        record.resource_type, record.resource_name, record.pattern_type, record.principal,
        record.host, record.operation, record.permission_type)


def _remove_acl(delta: MetadataDelta, record: Any) -> None:
    delta.acls().pop(record.id, None)


_APPLIERS: dict[str, Callable[[MetadataDelta, Any], None]] = {
    "RegisterBrokerRecord": _apply_register_broker,
    "BrokerRegistrationChangeRecord": _apply_broker_change,
    "FenceBrokerRecord": lambda delta, record: _set_fenced(delta, record.id, True),
    "UnfenceBrokerRecord": lambda delta, record: _set_fenced(delta, record.id, False),
    "UnregisterBrokerRecord": _apply_unregister_broker,
    "TopicRecord": _apply_topic,
    "PartitionRecord": _apply_partition,
    "PartitionChangeRecord": _apply_partition_change,
    "ChunkRecord": _apply_chunk,
    "ChunkChangeRecord": _apply_chunk_change,
    "DeleteTopicPartitionsRecord": _apply_delete_topic_partitions,
    "RemoveTopicPartitionsRecord": _apply_remove_topic_partitions,
    "RemoveTopicRecord": _apply_remove_topic,
    "ConfigRecord": _apply_config,
    "FeatureLevelRecord": _apply_feature_level,
    "ProducerIdsRecord": _apply_producer_ids,
    "ClientQuotaRecord": _apply_client_quota,
    "UserScramCredentialRecord": _apply_scram_credential,
    "RemoveUserScramCredentialRecord": _apply_remove_scram_credential,
    "AccessControlEntryRecord": _apply_acl,
    "RemoveAccessControlEntryRecord": _remove_acl,
    **delegation_tokens.APPLIERS,
}
