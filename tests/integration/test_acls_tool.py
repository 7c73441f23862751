"""`kafka-ext acls` (kafka-acls.sh) and the SCRAM side of `kafka-ext configs` (kafka-configs.sh)
against a broker with the StandardAuthorizer on and a SASL_PLAINTEXT listener.

The tools print Kafka's lines; what they change is checked with stock confluent-kafka clients
logging in over SASL: an ACL added by the tool lets a consumer read, a SCRAM credential made by
`configs --alter` lets its user log in until `--delete-config` removes it. The PLAINTEXT
listener's `User:ANONYMOUS` is a super user, as is `User:admin` on the SASL listener.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kafka_ext.cli.main import main
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module
from tests.tls_material import TlsMaterial, make_tls_material

BIN = Path(__file__).resolve().parents[2] / "bin"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')
SECRETS = ("admin-secret", "alice-secret", "carol-secret")
TIMEOUT_S = 20.0


class SecuredBroker:
    """The broker, its SASL_PLAINTEXT address and client properties files for the tools."""

    def __init__(self, broker: BrokerProcess, ports: dict[str, int], tls: TlsMaterial,
                 root: Path) -> None:
        self.broker = broker
        self.sasl = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        self.sasl_ssl = f"127.0.0.1:{ports['SASL_SSL']}"
        self.tls = tls
        self.root = root

    def properties(self, user: str, password: str, mechanism: str = "PLAIN",
                   truststore: Path | None = None) -> str:
        """A --command-config file logging in as `user` on the SASL listener (SASL_SSL,
        trusting `truststore`, when one is given)."""
        module = ("plain.PlainLoginModule" if mechanism == "PLAIN"
                  else "scram.ScramLoginModule")
        tls = ("security.protocol=SASL_SSL\nssl.truststore.type=PEM\n"
               f"ssl.truststore.location={truststore}\n") if truststore else \
            "security.protocol=SASL_PLAINTEXT\n"
        path = self.root / f"{user}-{uuid.uuid4().hex}.properties"  # the name shows no secret
        path.write_text(f"{tls}sasl.mechanism={mechanism}\n"
                        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
                        f'username="{user}" password="{password}";\n')
        return str(path)

    def client(self, user: str, password: str, mechanism: str = "PLAIN") -> dict[str, Any]:
        """confluent-kafka settings logging in as `user` on the SASL listener."""
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    root = tmp_path_factory.mktemp("acls")
    tls = make_tls_material(root / "certs")
    broker = BrokerProcess(root / "data")
    ports = {name: free_port() for name in ("SASL_PLAINTEXT", "SASL_SSL")}
    broker.overrides.update({
        "listeners": ",".join([f"PLAINTEXT://127.0.0.1:{broker.port}",
                               *(f"{name}://127.0.0.1:{port}" for name, port in ports.items())]),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "ssl.keystore.location": str(tls.broker.keystore),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
    })
    yield from (SecuredBroker(b, ports, tls, root) for b in serve_for_module(broker))
    log = broker.log()
    for secret in SECRETS:
        assert secret not in log, f"{secret} appears in the broker's log"


def tool(*argv: str, stdin: str = "", launcher: bool = False) -> subprocess.CompletedProcess[str]:
    """The tool as a user runs it: `kafka-ext ARGV...`, or bin/kafka-<tool>.sh with `launcher`."""
    command = ([str(BIN / f"kafka-{argv[0]}.sh"), *argv[1:]] if launcher
               else [sys.executable, "-m", "kafka_ext", *argv])
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
    for secret in SECRETS:
        assert secret not in done.stdout + done.stderr, f"{argv[0]} printed a password"
    return done


def in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `kafka-ext ARGV...` run in this process (no interpreter
    start-up: the CI budget is tight); usage errors exit through SystemExit as on the shell."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    for secret in SECRETS:
        assert secret not in out + err, f"{argv[0]} printed a password"
    return code, out, err


def acl_lines(resource: str, *entries: str) -> list[str]:
    """kafka-acls.sh's block for one resource: header, entries (first indented by a space, the
    last followed by one), blank line."""
    body = [f"\t{e}" for e in entries]
    body[0] = " " + body[0]
    body[-1] += " "
    return [f"{resource}: ", *body, ""]


def topic(name: str, pattern: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType=TOPIC, name={name}, patternType={pattern})"


def allow(principal: str, operation: str, host: str = "*") -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType=ALLOW)"


# -- kafka-acls.sh -----------------------------------------------------------------------------

def test_add_prints_the_new_acls_then_lists_them(secured: SecuredBroker,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = secured.broker.bootstrap
    code, out, err = in_process(
        capsys, "acls", "--bootstrap-server", bootstrap, "--add", "--topic", "audit",
        "--allow-principal", "User:alice", "--operation", "Read", "--operation", "DESCRIBE",
        "--allow-host", "10.0.0.1")
    assert (code, err) == (0, "")
    entries = (allow("User:alice", "READ", "10.0.0.1"), allow("User:alice", "DESCRIBE",
                                                              "10.0.0.1"))
    assert out.splitlines() == [
        *acl_lines(f"Adding ACLs for resource `{topic('audit')}`", *entries),
        *acl_lines(f"Current ACLs for resource `{topic('audit')}`", *entries)]
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", bootstrap, "--list",
                              "--topic", "audit")
    assert code == 0
    assert out.splitlines() == acl_lines(f"Current ACLs for resource `{topic('audit')}`",
                                         *entries)


def test_producer_and_consumer_sets_on_prefixed_resources(
        secured: SecuredBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = secured.broker.bootstrap
    code, _, err = in_process(
        capsys, "acls", "--bootstrap-server", bootstrap, "--add", "--producer", "--consumer",
        "--topic", "pay-", "--group", "pay-", "--transactional-id", "pay-", "--idempotent",
        "--resource-pattern-type", "prefixed", "--allow-principal", "User:bob")
    assert (code, err) == (0, "")
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", bootstrap, "--list",
                              "--principal", "User:bob")
    bob = "User:bob"
    assert code == 0
    assert out.splitlines() == [
        f"ACLs for principal `{bob}`",
        *acl_lines(f"Current ACLs for resource `{topic('pay-', 'PREFIXED')}`",
                   allow(bob, "READ"), allow(bob, "WRITE"), allow(bob, "CREATE"),
                   allow(bob, "DESCRIBE")),
        *acl_lines("Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=pay-, "
                   "patternType=PREFIXED)`", allow(bob, "READ")),
        *acl_lines("Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, "
                   "name=kafka-cluster, patternType=LITERAL)`", allow(bob, "IDEMPOTENT_WRITE")),
        *acl_lines("Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, "
                   "name=pay-, patternType=PREFIXED)`", allow(bob, "WRITE"),
                   allow(bob, "DESCRIBE")),
    ]
    # MATCH lists every ACL that applies to a name: the prefixed one applies to pay-eu.
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", bootstrap, "--list",
                              "--topic", "pay-eu", "--resource-pattern-type", "match")
    assert code == 0 and out.splitlines()[0] == (
        f"Current ACLs for resource `{topic('pay-', 'PREFIXED')}`: ")


def _first_error(consumer: Consumer) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            return message.error()
    raise AssertionError("the consumer saw no error")


def test_an_added_acl_lets_a_stock_consumer_read(secured: SecuredBroker) -> None:
    create_topic(secured.broker.bootstrap, "orders")
    producer = Producer({"bootstrap.servers": secured.broker.bootstrap})
    for i in range(3):
        producer.produce("orders", f"order-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    alice = secured.client("alice", "alice-secret")
    # READ on the group alone: the consumer then fails on the topic.
    done = tool("acls", "--bootstrap-server", secured.broker.bootstrap, "--add", "--group",
                "orders-readers", "--operation", "Read", "--allow-principal", "User:alice")
    assert done.returncode == 0, done.stderr
    refused = Consumer({**alice, "group.id": "orders-readers", "enable.auto.commit": False})
    refused.subscribe(["orders"])
    assert _first_error(refused).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    refused.close()

    done = tool("acls", "--bootstrap-server", secured.sasl, "--command-config",
                secured.properties("admin", "admin-secret"), "--add", "--consumer",
                "--topic", "orders", "--group", "orders-readers", "--allow-principal",
                "User:alice", launcher=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Adding ACLs for resource `{topic('orders')}`: ")

    consumer = Consumer({**alice, "group.id": "orders-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    values: list[bytes | None] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    consumer.close()
    assert values == [b"order-0", b"order-1", b"order-2"]


def test_remove_asks_first_unless_forced(secured: SecuredBroker,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ("acls", "--bootstrap-server", secured.broker.bootstrap)
    assert in_process(capsys, *base, "--add", "--topic", "scratch", "--allow-principal",
                      "User:carl", "--operation", "Write")[0] == 0
    kept = tool(*base, "--remove", "--topic", "scratch", stdin="n\n")
    assert kept.returncode == 0
    assert kept.stdout.splitlines() == [
        f"Are you sure you want to delete all ACLs for resource filter `{topic('scratch')}`? "
        "(y/n)",
        *acl_lines(f"Current ACLs for resource `{topic('scratch')}`", allow("User:carl",
                                                                          "WRITE"))]
    removed = in_process(capsys, *base, "--remove", "--force", "--topic", "scratch",
                         "--allow-principal", "User:carl", "--operation", "Write")
    assert removed == (0, "", "")
    assert in_process(capsys, *base, "--list", "--topic", "scratch") == (0, "", "")


def test_usage_errors_exit_2_and_refusals_exit_1(secured: SecuredBroker,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    base = ("acls", "--bootstrap-server", secured.broker.bootstrap)
    usage = {
        ("--topic", "t"): "Command must include exactly one action: --list, --add, --remove.",
        ("--add", "--topic", "t"): "You must specify one of: --allow-principal, "
                                   "--deny-principal when trying to add ACLs.",
        ("--add", "--allow-principal", "User:a"): "You must provide at least one resource",
        ("--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"):
            "ResourceType GROUP only supports operations Read, Delete, Describe, All",
        ("--list", "--producer"): "Option \"[list]\" can't be used with option \"[producer]\"",
        ("--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"):
            "With --consumer you must specify a --topic and a --group",
        ("--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type",
         "match"): "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls.",
    }
    for args, message in usage.items():
        code, out, err = in_process(capsys, *base, *args)
        assert (code, out) == (2, ""), args
        assert message in err, (args, err)

    code, out, _ = in_process(capsys, *base, "--add", "--topic", "t", "--allow-principal",
                              "alice")
    assert (code, out) == (1, "Error while executing ACL command: expected a string in format "
                              "principalType:principalName but got alice\n")
    not_admin = tool("acls", "--bootstrap-server", secured.sasl, "--list", "--command-config",
                     secured.properties("alice", "alice-secret"))
    assert (not_admin.returncode, not_admin.stdout) == (
        1, "Error while executing ACL command: org.apache.kafka.common.errors."
           "ClusterAuthorizationException: Cluster authorization failed.\n")
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", secured.sasl, "--list",
                              "--command-config", secured.properties("admin", "wrong-secret"))
    assert (code, out) == (1, "Error while executing ACL command: org.apache.kafka.common."
                              "errors.SaslAuthenticationException: Authentication failed: "
                              "Invalid username or password\n")


def test_the_tools_connect_over_sasl_ssl_from_the_command_config(
        secured: SecuredBroker, capsys: pytest.CaptureFixture[str]) -> None:
    trusted = secured.properties("admin", "admin-secret", truststore=secured.tls.ca)
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", secured.sasl_ssl,
                              "--command-config", trusted, "--add", "--topic", "over-tls",
                              "--allow-principal", "User:alice", "--operation", "Describe")
    assert code == 0
    assert out.splitlines()[-3:] == acl_lines(f"Current ACLs for resource `{topic('over-tls')}`",
                                              allow("User:alice", "DESCRIBE"))
    code, out, _ = in_process(capsys, "configs", "--bootstrap-server", secured.sasl_ssl,
                              "--command-config", trusted, "--describe", "--entity-type",
                              "users", "--entity-name", "nobody")
    assert (code, out) == (0, "")
    untrusting = secured.properties("admin", "admin-secret",
                                    truststore=secured.tls.untrusted_ca)
    code, out, _ = in_process(capsys, "acls", "--bootstrap-server", secured.sasl_ssl,
                              "--command-config", untrusting, "--list")
    assert code == 1 and "CERTIFICATE_VERIFY_FAILED" in out


def test_a_broker_without_authorizer_answers_security_disabled(
        broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    for action in (["--list"], ["--add", "--cluster", "--allow-principal", "User:a"]):
        code, out, _ = in_process(capsys, "acls", "--bootstrap-server", broker.bootstrap,
                                  *action)
        assert code == 1
        assert out.splitlines()[-1] == ("Error while executing ACL command: org.apache.kafka."
                                        "common.errors.SecurityDisabledException: No "
                                        "Authorizer is configured.")


# -- SCRAM credentials with kafka-configs.sh ----------------------------------------------------

def _logs_in(config: dict[str, Any]) -> bool:
    """Whether a confluent-kafka admin client logs in with `config`: True once it gets cluster
    metadata, False once librdkafka reports the authentication refused."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = {**config, "error_cb": errors.append}
    admin = AdminClient(settings)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except KafkaException:
            admin.poll(0)  # serves error_cb
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
    raise AssertionError(f"neither logged in nor refused: {errors}")


def test_configs_scram_credentials_log_a_user_in_until_deleted(
        secured: SecuredBroker, capsys: pytest.CaptureFixture[str]) -> None:
    admin = ("configs", "--bootstrap-server", secured.sasl, "--command-config",
             secured.properties("admin", "admin-secret"))
    done = tool(*admin, "--alter", "--entity-type", "users", "--entity-name", "carol",
                "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret],"
                                "SCRAM-SHA-512=[password=carol-secret]")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for user carol.\n"), \
        done.stderr
    described = in_process(capsys, *admin, "--describe", "--entity-type", "users",
                           "--entity-name", "carol")
    assert described[1].splitlines() == [
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096"]
    assert _logs_in(secured.client("carol", "carol-secret", "SCRAM-SHA-256"))

    mixed = tool(*admin, "--alter", "--user", "carol", "--add-config",
                 "SCRAM-SHA-256=[password=carol-secret],producer_byte_rate=1024")
    assert mixed.returncode == 1
    assert ("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
            "using --bootstrap-server.") in mixed.stderr
    assert "password=[hidden]" in mixed.stderr  # the echoed arguments hide the password

    deleted = in_process(capsys, *admin, "--alter", "--entity-type", "users", "--entity-name",
                         "carol", "--delete-config", "SCRAM-SHA-256")
    assert deleted == (0, "Completed updating config for user carol.\n", "")
    described = in_process(capsys, "configs", "--bootstrap-server", secured.broker.bootstrap,
                           "--describe", "--entity-type", "users")
    assert described[1].splitlines() == [
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=4096"]
    assert not _logs_in(secured.client("carol", "carol-secret", "SCRAM-SHA-256"))
