"""SharePartition: one share group reading one topic-partition, on that partition's leader.

Mirrors Kafka's SharePartition (KIP-932). The share-partition start offset (SPSO) is the first
offset whose delivery is not complete; the end offset (SPEO) is one past the last offset handed
out so far. Every offset in [SPSO, SPEO) is in exactly one run of `InFlightRun`s, kept sorted
and contiguous: AVAILABLE (may be acquired), ACQUIRED (locked by a member until a deadline),
ACKNOWLEDGED or ARCHIVED (delivery complete). Records are acquired a whole batch at a time, as
the log holds them, so a fetch hands out batches untouched with the acquired ranges beside them;
only batch headers are read.

An acknowledgement is two steps, so the persisted state is never behind what a client was told:
`plan_acknowledgement` checks every offset is ACQUIRED by the member and marks the runs pending
(neither re-acquirable nor expirable), the caller persists the `PlannedAcknowledgement`'s state
batches, then `complete` applies it or `abandon` puts the runs back as they were. Lock expiry
and releases apply at once and are persisted after.

Pure: no I/O and no event loop; times are passed in (monotonic milliseconds). Not thread-safe;
loop-owned.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.share.persister import DeliveryState, ShareState, StateBatch

_COMPLETE = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes."""

    GAP = 0      # no record at this offset (a control record, a compacted gap)
    ACCEPT = 1
    RELEASE = 2  # back to the group: delivered again, to anyone
    REJECT = 3   # never delivered again
    RENEW = 4    # KIP-1222 (v2): keep the lock for another lock duration


@dataclass(slots=True)
class InFlightRun:
    """Offsets [first, last] in one state with one delivery count."""

    first: int
    last: int
    state: DeliveryState
    delivery_count: int
    member_id: str = ""        # holder while ACQUIRED
    deadline_ms: float = 0.0   # lock expiry while ACQUIRED
    pending: bool = False      # an acknowledgement of it is being persisted

    def same_as(self, other: InFlightRun) -> bool:
        """Whether the two runs may be one (they differ only in their offsets)."""
        return (self.state == other.state and self.delivery_count == other.delivery_count
                and self.member_id == other.member_id and self.deadline_ms == other.deadline_ms
                and not self.pending and not other.pending)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What acquisition needs of one log batch: its header's facts."""

    base_offset: int
    last_offset: int
    skip: bool = False  # a control batch, or aborted data for a read_committed group


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class PlannedAcknowledgement:
    """Acknowledgements checked and marked pending; persist `state_batches`, then complete."""

    member_id: str
    # (first, last, type) per contiguous range, in offset order
    ranges: list[tuple[int, int, AcknowledgeType]]
    state_batches: list[StateBatch] = field(default_factory=list)
    renewed: int = 0  # offsets whose lock RENEW extended (applied at once, never written)

    @property
    def needs_persisting(self) -> bool:
        return bool(self.state_batches)


class SharePartition:
    """The in-flight state of one share-partition."""

    def __init__(self, state_epoch: int, start_offset: int, *, lock_duration_ms: int,
                 delivery_count_limit: int, max_in_flight_records: int) -> None:
        self.state_epoch = state_epoch
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight_records = max_in_flight_records
        self.runs: list[InFlightRun] = []

    @classmethod
    def from_state(cls, state: ShareState, **limits: int) -> SharePartition:
        """Rebuild from the persisted state: offsets in [start, end) no batch names were
        acquired when the previous leader stopped and are AVAILABLE again."""
        sp = cls(state.state_epoch, state.start_offset, **limits)
        at = state.start_offset
        for batch in sorted(state.batches, key=lambda b: b.first_offset):
            first = max(batch.first_offset, at)
            if batch.last_offset < first:
                continue
            if first > at:
                sp.runs.append(InFlightRun(at, first - 1, DeliveryState.AVAILABLE, 0))
            delivery_state = (DeliveryState.AVAILABLE if batch.delivery_state
                              == DeliveryState.ACQUIRED else batch.delivery_state)
            sp.runs.append(InFlightRun(first, batch.last_offset, delivery_state,
                                       batch.delivery_count))
            at = batch.last_offset + 1
        sp.end_offset = at
        sp._normalize()
        sp._advance_start()
        return sp

    # -- reads ---------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first offset that may be acquired."""
        for run in self.runs:
            if run.state == DeliveryState.AVAILABLE and not run.pending:
                return run.first
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether anything could be acquired now, given new records past the end offset."""
        if any(r.state == DeliveryState.AVAILABLE and not r.pending for r in self.runs):
            return True
        return self.end_offset - self.start_offset < self.max_in_flight_records

    def next_deadline_ms(self) -> float | None:
        deadlines = [r.deadline_ms for r in self.runs
                     if r.state == DeliveryState.ACQUIRED and not r.pending]
        return min(deadlines) if deadlines else None

    def delivery_complete_count(self) -> int:
        """Offsets at or past the start offset whose delivery is complete (KIP-1226)."""
        return sum(r.last - r.first + 1 for r in self.runs if r.state in _COMPLETE)

    def acquired_by(self, member_id: str) -> int:
        return sum(r.last - r.first + 1 for r in self.runs
                   if r.state == DeliveryState.ACQUIRED and r.member_id == member_id)

    # -- acquisition ---------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[BatchInfo], max_records: int,
                now_ms: float) -> list[AcquiredRange]:
        """Acquire for `member_id` what may be acquired of `batches` (log order), whole
        batches at a time until `max_records` were acquired (the last batch may pass it, as
        Kafka's batch-optimised mode does). A skipped batch (control, aborted) is archived."""
        deadline = now_ms + self.lock_duration_ms
        acquired: list[AcquiredRange] = []
        count = 0
        for batch in batches:
            if count >= max_records:
                break
            first = max(batch.base_offset, self.start_offset)
            if batch.last_offset < first:
                continue
            # The part already in flight: its AVAILABLE runs.
            if first < self.end_offset:
                last = min(batch.last_offset, self.end_offset - 1)
                for run in self._split_range(first, last):
                    if run.state != DeliveryState.AVAILABLE or run.pending:
                        continue
                    if batch.skip:
                        run.state = DeliveryState.ARCHIVED
                        continue
                    run.state = DeliveryState.ACQUIRED
                    run.delivery_count += 1
                    run.member_id = member_id
                    run.deadline_ms = deadline
                    acquired.append(AcquiredRange(run.first, run.last, run.delivery_count))
                    count += run.last - run.first + 1
                first = last + 1
            # The part past the end offset: new records, within the in-flight limit.
            if first <= batch.last_offset:
                if first > self.end_offset:  # offsets the log does not have (compacted away)
                    self.runs.append(InFlightRun(self.end_offset, first - 1,
                                                 DeliveryState.ARCHIVED, 0))
                    self.end_offset = first
                if batch.skip:
                    self.runs.append(InFlightRun(first, batch.last_offset,
                                                 DeliveryState.ARCHIVED, 0))
                elif self.end_offset - self.start_offset >= self.max_in_flight_records:
                    break
                else:
                    self.runs.append(InFlightRun(first, batch.last_offset,
                                                 DeliveryState.ACQUIRED, 1, member_id,
                                                 deadline))
                    acquired.append(AcquiredRange(first, batch.last_offset, 1))
                    count += batch.last_offset - first + 1
                self.end_offset = batch.last_offset + 1
        self._normalize()
        self._advance_start()
        return _merge_ranges(acquired)

    # -- acknowledgement -----------------------------------------------------------------

    def plan_acknowledgement(self, member_id: str,
                             batches: Iterable[tuple[int, int, list[int]]],
                             now_ms: float) -> PlannedAcknowledgement:
        """Check `batches` ((first, last, types)) against the member's acquired records and
        mark them pending. INVALID_REQUEST for a malformed batch, INVALID_RECORD_STATE when
        any offset is not ACQUIRED by the member (lock expired, never acquired, already
        acknowledged); then nothing changes. RENEW is applied at once and needs no write."""
        ranges: list[tuple[int, int, AcknowledgeType]] = []
        previous_last = -1
        for first, last, types in sorted(batches, key=lambda b: b[0]):
            if first > last or first <= previous_last:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"acknowledgement batch [{first}, {last}] is empty or overlaps")
            if len(types) not in (1, last - first + 1):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"acknowledgement batch [{first}, {last}] has {len(types)} "
                                 "types: one, or one per offset")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"unknown acknowledge type in {types}") from None
            previous_last = last
            if len(kinds) == 1:
                ranges.append((first, last, kinds[0]))
                continue
            start = first
            for offset in range(first + 1, last + 2):  # one type per offset: group equal ones
                if offset > last or kinds[offset - first] != kinds[start - first]:
                    ranges.append((start, offset - 1, kinds[start - first]))
                    start = offset
        for first, last, _ in ranges:
            self._check_acquired(member_id, first, last)
        plan = PlannedAcknowledgement(member_id, [])
        for first, last, kind in ranges:
            if kind == AcknowledgeType.RENEW:
                for run in self._split_range(first, last):
                    run.deadline_ms = now_ms + self.lock_duration_ms
                plan.renewed += last - first + 1
                continue
            plan.ranges.append((first, last, kind))
            for run in self._split_range(first, last):
                run.pending = True
        self._normalize()
        for first, last, kind in plan.ranges:  # what the state becomes once applied
            for run in self._runs_in(first, last):
                state, count = self._outcome(kind, run.delivery_count)
                plan.state_batches.append(StateBatch(run.first, run.last, state, count))
        return plan

    def start_after(self, plan: PlannedAcknowledgement) -> tuple[int, int]:
        """(start offset, delivery complete count) once `plan` applies, from the state now:
        what its write must carry. Asked when the write goes out (writes go one at a time),
        so a plan made earlier never carries a start offset behind one already written."""
        finished = [(b.first_offset, b.last_offset) for b in plan.state_batches
                    if b.delivery_state in _COMPLETE]
        start = self.start_offset
        for run in self.runs:
            done = run.state in _COMPLETE or any(f <= run.first and run.last <= la
                                                 for f, la in finished)
            if run.first != start or not done:
                break
            start = run.last + 1
        complete = sum(la - f + 1 for f, la in finished)
        # Every offset the start moves past is complete, and no longer counted.
        return start, self.delivery_complete_count() + complete - (start - self.start_offset)

    def complete(self, plan: PlannedAcknowledgement) -> None:
        """The plan was persisted: apply it."""
        for first, last, kind in plan.ranges:
            for run in self._split_range(first, last):
                run.pending = False
                run.state, run.delivery_count = self._outcome(kind, run.delivery_count)
                run.member_id, run.deadline_ms = "", 0.0
        self._normalize()
        self._advance_start()

    def abandon(self, plan: PlannedAcknowledgement) -> None:
        """The plan could not be persisted: the records stay acquired by the member."""
        for first, last, _ in plan.ranges:
            for run in self._runs_in(first, last):
                run.pending = False
        self._normalize()

    # -- releases ------------------------------------------------------------------------

    def expire_locks(self, now_ms: float) -> list[StateBatch]:
        """Acquired records whose lock passed go back (or are archived at the delivery count
        limit); the state batches to persist."""
        return self._release(lambda r: r.deadline_ms <= now_ms)

    def release_member(self, member_id: str) -> list[StateBatch]:
        """Everything `member_id` holds goes back: its session closed or its connection went."""
        return self._release(lambda r: r.member_id == member_id)

    def _release(self, matches: Callable[[InFlightRun], bool]) -> list[StateBatch]:
        changed: list[StateBatch] = []
        for run in self.runs:
            if run.state == DeliveryState.ACQUIRED and not run.pending and matches(run):
                run.state, run.delivery_count = self._outcome(AcknowledgeType.RELEASE,
                                                              run.delivery_count)
                run.member_id, run.deadline_ms = "", 0.0
                changed.append(StateBatch(run.first, run.last, run.state, run.delivery_count))
        if changed:
            self._normalize()
            self._advance_start()
        return changed

    def move_start_to(self, log_start_offset: int) -> bool:
        """The log's start moved past the start offset (retention, DeleteRecords): what lay
        below it is gone. Whether anything changed."""
        if log_start_offset <= self.start_offset:
            return False
        self.runs = [r for r in self.runs if r.last >= log_start_offset]
        if self.runs and self.runs[0].first < log_start_offset:
            self.runs[0].first = log_start_offset
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance_start()
        return True

    def state_batches(self) -> list[StateBatch]:
        """The whole in-flight state as it is persisted (acquired records as AVAILABLE)."""
        return [StateBatch(r.first, r.last,
                           DeliveryState.AVAILABLE if r.state == DeliveryState.ACQUIRED
                           else r.state, r.delivery_count) for r in self.runs]

    # -- internals -----------------------------------------------------------------------

    def _outcome(self, kind: AcknowledgeType, delivery_count: int) -> tuple[DeliveryState, int]:
        if kind == AcknowledgeType.ACCEPT:
            return DeliveryState.ACKNOWLEDGED, delivery_count
        if kind == AcknowledgeType.RELEASE and delivery_count < self.delivery_count_limit:
            return DeliveryState.AVAILABLE, delivery_count
        return DeliveryState.ARCHIVED, delivery_count  # REJECT, GAP, or out of deliveries

    def _check_acquired(self, member_id: str, first: int, last: int) -> None:
        if first < self.start_offset or last >= self.end_offset:
            raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                             f"offsets [{first}, {last}] are not in flight "
                             f"([{self.start_offset}, {self.end_offset}))")
        for run in self._runs_in(first, last):
            if (run.state != DeliveryState.ACQUIRED or run.member_id != member_id
                    or run.pending):
                raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                                 f"offsets [{max(first, run.first)}, {min(last, run.last)}] "
                                 f"are {run.state.name.lower()}"
                                 + ("" if run.state != DeliveryState.ACQUIRED
                                    else " by another member or being acknowledged"))

    def _index(self, offset: int) -> int:
        """Index of the run holding `offset` (runs are contiguous from the start offset)."""
        return bisect.bisect_right(self.runs, offset, key=lambda r: r.first) - 1

    def _runs_in(self, first: int, last: int) -> list[InFlightRun]:
        i = max(self._index(first), 0)
        out = []
        while i < len(self.runs) and self.runs[i].first <= last:
            if self.runs[i].last >= first:
                out.append(self.runs[i])
            i += 1
        return out

    def _split_range(self, first: int, last: int) -> list[InFlightRun]:
        """The runs exactly covering [first, last], splitting the runs at its edges."""
        self._split_at(first)
        self._split_at(last + 1)
        return self._runs_in(first, last)

    def _split_at(self, offset: int) -> None:
        i = self._index(offset)
        if i < 0:
            return
        run = self.runs[i]
        if run.first < offset <= run.last:
            tail = InFlightRun(offset, run.last, run.state, run.delivery_count, run.member_id,
                               run.deadline_ms, run.pending)
            run.last = offset - 1
            self.runs.insert(i + 1, tail)

    def _normalize(self) -> None:
        """Merge neighbouring runs that differ only in their offsets."""
        merged: list[InFlightRun] = []
        for run in self.runs:
            if merged and merged[-1].same_as(run) and merged[-1].last + 1 == run.first:
                merged[-1].last = run.last
            else:
                merged.append(run)
        self.runs = merged

    def _advance_start(self) -> None:
        """The start offset moves past the delivery-complete runs at the front."""
        while self.runs and self.runs[0].state in _COMPLETE:
            self.start_offset = self.runs.pop(0).last + 1
        if not self.runs:
            self.start_offset = self.end_offset


def _merge_ranges(ranges: list[AcquiredRange]) -> list[AcquiredRange]:
    merged: list[AcquiredRange] = []
    for r in ranges:
        if merged and merged[-1].last_offset + 1 == r.first_offset \
                and merged[-1].delivery_count == r.delivery_count:
            merged[-1] = AcquiredRange(merged[-1].first_offset, r.last_offset, r.delivery_count)
        else:
            merged.append(r)
    return merged
