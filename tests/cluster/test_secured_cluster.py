"""Three combined nodes with every listener secured: replication over SASL_SSL with
SCRAM-SHA-512 and the quorum over SASL_SSL with PLAIN (SCRAM cannot serve the controllers, whose
metadata holds the credentials), the nodes logging in as User:broker, a super user; clients over
SASL_SSL with PLAIN, and the ACL authorizer on. Replication and failover work as on plaintext: records
acknowledged with acks=all survive kill -9 of their partition's leader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import CLUSTER_ID, FAST_QUORUM
from tests.integration.conftest import free_port
from tests.tls_material import TlsMaterial, make_tls_material

NODES = (1, 2, 3)
BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="broker-secret";')
CONTROLLER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="broker" password="broker-secret" user_broker="broker-secret";')
CLIENT_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               'user_admin="admin-secret" user_app="app-secret";')


class SecuredNode:
    def __init__(self, root: Path, node_id: int) -> None:
        self.node_id = node_id
        self.data_dir = root / f"node{node_id}"
        self.config_path = root / f"node{node_id}.properties"
        self.log_path = root / f"node{node_id}.log"
        self.client_port, self.broker_port, self.controller_port = (free_port(), free_port(),
                                                                    free_port())
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self, voters: str, tls: TlsMaterial,
                     extra: dict[str, str] | None = None) -> None:
        settings = {
            "node.id": str(self.node_id), "process.roles": "broker,controller",
            "listeners": f"CLIENT://127.0.0.1:{self.client_port},"
                         f"INTERNAL://127.0.0.1:{self.broker_port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,"
                                              "CONTROLLER:SASL_SSL",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "INTERNAL",
            "advertised.listeners": f"CLIENT://127.0.0.1:{self.client_port},"
                                    f"INTERNAL://127.0.0.1:{self.broker_port}",
            "controller.quorum.voters": voters, "log.dirs": str(self.data_dir),
            "ssl.keystore.location": str(tls.broker.keystore),
            "ssl.truststore.location": str(tls.ca),
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
            "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
            "listener.name.client.plain.sasl.jaas.config": CLIENT_JAAS,
            "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:broker;User:admin",
            "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2", "num.partitions": "1", **FAST_QUORUM,
            **(extra or {}),
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        formatted = subprocess.run(
            [sys.executable, "-m", "kafka_ext", "storage", "format", "-t", CLUSTER_ID, "-c",
             str(self.config_path), "--add-scram",
             "SCRAM-SHA-512=[name=broker,password=broker-secret]"],
            capture_output=True, text=True, timeout=60)
        assert formatted.returncode == 0, formatted.stderr

    def start(self) -> None:
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EXT_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafka_ext", "server", str(self.config_path)],
            stdout=log_file, stderr=subprocess.STDOUT, env=env)
        log_file.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:]


class SecuredCluster:
    def __init__(self, nodes: list[SecuredNode], tls: TlsMaterial) -> None:
        self.nodes = nodes
        self.tls = tls

    def client(self, user: str = "admin", nodes: list[SecuredNode] | None = None
               ) -> dict[str, str]:
        return {"bootstrap.servers": ",".join(f"127.0.0.1:{n.client_port}"
                                              for n in nodes or self.nodes),
                "security.protocol": "SASL_SSL", "ssl.ca.location": str(self.tls.ca),
                "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": f"{user}-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    yield from serve_secured_cluster(tmp_path_factory.mktemp("secured"))


def serve_secured_cluster(root: Path, extra: dict[str, str] | None = None
                          ) -> Iterator[SecuredCluster]:
    """Body of a module-scoped fixture: three secured nodes (with `extra` settings), up until
    the module is done; fails on an unclean exit or a logged traceback."""
    tls = make_tls_material(root / "certs")
    nodes = [SecuredNode(root, i) for i in NODES]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    for node in nodes:
        node.write_config(voters, tls, extra)
        node.start()
    cluster = SecuredCluster(nodes, tls)
    try:
        _wait_for_brokers(cluster, len(nodes))
        yield cluster
    finally:
        problems = []
        for node in nodes:
            code = node.stop()
            if code not in (0, -9) or "Traceback" in node.log():
                problems.append(f"node {node.node_id} exited {code}:\n{node.log()}")
        assert not problems, "\n".join(problems)


def _wait_for_brokers(cluster: SecuredCluster, count: int, timeout_s: float = 60) -> None:
    """Until a client logged in over SASL_SSL sees `count` brokers (all registered, unfenced)."""
    admin = AdminClient(cluster.client())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if len(admin.list_topics(timeout=2).brokers) >= count:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.3)
    logs = "\n".join(n.log() for n in cluster.nodes)
    raise AssertionError(f"the secured cluster did not form within {timeout_s} s:\n{logs}")


def _leader_of(cluster: SecuredCluster, topic: str) -> int:
    metadata = AdminClient(cluster.client()).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[0].leader)


def test_replication_and_failover_over_sasl_ssl(secured: SecuredCluster) -> None:
    admin = AdminClient(secured.client())
    topic = "secured-replicated"
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]
                        )[topic].result(30)
    producer = Producer({**secured.client(), "acks": "all", "enable.idempotence": True})
    acked: list[int] = []

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, str(i).encode(),
                             callback=lambda e, m: acked.append(int(m.value())) if e is None
                             else None)
        assert producer.flush(60) == 0

    produce(0, 100)
    leader = _leader_of(secured, topic)
    victim = next(n for n in secured.nodes if n.node_id == leader)
    victim.kill()
    survivors = [n for n in secured.nodes if n is not victim]
    produce(100, 100)
    assert sorted(acked) == list(range(200))
    assert _leader_of(secured, topic) != leader
    # Every acknowledged record, once, in order, read through the survivors.
    consumer = Consumer({**secured.client(nodes=survivors), "group.id": "secured-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 200 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(int(message.value()))
    consumer.close()
    assert values == list(range(200))
    victim.start()  # the node rejoins over the secured links
    _wait_for_brokers(secured, 3)


def test_a_client_without_acls_is_refused_on_the_cluster(secured: SecuredCluster) -> None:
    errors: list[Any] = []
    producer = Producer({**secured.client("app"), "message.timeout.ms": 4000,
                         "enable.idempotence": False})
    producer.produce("secured-replicated", b"x", callback=lambda e, m: errors.append(e))
    producer.flush(8)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
