"""Request and response framing: the size prefix, request headers v1-v2, response headers v0-v1.

Pure: bytes in, values out. The size is checked against the limit before any body byte is
buffered, so a lying size prefix costs nothing (h2's frame buffer does the same).
"""

from __future__ import annotations

import struct
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import MessageType, registry

SIZE = struct.Struct(">i")            # frame length, excluding these 4 bytes
REQUEST_PREFIX = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id


class FrameTooLarge(KafkaError):
    """A size prefix above socket.request.max.bytes, or negative: the connection is closed."""

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, f"frame of {size} bytes (limit {max_bytes})")
        self.size = size


def frame_size(buf: Any, max_bytes: int, pos: int = 0) -> int | None:
    """The size of the frame body at `pos`, or None until its 4-byte prefix is here."""
    if len(buf) - pos < 4:
        return None
    (size,) = SIZE.unpack_from(buf, pos)
    if not 0 <= size <= max_bytes:
        raise FrameTooLarge(size, max_bytes)
    return size


def request_header_version(api_key: int, api_version: int) -> int:
    """v2 (tagged fields) for flexible request versions, else v1; unknown APIs parse as v1."""
    mtype = registry().requests.get(api_key)
    if mtype is not None and api_version in mtype.versions and mtype.is_flexible(api_version):
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    """v1 for flexible versions, except ApiVersions which always answers with v0 (KIP-511)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    mtype = registry().responses.get(api_key)
    if mtype is not None and api_version in mtype.versions and mtype.is_flexible(api_version):
        return 1
    return 0


def peek_request_prefix(frame: Any) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame."""
    if len(frame) < REQUEST_PREFIX.size:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a header")
    return REQUEST_PREFIX.unpack_from(frame)


def decode_request_header(frame: Any) -> tuple[Any, int]:
    """The RequestHeader message and the position where the body starts."""
    api_key, api_version, _ = peek_request_prefix(frame)
    header_type = registry()["RequestHeader"]
    return header_type.decode(frame, request_header_version(api_key, api_version))


def encode_response(correlation_id: int, header_version: int, body_type: MessageType,
                    body_version: int, body: Any) -> list[Any]:
    """A whole response frame as buffers for `writelines`: size, header, body parts."""
    out = bytearray(4)
    header_type = registry()["ResponseHeader"]
    header_type.encode_into(header_type.cls(correlation_id=correlation_id), header_version, out, None)
    parts: list[Any] = []
    body_type.encode_into(body, body_version, out, parts)
    parts.append(out)
    total = sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in parts) - 4
    first = parts[0]
    if isinstance(first, bytes):  # the size prefix sits at the start of the first part
        first = parts[0] = bytearray(first)
    SIZE.pack_into(first, 0, total)
    return parts


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """A whole request frame (used by our client and tests)."""
    reg = registry()
    header_type = reg["RequestHeader"]
    header = header_type.cls(request_api_key=api_key, request_api_version=api_version,
                             correlation_id=correlation_id, client_id=client_id)
    out = bytearray(4)
    header_type.encode_into(header, request_header_version(api_key, api_version), out, None)
    reg.requests[api_key].encode_into(body, api_version, out, None)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(frame: Any, api_key: int, api_version: int) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame without its size prefix."""
    reg = registry()
    header, pos = reg["ResponseHeader"].decode(frame, response_header_version(api_key, api_version))
    body, end = reg.responses[api_key].decode(frame, api_version, pos)
    if end != len(frame):
        raise DecodeError(f"{len(frame) - end} bytes after the response body")
    return header.correlation_id, body
