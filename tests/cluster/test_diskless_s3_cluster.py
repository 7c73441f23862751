"""Diskless topics on three nodes whose object store is S3 (issue 19 item 5): moto's S3 server
on loopback (tests/s3_server.py) behind a proxy that can make it unreachable for every broker.

- Stock clients of three kinds, each bootstrapped at another broker, and raw Produce requests
  sent to every broker write the same diskless partitions at once.
- The store is refused, or hangs, for a few seconds under produce on every broker.
- A seeded slice of the replication fault campaign (tests/cluster/test_replication_faults.py)
  runs on a diskless topic: kill -9 and SIGSTOP of the leaders and followers of the
  coordinators' `__diskless_metadata` partitions and of the active controller.

The checker: each partition's offsets are dense from 0, every acknowledged message is read back
once, at the offset its answer gave, through every broker, and a produce answered with an error
wrote nothing. The campaign also counts what its reader saw during the faults. CI runs seed 1
with two rounds, a kill and a pause; a longer campaign, with network cuts as a third family:
    FAULT_SEEDS=1-10 FAULT_ROUNDS=9 FAULT_CUTS=1 pytest tests/cluster/test_diskless_s3_cluster.py
and a failing seed replays with the line its failure prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import pytest

from kafka_ext.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster, Node
from tests.cluster.test_cluster import wait_until
from tests.cluster.test_diskless_cluster import _produce
from tests.cluster.test_replication import (
    REPLICATION,
    SequencedProducer,
    create_replicated_topic,
    partition_state,
)
from tests.cluster.test_replication_faults import (
    KILL_FAULTS,
    NETWORK_FAULTS,
    OVERLAP,
    PAUSE_FAULTS,
    CampaignTopic,
    fault_seeds,
    run_campaign,
)
from tests.integration.clients import CONSUMERS, PRODUCERS, Outgoing
from tests.integration.test_diskless_store_outage import UPLOAD_FAILED
from tests.s3_server import ProxyMode, S3Server

PARTITIONS = 3
COORDINATORS = 3  # one `__diskless_metadata` partition a broker, as leaders spread
DISKLESS = {"diskless.enable": "true"}
OUTAGE_S = 3.0  # how long the store stays away: a fault's length, not a timing to assert
# Each stock client bootstraps at its own broker (and produces to the partitions' leaders);
# the raw Produce requests go to every broker.
STOCK_CLIENTS = {"confluent": {"enable.idempotence": True, "acks": "all"},
                 "kafka-python": {"acks": "all"},  # idempotent by default
                 "aiokafka": {"enable_idempotence": True, "acks": "all"}}
ROUNDS = int(os.environ.get("FAULT_ROUNDS", "2"))
FAMILIES = (KILL_FAULTS, PAUSE_FAULTS) + ((NETWORK_FAULTS,) if os.environ.get("FAULT_CUTS")
                                          else ())

Log = dict[int, list[tuple[int, bytes]]]  # partition -> (offset, value), in offset order


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto for the whole module; its AWS_* variables are in this process's environment
    meanwhile, so every broker started or restarted inherits them."""
    with S3Server(tmp_path_factory.mktemp("moto")) as server, server.environ():
        yield server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("diskless-s3-cluster"), combined=3, extra={
        **REPLICATION, "replica.socket.timeout.ms": "3000",
        "diskless.storage.url": s3.url,
        "diskless.metadata.topic.num.partitions": str(COORDINATORS),
        "diskless.metadata.topic.replication.factor": "3", "diskless.wal.max.ms": "20"})
    try:
        made.start()
        yield made
    finally:
        problems = made.close()
        if problems:
            pytest.fail("\n\n".join(problems))


def _create_diskless_topic(cluster: Cluster, topic: str) -> None:
    """A diskless topic every broker knows: each client may bootstrap at any of them."""
    create_replicated_topic(cluster.brokers[0], topic, PARTITIONS, 1, DISKLESS)
    wait_until(lambda: all(len(partition_state(n, topic)) == PARTITIONS
                           for n in cluster.brokers), 20, f"{topic} known to every broker")


def _produce_stock(kind: str, node: Node, topic: str, count: int
                   ) -> list[tuple[int, int, bytes]]:
    """`count` records round-robin over the partitions with one stock client bootstrapped at
    `node`; (partition, offset, value) as its acknowledgements gave them."""
    records = [Outgoing(i % PARTITIONS, None, f"{kind}@{node.node_id}-{i}".encode(), (),
                        int(time.time() * 1000)) for i in range(count)]
    offsets = PRODUCERS[kind](node.bootstrap, topic, records, STOCK_CLIENTS[kind])
    return [(r.partition, offset, r.value or b"") for r, offset in zip(records, offsets,
                                                                       strict=True)]


def _produce_raw(node: Node, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    """`count` one-record acks=all Produce requests straight to `node`, whichever broker the
    metadata names; (partition, base offset, value) of each, all of which must succeed."""
    acked = []
    for i in range(count):
        partition, value = i % PARTITIONS, f"raw@{node.node_id}-{i}".encode()
        code, offset = _produce(node, partition, value, topic)
        assert code == ErrorCode.NONE, (node.node_id, ErrorCode(code))
        acked.append((partition, offset, value))
    return acked


def _read_back(cluster: Cluster, topic: str, count: int) -> Log:
    """The whole topic read through every broker, with another stock consumer at each; they
    must agree on every offset."""
    reads = []
    for node, consume in zip(cluster.brokers, CONSUMERS.values(), strict=True):
        log: Log = {p: [] for p in range(PARTITIONS)}
        for m in consume(node.bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, count):
            log[m.partition].append((m.offset, m.value or b""))
        reads.append(log)
    assert all(read == reads[0] for read in reads[1:]), "brokers disagree on the log"
    return reads[0]


def _check_log(acked: list[tuple[int, int, bytes]], log: Log) -> None:
    """Offsets dense from 0 per partition, and the log is exactly the acknowledged messages,
    each once, at the offset its acknowledgement gave."""
    for partition, records in log.items():
        assert [o for o, _ in records] == list(range(len(records))), (
            f"partition {partition}: offsets not dense from 0")
    expected = {p: sorted((o, v) for q, o, v in acked if q == p) for p in range(PARTITIONS)}
    for partition in range(PARTITIONS):
        lost = set(expected[partition]) - set(log[partition])
        unacked = set(log[partition]) - set(expected[partition])
        assert (lost, unacked) == (set(), set()), (
            f"partition {partition}: acknowledged but not there (or elsewhere) {sorted(lost)[:5]}, "
            f"there but never acknowledged {sorted(unacked)[:5]}")
    values = [v for _, _, v in acked]
    assert len(values) == len(set(values)), "a message acknowledged twice"


def _upload_failures(node: Node) -> int:
    """The uploads `node` has given up on so far (its whole log: Node.log is only the tail)."""
    return node.log_path.read_text(errors="replace").count(UPLOAD_FAILED)


def _run_all(jobs: Sequence[Callable[[], list[tuple[int, int, bytes]]]]
             ) -> list[tuple[int, int, bytes]]:
    """Run the producers at once; what they all acknowledged (a producer's failure raises)."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [acked for future in futures for acked in future.result()]


def test_stock_clients_and_every_broker_write_the_same_partitions_at_dense_unique_offsets(
        cluster: Cluster) -> None:
    topic = "shared"
    _create_diskless_topic(cluster, topic)
    nodes = cluster.brokers
    jobs = [partial(_produce_stock, kind, node, topic, 300)
            for kind, node in zip(STOCK_CLIENTS, nodes, strict=True)]
    jobs += [partial(_produce_raw, node, topic, 30) for node in nodes]
    acked = _run_all(jobs)
    assert len(acked) == 3 * 300 + 3 * 30
    _check_log(acked, _read_back(cluster, topic, len(acked)))


@pytest.mark.parametrize("mode", [ProxyMode.RESET, ProxyMode.BLACKHOLE], ids=["refused",
                                                                             "hanging"])
def test_a_store_away_from_every_broker_fails_produce_retriably_or_delays_it_and_loses_nothing(
        cluster: Cluster, s3: S3Server, mode: ProxyMode) -> None:
    """A refused store answers produce KAFKA_STORAGE_ERROR at once; a hanging one holds it until
    the store is back (or the store's timeouts give up). A stock idempotent producer retries
    through either, and every broker takes produce again afterwards."""
    topic = f"outage-{mode.value}"
    _create_diskless_topic(cluster, topic)
    nodes = cluster.brokers
    producer = SequencedProducer(nodes[1], topic)  # idempotent, acks=all, keyed "seq-N"
    producer.send(150)
    producer.flush()
    failures_before = [_upload_failures(n) for n in nodes]
    with ThreadPoolExecutor(len(nodes)) as pool:
        with s3.unreachable(mode):
            started = time.monotonic()
            producer.send(150)
            # (partition, value) -> its raw produce's (error code, base offset), one a broker
            during: dict[tuple[int, bytes], Future[tuple[int, int]]] = {
                (partition, value): pool.submit(_produce, node, partition, value, topic)
                for partition, node in enumerate(nodes)
                for value in [f"during@{node.node_id}".encode()]}
            if mode is ProxyMode.RESET:
                wait_until(lambda: all(f.done() for f in during.values()), 30,
                           "every broker to answer its produce during the outage")
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - started)))  # the outage's length
            held = {sent for sent, f in during.items() if not f.done()}
        answers = {sent: f.result() for sent, f in during.items()}
    codes = {sent: ErrorCode(code) for sent, (code, _) in answers.items()}
    assert all(code == ErrorCode.NONE or code.retriable for code in codes.values()), codes
    if mode is ProxyMode.RESET:
        assert set(codes.values()) == {ErrorCode.KAFKA_STORAGE_ERROR}, codes
        assert all(_upload_failures(n) > before for n, before in zip(nodes, failures_before,
                                                                      strict=True))
    else:  # shorter than the store's request timeout: held, then answered once it is back
        assert held == set(during), codes
    producer.flush()  # its batches that met the outage were retried, not failed
    assert producer.failed == [] and len(producer.acked) == 300, producer.failed[:5]
    acked = [(partition, offset, value) for value, (partition, offset) in producer.acked.items()]
    acked += [(partition, offset, value)
              for (partition, value), (code, offset) in answers.items() if code == 0]
    refused = {value for (_, value), code in codes.items() if code != ErrorCode.NONE}
    acked += _run_all([partial(_produce_raw, node, topic, PARTITIONS)
                       for node in nodes])  # every broker takes produce again
    log = _read_back(cluster, topic, len(acked))
    _check_log(acked, log)
    assert not refused & {v for records in log.values() for _, v in records}


@pytest.mark.parametrize("seed", fault_seeds())
def test_no_acknowledged_diskless_write_is_lost_nor_read_skipped_through_kills_and_pauses(
        cluster: Cluster, seed: int) -> None:
    """The replication campaign's checker on a diskless topic, its faults aimed at the brokers
    that lead or follow the topic's coordinators; the final log must also be dense."""
    topic = CampaignTopic(name=f"ledger-{seed}", partitions=PARTITIONS, configs=DISKLESS,
                          replication_factor=1, aimed_at="__diskless_metadata",
                          aimed_at_partitions=COORDINATORS)
    reads = run_campaign(cluster, seed, ROUNDS, OVERLAP, topic, FAMILIES)
    for read in reads:
        for partition, records in read.items():
            assert [o for o, _ in records] == list(range(len(records))), (
                f"partition {partition}: offsets not dense from 0")
