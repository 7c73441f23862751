"""KRaft cluster timings (issue 13 item 7), on real processes on loopback:

- CreateTopics until the topic is usable (leaders in Metadata) on every broker;
- controller failover after kill -9 of the active controller (median and max over N kills);
- CreateTopics of 10,000 partitions on 3 brokers;
- start-up replay of a large metadata log, with a snapshot and without.

Writes a section of bench/RESULTS.md. Usage: python bench/bench_cluster.py [--kills 10]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.cluster.conftest import FAST_QUORUM, Cluster, Node  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
SECTION = "## KRaft cluster"


def create(node: Node, name: str, partitions: int, timeout_s: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout_s,
                        request_timeout=timeout_s)[name].result(timeout_s)


def usable_everywhere(nodes: list[Node], name: str, partitions: int) -> None:
    for node in nodes:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        while True:
            topic = admin.list_topics(name, timeout=10).topics.get(name)
            if (topic is not None and topic.error is None
                    and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                break
            time.sleep(0.005)


def bench_create_to_usable(cluster: Cluster, rounds: int = 20) -> list[float]:
    times = []
    for n in range(rounds):
        started = time.perf_counter()
        create(cluster.brokers[n % 3], f"usable-{n}", 6)
        usable_everywhere(cluster.brokers, f"usable-{n}", 6)
        times.append(time.perf_counter() - started)
    return times


def bench_failover(cluster: Cluster, kills: int) -> list[float]:
    """kill -9 the active controller; time until a new one commits a CreateTopics."""
    times = []
    for n in range(kills):
        leader = cluster.wait_for_leader(cluster.brokers)
        victim = cluster.nodes[leader]
        survivor = next(b for b in cluster.brokers if b.node_id != leader)
        started = time.perf_counter()
        victim.kill()
        create(survivor, f"failover-{n}", 1)
        times.append(time.perf_counter() - started)
        victim.start()
        victim.wait_ready()
    return times


def bench_big_create(cluster: Cluster, topics: int = 10, partitions: int = 1000) -> float:
    """10,000 partitions as 10 topics of 1,000: one request may write at most 10,000 records
    (Kafka's MAX_RECORDS_PER_USER_OP), so a single 10,000-partition topic is refused, as in
    Kafka."""
    started = time.perf_counter()
    for n in range(topics):
        create(cluster.brokers[n % 3], f"big-{n}", partitions, timeout_s=600)
    for n in range(topics):
        usable_everywhere(cluster.brokers, f"big-{n}", partitions)
    return time.perf_counter() - started


def replay_time(node: Node) -> float:
    """Seconds from 'loaded ... snapshot' to 'caught up' in the node's last start."""
    stamps = re.findall(r"\[(\S+ \S+)\] INFO kafka_ext.controller.quorum_controller: "
                        r"(loaded|caught up)", node.log())
    times = [time.mktime(time.strptime(s.split(",")[0], "%Y-%m-%d %H:%M:%S"))
             + int(s.split(",")[1]) / 1000 for s, _ in stamps]
    return times[-1] - times[-2]


def bench_replay(root: Path, with_snapshot: bool) -> tuple[float, int]:
    """A single node with 3,000 topics, restarted: time to replay its metadata."""
    extra = {"metadata.log.max.record.bytes.between.snapshots":
             "65536" if with_snapshot else str(1 << 40)}
    cluster = Cluster(root, combined=1, extra=extra)
    try:
        cluster.start()
        node = cluster.brokers[0]
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for n in range(0, 3000, 100):
            futures = admin.create_topics([NewTopic(f"t{n + i}", 1, 1) for i in range(100)],
                                          operation_timeout=60)
            for future in futures.values():
                future.result(60)
        node.stop()
        size = sum(f.stat().st_size
                   for f in (node.data_dir / "__cluster_metadata-0").glob("*.log"))
        node.start()
        node.wait_ready()
        return replay_time(node), size
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        cluster = Cluster(root / "three", combined=3)
        cluster.start()
        try:
            usable = bench_create_to_usable(cluster)
            failover = bench_failover(cluster, args.kills)
            big = bench_big_create(cluster)
        finally:
            cluster.close()
        replay_plain, size_plain = bench_replay(root / "plain", with_snapshot=False)
        replay_snap, size_snap = bench_replay(root / "snap", with_snapshot=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ms = 1000
    lines = [
        SECTION, "",
        "`python bench/bench_cluster.py`: real `kafka-ext server` processes on loopback on the "
        "2-core development VM; quorum timeouts as the cluster tests set them "
        f"({', '.join(f'{k}={v}' for k, v in FAST_QUORUM.items())}).", "",
        "| measurement | result |", "|---|---|",
        f"| CreateTopics (6 partitions) until every broker has leaders for it, median / max of "
        f"{len(usable)} | {statistics.median(usable) * ms:.0f} ms / {max(usable) * ms:.0f} ms |",
        f"| kill -9 of the active controller until a CreateTopics commits, median / max of "
        f"{len(failover)} | {statistics.median(failover) * ms:.0f} ms / "
        f"{max(failover) * ms:.0f} ms |",
        f"| CreateTopics of 10,000 partitions (10 topics x 1,000) on 3 brokers, until usable "
        f"on every broker | "
        f"{big:.1f} s |",
        f"| start-up replay of 3,000 topics, whole log ({size_plain / 1e6:.1f} MB of log) | "
        f"{replay_plain * ms:.0f} ms |",
        f"| start-up replay of 3,000 topics, from a snapshot ({size_snap / 1e6:.1f} MB of log "
        f"left) | {replay_snap * ms:.0f} ms |",
        "",
        "Failover is bounded below by the fetch timeout (the followers notice the leader is "
        "gone) plus a pre-vote and a vote round; the 10,000-partition creation by ten metadata "
        "batches and the logs each broker creates for its partitions; CreateTopics-to-usable "
        "includes a new admin client per broker per check (about 100 ms each). The replay "
        "from a snapshot skips the records the snapshot holds (the log's bytes stay on disk "
        "until their segment rolls).", "",
    ]
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if SECTION in text:
        start = text.index(SECTION)
        rest = text[start + len(SECTION):]
        end = rest.find("\n## ")
        text = text[:start] + "\n".join(lines) + (rest[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines)
    RESULTS.write_text(text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
