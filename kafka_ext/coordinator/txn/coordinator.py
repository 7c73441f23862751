"""TransactionCoordinator: transactional ids over `__transaction_state`, a runtime tenant.

Mirrors Kafka's TransactionCoordinator with its TransactionMarkerChannelManager (transaction
version 1: the epoch is bumped by InitProducerId, fences and timeouts, never by EndTxn). A
transaction ends in two logged steps: PrepareCommit/PrepareAbort, then the markers are written
to every partition of the transaction, then CompleteCommit/CompleteAbort (retried while the shard
stays loaded, as Kafka retries it). A shard loaded in a Prepare state resumes its markers.
Ongoing transactions past their timeout are aborted under a bumped epoch; idle transactional
ids expire with a tombstone. Loop-owned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka_ext.coordinator.runtime import CoordinatorRuntime
from kafka_ext.coordinator.txn.markers import write_txn_marker
from kafka_ext.coordinator.txn.metadata import (
    PREPARE_STATES,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)
from kafka_ext.coordinator.txn.producer_id_manager import ProducerIdManager
from kafka_ext.coordinator.txn.shard import TransactionStateShard
from kafka_ext.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
ABORT_TIMER = "abort-timed-out-transactions"
EXPIRE_TIMER = "remove-expired-transactional-ids"
# How long EndTxn (and a fencing InitProducerId) waits for the markers before answering. Kafka
# answers as soon as PrepareCommit/PrepareAbort is logged; waiting a little for the (local)
# markers spares the producer a round of CONCURRENT_TRANSACTIONS retries on its next call.
MARKER_WAIT_S = 5.0
# Backoff between retries of a marker a partition could not take yet (leader moving, loading),
# and of a CompleteCommit/CompleteAbort write `__transaction_state` refused.
MARKER_RETRY_BACKOFF_MIN_S = 0.05
MARKER_RETRY_BACKOFF_MAX_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True, frozen=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int


class TransactionCoordinator:
    """`broker.txn_coordinator`: the transaction APIs' logic; handlers map its KafkaErrors."""

    def __init__(self, broker: Any) -> None:
        config = broker.config
        self.broker = broker
        self.max_txn_timeout_ms: int = config.transaction_max_timeout_ms
        self.transactional_id_expiration_ms: int = config.transactional_id_expiration_ms
        self.abort_interval_ms = int(
            config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
        self.expire_interval_ms = int(
            config.get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        topic_configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
            "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
            "unclean.leader.election.enable": "false",
        }
        self.runtime: CoordinatorRuntime[TransactionStateShard] = CoordinatorRuntime(
            broker, TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
            topic_configs, self._new_shard,
            replication_factor=config.transaction_state_log_replication_factor)
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        # Marker writers in flight, by (partition, transactional id).
        self._completions: dict[tuple[int, str], asyncio.Task[None]] = {}

    # -- placement and lifecycle -------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        """The `__transaction_state` partition (so the coordinator) of a transactional id."""
        return self.runtime.partition_for(transactional_id)

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` if missing (FindCoordinator does, as in Kafka)."""
        await self.runtime.ensure_topic()

    async def start(self) -> None:
        await self.runtime.start()

    async def stop(self) -> None:
        for task in list(self._completions.values()):
            task.cancel()
        if self._completions:
            await asyncio.gather(*self._completions.values(), return_exceptions=True)
        await self.runtime.stop()

    def _new_shard(self, partition: int) -> TransactionStateShard:
        return TransactionStateShard(partition, self._shard_loaded, self._shard_unloaded)

    async def _allocate_producer_ids(self, count: int) -> int:
        first: int = await self.broker.controller.allocate_producer_ids(count)
        return first

    def _shard_loaded(self, partition: int) -> None:
        """Resume the markers of transactions the log left in a Prepare state; arm timers."""
        shard = self.runtime.shard(partition)
        for metadata in shard.in_state(PREPARE_STATES):
            self._start_completion(partition, metadata)
        self._schedule(partition, ABORT_TIMER, self.abort_interval_ms, self._abort_timed_out)
        self._schedule(partition, EXPIRE_TIMER, self.expire_interval_ms,
                       self._expire_transactional_ids)

    def _shard_unloaded(self, partition: int) -> None:
        """The new coordinator of the partition resumes whatever markers were in flight."""
        for (p, _), task in list(self._completions.items()):
            if p == partition:
                task.cancel()

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str | None, txn_timeout_ms: int,
                               expected: ProducerIdAndEpoch | None = None) -> ProducerIdAndEpoch:
        """A producer id and epoch: a fresh id at epoch 0 for an idempotent producer, or the
        transactional id's bumped epoch (fencing every older producer of that id)."""
        if transactional_id is None:
            return ProducerIdAndEpoch(await self.producer_ids.generate(), 0)
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "TransactionalId must not be empty")
        if not 0 < txn_timeout_ms <= self.max_txn_timeout_ms:
            raise KafkaError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                             f"transaction timeout {txn_timeout_ms} ms is not in (0, "
                             f"{self.max_txn_timeout_ms}] (transaction.max.timeout.ms)")
        partition = self.partition_for(transactional_id)
        self.runtime.shard(partition)  # NOT_COORDINATOR before spending a producer id
        await self.producer_ids.ensure_available()
        pair = None if expected is None else (expected.producer_id, expected.producer_epoch)
        now = now_ms()
        result = await self.runtime.write(
            partition, lambda shard: shard.init_producer_id(
                transactional_id, txn_timeout_ms, pair, now, self.producer_ids.next_id))
        if result.fenced:
            task = self._start_completion(partition, result.metadata)
            await asyncio.wait({task}, timeout=MARKER_WAIT_S)
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"the ongoing transaction of {transactional_id} is being aborted")
        self.runtime.shard(partition).remember_last_producer_epoch(result.metadata)
        return ProducerIdAndEpoch(result.metadata.producer_id, result.metadata.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int,
                                    partitions: Iterable[TopicPartition]) -> None:
        """Join partitions to the producer's transaction (starting one if none is open)."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "TransactionalId must not be empty")
        added = frozenset(partitions)
        partition = self.partition_for(transactional_id)
        now = now_ms()
        await self.runtime.write(partition, lambda shard: shard.add_partitions(
            transactional_id, producer_id, producer_epoch, added, now))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ VerifyOnly: NONE per partition already in the transaction."""
        shard = self.runtime.shard(self.partition_for(transactional_id))
        return shard.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      committed: bool) -> None:
        """Log PrepareCommit/PrepareAbort, then write the markers and complete in the
        background; a retry of a finished transaction succeeds without writing anything."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "TransactionalId must not be empty")
        partition = self.partition_for(transactional_id)
        now = now_ms()
        result = await self.runtime.write(partition, lambda shard: shard.end_transaction(
            transactional_id, producer_id, producer_epoch, committed, now))
        if result.metadata is not None:
            task = self._start_completion(partition, result.metadata)
            await asyncio.wait({task}, timeout=MARKER_WAIT_S)

    # -- DescribeTransactions / ListTransactions ---------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata:
        """The id's state; NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or
        TRANSACTIONAL_ID_NOT_FOUND otherwise."""
        shard = self.runtime.shard(self.partition_for(transactional_id))
        metadata = shard.get(transactional_id)
        if metadata is None:
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                             f"no transactional id {transactional_id}")
        return metadata

    def list_transactions(self, states: frozenset[TransactionState] | None,
                          producer_ids: frozenset[int] | None,
                          min_duration_ms: int = -1) -> list[TransactionMetadata]:
        """Every id this node coordinates, filtered by state, producer id and (KIP-994) how
        long the transaction has run; COORDINATOR_LOAD_IN_PROGRESS while a shard loads."""
        if any(self.runtime.is_loading(p) for p in range(self.runtime.num_partitions)):
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"{TRANSACTION_STATE_TOPIC} is still loading")
        now = now_ms()
        found = []
        for _, shard in self.runtime.shards():
            for metadata in shard.transactions.values():
                if states and metadata.state not in states:
                    continue
                if producer_ids and metadata.producer_id not in producer_ids:
                    continue
                if min_duration_ms >= 0 and now - metadata.txn_start_timestamp_ms <= min_duration_ms:
                    continue
                found.append(metadata)
        return found

    # -- markers -----------------------------------------------------------------------------

    def _start_completion(self, partition: int,
                          metadata: TransactionMetadata) -> asyncio.Task[None]:
        """The marker writer of a transaction in a Prepare state; at most one per id."""
        key = (partition, metadata.transactional_id)
        task = self._completions.get(key)
        if task is not None and not task.done():
            return task
        task = asyncio.get_running_loop().create_task(self._complete(partition, metadata))
        self._completions[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._completions.get(key) is done:
                del self._completions[key]
            if not done.cancelled() and done.exception() is not None:
                # Nobody awaits this task for its result: a bug here must still be seen. The
                # transaction stays in its Prepare state and resumes at the next shard load.
                log.error("completing the transaction of %s failed", metadata.transactional_id,
                          exc_info=done.exception())

        task.add_done_callback(forget)
        return task

    async def _complete(self, partition: int, metadata: TransactionMetadata) -> None:
        """Write every marker, then log CompleteCommit/CompleteAbort."""
        committed = metadata.state == TransactionState.PREPARE_COMMIT
        try:
            coordinator_epoch = self.runtime.coordinator_epoch(partition)
            results = await asyncio.gather(*(
                self._write_marker(partition, coordinator_epoch, tp, metadata, committed)
                for tp in sorted(metadata.partitions)))
            if not all(results):
                return  # no longer the coordinator: the new one resumes from PrepareX
            completed = await self._log_completion(partition, coordinator_epoch, metadata)
        except KafkaError as exc:
            log.info("transaction of %s not completed here (%s); the partition's next "
                     "coordinator resumes it", metadata.transactional_id, exc)
            return
        if completed is not None:
            log.debug("%s %s", metadata.transactional_id, completed.state.display_name)

    async def _log_completion(self, partition: int, coordinator_epoch: int,
                              metadata: TransactionMetadata) -> TransactionMetadata | None:
        """Log CompleteCommit/CompleteAbort once the markers are written, retrying a failed
        write with backoff while this node coordinates the partition at the same epoch (Kafka's
        TransactionMarkerChannelManager retries the append too); NOT_COORDINATOR and
        COORDINATOR_LOAD_IN_PROGRESS end it, as in Kafka: the next coordinator resumes."""
        backoff_s = MARKER_RETRY_BACKOFF_MIN_S
        failures = 0
        while True:
            if not self._still_coordinating(partition, coordinator_epoch):
                return None
            try:
                completed: TransactionMetadata | None = await self.runtime.write(
                    partition, lambda shard: shard.complete_transaction(
                        metadata.transactional_id, metadata.producer_id,
                        metadata.producer_epoch, now_ms()))
                return completed
            except KafkaError as exc:
                if exc.code in (ErrorCode.NOT_COORDINATOR,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    raise
                failures += 1
                # Once at warning level, then quietly: a long outage must not flood the log.
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "logging %s of %s failed (%s); retrying",
                        "CompleteCommit" if metadata.state == TransactionState.PREPARE_COMMIT
                        else "CompleteAbort", metadata.transactional_id, exc)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MARKER_RETRY_BACKOFF_MAX_S)

    def _still_coordinating(self, partition: int, coordinator_epoch: int) -> bool:
        """Whether the shard of `partition` is loaded here at `coordinator_epoch`."""
        return (partition in self.runtime.loaded_partitions()
                and self.runtime.coordinator_epoch(partition) == coordinator_epoch)

    async def _write_marker(self, partition: int, coordinator_epoch: int, tp: TopicPartition,
                            metadata: TransactionMetadata, committed: bool) -> bool:
        """Write one marker, retrying while the partition cannot take it yet; False once this
        node stops coordinating the transaction."""
        topic, index = tp
        backoff_s = MARKER_RETRY_BACKOFF_MIN_S
        while True:
            if not self._still_coordinating(partition, coordinator_epoch):
                return False
            try:
                await write_txn_marker(self.broker, topic, index, metadata.producer_id,
                                       metadata.producer_epoch, coordinator_epoch, committed)
                return True
            except KafkaError as exc:
                if not self._partition_exists(topic, index):
                    log.info("dropping the marker of %s for deleted partition %s-%d",
                             metadata.transactional_id, topic, index)
                    return True
                if not exc.code.retriable:
                    # Kafka treats these as fatal; a marker the partition refuses for good
                    # must not hold the transaction (and its id) open forever.
                    log.error("marker of %s (producer %d epoch %d) refused by %s-%d: %s",
                              metadata.transactional_id, metadata.producer_id,
                              metadata.producer_epoch, topic, index, exc)
                    return True
                log.debug("marker for %s-%d not written yet: %s", topic, index, exc)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MARKER_RETRY_BACKOFF_MAX_S)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        image = self.broker.controller.image.topics_by_name.get(topic)
        return image is not None and partition in image.partitions

    # -- timers ------------------------------------------------------------------------------

    def _schedule(self, partition: int, key: str, delay_ms: int, job: Any) -> None:
        try:
            self.runtime.schedule(partition, key, delay_ms, lambda: job(partition))
        except KafkaError:
            pass  # unloaded meanwhile: the timer dies with the shard

    async def _abort_timed_out(self, partition: int) -> None:
        """Abort every ongoing transaction of the shard older than its timeout, bumping the
        producer's epoch so it cannot go on writing to it (Kafka's abortTimedOutTransactions)."""
        self._schedule(partition, ABORT_TIMER, self.abort_interval_ms, self._abort_timed_out)
        now = now_ms()
        shard = self.runtime.shard(partition)
        for metadata in [m for m in shard.transactions.values() if m.timed_out(now)]:
            try:
                aborting = await self.runtime.write(partition, functools.partial(
                    TransactionStateShard.abort_timed_out, transactional_id=metadata.transactional_id,
                    producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
                    now_ms=now))
            except KafkaError as exc:
                log.warning("could not abort the timed-out transaction of %s: %s",
                            metadata.transactional_id, exc)
                continue
            if aborting is not None:
                log.info("aborting the transaction of %s (producer %d): older than its "
                         "timeout of %d ms", aborting.transactional_id, aborting.producer_id,
                         aborting.txn_timeout_ms)
                self._start_completion(partition, aborting)

    async def _expire_transactional_ids(self, partition: int) -> None:
        """Tombstone the ids unused for transactional.id.expiration.ms."""
        self._schedule(partition, EXPIRE_TIMER, self.expire_interval_ms,
                       self._expire_transactional_ids)
        now = now_ms()
        expired = await self.runtime.write(partition, lambda shard: (
            shard.expire_transactional_ids(now, self.transactional_id_expiration_ms)))
        if expired:
            log.info("expired %d transactional id(s) of %s-%d", len(expired),
                     TRANSACTION_STATE_TOPIC, partition)
