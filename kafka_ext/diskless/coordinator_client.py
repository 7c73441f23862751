"""The broker side's calls to the Diskless coordinators, wherever they run (KIP-1164).

Coordinator `c` is the leader of `__diskless_metadata` partition `c`. A call is split by
coordinator and each part goes to that coordinator's leader: in-process when this broker leads
it, else the same API over the wire (DisklessCommitFile, FindBatches, ListOffsets, DeleteRecords,
CreatePartitions, DeleteTopics, DescribeFiles, and Kafka's DescribeProducers for the producer
state of a diskless partition). Entries answered NOT_COORDINATOR, loading, not
available or timed out, and parts whose leader could not be reached, are sent again to the
leader the metadata names then, with backoff, until the call's deadline; a new leader in the
metadata ends the wait at once, so a failover costs detection, not detection plus backoff.

Retrying a commit is safe: a coordinator answers a WAL object it already committed with the
offsets it assigned then, and never commits it again (DisklessShard.commit_file). A commit whose
outcome stays unknown at the deadline is answered with a retriable error, and the object
becomes an orphan that the scanner removes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kafka_ext.controller.quorum_controller import DISKLESS_METADATA_TOPIC
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

if TYPE_CHECKING:
    from kafka_ext.coordinator.diskless.coordinator import DisklessCoordinator

log = logging.getLogger(__name__)

E = TypeVar("E")
R = TypeVar("R")

# Worth sending again once the metadata names the coordinator's (new) leader.
RETRIABLE: frozenset[int] = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
})
CALL_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
_VERSION = 0

_reg = registry()
_Commit = _reg["DisklessCommitFileRequest"].cls
_CommitResponse = _reg["DisklessCommitFileResponse"].cls
_Find = _reg["DisklessFindBatchesRequest"].cls
_FindResponse = _reg["DisklessFindBatchesResponse"].cls
_ListOffsets = _reg["DisklessListOffsetsRequest"].cls
_ListOffsetsResponse = _reg["DisklessListOffsetsResponse"].cls
_DeleteRecords = _reg["DisklessDeleteRecordsRequest"].cls
_DeleteRecordsResponse = _reg["DisklessDeleteRecordsResponse"].cls
_CreatePartitions = _reg["DisklessCreatePartitionsRequest"].cls
_CreatePartitionsResponse = _reg["DisklessCreatePartitionsResponse"].cls
_DeleteTopics = _reg["DisklessDeleteTopicsRequest"].cls
_DeleteTopicsResponse = _reg["DisklessDeleteTopicsResponse"].cls
_DescribeFiles = _reg["DisklessDescribeFilesRequest"].cls
_DescribeFilesResponse = _reg["DisklessDescribeFilesResponse"].cls
_DescribeProducers = _reg["DescribeProducersRequest"].cls
_DescribeProducersResponse = _reg["DescribeProducersResponse"].cls

# The DisklessCoordinator method serving each API in-process.
_METHODS = {
    ApiKey.DISKLESS_COMMIT_FILE: "commit_file",
    ApiKey.DISKLESS_FIND_BATCHES: "find_batches",
    ApiKey.DISKLESS_LIST_OFFSETS: "list_offsets",
    ApiKey.DISKLESS_DELETE_RECORDS: "delete_records",
    ApiKey.DISKLESS_CREATE_PARTITIONS: "create_partitions",
    ApiKey.DISKLESS_DELETE_TOPICS: "delete_topics",
    ApiKey.DISKLESS_DESCRIBE_FILES: "describe_files",
    ApiKey.DESCRIBE_PRODUCERS: "describe_producers",
}


class CoordinatorClient:
    """Owned by the broker's event loop; `local` hosts the coordinators this broker leads."""

    def __init__(self, broker: Any, local: DisklessCoordinator,
                 timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.broker = broker
        self.local = local
        self.timeout_s = timeout_s
        # Set (and replaced) when a coordinator's leader changes: calls waiting to retry go.
        self._leaders_changed = asyncio.Event()

    def on_image(self, old: Any, new: Any) -> None:
        """Controller listener (through DisklessService): wake retries when a coordinator's
        leader changes."""
        if _coordinator_leaders(old) != _coordinator_leaders(new):
            self._leaders_changed.set()
            self._leaders_changed = asyncio.Event()

    async def _wait_to_retry(self, backoff_s: float) -> bool:
        """The backoff, cut short by a change of coordinator leaders; True when it was."""
        changed = self._leaders_changed
        try:
            await asyncio.wait_for(changed.wait(), backoff_s)
        except TimeoutError:
            return False
        return True

    # -- routing ------------------------------------------------------------------------------

    def coordinator_of(self, topic_id: Any, partition: int) -> int:
        return self.local.coordinator_of(topic_id, partition)

    def coordinator_ids(self) -> list[int]:
        """Every coordinator id (partition of __diskless_metadata) the metadata has."""
        topic = self.broker.controller.image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
        return [] if topic is None else sorted(topic.partitions)

    def leader_of(self, coordinator_id: int) -> int:
        """The broker leading a coordinator's partition; -1 when none does now."""
        topic = self.broker.controller.image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
        part = None if topic is None else topic.partitions.get(coordinator_id)
        return -1 if part is None else int(part.leader)

    async def _send(self, leader: int, api_key: ApiKey, request: Any, timeout_s: float) -> Any:
        if leader == self.broker.node_id:
            return await getattr(self.local, _METHODS[api_key])(request)
        return await self.broker.broker_channels.request(leader, api_key, _VERSION, request,
                                                         timeout_s)

    async def _routed(self, api_key: ApiKey, entries: Sequence[E], coordinator_of: Callable[[E], int],
                      build: Callable[[list[E], int], Any], answers: Callable[[Any], list[R]],
                      error_of: Callable[[R], int], failed: Callable[[E, ErrorCode, str], R],
                      by_coordinator: bool = False) -> list[R]:
        """Each entry's answer from its coordinator's leader. `build(entries, coordinator id
        or -1)` makes the request for a group of entries; `answers(response)` lists its answers
        in the order of those entries. With `by_coordinator`, one request per coordinator
        (it names the coordinator); otherwise one per leading broker."""
        results: list[R | None] = [None] * len(entries)
        pending = list(range(len(entries)))
        deadline = time.monotonic() + self.timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            groups: dict[tuple[int, int], list[int]] = {}
            retry: list[int] = []
            for index in pending:
                cid = coordinator_of(entries[index])
                if cid < 0:
                    results[index] = failed(entries[index], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            "not a diskless partition of a known topic")
                    continue
                leader = self.leader_of(cid)
                if leader < 0:
                    retry.append(index)
                    continue
                groups.setdefault((leader, cid if by_coordinator else -1), []).append(index)
            remaining = max(deadline - time.monotonic(), 0.001)

            async def call(target: tuple[int, int], indices: list[int],
                           remaining: float = remaining) -> list[R]:
                group = [entries[i] for i in indices]
                response = await self._send(target[0], api_key, build(group, target[1]),
                                            remaining)
                return answers(response)

            outcomes = await asyncio.gather(*(call(t, ix) for t, ix in groups.items()),
                                            return_exceptions=True)
            last_error: dict[int, tuple[ErrorCode, str]] = {}
            for (target, indices), outcome in zip(groups.items(), outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    code, message = _failure_of(outcome, target[0])
                    if code not in RETRIABLE:
                        for i in indices:
                            results[i] = failed(entries[i], code, message)
                        continue
                    for i in indices:
                        last_error[i] = (code, message)
                    retry += indices
                    continue
                for i, answer in zip(indices, outcome, strict=True):
                    if error_of(answer) in RETRIABLE:
                        retry.append(i)
                    results[i] = answer
            if not retry:
                break
            if time.monotonic() + backoff >= deadline:
                for i in retry:
                    if results[i] is None:  # else its retriable answer stands
                        code, message = last_error.get(i, (
                            ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            "no leader of the diskless coordinator answered in time"))
                        results[i] = failed(entries[i], code, message)
                break
            if await self._wait_to_retry(backoff):
                # A new leader is likely still loading the coordinator: start the backoff over
                # rather than wait out the long one the old leader's silence built up.
                backoff = RETRY_BACKOFF_S
            else:
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            pending = retry
        return [r for r in results if r is not None]

    # -- the APIs -------------------------------------------------------------------------------

    async def commit_file(self, request: Any) -> Any:
        """DisklessCommitFile: one result per batch, in request order."""
        uploader = int(self.broker.node_id)
        Result = _CommitResponse.DisklessCommitBatchResult

        def build(batches: list[Any], _cid: int) -> Any:
            return _Commit(object_key=request.object_key, object_format=request.object_format,
                           file_size=request.file_size, owner_ids=list(request.owner_ids),
                           batches=batches, timeout_ms=request.timeout_ms,
                           uploader_broker_id=uploader)

        results = await self._routed(
            ApiKey.DISKLESS_COMMIT_FILE, list(request.batches),
            lambda b: self.coordinator_of(b.topic_id, b.partition_index), build,
            lambda response: list(response.batches), lambda r: r.error_code,
            lambda _b, code, message: Result(error_code=int(code), error_message=message,
                                             assigned_base_offset=-1, log_append_time=-1,
                                             log_start_offset=-1, is_duplicate=False))
        return _CommitResponse(batches=results)

    async def _per_partition(self, api_key: ApiKey, request: Any,
                             build: Callable[[list[Any]], Any], topic_answer_cls: Any,
                             failed: Callable[[Any, ErrorCode, str], Any]) -> list[Any]:
        """A call whose request and answer list topics of partitions: each partition goes to
        its coordinator; the answer's topics, in request order. `build(topics)` makes a request
        for some of them; `failed(partition entry, code, message)` answers one that failed."""
        entries = [(t.topic_id, p) for t in request.topics for p in t.partitions]
        results = await self._routed(
            api_key, entries, lambda e: self.coordinator_of(e[0], e[1].partition_index),
            lambda group, _cid: build(_regroup(group, _topic_cls(request))), _flatten,
            lambda r: r.error_code, lambda e, code, message: failed(e[1], code, message))
        return _regroup(list(zip((e[0] for e in entries), results, strict=True)),
                        topic_answer_cls)

    async def find_batches(self, request: Any) -> Any:
        Resp = _FindResponse
        return Resp(topics=await self._per_partition(
            ApiKey.DISKLESS_FIND_BATCHES, request,
            lambda topics: _Find(fetch_max_bytes=request.fetch_max_bytes,
                                 max_batches_per_partition=request.max_batches_per_partition,
                                 topics=topics, isolation_level=request.isolation_level),
            Resp.DisklessFindBatchesTopicResponse,
            lambda p, code, _message: Resp.DisklessFindBatchesPartitionResponse(
                partition_index=p.partition_index, error_code=int(code), log_start_offset=-1,
                high_watermark=-1, batches=[])))

    async def list_offsets(self, request: Any) -> Any:
        Resp = _ListOffsetsResponse
        return Resp(topics=await self._per_partition(
            ApiKey.DISKLESS_LIST_OFFSETS, request,
            lambda topics: _ListOffsets(topics=topics, isolation_level=request.isolation_level),
            Resp.DisklessListOffsetsTopicResponse,
            lambda p, code, message: Resp.DisklessListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=int(code),
                error_message=message, timestamp=-1, offset=-1)))

    async def delete_records(self, request: Any) -> Any:
        Resp = _DeleteRecordsResponse
        return Resp(topics=await self._per_partition(
            ApiKey.DISKLESS_DELETE_RECORDS, request, lambda topics: _DeleteRecords(topics=topics),
            Resp.DisklessDeleteRecordsTopicResult,
            lambda p, code, message: Resp.DisklessDeleteRecordsPartitionResult(
                partition_index=p.partition_index, error_code=int(code), low_watermark=-1,
                error_message=message)))

    async def describe_producers(self, topic: str, topic_id: Any, partition: int) -> Any:
        """DescribeProducers of one diskless partition, answered by its coordinator's leader:
        the partition's PartitionResponse."""
        Resp = _DescribeProducersResponse
        [answer] = await self._routed(
            ApiKey.DESCRIBE_PRODUCERS, [partition], lambda p: self.coordinator_of(topic_id, p),
            lambda group, _cid: _DescribeProducers(topics=[_DescribeProducers.TopicRequest(
                name=topic, partition_indexes=group)]),
            lambda response: [p for t in response.topics for p in t.partitions],
            lambda r: r.error_code,
            lambda p, code, message: Resp.PartitionResponse(
                partition_index=p, error_code=int(code), error_message=message,
                active_producers=[]))
        return answer

    async def create_partitions(self, request: Any) -> Any:
        """Register each topic's partitions with every coordinator that owns some of them;
        a topic succeeds when all of those did."""
        Result = _CreatePartitionsResponse.DisklessCreatablePartitionsResult
        entries = [(t, cid) for t in request.topics
                   for cid in sorted({self.coordinator_of(t.topic_id, p)
                                      for p in range(t.num_partitions)} - {-1})]
        results = await self._routed(
            ApiKey.DISKLESS_CREATE_PARTITIONS, entries, lambda e: e[1],
            lambda group, cid: _CreatePartitions(topics=[t for t, _ in group],
                                                 timeout_ms=request.timeout_ms,
                                                 coordinator_id=cid),
            lambda response: list(response.topics), lambda r: r.error_code,
            lambda e, code, message: Result(topic_id=e[0].topic_id, error_code=int(code),
                                            error_message=message),
            by_coordinator=True)
        return _CreatePartitionsResponse(topics=[
            _first_failure(t.topic_id, [r for (topic, _), r in zip(entries, results, strict=True)
                                        if topic is t], Result) for t in request.topics])

    async def describe_files(self, request: Any) -> Any:
        """Every coordinator's view of each file: HasLiveBatches if one has live batches in it,
        DISKLESS_FILE_NOT_FOUND if none knows it; OldestFileTimestamp over them all. A
        coordinator that cannot answer fails the file (the orphan scan then deletes nothing)."""
        Resp = _DescribeFilesResponse
        cids = self.coordinator_ids()
        views = await self._routed(
            ApiKey.DISKLESS_DESCRIBE_FILES, cids, lambda cid: cid,
            lambda group, cid: _DescribeFiles(files=list(request.files),
                                              timeout_ms=request.timeout_ms, coordinator_id=cid),
            lambda response: [response], lambda r: _describe_error(r),
            lambda cid, code, message: _failed_describe(request, code, message),
            by_coordinator=True)
        files = []
        for index, f in enumerate(request.files):
            answers = [view.files[index] for view in views]
            failure = next((a for a in answers
                            if a.error_code not in (0, ErrorCode.DISKLESS_FILE_NOT_FOUND)), None)
            known = [a for a in answers if a.error_code == 0]
            if failure is not None:
                files.append(failure)
            elif known:
                files.append(Resp.DisklessDescribeFileResult(
                    object_key=f.object_key, error_code=0, error_message=None,
                    has_live_batches=any(a.has_live_batches for a in known)))
            else:
                files.append(Resp.DisklessDescribeFileResult(
                    object_key=f.object_key, error_code=int(ErrorCode.DISKLESS_FILE_NOT_FOUND),
                    error_message=f"{f.object_key} is unknown to every diskless coordinator",
                    has_live_batches=False))
        oldest = [v.oldest_file_timestamp for v in views if v.oldest_file_timestamp >= 0]
        return Resp(files=files, oldest_file_timestamp=min(oldest) if oldest else -1)

    async def oldest_file_timestamp_ms(self) -> int | None:
        """Commit time of the oldest file any coordinator knows (None: none); KafkaError when
        a coordinator cannot answer."""
        views = await self._routed(
            ApiKey.DISKLESS_DESCRIBE_FILES, self.coordinator_ids(), lambda cid: cid,
            lambda group, cid: _DescribeFiles(files=[], timeout_ms=0, coordinator_id=cid),
            lambda response: [response], lambda r: _describe_error(r),
            lambda cid, code, message: _failed_describe(_DescribeFiles(files=[]), code, message),
            by_coordinator=True)
        for view in views:
            if view.error_code:
                raise KafkaError(ErrorCode(view.error_code),
                                 "a diskless coordinator could not say its oldest file")
        oldest = [v.oldest_file_timestamp for v in views if v.oldest_file_timestamp >= 0]
        return min(oldest) if oldest else None

    async def file_status(self, coordinator_id: int, object_key: str) -> bool | None:
        """FileOwners: whether one coordinator has live batches in the file, None when it does
        not know it; KafkaError when it cannot answer."""
        request = _DescribeFiles(files=[_DescribeFiles.DisklessDescribeFileEntry(
            object_key=object_key)], timeout_ms=0)
        [view] = await self._routed(
            ApiKey.DISKLESS_DESCRIBE_FILES, [coordinator_id], lambda cid: cid,
            lambda group, cid: _DescribeFiles(files=list(request.files), timeout_ms=0,
                                              coordinator_id=cid),
            lambda response: [response], _describe_error,
            lambda cid, code, message: _failed_describe(request, code, message),
            by_coordinator=True)
        [answer] = view.files
        if answer.error_code == ErrorCode.DISKLESS_FILE_NOT_FOUND:
            return None
        if answer.error_code:
            raise KafkaError(ErrorCode(answer.error_code), answer.error_message)
        return bool(answer.has_live_batches)

    async def hand_over(self, coordinator_id: int, object_key: str) -> None:
        """FileOwners: the new owner releases the file when its own last batch goes; its
        leader only has to be reachable now."""
        await self.file_status(coordinator_id, object_key)


def _topic_cls(request: Any) -> Any:
    """The class of a request's topic entries (DisklessFindBatchesTopic, ...)."""
    return type(request.topics[0]) if request.topics else None


def _flatten(response: Any) -> list[Any]:
    return [p for t in response.topics for p in t.partitions]


def _regroup(pairs: Sequence[tuple[Any, Any]], topic_cls: Any) -> list[Any]:
    """(topic id, partition entry) pairs back into topic entries, in first-seen order."""
    topics: dict[Any, list[Any]] = {}
    for topic_id, partition in pairs:
        topics.setdefault(topic_id, []).append(partition)
    return [topic_cls(topic_id=topic_id, partitions=parts) for topic_id, parts in topics.items()]


def _first_failure(topic_id: Any, results: list[Any], result_cls: Any) -> Any:
    failure = next((r for r in results if r.error_code), None)
    if failure is not None:
        return failure
    return result_cls(topic_id=topic_id, error_code=0, error_message=None)


def _describe_error(view: Any) -> int:
    """A DescribeFiles view's trouble: the call's error, else a file's retriable one."""
    if view.error_code:
        return int(view.error_code)
    return next((f.error_code for f in view.files if f.error_code in RETRIABLE), 0)


def _failed_describe(request: Any, code: ErrorCode, message: str) -> Any:
    """A view in which the call and every file failed with `code`."""
    Resp = _DescribeFilesResponse
    return Resp(error_code=int(code), files=[
        Resp.DisklessDescribeFileResult(object_key=f.object_key, error_code=int(code),
                                        error_message=message, has_live_batches=False)
        for f in request.files], oldest_file_timestamp=-1)


def _failure_of(exc: BaseException, leader: int) -> tuple[ErrorCode, str]:
    """A part's failure as an error code: an unreachable leader is retriable."""
    if isinstance(exc, KafkaError):
        return exc.code, exc.message or str(exc)
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader}: {exc}"
    log.error("diskless coordinator call to broker %d failed", leader, exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"broker {leader}: {type(exc).__name__}"


def _coordinator_leaders(image: Any) -> dict[int, int]:
    topic = None if image is None else image.topics_by_name.get(DISKLESS_METADATA_TOPIC)
    return {} if topic is None else {p: part.leader for p, part in topic.partitions.items()}
