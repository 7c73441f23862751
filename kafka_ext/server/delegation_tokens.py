"""CreateDelegationToken (38) v0-3, RenewDelegationToken (39) v0-2, ExpireDelegationToken (40)
v0-2 and DescribeDelegationToken (41) v0-3: KIP-48, as Kafka's KafkaApis serves them.

Only a principal that logged in without a token, on a SASL listener or with a client
certificate, may manage tokens: a token-authenticated, PLAINTEXT or anonymous-SSL connection is
answered DELEGATION_TOKEN_REQUEST_NOT_ALLOWED. Creating a token for another owner needs
CREATE_TOKENS on that USER. Create, renew and expire are checked here and then decided by the
active controller (forwarded in an Envelope from any other node), which answers
DELEGATION_TOKEN_AUTH_DISABLED without `delegation.token.secret.key`, and checks that a renewer
or expirer is the token's owner or one of its renewers. Describe is answered from this node's
image: a principal sees the tokens it owns or may renew, those it has DESCRIBE on
(DELEGATION_TOKEN resource, the token id) and those of owners it has DESCRIBE_TOKENS on (USER).

The logins tokens give (SCRAM with `tokenauth=true`) are looked up here for the SASL exchange
(`token_login`); the active controller removes expired tokens (`remove_expired_tokens`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.delegation_tokens import (
    TokenSettings,
    create_token,
    expire_token,
    expired_token_removals,
    renew_token,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation, ResourceType
from kafka_ext.security.delegation_token import token_hmac, token_scram_credential
from kafka_ext.security.principal import ANONYMOUS, KafkaPrincipal
from kafka_ext.security.sasl import ScramCredential, TokenLogin
from kafka_ext.server.authorization import authorized

if TYPE_CHECKING:
    from kafka_ext.controller.quorum_controller import QuorumController
    from kafka_ext.server.broker import Broker
    from kafka_ext.server.dispatcher import RequestContext

log = logging.getLogger(__name__)
_reg = registry()
# Kafka's DelegationTokenManager.ErrorTimestamp: the timestamps of a refused request.
ERROR_TIMESTAMP = -1
FORWARD_TIMEOUT_S = 30.0


def _response(api_key: ApiKey) -> Any:
    return _reg.responses[api_key].cls


def _settings(ctx: RequestContext) -> TokenSettings:
    return TokenSettings.from_config(ctx.broker.config.values)


def _now_ms() -> int:
    return int(time.time() * 1000)


def token_requests_allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests: not with a token, not over PLAINTEXT, not anonymous over SSL.
    A forwarded request was checked by the node the client is connected to."""
    if ctx.forwarded:
        return True
    security = ctx.connection.security
    protocol = security.listener.protocol
    return not (security.token_authenticated or protocol == "PLAINTEXT"
                or (protocol == "SSL" and ctx.principal == ANONYMOUS))


async def _on_controller(ctx: RequestContext, request: Any,
                         decide: Callable[[], Awaitable[Any]],
                         refused: Callable[[ErrorCode], Any]) -> Any:
    """`decide` on the active controller (here, or through an Envelope to it); an answer
    built by `refused` when the quorum cannot take the change."""
    broker = ctx.broker
    try:
        if ctx.forwarded or broker.controller.raft.is_leader:
            try:
                return await decide()
            except KafkaError as exc:
                if ctx.forwarded or exc.code != ErrorCode.NOT_CONTROLLER:
                    raise
        return await broker.forwarding.forward(ctx.header.request_api_key, ctx.api_version,
                                               request, ctx.client_id, FORWARD_TIMEOUT_S,
                                               ctx.principal, ctx.client_host)
    except KafkaError as exc:
        return refused(exc.code)


# -- CreateDelegationToken (38) ------------------------------------------------------------------

async def handle_create_delegation_token(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.CREATE_DELEGATION_TOKEN)
    requester = ctx.principal
    owner = (KafkaPrincipal(request.owner_principal_type or "", request.owner_principal_name)
             if request.owner_principal_name else requester)
    renewers = [KafkaPrincipal(r.principal_type, r.principal_name) for r in request.renewers]

    def refused(code: ErrorCode) -> Any:
        return Response(error_code=code, principal_type=owner.principal_type,
                        principal_name=owner.name,
                        token_requester_principal_type=requester.principal_type,
                        token_requester_principal_name=requester.name,
                        issue_timestamp_ms=ERROR_TIMESTAMP, expiry_timestamp_ms=ERROR_TIMESTAMP,
                        max_timestamp_ms=ERROR_TIMESTAMP, token_id="", hmac=b"",
                        throttle_time_ms=0)

    if not token_requests_allowed(ctx):
        return refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if owner != requester and not authorized(ctx, AclOperation.CREATE_TOKENS, ResourceType.USER,
                                             str(owner)):
        return refused(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)

    async def decide() -> Any:
        settings, now_ms = _settings(ctx), _now_ms()
        created = await ctx.broker.controller.change_delegation_tokens(
            lambda image: create_token(image, settings, owner, requester, renewers,
                                       request.max_lifetime_ms, now_ms))
        token = created.token
        if token is None:
            return refused(created.error)
        return Response(error_code=0, principal_type=owner.principal_type,
                        principal_name=owner.name,
                        token_requester_principal_type=requester.principal_type,
                        token_requester_principal_name=requester.name,
                        issue_timestamp_ms=token.issue_timestamp_ms,
                        expiry_timestamp_ms=token.expiry_timestamp_ms,
                        max_timestamp_ms=token.max_timestamp_ms, token_id=token.token_id,
                        hmac=created.hmac, throttle_time_ms=0)

    return await _on_controller(ctx, request, decide, refused)


# -- RenewDelegationToken (39) and ExpireDelegationToken (40) ---------------------------------

async def handle_renew_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return await _change_expiry(ctx, request, ApiKey.RENEW_DELEGATION_TOKEN, renew_token,
                                request.renew_period_ms)


async def handle_expire_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return await _change_expiry(ctx, request, ApiKey.EXPIRE_DELEGATION_TOKEN, expire_token,
                                request.expiry_time_period_ms)


async def _change_expiry(ctx: RequestContext, request: Any, api_key: ApiKey, rule: Any,
                         period_ms: int) -> Any:
    Response = _response(api_key)

    def refused(code: ErrorCode) -> Any:
        return Response(error_code=code, expiry_timestamp_ms=ERROR_TIMESTAMP, throttle_time_ms=0)

    if not token_requests_allowed(ctx):
        return refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)

    async def decide() -> Any:
        settings, now_ms, hmac = _settings(ctx), _now_ms(), bytes(request.hmac)
        code, expiry_ms = await ctx.broker.controller.change_delegation_tokens(
            lambda image: rule(image, settings, ctx.principal, hmac, period_ms, now_ms))
        if code:
            return refused(code)
        return Response(error_code=0, expiry_timestamp_ms=expiry_ms, throttle_time_ms=0)

    return await _on_controller(ctx, request, decide, refused)


# -- DescribeDelegationToken (41) -----------------------------------------------------------------

async def handle_describe_delegation_token(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.DESCRIBE_DELEGATION_TOKEN)
    if not token_requests_allowed(ctx):
        return Response(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, tokens=[],
                        throttle_time_ms=0)
    settings = _settings(ctx)
    if not settings.enabled:
        return Response(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, tokens=[],
                        throttle_time_ms=0)
    assert settings.secret_key is not None
    owners = (None if request.owners is None else
              [KafkaPrincipal(o.principal_type, o.principal_name) for o in request.owners])
    requester = ctx.principal
    Token = Response.DescribedDelegationToken
    tokens = []
    image = ctx.broker.controller.image
    for token_id in sorted(image.delegation_tokens):
        token = image.delegation_tokens[token_id]
        # Kafka's DelegationTokenManager.filterToken.
        if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
            continue
        if not (token.owner_or_renewer(requester)
                or authorized(ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN,
                              token_id)
                or authorized(ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER,
                              str(token.owner))):
            continue
        tokens.append(Token(
            principal_type=token.owner.principal_type, principal_name=token.owner.name,
            token_requester_principal_type=token.requester.principal_type,
            token_requester_principal_name=token.requester.name,
            issue_timestamp=token.issue_timestamp_ms, expiry_timestamp=token.expiry_timestamp_ms,
            max_timestamp=token.max_timestamp_ms, token_id=token_id,
            hmac=token_hmac(token_id, settings.secret_key),
            renewers=[Token.DescribedDelegationTokenRenewer(principal_type=r.principal_type,
                                                            principal_name=r.name)
                      for r in token.renewers]))
    return Response(error_code=0, tokens=tokens, throttle_time_ms=0)


# -- token logins and expiry ----------------------------------------------------------------------

def token_login(broker: Broker, token_id: str, mechanism: str) -> TokenLogin | None:
    """The SCRAM login a token gives on this node, from its image and secret key; None for
    an unknown token or with tokens disabled."""
    settings = TokenSettings.from_config(broker.config.values)
    token = broker.controller.image.delegation_tokens.get(token_id)
    if token is None or settings.secret_key is None:
        return None
    credential = _credential(mechanism, token_hmac(token_id, settings.secret_key))
    return TokenLogin(credential, token.owner, token.expiry_timestamp_ms)


@functools.lru_cache(maxsize=4096)
def _credential(mechanism: str, hmac: bytes) -> ScramCredential:
    # Derived once per token and mechanism (4096 PBKDF2 rounds), as Kafka's token cache does.
    return token_scram_credential(mechanism, hmac)


async def remove_expired_tokens(controller: QuorumController) -> None:
    """The active controller's sweep (every delegation.token.expiry.check.interval.ms)."""
    if not controller.raft.is_leader:
        return
    now_ms = _now_ms()
    try:
        await controller.change_delegation_tokens(
            lambda image: expired_token_removals(image, now_ms))
    except KafkaError as exc:  # leadership moved: the next controller sweeps
        log.info("could not remove expired delegation tokens: %s", exc)


HANDLERS = {
    ApiKey.CREATE_DELEGATION_TOKEN: handle_create_delegation_token,
    ApiKey.RENEW_DELEGATION_TOKEN: handle_renew_delegation_token,
    ApiKey.EXPIRE_DELEGATION_TOKEN: handle_expire_delegation_token,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: handle_describe_delegation_token,
}
