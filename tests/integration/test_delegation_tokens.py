"""Delegation tokens (KIP-48) on a real SASL_PLAINTEXT broker: the four APIs with Kafka's rules
and codes, SCRAM logins with `tokenauth=true`, restarts, and `kafka-ext delegation-tokens`.

SCRAM users alice (a super user), bob and carol come from `storage format --add-scram`; the ACL
authorizer is on. Token logins use scramp through kafka-ext's SaslClient, which sends Kafka's
`n,,n=<token id>,r=<nonce>,tokenauth=true`: neither librdkafka (confluent-kafka) nor kafka-python
can send that SCRAM extension, so they cannot log in with a token (a test shows the broker then
treats the token id as an unknown user); produce and fetch on a token's connection are raw
requests through kafka-ext's codec.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch, decode_all_batches
from kafka_ext.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from kafka_ext.security.sasl import SaslClient
from tests.integration.clients import create_topic, new_topic_name, wait_until
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SECRET = "token-signing-secret"
DAY_MS = 24 * 3600 * 1000
TOPIC_PREFIX = "tok-"
_reg = registry()


class TokenBroker:
    def __init__(self, broker: BrokerProcess, sasl_port: int) -> None:
        self.broker = broker
        self.sasl_port = sasl_port

    @property
    def sasl_address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def _format_and_serve(root: Path, secret: str | None) -> Iterator[TokenBroker]:
    sasl_port = free_port()
    broker = BrokerProcess(root / "data")
    broker.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:alice",
    })
    if secret is not None:
        broker.overrides["delegation.token.secret.key"] = secret
    properties = root / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in broker.overrides.items()))
    scram = [arg for user in ("alice", "bob", "carol") for mechanism in ("256", "512")
             for arg in ("--add-scram", f"SCRAM-SHA-{mechanism}=[name={user},"
                                        f"password={user}-secret]")]
    formatted = subprocess.run(
        [sys.executable, "-m", "kafka_ext", "storage", "format", "-c", str(properties),
         "-t", CLUSTER_ID, *scram], capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    yield from (TokenBroker(b, sasl_port) for b in serve_for_module(broker))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenBroker]:
    root = tmp_path_factory.mktemp("delegation-tokens")
    served = _format_and_serve(root, SECRET)
    server = next(served)
    # bob may write and read tok-* topics; nothing else.
    _acls(server, [(ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.WRITE),
                   (ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.READ)],
          pattern=PatternType.PREFIXED)
    yield server
    next(served, None)  # stops the broker (and checks how it ended)
    log = server.broker.log()
    for secret in ("bob-secret", "carol-secret", "alice-secret", SECRET):
        assert secret not in log, f"{secret} appears in the broker's log"


# -- raw requests ----------------------------------------------------------------------------------

def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _log_in(sock: socket.socket, mechanism: str, user: str, password: str,
            token_auth: bool = False) -> Any:
    """SaslHandshake v1 and SaslAuthenticate v2 rounds; the last SaslAuthenticate answer
    (an error one when the broker refuses)."""
    assert round_trip(sock, ApiKey.SASL_HANDSHAKE, 1, _reg.requests[ApiKey.SASL_HANDSHAKE].cls(
        mechanism=mechanism)).error_code == 0
    client = SaslClient(mechanism, user, password, token_auth=token_auth)
    token: bytes | None = client.first()
    answer = None
    while token is not None:
        answer = round_trip(sock, ApiKey.SASL_AUTHENTICATE, 2,
                            _reg.requests[ApiKey.SASL_AUTHENTICATE].cls(auth_bytes=token))
        if answer.error_code:
            return answer
        token = client.answer(bytes(answer.auth_bytes))
    return answer


def _user(tokens: TokenBroker, user: str, mechanism: str = "SCRAM-SHA-256") -> socket.socket:
    sock = _connect(tokens.sasl_port)
    assert _log_in(sock, mechanism, user, f"{user}-secret").error_code == 0
    return sock


def _token_login(tokens: TokenBroker, token_id: str, token_hmac: bytes,
                 mechanism: str = "SCRAM-SHA-512") -> tuple[socket.socket, Any]:
    sock = _connect(tokens.sasl_port)
    password = base64.b64encode(token_hmac).decode()
    return sock, _log_in(sock, mechanism, token_id, password, token_auth=True)


def _create(sock: socket.socket, owner: str | None = None, renewers: tuple[str, ...] = (),
            max_lifetime_ms: int = -1, version: int = 3) -> Any:
    Request = _reg.requests[ApiKey.CREATE_DELEGATION_TOKEN].cls
    owner_type, _, owner_name = (owner or "").partition(":")
    return round_trip(sock, ApiKey.CREATE_DELEGATION_TOKEN, version, Request(
        owner_principal_type=owner_type or None, owner_principal_name=owner_name or None,
        renewers=[Request.CreatableRenewers(principal_type=r.split(":")[0],
                                            principal_name=r.split(":")[1]) for r in renewers],
        max_lifetime_ms=max_lifetime_ms))


def _renew(sock: socket.socket, token_hmac: bytes, period_ms: int) -> Any:
    return round_trip(sock, ApiKey.RENEW_DELEGATION_TOKEN, 2,
                      _reg.requests[ApiKey.RENEW_DELEGATION_TOKEN].cls(
                          hmac=token_hmac, renew_period_ms=period_ms))


def _expire(sock: socket.socket, token_hmac: bytes, period_ms: int) -> Any:
    return round_trip(sock, ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                      _reg.requests[ApiKey.EXPIRE_DELEGATION_TOKEN].cls(
                          hmac=token_hmac, expiry_time_period_ms=period_ms))


def _describe(sock: socket.socket, owners: list[str] | None = None) -> Any:
    Request = _reg.requests[ApiKey.DESCRIBE_DELEGATION_TOKEN].cls
    return round_trip(sock, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, Request(owners=None if owners
                      is None else [Request.DescribeDelegationTokenOwner(
                          principal_type=o.split(":")[0], principal_name=o.split(":")[1])
                          for o in owners]))


def _described_ids(sock: socket.socket, owners: list[str] | None = None) -> set[str]:
    answer = _describe(sock, owners)
    assert answer.error_code == 0
    return {t.token_id for t in answer.tokens}


def _produce(sock: socket.socket, topic: str, values: list[bytes]) -> tuple[int, int]:
    """Produce v9 of `values` as one batch: (error code, base offset)."""
    Produce = _reg["ProduceRequest"].cls
    now_ms = int(time.time() * 1000)
    answer = round_trip(sock, ApiKey.PRODUCE, 9, Produce(
        transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            Produce.TopicProduceData(name=topic, partition_data=[
                Produce.PartitionProduceData(index=0, records=build_batch(
                    [Record(i, now_ms, None, v) for i, v in enumerate(values)]))])]))
    partition = answer.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset


def _fetch(sock: socket.socket, topic: str) -> list[tuple[int, bytes | None]]:
    Fetch = _reg["FetchRequest"].cls
    answer = round_trip(sock, ApiKey.FETCH, 12, Fetch(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[Fetch.FetchTopic(topic=topic, partitions=[
            Fetch.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                 log_start_offset=-1, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""))
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == 0
    return [(r.offset, r.value) for _, records in decode_all_batches(bytes(partition.records or b""))
            for r in records]


def _acls(tokens: TokenBroker, entries: list[tuple[ResourceType, str, AclOperation]],
          create: bool = True, pattern: PatternType = PatternType.LITERAL) -> None:
    """Create (or delete) ALLOW ACLs for User:bob over PLAINTEXT (a super
    user): through kafka-ext's codec, as confluent-kafka has no USER or DELEGATION_TOKEN
    resource type."""
    with _connect(tokens.broker.port) as sock:
        if create:
            Create = _reg.requests[ApiKey.CREATE_ACLS].cls
            answer = round_trip(sock, ApiKey.CREATE_ACLS, 2, Create(creations=[
                Create.AclCreation(resource_type=rtype, resource_name=name,
                                   resource_pattern_type=pattern,
                                   principal="User:bob", host="*", operation=op,
                                   permission_type=AclPermissionType.ALLOW)
                for rtype, name, op in entries]))
            assert [r.error_code for r in answer.results] == [0] * len(entries)
        else:
            Delete = _reg.requests[ApiKey.DELETE_ACLS].cls
            answer = round_trip(sock, ApiKey.DELETE_ACLS, 2, Delete(filters=[
                Delete.DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name,
                                        pattern_type_filter=pattern,
                                        principal_filter="User:bob", host_filter="*",
                                        operation=op, permission_type=AclPermissionType.ALLOW)
                for rtype, name, op in entries]))
            assert [r.error_code for r in answer.filter_results] == [0] * len(entries)


def _kafka_hmac(token_id: str) -> bytes:
    return hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()


# -- the tests -------------------------------------------------------------------------------------

def test_scram_user_creates_a_token_with_kafkas_lifetimes_and_hmac(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        created = _create(bob)
    assert created.error_code == ErrorCode.NONE
    assert (created.principal_type, created.principal_name) == ("User", "bob")
    assert (created.token_requester_principal_type,
            created.token_requester_principal_name) == ("User", "bob")
    assert str(uuid.UUID(created.token_id)) == created.token_id
    assert bytes(created.hmac) == _kafka_hmac(created.token_id)
    # delegation.token.expiry.time.ms (1 d) and delegation.token.max.lifetime.ms (7 d).
    assert created.expiry_timestamp_ms - created.issue_timestamp_ms == DAY_MS
    assert created.max_timestamp_ms - created.issue_timestamp_ms == 7 * DAY_MS
    with _user(tokens, "bob") as bob:
        short = _create(bob, max_lifetime_ms=60_000, version=1)
    assert short.error_code == 0
    assert short.max_timestamp_ms - short.issue_timestamp_ms == 60_000
    assert short.expiry_timestamp_ms == short.max_timestamp_ms


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_logs_in_with_tokenauth_and_acts_as_its_owner(tokens: TokenBroker,
                                                            mechanism: str) -> None:
    topic = new_topic_name(TOPIC_PREFIX + mechanism.lower())
    other = new_topic_name("not-bobs")
    create_topic(tokens.broker.bootstrap, topic)
    create_topic(tokens.broker.bootstrap, other)
    with _user(tokens, "bob") as bob:
        created = _create(bob)
    sock, answer = _token_login(tokens, created.token_id, bytes(created.hmac), mechanism)
    with sock:
        assert answer.error_code == 0
        # A token's session ends with the token (about a day from now).
        assert 0 < answer.session_lifetime_ms <= DAY_MS
        values = [b"via-token-%d" % i for i in range(5)]
        assert _produce(sock, topic, values) == (ErrorCode.NONE, 0)
        assert _fetch(sock, topic) == list(enumerate(values))
        # The connection is bob's: bob has no WRITE on other topics.
        assert _produce(sock, other, [b"x"])[0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_token_without_the_tokenauth_extension_is_an_unknown_user(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        created = _create(bob)
    password = base64.b64encode(bytes(created.hmac)).decode()
    with _connect(tokens.sasl_port) as sock:
        answer = _log_in(sock, "SCRAM-SHA-256", created.token_id, password)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # As librdkafka logs in: SCRAM with the token id as user name and no extension.
    admin = AdminClient({"bootstrap.servers": tokens.sasl_address,
                         "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": created.token_id, "sasl.password": password})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=10)


def test_token_and_plaintext_connections_may_not_manage_tokens(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        created = _create(bob)
    token_hmac = bytes(created.hmac)
    sock, answer = _token_login(tokens, created.token_id, token_hmac)
    plaintext = _connect(tokens.broker.port)
    with sock, plaintext:
        assert answer.error_code == 0
        for conn in (sock, plaintext):
            assert _create(conn).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            assert _renew(conn, token_hmac, -1).error_code == \
                ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            assert _expire(conn, token_hmac, -1).error_code == \
                ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            assert _describe(conn).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_creating_for_another_owner_needs_create_tokens_on_that_user(
        tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        refused = _create(bob, owner="User:carol")
        assert refused.error_code == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        assert (refused.principal_name, refused.token_requester_principal_name) == (
            "carol", "bob")
        assert _create(bob, renewers=("Group:ops",)).error_code == \
            ErrorCode.INVALID_PRINCIPAL_TYPE
    with _user(tokens, "alice") as alice:  # a super user may
        for_carol = _create(alice, owner="User:carol")
    assert for_carol.error_code == 0
    assert (for_carol.principal_name, for_carol.token_requester_principal_name) == (
        "carol", "alice")
    grant = [(ResourceType.USER, "User:carol", AclOperation.CREATE_TOKENS)]
    _acls(tokens, grant)
    with _user(tokens, "bob") as bob:
        granted = wait_until(lambda: (a := _create(bob, owner="User:carol")).error_code == 0
                             and a, 30, "bob allowed to create carol's tokens")
    assert (granted.principal_name, granted.token_requester_principal_name) == ("carol", "bob")
    _acls(tokens, grant, create=False)


def test_renew_by_owner_or_renewer_with_kafkas_refusals(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        created = _create(bob, renewers=("User:carol",))
        token_hmac = bytes(created.hmac)
        # Owner: a renewal of at most delegation.token.expiry.time.ms, before the maximum.
        renewed = _renew(bob, token_hmac, -1)
        assert renewed.error_code == 0
        assert created.expiry_timestamp_ms <= renewed.expiry_timestamp_ms <= \
            created.max_timestamp_ms
        assert _renew(bob, b"no such token", -1).error_code == \
            ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    with _user(tokens, "carol", "SCRAM-SHA-512") as carol:  # a renewer
        shorter = _renew(carol, token_hmac, 60_000)
        assert shorter.error_code == 0
        assert shorter.expiry_timestamp_ms < renewed.expiry_timestamp_ms
    with _user(tokens, "alice") as alice:  # a super user is neither owner nor renewer
        assert _renew(alice, token_hmac, -1).error_code == \
            ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
        assert _expire(alice, token_hmac, -1).error_code == \
            ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH


def test_expired_tokens_no_longer_log_in(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        removed = _create(bob)
        # A negative period removes the token at once.
        expired = _expire(bob, bytes(removed.hmac), -1)
        assert expired.error_code == 0 and expired.expiry_timestamp_ms > 0
        assert removed.token_id not in _described_ids(bob)
        assert _renew(bob, bytes(removed.hmac), -1).error_code == \
            ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        # A short period: expired once it is over (not yet swept: DELEGATION_TOKEN_EXPIRED).
        soon = _create(bob)
        moved = _expire(bob, bytes(soon.hmac), 1)
        assert moved.error_code == 0 and moved.expiry_timestamp_ms <= soon.expiry_timestamp_ms
        # Polled with logins, which change nothing (a renewal in time would renew it).
        wait_until(lambda: _refused_login(tokens, soon), 30, "the token to expire")
        assert _renew(bob, bytes(soon.hmac), -1).error_code == \
            ErrorCode.DELEGATION_TOKEN_EXPIRED
        assert _expire(bob, bytes(soon.hmac), 10).error_code == \
            ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert _refused_login(tokens, removed)


def _refused_login(tokens: TokenBroker, token: Any) -> bool:
    sock, answer = _token_login(tokens, token.token_id, bytes(token.hmac))
    with sock:
        return bool(answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED)


def test_describe_shows_own_renewable_and_permitted_tokens(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        bobs = _create(bob, renewers=("User:carol",))
    with _user(tokens, "alice") as alice:
        carols = _create(alice, owner="User:carol")
        alices = _create(alice)
    mine = {bobs.token_id, carols.token_id, alices.token_id}
    with _user(tokens, "bob") as bob:
        assert _described_ids(bob) & mine == {bobs.token_id}
        # Owners filter on owner or renewer; bob sees only what he may see of them.
        assert _described_ids(bob, ["User:carol"]) & mine == {bobs.token_id}
        assert _described_ids(bob, []) == set()  # an empty owner list asks for nothing
        described = [t for t in _describe(bob).tokens if t.token_id == bobs.token_id]
        assert [(t.principal_name, t.token_requester_principal_name, bytes(t.hmac),
                 [(r.principal_type, r.principal_name) for r in t.renewers],
                 t.issue_timestamp, t.expiry_timestamp, t.max_timestamp)
                for t in described] == [
            ("bob", "bob", bytes(bobs.hmac), [("User", "carol")], bobs.issue_timestamp_ms,
             bobs.expiry_timestamp_ms, bobs.max_timestamp_ms)]
    with _user(tokens, "carol") as carol:  # the owner of one and the renewer of the other
        assert _described_ids(carol) & mine == {bobs.token_id, carols.token_id}
    with _user(tokens, "alice") as alice:  # a super user is authorized for every token
        assert _described_ids(alice, ["User:carol"]) & mine == {bobs.token_id, carols.token_id}
    grants = [(ResourceType.USER, "User:carol", AclOperation.DESCRIBE_TOKENS),
              (ResourceType.DELEGATION_TOKEN, alices.token_id, AclOperation.DESCRIBE)]
    _acls(tokens, grants)
    with _user(tokens, "bob") as bob:
        wait_until(lambda: _described_ids(bob) & mine == mine, 30,
                   "bob's DESCRIBE_TOKENS and DESCRIBE grants")
    _acls(tokens, grants, create=False)


def _command_config(tmp_path: Path, user: str | None) -> Path:
    path = tmp_path / f"{user or 'plaintext'}.properties"
    if user is None:
        path.write_text("security.protocol=PLAINTEXT\n")
    else:
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram."
                        f'ScramLoginModule required username="{user}" '
                        f'password="{user}-secret";\n')
    return path


def _tool(bootstrap: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafka_ext", "delegation-tokens",
                           "--bootstrap-server", bootstrap, "--command-config", str(config),
                           *args], capture_output=True, text=True, timeout=60)


def _table(output: str) -> list[list[str]]:
    """The TokenDetails rows after the header line, split on whitespace."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("TOKENID"))
    assert lines[header].split() == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS",
                                     "ISSUEDATE", "EXPIRYDATE", "MAXDATE"]
    return [line.split() for line in lines[header + 1:]]


def test_the_tool_creates_describes_renews_and_expires(tokens: TokenBroker,
                                                       tmp_path: Path) -> None:
    bob = _command_config(tmp_path, "bob")
    created = _tool(tokens.sasl_address, bob, "--create", "--max-life-time-period", "-1",
                    "--renewer-principal", "User:carol")
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert lines[0] == ("Calling create token operation with renewers :[User:carol] , "
                        "max-life-time-period :-1")
    assert lines[1].startswith("Created delegation token with tokenId : ")
    token_id = lines[1].rsplit(" ", 1)[1]
    [row] = _table(created.stdout)
    assert row[:5] == [token_id, base64.b64encode(_kafka_hmac(token_id)).decode(), "User:bob",
                       "User:bob", "[User:carol]"]
    token_hmac = row[1]
    # The token logs in with what the tool printed.
    sock, answer = _token_login(tokens, token_id, base64.b64decode(token_hmac))
    with sock:
        assert answer.error_code == 0
    described = _tool(tokens.sasl_address, bob, "--describe", "--owner-principal", "User:bob")
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith("Calling describe token operation for owners: "
                                       "[User:bob]\nTotal number of tokens : ")
    assert [r[0] for r in _table(described.stdout) if r[0] == token_id] == [token_id]
    renewed = _tool(tokens.sasl_address, bob, "--renew", "--hmac", token_hmac,
                    "--renew-time-period", "-1")
    assert renewed.returncode == 0, renewed.stderr
    assert renewed.stdout.startswith(f"Calling renew token operation with hmac :{token_hmac} , "
                                     "renew-time-period :-1\nCompleted renew operation. New "
                                     "expiry date : ")
    expired = _tool(tokens.sasl_address, bob, "--expire", "--hmac", token_hmac,
                    "--expiry-time-period", "-1")
    assert expired.returncode == 0, expired.stderr
    assert "Completed expire operation. New expiry date : " in expired.stdout
    after = _tool(tokens.sasl_address, bob, "--describe")
    assert after.stdout.startswith("Calling describe token operation for current user.\n")
    assert token_id not in after.stdout
    # Refusals: Kafka's exception and message on stderr, exit 1; usage errors exit 2.
    plaintext = _tool(tokens.broker.bootstrap, _command_config(tmp_path, None), "--describe")
    assert plaintext.returncode == 1
    assert plaintext.stderr.strip() == (
        "org.apache.kafka.common.errors.UnsupportedByAuthenticationException: Delegation Token "
        "requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token "
        "authenticated channels.")
    gone = _tool(tokens.sasl_address, bob, "--renew", "--hmac", token_hmac,
                 "--renew-time-period", "-1")
    assert (gone.returncode, gone.stderr.strip()) == (
        1, "org.apache.kafka.common.errors.DelegationTokenNotFoundException: Delegation Token "
           "is not found on server.")
    assert _tool(tokens.sasl_address, bob, "--create").returncode == 2
    assert _tool(tokens.sasl_address, bob, "--create", "--describe").returncode == 2


def test_tokens_survive_a_restart(tokens: TokenBroker) -> None:
    with _user(tokens, "bob") as bob:
        created = _create(bob)
        before = [t for t in _describe(bob).tokens if t.token_id == created.token_id]
    tokens.broker.restart()
    sock, answer = _token_login(tokens, created.token_id, bytes(created.hmac))
    with sock:
        assert answer.error_code == 0
    with _user(tokens, "bob") as bob:
        after = [t for t in _describe(bob).tokens if t.token_id == created.token_id]
    assert [(t.expiry_timestamp, t.max_timestamp, bytes(t.hmac)) for t in after] == \
        [(t.expiry_timestamp, t.max_timestamp, bytes(t.hmac)) for t in before]


def test_without_a_secret_key_every_token_api_is_disabled(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    served = _format_and_serve(tmp_path_factory.mktemp("no-secret"), None)
    server = next(served)
    try:
        with _user(server, "bob") as bob:
            assert _create(bob).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert _renew(bob, b"x", -1).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert _expire(bob, b"x", -1).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert _describe(bob).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    finally:
        next(served, None)
