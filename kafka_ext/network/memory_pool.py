"""The broker-wide budget for request bytes being read and queued: `queued.max.request.bytes`.

Mirrors Kafka's MemoryPool as its SocketServer uses it: every byte of a request that has
arrived (the part of a large frame read so far, and whole requests until their handlers have
answered) is charged here, and when the budget is spent, reading pauses on the connections
that want more (Kafka mutes those channels) until memory comes back. Two refinements over
Kafka's pool, which reserves a frame's declared size before reading it:

- bytes are charged as they arrive, so a lying size prefix takes nothing from the budget;
- every connection may hold `GUARANTEED_BYTES_PER_CONNECTION` whatever the pool says, so
  clients that park half-sent large requests cannot stop anyone's small requests (metadata,
  heartbeats, fetches, small produces).

Overdraft is bounded: a connection is paused after the read that spent the budget, so the
budget is exceeded by at most one socket read per connection plus the guaranteed bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# Every connection may hold this much of requests read and queued even when the pool is spent.
GUARANTEED_BYTES_PER_CONNECTION = 64 * 1024


class RequestMemoryPool:
    """Owned by the socket server; every method runs on the event loop.

    Invariant: `used_bytes` is the sum of what the live connections hold; a connection in
    `_muted` stopped reading for memory and is told (its callback) once the pool has room.
    """

    def __init__(self, capacity_bytes: int) -> None:
        # Kafka's convention: a negative capacity (its default, -1) is no limit.
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._muted: dict[object, Callable[[], None]] = {}
        self._wake_scheduled = False

    @property
    def exhausted(self) -> bool:
        return 0 <= self.capacity_bytes <= self.used_bytes

    @property
    def available_bytes(self) -> int:
        if self.capacity_bytes < 0:
            return -1
        return max(0, self.capacity_bytes - self.used_bytes)

    def may_read(self, held_bytes: int) -> bool:
        """Whether a connection that holds `held_bytes` may read more now."""
        return held_bytes < GUARANTEED_BYTES_PER_CONNECTION or not self.exhausted

    def charge(self, delta_bytes: int) -> None:
        """A connection holds `delta_bytes` more (negative: fewer)."""
        self.used_bytes += delta_bytes
        if delta_bytes < 0 and self._muted and not self.exhausted:
            self._schedule_wake()

    def mute(self, key: object, resume: Callable[[], None]) -> None:
        """`key` paused reading for memory: call `resume` once there is room again."""
        self._muted[key] = resume

    def forget(self, key: object) -> None:
        self._muted.pop(key, None)

    @property
    def muted_connections(self) -> int:
        return len(self._muted)

    def _schedule_wake(self) -> None:
        if not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        """Let the muted connections read again, oldest first, while there is room; each one
        checks the pool itself and mutes again if the room is gone."""
        self._wake_scheduled = False
        while self._muted and not self.exhausted:
            key = next(iter(self._muted))
            self._muted.pop(key)()
