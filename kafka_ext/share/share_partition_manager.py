"""SharePartitionManager: the share-partitions this broker leads, and their share sessions.

Mirrors Kafka's SharePartitionManager (KIP-932). A share-partition is loaded on the first
ShareFetch that names it, from the state the persister keeps (`persister.py`): a start offset
the group coordinator left unresolved (-1) is resolved here with the group's
`share.auto.offset.reset` and written back. Reads go through the partition's log like a
consumer's fetch (up to the high watermark, or the last stable offset for a read_committed
group) and hand out the batches as memoryview slices of the segment maps, never decoded:
acquisition looks only at batch headers. Acknowledgements are persisted before they are
answered; lock expiries and releases are persisted after they apply. Writes of one
share-partition go out one at a time, in order.

A share-partition is dropped when this broker stops leading its partition (the new leader
loads the persisted state), when its topic goes, when a write is fenced (its group's offsets
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
from kafka_ext.protocol.record_batch import iter_batch_headers
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.server.metrics import LatencyHistogram
from kafka_ext.share.group_config import (
    AUTO_OFFSET_RESET_BY_DURATION,
    AUTO_OFFSET_RESET_EARLIEST,
    share_group_configs,
)
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

log = logging.getLogger(__name__)

# How often acquisition locks are checked for expiry, and idle sessions for their timeout.
_SWEEP_INTERVAL_S = 0.1
_IDLE_SWEEP_INTERVAL_S = 1.0

# (group id, topic, partition)
ShareKey = tuple[str, str, int]


@dataclass(slots=True)
class ShareRead:
    """What one share-partition handed out to a fetch: batches and the acquired ranges."""

    records: list[memoryview]
    acquired: list[AcquiredRange]

    @property
    def nbytes(self) -> int:
        return sum(len(r) for r in self.records)


class _Loaded:
    """A share-partition and what serialises its writes."""

    __slots__ = ("sp", "key", "leader_epoch", "write_lock", "topic", "partition",
                 "persisted_start")

    def __init__(self, sp: SharePartition, key: SharePartitionKey, leader_epoch: int,
                 topic: str, partition: int) -> None:
        self.sp = sp
        self.key = key
        self.leader_epoch = leader_epoch
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
        """Drop share-partitions whose partition this broker no longer leads at their epoch."""
        for key, loaded in list(self._partitions.items()):
            topic = new.topics_by_name.get(loaded.topic)
            part = topic.partitions.get(loaded.partition) if topic is not None else None
            if (part is None or topic.topic_id != loaded.key.topic_id
                    or part.leader != self.broker.node_id
                    or part.leader_epoch != loaded.leader_epoch):
                log.info("share-partition %s-%d of group %s: no longer led here",
                         loaded.topic, loaded.partition, key[0])
                del self._partitions[key]

    # -- loading -------------------------------------------------------------------------

    async def share_partition(self, group_id: str, topic: str, topic_id: uuid.UUID,
                              partition: int) -> _Loaded:
        """The loaded share-partition, loading it on first use. NOT_LEADER_OR_FOLLOWER when
        this broker does not lead the partition; the persister's errors as they come."""
        hosted = self.broker.replica_manager.leader_partition(topic, partition)
        key = (group_id, topic, partition)
        loaded = self._partitions.get(key)
        if loaded is not None and loaded.leader_epoch == hosted.leader_epoch:
            return loaded
        pending = self._loading.get(key)
        if pending is None:
            pending = self._loading[key] = asyncio.ensure_future(
                self._load(group_id, topic, topic_id, partition, hosted))
            pending.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(pending)

    async def _load(self, group_id: str, topic: str, topic_id: uuid.UUID, partition: int,
                    hosted: Any) -> _Loaded:
        started = time.perf_counter()
        key = SharePartitionKey(group_id, topic_id, partition)
        config = share_group_configs(self.broker, group_id)
        persister = self.broker.share_persister
        state = await persister.read(key, hosted.leader_epoch)
        sp = SharePartition.from_state(
            state, lock_duration_ms=config.record_lock_duration_ms,
            delivery_count_limit=config.delivery_count_limit,
            max_in_flight_records=config.partition_max_record_locks)
        plog = hosted.log
        if state.start_offset == UNINITIALIZED_START_OFFSET:
            start = self._reset_offset(plog, config.auto_offset_reset)
            sp = SharePartition(state.state_epoch, start,
                                lock_duration_ms=config.record_lock_duration_ms,
                                delivery_count_limit=config.delivery_count_limit,
                                max_in_flight_records=config.partition_max_record_locks)
            await persister.write(key, sp.state_epoch, hosted.leader_epoch, start, [], 0)
            log.info("share group %s starts %s-%d at offset %d (share.auto.offset.reset=%s)",
                     group_id, topic, partition, start, config.auto_offset_reset.strategy)
        sp.move_start_to(plog.log_start_offset)
        if sp.start_offset > plog.log_end_offset:  # the log was truncated or recreated
            sp = SharePartition(sp.state_epoch, plog.log_end_offset,
                                lock_duration_ms=sp.lock_duration_ms,
                                delivery_count_limit=sp.delivery_count_limit,
                                max_in_flight_records=sp.max_in_flight_records)
        loaded = _Loaded(sp, key, hosted.leader_epoch, topic, partition)
        self._partitions[(group_id, topic, partition)] = loaded
        self.partition_load_time.observe((time.perf_counter() - started) * 1000)
        return loaded

    def _reset_offset(self, plog: Any, reset: Any) -> int:
        if reset.strategy == AUTO_OFFSET_RESET_EARLIEST:
            return int(plog.log_start_offset)
        if reset.strategy == AUTO_OFFSET_RESET_BY_DURATION:
            found = plog.fetch_offset_by_timestamp(int(time.time() * 1000) - reset.duration_ms)
            return int(plog.high_watermark) if found is None else int(found.offset)
        return int(plog.high_watermark)  # latest

    # -- reads ---------------------------------------------------------------------------

    def read(self, loaded: _Loaded, member_id: str, max_bytes: int, max_records: int,
             min_one_batch: bool) -> ShareRead:
        """Acquire for `member_id` from the partition's log, within `max_bytes` (the first
        batch may pass it when `min_one_batch`) and `max_records` (whole batches)."""
        sp = loaded.sp
        hosted = self.broker.replica_manager.leader_partition(loaded.topic, loaded.partition)
        if hosted.leader_epoch != loaded.leader_epoch:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{loaded.topic}-{loaded.partition} changed leader epoch")
        plog = hosted.log
        if sp.move_start_to(plog.log_start_offset):
            self._persist_soon(loaded, [])
        if not sp.can_acquire() or max_records <= 0:
            return ShareRead([], [])
        config = share_group_configs(self.broker, loaded.key.group_id)
        read_committed = config.isolation_level == READ_COMMITTED
        fetch_offset = sp.next_fetch_offset()
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        if fetch_offset >= upper:
            return ShareRead([], [])
        info = plog.read(fetch_offset, max_bytes, max_offset=upper,
                         min_one_message=min_one_batch)
        if not info.records:
            return ShareRead([], [])
        aborted = plog.aborted_transactions_in(info) if read_committed else []
        now_ms = time.monotonic() * 1000
        records: list[memoryview] = []
        acquired: list[AcquiredRange] = []
        for view in info.records:
            batches = list(_batches_of(view, aborted))
            got = sp.acquire(member_id, (b for _, _, b in batches), max_records - _count(
                acquired), now_ms)
            if got:
                acquired.extend(got)
                records.extend(_slices_holding(view, batches, got))
            if _count(acquired) >= max_records:
                break
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


def _count(ranges: list[AcquiredRange]) -> int:
    return sum(r.last_offset - r.first_offset + 1 for r in ranges)


def _batches_of(view: memoryview, aborted: list[Any]
                ) -> Iterator[tuple[int, int, BatchInfo]]:
    """(position, size, BatchInfo) of each batch in a read; headers only."""
    for pos, header in iter_batch_headers(view):
        skip = header.is_control or (header.is_transactional and any(
            txn.producer_id == header.producer_id
            and txn.first_offset <= header.base_offset <= txn.last_offset for txn in aborted))
        yield pos, header.size_bytes, BatchInfo(header.base_offset, header.last_offset, skip)


def _slices_holding(view: memoryview, batches: list[tuple[int, int, BatchInfo]],
                    acquired: list[AcquiredRange]) -> list[memoryview]:
    """The spans of `view` whose batches hold an acquired offset, as zero-copy slices."""
    spans: list[memoryview] = []
    start = end = -1
    for pos, size, batch in batches:
        holds = any(r.first_offset <= batch.last_offset and batch.base_offset <= r.last_offset
                    for r in acquired)
        if holds and pos == end:
            end = pos + size
            continue
        if start >= 0:
            spans.append(view[start:end])
        start, end = (pos, pos + size) if holds else (-1, -1)
    if start >= 0:
        spans.append(view[start:end])
    return spans
