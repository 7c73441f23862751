"""Delegation tokens on three secured nodes (KIP-48): a token created through any node (the
active controller decides; the others forward) is a login on every node, renewal and expiry
through any node reach them all, and the active controller's sweep removes expired tokens from
every node's image.

The nodes are test_secured_cluster's (SASL_SSL everywhere), with `delegation.token.secret.key`
set and SCRAM-SHA-512 offered to clients; User:broker (a super user with a SCRAM credential)
manages the tokens, created for User:app.
"""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import SaslClient
from tests.cluster.test_secured_cluster import (
    SecuredCluster,
    SecuredNode,
    serve_secured_cluster,
)
from tests.integration.clients import wait_until

SECRET = "cluster-token-secret"
_reg = registry()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    served = serve_secured_cluster(tmp_path_factory.mktemp("tokens-cluster"), {
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.check.interval.ms": "500",
        "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    secured = next(served)
    yield secured
    next(served, None)  # stops the nodes (and checks how they ended)
    for node in secured.nodes:
        assert SECRET not in node.log_path.read_text(errors="replace")


def _connect(cluster: SecuredCluster, node: SecuredNode) -> socket.socket:
    context = ssl.create_default_context(cafile=str(cluster.tls.ca))
    raw = socket.create_connection(("127.0.0.1", node.client_port), timeout=30)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _log_in(sock: socket.socket, user: str, password: str, token_auth: bool) -> int:
    """SCRAM-SHA-512 through SaslHandshake v1 / SaslAuthenticate v2: the error code."""
    assert round_trip(sock, ApiKey.SASL_HANDSHAKE, 1, _reg.requests[ApiKey.SASL_HANDSHAKE].cls(
        mechanism="SCRAM-SHA-512")).error_code == 0
    client = SaslClient("SCRAM-SHA-512", user, password, token_auth=token_auth)
    token: bytes | None = client.first()
    while token is not None:
        answer = round_trip(sock, ApiKey.SASL_AUTHENTICATE, 2,
                            _reg.requests[ApiKey.SASL_AUTHENTICATE].cls(auth_bytes=token))
        if answer.error_code:
            return int(answer.error_code)
        token = client.answer(bytes(answer.auth_bytes))
    return 0


def _as_broker(cluster: SecuredCluster, node: SecuredNode) -> socket.socket:
    sock = _connect(cluster, node)
    assert _log_in(sock, "broker", "broker-secret", token_auth=False) == 0
    return sock


def _token_logs_in(cluster: SecuredCluster, node: SecuredNode, created: Any) -> bool:
    with _connect(cluster, node) as sock:
        return _log_in(sock, created.token_id, base64.b64encode(bytes(created.hmac)).decode(),
                       token_auth=True) == 0


def _request(sock: socket.socket, api_key: ApiKey, version: int, **fields: Any) -> Any:
    return round_trip(sock, api_key, version, _reg.requests[api_key].cls(**fields))


def _described(cluster: SecuredCluster, node: SecuredNode) -> dict[str, int]:
    """Token id -> expiry, as the node's image describes its tokens."""
    with _as_broker(cluster, node) as sock:
        answer = _request(sock, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, owners=None)
    assert answer.error_code == 0
    return {t.token_id: t.expiry_timestamp for t in answer.tokens}


def test_tokens_created_through_any_node_log_in_on_every_node(cluster: SecuredCluster) -> None:
    Create = _reg.requests[ApiKey.CREATE_DELEGATION_TOKEN].cls
    created = []
    for node in cluster.nodes:  # at most one leads the quorum: the others forward
        with _as_broker(cluster, node) as sock:
            answer = _request(sock, ApiKey.CREATE_DELEGATION_TOKEN, 3,
                              owner_principal_type="User", owner_principal_name="app",
                              renewers=[Create.CreatableRenewers(principal_type="User",
                                                                 principal_name="broker")],
                              max_lifetime_ms=-1)
        assert answer.error_code == 0, node.node_id
        assert (answer.principal_name, answer.token_requester_principal_name) == (
            "app", "broker")
        created.append(answer)
    for node in cluster.nodes:
        for token in created:
            wait_until(lambda: _token_logs_in(cluster, node, token), 30,  # noqa: B023
                       f"token {token.token_id} on node {node.node_id}")

    # Renewed through one node, expired through another: every node sees both.
    first, second, _ = created
    with _as_broker(cluster, cluster.nodes[1]) as sock:
        renewed = _request(sock, ApiKey.RENEW_DELEGATION_TOKEN, 2, hmac=bytes(first.hmac),
                           renew_period_ms=60_000)
    assert renewed.error_code == 0
    with _as_broker(cluster, cluster.nodes[2]) as sock:
        removed = _request(sock, ApiKey.EXPIRE_DELEGATION_TOKEN, 2, hmac=bytes(second.hmac),
                           expiry_time_period_ms=-1)
    assert removed.error_code == 0
    for node in cluster.nodes:
        wait_until(lambda: (d := _described(cluster, node)).get(first.token_id)  # noqa: B023
                   == renewed.expiry_timestamp_ms and second.token_id not in d, 30,
                   f"the renewal and the removal on node {node.node_id}")
        assert not _token_logs_in(cluster, node, second)


def test_the_active_controller_sweeps_expired_tokens_from_every_node(
        cluster: SecuredCluster) -> None:
    with _as_broker(cluster, cluster.nodes[0]) as sock:
        created = _request(sock, ApiKey.CREATE_DELEGATION_TOKEN, 3, owner_principal_type=None,
                           owner_principal_name=None, renewers=[], max_lifetime_ms=-1)
        assert created.error_code == 0
        assert _request(sock, ApiKey.EXPIRE_DELEGATION_TOKEN, 2, hmac=bytes(created.hmac),
                        expiry_time_period_ms=1).error_code == 0
    # delegation.token.expiry.check.interval.ms=500: a RemoveDelegationTokenRecord follows.
    for node in cluster.nodes:
        wait_until(lambda: created.token_id not in _described(cluster, node), 30,  # noqa: B023
                   f"the sweep on node {node.node_id}")
        with _as_broker(cluster, node) as sock:
            assert _request(sock, ApiKey.RENEW_DELEGATION_TOKEN, 2, hmac=bytes(created.hmac),
                            renew_period_ms=-1).error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
