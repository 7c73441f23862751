"""Per-record produce rules (KIP-467): which records a batch is rejected for, and when records
are read at all."""

from __future__ import annotations

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import Compression, iter_batch_headers
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.storage.log_validator import (
    RecordValidationError,
    TimestampBounds,
    validate_batch_records,
)

NOW_MS = 1_000_000
BOUNDS = TimestampBounds.around(NOW_MS, 10_000, 3_600_000)


def _check(batch: bytes, *, compacted: bool, timestamps: TimestampBounds | None = BOUNDS) -> None:
    [(pos, header)] = list(iter_batch_headers(batch))
    validate_batch_records(batch, pos, header, topic="t", partition=3, compacted=compacted,
                           timestamps=timestamps)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4])
def test_keyless_records_on_a_compacted_topic_are_each_listed(compression: Compression) -> None:
    records = [Record(i, NOW_MS, None if i % 10 == 0 else b"k%d" % i, b"v") for i in range(30)]
    with pytest.raises(RecordValidationError) as err:
        _check(build_batch(records, compression=compression), compacted=True)
    assert err.value.code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in err.value.record_errors] == [0, 10, 20]
    assert all(e.message == "Compacted topic cannot accept message without key in topic "
                            "partition t-3." for e in err.value.record_errors)
    assert err.value.message.startswith("One or more records have been rejected due to 3 record "
                                        "errors in total")


def test_keyed_records_on_a_compacted_topic_pass() -> None:
    _check(build_batch([Record(i, NOW_MS, b"k", b"v") for i in range(5)]), compacted=True)


def test_keyless_records_pass_on_a_deleting_topic() -> None:
    _check(build_batch([Record(0, NOW_MS, None, b"v")]), compacted=False)


def test_records_out_of_the_timestamp_window_are_each_listed() -> None:
    stamps = [NOW_MS, NOW_MS + 3_600_001, NOW_MS - 10_001, NOW_MS + 3_600_000]
    with pytest.raises(RecordValidationError) as err:
        _check(build_batch([Record(i, t, b"k", b"v") for i, t in enumerate(stamps)]),
               compacted=False)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    assert err.value.message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in err.value.record_errors] == [1, 2]
    assert err.value.record_errors[0].message == (
        f"Timestamp {NOW_MS + 3_600_001} of message with offset 1 is out of range. The timestamp "
        f"should be within [{NOW_MS - 10_000}, {NOW_MS + 3_600_000}]")


def test_a_timestamp_error_makes_the_batch_invalid_timestamp_even_beside_key_errors() -> None:
    batch = build_batch([Record(0, NOW_MS, None, b"v"), Record(1, NOW_MS + 4_000_000, b"k", b"v")])
    with pytest.raises(RecordValidationError) as err:
        _check(batch, compacted=True)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP  # Kafka's processRecordErrors
    assert [e.batch_index for e in err.value.record_errors] == [0, 1]


def test_no_window_on_log_append_time_topics() -> None:
    _check(build_batch([Record(0, 1, b"k", b"v")]), compacted=False, timestamps=None)


def test_a_header_timestamp_no_record_has_is_invalid_timestamp() -> None:
    batch = bytearray(build_batch([Record(0, NOW_MS, b"k", b"v")]))
    batch[35:43] = (NOW_MS + 4_000_000).to_bytes(8, "big")  # MaxTimestamp, CRC not rechecked
    with pytest.raises(KafkaError) as err:
        _check(bytes(batch), compacted=False)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    assert not isinstance(err.value, RecordValidationError)
