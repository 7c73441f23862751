"""UnifiedLog: offset assignment, rolling, reads, ListOffsets, epochs, retention, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import TimestampType, read_batch_header, validate_batch
from kafka_ext.protocol.records import decode_all_batches
from kafka_ext.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, UnifiedLog
from kafka_ext.storage.log_config import LogConfig


def _open(tmp_path: Path, clock, **config) -> UnifiedLog:
    return UnifiedLog(
        tmp_path / "orders-0", LogConfig(**config), needs_recovery=False, clock_ms=clock
    )


def _offsets(log: UnifiedLog, fetch_offset: int = 0, max_bytes: int = 1 << 24, **kw) -> list[int]:
    info = log.read(fetch_offset, max_bytes, **kw)
    return [
        r.offset
        for view in info.records
        for _, records in decode_all_batches(view)
        for r in records
    ]


def test_append_as_leader_assigns_offsets_and_epoch(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    first = log.append_as_leader(make_batch(3), leader_epoch=4)
    second = log.append_as_leader(make_batch(2) + make_batch(1), leader_epoch=4)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.shallow_count) == (3, 5, 2)
    assert first.log_append_time_ms == -1 and log.log_end_offset == 6
    info = log.read(0, 1 << 20)
    headers = [h for view in info.records for h, _ in decode_all_batches(view)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (3, 4), (5, 4)]
    assert _offsets(log) == [0, 1, 2, 3, 4, 5]


def test_append_does_not_modify_the_callers_buffer(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    log.append_as_leader(make_batch(1), 0)
    request = bytearray(make_batch(1))
    log.append_as_leader(request, 0)
    assert read_batch_header(request).base_offset == 0


def test_log_append_time_is_stamped_when_configured(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    info = log.append_as_leader(make_batch(2, timestamp_ms=5), 0, log_append_time_ms=777)
    assert info.log_append_time_ms == 777 and info.max_timestamp == 777
    header = validate_batch(log.read(0, 1 << 20).records[0])  # CRC still valid after the patch
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME and header.max_timestamp == 777


def test_oversized_batch_is_rejected(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, max_message_bytes=200)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(1, value_size=500), 0)
    assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0


@pytest.mark.parametrize("timestamps", [[1_000_000 + 3_601_000], [1_000_000 - 10_001, 1_000_000]],
                         ids=["too-far-ahead", "first-too-old"])
def test_create_time_outside_the_timestamp_bounds_is_invalid_timestamp(
        tmp_path: Path, clock, make_batch, timestamps: list[int]) -> None:
    log = _open(tmp_path, clock, message_timestamp_before_max_ms=10_000)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(timestamps=timestamps), 0)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    assert log.log_end_offset == 0
    log.append_as_leader(make_batch(timestamps=[1_000_000 + 3_600_000]), 0)  # the bound itself
    assert log.log_end_offset == 1


def test_log_append_time_topics_accept_any_producer_timestamp(
        tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME,
                message_timestamp_before_max_ms=10)
    log.append_as_leader(make_batch(timestamps=[1]), 0)
    assert log.log_end_offset == 1


def test_roll_by_size_creates_new_segment(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=3 * len(batch))
    for _ in range(7):
        log.append_as_leader(batch, 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert sorted(p.name for p in log.dir.glob("*.log")) == [f"{o:020d}.log" for o in (0, 3, 6)]
    assert os.path.getsize(log.dir / "00000000000000000000.log") == 3 * len(batch)
    assert _offsets(log, 2) == list(range(2, 7))


def test_roll_by_time_creates_new_segment(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, segment_ms=1000)
    log.append_as_leader(make_batch(1, timestamp_ms=10_000), 0)
    log.append_as_leader(make_batch(1, timestamp_ms=10_500), 0)
    log.append_as_leader(make_batch(1, timestamp_ms=11_001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_read_spans_segments_up_to_max_bytes(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch))
    for _ in range(6):
        log.append_as_leader(batch, 0)
    assert _offsets(log, 1, max_bytes=3 * len(batch)) == [1, 2, 3]
    assert log.read(1, 3 * len(batch)).size_bytes == 3 * len(batch)
    assert _offsets(log, 0, max_bytes=10) == []
    assert _offsets(log, 0, max_bytes=10, min_one_message=True) == [0]


def test_read_stops_at_max_offset(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    for _ in range(5):
        log.append_as_leader(make_batch(2), 0)
    assert _offsets(log, 0, max_offset=6) == [0, 1, 2, 3, 4, 5]
    assert _offsets(log, 6, max_offset=6) == []


def test_read_outside_the_log_is_offset_out_of_range(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    log.append_as_leader(make_batch(2), 0)
    assert log.read(2, 100).records == []
    with pytest.raises(KafkaError) as err:
        log.read(3, 100)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_offset_for_timestamp(tmp_path: Path, clock, make_batch) -> None:
    batch_bytes = len(make_batch(timestamps=[0, 1, 2]))
    log = _open(tmp_path, clock, segment_bytes=2 * batch_bytes, index_interval_bytes=1)
    for n in range(6):
        log.append_as_leader(make_batch(timestamps=[n * 100, n * 100 + 10, n * 100 + 20]), 2)
    assert len(log.segments) == 3
    assert log.fetch_offset_by_timestamp(215) == (8, 220, 2)
    assert log.fetch_offset_by_timestamp(300) == (9, 300, 2)
    assert log.fetch_offset_by_timestamp(0) == (0, 0, 2)
    assert log.fetch_offset_by_timestamp(521) is None
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (0, -1, 2)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (18, -1, 2)


def test_max_timestamp_offset_is_the_record_with_largest_timestamp(
    tmp_path: Path, clock, make_batch
) -> None:
    log = _open(tmp_path, clock, segment_bytes=200)
    log.append_as_leader(make_batch(timestamps=[10, 20]), 0)
    log.append_as_leader(make_batch(timestamps=[50, 900, 40]), 0)
    log.append_as_leader(make_batch(timestamps=[60, 70]), 1)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (3, 900, 0)


def test_legacy_offsets_before_walks_segments_by_modification_time(
    tmp_path: Path, clock, make_batch
) -> None:
    """ListOffsets v0: segment base offsets whose file was last written at or before the
    timestamp, plus the log end offset (stamped now) for a non-empty active segment."""
    log = _open(tmp_path, clock, segment_bytes=200)
    for n in range(3):
        log.append_as_leader(make_batch(timestamps=[n, n, n]), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    for n, segment in enumerate(log.segments):
        os.utime(segment.log_path, ((n + 1) * 1000.0, (n + 1) * 1000.0))  # 1e6, 2e6, 3e6 ms
    clock.now_ms = 5_000_000
    assert log.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [9, 6, 3, 0]
    assert log.legacy_offsets_before(LATEST_TIMESTAMP, 2) == [9, 6]
    assert log.legacy_offsets_before(EARLIEST_TIMESTAMP, 10) == [0]
    assert log.legacy_offsets_before(2_500_000, 10) == [3, 0]
    assert log.legacy_offsets_before(3_000_000, 1) == [6]
    assert log.legacy_offsets_before(5_000_000, 10) == [9, 6, 3, 0]
    assert log.legacy_offsets_before(999_999, 10) == []
    assert log.legacy_offsets_before(LATEST_TIMESTAMP, 0) == []
    log.maybe_increment_log_start_offset(4)
    assert log.legacy_offsets_before(EARLIEST_TIMESTAMP, 10) == [4]
    assert log.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [9, 6, 4]
    log.roll()  # an empty active segment stands for itself: its base, no extra log end offset
    os.utime(log.segments[-1].log_path, (4000.0, 4000.0))
    assert log.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [9, 6, 4]
    assert log.legacy_offsets_before(3_500_000, 10) == [6, 4]


def test_end_offset_for_epoch(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    log.append_as_leader(make_batch(3), 1)
    log.append_as_leader(make_batch(2), 3)
    log.append_as_leader(make_batch(2), 5)
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)  # unknown epoch: ends where epoch 3 starts
    assert log.end_offset_for_epoch(3) == (3, 5)
    assert log.end_offset_for_epoch(5) == (5, 7)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 3\n5 5\n"


def test_epochs_survive_reopen(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    log.append_as_leader(make_batch(3), 1)
    log.append_as_leader(make_batch(2), 2)
    log.flush()
    log.close()
    reopened = _open(tmp_path, clock)
    assert reopened.end_offset_for_epoch(1) == (1, 3)
    assert reopened.latest_epoch == 2


def test_retention_by_size_keeps_active_segment(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch), retention_bytes=0)
    for _ in range(5):
        log.append_as_leader(batch, 0)
    assert log.delete_retention_segments(clock()) == 2
    assert [s.base_offset for s in log.segments] == [4]
    assert log.log_start_offset == 4
    assert log.delete_retention_segments(clock()) == 0
    assert _offsets(log, 4) == [4]
    assert not (log.dir / "00000000000000000000.log").exists()


def test_deleted_segments_wait_as_dot_deleted_files_for_background_removal(
        tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch), retention_bytes=0)
    for _ in range(5):
        log.append_as_leader(batch, 0)
    log.delete_retention_segments(clock())
    pending = log.take_deleted_files()
    assert sorted(p.name for p in pending) == sorted(
        f"{base:020d}{suffix}.deleted" for base in (0, 2)
        for suffix in (".log", ".index", ".timeindex"))
    assert all(p.exists() for p in pending)
    assert log.take_deleted_files() == []  # handed over once
    log.close()
    reopened = _open(tmp_path, clock)  # a start removes what was never unlinked
    assert not [p for p in reopened.dir.iterdir() if p.name.endswith(".deleted")]
    assert reopened.log_start_offset == 4


def test_retention_by_size_keeps_just_enough(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch), retention_bytes=3 * len(batch))
    for _ in range(6):
        log.append_as_leader(batch, 0)
    log.delete_retention_segments(clock())
    assert [s.base_offset for s in log.segments] == [2, 4]


def test_retention_by_time_deletes_old_segments(tmp_path: Path, clock, make_batch) -> None:
    batch_bytes = len(make_batch(1, value_size=100))
    log = _open(tmp_path, clock, segment_bytes=2 * batch_bytes, retention_ms=1000)
    for ts in (100, 200, 5000, 5100, 9000):
        log.append_as_leader(make_batch(1, value_size=100, timestamp_ms=ts), 0)
    assert log.delete_retention_segments(now_ms=5500) == 1
    assert [s.base_offset for s in log.segments] == [2, 4]
    assert log.delete_retention_segments(now_ms=100_000) == 1  # the active one stays
    assert [s.base_offset for s in log.segments] == [4]


def test_delete_records_moves_log_start_offset(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(2, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch))
    for _ in range(4):
        log.append_as_leader(batch, 0)
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(5) == 5
    assert log.log_start_offset == 5
    assert [s.base_offset for s in log.segments] == [4]
    with pytest.raises(KafkaError) as err:
        log.read(3, 100)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _offsets(log, 5) == [4, 5, 6, 7]  # the whole batch holding 5; the client skips 4
    with pytest.raises(KafkaError):
        log.delete_records_before(9)


def test_truncate_to_drops_later_segments_and_epochs(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(2, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=2 * len(batch))
    for epoch in (0, 0, 1, 1, 2):
        log.append_as_leader(batch, epoch)
    log.high_watermark = 10
    assert log.truncate_to(5)
    assert log.log_end_offset == 4 and log.high_watermark == 4
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 2 * len(batch)), (4, 0)]
    assert log.end_offset_for_epoch(2) == (-1, -1)
    assert log.append_as_leader(batch, 3).first_offset == 4
    assert _offsets(log) == [0, 1, 2, 3, 4, 5]


def test_append_as_follower_keeps_offsets(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    log.append_as_follower(make_batch(3, base_offset=0, partition_leader_epoch=2))
    info = log.append_as_follower(make_batch(2, base_offset=3, partition_leader_epoch=3))
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert log.end_offset_for_epoch(2) == (2, 3)
    with pytest.raises(KafkaError):
        log.append_as_follower(make_batch(1, base_offset=2))


def test_flush_policy_and_recovery_point(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, flush_messages=3)
    log.append_as_leader(make_batch(2), 0)
    assert not log.needs_flush(clock())
    log.append_as_leader(make_batch(1), 0)
    assert log.pending_flush_offset(clock()) == 3
    log.flush()
    assert log.recovery_point == 3 and not log.needs_flush(clock())


def test_rolled_segments_ask_for_a_flush(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=len(batch))
    log.flush()
    log.append_as_leader(batch, 0)
    log.append_as_leader(batch, 0)
    assert log.pending_flush_offset(clock()) == 1


def test_recovery_truncates_torn_tail(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock)
    for _ in range(3):
        log.append_as_leader(make_batch(2), 0)
    with open(log.dir / "00000000000000000000.log", "ab") as f:
        f.write(make_batch(2)[:30])
    reopened = UnifiedLog(
        log.dir, LogConfig(), recovery_point=0, needs_recovery=True, clock_ms=clock
    )
    assert reopened.log_end_offset == 6 and reopened.recovered_segments == 1
    assert reopened.append_as_leader(make_batch(1), 0).first_offset == 6
    assert _offsets(reopened) == list(range(7))


def test_corrupt_index_is_rebuilt_on_open(tmp_path: Path, clock, make_batch) -> None:
    log = _open(tmp_path, clock, index_interval_bytes=50)
    for _ in range(10):
        log.append_as_leader(make_batch(2), 0)
    log.flush()
    log.close()
    index = log.dir / "00000000000000000000.index"
    index.write_bytes(b"\x00\x00\x00\x05\x7f\xff\xff\xff")  # points past the end of the log
    reopened = _open(tmp_path, clock, index_interval_bytes=50)
    assert reopened.recovered_segments == 1
    assert _offsets(reopened, 13) == list(range(12, 20))


def test_update_config_changes_roll_size(tmp_path: Path, clock, make_batch) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock)
    log.append_as_leader(batch, 0)
    log.update_config(LogConfig(segment_bytes=len(batch)))
    log.append_as_leader(batch, 0)
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_partition_metadata_records_topic_id(tmp_path: Path, clock) -> None:
    import uuid

    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    UnifiedLog(tmp_path / "t-1", LogConfig(), topic_id=topic_id, clock_ms=clock)
    text = (tmp_path / "t-1" / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: EjRWeBI0VngSNFZ4EjRWeA\n"
    with pytest.raises(KafkaError) as err:
        UnifiedLog(tmp_path / "t-1", LogConfig(), topic_id=uuid.uuid4(), clock_ms=clock)
    assert err.value.code == ErrorCode.INCONSISTENT_TOPIC_ID


def test_flush_in_another_thread_is_safe_during_appends(tmp_path: Path, clock, make_batch) -> None:
    import threading

    batch = make_batch(2, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=20 * len(batch), index_interval_bytes=100)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as exc:  # reported to the test thread below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for _ in range(300):
            log.append_as_leader(batch, 0)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    log.flush()
    assert log.recovery_point == 600 and len(log.segments) == 15
    assert _offsets(log, 590) == list(range(590, 600))


def test_views_stay_readable_after_retention_deletes_their_segment(
    tmp_path: Path, clock, make_batch
) -> None:
    batch = make_batch(1, value_size=100)
    log = _open(tmp_path, clock, segment_bytes=len(batch), retention_bytes=0)
    for _ in range(3):
        log.append_as_leader(batch, 0)
    held = log.read(0, 1 << 20).records
    assert log.delete_retention_segments(clock()) == 2
    assert [bytes(view)[16:] == batch[16:] for view in held]  # past offset and epoch == [True, True, True]


def test_log_config_from_topic_configs() -> None:
    config = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1000",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
            "x.y": "1",
        }
    )
    assert config.segment_bytes == 1000 and config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    assert config.cleanup_policy == ("compact", "delete") and config.deletes_by_retention
    with pytest.raises(KafkaError) as err:
        LogConfig.from_topic_configs({"retention.ms": "soon"})
    assert err.value.code == ErrorCode.INVALID_CONFIG
