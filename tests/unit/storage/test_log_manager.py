"""LogManager over several log dirs: placement, checkpoints, clean shutdown, recovery, identity."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.formatter import LogDirIdentityError
from kafka_ext.storage.log import parse_chunk_dir
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_manager import LogManager

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def _manager(dirs: list[Path], clock, **kw) -> LogManager:
    manager = LogManager(
        dirs, node_id=1, cluster_id=kw.pop("cluster_id", CLUSTER), clock_ms=clock, **kw
    )
    manager.load()
    return manager


def test_new_partition_goes_to_emptiest_dir(tmp_path: Path, clock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = _manager(dirs, clock)
    for p in range(6):
        manager.create_log("t", p)
    counts = {d.name: len(manager.logs_in_dir(d.resolve())) for d in dirs}
    assert counts == {"a": 2, "b": 2, "c": 2}
    assert manager.log_dir_of("t", 0) == manager.log_dir_of("t", 3) == dirs[0].resolve()
    manager.delete_log("t", 0)
    manager.delete_log("t", 3)
    assert manager.create_log("u", 0).dir.parent == dirs[0].resolve()
    assert manager.create_log("u", 0) is manager.get_log("u", 0)


def test_meta_properties_written_once_and_checked(tmp_path: Path, clock) -> None:
    manager = _manager([tmp_path / "d"], clock)
    text = (tmp_path / "d" / "meta.properties").read_text()
    assert "version=1" in text and "node.id=1" in text and f"cluster.id={CLUSTER}" in text
    directory_id = manager.directory_id((tmp_path / "d").resolve())
    manager.close()
    again = _manager([tmp_path / "d"], clock)
    assert again.directory_id((tmp_path / "d").resolve()) == directory_id
    again.close()
    with pytest.raises(LogDirIdentityError) as err:
        _manager([tmp_path / "d"], clock, cluster_id="another-cluster-id")
    assert err.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert "another-cluster-id" in str(err.value)


def test_reopen_after_clean_shutdown_skips_recovery(tmp_path: Path, clock, make_batch) -> None:
    manager = _manager([tmp_path / "d"], clock)
    log = manager.create_log("t", 0)
    for _ in range(4):
        log.append_as_leader(make_batch(2), 0)
    manager.close()
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()
    # Corrupt a record in the middle: recovery would truncate there, a clean start must not look.
    seg = tmp_path / "d" / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[len(data) // 2 - 3] ^= 0xFF
    seg.write_bytes(bytes(data))
    (tmp_path / "d" / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
    reopened = _manager([tmp_path / "d"], clock)
    log = reopened.get_log("t", 0)
    assert log is not None and log.log_end_offset == 8 and log.recovered_segments == 0
    assert not (tmp_path / "d" / ".kafka_cleanshutdown").exists()


def test_unclean_shutdown_recovers_after_recovery_point(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(2, value_size=100)
    manager = _manager(
        [tmp_path / "d"], clock, default_config=LogConfig(segment_bytes=2 * len(batch))
    )
    log = manager.create_log("t", 0)
    for _ in range(6):
        log.append_as_leader(batch, 0)
    log.flush(4)
    manager.checkpoint_recovery_points()
    with open(log.dir / f"{8:020d}.log", "ab") as f:
        f.write(batch[:25])
    # no close(): the process "crashed"
    reopened = _manager(
        [tmp_path / "d"], clock, default_config=LogConfig(segment_bytes=2 * len(batch))
    )
    log = reopened.get_log("t", 0)
    assert log is not None and log.log_end_offset == 12
    assert log.recovered_segments == 2  # segments 4 and 8; segment 0 was flushed
    assert (log.dir / f"{8:020d}.log").stat().st_size == 2 * len(batch)


def test_checkpoints_use_kafka_format(tmp_path: Path, clock, make_batch) -> None:
    manager = _manager([tmp_path / "d"], clock)
    log = manager.create_log("orders", 3)
    log.append_as_leader(make_batch(5), 0)
    log.high_watermark = 5
    log.delete_records_before(2)
    manager.close()
    d = tmp_path / "d"
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 5\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\norders 3 2\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\norders 3 5\n"
    reopened = _manager([d], clock)
    log = reopened.get_log("orders", 3)
    assert log is not None and (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
        2,
        5,
        5,
    )


def test_delete_log_renames_then_removes(tmp_path: Path, clock, make_batch) -> None:
    manager = _manager([tmp_path / "d"], clock)
    manager.create_log("t", 0).append_as_leader(make_batch(1), 0)
    manager.delete_log("t", 0)
    assert manager.get_log("t", 0) is None
    assert [p.name for p in (tmp_path / "d").iterdir() if p.is_dir()] == []
    with pytest.raises(KafkaError) as err:
        manager.delete_log("t", 0)
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_load_queues_delete_dirs_and_hands_move_dirs_to_the_mover(tmp_path: Path, clock) -> None:
    d = tmp_path / "d"
    doomed = d / f"t-0.{uuid.uuid4().hex}-delete"
    doomed.mkdir(parents=True)
    (d / "t-3.delete").mkdir()  # the proposal's name for a moved-away source
    (d / "t-1.move").mkdir()
    (d / "t-2").mkdir()
    manager = _manager([d], clock)
    assert [(log.topic, log.partition) for log in manager.all_logs()] == [("t", 2)]
    # Removal is asynchronous (the broker's executor), so start-up never waits for it.
    assert sorted(p.name for p in manager.pending_deletions) == sorted([doomed.name, "t-3.delete"])
    assert manager.future_dirs == {("t", 1): d.resolve() / "t-1.move"}


def test_topic_with_dashes_round_trips(tmp_path: Path, clock, make_batch) -> None:
    manager = _manager([tmp_path / "d"], clock)
    manager.create_log("my-topic-name", 12).append_as_leader(make_batch(1), 0)
    manager.close()
    reopened = _manager([tmp_path / "d"], clock)
    log = reopened.get_log("my-topic-name", 12)
    assert log is not None and log.log_end_offset == 1


def test_detaching_a_log_never_fsyncs_its_snapshot_and_clean_shutdown_does(
    tmp_path: Path, clock, make_batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager([tmp_path / "d"], clock)
    doomed = manager.create_log("gone", 0)
    kept = manager.create_log("kept", 0)
    for log in (doomed, kept):
        log.append_as_leader(make_batch(2), 0)
    synced_inodes: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced_inodes.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    # Topic deletion, a failed dir and a move's swap detach logs on the event loop.
    moved_away = manager.detach_log("gone", 0)
    detached_snapshot = moved_away / "00000000000000000002.snapshot"
    assert detached_snapshot.exists()  # still written, for a move's swap to copy
    assert detached_snapshot.stat().st_ino not in synced_inodes
    manager.close()  # clean shutdown, in the executor: the snapshot is durable
    snapshot = tmp_path / "d" / "kept-0" / "00000000000000000002.snapshot"
    assert snapshot.stat().st_ino in synced_inodes
    assert kept.producer_state.unflushed_snapshot_offsets == []


def test_a_log_sealed_as_a_chunk_keeps_its_data_under_its_new_name(
        tmp_path: Path, clock, make_batch) -> None:
    """Partition chunks (seed 000): sealing renames the partition's dir to
    `<topic>-<partition>@<start>` without an fsync on the caller's thread (the chunk knows
    what is not yet on disk and flushes it later); the partition's next log starts empty; a
    restart finds the chunk again."""
    manager = _manager([tmp_path / "d1"], clock)
    log = manager.create_log("t", 0)
    for _ in range(3):
        log.append_as_leader(make_batch(2), 0)
    chunk = manager.seal_as_chunk("t", 0, 0)
    assert chunk.dir.name == "t-0@0" and not (tmp_path / "d1" / "t-0").exists()
    assert manager.get_chunk_log("t", 0, 0) is chunk and manager.get_log("t", 0) is None
    assert chunk.log_end_offset == 6 and chunk.recovery_point < 6
    chunk.flush()
    assert chunk.recovery_point == 6
    assert len(chunk.read(0, 1 << 20).records) > 0
    fresh = manager.create_log("t", 0)
    assert fresh.log_end_offset == 0 and fresh.dir.name == "t-0"
    manager.close()
    reopened = _manager([tmp_path / "d1"], clock)
    found = reopened.get_chunk_log("t", 0, 0)
    assert found is not None and found.log_end_offset == 6
    assert parse_chunk_dir("t-0@0") == ("t", 0, 0) and parse_chunk_dir("t-0") is None
    reopened.close()


def test_concurrent_checkpoint_writes_never_fail_the_log_dir(tmp_path: Path, clock,
                                                             make_batch) -> None:
    """Two DeleteRecords requests checkpoint log start offsets in two executor threads at
    once (found by the wire fuzzer: the second rename of the shared .tmp file failed, the only
    log dir went offline and the broker stopped)."""
    manager = _manager([tmp_path / "d"], clock)
    log = manager.create_log("orders", 0)
    log.append_as_leader(make_batch(5), 0)
    failures: list[tuple[Path, OSError]] = []
    manager.failure_listener = lambda log_dir, exc: failures.append((log_dir, exc))
    start = threading.Barrier(4)

    def write_many() -> None:
        start.wait()
        for _ in range(200):
            manager.checkpoint_log_start_offsets()

    threads = [threading.Thread(target=write_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert (tmp_path / "d" / "log-start-offset-checkpoint").read_text() == "0\n1\norders 0 0\n"
    manager.close()
