"""A broker process that dies, with Kafka's default broker.session.timeout.ms (9 s): its sockets
close at once, and the active controller fences it broker.heartbeat.connection.loss.timeout.ms
after its heartbeat connection closed (docs/cluster.md), so leaderships move and ISRs shrink
without waiting out the session. A broker that only stops (SIGSTOP: its sockets stay open) or
whose connections are reset while it lives is not fenced before its session ends.

How long each took is printed; bench/bench_replication.py --fast-fencing measures it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import brokers_seen, wait_until
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    check_history,
    partition_state,
    read_all,
)

# Kafka's own broker liveness settings; the quorum keeps the cluster tests' short timeouts.
KAFKA_SESSION = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
SESSION_S = 9.0
PAUSE_S = 4.0  # far past the grace (0.5 s), well inside a session from the last heartbeat


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("death"), combined=3,
                   extra={**REPLICATION, **KAFKA_SESSION})
    try:
        made.start()
    except BaseException:
        made.close()  # the nodes that did start stop too
        raise
    yield made
    problems = made.close()
    if problems:
        pytest.fail("\n\n".join(problems))


def _roles(cluster: Cluster) -> tuple[Node, Node, Node]:
    """(the active controller, a broker that is not it, the third node)."""
    controller = cluster.nodes[cluster.wait_for_leader(list(cluster.nodes.values()))]
    victim, witness = [n for n in cluster.brokers if n is not controller]
    return controller, victim, witness


def _create(node: Node, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment,
                                  config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[topic].result(30)
    wait_until(lambda: len(partition_state(node, topic)) == len(assignment), 20,
               f"{topic} in the metadata")


def _fences(controller: Node, broker_id: int, since: int) -> list[str]:
    """The controller's log lines, after byte `since`, that fence `broker_id`."""
    text = controller.log_path.read_bytes()[since:].decode(errors="replace")
    return [line for line in text.splitlines() if f"fencing broker {broker_id}:" in line]


def test_a_killed_leader_is_fenced_through_its_connection_and_no_acknowledged_write_is_lost(
        cluster: Cluster) -> None:
    controller, victim, witness = _roles(cluster)
    v, w, c = victim.node_id, witness.node_id, controller.node_id
    # Partition 0 is led by the victim; 1 and 2 by survivors that count it in their ISR.
    _create(witness, "death", [[v, w, c], [w, v, c], [c, v, w]])
    producer = SequencedProducer(witness, "death")
    producer.send(300)
    producer.flush()
    log_from = controller.log_path.stat().st_size
    sent_at_kill = producer.sent
    killed = time.monotonic()
    victim.kill()
    first_ack: dict[int, float] = {}  # partition -> seconds from the kill to a new write's ack
    deadline = killed + 60
    while len(first_ack) < 3 and time.monotonic() < deadline:
        producer.send(5, pause_s=0.002)
        for value, (partition, _) in list(producer.acked.items()):
            if partition not in first_ack and int(value.split(b"-")[1]) >= sent_at_kill:
                first_ack[partition] = time.monotonic() - killed
    producer.flush()
    print(f"kill -9 of broker {v}: first acknowledgement of a new write after "
          + ", ".join(f"{first_ack[p]:.2f} s on partition {p}" for p in sorted(first_ack)))
    assert sorted(first_ack) == [0, 1, 2] and producer.failed == []
    fences = _fences(controller, v, log_from)
    assert fences and "its heartbeat connection closed" in fences[0], fences
    state = partition_state(witness, "death")
    assert state[0][0] in (w, c) and all(v not in isr for _, _, isr in state.values())
    victim.start()
    victim.wait_ready()
    wait_until(lambda: all(v in isr for _, _, isr in partition_state(witness, "death").values()),
               60, f"broker {v} back in every ISR")
    check_history(producer.acked, read_all(witness, "death", len(producer.acked)))


def test_a_paused_broker_keeps_its_session_and_is_not_fenced(cluster: Cluster) -> None:
    """SIGSTOP closes nothing: the grace never starts, and a pause shorter than the session
    fences nobody (a pause longer than it would: that is the session's job)."""
    controller, paused, witness = _roles(cluster)
    log_from = controller.log_path.stat().st_size
    paused.pause()
    try:
        until = time.monotonic() + PAUSE_S
        while time.monotonic() < until:
            assert paused.node_id in brokers_seen(witness), "fenced while paused"
            time.sleep(0.2)
    finally:
        paused.resume()
    assert paused.node_id in brokers_seen(witness)
    assert _fences(controller, paused.node_id, log_from) == []


def test_a_broker_whose_controller_connections_are_reset_heartbeats_again_and_stays(
        cluster: Cluster) -> None:
    """Its connections to the active controller end (RST) while it lives: it heartbeats at
    once on a new connection, within the grace, and is never fenced."""
    controller, broker, witness = _roles(cluster)
    log_from = controller.log_path.stat().st_size
    cluster.reset([(broker.node_id, controller.node_id)])
    wait_until(lambda: b"heartbeat connection of broker(s) %d closed" % broker.node_id
               in controller.log_path.read_bytes()[log_from:], 10,
               "the controller saw the heartbeat connection close")
    until = time.monotonic() + SESSION_S / 3  # many graces
    while time.monotonic() < until:
        assert broker.node_id in brokers_seen(witness), "fenced after a reset"
        time.sleep(0.2)
    assert _fences(controller, broker.node_id, log_from) == []
