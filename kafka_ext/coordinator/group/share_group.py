"""ShareGroup: a KIP-932 share group (group type "share") as replayed from its records.

Mirrors Kafka's ShareGroup, ShareGroupMember, ShareGroupAssignmentBuilder and SimpleAssignor,
and the share group records of `__consumer_offsets` (record types 10-15, Kafka 4.2's: member
metadata, group epoch with its metadata hash, target assignment, current assignment, and the
share-partition state metadata). Membership is KIP-848's (group epoch, target assignment,
member epochs) without revocation: a member takes its target assignment at its next heartbeat,
and a partition may be assigned to several members. Only share-partitions whose state the
share coordinator has initialized are assigned. Mutated only by GroupCoordinatorShard.replay.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.coordinator.group.assignors import Assignment, AssignmentMember
from kafka_ext.coordinator.group.consumer_group import MemberState
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

SHARE_GROUP_TYPE = "share"
SHARE_PROTOCOL_TYPE = "share"  # ListGroups' ProtocolType of a share group, as Kafka's
SIMPLE_ASSIGNOR = "simple"

TopicPartitionId = tuple[uuid.UUID, int]


class ShareGroupState(enum.Enum):
    """Kafka's ShareGroupState names (ListGroups, ShareGroupDescribe)."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True, frozen=True)
class ShareGroupMember:
    """One member: its metadata (ShareGroupMemberMetadata) and current assignment
    (ShareGroupCurrentMemberAssignment). Immutable: changes make a new object."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)

    def metadata_equals(self, other: ShareGroupMember) -> bool:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) \
            == (other.rack_id, other.client_id, other.client_host,
                other.subscribed_topic_names)

    def assignment_equals(self, other: ShareGroupMember) -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.assigned) == (
            other.member_epoch, other.previous_member_epoch, other.assigned)


@dataclass(slots=True, frozen=True)
class InitTopic:
    """Partitions of one topic in the share-partition state metadata; `since_ms` is when they
    started initializing (in memory only: Kafka 4.2's record has no timestamp, a reload counts
    from the replay)."""

    name: str
    partitions: frozenset[int]
    since_ms: int = -1


@dataclass(slots=True)
class SharePartitionMetadata:
    """ShareGroupStatePartitionMetadata: which share-partitions of the group have state on the
    share coordinator (initialized), are being given it (initializing), or are losing it
    (deleting, by topic)."""

    initializing: dict[uuid.UUID, InitTopic] = field(default_factory=dict)
    initialized: dict[uuid.UUID, InitTopic] = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        return {t: info.partitions for t, info in self.initialized.items() if info.partitions}


class ShareGroup:
    """A share group's replayed state; see the module docstring."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target: dict[str, Assignment] = {}
        self.share_partitions: SharePartitionMetadata | None = None

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        meta = self.share_partitions
        return {} if meta is None else meta.initialized_partitions()


def member_assignment(target: Assignment, subscribed_topic_ids: Iterable[uuid.UUID]
                      ) -> Assignment:
    """The member's current assignment from its target: only topics it still subscribes to
    (Kafka's ShareGroupAssignmentBuilder filter)."""
    wanted = set(subscribed_topic_ids)
    return {t: ps for t, ps in target.items() if t in wanted and ps}


def reconcile(member: ShareGroupMember, target_epoch: int, target: Assignment,
              subscribed_topic_ids: Iterable[uuid.UUID], subscription_changed: bool
              ) -> ShareGroupMember:
    """The member's next state: at a new target epoch it takes the target at once (no
    revocation in share groups); a changed subscription refilters the same target."""
    if target_epoch != member.member_epoch:
        return dataclasses.replace(member, assigned=member_assignment(target, subscribed_topic_ids),
                                   previous_member_epoch=member.member_epoch,
                                   member_epoch=target_epoch)
    if subscription_changed:
        return dataclasses.replace(member,
                                   assigned=member_assignment(target, subscribed_topic_ids))
    return member


def metadata_hash(topics: Iterable[tuple[uuid.UUID, str, int]]) -> int:
    """A 64-bit digest of the subscribed topics (id, name, partition count): the group epoch
    moves when it changes. Ours, deterministic across restarts; Kafka's hash is another
    function of the same facts, and the field is only compared with itself."""
    digest = hashlib.blake2b(digest_size=8)
    for topic_id, name, count in sorted(topics, key=lambda t: t[1]):
        digest.update(topic_id.bytes)
        digest.update(name.encode())
        digest.update(count.to_bytes(4, "big"))
    return int.from_bytes(digest.digest(), "big", signed=True)


# -- Kafka's SimpleAssignor -------------------------------------------------------------------

class SimpleAssignor:
    """Kafka's share group assignor ("simple"): balanced (member loads within one of each
    other), sticky (a member keeps what it had when that keeps the balance), and every
    assignable partition covered; when members outnumber partitions, each partition is shared
    by ceil(members / partitions) of them. Members with the same subscriptions are balanced
    over all their partitions together; otherwise each topic is balanced over its subscribers.
    Pure and deterministic."""

    name = SIMPLE_ASSIGNOR

    def assign(self, members: Sequence[AssignmentMember],
               assignable: Mapping[uuid.UUID, Sequence[int]],
               previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
        ordered = sorted(members, key=lambda m: m.member_id)
        out: dict[str, set[TopicPartitionId]] = {m.member_id: set() for m in ordered}
        if not ordered:
            return {}
        subscriptions = {m.subscribed_topic_ids for m in ordered}
        if len(subscriptions) == 1:
            groups = [([m.member_id for m in ordered], sorted(next(iter(subscriptions)), key=str))]
        else:
            topics = sorted({t for m in ordered for t in m.subscribed_topic_ids}, key=str)
            groups = [([m.member_id for m in ordered if t in m.subscribed_topic_ids], [t])
                      for t in topics]
        for member_ids, topic_ids in groups:
            pool = [(t, p) for t in topic_ids for p in assignable.get(t, ())]
            in_pool = {t for t in topic_ids}
            kept = {mid: sorted(((t, p) for t, ps in previous.get(mid, {}).items()
                                 if t in in_pool for p in ps), key=lambda tp: (str(tp[0]), tp[1]))
                    for mid in member_ids}
            for mid, tps in _assign_pool(member_ids, pool, kept).items():
                out[mid] |= tps
        return {mid: _to_assignment(tps) for mid, tps in out.items()}


def _assign_pool(member_ids: list[str], pool: list[TopicPartitionId],
                 previous: Mapping[str, list[TopicPartitionId]]
                 ) -> dict[str, set[TopicPartitionId]]:
    """Spread `pool` over `member_ids` (sorted): `sharing` holders per partition, the slots
    split as evenly as integers allow, previous holdings kept first."""
    owned: dict[str, set[TopicPartitionId]] = {mid: set() for mid in member_ids}
    if not pool or not member_ids:
        return owned
    n = len(member_ids)
    sharing = -(-n // len(pool))
    slots = sharing * len(pool)
    quota = {mid: -(-slots * (i + 1) // n) - -(-slots * i // n)
             for i, mid in enumerate(member_ids)}
    holders: dict[TopicPartitionId, set[str]] = {tp: set() for tp in pool}
    for mid in member_ids:  # stickiness, within the balance
        for tp in previous.get(mid, ()):
            if len(owned[mid]) >= quota[mid]:
                break
            if tp in holders and len(holders[tp]) < sharing:
                holders[tp].add(mid)
                owned[mid].add(tp)
    unfilled = [mid for mid in member_ids if len(owned[mid]) < quota[mid]]
    cursor = 0
    for tp in pool:
        while unfilled and len(holders[tp]) < sharing:
            # The next unfilled member (round robin) not already holding tp; none: tp keeps
            # fewer holders (Kafka tolerates that small imbalance too).
            for step in range(len(unfilled)):
                mid = unfilled[(cursor + step) % len(unfilled)]
                if mid not in holders[tp]:
                    break
            else:
                break
            holders[tp].add(mid)
            owned[mid].add(tp)
            at = (cursor + step) % len(unfilled)
            if len(owned[mid]) >= quota[mid]:
                del unfilled[at]
                cursor = at
            else:
                cursor = at + 1
            if unfilled:
                cursor %= len(unfilled)
    return owned


def _to_assignment(pairs: set[TopicPartitionId]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in pairs:
        by_topic.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(ps) for t, ps in by_topic.items()}


# -- records (key version = record type, Kafka 4.2's CoordinatorRecordType) -----------------------

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
_NAMES = {
    SHARE_GROUP_MEMBER_METADATA: "ShareGroupMemberMetadata",
    SHARE_GROUP_METADATA: "ShareGroupMetadata",
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    SHARE_GROUP_STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
_reg = registry()
_KEYS = {t: _reg[f"{n}Key"] for t, n in _NAMES.items()}
_VALUES = {t: _reg[f"{n}Value"] for t, n in _NAMES.items()}
_VALUE_VERSION = 0
_VERSION = struct.Struct(">h")  # record version prefix of every key and value

Records = list[tuple[bytes, bytes | None]]


@dataclass(slots=True, frozen=True)
class ShareGroupRecordKey:
    """The key of a share group record: its type (the key version) and ids."""

    record_type: int
    group_id: str
    member_id: str | None = None


def share_group_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    mtype = _KEYS[record_type]
    key = (mtype.cls(group_id=group_id) if member_id is None
           else mtype.cls(group_id=group_id, member_id=member_id))
    return _VERSION.pack(record_type) + mtype.encode(key, record_type)


def share_group_value(record_type: int, **fields: Any) -> bytes:
    """The value of a share group record from its schema's fields (snake_case)."""
    mtype = _VALUES[record_type]
    return _VERSION.pack(_VALUE_VERSION) + mtype.encode(mtype.cls(**fields), _VALUE_VERSION)


def decode_share_group_key(key: bytes) -> ShareGroupRecordKey | None:
    """The key of a share group record; None for other record types."""
    if len(key) < _VERSION.size:
        raise DecodeError("coordinator record is shorter than its version")
    (record_type,) = _VERSION.unpack_from(key)
    mtype = _KEYS.get(record_type)
    if mtype is None:
        return None
    k = mtype.decode_all(memoryview(key)[_VERSION.size:], record_type)
    return ShareGroupRecordKey(record_type, k.group_id, getattr(k, "member_id", None))


def decode_share_group_value(record_type: int, value: bytes) -> Any:
    if len(value) < _VERSION.size:
        raise DecodeError("coordinator record is shorter than its version")
    (version,) = _VERSION.unpack_from(value)
    mtype = _VALUES[record_type]
    if version not in mtype.versions:
        raise DecodeError(f"unknown {mtype.name} version {version}")
    return mtype.decode_all(memoryview(value)[_VERSION.size:], version)


def _topic_partitions(struct_cls: Any, assignment: Mapping[uuid.UUID, frozenset[int]]
                      ) -> list[Any]:
    return [struct_cls(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(assignment.items(), key=lambda item: str(item[0])) if ps]


def member_metadata_record(group_id: str, member: ShareGroupMember) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_MEMBER_METADATA
    return (share_group_key(rtype, group_id, member.member_id), share_group_value(
        rtype, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names)))


def current_assignment_record(group_id: str, member: ShareGroupMember) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT
    cls = _VALUES[rtype].cls
    return (share_group_key(rtype, group_id, member.member_id), share_group_value(
        rtype, member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch, state=int(MemberState.STABLE),
        assigned_partitions=_topic_partitions(cls.TopicPartitions, member.assigned)))


def target_member_record(group_id: str, member_id: str, assignment: Assignment
                         ) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER
    cls = _VALUES[rtype].cls
    return (share_group_key(rtype, group_id, member_id), share_group_value(
        rtype, topic_partitions=_topic_partitions(cls.TopicPartition, assignment)))


def epoch_record(group_id: str, epoch: int, topics_hash: int) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_METADATA
    return (share_group_key(rtype, group_id),
            share_group_value(rtype, epoch=epoch, metadata_hash=topics_hash))


def target_epoch_record(group_id: str, epoch: int) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_TARGET_ASSIGNMENT_METADATA
    return (share_group_key(rtype, group_id), share_group_value(rtype, assignment_epoch=epoch))


def share_partitions_record(group_id: str, meta: SharePartitionMetadata) -> tuple[bytes, bytes]:
    rtype = SHARE_GROUP_STATE_PARTITION_METADATA
    cls = _VALUES[rtype].cls

    def infos(topics: Mapping[uuid.UUID, InitTopic]) -> list[Any]:
        return [cls.TopicPartitionsInfo(topic_id=t, topic_name=info.name,
                                        partitions=sorted(info.partitions))
                for t, info in sorted(topics.items(), key=lambda item: str(item[0]))
                if info.partitions]

    return (share_group_key(rtype, group_id), share_group_value(
        rtype, initializing_topics=infos(meta.initializing),
        initialized_topics=infos(meta.initialized),
        deleting_topics=[cls.TopicInfo(topic_id=t, topic_name=name)
                         for t, name in sorted(meta.deleting.items(),
                                               key=lambda item: str(item[0]))]))


def member_tombstones(group_id: str, member_id: str) -> Records:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [(share_group_key(t, group_id, member_id), None)
            for t in (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                      SHARE_GROUP_MEMBER_METADATA)]


def group_tombstones(group: ShareGroup) -> Records:
    """Every record of an (empty) share group, ending with its epoch record."""
    records: Records = []
    for member_id in group.members.keys() | group.target.keys():
        records += member_tombstones(group.group_id, member_id)
    for rtype in (SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, SHARE_GROUP_STATE_PARTITION_METADATA,
                  SHARE_GROUP_METADATA):
        records.append((share_group_key(rtype, group.group_id), None))
    return records


def replay_share_group(groups: dict[str, ShareGroup], key: ShareGroupRecordKey,
                       value: bytes | None, now_ms: int) -> None:
    """Apply one share group record (Kafka's GroupMetadataManager.replay for share groups);
    a tombstone of a group that is not there is ignored (KAFKA-19453)."""
    group_id, rtype, member_id = key.group_id, key.record_type, key.member_id
    group = groups.get(group_id)
    if value is None:
        if group is None:
            return
        if rtype == SHARE_GROUP_METADATA:
            del groups[group_id]
        elif rtype == SHARE_GROUP_STATE_PARTITION_METADATA:
            group.share_partitions = None
        elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0
        elif member_id is None:
            return
        elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(member_id, None)
        elif rtype == SHARE_GROUP_MEMBER_METADATA:
            group.members.pop(member_id, None)
        elif rtype == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT and member_id in group.members:
            group.members[member_id] = dataclasses.replace(
                group.members[member_id], member_epoch=-1, previous_member_epoch=-1,
                assigned={})
        return
    if group is None:
        group = groups[group_id] = ShareGroup(group_id)
    v = decode_share_group_value(rtype, value)
    if rtype == SHARE_GROUP_METADATA:
        group.group_epoch, group.metadata_hash = v.epoch, v.metadata_hash
    elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = v.assignment_epoch
    elif rtype == SHARE_GROUP_STATE_PARTITION_METADATA:
        group.share_partitions = SharePartitionMetadata(
            initializing={t.topic_id: InitTopic(t.topic_name, frozenset(t.partitions), now_ms)
                          for t in v.initializing_topics},
            initialized={t.topic_id: InitTopic(t.topic_name, frozenset(t.partitions))
                         for t in v.initialized_topics},
            deleting={t.topic_id: t.topic_name for t in v.deleting_topics})
    elif member_id is None:
        return
    elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        group.target[member_id] = {tp.topic_id: frozenset(tp.partitions)
                                   for tp in v.topic_partitions if tp.partitions}
    elif rtype == SHARE_GROUP_MEMBER_METADATA:
        member = group.members.get(member_id) or ShareGroupMember(member_id)
        group.members[member_id] = dataclasses.replace(
            member, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=tuple(v.subscribed_topic_names))
    elif rtype == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        member = group.members.get(member_id) or ShareGroupMember(member_id)
        group.members[member_id] = dataclasses.replace(
            member, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
            assigned={tp.topic_id: frozenset(tp.partitions)
                      for tp in v.assigned_partitions if tp.partitions})
