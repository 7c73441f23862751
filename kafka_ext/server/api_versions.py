"""ApiVersions (18): the APIs this broker serves and their version ranges (KIP-35, KIP-511).

v0-v4. From v3 the answer also carries the features this broker supports and those finalized in
the metadata log (KIP-584), as Kafka's does: the ones whose levels it honours (metadata.version,
kraft.version, group.version, share.version, eligible.leader.replicas.version), so no client turns on a protocol it gates (a
finalized transaction.version 2 would make a Java producer use KIP-890's) that is not served. Only APIs with a registered handler are advertised, and only those of the peer's
audience: v3+'s ClientSoftwareName names our own client or another node (api_keys.Audience);
the answer is remembered on the connection, which the dispatcher serves accordingly. The answer
to an unsupported ApiVersions version is a v0 response with UNSUPPORTED_VERSION and the
client-facing ranges, so the client can retry with a version we serve.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka_ext.controller.features import GROUP_VERSION_FEATURE, SUPPORTED_FEATURES
from kafka_ext.protocol.api_keys import ApiKey, Audience, advertised_ranges, peer_audience
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import PEER_AUDIENCE, RequestContext, peer_audience_of
from kafka_ext.storage.formatter import SHARE_VERSION_FEATURE

# The first version with ClientSoftwareName (KIP-511) and the features (KIP-584).
CLIENT_SOFTWARE_VERSION = 3



def api_versions_response(implemented: Iterable[int], peer: Audience = Audience.CLIENT,
                          error: ErrorCode = ErrorCode.NONE,
                          shadowed_implemented: Iterable[int] = ()) -> Any:
    cls = registry().responses[ApiKey.API_VERSIONS].cls
    return cls(error_code=int(error), api_keys=[
        cls.ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in advertised_ranges(implemented, peer, shadowed_implemented)])


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= CLIENT_SOFTWARE_VERSION:
        ctx.connection.state[PEER_AUDIENCE] = peer_audience(request.client_software_name)
    dispatcher = ctx.broker.dispatcher
    response = api_versions_response(dispatcher.handlers, peer_audience_of(ctx.connection),
                                     shadowed_implemented=dispatcher.shadowed_handlers)
    if ctx.api_version >= CLIENT_SOFTWARE_VERSION:
        image = ctx.broker.controller.image
        response.supported_features = [
            response.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high) in SUPPORTED_FEATURES.items()]
        finalized = {name: level for name, level in image.features.items()
                     if name in SUPPORTED_FEATURES}
        finalized[SHARE_VERSION_FEATURE] = share_version(ctx.broker)
        finalized[GROUP_VERSION_FEATURE] = group_version(ctx.broker)
        response.finalized_features_epoch = image.offset
        response.finalized_features = [
            response.FinalizedFeatureKey(name=name, min_version_level=level,
                                         max_version_level=level)
            for name, level in sorted(finalized.items()) if level > 0]
    return response


def group_version(broker: Any) -> int:
    """The group.version in force: the finalized level, 1 when never finalized (the KIP-848
    consumer group protocol is served unless a level of 0 turns it off, as on Kafka 4.x)."""
    return int(broker.controller.image.features.get(GROUP_VERSION_FEATURE, 1))


def share_version(broker: Any) -> int:
    """The share.version in force: the finalized level (1 when never finalized), 0 when
    `group.share.enable=false` turns share groups off on this broker."""
    if not broker.group_coordinator.config.share.enable:
        return 0
    return int(broker.controller.image.features.get(SHARE_VERSION_FEATURE, 1))
