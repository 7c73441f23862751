"""Per-log settings from topic configs (Kafka's names and defaults); mirrors Kafka's LogConfig."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import TimestampType

LONG_MAX = (1 << 63) - 1  # Kafka's Long.MAX_VALUE: "never" for flush.messages / flush.ms


@dataclass(slots=True, frozen=True)
class LogConfig:
    """One log's configuration; replaced whole at run time through `UnifiedLog.update_config`."""

    segment_bytes: int = (
        1024 * 1024 * 1024
    )  # segment.bytes: roll when the next append would exceed it
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms: roll a segment this old
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes: preallocated index size
    index_interval_bytes: int = 4096  # index.interval.bytes: log bytes between index entries
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms: -1 keeps forever
    retention_bytes: int = -1  # retention.bytes: -1 keeps any size
    flush_messages: int = LONG_MAX  # flush.messages: fsync after this many unflushed messages
    flush_ms: int = LONG_MAX  # flush.ms: fsync when the last flush is this old
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME  # message.timestamp.type
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes: largest batch accepted
    # message.timestamp.before/after.max.ms: how far a CreateTime timestamp may lie in the past
    # or the future of the broker's clock (Kafka 4 defaults: unbounded, one hour).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy: delete and/or compact
    compression_type: str = "producer"  # compression.type: "producer" keeps the batch's codec
    # Compaction (LogCleaner): how long tombstones and empty-transaction markers outlive their
    # first cleaning, the dirty fraction that triggers one, and how long records stay uncleaned.
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    min_insync_replicas: int = 1  # min.insync.replicas: ISR size an acks=all produce needs

    @property
    def deletes_by_retention(self) -> bool:
        """Whether retention.ms / retention.bytes apply (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains compact)."""
        return "compact" in self.cleanup_policy

    @classmethod
    def from_topic_configs(
        cls, configs: Mapping[str, str], base: LogConfig | None = None
    ) -> LogConfig:
        """Overlay Kafka topic config strings on base (the broker's log.* defaults).

        Unknown keys are ignored (they belong to other layers); a malformed value raises
        KafkaError(INVALID_CONFIG) naming the key.
        """
        changes: dict[str, object] = {}
        for key, value in configs.items():
            name = _TOPIC_KEYS.get(key)
            if name is None:
                continue
            try:
                if name == "message_timestamp_type":
                    changes[name] = _TIMESTAMP_TYPES[value]
                elif name == "compression_type":
                    if value not in _COMPRESSION_TYPES:
                        raise ValueError(value)
                    changes[name] = value
                elif name == "cleanup_policy":
                    policy = tuple(p.strip() for p in value.split(",") if p.strip())
                    if not policy or any(p not in ("delete", "compact") for p in policy):
                        raise ValueError(value)
                    changes[name] = policy
                elif name == "min_cleanable_dirty_ratio":
                    ratio = float(value)
                    if not 0.0 <= ratio <= 1.0:
                        raise ValueError(value)
                    changes[name] = ratio
                else:
                    changes[name] = int(value)
            except (KeyError, ValueError):
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"invalid value {value!r} for {key}"
                ) from None
        return replace(base or cls(), **changes)  # type: ignore[arg-type]


_TOPIC_KEYS = {f.name.replace("_", "."): f.name for f in fields(LogConfig)}
_COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
_TIMESTAMP_TYPES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}
