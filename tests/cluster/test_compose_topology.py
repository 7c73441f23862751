"""docker/docker-compose.yml as processes on loopback (issue 18): the compose file cannot drift
from what is tested.

Each kafka-ext service's environment is read from the compose file and turned into what its
container would get: hosts and ports are remapped to free loopback ports (a service name, a
wildcard or a published `localhost` port each name one port of one service), the volume
`/var/lib/kafka-ext` becomes a temp dir per service and the MinIO bucket a local file:// store.
The processes run the Dockerfile's ENTRYPOINT (`kafka-ext docker-entrypoint`), which formats
from CLUSTER_ID and execs the server, and are asked with the compose HEALTHCHECK command. Then
a topic of replication factor 3 is produced to through every node's host listener and read
back through every node's container listener by stock clients.

`docker-compose config` (Debian's docker-compose, which needs no daemon; installed when missing)
validates both compose files and reads the same environments this test reads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.cli.healthcheck import Unhealthy, ask_controller, check_node
from kafka_ext.server.config import BROKER_CONFIGS, load_config, parse_listener
from kafka_ext.storage.checkpoints import MetaProperties
from tests.debian_tools import debian_tool
from tests.integration.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
SPLIT = DOCKER / "docker-compose.split.yml"
DOCKERFILE = DOCKER / "Dockerfile"
VOLUME = "/var/lib/kafka-ext"  # the image's VOLUME: each service's data
IMAGE = "kafka-ext"
ENV_PREFIX = "KAFKA_EXT_"
METRICS_KEY = "prometheus.metrics.port"
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}
PUBLISHED_HOSTS = {"localhost", "127.0.0.1"}  # the host's view: a published port
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 40.0
TOPIC = "compose-round-trip"
PARTITIONS = 3
PER_PARTITION = 3  # records each node's producer writes to each partition
# The metric names the issue lists; the Grafana dashboard must chart each of them.
DASHBOARD_METRICS = (
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_network_requestmetrics_requests_total",
    "kafka_network_requestmetrics_totaltimems",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_controller_kafkacontroller_offlinepartitionscount",  # Kafka's; no ReplicaManager one
    "kafka_controller_kafkacontroller_activecontrollercount",
)
# host:port after `//` (listeners) or `@` (controller.quorum.voters)
_ENDPOINT = re.compile(r"(?P<pre>//|@)(?P<host>\[[^\]]*\]|[^:/,@]*):(?P<port>[0-9]+)")


# -- reading the compose file and the Dockerfile ---------------------------------------------


def read_compose(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())  # resolves the x- anchors
    return data


def kafka_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run our image, by name."""
    return {name: service for name, service in compose["services"].items()
            if str(service.get("image", "")).split(":")[0] == IMAGE}


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's `environment:`, in its mapping or its `KEY=value` list form."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(entry.partition("=")[::2] for entry in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """host port -> container port, from `"19092:19092"` or docker-compose config's long form."""
    ports: dict[int, int] = {}
    for entry in service.get("ports") or ():
        if isinstance(entry, dict):
            ports[int(entry["published"])] = int(entry["target"])
        else:
            host, _, container = str(entry).rpartition(":")
            ports[int(host.rpartition(":")[2])] = int(container.split("/")[0])
    return ports


def dockerfile_instructions(path: Path) -> dict[str, list[str]]:
    """Each instruction's arguments, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.setdefault(word.upper(), []).append(rest.strip())
    return found


def image_command(exec_form: list[str]) -> list[str]:
    """A `kafka-ext ...` exec form of the image, run from this checkout's interpreter."""
    assert exec_form[0] == "kafka-ext", exec_form
    return [sys.executable, "-m", "kafka_ext", *exec_form[1:]]


def entrypoint_command() -> list[str]:
    (entrypoint,) = dockerfile_instructions(DOCKERFILE)["ENTRYPOINT"]
    return image_command(json.loads(entrypoint))


# -- turning a service into a loopback process ----------------------------------------------


class PortMap:
    """One free loopback port per (service, container port), so that a service name, the
    service's own wildcard listener and a published localhost port all reach the same one."""

    def __init__(self, services: dict[str, dict[str, Any]]) -> None:
        self.published = {host: (name, container) for name, service in services.items()
                          for host, container in published_ports(service).items()}
        self.services = set(services)
        self.ports: dict[tuple[str, int], int] = {}

    def port(self, service: str, container_port: int) -> int:
        if (service, container_port) not in self.ports:
            self.ports[(service, container_port)] = free_port()
        return self.ports[(service, container_port)]

    def endpoint_port(self, service: str, host: str, port: int) -> int:
        """The loopback port for `host:port` as written in `service`'s environment."""
        if host in WILDCARD_HOSTS:
            return self.port(service, port)
        if host in PUBLISHED_HOSTS:
            assert port in self.published, f"{service}: {host}:{port} is not a published port"
            return self.port(*self.published[port])
        assert host in self.services, f"{service}: host {host!r} is no kafka-ext service"
        return self.port(host, port)


def process_environment(service: str, env: dict[str, str], ports: PortMap, root: Path,
                        objects_url: str) -> dict[str, str]:
    """The service's environment as a loopback process gets it."""
    out: dict[str, str] = {}
    for key, value in env.items():
        if key.startswith(ENV_PREFIX + "PROMETHEUS_"):
            if METRICS_KEY not in BROKER_CONFIGS:
                continue  # the metrics endpoint has not landed in this checkout yet
            if key == ENV_PREFIX + "PROMETHEUS_METRICS_PORT":
                value = str(ports.port(service, int(value)))
            elif key == ENV_PREFIX + "PROMETHEUS_METRICS_HOST":
                value = "127.0.0.1"
        elif key == ENV_PREFIX + "DISKLESS_STORAGE_URL":
            value = objects_url  # MinIO's bucket: a local store shared by the nodes
        elif key.startswith(ENV_PREFIX):
            value = value.replace(VOLUME, str(root / service))
            value = _ENDPOINT.sub(lambda m: f"{m['pre']}127.0.0.1:"
                                  f"{ports.endpoint_port(service, m['host'], int(m['port']))}",
                                  value)
        out[key] = value
    return out


def base_environment() -> dict[str, str]:
    """This process's environment without anything a service sets for itself."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith((ENV_PREFIX, "AWS_")) and k != "CLUSTER_ID"}


@dataclass
class ComposeNode:
    """One kafka-ext service run as a process."""

    service: str
    env: dict[str, str]  # the service's own variables, translated
    original: dict[str, str]  # as the compose file has them
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir.parent / f"{self.service}.log"

    @property
    def node_id(self) -> int:
        return int(self.env[ENV_PREFIX + "NODE_ID"])

    def bootstrap(self, view: str) -> str:
        """The advertised listener a client on the host ("host") or in another container
        ("container") bootstraps with, as host:port after the remapping."""
        original = [parse_listener(t) for t in
                    self.original[ENV_PREFIX + "ADVERTISED_LISTENERS"].split(",")]
        translated = [parse_listener(t) for t in
                      self.env[ENV_PREFIX + "ADVERTISED_LISTENERS"].split(",")]
        for before, after in zip(original, translated, strict=True):
            if (before.host in PUBLISHED_HOSTS) == (view == "host"):
                return f"{after.host}:{after.port}"
        raise AssertionError(f"{self.service} advertises no listener for the {view}")

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)  # the image's WORKDIR, in the volume
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(entrypoint_command(), cwd=self.workdir,
                                         env={**base_environment(), **self.env},
                                         stdout=log_file, stderr=subprocess.STDOUT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""


def compose_nodes(root: Path, path: Path = COMPOSE) -> list[ComposeNode]:
    services = kafka_services(read_compose(path))
    ports = PortMap(services)
    objects_url = f"file://{root / 'objects'}"
    return [ComposeNode(name, process_environment(name, service_environment(service), ports,
                                                  root, objects_url),
                        service_environment(service), root / name)
            for name, service in services.items()]


def stop_all(nodes: list[ComposeNode]) -> list[str]:
    """SIGTERM every node at once (the last ones have no quorum left to shut down with, so
    one at a time would wait out their sessions); the problems found."""
    running = [n for n in nodes if n.proc is not None and n.proc.poll() is None]
    for node in running:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    problems = []
    for node in nodes:
        if node.proc is None:
            continue
        try:
            node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait()
            problems.append(f"{node.service} did not stop in {STOP_TIMEOUT_S}s:\n{node.log()}")
            continue
        if node.proc.returncode != 0:
            problems.append(f"{node.service} exited with {node.proc.returncode}:\n{node.log()}")
        elif "Traceback" in node.log():
            problems.append(f"{node.service} logged a traceback:\n{node.log()}")
    return problems


def wait_healthy(nodes: list[ComposeNode]) -> None:
    """Until every node passes the healthcheck (in process; the command is tested apart)."""
    configs = {n.service: load_config(None, n.env) for n in nodes}
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    pending = list(nodes)
    while pending:
        node = pending[0]
        assert node.proc is not None
        if node.proc.poll() is not None:
            raise AssertionError(f"{node.service} exited with {node.proc.returncode}:\n"
                                 f"{node.log()}")
        try:
            check_node(configs[node.service], timeout_s=2)
            pending.pop(0)
        except Unhealthy:
            if time.monotonic() > deadline:
                raise AssertionError(f"{node.service} not healthy in {STARTUP_TIMEOUT_S}s:\n"
                                     f"{node.log()}") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ComposeNode]]:
    nodes = compose_nodes(tmp_path_factory.mktemp("compose"))
    try:
        for node in nodes:
            node.start()
        wait_healthy(nodes)
        yield nodes
    finally:
        problems = stop_all(nodes)
    if problems:
        pytest.fail("\n\n".join(problems))


# -- the running topology --------------------------------------------------------------------


def test_compose_topology_is_three_combined_nodes(topology: list[ComposeNode]) -> None:
    assert sorted(n.node_id for n in topology) == [1, 2, 3]
    assert {n.env[ENV_PREFIX + "PROCESS_ROLES"] for n in topology} == {"broker,controller"}
    for node in topology:  # the first start formatted every volume with CLUSTER_ID
        meta = MetaProperties.read(node.workdir / "data")
        assert meta is not None and meta.node_id == node.node_id
        assert meta.cluster_id == node.env["CLUSTER_ID"]


def test_healthcheck_command_passes_on_every_node(topology: list[ComposeNode]) -> None:
    healthcheck = read_compose(COMPOSE)["x-kafka-ext-node"]["healthcheck"]["test"]
    assert healthcheck[0] == "CMD"
    for node in topology:
        done = subprocess.run(image_command(healthcheck[1:]), cwd=node.workdir,
                              env={**base_environment(), **node.env}, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"healthy: node {node.node_id} is a live broker")


def test_controller_healthcheck_sees_the_quorum(topology: list[ComposeNode]) -> None:
    """What a controller-only node's healthcheck asks, asked of these nodes' controller
    listeners: every voter sees the same leader."""
    leaders = set()
    for node in topology:
        config = load_config(None, node.env)
        (listener,) = (lst for lst in config.listeners if lst.name == "CONTROLLER")
        with socket.create_connection((listener.host, listener.port), timeout=10) as sock:
            answer = ask_controller(sock, node.node_id, node.service)
        leader = re.search(r"sees leader (\d+)", answer)
        assert leader is not None, answer
        leaders.add(leader[1])
    assert len(leaders) == 1


@pytest.mark.parametrize("view", ["host", "container"])
def test_each_listener_advertises_its_own_view(topology: list[ComposeNode], view: str) -> None:
    """From the host, Metadata names the published localhost ports; from a container, the
    service names: the usual dual-listener set-up."""
    expected = {n.node_id: n.bootstrap(view) for n in topology}
    for node in topology:
        admin = AdminClient({"bootstrap.servers": node.bootstrap(view)})
        brokers = admin.list_topics(timeout=10).brokers
        assert {b.id: f"{b.host}:{b.port}" for b in brokers.values()} == expected


def test_round_trip_through_every_node(topology: list[ComposeNode]) -> None:
    admin = AdminClient({"bootstrap.servers": topology[0].bootstrap("host")})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)],
                        operation_timeout=30)[TOPIC].result(30)
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    for node in topology:
        _produce(node.bootstrap("host"), node.service, acked)
    expected = {p: sorted(records.items()) for p, records in acked.items()}
    for p, records in expected.items():  # every acknowledged offset, none skipped
        assert [offset for offset, _ in records] == list(range(len(topology) * PER_PARTITION)), p
    for node in topology:
        assert _read_all(node.bootstrap("container"), len(topology) * PARTITIONS
                         * PER_PARTITION) == expected, node.service


def _produce(bootstrap: str, service: str, acked: dict[int, dict[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30000})
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()][msg.offset()] = msg.value()

    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, value=f"{service}-{partition}-{i}".encode(),
                             partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert not errors, errors


def _read_all(bootstrap: str, count: int) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) per partition from the start, without a group."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 30
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.value) for m in messages]
    finally:
        consumer.close()
    return got


# -- the entrypoint as a process, with a service's environment ------------------------------


def _entrypoint(node: ComposeNode, *args: str, drop: tuple[str, ...] = ()
                ) -> subprocess.CompletedProcess[str]:
    node.workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in {**base_environment(), **node.env}.items() if k not in drop}
    return subprocess.run([*entrypoint_command(), *args], cwd=node.workdir, env=env,
                          capture_output=True, text=True, timeout=60)


def test_entrypoint_formats_on_first_start_only(tmp_path: Path) -> None:
    node = compose_nodes(tmp_path)[0]
    meta_path = node.workdir / "data" / "meta.properties"
    first = _entrypoint(node, "--print-config")
    assert first.returncode == 0, first.stderr
    assert "Formatting metadata directory" in first.stdout
    assert f"node.id={node.node_id}\n" in first.stdout  # then it became `kafka-ext server`
    formatted = meta_path.read_text()
    assert f"cluster.id={node.env['CLUSTER_ID']}" in formatted

    second = _entrypoint(node, "--print-config")
    assert second.returncode == 0, second.stderr
    assert "not formatting" in second.stdout and "Formatting" not in second.stdout
    assert meta_path.read_text() == formatted  # same directory.id: not formatted again


def test_entrypoint_without_cluster_id_says_what_to_set(tmp_path: Path) -> None:
    node = compose_nodes(tmp_path)[0]
    done = _entrypoint(node, "--print-config", drop=("CLUSTER_ID",))
    assert done.returncode == 1
    assert "CLUSTER_ID is not set" in done.stderr and "random-uuid" in done.stderr
    assert not (node.workdir / "data" / "meta.properties").exists()


# -- the files themselves ---------------------------------------------------------------------


@pytest.mark.parametrize(("path", "expected"), [
    (COMPOSE, {"kafka-1", "kafka-2", "kafka-3", "minio", "minio-init", "prometheus", "grafana"}),
    (SPLIT, {"controller-1", "controller-2", "controller-3", "kafka-1", "kafka-2", "kafka-3",
             "minio", "minio-init"}),
])
def test_docker_compose_config_accepts_the_file(path: Path, expected: set[str]) -> None:
    """Debian's docker-compose validates the file without a daemon, and reads the same
    environments this module reads with PyYAML."""
    compose = debian_tool("docker-compose", "docker-compose")
    done = subprocess.run([compose, "-f", str(path), "config"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    resolved = yaml.safe_load(done.stdout)
    assert set(resolved["services"]) == expected
    ours = kafka_services(read_compose(path))
    theirs = kafka_services(resolved)
    assert {name: service_environment(s) for name, s in theirs.items()} == \
        {name: service_environment(s) for name, s in ours.items()}
    assert {name: published_ports(s) for name, s in theirs.items()} == \
        {name: published_ports(s) for name, s in ours.items()}


@pytest.mark.parametrize("path", [COMPOSE, SPLIT])
def test_every_node_config_is_valid_and_keeps_its_data_in_a_volume(path: Path,
                                                                   tmp_path: Path) -> None:
    compose = read_compose(path)
    for node in compose_nodes(tmp_path, path):
        config = load_config(None, node.env)
        assert config.log_dirs == [node.workdir / "data"]
        assert node.env["CLUSTER_ID"] == read_compose(path)["x-kafka-ext-environment"][
            "CLUSTER_ID"]
        mounts = compose["services"][node.service]["volumes"]
        volume, _, target = mounts[0].partition(":")
        assert target == VOLUME and volume in compose["volumes"], node.service


@pytest.mark.parametrize("path", [COMPOSE, SPLIT])
def test_minio_init_creates_the_diskless_bucket(path: Path) -> None:
    compose = read_compose(path)
    url = compose["x-kafka-ext-environment"].get(ENV_PREFIX + "DISKLESS_STORAGE_URL") or \
        compose["x-kafka-ext-broker-environment"][ENV_PREFIX + "DISKLESS_STORAGE_URL"]
    bucket = re.fullmatch(r"s3://([^/]+)(/.*)?", url)
    assert bucket is not None
    assert f"mc mb --ignore-existing local/{bucket[1]}" in " ".join(
        compose["services"]["minio-init"]["command"])
    for node in kafka_services(compose).values():
        env = service_environment(node)
        if "broker" in env[ENV_PREFIX + "PROCESS_ROLES"]:
            assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
            assert env["AWS_ACCESS_KEY_ID"] == \
                compose["services"]["minio"]["environment"]["MINIO_ROOT_USER"]


def test_image_runs_the_entrypoint_as_a_non_root_user_with_its_volume() -> None:
    instructions = dockerfile_instructions(DOCKERFILE)
    assert instructions["FROM"][-1] == "python:3.11-slim"
    assert instructions["USER"][-1] not in ("root", "0")
    assert instructions["VOLUME"] == [VOLUME]
    assert entrypoint_command()[3:] == ["docker-entrypoint"]
    healthcheck = instructions["HEALTHCHECK"][0].partition(" CMD ")[2]
    assert json.loads(healthcheck) == ["kafka-ext", "healthcheck"]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "kafka-ext-data"} <= set(ignored)


def test_prometheus_scrapes_every_node_and_grafana_charts_the_kafka_metrics() -> None:
    compose = read_compose(COMPOSE)
    scrape = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in scrape["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]]
    port = compose["x-kafka-ext-environment"][ENV_PREFIX + "PROMETHEUS_METRICS_PORT"]
    assert sorted(targets) == [f"{name}:{port}" for name in sorted(kafka_services(compose))]
    datasources = yaml.safe_load(
        (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090"
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "kafka-ext.json").read_text())
    queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert [m for m in DASHBOARD_METRICS if m not in queries] == []
    assert {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]} == \
        {source["uid"]}
