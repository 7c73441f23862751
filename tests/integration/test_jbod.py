"""JBOD against the real broker with stock clients: DescribeLogDirs, AlterReplicaLogDirs (KIP-113),
crash recovery of moves (kill -9 at every step), and log dir failure (KIP-112).

confluent-kafka 2.16's AdminClient has neither describe_log_dirs nor alter_replica_log_dirs, so
the admin calls go through kafka-python's KafkaAdminClient (and the `kafka-ext` CLI). Producers
and consumers are confluent-kafka and kafka-python.

Failing a dir: these tests may run as root, for whom chmod 000 denies nothing. `fail_log_dir`
therefore chmods the dir to 000 *and* renames it away, putting a regular file in its place:
for root the replacement is what fails (listing the dir gives ENOTDIR, creating files in it
fails), for other users both do. Files the broker already has open keep working, as on a real
disk until it is touched; the broker notices at its next write or probe
(`log.dir.failure.check.interval.ms`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import kafka
import pytest
from clients import create_topic, wait_until
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient

from kafka_ext.controller.quorum_controller import image_from_log
from kafka_ext.storage.checkpoints import MetaProperties
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig
from tests.integration.conftest import BrokerProcess

MOVE_STEPS = ("copy", "before-swap", "after-source-rename", "after-future-rename")
CRASH_ENV = "KEXT_TEST_MOVER_CRASH_AT"
WAIT_S = 60.0


# -- helpers -----------------------------------------------------------------------------------


def jbod_broker(broker_factory: Any, tmp_path: Path, dirs: int = 2,
                **overrides: str) -> tuple[BrokerProcess, list[Path]]:
    paths = [(tmp_path / f"disk{i}").resolve() for i in range(dirs)]
    broker = broker_factory({"log.dirs": ",".join(map(str, paths)),
                             "log.segment.bytes": "65536",
                             "log.dir.failure.check.interval.ms": "200", **overrides})
    return broker, paths


def admin(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def dirs_of(broker: BrokerProcess, topic: str) -> dict[tuple[int, bool], tuple[str, dict]]:
    """{(partition, is_future): (log dir, partition entry)} from DescribeLogDirs."""
    client = admin(broker)
    try:
        answer = client.describe_log_dirs(topic_partitions=[topic])
    finally:
        client.close()
    found = {}
    for d in answer[0]["log_dirs"]:
        for t in d["topics"]:
            for p in t["partitions"]:
                found[(p["partition_index"], p["is_future_key"])] = (d["log_dir"], p)
    return found


def alter(broker: BrokerProcess, moves: dict[tuple[str, int], str]) -> dict[tuple[str, int], str]:
    client = admin(broker)
    try:
        result = client.alter_replica_log_dirs(
            {TopicPartitionReplica(t, p, 1): d for (t, p), d in moves.items()})
    finally:
        client.close()
    return {(r.topic, r.partition): e.__name__ for r, e in result.items()}


def set_throttle(broker: BrokerProcess, rate: int) -> None:
    """IncrementalAlterConfigs (confluent-kafka) on this broker's resource, at run time."""
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "intra.broker.throttled.rate", str(rate),
        incremental_operation=AlterConfigOpType.SET)])
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.incremental_alter_configs([resource])
    for future in futures.values():
        future.result(timeout=WAIT_S)


def fail_log_dir(path: Path) -> Path:
    """Make `path` unusable even for root: chmod 000, moved away, a plain file in its place."""
    aside = path.with_name(path.name + ".failed")
    os.chmod(path, 0)
    path.rename(aside)
    path.write_text("this log dir has failed\n")
    return aside


def assert_unavailable(broker: BrokerProcess, topic: str, partition: int) -> None:
    """The partition's only replica is in a failed dir: the controller takes its leadership
    away (KIP-858), so Metadata shows no leader and a produce fails."""
    admin_client = AdminClient({"bootstrap.servers": broker.bootstrap})
    wait_until(lambda: admin_client.list_topics(topic, timeout=10).topics[topic]
               .partitions[partition].leader == -1, WAIT_S, f"{topic}-{partition} leaderless")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "message.timeout.ms": 2000})
    outcome: list[Any] = []
    producer.produce(topic, b"x", partition=partition,
                     on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    assert outcome and outcome[0] is not None


def restore_log_dir(path: Path, aside: Path) -> None:
    path.unlink()
    aside.rename(path)
    os.chmod(path, 0o755)


def directory_id(log_dir: Path) -> uuid.UUID:
    meta = MetaProperties.read(log_dir)
    assert meta is not None
    return meta.directory_id


def offline_dirs_in_metadata(metadata_dir: Path) -> tuple[uuid.UUID, ...]:
    """Replay the stopped broker's __cluster_metadata: the image's offline dirs of node 1."""
    log = UnifiedLog(metadata_dir / "__cluster_metadata-0", LogConfig())
    try:
        return image_from_log(log).offline_log_dirs.get(1, ())
    finally:
        log.close()


def produce_acked(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 2,
                                         "batch.size": 16384})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, v, partition=partition,
                         on_delivery=lambda err, msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    assert not errors, errors[:3]


def consume_values(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                         "enable.auto.commit": False,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        # A little longer: anything beyond `count` would be a duplicate.
        for msg in consumer.consume(1000, timeout=0.5):
            got.append(msg.value())
        return got
    finally:
        consumer.close()


class LiveTraffic:
    """A producer (acks=all, idempotent) and a consumer running in threads on one partition.

    `stop()` returns (acknowledged values in produce order, values the consumer read)."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.acked: list[bytes] = []
        self.consumed: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 1})
        acked: dict[int, bytes] = {}

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                acked[msg.offset()] = msg.value()

        n = 0
        while not self._stop.is_set():
            producer.produce(self.topic, b"m%06d" % n, partition=self.partition,
                             on_delivery=report)
            n += 1
            producer.poll(0.002)
        producer.flush(WAIT_S)
        self.acked = [acked[o] for o in sorted(acked)]

    def _consume(self) -> None:
        consumer = kafka.KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                       enable_auto_commit=False, auto_offset_reset="earliest")
        consumer.assign([kafka.TopicPartition(self.topic, self.partition)])
        idle_since = None
        while True:
            batch = consumer.poll(timeout_ms=200)
            records = [r for rs in batch.values() for r in rs]
            self.consumed += [r.value for r in records]
            if self._stop.is_set() and self._producer_done():
                if records:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > 1.5:
                    break
        consumer.close()

    def _producer_done(self) -> bool:
        return not self._threads[0].is_alive()

    def stop(self) -> tuple[list[bytes], list[bytes]]:
        self._stop.set()
        for t in self._threads:
            t.join(WAIT_S)
        return self.acked, self.consumed


def wait_moved(broker: BrokerProcess, topic: str, partition: int, dest: Path) -> None:
    def moved() -> bool:
        found = dirs_of(broker, topic)
        return (found.get((partition, False), ("",))[0] == str(dest)
                and (partition, True) not in found)
    wait_until(moved, WAIT_S, f"{topic}-{partition} in {dest}")


@pytest.fixture
def crash_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.delenv(CRASH_ENV, raising=False)


# -- DescribeLogDirs ---------------------------------------------------------------------------


def test_describe_log_dirs_reports_ids_space_sizes_and_filters_topics(broker_factory,
                                                                      tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path)
    ids = [next(line for line in (p / "meta.properties").read_text().splitlines()
                if line.startswith("directory.id=")) for p in paths]
    assert len(set(ids)) == 2
    create_topic(broker.bootstrap, "shown", 2)
    create_topic(broker.bootstrap, "hidden", 1)
    produce_acked(broker.bootstrap, "shown", 0, [b"x" * 100] * 50)
    client = admin(broker)
    try:
        answer = client.describe_log_dirs(topic_partitions=["shown"])
    finally:
        client.close()
    log_dirs = answer[0]["log_dirs"]
    assert sorted(d["log_dir"] for d in log_dirs) == sorted(map(str, paths))
    assert all(d["error_code"] == 0 and d["total_bytes"] > 0 and
               0 < d["usable_bytes"] <= d["total_bytes"] for d in log_dirs)
    partitions = {(t["name"], p["partition_index"]): p for d in log_dirs for t in d["topics"]
                  for p in t["partitions"]}
    assert set(partitions) == {("shown", 0), ("shown", 1)}  # the filter keeps "hidden" out
    assert partitions[("shown", 0)]["partition_size"] > 50 * 100
    assert partitions[("shown", 1)]["partition_size"] == 0
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in partitions.values())


# -- AlterReplicaLogDirs -----------------------------------------------------------------------


def test_move_under_live_traffic_and_runtime_throttle_loses_nothing(broker_factory,
                                                                   tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path,
                                **{"intra.broker.throttled.rate": "20000"})
    create_topic(broker.bootstrap, "live", 1)
    produce_acked(broker.bootstrap, "live", 0, [b"old%05d" % i + b"." * 200 for i in range(2000)])
    source = Path(dirs_of(broker, "live")[(0, False)][0])
    dest = next(p for p in paths if p != source)
    traffic = LiveTraffic(broker.bootstrap, "live", 0)
    assert alter(broker, {("live", 0): str(dest)}) == {("live", 0): "NoError"}
    # 20 kB/s against ~500 kB: the future replica shows up in DescribeLogDirs, behind.
    future = wait_until(lambda: dirs_of(broker, "live").get((0, True)), WAIT_S, "future replica")
    assert future[0] == str(dest) and future[1]["offset_lag"] > 0
    assert (dest / "live-0.move").is_dir() and (source / "live-0").is_dir()
    set_throttle(broker, 50_000_000)  # at run time: the move speeds up and finishes
    wait_moved(broker, "live", 0, dest)
    acked, consumed = traffic.stop()
    assert not traffic.errors, traffic.errors[:3]
    assert len(acked) > 0
    assert consumed[2000:] == acked  # every acknowledged message once, in order
    assert consumed[:2000] == [b"old%05d" % i + b"." * 200 for i in range(2000)]
    assert not (dest / "live-0.move").exists()
    wait_until(lambda: not any(p.name.startswith("live-0") for p in source.iterdir()), WAIT_S,
               "the source removed")
    assert consume_values(broker.bootstrap, "live", 0, len(consumed)) == consumed


def test_any_cancels_a_move_and_unknown_dirs_are_refused(broker_factory, tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path, **{"intra.broker.throttled.rate": "1"})
    create_topic(broker.bootstrap, "cancel", 1)
    produce_acked(broker.bootstrap, "cancel", 0, [b"v" * 100] * 1000)
    source = Path(dirs_of(broker, "cancel")[(0, False)][0])
    dest = next(p for p in paths if p != source)
    assert alter(broker, {("cancel", 0): str(dest)}) == {("cancel", 0): "NoError"}
    wait_until(lambda: (0, True) in dirs_of(broker, "cancel"), WAIT_S, "future replica")
    assert alter(broker, {("cancel", 0): "any"}) == {("cancel", 0): "NoError"}
    wait_until(lambda: (0, True) not in dirs_of(broker, "cancel"), WAIT_S, "move cancelled")
    wait_until(lambda: not (dest / "cancel-0.move").exists(), WAIT_S, ".move removed")
    assert dirs_of(broker, "cancel")[(0, False)][0] == str(source)
    assert alter(broker, {("cancel", 0): str(tmp_path / "elsewhere")}) == {
        ("cancel", 0): "LogDirNotFoundError"}
    assert consume_values(broker.bootstrap, "cancel", 0, 1000) == [b"v" * 100] * 1000


def test_replica_not_available_is_remembered_for_creation(broker_factory, tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path)
    # Left to placement, the two partitions would be spread over both dirs.
    assert alter(broker, {("later", 0): str(paths[1]), ("later", 1): str(paths[1])}) == {
        ("later", 0): "ReplicaNotAvailableError", ("later", 1): "ReplicaNotAvailableError"}
    create_topic(broker.bootstrap, "later", 2)
    found = dirs_of(broker, "later")
    assert found[(0, False)][0] == found[(1, False)][0] == str(paths[1])


def test_cli_describes_moves_and_verifies(broker_factory, tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path)
    create_topic(broker.bootstrap, "cli", 2)
    produce_acked(broker.bootstrap, "cli", 0, [b"c" * 50] * 300)
    cli = [sys.executable, "-m", "kafka_ext"]
    out = subprocess.run(cli + ["log-dirs", "--describe", "--bootstrap-server", broker.bootstrap,
                                "--topic-list", "cli", "--broker-list", "1"],
                         capture_output=True, text=True, check=True, timeout=60)
    document = json.loads(out.stdout)
    assert document["version"] == 1
    assert {d["path"] for d in document["log_dirs"]} == set(map(str, paths))
    assert all(d["is_live"] and d["broker"] == 1 for d in document["log_dirs"])
    where = {p["partition"]: d["path"] for d in document["log_dirs"] for p in d["partitions"]}
    assert set(where) == {0, 1}
    plan = {"version": 1, "partitions": [
        {"topic": "cli", "partition": p, "replicas": [1],
         "log_dirs": [next(str(x) for x in paths if str(x) != where[p])]} for p in (0, 1)]}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    run = subprocess.run(cli + ["reassign-partitions", "--execute", "--bootstrap-server",
                                broker.bootstrap, "--reassignment-json-file", str(plan_file),
                                "--timeout", "10"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Successfully started partition reassignment" in run.stdout
    verify = subprocess.run(cli + ["reassign-partitions", "--verify", "--bootstrap-server",
                                   broker.bootstrap, "--reassignment-json-file", str(plan_file)],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.count("completed successfully") == 2
    assert consume_values(broker.bootstrap, "cli", 0, 300) == [b"c" * 50] * 300


# -- crash recovery ----------------------------------------------------------------------------


@pytest.mark.parametrize("step", MOVE_STEPS)
def test_kill_9_at_each_move_step_keeps_every_acked_message_once(
        broker_factory, tmp_path: Path, crash_env: pytest.MonkeyPatch, step: str) -> None:
    crash_env.setenv(CRASH_ENV, step)
    broker, paths = jbod_broker(broker_factory, tmp_path)
    create_topic(broker.bootstrap, "crash", 1)
    before = [b"a%05d" % i for i in range(3000)]
    produce_acked(broker.bootstrap, "crash", 0, before)
    source = Path(dirs_of(broker, "crash")[(0, False)][0])
    dest = next(p for p in paths if p != source)
    alter(broker, {("crash", 0): str(dest)})
    assert broker.proc is not None
    assert broker.proc.wait(WAIT_S) == -9  # the test hook killed it at `step`
    crash_env.delenv(CRASH_ENV)
    broker.start()  # recovery: resume, rename, or nothing left to do
    wait_moved(broker, "crash", 0, dest)
    after = [b"b%05d" % i for i in range(500)]
    produce_acked(broker.bootstrap, "crash", 0, after)
    assert consume_values(broker.bootstrap, "crash", 0, 3500) == before + after
    assert not (dest / "crash-0.move").exists()
    wait_until(lambda: not any(p.name.startswith("crash-0") for p in source.iterdir()), WAIT_S,
               "the source's -delete dir removed")


def test_kill_9_during_a_throttled_move_under_live_traffic(broker_factory,
                                                           tmp_path: Path) -> None:
    """The throttle holds the move mid-copy while an idempotent producer and a consumer run;
    kill -9, restart: the move resumes and finishes, every acknowledged message is read once."""
    broker, paths = jbod_broker(broker_factory, tmp_path)
    create_topic(broker.bootstrap, "busy", 1)
    produce_acked(broker.bootstrap, "busy", 0, [b"x" * 200] * 2000)
    set_throttle(broker, 1)  # dynamic, so it survives the restart in the metadata log
    source = Path(dirs_of(broker, "busy")[(0, False)][0])
    dest = next(p for p in paths if p != source)
    traffic = LiveTraffic(broker.bootstrap, "busy", 0)
    assert alter(broker, {("busy", 0): str(dest)}) == {("busy", 0): "NoError"}
    wait_until(lambda: (0, True) in dirs_of(broker, "busy"), WAIT_S, "move in progress")
    wait_until(lambda: len(traffic.consumed) > 2300, WAIT_S, "traffic during the move")
    broker.kill()
    assert (dest / "busy-0.move").is_dir() and (source / "busy-0").is_dir()
    broker.start()
    assert (0, True) in dirs_of(broker, "busy")  # resumed, still throttled
    set_throttle(broker, 1 << 40)
    wait_moved(broker, "busy", 0, dest)
    count = len(traffic.consumed)
    wait_until(lambda: len(traffic.consumed) > count + 200, WAIT_S, "traffic after the move")
    acked, consumed = traffic.stop()
    assert not traffic.errors, traffic.errors[:3]
    assert consumed[:2000] == [b"x" * 200] * 2000
    assert consumed[2000:] == acked


def test_move_dir_alone_with_an_offline_dir_stays_offline_and_untouched(
        broker_factory, tmp_path: Path, crash_env: pytest.MonkeyPatch) -> None:
    crash_env.setenv(CRASH_ENV, "after-source-rename")
    broker, paths = jbod_broker(broker_factory, tmp_path)
    create_topic(broker.bootstrap, "orphan", 1)
    produce_acked(broker.bootstrap, "orphan", 0, [b"o"] * 100)
    source = Path(dirs_of(broker, "orphan")[(0, False)][0])
    dest = next(p for p in paths if p != source)
    alter(broker, {("orphan", 0): str(dest)})
    assert broker.proc is not None and broker.proc.wait(WAIT_S) == -9
    crash_env.delenv(CRASH_ENV)
    assert not (source / "__cluster_metadata-0").exists()
    offline = source  # now holding only the renamed-away `-delete` copy
    fail_log_dir(offline)
    broker.start()
    assert (dest / "orphan-0.move").is_dir()  # not renamed: the real copy may be on the bad dir
    assert_unavailable(broker, "orphan", 0)
    found = admin(broker).describe_log_dirs()[0]["log_dirs"]
    assert {d["log_dir"]: d["error_code"] for d in found}[str(offline)] == 56


# -- log dir failure (KIP-112) -----------------------------------------------------------------


def test_a_failed_background_flush_takes_its_dir_offline(broker_factory,
                                                         tmp_path: Path) -> None:
    """Only the flush can notice here (the probe, checkpoints and retention wait an hour): the
    first append wrote the leader-epoch checkpoint without fsync, and the flush that
    flush.messages asks for rewrites it with fsync, in the replaced dir."""
    hour_ms = "3600000"
    broker, _ = jbod_broker(broker_factory, tmp_path, **{
        "log.dir.failure.check.interval.ms": hour_ms,
        "log.flush.offset.checkpoint.interval.ms": hour_ms,
        "log.flush.start.offset.checkpoint.interval.ms": hour_ms,
        "log.retention.check.interval.ms": hour_ms})
    create_topic(broker.bootstrap, "flushed", 2, config={"flush.messages": "5"})
    found = dirs_of(broker, "flushed")
    doomed_dir = Path(found[(0, False)][0])
    assert Path(found[(1, False)][0]) != doomed_dir
    assert not (doomed_dir / "__cluster_metadata-0").exists()
    produce_acked(broker.bootstrap, "flushed", 0, [b"before"] * 4)  # under flush.messages
    aside = fail_log_dir(doomed_dir)
    try:
        produce_acked(broker.bootstrap, "flushed", 0, [b"after"])  # the open segment file
        client = admin(broker)
        try:
            def offline() -> bool:
                dirs = client.describe_log_dirs()[0]["log_dirs"]
                return {d["log_dir"]: d["error_code"] for d in dirs}.get(str(doomed_dir)) == 56
            wait_until(offline, WAIT_S, "the dir whose flush failed reported offline")
        finally:
            client.close()
        assert "flush of flushed-0 failed" in broker.log()
        produce_acked(broker.bootstrap, "flushed", 1, [b"elsewhere"])
        assert consume_values(broker.bootstrap, "flushed", 1, 1) == [b"elsewhere"]
    finally:
        broker.stop()
        restore_log_dir(doomed_dir, aside)


def test_failed_dir_goes_offline_while_the_other_keeps_serving(broker_factory,
                                                              tmp_path: Path) -> None:
    broker, paths = jbod_broker(broker_factory, tmp_path)
    create_topic(broker.bootstrap, "jbod", 2)
    found = dirs_of(broker, "jbod")
    doomed_dir = Path(found[(0, False)][0])
    healthy = 1 if Path(found[(1, False)][0]) != doomed_dir else None
    assert healthy is not None and not (doomed_dir / "__cluster_metadata-0").exists()
    traffic = LiveTraffic(broker.bootstrap, "jbod", healthy)
    produce_acked(broker.bootstrap, "jbod", 0, [b"lost?"] * 10)
    wait_until(lambda: len(traffic.consumed) > 200, WAIT_S, "traffic flowing")
    doomed_id = directory_id(doomed_dir)
    aside = fail_log_dir(doomed_dir)
    try:
        def offline() -> bool:
            dirs = admin(broker).describe_log_dirs()[0]["log_dirs"]
            return {d["log_dir"]: d["error_code"] for d in dirs}.get(str(doomed_dir)) == 56
        wait_until(offline, WAIT_S, "the failed dir reported offline")
        assert_unavailable(broker, "jbod", 0)
        count = len(traffic.consumed)
        wait_until(lambda: len(traffic.consumed) > count + 200, WAIT_S, "traffic after failure")
        acked, consumed = traffic.stop()
        assert not traffic.errors, traffic.errors[:3]
        assert consumed == acked and len(acked) > 400
        assert "failed and is now offline" in broker.log()
        # New partitions never go to the offline dir.
        create_topic(broker.bootstrap, "after-failure", 2)
        assert {d for d, _ in dirs_of(broker, "after-failure").values()} == {
            str(p) for p in paths if p != doomed_dir}
        # A restart with the dir still broken starts with the other one.
        broker.restart()
        assert consume_values(broker.bootstrap, "jbod", healthy, len(acked)) == acked
        dirs = {d["log_dir"]: d["error_code"]
                for d in admin(broker).describe_log_dirs()[0]["log_dirs"]}
        assert dirs == {str(p): (56 if p == doomed_dir else 0) for p in paths}
        assert_unavailable(broker, "jbod", 0)
    finally:
        if doomed_dir.is_file():
            broker.stop()
            assert offline_dirs_in_metadata(paths[0] if doomed_dir != paths[0] else paths[1]) \
                == (doomed_id,)
            restore_log_dir(doomed_dir, aside)
    # Repaired: the partition comes back with its data.
    broker.start()
    assert consume_values(broker.bootstrap, "jbod", 0, 10) == [b"lost?"] * 10
