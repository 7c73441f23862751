"""The `.txnindex` of aborted transactions: Kafka's 34-byte entries, loading, search, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kafka_ext.storage.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TransactionIndexes,
    decode_aborted_txns,
    encode_aborted_txn,
)


def test_entry_is_kafkas_34_byte_layout() -> None:
    data = encode_aborted_txn(AbortedTxn(producer_id=5, first_offset=10, last_offset=20,
                                         last_stable_offset=21))
    assert len(data) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", data) == (0, 5, 10, 20, 21)
    assert decode_aborted_txns(data) == ([AbortedTxn(5, 10, 20, 21)], 34)


def test_entries_survive_reopen_and_a_torn_tail_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")  # a crash in the middle of a third entry
    loaded = TransactionIndex.load(path, 0)
    assert loaded.entries == [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]
    assert path.stat().st_size == 2 * ENTRY_SIZE


def test_file_is_created_only_with_the_first_entry(tmp_path: Path) -> None:
    indexes = TransactionIndexes(tmp_path)
    assert not list(tmp_path.iterdir())
    indexes.append(40, AbortedTxn(1, 30, 41, 42))
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000040.txnindex"]
    assert TransactionIndexes(tmp_path).entries() == [AbortedTxn(1, 30, 41, 42)]


def test_entries_must_be_appended_in_marker_order(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 0, 5, 6))


def test_collect_returns_only_transactions_overlapping_the_range(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    for txn in (AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 12, 15, 16)):
        index.append(txn)
    found, complete = index.collect(5, 12)
    assert [t.producer_id for t in found] == [2]
    assert complete  # producer 3's entry has a last stable offset past the bound


def test_search_continues_into_later_segments_until_complete(tmp_path: Path) -> None:
    indexes = TransactionIndexes(tmp_path)
    # Producer 1's transaction began in segment 0 but was aborted in segment 100.
    indexes.append(0, AbortedTxn(2, 10, 20, 50))
    indexes.append(100, AbortedTxn(1, 50, 120, 121))
    indexes.append(200, AbortedTxn(3, 150, 210, 211))
    assert [t.producer_id for t in indexes.collect(0, 60, 130)] == [1]
    assert [t.producer_id for t in indexes.collect(100, 0, 1000)] == [1, 3]
    assert indexes.collect(0, 300, 400) == []  # nothing ends at or after 300


def test_truncate_drops_entries_whose_marker_is_at_or_after_the_offset(tmp_path: Path) -> None:
    indexes = TransactionIndexes(tmp_path)
    indexes.append(0, AbortedTxn(1, 0, 4, 5))
    indexes.append(0, AbortedTxn(2, 2, 8, 9))
    indexes.truncate_to(8)
    assert indexes.entries() == [AbortedTxn(1, 0, 4, 5)]
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == ENTRY_SIZE
    assert not indexes.may_overlap(5)


def test_drop_with_defer_renames_for_background_removal(tmp_path: Path) -> None:
    indexes = TransactionIndexes(tmp_path)
    indexes.append(0, AbortedTxn(1, 0, 4, 5))
    doomed = indexes.drop(0, defer=True)
    assert doomed is not None and doomed.name == "00000000000000000000.txnindex.deleted"
    assert indexes.entries() == []
    assert [p.name for p in tmp_path.iterdir()] == [doomed.name]


def test_retain_removes_indexes_of_missing_segments(tmp_path: Path) -> None:
    indexes = TransactionIndexes(tmp_path)
    indexes.append(0, AbortedTxn(1, 0, 4, 5))
    indexes.append(10, AbortedTxn(2, 10, 14, 15))
    indexes.retain({0})
    assert indexes.base_offsets() == [0]
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000000.txnindex"]
