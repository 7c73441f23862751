"""ProducerIdManager: hands out producer ids from blocks the controller reserves.

Mirrors Kafka's RPCProducerIdManager: ids come in blocks of PRODUCER_ID_BLOCK_SIZE from the
controller (ProducerIdsRecord in the metadata log), so they never repeat, even across restarts;
the next block is fetched in the background once 90% of the current one is used. Loop-owned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kafka_ext.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

Allocator = Callable[[int], Awaitable[int]]  # (count) -> first id of a new block


class ProducerIdManager:
    """The current block [next, end) and at most one prefetched block; loop-owned."""

    def __init__(self, allocate: Allocator, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._allocate = allocate
        self.block_size = block_size
        self._prefetch_below = max(block_size // 10, 1)
        self._next = 0
        self._end = 0
        self._prefetched: tuple[int, int] | None = None
        self._fetching: asyncio.Task[None] | None = None

    @property
    def available(self) -> int:
        """Ids left in the current and prefetched blocks."""
        spare = 0 if self._prefetched is None else self._prefetched[1] - self._prefetched[0]
        return self._end - self._next + spare

    async def generate(self) -> int:
        """A new producer id, waiting for a block from the controller if none is left."""
        await self.ensure_available()
        return self.next_id()

    async def ensure_available(self) -> None:
        """Return once at least one id is in hand (one controller round trip at most)."""
        while self.available == 0:
            self._start_fetch()
            assert self._fetching is not None
            await asyncio.shield(self._fetching)

    def next_id(self) -> int:
        """The next id without waiting; COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka
        answers) while the next block is still on its way."""
        if self._next >= self._end:
            if self._prefetched is None:
                self._start_fetch()
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                 "waiting for the next producer id block")
            self._next, self._end = self._prefetched
            self._prefetched = None
        producer_id = self._next
        self._next += 1
        if self._end - self._next < self._prefetch_below:
            self._start_fetch()
        return producer_id

    def _start_fetch(self) -> None:
        if self._prefetched is not None or (self._fetching is not None
                                            and not self._fetching.done()):
            return
        self._fetching = asyncio.get_running_loop().create_task(self._fetch())
        # A failure is logged in _fetch and raised to whoever waits; nobody may be waiting.
        self._fetching.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _fetch(self) -> None:
        try:
            first = await self._allocate(self.block_size)
        except KafkaError as exc:
            log.error("could not allocate a producer id block: %s", exc)
            raise
        if self._next >= self._end:
            self._next, self._end = first, first + self.block_size
        else:
            self._prefetched = (first, first + self.block_size)
