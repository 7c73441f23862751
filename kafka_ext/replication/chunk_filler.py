"""Copying chunk data a replica must hold before it serves (seed 000, chunkCreates).

A replica that AlterChunkAssignments adds to an inactive chunk copies all of the chunk from one
of its replicas (replica fetches for the chunk's offsets), then reports it holds it; the
controller completes the move when every added replica has (controller/chunk_control.py).

When CreateChunks closes a partition's active chunk while transactions are open, the closed
chunk holds records past its stop offset (the open transactions, [stop + 1, end]) that the new
active chunk must also hold: every replica of the new chunk copies them, from its own replica of
the closed chunk when it has one, else from a broker that holds it (a replica fetch for offsets
of a chunk that broker holds, server/fetch.py). Until then it takes no role: it neither leads
nor follows, and producers are told NOT_LEADER_OR_FOLLOWER (retriable). A partition with no
open transaction at the switch copies nothing: its new chunk starts empty.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.chunk_control import ChunkChange
from kafka_ext.controller.image import ChunkImage, PartitionImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

if TYPE_CHECKING:
    from kafka_ext.replication.partition import Partition
    from kafka_ext.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

COPY_BYTES = 1024 * 1024  # per read or fetch
ACTIVE_TAIL = -1  # the task key of a new active chunk's tail copy: (topic, partition, -1)
RETRY_BACKOFF_S = 0.5
_Request = registry()["FetchRequest"].cls
TopicPartition = tuple[str, int]
# (broker id, Fetch request) -> a block in which the answer is valid (NodeChannels.leased).
ChunkFetch = Callable[[int, Any], AbstractAsyncContextManager[Any]]


class ChunkFiller:
    """Owned by the ReplicaManager, on the event loop."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager
        self.fetch: ChunkFetch | None = None  # set by the broker
        # Tells the controller (AlterChunkAssignments) a chunk copy is whole; set by the broker.
        self.report: Callable[[ChunkChange], Awaitable[None]] | None = None
        self._tasks: dict[tuple[str, int, int], asyncio.Task[None]] = {}

    def fill_tail(self, hosted: Partition, part: PartitionImage) -> bool:
        """Whether `hosted`, a replica of the partition's active chunk, still lacks the tail
        of the chunk closed before it; starts copying it when so."""
        closed = part.chunks[-1] if part.chunks else None
        if closed is None or closed.end_offset < part.start_offset:
            return False
        until = closed.end_offset + 1
        if hosted.log.log_end_offset >= until:
            return False
        manager = self.replica_manager
        tp = (hosted.topic, hosted.partition)
        key = (*tp, ACTIVE_TAIL)
        if key not in self._tasks:
            log.info("%s-%d: copying offsets %d to %d of the closed chunk before serving", *tp,
                     hosted.log.log_end_offset, closed.end_offset)

            async def fill() -> None:
                await self._fill(key, hosted.topic_id, hosted.log, closed, until,
                                 lambda: manager.partitions.get(tp) is hosted)
                if manager.partitions.get(tp) is hosted:
                    manager.tail_filled(tp)

            self._start(key, fill())
        return True

    def copy_chunk(self, topic: str, partition: int, topic_id: uuid.UUID, chunk: ChunkImage,
                   plog: Any) -> None:
        """chunkCreates for an inactive chunk (AlterChunkAssignments added us): copy all of it
        from a replica that holds it, then tell the controller, which completes the move."""
        key = (topic, partition, chunk.start_offset)
        if key in self._tasks:
            return
        manager = self.replica_manager
        log.info("%s-%d: copying the chunk at %d (offsets to %d) from its replicas", topic,
                 partition, chunk.start_offset, chunk.end_offset)

        def still_wanted() -> bool:
            return manager.log_manager.get_chunk_log(*key) is plog

        async def copy() -> None:
            await self._fill(key, topic_id, plog, chunk, chunk.end_offset + 1, still_wanted)
            while self.report is not None and still_wanted():
                try:
                    await self.report(ChunkChange(topic, partition, chunk.start_offset,
                                                  caught_up_replica=manager.node_id))
                    return
                except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                    log.info("%s-%d: reporting the chunk at %d copied: %s", topic, partition,
                             chunk.start_offset, exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)

        self._start(key, copy())

    def _start(self, key: tuple[str, int, int], work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[key] = task

        def finished(task: asyncio.Task[None]) -> None:
            del self._tasks[key]
            if not task.cancelled() and task.exception() is not None:
                log.error("copying chunk data of %s-%d failed", key[0], key[1],
                          exc_info=task.exception())

        task.add_done_callback(finished)

    async def _fill(self, key: tuple[str, int, int], topic_id: uuid.UUID, plog: Any,
                    chunk: ChunkImage, until: int, still_wanted: Callable[[], bool]) -> None:
        topic, partition = key[0], key[1]
        attempt = 0
        while plog.log_end_offset < until and still_wanted():
            local = self.replica_manager.log_manager.get_chunk_log(topic, partition,
                                                                   chunk.start_offset)
            try:
                if local is not None and local is not plog:
                    # Whole batches as views of the chunk's segments, appended as they are.
                    info = local.read(plog.log_end_offset, COPY_BYTES, max_offset=until,
                                      min_one_message=True)
                    if not info.records:
                        raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, "nothing to copy")
                    for records in info.records:
                        plog.append_as_follower(records)
                else:
                    await self._fetch_and_append(topic, partition, topic_id, plog, chunk,
                                                 attempt)
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                attempt += 1
                log.info("%s-%d: copying chunk data: %s; trying again", topic, partition, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
        # Copied from a replica holding it whole: committed data, visible at once.
        plog.high_watermark = max(plog.high_watermark, plog.log_end_offset)

    async def _fetch_and_append(self, topic: str, partition: int, topic_id: uuid.UUID,
                                plog: Any, chunk: ChunkImage, attempt: int) -> None:
        """Append the next records from a broker holding the chunk (a different one each
        attempt), as views of the received frame, as a follower appends (no copy)."""
        sources = [r for r in chunk.readable_replicas
                   if r != self.replica_manager.node_id]
        if not sources or self.fetch is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "no broker holds the chunk")
        first = zlib.crc32(f"{topic}-{partition}".encode())
        source = sources[(first + attempt) % len(sources)]
        request = _Request(
            replica_state=_Request.ReplicaState(replica_id=self.replica_manager.node_id,
                                                replica_epoch=-1),
            max_wait_ms=0, min_bytes=1, max_bytes=COPY_BYTES, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[_Request.FetchTopic(
                topic=topic, topic_id=topic_id, partitions=[
                    _Request.FetchPartition(
                        partition=partition, current_leader_epoch=-1,
                        fetch_offset=plog.log_end_offset, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=COPY_BYTES)])],
            forgotten_topics_data=[], rack_id="")
        async with self.fetch(source, request) as response:
            data = response.responses[0].partitions[0]
            if data.error_code:
                raise KafkaError(ErrorCode(data.error_code), f"from broker {source}")
            if data.records is None or not len(data.records):
                raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, f"nothing from broker {source}")
            plog.append_as_follower(data.records)  # before the frame's buffer is reused

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
