"""ShareSessionCache: the share sessions of the members fetching from this broker (KIP-932).

Mirrors Kafka's ShareSessionCache. A share session belongs to one (group, member) and lists the
share-partitions the member fetches here; ShareFetch with epoch 0 opens it (replacing any
earlier one), each ShareFetch or ShareAcknowledge after it carries the next epoch (wrapping
from 2^31-1 to 1), epoch -1 closes it. A session lives on the connection that opened it: when
that connection goes, or the session is idle for the group's session timeout, it closes, and
the share-partition manager releases the member's acquired records. At most
`group.share.max.share.sessions` are open; one more is SHARE_SESSION_LIMIT_REACHED.
Loop-owned.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka_ext.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = (1 << 31) - 1

# (topic id, partition) -> topic name: a session's share-partitions, in the order they came
SessionPartitions = dict[tuple[uuid.UUID, int], str]


@dataclass(slots=True, eq=False)
class ShareSession:
    group_id: str
    member_id: str
    connection: object                # the KafkaConnection that opened it
    epoch: int = 1                    # the epoch the next request must carry
    partitions: SessionPartitions = field(default_factory=dict)
    last_used_s: float = 0.0
    # share-partitions this session has read from: loaded here already, or loaded before
    fetched: set[tuple[uuid.UUID, int]] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id

    def advance(self) -> None:
        self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def open(self, group_id: str, member_id: str, connection: object, now_s: float
             ) -> tuple[ShareSession, ShareSession | None]:
        """A new session for epoch 0, and the one it replaces (whose records go back)."""
        replaced = self.sessions.pop((group_id, member_id), None)
        if replaced is None and len(self.sessions) >= self.max_sessions:
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             f"{self.max_sessions} share sessions are open on this broker "
                             "(group.share.max.share.sessions)")
        session = ShareSession(group_id, member_id, connection, last_used_s=now_s)
        self.sessions[session.key] = session
        return session, replaced

    def get(self, group_id: str, member_id: str, epoch: int, now_s: float) -> ShareSession:
        """The member's session for a request at `epoch` (> 0 or -1), which the caller then
        advances or closes."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"member {member_id} of share group {group_id} has no share "
                             "session on this broker")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"share session epoch {epoch}, expected {session.epoch}")
        session.last_used_s = now_s
        return session

    def close(self, session: ShareSession) -> bool:
        """Remove `session`; False when it was already gone or replaced."""
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
            return True
        return False

    def of_connection(self, connection: object) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection is connection]

    def idle(self, now_s: float, timeout_s_of: dict[str, float]) -> Iterable[ShareSession]:
        """Sessions unused for longer than their group's session timeout."""
        return [s for s in self.sessions.values()
                if now_s - s.last_used_s > timeout_s_of.get(s.group_id, 45.0)]
