"""Kafka's share-group APIs (KIP-932) from stock clients: answered, never served.

Keys 76/77 are CreateChunks/AlterChunkAssignments to our own client (DESIGN.md §4) and
ShareGroupHeartbeat/ShareGroupDescribe to Kafka 4.x clients (Java share consumers, librdkafka).
The dispatcher decides by the connection's audience, never by version (both families start at
v0): a stock connection's request on these keys is decoded with Kafka's schema
(`protocol_schemas/shadowed/`, v0-1) and answered UNSUPPORTED_VERSION, as a Kafka broker with
share groups disabled answers it, so the client learns share groups are unavailable and the
connection stays usable. A version outside Kafka's range or a body that does not decode closes
the connection, as for any other API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_ext.network.connection import CloseConnection
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.framing import encode_response
from kafka_ext.protocol.messages import registry

_UNSUPPORTED = "The broker does not support share groups."


def share_group_heartbeat_error(cls: Any, request: Any) -> Any:
    """ShareGroupHeartbeat: the top-level ErrorCode."""
    return cls(error_code=int(ErrorCode.UNSUPPORTED_VERSION), error_message=_UNSUPPORTED)


def share_group_describe_error(cls: Any, request: Any) -> Any:
    """ShareGroupDescribe: the error on every group asked for, as Kafka's error response has."""
    return cls(groups=[cls.DescribedGroup(group_id=group_id,
                                          error_code=int(ErrorCode.UNSUPPORTED_VERSION),
                                          error_message=_UNSUPPORTED)
                       for group_id in request.group_ids])


_ERROR_RESPONSES: dict[int, Callable[[Any, Any], Any]] = {
    ApiKey.CREATE_CHUNKS: share_group_heartbeat_error,  # = ShareGroupHeartbeat (76)
    ApiKey.ALTER_CHUNK_ASSIGNMENTS: share_group_describe_error,  # = ShareGroupDescribe (77)
}


def is_share_group_key(api_key: int) -> bool:
    return api_key in _ERROR_RESPONSES


def answer_share_group_request(frame: bytes | memoryview, api_key: int, api_version: int,
                               correlation_id: int) -> list[Any]:
    """The UNSUPPORTED_VERSION answer to a stock client's share-group request, as buffers."""
    reg = registry()
    request_type = reg.shadowed_requests[api_key]
    if api_version not in request_type.versions:
        raise CloseConnection(f"unsupported version {api_version} of {request_type.name}")
    flexible = request_type.is_flexible(api_version)
    try:
        _, pos = reg["RequestHeader"].decode(frame, 2 if flexible else 1)
        request, _ = request_type.decode(frame, api_version, pos)
    except DecodeError as exc:
        raise CloseConnection(f"malformed {request_type.name} v{api_version}: "
                              f"{exc.message}") from None
    response_type = reg.shadowed_responses[api_key]
    body = _ERROR_RESPONSES[api_key](response_type.cls, request)
    return encode_response(correlation_id, 1 if flexible else 0, response_type, api_version, body)
