"""Where a share-partition's records come from: a local log, its inactive chunks, or WAL objects.

A share-partition lives on one broker, which holds its acquisition locks, and reads its records
through a source:

- a classic partition is read from the leader's log, as a consumer's fetch reads it;
- a chunked partition (seed 000) reads its active chunk there too, and its inactive chunks from
  the log of the chunk when this broker holds one, else from one of the chunk's replicas (a
  consumer's Fetch between brokers, as fetch.py relays for a consumer that cannot be redirected);
- a diskless partition (KIP-1164) has no leader holding its data: its share-partition lives on
  the broker leading its diskless coordinator's `__diskless_metadata` partition (the leader
  Metadata names for it unless that broker is a gateway of more coordinators than its share),
  fenced by that partition's leader epoch. Its records
  come from WAL objects like any diskless fetch's.

Every source hands out whole batches as read (memoryviews of the log, or the pieces a diskless
read patches the base offset into, never decoded), each with its header, and the aborted
transactions among them as (producer id, first offset) pairs, which is all a diskless
coordinator keeps; the share-partition manager skips aborted batches as consumers do.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)
from kafka_ext.protocol.records import READ_COMMITTED
from kafka_ext.share.group_config import (
    AUTO_OFFSET_RESET_BY_DURATION,
    AUTO_OFFSET_RESET_EARLIEST,
)

# ListOffsets' special timestamps.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(slots=True)
class SourceRead:
    """Whole batches from one offset on, and the aborted transactions among them."""

    # Each batch's header and the buffers whose concatenation is the batch.
    batches: list[tuple[BatchHeader, list[memoryview | bytes]]]
    aborted: list[tuple[int, int]]  # (producer id, first offset)


class ShareSource(Protocol):
    """The records of one partition, as its share-partition's broker reads them."""

    leader_epoch: int

    def log_start_offset(self) -> int | None:
        """The partition's first offset when known without a call (None: ask `read`)."""

    def end_offset(self) -> int | None:
        """The offset past the last record when known without a call (None: unknown)."""

    async def read(self, offset: int, max_bytes: int, *, read_committed: bool,
                   min_one_batch: bool) -> tuple[SourceRead, int]:
        """Batches from `offset` up to the high watermark (the last stable offset when
        `read_committed`), and the partition's log start offset as the read saw it."""

    async def reset_offset(self, reset: Any) -> int:
        """Where a share group starts reading by `share.auto.offset.reset`."""


def share_owner(image: Any, topic: str, partition: int) -> tuple[int, int] | None:
    """(broker, epoch) holding the share-partitions of `topic`-`partition`, or None when the
    partition is unknown: its leader, or for a diskless partition its coordinator's leader,
    each with the leader epoch that fences the share state it writes."""
    known = image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is None:
        return None
    if not part.is_diskless:
        return part.leader, part.leader_epoch
    metadata = image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
    shard = (metadata.partitions.get(part.diskless_coordinator)
             if metadata is not None else None)
    return (-1, -1) if shard is None else (shard.leader, shard.leader_epoch)


def open_source(broker: Any, topic: str, partition: int) -> ShareSource:
    """The source of a partition whose share-partitions this broker holds;
    NOT_LEADER_OR_FOLLOWER (or the replica manager's error) when it does not hold them."""
    image = broker.controller.image
    known = image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is not None and part.is_diskless:
        owner = share_owner(image, topic, partition)
        assert owner is not None
        node, epoch = owner
        if node != broker.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER if node >= 0
                             else ErrorCode.LEADER_NOT_AVAILABLE,
                             f"the share-partitions of diskless {topic}-{partition} are held "
                             f"by broker {node}, its coordinator's leader")
        return DisklessSource(broker, topic, partition, epoch)
    hosted = broker.replica_manager.leader_partition(topic, partition)
    return LogSource(broker, hosted, topic, known.topic_id, partition)


class LogSource:
    """A partition this broker leads: its log, and its inactive chunks where it has any."""

    __slots__ = ("broker", "hosted", "topic", "topic_id", "partition", "leader_epoch")

    def __init__(self, broker: Any, hosted: Any, topic: str, topic_id: uuid.UUID,
                 partition: int) -> None:
        self.broker = broker
        self.hosted = hosted
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.leader_epoch = int(hosted.leader_epoch)

    def _chunks(self) -> Any:
        """The partition's image when it has inactive chunks, else None."""
        known = self.broker.controller.image.topics_by_name.get(self.topic)
        part = known.partitions.get(self.partition) if known is not None else None
        return part if part is not None and part.chunks else None

    def log_start_offset(self) -> int:
        part = self._chunks()
        return int(part.chunks[0].start_offset if part is not None
                   else self.hosted.log.log_start_offset)

    def end_offset(self) -> int:
        return int(self.hosted.log.log_end_offset)

    async def read(self, offset: int, max_bytes: int, *, read_committed: bool,
                   min_one_batch: bool) -> tuple[SourceRead, int]:
        part = self._chunks()
        if part is not None and offset < part.start_offset:
            return await self._read_chunk(part, offset, max_bytes, read_committed,
                                          min_one_batch), self.log_start_offset()
        plog = self.hosted.log
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        if offset >= upper:
            return SourceRead([], []), self.log_start_offset()
        info = plog.read(offset, max_bytes, max_offset=upper, min_one_message=min_one_batch)
        return _from_log(plog, info, read_committed), self.log_start_offset()

    async def _read_chunk(self, part: Any, offset: int, max_bytes: int, read_committed: bool,
                          min_one_batch: bool) -> SourceRead:
        """An inactive chunk's batches up to its stop offset: from its log here, else from
        one of its replicas."""
        replicas = self.broker.replica_manager
        found = replicas.chunk_log(self.topic, self.partition, offset, readers=True)
        if found is not None:
            chunk, plog = found
            info = plog.read(offset, max_bytes, max_offset=chunk.stop_offset + 1,
                             min_one_message=min_one_batch)
            return _from_log(plog, info, read_committed)
        chunk = part.chunk_at(offset)
        if chunk is None:  # below the first chunk: the start moves up to it
            return SourceRead([], [])
        # Imported here: fetch.py imports the share handlers' modules through the server.
        from kafka_ext.server.fetch import chunk_read_replica, relay_chunk_fetch
        replica = chunk_read_replica(self.broker.controller.image, self.topic, self.partition,
                                     chunk, "")
        if replica is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE,
                             f"no replica of the chunk of {self.topic}-{self.partition} at "
                             f"{chunk.start_offset} is available")
        got = await relay_chunk_fetch(self.broker, replica, self.topic, self.topic_id,
                                      self.partition, offset, max_bytes,
                                      READ_COMMITTED if read_committed else 0)
        if got.error_code:
            raise KafkaError(ErrorCode(got.error_code),
                             f"reading the chunk of {self.topic}-{self.partition} at "
                             f"{chunk.start_offset} from broker {replica}")
        records = memoryview(got.records) if got.records is not None else memoryview(b"")
        aborted = [(t.producer_id, t.first_offset) for t in got.aborted_transactions or ()]
        return SourceRead(_whole_batches([records]), aborted)

    async def reset_offset(self, reset: Any) -> int:
        plog = self.hosted.log
        if reset.strategy == AUTO_OFFSET_RESET_EARLIEST:
            return self.log_start_offset()
        if reset.strategy == AUTO_OFFSET_RESET_BY_DURATION:
            timestamp = int(time.time() * 1000) - reset.duration_ms
            if self._chunks() is not None:
                from kafka_ext.server.list_offsets import lookup_in_chunks
                in_chunk = await lookup_in_chunks(self.broker, self.topic, self.partition,
                                                  timestamp, ask_replicas=True)
                if in_chunk is not None:
                    return in_chunk[0]
            found = plog.fetch_offset_by_timestamp(timestamp)
            return int(plog.high_watermark) if found is None else int(found.offset)
        return int(plog.high_watermark)  # latest


def _from_log(plog: Any, info: Any, read_committed: bool) -> SourceRead:
    aborted = ([(t.producer_id, t.first_offset) for t in plog.aborted_transactions_in(info)]
               if read_committed and info.records else [])
    return SourceRead(_whole_batches(info.records), aborted)


def _whole_batches(views: list[memoryview]) -> list[tuple[BatchHeader, list[memoryview | bytes]]]:
    """The batches of contiguous reads, each a zero-copy slice; headers only are read."""
    return [(header, [view[pos:pos + header.size_bytes]])
            for view in views for pos, header in iter_batch_headers(view)]


def _diskless_batches(pieces: list[memoryview | bytes]
                      ) -> list[tuple[BatchHeader, list[memoryview | bytes]]]:
    """A diskless read's buffers, batch by batch: a batch is one buffer (a copy stamped with
    its LogAppendTime) or two (its base offset, then the rest of it in the WAL object)."""
    batches: list[tuple[BatchHeader, list[memoryview | bytes]]] = []
    index = 0
    while index < len(pieces):
        piece = pieces[index]
        if len(piece) >= BATCH_OVERHEAD:
            batches.append((read_batch_header(piece), [piece]))
            index += 1
            continue
        rest = pieces[index + 1]
        header = read_batch_header(bytes(piece) + bytes(rest[:BATCH_OVERHEAD - len(piece)]))
        batches.append((header, [piece, rest]))
        index += 2
    return batches


class DisklessSource:
    """A diskless partition whose coordinator this broker leads: its WAL objects."""

    __slots__ = ("broker", "topic", "partition", "leader_epoch")

    def __init__(self, broker: Any, topic: str, partition: int, leader_epoch: int) -> None:
        self.broker = broker
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch

    def log_start_offset(self) -> None:
        return None

    def end_offset(self) -> None:
        return None

    async def read(self, offset: int, max_bytes: int, *, read_committed: bool,
                   min_one_batch: bool) -> tuple[SourceRead, int]:
        [result] = await self.broker.diskless.fetch(
            [(self.topic, self.partition, offset, max_bytes)], max_bytes, first=min_one_batch,
            isolation_level=READ_COMMITTED if read_committed else 0)
        if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and result.log_start_offset >= 0:
            # Below the start (retention, DeleteRecords): the start moves up; past the end
            # (offsets altered ahead): nothing to acquire yet.
            return SourceRead([], []), result.log_start_offset
        if result.error_code:
            raise KafkaError(ErrorCode(result.error_code),
                             f"reading diskless {self.topic}-{self.partition} at {offset}")
        return (SourceRead(_diskless_batches(list(result.records or ())),
                           list(result.aborted_transactions or ())), result.log_start_offset)

    async def reset_offset(self, reset: Any) -> int:
        if reset.strategy == AUTO_OFFSET_RESET_EARLIEST:
            timestamp = EARLIEST_TIMESTAMP
        elif reset.strategy == AUTO_OFFSET_RESET_BY_DURATION:
            timestamp = int(time.time() * 1000) - reset.duration_ms
        else:
            timestamp = LATEST_TIMESTAMP
        offset, _ = await self.broker.diskless.list_offset(self.topic, self.partition, timestamp)
        if offset < 0:  # no record that recent
            offset, _ = await self.broker.diskless.list_offset(self.topic, self.partition,
                                                               LATEST_TIMESTAMP)
        return int(offset)
