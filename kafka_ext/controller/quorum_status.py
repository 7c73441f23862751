"""What DescribeQuorum (55) reports about the `__cluster_metadata` quorum: Kafka's QuorumInfo.

`QuorumStatus` is a snapshot the controller exposes through a `QuorumStatusSource`:
`RaftQuorumStatus` reads it from the node's RaftManager (the leader's view of every replica,
as Kafka's LeaderState reports it). `LocalQuorum` describes a node that is its own quorum
without one (tools and tests).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kafka_ext.raft.raft_manager import RaftManager

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no directory id
# The epoch the single-node controller appends its metadata batches at (no election yet).
LOCAL_LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One voter or observer as the leader sees it; timestamps are -1 when unknown."""

    replica_id: int
    directory_id: uuid.UUID
    log_end_offset: int
    last_fetch_timestamp_ms: int = -1
    last_caught_up_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class VoterEndpoint:
    """A listener a voter is reached on (DescribeQuorum v2 Nodes, KIP-853)."""

    node_id: int
    listener_name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    """The leader's view of the quorum at one moment."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaStatus, ...]
    observers: tuple[ReplicaStatus, ...]
    endpoints: tuple[VoterEndpoint, ...]


class QuorumStatusSource(Protocol):
    """Whatever knows the quorum: the single-node controller now, the Raft core later."""

    def status(self, now_ms: int) -> QuorumStatus: ...


class LocalQuorum:
    """A single combined node voting for itself: it leads, and the metadata log it wrote is
    the whole quorum's log (its high watermark is its log end offset once flushed)."""

    __slots__ = ("node_id", "directory_id", "_log_end_offset", "_high_watermark", "_endpoints")

    def __init__(self, node_id: int, directory_id: uuid.UUID, log_end_offset: Callable[[], int],
                 high_watermark: Callable[[], int],
                 endpoints: Callable[[], tuple[VoterEndpoint, ...]]) -> None:
        """`directory_id` is the metadata log dir's for a KIP-853 quorum, ZERO_UUID for a static
        one (Kafka reports no directory for controller.quorum.voters entries)."""
        self.node_id = node_id
        self.directory_id = directory_id
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._endpoints = endpoints

    def status(self, now_ms: int) -> QuorumStatus:
        # Kafka's leader reports itself as fetched and caught up now.
        leader = ReplicaStatus(self.node_id, self.directory_id, self._log_end_offset(),
                               now_ms, now_ms)
        return QuorumStatus(self.node_id, LOCAL_LEADER_EPOCH, self._high_watermark(), (leader,),
                            (), self._endpoints())


class RaftQuorumStatus:
    """The quorum as this node's Raft core sees it. On the leader every voter and observer
    has its fetch position and times; elsewhere only the leader and epoch are known, and
    the node reports itself."""

    __slots__ = ("raft", "directory_id", "_endpoints")

    def __init__(self, raft: RaftManager, directory_id: uuid.UUID,
                 endpoints: Callable[[], tuple[VoterEndpoint, ...]]) -> None:
        self.raft = raft
        self.directory_id = directory_id
        self._endpoints = endpoints

    def status(self, now_ms: int) -> QuorumStatus:
        raft = self.raft
        core = raft.core
        # The core keeps monotonic milliseconds; DescribeQuorum reports wall-clock ones.
        shift_ms = now_ms - int(time.monotonic() * 1000)

        def wall(ms: int) -> int:
            return ms + shift_ms if ms >= 0 else -1

        if core is None or not raft.is_leader:
            own = ReplicaStatus(raft.local.id, self.directory_id, raft.log.log_end_offset)
            voters = tuple(ReplicaStatus(v.id, v.directory_id, -1) if v.id != raft.local.id
                           else own for v in raft.voters)
            return QuorumStatus(raft.leader_id, raft.epoch, raft.high_watermark, voters, (),
                                self._endpoints())
        # Kafka's leader reports itself as fetched and caught up now.
        voters = tuple(ReplicaStatus(r.key.id, r.key.directory_id, r.end_offset,
                                     now_ms, now_ms) if r.key.id == raft.local.id
                       else ReplicaStatus(r.key.id, r.key.directory_id, r.end_offset,
                                          wall(r.last_fetch_ms), wall(r.last_caught_up_ms))
                       for r in core.replicas.values())
        observers = tuple(ReplicaStatus(r.key.id, r.key.directory_id, r.end_offset,
                                        wall(r.last_fetch_ms), wall(r.last_caught_up_ms))
                          for r in core.observers.values())
        return QuorumStatus(core.leader_id, core.epoch, core.high_watermark, voters, observers,
                            self._endpoints())
