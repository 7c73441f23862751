"""TLS, SASL and ACLs on one broker, with stock clients and raw sockets (docs/security.md).

One broker serves every kind of listener: PLAINTEXT, SSL with mutual TLS required, SASL_SSL and
SASL_PLAINTEXT (PLAIN from the JAAS config, SCRAM from credentials made by `storage format
--add-scram` and by AlterUserScramCredentials), and a SASL_PLAINTEXT listener whose sessions
last 1.5 s (KIP-368). Certificates are made by the test (tests/tls_material.py). The ACL
authorizer is on: every user is a super user but eve (given ACLs) and frank (given none).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer

from kafka_ext.client.probe import read_response
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.framing import SIZE, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import SaslClient
from tests.debian_tools import debian_tool
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module
from tests.integration.test_partition_reduction_clients import _kafkajs_modules
from tests.tls_material import TlsMaterial, make_tls_material

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret" user_eve="eve-secret" '
        'user_frank="frank-secret";')
# Everyone but eve and frank may do anything: the ACL tests are theirs.
SUPER_USERS = "User:ANONYMOUS;User:alice;User:bob;User:carol;User:dave;User:client"
REAUTH_MS = 1500
JS_SCRIPT = Path(__file__).parent / "js" / "secure_round_trip.js"
_reg = registry()


class SecureBroker:
    """The broker and where each of its listeners is."""

    def __init__(self, broker: BrokerProcess, tls: TlsMaterial, ports: dict[str, int]) -> None:
        self.broker = broker
        self.tls = tls
        self.ports = ports

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    root = tmp_path_factory.mktemp("security")
    tls = make_tls_material(root / "certs")
    ports = {name: free_port() for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT", "REAUTH")}
    data = root / "data"
    broker = BrokerProcess(data)
    listeners = ",".join([f"PLAINTEXT://127.0.0.1:{broker.port}",
                          *(f"{name}://127.0.0.1:{port}" for name, port in ports.items())])
    broker.overrides.update({
        "listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "ssl.keystore.location": str(tls.broker.keystore),
        "ssl.truststore.location": str(tls.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "sasl.jaas.config": JAAS,
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "50",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": SUPER_USERS,
    })
    properties = root / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in broker.overrides.items()))
    formatted = subprocess.run(
        [sys.executable, "-m", "kafka_ext", "storage", "format", "-c", str(properties),
         "-t", CLUSTER_ID, "--add-scram", "SCRAM-SHA-256=[name=carol,password=carol-secret]",
         "--add-scram", "SCRAM-SHA-512=[name=carol,password=carol-secret,iterations=8192]"],
        capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    yield from (SecureBroker(b, tls, ports) for b in serve_for_module(broker))
    log = broker.log()
    for secret in ("alice-secret", "bob-secret", "carol-secret", "dave-secret", "wrong-secret",
                   "eve-secret", "frank-secret"):
        assert secret not in log, f"{secret} appears in the broker's log"


def _ssl(secure: SecureBroker) -> dict[str, str]:
    return {"ssl.ca.location": str(secure.tls.ca)}


def _sasl(secure: SecureBroker, listener: str, mechanism: str, user: str,
          password: str) -> dict[str, str]:
    config = {"bootstrap.servers": secure.address(listener), "security.protocol": listener,
              "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if listener == "SASL_SSL":
        config.update(_ssl(secure))
    return config


def _mutual_tls(secure: SecureBroker, cert: Any = None) -> dict[str, str]:
    pem = cert or secure.tls.client
    return {"bootstrap.servers": secure.address("SSL"), "security.protocol": "SSL",
            **_ssl(secure), "ssl.certificate.location": str(pem.cert),
            "ssl.key.location": str(pem.key)}


def _round_trip(config: dict[str, str], topic: str, count: int = 20) -> None:
    """Produce `count` values with confluent-kafka, read them back in a group: all of them,
    in order, at offsets 0..count-1."""
    producer = Producer({**config, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"{topic}-{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append((message.offset(), message.value()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == [(i, f"{topic}-{i}".encode()) for i in range(count)]


# -- stock clients with the right credentials ---------------------------------------------------

@pytest.mark.parametrize("case", ["mutual-tls", "sasl-ssl-plain", "sasl-ssl-scram-256",
                                  "sasl-plaintext-scram-512"])
def test_confluent_kafka_round_trips_on_every_secured_listener(secure: SecureBroker,
                                                               case: str) -> None:
    config = {
        "mutual-tls": lambda: _mutual_tls(secure),
        "sasl-ssl-plain": lambda: _sasl(secure, "SASL_SSL", "PLAIN", "alice", "alice-secret"),
        "sasl-ssl-scram-256": lambda: _sasl(secure, "SASL_SSL", "SCRAM-SHA-256", "carol",
                                            "carol-secret"),
        "sasl-plaintext-scram-512": lambda: _sasl(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512",
                                                  "carol", "carol-secret"),
    }[case]()
    _round_trip(config, f"secure-{case}")


def test_transactions_over_sasl_ssl_scram(secure: SecureBroker) -> None:
    config = _sasl(secure, "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret")
    producer = Producer({**config, "transactional.id": "secure-txn"})
    producer.init_transactions(20)
    for commit in (False, True):
        producer.begin_transaction()
        for i in range(5):
            producer.produce("secure-txn", f"{'kept' if commit else 'aborted'}-{i}".encode())
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    consumer = Consumer({**config, "group.id": "secure-txn-reader", "auto.offset.reset":
                         "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["secure-txn"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [f"kept-{i}".encode() for i in range(5)]


def test_kafka_python_and_aiokafka_over_sasl_ssl(secure: SecureBroker) -> None:
    context = ssl.create_default_context(cafile=str(secure.tls.ca))
    common = {"bootstrap_servers": secure.address("SASL_SSL"), "security_protocol": "SASL_SSL",
              "ssl_context": context}
    producer = KafkaProducer(**common, sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="carol", sasl_plain_password="carol-secret")
    offsets = [producer.send("secure-kp", f"kp-{i}".encode()).get(20).offset for i in range(10)]
    producer.close()
    assert offsets == list(range(10))
    consumer = KafkaConsumer("secure-kp", **common, sasl_mechanism="PLAIN",
                             sasl_plain_username="bob", sasl_plain_password="bob-secret",
                             group_id="kp-group", auto_offset_reset="earliest")
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(m.offset, m.value) for m in records]
    consumer.close()
    assert got == [(i, f"kp-{i}".encode()) for i in range(10)]

    import asyncio

    async def aiokafka_round_trip() -> list[tuple[int, bytes]]:
        aio_common = {"bootstrap_servers": secure.address("SASL_SSL"),
                      "security_protocol": "SASL_SSL",
                      "ssl_context": create_ssl_context(cafile=str(secure.tls.ca)),
                      "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "carol",
                      "sasl_plain_password": "carol-secret"}
        aio_producer = AIOKafkaProducer(**aio_common)
        await aio_producer.start()
        try:
            for i in range(10):
                await aio_producer.send_and_wait("secure-aio", f"aio-{i}".encode())
        finally:
            await aio_producer.stop()
        aio_consumer = AIOKafkaConsumer("secure-aio", **aio_common, group_id="aio-group",
                                        auto_offset_reset="earliest")
        await aio_consumer.start()
        seen: list[tuple[int, bytes]] = []
        try:
            async with asyncio.timeout(30):
                async for message in aio_consumer:
                    seen.append((message.offset, message.value))
                    if len(seen) == 10:
                        break
        finally:
            await aio_consumer.stop()
        return seen

    assert asyncio.run(aiokafka_round_trip()) == [(i, f"aio-{i}".encode()) for i in range(10)]


def test_kafkajs_over_sasl_ssl_scram(secure: SecureBroker) -> None:
    def run(password: str, topic: str) -> dict[str, Any]:
        options = {"bootstrap": secure.address("SASL_SSL"), "topic": topic, "group": f"js-{topic}",
                   "count": 10, "caFile": str(secure.tls.ca), "retries": 1,
                   "sasl": {"mechanism": "scram-sha-256", "username": "carol",
                            "password": password}}
        done = subprocess.run(["node", str(JS_SCRIPT), json.dumps(options)], capture_output=True,
                              text=True, timeout=90,
                              env={**os.environ, "NODE_PATH": str(_kafkajs_modules())})
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    result = run("carol-secret", "secure-js")
    assert result["produced"] == [0]
    assert result["consumed"] == [[i, f"js-{i}"] for i in range(10)]
    refused = run("wrong-secret", "secure-js-refused")
    assert "SASL SCRAM SHA256 authentication failed" in refused["error"] or \
        "Authentication failed" in refused["error"], refused


def test_kcat_with_mutual_tls(secure: SecureBroker) -> None:
    kcat = debian_tool("kcat", "kcat")
    pem = secure.tls.client
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={secure.tls.ca}",
           "-X", f"ssl.certificate.location={pem.cert}", "-X", f"ssl.key.location={pem.key}"]
    lines = "".join(f"kcat-{i}\n" for i in range(5))
    produced = subprocess.run([kcat, "-b", secure.address("SSL"), "-t", "secure-kcat", "-P",
                               *tls], input=lines, capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([kcat, "-b", secure.address("SSL"), "-t", "secure-kcat", "-C",
                               "-e", "-f", "%o %s\n", *tls], capture_output=True, text=True,
                              timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{i} kcat-{i}" for i in range(5)]


# -- refusals -----------------------------------------------------------------------------------

class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _refused(config: dict[str, str], expected: str) -> None:
    _all_refused([(config, expected)])


def _all_refused(cases: list[tuple[dict[str, str], str]]) -> None:
    """Confluent-kafka producers with each config, trying at the same time: each delivers
    nothing and reports its `expected` text, as an error or in its log (librdkafka only logs
    some transport failures)."""
    tries = []
    for config, expected in cases:
        collected = _Collected()
        logger = logging.getLogger(f"refused-{id(collected)}")
        logger.addHandler(collected)
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        errors: list[str] = []
        delivered: list[Any] = []
        producer = Producer({**config, "error_cb": errors.append, "logger": logger,
                             "message.timeout.ms": 1500})
        producer.produce("secure-refused", b"x", callback=lambda e, m, d=delivered: d.append(e))
        tries.append((config, expected, producer, errors, delivered, collected))
    for config, expected, producer, errors, delivered, collected in tries:
        producer.flush(4)
        producer.poll(0)
        assert delivered and delivered[0] is not None, "a refused client delivered a record"
        said = [str(e) for e in errors] + collected.lines
        assert any(expected in line for line in said), (config.get("security.protocol"), said)


def test_wrong_credentials_and_bad_tls_are_refused_and_cost_nothing_else(
        secure: SecureBroker) -> None:
    _all_refused([
        (_sasl(secure, "SASL_SSL", "PLAIN", "alice", "wrong-secret"),
         "Invalid username or password"),
        (_sasl(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "mallory", "wrong-secret"),
         "invalid credentials with SASL mechanism SCRAM-SHA-256"),
        (_sasl(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "wrong-secret"),
         "invalid credentials"),
        # A plaintext client on the TLS port, a client that does not trust the broker's CA, a
        # client without a certificate on the mutual-TLS port, an expired client certificate.
        ({"bootstrap.servers": secure.address("SASL_SSL"), "security.protocol": "PLAINTEXT"},
         "Disconnected"),
        ({**_mutual_tls(secure), "ssl.ca.location": str(secure.tls.untrusted_ca)},
         "certificate verify failed"),
        ({"bootstrap.servers": secure.address("SSL"), "security.protocol": "SSL",
          **_ssl(secure)}, "SSL"),
        (_mutual_tls(secure, secure.tls.expired_client), "SSL"),
    ])
    # Nothing else was touched: the broker serves the plaintext listener as before.
    _round_trip({"bootstrap.servers": secure.broker.bootstrap}, "secure-after-refusals", 5)


def test_unsupported_mechanism_is_refused_with_the_offered_ones(secure: SecureBroker) -> None:
    with _socket(secure, "SASL_PLAINTEXT") as sock:
        answer = _request(sock, ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        _assert_closed(sock)


# -- raw sockets ---------------------------------------------------------------------------------

class _Socket:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation = 0

    def __enter__(self) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def _socket(secure: SecureBroker, listener: str) -> _Socket:
    sock = socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=10)
    return _Socket(sock)


def _request(conn: _Socket, api_key: int, version: int, **fields: Any) -> Any:
    conn.correlation += 1
    body = _reg.requests[api_key].cls(**fields)
    conn.sock.sendall(encode_request(api_key, version, conn.correlation, "raw", body))
    correlation_id, answer = read_response(conn.sock, api_key, version)
    assert correlation_id == conn.correlation
    return answer


def _assert_closed(conn: _Socket) -> None:
    conn.sock.settimeout(5)
    try:
        assert conn.sock.recv(1) == b"", "the broker kept the connection open"
    except ConnectionResetError:
        pass


def _log_in(conn: _Socket, mechanism: str, user: str, password: str) -> Any:
    assert _request(conn, ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism).error_code == 0
    client = SaslClient(mechanism, user, password)
    token: bytes | None = client.first()
    answer = None
    while token is not None:
        answer = _request(conn, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token)
        assert answer.error_code == 0, answer.error_message
        token = client.answer(bytes(answer.auth_bytes))
    return answer


def _metadata(conn: _Socket) -> Any:
    return _request(conn, ApiKey.METADATA, 12, topics=[], allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)


def test_a_request_before_authentication_closes_only_that_connection(
        secure: SecureBroker) -> None:
    with _socket(secure, "SASL_PLAINTEXT") as early, _socket(secure, "SASL_PLAINTEXT") as good:
        _log_in(good, "PLAIN", "alice", "alice-secret")
        early.correlation += 1
        early.sock.sendall(encode_request(ApiKey.METADATA, 12, 1, "raw", _reg.requests[
            ApiKey.METADATA].cls(topics=[], allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)))
        _assert_closed(early)
        assert _metadata(good).brokers, "the logged-in connection stopped being served"


def test_garbage_and_oversized_tokens_close_only_that_connection(secure: SecureBroker) -> None:
    with _socket(secure, "SASL_PLAINTEXT") as garbage, \
            _socket(secure, "SASL_PLAINTEXT") as oversized, \
            _socket(secure, "SASL_PLAINTEXT") as good:
        assert _request(garbage, ApiKey.SASL_HANDSHAKE, 1,
                        mechanism="SCRAM-SHA-256").error_code == 0
        answer = _request(garbage, ApiKey.SASL_AUTHENTICATE, 2,
                          auth_bytes=bytes(range(256)) * 4)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        _assert_closed(garbage)
        # Bigger than sasl.server.max.receive.size (512 KiB) before logging in: dropped before
        # the broker reads (or allocates) it.
        oversized.sock.sendall(SIZE.pack(4 * 1024 * 1024) + b"\0" * 1024)
        _assert_closed(oversized)
        _log_in(good, "SCRAM-SHA-256", "carol", "carol-secret")
        assert _metadata(good).brokers


def test_unframed_v0_sasl_flow_of_old_clients(secure: SecureBroker) -> None:
    """SaslHandshake v0, then bare size-prefixed PLAIN tokens (clients before KIP-152)."""
    with _socket(secure, "SASL_PLAINTEXT") as conn:
        assert _request(conn, ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN").error_code == 0
        token = b"\0alice\0alice-secret"
        conn.sock.sendall(SIZE.pack(len(token)) + token)
        (size,) = SIZE.unpack(conn.sock.recv(4))
        assert size == 0  # PLAIN has nothing to say back
        assert [b.port for b in _metadata(conn).brokers] == [secure.ports["SASL_PLAINTEXT"]]


def test_sessions_end_unless_renewed_kip_368(secure: SecureBroker) -> None:
    with _socket(secure, "REAUTH") as lapsing, _socket(secure, "REAUTH") as renewing:
        first = _log_in(lapsing, "PLAIN", "alice", "alice-secret")
        assert first.session_lifetime_ms == REAUTH_MS
        _log_in(renewing, "SCRAM-SHA-512", "carol", "carol-secret")
        time.sleep(REAUTH_MS / 1000 * 0.6)
        renewed = _log_in(renewing, "SCRAM-SHA-512", "carol", "carol-secret")
        assert renewed.session_lifetime_ms == REAUTH_MS
        time.sleep(REAUTH_MS / 1000 * 0.6)  # past the first session's end, inside the second
        assert _metadata(renewing).brokers
        lapsing.correlation += 1
        lapsing.sock.sendall(encode_request(ApiKey.METADATA, 12, 9, "raw", _reg.requests[
            ApiKey.METADATA].cls(topics=[], allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)))
        _assert_closed(lapsing)
        # Re-authenticating as someone else is refused.
        answer = _request(renewing, ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        assert answer.error_code == 0
        client = SaslClient("PLAIN", "alice", "alice-secret")
        refused = _request(renewing, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.first())
        assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


# -- SCRAM credentials through the admin API, and secrets ----------------------------------------

def test_scram_credentials_are_created_described_and_deleted(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("dave", info, b"dave-secret")])
    for future in futures.values():
        future.result(20)
    described = admin.describe_user_scram_credentials().result(20)
    assert [(i.mechanism, i.iterations) for i in described["dave"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)]
    assert sorted((i.mechanism, i.iterations)
                  for i in described["carol"].scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]
    dave = _sasl(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "dave", "dave-secret")
    _round_trip(dave, "secure-dave", 3)
    too_few = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10), b"erin-secret")])
    with pytest.raises(KafkaException, match="UNACCEPTABLE_CREDENTIAL|Iterations"):
        too_few["erin"].result(20)
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)]).values():
        future.result(20)
    _refused(dave, "invalid credentials")


def test_describe_configs_never_shows_secrets(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(20)
    jaas = configs["sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert all(c.value is None for c in configs.values() if c.is_sensitive)
    assert "alice-secret" not in repr({k: c.value for k, c in configs.items()})


# -- ACLs on the data path -----------------------------------------------------------------------

def _grant(secure: SecureBroker, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        future.result(20)


def _allow(resource: ResourceType, name: str, operation: AclOperation, user: str = "eve",
           pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, name, pattern, f"User:{user}", "*", operation,
                      AclPermissionType.ALLOW)


def _as(secure: SecureBroker, user: str) -> dict[str, str]:
    return _sasl(secure, "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret")


def test_acls_decide_produce_fetch_and_metadata(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in
                                       ("acl-open", "acl-closed", "acl-team-a")]).values():
        future.result(20)
    _grant(secure, _allow(ResourceType.TOPIC, "acl-open", AclOperation.WRITE),
           _allow(ResourceType.TOPIC, "acl-open", AclOperation.READ),
           _allow(ResourceType.TOPIC, "acl-team-", AclOperation.DESCRIBE,
                  pattern=ResourcePatternType.PREFIXED),
           _allow(ResourceType.GROUP, "eve-", AclOperation.READ,
                  pattern=ResourcePatternType.PREFIXED),
           AclBinding(ResourceType.TOPIC, "acl-open", ResourcePatternType.LITERAL,
                      "User:frank", "*", AclOperation.ALL, AclPermissionType.DENY))
    # eve writes and reads acl-open in her group; her writes to acl-closed are refused.
    eve = _as(secure, "eve")
    producer = Producer({**eve, "enable.idempotence": False, "message.timeout.ms": 5000})
    outcomes: dict[str, Any] = {}
    for topic in ("acl-open", "acl-closed"):
        producer.produce(topic, b"v", callback=lambda e, m: outcomes.setdefault(m.topic(), e))
    producer.flush(10)
    assert outcomes["acl-open"] is None
    assert outcomes["acl-closed"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({**eve, "group.id": "eve-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["acl-open"])
    message = None
    deadline = time.monotonic() + 20
    while message is None and time.monotonic() < deadline:
        polled = consumer.poll(0.5)
        if polled is not None and polled.error() is None:
            message = polled
    consumer.close()
    assert message is not None and (message.offset(), message.value()) == (0, b"v")
    # Metadata: eve sees the topics she may describe (READ/WRITE imply DESCRIBE), frank none.
    with _socket(secure, "SASL_PLAINTEXT") as eve_conn, \
            _socket(secure, "SASL_PLAINTEXT") as frank_conn:
        _log_in(eve_conn, "PLAIN", "eve", "eve-secret")
        _log_in(frank_conn, "PLAIN", "frank", "frank-secret")
        listed = _request(eve_conn, ApiKey.METADATA, 12, topics=None,
                          allow_auto_topic_creation=False,
                          include_topic_authorized_operations=True)
        seen = {t.name: t.topic_authorized_operations for t in listed.topics}
        assert set(seen) == {"acl-open", "acl-team-a"}
        assert seen["acl-team-a"] == 1 << AclOperation.DESCRIBE.value
        assert _request(frank_conn, ApiKey.METADATA, 12, topics=None,
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False).topics == []
        topic_cls = _reg.requests[ApiKey.METADATA].cls.MetadataRequestTopic
        asked = _request(frank_conn, ApiKey.METADATA, 12,
                         topics=[topic_cls(name="acl-open"), topic_cls(name="no-such-topic")],
                         allow_auto_topic_creation=True,
                         include_topic_authorized_operations=False)
        assert [(t.name, t.error_code) for t in asked.topics] == [
            ("acl-open", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            ("no-such-topic", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
        # Inter-broker requests need CLUSTER_ACTION: a follower's fetch is refused.
        fetch = _reg.requests[ApiKey.FETCH].cls
        answer = _request(frank_conn, ApiKey.FETCH, 12, replica_id=1, max_wait_ms=0,
                          min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0,
                          session_epoch=-1, topics=[fetch.FetchTopic(topic="acl-open", partitions=[
                              fetch.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=1024)])],
                          forgotten_topics_data=[], rack_id="")
        [[refused]] = [t.partitions for t in answer.responses]
        assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "no-such-topic" not in admin.list_topics(timeout=10).topics  # nothing was created


def test_acls_decide_idempotent_and_transactional_producers(secure: SecureBroker) -> None:
    frank = Producer({**_as(secure, "frank"), "enable.idempotence": True,
                      "message.timeout.ms": 4000})
    errors: list[Any] = []
    frank.produce("acl-open", b"x", callback=lambda e, m: errors.append(e))
    frank.flush(8)
    assert errors and errors[0] is not None  # no IDEMPOTENT_WRITE and no WRITE anywhere
    eve = Producer({**_as(secure, "eve"), "transactional.id": "eve-txn"})
    with pytest.raises(KafkaException) as refused:
        eve.init_transactions(10)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _grant(secure, _allow(ResourceType.TRANSACTIONAL_ID, "eve-txn", AclOperation.WRITE))
    eve = Producer({**_as(secure, "eve"), "transactional.id": "eve-txn"})
    eve.init_transactions(20)
    eve.begin_transaction()
    eve.produce("acl-open", b"in-txn")
    eve.commit_transaction(20)


def test_print_config_hides_secrets(tmp_path: Path) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "kafka_ext", "server", "--print-config",
         "--override", f"log.dirs={tmp_path}", "--override", "ssl.key.password=key-secret",
         "--override", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
         "--override", "listener.name.ssl.ssl.client.auth=required"],
        capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert "ssl.key.password=[hidden]" in lines
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config=[hidden]" in lines
    assert "listener.name.ssl.ssl.client.auth=required" in lines
    assert "key-secret" not in printed.stdout and "alice-secret" not in printed.stdout
