"""TransactionStateShard: the transactional ids of one `__transaction_state` partition.

Mirrors the per-partition cache of Kafka's TransactionStateManager plus the validation half of
its TransactionCoordinator: each operation checks a request against the current state and
returns the record to log as a CoordinatorResult, without touching the shard; the state changes
only when the runtime replays that record (at load and after the append).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kafka_ext.coordinator.runtime import CoordinatorResult
from kafka_ext.coordinator.txn.metadata import (
    EXPIRABLE_STATES,
    NO_PRODUCER_EPOCH,
    PREPARE_STATES,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from kafka_ext.coordinator.txn.records import (
    read_transaction_log_key,
    read_transaction_log_value,
    transaction_log_key,
    transaction_log_value,
)
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
# Tombstones per expiration write, so one batch stays small.
MAX_EXPIRED_PER_WRITE = 500


@dataclass(slots=True, frozen=True)
class InitProducerIdResult:
    """The state InitProducerId logged; `fenced`: an ongoing transaction was fenced instead and
    is now PrepareAbort, so the caller aborts it and answers CONCURRENT_TRANSACTIONS."""

    metadata: TransactionMetadata
    fenced: bool


@dataclass(slots=True, frozen=True)
class EndTxnResult:
    """The PrepareCommit/PrepareAbort state EndTxn logged, or None for a retry of a finished
    transaction (answered NONE, nothing written)."""

    metadata: TransactionMetadata | None


def _record(metadata: TransactionMetadata) -> Record:
    return transaction_log_key(metadata.transactional_id), transaction_log_value(metadata)


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int,
                          producer_epoch: int) -> bool:
    """KIP-360: a producer that names its id may re-initialise unless someone else took over.

    Allowed: state with no epoch yet (created just now, or lost), the current producer id, or
    the previous id when it was rotated away from an exhausted epoch.
    """
    return (metadata.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == metadata.producer_id
            or (producer_id == metadata.previous_producer_id
                and is_epoch_exhausted(producer_epoch)))


class TransactionStateShard:
    """Transactional id -> TransactionMetadata for one partition; changed only by replay.

    Loop-owned. The `on_loaded`/`on_unloaded` hooks let the coordinator resume marker writing
    and arm timers once the runtime has replayed the partition.
    """

    def __init__(self, partition: int,
                 on_loaded: Callable[[int], None] | None = None,
                 on_unloaded: Callable[[int], None] | None = None) -> None:
        self.partition = partition
        self.transactions: dict[str, TransactionMetadata] = {}
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded

    # -- CoordinatorShard --------------------------------------------------------------------

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        """Apply one record: the id's new state, or its removal for a tombstone."""
        try:
            transactional_id = read_transaction_log_key(key)
            metadata = None if value is None else read_transaction_log_value(transactional_id,
                                                                              value)
        except DecodeError as exc:
            # Unreadable records are skipped so every other transactional id stays served.
            log.error("__transaction_state-%d: skipping the record at offset %d: %s",
                      self.partition, offset, exc)
            return
        if metadata is None:
            self.transactions.pop(transactional_id, None)
            return
        old = self.transactions.get(transactional_id)
        if (old is not None and old.producer_id == metadata.producer_id
                and old.producer_epoch == metadata.producer_epoch):
            metadata = replace(metadata, last_producer_epoch=old.last_producer_epoch)
        self.transactions[transactional_id] = metadata

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               committed: bool, offset: int) -> None:
        """`__transaction_state` holds no transactional records, so markers change nothing."""

    def on_loaded(self) -> None:
        if self._on_loaded is not None:
            self._on_loaded(self.partition)

    def on_unloaded(self) -> None:
        if self._on_unloaded is not None:
            self._on_unloaded(self.partition)

    def on_committed(self, committed_offset: int) -> None:
        """Transaction state lives in memory and is current after replay: nothing to apply."""

    # -- reads -------------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def in_state(self, states: Iterable[TransactionState]) -> list[TransactionMetadata]:
        wanted = frozenset(states)
        return [m for m in self.transactions.values() if m.state in wanted]

    def remember_last_producer_epoch(self, metadata: TransactionMetadata) -> None:
        """Keep the in-memory last epoch of a bump InitProducerId logged (never in the log)."""
        current = self.transactions.get(metadata.transactional_id)
        if (current is not None and current.producer_id == metadata.producer_id
                and current.producer_epoch == metadata.producer_epoch):
            self.transactions[metadata.transactional_id] = replace(
                current, last_producer_epoch=metadata.last_producer_epoch)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ with VerifyOnly: is each partition already in the open
        transaction of this producer? Raises for a producer that does not own the id."""
        metadata = self._owned(transactional_id, producer_id, producer_epoch)
        if metadata.state in PREPARE_STATES:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{transactional_id} is completing its transaction")
        ongoing = metadata.state == TransactionState.ONGOING
        return {tp: ErrorCode.NONE if ongoing and tp in metadata.partitions
                else ErrorCode.INVALID_TXN_STATE for tp in partitions}

    # -- operations (validate, return the record; never change the shard) -------------------

    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                         expected: tuple[int, int] | None, now_ms: int,
                         new_producer_id: Callable[[], int]
                         ) -> CoordinatorResult[InitProducerIdResult]:
        """InitProducerId with a transactional id: bump the epoch (fencing older producers),
        rotate to a new producer id when the epoch is exhausted, or fence an ongoing
        transaction first. `expected` is (producer id, epoch) from a KIP-360 request."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            metadata = TransactionMetadata.new(transactional_id, new_producer_id(),
                                               txn_timeout_ms, now_ms)
        if expected is not None and not _is_valid_producer_id(metadata, *expected):
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"producer {expected[0]} no longer owns {transactional_id}")
        state = metadata.state
        if state == TransactionState.ONGOING:
            # Abort the open transaction under a bumped epoch first; this epoch is never handed
            # to a producer: the client retries and gets a second bump.
            aborting = metadata.prepare_fence_producer_epoch().prepare_abort_or_commit(
                TransactionState.PREPARE_ABORT, now_ms)
            return CoordinatorResult([_record(aborting)], InitProducerIdResult(aborting, True))
        if state not in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                         TransactionState.COMPLETE_ABORT):
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{transactional_id} is {state.display_name}; retry")
        expected_epoch = None if expected is None else expected[1]
        if is_epoch_exhausted(metadata.producer_epoch) and expected_epoch in (
                None, metadata.producer_epoch):
            new = metadata.prepare_producer_id_rotation(new_producer_id(), txn_timeout_ms,
                                                        now_ms, expected is not None)
        else:
            new = metadata.prepare_increment_producer_epoch(txn_timeout_ms, expected_epoch,
                                                            now_ms)
        return CoordinatorResult([_record(new)], InitProducerIdResult(new, False))

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: frozenset[TopicPartition],
                       now_ms: int) -> CoordinatorResult[None]:
        """AddPartitionsToTxn/AddOffsetsToTxn: join partitions to the producer's transaction,
        starting it if none is open; nothing is written if they are all in already."""
        metadata = self._owned(transactional_id, producer_id, producer_epoch)
        if metadata.state in PREPARE_STATES:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{transactional_id} is completing its transaction")
        if metadata.state == TransactionState.ONGOING and partitions <= metadata.partitions:
            return CoordinatorResult([], None)
        return CoordinatorResult([_record(metadata.prepare_add_partitions(partitions, now_ms))],
                                 None)

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        committed: bool, now_ms: int) -> CoordinatorResult[EndTxnResult]:
        """EndTxn from the producer: log PrepareCommit/PrepareAbort; a retry of a finished
        transaction answers NONE, one still writing markers CONCURRENT_TRANSACTIONS."""
        metadata = self._owned(transactional_id, producer_id, producer_epoch)
        state = metadata.state
        if state == TransactionState.ONGOING:
            target = (TransactionState.PREPARE_COMMIT if committed
                      else TransactionState.PREPARE_ABORT)
            prepared = metadata.prepare_abort_or_commit(target, now_ms)
            return CoordinatorResult([_record(prepared)], EndTxnResult(prepared))
        finished = (TransactionState.COMPLETE_COMMIT if committed
                    else TransactionState.COMPLETE_ABORT)
        finishing = (TransactionState.PREPARE_COMMIT if committed
                     else TransactionState.PREPARE_ABORT)
        if state == finished:
            return CoordinatorResult([], EndTxnResult(None))
        if state == finishing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{transactional_id} is still writing its transaction markers")
        raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                         f"cannot {'commit' if committed else 'abort'} {transactional_id} "
                         f"in state {state.display_name}")

    def abort_timed_out(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        now_ms: int) -> CoordinatorResult[TransactionMetadata | None]:
        """Abort a transaction past its timeout under a bumped epoch (fencing its producer), if
        it is still the same open transaction; returns the PrepareAbort state or None."""
        metadata = self.transactions.get(transactional_id)
        if (metadata is None or metadata.producer_id != producer_id
                or metadata.producer_epoch != producer_epoch or not metadata.timed_out(now_ms)):
            return CoordinatorResult([], None)
        aborting = metadata.prepare_fence_producer_epoch().prepare_abort_or_commit(
            TransactionState.PREPARE_ABORT, now_ms)
        return CoordinatorResult([_record(aborting)], aborting)

    def complete_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             now_ms: int) -> CoordinatorResult[TransactionMetadata | None]:
        """CompleteCommit/CompleteAbort once every marker is written; nothing if the state
        moved on meanwhile (another coordinator epoch finished it)."""
        metadata = self.transactions.get(transactional_id)
        if (metadata is None or metadata.producer_id != producer_id
                or metadata.producer_epoch != producer_epoch
                or metadata.state not in PREPARE_STATES):
            return CoordinatorResult([], None)
        completed = metadata.prepare_complete(now_ms)
        return CoordinatorResult([_record(completed)], completed)

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int
                                 ) -> CoordinatorResult[list[str]]:
        """Tombstones for ids idle longer than transactional.id.expiration.ms with no
        transaction open or finishing."""
        records: list[Record] = []
        expired: list[str] = []
        for metadata in self.transactions.values():
            if (metadata.state in EXPIRABLE_STATES
                    and metadata.txn_last_update_timestamp_ms + expiration_ms <= now_ms):
                metadata.prepare_dead()  # validates the move; Dead is written as a tombstone
                records.append((transaction_log_key(metadata.transactional_id), None))
                expired.append(metadata.transactional_id)
                if len(records) >= MAX_EXPIRED_PER_WRITE:
                    break
        return CoordinatorResult(records, expired)

    def _owned(self, transactional_id: str, producer_id: int,
               producer_epoch: int) -> TransactionMetadata:
        """The id's state if this producer owns it: INVALID_PRODUCER_ID_MAPPING for an unknown
        id or another producer id, PRODUCER_FENCED for another epoch."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"producer {producer_id} is not the producer of {transactional_id}")
        if metadata.producer_epoch != producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"epoch {producer_epoch} of {transactional_id} is fenced by epoch "
                             f"{metadata.producer_epoch}")
        return metadata
