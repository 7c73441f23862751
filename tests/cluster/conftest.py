"""Several real `kafka-ext server` processes on loopback, formatted as one KRaft cluster.

Node-to-node quorum traffic goes through `LinkProxy`s, one per ordered pair of nodes (node i
reaches voter j at the port of proxy i->j), so a test can cut a node off from the quorum
without touching the processes, the way asyncpg's adversity tests cut connections. Clients
connect to the brokers directly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.client.probe import api_versions_ok, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.integration.conftest import free_port

CLUSTER_ID = "Y2x1c3Rlci10ZXN0LWlkMA"
STARTUP_TIMEOUT_S = 60.0
# Short timeouts keep the failure tests fast; the ratios are Kafka's defaults'.
FAST_QUORUM = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}


class LinkProxy:
    """A TCP relay from a local port to a target port that can be cut and healed."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while not self.cut:
                    data = await src.read(65536)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def set_cut(self, cut: bool) -> None:
        """Cut: close every open connection and refuse new ones; heal: relay again."""
        def apply() -> None:
            self.cut = cut
            if cut:
                for w in list(self._writers):
                    w.close()
        self._loop.call_soon_threadsafe(apply)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


class Node:
    """One kafka-ext process of the cluster."""

    def __init__(self, cluster: Cluster, node_id: int, roles: str) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.roles = roles
        self.data_dir = cluster.root / f"node{node_id}"
        self.log_path = cluster.root / f"node{node_id}.log"
        self.config_path = cluster.root / f"node{node_id}.properties"
        self.client_port = free_port() if "broker" in roles else 0
        self.controller_port = free_port() if "controller" in roles else 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def write_config(self, voters: str, extra: dict[str, str]) -> None:
        listeners = []
        if self.client_port:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.client_port}")
        if self.controller_port:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        settings = {
            "node.id": str(self.node_id), "process.roles": self.roles,
            "listeners": ",".join(listeners), "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters, "log.dirs": str(self.data_dir),
            "num.partitions": "1", **FAST_QUORUM, **extra,
        }
        if self.client_port:
            settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.client_port}"
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def format(self) -> None:
        done = subprocess.run([sys.executable, "-m", "kafka_ext", "storage", "format", "-t",
                               CLUSTER_ID, "-c", str(self.config_path)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EXT_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafka_ext", "server", str(self.config_path)],
            stdout=log_file, stderr=subprocess.STDOUT, env=env)
        log_file.close()

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until the broker answers on its client listener (it opens once unfenced), or the
        controller on its controller listener."""
        port = self.client_port or self.controller_port
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}:"
                                   f"\n{self.log()}")
            if api_versions_ok("127.0.0.1", port):
                return
            time.sleep(0.05)
        raise RuntimeError(f"node {self.node_id} not ready in {timeout_s}s:\n{self.log()}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no flush, no controlled shutdown."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP: the process stays, silent, its sockets open (a long GC pause, a VM stall)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM (a controlled shutdown) and wait; the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""


class Cluster:
    """`controllers` voters and `brokers` broker-only nodes, or `combined` nodes of both."""

    def __init__(self, root: Path, *, combined: int = 0, controllers: int = 0,
                 brokers: int = 0, extra: dict[str, str] | None = None,
                 racks: dict[int, str] | None = None) -> None:
        """`racks`: broker.rack per node id."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[int, Node] = {}
        for n in range(1, combined + 1):
            self.nodes[n] = Node(self, n, "broker,controller")
        for n in range(1, controllers + 1):
            self.nodes[n] = Node(self, n, "controller")
        for n in range(1, brokers + 1):
            self.nodes[100 + n] = Node(self, 100 + n, "broker")
        self.voter_ids = [n for n, node in self.nodes.items() if node.controller_port]
        # proxies[(i, j)]: how node i reaches voter j
        self.proxies = {(i, j): LinkProxy(self.nodes[j].controller_port)
                        for i in self.nodes for j in self.voter_ids if i != j}
        for i, node in self.nodes.items():
            voters = ",".join(
                f"{j}@127.0.0.1:"
                f"{self.nodes[j].controller_port if i == j else self.proxies[(i, j)].port}"
                for j in self.voter_ids)
            rack = {"broker.rack": racks[i]} if racks and i in racks else {}
            node.write_config(voters, {**(extra or {}), **rack})
            node.format()

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_ready()

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.client_port]

    def isolate(self, node_id: int, cut: bool = True) -> None:
        """Cut (or heal) every quorum link to and from a node."""
        for (i, j), proxy in self.proxies.items():
            if node_id in (i, j):
                proxy.set_cut(cut)

    def quorum(self, via: Node) -> Any:
        """DescribeQuorum's partition answer from one node."""
        port = via.client_port or via.controller_port
        cls = registry()["DescribeQuorumRequest"].cls
        request = cls(topics=[cls.TopicData(topic_name="__cluster_metadata", partitions=[
            cls.PartitionData(partition_index=0)])])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            answer = round_trip(sock, ApiKey.DESCRIBE_QUORUM, 1, request)
        return answer.topics[0].partitions[0]

    def wait_for_leader(self, among: list[Node], timeout_s: float = 30,
                        not_: int | None = None) -> int:
        """Until every node of `among` names the same live leader (other than `not_`)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                leaders = {self.quorum(n).leader_id for n in among}
            except OSError:
                leaders = set()
            if len(leaders) == 1:
                (leader,) = leaders
                if leader >= 0 and leader != not_ and self.nodes[leader].alive:
                    return leader
            time.sleep(0.1)
        raise AssertionError(f"no common leader within {timeout_s}s")

    def close(self) -> list[str]:
        """Stop every node; the problems found (crashes, tracebacks)."""
        problems = []
        # Brokers first: their controlled shutdown needs the controllers.
        for node in sorted(self.nodes.values(), key=lambda n: "controller" in n.roles):
            if node.proc is None:
                continue
            code = node.stop(timeout_s=30)
            if code not in (0, -9):
                problems.append(f"node {node.node_id} exited with {code}:\n{node.log()}")
            elif "Traceback" in node.log():
                problems.append(f"node {node.node_id} logged a traceback:\n{node.log()}")
        for proxy in self.proxies.values():
            proxy.close()
        return problems


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(**kwargs: Any) -> Cluster:
        cluster = Cluster(tmp_path, **kwargs)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    problems = [p for cluster in made for p in cluster.close()]
    if problems:
        pytest.fail("\n\n".join(problems))
