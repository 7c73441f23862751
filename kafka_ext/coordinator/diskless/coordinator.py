"""DisklessCoordinator: the Diskless coordinators (KIP-1164) hosted on this broker, the third
tenant of the coordinator runtime over `__diskless_metadata`.

A coordinator id is a partition of `__diskless_metadata`; every diskless partition belongs to
one (`PartitionImage.diskless_coordinator`). The seven operations route each entry to its
shard; an entry whose shard is not led here answers NOT_COORDINATOR (still loading:
COORDINATOR_LOAD_IN_PROGRESS). Mutations go through `runtime.write` (validate against the
speculative state, append one batch, wait for the high watermark, apply to SQLite, answer);
ListOffsets waits for earlier writes (`runtime.wait_committed`); FindBatches and DescribeFiles
read the committed state at once.

File lifetime (the KIP's "WAL file management"). A file's OwnerIds are the coordinators the
uploading broker committed it to. When a shard's last live batch in a file goes (retention,
DeleteRecords, topic deleted), the file turns `releasing` in its SQLite and a background
worker asks the other owners (DescribeFiles' HasLiveBatches, through `FileOwners`) whether
they still have live batches:
- one does: the file is handed over to the first such owner in OwnerIds order; this shard
  forgets it, and that owner runs the same rule when its own last batch goes;
- none does: the file turns `deleting` with deletion_due_ms = now +
  diskless.file.deletion.grace.ms (consumers may still be reading it); when due, the owners are
  asked once more (a late commit by another owner takes the file back), then `delete_object`
  removes the object, retried with backoff until it succeeds, and the row goes.
These states live in SQLite only (the log implies them); on load, files still `releasing` are
re-examined and `deleting` ones rescheduled. An owner that is not reachable (not loaded here)
is retried with backoff; on one broker every owner is local.

Snapshots: every diskless.metadata.snapshot.interval.records applied records a shard copies its
database with SQLite's backup API in a worker thread to
`<metadata.log.dir>/diskless/snapshots/<id>-<applied offset>.sqlite`, keeps the newest two,
uploads it to the object store (snapshots.py) and then moves its partition's log start offset
past the previous uploaded snapshot (past this one when it is the only replica). A database
missing or behind the log start is restored from the newest snapshot, local or downloaded,
then the log after it is replayed (`restore_database`, for loads and for warm followers alike).

Warm followers (follower.py): the databases of the coordinators this broker follows are kept
applied up to its replicas' high watermarks, so a new leader's load replays almost nothing.
Loop-owned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC
from kafka_ext.coordinator.diskless.follower import WarmFollowers
from kafka_ext.coordinator.diskless.shard import CommitOutcome, DisklessShard
from kafka_ext.coordinator.diskless.snapshots import SNAPSHOTS_KEPT, RemoteSnapshots
from kafka_ext.coordinator.diskless.state import (
    FILE_DELETING,
    FILE_RELEASING,
    AppliedChanges,
    backup_database,
    remove_database,
)
from kafka_ext.coordinator.runtime import CoordinatorRuntime
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import TimestampType
from kafka_ext.protocol.records import READ_COMMITTED

log = logging.getLogger(__name__)

RETENTION_TIMER = "retention"
# Retries of a file's handover/deletion while an owner or the object store is unavailable.
FILE_RETRY_BACKOFF_MIN_S = 0.05
FILE_RETRY_BACKOFF_MAX_S = 30.0

_reg = registry()
_CreatePartitionsResponse = _reg["DisklessCreatePartitionsResponse"].cls
_DeleteTopicsResponse = _reg["DisklessDeleteTopicsResponse"].cls
_CommitFileResponse = _reg["DisklessCommitFileResponse"].cls
_DeleteRecordsResponse = _reg["DisklessDeleteRecordsResponse"].cls
_ListOffsetsResponse = _reg["DisklessListOffsetsResponse"].cls
_FindBatchesResponse = _reg["DisklessFindBatchesResponse"].cls
_DescribeFilesResponse = _reg["DisklessDescribeFilesResponse"].cls
_DescribeProducersResponse = _reg["DescribeProducersResponse"].cls


def now_ms() -> int:
    return int(time.time() * 1000)


class FileOwners(Protocol):
    """How a shard reaches the other owners of a file; in-process now, a client later."""

    async def file_status(self, coordinator_id: int, object_key: str) -> bool | None:
        """Whether that coordinator has live batches in the file; None when it does not know
        the file (any more); raises KafkaError when it cannot answer (not coordinator,
        loading): the caller retries."""

    async def hand_over(self, coordinator_id: int, object_key: str) -> None:
        """Tell that owner it is now the one responsible for the file."""


class LocalFileOwners:
    """FileOwners over the shards hosted by this broker."""

    def __init__(self, coordinator: DisklessCoordinator) -> None:
        self.coordinator = coordinator

    async def file_status(self, coordinator_id: int, object_key: str) -> bool | None:
        return self.coordinator.runtime.shard(coordinator_id).has_live_batches(object_key)

    async def hand_over(self, coordinator_id: int, object_key: str) -> None:
        self.coordinator.runtime.shard(coordinator_id)  # raises if it cannot take it now
        log.info("diskless file %s handed over to coordinator %d", object_key, coordinator_id)


def _error(exc: KafkaError) -> tuple[int, str]:
    return int(exc.code), exc.message


class _ShardGone(Exception):
    """The shard a file worker serves was unloaded: the worker stops (the new leader resumes)."""


class DisklessCoordinator:
    """`broker.diskless_coordinator`; see the module docstring."""

    def __init__(self, broker: Any, clock_ms: Callable[[], int] = now_ms) -> None:
        config = broker.config
        self.broker = broker
        self.clock_ms = clock_ms
        self.delete_object: Callable[[str], Awaitable[None]] | None = None
        self.state_dir = Path(config.metadata_log_dir) / "diskless"
        self.snapshot_dir = self.state_dir / "snapshots"
        self.deletion_grace_ms: int = config.diskless_file_deletion_grace_ms
        self.snapshot_interval_records: int = config.diskless_metadata_snapshot_interval_records
        self.retention_check_interval_ms: int = config.log_retention_check_interval_ms
        self.owners: FileOwners = LocalFileOwners(self)
        # The records are a log of changes, never compacted; snapshots prune it.
        topic_configs = {"cleanup.policy": "delete", "retention.ms": "-1",
                         "retention.bytes": "-1"}
        self.runtime: CoordinatorRuntime[DisklessShard] = CoordinatorRuntime(
            broker, DISKLESS_METADATA_TOPIC, config.diskless_metadata_topic_num_partitions,
            topic_configs, self._new_shard,
            replication_factor=config.diskless_metadata_topic_replication_factor, pipelined=True)
        # The object store's snapshots (set by DisklessService): any replica can restore.
        self.remote_snapshots: RemoteSnapshots | None = None
        # Held while a database file is replaced, by a load or by a follower catching up.
        self._db_locks: dict[int, asyncio.Lock] = {}
        self.followers = WarmFollowers(broker, DISKLESS_METADATA_TOPIC, self.db_path,
                                       self.runtime.leads, clock_ms, self.db_lock,
                                       self.restore_database, self._notify_fetches)
        self._snapshotting: set[int] = set()
        self._file_tasks: dict[tuple[int, str], asyncio.Task[Any]] = {}
        self._create_topic_task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.runtime.start()
        self.followers.start()
        try:
            await self.runtime.ensure_topic()
        except KafkaError as exc:
            # Too few brokers for its replication factor yet (the first nodes of a cluster):
            # created once enough have registered.
            log.info("%s not created yet, retrying: %s", DISKLESS_METADATA_TOPIC, exc)
            self._create_topic_task = asyncio.get_running_loop().create_task(
                self._create_topic_when_possible())

    async def _create_topic_when_possible(self) -> None:
        delay_s = FILE_RETRY_BACKOFF_MIN_S
        while not self.runtime.topic_exists():
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 2.0)
            try:
                await self.runtime.ensure_topic()
            except KafkaError:
                continue

    async def stop(self) -> None:
        if self._create_topic_task is not None:
            self._create_topic_task.cancel()
            await asyncio.gather(self._create_topic_task, return_exceptions=True)
        await self.followers.stop()
        await self.runtime.stop()

    def db_path(self, coordinator_id: int) -> Path:
        return self.state_dir / f"{coordinator_id}.sqlite"

    def db_lock(self, coordinator_id: int) -> asyncio.Lock:
        return self._db_locks.setdefault(coordinator_id, asyncio.Lock())

    def _new_shard(self, partition: int) -> DisklessShard:
        # This node starts leading the coordinator: its database is the shard's from now on.
        self.followers.release(partition)
        return DisklessShard(partition, self.db_path(partition),
                             on_applied=self._applied, on_loaded=self._shard_loaded,
                             on_unloaded=self._shard_unloaded, prepare=self._prepare_database,
                             clock_ms=self.clock_ms)

    # -- routing ------------------------------------------------------------------------------

    def coordinator_of(self, topic_id: uuid.UUID, partition: int) -> int:
        """The coordinator id of a diskless partition; -1: not diskless or unknown."""
        topic = self.broker.controller.image.topics_by_id.get(topic_id)
        part = None if topic is None else topic.partitions.get(partition)
        return -1 if part is None else int(part.diskless_coordinator)

    def hosts(self, coordinator_id: int) -> bool:
        return coordinator_id in self.runtime.loaded_partitions()

    def _shard(self, coordinator_id: int) -> DisklessShard:
        if coordinator_id < 0:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "not a diskless partition of a known topic")
        return self.runtime.shard(coordinator_id)

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.broker.controller.image.topics_by_id.get(topic_id)
        return None if topic is None else str(topic.name)

    # -- DisklessCreatePartitions (93) --------------------------------------------------------

    async def create_partitions(self, request: Any) -> Any:
        results = []
        for t in request.topics:
            result = _CreatePartitionsResponse.DisklessCreatablePartitionsResult(
                topic_id=t.topic_id, error_code=0, error_message=None)
            results.append(result)
            if self.broker.controller.image.topics_by_id.get(t.topic_id) is None:
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"topic {t.name} ({t.topic_id}) is not in the metadata"
                continue
            by_shard: dict[int, list[int]] = {}
            for p in range(t.num_partitions):
                cid = self.coordinator_of(t.topic_id, p)
                if cid >= 0 and request.coordinator_id in (-1, cid):
                    by_shard.setdefault(cid, []).append(p)
            for cid, partitions in sorted(by_shard.items()):
                op = functools.partial(DisklessShard.create_partitions, topic_id=t.topic_id,
                                       name=t.name, partitions=partitions)
                try:
                    await self.runtime.write(cid, op)
                except KafkaError as exc:
                    result.error_code, result.error_message = _error(exc)
        return _CreatePartitionsResponse(topics=results)

    # -- DisklessDeleteTopics (94) ------------------------------------------------------------

    async def delete_topics(self, request: Any) -> Any:
        """Every shard hosted here that knows a topic deletes it (the image may have dropped
        the topic already); a topic no shard knows is a success."""
        topic_ids = [t.topic_id for t in request.topics]
        errors: dict[uuid.UUID, KafkaError] = {}
        asked = request.coordinator_id
        if asked >= 0:
            self._shard(asked)  # NOT_COORDINATOR / loading for every topic when it is not here
        loading = [p for p in range(self.runtime.num_partitions)
                   if self.runtime.is_loading(p) and asked in (-1, p)]
        for cid, shard in self.runtime.shards():
            if asked not in (-1, cid):
                continue
            known = [t for t in topic_ids if t in shard.topics]
            if not known:
                continue
            try:
                await self.runtime.write(cid, functools.partial(DisklessShard.delete_topics,
                                                                topic_ids=known))
            except KafkaError as exc:
                for t in known:
                    errors[t] = exc
        responses = []
        for topic_id in topic_ids:
            failure = errors.get(topic_id)
            if failure is None and loading:
                failure = KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     f"diskless coordinators {loading} are still loading")
            code, message = (0, None) if failure is None else _error(failure)
            responses.append(_DeleteTopicsResponse.DisklessDeletableTopicResult(
                topic_id=topic_id, error_code=code, error_message=message))
        return _DeleteTopicsResponse(responses=responses)

    # -- DisklessCommitFile (95) --------------------------------------------------------------

    async def commit_file(self, request: Any) -> Any:
        """One result per batch, in request order; each shard writes one file record."""
        by_shard: dict[int, list[int]] = {}
        outcomes: dict[int, CommitOutcome] = {}
        for index, b in enumerate(request.batches):
            cid = self.coordinator_of(b.topic_id, b.partition_index)
            if cid < 0:
                outcomes[index] = CommitOutcome(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                                f"{b.topic_id}-{b.partition_index} is not a "
                                                f"known diskless partition")
            else:
                by_shard.setdefault(cid, []).append(index)
        timestamp_types = self._timestamp_types({b.topic_id for b in request.batches})
        # The broker that uploaded the object, when another one forwards its commit.
        uploader = (request.uploader_broker_id if request.uploader_broker_id >= 0
                    else int(self.broker.node_id))

        async def commit(cid: int, indices: list[int]) -> None:
            try:
                answers = await self.runtime.write(
                    cid, lambda s: s.commit_file(request, indices, timestamp_types, uploader))
            except KafkaError as exc:
                answers = {i: CommitOutcome(int(exc.code), exc.message) for i in indices}
            outcomes.update(answers)

        await asyncio.gather(*(commit(cid, indices) for cid, indices in by_shard.items()))
        Result = _CommitFileResponse.DisklessCommitBatchResult
        return _CommitFileResponse(batches=[
            Result(error_code=o.error_code, error_message=o.error_message,
                   assigned_base_offset=o.assigned_base_offset,
                   log_append_time=o.log_append_time_ms, log_start_offset=o.log_start_offset,
                   is_duplicate=o.is_duplicate)
            for o in (outcomes[i] for i in range(len(request.batches)))])

    def _timestamp_types(self, topic_ids: set[uuid.UUID]) -> dict[uuid.UUID, int]:
        """Topics whose message.timestamp.type is LogAppendTime -> 1."""
        out = {}
        for topic_id in topic_ids:
            name = self._topic_name(topic_id)
            if name is not None and (self.broker.log_config_for(name).message_timestamp_type
                                     == TimestampType.LOG_APPEND_TIME):
                out[topic_id] = int(TimestampType.LOG_APPEND_TIME)
        return out

    # -- DisklessDeleteRecords (96) -----------------------------------------------------------

    async def delete_records(self, request: Any) -> Any:
        Resp = _DeleteRecordsResponse
        by_shard: dict[int, list[tuple[uuid.UUID, int, int]]] = {}
        answers: dict[tuple[uuid.UUID, int], tuple[int, int, str | None]] = {}
        for t in request.topics:
            for p in t.partitions:
                cid = self.coordinator_of(t.topic_id, p.partition_index)
                by_shard.setdefault(cid, []).append((t.topic_id, p.partition_index, p.offset))
        for cid, entries in by_shard.items():
            try:
                self._shard(cid)
                results = await self.runtime.write(
                    cid, functools.partial(DisklessShard.delete_records, requests=entries))
            except KafkaError as exc:
                results = [(int(exc.code), -1, exc.message)] * len(entries)
            for (topic_id, partition, _), result in zip(entries, results, strict=True):
                answers[(topic_id, partition)] = result
        return Resp(topics=[Resp.DisklessDeleteRecordsTopicResult(topic_id=t.topic_id, partitions=[
            Resp.DisklessDeleteRecordsPartitionResult(
                partition_index=p.partition_index,
                error_code=answers[(t.topic_id, p.partition_index)][0],
                low_watermark=answers[(t.topic_id, p.partition_index)][1],
                error_message=answers[(t.topic_id, p.partition_index)][2])
            for p in t.partitions]) for t in request.topics])

    # -- DisklessListOffsets (97) -------------------------------------------------------------

    async def list_offsets(self, request: Any) -> Any:
        """Strict: each shard first waits until its earlier writes are committed and applied."""
        Resp = _ListOffsetsResponse
        ready: dict[int, KafkaError | None] = {}
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                answer = Resp.DisklessListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=0, error_message=None,
                    timestamp=-1, offset=-1)
                partitions.append(answer)
                cid = self.coordinator_of(t.topic_id, p.partition_index)
                try:
                    if cid not in ready:
                        ready[cid] = None
                        try:
                            self._shard(cid)
                            await self.runtime.wait_committed(cid)
                        except KafkaError as exc:
                            ready[cid] = exc
                    failed = ready[cid]
                    if failed is not None:
                        raise failed
                    answer.offset, answer.timestamp = self._shard(cid).list_offset(
                        t.topic_id, p.partition_index, p.timestamp,
                        request.isolation_level == READ_COMMITTED)
                except KafkaError as exc:
                    answer.error_code, answer.error_message = _error(exc)
            topics.append(Resp.DisklessListOffsetsTopicResponse(topic_id=t.topic_id,
                                                                partitions=partitions))
        return Resp(topics=topics)

    # -- DisklessFindBatches (98) -------------------------------------------------------------

    async def find_batches(self, request: Any) -> Any:
        """Committed batches from each offset (stale reads are fine, as the KIP says).

        Per partition up to MaxBatchesPerPartition and MaxPartitionFetchBytes, overall
        FetchMaxBytes; the first partition with data gets at least one batch (Kafka's fetch
        rule, so an oversized batch never blocks a consumer). READ_COMMITTED stops at the last
        stable offset and lists the aborted transactions overlapping the batches returned.
        """
        read_committed = request.isolation_level == READ_COMMITTED
        Resp = _FindBatchesResponse
        max_batches = request.max_batches_per_partition
        if max_batches <= 0:
            max_batches = 1 << 31
        budget = request.fetch_max_bytes if request.fetch_max_bytes > 0 else 1 << 62
        first = True
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                answer = Resp.DisklessFindBatchesPartitionResponse(
                    partition_index=p.partition_index, error_code=0, log_start_offset=-1,
                    high_watermark=-1, batches=[])
                partitions.append(answer)
                try:
                    shard = self._shard(self.coordinator_of(t.topic_id, p.partition_index))
                    state = shard.partition(t.topic_id, p.partition_index)
                    start = state.committed_log_start_offset
                    end = state.committed_high_watermark
                    stable = state.last_stable_offset
                    answer.log_start_offset, answer.high_watermark = start, end
                    answer.last_stable_offset = stable
                    if p.offset < start or p.offset > end:
                        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                         f"offset {p.offset} is outside [{start}, {end}]")
                    readable_end = stable if read_committed else end
                    if p.offset >= readable_end:
                        continue
                    limit = min(budget, p.max_partition_fetch_bytes
                                if p.max_partition_fetch_bytes > 0 else budget)
                    used = 0
                    store = shard.store
                    assert store is not None  # loaded shards have their store open
                    for row in store.find_batches(t.topic_id, p.partition_index, p.offset,
                                                  max_batches):
                        if row.base_offset >= readable_end:
                            break
                        if used + row.byte_size > limit and (answer.batches or not first):
                            break
                        answer.batches.append(Resp.DisklessFindBatchesBatchInfo(
                            batch_id=row.batch_id, object_key=row.object_key, magic=row.magic,
                            byte_offset=row.byte_offset, byte_size=row.byte_size,
                            base_offset=row.base_offset, last_offset=row.last_offset,
                            log_append_timestamp=row.log_append_ms,
                            batch_max_timestamp=row.max_timestamp_ms,
                            timestamp_type=row.timestamp_type))
                        used += row.byte_size
                    if answer.batches:
                        first = False
                        budget -= used
                        if read_committed:
                            answer.aborted_transactions = [
                                Resp.DisklessAbortedTransaction(producer_id=pid,
                                                                first_offset=first_offset)
                                for pid, first_offset in store.aborted_txns(
                                    t.topic_id, p.partition_index, p.offset,
                                    answer.batches[-1].last_offset + 1)]
                except KafkaError as exc:
                    answer.error_code = int(exc.code)
            topics.append(Resp.DisklessFindBatchesTopicResponse(topic_id=t.topic_id,
                                                                partitions=partitions))
        return Resp(topics=topics)

    # -- DescribeProducers (61) of diskless partitions -----------------------------------------

    async def describe_producers(self, request: Any) -> Any:
        """The producer state of diskless partitions whose coordinator is hosted here (the
        others NOT_COORDINATOR): what a classic partition leader answers from its log."""
        Resp = _DescribeProducersResponse
        image = self.broker.controller.image
        topics = []
        for t in request.topics:
            partitions = []
            known = image.topics_by_name.get(t.name)
            for index in t.partition_indexes:
                answer = Resp.PartitionResponse(partition_index=index, error_code=0,
                                                error_message=None, active_producers=[])
                partitions.append(answer)
                try:
                    if known is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"unknown topic {t.name}")
                    shard = self._shard(self.coordinator_of(known.topic_id, index))
                    answer.active_producers = [Resp.ProducerState(
                        producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                        last_sequence=e.last_sequence, last_timestamp=e.last_timestamp_ms,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset)
                        for e in shard.producers(known.topic_id, index)]
                except KafkaError as exc:
                    answer.error_code, answer.error_message = _error(exc)
            topics.append(Resp.TopicResponse(name=t.name, partitions=partitions))
        return Resp(throttle_time_ms=0, topics=topics)

    # -- DisklessDescribeFiles (100) ----------------------------------------------------------

    async def describe_files(self, request: Any) -> Any:
        """Over every shard hosted here: HasLiveBatches if one has live batches in the file;
        DISKLESS_FILE_NOT_FOUND if none knows it (COORDINATOR_LOAD_IN_PROGRESS while a shard
        that might know it is still loading)."""
        Resp = _DescribeFilesResponse
        asked = request.coordinator_id
        if asked >= 0:
            shards = [self._shard(asked)]  # NOT_COORDINATOR / loading: the whole call fails
            loading = False
        else:
            shards = [shard for _, shard in self.runtime.shards()]
            loading = self.loading()
        files = []
        for f in request.files:
            answers = [shard.has_live_batches(f.object_key) for shard in shards]
            known = [a for a in answers if a is not None]
            result = Resp.DisklessDescribeFileResult(object_key=f.object_key, error_code=0,
                                                     error_message=None,
                                                     has_live_batches=any(known))
            if not known:
                code = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading
                        else ErrorCode.DISKLESS_FILE_NOT_FOUND)
                result.error_code = int(code)
                result.error_message = f"{f.object_key} is unknown to the coordinators here"
            files.append(result)
        oldest = self.oldest_file_timestamp_ms(shards)
        return Resp(files=files, oldest_file_timestamp=-1 if oldest is None else oldest)

    def oldest_file_timestamp_ms(self, shards: list[DisklessShard] | None = None) -> int | None:
        """Commit time of the oldest file the shards (by default every hosted one) know;
        None: no files."""
        if shards is None:
            shards = [shard for _, shard in self.runtime.shards()]
        oldest = [t for shard in shards
                  if shard.store is not None and (t := shard.store.oldest_file_ms()) is not None]
        return min(oldest) if oldest else None

    def loading(self) -> bool:
        """Whether a shard led here is still replaying its log."""
        return any(self.runtime.is_loading(p) for p in range(self.runtime.num_partitions))

    def known_topic_ids(self) -> set[uuid.UUID]:
        """Topics some loaded shard here has partitions of (pending writes included), so the
        broker can delete those the metadata no longer has, even if that happened while it
        was down."""
        return {topic_id for _, shard in self.runtime.shards()
                for topic_id, _partition in shard.partitions}

    # -- after each apply ---------------------------------------------------------------------

    def _applied(self, shard: DisklessShard, changes: AppliedChanges) -> None:
        """Wake fetches of changed partitions, start file releases, maybe snapshot."""
        self._notify_fetches(changes)
        if shard.loaded:
            for key in changes.released_files:
                self._start_file_task(shard, key, self._release_file(shard, key))
        if (shard.loaded and shard.records_since_snapshot >= self.snapshot_interval_records
                and shard.coordinator_id not in self._snapshotting):
            self._snapshotting.add(shard.coordinator_id)
            self.runtime.spawn(self._snapshot_logged(shard))

    def _notify_fetches(self, changes: AppliedChanges) -> None:
        """Wake the fetches waiting on this broker for partitions with new data or start."""
        notify = self.broker.replica_manager.notify_data
        for topic_id, partition in changes.partitions:
            name = self._topic_name(topic_id)
            if name is not None:
                notify(name, partition)

    def _shard_loaded(self, shard: DisklessShard) -> None:
        """Resume file work the database records and arm the retention timer."""
        store = shard.store
        assert store is not None
        for f in store.files_in_state(FILE_RELEASING):
            self._start_file_task(shard, f.object_key, self._release_file(shard, f.object_key))
        for f in store.files_in_state(FILE_DELETING):
            self._schedule_deletion(shard, f.object_key, f.deletion_due_ms or 0)
        self._schedule_retention(shard.coordinator_id)

    def _shard_unloaded(self, shard: DisklessShard) -> None:
        for (cid, key), task in list(self._file_tasks.items()):
            if cid == shard.coordinator_id:
                task.cancel()
                del self._file_tasks[(cid, key)]

    def _current(self, shard: DisklessShard) -> bool:
        """Whether `shard` is still the loaded shard of its coordinator id."""
        try:
            return self.runtime.shard(shard.coordinator_id) is shard
        except KafkaError:
            return False

    # -- retention ----------------------------------------------------------------------------

    def _schedule_retention(self, coordinator_id: int) -> None:
        async def run() -> None:
            self._schedule_retention(coordinator_id)
            await self.enforce_retention(coordinator_id)
        self.runtime.schedule(coordinator_id, RETENTION_TIMER, self.retention_check_interval_ms,
                              run)

    async def enforce_retention(self, coordinator_id: int) -> int:
        """Apply retention.ms / retention.bytes to the shard's partitions now; returns how many
        partitions moved their log start offset."""
        now = self.clock_ms()
        moved: int = await self.runtime.write(
            coordinator_id, lambda s: s.enforce_retention(now, self._retention_of))
        return moved

    async def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms over the coordinators hosted here (the broker's periodic
        job): idle producers without an open transaction are forgotten, through the log so
        every replica forgets them too. Returns how many."""
        expired = 0
        for coordinator_id in sorted(self.runtime.loaded_partitions()):
            try:
                expired += await self.runtime.write(
                    coordinator_id, lambda s: s.expire_producers(now_ms, expiration_ms))
            except KafkaError as exc:  # moved or unloaded meanwhile: its new leader will
                log.debug("producer expiry of diskless coordinator %d skipped: %s",
                          coordinator_id, exc)
        return expired

    def _retention_of(self, topic: str) -> tuple[int, int]:
        config = self.broker.log_config_for(topic)
        if not config.deletes_by_retention:
            return -1, -1
        return int(config.retention_ms), int(config.retention_bytes)

    # -- file lifetime ------------------------------------------------------------------------

    def _start_file_task(self, shard: DisklessShard, key: str, work: Awaitable[None]) -> None:
        slot = (shard.coordinator_id, key)
        old = self._file_tasks.get(slot)
        if old is not None and not old.done():
            old.cancel()
        task = self.runtime.spawn(work)
        self._file_tasks[slot] = task
        task.add_done_callback(lambda t: self._file_tasks.pop(slot, None)
                               if self._file_tasks.get(slot) is t else None)

    async def _live_owner(self, shard: DisklessShard, key: str) -> int | None:
        """Who takes the file over: the first other owner (OwnerIds order) with live batches in
        it; else the lowest-id owner below this one that still knows it, which deletes it (owners
        releasing at the same time then delete it once, wherever they run); else None: this
        shard deletes it. Retries with backoff while an owner cannot answer."""
        store = shard.store
        assert store is not None
        row = store.file(key)
        owners = [] if row is None else [o for o in row.owner_ids if o != shard.coordinator_id]
        backoff = FILE_RETRY_BACKOFF_MIN_S
        while True:
            try:
                lower_knowing: int | None = None
                for owner in owners:
                    status = await self.owners.file_status(owner, key)
                    if status:
                        return owner
                    if status is not None and owner < shard.coordinator_id and (
                            lower_knowing is None or owner < lower_knowing):
                        lower_knowing = owner
                return lower_knowing
            except KafkaError as exc:
                log.info("diskless file %s: owner not reachable (%s); retrying", key, exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, FILE_RETRY_BACKOFF_MAX_S)
            if not self._current(shard):
                raise _ShardGone

    async def _release_file(self, shard: DisklessShard, key: str) -> None:
        """This shard's last batch in `key` is gone: hand the file over or mark it deleting."""
        try:
            owner = await self._live_owner(shard, key)
        except _ShardGone:
            return
        store = shard.store
        if not self._current(shard) or store is None:
            return
        if owner is not None:
            await self._hand_over(shard, key, owner, FILE_RELEASING)
            return
        due = self.clock_ms() + self.deletion_grace_ms
        if store.set_file_state(key, FILE_RELEASING, FILE_DELETING, due):
            log.info("diskless file %s: no live batches left; deleting it in %d ms", key,
                     self.deletion_grace_ms)
            self._schedule_deletion(shard, key, due)

    async def _hand_over(self, shard: DisklessShard, key: str, owner: int, state: str) -> None:
        backoff = FILE_RETRY_BACKOFF_MIN_S
        while True:
            try:
                await self.owners.hand_over(owner, key)
                break
            except KafkaError as exc:
                log.info("diskless file %s: handover to %d failed (%s); retrying", key, owner,
                         exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, FILE_RETRY_BACKOFF_MAX_S)
            if not self._current(shard):
                return
        if shard.store is not None and self._current(shard):
            shard.store.forget_file(key, state)

    def _schedule_deletion(self, shard: DisklessShard, key: str, due_ms: int) -> None:
        def fire() -> None:
            self._start_file_task(shard, key, self._delete_file(shard, key))
        self.runtime.schedule(shard.coordinator_id, f"delete:{key}",
                              max(due_ms - self.clock_ms(), 0), fire)

    async def _delete_file(self, shard: DisklessShard, key: str) -> None:
        """Deletion is due: check the owners once more, delete the object, drop the row."""
        try:
            owner = await self._live_owner(shard, key)
        except _ShardGone:
            return
        if not self._current(shard) or shard.store is None:
            return
        if owner is not None:
            await self._hand_over(shard, key, owner, FILE_DELETING)
            return
        backoff = FILE_RETRY_BACKOFF_MIN_S
        while True:
            try:
                if self.delete_object is None:
                    raise OSError("no object store is attached to the diskless coordinator")
                await self.delete_object(key)
                break
            except OSError as exc:
                log.warning("diskless file %s could not be deleted (retrying in %.2f s): %s",
                            key, backoff, exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, FILE_RETRY_BACKOFF_MAX_S)
            if not self._current(shard):
                return
        if shard.store is not None and self._current(shard):
            shard.store.forget_file(key, FILE_DELETING)
            log.info("diskless file %s deleted", key)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_paths(self, coordinator_id: int) -> list[tuple[int, Path]]:
        """(applied offset, path) of the shard's snapshots, oldest first."""
        found = []
        if self.snapshot_dir.is_dir():
            for path in self.snapshot_dir.glob(f"{coordinator_id}-*.sqlite"):
                offset = path.stem.partition("-")[2]
                if offset.lstrip("-").isdigit():
                    found.append((int(offset), path))
        return sorted(found)

    async def take_snapshot(self, coordinator_id: int) -> int:
        """Snapshot the shard now and prune its log; returns the snapshot's applied offset."""
        shard = self.runtime.shard(coordinator_id)
        self._snapshotting.add(coordinator_id)
        try:
            return await self._snapshot(shard)
        finally:
            self._snapshotting.discard(coordinator_id)

    async def _snapshot_logged(self, shard: DisklessShard) -> None:
        try:
            await self._snapshot(shard)
        except (OSError, KafkaError) as exc:
            log.error("snapshot of diskless coordinator %d failed: %s", shard.coordinator_id,
                      exc)
        finally:
            self._snapshotting.discard(shard.coordinator_id)

    async def _snapshot(self, shard: DisklessShard) -> int:
        cid = shard.coordinator_id
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        shard.records_since_snapshot = 0
        tmp = self.snapshot_dir / f"{cid}-new.sqlite"
        applied = await self.broker.run_blocking(lambda: backup_database(shard.db_path, tmp))
        target = self.snapshot_dir / f"{cid}-{applied}.sqlite"
        await self.broker.run_blocking(lambda: tmp.replace(target))
        for _, old in self.snapshot_paths(cid)[:-SNAPSHOTS_KEPT]:
            await self.broker.run_blocking(lambda old=old: remove_database(old))
        # Pruning the log is safe only up to a snapshot every replica can get: one in the
        # object store, or this one when this broker is the only replica. With several, the log
        # is kept back to the previous uploaded snapshot, so a follower a little behind this
        # one catches up from its log rather than downloading a snapshot.
        prune_to = applied if self._sole_replica(cid) else -1
        uploaded = False
        if self.remote_snapshots is not None and applied >= 0:
            try:
                kept = await self.remote_snapshots.upload(cid, applied, target)
                uploaded = True
                if prune_to < 0:
                    prune_to = max((o for o in kept if o < applied), default=-1)
            except OSError as exc:  # ObjectStoreError included
                log.warning("diskless coordinator %d: snapshot at offset %d not uploaded, so "
                            "its log is not pruned: %s", cid, applied, exc)
        if prune_to >= 0 and self._current(shard):
            hosted = self.broker.replica_manager.partitions.get((DISKLESS_METADATA_TOPIC, cid))
            if hosted is not None:
                hosted.log.delete_records_before(min(prune_to + 1, hosted.log.high_watermark))
                await self.broker.run_blocking(
                    self.broker.log_manager.checkpoint_log_start_offsets)
                remove_files = getattr(self.broker, "remove_deleted_segment_files", None)
                if remove_files is not None:
                    await remove_files()
        log.info("diskless coordinator %d: snapshot at offset %d%s", cid, applied,
                 " (uploaded)" if uploaded else "")
        return applied

    def _sole_replica(self, coordinator_id: int) -> bool:
        topic = self.broker.controller.image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
        part = None if topic is None else topic.partitions.get(coordinator_id)
        return part is not None and len(part.replicas) <= 1

    async def _prepare_database(self, shard: DisklessShard, log_start_offset: int,
                                log_end_offset: int) -> None:
        """Before a load: make the database one the log continues (restore_database)."""
        async with self.db_lock(shard.coordinator_id):
            await self.restore_database(shard.coordinator_id, log_start_offset, log_end_offset)

    async def restore_database(self, coordinator_id: int, log_start_offset: int,
                               log_end_offset: int) -> bool:
        """Keep the coordinator's database if the log continues it; else restore the newest
        snapshot the log continues, local or from the object store; else leave it empty (a
        replay from the log start, with the state before a pruned start lost). A database
        ahead of the log (another log's) is dropped. Returns whether the database is usable.
        Call under db_lock."""
        path = self.db_path(coordinator_id)
        applied = await self.broker.run_blocking(lambda: _applied_offset_of(path))
        if applied is not None and applied >= log_end_offset:
            log.warning("%s is ahead of its log (offset %d >= %d); rebuilding it",
                        path, applied, log_end_offset)
            applied = None
        if applied is not None and applied >= log_start_offset - 1:
            return True
        low, high = log_start_offset - 1, log_end_offset - 1
        local = [p for o, p in self.snapshot_paths(coordinator_id) if low <= o <= high]
        source = local[-1] if local else None
        download = self.snapshot_dir / f"{coordinator_id}-download.sqlite"
        if source is None and self.remote_snapshots is not None:
            try:
                if await self.remote_snapshots.download_newest(coordinator_id, low, high,
                                                               download) is not None:
                    source = download
            except OSError as exc:  # ObjectStoreError included
                log.error("diskless coordinator %d: snapshot download failed: %s",
                          coordinator_id, exc)

        def restore() -> None:
            remove_database(path)
            if source is not None:
                backup_database(source, path)
                log.info("restored %s from snapshot %s", path, source)
            elif log_start_offset > 0:
                log.error("%s: no snapshot covers the pruned log before offset %d; the state "
                          "before it is lost", path, log_start_offset)
            remove_database(download)

        await self.broker.run_blocking(restore)
        return source is not None or log_start_offset == 0


def _applied_offset_of(path: Path) -> int | None:
    """The applied offset a database holds; None when it is missing or unreadable."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(path)
        try:
            row = db.execute("SELECT value FROM meta WHERE name = 'applied_offset'").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        log.warning("%s is unreadable (%s); rebuilding it", path, exc)
        return None
    return -1 if row is None else int(row[0])


__all__ = ["DISKLESS_METADATA_TOPIC", "DisklessCoordinator", "FileOwners", "LocalFileOwners"]
