"""Blocking one-request helpers: a readiness probe (one ApiVersions round trip on a fresh
connection) and the request/response round trip it is made of.

Used by the test fixtures and the benchmarks to wait for a broker subprocess and to send exact
requests, and usable as a container health check. Every ApiVersions request of ours names our
client (api_keys.CLIENT_SOFTWARE_NAME, or NODE_SOFTWARE_NAME between nodes), which is what
shows a connection the extension APIs.
"""

from __future__ import annotations

import socket
from typing import Any

from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.framing import SIZE, decode_response, encode_request
from kafka_ext.protocol.messages import registry

PROBE_VERSION = 3
# Our version string in ApiVersions v3+ (KIP-511 allows letters, digits, '-' and '.').
CLIENT_SOFTWARE_VERSION = "0.1.0"


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes from a blocking socket; ConnectionError if it closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return bytes(data)


def read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, decoded body) of the next response frame on a blocking socket."""
    (size,) = SIZE.unpack(recv_exact(sock, SIZE.size))
    return decode_response(recv_exact(sock, size), api_key, version)


def round_trip(sock: socket.socket, api_key: int, version: int, body: Any,
               correlation_id: int = 1, client_id: str = "kafka-ext") -> Any:
    """Send one request and return its response body; ConnectionError on a foreign answer."""
    sock.sendall(encode_request(api_key, version, correlation_id, client_id, body))
    answered_id, response = read_response(sock, api_key, version)
    if answered_id != correlation_id:
        raise ConnectionError(f"answer to request {answered_id}, expected {correlation_id}")
    return response


def shadowed_round_trip(sock: socket.socket, api_key: int, version: int, body: Any,
                        correlation_id: int = 1, client_id: str = "kafka-ext") -> Any:
    """One round trip of Kafka's API on a key that is one of ours to our own peers
    (registry().shadowed_requests: ShareGroupHeartbeat/Describe on 76/77); the connection must
    be a stock client's (an ApiVersions naming another ClientSoftwareName, or none)."""
    reg = registry()
    request_type = reg.shadowed_requests[api_key]
    flexible = request_type.is_flexible(version)  # the header follows Kafka's schema, not ours
    header_type = reg["RequestHeader"]
    out = bytearray(4)
    header_type.encode_into(header_type.cls(request_api_key=api_key, request_api_version=version,
                                            correlation_id=correlation_id, client_id=client_id),
                            2 if flexible else 1, out, None)
    request_type.encode_into(body, version, out, None)
    SIZE.pack_into(out, 0, len(out) - 4)
    sock.sendall(bytes(out))
    (size,) = SIZE.unpack(recv_exact(sock, SIZE.size))
    frame = recv_exact(sock, size)
    header, pos = reg["ResponseHeader"].decode(frame, 1 if flexible else 0)
    if header.correlation_id != correlation_id:
        raise ConnectionError(f"answer to request {header.correlation_id}, "
                              f"expected {correlation_id}")
    answer, end = reg.shadowed_responses[api_key].decode(frame, version, pos)
    if end != len(frame):
        raise DecodeError(f"{len(frame) - end} bytes after the response body")
    return answer


def api_versions_request(software_name: str = CLIENT_SOFTWARE_NAME) -> Any:
    """Our ApiVersions v3+ request body: `software_name` decides what the broker shows us."""
    return registry()["ApiVersionsRequest"].cls(client_software_name=software_name,
                                                client_software_version=CLIENT_SOFTWARE_VERSION)


def identify(sock: socket.socket, software_name: str = CLIENT_SOFTWARE_NAME,
             correlation_id: int = 0) -> Any:
    """Send ApiVersions v3 as `software_name` on a fresh connection; returns the answer."""
    return round_trip(sock, ApiKey.API_VERSIONS, PROBE_VERSION,
                      api_versions_request(software_name), correlation_id)


def api_versions_ok(host: str, port: int, timeout_s: float = 1.0,
                    client_id: str = "kafka-ext-probe") -> bool:
    """True when the broker at host:port answers ApiVersions without error."""
    request = api_versions_request()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            body = round_trip(sock, ApiKey.API_VERSIONS, PROBE_VERSION, request,
                              client_id=client_id)
            return bool(body.error_code == 0)
    except OSError:
        return False
