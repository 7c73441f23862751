"""A deterministic simulation of one partition's ISR replication (Kafka's replication model).

One seed decides everything: 2-5 replicas, message delays, losses and reordering, network
partitions (between brokers, and between a broker and the controller), kill -9 (the page cache
survives), machine crashes (what was not fsynced is lost; the high watermark comes back from its
last checkpoint), pauses that outlast a broker's session, and when the producer sends acks=all
writes. Every broker runs the project's own replication code, unchanged:

- ReplicaManager (apply_image, check_min_insync, append_records, wait_for_acks,
  record_follower_fetch, shrink_isrs, isr_change_done) over Partition;
- the leader's answer to a follower's fetch, long poll included (server/fetch.py
  `_handle_replica_fetch` and `_read_for_replica`);
- the follower's fetchers: ReplicaFetcherManager.update, .fetch (the request), .process and
  ._process_partition (append, or truncate to `truncation_offset`, then the high watermark);
- AlterPartitionManager._send and ._settle, BrokerLifecycleManager._register and ._heartbeat;
- the controller: QuorumController's register_broker, broker_heartbeat, fence_expired_brokers
  and alter_partition (every election goes through partition_change), behind the real request
  handlers (answer_alter_partition, answer_broker_registration, answer_broker_heartbeat). The
  metadata quorum under it is assumed reliable: records commit at once, in order.

The real coroutines run under an event loop whose clock is the simulation's, and the simulation
steps them itself: one suspends on a request (carried over the simulated network, or timed out)
or on the fetch purgatory (resumed whenever something happens at the leader, as the purgatory
would be woken). Mirrored rather than called are only the loops around them (ReplicaFetcher.run,
AlterPartitionManager._send_queued, the heartbeat loop), the broker's periodic tasks, and
metadata reaching each broker late, out of order or not at all (a broker applies only images
newer than its own, as it replays the metadata log). Storage is MemoryLog (UnifiedLog's
semantics in memory, for speed) or the real UnifiedLog in a directory.

INVARIANTS are checked after every event; then every fault heals and the replicas must converge.
Machine crashes are the one fault that loses data, and Kafka keeps an acknowledged write only
while an in-sync replica holds it: once every ISR member has lost its unflushed tail, a run stops
holding the code to invariant 1 and counts the acknowledged writes lost (_check_budget). A run
may tolerate some of invariants 6-10 (bugs known and open): it notes their first violation and
goes on, and a later violation says what it came after.

With --elr the cluster runs with eligible leader replicas (KIP-966, eligible.leader.replicas.version
1): the ISR may empty, an ELR member may be elected, the leader's high watermark stops below
min.insync.replicas, and a broker that restarts (every restart here is unclean: kill -9 or a
crash) leaves the ELR. A partition left with no ISR and no ELR stays offline, as Kafka's does,
until an operator asks for an unclean election: the simulation does so once every fault has
healed, and from then on only counts the acknowledged writes lost.

Replay one seed:  .venv/bin/python -m tests.unit.replication.simulation --seed N --verbose
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import heapq
import logging
import math
import random
import tempfile
import uuid
from collections import Counter
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
)
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from kafka_ext.controller.cluster_control import BrokerHeartbeats, BrokerListener
from kafka_ext.controller.image import ELR_VERSION_FEATURE, MetadataImage, PartitionImage
from kafka_ext.controller.partition_change import UNCLEAN
from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import (
    iter_batch_headers,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batches,
)
from kafka_ext.protocol.records import Record, build_batch, decode_all_batches
from kafka_ext.replication.alter_partition_manager import AlterPartitionManager
from kafka_ext.replication.partition import Partition
from kafka_ext.replication.replica_fetcher import (
    REPLICA_FETCH_VERSION,
    ReplicaFetcher,
    ReplicaFetcherManager,
    _Followed,
)
from kafka_ext.replication.replica_manager import ReplicaManager, _check_isr_after_append
from kafka_ext.security.session import PLAINTEXT_CLIENT
from kafka_ext.server import broker_lifecycle
from kafka_ext.server.broker_lifecycle import BrokerLifecycleManager
from kafka_ext.server.fetch import _handle_replica_fetch
from kafka_ext.storage.fetch_data_info import FetchDataInfo, LogOffsetMetadata
from kafka_ext.storage.leader_epoch_cache import LeaderEpochFileCache
from kafka_ext.storage.log import LogAppendInfo, UnifiedLog
from kafka_ext.storage.log_config import LogConfig

TOPIC = "sim"
PARTITION = 0
TP = (TOPIC, PARTITION)
CLUSTER_ID = "sim-cluster"
CONTROLLER = 0  # the controller's node on the simulated network; brokers are 1..n
PRODUCER = -1  # the client: its links are never cut
MIN_INSYNC = 2
LISTENERS = [BrokerListener("PLAINTEXT", "sim", 9092, 0)]

# Simulated milliseconds: Kafka's defaults scaled down together.
HEARTBEAT_MS = 100
SESSION_TIMEOUT_MS = 900
REPLICA_LAG_MS = 500
FETCH_WAIT_MS = 60
FETCH_TIMEOUT_MS = 400  # replica.socket.timeout.ms + replica.fetch.wait.max.ms
FETCH_BACKOFF_MS = 50
CONTROLLER_TIMEOUT_MS = 150
METADATA_REFRESH_MS = 250
PRODUCE_TIMEOUT_MS = 1500
LIFECYCLE_RETRY_MS = int(broker_lifecycle.RETRY_BACKOFF_S * 1000)

T = TypeVar("T")

# What every run checks, after every event. "Strict" runs are those with unclean election off
# whose machine crashes stayed within Kafka's fault budget (Simulation._check_budget); the
# others only count the acknowledged writes they lose.
INVARIANTS = {
    1: "acknowledged writes survive (strict runs): every acknowledged (offset, value) is in the "
       "committed history (2), and every member of the controller's ISR, the leader included "
       "(a dead one by what is on its disk), holds that whole history at the same offsets, "
       "except a member that lost unflushed data and has not re-registered since; the log the "
       "replicas converge to holds every acknowledged write at its offset, and no write twice",
    2: "a leader's high watermark never goes back within its leader epoch; (strict runs) the "
       "records below any leader's high watermark at any time, zombie leaders included, form "
       "one committed history that no leader's log below its high watermark contradicts",
    3: "one leader per leader epoch: the controller gives each epoch to one broker and never "
       "moves epochs (or partition epochs) back; a broker leading epoch e is the one the "
       "controller elected in e; a broker's leader epoch never goes back",
    4: "elections: the ISR is never empty (with ELR: it may be, and the ELR never overlaps "
       "it), the leader is in it, and with unclean election off a new leader comes from the "
       "ISR it replaces (with ELR: or from the ELR)",
    5: "liveness: once every fault has healed, within the heal time a new write is "
       "acknowledged, the ISR is every replica, every broker runs unfenced in the controller's "
       "leader epoch, HW == LEO everywhere, and the logs are identical",
    6: "a leader takes a follower's fetch offset as its log end (for the high watermark and "
       "ISR expansion) only from a fetch it serves, not one it answers DivergingEpoch or "
       "OFFSET_OUT_OF_RANGE (Kafka's Partition.fetchRecords updates the follower only then)",
    7: "an AlterPartition answer settles only the proposal it answers: a newer pending "
       "proposal stays pending (Kafka ignores answers to proposals no longer pending)",
    8: "an ISR proposal reaches the controller with the leader and partition epochs it was "
       "computed in (Kafka's AlterPartitionItem carries them), so one made before a leadership "
       "or ISR change is refused rather than applied to the new state",
    9: "a DivergingEpoch answer makes the follower's next fetch differ: its log end or its last "
       "epoch moves (Kafka's truncateTo drops epoch entries at the log end even when no record "
       "goes), else it asks the same forever",
    10: "the leader of the controller's current epoch moves its high watermark over every "
        "member of the controller's ISR: its maximal ISR holds them all (Kafka keeps a "
        "proposal pending until it knows what the controller made of it)",
    11: "ELR (KIP-966): the ELR is empty while the ISR is at min.insync.replicas; a broker "
        "that registered after an unclean shutdown is in no ELR; every ELR member (a dead one "
        "by what is on its disk) holds the whole committed history, as ISR members do (1)",
}


class InvariantViolation(AssertionError):
    """A numbered invariant (INVARIANTS) does not hold; `after` are the violations of tolerated
    invariants the run went on past before this one."""

    invariant: int
    detail: str
    after: tuple[InvariantViolation, ...]

    def __init__(self, invariant: int, detail: str,
                 after: tuple[InvariantViolation, ...] = ()) -> None:
        earlier = "".join(f"\n  after tolerated invariant {v.invariant}: {v.detail}"
                          for v in after)
        super().__init__(f"invariant {invariant}: {detail}{earlier}")
        self.invariant = invariant
        self.detail = detail
        self.after = after


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of the real code whose awaits all complete at once here (an uncontended
    lock, the in-memory commit)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError(f"{coro!r} would have waited")


# -- storage ---------------------------------------------------------------------------------


class MemoryEpochCache(LeaderEpochFileCache):
    """The real leader epoch history (assign, end_offset_for, truncation), without its file."""

    def __init__(self) -> None:  # the base class opens its checkpoint file
        self._entries = []
        self._dirty = False

    def _write(self) -> None:
        pass

    def flush(self) -> None:
        pass


@dataclass(slots=True)
class _Batch:
    base_offset: int
    next_offset: int
    data: bytes


class MemoryLog:
    """An in-memory log with UnifiedLog's semantics for what replication uses of it, for speed:

    - append_as_leader: offsets and the leader epoch patched into the batches, the epoch
      assigned at the first offset;
    - append_as_follower: CRC-checked batches at or past the end (OFFSET_OUT_OF_RANGE below
      it), their epochs assigned;
    - read: whole batches from the one holding the offset, up to max_bytes (the first one even
      over it with min_one_message) and below max_offset; OFFSET_OUT_OF_RANGE outside
      [log start, log end];
    - truncate_to: every batch holding an offset at or past it goes; truncate_fully_and_start_at;
    - assign_epoch_start_offset, end_offset_for_epoch, latest_epoch: the real epoch cache;
    - high_watermark: clamped to [log start, log end], on writes and truncations.

    `truncated_to` is for the checker: the lowest end a truncation left since it last looked."""

    def __init__(self, topic_id: uuid.UUID, config: LogConfig) -> None:
        self.topic_id = topic_id
        self.config = config
        self.log_start_offset = self.log_end_offset = 0
        self._batches: list[_Batch] = []
        self.log_end_offsets: list[int] = []  # each batch's next offset, for bisect
        self._high_watermark = 0
        self._epochs = MemoryEpochCache()
        self.truncated_to: int | None = None

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    last_stable_offset = high_watermark  # no transactions here

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    def append_as_leader(self, records: Any, leader_epoch: int, *, in_place: bool = False,
                         origin: Any = None) -> LogAppendInfo:
        buf = bytearray(records)
        first = next_offset = self.log_end_offset
        batches = []
        for pos, header in list(iter_batch_headers(buf)):
            set_base_offset(buf, pos, next_offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            end = next_offset + header.last_offset_delta + 1
            batches.append(_Batch(next_offset, end, bytes(buf[pos:pos + header.size_bytes])))
            next_offset = end
        self._epochs.assign(leader_epoch, first)
        for batch in batches:
            self._add(batch)
        return LogAppendInfo(first, next_offset - 1, -1, next_offset - 1, -1,
                             self.log_start_offset, len(batches), len(buf))

    def append_as_follower(self, records: Any) -> LogAppendInfo:
        view = memoryview(records)
        batches = validate_batches(view, from_client=False)
        expected = first = self.log_end_offset
        for _, header in batches:
            if header.base_offset < expected:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"follower batch at offset {header.base_offset} is below the "
                                 f"expected {expected}")
            expected = header.next_offset
        for pos, header in batches:
            if header.partition_leader_epoch >= 0:
                self._epochs.assign(header.partition_leader_epoch, header.base_offset)
            self._add(_Batch(header.base_offset, header.next_offset,
                             bytes(view[pos:pos + header.size_bytes])))
        if batches:
            first = batches[0][1].base_offset
        return LogAppendInfo(first, expected - 1, -1, expected - 1, -1, self.log_start_offset,
                             len(batches), len(view))

    def _add(self, batch: _Batch) -> None:
        self._batches.append(batch)
        self.log_end_offsets.append(batch.next_offset)
        self.log_end_offset = batch.next_offset

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = False) -> FetchDataInfo:
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {fetch_offset} is outside "
                             f"[{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        info = FetchDataInfo(LogOffsetMetadata(fetch_offset), [])
        remaining = max_bytes
        for batch in self._batches[bisect.bisect_right(self.log_end_offsets, fetch_offset):]:
            if batch.next_offset > limit:
                break
            if len(batch.data) > remaining and (info.records or not min_one_message):
                break
            info.records.append(memoryview(batch.data))
            remaining -= len(batch.data)
        return info

    def truncate_to(self, offset: int) -> bool:
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            self._epochs.truncate_from_end(self.log_end_offset)  # as UnifiedLog.truncate_to
            return False
        keep = bisect.bisect_right(self.log_end_offsets, offset)  # the batches that end by `offset`
        del self._batches[keep:]
        del self.log_end_offsets[keep:]
        self.log_end_offset = self.log_end_offsets[-1] if self.log_end_offsets else self.log_start_offset
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._batches.clear()
        self.log_end_offsets.clear()
        self.log_start_offset = self.log_end_offset = offset
        self._epochs.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._high_watermark = min(max(self._high_watermark, self.log_start_offset), self.log_end_offset)
        self._epochs.truncate_from_end(self.log_end_offset)
        self.truncated_to = min(self.log_end_offset, self.truncated_to if self.truncated_to is not None
                                else self.log_end_offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        raise AssertionError("the simulated logs delete nothing: the log start stays 0")

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        self._epochs.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(leader_epoch, self.log_end_offset)


class TrackedUnifiedLog(UnifiedLog):
    """The real log; `truncated_to` notes how low truncations took its end, for the checker."""

    def __init__(self, directory: Path, config: LogConfig, topic_id: uuid.UUID,
                 clock_ms: Callable[[], int]) -> None:
        super().__init__(directory, config, needs_recovery=False, topic_id=topic_id,
                         clock_ms=clock_ms)
        self.truncated_to: int | None = None

    def truncate_to(self, offset: int) -> bool:
        truncated = super().truncate_to(offset)
        if truncated:
            self._note_truncation()
        return truncated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        super().truncate_fully_and_start_at(offset)
        self._note_truncation()

    def _note_truncation(self) -> None:
        end = self.log_end_offset
        self.truncated_to = min(end, self.truncated_to if self.truncated_to is not None else end)


SimLog = MemoryLog | TrackedUnifiedLog


def log_values(log: SimLog, start: int, end: int) -> list[bytes]:
    """The record values at offsets [start, end) (one record per offset here)."""
    values: list[bytes] = []
    offset = start
    while offset < end:
        info = log.read(offset, 1 << 20, min_one_message=True)
        if not info.records:
            break
        for view in info.records:
            for header, records in decode_all_batches(view):
                values += [r.value or b"" for r in records if start <= r.offset < end]
                offset = max(offset, header.next_offset)
    return values


class SimLogManager:
    """LogManager for one broker's one partition: its log is on the broker's disk already."""

    def __init__(self, log: SimLog) -> None:
        self.log = log

    def get_log(self, topic: str, partition: int) -> SimLog:
        return self.log

    def create_log(self, *args: Any) -> SimLog:
        raise AssertionError("the simulated disks hold the partition from the start")

    def detach_log(self, *args: Any) -> Path:
        raise AssertionError("the simulation never moves or deletes the partition")

    def log_dir_of(self, topic: str, partition: int) -> None:
        return None  # one disk per broker: no directory assignments (KIP-858) to make

    def chunk_logs(self) -> dict[tuple[str, int, int], SimLog]:
        return {}  # the simulated partition never gets chunks

    def get_chunk_log(self, topic: str, partition: int, start_offset: int) -> None:
        return None


# -- the event loop, and what the real coroutines wait on ------------------------------------


class SimEventLoop(asyncio.SelectorEventLoop):
    """The real code runs under this loop, for get_running_loop() and its futures; its clock
    (loop.time(): deadlines, fetch backoffs) is the simulation's. It never schedules anything:
    the simulation steps the coroutines itself."""

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        super().__init__()
        self._clock_ms = clock_ms

    def time(self) -> float:
        return self._clock_ms() / 1000


class Outbound:
    """A request the real code awaits (NodeChannels.request, BrokerLifecycleManager's
    to_controller): the coroutine suspends here while the simulation carries the request, and
    resumes with the answer, or with TimeoutError."""

    def __init__(self, target: int, request: Any, timeout_s: float,
                 handler: Callable[[Any, Any], Awaitable[Any]] | None = None) -> None:
        self.target = target
        self.request = request
        self.timeout_s = timeout_s
        self.handler = handler  # the controller's request handler

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self)


class LongPoll:
    """The fetch purgatory (ReplicaManager.wait_for_data): the simulation resumes the waiting
    fetch after anything happens at its leader, or when the wait is over."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


class SimReplicaManager(ReplicaManager):
    """The real ReplicaManager; only its fetch purgatory waits on the simulation's terms."""

    async def wait_for_data(self, tps: Iterable[tuple[str, int]], timeout_s: float) -> None:
        await LongPoll(timeout_s)


class SimChannels:
    """The fetcher's NodeChannels: a request goes over the simulated network."""

    async def request(self, node_id: int, api_key: int, api_version: int, body: Any,
                      timeout_s: float) -> Any:
        return await Outbound(node_id, body, timeout_s)

    @contextlib.asynccontextmanager
    async def leased(self, node_id: int, api_key: int, api_version: int, body: Any,
                     timeout_s: float) -> AsyncIterator[Any]:
        yield await Outbound(node_id, body, timeout_s)


async def _answer_of(fetch: contextlib.AbstractAsyncContextManager[Any]) -> Any:
    """The answer of ReplicaFetcherManager.fetch (its simulated answers own their bytes)."""
    async with fetch as response:
        return response


class SimLifecycle(BrokerLifecycleManager):
    """The real registration and heartbeat requests, to the simulated controller."""

    def listeners(self) -> list[BrokerListener]:
        return LISTENERS

    async def to_controller(self, api_key: int, version: int, request: Any,
                            local: Callable[[Any, Any], Awaitable[Any]]) -> Any:
        return await Outbound(CONTROLLER, request, CONTROLLER_TIMEOUT_MS / 1000, local)


# -- the controller --------------------------------------------------------------------------


class SimClockHeartbeats(BrokerHeartbeats):
    """BrokerHeartbeats on the simulation's clock (QuorumController hands it wall-clock times)."""

    def __init__(self, session_timeout_ms: int, clock: Callable[[], int]) -> None:
        super().__init__(session_timeout_ms)
        self._clock = clock

    def touch(self, broker_id: int, now_ms: float) -> None:
        super().touch(broker_id, self._clock())

    def reset(self, broker_ids: Iterator[int] | list[int], now_ms: float) -> None:
        super().reset(broker_ids, self._clock())

    def expired(self, image: MetadataImage, now_ms: float) -> list[int]:
        return super().expired(image, self._clock())


class InstantQuorum:
    """What QuorumController asks of its Raft quorum here: it leads, in one term, and the
    offset the next record takes (a broker's epoch is its registration's offset)."""

    is_leader = True
    epoch = 1

    def __init__(self, controller: SimController) -> None:
        self.controller = controller
        self.log = self

    @property
    def log_end_offset(self) -> int:
        return self.controller.image.offset + 1


class SimController(QuorumController):
    """QuorumController's own registration, heartbeat, fencing and AlterPartition code, over a
    metadata quorum that commits at once and in order."""

    def __init__(self, clock: Callable[[], int], unclean: bool,
                 on_commit: Callable[[MetadataImage, MetadataImage, list[Any]], None]) -> None:
        # Not QuorumController.__init__: no Raft quorum, metadata log or snapshots here.
        self.image = MetadataImage()
        self.heartbeats = SimClockHeartbeats(SESSION_TIMEOUT_MS, clock)
        self.raft = cast(Any, InstantQuorum(self))
        self._heartbeats_epoch = InstantQuorum.epoch
        self.unclean_leader_election = unclean
        self.min_insync_replicas = MIN_INSYNC
        self.node_id = 0  # the controller (a dynamic unclean setting of its own: none here)
        self._lock = asyncio.Lock()
        self._records = registry()
        self._on_commit = on_commit

    async def _commit(self, records: list[Any]) -> None:
        old = self.image
        self.image = old.apply_all(old.offset + 1, [(type(r).__name__, r) for r in records])
        self._on_commit(old, self.image, records)


def partition_of(image: MetadataImage) -> PartitionImage | None:
    topic = image.topics_by_name.get(TOPIC)
    return topic.partitions.get(PARTITION) if topic is not None else None


# -- brokers ---------------------------------------------------------------------------------


@dataclass(eq=False)
class Write:
    """One acks=all produce; while it waits in the purgatory, the leader's partition and
    Partition.wait_for_high_watermark's future for it."""

    number: int
    values: list[bytes]
    outcome: str = "in flight"
    first_offset: int = -1
    waiting_on: tuple[Partition, asyncio.Future[None], int] | None = None  # and the deadline


@dataclass(eq=False)
class Call:
    """A coroutine of the real code that the simulation steps on one broker's process."""

    coro: Coroutine[Any, Any, Any]
    done: Callable[[Any], None]
    failed: Callable[[Exception], None]
    waiting: Any = None  # the Outbound or LongPoll it is suspended on
    wake_ms: int = -1  # the end of its LongPoll, when a wake-up is scheduled for it


@dataclass(eq=False)
class Broker:
    broker_id: int
    log: SimLog  # the disk: it outlives the processes
    flush_max_ms: int  # its OS writes dirty pages back within this long
    checkpoint_ms: int  # replica.high.watermark.checkpoint.interval.ms
    flushed_end: int = 0  # fsynced below this; a machine crash loses the rest
    hw_checkpoint: int = 0  # the high watermark a restart reads back
    incarnation: int = 0
    running: bool = False
    paused: bool = False
    backlog: list[Callable[[], None]] = field(default_factory=list)  # what came while paused
    serving: bool = False  # unfenced once since it started: its replica manager runs
    image: MetadataImage = field(default_factory=MetadataImage)
    applied: MetadataImage | None = None
    replicas: SimReplicaManager | None = None
    lifecycle: SimLifecycle | None = None
    fetch_manager: ReplicaFetcherManager | None = None
    alter: AlterPartitionManager | None = None
    alter_running: bool = False  # AlterPartitionManager's sending task
    # The latest ISR proposal per partition, with the leader and partition epochs it was made in.
    proposed: dict[tuple[str, int], tuple[tuple[int, ...], int, int]] = field(
        default_factory=dict)
    calls: set[Call] = field(default_factory=set)  # real coroutines in progress
    # The fetch each fetcher has out, by ReplicaFetcherManager.fetchers key.
    fetching: dict[tuple[int, int], tuple[ReplicaFetcher, Call]] = field(default_factory=dict)
    fetch_wakes: set[int] = field(default_factory=set)  # scheduled ends of fetch backoffs
    polls: list[Call] = field(default_factory=list)  # follower fetches long-polling here
    acks: list[Write] = field(default_factory=list)  # in the purgatory
    verified: int = 0  # its log's prefix known to equal the committed history
    max_leader_epoch: int = -1

    @property
    def rm(self) -> SimReplicaManager:
        assert self.replicas is not None
        return self.replicas

    @property
    def life(self) -> SimLifecycle:
        assert self.lifecycle is not None
        return self.lifecycle

    @property
    def fenced(self) -> bool:
        return self.lifecycle is None or self.lifecycle.fenced

    def hosted(self) -> Partition | None:
        if not (self.running and self.serving):
            return None
        return self.rm.partitions.get(TP)


class BrokerView:
    """What the real code called here reads of server.broker.Broker."""

    def __init__(self, broker: Broker, config: dict[str, int]) -> None:
        self._broker = broker
        self.node_id = broker.broker_id
        self.cluster_id = CLUSTER_ID
        self.config = SimpleNamespace(values=config, broker_rack=None)
        self.log_dir_failures = SimpleNamespace(online_directory_ids=list,
                                                offline_directory_ids=list)
        self.controller = self  # the broker's metadata: `controller.image`, `.raft`
        self.raft = self
        self.inter_broker_security = PLAINTEXT_CLIENT
        self.authorizer = None  # no ACLs: every check passes

    @property
    def replica_manager(self) -> SimReplicaManager:
        return self._broker.rm

    @property
    def lifecycle(self) -> SimLifecycle:
        return self._broker.life

    @property
    def image(self) -> MetadataImage:
        return self._broker.image

    @property
    def applied_offset(self) -> int:
        return self._broker.image.offset

    def broker_endpoint(self, node_id: int) -> None:
        return None

    def live_nodes(self, listener_name: str | None = None) -> list[Any]:
        return []  # leader hints name no endpoints here


# -- the simulation --------------------------------------------------------------------------


class Simulation:
    """One seed's cluster: the brokers, the controller, the network between them and the
    producer, driven by a queue of timed events."""

    def __init__(self, seed: int, *, unclean: bool = False, replicas: int | None = None,
                 machine_crashes: bool | None = None, log_dir: Path | None = None,
                 tolerate: Iterable[int] = (), verbose: bool = False,
                 elr: bool = False) -> None:
        self.seed = seed
        self.elr = elr
        self.tolerated = frozenset(tolerate)
        self.tolerated_violations: list[InvariantViolation] = []
        self.verbose = verbose  # the trace tells every fetch, ISR change and ack too
        self.rng = rng = random.Random(seed)
        self.unclean = unclean
        self.log_dir = log_dir  # real UnifiedLogs there; in-memory logs without one
        self.replica_count = replicas if replicas is not None else rng.choice([3, 3, 3, 2, 4, 5])
        self.drop_rate = self.fault_drop_rate = rng.choice([0.0, 0.01, 0.05, 0.1])
        self.max_delay_ms = rng.choice([5, 20, 60])
        self.partition_max_bytes = rng.choice([100, 400, 1 << 20])
        self.produce_every_ms = rng.choice([20, 50, 150])
        crashes = rng.random() < 0.6
        self.machine_crashes = crashes if machine_crashes is None else machine_crashes
        self.now = 0
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.blocked: set[tuple[int, int]] = set()
        self.topic_id = uuid.UUID(int=rng.getrandbits(128))
        self.config = LogConfig(min_insync_replicas=MIN_INSYNC, segment_bytes=2048,
                                segment_index_bytes=4096)
        self.broker_config = {
            "num.replica.fetchers": 1, "replica.fetch.wait.max.ms": FETCH_WAIT_MS,
            "replica.fetch.min.bytes": 1, "replica.fetch.max.bytes": self.partition_max_bytes,
            "replica.fetch.response.max.bytes": 10 << 20,
            "replica.fetch.backoff.ms": FETCH_BACKOFF_MS,
            "replica.socket.timeout.ms": FETCH_TIMEOUT_MS - FETCH_WAIT_MS,
            "broker.heartbeat.interval.ms": HEARTBEAT_MS,
            "broker.session.timeout.ms": SESSION_TIMEOUT_MS}
        self.brokers = {
            i: Broker(i, self._open_log(i), flush_max_ms=rng.choice([5, 50, 300, 2000]),
                      checkpoint_ms=rng.choice([100, 500, 2000]))
            for i in range(1, self.replica_count + 1)}
        self.controller = SimController(lambda: self.now, unclean, self._on_commit)
        # The controller's side of requests: its handlers read `broker.controller`.
        self.controller_node = SimpleNamespace(controller=self.controller, cluster_id=CLUSTER_ID)
        # History, for the invariants.
        self.committed: list[bytes] = []  # every record that was below some leader's HW
        self.acked: list[tuple[int, bytes]] = []  # (offset, value) of acknowledged records
        self._acks_to_check: list[tuple[int, bytes]] = []
        self.epoch_leaders: dict[int, int] = {}
        self.leader_hws: dict[tuple[int, int], int] = {}
        self.compromised: set[int] = set()  # lost unflushed data and may still be in the ISR
        self.reregistered: set[int] = set()  # compromised, and registered since
        self.beyond_budget_at: int | None = None
        self.operator_election_at: int | None = None  # ELR: no eligible leader was left
        self.registered_incarnations: set[uuid.UUID] = set()
        self.elections = 0
        self.unclean_elections = 0
        self.lost_acks = 0
        self.writes = 0
        self.producing = True
        self.healed_at: int | None = None
        self.acked_after_heal = 0
        self.trace: list[str] = []

    def _open_log(self, broker_id: int) -> SimLog:
        if self.log_dir is None:
            return MemoryLog(self.topic_id, self.config)
        return TrackedUnifiedLog(self.log_dir / f"broker-{broker_id}" / f"{TOPIC}-{PARTITION}",
                                 self.config, self.topic_id, lambda: self.now)

    @property
    def strict(self) -> bool:
        """Whether acknowledged writes must survive: clean elections, and machine crashes that
        always left an in-sync (or eligible) replica holding what was acknowledged
        (_check_budget)."""
        return (not self.unclean and self.beyond_budget_at is None
                and self.operator_election_at is None)

    def _violation(self, invariant: int, detail: str) -> InvariantViolation:
        return InvariantViolation(invariant, f"{detail} (at {self.now} ms)",
                                  tuple(self.tolerated_violations))

    def _conformance(self, invariant: int, detail: str) -> None:
        """Invariants 6-10 (how the real code must behave to keep 1-5): raise, or, when the run
        tolerates the invariant (a bug known and open), note its first violation and go on."""
        if invariant not in self.tolerated:
            raise self._violation(invariant, detail)
        if all(v.invariant != invariant for v in self.tolerated_violations):
            self.tolerated_violations.append(
                InvariantViolation(invariant, f"{detail} (at {self.now} ms)"))
            self.trace.append(f"{self.now} invariant {invariant} broken (tolerated): {detail}")

    def note(self, text: Callable[[], str]) -> None:
        if self.verbose:
            self.trace.append(f"{self.now}   {text()}")

    def _describe_answer(self, leader: Broker, follower: int, data: Any) -> str:
        diverging = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
        return (f"{leader.broker_id} -> {follower}: error {data.error_code}, HW "
                f"{data.high_watermark}, diverging {diverging}, {len(data.records)} bytes")

    def partition(self) -> PartitionImage:
        part = partition_of(self.controller.image)
        assert part is not None
        return part

    # -- scheduling and the network ----------------------------------------------------------

    def _at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time_ms, self._seq, action))

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        """Schedule a fault of one's own (kill, restart, pause, cut, heal) before `run`."""
        self._at(time_ms, action)

    def _on_broker(self, broker: Broker, delay_ms: int, action: Callable[[], None]) -> None:
        """Run `action` in the broker's current process after `delay_ms` (late if paused)."""
        incarnation = broker.incarnation
        self._at(self.now + delay_ms, lambda: self._run_on(broker, incarnation, action))

    def _run_on(self, broker: Broker, incarnation: int, action: Callable[[], None]) -> None:
        if not broker.running or broker.incarnation != incarnation:
            return
        if broker.paused:
            broker.backlog.append(action)
            return
        action()
        self._after(broker)

    def _every(self, broker: Broker, period: Callable[[], int],
               action: Callable[[], None]) -> None:
        def tick() -> None:
            action()
            self._on_broker(broker, period(), tick)
        self._on_broker(broker, period(), tick)

    def _send(self, source: int, target: int, action: Callable[[], None],
              incarnation: int | None = None) -> None:
        """Run `action` at `target` after a random delay unless the message is lost; at a broker
        only in the process it went to (`incarnation`: the one that sent the request)."""
        if (source, target) in self.blocked or self.rng.random() < self.drop_rate:
            return
        arrival = self.now + self.rng.randint(1, self.max_delay_ms)
        if target == CONTROLLER:
            self._at(arrival, lambda: None if (source, target) in self.blocked else action())
            return
        broker = self.brokers[target]
        if incarnation is None:
            if not broker.running:
                return  # connection refused
            incarnation = broker.incarnation
        bound = incarnation
        self._at(arrival, lambda: None if (source, target) in self.blocked
                 else self._run_on(broker, bound, action))

    def _after(self, broker: Broker) -> None:
        """What the broker's event loop gets to next: acks=all answers, long-polling fetches
        woken, its fetchers' next fetches."""
        self._settle_acks(broker)
        self._wake_polls(broker)
        self._run_fetchers(broker)

    # -- stepping the real coroutines ----------------------------------------------------------

    def _start(self, broker: Broker, coro: Coroutine[Any, Any, Any],
               done: Callable[[Any], None], failed: Callable[[Exception], None]) -> Call:
        call = Call(coro, done, failed)
        broker.calls.add(call)
        self._step(broker, call)
        return call

    def _step(self, broker: Broker, call: Call, value: Any = None,
              error: Exception | None = None) -> None:
        try:
            waiting = call.coro.throw(error) if error is not None else call.coro.send(value)
        except StopIteration as stop:
            broker.calls.discard(call)
            call.waiting = None
            call.done(stop.value)
            return
        except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
            broker.calls.discard(call)
            call.waiting = None
            call.failed(exc)
            return
        call.waiting = waiting
        if isinstance(waiting, Outbound):
            self._carry(broker, call, waiting)
        elif isinstance(waiting, LongPoll):
            broker.polls.append(call)
            wake_ms = self.now + max(1, math.ceil(waiting.timeout_s * 1000))
            if call.wake_ms != wake_ms:
                call.wake_ms = wake_ms
                self._on_broker(broker, wake_ms - self.now, lambda: None)
        else:
            raise RuntimeError(f"the real code waited on {waiting!r}")

    def _cancel(self, broker: Broker, call: Call) -> None:
        broker.calls.discard(call)
        call.waiting = None
        call.coro.close()

    def _carry(self, broker: Broker, call: Call, out: Outbound) -> None:
        """Take a request to its target and the answer back; TimeoutError if none comes."""
        incarnation = broker.incarnation

        def reply(source: int, response: Any) -> None:
            self._send(source, broker.broker_id,
                       lambda: self._resume(broker, call, out, response), incarnation)

        if out.target == CONTROLLER:
            handler = out.handler
            assert handler is not None

            def at_controller() -> None:
                reply(CONTROLLER, run_now(cast(Coroutine[Any, Any, Any],
                                               handler(self.controller_node, out.request))))

            self._send(broker.broker_id, CONTROLLER, at_controller)
        else:
            leader = self.brokers[out.target]
            self._send(broker.broker_id, leader.broker_id,
                       lambda: self._serve_fetch(leader, out.request,
                                                 lambda r: reply(leader.broker_id, r)))
        timeout_ms = max(1, math.ceil(out.timeout_s * 1000))
        self._on_broker(broker, timeout_ms, lambda: self._resume(
            broker, call, out, None, TimeoutError("no answer in time")))

    def _resume(self, broker: Broker, call: Call, out: Outbound, response: Any,
                error: Exception | None = None) -> None:
        if call.waiting is out:  # else answered already, timed out, or cancelled
            self._step(broker, call, response, error)

    def _wake_polls(self, broker: Broker) -> None:
        polls, broker.polls = broker.polls, []
        for call in polls:
            if call.waiting is not None:
                self._step(broker, call)  # waits again unless done

    # -- the controller ------------------------------------------------------------------------

    def _bootstrap(self) -> None:
        controller = self.controller
        if self.elr:
            run_now(controller._commit([controller._record(
                "FeatureLevelRecord", name=ELR_VERSION_FEATURE, feature_level=1)]))
        for broker in self.brokers.values():
            self._start_process(broker)
            broker.life.broker_epoch = run_now(controller.register_broker(
                broker.broker_id, broker.life.incarnation_id, LISTENERS, None, []))
        for broker in self.brokers.values():
            run_now(controller.broker_heartbeat(broker.broker_id, broker.life.broker_epoch,
                                                controller.image.offset, False, False))
        run_now(controller._commit([
            controller._record("TopicRecord", name=TOPIC, topic_id=self.topic_id),
            controller._partition_record(self.topic_id, PARTITION, list(self.brokers))]))
        for broker in self.brokers.values():
            broker.life.fenced = False
            broker.image = controller.image
            self._serve(broker)
            self._on_broker(broker, HEARTBEAT_MS, partial(self._heartbeat, broker))
        self._controller_every(METADATA_REFRESH_MS,
                               lambda: self._publish(self.controller.image))
        self._controller_every(SESSION_TIMEOUT_MS // 2,
                               lambda: run_now(self.controller.fence_expired_brokers()))

    def _controller_every(self, period_ms: int, action: Callable[[], None]) -> None:
        def tick() -> None:
            action()
            self._at(self.now + period_ms, tick)
        self._at(self.now + period_ms, tick)

    def _on_commit(self, old: MetadataImage, new: MetadataImage, records: list[Any]) -> None:
        """Invariants 3 and 4 on every change the controller commits; then brokers learn it."""
        before, after = partition_of(old), partition_of(new)
        for record in records:
            if type(record).__name__ == "RegisterBrokerRecord":
                if record.broker_id in self.compromised:
                    self.reregistered.add(record.broker_id)
                # A process's first registration follows a kill or a crash here: unclean.
                first = record.incarnation_id not in self.registered_incarnations
                self.registered_incarnations.add(record.incarnation_id)
                if first and after is not None and record.broker_id in after.elr:
                    raise self._violation(11, f"broker {record.broker_id} registered after an "
                                              f"unclean shutdown and stays in ELR "
                                              f"{list(after.elr)}")
        if after is not None:
            if before is not None and before != after:
                self._check_change(before, after)
            if after.leader >= 0:
                leader = self.epoch_leaders.setdefault(after.leader_epoch, after.leader)
                if leader != after.leader:
                    raise self._violation(3, f"leader epoch {after.leader_epoch} given to "
                                             f"{leader} and to {after.leader}")
            # Registering took it out of the ISR (or it is the last member: _check_budget).
            for broker_id in self.compromised & self.reregistered:
                if broker_id not in after.isr:
                    self.compromised.discard(broker_id)
            self._check_budget()
        self._publish(new)

    def _check_change(self, before: PartitionImage, after: PartitionImage) -> None:
        if after.leader_epoch < before.leader_epoch:
            raise self._violation(3, f"the leader epoch went back from "
                                     f"{before.leader_epoch} to {after.leader_epoch}")
        if after.partition_epoch <= before.partition_epoch:
            raise self._violation(3, "the partition epoch did not move on a change")
        if not after.isr and not self.elr:
            raise self._violation(4, "the ISR became empty")
        if set(after.isr) & set(after.elr):
            raise self._violation(4, f"ISR {list(after.isr)} and ELR {list(after.elr)} overlap")
        if after.leader >= 0 and after.leader not in after.isr:
            raise self._violation(4, f"leader {after.leader} is not in the ISR "
                                     f"{list(after.isr)}")
        if after.elr and len(after.isr) >= MIN_INSYNC:
            raise self._violation(11, f"ELR {list(after.elr)} beside ISR {list(after.isr)}")
        if after.leader != before.leader and after.leader >= 0:
            self.elections += 1
            if after.leader not in before.isr and after.leader not in before.elr:
                self.unclean_elections += 1
                if not self.unclean and self.operator_election_at is None:
                    raise self._violation(
                        4, f"broker {after.leader} elected outside the ISR "
                           f"{list(before.isr)} with unclean election disabled")
        elr = f", ELR {list(after.elr)}" if after.elr or before.elr else ""
        self.trace.append(f"{self.now} controller: leader {after.leader} epoch "
                          f"{after.leader_epoch}, ISR {list(after.isr)}{elr} (partition epoch "
                          f"{after.partition_epoch})")

    def _check_budget(self) -> None:
        """Kafka keeps an acknowledged write while one in-sync replica holds it. Machine crashes
        are the one fault here that loses data; once every ISR member is a broker that lost its
        unflushed tail and has not left the ISR by re-registering, the guarantee no longer
        applies (the 'last replica standing' of KIP-966): acknowledged writes lost from then on
        are counted, not failed."""
        if not self.strict:
            return
        part = self.partition()
        holders = set(part.isr) | set(part.elr)  # with ELR, its members hold it too
        if holders and holders <= self.compromised:
            self.beyond_budget_at = self.now
            self.trace.append(f"{self.now} beyond the fault budget: every ISR and ELR member "
                              f"{sorted(holders)} lost unflushed data")

    def _publish(self, image: MetadataImage) -> None:
        for broker in self.brokers.values():
            self._send(CONTROLLER, broker.broker_id, partial(self._receive_image, broker, image))

    # -- broker processes and their lifecycle ------------------------------------------------

    def _start_process(self, broker: Broker) -> None:
        broker.incarnation += 1
        broker.running, broker.paused, broker.backlog = True, False, []
        broker.serving = False
        broker.image, broker.applied = MetadataImage(), None
        view = cast(Any, BrokerView(broker, self.broker_config))
        replicas = SimReplicaManager(broker.broker_id, SimLogManager(broker.log),
                                     lambda name, image: self.config, lambda path: None)
        replicas.replica_lag_time_max_ms = REPLICA_LAG_MS
        replicas.clock_ms = lambda: float(self.now)
        replicas.propose_isr = lambda hosted, isr: self._propose_isr(broker, hosted, isr)
        replicas.on_followed = lambda followed: self._update_fetchers(broker, followed)
        broker.replicas = replicas
        broker.lifecycle = SimLifecycle(view)
        broker.lifecycle.incarnation_id = uuid.UUID(int=self.rng.getrandbits(128))
        broker.fetch_manager = ReplicaFetcherManager(view)
        broker.fetch_manager.channels = cast(Any, SimChannels())
        broker.alter = AlterPartitionManager(view)
        broker.alter_running, broker.proposed = False, {}
        broker.calls, broker.fetching, broker.fetch_wakes = set(), {}, set()
        broker.polls, broker.acks = [], []
        # What survived on disk: the log, and the high watermark of the last checkpoint.
        broker.log.high_watermark = broker.hw_checkpoint
        self._every(broker, lambda: self.rng.randint(1, broker.flush_max_ms),
                    lambda: self._flush(broker))
        self._every(broker, lambda: broker.checkpoint_ms, lambda: self._checkpoint(broker))

    def _flush(self, broker: Broker) -> None:
        broker.flushed_end = broker.log.log_end_offset

    def _checkpoint(self, broker: Broker) -> None:
        broker.hw_checkpoint = broker.log.high_watermark

    def _register(self, broker: Broker) -> None:
        """BrokerLifecycleManager: _with_retries(_register), then the heartbeat loop."""
        def registered(epoch: int) -> None:
            broker.life.broker_epoch = epoch
            self._heartbeat(broker)

        def failed(exc: Exception) -> None:
            self._on_broker(broker, LIFECYCLE_RETRY_MS, lambda: self._register(broker))

        self._start(broker, broker.life._register(), registered, failed)

    def _heartbeat(self, broker: Broker) -> None:
        """One turn of BrokerLifecycleManager._heartbeat_loop."""
        life = broker.life

        def answered(answer: Any) -> None:
            life.fenced = answer.is_fenced
            if not life.fenced and not broker.serving:
                self._serve(broker)  # Broker.start goes on once unfenced
            again()

        def failed(exc: Exception) -> None:
            if isinstance(exc, KafkaError) and exc.code in (ErrorCode.STALE_BROKER_EPOCH,
                                                            ErrorCode.BROKER_ID_NOT_REGISTERED):
                self._register(broker)  # the controller lost our registration
                return
            again()

        def again() -> None:
            interval_ms = (int(life.interval_s * 1000) if not life.fenced
                           else LIFECYCLE_RETRY_MS)
            self._on_broker(broker, interval_ms, lambda: self._heartbeat(broker))

        self._start(broker, life._heartbeat(), answered, failed)

    def _serve(self, broker: Broker) -> None:
        """Broker.start once unfenced: the replica manager takes the image, and the periodic
        ISR shrink starts."""
        broker.serving = True
        broker.applied = broker.image
        broker.rm.apply_image(None, broker.image)
        self._every(broker, lambda: REPLICA_LAG_MS // 2, broker.rm.shrink_isrs)

    def _receive_image(self, broker: Broker, image: MetadataImage) -> None:
        if image.offset <= broker.image.offset:
            return  # older than what it replayed already
        broker.image = image
        if broker.serving:
            old, broker.applied = broker.applied, image
            broker.rm.apply_image(old, image)
            self.note(lambda: f"{broker.broker_id} applies {partition_of(image)}")

    # -- ISR changes: AlterPartitionManager ----------------------------------------------------

    def _propose_isr(self, broker: Broker, hosted: Partition, new_isr: tuple[int, ...]) -> None:
        """AlterPartitionManager.submit, its sending task run by the simulation."""
        assert broker.alter is not None
        self.note(lambda: f"{broker.broker_id} proposes ISR {list(new_isr)} (leader epoch "
                          f"{hosted.leader_epoch}, partition epoch {hosted.partition_epoch})")
        tp = (hosted.topic, hosted.partition)
        broker.alter.queue(hosted, new_isr)
        broker.proposed[tp] = (new_isr, hosted.leader_epoch, hosted.partition_epoch)
        if not broker.alter_running:
            broker.alter_running = True
            self._on_broker(broker, 0, lambda: self._send_alter(broker))

    def _send_alter(self, broker: Broker) -> None:
        """One turn of AlterPartitionManager._send_queued: the real _send, then _settle; a
        request that fails is retried after the real _not_answered's backoff."""
        alter = broker.alter
        assert alter is not None
        if not alter._queued:
            broker.alter_running = False
            return
        batch = {tp: p for tp, p in alter._queued.items() if p.current}
        alter._queued = {}
        if not batch:
            self._on_broker(broker, 0, lambda: self._send_alter(broker))
            return

        def answered(response: Any) -> None:
            self.note(lambda: f"{broker.broker_id} AlterPartition answer: " + ", ".join(
                f"error {a.error_code} ISR {list(a.isr)} leader epoch {a.leader_epoch} "
                f"partition epoch {a.partition_epoch}"
                for t in response.topics for a in t.partitions))
            pending = [(p.hosted, p.new_isr, p.hosted.pending_isr) for p in batch.values()]
            alter._settle(batch, response)
            for hosted, isr, newer in pending:
                if newer is not None and newer != isr and hosted.pending_isr is None:
                    self._conformance(7, f"broker {broker.broker_id}: the answer to ISR "
                                         f"proposal {list(isr)} settled the newer proposal "
                                         f"{list(newer)}")
            self._on_broker(broker, 0, lambda: self._send_alter(broker))

        def failed(exc: Exception) -> None:
            for tp, proposal in batch.items():
                alter._queued.setdefault(tp, proposal)
            retry_ms = round(alter._not_answered(exc) * 1000)
            self._on_broker(broker, retry_ms, lambda: self._send_alter(broker))

        call = self._start(broker, alter._send(batch), answered, failed)
        if isinstance(call.waiting, Outbound):
            for topic in call.waiting.request.topics:
                for part in topic.partitions:
                    made = broker.proposed.get((topic.topic_name, part.partition_index))
                    sent = (tuple(part.new_isr), part.leader_epoch, part.partition_epoch)
                    if made is not None and made[0] == sent[0] and made != sent:
                        self._conformance(
                            8, f"broker {broker.broker_id} sends ISR proposal {list(sent[0])} "
                               f"made in leader epoch {made[1]}, partition epoch {made[2]}, as "
                               f"of leader epoch {sent[1]}, partition epoch {sent[2]}")

    # -- replication: the follower's fetchers --------------------------------------------------

    def _update_fetchers(self, broker: Broker, followed: dict[tuple[str, int], Partition]) -> None:
        """ReplicaFetcherManager.update itself. The asyncio task it starts for a new fetcher is
        cancelled before it ever runs: the simulation runs each fetcher's loop (_run_fetchers).
        A fetch out for a fetcher update() let go is dropped, as its cancelled task would."""
        manager = broker.fetch_manager
        assert manager is not None
        manager.update(followed)
        for fetcher in manager.fetchers.values():
            if fetcher.task is not None:
                fetcher.task.cancel()
                fetcher.task = None
        for key, (fetcher, call) in list(broker.fetching.items()):
            if manager.fetchers.get(key) is not fetcher:
                del broker.fetching[key]
                self._cancel(broker, call)

    def _run_fetchers(self, broker: Broker) -> None:
        """Each fetcher's ReplicaFetcher.run, where it would wake: fetch the partitions not
        backing off (the real fetch and process), or sleep until one is ready."""
        manager = broker.fetch_manager
        if manager is None or not broker.serving:
            return
        now_s = self.now / 1000  # the loop's time, as the fetchers keep it
        for key, fetcher in list(manager.fetchers.items()):
            if key in broker.fetching:
                continue
            ready = {tp: f for tp, f in fetcher.partitions.items() if f.delayed_until <= now_s}
            if not ready:  # it sleeps max(wake - now, 0.001) s, as ReplicaFetcher.run does
                wake_s = min(f.delayed_until for f in fetcher.partitions.values())
                wake_ms = self.now + max(1, math.ceil((wake_s - now_s) * 1000))
                if wake_ms not in broker.fetch_wakes:
                    broker.fetch_wakes.add(wake_ms)
                    self._on_broker(broker, wake_ms - self.now,
                                    partial(broker.fetch_wakes.discard, wake_ms))
                continue
            self._fetch(broker, key, fetcher, ready)

    def _fetch(self, broker: Broker, key: tuple[int, int], fetcher: ReplicaFetcher,
               ready: dict[tuple[str, int], _Followed]) -> None:
        manager = broker.fetch_manager
        assert manager is not None

        def answered(response: Any) -> None:
            del broker.fetching[key]
            if response.error_code:
                fetcher._delay(ready, manager.backoff_s)
            else:
                before = {tp: (f.hosted.log.log_end_offset, f.hosted.log.latest_epoch)
                          for tp, f in ready.items()}
                manager.process(fetcher, ready, response)
                self.note(lambda: f"{broker.broker_id} fetched: LEO " + ", ".join(
                    f"{before[tp][0]} -> {f.hosted.log.log_end_offset} HW "
                    f"{f.hosted.log.high_watermark}" for tp, f in ready.items()))
                self._check_divergence_progress(broker, fetcher, ready, before, response)

        def failed(exc: Exception) -> None:
            del broker.fetching[key]
            fetcher._delay(ready, manager.backoff_s)

        call = Call(_answer_of(manager.fetch(fetcher.leader_id, ready)), answered, failed)
        broker.fetching[key] = (fetcher, call)
        broker.calls.add(call)
        self._step(broker, call)

    def _check_divergence_progress(self, broker: Broker, fetcher: ReplicaFetcher,
                                   ready: dict[tuple[str, int], _Followed],
                                   before: dict[tuple[str, int], tuple[int, int]],
                                   response: Any) -> None:
        """Invariant 9: after a DivergingEpoch answer the follower's next fetch differs."""
        by_id = {(f.hosted.topic_id, f.hosted.partition): tp for tp, f in ready.items()}
        for topic in response.responses:
            for data in topic.partitions:
                tp = by_id.get((topic.topic_id, data.partition_index), TP)
                followed = ready.get(tp)
                diverging = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
                if followed is None or fetcher.partitions.get(tp) is not followed or (
                        diverging == (-1, -1)):
                    continue
                plog = followed.hosted.log
                if (plog.log_end_offset, plog.latest_epoch) == before[tp]:
                    self._conformance(
                        9, f"broker {broker.broker_id} was answered DivergingEpoch {diverging} "
                           f"at its end {plog.log_end_offset} with last epoch "
                           f"{plog.latest_epoch}, and truncating changed neither: it will ask "
                           "the same again")

    # -- replication: the leader's side of a follower's fetch ----------------------------------

    def _serve_fetch(self, leader: Broker, request: Any,
                     respond: Callable[[Any], None]) -> None:
        """server/fetch.py's _handle_replica_fetch, long poll and all; the answer goes back with
        its batches copied out of the leader's log, as on the wire."""
        if not leader.serving:
            return  # not listening before it is unfenced: the follower times out
        follower = request.replica_state.replica_id
        asked = request.topics[0].partitions[0]
        self.note(lambda: f"{leader.broker_id} <- fetch from {follower} at {asked.fetch_offset}"
                          f" (last epoch {asked.last_fetched_epoch}, leader epoch "
                          f"{asked.current_leader_epoch})")
        hosted = leader.rm.partitions.get(TP)
        state = hosted.followers.get(follower) if hosted is not None else None
        known = (state.log_end_offset, state.last_fetch_ms) if state is not None else None
        answers: list[Any] = []

        def answered(response: Any) -> None:
            answers.append(response)
            for topic in response.responses:
                for data in topic.partitions:
                    data.records = b"".join(bytes(view) for view in data.records or [])
                    if self.verbose:
                        self.note(partial(self._describe_answer, leader, follower, data))
            respond(response)

        context = cast(Any, SimpleNamespace(broker=BrokerView(leader, self.broker_config),
                                            listener_name="PLAINTEXT",
                                            api_version=REPLICA_FETCH_VERSION))
        self._start(leader, _handle_replica_fetch(context, request, follower, True), answered,
                    _ignore)
        refused = any(data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
                      or data.diverging_epoch.epoch >= 0 or data.diverging_epoch.end_offset >= 0
                      for response in answers for topic in response.responses
                      for data in topic.partitions)
        if (refused and state is not None
                and (state.log_end_offset, state.last_fetch_ms) != known):
            self._conformance(6, f"leader {leader.broker_id} took {follower}'s fetch at "
                                 f"{asked.fetch_offset} (last epoch {asked.last_fetched_epoch}) "
                                 "as its log end, and answered it DivergingEpoch or "
                                 "OFFSET_OUT_OF_RANGE")

    # -- the producer --------------------------------------------------------------------------

    def _produce(self) -> None:
        if not self.producing:
            return
        self._at(self.now + self.produce_every_ms, self._produce)
        self.writes += 1
        write = Write(self.writes, [f"w{self.writes}.{i}".encode()
                                    for i in range(self.rng.randint(1, 3))])
        # The leader some broker's metadata names (what a Metadata request there answers).
        images = [self.controller.image] + [b.image for b in self.brokers.values() if b.running]
        part = partition_of(self.rng.choice(images))
        if part is None or part.leader < 0:
            write.outcome = "no leader known"
            return
        leader = self.brokers[part.leader]
        self._send(PRODUCER, leader.broker_id, lambda: self._broker_produce(leader, write))

    def _broker_produce(self, broker: Broker, write: Write) -> None:
        """handle_produce with acks=-1: check_min_insync, append_records, wait_for_acks."""
        if not broker.serving:
            return  # not listening yet
        replicas = broker.rm
        batch = build_batch([Record(i, self.now, None, value)
                             for i, value in enumerate(write.values)])
        try:
            replicas.check_min_insync(TOPIC, PARTITION)
            info = replicas.append_records(TOPIC, PARTITION, batch)
            end = info.last_offset + 1
            waiting = replicas.wait_for_acks(TOPIC, PARTITION, end, PRODUCE_TIMEOUT_MS / 1000)
        except KafkaError as exc:
            write.outcome = exc.code.name
            return
        if waiting is None:
            self._acknowledge(write, info.first_offset)
            return
        # _await_acks would wait for the high watermark under a wall-clock timeout; the
        # simulation waits on the same future on its own clock instead (_settle_acks).
        if isinstance(waiting, Coroutine):
            waiting.close()
        hosted = replicas.leader_partition(TOPIC, PARTITION)
        write.first_offset = info.first_offset
        write.waiting_on = (hosted, hosted.wait_for_high_watermark(end),
                            self.now + PRODUCE_TIMEOUT_MS)
        broker.acks.append(write)
        self._on_broker(broker, PRODUCE_TIMEOUT_MS, lambda: None)  # to time out

    def _settle_acks(self, broker: Broker) -> None:
        """ReplicaManager._await_acks once its future is done: NOT_ENOUGH_REPLICAS_AFTER_APPEND
        from _check_isr_after_append, else acknowledged; REQUEST_TIMED_OUT at the deadline."""
        waiting = []
        for write in broker.acks:
            assert write.waiting_on is not None
            hosted, future, deadline_ms = write.waiting_on
            if future.done():
                if future.cancelled() or future.exception() is not None:
                    write.outcome = "NOT_LEADER_OR_FOLLOWER"
                    continue
                try:
                    _check_isr_after_append(hosted)
                except KafkaError as exc:
                    write.outcome = exc.code.name
                    continue
                self._acknowledge(write, write.first_offset)
            elif self.now >= deadline_ms:
                future.cancel()
                write.outcome = "REQUEST_TIMED_OUT"
            else:
                waiting.append(write)
        broker.acks = waiting

    def _acknowledge(self, write: Write, first_offset: int) -> None:
        self.note(lambda: f"acknowledged w{write.number} at {first_offset}")
        write.outcome = "acknowledged"
        for i, value in enumerate(write.values):
            self.acked.append((first_offset + i, value))
            if self.strict:
                self._acks_to_check.append((first_offset + i, value))
        if self.healed_at is not None:
            self.acked_after_heal += 1
            self.producing = False  # progress shown: let the replicas settle

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """INVARIANTS 1-3 and 10, after every event (the controller's side of 3 and 4 is checked
        on every commit, 5 after healing, 6-9 where the real code acts)."""
        strict = self.strict
        for broker in self.brokers.values():
            log = broker.log
            truncated = log.truncated_to
            if truncated is not None:  # verify again from there; it is no longer fsynced past it
                log.truncated_to = None
                broker.flushed_end = min(broker.flushed_end, truncated)
                broker.verified = min(broker.verified, truncated)
            if not (broker.running and broker.serving):
                continue
            hosted = broker.rm.partitions.get(TP)
            if hosted is None:
                continue
            epoch = hosted.leader_epoch
            if epoch < broker.max_leader_epoch:
                raise self._violation(3, f"broker {broker.broker_id}'s leader epoch went "
                                         f"back from {broker.max_leader_epoch} to {epoch}")
            broker.max_leader_epoch = epoch
            if not hosted.is_leader:
                continue
            if self.epoch_leaders.get(epoch) != broker.broker_id:
                raise self._violation(3, f"broker {broker.broker_id} leads epoch {epoch}, "
                                         f"which the controller gave to "
                                         f"{self.epoch_leaders.get(epoch)}")
            high_watermark = broker.log.high_watermark
            key = (broker.broker_id, epoch)
            if self.verbose and high_watermark != self.leader_hws.get(key):
                self.trace.append(f"{self.now}   leader {broker.broker_id} HW {high_watermark} "
                                  f"(epoch {epoch}, maximal ISR {list(hosted.maximal_isr)})")
            if high_watermark < self.leader_hws.get(key, 0):
                raise self._violation(2, f"leader {broker.broker_id}'s high watermark "
                                         f"went back from {self.leader_hws[key]} to "
                                         f"{high_watermark} in epoch {epoch}")
            self.leader_hws[key] = high_watermark
            if strict:
                self._match_committed(broker, high_watermark, 2, "its high watermark as leader")
        self._check_maximal_isr()
        if not strict:
            return
        for offset, value in self._acks_to_check:
            if offset >= len(self.committed) or self.committed[offset] != value:
                raise self._violation(1, f"{value!r} acknowledged at {offset} is not what "
                                         "was committed there")
        self._acks_to_check.clear()
        part = self.partition()
        for replica in part.isr:
            if replica not in self.compromised:
                self._match_committed(self.brokers[replica], len(self.committed), 1,
                                      "being in the ISR")
        for replica in part.elr:
            if replica not in self.compromised:
                self._match_committed(self.brokers[replica], len(self.committed), 11,
                                      "being in the ELR")

    def _check_maximal_isr(self) -> None:
        """Invariant 10, for the leader the controller elected, once it leads that epoch."""
        part = self.partition()
        leader = self.brokers.get(part.leader)
        hosted = leader.hosted() if leader is not None else None
        if (hosted is None or not hosted.is_leader or hosted.leader_epoch != part.leader_epoch
                or set(part.isr) <= set(hosted.maximal_isr)):
            return
        self._conformance(10, f"leader {part.leader} moves its high watermark over "
                              f"{list(hosted.maximal_isr)}, the controller's ISR is "
                              f"{list(part.isr)} (partition epoch {part.partition_epoch})")

    def _match_committed(self, broker: Broker, end: int, invariant: int, because: str) -> None:
        """The broker's log below `end` is `committed` (extended by what a leader's high
        watermark newly covers)."""
        if end <= broker.verified:
            return
        log = broker.log
        if end > log.log_end_offset:
            raise self._violation(invariant, f"broker {broker.broker_id} ends at "
                                             f"{log.log_end_offset} but must hold committed "
                                             f"offsets up to {end} by {because}")
        values = log_values(log, broker.verified, end)
        if len(values) != end - broker.verified:
            raise self._violation(invariant, f"broker {broker.broker_id}'s log has a gap "
                                             f"below {end}")
        for offset, value in enumerate(values, broker.verified):
            if offset < len(self.committed):
                if self.committed[offset] != value:
                    raise self._violation(
                        invariant, f"broker {broker.broker_id} has {value!r} at {offset} "
                                   f"({because}) where {self.committed[offset]!r} was committed")
            else:
                self.committed.append(value)
        broker.verified = end

    # -- faults --------------------------------------------------------------------------------

    def kill(self, broker: Broker, lose_unflushed: bool) -> None:
        """kill -9 (the page cache survives: nothing written is lost) or a machine crash (what
        was not fsynced is gone)."""
        if not broker.running:
            return
        log = broker.log
        lost = lose_unflushed and broker.flushed_end < log.log_end_offset
        self.trace.append(f"{self.now} {'crash' if lose_unflushed else 'kill'} "
                          f"{broker.broker_id}" + (f" (loses {broker.flushed_end}-"
                                                   f"{log.log_end_offset})" if lost else ""))
        broker.running = broker.paused = broker.serving = False
        broker.backlog = []
        for call in list(broker.calls):
            self._cancel(broker, call)
        broker.polls, broker.fetching = [], {}
        for write in broker.acks:  # the process is gone, and its purgatory with it
            assert write.waiting_on is not None
            future = write.waiting_on[1]
            if future.done() and not future.cancelled():
                future.exception()
            future.cancel()
        broker.acks = []
        if lost:
            log.truncate_to(broker.flushed_end)
            self.compromised.add(broker.broker_id)
            self.reregistered.discard(broker.broker_id)
            self._check_budget()

    def restart(self, broker: Broker) -> None:
        if not broker.running:
            self.trace.append(f"{self.now} restart {broker.broker_id}")
            self._start_process(broker)
            self._register(broker)

    def pause(self, broker: Broker, duration_ms: int) -> None:
        if not broker.running or broker.paused:
            return
        self.trace.append(f"{self.now} pause {broker.broker_id} for {duration_ms} ms")
        broker.paused = True
        incarnation = broker.incarnation
        self._at(self.now + duration_ms, lambda: self.resume(broker, incarnation))

    def resume(self, broker: Broker, incarnation: int) -> None:
        if broker.incarnation != incarnation or not broker.running or not broker.paused:
            return
        self.trace.append(f"{self.now} resume {broker.broker_id}")
        broker.paused = False
        backlog, broker.backlog = broker.backlog, []
        for action in backlog:  # timers and messages that came due meanwhile, in order
            action()
            self._after(broker)
            self.check()

    def cut(self, group: set[int]) -> None:
        """A network partition between `group` and the other nodes (the controller is 0)."""
        self.trace.append(f"{self.now} partition {sorted(group)}")
        nodes = [CONTROLLER, *self.brokers]
        for a in nodes:
            for b in nodes:
                if (a in group) != (b in group):
                    self.blocked.add((a, b))

    def heal(self) -> None:
        self.trace.append(f"{self.now} heal the network")
        self.blocked.clear()

    def _pause_leader(self, duration_ms: int) -> None:
        leader = self.brokers.get(self.partition().leader)
        if leader is not None:
            self.pause(leader, duration_ms)

    def _fault_times(self, until_ms: int) -> Iterator[int]:
        """When faults start: gaps of a quarter to all of a gap this seed picks."""
        gap_ms = self.rng.choice([300, 800, 1500])
        time_ms = self.rng.randint(gap_ms // 4, gap_ms)
        while time_ms < until_ms:
            yield time_ms
            time_ms += self.rng.randint(gap_ms // 4, gap_ms)

    def _schedule_faults(self, until_ms: int) -> None:
        rng = self.rng
        ids = sorted(self.brokers)
        for time_ms in self._fault_times(until_ms):
            broker = self.brokers[rng.choice(ids)]
            kind = rng.random()
            crash = self.machine_crashes and rng.random() < 0.5
            if kind < 0.3:
                self._at(time_ms, partial(self.kill, broker, crash))
                self._at(time_ms + rng.randint(50, 2000), partial(self.restart, broker))
            elif kind < 0.45:
                duration = rng.randint(50, 1500)
                self._at(time_ms, partial(self.pause, broker, duration))
            elif kind < 0.55:  # the leader of the moment: a zombie if it outlasts its session
                duration = rng.randint(300, 2000)
                self._at(time_ms, partial(self._pause_leader, duration))
            elif kind < 0.75:
                group = set(rng.sample([CONTROLLER, *ids], rng.randint(1, len(ids))))
                self._at(time_ms, partial(self.cut, group))
                self._at(time_ms + rng.randint(100, 2500), self.heal)
            elif kind < 0.85:
                self._at(time_ms, partial(self.cut, {broker.broker_id}))
                self._at(time_ms + rng.randint(100, 2500), self.heal)
            else:
                self._at(time_ms, partial(self.kill, broker, crash))
                self._at(time_ms + rng.randint(1000, 3000), partial(self.restart, broker))

    # -- the run -------------------------------------------------------------------------------

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        while self.events and self.events[0][0] <= end_ms:
            time_ms, _, action = heapq.heappop(self.events)
            self.now = max(self.now, time_ms)
            action()
            self.check()
            if stop is not None and stop():
                return
        self.now = max(self.now, end_ms)

    def run(self, fault_ms: int = 6000, heal_ms: int = 15000, random_faults: bool = True) -> None:
        """Faults for `fault_ms` (the seed's, and those scheduled with `at`), then all of them
        healed: within `heal_ms` a new write must be acknowledged and every replica must
        converge (invariant 5)."""
        loop = SimEventLoop(lambda: self.now)
        try:
            loop.run_until_complete(self._run(fault_ms, heal_ms, random_faults))
        finally:
            for broker in self.brokers.values():
                for call in list(broker.calls):
                    self._cancel(broker, call)
                if isinstance(broker.log, UnifiedLog):
                    broker.log.close()
            # The fetcher tasks update() started, cancelled before their first step, finish.
            tasks = asyncio.all_tasks(loop)
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _run(self, fault_ms: int, heal_ms: int, random_faults: bool) -> None:
        self._bootstrap()
        self._at(self.produce_every_ms, self._produce)
        if random_faults:
            self._schedule_faults(fault_ms)
        self.run_until(fault_ms)
        self.trace.append(f"{self.now} heal everything")
        self.healed_at = self.now
        self.heal()
        self.drop_rate = 0.0
        for broker in self.brokers.values():
            self.resume(broker, broker.incarnation)
            self.restart(broker)
        self.producing = True
        self._at(self.now + 1, self._produce)
        if self.elr:
            self._controller_every(METADATA_REFRESH_MS, self._operator_recovers)
        self.run_until(fault_ms + heal_ms, self.converged)
        if not self.converged():
            raise self._violation(5, f"not converged {heal_ms} ms after healing: "
                                     f"{self.describe_state()}")
        self._check_final_log()

    def _operator_recovers(self) -> None:
        """ELR: once every fault has healed, a partition with no ISR and no ELR (its eligible
        replicas all restarted uncleanly) is offline by design; an operator asks for an unclean
        election (ElectLeaders, as kafka-leader-election.sh --election-type unclean)."""
        part = self.partition()
        if part.leader >= 0 or part.isr or part.elr:
            return
        if self.operator_election_at is None:
            self.operator_election_at = self.now
            self.trace.append(f"{self.now} operator: no eligible leader (last known ELR "
                              f"{list(part.last_known_elr)}), unclean election")
        run_now(self.controller.elect_leaders(UNCLEAN, {TOPIC: [PARTITION]}))

    def converged(self) -> bool:
        """Invariant 5: a write acknowledged since the heal; the ISR is every replica; every
        broker runs, unfenced, in the controller's leader epoch; HW == LEO everywhere; the
        logs are identical."""
        if self.acked_after_heal == 0:
            return False
        part = self.partition()
        if part.leader < 0 or sorted(part.isr) != sorted(part.replicas):
            return False
        end = -1
        for broker in self.brokers.values():
            hosted = broker.hosted()
            if (hosted is None or broker.paused or broker.fenced
                    or hosted.leader_epoch != part.leader_epoch):
                return False
            log = broker.log
            if log.high_watermark != log.log_end_offset or end not in (-1, log.log_end_offset):
                return False
            end = log.log_end_offset
        contents = [log_values(b.log, 0, end) for b in self.brokers.values()]
        return all(c == contents[0] for c in contents)

    def _check_final_log(self) -> None:
        """The converged log holds each write at most once and, in strict runs, every
        acknowledged write at its offset; other runs count the ones lost."""
        log = self.brokers[self.partition().leader].log
        final = log_values(log, 0, log.log_end_offset)
        twice = [value for value, count in Counter(final).items() if count > 1]
        if twice:
            raise self._violation(1, f"writes in the log twice: {twice[:5]}")
        lost = [(o, v) for o, v in self.acked if o >= len(final) or final[o] != v]
        self.lost_acks = len(lost)
        if lost and self.strict:
            raise self._violation(1, f"acknowledged writes lost: {lost[:5]}")

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.replica_count} replicas, "
                f"{'unclean' if self.unclean else 'clean'} election, machine crashes "
                f"{'on' if self.machine_crashes else 'off'}, drop {self.fault_drop_rate}, delay <= "
                f"{self.max_delay_ms} ms, fetch <= {self.partition_max_bytes} bytes, "
                f"{'real' if self.log_dir else 'in-memory'} logs{', ELR' if self.elr else ''}")

    def describe_state(self) -> str:
        part = self.partition()
        brokers = []
        for broker in self.brokers.values():
            hosted = broker.hosted()
            state = ("down" if not broker.running else "paused" if broker.paused
                     else "fenced" if broker.fenced else "up")
            brokers.append(f"{broker.broker_id}: {state} epoch "
                           f"{hosted.leader_epoch if hosted else '-'} LEO "
                           f"{broker.log.log_end_offset} HW {broker.log.high_watermark}")
        return (f"leader {part.leader} epoch {part.leader_epoch} ISR {list(part.isr)}; "
                f"{'; '.join(brokers)}")

    def summary(self) -> str:
        budget = (f", beyond the fault budget at {self.beyond_budget_at} ms"
                  if self.beyond_budget_at is not None else "")
        if self.operator_election_at is not None:
            budget += f", no eligible leader: an operator's unclean election at " \
                      f"{self.operator_election_at} ms"
        tolerated = "".join(f", invariant {v.invariant} broken (tolerated)"
                            for v in self.tolerated_violations)
        return (f"{self.describe()}: ok, {len(self.acked)} records acknowledged, "
                f"{len(self.committed)} committed, {self.elections} elections "
                f"({self.unclean_elections} unclean), {self.lost_acks} acknowledged records "
                f"lost{budget}{tolerated}")


def _ignore(exc: Exception) -> None:
    """A request handler that failed: the connection closes and the requester times out."""


def run_seed(seed: int, *, unclean: bool = False, replicas: int | None = None,
             machine_crashes: bool | None = None, log_dir: Path | None = None,
             tolerate: Iterable[int] = (), elr: bool = False) -> Simulation:
    """Run one seed; an invariant violation names the command that replays it."""
    sim = Simulation(seed, unclean=unclean, replicas=replicas, machine_crashes=machine_crashes,
                     log_dir=log_dir, tolerate=tolerate, elr=elr)
    try:
        sim.run()
    except InvariantViolation as exc:
        trace = "\n    ".join(sim.trace[-12:])
        flags = ((" --unclean" if unclean else "") + (" --real-log" if log_dir else "")
                 + (" --elr" if elr else ""))
        if replicas is not None:
            flags += f" --replicas {replicas}"
        if machine_crashes is not None:
            flags += f" --machine-crashes {'on' if machine_crashes else 'off'}"
        if sim.tolerated:
            flags += " --tolerate " + ",".join(map(str, sorted(sim.tolerated)))
        raise InvariantViolation(
            exc.invariant, f"{exc.detail}\n  {sim.describe()}, after:\n    {trace}\n"
            f"  replay: .venv/bin/python -m tests.unit.replication.simulation --seed {seed}"
            f"{flags} --verbose", exc.after) from exc
    return sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1, help="run seeds seed..seed+count-1")
    parser.add_argument("--unclean", action="store_true",
                        help="unclean.leader.election.enable=true")
    parser.add_argument("--elr", action="store_true",
                        help="eligible.leader.replicas.version=1 (KIP-966)")
    parser.add_argument("--real-log", action="store_true",
                        help="storage.log.UnifiedLog in a temporary directory")
    parser.add_argument("--replicas", type=int, help="2-5 (default: the seed says)")
    parser.add_argument("--machine-crashes", choices=["on", "off"],
                        help="whether crashes lose unflushed data (default: the seed says)")
    parser.add_argument("--tolerate", default="",
                        help="invariants (of 6-10) to note and go on past, e.g. 6,8")
    parser.add_argument("--trace", action="store_true", help="print the whole fault trace")
    parser.add_argument("--verbose", action="store_true",
                        help="the trace tells every fetch, ISR change and ack too")
    args = parser.parse_args()
    tolerate = [int(n) for n in args.tolerate.split(",") if n]
    # The brokers' own warnings (fencing, truncation below the HW) would drown the summary.
    logging.basicConfig(level=logging.ERROR)
    failed = 0
    for seed in range(args.seed, args.seed + args.count):
        with tempfile.TemporaryDirectory() as tmp:
            crashes = None if args.machine_crashes is None else args.machine_crashes == "on"
            sim = Simulation(seed, unclean=args.unclean, tolerate=tolerate,
                             replicas=args.replicas, machine_crashes=crashes,
                             log_dir=Path(tmp) if args.real_log else None,
                             verbose=args.verbose, elr=args.elr)
            try:
                sim.run()
            except AssertionError as exc:
                failed += 1
                if args.trace or args.verbose:
                    print("\n".join(sim.trace))
                print(f"{sim.describe()}: FAILED at {sim.now} ms: {exc}")
                continue
        if args.trace or args.verbose:
            print("\n".join(sim.trace))
        print(sim.summary())
    if failed:
        raise SystemExit(f"{failed} seed(s) failed")


if __name__ == "__main__":
    main()
