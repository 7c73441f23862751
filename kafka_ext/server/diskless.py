"""The diskless coordinator APIs (KIP-1164): 93-98 and 100, all v0 (flexible).

DisklessCreatePartitions (93), DisklessDeleteTopics (94), DisklessCommitFile (95),
DisklessDeleteRecords (96), DisklessListOffsets (97), DisklessFindBatches (98) and
DisklessDescribeFiles (100) are broker-to-coordinator calls, not client APIs. Each handler hands
the decoded request to the DisklessCoordinator (kafka_ext/coordinator/diskless), which routes
every partition, batch or file to its shard and answers NOT_COORDINATOR per entry for shards not
hosted here. If the coordinator is not running or fails as a whole, every entry of the answer
carries that error, since these responses have no top-level error code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import Handler, RequestContext

_reg = registry()
# The coordinator's method for each API.
_OPERATIONS: dict[ApiKey, str] = {
    ApiKey.DISKLESS_CREATE_PARTITIONS: "create_partitions",
    ApiKey.DISKLESS_DELETE_TOPICS: "delete_topics",
    ApiKey.DISKLESS_COMMIT_FILE: "commit_file",
    ApiKey.DISKLESS_DELETE_RECORDS: "delete_records",
    ApiKey.DISKLESS_LIST_OFFSETS: "list_offsets",
    ApiKey.DISKLESS_FIND_BATCHES: "find_batches",
    ApiKey.DISKLESS_DESCRIBE_FILES: "describe_files",
}


async def _serve(ctx: RequestContext, api_key: ApiKey, request: Any) -> Any:
    # CLUSTER_ACTION on the cluster is checked by the dispatcher (CLUSTER_ACTION_APIS).
    coordinator = getattr(ctx.broker, "diskless_coordinator", None)
    if coordinator is None:
        return error_response(api_key, request, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              "no diskless coordinator runs on this broker")
    try:
        return await getattr(coordinator, _OPERATIONS[api_key])(request)
    except KafkaError as exc:
        return error_response(api_key, request, exc.code, exc.message)


async def handle_diskless_create_partitions(ctx: RequestContext, request: Any) -> Any:
    """Create, in each owning shard, the partitions below NumPartitions it lacks."""
    return await _serve(ctx, ApiKey.DISKLESS_CREATE_PARTITIONS, request)


async def handle_diskless_delete_topics(ctx: RequestContext, request: Any) -> Any:
    """Drop the topics' partitions, batches and file references in every hosted shard."""
    return await _serve(ctx, ApiKey.DISKLESS_DELETE_TOPICS, request)


async def handle_diskless_commit_file(ctx: RequestContext, request: Any) -> Any:
    """Assign offsets to a WAL object's batches; one result per batch, in request order."""
    return await _serve(ctx, ApiKey.DISKLESS_COMMIT_FILE, request)


async def handle_diskless_delete_records(ctx: RequestContext, request: Any) -> Any:
    """Move partitions' log start offsets forward (DeleteRecords on diskless partitions)."""
    return await _serve(ctx, ApiKey.DISKLESS_DELETE_RECORDS, request)


async def handle_diskless_list_offsets(ctx: RequestContext, request: Any) -> Any:
    """Earliest, latest, max-timestamp or by-timestamp offsets, after pending writes apply."""
    return await _serve(ctx, ApiKey.DISKLESS_LIST_OFFSETS, request)


async def handle_diskless_find_batches(ctx: RequestContext, request: Any) -> Any:
    """The batches (object key and byte range) from an offset on, per partition."""
    return await _serve(ctx, ApiKey.DISKLESS_FIND_BATCHES, request)


async def handle_diskless_describe_files(ctx: RequestContext, request: Any) -> Any:
    """Whether any hosted shard still has live batches in each WAL object."""
    return await _serve(ctx, ApiKey.DISKLESS_DESCRIBE_FILES, request)


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.DISKLESS_CREATE_PARTITIONS: handle_diskless_create_partitions,
    ApiKey.DISKLESS_DELETE_TOPICS: handle_diskless_delete_topics,
    ApiKey.DISKLESS_COMMIT_FILE: handle_diskless_commit_file,
    ApiKey.DISKLESS_DELETE_RECORDS: handle_diskless_delete_records,
    ApiKey.DISKLESS_LIST_OFFSETS: handle_diskless_list_offsets,
    ApiKey.DISKLESS_FIND_BATCHES: handle_diskless_find_batches,
    ApiKey.DISKLESS_DESCRIBE_FILES: handle_diskless_describe_files,
}


# -- answers that fail every entry ---------------------------------------------------------------

def error_response(api_key: ApiKey, request: Any, code: ErrorCode,
                   message: str | None = None) -> Any:
    """The response of `api_key` answering every entry of `request` with `code`."""
    return _ERROR_RESPONSES[api_key](request, int(code), message)


def _response(name: str) -> Any:
    return _reg[name].cls


def _create_partitions_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessCreatePartitionsResponse")
    return cls(topics=[cls.DisklessCreatablePartitionsResult(
        topic_id=t.topic_id, error_code=code, error_message=message) for t in request.topics])


def _delete_topics_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessDeleteTopicsResponse")
    return cls(responses=[cls.DisklessDeletableTopicResult(
        topic_id=t.topic_id, error_code=code, error_message=message) for t in request.topics])


def _commit_file_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessCommitFileResponse")
    return cls(batches=[cls.DisklessCommitBatchResult(
        error_code=code, error_message=message, assigned_base_offset=-1, log_append_time=-1,
        log_start_offset=-1, is_duplicate=False) for _ in request.batches])


def _delete_records_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessDeleteRecordsResponse")
    return cls(topics=[cls.DisklessDeleteRecordsTopicResult(
        topic_id=t.topic_id, partitions=[cls.DisklessDeleteRecordsPartitionResult(
            partition_index=p.partition_index, low_watermark=-1, error_code=code,
            error_message=message) for p in t.partitions]) for t in request.topics])


def _list_offsets_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessListOffsetsResponse")
    return cls(topics=[cls.DisklessListOffsetsTopicResponse(
        topic_id=t.topic_id, partitions=[cls.DisklessListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=code, error_message=message,
            timestamp=-1, offset=-1) for p in t.partitions]) for t in request.topics])


def _find_batches_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessFindBatchesResponse")
    return cls(topics=[cls.DisklessFindBatchesTopicResponse(
        topic_id=t.topic_id, partitions=[cls.DisklessFindBatchesPartitionResponse(
            partition_index=p.partition_index, error_code=code, log_start_offset=-1,
            high_watermark=-1, batches=[]) for p in t.partitions]) for t in request.topics])


def _describe_files_error(request: Any, code: int, message: str | None) -> Any:
    cls = _response("DisklessDescribeFilesResponse")
    return cls(error_code=code, files=[cls.DisklessDescribeFileResult(
        object_key=f.object_key, error_code=code, error_message=message, has_live_batches=False)
        for f in request.files])


_ERROR_RESPONSES: dict[ApiKey, Callable[[Any, int, str | None], Any]] = {
    ApiKey.DISKLESS_CREATE_PARTITIONS: _create_partitions_error,
    ApiKey.DISKLESS_DELETE_TOPICS: _delete_topics_error,
    ApiKey.DISKLESS_COMMIT_FILE: _commit_file_error,
    ApiKey.DISKLESS_DELETE_RECORDS: _delete_records_error,
    ApiKey.DISKLESS_LIST_OFFSETS: _list_offsets_error,
    ApiKey.DISKLESS_FIND_BATCHES: _find_batches_error,
    ApiKey.DISKLESS_DESCRIBE_FILES: _describe_files_error,
}
