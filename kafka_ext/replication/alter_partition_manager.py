"""AlterPartitionManager: a leader's ISR proposals, sent to the active controller (KIP-497).

Proposals made in one turn of the event loop go in one AlterPartition (v3: each ISR member with
the broker epoch its fetches carried, KIP-903). One proposal per partition is in flight at a
time (the partition's `pending_isr`). The answer, or the metadata image if it comes first,
settles it, as Kafka's Partition.handleAlterPartitionError does:

- a committed change becomes the partition's ISR;
- a stale partition epoch or fenced leader epoch means the controller has a newer state of the
  partition: the proposal stays pending until the image brings it;
- any other refusal (INELIGIBLE_REPLICA above all) is dropped, and the followers it would have
  added are held back until the metadata about them changes or a backoff passes
  (ReplicaManager.isr_change_refused), so a refused follower is not proposed on every fetch.

A controller that cannot be reached is retried after a pause that doubles while it stays out of
reach (RETRY_BACKOFF_S up to RETRY_BACKOFF_MAX_S).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.replication.partition import NO_BROKER_EPOCH, Partition
from kafka_ext.server.alter_partition import answer_alter_partition

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3
# Kafka's retry.backoff.ms and retry.backoff.max.ms defaults.
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
_Request = registry()["AlterPartitionRequest"].cls


@dataclass(frozen=True, slots=True)
class Proposal:
    """An ISR proposal with the epochs it was made in: it is sent in them, even when retried,
    and dropped once the partition has moved on."""

    hosted: Partition
    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int

    @property
    def current(self) -> bool:
        """Still the partition's pending proposal, in the epochs it was made in."""
        hosted = self.hosted
        return (hosted.is_leader and hosted.pending_isr == self.new_isr
                and hosted.leader_epoch == self.leader_epoch
                and hosted.partition_epoch == self.partition_epoch)


class AlterPartitionManager:
    """Owned by the broker's event loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._queued: dict[tuple[str, int], Proposal] = {}
        self._sending: asyncio.Task[None] | None = None
        self._backoff_s = RETRY_BACKOFF_S  # before the next retry of an unanswered request
        # Counted as they go out, answered by this node's controller or another's (metrics.py).
        self.requests_sent = 0
        self.partitions_sent = 0

    def submit(self, hosted: Partition, new_isr: tuple[int, ...]) -> None:
        self.queue(hosted, new_isr)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send_queued())

    def queue(self, hosted: Partition, new_isr: tuple[int, ...]) -> None:
        """Queue a proposal for the next request, with the partition's epochs as of now."""
        self._queued[(hosted.topic, hosted.partition)] = Proposal(
            hosted, new_isr, hosted.leader_epoch, hosted.partition_epoch)

    async def stop(self) -> None:
        if self._sending is not None:
            self._sending.cancel()

    async def _send_queued(self) -> None:
        while self._queued:
            await asyncio.sleep(0)  # let the proposals of this turn join the request
            batch = {tp: p for tp, p in self._queued.items() if p.current}
            self._queued = {}
            if not batch:
                continue
            try:
                response = await self._send(batch)
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                for tp, proposal in batch.items():
                    self._queued.setdefault(tp, proposal)
                await asyncio.sleep(self._not_answered(exc))
                continue
            self._settle(batch, response)

    def _not_answered(self, exc: Exception) -> float:
        """The wait before retrying a request that got no answer, doubled while none comes; the
        first failure in a row logs at info, the next ones at debug."""
        backoff_s = self._backoff_s
        log.log(logging.INFO if backoff_s == RETRY_BACKOFF_S else logging.DEBUG,
                "AlterPartition not answered (%s); retrying in %d ms", exc, backoff_s * 1000)
        self._backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)
        return backoff_s

    async def _send(self, batch: dict[tuple[str, int], Proposal]) -> Any:
        broker = self.broker
        topics: dict[Any, Any] = {}
        for proposal in batch.values():
            hosted = proposal.hosted
            topic = topics.get(hosted.topic_id)
            if topic is None:
                topic = topics[hosted.topic_id] = _Request.TopicData(
                    topic_name=hosted.topic, topic_id=hosted.topic_id, partitions=[])
            topic.partitions.append(_Request.PartitionData(
                partition_index=hosted.partition, leader_epoch=proposal.leader_epoch,
                partition_epoch=proposal.partition_epoch, new_isr=list(proposal.new_isr),
                new_isr_with_epochs=[_Request.BrokerState(
                    broker_id=r, broker_epoch=_fetched_broker_epoch(broker, hosted, r))
                    for r in proposal.new_isr]))
        request = _Request(broker_id=broker.node_id, broker_epoch=broker.lifecycle.broker_epoch,
                           topics=list(topics.values()))
        self.requests_sent += 1
        self.partitions_sent += len(batch)
        response = await broker.lifecycle.to_controller(
            ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, request,
            lambda b, r: answer_alter_partition(b, r, ALTER_PARTITION_VERSION))
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "AlterPartition refused")
        return response

    def _settle(self, batch: dict[tuple[str, int], Proposal], response: Any) -> None:
        """Apply each answer to the proposal it answers, if that is still pending: an answer
        that comes after the metadata moved on settles nothing."""
        self._backoff_s = RETRY_BACKOFF_S  # the controller answers again
        replicas = self.broker.replica_manager
        by_id = {(p.hosted.topic_id, p.hosted.partition): p for p in batch.values()}
        for topic in response.topics:
            for answer in topic.partitions:
                proposal = by_id.get((topic.topic_id, answer.partition_index))
                if proposal is None or not proposal.current:
                    continue
                hosted = proposal.hosted
                if replicas.partitions.get((hosted.topic, hosted.partition)) is not hosted:
                    continue  # no longer hosted here
                error = ErrorCode(answer.error_code)
                if error in _SETTLED_BY_THE_IMAGE:
                    # The metadata changed under the proposal (perhaps by it, its answer lost):
                    # it stays pending until the image with the newer epoch replaces it.
                    log.info("%s-%d: ISR change refused (%s); waiting for the metadata",
                             hosted.topic, hosted.partition, error.name)
                    continue
                if error != ErrorCode.NONE:
                    replicas.isr_change_refused(hosted, proposal.new_isr, error)
                    continue
                log.info("%s-%d: ISR is now %s (partition epoch %d)", hosted.topic,
                         hosted.partition, list(answer.isr), answer.partition_epoch)
                replicas.isr_change_done(hosted, tuple(answer.isr), answer.partition_epoch)


# Refusals that mean the partition has a newer state the metadata image will bring.
_SETTLED_BY_THE_IMAGE = frozenset({ErrorCode.INVALID_UPDATE_VERSION,
                                   ErrorCode.FENCED_LEADER_EPOCH})


def _fetched_broker_epoch(broker: Broker, hosted: Partition, broker_id: int) -> int:
    """A proposed ISR member's broker epoch (KIP-903), which the controller checks against the
    registered one: the leader's own, or the one the follower's fetches carry (-1, not checked,
    for a member that has not fetched in this leader epoch, as Kafka sends it)."""
    if broker_id == broker.node_id:
        return int(broker.lifecycle.broker_epoch)
    state = hosted.followers.get(broker_id)
    return state.broker_epoch if state is not None else NO_BROKER_EPOCH
