"""Delegation tokens as metadata (KIP-48): Kafka's DelegationTokenControlManager.

Pure functions of the image and the clock: each returns the records to commit and the answer.
A token lives in the metadata log as a DelegationTokenRecord (a renewal or a new expiry is the
same record again) until a RemoveDelegationTokenRecord; every node's image has them, so every
node can check a token login. The HMAC is never in a record: it is HmacSHA512 of the token id
under `delegation.token.secret.key`, recomputed where needed. The active controller removes
expired tokens every `delegation.token.expiry.check.interval.ms`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.delegation_token import TokenInformation, token_hmac
from kafka_ext.security.principal import USER_TYPE, KafkaPrincipal

if TYPE_CHECKING:
    from kafka_ext.controller.image import MetadataDelta, MetadataImage

log = logging.getLogger(__name__)
_records = registry()
_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """The delegation.token.* settings; tokens are enabled exactly when the key is set."""

    secret_key: str | None
    max_lifetime_ms: int = 7 * 24 * 3600 * 1000
    expiry_time_ms: int = 24 * 3600 * 1000
    expiry_check_interval_ms: int = 3600 * 1000

    @property
    def enabled(self) -> bool:
        return bool(self.secret_key)

    @classmethod
    def from_config(cls, values: Mapping[str, object]) -> TokenSettings:
        key = values.get("delegation.token.secret.key")
        return cls(str(key) if key else None,
                   int(str(values["delegation.token.max.lifetime.ms"])),
                   int(str(values["delegation.token.expiry.time.ms"])),
                   int(str(values["delegation.token.expiry.check.interval.ms"])))


class CreatedToken(NamedTuple):
    """CreateDelegationToken's answer: an error, or the token with its HMAC."""

    error: ErrorCode
    token: TokenInformation | None = None
    hmac: bytes = b""


def _sum(now_ms: int, duration_ms: int) -> int:
    return _LONG_MAX if now_ms > _LONG_MAX - duration_ms else now_ms + duration_ms


def token_record(token: TokenInformation) -> Any:
    return _records["DelegationTokenRecord"].cls(
        owner=str(token.owner), requester=str(token.requester),
        renewers=[str(r) for r in token.renewers], issue_timestamp=token.issue_timestamp_ms,
        max_timestamp=token.max_timestamp_ms, expiration_timestamp=token.expiry_timestamp_ms,
        token_id=token.token_id)


def _removal(token_id: str) -> Any:
    return _records["RemoveDelegationTokenRecord"].cls(token_id=token_id)


def token_for_hmac(image: MetadataImage, secret_key: str, hmac: bytes) -> TokenInformation | None:
    """The token whose HMAC is `hmac` (one HmacSHA512 per token: tokens are few)."""
    for token in image.delegation_tokens.values():
        if token_hmac(token.token_id, secret_key) == hmac:
            return token
    return None


def create_token(image: MetadataImage, settings: TokenSettings, owner: KafkaPrincipal,
                 requester: KafkaPrincipal, renewers: Sequence[KafkaPrincipal],
                 max_lifetime_ms: int, now_ms: int) -> tuple[list[Any], CreatedToken]:
    """A new token: its lifetime is the request's when positive, at most
    delegation.token.max.lifetime.ms, and it expires delegation.token.expiry.time.ms from now
    unless renewed. Renewers other than users: INVALID_PRINCIPAL_TYPE."""
    if not settings.enabled:
        return [], CreatedToken(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    if any(r.principal_type != USER_TYPE for r in renewers):
        return [], CreatedToken(ErrorCode.INVALID_PRINCIPAL_TYPE)
    lifetime_ms = settings.max_lifetime_ms
    if max_lifetime_ms > 0:
        lifetime_ms = min(lifetime_ms, max_lifetime_ms)
    max_timestamp_ms = _sum(now_ms, lifetime_ms)
    token = TokenInformation(
        str(uuid.uuid4()), owner, requester, tuple(renewers), now_ms, max_timestamp_ms,
        min(max_timestamp_ms, _sum(now_ms, settings.expiry_time_ms)))
    assert settings.secret_key is not None
    return [token_record(token)], CreatedToken(ErrorCode.NONE, token,
                                               token_hmac(token.token_id, settings.secret_key))


def renew_token(image: MetadataImage, settings: TokenSettings, principal: KafkaPrincipal,
                hmac: bytes, renew_period_ms: int, now_ms: int
                ) -> tuple[list[Any], tuple[ErrorCode, int]]:
    """A new expiry: now + the period (delegation.token.expiry.time.ms at most, and when the
    period is not positive), never past the token's maximum; by its owner or a renewer."""
    found = _renewable(image, settings, principal, hmac)
    if isinstance(found, ErrorCode):
        return [], (found, -1)
    if found.expired(now_ms):
        return [], (ErrorCode.DELEGATION_TOKEN_EXPIRED, -1)
    period_ms = settings.expiry_time_ms
    if renew_period_ms > 0:
        period_ms = min(period_ms, renew_period_ms)
    expiry_ms = min(found.max_timestamp_ms, _sum(now_ms, period_ms))
    return [token_record(_with_expiry(found, expiry_ms))], (ErrorCode.NONE, expiry_ms)


def expire_token(image: MetadataImage, settings: TokenSettings, principal: KafkaPrincipal,
                 hmac: bytes, expiry_period_ms: int, now_ms: int
                 ) -> tuple[list[Any], tuple[ErrorCode, int]]:
    """A negative period removes the token now; otherwise it expires now + the period (never
    past its maximum). By its owner or a renewer, as renewal."""
    found = _renewable(image, settings, principal, hmac)
    if isinstance(found, ErrorCode):
        return [], (found, -1)
    if expiry_period_ms < 0:
        return [_removal(found.token_id)], (ErrorCode.NONE, now_ms)
    if found.expired(now_ms):
        return [], (ErrorCode.DELEGATION_TOKEN_EXPIRED, -1)
    expiry_ms = min(found.max_timestamp_ms, _sum(now_ms, expiry_period_ms))
    return [token_record(_with_expiry(found, expiry_ms))], (ErrorCode.NONE, expiry_ms)


def _renewable(image: MetadataImage, settings: TokenSettings, principal: KafkaPrincipal,
               hmac: bytes) -> TokenInformation | ErrorCode:
    if not settings.enabled:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert settings.secret_key is not None
    token = token_for_hmac(image, settings.secret_key, hmac)
    if token is None:
        return ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    if not token.owner_or_renewer(principal):
        return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    return token


def _with_expiry(token: TokenInformation, expiry_ms: int) -> TokenInformation:
    return TokenInformation(token.token_id, token.owner, token.requester, token.renewers,
                            token.issue_timestamp_ms, token.max_timestamp_ms, expiry_ms)


def expired_token_removals(image: MetadataImage, now_ms: int) -> tuple[list[Any], None]:
    """A RemoveDelegationTokenRecord per token past its expiry or maximum lifetime."""
    records = []
    for token in image.delegation_tokens.values():
        if token.expired(now_ms):
            log.info("Delegation token expired for token: %s for owner: %s", token.token_id,
                     token.owner)
            records.append(_removal(token.token_id))
    return records, None


# -- the image (controller/image.py's appliers) and snapshots (controller/snapshot.py) ----------

def _principal(text: str) -> KafkaPrincipal:
    try:
        return KafkaPrincipal.parse(text)
    except ValueError:
        return KafkaPrincipal(USER_TYPE, text)  # a record from a tool that wrote a bare name


def apply_delegation_token(delta: MetadataDelta, record: Any) -> None:
    delta.delegation_tokens()[record.token_id] = TokenInformation(
        record.token_id, _principal(record.owner), _principal(record.requester),
        tuple(_principal(r) for r in record.renewers), record.issue_timestamp,
        record.max_timestamp, record.expiration_timestamp)


def remove_delegation_token(delta: MetadataDelta, record: Any) -> None:
    delta.delegation_tokens().pop(record.token_id, None)


APPLIERS = {
    "DelegationTokenRecord": apply_delegation_token,
    "RemoveDelegationTokenRecord": remove_delegation_token,
}


def delegation_token_records(image: MetadataImage) -> Iterator[Any]:
    """The image's tokens as records, by token id (equal images give equal snapshots)."""
    for token_id in sorted(image.delegation_tokens):
        yield token_record(image.delegation_tokens[token_id])
