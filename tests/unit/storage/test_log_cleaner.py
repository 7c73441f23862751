"""LogCleaner on real segment files: latest value per key at its original offset, tombstones and
delete horizons, transactions, producers' last batches, swaps and crash recovery, fetch."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kafka_ext.protocol.record_batch import BatchHeader, Compression, iter_batch_headers
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    build_end_txn_marker,
    decode_all_batches,
)
from kafka_ext.storage.checkpoints import OffsetCheckpointFile
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
)
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_manager import LogManager
from kafka_ext.storage.producer_state import AppendOrigin

T = TypeVar("T")
TOPIC = "users"
COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=300, index_interval_bytes=1,
                    delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Harness:
    """A real LogManager with one compacted log, and a cleaner whose blocking work runs inline
    (between_steps, if set, runs loop-side work between two blocking steps, as appends would)."""

    def __init__(self, data_dir: Path, config: LogConfig = COMPACT, *,
                 dedupe_buffer_size_bytes: int = 1 << 20) -> None:
        self.data_dir = data_dir
        self.clock = Clock()
        self.manager = LogManager([data_dir], node_id=1, cluster_id="c1", default_config=config,
                                  clock_ms=self.clock)
        self.manager.load()
        self.log = self.manager.get_log(TOPIC, 0) or self.manager.create_log(TOPIC, 0,
                                                                             config=config)
        self.between_steps: list[Callable[[], None]] = []
        self.cleaner = LogCleaner(
            self.manager, CleanerConfig(dedupe_buffer_size_bytes=dedupe_buffer_size_bytes),
            run_blocking=self._run_blocking, clock_ms=self.clock)

    async def _run_blocking(self, fn: Callable[[], T]) -> T:
        result = fn()
        if self.between_steps:
            self.between_steps.pop(0)()
        return result

    def append(self, *records: tuple[bytes | None, bytes | None], **batch: Any) -> int:
        """One batch of (key, value) records; returns its base offset; HW follows the end."""
        recs = [Record(i, self.clock.now_ms, k, v) for i, (k, v) in enumerate(records)]
        origin = batch.pop("origin", AppendOrigin.CLIENT)
        info = self.log.append_as_leader(build_batch(recs, **batch), 0, origin=origin)
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    def append_marker(self, control_type: ControlRecordType, producer_id: int) -> int:
        marker = build_end_txn_marker(control_type, producer_id=producer_id, producer_epoch=0,
                                      coordinator_epoch=0, timestamp_ms=self.clock.now_ms)
        info = self.log.append_as_leader(marker, 0, origin=AppendOrigin.COORDINATOR)
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    async def clean(self) -> None:
        stats = await self.cleaner.clean(self.log)
        assert stats is not None and not stats.aborted


def batches(log: UnifiedLog, start: int = 0) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch a fetch from start returns, decoded."""
    info = log.read(start, 1 << 24)
    return [b for view in info.records for b in decode_all_batches(view)]


def records(log: UnifiedLog, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, recs in batches(log, start) for r in recs]


def fill(h: Harness, rounds: int, keys: int) -> dict[bytes, tuple[int, bytes]]:
    """rounds x keys single-record batches; returns key -> (offset, value) of the last ones."""
    last: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"k%d" % k, b"v%d-%d" % (k, r)
            last[key] = (h.append((key, value)), value)
    return last


async def test_cleaning_keeps_the_latest_value_per_key_at_its_original_offset(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    last = fill(h, rounds=5, keys=3)
    h.append((b"barrier", b"x"))  # the last values are all in inactive segments now
    h.log.roll()
    await h.clean()
    kept = records(h.log)
    expected = sorted([(off, key, value) for key, (off, value) in last.items()]
                      + [(15, b"barrier", b"x")])
    assert kept == expected
    assert h.log.log_end_offset == 16 and h.log.log_start_offset == 0


async def test_fetch_across_cleaned_segments_sees_increasing_offsets_with_gaps(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    last = fill(h, rounds=6, keys=4)
    h.log.roll()
    await h.clean()
    offsets = [off for off, _, _ in records(h.log)]
    assert offsets == sorted(off for off, _ in last.values())
    for segment in h.log.segments:  # every index entry points at the batch it names
        view = segment._mapped(segment.size_bytes) if segment.size_bytes else memoryview(b"")
        starts = {pos: header for pos, header in iter_batch_headers(view)}
        for n in range(segment.offset_index.entries):
            offset, position = segment.offset_index.entry(n)
            assert starts[position].last_offset == offset
    for wanted in range(h.log.log_end_offset):  # a fetch from a gap starts at the next record
        got = records(h.log, wanted)
        assert got and got[0][0] == min(o for o in offsets if o >= wanted)


async def test_rewritten_batches_keep_offsets_producer_fields_and_compression(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.append((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), compression=Compression.GZIP)
    h.append((b"b", b"2"))
    h.log.roll()
    await h.clean()
    (first, recs), (second, _) = batches(h.log)
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 2)
    assert first.compression == Compression.GZIP
    assert [(r.offset, r.key) for r in recs] == [(0, b"a"), (2, b"c")]
    assert second.base_offset == 3


async def test_tombstone_is_kept_until_delete_retention_then_removed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.append((b"gone", b"v1"))
    h.append((b"stays", b"v1"))
    h.append((b"gone", None))
    h.append((b"stays", b"v2"))
    h.log.roll()
    await h.clean()
    assert records(h.log) == [(2, b"gone", None), (3, b"stays", b"v2")]
    tombstone_batch = batches(h.log)[0][0]
    assert tombstone_batch.has_delete_horizon
    assert tombstone_batch.base_timestamp == h.clock.now_ms + COMPACT.delete_retention_ms
    h.clock.now_ms += COMPACT.delete_retention_ms - 1
    assert h.cleaner.logs_to_clean(h.clock.now_ms) == []
    await h.clean()  # before the horizon: still there
    assert records(h.log) == [(2, b"gone", None), (3, b"stays", b"v2")]
    h.clock.now_ms += 1
    assert [c.log for c in h.cleaner.logs_to_clean(h.clock.now_ms)] == [h.log]
    await h.cleaner.run_once()
    assert records(h.log) == [(3, b"stays", b"v2")]


async def test_aborted_transactions_are_dropped_and_committed_ones_kept(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    txn = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True,
           "origin": AppendOrigin.COORDINATOR}
    aborted = h.append((b"k1", b"aborted"), **txn)
    h.append_marker(ControlRecordType.ABORT, 7)
    committed = h.append((b"k2", b"committed"), **{**txn, "producer_id": 8})
    h.append_marker(ControlRecordType.COMMIT, 8)
    plain = h.append((b"k3", b"plain"))
    h.log.roll()
    await h.clean()
    data = [(r.offset, r.value) for header, recs in batches(h.log) if not header.is_control
            for r in recs]
    assert data == [(committed, b"committed"), (plain, b"plain")]
    emptied = [hd for hd, recs in batches(h.log) if hd.base_offset == aborted]
    assert [(hd.producer_id, hd.records_count) for hd in emptied] == [(7, 0)]  # idempotence


async def test_producers_last_batch_header_stays_when_its_records_are_superseded(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.append((b"k", b"old"), producer_id=9, producer_epoch=0, base_sequence=0)
    h.append((b"k", b"new"))
    h.log.roll()
    await h.clean()
    kept = [(hd.base_offset, hd.producer_id, hd.base_sequence, [r.value for r in recs])
            for hd, recs in batches(h.log)]
    assert kept == [(0, 9, 0, []), (1, -1, -1, [b"new"])]


async def test_records_without_key_are_dropped_by_the_cleaner(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.append((None, b"keyless"), (b"k", b"v"), origin=AppendOrigin.REPLICATION)
    h.log.roll()
    await h.clean()
    assert records(h.log) == [(1, b"k", b"v")]


async def test_active_segment_and_min_compaction_lag_are_never_cleaned(tmp_path: Path) -> None:
    h = Harness(tmp_path, replace(COMPACT, min_compaction_lag_ms=5_000))
    h.append((b"k", b"old"))
    h.append((b"k", b"mid"))
    h.log.roll()
    h.clock.now_ms += 6_000
    h.append((b"k", b"young"))
    h.log.roll()
    h.append((b"k", b"active"))
    await h.clean()
    assert [v for _, _, v in records(h.log)] == [b"mid", b"young", b"active"]


async def test_checkpoint_and_dirty_ratio_choose_what_to_clean(tmp_path: Path) -> None:
    h = Harness(tmp_path, replace(COMPACT, min_cleanable_dirty_ratio=0.5))
    other = h.manager.create_log("plain", 0, config=LogConfig(segment_bytes=300))
    for n in range(6):
        other.append_as_leader(build_batch([Record(0, 0, b"k", b"%d" % n)]), 0)
    other.high_watermark = other.log_end_offset
    fill(h, rounds=4, keys=2)
    h.log.roll()
    assert [c.log for c in h.cleaner.logs_to_clean(h.clock.now_ms)] == [h.log]
    await h.cleaner.run_once()
    end = h.log.active_segment.base_offset
    checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
    assert checkpoint == {(TOPIC, 0): end}
    assert h.cleaner.logs_to_clean(h.clock.now_ms) == []  # all clean now
    h.append((b"k0", b"again"))
    h.log.roll()
    candidate = h.cleaner.log_to_clean(h.log, h.clock.now_ms)
    assert candidate.first_dirty_offset == end and 0 < candidate.cleanable_ratio < 0.5
    assert h.cleaner.logs_to_clean(h.clock.now_ms) == []  # not dirty enough yet


async def test_a_full_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    h = Harness(tmp_path, dedupe_buffer_size_bytes=24 * 4)  # room for 3 keys
    last = fill(h, rounds=2, keys=6)
    h.log.roll()
    for _ in range(4):
        await h.cleaner.clean(h.log)
    assert records(h.log) == sorted((off, k, v) for k, (off, v) in last.items())


async def test_segments_merge_into_groups_of_segment_bytes(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    last = fill(h, rounds=4, keys=2)
    h.log.roll()
    before = len(h.log.segments)
    h.log.update_config(replace(COMPACT, segment_bytes=10_000))
    await h.clean()
    assert len(h.log.segments) == 2 < before  # one cleaned segment and the active one
    assert records(h.log) == sorted((off, k, v) for k, (off, v) in last.items())
    assert not [p for p in h.log.dir.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]


async def test_snapshots_of_merged_away_segments_are_deleted_with_them(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    fill(h, rounds=4, keys=2)
    h.log.roll()
    bases = [s.base_offset for s in h.log.segments]
    assert h.log.producer_state.snapshot_offsets == bases[1:]  # one per roll
    h.log.update_config(replace(COMPACT, segment_bytes=10_000))
    await h.clean()
    remaining = [s.base_offset for s in h.log.segments]
    assert remaining == [bases[0], bases[-1]]
    assert h.log.producer_state.snapshot_offsets == [bases[-1]]
    on_disk = sorted(int(p.stem) for p in h.log.dir.glob("*.snapshot"))
    assert on_disk == [bases[-1]]


async def test_appends_during_cleaning_stay_and_a_segment_removed_meanwhile_aborts_the_swap(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    fill(h, rounds=3, keys=2)
    h.log.roll()
    before = records(h.log)

    def meanwhile() -> None:  # between writing the cleaned group and swapping it in
        h.append((b"late", b"1"))
        h.log.delete_records_before(h.log.segments[1].base_offset)  # retention-like removal

    h.between_steps = [lambda: None, meanwhile]  # after the offset map, after the first group
    stats = await h.cleaner.clean(h.log)
    assert stats is not None and stats.aborted
    start = h.log.log_start_offset
    assert records(h.log, start) == [r for r in before if r[0] >= start] + [(6, b"late", b"1")]
    assert not [p for p in h.log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


async def test_a_paused_log_is_not_cleaned_and_an_inflight_cleaning_does_not_swap(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    last = fill(h, rounds=3, keys=2)
    h.log.roll()
    before = records(h.log)
    h.between_steps = [lambda: h.cleaner.abort_and_pause(TOPIC, 0)]  # a replica move starts
    stats = await h.cleaner.clean(h.log)
    assert stats is not None and stats.aborted and records(h.log) == before
    assert h.cleaner.logs_to_clean(h.clock.now_ms) == []
    h.cleaner.resume(TOPIC, 0)
    await h.cleaner.run_once()
    assert records(h.log) == sorted((off, k, v) for k, (off, v) in last.items())


async def test_pauses_nest_and_cleaning_resumes_after_the_last_resume(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    fill(h, rounds=3, keys=2)
    h.log.roll()
    h.cleaner.abort_and_pause(TOPIC, 0)  # a replica move
    h.cleaner.abort_and_pause(TOPIC, 0)  # and another pauser
    h.cleaner.resume(TOPIC, 0)
    assert h.cleaner.is_paused((TOPIC, 0))
    assert h.cleaner.logs_to_clean(h.clock.now_ms) == []
    h.cleaner.resume(TOPIC, 0)
    assert not h.cleaner.is_paused((TOPIC, 0))
    assert [c.log for c in h.cleaner.logs_to_clean(h.clock.now_ms)] == [h.log]


async def test_an_io_error_while_cleaning_a_served_log_takes_its_dir_offline(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    fill(h, rounds=3, keys=2)
    h.log.roll()
    before = records(h.log)
    reported: list[tuple[Path, BaseException]] = []
    h.manager.failure_listener = lambda log_dir, exc: reported.append((log_dir, exc))
    (h.log.dir / "00000000000000000000.log.cleaned").mkdir()  # the cleaned file cannot be made
    assert await h.cleaner.clean(h.log) is None
    assert [(d, type(e)) for d, e in reported] == [(h.log.dir.parent, IsADirectoryError)]
    assert records(h.log) == before


async def test_a_log_deleted_while_it_is_cleaned_takes_no_dir_offline(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    fill(h, rounds=3, keys=2)
    h.log.roll()
    reported: list[tuple[Path, BaseException]] = []
    h.manager.failure_listener = lambda log_dir, exc: reported.append((log_dir, exc))
    # After the checkpoints are read and the offset map is built, the topic is deleted.
    h.between_steps = [lambda: None, lambda: h.manager.detach_log(TOPIC, 0)]
    assert await h.cleaner.clean(h.log) is None
    assert reported == []


@pytest.mark.parametrize("crash_point", ["cleaned-only", "swap-written", "old-log-deleted",
                                         "indexes-promoted"])
async def test_restart_after_a_crash_mid_swap_reopens_to_old_or_new_segments(
        tmp_path: Path, crash_point: str) -> None:
    old = Harness(tmp_path / "old")
    fill(old, rounds=4, keys=2)
    old.log.roll()
    uncleaned = records(old.log)
    old.manager.close()
    shutil.copytree(tmp_path / "old", tmp_path / "new")
    new = Harness(tmp_path / "new", replace(COMPACT, segment_bytes=10_000))
    await new.clean()
    cleaned = records(new.log)
    assert len(new.log.segments) == 2 and cleaned != uncleaned
    new.manager.close()
    # Rebuild in old/ the files a crash at crash_point leaves behind.
    src, dst = tmp_path / "new" / f"{TOPIC}-0", tmp_path / "old" / f"{TOPIC}-0"
    base = "0" * 20
    suffix = ".cleaned" if crash_point == "cleaned-only" else ".swap"
    for ext in (".index", ".timeindex", ".log"):
        shutil.copyfile(src / (base + ext), dst / (base + ext + suffix))
    if crash_point in ("old-log-deleted", "indexes-promoted"):
        (dst / (base + ".log")).rename(dst / (base + ".log.deleted"))
    if crash_point == "indexes-promoted":
        for ext in (".index", ".timeindex"):
            (dst / (base + ext)).unlink()
            (dst / (base + ext + ".swap")).rename(dst / (base + ext))
    (tmp_path / "old" / ".kafka_cleanshutdown").unlink()  # a crash: recovery runs
    reopened = Harness(tmp_path / "old")
    expected = uncleaned if crash_point == "cleaned-only" else cleaned
    assert records(reopened.log) == expected
    assert not [p for p in dst.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    reopened.append((b"after", b"restart"))
    assert records(reopened.log)[-1][1:] == (b"after", b"restart")
