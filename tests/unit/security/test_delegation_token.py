"""A delegation token's HMAC and SCRAM logins, as Kafka computes them (KIP-48)."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramMechanism

from kafka_ext.security.delegation_token import hmac_password, token_hmac, token_scram_credential
from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.security.sasl import (
    AuthenticationFailed,
    SaslClient,
    ScramServer,
    TokenLogin,
    split_scram_extensions,
)

TOKEN_ID = "d5d0e3e4-8a1c-4b7e-9a57-1f6f0e1c2b3a"
SECRET = "kafka-ext-secret"
# `printf %s TOKEN_ID | openssl dgst -sha512 -hmac SECRET -binary | base64`: Kafka's
# HmacSHA512 of the token id keyed by the secret key's UTF-8 bytes.
EXPECTED_HMAC_BASE64 = ("U8KBNGHqXUAxg7FIKXuOR7tJwyYl05O33oq6oOGw+d6EsGCLcGbOGSpkqM1c8vk4Z9I6"
                        "Z3SJ8LZyT98xTmp00A==")
OWNER = KafkaPrincipal("User", "alice")


def test_hmac_is_hmac_sha512_of_the_token_id_under_the_secret_key() -> None:
    digest = token_hmac(TOKEN_ID, SECRET)
    assert len(digest) == 64
    assert hmac_password(digest) == EXPECTED_HMAC_BASE64
    assert base64.b64decode(EXPECTED_HMAC_BASE64) == digest


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_credential_is_scram_of_the_base64_hmac_at_minimum_iterations(
        mechanism: str) -> None:
    salt = b"0123456789abcdef"
    credential = token_scram_credential(mechanism, token_hmac(TOKEN_ID, SECRET), salt)
    # scramp's own derivation (an independent RFC 5802 implementation) of the same password.
    expected = ScramMechanism(mechanism).make_auth_info(EXPECTED_HMAC_BASE64, 4096, salt)
    assert (credential.salt, credential.stored_key, credential.server_key,
            credential.iterations) == expected


def test_fresh_salts_make_different_credentials_for_one_token() -> None:
    digest = token_hmac(TOKEN_ID, SECRET)
    first = token_scram_credential("SCRAM-SHA-256", digest)
    second = token_scram_credential("SCRAM-SHA-256", digest)
    assert first.salt != second.salt and first.stored_key != second.stored_key


def test_split_extensions_takes_kafkas_word_keys_after_the_nonce() -> None:
    bare, extensions = split_scram_extensions("n,,n=tok,r=abc,tokenauth=true")
    assert (bare, extensions) == ("n,,n=tok,r=abc", {"tokenauth": "true"})
    assert split_scram_extensions("n,,n=tok,r=abc") == ("n,,n=tok,r=abc", {})


def _server(mechanism: str, login: TokenLogin | None) -> ScramServer:
    return ScramServer(mechanism, lambda user, m: None, lambda token_id, m: login)


def _exchange(server: ScramServer, client: SaslClient) -> None:
    token: bytes | None = client.first()
    while token is not None and not server.complete:
        token = client.answer(server.evaluate(token))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_login_with_tokenauth_extension_is_the_owners(mechanism: str) -> None:
    digest = token_hmac(TOKEN_ID, SECRET)
    login = TokenLogin(token_scram_credential(mechanism, digest), OWNER, 2**62)
    server = _server(mechanism, login)
    _exchange(server, SaslClient(mechanism, TOKEN_ID, hmac_password(digest), token_auth=True))
    assert server.complete and server.principal == OWNER and server.token == login


def test_token_login_without_the_extension_is_checked_as_a_user() -> None:
    digest = token_hmac(TOKEN_ID, SECRET)
    login = TokenLogin(token_scram_credential("SCRAM-SHA-256", digest), OWNER, 2**62)
    with pytest.raises(AuthenticationFailed):
        _exchange(_server("SCRAM-SHA-256", login),
                  SaslClient("SCRAM-SHA-256", TOKEN_ID, hmac_password(digest)))


def test_token_login_with_a_wrong_hmac_fails() -> None:
    login = TokenLogin(token_scram_credential("SCRAM-SHA-512", token_hmac(TOKEN_ID, SECRET)),
                       OWNER, 2**62)
    wrong = hmac_password(token_hmac(TOKEN_ID, "another-secret"))
    with pytest.raises(AuthenticationFailed):
        _exchange(_server("SCRAM-SHA-512", login),
                  SaslClient("SCRAM-SHA-512", TOKEN_ID, wrong, token_auth=True))


def test_unknown_token_fails_at_the_first_message() -> None:
    server = _server("SCRAM-SHA-256", None)
    client = SaslClient("SCRAM-SHA-256", TOKEN_ID, "x", token_auth=True)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(client.first())
