"""Several real `kafka-ext server` processes on loopback, formatted as one KRaft cluster.

Every node-to-node link goes through a `LinkProxy`, so a test can cut nodes off from each other
without touching the processes, the way asyncpg's adversity tests cut connections. Quorum
traffic has one proxy per ordered pair of nodes (node i reaches voter j at the port of proxy
i->j). Broker-to-broker traffic (replica fetches, transaction markers) uses each broker's
REPLICATION listener (`inter.broker.listener.name`), whose advertised port is a proxy in front
of it; that proxy learns which broker a connection comes from by the client id of its first
request. Clients connect to the brokers' PLAINTEXT listeners directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from kafka_ext.client.probe import api_versions_ok, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, KafkaError
from kafka_ext.protocol.framing import SIZE, decode_request_header, frame_size
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
INTER_BROKER_LISTENER = "REPLICATION"
# The client ids our nodes open their connections to each other with (node_client.NodeChannels
# users: kafka-ext-replica-fetcher-<id>, kafka-ext-broker-<id>, kafka-ext-raft-<id>, ...).
_NODE_CLIENT_ID = re.compile(r"kafka-ext-[a-z-]+-(\d+)")
_FIRST_FRAME_MAX_BYTES = 1 << 20  # an ApiVersions request; anything bigger is not one of ours
UNIDENTIFIED = -1  # the source of a connection whose client id names no node: never cut

Link = tuple[int, int]  # (source node, destination node): connections the source opens
CutMode = Literal["drop", "stall"]
T = TypeVar("T")


class _Relay:
    """One relayed connection: the accepted side and, once open, the upstream side."""

    __slots__ = ("dropped", "writers")

    def __init__(self, accepted: asyncio.StreamWriter) -> None:
        self.writers = [accepted]
        self.dropped = False

    def drop(self) -> None:
        self.dropped = True
        for writer in self.writers:
            writer.close()


class LinkProxy:
    """A TCP relay in front of node `dst`'s `target_port`. Its connections come from node `src`
    (a quorum proxy, one per ordered pair), or, when `src` is None, from the node the client id
    of their first request names (the proxy in front of a broker's inter-broker listener)."""

    def __init__(self, network: Network, target_port: int, dst: int, src: int | None) -> None:
        self.network = network
        self.target_port = target_port
        self.dst = dst
        self.src = src
        self.port = 0  # bound by Network.proxy

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first, src = b"", self.src
        if src is None:
            try:
                first, named = await asyncio.wait_for(self.network.identify(reader), 10)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, KafkaError,
                    DecodeError):
                writer.close()
                return
            src = named
        await self.network.relay((src, self.dst), first, reader, writer, self.target_port)


class Network:
    """The links between a cluster's nodes: every LinkProxy, served by one event-loop thread,
    and the directed links that are cut. A cut link (src, dst) stops the connections src opens
    to dst, whichever way their bytes go. "drop" closes them and refuses new ones (a firewall
    that rejects); "stall" holds their bytes, both ways, until the link heals (a firewall that
    drops packets, healed before TCP gives up: what was sent arrives late)."""

    def __init__(self) -> None:
        self._cuts: dict[Link, CutMode] = {}
        self._held: dict[Link, asyncio.Event] = {}  # stalled links: set when they heal
        self._relays: dict[Link, set[_Relay]] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self.unidentified: list[str | None] = []  # client ids that named no node
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def proxy(self, target_port: int, dst: int, src: int | None = None) -> LinkProxy:
        """A new relay to `target_port` of node `dst`, listening on a free loopback port."""
        proxy = LinkProxy(self, target_port, dst, src)

        async def listen() -> int:
            server = await asyncio.start_server(proxy.accept, "127.0.0.1", 0)
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        proxy.port = self._call(listen())
        return proxy

    async def identify(self, reader: asyncio.StreamReader) -> tuple[bytes, int]:
        """Read a connection's first request; (its bytes, the node its client id names)."""
        prefix = await reader.readexactly(SIZE.size)
        size = frame_size(prefix, _FIRST_FRAME_MAX_BYTES)
        assert size is not None
        frame = await reader.readexactly(size)
        header, _ = decode_request_header(frame)
        named = _NODE_CLIENT_ID.fullmatch(header.client_id or "")
        if named is None:
            self.unidentified.append(header.client_id)
            return prefix + frame, UNIDENTIFIED
        return prefix + frame, int(named.group(1))

    async def relay(self, link: Link, first: bytes, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, target_port: int) -> None:
        relay = _Relay(writer)
        relays = self._relays.setdefault(link, set())
        relays.add(relay)
        try:
            if self._cuts.get(link) == "drop":
                return
            await self._wait_healed(link)  # a stalled link holds new connections too
            if relay.dropped:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
            except OSError:
                return
            relay.writers.append(up_writer)
            if relay.dropped:
                return
            up_writer.write(first)
            await asyncio.gather(self._pipe(link, relay, reader, up_writer),
                                 self._pipe(link, relay, up_reader, writer))
        finally:
            relays.discard(relay)
            relay.drop()

    async def _wait_healed(self, link: Link) -> None:
        while (held := self._held.get(link)) is not None:
            await held.wait()

    async def _pipe(self, link: Link, relay: _Relay, src: asyncio.StreamReader,
                    dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                await self._wait_healed(link)
                if relay.dropped:
                    break
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.close()

    def _apply(self, link: Link, mode: CutMode | None) -> None:
        if self._cuts.pop(link, None) == "stall":
            self._held.pop(link).set()  # the held bytes flow again
        if mode is None:
            return
        self._cuts[link] = mode
        if mode == "stall":
            self._held[link] = asyncio.Event()
        else:
            for relay in list(self._relays.get(link, ())):
                relay.drop()

    def set_links(self, links: Iterable[Link], mode: CutMode | None) -> None:
        """Cut `links` (directed) in `mode`, or heal them (None); in force when this returns."""
        chosen = list(links)

        async def apply() -> None:
            for link in chosen:
                self._apply(link, mode)

        self._call(apply())

    def reset_links(self, links: Iterable[Link]) -> None:
        """Close the connections of `links` now, both ends, and let new ones through: a reset
        (a middlebox's RST, a flapping NIC), not a cut."""
        chosen = list(links)

        async def apply() -> None:
            for link in chosen:
                for relay in list(self._relays.get(link, ())):
                    relay.drop()

        self._call(apply())

    def cut_links(self) -> dict[Link, CutMode]:
        """The links cut now, and how."""
        async def read() -> dict[Link, CutMode]:
            return dict(self._cuts)

        return self._call(read())

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for relays in self._relays.values():
                for relay in list(relays):
                    relay.drop()
            for held in self._held.values():
                held.set()

        with contextlib.suppress(TimeoutError):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


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
        self.inter_broker_port = free_port() if "broker" in roles else 0
        self.controller_port = free_port() if "controller" in roles else 0
        self.inter_broker_proxy: LinkProxy | None = None  # what other brokers connect to
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def write_config(self, voters: str, extra: dict[str, str]) -> None:
        listeners = []
        if self.client_port:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.client_port}")
            listeners.append(f"{INTER_BROKER_LISTENER}://127.0.0.1:{self.inter_broker_port}")
        if self.controller_port:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        settings = {
            "node.id": str(self.node_id), "process.roles": self.roles,
            "listeners": ",".join(listeners), "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                                              f"{INTER_BROKER_LISTENER}:PLAINTEXT,"
                                              "CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters, "log.dirs": str(self.data_dir),
            "num.partitions": "1", **FAST_QUORUM, **extra,
        }
        if self.client_port:
            # PLAINTEXT first: Metadata answers clients with the first advertised listener.
            assert self.inter_broker_proxy is not None
            settings["advertised.listeners"] = (
                f"PLAINTEXT://127.0.0.1:{self.client_port},"
                f"{INTER_BROKER_LISTENER}://127.0.0.1:{self.inter_broker_proxy.port}")
            settings["inter.broker.listener.name"] = INTER_BROKER_LISTENER
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def format(self, extra_args: Sequence[str] = ()) -> None:
        done = subprocess.run([sys.executable, "-m", "kafka_ext", "storage", "format", "-t",
                               CLUSTER_ID, "-c", str(self.config_path), *extra_args],
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
                 racks: dict[int, str] | None = None,
                 node_extra: dict[int, dict[str, str]] | None = None,
                 format_args: Sequence[str] = ()) -> None:
        """`racks`: broker.rack per node id; `node_extra`: more configs of single nodes;
        `format_args`: more `storage format` arguments (`--feature NAME=LEVEL`)."""
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
        self.network = Network()
        # quorum_proxies[(i, j)]: how node i reaches voter j
        self.quorum_proxies = {(i, j): self.network.proxy(self.nodes[j].controller_port, j, i)
                               for i in self.nodes for j in self.voter_ids if i != j}
        for node in self.brokers:
            node.inter_broker_proxy = self.network.proxy(node.inter_broker_port, node.node_id)
        for i, node in self.nodes.items():
            voters = ",".join(
                f"{j}@127.0.0.1:"
                f"{self.nodes[j].controller_port if i == j else self.quorum_proxies[(i, j)].port}"
                for j in self.voter_ids)
            rack = {"broker.rack": racks[i]} if racks and i in racks else {}
            node.write_config(voters, {**(extra or {}), **rack,
                                       **(node_extra or {}).get(i, {})})
            node.format(format_args)

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_ready()

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.client_port]

    def cut(self, links: Iterable[Link], mode: CutMode = "drop") -> None:
        """Cut directed links: a cut (i, j) stops the connections node i opens to node j
        (quorum and inter-broker), so one-way cuts make asymmetric partitions."""
        self.network.set_links(links, mode)

    def reset(self, links: Iterable[Link]) -> None:
        """Reset the connections of directed links (Network.reset_links); nothing stays cut."""
        self.network.reset_links(links)

    def partition(self, *sides: Iterable[int], mode: CutMode = "drop") -> None:
        """Cut every link, both ways, between nodes on different sides; nodes on no side
        keep every link."""
        side_of = {n: k for k, side in enumerate(sides) for n in side}
        self.cut([(i, j) for i in side_of for j in side_of if side_of[i] != side_of[j]], mode)

    def isolate(self, node_id: int, cut: bool = True, mode: CutMode = "drop") -> None:
        """Cut (or heal) every link to and from a node: quorum and replication."""
        others = [n for n in self.nodes if n != node_id]
        if cut:
            self.partition([node_id], others, mode=mode)
        else:
            self.heal([(node_id, n) for n in others] + [(n, node_id) for n in others])

    def heal(self, links: Iterable[Link] | None = None) -> None:
        """Heal `links`, or every cut link."""
        self.network.set_links(self.network.cut_links() if links is None else links, None)

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
        self.network.close()
        if self.network.unidentified:  # such a connection would go through any cut
            problems.append("connections to an inter-broker listener named no node: "
                            f"client ids {sorted(set(map(str, self.network.unidentified)))}")
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
