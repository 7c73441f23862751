"""Delegation tokens (KIP-48) as credentials: their HMAC and the SCRAM logins they give.

A token is its id (a UUID string) and its HMAC, HmacSHA512 of the id under
`delegation.token.secret.key`, as Kafka's DelegationTokenManager computes it. The HMAC is never
stored: every node recomputes it from the id, which is why the key must be the same on every
node. A client logs in with SCRAM (either mechanism) as user = token id, password = the HMAC in
base64 (what Kafka's tools print), with the `tokenauth=true` extension in its client-first
message; the principal is then the token's owner. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.security.sasl import (
    MIN_SCRAM_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
    salted_password,
)


@dataclass(frozen=True, slots=True)
class TokenInformation:
    """One token as DelegationTokenRecord carries it (Kafka's TokenInformation); timestamps are
    wall-clock ms. Immutable: a renewal is a new record, so a new TokenInformation."""

    token_id: str
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: tuple[KafkaPrincipal, ...]
    issue_timestamp_ms: int
    max_timestamp_ms: int
    expiry_timestamp_ms: int

    def owner_or_renewer(self, principal: KafkaPrincipal) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        """Past its expiry or its maximum lifetime (Kafka compares with `<`, so the last
        millisecond still counts)."""
        return self.expiry_timestamp_ms < now_ms or self.max_timestamp_ms < now_ms


def token_hmac(token_id: str, secret_key: str) -> bytes:
    """HmacSHA512 of the token id's UTF-8 bytes keyed by the secret key's UTF-8 bytes."""
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def hmac_password(token_hmac_bytes: bytes) -> str:
    """The SCRAM password of a token: its HMAC in standard base64 with padding."""
    return base64.b64encode(token_hmac_bytes).decode()


def token_scram_credential(mechanism: str, token_hmac_bytes: bytes,
                           salt: bytes | None = None) -> ScramCredential:
    """The SCRAM credential a node keeps for a token, as Kafka's ScramFormatter derives it:
    the base64 HMAC as password, a fresh random salt, the mechanism's minimum iterations."""
    salt = os.urandom(32) if salt is None else salt
    salted = salted_password(mechanism, hmac_password(token_hmac_bytes), salt,
                             MIN_SCRAM_ITERATIONS)
    return credential_from_salted_password(mechanism, salted, salt, MIN_SCRAM_ITERATIONS)

