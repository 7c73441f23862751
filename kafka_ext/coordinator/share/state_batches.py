"""Combining state batches: Kafka's PersisterStateBatchCombiner, as one sweep.

A share-partition's state batches never overlap. Written batches are combined with the stored
ones so that every offset keeps the batch of the highest (delivery count, delivery state),
Kafka's rule: a record's delivery count only grows and its terminal states (ACKNOWLEDGED 2,
ARCHIVED 4) rank above AVAILABLE 0, so in a share-partition's life the newer state always wins,
and a write that arrives twice or late cannot take a record back. Offsets below the start
offset are dropped (a batch the start offset falls inside is cut there), and neighbouring
batches of equal (state, count) become one, so the result is the same whatever the order of
the writes it came from.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kafka_ext.share.persister import StateBatch

NO_START_OFFSET = -1


def combine_state_batches(stored: Iterable[StateBatch], written: Iterable[StateBatch],
                          start_offset: int = NO_START_OFFSET) -> tuple[StateBatch, ...]:
    """The non-overlapping, maximally merged batches of `stored` and `written`, in offset
    order, cut below `start_offset` (-1: nothing is cut)."""
    batches = [b for b in (*stored, *written) if b.last_offset >= b.first_offset]
    if start_offset != NO_START_OFFSET:
        batches = [b if b.first_offset >= start_offset
                   else StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in batches if b.last_offset >= start_offset]
    if not batches:
        return ()
    batches.sort(key=lambda b: b.first_offset)
    # Every offset where the covering set can change; between two of them one batch wins.
    points = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    active: list[tuple[int, int, int, int]] = []  # (-count, -state, -last offset, index)
    nxt = 0
    for i, point in enumerate(points[:-1]):
        while nxt < len(batches) and batches[nxt].first_offset == point:
            b = batches[nxt]
            heapq.heappush(active, (-b.delivery_count, -int(b.delivery_state), -b.last_offset,
                                    nxt))
            nxt += 1
        while active and -active[0][2] < point:  # ended before this segment
            heapq.heappop(active)
        if not active:
            continue  # a gap no batch covers
        winner = batches[active[0][3]]
        last = points[i + 1] - 1
        prev = out[-1] if out else None
        if (prev is not None and prev.last_offset + 1 == point
                and prev.delivery_state == winner.delivery_state
                and prev.delivery_count == winner.delivery_count):
            out[-1] = StateBatch(prev.first_offset, last, prev.delivery_state,
                                 prev.delivery_count)
        else:
            out.append(StateBatch(point, last, winner.delivery_state, winner.delivery_count))
    return tuple(out)
