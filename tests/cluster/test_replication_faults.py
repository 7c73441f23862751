"""A seeded fault campaign against replicated partitions (issue 14 item 8), Jepsen-style.

An idempotent acks=all producer writes sequenced values without pause, and a read_committed
consumer reads them, while the campaign injects one fault per round, each followed by recovery.
Rounds alternate between a process fault (kill -9 or SIGSTOP of a partition leader, a follower
or the active controller) and a network fault (a leader, a follower or the active controller cut
off from every other node; a leader whose inbound or outbound links alone are cut; or a bridge:
a leader cut off from the active controller only, both still reaching the third node), so even
CI's three rounds see both. A network fault cuts quorum and replication links alike, either
closing the connections ("drop") or holding their bytes until it heals ("stall").

Afterwards a checker reads every partition back through every broker and counts acknowledged
writes lost, records duplicated, acknowledged writes found at another offset, and offsets that
hold different records for different readers; and, for the consumer that read during the faults,
records it skipped, offsets it saw go back, and records it saw that the log does not hold at
that offset. All must be zero.

CI runs a bounded slice (seed 1, three rounds). A longer campaign:
    FAULT_SEEDS=1-20 FAULT_ROUNDS=12 pytest tests/cluster/test_replication_faults.py
and a failing seed replays with FAULT_SEEDS=<seed> FAULT_ROUNDS=<rounds>. FAULT_OVERLAP=1 starts
each fault without waiting for the last one's recovery. `run_campaign` takes the topic it writes
(`CampaignTopic`) and the fault families it alternates, so the same campaign runs on diskless
topics (tests/cluster/test_diskless_s3_cluster.py).

One more test heals a node cut off past its session and counts, from the brokers' /metrics, the
ISR proposals its return costs (issue 33 item 4: no retry storm of refused AlterPartitions).
"""

from __future__ import annotations

import os
import random
import socket
import socketserver
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kafka_ext.client.probe import api_versions_request, recv_exact
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.framing import encode_request
from tests.cluster.conftest import Cluster, CutMode, Network, Node
from tests.cluster.test_cluster import brokers_seen, wait_until
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    create_replicated_topic,
    partition_state,
    read_all,
)
from tests.integration.conftest import free_port

TOPIC = "ledger"
PARTITIONS = 3
KILL_FAULTS = ("kill leader", "kill follower", "kill controller")
PAUSE_FAULTS = ("pause leader", "pause follower")
PROCESS_FAULTS = KILL_FAULTS + PAUSE_FAULTS
NETWORK_FAULTS = ("isolate leader", "isolate follower", "isolate controller",
                  "cut leader inbound", "cut leader outbound", "bridge leader")
CUT_MODES: tuple[CutMode, ...] = ("drop", "stall")


@dataclass(frozen=True)
class CampaignTopic:
    """The topic a campaign writes, and the replicated topic its leader and follower faults aim
    at, whose every partition must be led and fully in sync again after each round: the topic
    itself when it is classic; `__diskless_metadata` (its coordinators) when it is diskless."""

    name: str = TOPIC
    partitions: int = PARTITIONS
    configs: dict[str, str] = field(default_factory=lambda: {"min.insync.replicas": "2"})
    replication_factor: int = 3
    aimed_at: str = TOPIC
    aimed_at_partitions: int = PARTITIONS


def fault_seeds() -> list[int]:
    spec = os.environ.get("FAULT_SEEDS", "1")
    if "-" in spec:
        first, last = spec.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in spec.split(",")]


ROUNDS = int(os.environ.get("FAULT_ROUNDS", "3"))
# FAULT_OVERLAP=1: a round does not wait for every replica to be back in sync before the next
# fault (only the last one does), so faults land on partitions still recovering.
OVERLAP = os.environ.get("FAULT_OVERLAP", "") not in ("", "0")


class ContinuousWriter:
    """Writes until stopped, from one thread (the producer is driven by one thread only)."""

    def __init__(self, producer: SequencedProducer) -> None:
        self.producer = producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.send(20, pause_s=0.002)
        self.producer.flush()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish its flush"


class ContinuousReader:
    """Reads every partition from its start with read_committed until stopped, from one thread,
    and remembers (offset, value) per partition in the order they were polled. No group
    coordination (the group's coordinator may be killed); it never commits."""

    def __init__(self, cluster: Cluster, topic: CampaignTopic) -> None:
        self.topic = topic
        self.observed: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.errors: list[str] = []
        self._consumer = Consumer({
            "bootstrap.servers": ",".join(n.bootstrap for n in cluster.brokers),
            "group.id": "campaign-reader", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 200, "topic.metadata.refresh.interval.ms": 1000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self._consumer.assign([TopicPartition(self.topic.name, p, OFFSET_BEGINNING)
                               for p in range(self.topic.partitions)])
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.2):
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))  # transient during faults
                else:
                    partition, offset, value = msg.partition(), msg.offset(), msg.value()
                    assert partition is not None and offset is not None and value is not None
                    self.observed[partition].append((offset, value))
        self._consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the reader did not stop"


def _all_in_sync(cluster: Cluster, topic: CampaignTopic) -> bool:
    """Every live broker sees every partition of the topic led, and every partition the faults
    aim at led and fully in sync (a healed broker may still show what it saw before its cut)."""
    for node in cluster.brokers:
        if not node.alive:
            continue
        written = partition_state(node, topic.name)
        if len(written) != topic.partitions or any(leader < 0 for leader, _, _ in
                                                   written.values()):
            return False
        aimed = (written if topic.aimed_at == topic.name
                 else partition_state(node, topic.aimed_at))
        if len(aimed) != topic.aimed_at_partitions or not all(
                leader >= 0 and len(isr) == 3 for leader, _, isr in aimed.values()):
            return False
    return True


def _target(cluster: Cluster, rng: random.Random, fault: str, topic: CampaignTopic) -> Node:
    role = fault.split()[1]
    if role == "controller":
        return cluster.nodes[cluster.wait_for_leader(list(cluster.nodes.values()))]
    node = next(n for n in cluster.brokers if n.alive)
    state = partition_state(node, topic.aimed_at)
    leader, replicas, _ = state[rng.randrange(topic.aimed_at_partitions)]
    if role == "leader":  # none while it recovers (FAULT_OVERLAP): any replica
        return cluster.nodes[leader if leader >= 0 else rng.choice(replicas)]
    return cluster.nodes[rng.choice([r for r in replicas if r != leader])]


def _inject(cluster: Cluster, node: Node, fault: str, rng: random.Random) -> str:
    """Make the fault, hold it, recover; how it was made, for the history."""
    outage_s = rng.uniform(0.5, 4.0)
    verb = fault.split()[0]
    if verb == "kill":
        node.kill()
        time.sleep(outage_s)
        node.start()
        node.wait_ready()
        return f"{outage_s:.1f}s"
    if verb == "pause":
        node.pause()
        time.sleep(outage_s)
        node.resume()
        return f"{outage_s:.1f}s"
    mode = rng.choice(CUT_MODES)
    outage_s += 1.5  # about half the cuts outlast broker.session.timeout.ms (3 s)
    others = [n for n in cluster.nodes if n != node.node_id]
    how = f"{mode} {outage_s:.1f}s"
    if fault.startswith("bridge"):
        controller = cluster.wait_for_leader(list(cluster.nodes.values()))
        away = controller if controller != node.node_id else rng.choice(others)
        cluster.partition([node.node_id], [away], mode=mode)
        how = f"from {away}, {how}"
    elif fault.endswith("inbound"):
        cluster.cut([(other, node.node_id) for other in others], mode)
    elif fault.endswith("outbound"):
        cluster.cut([(node.node_id, other) for other in others], mode)
    else:
        cluster.isolate(node.node_id, mode=mode)
    time.sleep(outage_s)
    cluster.heal()
    return how


def run_campaign(cluster: Cluster, seed: int, rounds: int, overlap: bool = False,
                 topic: CampaignTopic | None = None,
                 families: Sequence[Sequence[str]] = (PROCESS_FAULTS, NETWORK_FAULTS),
                 ) -> list[dict[int, list[tuple[int, bytes]]]]:
    """Write `topic` while the rounds inject faults, one family after another from a random
    first one; check the history, and return the final log as each broker reads it."""
    topic = topic or CampaignTopic()
    rng = random.Random(seed)
    test_file = os.environ.get("PYTEST_CURRENT_TEST", __file__).split("::")[0]
    replay = (f"replay: FAULT_SEEDS={seed} FAULT_ROUNDS={rounds} FAULT_OVERLAP={int(overlap)} "
              f"pytest {test_file}")
    print(f"fault campaign on {topic.name}: seed {seed}, {rounds} rounds; {replay}")
    n1 = cluster.brokers[0]
    create_replicated_topic(n1, topic.name, topic.partitions, topic.replication_factor,
                            topic.configs)
    producer = SequencedProducer(n1, topic.name)
    writer = ContinuousWriter(producer)
    reader = ContinuousReader(cluster, topic)
    writer.start()
    reader.start()
    history = []
    first_kind = rng.randrange(len(families))
    for round_ in range(rounds):
        time.sleep(rng.uniform(0.5, 2.0))
        fault = rng.choice(families[(first_kind + round_) % len(families)])
        node = _target(cluster, rng, fault, topic)
        how = _inject(cluster, node, fault, rng)
        history.append(f"{fault} {node.node_id} ({how})")
        if not overlap or round_ == rounds - 1:
            wait_until(lambda: _all_in_sync(cluster, topic), 60,
                       f"every replica back in sync after {history} ({replay})")
    writer.stop()
    reader.stop()
    print(f"seed {seed}: {history}; {len(producer.acked)} acknowledged, "
          f"{sum(map(len, reader.observed.values()))} read during the faults")
    assert producer.failed == [], (producer.failed[:5], history, replay)
    # Every broker is a bootstrap for one reader; they must agree on every offset.
    reads = [read_all(node, topic.name, len(producer.acked)) for node in cluster.brokers]
    problems = {**check_history(producer.acked, reads),
                **check_reads_during_faults(reader.observed, reads[0])}
    assert problems == {"lost": 0, "duplicated": 0, "moved": 0, "inconsistent": 0,
                        "skipped": 0, "nonmonotonic": 0, "phantom": 0}, (
        problems, history, replay, reader.errors[:5])
    return reads


@pytest.mark.parametrize("seed", fault_seeds())
def test_no_acknowledged_write_is_lost_nor_read_skipped_through_kills_pauses_and_cuts(
        cluster_factory: Any, seed: int) -> None:
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "replica.socket.timeout.ms": "3000"})
    run_campaign(cluster, seed, ROUNDS, OVERLAP)


HEALING_PARTITIONS = 6
# What one healing may cost in ISR proposals per partition: the one that adds the node back,
# and room for a refusal or two where a leader's metadata lagged the controller's. The storm
# this bounds was a proposal per fetch (every ~20 ms) for as long as the node stayed fenced.
PROPOSALS_PER_PARTITION = 3
_PROPOSALS = "kafka_server_alterpartitionmanager_partitions_total"
_REFUSALS = "kafka_server_replicamanager_failedisrupdates_total"
_END_OFFSET = "kafka_log_log_logendoffset"


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of one node's /metrics, by (name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _end_offsets(port: int, topic: str, partitions: list[int]) -> list[float]:
    found = _scrape(port)
    return [found.get((_END_OFFSET, frozenset({("topic", topic), ("partition", str(p))})), -1.0)
            for p in partitions]


def test_a_healed_node_rejoins_every_isr_without_a_storm_of_alter_partitions(
        cluster_factory: Any) -> None:
    """A node cut off past its session is fenced and leaves every ISR. The cut heals towards
    the other broker first and towards the active controller a second later, so for that second
    the node's followers are caught up on that broker's partitions while the controller still
    has it fenced (its heartbeats do not get through): the leader must not propose it then
    (each proposal would be refused INELIGIBLE_REPLICA, and it came on every fetch), and must
    propose it once per partition when its metadata shows it unfenced."""
    ports = {n: free_port() for n in (1, 2, 3)}
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "replica.socket.timeout.ms": "3000",
        "prometheus.metrics.host": "127.0.0.1"},
        node_extra={n: {"prometheus.metrics.port": str(port)} for n, port in ports.items()})
    topic = CampaignTopic(name="healing", partitions=HEALING_PARTITIONS,
                          aimed_at="healing", aimed_at_partitions=HEALING_PARTITIONS)
    create_replicated_topic(cluster.brokers[0], topic.name, topic.partitions, 3, topic.configs)
    controller = cluster.wait_for_leader(list(cluster.nodes.values()))
    cut_off, bridge = sorted((n for n in cluster.nodes if n != controller), reverse=True)
    stays = cluster.nodes[bridge]
    producer = SequencedProducer(stays, topic.name)
    writer = ContinuousWriter(producer)  # the cut-off node falls behind, then catches up
    writer.start()
    try:
        wait_until(lambda: len(producer.acked) > 100, 30, "writes acknowledged")
        cluster.isolate(cut_off)
        # Fenced (Metadata lists only unfenced brokers), not just shrunk out for its lag.
        wait_until(lambda: cut_off not in brokers_seen(stays) and all(
            cut_off not in isr for _, _, isr in partition_state(stays, topic.name).values()),
            60, f"node {cut_off} fenced and out of every ISR")
        before = {n: _scrape(port) for n, port in ports.items()}
        cluster.heal([(cut_off, bridge), (bridge, cut_off)])
        led = [p for p, (leader, _, _) in partition_state(stays, topic.name).items()
               if leader == bridge]
        assert led, "the broker the cut heals towards first leads nothing"
        missed = _end_offsets(ports[bridge], topic.name, led)
        wait_until(lambda: all(ours >= theirs for ours, theirs in zip(
            _end_offsets(ports[cut_off], topic.name, led), missed, strict=True)), 30,
            f"node {cut_off} caught up on {bridge}'s partitions {led}")
        time.sleep(1.0)  # the fault: caught up and fenced, fetching, for a second
        cluster.heal()
        wait_until(lambda: _all_in_sync(cluster, topic), 60,
                   f"node {cut_off} back in the ISR of every partition")
    finally:
        writer.stop()
    after = {n: _scrape(port) for n, port in ports.items()}

    def since_the_cut(name: str, nodes: Iterable[int]) -> float:
        return sum(after[n].get((name, frozenset()), 0.0)
                   - before[n].get((name, frozenset()), 0.0) for n in nodes)

    # The leaders that take the node back; the node itself only retries, with a backoff, the
    # shrinks it proposed as a leader before it learns it leads nothing any more.
    leaders = [n for n in ports if n != cut_off]
    proposals = since_the_cut(_PROPOSALS, leaders)
    refusals = since_the_cut(_REFUSALS, ports)
    print(f"healing node {cut_off}: {proposals:.0f} ISR proposals by the leaders, "
          f"{since_the_cut(_PROPOSALS, [cut_off]):.0f} by the node, {refusals:.0f} refused")
    assert proposals <= PROPOSALS_PER_PARTITION * topic.partitions, (proposals, refusals)
    for node in cluster.brokers:  # every broker's metadata has it back everywhere
        assert all(sorted(isr) == [1, 2, 3]
                   for _, _, isr in partition_state(node, topic.name).values())
    assert producer.failed == [], producer.failed[:5]


def check_history(acked: dict[bytes, tuple[int, int]],
                  reads: list[dict[int, list[tuple[int, bytes]]]]) -> dict[str, int]:
    """Jepsen-style counts over the acknowledged writes and what each final reader saw."""
    problems = Counter({"lost": 0, "duplicated": 0, "moved": 0, "inconsistent": 0})
    by_offset: dict[tuple[int, int], set[bytes]] = {}
    for read in reads:
        where: dict[bytes, tuple[int, int]] = {}
        for partition, records in read.items():
            for offset, value in records:
                if value in where:
                    problems["duplicated"] += 1
                where[value] = (partition, offset)
                by_offset.setdefault((partition, offset), set()).add(value)
        for value, position in acked.items():
            if value not in where:
                problems["lost"] += 1
            elif where[value] != position:
                problems["moved"] += 1
    problems["inconsistent"] = sum(1 for values in by_offset.values() if len(values) > 1)
    return dict(problems)


def check_reads_during_faults(observed: dict[int, list[tuple[int, bytes]]],
                              final: dict[int, list[tuple[int, bytes]]]) -> dict[str, int]:
    """What a consumer read while the faults went on must be, per partition, a gap-free prefix
    of the final log, in order, at the same offsets. Counts the records of the final log it
    passed over (skipped), reads at or below an offset it had already read (nonmonotonic) and
    records it saw that the final log does not hold at that offset (phantom: a read of
    something uncommitted)."""
    problems = Counter({"skipped": 0, "nonmonotonic": 0, "phantom": 0})
    for partition, records in observed.items():
        log = dict(final.get(partition, []))
        last = -1
        for offset, value in records:
            if log.get(offset) != value:
                problems["phantom"] += 1
            if offset <= last:
                problems["nonmonotonic"] += 1
                continue
            problems["skipped"] += sum(1 for o in range(last + 1, offset) if o in log)
            last = offset
    return dict(problems)


def test_checker_counts_skipped_nonmonotonic_and_phantom_reads() -> None:
    final = {0: [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]}
    assert check_reads_during_faults({0: [(0, b"a"), (1, b"b")]}, final) == {
        "skipped": 0, "nonmonotonic": 0, "phantom": 0}
    assert check_reads_during_faults({0: [(0, b"a"), (2, b"c"), (1, b"b")]}, final) == {
        "skipped": 1, "nonmonotonic": 1, "phantom": 0}
    assert check_reads_during_faults({0: [(1, b"b"), (2, b"x")]}, final) == {
        "skipped": 1, "nonmonotonic": 0, "phantom": 1}
    acked = {b"a": (0, 0), b"b": (0, 1), b"z": (0, 9)}
    other = {0: [(0, b"a"), (1, b"c"), (2, b"b"), (3, b"c")]}
    assert check_history(acked, [final, other]) == {
        "lost": 2, "duplicated": 1, "moved": 1, "inconsistent": 3}


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


def _connect_as(proxy_port: int, client_id: str) -> tuple[socket.socket, bytes]:
    """A connection whose first request names `client_id`, as our nodes open them."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
    first = encode_request(ApiKey.API_VERSIONS, 3, 1, client_id,
                           api_versions_request(NODE_SOFTWARE_NAME))
    sock.sendall(first)
    return sock, first


def test_a_cut_link_drops_or_stalls_only_the_connections_its_source_opened() -> None:
    """The proxy in front of an inter-broker listener tells connections apart by the node their
    client id names: cutting 1 -> 3 stops broker 1's fetcher and leaves broker 2's."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    network = Network()
    try:
        proxy = network.proxy(server.server_address[1], dst=3)
        from_1, first_1 = _connect_as(proxy.port, "kafka-ext-replica-fetcher-1")
        from_2, first_2 = _connect_as(proxy.port, "kafka-ext-broker-2")
        assert recv_exact(from_1, len(first_1)) == first_1
        assert recv_exact(from_2, len(first_2)) == first_2
        network.set_links([(1, 3)], "stall")  # held, not lost: delivered once healed
        from_1.sendall(b"late")
        from_2.sendall(b"now")
        assert recv_exact(from_2, 3) == b"now"
        from_1.settimeout(0.3)
        with pytest.raises(TimeoutError):
            from_1.recv(4)
        network.set_links([(1, 3)], None)
        from_1.settimeout(5)
        assert recv_exact(from_1, 4) == b"late"
        network.set_links([(1, 3)], "drop")  # closed, and new ones refused
        assert from_1.recv(4) == b""
        again, _ = _connect_as(proxy.port, "kafka-ext-replica-fetcher-1")
        assert again.recv(4) == b""
        from_2.sendall(b"still")
        assert recv_exact(from_2, 5) == b"still"
        assert network.cut_links() == {(1, 3): "drop"} and network.unidentified == []
        for sock in (from_1, from_2, again):
            sock.close()
    finally:
        network.close()
        server.shutdown()
        server.server_close()
