"""Blocking one-request helpers: a readiness probe (one ApiVersions round trip on a fresh
connection) and the request/response round trip it is made of.

Used by the test fixtures and the benchmarks to wait for a broker subprocess and to send exact
requests, and usable as a container health check.
"""

from __future__ import annotations

import socket
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.framing import SIZE, decode_response, encode_request
from kafka_ext.protocol.messages import registry

PROBE_VERSION = 3


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


def api_versions_ok(host: str, port: int, timeout_s: float = 1.0,
                    client_id: str = "kafka-ext-probe") -> bool:
    """True when the broker at host:port answers ApiVersions without error."""
    request = registry()["ApiVersionsRequest"].cls(client_software_name=client_id,
                                                   client_software_version="0")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            body = round_trip(sock, ApiKey.API_VERSIONS, PROBE_VERSION, request,
                              client_id=client_id)
            return bool(body.error_code == 0)
    except OSError:
        return False
