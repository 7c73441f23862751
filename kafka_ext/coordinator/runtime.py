"""CoordinatorRuntime: sharded state machines over the partitions of an internal topic.

Mirrors Kafka's CoordinatorRuntime (KIP-848's rewrite): one shard per partition of the topic
(`__consumer_offsets`, `__transaction_state`, `__diskless_metadata`) lives where that partition's
leader lives. A shard is rebuilt by replaying its partition's log when this node becomes leader
and dropped when it stops being leader. Every change is an operation that validates against the
shard, returns records and a response; the runtime appends the records as one batch, replays
them into the shard, releases the shard's write lock, waits for the high watermark, tells the
shard what is now committed (`on_committed`), then answers. Nothing here is tenant-specific.
Everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import BatchHeader, iter_batch_headers
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    decode_end_txn_marker,
    decode_records,
)
from kafka_ext.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bytes of log read per load step; the loop runs other work between steps.
LOAD_CHUNK_BYTES = 1 << 20

# Append errors as Kafka's coordinators report them to clients: the partition is moving or gone.
_APPEND_ERROR_MAP = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class CoordinatorShard(Protocol):
    """The state machine of one partition; only the runtime calls these, on the event loop."""

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        """Apply one record (at load and after each write); producer_id != -1: transactional."""

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               committed: bool, offset: int) -> None:
        """Apply a COMMIT/ABORT marker of the producer's open transaction."""

    def on_loaded(self) -> None:
        """Called once the load replay has applied the partition's last record."""

    def on_unloaded(self) -> None:
        """Called when the shard is dropped (partition deleted or no longer led here)."""

    def on_committed(self, committed_offset: int) -> None:
        """Records below `committed_offset` are replicated (the high watermark passed them).

        Called after each write's high watermark wait and once the load replay is done. Optional
        (a shard without it keeps everything in memory); the diskless tenant applies its
        pending records to SQLite here. A shard may also define
        `async def prepare_load(self, log_start_offset: int, log_end_offset: int) -> int`:
        restore local state before the load replay and return the first offset to replay.
        """


S = TypeVar("S", bound=CoordinatorShard)


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """What an operation returns: records to append (value None = tombstone) and its response.

    replay_records=False: the tenant already holds this state in memory (Kafka's classic group
    metadata), so the records are replayed only when the shard loads.
    """

    records: list[tuple[bytes, bytes | None]]
    response: T
    replay_records: bool = True


@dataclass(slots=True)
class _ShardContext(Generic[S]):
    """One hosted shard; `loaded` turns True once the load replay is done. Loop-owned."""

    partition: int
    leader_epoch: int
    shard: S
    loaded: bool = False
    load_task: asyncio.Task[None] | None = None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit wrap-around), as a signed int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: str, num_partitions: int) -> int:
    """Kafka's coordinator placement: Utils.abs(key.hashCode()) % partitions (abs(MIN) = 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


class CoordinatorRuntime(Generic[S]):
    """Hosts the shards of one internal topic on this node; loop-owned, not thread-safe."""

    def __init__(self, broker: Any, topic: str, num_partitions: int,
                 topic_configs: dict[str, str], shard_factory: Callable[[int], S], *,
                 replication_factor: int = -1, pipelined: bool = False) -> None:
        self.broker = broker
        self.topic = topic
        self.num_partitions = num_partitions
        self.topic_configs = dict(topic_configs)
        self.replication_factor = replication_factor
        self.shard_factory = shard_factory
        # True: a write yields once after appending, before it waits and applies (the diskless
        # tenant, whose on_committed is a SQLite transaction worth sharing between writes).
        self.pipelined = pipelined
        self._contexts: dict[int, _ShardContext[S]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False

    # -- placement ---------------------------------------------------------------------------

    def partition_for(self, key: str) -> int:
        """The partition (and so the coordinator) that owns `key`."""
        return partition_for_key(key, self.num_partitions)

    def leader_of(self, partition: int) -> int:
        """The node leading `partition` in the current metadata image, or -1."""
        topic = self.broker.controller.image.topics_by_name.get(self.topic)
        if topic is None:
            return -1
        part = topic.partitions.get(partition)
        return -1 if part is None else part.leader

    def topic_exists(self) -> bool:
        return self.topic in self.broker.controller.image.topics_by_name

    def topic_creation(self) -> TopicCreation:
        """The internal topic as this coordinator creates it: its partition count, replication
        factor and configs (compaction). Every path that creates the topic asks for this one."""
        return TopicCreation(self.topic, self.num_partitions, self.replication_factor,
                             configs=dict(self.topic_configs))

    async def ensure_topic(self) -> None:
        """Create the internal topic through the controller if it does not exist yet."""
        if self.topic_exists():
            return
        (result,) = await self.broker.controller.create_topics([self.topic_creation()],
                                                               validate_only=False)
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.error("could not create internal topic %s: %s %s", self.topic,
                      result.error.name, result.message)
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"internal topic {self.topic} could not be created: {result.message}")
        if result.error == ErrorCode.NONE:
            log.info("created internal topic %s with %d partitions", self.topic,
                     result.num_partitions)

    # -- shards ------------------------------------------------------------------------------

    def shard(self, partition: int) -> S:
        """The loaded shard of `partition`; NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        return self._loaded_context(partition).shard

    def coordinator_epoch(self, partition: int) -> int:
        """The leader epoch of `partition` this shard was loaded under (Kafka's coordinator epoch)."""
        return self._loaded_context(partition).leader_epoch

    def leads(self, partition: int) -> bool:
        """Whether the shard of `partition` is loaded or loading here (this node leads it)."""
        return partition in self._contexts

    def is_loading(self, partition: int) -> bool:
        ctx = self._contexts.get(partition)
        return ctx is not None and not ctx.loaded

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, ctx in self._contexts.items() if ctx.loaded)

    def shards(self) -> Iterable[tuple[int, S]]:
        return [(p, ctx.shard) for p, ctx in sorted(self._contexts.items()) if ctx.loaded]

    def _loaded_context(self, partition: int) -> _ShardContext[S]:
        ctx = self._contexts.get(partition)
        if ctx is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this node does not coordinate {self.topic}-{partition}")
        if not ctx.loaded:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"{self.topic}-{partition} is still loading")
        return ctx

    # -- writes ------------------------------------------------------------------------------

    async def write(self, partition: int, op: Callable[[S], CoordinatorResult[T]], *,
                    producer_id: int = -1, producer_epoch: int = -1,
                    transactional: bool = False) -> T:
        """Run `op` on the shard, append its records as one batch, replay them, answer.

        Writes to one shard validate and append one at a time in call order (the lock is FIFO),
        so each `op` sees every earlier write replayed. The lock is released before the high
        watermark wait: a later write validates against this one's pending records while they
        replicate (KIP-1164's pipelining). `op` must not change the shard itself.
        """
        ctx = self._loaded_context(partition)
        await ctx.write_lock.acquire()
        try:
            self._check_current(ctx)
            result = op(ctx.shard)
            if not result.records:
                return result.response
            now_ms = int(time.time() * 1000)
            records = [Record(i, now_ms, key, value)
                       for i, (key, value) in enumerate(result.records)]
            batch = build_batch(records, producer_id=producer_id if transactional else -1,
                                producer_epoch=producer_epoch if transactional else -1,
                                is_transactional=transactional)
            info = self._append(partition, batch)
            if result.replay_records:
                replay_pid = producer_id if transactional else -1
                replay_epoch = producer_epoch if transactional else -1
                for i, (key, value) in enumerate(result.records):
                    ctx.shard.replay(info.first_offset + i, replay_pid, replay_epoch, key, value)
            else:
                # The tenant applies this state itself once the write returns (classic group
                # metadata): later writes must not validate before that, so the lock stays held.
                await self._await_high_watermark(ctx, info.last_offset + 1)
                self._committed(ctx)
                return result.response
        finally:
            ctx.write_lock.release()
        if self.pipelined:
            # Let the writes queued behind this one append first: on one node the high
            # watermark is already here, and their records reach on_committed together.
            await asyncio.sleep(0)
        await self._await_high_watermark(ctx, info.last_offset + 1)
        self._committed(ctx)
        return result.response

    async def write_end_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                    coordinator_epoch: int, committed: bool) -> int:
        """Append a COMMIT/ABORT marker for the producer and apply it; returns its offset."""
        ctx = self._loaded_context(partition)
        async with ctx.write_lock:
            self._check_current(ctx)
            offset = self._append_marker(partition, producer_id, producer_epoch,
                                         coordinator_epoch, committed)
            ctx.shard.replay_end_transaction(producer_id, producer_epoch, committed, offset)
        await self._await_high_watermark(ctx, offset + 1)
        self._committed(ctx)
        return offset

    async def wait_committed(self, partition: int) -> None:
        """For strict reads: wait until every record appended so far is replicated and the shard
        has been told (on_committed), so the read reflects all earlier writes."""
        ctx = self._loaded_context(partition)
        hosted = self.broker.replica_manager.partitions.get((self.topic, partition))
        if hosted is None:
            return
        await self._await_high_watermark(ctx, hosted.log.log_end_offset)
        self._committed(ctx)

    def _committed(self, ctx: _ShardContext[S]) -> None:
        """Tell the shard how far its partition is replicated (its high watermark)."""
        on_committed = getattr(ctx.shard, "on_committed", None)
        if on_committed is None:
            return
        hosted = self.broker.replica_manager.partitions.get((self.topic, ctx.partition))
        if hosted is not None:
            on_committed(hosted.log.high_watermark)

    def _append(self, partition: int, batch: bytes) -> Any:
        """Append to the local leader (ReplicaManager.append_records is synchronous)."""
        try:
            return self.broker.replica_manager.append_records(
                self.topic, partition, batch, origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            raise _mapped(exc) from exc

    def _append_marker(self, partition: int, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int, committed: bool) -> int:
        """Append a COMMIT/ABORT marker (ReplicaManager.append_control_batch is synchronous)."""
        try:
            return self.broker.replica_manager.append_control_batch(
                self.topic, partition, producer_id, producer_epoch, coordinator_epoch, committed)
        except KafkaError as exc:
            raise _mapped(exc) from exc

    def _check_current(self, ctx: _ShardContext[S]) -> None:
        if self._contexts.get(ctx.partition) is not ctx:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this node no longer coordinates {self.topic}-{ctx.partition}")

    async def _await_high_watermark(self, ctx: _ShardContext[S], offset: int) -> None:
        """Wait until the partition's high watermark reaches `offset` (at once when its leader
        is its whole ISR); NOT_COORDINATOR if the shard is unloaded meanwhile."""
        hosted = self.broker.replica_manager.partitions.get((self.topic, ctx.partition))
        if hosted is not None and hosted.log.high_watermark < offset:
            try:
                await self.broker.replica_manager.wait_for_high_watermark(hosted, offset)
            except KafkaError as exc:  # leadership moved
                raise _mapped(exc) from exc
        self._check_current(ctx)

    # -- timers ------------------------------------------------------------------------------

    def schedule(self, partition: int, key: str, delay_ms: int,
                 callback: Callable[[], Awaitable[None] | None]) -> None:
        """Run `callback` after `delay_ms` while the shard stays loaded; replaces `key`'s timer."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this node does not coordinate {self.topic}-{partition}")
        old = ctx.timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if ctx.timers.get(key) is not handle or self._contexts.get(partition) is not ctx:
                return
            del ctx.timers[key]
            outcome = callback()
            # Async callbacks (offset expiry, KIP-848 session and rebalance timeouts) write.
            if inspect.isawaitable(outcome):
                task = self.spawn(_run_timer(outcome, self.topic, partition, key))
                if inspect.iscoroutine(outcome):
                    # Cancelled before it ran (stop() right after the timer fired): close the
                    # callback's coroutine, which would otherwise warn it was never awaited.
                    coroutine = outcome
                    task.add_done_callback(lambda t: coroutine.close() if t.cancelled() else None)

        handle = loop.call_later(max(delay_ms, 0) / 1000, fire)
        ctx.timers[key] = handle

    def cancel(self, partition: int, key: str) -> None:
        ctx = self._contexts.get(partition)
        if ctx is not None:
            handle = ctx.timers.pop(key, None)
            if handle is not None:
                handle.cancel()

    def has_timer(self, partition: int, key: str) -> bool:
        ctx = self._contexts.get(partition)
        return ctx is not None and key in ctx.timers

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run a coroutine in the background; stop() cancels whatever is still running."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Follow the metadata image: load shards this node leads, unload the others."""
        if self._started:
            return
        self._started = True
        self.broker.controller.listeners.append(self.on_image)
        self.on_image(None, self.broker.controller.image)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        listeners = self.broker.controller.listeners
        if self.on_image in listeners:
            listeners.remove(self.on_image)
        for partition in list(self._contexts):
            self._unload(partition)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def on_image(self, old: Any, new: Any) -> None:
        """Controller listener: (re)load shards led here, unload the rest. Synchronous."""
        topic = new.topics_by_name.get(self.topic)
        led: dict[int, int] = {}
        if topic is not None:
            led = {p: part.leader_epoch for p, part in topic.partitions.items()
                   if part.leader == self.broker.node_id}
        for partition in list(self._contexts):
            ctx = self._contexts[partition]
            if led.get(partition) != ctx.leader_epoch:
                self._unload(partition)
        for partition, epoch in sorted(led.items()):
            if partition not in self._contexts:
                self._load(partition, epoch)

    def _load(self, partition: int, leader_epoch: int) -> None:
        ctx: _ShardContext[S] = _ShardContext(partition, leader_epoch,
                                              self.shard_factory(partition))
        self._contexts[partition] = ctx
        hosted = self.broker.replica_manager.partitions.get((self.topic, partition))
        if (hosted is not None and hosted.log.log_end_offset <= hosted.log.log_start_offset
                and not hasattr(ctx.shard, "prepare_load")):
            self._finish_load(ctx)  # an empty log: usable at once, no task needed
            return
        ctx.load_task = self.spawn(self._load_logged(ctx))

    async def _load_logged(self, ctx: _ShardContext[S]) -> None:
        """The load task: a failure leaves the shard loading (clients retry) and is logged."""
        try:
            await self._replay_log(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed; it stays unavailable until reloaded",
                          self.topic, ctx.partition)

    def _finish_load(self, ctx: _ShardContext[S]) -> None:
        ctx.loaded = True
        self._committed(ctx)
        ctx.shard.on_loaded()

    async def _replay_log(self, ctx: _ShardContext[S]) -> None:
        """Replay the partition's log into the shard in chunks, yielding to the loop between."""
        started = time.monotonic()
        await asyncio.sleep(0)  # let the other image listeners (the replica manager) finish
        hosted = self.broker.replica_manager.partitions.get((self.topic, ctx.partition))
        if hosted is None:
            log.error("cannot load %s-%d: this node hosts no log for it", self.topic,
                      ctx.partition)
            return
        plog = hosted.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        prepare_load = getattr(ctx.shard, "prepare_load", None)
        if prepare_load is not None:
            offset = max(offset, await prepare_load(offset, end))
            end = plog.log_end_offset
        count = 0
        while offset < end:
            if self._contexts.get(ctx.partition) is not ctx:
                return  # unloaded while loading
            offset = max(offset, plog.log_start_offset)  # retention may have moved the start
            info = plog.read(offset, LOAD_CHUNK_BYTES, max_offset=end, min_one_message=True)
            if not info.records:
                break
            before = offset
            for view in info.records:
                try:
                    for pos, header in iter_batch_headers(view):
                        count += self._replay_batch_at(ctx, view, pos, header)
                        offset = header.next_offset
                finally:
                    view.release()
            if offset <= before:  # never spin on a read that makes no progress
                log.error("loading %s-%d stopped at offset %d: the log read made no progress",
                          self.topic, ctx.partition, offset)
                break
            # What the chunk replayed below the high watermark is committed: a tenant that
            # applies committed records (diskless) does so per chunk, not all at the end.
            on_committed = getattr(ctx.shard, "on_committed", None)
            if on_committed is not None:
                on_committed(min(offset, plog.high_watermark))
            await asyncio.sleep(0)
        if self._contexts.get(ctx.partition) is not ctx:
            return
        self._finish_load(ctx)
        log.info("loaded %s-%d (epoch %d): %d records up to offset %d in %.3f s", self.topic,
                 ctx.partition, ctx.leader_epoch, count, end, time.monotonic() - started)

    def _replay_batch_at(self, ctx: _ShardContext[S], view: memoryview, pos: int,
                         header: BatchHeader) -> int:
        try:
            _, records = decode_records(view, pos)
        except DecodeError as exc:
            # A batch the log accepted but we cannot read: skip it rather than never serve the
            # partition's other keys.
            log.error("skipping undecodable batch of %s-%d at offset %d: %s", self.topic,
                      ctx.partition, header.base_offset, exc)
            return 0
        return self._replay_batch(ctx.shard, header, records)

    def _replay_batch(self, shard: S, header: BatchHeader, records: list[Record]) -> int:
        pid = header.producer_id if header.is_transactional else -1
        epoch = header.producer_epoch if header.is_transactional else -1
        if header.is_control:
            for record in records:
                try:
                    marker = decode_end_txn_marker(record)
                except DecodeError:
                    continue  # other control records (leader change) carry no coordinator state
                shard.replay_end_transaction(header.producer_id, header.producer_epoch,
                                             marker.control_type == ControlRecordType.COMMIT,
                                             record.offset)
            return len(records)
        for record in records:
            if record.key is None:
                log.warning("%s: record at offset %d has no key; skipped", self.topic,
                            record.offset)
                continue
            shard.replay(record.offset, pid, epoch, record.key, record.value)
        return len(records)

    def _unload(self, partition: int) -> None:
        ctx = self._contexts.pop(partition)
        for handle in ctx.timers.values():
            handle.cancel()
        ctx.timers.clear()
        if ctx.load_task is not None and not ctx.load_task.done():
            ctx.load_task.cancel()
        ctx.shard.on_unloaded()
        log.debug("unloaded %s-%d", self.topic, partition)


async def _run_timer(outcome: Awaitable[Any], topic: str, partition: int, key: str) -> None:
    """Await a timer's coroutine; its failure is logged (nobody else would see it)."""
    try:
        await outcome
    except KafkaError as exc:
        log.info("timer %s of %s-%d ended with %s", key, topic, partition, exc)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("timer %s of %s-%d failed", key, topic, partition)


def _mapped(exc: KafkaError) -> KafkaError:
    code = _APPEND_ERROR_MAP.get(exc.code)
    return exc if code is None else KafkaError(code, exc.message)
