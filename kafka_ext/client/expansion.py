"""KIP-253 (seed 001) on the consumer: a new partition waits until its prior partitions are read.

When partitions are added, a key may move from an old partition to a new one. The controller
starts a new leader epoch on every old partition and records, for each new partition, the old
partitions' previous epochs. A consumer about to read a new partition from its start asks for
those (LeaderEpochsForPartition, our key 1001), turns each into an offset threshold with
OffsetForLeaderEpoch (the end offset of that epoch: one past the last record written before the
expansion), and reads the new partition only once every prior partition's position reached its
threshold. So every key's records before the expansion are returned before its records after.

The positions come from this member (the partitions it owns), from the group coordinator, which
passes them between members in the Heartbeat's tagged fields, and from the group's committed
offsets (a committed offset is a position the group has read up to). A prior partition that
no longer exists or is in mode None (partition reduction) is not waited on. Pure bookkeeping:
the consumer does the requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kafka_ext.client.metadata import TopicPartition

# (partition, need_position, position) entries of a Heartbeat's KIP-253 Topics, by topic.
HeartbeatEntries = dict[str, list[tuple[int, bool, int]]]


@dataclass(slots=True, frozen=True)
class Threshold:
    """A prior partition and the position it must reach (exclusive end offset of its epoch)."""

    prior: TopicPartition
    offset: int


class ExpansionGate:
    """The gated partitions of one consumer and what it knows of the prior partitions.

    Owned by one consumer, touched only from its event loop. `gates` maps a gated partition to
    the thresholds still to be reached; a partition leaves it when all are met.
    """

    def __init__(self) -> None:
        self.gates: dict[TopicPartition, list[Threshold]] = {}
        # Positions of partitions owned elsewhere: from Heartbeats and committed offsets.
        self.known_positions: dict[TopicPartition, int] = {}
        # Partitions the coordinator asked us to report (NeedPosition in its last answer).
        self.asked: set[TopicPartition] = set()

    def add(self, tp: TopicPartition, thresholds: Mapping[int, int]) -> None:
        """Gate `tp` on its prior partitions (prior partition -> threshold offset). Thresholds
        of zero or below (an epoch with no records, or unknown) need no waiting."""
        waiting = [Threshold(TopicPartition(tp.topic, prior), offset)
                   for prior, offset in sorted(thresholds.items()) if offset > 0]
        if waiting:
            self.gates[tp] = waiting
        else:
            self.gates.pop(tp, None)

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.gates.pop(tp, None)

    def clear(self) -> None:
        """A new assignment: gates are set up again; what the group knew is from the old
        generation, so the coordinator's positions go too."""
        self.gates.clear()
        self.known_positions.clear()
        self.asked.clear()

    def is_gated(self, tp: TopicPartition) -> bool:
        return tp in self.gates

    @property
    def pending(self) -> bool:
        return bool(self.gates)

    def wanted(self, owned: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Prior partitions whose positions must come from elsewhere: not owned by us."""
        mine = set(owned)
        return {t.prior for gate in self.gates.values() for t in gate if t.prior not in mine}

    def learn(self, tp: TopicPartition, position: int) -> None:
        """A position of a partition owned elsewhere (reported or committed); keeps the most
        advanced, since positions only move forward within a generation."""
        if position >= 0 and position > self.known_positions.get(tp, -1):
            self.known_positions[tp] = position

    def update(self, own_positions: Mapping[TopicPartition, int],
               exists: Callable[[TopicPartition], bool]) -> list[TopicPartition]:
        """Drop the thresholds that are met; return the partitions whose gate opened.

        `own_positions` are this member's positions (the partitions it reads); `exists` says
        whether a prior partition is still there to be read (not removed, not mode None).
        """
        opened = []
        for tp in list(self.gates):
            left = []
            for threshold in self.gates[tp]:
                prior = threshold.prior
                if not exists(prior):
                    continue
                position = own_positions.get(prior)
                if position is None:
                    position = self.known_positions.get(prior, -1)
                else:
                    position = max(position, self.known_positions.get(prior, -1))
                if position < threshold.offset:
                    left.append(threshold)
            if left:
                self.gates[tp] = left
            else:
                del self.gates[tp]
                opened.append(tp)
        return opened

    # -- the Heartbeat's tagged fields -----------------------------------------------------------

    def heartbeat_entries(self, own_positions: Mapping[TopicPartition, int]) -> HeartbeatEntries:
        """What our next Heartbeat carries: the positions the coordinator asked for that we own,
        and NeedPosition for the prior partitions we wait on. With nothing to say, one owned
        position anyway: the coordinator answers with what others ask about only to a Heartbeat
        that carries positions, and an owner must learn that it is asked."""
        entries: dict[TopicPartition, tuple[bool, int]] = {}
        for tp in self.asked:
            if tp in own_positions:
                entries[tp] = (False, own_positions[tp])
        for tp in self.wanted(own_positions):
            entries[tp] = (True, entries.get(tp, (False, -1))[1])
        if not entries and own_positions:
            tp = min(own_positions)
            entries[tp] = (False, own_positions[tp])
        out: HeartbeatEntries = {}
        for tp, (need, position) in sorted(entries.items()):
            out.setdefault(tp.topic, []).append((tp.partition, need, position))
        return out

    def absorb_heartbeat(self, entries: HeartbeatEntries) -> None:
        """Take a Heartbeat answer: the group's positions we asked for, and the partitions the
        coordinator wants positions of (NeedPosition), which replace the previous set."""
        asked: set[TopicPartition] = set()
        for topic, partitions in entries.items():
            for partition, need, position in partitions:
                tp = TopicPartition(topic, partition)
                if need:
                    asked.add(tp)
                if position >= 0:
                    self.learn(tp, position)
        self.asked = asked
