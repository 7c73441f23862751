"""UpdateFeatures (57, v0-v2, KIP-584): finalize feature levels in the metadata log.

Forwarded to the active controller (server/forwarding.py), which commits every change of a
request together or none (controller/features.py); ALTER on the cluster is needed. The answer's
top-level error applies to every feature asked for, as Kafka's controller answers; v2 drops the
per-feature results. v0's AllowDowngrade is a safe downgrade. Which levels are finalized is
ApiVersions' answer (v3+, server/api_versions.py), as Kafka's Admin.describeFeatures reads it.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.features import SAFE_DOWNGRADE, UPGRADE, FeatureUpdate
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation
from kafka_ext.server.authorization import cluster_authorized
from kafka_ext.server.dispatcher import RequestContext

# The first version whose answer has no per-feature results.
NO_RESULTS_VERSION = 2


async def handle_update_features(ctx: RequestContext, request: Any) -> Any:
    Response = registry().responses[ApiKey.UPDATE_FEATURES].cls
    updates = [FeatureUpdate(u.feature, u.max_version_level,
                             (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)
                             if ctx.api_version == 0 else u.upgrade_type)
               for u in request.feature_updates]
    code, message = ErrorCode.NONE, None
    if not cluster_authorized(ctx, AclOperation.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    elif len({u.name for u in updates}) != len(updates):
        code, message = ErrorCode.INVALID_REQUEST, "Duplicate feature names in the request."
    else:
        try:
            await ctx.broker.controller.update_features(
                updates, ctx.api_version >= 1 and request.validate_only)
        except KafkaError as exc:
            code, message = exc.code, exc.message
    results = ([] if ctx.api_version >= NO_RESULTS_VERSION else
               [Response.UpdatableFeatureResult(feature=u.name, error_code=int(code),
                                                error_message=message) for u in updates])
    return Response(throttle_time_ms=0, error_code=int(code), error_message=message,
                    results=results)
