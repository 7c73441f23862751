"""Exactly-once consume-transform-produce across kill -9s of the transaction coordinator
(issue 14 items 5 and 8), with stock clients on real processes.

A confluent-kafka copier reads `eos-in` in a consumer group (read_committed), writes one record
per input record to the same partition of `eos-out` and commits the consumed offsets in the same
transaction (send_offsets_to_transaction). In the middle of the loop, with a transaction open
(records written, offsets sent), the broker that coordinates its transactional.id (FindCoordinator
key_type=1) is killed with -9, and the commit rides out the failover to an in-sync replica of
`__transaction_state`. The victim comes back a few transactions later and rejoins the ISR; then
its successor is killed the same way, so the coordinator moves back to the restarted broker, which
serves from the state it caught up on. A few transactions are aborted on purpose, the first on
each new coordinator among them: their rewind reads back the offsets the transaction open at the
kill committed, so losing those would duplicate records. The copier behaves as a correct EOS
application: retriable errors retry the call, abortable ones abort and rewind the consumer to the
committed offsets, and a fatal one recreates the producer (the test then fails: nothing should
fence a lone producer).

The same loop runs with `eos-out` a diskless topic (issue 19): its records go through every
broker's WAL and its markers through the Diskless coordinator, which the first victim leads too
(the transactional.id is chosen so), so that kill takes the transaction coordinator, the group
coordinator and the diskless coordinator at once.

Afterwards a checker reads `eos-out` without a group, under both isolation levels, and checks:
every input record has exactly one committed output record, in input order per partition, each
at the offset its delivery report gave; no record of an aborted transaction is visible under
read_committed, and those aborted on purpose are visible under read_uncommitted, at their
offsets; the group's committed offsets are the input's end.

The first victim coordinates the consumer group too, so its transaction's offsets are pending in
`__consumer_offsets` when it dies and the new group coordinator must load them and apply the
marker. After each failover the copier replaces its producer (the new one's InitProducerId bumps
the epoch): librdkafka (2.10+) decommissions a broker that leaves the Metadata response (a fenced
broker does, as in Kafka), and a group coordinator cached on a decommissioned handle makes the
next send_offsets_to_transaction hang past its timeout (librdkafka issues #5511 and #5456).
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaException, TopicPartition

from kafka_ext.client.probe import round_trip
from kafka_ext.coordinator.runtime import partition_for_key
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_replication import REPLICATION, create_replicated_topic, partition_state

SOURCE, SINK = "eos-in", "eos-out"
TXN_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTIONAL_ID = "eos-copier"
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types
PARTITIONS = 3
RECORDS_PER_PARTITION = 50
RECORDS_PER_TRANSACTION = 10
INTERNAL_PARTITIONS = 3  # of __transaction_state and __consumer_offsets
KILL_AT = 4  # the transaction open when the coordinator dies
RESTART_AT = KILL_AT + 4  # the victim comes back before this transaction begins
SECOND_KILL_AT = RESTART_AT + 2  # the transaction open when its second coordinator dies
# Aborted on purpose: one before any kill, the first on each new coordinator.
ABORT_ON_PURPOSE = frozenset({3, KILL_AT + 1, SECOND_KILL_AT + 1})
LOOP_DEADLINE_S = 120.0
CLUSTER_CONFIG = {
    **REPLICATION,
    "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",  # one member: nothing to wait for
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
}
DISKLESS_METADATA_TOPIC = "__diskless_metadata"

# librdkafka looks the transaction coordinator up again only after a failed request to the old
# one, paced by its reconnect backoff (up to 10 s by default): keep that below the failover.
CLIENT_BACKOFF = {"reconnect.backoff.max.ms": "500"}
Where = tuple[int, int]  # (partition, offset)


def find_coordinator(node: Node, key: str, key_type: int, timeout_s: float = 30) -> int:
    """The node id FindCoordinator (our codec) names for `key`; the first call creates the
    internal topic, as in Kafka."""
    Find = registry()["FindCoordinatorRequest"].cls
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", node.client_port), timeout=10) as sock:
            found = round_trip(sock, ApiKey.FIND_COORDINATOR, 4,
                               Find(key_type=key_type, coordinator_keys=[key]))
        (coordinator,) = found.coordinators
        if coordinator.error_code == 0:
            return int(coordinator.node_id)
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {key!r} (key type {key_type}) in {timeout_s}s")


def key_coordinated_by(node: Node, node_id: int, key_type: int, prefix: str) -> str:
    """A key (`prefix`-N) whose coordinator partition (`__consumer_offsets` for groups,
    `__transaction_state` for transactional ids) `node_id` leads."""
    topic = OFFSETS_TOPIC if key_type == GROUP_KEY else TXN_STATE_TOPIC
    find_coordinator(node, "eos-probe", key_type)
    leaders: dict[int, int] = {}

    def every_partition_led() -> bool:
        leaders.update((p, leader) for p, (leader, _, isr) in
                       partition_state(node, topic).items() if len(isr) == 3)
        return len(leaders) == INTERNAL_PARTITIONS

    wait_until(every_partition_led, 20, f"every partition of {topic} in sync")
    return next(key for key in (f"{prefix}-{i}" for i in range(100))
                if leaders[partition_for_key(key, INTERNAL_PARTITIONS)] == node_id)


def output_value(value: bytes, serial: int) -> bytes:
    return b"%s|txn-%d" % (value, serial)


def parse_output(value: bytes) -> tuple[bytes, int]:
    """(input value, transaction serial) of an output record."""
    source, serial = value.rsplit(b"|txn-", 1)
    return source, int(serial)


def _retry(operation: Callable[[], Any], what: str, log: list[str]) -> Any:
    """Call again while the error is retriable (librdkafka's contract for the txn calls)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return operation()
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable() or time.monotonic() > deadline:
                raise
            log.append(f"{what}: retriable {error}")
            time.sleep(0.1)


@dataclass
class History:
    """What the copier's transactions did, as the client saw it."""

    committed: set[int] = field(default_factory=set)  # transaction serials
    aborted: set[int] = field(default_factory=set)
    delivered: dict[bytes, Where] = field(default_factory=dict)  # output value -> where


@dataclass
class Copier:
    """The EOS application: one consumer, one transactional producer, one loop."""

    bootstrap: str
    group: str
    transactional_id: str = TRANSACTIONAL_ID
    consumer: Any = None
    producer: Any = None
    serial: int = 0
    history: History = field(default_factory=History)
    errors: list[str] = field(default_factory=list)  # what the loop rode out
    fatal: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 30000, **CLIENT_BACKOFF})
        self.consumer.subscribe([SOURCE])
        self.producer = self._new_producer()

    def _new_producer(self) -> Any:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 30000, "linger.ms": 2, **CLIENT_BACKOFF})
        _retry(lambda: producer.init_transactions(30), "init_transactions", self.errors)
        return producer

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.history.delivered[msg.value()] = (msg.partition(), msg.offset())

    def poll(self) -> list[Any]:
        messages = self.consumer.consume(RECORDS_PER_TRANSACTION, timeout=0.5)
        for m in messages:
            if m.error() is not None:
                self.errors.append(f"consumer: {m.error()}")
        return [m for m in messages if m.error() is None]

    def transact(self, records: list[Any], abort: bool = False,
                 before_commit: Callable[[], None] | None = None) -> bool:
        """One transaction over `records`; True once it committed. An abortable error aborts it
        and rewinds the consumer; a fatal one replaces the producer and rewinds."""
        serial = self.serial
        self.serial += 1
        try:
            self.producer.begin_transaction()
            for m in records:
                self.producer.produce(SINK, key=m.key(), value=output_value(m.value(), serial),
                                      partition=m.partition(), on_delivery=self._on_delivery)
            # Consumed positions from the records themselves, not consumer.position(): nothing
            # but this batch may be committed with it.
            ends: dict[int, int] = {}
            for m in records:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            offsets = [TopicPartition(SOURCE, p, o) for p, o in sorted(ends.items())]
            metadata = self.consumer.consumer_group_metadata()
            _retry(lambda: self.producer.send_offsets_to_transaction(offsets, metadata, 30),
                   "send_offsets_to_transaction", self.errors)
            if abort:
                assert self.producer.flush(30) == 0  # in the log before the abort marker
                _retry(lambda: self.producer.abort_transaction(30), "abort", self.errors)
                self.history.aborted.add(serial)
                self._rewind()
                return False
            if before_commit is not None:
                assert self.producer.flush(30) == 0
                before_commit()
            _retry(lambda: self.producer.commit_transaction(30), "commit", self.errors)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                self.fatal.append(f"transaction {serial}: {error}")
                self.history.aborted.add(serial)
                self.replace_producer()  # its InitProducerId aborts what is left open
                self._rewind()
                return False
            if not error.txn_requires_abort():
                raise
            self.errors.append(f"transaction {serial} aborted: {error}")
            _retry(lambda: self.producer.abort_transaction(30), "abort", self.errors)
            self.history.aborted.add(serial)
            self._rewind()
            return False
        self.history.committed.add(serial)
        return True

    def _rewind(self) -> None:
        """Back to the group's committed offsets: what the aborted transaction consumed is
        consumed again."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        committed = _retry(lambda: self.consumer.committed(assignment, timeout=10),
                           "committed", self.errors)
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def group_offsets(self) -> dict[int, int]:
        tps = [TopicPartition(SOURCE, p) for p in range(PARTITIONS)]
        committed = _retry(lambda: self.consumer.committed(tps, timeout=10), "committed",
                           self.errors)
        return {tp.partition: tp.offset for tp in committed}

    def replace_producer(self) -> None:
        """A new producer of the same transactional.id (InitProducerId bumps its epoch)."""
        self.producer.close()
        self.producer = self._new_producer()

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()


def read_back(node: Node, isolation_level: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) per partition of SINK, from the start to the end, without a group."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": node.bootstrap, "group.id": "eos-checker",
        "isolation.level": isolation_level, "enable.partition.eof": True,
        "enable.auto.commit": False})
    consumer.assign([TopicPartition(SINK, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{isolation_level}: ends of {sorted(at_end)}"
            messages: list[Any] = consumer.consume(500, timeout=0.5)
            for msg in messages:
                error = msg.error()
                if error is not None:
                    assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def check_exactly_once(inputs: dict[int, list[bytes]], history: History,
                       committed: dict[int, list[tuple[int, bytes]]],
                       uncommitted: dict[int, list[tuple[int, bytes]]]) -> None:
    """One committed output per input, in input order, at its delivered offset; aborted
    transactions invisible to read_committed, those aborted on purpose visible without it."""
    delivered = history.delivered
    for p, values in inputs.items():
        offsets = [o for o, _ in committed[p]]
        assert offsets == sorted(set(offsets)), f"eos-out-{p}: offsets not increasing"
        sources = [parse_output(v)[0] for _, v in committed[p]]
        assert sources == values, (
            f"eos-out-{p}: {len(sources)} committed outputs for {len(values)} inputs; lost "
            f"{sorted(set(values) - set(sources))[:5]}, duplicated "
            f"{sorted(v for v in set(sources) if sources.count(v) > 1)[:5]}")
        serials = {parse_output(v)[1] for _, v in committed[p]}
        assert serials <= history.committed, (
            f"eos-out-{p}: read_committed shows transactions {sorted(serials - history.committed)}"
            f", which did not commit")
        for offset, value in committed[p]:
            assert delivered.get(value) == (p, offset), (
                f"{value!r} read at {p}/{offset}, delivered at {delivered.get(value)}")
        # read_committed shows exactly the records of committed transactions, where
        # read_uncommitted shows them; the others belong to aborted transactions.
        visible = {(o, v) for o, v in uncommitted[p] if parse_output(v)[1] in history.committed}
        assert visible == set(committed[p]), f"eos-out-{p}: the two isolation levels disagree"
        for offset, value in uncommitted[p]:
            if parse_output(value)[1] not in history.committed:
                assert parse_output(value)[1] in history.aborted, value
                assert delivered.get(value) == (p, offset), value
    seen_aborted = {(p, v) for p in inputs for _, v in uncommitted[p]
                    if parse_output(v)[1] in ABORT_ON_PURPOSE}
    wanted_aborted = {(p, v) for v, (p, _) in delivered.items()
                      if parse_output(v)[1] in ABORT_ON_PURPOSE}
    assert wanted_aborted and seen_aborted == wanted_aborted, (
        "records aborted on purpose are missing under read_uncommitted")


def test_checker_finds_lost_duplicated_reordered_moved_and_aborted_records() -> None:
    """The checker itself, on one partition: two committed transactions around one aborted on
    purpose (offsets 2, 4 and 6 hold their markers)."""
    aborted = min(ABORT_ON_PURPOSE)
    inputs = {0: [b"in-0-000", b"in-0-001", b"in-0-002"]}
    good = [(0, output_value(inputs[0][0], 0)), (1, output_value(inputs[0][1], 0)),
            (5, output_value(inputs[0][2], aborted + 1))]
    undone = (3, output_value(inputs[0][2], aborted))
    uncommitted = sorted([*good, undone])
    history = History(committed={0, aborted + 1}, aborted={aborted},
                      delivered={v: (0, o) for o, v in uncommitted})
    check_exactly_once(inputs, history, {0: good}, {0: uncommitted})
    duplicate = (7, good[2][1])
    moved = History(history.committed, history.aborted, {**history.delivered, good[2][1]: (0, 6)})
    broken = {
        "lost": (history, good[:2], uncommitted[:3]),
        "duplicated": (history, [*good, duplicate], [*uncommitted, duplicate]),
        "reordered": (history, [(0, good[1][1]), (1, good[0][1]), good[2]], uncommitted),
        "moved": (moved, good, uncommitted),
        "aborted visible": (history, uncommitted, uncommitted),
        "aborted missing": (history, good, good),
    }
    for what, (told, read_committed, read_uncommitted) in broken.items():
        try:
            check_exactly_once(inputs, told, {0: read_committed}, {0: read_uncommitted})
        except AssertionError:
            continue
        pytest.fail(f"the checker missed a {what} record")


def load_inputs(node: Node) -> dict[int, list[bytes]]:
    """RECORDS_PER_PARTITION values per partition of SOURCE; the values per partition."""
    inputs = {p: [b"in-%d-%03d" % (p, i) for i in range(RECORDS_PER_PARTITION)]
              for p in range(PARTITIONS)}
    loader = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap,
                                       "enable.idempotence": True, "linger.ms": 5})
    for p, values in inputs.items():
        for value in values:
            loader.produce(SOURCE, key=value, value=value, partition=p)
    assert loader.flush(30) == 0
    return inputs


@pytest.mark.parametrize("sink", ["classic", "diskless"])
def test_exactly_once_copy_survives_kills_of_its_transaction_coordinator(
        cluster_factory: Any, tmp_path: Any, sink: str) -> None:
    diskless = sink == "diskless"
    extra = dict(CLUSTER_CONFIG)
    if diskless:
        extra |= {"diskless.storage.url": f"file://{tmp_path / 'objects'}",
                  "diskless.metadata.topic.num.partitions": "1",
                  "diskless.metadata.topic.replication.factor": "3",
                  "diskless.wal.max.ms": "20"}
    cluster: Cluster = cluster_factory(combined=3, extra=extra)
    n1, n2, _ = cluster.brokers
    create_replicated_topic(n1, SOURCE, PARTITIONS, 3)
    create_replicated_topic(n1, SINK, PARTITIONS, 3,
                            {"diskless.enable": "true"} if diskless else None)
    # The diskless coordinator's topic is created with the first diskless topic.
    expected = {SOURCE: PARTITIONS, SINK: PARTITIONS, **({DISKLESS_METADATA_TOPIC: 1}
                                                        if diskless else {})}
    wait_until(lambda: all(
        [len(isr) for _, _, isr in partition_state(n2, t).values()] == [3] * count
        for t, count in expected.items()), 30, "every partition has 3 in-sync replicas")
    inputs = load_inputs(n1)
    transactional_id = TRANSACTIONAL_ID
    if diskless:  # the diskless coordinator's broker coordinates the transactions too
        transactional_id = key_coordinated_by(
            n1, partition_state(n1, DISKLESS_METADATA_TOPIC)[0][0], TRANSACTION_KEY, "eos-copier")
    state_partition = partition_for_key(transactional_id, INTERNAL_PARTITIONS)

    def state_replicas() -> tuple[list[int], list[int]]:
        """(replicas, ISR) of the id's `__transaction_state` partition; the brokers' metadata
        may lag a moment behind the topic's creation."""
        live = next(n for n in cluster.brokers if n.alive)
        _, replicas, isr = partition_state(live, TXN_STATE_TOPIC).get(state_partition,
                                                                       (-1, [], []))
        return replicas, isr

    replicas: list[int] = []

    def all_in_sync() -> bool:
        replicas[:], isr = state_replicas()
        return len(isr) == 3

    victim = cluster.nodes[find_coordinator(n1, transactional_id, TRANSACTION_KEY)]
    wait_until(all_in_sync, 20, "the transaction state on every replica")
    # Replica order: the victim leads; the next in-sync replica takes over when it dies, and is
    # killed in turn.
    assert replicas[0] == victim.node_id
    successor = replicas[1]
    copier = Copier(",".join(n.bootstrap for n in cluster.brokers),
                    key_coordinated_by(n1, victim.node_id, GROUP_KEY, "eos-copiers"), transactional_id)
    total = PARTITIONS * RECORDS_PER_PARTITION
    deadline = time.monotonic() + LOOP_DEADLINE_S
    try:
        done = 0
        while done < total:
            assert time.monotonic() < deadline, f"copied {done} of {total}: {copier.errors}"
            if copier.serial == RESTART_AT and not victim.alive:
                victim.start()
                victim.wait_ready()
                wait_until(lambda: victim.node_id in state_replicas()[1], 30,
                           "the restarted coordinator back in the ISR of its state")
            records = copier.poll()
            if not records:
                # A commit reported as failed may still have committed: the group says.
                done = max(done, sum(o for o in copier.group_offsets().values() if o > 0))
                continue
            kill: Callable[[], None] | None = None
            if copier.serial == KILL_AT:
                kill = victim.kill
            elif copier.serial == SECOND_KILL_AT:
                coordinator = find_coordinator(victim, transactional_id, TRANSACTION_KEY)
                assert coordinator == successor, f"{coordinator} took over, not {successor}"
                kill = cluster.nodes[successor].kill
            if copier.transact(records, abort=copier.serial in ABORT_ON_PURPOSE,
                               before_commit=kill):
                done += len(records)
            if kill is not None:
                copier.replace_producer()  # see the module docstring (librdkafka #5511)
        final_coordinator = find_coordinator(victim, transactional_id, TRANSACTION_KEY)
        group_offsets = copier.group_offsets()
    finally:
        copier.close()
    assert copier.serial > SECOND_KILL_AT + 1, "the loop ended before the second failover"
    assert final_coordinator == victim.node_id  # back on the restarted broker
    assert group_offsets == dict.fromkeys(range(PARTITIONS), RECORDS_PER_PARTITION)
    committed = read_back(victim, "read_committed")
    uncommitted = read_back(victim, "read_uncommitted")
    check_exactly_once(inputs, copier.history, committed, uncommitted)
    assert copier.fatal == [], f"a lone producer was fenced: {copier.fatal}"
