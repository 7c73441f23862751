"""Server-side partition assignors of KIP-848 consumer groups: "uniform" and "range".

Mirrors the roles of Kafka's UniformAssignor and RangeAssignor (`group.consumer.assignors`).
Both are pure: members with their subscribed topic ids, the topics' partition counts and the
previous target assignment in, a new target assignment out. Deterministic for the same input.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# topic id -> partitions; one member's assignment.
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True, frozen=True)
class AssignmentMember:
    """What an assignor knows about a member: its id and the topic ids it subscribes to."""

    member_id: str
    subscribed_topic_ids: frozenset[uuid.UUID]


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: list[AssignmentMember], partition_counts: Mapping[uuid.UUID, int],
               previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
        """The target assignment of every member (empty dict entries for members without any)."""


def _to_assignment(pairs: set[tuple[uuid.UUID, int]]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in pairs:
        by_topic.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(ps) for t, ps in by_topic.items()}


class UniformAssignor:
    """Balanced and sticky: every member ends within one partition of every other member that
    could take the same partitions, and a partition stays with its previous owner whenever that
    keeps the balance (Kafka's "uniform" assignor semantics)."""

    name = "uniform"

    def assign(self, members: list[AssignmentMember], partition_counts: Mapping[uuid.UUID, int],
               previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
        ordered = sorted(members, key=lambda m: m.member_id)
        if not ordered:
            return {}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for m in ordered:
            for topic_id in m.subscribed_topic_ids:
                if topic_id in partition_counts:
                    subscribers.setdefault(topic_id, []).append(m.member_id)
        all_partitions = sorted(((t, p) for t in subscribers for p in range(partition_counts[t])),
                                key=lambda tp: (str(tp[0]), tp[1]))
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m.member_id: set() for m in ordered}
        eligible = {m.member_id: m.subscribed_topic_ids for m in ordered}
        # Fair share if every member could take every partition; heterogeneous subscriptions are
        # evened out by the moves below.
        quota = -(-len(all_partitions) // len(ordered))
        # 1. Stickiness: keep previous partitions the member still subscribes to, up to the quota.
        taken: set[tuple[uuid.UUID, int]] = set()
        for m in ordered:
            kept = sorted(((t, p) for t, ps in previous.get(m.member_id, {}).items() for p in ps
                           if t in eligible[m.member_id] and p < partition_counts.get(t, 0)),
                          key=lambda tp: (str(tp[0]), tp[1]))
            for tp in kept[:quota]:
                if tp not in taken:
                    owned[m.member_id].add(tp)
                    taken.add(tp)
        # 2. Every other partition goes to the least loaded member subscribed to its topic.
        for tp in all_partitions:
            if tp in taken:
                continue
            target = min(subscribers[tp[0]], key=lambda mid: (len(owned[mid]), mid))
            owned[target].add(tp)
            taken.add(tp)
        # 3. Balance: move partitions from the most to the least loaded eligible member.
        moved = True
        while moved:
            moved = False
            for giver in sorted(owned, key=lambda mid: (-len(owned[mid]), mid)):
                for tp in sorted(owned[giver], key=lambda x: (str(x[0]), x[1])):
                    taker = min(subscribers[tp[0]], key=lambda mid: (len(owned[mid]), mid))
                    if len(owned[taker]) + 1 < len(owned[giver]):
                        owned[giver].discard(tp)
                        owned[taker].add(tp)
                        moved = True
                        break
                if moved:
                    break
        return {mid: _to_assignment(tps) for mid, tps in owned.items()}


class RangeAssignor:
    """Per topic, contiguous ranges of partitions over the subscribed members sorted by member
    id; the first `partitions % members` members get one more. Members subscribed to the same
    topics get the same partition numbers of each (co-partitioning), as Kafka's range assignor."""

    name = "range"

    def assign(self, members: list[AssignmentMember], partition_counts: Mapping[uuid.UUID, int],
               previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
        out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m.member_id: {} for m in members}
        topics = {t for m in members for t in m.subscribed_topic_ids if t in partition_counts}
        for topic_id in topics:
            subscribed = sorted(m.member_id for m in members
                                if topic_id in m.subscribed_topic_ids)
            count = partition_counts[topic_id]
            share, extra = divmod(count, len(subscribed))
            start = 0
            for i, member_id in enumerate(subscribed):
                size = share + (1 if i < extra else 0)
                if size:
                    out[member_id][topic_id] = frozenset(range(start, start + size))
                start += size
        return out


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
