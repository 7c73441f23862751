"""The `quorum-state` file: a voter's durable election state (Kafka's FileQuorumStateStore).

A node writes it before it acts on a new epoch, leader or vote, so a restart never votes
twice in one epoch or forgets an epoch it saw. Kafka's JSON layout (QuorumStateData) is kept
so operators can read it the same way.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from kafka_ext.raft.messages import ZERO_DIRECTORY_ID, ReplicaKey

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 1  # QuorumStateData v1: VotedDirectoryId, no CurrentVoters


@dataclass(frozen=True, slots=True)
class ElectionState:
    """Epoch, the leader known in it (-1: none) and the vote cast in it (None: none)."""

    epoch: int = 0
    leader_id: int = -1
    voted: ReplicaKey | None = None

    def encode(self) -> bytes:
        voted = self.voted or ReplicaKey(-1)
        body = {"leaderId": self.leader_id, "leaderEpoch": self.epoch, "votedId": voted.id,
                "votedDirectoryId": str(voted.directory_id), "data_version": DATA_VERSION}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> ElectionState:
        """Parse a quorum-state file; raises ValueError naming what is wrong."""
        try:
            body = json.loads(data)
            voted_id = int(body.get("votedId", -1))
            directory = uuid.UUID(body.get("votedDirectoryId") or str(ZERO_DIRECTORY_ID))
            state = cls(int(body["leaderEpoch"]), int(body.get("leaderId", -1)),
                        ReplicaKey(voted_id, directory) if voted_id >= 0 else None)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"corrupt quorum-state: {exc}") from None
        if state.epoch < 0:
            raise ValueError(f"corrupt quorum-state: epoch {state.epoch}")
        return state
