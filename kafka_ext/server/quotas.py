"""DescribeClientQuotas (48, v0-v1) and AlterClientQuotas (49, v0-v1): KIP-546.

Quotas live in the metadata image as ClientQuotaRecords (so every node enforces the same ones
and they survive restarts); AlterClientQuotas goes through the controller, which validates
each entity and answers per entity. Describe reads the image with Kafka's filter semantics.
Enforcement is in client_quota_manager.py. Describing needs DESCRIBE_CONFIGS on the cluster and
altering ALTER_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.client_quota_control import (
    FilterComponent,
    QuotaAlteration,
    describe_client_quotas,
    quota_entity,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import cluster_authorized
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
_DENIED = "Cluster authorization failed."


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DescribeClientQuotasResponse"].cls
    if not cluster_authorized(ctx, AclOperation.DESCRIBE_CONFIGS):
        return Response(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                        error_message=_DENIED, entries=None)
    components = [FilterComponent(c.entity_type, c.match_type, c.match)
                  for c in request.components]
    try:
        matches = describe_client_quotas(ctx.broker.controller.image.client_quotas, components,
                                         request.strict)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=int(exc.code),
                        error_message=exc.message or None, entries=None)
    entries = [Response.EntryData(
        entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        values=[Response.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in matches]
    return Response(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["AlterClientQuotasResponse"].cls
    if not cluster_authorized(ctx, AclOperation.ALTER_CONFIGS):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return Response(throttle_time_ms=0, entries=[Response.EntryData(
            error_code=code, error_message=_DENIED,
            entity=[Response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity]) for entry in request.entries])
    alterations = [QuotaAlteration(
        quota_entity([(e.entity_type, e.entity_name) for e in entry.entity]),
        tuple((op.key, None if op.remove else op.value) for op in entry.ops))
        for entry in request.entries]
    results = await ctx.broker.controller.alter_client_quotas(alterations, request.validate_only)
    entries = []
    for entity, error in results.items():
        entries.append(Response.EntryData(
            error_code=int(error.code) if error else 0,
            error_message=(error.message or None) if error else None,
            entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity]))
    return Response(throttle_time_ms=0, entries=entries)
