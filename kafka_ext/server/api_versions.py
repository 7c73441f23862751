"""ApiVersions (18): the APIs this broker serves and their version ranges (KIP-35, KIP-511).

v0-v4. Only APIs with a registered handler are advertised, and only those of the peer's
audience: v3+'s ClientSoftwareName names our own client or another node (api_keys.Audience);
the answer is remembered on the connection, which the dispatcher serves accordingly. The answer
to an unsupported ApiVersions version is a v0 response with UNSUPPORTED_VERSION and the
client-facing ranges, so the client can retry with a version we serve.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey, Audience, advertised_ranges, peer_audience
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import PEER_AUDIENCE, RequestContext, peer_audience_of

# The first version with ClientSoftwareName (KIP-511).
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
    return api_versions_response(dispatcher.handlers, peer_audience_of(ctx.connection),
                                 shadowed_implemented=dispatcher.shadowed_handlers)
