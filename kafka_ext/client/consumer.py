"""Our asyncio consumer: groups, positions, commits, fetches, and the proposals' client side.

Mirrors Kafka's `KafkaConsumer`: `subscribe()` joins a group through the classic protocol
(`group_coordinator.py`, range assignment) and `assign()` takes partitions directly; `poll()`
(or `async for`) returns records in order per partition, fetching from each leader; positions
start at the committed offset, else at `auto_offset_reset`; `commit()` and auto-commit store
them; `seek()`, `seek_to_beginning/end()` and `seek_to_time()` move them. Fetches are
read_uncommitted or read_committed (`isolation_level`).

The proposals (docs/client.md):
- KIP-253 (seed 001): a partition read from offset 0 that was added to its topic waits until
  every prior partition's position reached the offset threshold of the epoch before the
  expansion (`expansion.py`); positions of partitions other members own come through the
  Heartbeat. A member that sees its topics' partitions change rejoins, so new partitions are
  assigned.
- Partition reduction (seed 002): partitions in mode None are neither assigned nor fetched;
  ReadOnly ones are read as usual.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kafka_ext.client.connection import DEFAULT_REQUEST_TIMEOUT_MS
from kafka_ext.client.expansion import ExpansionGate, HeartbeatEntries
from kafka_ext.client.fetcher import ConsumerRecord, PartitionRecords, decode_fetched
from kafka_ext.client.group_coordinator import ConsumerCoordinator
from kafka_ext.client.metadata import TopicMetadata, TopicPartition
from kafka_ext.client.network_client import (
    DEFAULT_METADATA_MAX_AGE_MS,
    DEFAULT_RETRY_BACKOFF_MS,
    NetworkClient,
)
from kafka_ext.client.offset_fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    end_offsets_for_epochs,
    leader_epochs_for_partition,
    list_offsets,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # the newest that names topics (v13+ use topic ids)
FETCH_MIN_VERSION = 4  # isolation level
IDLE_WAIT_S = 0.05  # nothing to fetch (gated, or positions pending): look again this soon
_RESET_POLICIES = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
_REFRESH_METADATA = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                               ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
                               ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE,
                               ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
                               ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID})

_Fetch = registry()["FetchRequest"].cls

RebalanceListener = Callable[[set[TopicPartition]], Awaitable[None] | None]


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _now_ms() -> float:
    return time.monotonic() * 1000


class Consumer:
    """Reads records; `async with Consumer(...)` or `start()`/`close()`.

    Owned by one event loop and one reader: `poll()` is not to be called by two tasks at once.
    Positions are the offsets of the next records `poll()` returns.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], *,
                 group_id: str | None = None,
                 client_id: str = "kafka-ext-consumer",
                 group_instance_id: str | None = None,
                 auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5_000,
                 isolation_level: str = "read_uncommitted",
                 session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 3_000,
                 rebalance_timeout_ms: int = 300_000,
                 fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500,
                 fetch_max_bytes: int = 52_428_800,
                 max_partition_fetch_bytes: int = 1_048_576,
                 max_poll_records: int = 500,
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 expansion_gating: bool = True) -> None:
        if auto_offset_reset not in _RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, "
                             f"not {auto_offset_reset!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, "
                             f"not {isolation_level!r}")
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.read_committed = isolation_level == "read_committed"
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.expansion_gating = expansion_gating
        self._client = NetworkClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms, retry_backoff_ms=retry_backoff_ms)
        self._coordinator: ConsumerCoordinator | None = None
        if group_id is not None:
            self._coordinator = ConsumerCoordinator(
                self._client, group_id, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms, retry_backoff_ms=retry_backoff_ms,
                group_instance_id=group_instance_id)
            self._coordinator.position_source = self._heartbeat_entries
            self._coordinator.position_sink = self._absorb_heartbeat
        self._subscription: set[str] | None = None
        self._on_assign: RebalanceListener | None = None
        self._on_revoke: RebalanceListener | None = None
        self._assignment: set[TopicPartition] = set()
        self._assigned_layout: dict[str, tuple[int, ...]] = {}  # readable partitions at assignment
        self._positions: dict[TopicPartition, int] = {}
        self._needs_committed: set[TopicPartition] = set()
        self._needs_reset: dict[TopicPartition, int] = {}  # tp -> timestamp to list offsets for
        self._gate = ExpansionGate()
        self._gate_candidates: set[TopicPartition] = set()  # positions at 0: gate or not?
        self._buffers: dict[TopicPartition, PartitionRecords] = {}
        self._iterated: deque[ConsumerRecord] = deque()
        self._metadata_stale = False
        self._next_auto_commit_ms = _now_ms() + auto_commit_interval_ms
        self._next_committed_check_ms = 0.0
        self._join_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if not self._started:
            await self._client.start()
            self._started = True

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, disconnect."""
        if self._closed:
            return
        self._closed = True
        if self._join_task is not None:
            self._join_task.cancel()
            await asyncio.wait([self._join_task])
            self._join_task = None
        try:
            if self._started and self.enable_auto_commit and self._assignment:
                try:
                    await self._commit_positions()
                except KafkaError as exc:
                    log.warning("commit on close failed: %s", exc)
            if self._coordinator is not None and self._subscription is not None:
                await self._coordinator.leave()
        finally:
            if self._coordinator is not None:
                self._coordinator.stop_heartbeats()
            await self._client.close()

    # -- what to read ----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], *, on_assign: RebalanceListener | None = None,
                  on_revoke: RebalanceListener | None = None) -> None:
        """Read `topics` as a member of the group; partitions come from the group's
        assignment at the next poll. The listeners get the partitions given and taken."""
        if self._coordinator is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "subscribe() needs a group_id")
        if self._subscription is None and self._assignment:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "partitions were assigned manually")
        self._subscription = set(topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        if self._client.add_topics(self._subscription):
            self._metadata_stale = True
        self._coordinator.needs_join = True

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, outside any group's assignment."""
        if self._subscription is not None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the consumer is subscribed")
        self._set_assignment({TopicPartition(*tp) for tp in partitions})

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def gated_partitions(self) -> set[TopicPartition]:
        """Assigned partitions KIP-253 holds back for now (or is still deciding about)."""
        return set(self._gate.gates) | (self._gate_candidates & self._assignment)

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        gone = self._assignment - partitions
        for tp in gone:
            self._positions.pop(tp, None)
            self._buffers.pop(tp, None)
            self._needs_reset.pop(tp, None)
        self._needs_committed -= gone
        self._gate_candidates -= gone
        self._gate.remove(gone)
        for tp in partitions - self._assignment:
            if self.group_id is not None:
                self._needs_committed.add(tp)
            else:
                self._reset_later(tp)
        self._assignment = set(partitions)
        if self._client.add_topics(tp.topic for tp in partitions):
            self._metadata_stale = True  # their leaders are needed before the first fetch

    def _reset_later(self, tp: TopicPartition) -> None:
        timestamp = _RESET_POLICIES[self.auto_offset_reset]
        if timestamp is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{tp.topic}-{tp.partition}: no position and auto_offset_reset=none")
        self._positions.pop(tp, None)
        self._needs_reset[tp] = timestamp

    # -- positions -------------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read `tp` from `offset` next."""
        tp = TopicPartition(*tp)
        if tp not in self._assignment:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{tp} is not assigned")
        self._positions[tp] = offset
        self._needs_committed.discard(tp)
        self._needs_reset.pop(tp, None)
        self._buffers.pop(tp, None)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read from the log start of these partitions (all assigned ones if none given)."""
        self._seek_lazily(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records written after now (all assigned partitions if none given)."""
        self._seek_lazily(partitions, LATEST_TIMESTAMP)

    def _seek_lazily(self, partitions: Iterable[TopicPartition], timestamp: int) -> None:
        for tp in [TopicPartition(*tp) for tp in partitions] or list(self._assignment):
            if tp not in self._assignment:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"{tp} is not assigned")
            self._positions.pop(tp, None)
            self._needs_committed.discard(tp)
            self._buffers.pop(tp, None)
            self._needs_reset[tp] = timestamp

    async def seek_to_time(self, partitions: TopicPartition | Iterable[TopicPartition],
                           timestamp_ms: int) -> dict[TopicPartition, int]:
        """Move to the first record with a timestamp at or after `timestamp_ms` (ListOffsets
        by time); a partition with none moves to its end. Returns the new positions."""
        await self.start()
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        wanted = [TopicPartition(*tp) for tp in partitions]
        listed = await list_offsets(self._client, dict.fromkeys(wanted, timestamp_ms),
                                    read_committed=self.read_committed)
        ends = [tp for tp in wanted if listed[tp].offset < 0]
        if ends:
            latest = await list_offsets(self._client, dict.fromkeys(ends, LATEST_TIMESTAMP),
                                        read_committed=self.read_committed)
            listed.update(latest)
        moved = {tp: listed[tp].offset for tp in wanted}
        for tp, offset in moved.items():
            self.seek(tp, offset)
        return moved

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll()` returns from `tp` (looked up if needed)."""
        await self.start()
        tp = TopicPartition(*tp)
        if tp not in self._assignment:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{tp} is not assigned")
        await self._update_positions()
        return self._positions[tp]

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of `tp`, or None."""
        if self._coordinator is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "committed() needs a group_id")
        await self.start()
        offset = (await self._coordinator.fetch_committed([TopicPartition(*tp)])).get(
            TopicPartition(*tp), -1)
        return offset if offset >= 0 else None

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (next offsets to read), or every assigned partition's position."""
        if self._coordinator is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "commit() needs a group_id")
        await self.start()
        if offsets is None:
            await self._commit_positions()
        else:
            await self._coordinator.commit({TopicPartition(*tp): o for tp, o in offsets.items()},
                                           in_group=self._subscription is not None)

    async def _commit_positions(self) -> None:
        assert self._coordinator is not None
        positions = {tp: p for tp, p in self._positions.items() if tp in self._assignment}
        await self._coordinator.commit(positions, in_group=self._subscription is not None)

    async def topic_metadata(self, topic: str) -> TopicMetadata | None:
        """The topic's partitions (with their modes), or None if the cluster has no such topic."""
        await self.start()
        self._client.add_topics([topic])
        await self._client.refresh_metadata()
        meta = self._client.metadata.topic(topic)
        return meta if meta is not None and meta.error == ErrorCode.NONE else None

    # -- polling ---------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to `timeout_ms` for some (a group
        join may take longer); an empty list when none came."""
        if self._closed:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the consumer is closed")
        await self.start()
        deadline = _now_ms() + timeout_ms
        limit = max_records or self.max_poll_records
        while True:
            try:
                if not await self._prepare(deadline):
                    return []  # still joining the group: the next poll waits on
            except KafkaError as exc:
                if not exc.code.retriable:
                    raise
                log.debug("poll: %s", exc)  # a broker or coordinator away: try again
                self._metadata_stale = True
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                if _now_ms() >= deadline:
                    return []
                continue
            records = self._drain(limit)
            if records:
                return records
            left_ms = deadline - _now_ms()
            if left_ms <= 0:
                return []
            await self._fetch(min(left_ms, self.fetch_max_wait_ms))

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._iterated:
            if self._closed:
                raise StopAsyncIteration
            self._iterated.extend(await self.poll())
        return self._iterated.popleft()

    async def _prepare(self, deadline_ms: float) -> bool:
        """Everything a fetch needs first: metadata, the group, positions, KIP-253's gates.
        False while a group join is still under way at `deadline_ms`: a join waits for every
        member, so it runs in its own task and a poll only waits for it until its deadline."""
        if self._metadata_stale:
            self._metadata_stale = False
            await self._client.refresh_metadata()
        else:
            await self._client.maybe_refresh_metadata()
        if self._coordinator is not None:
            if self._join_task is None:
                await self._maybe_auto_commit()
            if self._subscription is not None:
                if self._layout_changed():
                    self._coordinator.needs_join = True
                if self._coordinator.needs_join and self._join_task is None:
                    self._join_task = asyncio.get_running_loop().create_task(self._rejoin())
                if self._join_task is not None:
                    left_s = max(0.0, (deadline_ms - _now_ms()) / 1000)
                    done, _ = await asyncio.wait([self._join_task], timeout=left_s)
                    if not done:
                        return False
                    joined, self._join_task = self._join_task, None
                    joined.result()  # a failed join raises here
        await self._update_positions()
        if self.expansion_gating:
            await self._setup_gates()
            await self._update_gates()
        return True

    async def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or _now_ms() < self._next_auto_commit_ms:
            return
        self._next_auto_commit_ms = _now_ms() + self.auto_commit_interval_ms
        if not self._assignment:
            return
        try:
            await self._commit_positions()
        except KafkaError as exc:
            log.warning("auto-commit failed: %s", exc)

    def _readable_layout(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        layout = {}
        for topic in topics:
            meta = self._client.metadata.topic(topic)
            if meta is not None and meta.error == ErrorCode.NONE:
                layout[topic] = tuple(meta.readable_partitions)
        return layout

    def _layout_changed(self) -> bool:
        """Whether the subscribed topics' readable partitions differ from what the assignment
        was computed from: partitions added (KIP-253) or gone to mode None (reduction)."""
        if self._subscription is None or self._coordinator is None or self._coordinator.needs_join:
            return False
        return self._readable_layout(self._subscription) != self._assigned_layout

    async def _rejoin(self) -> None:
        assert self._coordinator is not None and self._subscription is not None
        if self._assignment:
            if self.enable_auto_commit:
                try:
                    await self._commit_positions()
                except KafkaError as exc:
                    log.warning("commit before rebalance failed: %s", exc)
            await _call_listener(self._on_revoke, set(self._assignment))
        self._set_assignment(set())
        self._gate.clear()
        self._buffers.clear()
        assigned = await self._coordinator.join(self._subscription, self._partitions_to_assign)
        await self._client.refresh_metadata()  # what the leader assigned from, or newer
        self._assigned_layout = self._readable_layout(self._subscription)
        self._set_assignment({TopicPartition(topic, p)
                              for topic, partitions in assigned.items() for p in partitions})
        await _call_listener(self._on_assign, set(self._assignment))

    async def _partitions_to_assign(self, topics: set[str]) -> dict[str, list[int]]:
        """The leader's view for the assignor: every readable partition of these topics."""
        self._client.add_topics(topics)
        await self._client.refresh_metadata()
        return {t: list(p) for t, p in self._readable_layout(topics).items()}

    async def _update_positions(self) -> None:
        """Positions from committed offsets, then from auto_offset_reset or seeks."""
        if self._needs_committed and self._coordinator is not None:
            wanted = sorted(self._needs_committed)
            committed = await self._coordinator.fetch_committed(wanted)
            for tp in wanted:
                if tp not in self._needs_committed:
                    continue  # seeked meanwhile
                self._needs_committed.discard(tp)
                offset = committed.get(tp, -1)
                if offset >= 0:
                    self._set_start(tp, offset)
                else:
                    self._reset_later(tp)
        if self._needs_reset:
            wanted_resets = dict(self._needs_reset)
            listed = await list_offsets(self._client, wanted_resets,
                                        read_committed=self.read_committed)
            for tp, timestamp in wanted_resets.items():
                if self._needs_reset.get(tp) != timestamp:
                    continue
                del self._needs_reset[tp]
                self._set_start(tp, max(listed[tp].offset, 0))

    def _set_start(self, tp: TopicPartition, offset: int) -> None:
        """A position from the group or the reset policy: KIP-253 looks at those at 0."""
        self._positions[tp] = offset
        if offset == 0 and tp.partition > 0 and self.expansion_gating:
            self._gate_candidates.add(tp)

    async def _setup_gates(self) -> None:
        """KIP-253: for partitions starting at offset 0, learn their prior partitions' epochs
        and the thresholds those epochs end at; gate the ones with anything to wait for."""
        candidates = sorted(self._gate_candidates & self._assignment)
        if not candidates:
            return
        try:
            priors = await leader_epochs_for_partition(self._client, candidates)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNSUPPORTED_VERSION:
                raise
            log.warning("the broker does not serve LeaderEpochsForPartition: reading new "
                        "partitions without KIP-253's ordering")
            self.expansion_gating = False
            self._gate_candidates.clear()
            return
        rounds: list[dict[TopicPartition, int]] = []  # one epoch per prior partition per request
        for tp in candidates:
            for prior, epoch in priors.get(tp, {}).items():
                prior_tp = TopicPartition(tp.topic, prior)
                for lookup in rounds:
                    if lookup.get(prior_tp, epoch) == epoch:
                        lookup[prior_tp] = epoch
                        break
                else:
                    rounds.append({prior_tp: epoch})
        ends: dict[tuple[TopicPartition, int], int] = {}
        for lookup in rounds:
            present = {tp: e for tp, e in lookup.items() if self._prior_exists(tp) and e >= 0}
            if present:
                found = await end_offsets_for_epochs(self._client, present)
                ends.update({(tp, present[tp]): offset for tp, offset in found.items()})
        for tp in candidates:
            thresholds = {prior: ends.get((TopicPartition(tp.topic, prior), epoch), 0)
                          for prior, epoch in priors.get(tp, {}).items()}
            self._gate.add(tp, thresholds)
            self._gate_candidates.discard(tp)
            if self._gate.is_gated(tp):
                log.info("%s-%d waits for its prior partitions: %s", tp.topic, tp.partition,
                         thresholds)

    def _prior_exists(self, tp: TopicPartition) -> bool:
        info = self._client.metadata.partition(tp)
        return info is not None and info.readable

    async def _update_gates(self) -> None:
        if not self._gate.pending:
            return
        if (self._coordinator is not None and self._subscription is not None
                and _now_ms() >= self._next_committed_check_ms):
            # The group's committed offsets count as positions it has read up to.
            self._next_committed_check_ms = _now_ms() + self._coordinator.heartbeat_interval_ms
            wanted = self._gate.wanted(self._assignment)
            if wanted:
                for tp, offset in (await self._coordinator.fetch_committed(wanted)).items():
                    self._gate.learn(tp, offset)
        owned = {tp: p for tp, p in self._positions.items() if tp in self._assignment}
        waited_on = self._prior_exists
        if self._subscription is None:
            # Manual assignment: nobody reports the other partitions' positions, so only the
            # prior partitions this consumer reads itself are waited on.
            def waited_on(tp: TopicPartition) -> bool:
                return self._prior_exists(tp) and tp in self._assignment
        for tp in self._gate.update(owned, waited_on):
            log.info("%s-%d: every prior partition reached its threshold; reading it", *tp)

    def _heartbeat_entries(self) -> HeartbeatEntries:
        if not self.expansion_gating:
            return {}
        return self._gate.heartbeat_entries(
            {tp: p for tp, p in self._positions.items() if tp in self._assignment})

    def _absorb_heartbeat(self, entries: HeartbeatEntries) -> None:
        self._gate.absorb_heartbeat(entries)

    # -- fetching --------------------------------------------------------------------------------

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        """Up to `limit` buffered records, advancing positions past what is returned."""
        out: list[ConsumerRecord] = []
        for tp in list(self._buffers):
            if len(out) >= limit:
                break
            buffer = self._buffers.pop(tp)
            if tp not in self._assignment or self._gate.is_gated(tp):
                continue
            while buffer.records and len(out) < limit:
                record = buffer.records.popleft()
                out.append(record)
                self._positions[tp] = record.offset + 1
            if buffer.records:
                self._buffers[tp] = buffer  # the rest next time, after the other partitions
            else:
                self._positions[tp] = max(self._positions.get(tp, 0), buffer.next_fetch_offset)
        return out

    def _fetchable(self) -> list[TopicPartition]:
        metadata = self._client.metadata
        out = []
        for tp in sorted(self._assignment):
            info = metadata.partition(tp)
            if (tp in self._positions and tp not in self._buffers
                    and not self._gate.is_gated(tp) and tp not in self._gate_candidates
                    and (info is None or info.readable)):
                out.append(tp)
        return out

    async def _fetch(self, wait_ms: float) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        metadata = self._client.metadata
        for tp in self._fetchable():
            # The leader, or a replica of the inactive chunk the position is in (seed 000).
            node = metadata.read_node_of(tp, self._positions[tp])
            if node < 0:
                self._metadata_stale = True
                continue
            by_leader.setdefault(node, []).append(tp)
        if not by_leader:
            idle_s = wait_ms / 1000
            if self._metadata_stale or self._gate.pending:
                idle_s = min(idle_s, IDLE_WAIT_S)  # a gate may open any moment
            await asyncio.sleep(idle_s)
            return
        await asyncio.gather(*(self._fetch_from(node, tps, int(wait_ms))
                               for node, tps in by_leader.items()))

    async def _fetch_from(self, node_id: int, partitions: list[TopicPartition],
                          wait_ms: int) -> None:
        offsets = {tp: self._positions[tp] for tp in partitions}
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(_Fetch.FetchTopic.FetchPartition(
                partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self.max_partition_fetch_bytes))
        request = _Fetch(
            replica_id=-1, max_wait_ms=wait_ms, min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes, isolation_level=1 if self.read_committed else 0,
            session_id=0, session_epoch=-1,
            topics=[_Fetch.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()],
            forgotten_topics_data=[], rack_id="")
        try:
            answer = await self._client.call(node_id, ApiKey.FETCH, request, highest=FETCH_VERSION,
                                             lowest=FETCH_MIN_VERSION,
                                             timeout_ms=wait_ms + self.request_timeout_ms)
        except KafkaError as exc:
            if not (exc.code.retriable or exc.code in _REFRESH_METADATA):
                raise
            log.debug("fetch from node %d: %s", node_id, exc)
            self._metadata_stale = True
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            return
        top = _code(answer.error_code)
        if top != ErrorCode.NONE:
            if top.retriable:
                self._metadata_stale = True
                return
            raise KafkaError(top, f"Fetch from node {node_id}")
        for t in answer.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                if tp not in offsets or self._positions.get(tp) != offsets[tp]:
                    continue  # seeked or reassigned while the fetch was out
                self._on_fetched(tp, offsets[tp], p)

    def _on_fetched(self, tp: TopicPartition, fetch_offset: int, answer: Any) -> None:
        code = _code(answer.error_code)
        if code == ErrorCode.NONE and answer.preferred_read_replica >= 0:
            # Sent elsewhere (seed 000: a chunk moved or was created since our metadata).
            self._metadata_stale = True
            return
        if code == ErrorCode.NONE:
            aborted = [(a.producer_id, a.first_offset) for a in answer.aborted_transactions or ()]
            fetched = decode_fetched(tp.topic, tp.partition, answer.records, fetch_offset,
                                     read_committed=self.read_committed,
                                     aborted_transactions=aborted)
            if fetched.records:
                self._buffers[tp] = fetched
            elif fetched.next_fetch_offset > fetch_offset:
                self._positions[tp] = fetched.next_fetch_offset  # only markers or aborted data
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.info("%s-%d: offset %d out of range; resetting (%s)", tp.topic, tp.partition,
                     fetch_offset, self.auto_offset_reset)
            self._reset_later(tp)
        elif code in _REFRESH_METADATA or code.retriable:
            self._metadata_stale = True
        else:
            raise KafkaError(code, f"Fetch {tp.topic}-{tp.partition}")


async def _call_listener(listener: RebalanceListener | None, partitions: set[TopicPartition]
                         ) -> None:
    if listener is None:
        return
    result = listener(partitions)
    if inspect.isawaitable(result):
        await result
