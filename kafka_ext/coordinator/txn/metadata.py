"""TransactionState and TransactionMetadata: one transactional id's state and its legal moves.

Mirrors Kafka's TransactionState/TransactionMetadata (transaction version 1). Metadata objects
are immutable: each `prepare_*` returns the state the next `__transaction_state` record will
carry, and the shard swaps it in only when that record is replayed, so memory always matches
the log. An illegal move raises KafkaError(INVALID_TXN_STATE).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from kafka_ext.protocol.errors import ErrorCode, KafkaError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # the int16 a batch header carries

TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """Kafka's transaction states; the value is TransactionLogValue.TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    # Only between deciding to fence an ongoing transaction and logging its PrepareAbort with
    # the bumped epoch; never written to the log.
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's stateName)."""
        return _DISPLAY_NAMES[self]

    @classmethod
    def from_display_name(cls, name: str) -> TransactionState | None:
        return _BY_DISPLAY_NAME.get(name)


_DISPLAY_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_DISPLAY_NAME = {name: state for state, name in _DISPLAY_NAMES.items()}

_S = TransactionState
# The states each state may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}

PREPARE_STATES = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
COMPLETE_STATES = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
# States in which a transactional id may expire: no transaction is open or finishing.
EXPIRABLE_STATES = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka keeps the last epoch in reserve, so a fence can still bump an exhausted producer."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(slots=True, frozen=True)
class TransactionMetadata:
    """One transactional id as of its latest record; replaced, never changed in place."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    # Not logged, as in Kafka: the epoch before the last KIP-360 bump, so a retried
    # InitProducerId whose answer was lost gets the same epoch instead of PRODUCER_FENCED.
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, txn_timeout_ms: int,
            now_ms: int) -> TransactionMetadata:
        """A transactional id seen for the first time: Empty, no epoch yet (bumped to 0)."""
        return cls(transactional_id, producer_id, NO_PRODUCER_EPOCH, txn_timeout_ms,
                   TransactionState.EMPTY, txn_last_update_timestamp_ms=now_ms)

    def transition_to(self, state: TransactionState, **changes: object) -> TransactionMetadata:
        """This metadata moved to `state` with `changes`; INVALID_TXN_STATE if not allowed."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"TransactionalId {self.transactional_id} cannot move from "
                             f"{self.state.display_name} to {state.display_name}")
        return replace(self, state=state, **changes)  # type: ignore[arg-type]

    # -- InitProducerId ----------------------------------------------------------------------

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TransactionMetadata:
        """Bump the epoch for a (re)initialising producer; PRODUCER_FENCED for a stale one.

        `expected_epoch` is the epoch a KIP-360 producer (InitProducerId v3+) says it has;
        None for a new producer, which always gets a bump and fences everyone before it.
        """
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that already happened: same answer, nothing fenced.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"producer epoch {expected_epoch} of {self.transactional_id} is "
                             f"fenced by epoch {self.producer_epoch}")
        return self.transition_to(
            TransactionState.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms, partitions=frozenset(), txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TransactionMetadata:
        """A fresh producer id at epoch 0 once the epoch is exhausted; the old id is kept as
        previous_producer_id so a retry from it is recognised."""
        return self.transition_to(
            TransactionState.EMPTY, producer_id=new_producer_id, producer_epoch=0,
            previous_producer_id=self.producer_id,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms, partitions=frozenset(), txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms)

    def prepare_fence_producer_epoch(self) -> TransactionMetadata:
        """Bump the epoch of an ongoing transaction so its producer is fenced before the abort."""
        epoch = min(self.producer_epoch + 1, MAX_PRODUCER_EPOCH)
        return self.transition_to(TransactionState.PREPARE_EPOCH_FENCE, producer_epoch=epoch,
                                  last_producer_epoch=NO_PRODUCER_EPOCH)

    # -- a transaction's life ----------------------------------------------------------------

    def prepare_add_partitions(self, added: frozenset[TopicPartition],
                               now_ms: int) -> TransactionMetadata:
        """Ongoing with `added` joined in; the first add of a transaction starts its clock."""
        if self.state == TransactionState.ONGOING:
            start_ms, partitions = self.txn_start_timestamp_ms, self.partitions | added
        else:
            start_ms, partitions = now_ms, added
        return self.transition_to(TransactionState.ONGOING, partitions=partitions,
                                  txn_start_timestamp_ms=start_ms,
                                  txn_last_update_timestamp_ms=now_ms)

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TransactionMetadata:
        """PrepareCommit or PrepareAbort: the decision is logged before any marker is written."""
        if state not in PREPARE_STATES:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"{state.display_name} is not a prepare "
                             "state")
        return self.transition_to(state, txn_last_update_timestamp_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TransactionMetadata:
        """CompleteCommit or CompleteAbort once every partition has its marker."""
        if self.state == TransactionState.PREPARE_COMMIT:
            state = TransactionState.COMPLETE_COMMIT
        elif self.state == TransactionState.PREPARE_ABORT:
            state = TransactionState.COMPLETE_ABORT
        else:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"{self.transactional_id} is "
                             f"{self.state.display_name}, not preparing to complete")
        return self.transition_to(state, partitions=frozenset(),
                                  txn_last_update_timestamp_ms=now_ms)

    def prepare_dead(self) -> TransactionMetadata:
        """Expired: the id is about to be removed with a tombstone."""
        return self.transition_to(TransactionState.DEAD, partitions=frozenset())

    def timed_out(self, now_ms: int) -> bool:
        """An ongoing transaction that has run longer than its timeout (Kafka's check)."""
        return (self.state == TransactionState.ONGOING
                and self.txn_start_timestamp_ms + self.txn_timeout_ms < now_ms)
