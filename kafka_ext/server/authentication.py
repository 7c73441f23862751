"""SaslHandshake (17) and SaslAuthenticate (36): logging a connection in on a SASL listener.

Kafka's flow: ApiVersions, SaslHandshake naming a mechanism, then SaslAuthenticate requests
carrying the mechanism's tokens until it completes. Clients from before KIP-152 send
SaslHandshake v0 and then the bare tokens, each size-prefixed with no request header; those are
answered the same way (`raw_token`). Until the login completes only these three APIs are served;
anything else closes the connection (the dispatcher checks).

A refused login is answered with SASL_AUTHENTICATION_FAILED after
`connection.failed.authentication.delay.ms`, and the connection closes once that answer is out.
With `connections.max.reauth.ms` a session has a lifetime (KIP-368): the client logs in again on
the same connection before it ends (same principal required); a request after the end closes
the connection. A delegation token's login (SCRAM with `tokenauth=true`, KIP-48) is its owner's,
and its session ends when the token expires, as in Kafka; an expired token is refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from kafka_ext.network.connection import CloseConnection, KafkaConnection
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import SIZE
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import (
    PLAIN,
    AuthenticationFailed,
    PlainServer,
    SaslServer,
    ScramServer,
)
from kafka_ext.security.session import ConnectionSecurity
from kafka_ext.server.delegation_tokens import token_login

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker
    from kafka_ext.server.dispatcher import RequestContext

log = logging.getLogger(__name__)


def _response(api_key: ApiKey, **fields: Any) -> Any:
    return registry().responses[api_key].cls(**fields)


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    security = ctx.connection.security
    listener = security.listener
    if not listener.uses_sasl or security.exchange is not None:
        # Kafka answers ILLEGAL_SASL_STATE to a handshake on a listener without SASL, or in
        # the middle of an exchange.
        return _response(ApiKey.SASL_HANDSHAKE, error_code=ErrorCode.ILLEGAL_SASL_STATE,
                         mechanisms=list(listener.mechanisms))
    mechanism = request.mechanism
    reauthenticating = security.authenticated
    if mechanism not in listener.mechanisms or (reauthenticating and (
            ctx.api_version == 0 or mechanism != security.mechanism)):
        # Re-authentication must keep the mechanism and needs the framed (v1) flow.
        log.info("closing %s: SASL mechanism %s not offered", ctx.connection.peer, mechanism)
        ctx.connection.close_after_answers()
        return _response(ApiKey.SASL_HANDSHAKE, error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                         mechanisms=list(listener.mechanisms))
    security.exchange = _new_exchange(ctx.broker, security, mechanism)
    security.raw_tokens = ctx.api_version == 0
    return _response(ApiKey.SASL_HANDSHAKE, error_code=ErrorCode.NONE,
                     mechanisms=list(listener.mechanisms))


def _new_exchange(broker: Broker, security: ConnectionSecurity, mechanism: str) -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(security.listener.plain_users)
    return ScramServer(mechanism, broker.scram_credential,
                       lambda token_id, m: token_login(broker, token_id, m))


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    security = ctx.connection.security
    exchange = security.exchange
    if exchange is None or security.raw_tokens:
        # Kafka answers ILLEGAL_SASL_STATE; on a SASL listener the login is then over.
        if security.listener.uses_sasl:
            ctx.connection.close_after_answers()
        return _response(ApiKey.SASL_AUTHENTICATE, error_code=ErrorCode.ILLEGAL_SASL_STATE,
                         error_message="SaslAuthenticate without a SaslHandshake before it",
                         auth_bytes=b"")
    try:
        challenge = exchange.evaluate(bytes(request.auth_bytes))
        lifetime_ms = _complete(ctx.connection, exchange) if exchange.complete else 0
    except AuthenticationFailed as exc:
        await _refuse(ctx.connection, str(exc))
        return _response(ApiKey.SASL_AUTHENTICATE,
                         error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                         error_message=str(exc), auth_bytes=b"")
    return _response(ApiKey.SASL_AUTHENTICATE, error_code=ErrorCode.NONE, error_message=None,
                     auth_bytes=challenge, session_lifetime_ms=lifetime_ms)


async def raw_token(conn: KafkaConnection, frame: bytes | memoryview) -> list[Any]:
    """One bare SASL token after SaslHandshake v0: the answer is a bare, size-prefixed token;
    a refused login closes the connection with no answer (the v0 flow has no error field)."""
    exchange = conn.security.exchange
    assert exchange is not None
    try:
        challenge = exchange.evaluate(bytes(frame))
        if exchange.complete:
            _complete(conn, exchange)
    except AuthenticationFailed as exc:
        await _refuse(conn, str(exc))
        raise CloseConnection(f"SASL authentication failed: {exc}") from None
    return [SIZE.pack(len(challenge)), challenge]


def _complete(conn: KafkaConnection, exchange: SaslServer) -> int:
    """Log the connection in; the session lifetime to tell the client (0: unbounded)."""
    security = conn.security
    principal = exchange.principal
    if security.authenticated and principal != security.principal:
        raise AuthenticationFailed("Cannot change principals during re-authentication from "
                                   f"{security.principal}: {principal}")
    lifetime_ms = security.listener.reauth_ms
    token = exchange.token
    if token is not None:
        # Kafka's SaslServerAuthenticator: a token's session ends with the token.
        left_ms = token.expiry_timestamp_ms - int(time.time() * 1000)
        if left_ms <= 0:
            raise AuthenticationFailed("Authentication failed: Delegation token expired")
        lifetime_ms = min(lifetime_ms, left_ms) if lifetime_ms else left_ms
    security.principal = principal
    security.token_authenticated = token is not None
    security.mechanism = exchange.mechanism
    security.authenticated = True
    security.exchange = None
    security.raw_tokens = False
    conn.authenticated()
    security.session_expires_at = (time.monotonic() + lifetime_ms / 1000 if lifetime_ms
                                   else None)
    log.debug("%s authenticated as %s with %s%s", conn.peer, principal, exchange.mechanism,
              " (delegation token)" if token is not None else "")
    return lifetime_ms


async def _refuse(conn: KafkaConnection, reason: str) -> None:
    """Wait connection.failed.authentication.delay.ms (slowing guessing), then close after the
    answer. The reason is logged without the client's tokens."""
    security = conn.security
    security.exchange = None
    log.info("failed authentication from %s on %s: %s", conn.peer,
             security.listener.listener, reason)
    conn.close_after_answers()
    delay_ms = security.listener.failed_authentication_delay_ms
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
