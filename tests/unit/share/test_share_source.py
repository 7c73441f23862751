"""What a share-partition's sources hand out: whole batches with their headers, and the
consumers' rule for skipping aborted transactions from (producer id, first offset) alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafka_ext.protocol.record_batch import read_batch_header
from kafka_ext.protocol.records import ControlRecordType, Record, build_batch, build_end_txn_marker
from kafka_ext.share.share_partition_manager import _AbortedTransactions
from kafka_ext.share.share_source import _diskless_batches, _whole_batches


def _data(base: int, count: int, producer_id: int = -1, transactional: bool = False) -> bytes:
    return build_batch([Record(base + i, 1000, None, b"v%d" % (base + i)) for i in range(count)],
                       base_offset=base, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1,
                       is_transactional=transactional)


def _marker(offset: int, producer_id: int, kind: ControlRecordType) -> bytes:
    return build_end_txn_marker(kind, producer_id=producer_id, producer_epoch=0,
                                coordinator_epoch=0, timestamp_ms=1000, base_offset=offset)


def _skipped(log: list[bytes], aborted: list[tuple[int, int]], start: int = 0) -> list[int]:
    """Base offsets of the batches from the `start`-th on that the rule skips."""
    rule = _AbortedTransactions(aborted)
    headers = [read_batch_header(b) for b in log[start:]]
    return [h.base_offset for h in headers if rule.skips(h)]


def test_a_producers_aborted_batches_are_skipped_up_to_its_marker_and_no_further() -> None:
    log = [
        _data(0, 2, producer_id=7, transactional=True),   # aborted
        _data(2, 2),                                       # plain
        _data(4, 2, producer_id=8, transactional=True),   # committed
        _data(6, 2, producer_id=7, transactional=True),   # aborted
        _marker(8, 7, ControlRecordType.ABORT),
        _marker(9, 8, ControlRecordType.COMMIT),
        _data(10, 2, producer_id=7, transactional=True),  # the next transaction: committed
        _marker(12, 7, ControlRecordType.COMMIT),
    ]
    assert _skipped(log, [(7, 0)]) == [0, 6, 8, 9, 12]
    # A read that starts inside the aborted transaction gets the same pair, and the same answer.
    assert _skipped(log, [(7, 0)], start=3) == [6, 8, 9, 12]
    # A read that starts at the marker: the pair ends at it and aborts nothing later.
    assert _skipped(log, [(7, 0)], start=4) == [8, 9, 12]
    # read_uncommitted: nothing aborted, control batches still never handed out.
    assert _skipped(log, []) == [8, 9, 12]


def test_whole_batches_are_zero_copy_slices_of_the_read() -> None:
    batches = [_data(0, 3), _data(3, 1), _data(4, 5)]
    view = memoryview(b"".join(batches))
    got = _whole_batches([view[:len(batches[0]) + len(batches[1])],
                          view[len(batches[0]) + len(batches[1]):]])
    assert [(h.base_offset, h.last_offset) for h, _ in got] == [(0, 2), (3, 3), (4, 8)]
    assert [b"".join(bytes(p) for p in parts) for _, parts in got] == batches
    assert all(parts[0].obj is view.obj for _, parts in got)


@given(st.lists(st.tuples(st.integers(1, 20), st.booleans()), min_size=1, max_size=8))
def test_diskless_pieces_regroup_into_their_batches(shape: list[tuple[int, bool]]) -> None:
    """A diskless read is, per batch, its base offset then the rest of it in the object, or
    one copy (LogAppendTime): regrouped, each batch's header is its own."""
    pieces: list[memoryview | bytes] = []
    expected = []
    base = 0
    for count, stamped in shape:
        batch = _data(base, count)
        expected.append((base, base + count - 1, batch))
        if stamped:
            pieces.append(memoryview(batch))
        else:
            obj = memoryview(b"\0" * 8 + batch[8:])  # the object holds it at another offset
            pieces += [batch[:8], obj[8:]]
        base += count
    got = _diskless_batches(pieces)
    assert [(h.base_offset, h.last_offset, b"".join(bytes(p) for p in parts))
            for h, parts in got] == expected
