"""SASL mechanisms as the broker serves them and as this node uses them towards other nodes.

PLAIN (RFC 4616) checks the `user_NAME="password"` entries of the listener's JAAS config, as
Kafka's PlainServerCallbackHandler does. SCRAM-SHA-256/512 (RFC 5802/7677) is `scramp`'s
exchange over the credentials kept as metadata records: only the salt, stored key, server key and
iteration count are ever stored, never a password. A SCRAM login whose client-first message
carries Kafka's `tokenauth=true` extension is a delegation token's (KIP-48): the user name is
the token id and the principal is the token's owner (security/delegation_token.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

from scramp import ScramClient, ScramException, ScramMechanism

from kafka_ext.security.principal import USER_TYPE, KafkaPrincipal

PLAIN = "PLAIN"
# Kafka's ScramMechanism type numbers, as records and the SCRAM admin APIs carry them.
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES = {number: name for name, number in SCRAM_MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# Kafka's bounds on a SCRAM credential's iterations (ScramMechanism.minIterations/maxIterations).
MIN_SCRAM_ITERATIONS = 4096
MAX_SCRAM_ITERATIONS = 16384
DEFAULT_SCRAM_ITERATIONS = 4096


class AuthenticationFailed(Exception):
    """The client's credentials were refused; the message is safe to send back."""


class ScramCredential(NamedTuple):
    """What a broker keeps to check a SCRAM login (UserScramCredentialRecord's fields)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class TokenLogin(NamedTuple):
    """What a delegation-token login is checked against and logs in as."""

    credential: ScramCredential
    owner: KafkaPrincipal
    expiry_timestamp_ms: int  # wall-clock ms


# The SCRAM extension marking a delegation-token login (Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG).
TOKEN_AUTH_EXTENSION = "tokenauth"


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): what a client sends in AlterUserScramCredentials instead of the password."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism]().name, password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored and server keys of a salted password (RFC 5802 §3)."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return ScramCredential(salt, digest(client_key).digest(), server_key, iterations)


# -- JAAS ---------------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s;]+)')


def parse_jaas_options(text: str) -> dict[str, str]:
    """The options of a one-module JAAS entry: `Module required key="value" ...;`.
    ValueError when the entry is not of that shape (the message never repeats a value)."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2 or parts[1] not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError("a JAAS config must read `<LoginModule class> required key=\"value\" ...;`")
    body = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    pos = 0
    while True:
        match = _JAAS_OPTION.match(body, pos)
        if match is None:
            break
        value = match.group(3) if match.group(3) is not None else match.group(2)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = match.end()
    if body[pos:].strip() not in (";", ""):
        raise ValueError(f"a JAAS config option near {body[pos:pos + 20].split('=')[0]!r} "
                         "is not of the form key=\"value\"")
    return options


def plain_users(jaas_options: Mapping[str, str]) -> dict[str, str]:
    """PLAIN's accepted logins: the `user_NAME="password"` options of a JAAS entry."""
    return {key[len("user_"):]: value for key, value in jaas_options.items()
            if key.startswith("user_")}


# -- the broker's side -----------------------------------------------------------------------------

class SaslServer:
    """One SASL exchange on one connection: `evaluate` each client token until `complete`.
    `token` is set when the login was a delegation token's."""

    mechanism: str
    complete: bool
    username: str | None
    token: TokenLogin | None = None

    @property
    def principal(self) -> KafkaPrincipal:
        """Who the completed login is: the user, or a token's owner."""
        assert self.username is not None
        return self.token.owner if self.token is not None else KafkaPrincipal(USER_TYPE,
                                                                              self.username)

    def evaluate(self, token: bytes) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError


class PlainServer(SaslServer):
    """PLAIN: one token `authzid NUL authcid NUL password`, answered with nothing."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                       f"{len(parts)}")
        authzid, authcid, password = (p.decode("utf-8", "replace") for p in parts)
        if not authcid:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != authcid:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username")
        expected = self._users.get(authcid)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.complete = True
        self.username = authcid
        return b""


class ScramServer(SaslServer):
    """SCRAM: client-first -> server-first, client-final -> server-final (two rounds)."""

    def __init__(self, mechanism: str,
                 credential_of: Callable[[str, str], ScramCredential | None],
                 token_of: Callable[[str, str], TokenLogin | None] = lambda _id, _m: None
                 ) -> None:
        self.mechanism = mechanism
        self._credential_of = credential_of
        self._token_of = token_of
        self._token_auth = False
        self._exchange = ScramMechanism(mechanism).make_server(self._auth_info)
        self._round = 0
        self._user: str | None = None
        self.complete = False
        self.username = None
        self.token = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        credential = None
        if self._token_auth:
            self.token = self._token_of(username, self.mechanism)
            credential = self.token.credential if self.token is not None else None
        else:
            credential = self._credential_of(username, self.mechanism)
        if credential is None:
            raise AuthenticationFailed("Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism {self.mechanism}")
        self._user = username
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._round == 0:
                self._round = 1
                bare_message, extensions = split_scram_extensions(message)
                self._token_auth = extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"
                self._exchange.set_client_first(bare_message)
                # The client's proof covers its whole client-first-bare, extensions included
                # (Kafka's ClientFirstMessage.clientFirstMessageBare): scramp must sign that.
                self._exchange.client_first_bare += message[len(bare_message):]
                return self._exchange.get_server_first().encode()
            if self._round == 1:
                self._round = 2
                self._exchange.set_client_final(message)
                answer = self._exchange.get_server_final().encode()
                self.complete = True
                self.username = self._user
                return answer
        except (ScramException, UnicodeDecodeError, ValueError, TypeError, KeyError,
                IndexError) as exc:
            if isinstance(exc, AuthenticationFailed):
                raise
            raise AuthenticationFailed("Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism {self.mechanism}"
                                       ) from None
        raise AuthenticationFailed(f"unexpected SASL token after a completed {self.mechanism} "
                                   "exchange")


def split_scram_extensions(client_first: str) -> tuple[str, dict[str, str]]:
    """A SCRAM client-first message without the extensions after its nonce, and those
    extensions. Kafka's keys are words (`tokenauth=true`), which RFC 5802 parsers such as
    scramp refuse, so they come off before scramp parses the rest."""
    parts = client_first.split(",")
    # The gs2 header is the first two parts; then n=..., r=..., then any extensions.
    nonce_at = next((i for i in range(3, len(parts)) if parts[i].startswith("r=")), None)
    if nonce_at is None:
        return client_first, {}
    extensions: dict[str, str] = {}
    for part in parts[nonce_at + 1:]:
        key, sep, value = part.partition("=")
        if not sep:
            return client_first, {}  # malformed: scramp refuses the whole message
        extensions[key] = value
    return ",".join(parts[:nonce_at + 1]), extensions


# -- this node's side, towards other nodes ------------------------------------------------------

class SaslClient:
    """The client half of PLAIN or SCRAM: `first()`, then `answer(challenge)` until done."""

    def __init__(self, mechanism: str, username: str, password: str,
                 token_auth: bool = False) -> None:
        """`token_auth`: log in with a delegation token (SCRAM only): username = token id,
        password = its base64 HMAC, with Kafka's `tokenauth=true` extension."""
        self.mechanism = mechanism
        self._username, self._password = username, password
        self._scram = (ScramClient([mechanism], username, password)
                       if mechanism in SCRAM_MECHANISMS else None)
        self._extensions = f",{TOKEN_AUTH_EXTENSION}=true" if token_auth else ""
        self._sent_final = False

    def first(self) -> bytes:
        if self._scram is None:
            return b"\0" + self._username.encode() + b"\0" + self._password.encode()
        first = self._scram.get_client_first() + self._extensions
        # As Kafka's client: the extensions belong to the client-first-bare the proof signs.
        self._scram.client_first_bare += self._extensions
        return first.encode()

    def answer(self, challenge: bytes) -> bytes | None:
        """The next token for the server's `challenge`; None once the exchange is complete.
        AuthenticationFailed when the server's final message does not prove it knows the key."""
        if self._scram is None:
            return None
        try:
            if not self._sent_final:
                self._sent_final = True
                self._scram.set_server_first(challenge.decode())
                return self._scram.get_client_final().encode()
            self._scram.set_server_final(challenge.decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise AuthenticationFailed(f"{self.mechanism} exchange failed: {exc}") from None
        return None


# -- credentials as the tools write them ---------------------------------------------------------

_SCRAM_SPEC = re.compile(r"\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*$")


def parse_scram_spec(text: str) -> tuple[str, dict[str, str]]:
    """`SCRAM-SHA-256=[name=alice,password=alice-secret]` (kafka-storage.sh --add-scram, and
    kafka-configs.sh --add-config without the name) -> (mechanism, {key: value}); values may be
    double-quoted. ValueError names the problem, never a value."""
    match = _SCRAM_SPEC.match(text)
    if match is None:
        raise ValueError("a SCRAM credential reads SCRAM-SHA-256=[key=value,...] or "
                         "SCRAM-SHA-512=[key=value,...]")
    fields: dict[str, str] = {}
    for part in re.findall(r'(?:[^,"]|"[^"]*")+', match.group(2)):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"SCRAM credential entry {key.strip()!r} has no value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        fields[key.strip().lower()] = value
    return match.group(1), fields


def credential_from_spec(mechanism: str, fields: dict[str, str]) -> ScramCredential:
    """A credential from a spec's password (fresh salt) or salt + saltedpassword (base64)."""
    iterations = int(fields.get("iterations", DEFAULT_SCRAM_ITERATIONS))
    if not MIN_SCRAM_ITERATIONS <= iterations <= MAX_SCRAM_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_SCRAM_ITERATIONS} and "
                         f"{MAX_SCRAM_ITERATIONS}")
    if "password" in fields:
        salt = base64.b64decode(fields["salt"]) if "salt" in fields else os.urandom(32)
        salted = salted_password(mechanism, fields["password"], salt, iterations)
    elif "saltedpassword" in fields and "salt" in fields:
        salt, salted = base64.b64decode(fields["salt"]), base64.b64decode(fields["saltedpassword"])
    else:
        raise ValueError("a SCRAM credential needs password=..., or salt=... with "
                         "saltedpassword=...")
    return credential_from_salted_password(mechanism, salted, salt, iterations)
