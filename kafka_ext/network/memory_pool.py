"""The broker-wide budget for request bytes being read and queued: `queued.max.request.bytes`.

Mirrors Kafka's MemoryPool as its SocketServer uses it: every byte of a request that has
arrived (the part of a large frame read so far, and whole requests until their handlers have
answered) is charged here, and when the budget is spent, reading pauses on the connections
that want more (Kafka mutes those channels) until memory comes back. Kafka reserves a frame's
declared size before reading any of it; here bytes are charged as they arrive, so a lying
size prefix takes nothing from the budget. Two rules keep that from stalling anyone:

- every connection may hold `GUARANTEED_BYTES_PER_CONNECTION` whatever the pool says, so
  clients that park half-sent large requests cannot stop anyone's small requests (metadata,
  heartbeats, fetches, small produces);
- half-read frames cannot wait for each other forever: while the pool is spent, one connection
  at a time (the finisher, oldest first) may read on until its frame is whole, and a finisher
  that sends nothing for a sweep (`check_finisher`, every second) hands the turn to the next.
  Finishers overdraw the pool by at most `finisher_overdraft_bytes` in all (one largest
  request, `socket.request.max.bytes`): past it, frames wait for memory to come back, as
  they wait in Kafka for a reservation.

Overdraft is bounded: the budget is exceeded by at most one socket read per connection, the
guaranteed bytes, and `finisher_overdraft_bytes`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# Every connection may hold this much of requests read and queued even when the pool is spent.
GUARANTEED_BYTES_PER_CONNECTION = 64 * 1024


class RequestMemoryPool:
    """Owned by the socket server; every method runs on the event loop.

    Invariant: `used_bytes` is the sum of what the live connections hold; a connection in
    `_muted` stopped reading for memory and is told (its callback) when it may try again;
    `_finisher` is the one connection reading past the budget to complete its frame.
    """

    def __init__(self, capacity_bytes: int, finisher_overdraft_bytes: int = 0) -> None:
        # Kafka's convention: a negative capacity (its default, -1) is no limit.
        self.capacity_bytes = capacity_bytes
        self.finisher_overdraft_bytes = finisher_overdraft_bytes
        self.used_bytes = 0
        self._muted: dict[object, Callable[[], None]] = {}
        self._finisher: object | None = None
        self._finisher_resume: Callable[[], None] | None = None
        self._finisher_moved = False  # bytes arrived for the finisher since the last check
        self._wake_scheduled = False

    @property
    def exhausted(self) -> bool:
        return 0 <= self.capacity_bytes <= self.used_bytes

    @property
    def available_bytes(self) -> int:
        if self.capacity_bytes < 0:
            return -1
        return max(0, self.capacity_bytes - self.used_bytes)

    @property
    def muted_connections(self) -> int:
        return len(self._muted)

    def may_read(self, key: object, held_bytes: int, reading_frame: bool,
                 resume: Callable[[], None]) -> bool:
        """Whether connection `key`, holding `held_bytes` (`reading_frame`: a large frame is
        half read), may read now; if not, `resume` is called when it may try again."""
        if held_bytes < GUARANTEED_BYTES_PER_CONNECTION or not self.exhausted:
            self._muted.pop(key, None)
            return True
        overdrawn = self.used_bytes - self.capacity_bytes >= self.finisher_overdraft_bytes
        if key is self._finisher and not overdrawn:
            return True
        if reading_frame and self._finisher is None and not overdrawn:
            self._muted.pop(key, None)
            self._finisher, self._finisher_resume = key, resume
            self._finisher_moved = True
            return True
        self._muted[key] = resume
        return False

    def charge(self, key: object, delta_bytes: int) -> None:
        """Connection `key` holds `delta_bytes` more (negative: fewer)."""
        self.used_bytes += delta_bytes
        if key is self._finisher and delta_bytes > 0:
            self._finisher_moved = True
        if delta_bytes < 0 and self._muted and not self.exhausted:
            self._schedule_wake()

    def frame_done(self, key: object) -> None:
        """Connection `key` has no half-read frame any more (complete, or the connection
        closed): if it was the finisher, the next one may take the turn."""
        if key is self._finisher:
            self._finisher = self._finisher_resume = None
            if self._muted:
                self._schedule_wake()

    def forget(self, key: object) -> None:
        """Connection `key` is gone."""
        self._muted.pop(key, None)
        self.frame_done(key)

    def check_finisher(self) -> None:
        """Called every sweep: a finisher that received nothing since the last check (a client
        that stalled mid-frame) gives its turn to the oldest muted connection."""
        if self._finisher is None:
            return
        if self._finisher_moved or not self._muted:
            self._finisher_moved = False
            return
        stalled, resume = self._finisher, self._finisher_resume
        self._finisher = self._finisher_resume = None
        self._wake()  # the oldest muted connection with a half-read frame takes the turn
        if resume is not None and self._finisher is not stalled:
            resume()  # the stalled one mutes itself behind the others
        del stalled

    def _schedule_wake(self) -> None:
        if not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        """Let the muted connections try again, oldest first, while there is room or no
        finisher; each one asks `may_read` itself and mutes again if it may not read."""
        self._wake_scheduled = False
        for key in list(self._muted):
            if self.exhausted and self._finisher is not None:
                break
            resume = self._muted.pop(key, None)
            if resume is not None:
                resume()
