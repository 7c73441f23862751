"""ClassicGroup: a consumer group of the classic (JoinGroup/SyncGroup) protocol, in memory.

Mirrors Kafka's ClassicGroup and ClassicGroupMember: members, their protocols, the generation,
the leader and the state machine Empty -> PreparingRebalance -> CompletingRebalance -> Stable
(Dead once deleted). The broker never reads assignor data, except the topic list of the
"consumer" protocol's subscription (OffsetDelete and offset expiry need it, as in Kafka).
Owned by one GroupCoordinatorShard; mutated only on the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from dataclasses import dataclass, field
from typing import Any

CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")  # string length / subscription version
_INT32 = struct.Struct(">i")  # array length


class GroupState(enum.Enum):
    """Classic group states with Kafka's names (ListGroups and DescribeGroups report them)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Which states a group may move to from each state (Kafka's ClassicGroupState.validPreviousStates
# read the other way round).
_VALID_TRANSITIONS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.PREPARING_REBALANCE: {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
                                     GroupState.DEAD},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE, GroupState.STABLE,
                                      GroupState.DEAD},
    GroupState.STABLE: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.DEAD: {GroupState.DEAD},
}


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup request is answered with (an error code, or the generation joined)."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member id, group instance id, metadata of the chosen protocol); the leader's answer only.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class ClassicGroupMember:
    """One member; its futures are the JoinGroup/SyncGroup requests waiting for the rebalance."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    is_new: bool = False
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return self.protocols == protocols

    def complete_join(self, result: JoinResult) -> None:
        future, self.join_future = self.join_future, None
        if future is not None and not future.done():
            future.set_result(result)

    def complete_sync(self, result: SyncResult) -> None:
        future, self.sync_future = self.sync_future, None
        if future is not None and not future.done():
            future.set_result(result)


class ClassicGroup:
    """A classic group's membership and rebalance state; see the module docstring."""

    def __init__(self, group_id: str, now_ms: int,
                 state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = state
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: set[str] = set()  # told MEMBER_ID_REQUIRED, not joined yet
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False  # extends the initial rebalance delay (KIP-134)
        self.initial_delay_remaining_ms = 0
        # protocol name -> members listing it (Kafka's supportedProtocols): a join checks the
        # protocols every member shares without walking the group.
        self._protocol_counts: dict[str, int] = {}
        # KIP-253, in memory only: the positions members reported this generation for
        # partitions some member waits on, and which partitions each member asked about.
        self.positions: dict[tuple[str, int], int] = {}
        self.wanted_positions: dict[str, frozenset[tuple[str, int]]] = {}

    # -- state -------------------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if state not in _VALID_TRANSITIONS[self.state]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                              GroupState.EMPTY)

    # -- members -----------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for name in {name for name, _ in member.protocols}:
            count = self._protocol_counts.get(name, 0) + delta
            if count:
                self._protocol_counts[name] = count
            else:
                del self._protocol_counts[name]

    def set_protocols(self, member: ClassicGroupMember, protocols: list[tuple[str, bytes]]
                      ) -> None:
        """Change a member's protocols; every change goes through here (supported counts)."""
        self._count_protocols(member, -1)
        member.protocols = list(protocols)
        self._count_protocols(member, 1)

    def add(self, member: ClassicGroupMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        replaced = self.members.get(member.member_id)
        if replaced is not None:
            self._count_protocols(replaced, -1)
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        self.wanted_positions.pop(member_id, None)
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._count_protocols(member, -1)
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            # A member already waiting in the join phase leads next, as in Kafka.
            waiting = [m for m in self.members.values() if m.is_awaiting_join]
            candidates = waiting or list(self.members.values())
            self.leader_id = candidates[0].member_id if candidates else None
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> ClassicGroupMember:
        """Give a static member a new member id, keeping its assignment (KIP-345)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        # Stops at the first member still out: checked after every join of a rebalance, this
        # costs O(n log n) per rebalance for members rejoining in any order, not O(n^2).
        return not self.pending_members and all(
            m.is_awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: how long the join phase may last."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ---------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member fits: same protocol type and one protocol every member has."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        """Protocols every member lists."""
        size = len(self.members)
        return {name for name, count in self._protocol_counts.items() if count == size}

    def select_protocol(self) -> str:
        """The protocol most members vote for among those all support (Kafka's rule: each member
        votes for its first-listed candidate; ties go to the first candidate in that order)."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            vote = next(name for name, _ in member.protocols if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        return max(votes.items(), key=lambda item: item[1])[0]

    def exchange_positions(self, member_id: str, reported: dict[tuple[str, int], int],
                           wanted: frozenset[tuple[str, int]]
                           ) -> tuple[dict[tuple[str, int], int], frozenset[tuple[str, int]]]:
        """KIP-253 over Heartbeat: keep the positions a member reports and the partitions it
        asks about; answer the group's positions of those (-1 while unknown), and the partitions
        any member asks about, whose owners are to report them."""
        self.positions.update({tp: p for tp, p in reported.items() if p >= 0})
        if wanted:
            self.wanted_positions[member_id] = wanted
        else:
            self.wanted_positions.pop(member_id, None)
        asked = frozenset().union(*self.wanted_positions.values())
        return {tp: self.positions.get(tp, -1) for tp in wanted}, asked

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation: CompletingRebalance with members, Empty without."""
        self.generation_id += 1
        self.positions = {}  # partitions change owners: positions come from the new ones
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
            self.pending_sync_members = set(self.members)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
            self.pending_sync_members = set()

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a "consumer" group subscribe to; None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def to_record(self, assignments: dict[str, bytes], value_cls: Any,
                  member_cls: Any) -> Any:
        """This group as a GroupMetadataValue, with the given assignments."""
        protocol = self.protocol_name
        return value_cls(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp_ms,
            members=[member_cls(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol else b"",
                assignment=assignments.get(m.member_id, b""))
                for m in self.members.values()],
        )

    @classmethod
    def from_record(cls, group_id: str, value: Any, now_ms: int) -> ClassicGroup:
        """A group as loaded: Stable with its members and assignments, or Empty without."""
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        timestamp = value.current_state_timestamp
        group = cls(group_id, timestamp if timestamp >= 0 else now_ms, state)
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.generation_id = value.generation
        group.leader_id = value.leader if value.members else None
        for m in value.members:
            member = ClassicGroupMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                m.session_timeout, value.protocol_type,
                [(value.protocol or "", bytes(m.subscription))], bytes(m.assignment))
            group.members[member.member_id] = member
            group._count_protocols(member, 1)
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        return group


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (int16 version, then [string] topics), or None
    when the bytes are not one; the rest (user data, owned partitions) is not ours to read."""
    try:
        (version,) = _INT16.unpack_from(metadata, 0)
        if version < 0:
            return None
        (count,) = _INT32.unpack_from(metadata, 2)
        if count < 0 or count > (len(metadata) - 6) // 2:
            return None
        pos = 6
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(metadata[pos:pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
