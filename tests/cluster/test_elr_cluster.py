"""Eligible leader replicas (KIP-966) on real processes: one controller and three brokers
formatted with eligible.leader.replicas.version=1, a topic with min.insync.replicas=2, and its
whole ISR dying in sequence while an idempotent acks=all producer writes.

The follower is killed with -9, then the next two stop cleanly one after the other: the ISR
goes below min.insync.replicas (the high watermark stops, acks=all writes wait) and then
empties, the two clean ones staying eligible. The replica killed first comes back and is not
elected (it left the ISR while it was at min.insync.replicas and may miss committed records);
one of the eligible ones comes back and is, with no unclean election. The checker counts
acknowledged writes lost, duplicated or moved: none may be.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.controller.image import ELR_VERSION_FEATURE
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, check_history, read_all

TOPIC = "elr-orders"
_Describe = registry().requests[ApiKey.DESCRIBE_TOPIC_PARTITIONS].cls


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("elr"), controllers=1, brokers=3,
                   extra={**REPLICATION, "broker.session.timeout.ms": "4000"},
                   format_args=["--feature", f"{ELR_VERSION_FEATURE}=1"])
    try:
        made.start()
    except BaseException:
        made.close()
        raise
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def describe(node: Node) -> Any:
    """Partition 0 of TOPIC as DescribeTopicPartitions shows it."""
    with socket.create_connection(("127.0.0.1", node.client_port), timeout=15) as sock:
        identify(sock, "apache-kafka-java")
        answer = round_trip(sock, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, _Describe(
            topics=[_Describe.TopicRequest(name=TOPIC)], response_partition_limit=10,
            cursor=None), 1)
    [topic] = answer.topics
    [part] = topic.partitions
    return part


def state(node: Node) -> tuple[int, list[int], list[int], list[int]]:
    part = describe(node)
    return part.leader_id, list(part.isr_nodes), list(part.eligible_leader_replicas), list(
        part.last_known_elr)


class Writer:
    """An idempotent acks=all producer over every broker; what was acknowledged, where."""

    def __init__(self, cluster: Cluster) -> None:
        self.producer = Producer({
            "bootstrap.servers": ",".join(n.bootstrap for n in cluster.brokers),
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000})
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[str] = []
        self.sent = 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.value()] = (msg.partition(), msg.offset())

    def send(self, count: int) -> None:
        for _ in range(count):
            value = b"w-%d" % self.sent
            self.producer.produce(TOPIC, value=value, partition=0, on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0)

    def settle(self, timeout_s: float) -> int:
        """Serve delivery reports for up to `timeout_s`; the writes still unanswered."""
        return int(self.producer.flush(timeout_s))


def test_the_whole_isr_dies_in_sequence_and_an_eligible_replica_leads_again(
        cluster: Cluster) -> None:
    a, b, c = (n.node_id for n in cluster.brokers)
    nodes = cluster.nodes
    admin = AdminClient({"bootstrap.servers": nodes[a].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[a, b, c]],
                                  config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[TOPIC].result(30)
    wait_until(lambda: state(nodes[a])[:2] == (a, [a, b, c]), 20, "the topic led by a")
    writer = Writer(cluster)
    writer.send(300)
    assert writer.settle(60) == 0 and len(writer.acked) == 300

    nodes[c].kill()  # the follower first, with -9: the ISR stays at min.insync.replicas
    wait_until(lambda: state(nodes[a]) == (a, [a, b], [], []), 30, "c out of the ISR")
    writer.send(300)
    assert writer.settle(60) == 0 and len(writer.acked) == 600

    assert nodes[b].stop() == 0  # below min.insync.replicas: b is eligible
    wait_until(lambda: state(nodes[a]) == (a, [a], [b], []), 30, "b in the ELR")
    writer.send(100)  # acks=all cannot complete now: these wait (NOT_ENOUGH_REPLICAS)
    assert writer.settle(3) > 0
    assert nodes[a].stop() == 0  # the last in-sync replica: the ISR empties
    nodes[c].start()
    nodes[c].wait_ready()
    wait_until(lambda: state(nodes[c]) == (-1, [], [a, b], []), 30, "an empty ISR, ELR a, b")
    # c is back but was never eligible: no unclean election makes it the leader.
    time.sleep(3)
    assert state(nodes[c])[0] == -1

    nodes[b].start()  # stopped cleanly: still eligible, elected from the ELR
    nodes[b].wait_ready()
    wait_until(lambda: state(nodes[c])[0] == b, 30, "b leads")
    # c catches up with b and joins: the ISR is back at min.insync.replicas, the waiting
    # writes complete and the ELR is cleared.
    wait_until(lambda: sorted(state(nodes[c])[1]) == sorted([b, c]), 60, "c back in the ISR")
    assert writer.settle(90) == 0
    assert state(nodes[c])[2:] == ([], [])
    nodes[a].start()
    nodes[a].wait_ready()
    wait_until(lambda: sorted(state(nodes[a])[1]) == sorted([a, b, c]), 60, "a back in the ISR")

    read = read_all(nodes[a], TOPIC, len(writer.acked))
    assert writer.failed == []
    assert len(writer.acked) == 700
    check_history(writer.acked, read)  # none lost, duplicated or moved; offsets dense
    controller_log = nodes[cluster.voter_ids[0]].log()
    assert "unclean leader election" not in controller_log


def test_a_broker_gone_for_good_is_unregistered_with_the_cluster_tool(cluster: Cluster) -> None:
    """kafka-cluster.sh unregister: the stopped broker leaves the cluster's brokers and every
    ISR; started again, it registers anew."""
    a, b, c = (n.node_id for n in cluster.brokers)
    nodes = cluster.nodes
    assert nodes[c].stop() == 0
    launcher = Path(__file__).resolve().parents[2] / "bin" / "kafka-cluster.sh"
    done = subprocess.run([str(launcher), "unregister", "--bootstrap-server", nodes[a].bootstrap,
                           "--id", str(c)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"Broker {c} is no longer registered.\n"), \
        done.stderr
    admin = AdminClient({"bootstrap.servers": nodes[a].bootstrap})
    wait_until(lambda: c not in admin.list_topics(timeout=10).brokers, 20, "c unregistered")
    assert c not in state(nodes[a])[1]
    nodes[c].start()
    nodes[c].wait_ready()
    wait_until(lambda: c in admin.list_topics(timeout=10).brokers, 30, "c registered again")
