"""The Raft RPCs as the sans-IO core sees them: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch
and FetchSnapshot (KIP-595, KIP-630, KIP-996), one frozen dataclass per request and response.

These carry only what the protocol decides on; the broker translates them to and from the wire
messages of the same names (cluster id, topic and partition framing are checked there).
`request_id` pairs a response with the request the core sent; stale answers are dropped by it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.errors import ErrorCode

ZERO_DIRECTORY_ID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica as KIP-853 names it: node id and the id of its metadata log dir. A zero
    directory id matches any directory (a static `controller.quorum.voters` quorum)."""

    id: int
    directory_id: uuid.UUID = ZERO_DIRECTORY_ID

    def matches(self, other: ReplicaKey) -> bool:
        return self.id == other.id and (self.directory_id == ZERO_DIRECTORY_ID
                                        or other.directory_id == ZERO_DIRECTORY_ID
                                        or self.directory_id == other.directory_id)


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position: `offset` is exclusive (an end offset), `epoch` the epoch of the entry
    just before it. Ordered as Raft compares logs: epoch first."""

    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class VoteRequest:
    request_id: int
    candidate_epoch: int  # with pre_vote: the epoch the prospective would stand in
    candidate: ReplicaKey
    voter: ReplicaKey
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    request_id: int
    error: ErrorCode
    epoch: int
    leader_id: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    request_id: int
    epoch: int
    leader_id: int
    voter: ReplicaKey


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    request_id: int
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    request_id: int
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]  # most caught-up first


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    request_id: int
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    request_id: int
    epoch: int  # the replica's current leader epoch
    replica: ReplicaKey
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    request_id: int
    error: ErrorCode
    epoch: int
    leader_id: int
    high_watermark: int = -1
    log_start_offset: int = 0
    records: Any = None  # opaque to the core: what RaftLog.read returned
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    request_id: int
    epoch: int
    replica: ReplicaKey
    snapshot_id: OffsetAndEpoch
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    request_id: int
    error: ErrorCode
    epoch: int
    leader_id: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = 0
    position: int = 0
    data: bytes = b""


RaftRequest = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
               | FetchSnapshotRequest)
RaftResponse = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                | FetchSnapshotResponse)
RaftMessage = RaftRequest | RaftResponse
