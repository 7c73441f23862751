"""Incremental fetch sessions (KIP-227): the broker remembers a fetcher's partitions.

A full fetch request names every partition; within a session, later requests name only the
partitions whose position changed, and responses carry only partitions with news (records, or
a changed high watermark, last stable offset or log start offset, or an error). Guarded by the
event loop. Mirrors Kafka's FetchSessionCache, with least-recently-used eviction.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka_ext.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SESSIONLESS_ID = 0

PartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass(slots=True)
class CachedPartition:
    """What the session knows of one partition: where to read and what was last answered."""

    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def note_answer(self, high_watermark: int, last_stable_offset: int,
                    log_start_offset: int) -> bool:
        """Record what is being answered; True if it differs from the last answer."""
        changed = (high_watermark != self.high_watermark
                   or last_stable_offset != self.last_stable_offset
                   or log_start_offset != self.log_start_offset)
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        return changed


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)
    last_used_s: float = 0.0


class FetchSessionCache:
    """Owned by the broker; at most `max_sessions` sessions.

    When full, the least recently used session makes room only if it has been idle for
    `min_evictable_idle_s`; otherwise the new fetcher gets no session (id 0) and fetches in
    full, so busy fetchers never push each other out in turn (Kafka's cache behaves alike).
    """

    def __init__(self, max_sessions: int = 1000, min_evictable_idle_s: float = 60.0,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.min_evictable_idle_s = min_evictable_idle_s
        self._clock_s = clock_s
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 30))

    def create(self) -> FetchSession | None:
        """A new session, or None when the cache is full of recently used ones."""
        if self.max_sessions <= 0:
            return None
        if len(self._sessions) >= self.max_sessions:
            oldest = next(iter(self._sessions.values()))
            if self._clock_s() - oldest.last_used_s < self.min_evictable_idle_s:
                return None
            self._sessions.popitem(last=False)
        session_id = next(self._ids) & 0x7FFFFFFF or next(self._ids)
        session = FetchSession(session_id, epoch=1, last_used_s=self._clock_s())
        self._sessions[session_id] = session
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def lookup(self, session_id: int, epoch: int) -> FetchSession:
        """The session for an incremental request; raises with Kafka's session errors."""
        session = self._sessions.get(session_id)
        if session is None:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"session {session_id}")
        if session.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                             f"session {session_id} expects epoch {session.epoch}, got {epoch}")
        self._sessions.move_to_end(session_id)
        session.last_used_s = self._clock_s()
        return session

    def __len__(self) -> int:
        return len(self._sessions)
