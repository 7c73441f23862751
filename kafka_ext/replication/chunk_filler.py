"""Copying chunk data a replica must hold before it serves (seed 000, chunkCreates).

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
import zlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.image import ChunkImage, PartitionImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

if TYPE_CHECKING:
    from kafka_ext.replication.partition import Partition
    from kafka_ext.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

COPY_BYTES = 1024 * 1024  # per read or fetch
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
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}

    def fill_tail(self, hosted: Partition, part: PartitionImage) -> bool:
        """Whether `hosted`, a replica of the partition's active chunk, still lacks the tail
        of the chunk closed before it; starts copying it when so."""
        closed = part.chunks[-1] if part.chunks else None
        if closed is None or closed.end_offset < part.start_offset:
            return False
        until = closed.end_offset + 1
        if hosted.log.log_end_offset >= until:
            return False
        tp = (hosted.topic, hosted.partition)
        if tp not in self._tasks:
            log.info("%s-%d: copying offsets %d to %d of the closed chunk before serving", *tp,
                     hosted.log.log_end_offset, closed.end_offset)
            self._tasks[tp] = asyncio.get_running_loop().create_task(
                self._fill(hosted, closed, until))
        return True

    async def _fill(self, hosted: Partition, chunk: ChunkImage, until: int) -> None:
        tp = (hosted.topic, hosted.partition)
        plog = hosted.log
        manager = self.replica_manager
        attempt = 0
        try:
            while plog.log_end_offset < until and manager.partitions.get(tp) is hosted:
                local = manager.log_manager.get_chunk_log(*tp, chunk.start_offset)
                try:
                    if local is not None:
                        info = local.read(plog.log_end_offset, COPY_BYTES, max_offset=until,
                                          min_one_message=True)
                        records = b"".join(info.records)  # a small tail, copied once
                    else:
                        records = await self._fetch(hosted, chunk, until, attempt)
                    if not records:
                        raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, "nothing to copy")
                    plog.append_as_follower(records)
                except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                    attempt += 1
                    log.info("%s-%d: copying the closed chunk's tail: %s; trying again", *tp,
                             exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)
            # Every replica of the new chunk holds these before any serves: committed.
            plog.high_watermark = max(plog.high_watermark, plog.log_end_offset)
        finally:
            del self._tasks[tp]
        manager.tail_filled(tp)

    async def _fetch(self, hosted: Partition, chunk: ChunkImage, until: int,
                     attempt: int) -> bytes:
        """The next records from a broker holding the chunk (a different one each attempt)."""
        sources = [r for r in chunk.readable_replicas
                   if r != self.replica_manager.node_id]
        if not sources or self.fetch is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "no broker holds the chunk")
        first = zlib.crc32(f"{hosted.topic}-{hosted.partition}".encode())
        source = sources[(first + attempt) % len(sources)]
        plog = hosted.log
        request = _Request(
            replica_state=_Request.ReplicaState(replica_id=self.replica_manager.node_id,
                                                replica_epoch=-1),
            max_wait_ms=0, min_bytes=1, max_bytes=COPY_BYTES, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[_Request.FetchTopic(
                topic=hosted.topic, topic_id=hosted.topic_id, partitions=[
                    _Request.FetchPartition(
                        partition=hosted.partition, current_leader_epoch=-1,
                        fetch_offset=plog.log_end_offset, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=COPY_BYTES)])],
            forgotten_topics_data=[], rack_id="")
        async with self.fetch(source, request) as response:
            data = response.responses[0].partitions[0]
            if data.error_code:
                raise KafkaError(ErrorCode(data.error_code), f"from broker {source}")
            # Copied out of the leased frame: appended after the block, and the tail is small.
            return bytes(data.records or b"")

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
