"""Partition: one hosted replica of a partition, leader or follower (Kafka's Partition).

The leader keeps what it knows of each follower (its log end offset, from the offset it fetches
at, and when it last caught up), and from them the high watermark and the ISR:

- the high watermark is the smallest log end offset among the *maximal* ISR: the committed ISR
  together with members an AlterPartition in flight would add. A shrink in flight keeps the
  committed, larger ISR, so the leader goes on waiting for a follower until the controller has
  committed its removal (KIP-497's rule: a leader never acts on an ISR that is not committed);
- a follower is out of sync when its end offset is behind the leader's and it has not caught up
  for `replica.lag.time.max.ms`; it may join when it has reached the high watermark and the
  start of the leader's epoch (Kafka's `isFollowerInSync`), and only while the metadata shows
  its broker eligible (`isr_ineligibility`, Kafka's `isReplicaIsrEligible`);
- a proposal to add a follower that the controller refused is not made again for that follower
  until the metadata changes (the partition's epochs here; ReplicaManager forgets the refusal
  when its broker's registration changes) or a backoff passes (`IsrJoinRefusal`), so a
  follower the controller will not take is not proposed on every fetch.

No I/O here: ReplicaManager drives it on the event loop, and the clock comes in as arguments.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.protocol.errors import ErrorCode, KafkaError

UNKNOWN_OFFSET = -1
NO_BROKER_EPOCH = -1  # a fetch that names no broker epoch (before Fetch v15): not checked
# After a refused proposal to add a follower, the wait before proposing it again in unchanged
# metadata: doubled on each refusal up to the max (Kafka's retry.backoff.ms and
# retry.backoff.max.ms defaults). New metadata about the partition or the broker ends it.
ISR_JOIN_BACKOFF_MS = 100
ISR_JOIN_BACKOFF_MAX_MS = 1000


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower since it became leader."""

    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    leader_end_offset_at_last_fetch: int = UNKNOWN_OFFSET
    # The broker epoch its last fetch carried (KIP-903): which incarnation of it is fetching.
    broker_epoch: int = NO_BROKER_EPOCH

    def record_fetch(self, fetch_offset: int, log_start_offset: int, leader_end_offset: int,
                     now_ms: float, broker_epoch: int = NO_BROKER_EPOCH) -> None:
        """Kafka's Replica.updateFetchState: caught up now when it asked for the leader's end,
        caught up at its previous fetch when it has reached what the leader had then."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.leader_end_offset_at_last_fetch >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.leader_end_offset_at_last_fetch = leader_end_offset
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch


@dataclass(frozen=True, slots=True)
class IsrJoinRefusal:
    """The controller refused to add a follower to the ISR: the partition's epochs it was
    refused in, and when the leader may propose it again anyway."""

    leader_epoch: int
    partition_epoch: int
    retry_at_ms: float
    backoff_ms: float


def isr_ineligibility(registration: Any, fetch_broker_epoch: int) -> str | None:
    """Why the metadata keeps a caught-up follower out of the ISR, or None when it may join:
    its broker is not registered, fenced or shutting down, or its fetches come from another
    incarnation than the registered one (KIP-903; a fetch without an epoch is not checked).
    The controller refuses such a member (INELIGIBLE_REPLICA), so it is not proposed."""
    if registration is None:
        return "not registered"
    if registration.fenced:
        return "fenced"
    if registration.in_controlled_shutdown:
        return "shutting down"
    if fetch_broker_epoch != NO_BROKER_EPOCH and fetch_broker_epoch != registration.broker_epoch:
        return (f"fetching with broker epoch {fetch_broker_epoch}, registered with "
                f"{registration.broker_epoch}")
    return None


@dataclass(slots=True)
class Partition:
    """A hosted replica; guarded by the event loop."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    log: Any  # storage.log.UnifiedLog
    local_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()  # as committed in the metadata
    # The ISR an AlterPartition in flight proposes (None: none in flight).
    pending_isr: tuple[int, ...] | None = None
    # The leader's end offset when it took this epoch: a follower joins the ISR only past it.
    leader_epoch_start_offset: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # Followers the controller refused to add, held back until the metadata changes or a backoff
    # passes (replica id -> refusal).
    isr_join_refusals: dict[int, IsrJoinRefusal] = field(default_factory=dict)
    # acks=all produces waiting for the high watermark: (offset needed, future).
    hw_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    # CreateChunks is closing the active chunk here: appends wait (server/chunks.py).
    closing_chunk: bool = False

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def check_leader_epoch(self, requested: int) -> None:
        """KIP-320: a client ahead of our epoch is told to wait, one behind is fenced; -1 skips."""
        if requested == -1 or requested == self.leader_epoch:
            return
        if requested > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                             f"epoch {requested} is newer than ours ({self.leader_epoch})")
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"epoch {requested} is older than ours ({self.leader_epoch})")

    # -- leadership --------------------------------------------------------------------------

    def become_leader(self, now_ms: float) -> None:
        """A new leader epoch here: forget what earlier epochs knew of the followers; the ISR
        members count as caught up now (Kafka resets them so, and they have a full
        replica.lag.time.max.ms to show it)."""
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.assign_epoch_start_offset(self.leader_epoch, self.leader_epoch_start_offset)
        self.pending_isr = None
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0.0)
                          for r in self.replicas if r != self.local_id}
        self.isr_join_refusals = {}

    def track_replicas(self) -> None:
        """Follow the replica set as it changes under one leader epoch (reassignments): a new
        replica starts unknown, a removed one is forgotten."""
        for replica in self.replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = FollowerState()
        for replica in [r for r in self.followers if r not in self.replicas]:
            del self.followers[replica]
            self.isr_join_refusals.pop(replica, None)

    def fail_waiters(self, error: KafkaError) -> None:
        waiters, self.hw_waiters = self.hw_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)

    # -- followers, as the leader sees them --------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                              now_ms: float, broker_epoch: int = NO_BROKER_EPOCH
                              ) -> FollowerState:
        """A follower fetched at `fetch_offset`: it holds everything below it. NOT_LEADER_OR_
        FOLLOWER for a broker that is not a replica."""
        state = self.followers.get(replica_id)
        if state is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of "
                             f"{self.topic}-{self.partition}")
        state.record_fetch(fetch_offset, log_start_offset, self.log.log_end_offset, now_ms,
                           broker_epoch)
        return state

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int
                        ) -> tuple[int, int] | None:
        """KIP-320: where a follower's log stops matching ours, as (epoch, end offset) of the
        largest epoch we have at or below its last fetched one; None when it matches (or it
        sent no epoch)."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0:
            return None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def may_join_isr(self, replica_id: int) -> bool:
        """Whether the follower has caught up enough to join (the log's side of Kafka's
        needsExpandIsr; the metadata's side is `isr_ineligibility`)."""
        state = self.followers.get(replica_id)
        return (state is not None and replica_id not in self.maximal_isr
                and state.log_end_offset >= self.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset)

    def isr_join_held_back(self, replica_id: int, now_ms: float) -> bool:
        """Whether a refusal to add the follower still holds: made in the partition's epochs
        as they are now and its backoff not over. A refusal of earlier epochs is forgotten."""
        refusal = self.isr_join_refusals.get(replica_id)
        if refusal is None:
            return False
        if (refusal.leader_epoch != self.leader_epoch
                or refusal.partition_epoch != self.partition_epoch):
            del self.isr_join_refusals[replica_id]
            return False
        return now_ms < refusal.retry_at_ms

    def refuse_isr_join(self, replica_id: int, now_ms: float) -> float:
        """The controller refused to add the follower: hold it back for a backoff that doubles
        while the refusals come in the same metadata; returns the backoff (ms)."""
        previous = self.isr_join_refusals.get(replica_id)
        backoff_ms: float = ISR_JOIN_BACKOFF_MS
        if (previous is not None and previous.leader_epoch == self.leader_epoch
                and previous.partition_epoch == self.partition_epoch):
            backoff_ms = min(previous.backoff_ms * 2, ISR_JOIN_BACKOFF_MAX_MS)
        self.isr_join_refusals[replica_id] = IsrJoinRefusal(
            self.leader_epoch, self.partition_epoch, now_ms + backoff_ms, backoff_ms)
        return backoff_ms

    def out_of_sync_replicas(self, now_ms: float, max_lag_ms: int) -> list[int]:
        """ISR members that are behind and have not caught up for `max_lag_ms`."""
        return [r for r in self.isr if self.lags(r, now_ms, max_lag_ms)]

    def lags(self, replica: int, now_ms: float, max_lag_ms: int) -> bool:
        """Whether a follower is behind the log end and has not caught up for `max_lag_ms`
        (an ISR member would be shrunk out); never the leader itself."""
        state = self.followers.get(replica)
        return (state is not None and state.log_end_offset != self.log.log_end_offset
                and now_ms - state.last_caught_up_ms > max_lag_ms)

    def high_watermark_candidate(self) -> int:
        """The smallest end offset of the maximal ISR (the leader's own included)."""
        candidate = self.log.log_end_offset
        for replica in self.maximal_isr:
            state = self.followers.get(replica)
            if state is not None:
                candidate = min(candidate, state.log_end_offset)
        return int(candidate)

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark up to the candidate; True when it moved. Wakes the acks=all
        produces it satisfied."""
        candidate = self.high_watermark_candidate()
        if candidate <= self.log.high_watermark:
            return False
        self.log.high_watermark = candidate
        if self.hw_waiters:
            still = []
            for offset, future in self.hw_waiters:
                if offset <= candidate:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((offset, future))
            self.hw_waiters = still
        return True

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        """A future done once the high watermark reaches `offset` (failed if this replica stops
        leading the epoch first)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= offset:
            future.set_result(None)
        else:
            self.hw_waiters.append((offset, future))
        return future


def truncation_offset(plog: Any, epoch: int, end_offset: int) -> int:
    """Where a follower truncates when its leader answers DivergingEpoch (epoch, end_offset)
    (KIP-320): the lower of the leader's end of `epoch` and ours for the largest epoch we have
    at or below it; the next fetch, carrying our new last epoch, checks again."""
    our_epoch, our_end = plog.end_offset_for_epoch(epoch)
    target = end_offset if our_epoch < 0 else min(end_offset, our_end)
    return int(max(min(target, plog.log_end_offset), 0))
