"""DescribeLogDirs (35, v0-v4) and AlterReplicaLogDirs (34, v0-v2): JBOD (KIP-112, KIP-113);
and the controller's side of AssignReplicasToDirs (73, v0, KIP-858).

Mirrors Kafka's ReplicaManager.describeLogDirs/alterReplicaLogDirs. DescribeLogDirs reports every
configured dir: an offline one answers KAFKA_STORAGE_ERROR (and -1 bytes); an online one its
total and usable bytes and, per partition (filtered by the request's topics, null = all), the
size, the offset lag (current replica: high watermark minus log end, never negative; future
`.move` replica: how far it trails the current one) and `is_future_key`.
AlterReplicaLogDirs answers per partition: NONE (moving, or already there), LOG_DIR_NOT_FOUND
(not a configured absolute dir), KAFKA_STORAGE_ERROR (dir or partition offline), or
REPLICA_NOT_AVAILABLE (not hosted yet: the dir is remembered for when it is created). The
proposal's "any" cancels a move in progress.
Both need a permission on the cluster, as in Kafka's KafkaApis: DESCRIBE to describe (else
CLUSTER_AUTHORIZATION_FAILED at the top level, from v3, and no dirs), ALTER to move (else
CLUSTER_AUTHORIZATION_FAILED for every partition).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kafka_ext.controller.image import BROKER_RESOURCE
from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import cluster_authorized
from kafka_ext.server.dispatcher import RequestContext

logger = logging.getLogger(__name__)
_reg = registry()
THROTTLE_CONFIG = "intra.broker.throttled.rate"
NO_BYTES = -1  # TotalBytes/UsableBytes of a dir we cannot stat (Kafka's default)
# How often the dirs' free space is measured (off the loop) for most-free-bytes placement.
DISK_USAGE_REFRESH_S = 1.0


def _partition_wanted(request: Any) -> set[tuple[str, int]] | None:
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """Every log dir with its partitions, sizes, lags and space; offline dirs as errors."""
    Response = _reg["DescribeLogDirsResponse"].cls
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        return Response(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[])
    broker = ctx.broker
    log_manager = broker.log_manager
    mover = broker.replica_mover
    wanted = _partition_wanted(request)
    # statvfs can stall on a sick disk: measure in the executor, never on the loop.
    usage = await broker.run_blocking(log_manager.measure_disk_usage)
    results = []
    for log_dir in log_manager.log_dirs:
        if log_dir in log_manager.offline_dirs:
            results.append(Response.DescribeLogDirsResult(
                error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), log_dir=str(log_dir), topics=[],
                total_bytes=NO_BYTES, usable_bytes=NO_BYTES))
            continue
        topics: dict[str, list[Any]] = {}

        def add(topic: str, partition: int, size: int, lag: int, is_future: bool,
                topics: dict[str, list[Any]] = topics) -> None:
            if topic == METADATA_TOPIC or (wanted is not None and (topic, partition) not in wanted):
                return
            topics.setdefault(topic, []).append(Response.DescribeLogDirsPartition(
                partition_index=partition, partition_size=size, offset_lag=lag,
                is_future_key=is_future))

        for plog in log_manager.logs_in_dir(log_dir):
            add(plog.topic, plog.partition, plog.size_bytes,
                max(plog.high_watermark - plog.log_end_offset, 0), False)
        for move in list(mover.moves.values()):
            current = log_manager.get_log(move.topic, move.partition)
            if move.dest_dir != log_dir or current is None or move.done.is_set():
                continue
            future_end = (move.future_log.log_end_offset if move.future_log is not None
                          else move.next_offset)
            add(move.topic, move.partition, move.size_bytes,
                max(current.log_end_offset - future_end, 0), True)
        measured = usage.get(log_dir)
        total = NO_BYTES if measured is None else measured.total_bytes
        usable = NO_BYTES if measured is None else measured.usable_bytes
        results.append(Response.DescribeLogDirsResult(
            error_code=0, log_dir=str(log_dir), total_bytes=total, usable_bytes=usable,
            topics=[Response.DescribeLogDirsTopic(name=t, partitions=ps)
                    for t, ps in topics.items()]))
    return Response(error_code=0, results=results)


async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    """Start, redirect or cancel moves; one error code per requested partition."""
    Response = _reg["AlterReplicaLogDirsResponse"].cls
    mover = ctx.broker.replica_mover
    allowed = cluster_authorized(ctx, AclOperation.ALTER)
    by_topic: dict[str, list[Any]] = {}
    for entry in request.dirs:
        path = entry.path
        for topic in entry.topics:
            for partition in topic.partitions:
                code = (mover.alter_replica_log_dir(topic.name, partition, path) if allowed
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                by_topic.setdefault(topic.name, []).append(
                    Response.AlterReplicaLogDirPartitionResult(partition_index=partition,
                                                               error_code=int(code)))
    return Response(results=[Response.AlterReplicaLogDirTopicResult(topic_name=name,
                                                                     partitions=parts)
                             for name, parts in by_topic.items()])



def throttled_rate(broker: Any) -> Callable[[], int]:
    """`intra.broker.throttled.rate` now: this broker's dynamic value, the cluster default
    (IncrementalAlterConfigs on the broker resource "" ), else server.properties."""
    def rate() -> int:
        controller = broker.controller
        if controller is not None:
            configs = controller.image.configs
            for name in (str(broker.node_id), ""):
                value = configs.get((BROKER_RESOURCE, name), {}).get(THROTTLE_CONFIG)
                if value:
                    return int(value)
        return int(broker.config.intra_broker_throttled_rate)
    return rate


async def start_jbod(broker: Any) -> None:
    """After the partitions are hosted: resume interrupted moves, remove `-delete` dirs left
    from before, then probe the dirs and measure their free space (for most-free-bytes
    placement) from now on. The online dirs reached the metadata with the broker's
    registration (server/broker_lifecycle.py)."""
    failures = broker.log_dir_failures
    broker.controller.listeners.append(failures.on_image)
    failures.start()
    broker.replica_mover.resume_pending()
    pending, broker.log_manager.pending_deletions = broker.log_manager.pending_deletions, []
    for path in pending:
        broker._remove_dir_later(path)
    interval_s = int(broker.config.values["log.dir.failure.check.interval.ms"]) / 1000
    loop = asyncio.get_running_loop()
    broker._tasks.append(loop.create_task(broker._every(interval_s, failures.probe)))

    async def measure_disk_usage() -> None:
        await broker.run_blocking(broker.log_manager.measure_disk_usage)

    broker._tasks.append(loop.create_task(broker._every(DISK_USAGE_REFRESH_S, measure_disk_usage)))


# -- AssignReplicasToDirs (KIP-858): the active controller records where replicas live --------

async def handle_assign_replicas_to_dirs(ctx: RequestContext, request: Any) -> Any:
    return await answer_assign_replicas_to_dirs(ctx.broker, request)


async def answer_assign_replicas_to_dirs(broker: Any, request: Any) -> Any:
    """Each (dir, topic, partition) answered with its own error (QuorumController
    `assign_replicas_to_dirs`); NOT_CONTROLLER or STALE_BROKER_EPOCH for the whole request."""
    Response = _reg["AssignReplicasToDirsResponse"].cls
    controller = broker.controller
    if not controller.raft.is_leader:
        return Response(throttle_time_ms=0, error_code=int(ErrorCode.NOT_CONTROLLER),
                        directories=[])
    assignments = [(d.id, t.topic_id, p.partition_index)
                   for d in request.directories for t in d.topics for p in t.partitions]
    try:
        errors = iter(await controller.assign_replicas_to_dirs(
            request.broker_id, request.broker_epoch, assignments))
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=int(exc.code), directories=[])
    return Response(throttle_time_ms=0, error_code=0, directories=[
        Response.DirectoryData(id=d.id, topics=[
            Response.TopicData(topic_id=t.topic_id, partitions=[
                Response.PartitionData(partition_index=p.partition_index,
                                       error_code=int(next(errors)))
                for p in t.partitions]) for t in d.topics]) for d in request.directories])
