"""SharePartitionManager: the share-partitions this broker leads, and their share sessions.

Mirrors Kafka's SharePartitionManager (KIP-932). A share-partition is loaded on the first
ShareFetch that names it, from the state the persister keeps (`persister.py`): a start offset
the group coordinator left unresolved (-1) is resolved here with the group's
`share.auto.offset.reset` and written back. Reads go through the partition's source
(`share_source.py`: its log and inactive chunks, or its WAL objects when diskless) like a
consumer's fetch (up to the high watermark, or the last stable offset for a read_committed
group) and hand out the batches as memoryview slices of what was read, never decoded:
acquisition looks only at batch headers. Acknowledgements are persisted before they are
answered; lock expiries and releases are persisted after they apply. Writes of one
share-partition go out one at a time, in order.

A share-partition is dropped when this broker stops holding its partition's share-partitions
(a new leader, or a diskless coordinator's new leader, loads the persisted state), when its topic goes, when a write is fenced (its group's offsets
were altered or deleted), or once no session names it and it holds no lock. Loop-owned.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.server.metrics import LatencyHistogram
from kafka_ext.share.group_config import share_group_configs
from kafka_ext.share.persister import (
    UNINITIALIZED_START_OFFSET,
    DeliveryState,
    SharePartitionKey,
    StateBatch,
)
from kafka_ext.share.share_partition import (
    AcknowledgeType,
    AcquiredRange,
    BatchInfo,
    PlannedAcknowledgement,
    SharePartition,
)
from kafka_ext.share.share_session import ShareSession, ShareSessionCache
from kafka_ext.share.share_source import ShareSource, SourceRead, open_source, share_owner

log = logging.getLogger(__name__)

# How often acquisition locks are checked for expiry, and idle sessions for their timeout.
_SWEEP_INTERVAL_S = 0.1
_IDLE_SWEEP_INTERVAL_S = 1.0

# (group id, topic, partition)
ShareKey = tuple[str, str, int]


@dataclass(slots=True)
class ShareRead:
    """What one share-partition handed out to a fetch: batches and the acquired ranges."""

    records: list[memoryview | bytes]
    acquired: list[AcquiredRange]

    @property
    def nbytes(self) -> int:
        return sum(len(r) for r in self.records)


class _Loaded:
    """A share-partition and what serialises its writes."""

    __slots__ = ("sp", "key", "source", "leader_epoch", "write_lock", "topic", "partition",
                 "persisted_start")

    def __init__(self, sp: SharePartition, key: SharePartitionKey, source: ShareSource,
                 topic: str, partition: int) -> None:
        self.sp = sp
        self.key = key
        self.source = source
        self.leader_epoch = source.leader_epoch
        self.write_lock = asyncio.Lock()
        self.topic = topic
        self.partition = partition
        self.persisted_start = sp.start_offset


class SharePartitionManager:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.sessions = ShareSessionCache(int(broker.config.values.get(
            "group.share.max.share.sessions", 2000)))
        self._partitions: dict[ShareKey, _Loaded] = {}
        self._loading: dict[ShareKey, asyncio.Future[_Loaded]] = {}
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        # Kafka's ShareGroupMetrics (server/metrics.py): records acknowledged per type, and
        # how long share-partitions took to load.
        self.record_acknowledgements: Counter[str] = Counter()
        self.partition_load_time = LatencyHistogram()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.broker.controller.listeners.append(self._on_image)
        self._task = asyncio.ensure_future(self._sweep())

    async def stop(self) -> None:
        listeners = self.broker.controller.listeners
        if self._on_image in listeners:
            listeners.remove(self._on_image)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def _on_image(self, old: Any, new: Any) -> None:
        """Drop share-partitions whose partition this broker no longer holds at their epoch.
        One leader epoch more with this broker still the leader (KIP-253's bump of every
        partition when partitions are added) keeps the share-partition and its locks, as
        Kafka keeps them while its broker stays leader: a single step up cannot have given
        the partition to another broker in between, which a larger one may have."""
        for key, loaded in list(self._partitions.items()):
            now = share_owner(new, loaded.topic, loaded.partition)
            if (now == (self.broker.node_id, loaded.leader_epoch + 1)
                    and self._holds(old, loaded)):
                loaded.leader_epoch = now[1]
                loaded.source.leader_epoch = now[1]
            if not self._holds(new, loaded):
                log.info("share-partition %s-%d of group %s: no longer led here",
                         loaded.topic, loaded.partition, key[0])
                del self._partitions[key]

    def _holds(self, image: Any, loaded: _Loaded) -> bool:
        """Whether this broker still holds `loaded`'s partition at the epoch it was loaded at."""
        topic = image.topics_by_name.get(loaded.topic)
        return (topic is not None and topic.topic_id == loaded.key.topic_id
                and share_owner(image, loaded.topic, loaded.partition)
                == (self.broker.node_id, loaded.leader_epoch))

    # -- loading -------------------------------------------------------------------------

    async def share_partition(self, group_id: str, topic: str, topic_id: uuid.UUID,
                              partition: int) -> _Loaded:
        """The loaded share-partition, loading it on first use. NOT_LEADER_OR_FOLLOWER when
        this broker does not hold the partition's share-partitions; the persister's errors as
        they come."""
        source = open_source(self.broker, topic, partition)
        key = (group_id, topic, partition)
        loaded = self._partitions.get(key)
        if loaded is not None and loaded.leader_epoch == source.leader_epoch:
            return loaded
        pending = self._loading.get(key)
        if pending is None:
            pending = self._loading[key] = asyncio.ensure_future(
                self._load(group_id, topic, topic_id, partition, source))
            pending.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(pending)

    async def _load(self, group_id: str, topic: str, topic_id: uuid.UUID, partition: int,
                    source: ShareSource) -> _Loaded:
        started = time.perf_counter()
        key = SharePartitionKey(group_id, topic_id, partition)
        config = share_group_configs(self.broker, group_id)
        persister = self.broker.share_persister
        state = await persister.read(key, source.leader_epoch)
        sp = SharePartition.from_state(
            state, lock_duration_ms=config.record_lock_duration_ms,
            delivery_count_limit=config.delivery_count_limit,
            max_in_flight_records=config.partition_max_record_locks)
        if state.start_offset == UNINITIALIZED_START_OFFSET:
            start = await source.reset_offset(config.auto_offset_reset)
            sp = SharePartition(state.state_epoch, start,
                                lock_duration_ms=config.record_lock_duration_ms,
                                delivery_count_limit=config.delivery_count_limit,
                                max_in_flight_records=config.partition_max_record_locks)
            await persister.write(key, sp.state_epoch, source.leader_epoch, start, [], 0)
            log.info("share group %s starts %s-%d at offset %d (share.auto.offset.reset=%s)",
                     group_id, topic, partition, start, config.auto_offset_reset.strategy)
        log_start, log_end = source.log_start_offset(), source.end_offset()
        if log_start is not None:
            sp.move_start_to(log_start)
        if log_end is not None and sp.start_offset > log_end:  # truncated or recreated
            sp = SharePartition(sp.state_epoch, log_end,
                                lock_duration_ms=sp.lock_duration_ms,
                                delivery_count_limit=sp.delivery_count_limit,
                                max_in_flight_records=sp.max_in_flight_records)
        loaded = _Loaded(sp, key, source, topic, partition)
        self._partitions[(group_id, topic, partition)] = loaded
        self.partition_load_time.observe((time.perf_counter() - started) * 1000)
        return loaded

    # -- reads ---------------------------------------------------------------------------

    async def read(self, loaded: _Loaded, member_id: str, max_bytes: int, max_records: int,
                   min_one_batch: bool) -> ShareRead:
        """Acquire for `member_id` from the partition's source, within `max_bytes` (the first
        batch may pass it when `min_one_batch`) and `max_records` (whole batches)."""
        sp = loaded.sp
        if not self._holds(self.broker.controller.image, loaded):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{loaded.topic}-{loaded.partition} changed leader epoch")
        source = loaded.source
        known_start = source.log_start_offset()
        if known_start is not None and sp.move_start_to(known_start):
            self._persist_soon(loaded, [])
        config = share_group_configs(self.broker, loaded.key.group_id)
        read_committed = config.isolation_level == READ_COMMITTED
        for _ in range(2):  # again once when the read finds the start moved past the offset
            if not sp.can_acquire() or max_records <= 0:
                return ShareRead([], [])
            fetch_offset = sp.next_fetch_offset()
            got, log_start = await source.read(fetch_offset, max_bytes,
                                               read_committed=read_committed,
                                               min_one_batch=min_one_batch)
            if sp.move_start_to(log_start):
                self._persist_soon(loaded, [])
            if got.batches:
                return self._acquire(sp, member_id, got, max_records)
            if log_start <= fetch_offset:
                break
        return ShareRead([], [])

    def _acquire(self, sp: SharePartition, member_id: str, got: SourceRead,
                 max_records: int) -> ShareRead:
        aborted = _AbortedTransactions(got.aborted)
        batches = [(BatchInfo(h.base_offset, h.last_offset, aborted.skips(h)), buffers)
                   for h, buffers in got.batches]
        acquired = sp.acquire(member_id, (b for b, _ in batches), max_records,
                              time.monotonic() * 1000)
        # The batches holding an acquired offset, whole.
        records = [buffer for batch, buffers in batches
                   if any(r.first_offset <= batch.last_offset
                          and batch.base_offset <= r.last_offset for r in acquired)
                   for buffer in buffers]
        return ShareRead(records, acquired)

    # -- acknowledgements ----------------------------------------------------------------

    async def acknowledge(self, loaded: _Loaded, member_id: str,
                          batches: Iterable[tuple[int, int, list[int]]]) -> None:
        """Apply a member's acknowledgements once they are persisted; KafkaError otherwise
        (INVALID_RECORD_STATE, INVALID_REQUEST, or the persister's error)."""
        sp = loaded.sp
        plan = sp.plan_acknowledgement(member_id, batches, time.monotonic() * 1000)
        if not plan.needs_persisting:  # renewals only
            sp.complete(plan)
            self._count(plan)
            return
        try:
            await self._write(loaded, plan)
        except BaseException:
            sp.abandon(plan)
            raise
        sp.complete(plan)
        self._count(plan)
        if any(b.delivery_state == DeliveryState.AVAILABLE for b in plan.state_batches):
            self._wake(loaded)

    def _count(self, plan: PlannedAcknowledgement) -> None:
        if plan.renewed:
            self.record_acknowledgements["Renew"] += plan.renewed
        for first, last, kind in plan.ranges:
            if kind != AcknowledgeType.GAP:
                self.record_acknowledgements[kind.name.capitalize()] += last - first + 1

    async def _write(self, loaded: _Loaded, plan: PlannedAcknowledgement) -> None:
        async with loaded.write_lock:
            start, complete = loaded.sp.start_after(plan)
            await self._persist(loaded, plan.state_batches, start, complete)

    async def _persist(self, loaded: _Loaded, batches: list[StateBatch],
                       start_offset: int | None = None,
                       delivery_complete_count: int | None = None) -> None:
        sp = loaded.sp
        # The persisted start offset never moves back: the coordinator drops the state of
        # what lies below it, so a lower one would bring acknowledged records back.
        start = max(sp.start_offset if start_offset is None else start_offset,
                    loaded.persisted_start)
        try:
            await self.broker.share_persister.write(
                loaded.key, sp.state_epoch, loaded.leader_epoch, start, batches,
                sp.delivery_complete_count() if delivery_complete_count is None
                else delivery_complete_count)
            loaded.persisted_start = start
        except KafkaError as exc:
            if exc.code in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
                self._forget(loaded, f"its write was fenced ({exc.code.name})")
            raise

    def _persist_soon(self, loaded: _Loaded, batches: list[StateBatch]) -> None:
        """Persist a change that already applied (a lock expired, a member left)."""
        async def write() -> None:
            async with loaded.write_lock:
                try:
                    await self._persist(loaded, batches)
                except KafkaError as exc:
                    log.warning("share group %s: state of %s-%d not persisted: %s",
                                loaded.key.group_id, loaded.topic, loaded.partition, exc)
        task = asyncio.ensure_future(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # -- sessions and releases -----------------------------------------------------------

    def release(self, session: ShareSession) -> None:
        """The session closed: its member's records on its share-partitions go back."""
        for (topic_id, partition), topic in session.partitions.items():
            loaded = self._partitions.get((session.group_id, topic, partition))
            if loaded is None or loaded.key.topic_id != topic_id:
                continue
            changed = loaded.sp.release_member(session.member_id)
            if changed:
                self._persist_soon(loaded, changed)
                self._wake(loaded)
        self._drop_unused(session.group_id)

    def connection_lost(self, connection: Any) -> None:
        for session in self.sessions.of_connection(connection):
            if self.sessions.close(session):
                log.debug("share session of %s in %s closed with its connection",
                          session.member_id, session.group_id)
                self.release(session)

    def _drop_unused(self, group_id: str) -> None:
        """Share-partitions of `group_id` that no session names and that hold no lock are
        dropped: the next fetch loads the persisted state (the group's offsets may have been
        altered while it was empty)."""
        named = {(s.group_id, topic, p) for s in self.sessions.sessions.values()
                 if s.group_id == group_id for (_, p), topic in s.partitions.items()}
        for key, loaded in list(self._partitions.items()):
            if key[0] == group_id and key not in named and loaded.sp.next_deadline_ms() is None \
                    and not loaded.write_lock.locked():
                del self._partitions[key]

    def _forget(self, loaded: _Loaded, why: str) -> None:
        key = (loaded.key.group_id, loaded.topic, loaded.partition)
        if self._partitions.get(key) is loaded:
            log.info("share-partition %s-%d of group %s dropped: %s", loaded.topic,
                     loaded.partition, loaded.key.group_id, why)
            del self._partitions[key]

    def forget_group(self, group_id: str) -> None:
        """The group's share state was deleted or reset: drop what is loaded of it."""
        for key in [k for k in self._partitions if k[0] == group_id]:
            del self._partitions[key]

    def _wake(self, loaded: _Loaded) -> None:
        """Records became available: fetches waiting on the partition look again."""
        self.broker.replica_manager.notify_data(loaded.topic, loaded.partition)

    async def _sweep(self) -> None:
        last_idle_check = 0.0
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL_S)
            try:
                now_ms = time.monotonic() * 1000
                for loaded in list(self._partitions.values()):
                    deadline = loaded.sp.next_deadline_ms()
                    if deadline is not None and deadline <= now_ms:
                        changed = loaded.sp.expire_locks(now_ms)
                        if changed:
                            self._persist_soon(loaded, changed)
                            self._wake(loaded)
                now_s = now_ms / 1000
                if now_s - last_idle_check >= _IDLE_SWEEP_INTERVAL_S:
                    last_idle_check = now_s
                    self._close_idle_sessions(now_s)
            except Exception:
                log.exception("share-partition sweep failed")

    def _close_idle_sessions(self, now_s: float) -> None:
        groups = {s.group_id for s in self.sessions.sessions.values()}
        timeouts = {g: share_group_configs(self.broker, g).session_timeout_ms / 1000
                    for g in groups}
        for session in self.sessions.idle(now_s, timeouts):
            if self.sessions.close(session):
                log.info("share session of %s in %s closed after its session timeout",
                         session.member_id, session.group_id)
                self.release(session)

    # -- introspection (metrics, tests) --------------------------------------------------

    def loaded(self) -> Iterator[tuple[ShareKey, SharePartition]]:
        for key, loaded in self._partitions.items():
            yield key, loaded.sp


class _AbortedTransactions:
    """Consumers' rule for skipping aborted batches (KIP-98), from (producer id, first offset)
    pairs alone: a producer's batches are aborted from the first offset of one of its aborted
    transactions up to its next control batch, the abort marker (one transaction at a time
    per producer, so no commit marker comes between)."""

    __slots__ = ("_pending", "_aborting")

    def __init__(self, aborted: list[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda t: t[1], reverse=True)  # pop() the oldest
        self._aborting: set[int] = set()

    def skips(self, header: Any) -> bool:
        if not (header.is_transactional or header.is_control):
            return False
        while self._pending and self._pending[-1][1] <= header.last_offset:
            self._aborting.add(self._pending.pop()[0])
        if header.is_control:  # control batches are never handed out
            self._aborting.discard(header.producer_id)
            return True
        return header.producer_id in self._aborting
