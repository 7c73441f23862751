"""SharePersisterClient: a broker's SharePersister, wherever each key's share coordinator runs.

Mirrors Kafka's DefaultStatePersister with its PersisterStateManager. A key's coordinator is the
leader of the `__share_group_state` partition its "groupId:topicId:partition" hashes to; this
client reads that from the metadata image, as the diskless coordinator client does, creating the
topic on first use as FindCoordinator would. When this broker leads the partition the call goes
to the local share coordinator (no network); otherwise the same API (83-87) goes to the leader
over `broker.broker_channels`. NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, a lost connection or a timed-out request are tried again with
backoff until the call's deadline, and a new leader in the metadata ends the wait at once (a
failover costs its detection, not a backoff on top). Every other error, and the last retriable
one at the deadline, is raised as KafkaError with the coordinator's code. Retrying is safe: a
write merges the same batches again to the same state, and Initialize and Delete set it.
Loop-owned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kafka_ext.coordinator.share.coordinator import SHARE_GROUP_STATE_TOPIC
from kafka_ext.coordinator.share.records import delivery_state
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.share.persister import (
    SharePartitionKey,
    ShareState,
    ShareStateSummary,
    StateBatch,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRIABLE: frozenset[int] = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
})
CALL_TIMEOUT_S = 15.0
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
# The versions sent: our brokers serve Kafka 4.2's newest.
_VERSIONS = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 1,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1,
}

_reg = registry()
_Initialize = _reg["InitializeShareGroupStateRequest"].cls
_Read = _reg["ReadShareGroupStateRequest"].cls
_Write = _reg["WriteShareGroupStateRequest"].cls
_Delete = _reg["DeleteShareGroupStateRequest"].cls
_Summary = _reg["ReadShareGroupStateSummaryRequest"].cls


def _leader_of(image: Any, partition: int) -> int:
    topic = image.topics_by_name.get(SHARE_GROUP_STATE_TOPIC)
    part = None if topic is None else topic.partitions.get(partition)
    return -1 if part is None else int(part.leader)


def _leaders(image: Any) -> dict[int, int] | None:
    topic = None if image is None else image.topics_by_name.get(SHARE_GROUP_STATE_TOPIC)
    return None if topic is None else {p: part.leader for p, part in topic.partitions.items()}


def _partition_answer(response: Any) -> Any:
    """The one partition of a one-key response; its error raised as KafkaError."""
    try:
        (topic,) = response.results
        (answer,) = topic.partitions
    except ValueError:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         "the share coordinator answered for other share-partitions") from None
    if answer.error_code:
        try:
            code = ErrorCode(answer.error_code)
        except ValueError:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        raise KafkaError(code, answer.error_message or code.name)
    return answer


class SharePersisterClient:
    """`broker.share_persister`; owned by the broker's event loop."""

    def __init__(self, broker: Any, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.broker = broker
        self.timeout_s = timeout_s
        # Set (and replaced) when a __share_group_state leader changes: waiting retries go.
        self._leaders_changed = asyncio.Event()
        self._started = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            self.broker.controller.listeners.append(self._on_image)

    async def stop(self) -> None:
        if self._started:
            self._started = False
            listeners = self.broker.controller.listeners
            if self._on_image in listeners:
                listeners.remove(self._on_image)
            self._leaders_changed.set()  # no retry waits out its backoff at shutdown

    def _on_image(self, old: Any, new: Any) -> None:
        """Controller listener: wake the retries when a coordinator's leader changes."""
        if _leaders(old) != _leaders(new):
            self._leaders_changed.set()
            self._leaders_changed = asyncio.Event()

    # -- SharePersister ----------------------------------------------------------------------

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        request = _Initialize(group_id=key.group_id, topics=[_Initialize.InitializeStateData(
            topic_id=key.topic_id, partitions=[_Initialize.PartitionData(
                partition=key.partition, state_epoch=state_epoch, start_offset=start_offset)])])
        await self._call(key, lambda c: c.initialize(key, state_epoch, start_offset),
                         ApiKey.INITIALIZE_SHARE_GROUP_STATE, request, _partition_answer)

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ShareState:
        request = _Read(group_id=key.group_id, topics=[_Read.ReadStateData(
            topic_id=key.topic_id, partitions=[_Read.PartitionData(
                partition=key.partition, leader_epoch=leader_epoch)])])

        def parse(response: Any) -> ShareState:
            answer = _partition_answer(response)
            try:
                batches = [StateBatch(b.first_offset, b.last_offset,
                                      delivery_state(b.delivery_state), b.delivery_count)
                           for b in answer.state_batches]
            except DecodeError as exc:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from None
            return ShareState(answer.state_epoch, answer.start_offset, batches)

        return await self._call(key, lambda c: c.read(key, leader_epoch),
                                ApiKey.READ_SHARE_GROUP_STATE, request, parse)

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        request = _Write(group_id=key.group_id, topics=[_Write.WriteStateData(
            topic_id=key.topic_id, partitions=[_Write.PartitionData(
                partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                start_offset=start_offset, delivery_complete_count=delivery_complete_count,
                state_batches=[_Write.StateBatch(
                    first_offset=b.first_offset, last_offset=b.last_offset,
                    delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                    for b in batches])])])
        await self._call(key, lambda c: c.write(key, state_epoch, leader_epoch, start_offset,
                                                batches, delivery_complete_count),
                         ApiKey.WRITE_SHARE_GROUP_STATE, request, _partition_answer)

    async def delete(self, key: SharePartitionKey) -> None:
        request = _Delete(group_id=key.group_id, topics=[_Delete.DeleteStateData(
            topic_id=key.topic_id, partitions=[_Delete.PartitionData(partition=key.partition)])])
        await self._call(key, lambda c: c.delete(key), ApiKey.DELETE_SHARE_GROUP_STATE,
                         request, _partition_answer)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1
                           ) -> ShareStateSummary:
        request = _Summary(group_id=key.group_id, topics=[_Summary.ReadStateSummaryData(
            topic_id=key.topic_id, partitions=[_Summary.PartitionData(
                partition=key.partition, leader_epoch=leader_epoch)])])

        def parse(response: Any) -> ShareStateSummary:
            answer = _partition_answer(response)
            return ShareStateSummary(answer.state_epoch, answer.leader_epoch,
                                     answer.start_offset, answer.delivery_complete_count)

        return await self._call(key, lambda c: c.read_summary(key, leader_epoch),
                                ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, request, parse)

    # -- routing -----------------------------------------------------------------------------

    async def _call(self, key: SharePartitionKey, local: Callable[[Any], Awaitable[T]],
                    api_key: ApiKey, request: Any, parse: Callable[[Any], T]) -> T:
        """`local(share coordinator)` when this broker is the key's coordinator, else the
        request to it; retried as the module says until the deadline."""
        deadline = time.monotonic() + self.timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                return await self._once(key, local, api_key, request, parse, deadline)
            except KafkaError as exc:
                if exc.code not in RETRIABLE:
                    raise
                failure = exc
            except (ConnectionError, TimeoutError, OSError) as exc:
                failure = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     f"the share coordinator of {key.coordinator_key()} could "
                                     f"not be reached: {exc or type(exc).__name__}")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._started:
                raise failure
            log.debug("share coordinator of %s: %s; retrying", key.coordinator_key(), failure)
            changed = self._leaders_changed
            try:
                await asyncio.wait_for(changed.wait(), min(backoff, remaining))
            except TimeoutError:
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def _once(self, key: SharePartitionKey, local: Callable[[Any], Awaitable[T]],
                    api_key: ApiKey, request: Any, parse: Callable[[Any], T],
                    deadline: float) -> T:
        coordinator = getattr(self.broker, "share_coordinator", None)
        if coordinator is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share coordinator")
        await coordinator.ensure_topic()
        partition = coordinator.partition_for(key)
        leader = _leader_of(self.broker.controller.image, partition)
        if leader < 0:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{SHARE_GROUP_STATE_TOPIC}-{partition} has no leader")
        if leader == self.broker.node_id:
            return await local(coordinator)
        timeout_s = max(deadline - time.monotonic(), 0.001)
        response = await self.broker.broker_channels.request(
            leader, api_key, _VERSIONS[api_key], request, timeout_s)
        return parse(response)
