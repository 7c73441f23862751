"""ConsumerGroup: a KIP-848 consumer group (group type "consumer") as replayed from its records.

Mirrors Kafka's ConsumerGroup, ConsumerGroupMember and CurrentAssignmentBuilder. The group epoch
moves whenever membership, subscriptions or subscribed topics change; the target assignment is
computed for a group epoch (the assignment epoch); each member converges to its target one
heartbeat at a time, and a partition reaches its new owner only once the previous owner has
revoked it. Mutated only by GroupCoordinatorShard.replay; operations work on copies.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kafka_ext.coordinator.group.assignors import Assignment

CONSUMER_GROUP_TYPE = "consumer"
# Member epochs with a meaning of their own (ConsumerGroupHeartbeat).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

TopicPartitionId = tuple[uuid.UUID, int]


class MemberState(enum.IntEnum):
    """Kafka's MemberState, as stored in ConsumerGroupCurrentMemberAssignmentValue.State."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before its epoch moves
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for others to release partitions
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    """States with Kafka's names (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True, frozen=True)
class ConsumerGroupMember:
    """One member: its metadata (ConsumerGroupMemberMetadata) and current assignment
    (ConsumerGroupCurrentMemberAssignment). Immutable: changes make a new object."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def metadata_equals(self, other: ConsumerGroupMember) -> bool:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor,
                self.rebalance_timeout_ms) == (
            other.instance_id, other.rack_id, other.client_id, other.client_host,
            other.subscribed_topic_names, other.subscribed_topic_regex, other.server_assignor,
            other.rebalance_timeout_ms)

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation) == (
            other.member_epoch, other.previous_member_epoch, other.state, other.assigned,
            other.pending_revocation)

    def with_metadata_of(self, other: ConsumerGroupMember) -> ConsumerGroupMember:
        return dataclasses.replace(
            self, instance_id=other.instance_id, rack_id=other.rack_id,
            client_id=other.client_id, client_host=other.client_host,
            subscribed_topic_names=other.subscribed_topic_names,
            subscribed_topic_regex=other.subscribed_topic_regex,
            server_assignor=other.server_assignor,
            rebalance_timeout_ms=other.rebalance_timeout_ms)

    def with_assignment_of(self, other: ConsumerGroupMember) -> ConsumerGroupMember:
        return dataclasses.replace(
            self, member_epoch=other.member_epoch,
            previous_member_epoch=other.previous_member_epoch, state=other.state,
            assigned=other.assigned, pending_revocation=other.pending_revocation)

    def owned_partitions(self) -> Iterable[TopicPartitionId]:
        """Partitions the member may still be consuming: assigned or not yet revoked."""
        for source in (self.assigned, self.pending_revocation):
            for topic_id, partitions in source.items():
                for p in partitions:
                    yield topic_id, p


@dataclass(slots=True, frozen=True)
class TopicMetadata:
    """A subscribed topic as the group last saw it (ConsumerGroupPartitionMetadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


class ConsumerGroup:
    """A consumer group's replayed state; see the module docstring."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.subscription_metadata: dict[uuid.UUID, TopicMetadata] = {}
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target: dict[str, Assignment] = {}

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or \
                    member.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def partition_owners(self, excluding: str | None = None) -> dict[TopicPartitionId, str]:
        """Which member holds each partition (assigned or pending revocation)."""
        owners: dict[TopicPartitionId, str] = {}
        for member in self.members.values():
            if member.member_id == excluding:
                continue
            for tp in member.owned_partitions():
                owners[tp] = member.member_id
        return owners

    def subscribed_topic_names(self) -> set[str]:
        """Names of every topic some member subscribes to by name (regexes resolved apart)."""
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def _split(current: Assignment, target: Assignment
           ) -> tuple[Assignment, Assignment, Assignment]:
    """(kept, to revoke, to add) going from `current` to `target`, per topic."""
    kept: Assignment = {}
    revoke: Assignment = {}
    add: Assignment = {}
    for topic_id in set(current) | set(target):
        have = current.get(topic_id, frozenset())
        want = target.get(topic_id, frozenset())
        if have & want:
            kept[topic_id] = have & want
        if have - want:
            revoke[topic_id] = have - want
        if want - have:
            add[topic_id] = want - have
    return kept, revoke, add


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member's reported partitions still include any of `partitions`;
    a member that did not report its partitions (None) is taken to still own them."""
    if owned is None:
        return bool(partitions)
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              owners: Mapping[TopicPartitionId, str],
              owned: Assignment | None) -> ConsumerGroupMember:
    """The member's next current assignment (Kafka's CurrentAssignmentBuilder).

    `owners`: the other members' held partitions; `owned`: what the member reported in this
    heartbeat (None if it did not say). A member revokes before its epoch moves; a partition
    another member still holds is withheld (UNRELEASED_PARTITIONS) until it is released.
    """
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member  # still revoking
        member = dataclasses.replace(member, pending_revocation={},
                                     state=MemberState.STABLE)
    elif member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    kept, revoke, add = _split(member.assigned, target)
    if revoke:
        return dataclasses.replace(member, assigned=kept, pending_revocation=revoke,
                                   state=MemberState.UNREVOKED_PARTITIONS)
    assigned = {t: set(ps) for t, ps in kept.items()}
    unreleased = False
    for topic_id, partitions in add.items():
        for p in partitions:
            if (topic_id, p) in owners:
                unreleased = True
            else:
                assigned.setdefault(topic_id, set()).add(p)
    return dataclasses.replace(
        member, assigned={t: frozenset(ps) for t, ps in assigned.items() if ps},
        pending_revocation={},
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=(member.member_epoch if member.member_epoch != target_epoch
                               else member.previous_member_epoch),
        member_epoch=target_epoch)
