"""The share coordinator's APIs (KIP-932): 83-87, between brokers.

InitializeShareGroupState (83) v0, ReadShareGroupState (84) v0, WriteShareGroupState (85)
v0-1, DeleteShareGroupState (86) v0 and ReadShareGroupStateSummary (87) v0-1, all flexible.
A share-partition leader (Read, Write) and the group coordinator (Initialize, Delete,
ReadSummary) send them to the share coordinator of each key, as Kafka's persister does; they
need CLUSTER_ACTION on the cluster (the dispatcher checks it). Each partition of a request is
one key and gets its own error: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or
COORDINATOR_NOT_AVAILABLE when its `__share_group_state` partition is not served here, else
the share coordinator's answer (coordinator/share/). An empty group id is INVALID_REQUEST for
every partition. Version notes: Write v1 adds DeliveryCompleteCount to the request and
ReadSummary v1 to the response (KIP-1226, Kafka 4.2); a v0 writer's count is -1 (unchanged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kafka_ext.coordinator.share.records import delivery_state
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import Handler, RequestContext
from kafka_ext.share.persister import SharePartitionKey, ShareState, ShareStateSummary, StateBatch

T = TypeVar("T")

_reg = registry()
_InitializeResponse = _reg["InitializeShareGroupStateResponse"].cls
_ReadResponse = _reg["ReadShareGroupStateResponse"].cls
_WriteResponse = _reg["WriteShareGroupStateResponse"].cls
_DeleteResponse = _reg["DeleteShareGroupStateResponse"].cls
_SummaryResponse = _reg["ReadShareGroupStateSummaryResponse"].cls


async def _per_partition(ctx: RequestContext, request: Any,
                         call: Callable[[Any, SharePartitionKey, Any], Awaitable[T]]
                         ) -> list[tuple[Any, list[tuple[Any, T | KafkaError]]]]:
    """Run `call(coordinator, key, partition data)` for every partition of `request`, all at
    once; per topic, each partition's answer or its KafkaError."""
    coordinator = getattr(ctx.broker, "share_coordinator", None)
    keyed = [(t, p, SharePartitionKey(request.group_id, t.topic_id, p.partition))
             for t in request.topics for p in t.partitions]
    if coordinator is None:
        error: KafkaError | None = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                              "no share coordinator runs on this broker")
    elif not request.group_id:
        error = KafkaError(ErrorCode.INVALID_REQUEST, "Group id must be specified and non-empty")
    else:
        error = None
    if error is not None:
        outcomes: list[Any] = [error] * len(keyed)
    else:
        outcomes = await asyncio.gather(*(call(coordinator, key, p) for _, p, key in keyed),
                                        return_exceptions=True)
    by_topic: dict[int, tuple[Any, list[tuple[Any, T | KafkaError]]]] = {}
    for (t, p, _), outcome in zip(keyed, outcomes, strict=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, KafkaError):
            raise outcome  # a bug, not an answer: the dispatcher logs it
        by_topic.setdefault(id(t), (t, []))[1].append((p, outcome))
    return list(by_topic.values())


def _error_only(cls: Any, topic_cls: Any,
                results: Sequence[tuple[Any, Sequence[tuple[Any, object]]]]) -> Any:
    """The response of Initialize, Write or Delete: each partition with its error."""
    return cls(results=[topic_cls(topic_id=t.topic_id, partitions=[
        _failed(cls, p, o) if isinstance(o, KafkaError) else cls.PartitionResult(
            partition=p.partition) for p, o in parts]) for t, parts in results])


def _failed(cls: Any, p: Any, error: KafkaError) -> Any:
    """A PartitionResult of `cls`'s response that answers partition `p` with `error`."""
    return cls.PartitionResult(partition=p.partition, error_code=int(error.code),
                               error_message=error.message)


def _batches(batches: list[Any]) -> list[StateBatch]:
    out = []
    for b in batches:
        try:
            state = delivery_state(b.delivery_state)
        except DecodeError:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"unknown delivery state {b.delivery_state}") from None
        out.append(StateBatch(b.first_offset, b.last_offset, state, b.delivery_count))
    return out


async def handle_initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    """(Re)start each share-partition's state at its start offset with its state epoch."""
    results = await _per_partition(ctx, request, lambda c, key, p: c.initialize(
        key, p.state_epoch, p.start_offset))
    return _error_only(_InitializeResponse, _InitializeResponse.InitializeStateResult, results)


async def handle_read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    """Each share-partition's state epoch, start offset and state batches, for its leader."""
    results = await _per_partition(ctx, request, lambda c, key, p: c.read(key, p.leader_epoch))
    cls = _ReadResponse

    def partition(p: Any, outcome: ShareState | KafkaError) -> Any:
        if isinstance(outcome, KafkaError):
            return _failed(cls, p, outcome)
        return cls.PartitionResult(
            partition=p.partition, state_epoch=outcome.state_epoch,
            start_offset=outcome.start_offset, state_batches=[cls.StateBatch(
                first_offset=b.first_offset, last_offset=b.last_offset,
                delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                for b in outcome.batches])

    return cls(results=[cls.ReadStateResult(
        topic_id=t.topic_id, partitions=[partition(p, o) for p, o in parts])
        for t, parts in results])


async def handle_write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    """Merge each share-partition's changed batches and start offset into its state; each
    answer comes once the write is replicated."""
    async def write(c: Any, key: SharePartitionKey, p: Any) -> None:
        await c.write(key, p.state_epoch, p.leader_epoch, p.start_offset,
                      _batches(p.state_batches), p.delivery_complete_count)

    results = await _per_partition(ctx, request, write)
    return _error_only(_WriteResponse, _WriteResponse.WriteStateResult, results)


async def handle_delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    """Forget each share-partition's state (a tombstone)."""
    results = await _per_partition(ctx, request, lambda c, key, p: c.delete(key))
    return _error_only(_DeleteResponse, _DeleteResponse.DeleteStateResult, results)


async def handle_read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    """Each share-partition's epochs, start offset and (v1) delivery complete count."""
    results = await _per_partition(ctx, request, lambda c, key, p: c.read_summary(
        key, p.leader_epoch))
    cls = _SummaryResponse

    def partition(p: Any, outcome: ShareStateSummary | KafkaError) -> Any:
        if isinstance(outcome, KafkaError):
            return _failed(cls, p, outcome)
        return cls.PartitionResult(
            partition=p.partition, state_epoch=outcome.state_epoch,
            leader_epoch=outcome.leader_epoch, start_offset=outcome.start_offset,
            delivery_complete_count=outcome.delivery_complete_count)

    return cls(results=[cls.ReadStateSummaryResult(
        topic_id=t.topic_id, partitions=[partition(p, o) for p, o in parts])
        for t, parts in results])


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: handle_initialize_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE: handle_read_share_group_state,
    ApiKey.WRITE_SHARE_GROUP_STATE: handle_write_share_group_state,
    ApiKey.DELETE_SHARE_GROUP_STATE: handle_delete_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: handle_read_share_group_state_summary,
}
