"""A seeded fault campaign against replicated partitions (issue 14 item 8), Jepsen-style.

An idempotent acks=all producer writes sequenced values without pause while the campaign kills
(-9) and pauses (SIGSTOP) partition leaders, followers and the active controller, one fault per
round, each followed by recovery. Afterwards a checker reads every partition back through every
broker and counts acknowledged writes lost, records duplicated, acknowledged writes found at
another offset, and offsets that hold different records for different readers. All must be zero.

CI runs a bounded slice (seed 1, a few rounds). A longer campaign:
    FAULT_SEEDS=1-20 FAULT_ROUNDS=12 pytest tests/cluster/test_replication_faults.py
and a failing seed replays with FAULT_SEEDS=<seed>.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    create_replicated_topic,
    partition_state,
    read_all,
)

TOPIC = "ledger"
PARTITIONS = 3
FAULTS = ("kill leader", "kill follower", "kill controller", "pause leader", "pause follower")


def _seeds() -> list[int]:
    spec = os.environ.get("FAULT_SEEDS", "1")
    if "-" in spec:
        first, last = spec.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in spec.split(",")]


ROUNDS = int(os.environ.get("FAULT_ROUNDS", "3"))


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


def _all_in_sync(cluster: Cluster) -> bool:
    node = next(n for n in cluster.brokers if n.alive)
    state = partition_state(node, TOPIC)
    return all(leader >= 0 and len(isr) == 3 for leader, _, isr in state.values())


def _target(cluster: Cluster, rng: random.Random, fault: str) -> Node:
    node = next(n for n in cluster.brokers if n.alive)
    if fault.endswith("controller"):
        return cluster.nodes[cluster.wait_for_leader(list(cluster.nodes.values()))]
    state = partition_state(node, TOPIC)
    leader, replicas, _ = state[rng.randrange(PARTITIONS)]
    if fault.endswith("leader"):
        return cluster.nodes[leader]
    return cluster.nodes[rng.choice([r for r in replicas if r != leader])]


def _inject(node: Node, fault: str, rng: random.Random) -> None:
    outage_s = rng.uniform(0.5, 4.0)
    if fault.startswith("kill"):
        node.kill()
        time.sleep(outage_s)
        node.start()
        node.wait_ready()
    else:
        node.pause()
        time.sleep(outage_s)
        node.resume()


@pytest.mark.parametrize("seed", _seeds())
def test_no_acknowledged_write_is_lost_through_kills_and_pauses(cluster_factory: Any,
                                                                seed: int) -> None:
    rng = random.Random(seed)
    replay = f"replay: FAULT_SEEDS={seed} FAULT_ROUNDS={ROUNDS} pytest {__file__}"
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "replica.socket.timeout.ms": "3000"})
    n1 = cluster.brokers[0]
    create_replicated_topic(n1, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    producer = SequencedProducer(n1, TOPIC)
    writer = ContinuousWriter(producer)
    writer.start()
    history = []
    for _ in range(ROUNDS):
        time.sleep(rng.uniform(0.5, 2.0))
        fault = rng.choice(FAULTS)
        node = _target(cluster, rng, fault)
        history.append(f"{fault} {node.node_id}")
        _inject(node, fault, rng)
        wait_until(lambda: _all_in_sync(cluster), 60,
                   f"every replica back in sync after {history} ({replay})")
    writer.stop()
    assert producer.failed == [], (producer.failed[:5], history, replay)
    # Every broker is a bootstrap for one reader; they must agree on every offset.
    reads = [read_all(node, TOPIC, len(producer.acked)) for node in cluster.brokers]
    problems = _check(producer.acked, reads)
    assert problems == {"lost": 0, "duplicated": 0, "moved": 0, "inconsistent": 0}, (
        problems, history, replay)


def _check(acked: dict[bytes, tuple[int, int]],
           reads: list[dict[int, list[tuple[int, bytes]]]]) -> dict[str, int]:
    """Jepsen-style counts over the acknowledged writes and what each reader saw."""
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
