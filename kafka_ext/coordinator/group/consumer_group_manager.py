"""ConsumerGroupManager: the KIP-848 consumer group protocol with server-side assignment.

Mirrors the consumer-group half of Kafka's GroupMetadataManager: ConsumerGroupHeartbeat (join
with member epoch 0, heartbeat, leave with -1, static leave with -2), ConsumerGroupDescribe,
session and rebalance timeouts, and target recomputation when subscribed topics change. Every
change is a list of ConsumerGroup* records computed from the shard's state and replayed into it
by the CoordinatorRuntime, so a restarted broker rebuilds the same groups. Loop-owned.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ext.coordinator.group.assignors import ASSIGNORS, Assignment, AssignmentMember
from kafka_ext.coordinator.group.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicMetadata,
    reconcile,
)
from kafka_ext.coordinator.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    consumer_group_key,
    consumer_group_value,
    group_metadata_key,
    topic_partitions_field,
)
from kafka_ext.coordinator.group.shard import GroupCoordinatorShard
from kafka_ext.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

Records = list[tuple[bytes, bytes | None]]


@dataclass(slots=True, frozen=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* broker settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = 2**31 - 1

    @classmethod
    def from_broker_config(cls, config: Any) -> ConsumerGroupConfig:
        values = config.values
        return cls(
            session_timeout_ms=int(values.get("group.consumer.session.timeout.ms", 45_000)),
            heartbeat_interval_ms=int(values.get("group.consumer.heartbeat.interval.ms", 5_000)),
            assignors=tuple(values.get("group.consumer.assignors", ("uniform", "range"))),
            max_size=int(values.get("group.consumer.max.size", 2**31 - 1)),
        )


@dataclass(slots=True)
class HeartbeatRequest:
    """The fields of a ConsumerGroupHeartbeat request; None means "unchanged"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(slots=True)
class _Plan:
    """A group change: its records and the group's epochs and target afterwards."""

    records: Records
    group_epoch: int
    assignment_epoch: int
    target: dict[str, Assignment]


@functools.lru_cache(maxsize=256)
def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _validate(req: HeartbeatRequest, assignors: tuple[str, ...]) -> None:
    """Kafka's request checks: INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REQUEST, message)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id is not None and not req.instance_id:
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id:
        raise invalid("RackId can't be empty.")
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first "
                          "request.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not req.member_id or req.instance_id is None:
            raise invalid("InstanceId and MemberId can't be null for a static member leaving.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch {req.member_epoch} is invalid.")
    elif not req.member_id:
        raise invalid("MemberId can't be empty.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                         f"ServerAssignor {req.server_assignor} is not supported; supported: "
                         f"{', '.join(assignors)}.")
    if req.subscribed_topic_regex:
        try:
            _compile(req.subscribed_topic_regex)
        except re.error as exc:
            raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex {req.subscribed_topic_regex!r}: {exc}") from exc


def refuse_share_group(shard: GroupCoordinatorShard, group_id: str) -> None:
    """A share group's id is no consumer or classic group's: it has no committed offsets
    (Kafka's ShareGroup.validateOffset*) and takes no other members (no conversion between
    share groups and the other types, KIP-932). Call it inside the write's op."""
    if shard.share_group(group_id) is not None:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")


def _regex_matches(patterns: Iterable[str], topics: Iterable[str]) -> dict[str, set[str]]:
    """The topics each distinct pattern selects; like Kafka, never an internal topic. Done once
    per pattern, not per member: the members of a large group usually share one pattern."""
    compiled = {p: _compile(p) for p in patterns}
    matched: dict[str, set[str]] = {p: set() for p in compiled}
    for topic in topics:
        if topic.startswith("__"):
            continue
        for p, pattern in compiled.items():
            if pattern.fullmatch(topic) is not None:
                matched[p].add(topic)
    return matched


def _assignment_record(group_id: str, member: ConsumerGroupMember) -> tuple[bytes, bytes]:
    rtype = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    return (consumer_group_key(rtype, group_id, member.member_id), consumer_group_value(
        rtype, member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch, state=int(member.state),
        assigned_partitions=topic_partitions_field(rtype, member.assigned),
        partitions_pending_revocation=topic_partitions_field(rtype, member.pending_revocation)))


def _metadata_record(group_id: str, member: ConsumerGroupMember) -> tuple[bytes, bytes]:
    rtype = CONSUMER_GROUP_MEMBER_METADATA
    return (consumer_group_key(rtype, group_id, member.member_id), consumer_group_value(
        rtype, instance_id=member.instance_id, rack_id=member.rack_id,
        client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        server_assignor=member.server_assignor,
        rebalance_timeout_ms=member.rebalance_timeout_ms))


def _member_tombstones(group_id: str, member_id: str) -> Records:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [(consumer_group_key(t, group_id, member_id), None)
            for t in (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                      CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, CONSUMER_GROUP_MEMBER_METADATA)]


def group_tombstones(group: ConsumerGroup) -> Records:
    """Every record of an (empty) consumer group, ending with its epoch record."""
    records: Records = []
    for member_id in group.members:
        records += _member_tombstones(group.group_id, member_id)
    for rtype in (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                  CONSUMER_GROUP_METADATA):
        records.append((consumer_group_key(rtype, group.group_id), None))
    return records


class ConsumerGroupManager:
    """Serves ConsumerGroupHeartbeat/ConsumerGroupDescribe over the group coordinator's shards."""

    def __init__(self, runtime: CoordinatorRuntime[GroupCoordinatorShard],
                 config: ConsumerGroupConfig, image: Callable[[], Any]) -> None:
        self.runtime = runtime
        self.config = config
        self._image = image

    # -- planning (pure: reads the shard, returns records) -----------------------------------

    def subscription_metadata(self, members: Iterable[ConsumerGroupMember]
                              ) -> dict[uuid.UUID, TopicMetadata]:
        """The existing topics the members subscribe to, with their partition counts."""
        image = self._image()
        members = list(members)
        names: set[str] = {t for m in members for t in m.subscribed_topic_names}
        patterns = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        if patterns:
            names = names.union(*_regex_matches(patterns, image.topics_by_name).values())
        out: dict[uuid.UUID, TopicMetadata] = {}
        for name in names:
            topic = image.topics_by_name.get(name)
            if topic is not None and topic.partitions:
                out[topic.topic_id] = TopicMetadata(topic.topic_id, name, len(topic.partitions))
        return out

    def assignor_name(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The assignor most members ask for, else the broker's first (Kafka's rule)."""
        votes = Counter(m.server_assignor for m in members if m.server_assignor)
        if votes:
            return sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        return self.config.assignors[0]

    def plan(self, group_id: str, group: ConsumerGroup | None,
             members: dict[str, ConsumerGroupMember], *,
             previous_target: dict[str, Assignment] | None = None) -> _Plan:
        """Records that turn `group` into one with `members` (metadata only; current assignments
        are the caller's), bumping the group epoch and recomputing the target when membership,
        subscriptions or subscribed topics changed."""
        old_members = group.members if group is not None else {}
        records: Records = []
        bump = group is None
        for member_id in old_members.keys() - members.keys():
            records += _member_tombstones(group_id, member_id)
            bump = True
        for member_id, member in members.items():
            old = old_members.get(member_id)
            if old is member:
                continue  # untouched by this change
            if old is None or not old.metadata_equals(member):
                records.append(_metadata_record(group_id, member))
            if old is None or (old.subscribed_topic_names, old.subscribed_topic_regex,
                               old.server_assignor) != (member.subscribed_topic_names,
                                                        member.subscribed_topic_regex,
                                                        member.server_assignor):
                bump = True
        metadata = self.subscription_metadata(members.values())
        old_metadata = group.subscription_metadata if group is not None else {}
        if metadata != old_metadata:
            rtype = CONSUMER_GROUP_PARTITION_METADATA
            records.append((consumer_group_key(rtype, group_id), consumer_group_value(rtype, topics=[
                _topic_metadata_struct(t) for t in sorted(metadata.values(),
                                                          key=lambda t: t.name)])))
            bump = True
        group_epoch = group.group_epoch if group is not None else 0
        assignment_epoch = group.assignment_epoch if group is not None else 0
        target = dict(previous_target if previous_target is not None
                      else (group.target if group is not None else {}))
        for member_id in list(target):
            if member_id not in members:
                del target[member_id]
        if not bump:
            return _Plan(records, group_epoch, assignment_epoch, target)
        group_epoch += 1
        records.append((consumer_group_key(CONSUMER_GROUP_METADATA, group_id),
                        consumer_group_value(CONSUMER_GROUP_METADATA, epoch=group_epoch)))
        new_target = self._assign(members, metadata, target)
        old_target = group.target if group is not None else {}
        for member_id, assignment in sorted(new_target.items()):
            if member_id not in old_target or old_target[member_id] != assignment:
                rtype = CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
                records.append((consumer_group_key(rtype, group_id, member_id),
                                consumer_group_value(rtype, topic_partitions=topic_partitions_field(
                                    rtype, assignment))))
        records.append((consumer_group_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id),
                        consumer_group_value(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                             assignment_epoch=group_epoch)))
        return _Plan(records, group_epoch, group_epoch, new_target)

    def _assign(self, members: Mapping[str, ConsumerGroupMember],
                metadata: Mapping[uuid.UUID, TopicMetadata],
                previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
        assignor = ASSIGNORS[self.assignor_name(members.values())]
        ids = {t.name: t.topic_id for t in metadata.values()}
        by_regex = _regex_matches(
            {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex},
            ids)
        inputs = [AssignmentMember(m.member_id, frozenset(
            ids[name] for name in by_regex.get(m.subscribed_topic_regex or "", set()).union(
                m.subscribed_topic_names) if name in ids))
            for m in members.values()]
        counts = {t.topic_id: t.num_partitions for t in metadata.values()}
        out = assignor.assign(inputs, counts, previous)
        return {mid: out.get(mid, {}) for mid in members}

    def _heartbeat_op(self, req: HeartbeatRequest, outcome: dict[str, Any]
                      ) -> Callable[[GroupCoordinatorShard], CoordinatorResult[HeartbeatResult]]:
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[HeartbeatResult]:
            # Checked here, under the shard's write order: a share group's heartbeat queued
            # ahead of this one may have created the group since the request came in.
            refuse_share_group(shard, req.group_id)
            group = shard.consumer_group(req.group_id)
            records: Records = []
            if group is None:
                if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"consumer group {req.group_id} does not exist")
                classic = shard.group(req.group_id)
                if classic is not None:
                    if classic.members or classic.pending_members:
                        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                                         f"group {req.group_id} is not a consumer group")
                    # Upgrade of an empty classic group: its record goes, its offsets stay.
                    records.append((group_metadata_key(req.group_id), None))
            members = dict(group.members) if group is not None else {}
            previous_target = dict(group.target) if group is not None else {}
            member_id = req.member_id
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req, group, members, outcome)
            if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
                if not member_id:
                    member_id = str(uuid.uuid4())  # v0: the coordinator names the member
                member = members.get(member_id)
                if member is None:
                    if len(members) >= self.config.max_size:
                        raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                         f"consumer group {req.group_id} is full")
                    member = ConsumerGroupMember(member_id)
                    if req.instance_id is not None:
                        member = self._take_over_static(req, members, previous_target, member)
            else:
                found = members.get(member_id)
                if found is None:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"member {member_id} is not in group {req.group_id}")
                member = found
                _check_epoch(member, req.member_epoch, req.owned)
            updated = dataclasses.replace(
                member,
                instance_id=req.instance_id if req.instance_id is not None
                else member.instance_id,
                rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                client_id=req.client_id, client_host=req.client_host,
                rebalance_timeout_ms=req.rebalance_timeout_ms
                if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
                subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None else member.subscribed_topic_names,
                subscribed_topic_regex=(req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None else member.subscribed_topic_regex,
                server_assignor=req.server_assignor if req.server_assignor is not None
                else member.server_assignor)
            members[member_id] = updated
            plan = self.plan(req.group_id, group, members, previous_target=previous_target)
            records += plan.records
            # Who holds what is needed only to move the member; a steady heartbeat of a large
            # group must not walk every partition of every member.
            settled = updated.state == MemberState.STABLE and \
                updated.member_epoch == plan.assignment_epoch
            owners = {} if settled else {tp: mid for mid, m in members.items() if mid != member_id
                                         for tp in m.owned_partitions()}
            reconciled = reconcile(updated, plan.assignment_epoch,
                                   plan.target.get(member_id, {}), owners, req.owned)
            old = group.members.get(member_id) if group is not None else None
            if old is None or not old.assignment_equals(reconciled):
                records.append(_assignment_record(req.group_id, reconciled))
            full = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
                req.owned is not None and req.subscribed_topic_names is not None)
            changed = not member.assignment_equals(reconciled)
            outcome.update(member=reconciled, previous_state=member.state,
                           previous_epoch=member.member_epoch)
            return CoordinatorResult(records, HeartbeatResult(
                member_id, reconciled.member_epoch, self.config.heartbeat_interval_ms,
                reconciled.assigned if full or changed or old is None else None))

        return op

    def _take_over_static(self, req: HeartbeatRequest, members: dict[str, ConsumerGroupMember],
                          previous_target: dict[str, Assignment],
                          member: ConsumerGroupMember) -> ConsumerGroupMember:
        """KIP-848 static membership: a new member id takes over an instance id whose member
        left temporarily (epoch -2), with its partitions; an active holder is
        UNRELEASED_INSTANCE_ID."""
        assert req.instance_id is not None
        holder = next((m for m in members.values() if m.instance_id == req.instance_id), None)
        if holder is None:
            return member
        if holder.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID,
                             f"instance {req.instance_id} is still held by "
                             f"{holder.member_id}")
        del members[holder.member_id]
        if holder.member_id in previous_target:
            previous_target[member.member_id] = previous_target.pop(holder.member_id)
        return dataclasses.replace(holder, member_id=member.member_id, member_epoch=0,
                                   previous_member_epoch=-1, state=MemberState.STABLE)

    def _leave(self, req: HeartbeatRequest, group: ConsumerGroup | None,
               members: dict[str, ConsumerGroupMember], outcome: dict[str, Any]
               ) -> CoordinatorResult[HeartbeatResult]:
        member = members.get(req.member_id)
        if group is None or member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"member {req.member_id} is not in group {req.group_id}")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member.instance_id != req.instance_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"instance {req.instance_id} is not {req.member_id}'s")
            # Kept with its partitions until it rejoins or its session expires.
            left = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            outcome.update(member=left, left=False)
            return CoordinatorResult([_assignment_record(req.group_id, left)], HeartbeatResult(
                req.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, 0))
        del members[req.member_id]
        plan = self.plan(req.group_id, group, members)
        outcome.update(left=True)
        return CoordinatorResult(plan.records, HeartbeatResult(
            req.member_id, LEAVE_GROUP_MEMBER_EPOCH, 0))

    # -- operations --------------------------------------------------------------------------

    async def heartbeat(self, partition: int, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; raises KafkaError with the response's error code."""
        _validate(req, self.config.assignors)
        outcome: dict[str, Any] = {}
        result = await self.runtime.write(partition, self._heartbeat_op(req, outcome))
        group_id, member_id = req.group_id, result.member_id
        if outcome.get("left"):
            self.runtime.cancel(partition, _session_key(group_id, member_id))
            self.runtime.cancel(partition, _rebalance_key(group_id, member_id))
            log.info("member %s left consumer group %s", member_id, group_id)
            return result
        self._schedule_session(partition, group_id, member_id)
        member: ConsumerGroupMember | None = outcome.get("member")
        if member is None:
            return result
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if outcome.get("previous_state") != MemberState.UNREVOKED_PARTITIONS or \
                    not self.runtime.has_timer(partition, _rebalance_key(group_id, member_id)):
                timeout_ms = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 \
                    else self.config.session_timeout_ms
                epoch = member.member_epoch
                self.runtime.schedule(
                    partition, _rebalance_key(group_id, member_id), timeout_ms,
                    lambda: self._on_rebalance_timeout(partition, group_id, member_id, epoch))
        else:
            self.runtime.cancel(partition, _rebalance_key(group_id, member_id))
        return result

    def _schedule_session(self, partition: int, group_id: str, member_id: str) -> None:
        self.runtime.schedule(partition, _session_key(group_id, member_id),
                              self.config.session_timeout_ms,
                              lambda: self._on_session_timeout(partition, group_id, member_id))

    async def _on_session_timeout(self, partition: int, group_id: str, member_id: str) -> None:
        await self.remove_member(partition, group_id, member_id, "session timeout")

    async def _on_rebalance_timeout(self, partition: int, group_id: str, member_id: str,
                                    epoch: int) -> None:
        group = self.runtime.shard(partition).consumer_group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is not None and member.state == MemberState.UNREVOKED_PARTITIONS and \
                member.member_epoch == epoch:
            await self.remove_member(partition, group_id, member_id,
                                     "partitions not revoked within the rebalance timeout")

    async def remove_member(self, partition: int, group_id: str, member_id: str,
                            reason: str) -> bool:
        """Fence a member out of its group (timeouts); its partitions become free."""
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[bool]:
            group = shard.consumer_group(group_id)
            if group is None or member_id not in group.members:
                return CoordinatorResult([], False)
            members = dict(group.members)
            del members[member_id]
            return CoordinatorResult(self.plan(group_id, group, members).records, True)

        removed = await self.runtime.write(partition, op)
        if removed:
            self.runtime.cancel(partition, _session_key(group_id, member_id))
            self.runtime.cancel(partition, _rebalance_key(group_id, member_id))
            log.info("member %s removed from consumer group %s: %s", member_id, group_id,
                     reason)
        return removed

    async def refresh_metadata(self, partition: int, group_id: str) -> None:
        """Recompute the target when the group's subscribed topics changed (partitions added,
        topics created or deleted)."""
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[None]:
            group = shard.consumer_group(group_id)
            if group is None or not group.members:
                return CoordinatorResult([], None)
            return CoordinatorResult(self.plan(group_id, group, dict(group.members)).records,
                                     None)

        await self.runtime.write(partition, op)

    def stale_groups(self) -> list[tuple[int, str]]:
        """(partition, group id) of loaded consumer groups whose subscribed topics changed."""
        stale = []
        for partition, shard in self.runtime.shards():
            for group_id, group in shard.consumer_groups.items():
                if group.members and \
                        self.subscription_metadata(group.members.values()) != \
                        group.subscription_metadata:
                    stale.append((partition, group_id))
        return stale

    def on_shard_loaded(self, shard: GroupCoordinatorShard) -> None:
        """Loaded members must heartbeat again within the session timeout."""
        for group_id, group in shard.consumer_groups.items():
            for member_id in group.members:
                self._schedule_session(shard.partition, group_id, member_id)


def _check_epoch(member: ConsumerGroupMember, received: int, owned: Assignment | None) -> None:
    """Kafka's epoch check: a newer epoch is fenced; an older one is accepted only when it is the
    previous epoch and the member owns no more than it is assigned (a lost response)."""
    if received > member.member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"epoch {received} is newer than the member's {member.member_epoch}")
    if received < member.member_epoch:
        subset = owned is not None and all(
            ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items())
        if received != member.previous_member_epoch or not subset:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"epoch {received} is older than the member's "
                             f"{member.member_epoch}")


def _topic_metadata_struct(topic: TopicMetadata) -> Any:
    cls = registry()["ConsumerGroupPartitionMetadataValue"].cls
    return cls.TopicMetadata(topic_id=topic.topic_id, topic_name=topic.name,
                             num_partitions=topic.num_partitions, partition_metadata=[])


def _session_key(group_id: str, member_id: str) -> str:
    return f"cg-session\0{group_id}\0{member_id}"


def _rebalance_key(group_id: str, member_id: str) -> str:
    return f"cg-rebalance\0{group_id}\0{member_id}"

