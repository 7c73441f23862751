"""A blocking readiness probe: one ApiVersions round trip on a fresh connection.

Used by the test fixtures and the benchmarks to wait for a broker subprocess, and usable as a
container health check.
"""

from __future__ import annotations

import socket

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


def api_versions_ok(host: str, port: int, timeout_s: float = 1.0,
                    client_id: str = "kafka-ext-probe") -> bool:
    """True when the broker at host:port answers ApiVersions without error."""
    request = registry()["ApiVersionsRequest"].cls(client_software_name=client_id,
                                                   client_software_version="0")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            key = ApiKey.API_VERSIONS
            sock.sendall(encode_request(key, PROBE_VERSION, 1, client_id, request))
            (size,) = SIZE.unpack(recv_exact(sock, 4))
            _, body = decode_response(recv_exact(sock, size), key, PROBE_VERSION)
            return bool(body.error_code == 0)
    except OSError:
        return False
