"""Every (key, version) the broker advertises is answered (issue 23, item 2).

For each audience (a stock client, our own client, another node), the broker's own ApiVersions
answer lists what is advertised; a minimal valid request (the codec's defaults, plus the few
fields without which no answer could come) is sent for every advertised version of every key,
and the answer must decode with the request's correlation id. Nothing here lists versions: what
the API table advertises tomorrow is tested tomorrow.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from kafka_ext.client.probe import identify, recv_exact
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.framing import SIZE
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 15.0


def request_types(api_key: int, software_name: str) -> tuple[Any, Any]:
    """The request and response types of `api_key` for this peer: Kafka's share-group APIs on
    76/77 for a stock client, ours otherwise."""
    reg = registry()
    if software_name not in (CLIENT_SOFTWARE_NAME, NODE_SOFTWARE_NAME) \
            and api_key in reg.shadowed_requests:
        return reg.shadowed_requests[api_key], reg.shadowed_responses[api_key]
    return reg.requests[api_key], reg.responses[api_key]


def minimal_request(api_key: int, version: int, software_name: str) -> Any:
    """The codec's default request, with the fields that must be set for an answer to come."""
    request = request_types(api_key, software_name)[0].cls()
    if api_key == ApiKey.PRODUCE:
        request.acks = 1  # acks=0 is never answered
    elif api_key == ApiKey.FETCH:
        request.max_wait_ms = 0  # no long poll on an empty fetch
    elif api_key == ApiKey.API_VERSIONS:  # keep this connection's audience
        request.client_software_name = software_name
        request.client_software_version = "1"
    return request


def encode_frame(request_type: Any, api_key: int, version: int, correlation_id: int,
                 body: Any) -> bytes:
    reg = registry()
    header = reg["RequestHeader"]
    out = bytearray(4)
    header.encode_into(header.cls(request_api_key=api_key, request_api_version=version,
                                  correlation_id=correlation_id, client_id="v"),
                       2 if request_type.is_flexible(version) else 1, out, None)
    request_type.encode_into(body, version, out, None)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def read_frame(sock: socket.socket, response_type: Any, version: int) -> tuple[int, Any]:
    (size,) = SIZE.unpack(recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    flexible = response_type.is_flexible(version) and response_type.name != "ApiVersionsResponse"
    header, pos = registry()["ResponseHeader"].decode(frame, 1 if flexible else 0)
    body, _ = response_type.decode(frame, version, pos)
    return header.correlation_id, body


def connect(broker: Any, software_name: str) -> tuple[socket.socket, dict[int, tuple[int, int]]]:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
    response = identify(sock, software_name)
    return sock, {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


@pytest.mark.parametrize("software_name", ["some-stock-client", CLIENT_SOFTWARE_NAME,
                                           NODE_SOFTWARE_NAME])
def test_every_advertised_version_of_every_key_is_answered(broker: Any,
                                                           software_name: str) -> None:
    sock, advertised = connect(broker, software_name)
    answered = 0
    advertised_versions = sum(high - low + 1 for low, high in advertised.values())
    correlation_id = 100
    try:
        for api_key, (low, high) in sorted(advertised.items()):
            request_type, response_type = request_types(api_key, software_name)
            for version in range(low, high + 1):
                correlation_id += 1
                what = f"{request_type.name} v{version} as {software_name}"
                assert version in request_type.versions, f"{what}: advertised, not decoded"
                body = minimal_request(api_key, version, software_name)
                sock.sendall(encode_frame(request_type, api_key, version, correlation_id, body))
                try:
                    got, _ = read_frame(sock, response_type, version)
                except (ConnectionError, TimeoutError) as exc:
                    pytest.fail(f"{what}: no answer ({exc!r})\n{broker.log()[-3000:]}")
                assert got == correlation_id, what
                answered += 1
    finally:
        sock.close()
    assert answered == advertised_versions > 0
    assert "Traceback" not in broker.log(), broker.log()[-5000:]
