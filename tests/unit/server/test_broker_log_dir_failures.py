"""KIP-112 for the broker's background jobs: an I/O error in the flush, in retention or in the
removal of deleted segments takes the log's dir offline; the other dir keeps serving.

The broker runs in this process (its background jobs are called directly, so nothing races).
Failing a dir works for root too: it is renamed away and a regular file put at its path, as in
tests/integration/test_jbod.py. Files the broker has open keep working; anything that opens a
path in the dir (a checkpoint rewrite, a rename, an unlink) fails with ENOTDIR.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config

HOUR_MS = "3600000"
OLD_TIMESTAMP_MS = 1_600_000_000_000  # 2020: past any retention.ms below
FLUSH_MESSAGES = 5


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    dirs = [(tmp_path / "d0").resolve(), (tmp_path / "d1").resolve()]
    # Only the jobs under test may notice a failed dir: the probe and checkpoints wait an hour.
    config = build_config({
        "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": ",".join(map(str, dirs)),
        "log.dir.failure.check.interval.ms": HOUR_MS,
        "log.flush.offset.checkpoint.interval.ms": HOUR_MS,
        "log.flush.start.offset.checkpoint.interval.ms": HOUR_MS,
        "log.retention.check.interval.ms": HOUR_MS,
        "log.cleaner.enable": "false",
    })
    b = Broker(config)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def _create_topic(broker: Broker, configs: dict[str, str | None]) -> Path:
    """Topic `t` with one partition per dir; returns the dir of t-0 (not the metadata's)."""
    (result,) = await broker.controller.create_topics([TopicCreation("t", 2, 1, configs=configs)],
                                                     False)
    assert result.error == ErrorCode.NONE
    lm = broker.log_manager
    doomed = lm.log_dir_of("t", 0)
    assert doomed is not None and lm.log_dir_of("t", 1) != doomed
    assert lm.log_dir_of(METADATA_TOPIC, 0) != doomed  # losing it would stop the broker
    return doomed


def _produce(broker: Broker, partition: int, count: int, timestamp_ms: int) -> None:
    records = [Record(i, timestamp_ms, None, b"v%d" % i) for i in range(count)]
    broker.replica_manager.append_records("t", partition, build_batch(records))


def _fail_dir(path: Path) -> None:
    path.rename(path.with_name(path.name + ".failed"))
    path.write_text("this log dir has failed\n")


def _assert_offline_and_other_serving(broker: Broker, doomed: Path, failed_file: str) -> None:
    """`doomed` is offline for an error on `failed_file`; t-0 fails, t-1 keeps serving."""
    assert failed_file in broker.log_manager.offline_dirs[doomed]
    with pytest.raises(KafkaError) as info:
        _produce(broker, 0, 1, int(time.time() * 1000))
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    end = broker.replica_manager.partitions[("t", 1)].log.log_end_offset
    _produce(broker, 1, 1, int(time.time() * 1000))
    assert broker.replica_manager.partitions[("t", 1)].log.log_end_offset == end + 1


async def test_a_flush_that_fails_takes_the_dir_offline(broker: Broker) -> None:
    doomed = await _create_topic(broker, {"flush.messages": str(FLUSH_MESSAGES)})
    now_ms = int(time.time() * 1000)
    # The first append writes the leader-epoch checkpoint without fsync; the flush rewrites it
    # with fsync, which opens a new file in the dir. Fewer than flush.messages: not flushed yet.
    _produce(broker, 0, FLUSH_MESSAGES - 1, now_ms)
    _fail_dir(doomed)
    _produce(broker, 0, 1, now_ms)  # into the open segment file: the flush is due now
    assert broker.replica_manager.partitions[("t", 0)].log.needs_flush(now_ms)
    await broker._flush_due_logs()
    _assert_offline_and_other_serving(broker, doomed, "leader-epoch-checkpoint")


async def test_retention_that_fails_takes_the_dir_offline(broker: Broker) -> None:
    doomed = await _create_topic(broker, {"segment.bytes": "100", "retention.ms": "86400000"})
    for _ in range(3):  # one batch per segment
        _produce(broker, 0, 2, OLD_TIMESTAMP_MS)
    plog = broker.replica_manager.partitions[("t", 0)].log
    assert len(plog.segments) >= 3
    await broker._flush_due_logs()  # the rolled segments: nothing is due for the flush after
    _fail_dir(doomed)
    await broker._apply_retention()  # renaming a segment to `.deleted` fails
    _assert_offline_and_other_serving(broker, doomed, "00000000000000000000.log")


async def test_removing_deleted_segments_that_fails_takes_the_dir_offline(
        broker: Broker) -> None:
    doomed = await _create_topic(broker, {"segment.bytes": "100", "retention.ms": "86400000"})
    for _ in range(3):
        _produce(broker, 0, 2, OLD_TIMESTAMP_MS)
    plog = broker.replica_manager.partitions[("t", 0)].log
    await broker._flush_due_logs()
    # Retention renames the old segments to `.deleted` on the loop; unlinking them comes later.
    assert plog.delete_retention_segments(int(time.time() * 1000)) >= 2
    _fail_dir(doomed)
    await broker.remove_deleted_segment_files()
    _assert_offline_and_other_serving(broker, doomed, ".deleted")
