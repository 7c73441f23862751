"""RaftManager: runs the `__cluster_metadata` RaftCore on the event loop (Kafka's
KafkaRaftManager and its RaftIoThread).

It carries out the core's effects in order: the quorum-state file is written (and fsynced)
before any message that follows it goes out, flushes run off the loop, requests go to peers
over NodeChannels and their answers come back into the core, and answers to peers' requests
complete the handler that is waiting for them. After every step it hands newly committed
entries (below the high watermark) to the state machine in order, or the snapshot the core
installed. Owned by the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from kafka_ext.network.node_client import NodeChannels
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.raft import wire
from kafka_ext.raft.core import (
    Flush,
    NotLeaderError,
    PersistElectionState,
    RaftConfig,
    RaftCore,
    Role,
    Send,
    SnapshotInstalled,
)
from kafka_ext.raft.kafka_metadata_log import KafkaMetadataLog
from kafka_ext.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    OffsetAndEpoch,
    RaftRequest,
    RaftResponse,
    ReplicaKey,
    VoteRequest,
)
from kafka_ext.raft.quorum_state import QUORUM_STATE_FILE, ElectionState

log = logging.getLogger(__name__)

_REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
                  FetchSnapshotRequest)


class StateMachine(Protocol):
    """What the committed log feeds: the controller's image."""

    def apply_committed(self, first_offset: int, end_offset: int) -> None:
        """Entries [first_offset, end_offset) are committed; read and apply them."""

    def load_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """The log now starts at this snapshot: replace the state with it."""


def read_election_state(state_dir: Path) -> ElectionState:
    """The quorum-state file, or a fresh state when there is none."""
    path = state_dir / QUORUM_STATE_FILE
    try:
        return ElectionState.decode(path.read_bytes())
    except FileNotFoundError:
        return ElectionState()
    except ValueError as exc:  # never guess a vote: a voter must not vote twice in an epoch
        raise ValueError(f"{path}: {exc}; restore it or reformat this node") from None


def write_election_state(state_dir: Path, state: ElectionState) -> None:
    """Replace the quorum-state file durably (write, fsync, rename, fsync the dir)."""
    path = state_dir / QUORUM_STATE_FILE
    tmp = path.with_name(QUORUM_STATE_FILE + ".tmp")
    with tmp.open("wb") as f:
        f.write(state.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class RaftManager:
    """The metadata quorum member of this node; see the module docstring."""

    def __init__(self, local: ReplicaKey, voters: list[ReplicaKey], log_: KafkaMetadataLog,
                 state_dir: Path, cluster_id: str, channels: NodeChannels,
                 run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]],
                 config: RaftConfig | None = None) -> None:
        self.local = local
        self.voters = voters
        self.log = log_
        self.state_dir = state_dir
        self.cluster_id = cluster_id
        self.channels = channels
        self.run_blocking = run_blocking
        self.config = config or RaftConfig()
        self.state_machine: StateMachine | None = None
        self.core: RaftCore | None = None
        self.applied_offset = 0  # entries below it have been handed to the state machine
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Future[None]] = set()
        self._inbound: dict[int, asyncio.Future[RaftResponse]] = {}
        self._next_inbound_id = 1 << 40  # never collides with ids the core hands out
        self._applied_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._progress_waiters: list[asyncio.Future[None]] = []  # woken after every step
        self.leader_high_watermark = -1  # the last high watermark a leader told us
        self._stopped = False
        self._last_state: tuple[Role, int, int] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, applied_offset: int) -> None:
        """Start the core; the state machine already holds everything below applied_offset
        (the snapshot it loaded)."""
        self.applied_offset = applied_offset
        election = read_election_state(self.state_dir)
        seed = random.SystemRandom().getrandbits(64)
        self.core = RaftCore(self.local, self.voters, self.log, election, _now_ms(),
                             random.Random(seed), self.config)
        self._drain()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Resign if leading (EndQuorumEpoch tells the voters at once), then stop."""
        core = self.core
        if core is not None and core.role == Role.LEADER:
            core.resign(_now_ms())
            self._drain()
            await asyncio.sleep(0.05)  # let the EndQuorumEpoch requests leave
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
        for task in list(self._requests):
            task.cancel()
        for future in self._inbound.values():
            if not future.done():
                future.cancel()
        self._fail_waiters(KafkaError(ErrorCode.NOT_CONTROLLER, "the controller is stopping"))
        await self.channels.close()

    async def _run(self) -> None:
        while not self._stopped:
            core = self.core
            assert core is not None
            deadline = core.next_deadline_ms()
            timeout = None if deadline < 0 else max(deadline - _now_ms(), 0) / 1000
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass
            try:
                core.tick(_now_ms())
                self._drain()
            except Exception:  # a bug; the quorum must not stop ticking because of it
                log.exception("metadata quorum tick failed")
                await asyncio.sleep(0.1)

    # -- state -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.core is not None and self.core.role == Role.LEADER

    @property
    def leader_id(self) -> int:
        """The quorum's leader as far as this node knows: -1 while it looks for one (a
        resigned or prospective node remembers a leader it no longer trusts)."""
        core = self.core
        if core is None or core.role not in (Role.LEADER, Role.FOLLOWER):
            return -1
        return core.leader_id

    @property
    def epoch(self) -> int:
        return self.core.epoch if self.core is not None else 0

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark if self.core is not None else 0

    async def wait_caught_up(self) -> None:
        """Until this node knows a leader and has applied what was committed when it learnt
        of it (a broker serves metadata only once it has caught up, as Kafka's does)."""
        while True:
            core = self.core
            if core is not None and core.leader_id >= 0:
                target = (core.high_watermark if core.role == Role.LEADER
                          else self.leader_high_watermark)
                if target > 0 and self.applied_offset >= target:
                    return
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._progress_waiters.append(future)
            await future

    # -- appends (the active controller) -----------------------------------------------------

    def append(self, records: list[Any]) -> int:
        """Append records as leader; returns the offset after them. NOT_CONTROLLER elsewhere."""
        core = self.core
        if core is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is not started")
        try:
            end = core.append(_now_ms(), records)
        except NotLeaderError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from None
        self._drain()
        return end

    async def wait_applied(self, end_offset: int) -> None:
        """Until entries below end_offset are committed and applied; NOT_CONTROLLER if this
        node's leadership ends first (the entries may then be lost)."""
        if self.applied_offset >= end_offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((end_offset, self.epoch, future))
        await future

    async def wait_applied_offset(self, offset: int) -> None:
        """Until this node has applied the metadata log below `offset` (whoever leads)."""
        while self.applied_offset < offset:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._progress_waiters.append(future)
            await future

    # -- inbound requests --------------------------------------------------------------------

    async def handle_request(self, api_key: int, api_version: int, body: Any) -> Any:
        """Answer a peer's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch or FetchSnapshot."""
        core = self.core
        if core is None:
            return wire.error_response(api_key, ErrorCode.NOT_CONTROLLER)
        request_id = self._next_inbound_id
        self._next_inbound_id += 1
        try:
            source, message = wire.decode_request(api_key, api_version, body, self.cluster_id,
                                                  request_id)
        except KafkaError as exc:
            return wire.error_response(api_key, exc.code)
        future: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        self._inbound[request_id] = future
        try:
            core.handle(_now_ms(), source, message)
            self._drain()
            answer = await future
        finally:
            self._inbound.pop(request_id, None)
        return wire.encode_response(answer)

    # -- effects -----------------------------------------------------------------------------

    def _drain(self) -> None:
        """Carry out everything the core asked for, in order, then feed the state machine."""
        core = self.core
        assert core is not None
        for effect in core.take_effects():
            if isinstance(effect, PersistElectionState):
                # A small file, written on the loop so nothing after it can overtake it; it
                # happens only on elections.
                write_election_state(self.state_dir, effect.state)
            elif isinstance(effect, Send):
                self._send(effect)
            elif isinstance(effect, Flush):
                self._spawn(self._flush(effect.end_offset))
            elif isinstance(effect, SnapshotInstalled):
                log.info("installed the leader's snapshot at offset %d (epoch %d)",
                         effect.snapshot_id.offset, effect.snapshot_id.epoch)
                self.applied_offset = effect.snapshot_id.offset
                if self.state_machine is not None:
                    self.state_machine.load_snapshot(effect.snapshot_id)
        state = (core.role, core.epoch, core.leader_id)
        if state != self._last_state:  # Kafka logs every quorum state transition
            log.info("metadata quorum: node %d is %s in epoch %d (leader %d)", self.local.id,
                     core.role.value, core.epoch, core.leader_id)
            self._last_state = state
        self._apply_committed()
        self._wake_waiters()
        self._wakeup.set()

    def _send(self, effect: Send) -> None:
        message = effect.message
        inbound = self._inbound.get(getattr(message, "request_id", -1))
        if inbound is not None:
            if not inbound.done():
                inbound.set_result(message)  # type: ignore[arg-type]
            return
        if effect.destination == self.local.id or not isinstance(message, _REQUEST_TYPES):
            return  # an answer whose asker is gone (it timed out, or we are stopping)
        self._spawn(self._request(effect.destination, message))

    async def _request(self, destination: int, message: RaftRequest) -> None:
        api_key, version, body = wire.encode_request(message, self.cluster_id)
        wait_ms = message.max_wait_ms if isinstance(message, FetchRequest) else 0
        try:
            answer = await self.channels.request(
                destination, api_key, version, body,
                (wait_ms + self.config.request_timeout_ms) / 1000)
        except (ConnectionError, TimeoutError, OSError) as exc:
            log.debug("raft request to node %d failed: %s", destination, exc)
            return  # the core retries on its own timer
        response = wire.decode_response(api_key, answer, message.request_id)
        if response is None or self.core is None or self._stopped:
            return
        if isinstance(message, FetchRequest) and getattr(response, "error", 1) == 0:
            self.leader_high_watermark = max(self.leader_high_watermark,
                                             response.high_watermark)  # type: ignore[union-attr]
        self.core.handle(_now_ms(), destination, response)
        self._drain()

    async def _flush(self, end_offset: int) -> None:
        try:
            await self.run_blocking(lambda: self.log.log.flush(end_offset))
        except OSError as exc:
            log.error("could not flush __cluster_metadata: %s", exc)
            return  # never reported flushed: this node cannot count toward commits
        if self.core is None or self._stopped:
            return
        self.core.flushed(min(end_offset, self.log.log_end_offset), _now_ms())
        self._drain()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._requests.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._requests.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("metadata quorum task failed", exc_info=task.exception())

    # -- the state machine -------------------------------------------------------------------

    def _apply_committed(self) -> None:
        core = self.core
        assert core is not None
        end = min(core.high_watermark, self.log.log_end_offset)
        if end <= self.applied_offset or self.state_machine is None:
            return
        first = max(self.applied_offset, self.log.log_start_offset)
        self.state_machine.apply_committed(first, end)
        self.applied_offset = end

    def _wake_waiters(self) -> None:
        core = self.core
        assert core is not None
        keep = []
        for end_offset, epoch, future in self._applied_waiters:
            if future.done():
                continue
            if self.applied_offset >= end_offset:
                future.set_result(None)
            elif core.epoch != epoch or core.role != Role.LEADER:
                future.set_exception(KafkaError(
                    ErrorCode.NOT_CONTROLLER, "leadership of the metadata quorum moved before "
                    "the change was committed"))
            else:
                keep.append((end_offset, epoch, future))
        self._applied_waiters = keep
        waiters, self._progress_waiters = self._progress_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def _fail_waiters(self, error: KafkaError) -> None:
        for _, _, future in self._applied_waiters:
            if not future.done():
                future.set_exception(error)
        self._applied_waiters = []
        for future in self._progress_waiters:
            if not future.done():
                future.set_exception(error)
        self._progress_waiters = []
