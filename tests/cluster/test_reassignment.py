"""Moving replicas and leaderships between brokers on real processes (issue 14, item 6):
`kafka-ext reassign-partitions` with a throttle while an acks=all producer writes, cancelling a
reassignment, `kafka-ext leader-election` and librdkafka's ElectLeaders. One cluster for all of
it: CI time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient

from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    check_history,
    partition_state,
    read_all,
)

CLI = [sys.executable, "-m", "kafka_ext"]
THROTTLE = 2_000_000  # bytes/s: slows the copy without making the test long
FETCH_BYTES = 32768
BULK_ROUNDS, BULK_PER_ROUND = 4, 500


def kafka_ext(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout_s)


def write_plan(tmp_path: Path, name: str, moves: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def broker_config(node: Node, broker_id: int, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = admin.describe_configs([resource])[resource].result(30)
    entry = entries.get(name)
    return None if entry is None or entry.is_default else entry.value


def test_reassignment_with_throttle_cancel_and_leader_elections(
        cluster_factory: Any, tmp_path: Path) -> None:
    # Small follower fetches: a throttled copy takes several of them, as a large one would.
    # Node 1 has a second log dir, for the JBOD part at the end.
    cluster: Cluster = cluster_factory(combined=3, extra={
        **REPLICATION, "auto.leader.rebalance.enable": "false",
        "replica.fetch.max.bytes": str(FETCH_BYTES)}, node_extra={1: {
            "log.dirs": f"{tmp_path / 'node1'},{tmp_path / 'node1-second'}",
            "log.dir.failure.check.interval.ms": "200"}})
    n1, n2, n3 = cluster.brokers
    admin = AdminClient({"bootstrap.servers": n1.bootstrap})
    admin.create_topics([NewTopic("moving", 2, replica_assignment=[[1], [2]])],
                        operation_timeout=30)["moving"].result(30)
    producer = SequencedProducer(n1, "moving")
    for _ in range(BULK_ROUNDS):  # ~1 MB per partition to copy
        producer.send(BULK_PER_ROUND, value_bytes=1000)
        producer.flush()

    # -- a proposal: the topic's partitions spread over the listed brokers ---------------------
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
    proposal = kafka_ext("reassign-partitions", "--generate", "--bootstrap-server", n1.bootstrap,
                         "--topics-to-move-json-file", str(topics_file), "--broker-list", "2,3")
    assert proposal.returncode == 0, proposal.stdout + proposal.stderr
    current_json, proposed_json = (line for line in proposal.stdout.splitlines()
                                   if line.startswith("{"))
    assert [p["replicas"] for p in json.loads(current_json)["partitions"]] == [[1], [2]]
    assert [p["replicas"] for p in json.loads(proposed_json)["partitions"]] == [[2], [3]]

    # -- a throttled reassignment while acks=all writes go on ---------------------------------
    plan = write_plan(tmp_path, "plan.json", {("moving", 0): [2, 3], ("moving", 1): [3, 1]})
    writer = threading.Thread(target=producer.send, args=(1000, 0.002))
    writer.start()
    run = kafka_ext("reassign-partitions", "--execute", "--bootstrap-server", n2.bootstrap,
                    "--reassignment-json-file", plan, "--throttle", str(THROTTLE))
    writer.join()
    producer.flush()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Save this to use as the --reassignment-json-file option during rollback" in run.stdout
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in run.stdout
    assert "Successfully started partition reassignments for moving-0,moving-1" in run.stdout
    assert broker_config(n3, 1, "leader.replication.throttled.rate") == str(THROTTLE)
    # The controller has completed both; each broker's metadata follows within moments.
    wait_until(lambda: [s[1] for s in partition_state(n3, "moving").values()] == [
        [2, 3], [3, 1]], 10, "n3 sees the new replicas")
    state = partition_state(n3, "moving")
    assert state[0][0] == 2 and state[1][0] == 3  # removed leaders handed over to targets
    assert sorted(state[0][2]) == [2, 3] and sorted(state[1][2]) == [1, 3]
    # The removed replicas' logs are gone from the brokers that held them.
    wait_until(lambda: not (n1.data_dir / "moving-0").exists()
               and not (n2.data_dir / "moving-1").exists(), 20, "removed replicas deleted")
    assert (n3.data_dir / "moving-0").exists() and (n1.data_dir / "moving-1").exists()
    verify = kafka_ext("reassign-partitions", "--verify", "--bootstrap-server", n1.bootstrap,
                       "--reassignment-json-file", plan)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.count("is completed.") == 2
    assert "Clearing broker-level throttles on brokers 1,2,3" in verify.stdout
    assert "Clearing topic-level throttles on topic moving" in verify.stdout
    assert broker_config(n3, 1, "leader.replication.throttled.rate") is None
    assert producer.failed == []
    check_history(producer.acked, read_all(n3, "moving", len(producer.acked)))

    # -- a reassignment held back by its throttle, listed, then cancelled ----------------------
    slow = write_plan(tmp_path, "slow.json", {("moving", 0): [1, 2]})
    run = kafka_ext("reassign-partitions", "--execute", "--bootstrap-server", n1.bootstrap,
                    "--reassignment-json-file", slow, "--throttle", "1", "--no-wait")
    assert run.returncode == 0, run.stdout + run.stderr
    listed = kafka_ext("reassign-partitions", "--list", "--bootstrap-server", n1.bootstrap)
    assert "moving-0: replicas: 1,2,3. adding: 1. removing: 3." in listed.stdout, listed.stdout
    again = kafka_ext("reassign-partitions", "--execute", "--bootstrap-server", n1.bootstrap,
                      "--reassignment-json-file", slow, "--no-wait")
    assert again.returncode == 1 and "existing partition assignment" in again.stderr
    pending = kafka_ext("reassign-partitions", "--verify", "--bootstrap-server", n1.bootstrap,
                        "--reassignment-json-file", slow)
    assert pending.returncode == 1 and "is still in progress." in pending.stdout
    cancelled = kafka_ext("reassign-partitions", "--cancel", "--bootstrap-server", n1.bootstrap,
                          "--reassignment-json-file", slow)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "Successfully cancelled partition reassignments for: moving-0" in cancelled.stdout
    assert partition_state(n1, "moving")[0][1] == [2, 3]
    wait_until(lambda: not (n1.data_dir / "moving-0").exists(), 20,
               "the cancelled replica's log deleted")
    assert "No partition reassignments found." in kafka_ext(
        "reassign-partitions", "--list", "--bootstrap-server", n1.bootstrap).stdout

    # -- leader elections ----------------------------------------------------------------------
    # Reordering the replicas completes at once (all in sync) and leaves the leader alone...
    reorder = write_plan(tmp_path, "reorder.json", {("moving", 0): [3, 2], ("moving", 1): [1, 3]})
    run = kafka_ext("reassign-partitions", "--execute", "--bootstrap-server", n1.bootstrap,
                    "--reassignment-json-file", reorder)
    assert run.returncode == 0, run.stdout + run.stderr
    assert {p: s[0] for p, s in partition_state(n1, "moving").items()} == {0: 2, 1: 3}
    # ... then a preferred election moves it to the first replica: ours, then librdkafka's.
    elected = kafka_ext("leader-election", "--bootstrap-server", n2.bootstrap,
                        "--election-type", "preferred", "--topic", "moving", "--partition", "0")
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions moving-0" in (
        elected.stdout)
    wait_until(lambda: partition_state(n2, "moving")[0][0] == 3, 10, "3 leads moving-0")
    result = admin.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition("moving", 0), TopicPartition("moving", 1)]).result(30)
    assert result[TopicPartition("moving", 1)] is None  # elected
    assert result[TopicPartition("moving", 0)].code() == 84  # ELECTION_NOT_NEEDED
    wait_until(lambda: partition_state(n2, "moving")[1][0] == 1, 10, "1 leads moving-1")
    nothing = kafka_ext("leader-election", "--bootstrap-server", n1.bootstrap,
                        "--election-type", "PREFERRED", "--all-topic-partitions")
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert "Successfully" not in nothing.stdout and "moving-1" in nothing.stdout  # all preferred
    unclean = kafka_ext("leader-election", "--bootstrap-server", n1.bootstrap,
                        "--election-type", "UNCLEAN", "--topic", "moving", "--partition", "0")
    assert unclean.returncode == 0 and "Valid replica already elected" in unclean.stdout

    producer.send(200)
    producer.flush()
    assert producer.failed == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            len(isr) != 2 for _, _, isr in partition_state(n3, "moving").values()):
        time.sleep(0.2)
    check_history(producer.acked, read_all(n2, "moving", len(producer.acked)))

    check_failed_dir_moves_leadership(cluster, tmp_path)


def check_failed_dir_moves_leadership(cluster: Cluster, tmp_path: Path) -> None:
    """KIP-858 across brokers: node 1 places its replica in its second dir and tells the
    controller (AssignReplicasToDirs, after an AlterReplicaLogDirs move); when that dir fails,
    the controller moves the leadership to the replica on node 2, and writes go on."""
    n1, n2, _ = cluster.brokers
    second = tmp_path / "node1-second"
    admin = AdminClient({"bootstrap.servers": n2.bootstrap})
    admin.create_topics([NewTopic("disk", 1, replica_assignment=[[1, 2]])],
                        operation_timeout=30)["disk"].result(30)
    wait_until(lambda: partition_state(n2, "disk")[0][2] == [1, 2], 20, "both in sync")
    mover = KafkaAdminClient(bootstrap_servers=n1.bootstrap)
    try:
        mover.alter_replica_log_dirs({TopicPartitionReplica("disk", 0, 1): str(second)})
    finally:
        mover.close()
    wait_until(lambda: (second / "disk-0").is_dir(), 30, "the replica moved to the second dir")
    producer = SequencedProducer(n2, "disk")
    producer.send(100)
    producer.flush()
    # Whether the assignment reaches the controller before or after the failure report, the
    # controller moves the leadership (both paths end in offline_dir_records).
    second.rename(second.with_name("node1-second.failed"))  # the disk is gone
    second.write_text("this log dir has failed\n")
    wait_until(lambda: partition_state(n2, "disk")[0][0] == 2
               and partition_state(n2, "disk")[0][2] == [2], 30,
               "leadership and the ISR moved off the failed dir")
    producer.send(100)
    producer.flush()
    assert producer.failed == []
    check_history(producer.acked, read_all(n2, "disk", len(producer.acked)))
