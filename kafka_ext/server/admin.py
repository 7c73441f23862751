"""Admin APIs: topics, partitions, records, configs and the cluster.

CreateTopics (19, v0-v7, validate-only from v1), DeleteTopics (20, v0-v6, by name or id from v6),
CreatePartitions (37, v0-v3, a result per topic), DeleteRecords (21, v0-v2), DescribeConfigs
(32, v0-v4; v0 says IsDefault where later versions say ConfigSource), AlterConfigs (33, v0-v2:
replaces the resource's whole set), IncrementalAlterConfigs (44, v0-v1), DescribeCluster (60,
v0-v1); the log dir APIs are in log_dirs.py. Each topic or resource answers with its own error;
the controller validates and commits metadata changes.
Topic creations, deletions and new partitions count against controller_mutation_rate (KIP-599).

Authorization follows Kafka's ControllerApis and ConfigHelper (server/authorization.py): CREATE
on the cluster or on each topic to create it (its configs only with DESCRIBE_CONFIGS on it),
DELETE to delete a topic or its records, ALTER to add partitions, DESCRIBE_CONFIGS and
ALTER_CONFIGS on the topic, or on the cluster for broker and logger resources. Forwarded
requests are authorized here on the active controller, as the client the Envelope names.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kafka_ext.controller.quorum_controller import RESERVED_TOPICS, ConfigChange, TopicCreation
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafka_ext.server.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized,
    authorized_operations,
    authorized_topics,
    cluster_authorized,
)
from kafka_ext.server.chunks import remove_chunks
from kafka_ext.server.client_quota_manager import finish_mutation_quota, mutation_quota_for
from kafka_ext.server.config import (
    ConfigError,
    describe_broker_configs,
    describe_broker_default_configs,
    describe_topic_configs,
)
from kafka_ext.server.dispatcher import RequestContext
from kafka_ext.server.log4j_controller import (
    BROKER_LOGGER_RESOURCE,
    alter_loggers,
    check_resource_name,
    describe_loggers,
)
from kafka_ext.share.group_config import (
    GROUP_RESOURCE,
    describe_group_configs,
    validate_group_configs,
)

_reg = registry()

# ConfigResource types beyond TOPIC (2), BROKER (4), BROKER_LOGGER (8) and GROUP (32, the
# share groups' group configs: share/group_config.py) that Kafka authorizes although we do not
# serve it (its requests then fail as unsupported).
CLIENT_METRICS_RESOURCE = 16
# Per config resource type: what DESCRIBE_CONFIGS / ALTER_CONFIGS is checked on, and the error
# when it is denied, with Kafka's message for it.
_CONFIG_ACL: dict[int, tuple[ResourceType, ErrorCode, str]] = {
    TOPIC_RESOURCE: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     "Topic authorization failed."),
    BROKER_RESOURCE: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                      "Cluster authorization failed."),
    BROKER_LOGGER_RESOURCE: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             "Cluster authorization failed."),
    CLIENT_METRICS_RESOURCE: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              "Cluster authorization failed."),
    GROUP_RESOURCE: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                     "Group authorization failed."),
}


def _config_denied(ctx: RequestContext, operation: AclOperation, resource_type: int,
                   resource_name: str) -> tuple[ErrorCode, str] | None:
    """The error for a config resource the principal may not apply `operation` to; None when
    it may, or when the type is not one Kafka knows (the handler refuses that itself)."""
    acl = _CONFIG_ACL.get(resource_type)
    if acl is None:
        return None
    kind, error, message = acl
    name = CLUSTER_NAME if kind == ResourceType.CLUSTER else resource_name
    return None if authorized(ctx, operation, kind, name) else (error, message)


# -- topics ------------------------------------------------------------------------------------

async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    """CREATE on the cluster allows every topic, else CREATE on each; a name listed twice, or
    the metadata topic's, fails as invalid before any ACL is consulted (Kafka's
    ControllerApis.createTopics)."""
    Response = _reg["CreateTopicsResponse"].cls
    counts = Counter(t.name for t in request.topics)
    names = set(counts)
    creatable = (names if cluster_authorized(ctx, AclOperation.CREATE)
                 else authorized_topics(ctx, AclOperation.CREATE, names))
    describable = authorized_topics(ctx, AclOperation.DESCRIBE_CONFIGS, names)
    allowed = [i for i, t in enumerate(request.topics)
               if t.name in creatable or counts[t.name] > 1 or t.name in RESERVED_TOPICS]
    creations = []
    for t in (request.topics[i] for i in allowed):
        assignments = ({a.partition_index: list(a.broker_ids) for a in t.assignments}
                       if t.assignments else None)
        configs = {c.name: c.value for c in t.configs}
        creations.append(TopicCreation(t.name, t.num_partitions, t.replication_factor,
                                       assignments, configs))
    # KIP-599: strict quota (THROTTLING_QUOTA_EXCEEDED) from v6, permissive before.
    quota = mutation_quota_for(ctx, strict_since_version=6)
    results = await ctx.broker.controller.create_topics(
        creations, request.validate_only, quota.record if quota is not None else None)
    finish_mutation_quota(ctx, quota)
    if not request.validate_only:
        await ctx.broker.diskless.ensure_registered(
            r.name for r in results if r.error == ErrorCode.NONE)
    created = dict(zip(allowed, results, strict=True))
    topics = []
    for i, t in enumerate(request.topics):
        r = created.get(i)
        if r is None:
            topics.append(Response.CreatableTopicResult(
                name=t.name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                error_message="Authorization failed.", configs=None))
            continue
        entry = Response.CreatableTopicResult(
            name=r.name, topic_id=r.topic_id, error_code=int(r.error), error_message=r.message,
            num_partitions=r.num_partitions, replication_factor=r.replication_factor,
            configs=None)
        if r.error == ErrorCode.NONE and r.name not in describable:
            # Created, but its configs and layout are not the principal's to see.
            entry.num_partitions, entry.replication_factor, entry.configs = -1, -1, []
            entry.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif r.error == ErrorCode.NONE:
            described = describe_topic_configs(ctx.broker.dynamic_config(), r.configs)
            entry.configs = [Response.CreatableTopicConfigs(
                name=c.name, value=c.value, read_only=c.read_only, config_source=int(c.source),
                is_sensitive=c.is_sensitive) for c in described]
        topics.append(entry)
    return Response(topics=topics)


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    """DELETE on the cluster allows every topic, else DELETE on each (Kafka's
    ControllerApis.deleteTopics). A topic the principal may not DESCRIBE answers
    TOPIC_AUTHORIZATION_FAILED whether it exists or not, and without its name when asked for
    by id; a topic id is not secret, an unknown one answers UNKNOWN_TOPIC_ID."""
    Response = _reg["DeleteTopicsResponse"].cls
    image = ctx.broker.controller.image
    if not ctx.broker.config.delete_topic_enable:
        names = request.topic_names or [t.name for t in request.topics]
        # TOPIC_DELETION_DISABLED came with v3; Kafka answers older versions INVALID_REQUEST.
        code = (ErrorCode.TOPIC_DELETION_DISABLED if ctx.api_version >= 3
                else ErrorCode.INVALID_REQUEST)
        return Response(responses=[Response.DeletableTopicResult(name=n, error_code=int(code))
                                   for n in names])
    requested: list[tuple[str | None, uuid.UUID]] = []
    if ctx.api_version >= 6:
        requested = [(t.name, t.topic_id) for t in request.topics]
    else:
        requested = [(n, ZERO_UUID) for n in request.topic_names]
    results = []
    names = []
    # (name, asked for by id, topic id); the name is None for an unknown id.
    resolved: list[tuple[str | None, bool, uuid.UUID]] = []
    for name, topic_id in requested:
        if name is None:
            topic = image.topics_by_id.get(topic_id)
            resolved.append((None if topic is None else topic.name, True, topic_id))
        else:
            resolved.append((name, False, topic_id))
    asked = {name for name, _, _ in resolved if name is not None}
    if cluster_authorized(ctx, AclOperation.DELETE):
        describable = deletable = asked
    else:
        describable = authorized_topics(ctx, AclOperation.DESCRIBE, asked)
        deletable = authorized_topics(ctx, AclOperation.DELETE, asked)
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    for name, by_id, topic_id in resolved:
        if name is None:
            results.append(Response.DeletableTopicResult(
                name=None, topic_id=topic_id, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID)))
        elif by_id and name not in deletable:
            results.append(Response.DeletableTopicResult(
                name=name if name in describable else None, topic_id=topic_id,
                error_code=denied))
        elif name not in describable or (name in image.topics_by_name
                                         and name not in deletable):
            results.append(Response.DeletableTopicResult(name=name, topic_id=ZERO_UUID,
                                                         error_code=denied))
        else:
            names.append(name)
    quota = mutation_quota_for(ctx, strict_since_version=5)  # KIP-599
    outcome = await ctx.broker.controller.delete_topics(
        names, quota.record if quota is not None else None)
    finish_mutation_quota(ctx, quota)
    for name in names:
        code, topic_id = outcome[name]
        results.append(Response.DeletableTopicResult(name=name, topic_id=topic_id,
                                                     error_code=int(code)))
    return Response(responses=results)


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    """ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED for it."""
    Response = _reg["CreatePartitionsResponse"].cls
    alterable = authorized_topics(ctx, AclOperation.ALTER, (t.name for t in request.topics))
    results = []
    quota = mutation_quota_for(ctx, strict_since_version=3)  # KIP-599
    for t in request.topics:
        result = Response.CreatePartitionsTopicResult(name=t.name, error_code=0)
        try:
            if t.name not in alterable:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            assignments = ([list(a.broker_ids) for a in t.assignments]
                           if t.assignments is not None else None)
            await ctx.broker.controller.create_partitions(
                t.name, t.count, assignments, request.validate_only,
                quota.record if quota is not None else None)
            if not request.validate_only:
                await ctx.broker.diskless.ensure_registered([t.name])
        except KafkaError as exc:
            result.error_code, result.error_message = int(exc.code), exc.message or None
        results.append(result)
    finish_mutation_quota(ctx, quota)
    return Response(results=results)


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    """Move each partition's log start offset; -1 means the high watermark. DELETE on the
    topic, else TOPIC_AUTHORIZATION_FAILED for each of its partitions."""
    Response = _reg["DeleteRecordsResponse"].cls
    replicas = ctx.broker.replica_manager
    deletable = authorized_topics(ctx, AclOperation.DELETE, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            result = Response.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                           low_watermark=-1, error_code=0)
            try:
                if t.name not in deletable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if ctx.broker.diskless.is_diskless(t.name, p.partition_index):
                    result.low_watermark = await ctx.broker.diskless.delete_records(
                        t.name, p.partition_index, p.offset)
                    partitions.append(result)
                    continue
                hosted = replicas.leader_partition(t.name, p.partition_index)
                plog = hosted.log
                offset = plog.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > plog.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"offset {p.offset} is beyond the high watermark")
                # Inactive chunks (seed 000) wholly before the offset go; one the offset falls
                # inside stays whole (its replicas keep their logs as they are).
                held = replicas.chunks_before(t.name, p.partition_index, offset)
                if held.removed:
                    await remove_chunks(ctx.broker, held.removed, "DeleteRecords")
                plog.delete_records_before(max(offset, plog.log_start_offset))
                result.low_watermark = (held.first_kept if held.first_kept >= 0
                                        else plog.log_start_offset)
            except KafkaError as exc:
                result.error_code = int(exc.code)
            partitions.append(result)
        topics.append(Response.DeleteRecordsTopicResult(name=t.name, partitions=partitions))
    # The new log start offsets must survive a restart before we acknowledge them.
    await ctx.broker.run_blocking(ctx.broker.log_manager.checkpoint_log_start_offsets)
    await ctx.broker.remove_deleted_segment_files()
    return Response(topics=topics)


# -- configs -----------------------------------------------------------------------------------

async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DescribeConfigsResponse"].cls
    broker = ctx.broker
    image = broker.controller.image
    results = []
    for res in request.resources:
        result = Response.DescribeConfigsResult(error_code=0, resource_type=res.resource_type,
                                                resource_name=res.resource_name, configs=[])
        results.append(result)
        names = res.configuration_keys
        denied = _config_denied(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type,
                                res.resource_name)
        if denied is not None:
            result.error_code, result.error_message = int(denied[0]), denied[1]
            continue
        if res.resource_type == TOPIC_RESOURCE:
            if res.resource_name not in image.topics_by_name:
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"Topic {res.resource_name} does not exist"
                continue
            entries = describe_topic_configs(broker.dynamic_config(image),
                                             image.topic_configs(res.resource_name), names)
        elif res.resource_type == BROKER_RESOURCE:  # this broker's, or the cluster default ("")
            if res.resource_name not in ("", str(broker.node_id)):
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = (f"Unexpected broker id, expected {broker.node_id} or "
                                        f"empty string, but received {res.resource_name}")
                continue
            dynamic = broker.dynamic_config(image)
            entries = (describe_broker_configs(dynamic, names) if res.resource_name
                       else describe_broker_default_configs(dynamic, names))
        elif res.resource_type == BROKER_LOGGER_RESOURCE:  # logger levels (log4j_controller.py)
            try:
                check_resource_name(res.resource_name, broker.node_id)
            except KafkaError as exc:
                result.error_code, result.error_message = int(exc.code), exc.message
                continue
            entries = describe_loggers(names)
        elif res.resource_type == GROUP_RESOURCE:  # a group's configs (KIP-848, KIP-932)
            if not res.resource_name:
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = "Group name must not be empty"
                continue
            entries = describe_group_configs(
                image.configs.get((GROUP_RESOURCE, res.resource_name), {}),
                broker.config.values, names)
        else:
            result.error_code = int(ErrorCode.INVALID_REQUEST)
            result.error_message = f"Unsupported resource type {res.resource_type}"
            continue
        for e in entries:
            result.configs.append(Response.DescribeConfigsResourceResult(
                name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                is_default=e.is_default, is_sensitive=e.is_sensitive,
                synonyms=[Response.DescribeConfigsSynonym(name=s.name, value=s.value,
                                                          source=int(s.source))
                          for s in e.synonyms] if request.include_synonyms else [],
                config_type=int(e.config_type),
                documentation=e.documentation if request.include_documentation else None))
    return Response(results=results)


async def _alter(ctx: RequestContext, request: Any, incremental: bool) -> Any:
    Response = _reg["IncrementalAlterConfigsResponse" if incremental else "AlterConfigsResponse"].cls
    responses = []
    for res in request.resources:
        result = Response.AlterConfigsResourceResponse(
            error_code=0, resource_type=res.resource_type, resource_name=res.resource_name)
        changes = [ConfigChange(c.name, c.config_operation if incremental else 0, c.value)
                   for c in res.configs]
        denied = _config_denied(ctx, AclOperation.ALTER_CONFIGS, res.resource_type,
                                res.resource_name)
        if res.resource_type == BROKER_LOGGER_RESOURCE:  # this broker's own loggers
            try:
                if not incremental:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "AlterConfigs does not support "
                                     "BROKER_LOGGER; use IncrementalAlterConfigs")
                if denied is not None:
                    raise KafkaError(*denied)
                check_resource_name(res.resource_name, ctx.broker.node_id)
                alter_loggers(((c.name, c.op, c.value) for c in changes), request.validate_only)
            except KafkaError as exc:
                result.error_code, result.error_message = int(exc.code), exc.message or None
            responses.append(result)
            continue
        try:
            if denied is not None:
                raise KafkaError(*denied)
            # A broker's own configs go to it (as Kafka's tools send them); once forwarded,
            # the active controller sets them for whichever broker they name.
            if res.resource_type == BROKER_RESOURCE and not ctx.forwarded and (
                    res.resource_name not in ("", str(ctx.broker.node_id))):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Unexpected broker id {res.resource_name}")
            if not incremental and any(c.value is None for c in changes):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "AlterConfigs values may not be null")
            if res.resource_type == GROUP_RESOURCE:
                _check_group_configs(ctx, res.resource_name, changes, replace_all=not incremental)
            await ctx.broker.controller.alter_configs(
                res.resource_type, res.resource_name, changes, request.validate_only,
                replace_all=not incremental)
        except KafkaError as exc:
            result.error_code, result.error_message = int(exc.code), exc.message or None
        responses.append(result)
    return Response(responses=responses)


def _check_group_configs(ctx: RequestContext, group_id: str, changes: list[ConfigChange],
                         replace_all: bool) -> None:
    """The group's overrides after `changes` must pass Kafka's GroupConfig.validate against
    this (active controller) node's group.share.* bounds; INVALID_CONFIG otherwise."""
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    current = {} if replace_all else dict(
        ctx.broker.controller.image.configs.get((GROUP_RESOURCE, group_id), {}))
    for change in changes:
        if change.op == 0 and change.value is not None:
            current[change.name] = change.value
        elif change.op == 1:
            current.pop(change.name, None)
        elif change.op in (2, 3):
            raise KafkaError(ErrorCode.INVALID_CONFIG, "Config value append/subtract is not "
                             f"allowed for config key {change.name}")
    try:
        validate_group_configs(current, ctx.broker.config.values)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None


async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=False)


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=True)


# -- cluster -----------------------------------------------------------------------------------

async def handle_unregister_broker(ctx: RequestContext, request: Any) -> Any:
    """UnregisterBroker (64): an operator removes a broker that is gone for good (ALTER on
    the cluster); forwarded to the active controller."""
    Response = _reg["UnregisterBrokerResponse"].cls
    if not cluster_authorized(ctx, AclOperation.ALTER):
        return Response(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message=None)
    try:
        await ctx.broker.controller.unregister_broker(request.broker_id)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, error_message=exc.message)
    return Response(throttle_time_ms=0, error_code=0, error_message=None)


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    """The brokers (or, KIP-919, the controllers: that needs ALTER on the cluster, as on
    Kafka's controllers) and, KIP-430, what the principal may do to the cluster when asked."""
    Response = _reg["DescribeClusterResponse"].cls
    broker = ctx.broker
    operations = AUTHORIZED_OPERATIONS_OMITTED
    if request.include_cluster_authorized_operations:
        # Kafka's AuthHelper: nothing at all without DESCRIBE on the cluster.
        operations = (authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                      if cluster_authorized(ctx, AclOperation.DESCRIBE) else 0)
    if ctx.api_version >= 1 and request.endpoint_type == 2 and broker.config.is_controller:
        if not cluster_authorized(ctx, AclOperation.ALTER):
            return Response(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                            error_message="Cluster authorization failed.", endpoint_type=2,
                            cluster_id=broker.cluster_id)
        # KIP-919 (--bootstrap-controller): the voters' endpoints, the quorum leader as controller.
        status = broker.controller.quorum.status(0)
        return Response(error_code=0, endpoint_type=2, cluster_id=broker.cluster_id,
                        controller_id=status.leader_id, cluster_authorized_operations=operations,
                        brokers=[Response.DescribeClusterBroker(broker_id=e.node_id, host=e.host,
                                                                port=e.port, rack=None)
                                 for e in {e.node_id: e for e in reversed(status.endpoints)}
                                 .values()])
    if ctx.api_version >= 1 and request.endpoint_type != 1:  # 1: brokers; 2: controllers
        return Response(error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                        error_message="Only broker endpoints are served here",
                        endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id)
    return Response(error_code=0, endpoint_type=1, cluster_id=broker.cluster_id,
                    controller_id=broker.node_id, cluster_authorized_operations=operations,
                    brokers=[Response.DescribeClusterBroker(broker_id=n.node_id, host=n.host,
                                                            port=n.port, rack=n.rack)
                             for n in broker.live_nodes(ctx.listener_name)])

