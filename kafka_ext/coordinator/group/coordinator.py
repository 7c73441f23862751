"""GroupCoordinator: the classic consumer group protocol, committed offsets, and the hosts of
KIP-848 consumer groups (consumer_group_manager.py) and KIP-932 share groups
(share_group_manager.py).

Mirrors Kafka's GroupCoordinatorService over GroupMetadataManager/OffsetMetadataManager: one
GroupCoordinatorShard per `__consumer_offsets` partition, hosted by the CoordinatorRuntime.
Rebalances follow Kafka's classic protocol: JoinGroup requests wait (as futures) until every
known member has rejoined or the rebalance timeout removes the laggards; the leader's SyncGroup
assignments are persisted as a GroupMetadata record before members get them; session timers
expire silent members. Offsets are OffsetCommit records, replayed into the shard once appended;
transactional ones become visible at the COMMIT marker. Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.coordinator.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    ClassicGroupMember,
    GroupState,
    JoinResult,
    SyncResult,
)
from kafka_ext.coordinator.group.consumer_group import CONSUMER_GROUP_TYPE, ConsumerGroup
from kafka_ext.coordinator.group.consumer_group_manager import (
    ConsumerGroupConfig,
    ConsumerGroupManager,
    HeartbeatRequest,
    HeartbeatResult,
    group_tombstones,
    refuse_share_group,
)
from kafka_ext.coordinator.group.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from kafka_ext.coordinator.group.shard import CommittedOffset, GroupCoordinatorShard
from kafka_ext.coordinator.group.share_group import (
    SHARE_GROUP_TYPE,
    SHARE_PROTOCOL_TYPE,
    ShareGroup,
)
from kafka_ext.coordinator.group.share_group_manager import (
    ShareGroupManager,
    ShareGroupSettings,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    TopicOffsets,
    TopicResult,
)
from kafka_ext.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.group_config import share_group_configs

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
# Kafka's classic.group.new.member.join.timeout.ms: a new member that never completes its join
# is dropped after this long, so it cannot hold a rebalance up forever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
# Kafka's offset.metadata.max.bytes default: longer commit metadata is refused.
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096
# Tombstones per write of the offset expiry: one batch stays well under max.message.bytes.
MAX_RECORDS_PER_WRITE = 2000

_NONE = int(ErrorCode.NONE)

TopicPartition = tuple[str, int]


@dataclass(slots=True, frozen=True)
class GroupConfig:
    """The broker settings the group coordinator follows (Kafka's GroupCoordinatorConfig)."""

    num_partitions: int = 50
    replication_factor: int = -1
    segment_bytes: int = 100 * 1024 * 1024
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    share: ShareGroupSettings = field(default_factory=ShareGroupSettings)

    @classmethod
    def from_broker_config(cls, config: Any) -> GroupConfig:
        values = config.values
        return cls(
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            segment_bytes=int(values["offsets.topic.segment.bytes"]),
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=int(values["group.max.size"]),
            offsets_retention_ms=config.offsets_retention_ms,
            offsets_retention_check_interval_ms=int(
                values["offsets.retention.check.interval.ms"]),
            offset_metadata_max_bytes=int(values.get("offset.metadata.max.bytes",
                                                     DEFAULT_OFFSET_METADATA_MAX_BYTES)),
            consumer=ConsumerGroupConfig.from_broker_config(config),
            share=ShareGroupSettings.from_broker_config(config),
        )


@dataclass(slots=True)
class OffsetCommitEntry:
    """One partition of an OffsetCommit/TxnOffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1  # OffsetCommit v1's own commit time (ms); -1: the broker's clock


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: int = _NONE


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class PositionExchange:
    """KIP-253 positions carried by a classic Heartbeat: in, what the member reports and asks
    about; out, the group's positions it asked for and the partitions others wait on."""

    reported: dict[tuple[str, int], int]
    wanted: frozenset[tuple[str, int]]
    answered: dict[tuple[str, int], int] = field(default_factory=dict)
    asked: frozenset[tuple[str, int]] = frozenset()


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    error: int = _NONE
    state: str = GroupState.DEAD.value
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _join_error(code: ErrorCode, member_id: str) -> JoinResult:
    return JoinResult(int(code), member_id)


class GroupCoordinator:
    """Serves the group APIs for the `__consumer_offsets` partitions this node leads."""

    def __init__(self, broker: Any, config: GroupConfig,
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.broker = broker
        self.config = config
        self._clock_ms = clock_ms
        topic_configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config.segment_bytes),
        }
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            broker, GROUP_METADATA_TOPIC, config.num_partitions, topic_configs, self._new_shard,
            replication_factor=config.replication_factor)
        self.consumer_groups = ConsumerGroupManager(self.runtime, config.consumer,
                                                    lambda: self.broker.controller.image)
        # KIP-932: share-partition state goes through the share coordinator's persister
        # (broker.share_persister); group configs from the metadata image (group_config.py).
        self.share_groups = ShareGroupManager(
            self.runtime, config.share, lambda: self.broker.controller.image,
            lambda group_id: share_group_configs(self.broker, group_id),
            lambda: getattr(self.broker, "share_persister", None), clock_ms)

    # -- lifecycle and placement -------------------------------------------------------------

    async def start(self) -> None:
        await self.runtime.start()
        self.broker.controller.listeners.append(self._on_image)

    async def stop(self) -> None:
        listeners = self.broker.controller.listeners
        if self._on_image in listeners:
            listeners.remove(self._on_image)
        await self.runtime.stop()

    def _on_image(self, old: Any, new: Any) -> None:
        """Offsets of deleted topics go with them (Kafka's onPartitionsDeleted), so a topic
        created again under the same name starts without stale positions."""
        if old is None:
            return
        for partition, group_id in self.consumer_groups.stale_groups():
            self.runtime.spawn(self._refresh_consumer_group(partition, group_id))
        deleted_ids = old.topics_by_id.keys() - new.topics_by_id.keys()
        if deleted_ids:
            self.share_groups.on_topics_deleted(set(deleted_ids))
        deleted = {old.topics_by_id[topic_id].name for topic_id in deleted_ids}
        deleted.discard(GROUP_METADATA_TOPIC)
        if deleted:
            for partition in self.runtime.loaded_partitions():
                self.runtime.spawn(self._delete_offsets_of_topics(partition, deleted))

    async def _delete_offsets_of_topics(self, partition: int, topics: set[str]) -> None:
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[int]:
            records: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group_id, t, p), None)
                for group_id, committed in shard.offsets.items()
                for t, p in committed if t in topics]
            return CoordinatorResult(records[:MAX_RECORDS_PER_WRITE], len(records))

        try:
            while await self.runtime.write(partition, op) > MAX_RECORDS_PER_WRITE:
                pass
        except KafkaError as exc:
            log.warning("could not remove offsets of deleted topics %s from %s-%d: %s",
                        sorted(topics), GROUP_METADATA_TOPIC, partition, exc)

    async def _refresh_consumer_group(self, partition: int, group_id: str) -> None:
        try:
            await self.consumer_groups.refresh_metadata(partition, group_id)
        except KafkaError as exc:
            log.warning("could not refresh the assignment of consumer group %s: %s", group_id,
                        exc)

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def _new_shard(self, partition: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(partition, self._on_shard_loaded, self._on_shard_unloaded,
                                     self._clock_ms)

    def _on_shard_loaded(self, shard: GroupCoordinatorShard) -> None:
        """Loaded members must heartbeat again within their session; offsets start expiring."""
        for group in shard.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(shard.partition, group, member,
                                         member.session_timeout_ms)
        self.consumer_groups.on_shard_loaded(shard)
        self.share_groups.on_shard_loaded(shard)
        self._schedule_offset_expiration(shard.partition)

    def _on_shard_unloaded(self, shard: GroupCoordinatorShard) -> None:
        """Requests waiting on a rebalance learn that this node no longer coordinates. The
        groups go Dead (as in Kafka), so a write of theirs still in flight cannot touch the
        timers of the shard loaded next for the same partition."""
        now_ms = self._clock_ms()
        for group in shard.groups.values():
            group.transition_to(GroupState.DEAD, now_ms)
            for member in group.members.values():
                member.complete_join(_join_error(ErrorCode.NOT_COORDINATOR, member.member_id))
                member.complete_sync(SyncResult(int(ErrorCode.NOT_COORDINATOR)))

    def _shard(self, group_id: str) -> tuple[int, GroupCoordinatorShard]:
        partition = self.partition_for(group_id)
        return partition, self.runtime.shard(partition)

    # -- JoinGroup ---------------------------------------------------------------------------

    async def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                         client_id: str, client_host: str, session_timeout_ms: int,
                         rebalance_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], api_version: int) -> JoinResult:
        """Join (or rejoin) a classic group; waits until the join phase of the rebalance ends."""
        if not group_id:
            return _join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        partition, shard = self._shard(group_id)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        if not protocol_type or not protocols:
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if rebalance_timeout_ms < 0:  # JoinGroup v0 had none: the session timeout stands in
            rebalance_timeout_ms = session_timeout_ms
        if shard.consumer_group(group_id) is not None or shard.share_group(group_id) is not None:
            # A KIP-848 consumer group takes no classic members (Kafka without migration), nor
            # does a share group (KIP-932).
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        group = shard.group(group_id)
        created = False
        if group is None:
            if member_id:
                return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = shard.get_or_create_group(group_id)
            created = True
        member = _Joining(member_id, group_instance_id, client_id, client_host,
                          session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if not self._accepts_joining_member(group, member_id):
            result: JoinResult | asyncio.Future[JoinResult] = _join_error(
                ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        elif not member_id:
            result = await self._join_unknown_member(partition, group, member, api_version)
        else:
            result = self._join_known_member(partition, group, member)
        if isinstance(result, JoinResult):
            if created and result.error != _NONE and not group.members:
                self._drop_if_unused(shard, group)
            return result
        return await result

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size: a new member is refused once the group is full."""
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        known = group.members.get(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # Counting the waiting members walks the group: only when it could be full.
            return ((known is not None and known.is_awaiting_join)
                    or len(group.members) < self.config.max_size
                    or group.awaiting_join_count() < self.config.max_size)
        return known is not None or len(group.members) < self.config.max_size

    async def _join_unknown_member(self, partition: int, group: ClassicGroup, joining: _Joining,
                                   api_version: int) -> JoinResult | asyncio.Future[JoinResult]:
        if group.is_in(GroupState.DEAD):
            return _join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
        if not group.supports_protocols(joining.protocol_type, joining.protocols):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        prefix = joining.group_instance_id or joining.client_id
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        if joining.group_instance_id is not None:
            existing = group.static_member_id(joining.group_instance_id)
            if existing is not None:
                return await self._replace_static_member(partition, group, existing,
                                                         new_member_id, joining)
            return self._add_member_and_rebalance(partition, group, new_member_id, joining)
        if api_version >= 4:
            # KIP-394: the member learns its id first and joins with it, so a client that gives
            # up on this request does not leave a ghost member behind.
            group.pending_members.add(new_member_id)
            self.runtime.schedule(partition, _pending_key(group.group_id, new_member_id),
                                  joining.session_timeout_ms,
                                  lambda: self._expire_pending_member(group, new_member_id))
            return _join_error(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        return self._add_member_and_rebalance(partition, group, new_member_id, joining)

    def _join_known_member(self, partition: int, group: ClassicGroup, joining: _Joining
                           ) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = joining.member_id
        if group.is_in(GroupState.DEAD):
            return _join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(joining.protocol_type, joining.protocols):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            self.runtime.cancel(partition, _pending_key(group.group_id, member_id))
            return self._add_member_and_rebalance(partition, group, member_id, joining)
        fenced = _check_static_member(group, member_id, joining.group_instance_id)
        if fenced is not None:
            return _join_error(fenced, member_id)
        member = group.members.get(member_id)
        if member is None:
            return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if group.is_in(GroupState.COMPLETING_REBALANCE) and member.matches(joining.protocols):
            # The member lost our JoinGroup answer: give it again for the current generation.
            return self._current_generation(group, member, with_members=group.is_leader(member_id))
        if (group.is_in(GroupState.STABLE) and not group.is_leader(member_id)
                and member.matches(joining.protocols)):
            return self._current_generation(group, member, with_members=False)
        return self._update_member_and_rebalance(partition, group, member, joining)

    def _current_generation(self, group: ClassicGroup, member: ClassicGroupMember, *,
                            with_members: bool, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            _NONE, member.member_id, group.generation_id, group.protocol_type,
            group.protocol_name, group.leader_id or "", skip_assignment,
            self._member_list(group) if with_members else [])

    @staticmethod
    def _member_list(group: ClassicGroup) -> list[tuple[str, str | None, bytes]]:
        protocol = group.protocol_name or ""
        return [(m.member_id, m.group_instance_id, m.metadata(protocol))
                for m in group.members.values()]

    def _add_member_and_rebalance(self, partition: int, group: ClassicGroup, member_id: str,
                                  joining: _Joining) -> asyncio.Future[JoinResult]:
        member = ClassicGroupMember(
            member_id, joining.group_instance_id, joining.client_id, joining.client_host,
            joining.rebalance_timeout_ms, joining.session_timeout_ms, joining.protocol_type,
            list(joining.protocols), is_new=True)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        if group.is_in(GroupState.PREPARING_REBALANCE) and \
                group.previous_state == GroupState.EMPTY:
            group.new_member_added = True  # KIP-134: the initial delay waits a little longer
        group.add(member)
        self._schedule_heartbeat(partition, group, member, self.config.new_member_join_timeout_ms)
        self._rebalance_or_complete_join(partition, group,
                                         f"member {member_id} joined the group")
        return future

    def _update_member_and_rebalance(self, partition: int, group: ClassicGroup,
                                     member: ClassicGroupMember, joining: _Joining
                                     ) -> asyncio.Future[JoinResult]:
        group.set_protocols(member, joining.protocols)
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.complete_join(_join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
        self._rebalance_or_complete_join(partition, group,
                                         f"member {member.member_id} rejoined the group")
        return future

    async def _replace_static_member(self, partition: int, group: ClassicGroup,
                                     old_member_id: str, new_member_id: str, joining: _Joining
                                     ) -> JoinResult | asyncio.Future[JoinResult]:
        """KIP-345: a restarted static member takes over its old identity; the old id is fenced.
        In a Stable group whose chosen protocol stays the same this needs no rebalance."""
        instance_id = joining.group_instance_id
        assert instance_id is not None
        member = group.members[old_member_id]
        old = (list(member.protocols), member.rebalance_timeout_ms, member.session_timeout_ms)
        member.complete_join(_join_error(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        member.complete_sync(SyncResult(int(ErrorCode.FENCED_INSTANCE_ID)))
        self.runtime.cancel(partition, _heartbeat_key(group.group_id, old_member_id))
        group.replace_static_member(instance_id, old_member_id, new_member_id)
        group.set_protocols(member, joining.protocols)
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.client_id, member.client_host = joining.client_id, joining.client_host
        self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
        if group.is_in(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            generation = group.generation_id
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            try:
                await self._store_group(partition, group, assignments)
            except KafkaError as exc:
                if group.members.get(new_member_id) is member and \
                        not group.is_in(GroupState.DEAD):  # undo: the old member stays
                    group.replace_static_member(instance_id, new_member_id, old_member_id)
                    group.set_protocols(member, old[0])
                    member.rebalance_timeout_ms, member.session_timeout_ms = old[1], old[2]
                    self.runtime.cancel(partition, _heartbeat_key(group.group_id, new_member_id))
                    self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
                return _join_error(exc.code, "")
            if group.generation_id != generation or group.members.get(new_member_id) is not member:
                return _join_error(ErrorCode.REBALANCE_IN_PROGRESS, new_member_id)
            leader = group.is_leader(new_member_id)
            return self._current_generation(group, member, with_members=leader,
                                            skip_assignment=leader)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._rebalance_or_complete_join(
            partition, group, f"static member {instance_id} rejoined with a new member id")
        return future

    # -- rebalance mechanics -----------------------------------------------------------------

    def _rebalance_or_complete_join(self, partition: int, group: ClassicGroup,
                                    reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(partition, group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(partition, group)

    def _prepare_rebalance(self, partition: int, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_assignments(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.runtime.cancel(partition, _sync_key(group.group_id))
        group.pending_sync_members.clear()
        initial = group.is_in(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._clock_ms())
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id,
                 group.generation_id, reason)
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        if initial:
            delay_ms = min(self.config.initial_rebalance_delay_ms, rebalance_timeout_ms)
            group.initial_delay_remaining_ms = max(rebalance_timeout_ms - delay_ms, 0)
            group.new_member_added = False
            self.runtime.schedule(partition, _join_key(group.group_id), delay_ms,
                                  lambda: self._on_initial_delay(partition, group))
            return
        self.runtime.schedule(partition, _join_key(group.group_id), rebalance_timeout_ms,
                              lambda: self._complete_join(partition, group))
        self._maybe_complete_join(partition, group)

    def _on_initial_delay(self, partition: int, group: ClassicGroup) -> None:
        """KIP-134: while new members keep arriving, wait another delay (up to the timeout)."""
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        remaining = group.initial_delay_remaining_ms
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay_ms = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = max(remaining - delay_ms, 0)
            self.runtime.schedule(partition, _join_key(group.group_id), delay_ms,
                                  lambda: self._on_initial_delay(partition, group))
            return
        self._complete_join(partition, group)

    def _maybe_complete_join(self, partition: int, group: ClassicGroup) -> None:
        if (group.is_in(GroupState.PREPARING_REBALANCE)
                and group.previous_state != GroupState.EMPTY and group.has_all_members_joined()):
            self._complete_join(partition, group)

    def _complete_join(self, partition: int, group: ClassicGroup) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation."""
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        self.runtime.cancel(partition, _join_key(group.group_id))
        for member in group.not_yet_rejoined():
            log.info("member %s of group %s did not rejoin in time; removed", member.member_id,
                     group.group_id)
            self._forget_member(partition, group, member)
        group.init_next_generation(self._clock_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self._spawn_store_group(partition, group)
            return
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        members = self._member_list(group)
        for member in group.members.values():
            leader = group.is_leader(member.member_id)
            member.complete_join(JoinResult(
                _NONE, member.member_id, group.generation_id, group.protocol_type,
                group.protocol_name, group.leader_id or "", False, members if leader else []))
            member.is_new = False
            self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
        generation = group.generation_id
        self.runtime.schedule(partition, _sync_key(group.group_id), group.rebalance_timeout_ms(),
                              lambda: self._on_sync_timeout(partition, group, generation))

    def _on_sync_timeout(self, partition: int, group: ClassicGroup, generation: int) -> None:
        """Members that never sent SyncGroup for this generation are removed (Kafka 2.8+)."""
        if group.generation_id != generation or not group.pending_sync_members or \
                not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member_id in list(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                log.info("member %s of group %s did not sync in time; removed", member_id,
                         group.group_id)
                self._forget_member(partition, group, member)
        group.pending_sync_members.clear()
        self._prepare_rebalance(partition, group, "members did not sync in time")

    def _reset_assignments(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(SyncResult(int(error)))

    def _forget_member(self, partition: int, group: ClassicGroup,
                       member: ClassicGroupMember) -> None:
        """Remove a member; whatever request it still has waiting gets UNKNOWN_MEMBER_ID."""
        self.runtime.cancel(partition, _heartbeat_key(group.group_id, member.member_id))
        group.remove(member.member_id)
        member.complete_join(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.complete_sync(SyncResult(int(ErrorCode.UNKNOWN_MEMBER_ID)))

    def _remove_member_and_update_group(self, partition: int, group: ClassicGroup,
                                        member: ClassicGroupMember, reason: str) -> None:
        self._forget_member(partition, group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(partition, group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(partition, group)

    def _expire_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            partition = self.partition_for(group.group_id)
            self._maybe_complete_join(partition, group)

    # -- heartbeats and session expiry -------------------------------------------------------

    def _schedule_heartbeat(self, partition: int, group: ClassicGroup,
                            member: ClassicGroupMember, timeout_ms: int) -> None:
        member_id = member.member_id
        self.runtime.schedule(partition, _heartbeat_key(group.group_id, member_id), timeout_ms,
                              lambda: self._on_session_expired(partition, group, member_id))

    def _on_session_expired(self, partition: int, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.is_in(GroupState.DEAD):
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            # A member waiting in a rebalance counts as alive; the rebalance timeout bounds it.
            self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
            return
        log.info("member %s of group %s expired (session timeout %d ms)", member_id,
                 group.group_id, member.session_timeout_ms)
        self._remove_member_and_update_group(partition, group, member,
                                             f"member {member_id} session expired")

    async def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None,
                        positions: PositionExchange | None = None) -> ErrorCode:
        """A classic member's heartbeat; with `positions` (KIP-253's tagged fields), the
        positions it reports and asks about are exchanged in place (a valid member only)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        partition, shard = self._shard(group_id)
        group = shard.group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        fenced = _check_static_member(group, member_id, group_instance_id)
        if fenced is not None:
            return fenced
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
        if positions is not None:
            positions.answered, positions.asked = group.exchange_positions(
                member_id, positions.reported, positions.wanted)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- SyncGroup ---------------------------------------------------------------------------

    async def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        """The member's assignment for this generation; the leader's call stores them all."""
        if not group_id:
            return SyncResult(int(ErrorCode.INVALID_GROUP_ID))
        partition, shard = self._shard(group_id)
        group = shard.group(group_id)
        if group is None:
            return SyncResult(int(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.DEAD):
            return SyncResult(int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        fenced = _check_static_member(group, member_id, group_instance_id)
        if fenced is not None:
            return SyncResult(int(fenced))
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(int(ErrorCode.UNKNOWN_MEMBER_ID))
        if generation_id != group.generation_id:
            return SyncResult(int(ErrorCode.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResult(int(ErrorCode.REBALANCE_IN_PROGRESS))
        if group.is_in(GroupState.EMPTY):
            return SyncResult(int(ErrorCode.UNKNOWN_MEMBER_ID))
        self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.runtime.cancel(partition, _sync_key(group_id))
        if group.is_in(GroupState.STABLE):
            return self._sync_result(group, member.assignment)
        # CompletingRebalance: wait for the leader's assignments.
        member.complete_sync(SyncResult(int(ErrorCode.REBALANCE_IN_PROGRESS)))
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if group.is_leader(member_id):
            await self._store_assignments(partition, group, dict(assignments))
        return await future

    def _sync_result(self, group: ClassicGroup, assignment: bytes) -> SyncResult:
        return SyncResult(_NONE, assignment, group.protocol_type, group.protocol_name)

    async def _store_assignments(self, partition: int, group: ClassicGroup,
                                 assignments: dict[str, bytes]) -> None:
        generation = group.generation_id
        full = {m: assignments.get(m, b"") for m in group.members}
        try:
            await self._store_group(partition, group, full)
        except KafkaError as exc:
            if group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation:
                self._reset_assignments(group, exc.code)
                self._prepare_rebalance(partition, group, f"storing assignments failed: {exc}")
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return  # a rebalance started meanwhile; members were told already
        for member_id, member in group.members.items():
            member.assignment = full.get(member_id, b"")
            member.complete_sync(self._sync_result(group, member.assignment))
        group.transition_to(GroupState.STABLE, self._clock_ms())
        log.info("group %s is stable at generation %d", group.group_id, generation)

    async def _store_group(self, partition: int, group: ClassicGroup,
                           assignments: dict[str, bytes]) -> None:
        """Persist the group (GroupMetadata record); its in-memory state is already current."""
        await self._write_group_record(partition, _group_record(group, assignments))

    async def _write_group_record(self, partition: int, record: tuple[bytes, bytes]) -> None:
        await self.runtime.write(partition, lambda shard: CoordinatorResult(
            [record], None, replay_records=False))

    def _spawn_store_group(self, partition: int, group: ClassicGroup) -> None:
        """Store the group now Empty in the background; the record is built here, before a
        join arriving meanwhile can add members to it."""
        record = _group_record(group, {})

        async def store() -> None:
            try:
                await self._write_group_record(partition, record)
            except KafkaError as exc:
                log.warning("could not store empty group %s: %s", group.group_id, exc)
        self.runtime.spawn(store())

    # -- LeaveGroup --------------------------------------------------------------------------

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                          ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members (member id, group instance id); a top-level and per-member errors."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        partition, shard = self._shard(group_id)
        group = shard.group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for member_id, instance_id in members:
            errors.append(self._leave_one(partition, group, member_id, instance_id))
        return ErrorCode.NONE, errors

    def _leave_one(self, partition: int, group: ClassicGroup, member_id: str,
                   instance_id: str | None) -> ErrorCode:
        if not member_id and instance_id is not None:
            found = group.static_member_id(instance_id)
            if found is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = found
        elif instance_id is not None:
            fenced = _check_static_member(group, member_id, instance_id)
            if fenced is not None:
                return fenced
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.runtime.cancel(partition, _pending_key(group.group_id, member_id))
            self._maybe_complete_join(partition, group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("member %s left group %s", member_id, group.group_id)
        self._remove_member_and_update_group(partition, group, member,
                                             f"member {member_id} left the group")
        return ErrorCode.NONE

    # -- offsets -----------------------------------------------------------------------------

    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None, retention_time_ms: int,
                             entries: list[OffsetCommitEntry], api_version: int
                             ) -> list[ErrorCode]:
        """OffsetCommit: a code per entry; group-level failures raise KafkaError."""
        partition, _ = self._shard(group_id)
        now_ms = self._clock_ms()
        # v2-v4 RetentionTimeMs; -1 (and every later version) keeps offsets.retention.minutes.
        expire_ms = now_ms + retention_time_ms if retention_time_ms != -1 else -1

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[list[ErrorCode]]:
            refuse_share_group(shard, group_id)
            group = shard.group(group_id)
            consumer_group = shard.consumer_group(group_id)
            if consumer_group is not None:
                _validate_consumer_group_commit(consumer_group, member_id, generation_id,
                                                api_version=api_version, transactional=False)
            elif group is None:
                if generation_id >= 0:
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9
                                     else ErrorCode.ILLEGAL_GENERATION,
                                     f"group {group_id} does not exist")
            else:
                _validate_offset_commit(group, member_id, group_instance_id, generation_id,
                                        transactional=False)
                member = group.members.get(member_id)
                if member is not None and group.is_in(GroupState.STABLE,
                                                      GroupState.PREPARING_REBALANCE):
                    # A commit keeps the member's session alive, as a heartbeat would.
                    self._schedule_heartbeat(partition, group, member, member.session_timeout_ms)
            return self._offset_records(group_id, entries, now_ms, expire_ms)

        return await self.runtime.write(partition, op)

    async def commit_transactional_offsets(self, *, group_id: str, producer_id: int,
                                           producer_epoch: int, generation_id: int,
                                           member_id: str, group_instance_id: str | None,
                                           entries: list[OffsetCommitEntry]) -> list[ErrorCode]:
        """TxnOffsetCommit: the offsets stay pending until the transaction's COMMIT marker."""
        partition, _ = self._shard(group_id)
        now_ms = self._clock_ms()

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[list[ErrorCode]]:
            refuse_share_group(shard, group_id)
            group = shard.group(group_id)
            consumer_group = shard.consumer_group(group_id)
            if consumer_group is not None:
                _validate_consumer_group_commit(consumer_group, member_id, generation_id,
                                                api_version=9, transactional=True)
            elif group is None:
                if generation_id >= 0:
                    raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                                     f"group {group_id} does not exist")
            else:
                _validate_offset_commit(group, member_id, group_instance_id, generation_id,
                                        transactional=True)
            return self._offset_records(group_id, entries, now_ms, -1)

        return await self.runtime.write(partition, op, producer_id=producer_id,
                                        producer_epoch=producer_epoch, transactional=True)

    def _offset_records(self, group_id: str, entries: list[OffsetCommitEntry], now_ms: int,
                        expire_ms: int) -> CoordinatorResult[list[ErrorCode]]:
        records: list[tuple[bytes, bytes | None]] = []
        errors = []
        for entry in entries:
            metadata = entry.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            errors.append(ErrorCode.NONE)
            records.append((offset_commit_key(group_id, entry.topic, entry.partition),
                            offset_commit_value(OffsetAndMetadata(
                                entry.offset, entry.leader_epoch, metadata,
                                now_ms if entry.commit_timestamp == -1 else entry.commit_timestamp,
                                expire_ms))))
        return CoordinatorResult(records, errors)

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, committed: bool) -> int:
        """Write the COMMIT/ABORT marker of a transaction into `__consumer_offsets-partition`."""
        return await self.runtime.write_end_transaction(partition, producer_id, producer_epoch,
                                                        coordinator_epoch, committed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool, *, member_id: str | None = None,
                      member_epoch: int = -1) -> list[FetchedOffset]:
        """Committed offsets of the group (all of them when `partitions` is None); a consumer
        group member asking (OffsetFetch v9+) must be at its current epoch."""
        _, shard = self._shard(group_id)
        refuse_share_group(shard, group_id)
        consumer_group = shard.consumer_group(group_id)
        if consumer_group is not None:
            validate_consumer_group_fetch(consumer_group, member_id, member_epoch)
        committed = shard.committed(group_id)
        wanted: Iterable[TopicPartition] = (sorted(committed) if partitions is None
                                            else partitions)
        out = []
        for tp in wanted:
            if require_stable and shard.has_pending_txn_offsets(group_id, tp):
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, "",
                                         int(ErrorCode.UNSTABLE_OFFSET_COMMIT)))
                continue
            found = committed.get(tp)
            if found is None:
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, ""))
            else:
                v = found.value
                out.append(FetchedOffset(tp[0], tp[1], v.offset, v.leader_epoch, v.metadata))
        return out

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> list[ErrorCode]:
        """OffsetDelete: refused for partitions of topics an active consumer group reads."""
        partition, _ = self._shard(group_id)

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[list[ErrorCode]]:
            refuse_share_group(shard, group_id)
            group = shard.group(group_id)
            consumer_group = shard.consumer_group(group_id)
            subscribed: set[str] | None = set()
            if consumer_group is not None:
                subscribed = {t.name for t in consumer_group.subscription_metadata.values()} \
                    | consumer_group.subscribed_topic_names()
            elif group is None or group.is_in(GroupState.DEAD):
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} not found")
            elif not group.is_in(GroupState.EMPTY):
                if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                                     f"group {group_id} is not empty")
                subscribed = group.subscribed_topics()
            committed = shard.committed(group_id)
            records: list[tuple[bytes, bytes | None]] = []
            errors = []
            for topic, p in partitions:
                if subscribed is None or topic in subscribed:
                    errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                    continue
                errors.append(ErrorCode.NONE)
                if (topic, p) in committed:
                    records.append((offset_commit_key(group_id, topic, p), None))
            return CoordinatorResult(records, errors)

        return await self.runtime.write(partition, op)

    # -- offset retention --------------------------------------------------------------------

    def _schedule_offset_expiration(self, partition: int) -> None:
        self.runtime.schedule(partition, _EXPIRATION_KEY,
                              self.config.offsets_retention_check_interval_ms,
                              lambda: self._expire_offsets_then_reschedule(partition))

    async def _expire_offsets_then_reschedule(self, partition: int) -> None:
        try:
            await self.expire_offsets(partition)
        finally:
            if partition in self.runtime.loaded_partitions():
                self._schedule_offset_expiration(partition)

    async def expire_offsets(self, partition: int) -> int:
        """Tombstone offsets past offsets.retention.minutes (KIP-211), then empty groups left
        without offsets. Returns the number of records written."""
        now_ms = self._clock_ms()

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[int]:
            records: list[tuple[bytes, bytes | None]] = []
            for group_id, group in list(shard.groups.items()):
                committed = shard.committed(group_id)
                # Parsed once per group: a large group has many members and many offsets.
                subscribed = group.subscribed_topics() if group.is_in(GroupState.STABLE) \
                    else None
                expired = [tp for tp, c in committed.items()
                           if self._offset_expired(group, subscribed, tp[0], c, now_ms)
                           and not shard.has_pending_txn_offsets(group_id, tp)]
                records += [(offset_commit_key(group_id, t, p), None) for t, p in expired]
                if (group.is_in(GroupState.EMPTY) and len(expired) == len(committed)
                        and not group.pending_members
                        and not shard.has_pending_txn_offsets(group_id)):
                    records.append((group_metadata_key(group_id), None))
                if len(records) >= MAX_RECORDS_PER_WRITE:
                    break  # the next round goes on from here: every batch stays small
            for group_id, cg in list(shard.consumer_groups.items()):
                if len(records) >= MAX_RECORDS_PER_WRITE:
                    break
                # Kafka's rule for consumer groups: counted from the commit, and only for
                # topics the group does not subscribe to; an empty group without offsets goes.
                subscribed = {t.name for t in cg.subscription_metadata.values()} \
                    | cg.subscribed_topic_names()
                committed = shard.committed(group_id)
                expired = [tp for tp, c in committed.items()
                           if tp[0] not in subscribed and self._retention_passed(c, now_ms)
                           and not shard.has_pending_txn_offsets(group_id, tp)]
                records += [(offset_commit_key(group_id, t, p), None) for t, p in expired]
                if not cg.members and len(expired) == len(committed) \
                        and not shard.has_pending_txn_offsets(group_id):
                    records += group_tombstones(cg)
            records = records[:MAX_RECORDS_PER_WRITE]
            return CoordinatorResult(records, len(records))

        written = 0
        while True:
            count = await self.runtime.write(partition, op)
            written += count
            if count < MAX_RECORDS_PER_WRITE:
                break
        if written:
            log.info("expired %d offset/group record(s) in %s-%d", written,
                     GROUP_METADATA_TOPIC, partition)
        return written

    def _retention_passed(self, committed: CommittedOffset, now_ms: int) -> bool:
        value = committed.value
        if value.expire_timestamp_ms >= 0:
            return now_ms >= value.expire_timestamp_ms
        return now_ms - value.commit_timestamp_ms >= self.config.offsets_retention_ms

    def _offset_expired(self, group: ClassicGroup, subscribed: set[str] | None, topic: str,
                        committed: CommittedOffset, now_ms: int) -> bool:
        """Kafka's classic expiration condition: offsets of a simple group, of an Empty group,
        or of a topic a Stable "consumer" group no longer reads (`subscribed`) may expire; an
        explicit v2-v4 retention time applies only there too."""
        value = committed.value
        if group.protocol_type is None:
            base_ms = value.commit_timestamp_ms  # a simple group: from the commit
        elif group.is_in(GroupState.EMPTY):
            base_ms = group.state_timestamp_ms  # KIP-211: from when the group became empty
        elif group.is_in(GroupState.STABLE):
            if subscribed is None or topic in subscribed:
                return False
            base_ms = value.commit_timestamp_ms
        else:
            return False
        if value.expire_timestamp_ms >= 0:
            return now_ms >= value.expire_timestamp_ms
        return now_ms - base_ms >= self.config.offsets_retention_ms

    # -- listing, describing, deleting -------------------------------------------------------

    def list_groups(self, states: set[str], types: set[str]) -> tuple[ErrorCode, list[ListedGroup]]:
        """Groups of every loaded shard, filtered by state and type (case-insensitively)."""
        error = ErrorCode.NONE
        if any(self.runtime.is_loading(p) for p in range(self.runtime.num_partitions)):
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        out = []
        for _, shard in self.runtime.shards():
            for group in shard.groups.values():
                if group.is_in(GroupState.DEAD):
                    continue
                if wanted_states and group.state.value.lower() not in wanted_states:
                    continue
                if wanted_types and "classic" not in wanted_types:
                    continue
                out.append(ListedGroup(group.group_id, group.protocol_type or "",
                                       group.state.value))
            for cg in shard.consumer_groups.values():
                state = cg.state.value
                if wanted_states and state.lower() not in wanted_states:
                    continue
                if wanted_types and CONSUMER_GROUP_TYPE not in wanted_types:
                    continue
                out.append(ListedGroup(cg.group_id, CONSUMER_PROTOCOL_TYPE, state,
                                       CONSUMER_GROUP_TYPE))
            for sg in shard.share_groups.values():
                state = sg.state.value
                if wanted_states and state.lower() not in wanted_states:
                    continue
                if wanted_types and SHARE_GROUP_TYPE not in wanted_types:
                    continue
                out.append(ListedGroup(sg.group_id, SHARE_PROTOCOL_TYPE, state, SHARE_GROUP_TYPE))
        return error, out

    def describe_group(self, group_id: str) -> GroupDescription:
        try:
            _, shard = self._shard(group_id)
        except KafkaError as exc:
            return GroupDescription(group_id, int(exc.code))
        group = shard.group(group_id)
        if group is None or shard.consumer_group(group_id) is not None:
            # Kafka describes classic groups only: any other id is Dead without an error in
            # v0-v5 (GROUP_ID_NOT_FOUND is v6+, which we do not serve).
            return GroupDescription(group_id)
        stable = group.is_in(GroupState.STABLE)
        protocol = group.protocol_name or ""
        return GroupDescription(
            group_id, _NONE, group.state.value, group.protocol_type or "",
            protocol if stable else "",
            [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.metadata(protocol) if stable else b"",
                               m.assignment if stable else b"")
             for m in group.members.values()])

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only an empty group goes, with all its offsets; a
        share group with its share state (share_group_manager.py)."""
        partition, shard = self._shard(group_id)
        if shard.share_group(group_id) is not None:
            return await self.share_groups.delete_group(partition, group_id)

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[ErrorCode]:
            group = shard.group(group_id)
            consumer_group = shard.consumer_group(group_id)
            records: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group_id, t, p), None) for t, p in shard.committed(group_id)]
            if consumer_group is not None:
                if consumer_group.members:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id} is not empty")
                return CoordinatorResult(records + group_tombstones(consumer_group),
                                         ErrorCode.NONE)
            if group is None or group.is_in(GroupState.DEAD):
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} not found")
            if not group.is_in(GroupState.EMPTY):
                raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id} is not empty")
            records.append((group_metadata_key(group_id), None))
            return CoordinatorResult(records, ErrorCode.NONE)

        try:
            return await self.runtime.write(partition, op)
        except KafkaError as exc:
            return exc.code

    # -- KIP-848 consumer groups -------------------------------------------------------------

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; raises KafkaError with the response's error code."""
        if not request.group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        partition, _ = self._shard(request.group_id)
        return await self.consumer_groups.heartbeat(partition, request)

    def consumer_group_describe(self, group_id: str) -> ConsumerGroup:
        """The consumer group itself (read-only); GROUP_ID_NOT_FOUND for others."""
        _, shard = self._shard(group_id)
        group = shard.consumer_group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"group {group_id} is not a consumer group")
        return group

    # -- KIP-932 share groups (share_group_manager.py) ---------------------------------------

    async def share_group_heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; raises KafkaError with the response's error code."""
        if not request.group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        partition, _ = self._shard(request.group_id)
        return await self.share_groups.heartbeat(partition, request)

    def share_group_describe(self, group_id: str) -> ShareGroup:
        """The share group itself (read-only); GROUP_ID_NOT_FOUND for others."""
        _, shard = self._shard(group_id)
        return self.share_groups.describe(shard, group_id)

    async def describe_share_group_offsets(self, group_id: str,
                                           topics: list[tuple[str, list[int]]] | None
                                           ) -> list[TopicOffsets]:
        _, shard = self._shard(group_id)
        return await self.share_groups.describe_offsets(shard, group_id, topics)

    async def alter_share_group_offsets(self, group_id: str,
                                        topics: list[tuple[str, list[tuple[int, int]]]]
                                        ) -> list[TopicResult]:
        partition, _ = self._shard(group_id)
        return await self.share_groups.alter_offsets(partition, group_id, topics)

    async def delete_share_group_offsets(self, group_id: str, topics: list[str]
                                         ) -> list[TopicResult]:
        partition, _ = self._shard(group_id)
        return await self.share_groups.delete_offsets(partition, group_id, topics)

    def _drop_if_unused(self, shard: GroupCoordinatorShard, group: ClassicGroup) -> None:
        """A group created by a JoinGroup that failed at once is not kept."""
        if (not group.members and group.generation_id == 0 and not group.pending_members
                and not shard.committed(group.group_id)
                and group.is_in(GroupState.EMPTY)):
            shard.groups.pop(group.group_id, None)


@dataclass(slots=True)
class _Joining:
    """The fields of a JoinGroup request the state machine needs."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


_EXPIRATION_KEY = "offsets-expiration"


def _group_record(group: ClassicGroup, assignments: dict[str, bytes]) -> tuple[bytes, bytes]:
    """The group as a GroupMetadata record, as it is now."""
    return (group_metadata_key(group.group_id), group_metadata_value(
        group.to_record(assignments, GroupMetadataValue, MemberMetadata)))


def _heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat\0{group_id}\0{member_id}"


def _pending_key(group_id: str, member_id: str) -> str:
    return f"pending\0{group_id}\0{member_id}"


def _join_key(group_id: str) -> str:
    return f"join\0{group_id}"


def _sync_key(group_id: str) -> str:
    return f"sync\0{group_id}"


def _check_static_member(group: ClassicGroup, member_id: str,
                         group_instance_id: str | None) -> ErrorCode | None:
    """KIP-345 fencing: an instance id now held by another member id is FENCED_INSTANCE_ID."""
    if group_instance_id is None:
        return None
    current = group.static_member_id(group_instance_id)
    if current is not None and current != member_id:
        return ErrorCode.FENCED_INSTANCE_ID
    return None


def _validate_offset_commit(group: ClassicGroup, member_id: str, group_instance_id: str | None,
                            generation_id: int, *, transactional: bool) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit: raises KafkaError with the client's code."""
    if group.is_in(GroupState.DEAD):
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group.group_id} is dead")
    if generation_id < 0 and group.is_in(GroupState.EMPTY):
        return  # a simple commit (admin client or manual assignment)
    if generation_id >= 0 or member_id or group_instance_id is not None:
        fenced = _check_static_member(group, member_id, group_instance_id)
        if fenced is not None:
            raise KafkaError(fenced, f"instance {group_instance_id} is fenced")
        if not group.has_member(member_id):
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
        if generation_id != group.generation_id:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                             f"generation {generation_id} is not the group's "
                             f"{group.generation_id}")
    elif not transactional and not group.is_in(GroupState.EMPTY):
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         "commits without a member id need an empty group")
    # PreparingRebalance still takes commits of the current generation (eager consumers commit
    # before they rejoin); only a member that was told the new generation but has no assignment
    # yet is sent back to finish the rebalance, as in Kafka.
    if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
        raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {group.group_id} rebalances")


def _validate_consumer_group_commit(group: ConsumerGroup, member_id: str, member_epoch: int, *,
                                    api_version: int, transactional: bool) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: the member's current epoch, or a simple
    commit (no member, epoch < 0) into an empty group."""
    if not member_id and member_epoch < 0:
        if group.members and not transactional:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             "commits without a member id need an empty group")
        return
    if api_version < 9:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         "consumer groups take OffsetCommit v9+ with member epochs")
    member = group.members.get(member_id)
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
    if member_epoch != member.member_epoch:
        raise KafkaError(ErrorCode.ILLEGAL_GENERATION if transactional
                         else ErrorCode.STALE_MEMBER_EPOCH,
                         f"epoch {member_epoch} is not the member's {member.member_epoch}")


def validate_consumer_group_fetch(group: ConsumerGroup, member_id: str | None,
                                  member_epoch: int) -> None:
    """OffsetFetch v9+ from a member: it must exist at its current epoch (STALE_MEMBER_EPOCH)."""
    if not member_id and member_epoch < 0:
        return  # the admin client or a consumer outside the group
    member = group.members.get(member_id or "")
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
    if member_epoch != member.member_epoch:
        raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH,
                         f"epoch {member_epoch} is not the member's {member.member_epoch}")
