"""The produce-path rules about particular records (Kafka's LogValidator, KIP-467).

A batch is rejected whole when some of its records break a rule: a keyless record on a
compacted topic (INVALID_RECORD) or a CreateTime timestamp outside
`message.timestamp.before.max.ms` / `after.max.ms` (INVALID_TIMESTAMP). The error names the
offending records by their index in the batch (ProduceResponse v8+ RecordErrors), so a client
fails exactly those and retries the others (librdkafka's _INVALID_DIFFERENT_RECORD).

Records are decoded only where Kafka's rule needs them: always on compacted topics (each key),
and for timestamps only when the batch header's first or largest timestamp is out of range (a
batch whose header timestamps are both in range is accepted unread).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import NO_TIMESTAMP, BatchHeader, BytesLike
from kafka_ext.protocol.records import decode_records

# Kafka lists at most this many record errors in the partition's error message.
_ERRORS_IN_MESSAGE = 3


@dataclass(slots=True, frozen=True)
class RecordError:
    """One rejected record: its index in the batch and why (Kafka's RecordError)."""

    batch_index: int
    message: str | None


class RecordValidationError(KafkaError):
    """A batch rejected because of particular records (Kafka's RecordValidationException)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[RecordError]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


@dataclass(slots=True, frozen=True)
class TimestampBounds:
    """The CreateTime window [earliest_ms, latest_ms] around the broker's clock."""

    earliest_ms: int
    latest_ms: int

    @classmethod
    def around(cls, now_ms: int, before_max_ms: int, after_max_ms: int) -> TimestampBounds:
        return cls(now_ms - before_max_ms, now_ms + after_max_ms)

    def admits(self, timestamp: int) -> bool:
        return timestamp == NO_TIMESTAMP or self.earliest_ms <= timestamp <= self.latest_ms


def validate_batch_records(buf: BytesLike, pos: int, header: BatchHeader, *,
                           topic: str, partition: int, compacted: bool,
                           timestamps: TimestampBounds | None) -> None:
    """Check one batch against the record rules; `timestamps` is None unless the topic keeps
    CreateTime. Raises RecordValidationError listing every offending record, in Kafka's words."""
    if header.is_control:
        return
    headers_in_range = timestamps is None or (
        timestamps.admits(header.base_timestamp) and timestamps.admits(header.max_timestamp))
    if not compacted and headers_in_range:
        return  # the hot path: nothing here needs the records
    try:
        _, records = decode_records(buf, pos, verify_crc=False)
    except DecodeError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, exc.message) from exc
    errors: list[RecordError] = []
    timestamp_error = False
    for index, record in enumerate(records):  # per-record loop: the rules are about each record
        if compacted and record.key is None:
            errors.append(RecordError(index, "Compacted topic cannot accept message without key "
                                             f"in topic partition {topic}-{partition}."))
        elif timestamps is not None and not timestamps.admits(record.timestamp):
            timestamp_error = True
            errors.append(RecordError(
                index, f"Timestamp {record.timestamp} of message with offset {record.offset} is "
                       f"out of range. The timestamp should be within [{timestamps.earliest_ms}, "
                       f"{timestamps.latest_ms}]"))
    if timestamp_error:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP,
            "One or more records have been rejected due to invalid timestamp", errors)
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')"
                          for e in errors[:_ERRORS_IN_MESSAGE])
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]", errors)
    if not headers_in_range:
        # The header's timestamps are out of range but no record's is: the header lies.
        raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                         f"batch timestamps [{header.base_timestamp}, {header.max_timestamp}] "
                         "disagree with its records'")
