"""Chunks (seed 000): CreateChunks (our key 76) and AlterChunkAssignments (77), for our own
client and tools (stock clients on these keys speak Kafka's share-group APIs: share_groups.py).

CreateChunks goes to the leader of each partition's active chunk, as the proposal says. The
leader stops taking appends to the partition, waits until every in-sync replica holds its
whole log (so the chunk it closes holds every acknowledged record), and fills in the offsets:
the closed chunk is read up to the last stable offset (exclusive) and holds up to the high
watermark (exclusive); the new chunk starts at the last stable offset, so an open transaction's
records are in both, and the new chunk's replicas copy them (replication/chunk_filler.py). The
entries then go to the active controller (forwarded as any metadata change), which commits
each partition's ChunkRecord and PartitionChangeRecord in one batch. The leader takes appends
again once the answer is in: it is then no longer the leader of the new chunk, or leads it in
a new log. AlterChunkAssignments is answered by the active controller.

StartTimestamp is the time the chunk is created: every record appended to the new chunk came
after it, whatever timestamps producers set.

Authorization: CreateChunks needs ALTER on each topic (checked on the leader and again on the
controller, for the client the forwarded request names). AlterChunkAssignments needs ALTER on
the cluster, like AlterPartitionReassignments, or CLUSTER_ACTION: replicas report their copies
with it, forwarded in Envelopes without a principal, which run as the sending node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafka_ext.controller.chunk_control import ChunkChange, ChunkCreation
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import authorized_topics, cluster_authorized
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
log = logging.getLogger(__name__)
# How long the leader waits for its followers to hold its whole log before closing a chunk.
CATCH_UP_TIMEOUT_S = 10.0


async def handle_create_chunks(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["CreateChunksResponse"].cls
    broker = ctx.broker
    entries = request.topic_partitions
    alterable = authorized_topics(ctx, AclOperation.ALTER, (e.topic_name for e in entries))
    results: dict[int, tuple[ErrorCode, str | None]] = {
        index: (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
        for index, entry in enumerate(entries) if entry.topic_name not in alterable}
    if ctx.forwarded:  # the active controller, with offsets a leader filled in
        allowed = [(index, e) for index, e in enumerate(entries) if index not in results]
        if allowed:
            outcome = await broker.controller.create_chunks([_creation(e) for _, e in allowed])
            results.update(zip((index for index, _ in allowed), outcome, strict=True))
        return Response(throttle_time_ms=0, results=[
            Response.CreateChunksTopicPartitionResult(
                topic_name=e.topic_name, partition_id=e.partition_id,
                error_code=int(results[i][0]), error_message=results[i][1])
            for i, e in enumerate(entries)])
    closing: list[Any] = []  # the leaders' partitions taking no appends meanwhile
    try:
        ready = []
        for index, entry in enumerate(entries):
            if index in results:
                continue
            try:
                hosted = broker.replica_manager.leader_partition(entry.topic_name,
                                                                 entry.partition_id)
                if hosted.closing_chunk:
                    raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                     "a chunk of this partition is being created")
                hosted.closing_chunk = True
                closing.append(hosted)
                await _fill_in_offsets(hosted, entry)
                ready.append((index, entry))
            except KafkaError as exc:
                results[index] = (exc.code, exc.message or None)
        if ready:
            outcome = await _to_controller(ctx, [entry for _, entry in ready])
            for (index, _), result in zip(ready, outcome, strict=True):
                results[index] = result
    finally:
        for hosted in closing:
            hosted.closing_chunk = False
    return Response(throttle_time_ms=0, results=[
        Response.CreateChunksTopicPartitionResult(
            topic_name=e.topic_name, partition_id=e.partition_id,
            error_code=int(results[i][0]), error_message=results[i][1],
            start_offset=e.start_offset if results[i][0] == ErrorCode.NONE else -1)
        for i, e in enumerate(entries)])


async def _fill_in_offsets(hosted: Any, entry: Any) -> None:
    """The closed chunk's stop and end, the new one's start and start time, once every
    in-sync replica holds the leader's whole log (appends are held off meanwhile)."""
    plog = hosted.log
    try:
        await asyncio.wait_for(hosted.wait_for_high_watermark(plog.log_end_offset),
                               CATCH_UP_TIMEOUT_S)
    except TimeoutError:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                         f"the in-sync replicas did not reach offset {plog.log_end_offset} in "
                         f"{CATCH_UP_TIMEOUT_S:.0f} s") from None
    last_stable = plog.last_stable_offset
    entry.start_offset = last_stable
    entry.prev_stop_offset = last_stable - 1
    entry.prev_end_offset = plog.high_watermark - 1
    entry.prev_max_timestamp = max((s.largest_timestamp_ms for s in plog.segments), default=-1)
    entry.prev_size_bytes = plog.size_bytes
    entry.start_timestamp = int(time.time() * 1000)


async def _to_controller(ctx: RequestContext, entries: list[Any]
                         ) -> list[tuple[ErrorCode, str | None]]:
    broker = ctx.broker
    if broker.controller.raft.is_leader:
        return await broker.controller.create_chunks([_creation(e) for e in entries])
    Request = _reg["CreateChunksRequest"].cls
    try:
        answer = await broker.forwarding.forward(ApiKey.CREATE_CHUNKS, ctx.api_version,
                                                 Request(topic_partitions=entries),
                                                 ctx.client_id, principal=ctx.principal,
                                                 client_host=ctx.client_host)
    except KafkaError as exc:
        return [(exc.code, exc.message or None)] * len(entries)
    return [(ErrorCode(r.error_code), r.error_message) for r in answer.results]


def _creation(entry: Any) -> ChunkCreation:
    end = entry.prev_end_offset if entry.prev_end_offset >= 0 else entry.prev_stop_offset
    return ChunkCreation(entry.topic_name, entry.partition_id, tuple(entry.broker_ids),
                         entry.start_offset, entry.start_timestamp, entry.prev_stop_offset, end,
                         entry.prev_max_timestamp, entry.prev_size_bytes)


async def handle_alter_chunk_assignments(ctx: RequestContext, request: Any) -> Any:
    """On the active controller (forwarded by other nodes)."""
    Response = _reg["AlterChunkAssignmentsResponse"].cls
    if not (cluster_authorized(ctx, AclOperation.ALTER)
            or cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)):
        return alter_chunk_assignments_error(request, KafkaError(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."))
    chunks = request.chunks
    outcome = await ctx.broker.controller.alter_chunk_assignments([
        ChunkChange(c.topic_name, c.partition_id, c.start_offset, c.chunk_epoch,
                    tuple(c.broker_ids), c.caught_up_replica, c.removed_replica)
        for c in chunks])
    return Response(throttle_time_ms=0, results=[
        Response.AlterChunkAssignmentResult(
            topic_name=c.topic_name, partition_id=c.partition_id, start_offset=c.start_offset,
            error_code=int(code), error_message=message)
        for c, (code, message) in zip(chunks, outcome, strict=True)])


async def report_chunk_change(broker: Any, change: ChunkChange) -> None:
    """A replica's report on a chunk (copied, or its copy gone) to the active controller;
    KafkaError when it is refused or cannot be delivered."""
    if broker.controller.raft.is_leader:
        [(code, message)] = await broker.controller.alter_chunk_assignments([change])
    else:
        Request = _reg["AlterChunkAssignmentsRequest"].cls
        answer = await broker.forwarding.forward(
            ApiKey.ALTER_CHUNK_ASSIGNMENTS, 0, Request(chunks=[Request.AlterChunkAssignment(
                topic_name=change.topic, partition_id=change.partition,
                start_offset=change.start_offset, chunk_epoch=-1, broker_ids=[],
                caught_up_replica=change.caught_up_replica,
                removed_replica=change.removed_replica)]), f"kafka-ext-broker-{broker.node_id}")
        [result] = answer.results
        code, message = ErrorCode(result.error_code), result.error_message
    if code != ErrorCode.NONE:
        raise KafkaError(code, message or "")


async def remove_chunks(broker: Any, chunks: list[tuple[str, int, Any]], why: str) -> None:
    """Drop whole inactive chunks (retention, DeleteRecords): every replica leaves each of
    them, in one request, and the controller removes the chunks (their replicas then delete
    their copies as the metadata says). KafkaError when the controller refuses."""
    changes = [ChunkChange(topic, partition, chunk.start_offset, removed_replica=replica)
               for topic, partition, chunk in chunks for replica in chunk.replicas]
    if not changes:
        return
    for topic, partition, chunk in chunks:
        log.info("%s: removing the chunk of %s-%d at offsets %d-%d", why, topic, partition,
                 chunk.start_offset, chunk.end_offset)
    if broker.controller.raft.is_leader:
        outcome = await broker.controller.alter_chunk_assignments(changes)
    else:
        Request = _reg["AlterChunkAssignmentsRequest"].cls
        answer = await broker.forwarding.forward(
            ApiKey.ALTER_CHUNK_ASSIGNMENTS, 0, Request(chunks=[Request.AlterChunkAssignment(
                topic_name=c.topic, partition_id=c.partition, start_offset=c.start_offset,
                chunk_epoch=-1, broker_ids=[], removed_replica=c.removed_replica)
                for c in changes]), f"kafka-ext-broker-{broker.node_id}")
        outcome = [(ErrorCode(r.error_code), r.error_message) for r in answer.results]
    # A chunk already gone (another round removed it) is what we wanted.
    refused = [(code, message) for code, message in outcome
               if code not in (ErrorCode.NONE, ErrorCode.CHUNK_NOT_FOUND)]
    if refused:
        raise KafkaError(refused[0][0], refused[0][1] or "")


def alter_chunk_assignments_error(request: Any, error: KafkaError) -> Any:
    """AlterChunkAssignments answered with `error` on every chunk (no controller in time)."""
    Response = _reg["AlterChunkAssignmentsResponse"].cls
    return Response(throttle_time_ms=0, results=[
        Response.AlterChunkAssignmentResult(
            topic_name=c.topic_name, partition_id=c.partition_id, start_offset=c.start_offset,
            error_code=int(error.code), error_message=error.message or None)
        for c in request.chunks])


HANDLERS = {
    ApiKey.CREATE_CHUNKS: handle_create_chunks,
    ApiKey.ALTER_CHUNK_ASSIGNMENTS: handle_alter_chunk_assignments,
}
