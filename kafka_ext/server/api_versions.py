"""ApiVersions (18): the APIs this broker serves and their version ranges (KIP-35, KIP-511).

v0-v4. Only APIs with a registered handler are advertised. The answer to an unsupported
ApiVersions version is a v0 response with UNSUPPORTED_VERSION and the ranges, so the client
can retry with a version we serve.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey, advertised_ranges
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.server.dispatcher import RequestContext


def api_versions_response(implemented: Iterable[int], error: ErrorCode = ErrorCode.NONE) -> Any:
    cls = registry().responses[ApiKey.API_VERSIONS].cls
    return cls(error_code=int(error), api_keys=[
        cls.ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in advertised_ranges(implemented)])


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(ctx.broker.dispatcher.handlers)
