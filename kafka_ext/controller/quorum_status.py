"""What DescribeQuorum (55) reports about the `__cluster_metadata` quorum: Kafka's QuorumInfo.

`QuorumStatus` is a snapshot the controller exposes through a `QuorumStatusSource`. Today the
source is `LocalQuorum`: one combined node that is its own quorum, the leader of every epoch
of its log. The Raft core (issue 13) feeds the same object from its leader state later, so the
DescribeQuorum handler and `kafka-ext metadata-quorum` do not change.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

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
