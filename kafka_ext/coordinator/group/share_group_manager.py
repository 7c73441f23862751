"""ShareGroupManager: KIP-932 share group membership and admin on the group coordinator.

Mirrors the share-group half of Kafka 4.2's GroupMetadataManager and GroupCoordinatorService:
ShareGroupHeartbeat (join with epoch 0 and a client-made member id, heartbeat, leave with -1),
session timeouts, the server-side "simple" assignor over the share-partitions whose state is
initialized, the initialization of new share-partitions through the persister (in the
background: initializing, then initialized, recorded in ShareGroupStatePartitionMetadata),
ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets and the deletion of a share group's
state. Every change is a list of ShareGroup* records computed from the shard's state and
replayed into it by the CoordinatorRuntime, so a restarted broker rebuilds the same groups.
Loop-owned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.coordinator.group.assignors import Assignment, AssignmentMember
from kafka_ext.coordinator.group.shard import GroupCoordinatorShard
from kafka_ext.coordinator.group.share_group import (
    InitTopic,
    Records,
    ShareGroup,
    ShareGroupMember,
    SharePartitionMetadata,
    SimpleAssignor,
    TopicPartitionId,
    current_assignment_record,
    epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    metadata_hash,
    reconcile,
    share_partitions_record,
    target_epoch_record,
    target_member_record,
)
from kafka_ext.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.group_config import ShareGroupConfig
from kafka_ext.share.persister import (
    UNINITIALIZED_START_OFFSET,
    SharePartitionKey,
    SharePersister,
    ShareStateSummary,
)

log = logging.getLogger(__name__)

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
# Kafka's KafkaApis.isMemberIdValid: the client's member id is at most a UUID's text.
MAX_MEMBER_ID_LENGTH = 36


@dataclass(slots=True, frozen=True)
class ShareGroupSettings:
    """The broker's group.share.* settings the coordinator follows (per-group values such as
    the session timeout come from the group configs)."""

    enable: bool = True
    max_size: int = 200
    assignors: tuple[str, ...] = ("simple",)
    initialize_retry_interval_ms: int = 30_000

    @classmethod
    def from_broker_config(cls, config: Any) -> ShareGroupSettings:
        values = config.values
        return cls(enable=bool(values.get("group.share.enable", True)),
                   max_size=int(values.get("group.share.max.size", 200)),
                   assignors=tuple(values.get("group.share.assignors", ("simple",))),
                   initialize_retry_interval_ms=int(
                       values.get("group.share.initialize.retry.interval.ms", 30_000)))


@dataclass(slots=True)
class ShareHeartbeatRequest:
    """The fields of a ShareGroupHeartbeat request; None means "unchanged"."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class ShareHeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(slots=True)
class _Initialization:
    """Share-partitions a write put into initializing: the persister is asked next."""

    group_id: str
    state_epoch: int
    start_offsets: dict[TopicPartitionId, int]


@dataclass(slots=True)
class PartitionOffset:
    """One partition of DescribeShareGroupOffsets: the persisted summary, or None when the
    share-partition has no state (start offset -1)."""

    partition: int
    summary: ShareStateSummary | None


@dataclass(slots=True)
class TopicOffsets:
    name: str
    topic_id: uuid.UUID  # the zero UUID for a topic that does not exist
    partitions: list[PartitionOffset] = field(default_factory=list)


@dataclass(slots=True)
class TopicResult:
    """A topic's outcome in AlterShareGroupOffsets (per partition) or DeleteShareGroupOffsets."""

    name: str
    topic_id: uuid.UUID
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    partitions: dict[int, tuple[ErrorCode, str | None]] = field(default_factory=dict)


ZERO_UUID = uuid.UUID(int=0)
_ASSIGNOR = SimpleAssignor()


def validate_heartbeat(req: ShareHeartbeatRequest) -> None:
    """Kafka's request checks (KafkaApis and GroupCoordinatorService): INVALID_REQUEST."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REQUEST, message)

    if not req.member_id or len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        raise invalid("Invalid member id in the request.")
    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.rack_id is not None and not req.rack_id:
        raise invalid("RackId can't be empty.")
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def share_group_of(shard: GroupCoordinatorShard, group_id: str, *, create: bool = False
                   ) -> ShareGroup | None:
    """The share group `group_id`; None when there is none and `create` (the write creates it).
    A classic or consumer group of that id is GROUP_ID_NOT_FOUND, as in Kafka (no conversion
    between share groups and other types); so is a missing group unless `create`."""
    if shard.group(group_id) is not None or shard.consumer_group(group_id) is not None:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    group = shard.share_group(group_id)
    if group is None and not create:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
    return group


def _check_epoch(member: ShareGroupMember, received: int) -> None:
    """A newer epoch is fenced; an older one only when it is the previous epoch (the answer
    with the bump was lost)."""
    if received > member.member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The share group member has a greater member epoch ({received}) than "
                         f"the one known by the group coordinator ({member.member_epoch}).")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The share group member has a smaller member epoch ({received}) than "
                         f"the one known by the group coordinator ({member.member_epoch}).")


def _copy_meta(meta: SharePartitionMetadata | None) -> SharePartitionMetadata:
    if meta is None:
        return SharePartitionMetadata()
    return SharePartitionMetadata(dict(meta.initializing), dict(meta.initialized),
                                  dict(meta.deleting))


def _add(topics: dict[uuid.UUID, InitTopic], topic_id: uuid.UUID, name: str,
         partitions: Iterable[int], since_ms: int = -1) -> None:
    old = topics.get(topic_id)
    merged = frozenset(partitions) | (old.partitions if old is not None else frozenset())
    topics[topic_id] = InitTopic(name, merged, since_ms if since_ms >= 0 or old is None
                                 else old.since_ms)


def _remove(topics: dict[uuid.UUID, InitTopic], topic_id: uuid.UUID,
            partitions: Iterable[int]) -> None:
    old = topics.get(topic_id)
    if old is None:
        return
    left = old.partitions - frozenset(partitions)
    if left:
        topics[topic_id] = dataclasses.replace(old, partitions=left)
    else:
        del topics[topic_id]


class ShareGroupManager:
    """Serves the share group APIs over the group coordinator's shards."""

    def __init__(self, runtime: CoordinatorRuntime[GroupCoordinatorShard],
                 settings: ShareGroupSettings, image: Callable[[], Any],
                 group_configs: Callable[[str], ShareGroupConfig],
                 persister: Callable[[], SharePersister | None],
                 clock_ms: Callable[[], int]) -> None:
        self.runtime = runtime
        self.settings = settings
        self._image = image
        self._group_configs = group_configs
        self._persister = persister
        self._clock_ms = clock_ms

    # -- planning (pure: reads the shard, returns records) -----------------------------------

    def _subscribed_topics(self, names: Iterable[str]) -> dict[uuid.UUID, tuple[str, list[int]]]:
        """The existing subscribed topics: id -> (name, partitions)."""
        by_name = self._image().topics_by_name
        out = {}
        for name in names:
            topic = by_name.get(name)
            if topic is not None and topic.partitions:
                out[topic.topic_id] = (name, sorted(topic.partitions))
        return out

    def _assignment_pending(self, group: ShareGroup | None,
                            subscribed: Mapping[uuid.UUID, tuple[str, list[int]]]) -> bool:
        """Kafka's initializedAssignmentPending: an initialized share-partition of a subscribed
        topic is in no target yet (or a target names one that is no longer initialized)."""
        if group is None or not group.members:
            return False
        initialized = group.initialized_partitions()
        if not initialized:
            return False
        targeted: dict[uuid.UUID, set[int]] = {}
        for assignment in group.target.values():
            for topic_id, ps in assignment.items():
                targeted.setdefault(topic_id, set()).update(ps)
        # Only partitions the topic still has: a reduced topic must not bump epochs forever.
        return any(targeted.get(topic_id, set()) != set(ps) & set(subscribed[topic_id][1])
                   for topic_id, ps in initialized.items() if topic_id in subscribed)

    def _target(self, group: ShareGroup | None, members: Mapping[str, ShareGroupMember],
                subscribed: Mapping[uuid.UUID, tuple[str, list[int]]]) -> dict[str, Assignment]:
        """The new target assignment: the simple assignor over initialized share-partitions."""
        initialized = group.initialized_partitions() if group is not None else {}
        ids = {name: topic_id for topic_id, (name, _) in subscribed.items()}
        assignable = {topic_id: [p for p in parts if p in initialized.get(topic_id, ())]
                      for topic_id, (_, parts) in subscribed.items()}
        inputs = [AssignmentMember(m.member_id, frozenset(
            ids[n] for n in m.subscribed_topic_names if n in ids)) for m in members.values()]
        previous = group.target if group is not None else {}
        return _ASSIGNOR.assign(inputs, assignable, previous)

    def _initialization(self, group_id: str, group: ShareGroup | None, state_epoch: int,
                        subscribed: Mapping[uuid.UUID, tuple[str, list[int]]], now_ms: int
                        ) -> tuple[Records, _Initialization | None]:
        """Kafka's maybeCreateInitializeShareGroupStateRequest: subscribed share-partitions
        neither initialized nor initializing (for less than the retry interval) start
        initializing now. Without a persister nothing can be initialized: nothing is asked."""
        if not subscribed or self._persister() is None:
            return [], None
        meta = group.share_partitions if group is not None else None
        retry_ms = self.settings.initialize_retry_interval_ms
        wanted: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for topic_id, (name, parts) in subscribed.items():
            have: set[int] = set()
            if meta is not None:
                done = meta.initialized.get(topic_id)
                if done is not None:
                    have |= done.partitions
                pending = meta.initializing.get(topic_id)
                if pending is not None and now_ms - pending.since_ms < retry_ms:
                    have |= pending.partitions
            if len(have) < len(parts):
                missing = frozenset(p for p in parts if p not in have)
                if missing:
                    wanted[topic_id] = (name, missing)
        if not wanted:
            return [], None
        new_meta = _copy_meta(meta)
        for topic_id, (name, missing) in wanted.items():
            _add(new_meta.initializing, topic_id, name, missing, now_ms)
            new_meta.deleting.pop(topic_id, None)  # initializing again: no longer deleting
        offsets = {(t, p): UNINITIALIZED_START_OFFSET for t, (_, ps) in wanted.items() for p in ps}
        return ([share_partitions_record(group_id, new_meta)],
                _Initialization(group_id, state_epoch, offsets))

    def _heartbeat_op(self, req: ShareHeartbeatRequest, outcome: dict[str, Any]
                      ) -> Callable[[GroupCoordinatorShard], CoordinatorResult[ShareHeartbeatResult]]:
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[ShareHeartbeatResult]:
            joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
            group = share_group_of(shard, req.group_id, create=joining)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(req, group, outcome)
            members = dict(group.members) if group is not None else {}
            member_id = req.member_id
            if len(members) >= self.settings.max_size and member_id not in members:
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The share group has reached its maximum capacity of "
                                 f"{self.settings.max_size} members.")
            member = members.get(member_id)
            if member is None:
                if not joining:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group "
                                     f"{req.group_id}.")
                member = ShareGroupMember(member_id)
            _check_epoch(member, req.member_epoch)
            updated = dataclasses.replace(
                member, rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                client_id=req.client_id, client_host=req.client_host,
                subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None else member.subscribed_topic_names)
            records: Records = []
            subscription_changed = False
            if member_id not in members or not updated.metadata_equals(member):
                records.append(member_metadata_record(req.group_id, updated))
                subscription_changed = (member_id not in members or
                                        updated.subscribed_topic_names
                                        != member.subscribed_topic_names)
            members[member_id] = updated
            subscribed = self._subscribed_topics(
                {t for m in members.values() for t in m.subscribed_topic_names})
            topics_hash = metadata_hash((t, name, len(parts))
                                        for t, (name, parts) in subscribed.items())
            group_epoch = group.group_epoch if group is not None else 0
            assignment_epoch = group.assignment_epoch if group is not None else 0
            if subscription_changed or self._assignment_pending(group, subscribed) or (
                    topics_hash != (group.metadata_hash if group is not None else 0)):
                group_epoch += 1
                records.append(epoch_record(req.group_id, group_epoch, topics_hash))
            if group_epoch > assignment_epoch:
                new_target = self._target(group, members, subscribed)
                old_target = group.target if group is not None else {}
                for mid, assignment in sorted(new_target.items()):
                    if old_target.get(mid) != assignment or mid not in old_target:
                        records.append(target_member_record(req.group_id, mid, assignment))
                records.append(target_epoch_record(req.group_id, group_epoch))
                target = new_target.get(member_id, {})
                assignment_epoch = group_epoch
            else:
                target = group.target.get(member_id, {}) if group is not None else {}
            subscribed_ids = [t for t, (name, _) in subscribed.items()
                              if name in updated.subscribed_topic_names]
            reconciled = reconcile(updated, assignment_epoch, target, subscribed_ids,
                                   subscription_changed)
            old = group.members.get(member_id) if group is not None else None
            if old is None or not old.assignment_equals(reconciled):
                records.append(current_assignment_record(req.group_id, reconciled))
            init_records, init = self._initialization(req.group_id, group, group_epoch,
                                                      subscribed, self._clock_ms())
            records += init_records
            outcome.update(member=reconciled, initialize=init)
            send = joining or req.subscribed_topic_names is not None or \
                old is None or old.assigned != reconciled.assigned
            return CoordinatorResult(records, ShareHeartbeatResult(
                member_id, reconciled.member_epoch,
                self._group_configs(req.group_id).heartbeat_interval_ms,
                reconciled.assigned if send else None))

        return op

    def _leave(self, req: ShareHeartbeatRequest, group: ShareGroup | None,
               outcome: dict[str, Any]) -> CoordinatorResult[ShareHeartbeatResult]:
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {req.group_id} not found.")
        if req.member_id not in group.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {req.group_id}.")
        outcome.update(left=True)
        return CoordinatorResult(self._fence_records(group, req.member_id), ShareHeartbeatResult(
            req.member_id, LEAVE_GROUP_MEMBER_EPOCH, 0))

    def _fence_records(self, group: ShareGroup, member_id: str) -> Records:
        """Kafka's shareGroupFenceMember: the member's records go and the group epoch moves
        (the next heartbeat recomputes the target without it)."""
        names = {t for mid, m in group.members.items() if mid != member_id
                 for t in m.subscribed_topic_names}
        subscribed = self._subscribed_topics(names)
        topics_hash = metadata_hash((t, name, len(parts)) for t, (name, parts) in subscribed.items())
        return member_tombstones(group.group_id, member_id) + [
            epoch_record(group.group_id, group.group_epoch + 1, topics_hash)]

    # -- heartbeats and timeouts -------------------------------------------------------------

    async def heartbeat(self, partition: int, req: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; raises KafkaError with the response's error code."""
        validate_heartbeat(req)
        outcome: dict[str, Any] = {}
        result = await self.runtime.write(partition, self._heartbeat_op(req, outcome))
        if outcome.get("left"):
            self.runtime.cancel(partition, _session_key(req.group_id, req.member_id))
            log.info("member %s left share group %s", req.member_id, req.group_id)
            return result
        self._schedule_session(partition, req.group_id, req.member_id)
        init: _Initialization | None = outcome.get("initialize")
        if init is not None:
            self.runtime.spawn(self._initialize_logged(partition, init))
        return result

    def _schedule_session(self, partition: int, group_id: str, member_id: str) -> None:
        self.runtime.schedule(partition, _session_key(group_id, member_id),
                              self._group_configs(group_id).session_timeout_ms,
                              lambda: self._on_session_timeout(partition, group_id, member_id))

    async def _on_session_timeout(self, partition: int, group_id: str, member_id: str) -> None:
        await self.remove_member(partition, group_id, member_id, "the member session expired")

    async def remove_member(self, partition: int, group_id: str, member_id: str,
                            reason: str) -> bool:
        """Fence a member out of its group (session timeout)."""
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[bool]:
            group = shard.share_group(group_id)
            if group is None or member_id not in group.members:
                return CoordinatorResult([], False)
            return CoordinatorResult(self._fence_records(group, member_id), True)

        removed = await self.runtime.write(partition, op)
        if removed:
            self.runtime.cancel(partition, _session_key(group_id, member_id))
            log.info("member %s fenced from share group %s: %s", member_id, group_id, reason)
        return removed

    def on_shard_loaded(self, shard: GroupCoordinatorShard) -> None:
        """Loaded members must heartbeat again within their session timeout."""
        for group_id, group in shard.share_groups.items():
            for member_id in group.members:
                self._schedule_session(shard.partition, group_id, member_id)

    # -- share-partition initialization ------------------------------------------------------

    async def _initialize_logged(self, partition: int, init: _Initialization) -> None:
        try:
            await self.initialize(partition, init)
        except KafkaError as exc:
            log.warning("could not initialize share-partitions of share group %s: %s",
                        init.group_id, exc)

    async def initialize(self, partition: int, init: _Initialization
                         ) -> dict[TopicPartitionId, tuple[ErrorCode, str | None]]:
        """Give the share-partitions in initializing their state (InitializeShareGroupState
        at their start offsets, -1: the partition leader resolves share.auto.offset.reset),
        then record those that succeeded as initialized; failed ones leave initializing, to be
        tried again. Returns each one's outcome."""
        persister = self._persister()
        outcomes: dict[TopicPartitionId, tuple[ErrorCode, str | None]]
        if persister is None:
            outcomes = {tp: (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share persister")
                        for tp in init.start_offsets}
        else:
            outcomes = await _per_partition(
                {tp: persister.initialize(SharePartitionKey(init.group_id, tp[0], tp[1]),
                                          init.state_epoch, offset)
                 for tp, offset in init.start_offsets.items()})

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[None]:
            group = shard.share_group(init.group_id)
            if group is None or group.share_partitions is None:
                return CoordinatorResult([], None)
            meta = _copy_meta(group.share_partitions)
            names = {t: info.name for t, info in meta.initializing.items()}
            for (topic_id, p), (code, _) in outcomes.items():
                _remove(meta.initializing, topic_id, [p])
                if code == ErrorCode.NONE and topic_id in names:
                    _add(meta.initialized, topic_id, names[topic_id], [p])
            return CoordinatorResult([share_partitions_record(init.group_id, meta)], None)

        await self.runtime.write(partition, op)
        failed = {tp: o for tp, o in outcomes.items() if o[0] != ErrorCode.NONE}
        if failed:
            log.warning("share group %s: %d share-partition(s) not initialized: %s",
                        init.group_id, len(failed), sorted({o[0].name for o in failed.values()}))
        return outcomes

    def on_topics_deleted(self, deleted: set[uuid.UUID]) -> None:
        """Kafka's maybeCleanupShareGroupState: deleted topics leave every share group's state
        metadata (the share coordinator drops their state on its own)."""
        for partition, shard in self.runtime.shards():
            if any(g.share_partitions is not None and deleted & (
                    g.share_partitions.initializing.keys() | g.share_partitions.initialized.keys()
                    | g.share_partitions.deleting.keys()) for g in shard.share_groups.values()):
                self.runtime.spawn(self._cleanup_logged(partition, deleted))

    async def _cleanup_logged(self, partition: int, deleted: set[uuid.UUID]) -> None:
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[None]:
            records: Records = []
            for group_id, group in shard.share_groups.items():
                meta = group.share_partitions
                if meta is None or not deleted & (meta.initializing.keys()
                                                  | meta.initialized.keys() | meta.deleting.keys()):
                    continue
                new_meta = _copy_meta(meta)
                for topics in (new_meta.initializing, new_meta.initialized, new_meta.deleting):
                    for topic_id in deleted & topics.keys():
                        del topics[topic_id]
                records.append(share_partitions_record(group_id, new_meta))
            return CoordinatorResult(records, None)

        try:
            await self.runtime.write(partition, op)
        except KafkaError as exc:
            log.warning("could not drop deleted topics from share groups' state metadata: %s", exc)

    # -- describe ----------------------------------------------------------------------------

    def describe(self, shard: GroupCoordinatorShard, group_id: str) -> ShareGroup:
        """The share group (read-only); GROUP_ID_NOT_FOUND for any other id, with Kafka's
        messages for ShareGroupDescribe ("... is not a share group.", "Group ... not found.")."""
        group = share_group_of(shard, group_id, create=True)  # None: no group of any type
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    async def describe_offsets(self, shard: GroupCoordinatorShard, group_id: str,
                               topics: list[tuple[str, list[int]]] | None
                               ) -> list[TopicOffsets]:
        """DescribeShareGroupOffsets for one group: the persisted summary of each asked
        partition (all initialized ones when `topics` is None). A topic that does not exist,
        or a share-partition without state, answers start offset -1 without an error (as
        Kafka: no offset information, like OffsetFetch)."""
        image = self._image()
        asked: list[TopicOffsets] = []
        if topics is None:
            group = shard.share_group(group_id)
            for topic_id, parts in sorted((group.initialized_partitions() if group else {}).items(),
                                          key=lambda item: str(item[0])):
                topic = image.topics_by_id.get(topic_id)
                if topic is not None:
                    asked.append(TopicOffsets(topic.name, topic_id,
                                              [PartitionOffset(p, None) for p in sorted(parts)]))
        else:
            for name, indexes in topics:
                topic = image.topics_by_name.get(name)
                asked.append(TopicOffsets(name, topic.topic_id if topic is not None else ZERO_UUID,
                                          [PartitionOffset(p, None) for p in indexes]))
        persister = self._persister()
        reads: dict[tuple[int, int], Awaitable[ShareStateSummary]] = {}
        for i, t in enumerate(asked):
            if t.topic_id == ZERO_UUID or persister is None:
                continue
            for j, p in enumerate(t.partitions):
                reads[(i, j)] = persister.read_summary(
                    SharePartitionKey(group_id, t.topic_id, p.partition))
        if reads:
            results = await asyncio.gather(*reads.values(), return_exceptions=True)
            for (i, j), got in zip(reads, results, strict=True):
                if isinstance(got, ShareStateSummary):
                    asked[i].partitions[j].summary = got
                elif not isinstance(got, KafkaError):
                    raise got  # a bug, not an answer: the dispatcher logs it
        return asked

    # -- alter and delete offsets, delete groups ---------------------------------------------

    async def alter_offsets(self, partition: int, group_id: str,
                            topics: list[tuple[str, list[tuple[int, int]]]]) -> list[TopicResult]:
        """AlterShareGroupOffsets: an empty (or new) share group's share-partitions start
        again at the given offsets (InitializeShareGroupState with the group epoch as state
        epoch); NON_EMPTY_GROUP while it has members."""
        outcome: dict[str, Any] = {}

        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[list[TopicResult]]:
            group = share_group_of(shard, group_id, create=True)
            if group is not None and group.members:
                raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
            image = self._image()
            results: list[TopicResult] = []
            offsets: dict[TopicPartitionId, int] = {}
            meta = _copy_meta(group.share_partitions if group is not None else None)
            now_ms = self._clock_ms()
            unknown = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       "This server does not host this topic-partition.")
            for name, parts in topics:
                topic = image.topics_by_name.get(name)
                result = TopicResult(name, topic.topic_id if topic is not None else ZERO_UUID)
                results.append(result)
                for p, start_offset in parts:
                    if topic is None or p not in topic.partitions:
                        result.partitions[p] = unknown
                        continue
                    result.partitions[p] = (ErrorCode.NONE, None)
                    offsets[(topic.topic_id, p)] = start_offset
                    _add(meta.initializing, topic.topic_id, name, [p], now_ms)
                    meta.deleting.pop(topic.topic_id, None)
            if not offsets:
                return CoordinatorResult([], results)
            outcome["initialize"] = _Initialization(
                group_id, group.group_epoch if group is not None else 0, offsets)
            return CoordinatorResult([share_partitions_record(group_id, meta)], results)

        results = await self.runtime.write(partition, op)
        init: _Initialization | None = outcome.get("initialize")
        if init is None:
            return results
        outcomes = await self.initialize(partition, init)
        for result in results:
            for p, (code, _) in list(result.partitions.items()):
                got = outcomes.get((result.topic_id, p))
                if code == ErrorCode.NONE and got is not None:
                    result.partitions[p] = got
        return results

    async def delete_offsets(self, partition: int, group_id: str, topic_names: list[str]
                             ) -> list[TopicResult]:
        """DeleteShareGroupOffsets: an empty share group forgets the state of whole topics
        (their share-partitions move to deleting, the persister deletes them, then they go)."""
        asked: dict[uuid.UUID, tuple[str, list[int]]] = {}

        def start(shard: GroupCoordinatorShard) -> CoordinatorResult[list[TopicResult]]:
            group = share_group_of(shard, group_id)
            assert group is not None
            if group.members:
                raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
            image = self._image()
            meta = _copy_meta(group.share_partitions)
            errors: list[TopicResult] = []
            for name in topic_names:
                topic = image.topics_by_name.get(name)
                if topic is None:
                    errors.append(TopicResult(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              "This server does not host this topic-partition."))
                elif topic.topic_id in meta.initialized:
                    done = meta.initialized.pop(topic.topic_id)
                    meta.deleting[topic.topic_id] = name
                    asked[topic.topic_id] = (name, sorted(done.partitions))
                elif topic.topic_id in meta.deleting:  # an earlier delete did not finish
                    asked[topic.topic_id] = (name, sorted(topic.partitions))
                else:
                    errors.append(TopicResult(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              "There is no offset information to delete."))
            records: Records = [share_partitions_record(group_id, meta)] if asked else []
            return CoordinatorResult(records, errors)

        errors = await self.runtime.write(partition, start)
        if not asked:
            return errors
        failed = await self._delete_state(group_id, asked)
        done = {t for t in asked if t not in failed}

        def finish(shard: GroupCoordinatorShard) -> CoordinatorResult[None]:
            group = shard.share_group(group_id)
            if group is None or group.share_partitions is None or not done:
                return CoordinatorResult([], None)
            meta = _copy_meta(group.share_partitions)
            for topic_id in done:
                meta.deleting.pop(topic_id, None)
            return CoordinatorResult([share_partitions_record(group_id, meta)], None)

        await self.runtime.write(partition, finish)
        results = [TopicResult(name, t) for t, (name, _) in asked.items() if t in done]
        results += [TopicResult(asked[t][0], t, code, message)
                    for t, (code, message) in failed.items()]
        return results + errors

    async def _delete_state(self, group_id: str, topics: Mapping[uuid.UUID, tuple[str, list[int]]]
                            ) -> dict[uuid.UUID, tuple[ErrorCode, str | None]]:
        """DeleteShareGroupState of every share-partition of `topics`; the topics that failed,
        with their first error."""
        persister = self._persister()
        if persister is None:
            return {t: (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share persister") for t in topics}
        outcomes = await _per_partition(
            {(t, p): persister.delete(SharePartitionKey(group_id, t, p))
             for t, (_, parts) in topics.items() for p in parts})
        failed: dict[uuid.UUID, tuple[ErrorCode, str | None]] = {}
        for (topic_id, _), (code, message) in sorted(outcomes.items(),
                                                     key=lambda item: (str(item[0][0]), item[0][1])):
            if code != ErrorCode.NONE:
                failed.setdefault(topic_id, (code, message))
        return failed

    async def delete_group(self, partition: int, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one; its share state goes first (every
        initialized or initializing share-partition moves to deleting, the persister deletes
        it), then the group's records. GROUP_ID_NOT_FOUND when it is no share group."""
        image = self._image()
        asked: dict[uuid.UUID, tuple[str, list[int]]] = {}

        def start(shard: GroupCoordinatorShard) -> CoordinatorResult[None]:
            group = share_group_of(shard, group_id)
            assert group is not None
            if group.members:
                raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
            meta = group.share_partitions
            if meta is None:
                return CoordinatorResult([], None)
            for topics in (meta.initialized, meta.initializing):
                for topic_id, info in topics.items():
                    name, parts = asked.get(topic_id, (info.name, []))
                    asked[topic_id] = (name, sorted(set(parts) | info.partitions))
            for topic_id, name in meta.deleting.items():  # retried, whole topics
                topic = image.topics_by_id.get(topic_id)
                if topic is not None:
                    asked[topic_id] = (name, sorted(topic.partitions))
            new_meta = SharePartitionMetadata(deleting={t: name for t, (name, _) in asked.items()})
            return CoordinatorResult([share_partitions_record(group_id, new_meta)], None)

        try:
            await self.runtime.write(partition, start)
            if asked:
                failed = await self._delete_state(group_id, asked)
                if failed:
                    return next(iter(failed.values()))[0]

            def finish(shard: GroupCoordinatorShard) -> CoordinatorResult[ErrorCode]:
                group = share_group_of(shard, group_id)
                assert group is not None
                if group.members:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
                return CoordinatorResult(group_tombstones(group), ErrorCode.NONE)

            return await self.runtime.write(partition, finish)
        except KafkaError as exc:
            return exc.code


async def _per_partition(calls: Mapping[TopicPartitionId, Awaitable[None]]
                         ) -> dict[TopicPartitionId, tuple[ErrorCode, str | None]]:
    """Run persister calls together; each partition's KafkaError code (NONE when it worked).
    Anything else is a bug and propagates."""
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    out: dict[TopicPartitionId, tuple[ErrorCode, str | None]] = {}
    for tp, got in zip(calls, results, strict=True):
        if isinstance(got, KafkaError):
            out[tp] = (got.code, got.message)
        elif isinstance(got, BaseException):
            raise got
        else:
            out[tp] = (ErrorCode.NONE, None)
    return out


def _session_key(group_id: str, member_id: str) -> str:
    return f"sg-session\0{group_id}\0{member_id}"
