"""Delegation tokens as metadata (KIP-48): Kafka's DelegationTokenControlManager rules for
creation, renewal, expiry and the sweep, the image the records build, and snapshots."""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.delegation_tokens import (
    TokenSettings,
    create_token,
    expire_token,
    expired_token_removals,
    renew_token,
)
from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.controller.snapshot import image_records
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.security.delegation_token import TokenInformation, token_hmac
from kafka_ext.security.principal import KafkaPrincipal

SETTINGS = TokenSettings("secret", max_lifetime_ms=10_000, expiry_time_ms=1_000)
ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
EVE = KafkaPrincipal("User", "eve")
NOW = 1_000_000
EMPTY = MetadataImage()


def _apply(image: MetadataImage, records: list[Any]) -> MetadataImage:
    return image.apply_all(image.offset + 1, [(type(r).__name__, r) for r in records])


def _created(image: MetadataImage = EMPTY, **kwargs: Any
             ) -> tuple[MetadataImage, TokenInformation, bytes]:
    args: dict[str, Any] = {"owner": ALICE, "requester": ALICE, "renewers": [BOB],
                            "max_lifetime_ms": -1, "now_ms": NOW, **kwargs}
    records, created = create_token(image, SETTINGS, **args)
    assert created.error == ErrorCode.NONE and created.token is not None
    return _apply(image, records), created.token, created.hmac


def test_created_token_expires_after_expiry_time_and_lives_at_most_max_lifetime() -> None:
    image, token, hmac = _created()
    assert image.delegation_tokens == {token.token_id: token}
    assert (token.owner, token.requester, token.renewers) == (ALICE, ALICE, (BOB,))
    assert (token.issue_timestamp_ms, token.expiry_timestamp_ms,
            token.max_timestamp_ms) == (NOW, NOW + 1_000, NOW + 10_000)
    assert hmac == token_hmac(token.token_id, "secret")


def test_requested_lifetime_is_capped_by_max_lifetime_and_bounds_the_expiry() -> None:
    _, short, _ = _created(max_lifetime_ms=500)
    assert (short.max_timestamp_ms, short.expiry_timestamp_ms) == (NOW + 500, NOW + 500)
    _, long, _ = _created(max_lifetime_ms=10**9)
    assert long.max_timestamp_ms == NOW + 10_000


def test_tokens_are_disabled_without_a_secret_key() -> None:
    disabled = TokenSettings(None)
    assert create_token(MetadataImage(), disabled, ALICE, ALICE, [], -1, NOW) == (
        [], (ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, None, b""))
    image, _, hmac = _created()
    assert renew_token(image, disabled, ALICE, hmac, -1, NOW)[1][0] == \
        ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert expire_token(image, disabled, ALICE, hmac, -1, NOW)[1][0] == \
        ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


def test_a_renewer_that_is_not_a_user_is_refused() -> None:
    records, created = create_token(MetadataImage(), SETTINGS, ALICE, ALICE,
                                    [KafkaPrincipal("Group", "g")], -1, NOW)
    assert (records, created.error) == ([], ErrorCode.INVALID_PRINCIPAL_TYPE)


def test_renewal_by_owner_or_renewer_moves_the_expiry_up_to_the_max() -> None:
    image, token, hmac = _created()
    records, (code, expiry) = renew_token(image, SETTINGS, BOB, hmac, 400, NOW + 900)
    assert (code, expiry) == (ErrorCode.NONE, NOW + 1_300)
    image = _apply(image, records)
    assert image.delegation_tokens[token.token_id].expiry_timestamp_ms == NOW + 1_300
    # A period over delegation.token.expiry.time.ms (or none) renews by that much.
    assert renew_token(image, SETTINGS, ALICE, hmac, -1, NOW + 1_000)[1] == (
        ErrorCode.NONE, NOW + 2_000)
    # Never past the maximum lifetime.
    short_image, _, short_hmac = _created(max_lifetime_ms=1_500)
    assert renew_token(short_image, SETTINGS, ALICE, short_hmac, -1, NOW + 900)[1] == (
        ErrorCode.NONE, NOW + 1_500)


def test_renewal_refusals_have_kafkas_codes() -> None:
    image, _, hmac = _created()
    assert renew_token(image, SETTINGS, EVE, hmac, -1, NOW)[1] == (
        ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, -1)
    assert renew_token(image, SETTINGS, ALICE, b"not-a-token", -1, NOW)[1] == (
        ErrorCode.DELEGATION_TOKEN_NOT_FOUND, -1)
    assert renew_token(image, SETTINGS, ALICE, hmac, -1, NOW + 1_001)[1] == (
        ErrorCode.DELEGATION_TOKEN_EXPIRED, -1)


def test_expire_with_negative_period_removes_the_token_now() -> None:
    image, token, hmac = _created()
    records, answer = expire_token(image, SETTINGS, BOB, hmac, -1, NOW + 5)
    assert answer == (ErrorCode.NONE, NOW + 5)
    assert [type(r).__name__ for r in records] == ["RemoveDelegationTokenRecord"]
    assert _apply(image, records).delegation_tokens == {}


def test_expire_with_a_period_sets_a_new_expiry() -> None:
    image, token, hmac = _created()
    records, answer = expire_token(image, SETTINGS, ALICE, hmac, 100, NOW)
    assert answer == (ErrorCode.NONE, NOW + 100)
    assert _apply(image, records).delegation_tokens[token.token_id].expiry_timestamp_ms == \
        NOW + 100
    assert expire_token(image, SETTINGS, EVE, hmac, 100, NOW)[1][0] == \
        ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    assert expire_token(image, SETTINGS, ALICE, hmac, 100, NOW + 2_000)[1][0] == \
        ErrorCode.DELEGATION_TOKEN_EXPIRED


def test_sweep_removes_only_tokens_past_expiry_or_max() -> None:
    image, first, _ = _created()
    image, second, _ = _created(image, now_ms=NOW + 500)
    # At NOW + 1_000 the first is at its last valid millisecond (Kafka compares with <).
    assert expired_token_removals(image, NOW + 1_000) == ([], None)
    records, _ = expired_token_removals(image, NOW + 1_001)
    assert [r.token_id for r in records] == [first.token_id]
    assert list(_apply(image, records).delegation_tokens) == [second.token_id]


def test_snapshot_records_rebuild_the_tokens() -> None:
    image, _, _ = _created()
    image, _, _ = _created(image, owner=BOB, renewers=[])
    rebuilt = MetadataImage().apply_all(0, [(type(r).__name__, r) for r in image_records(image)])
    assert rebuilt.delegation_tokens == image.delegation_tokens


async def test_controller_commits_token_changes_to_the_metadata_log(
        controller: QuorumController) -> None:
    created = await controller.change_delegation_tokens(
        lambda image: create_token(image, SETTINGS, ALICE, ALICE, [], -1, NOW))
    assert list(controller.image.delegation_tokens) == [created.token.token_id]
    answer = await controller.change_delegation_tokens(
        lambda image: expire_token(image, SETTINGS, ALICE, created.hmac, -1, NOW))
    assert answer == (ErrorCode.NONE, NOW) and controller.image.delegation_tokens == {}
