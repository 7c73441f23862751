"""Executor-side conversion of consumed records into Arrow batches of Spark's Kafka schema."""

from __future__ import annotations

import confluent_kafka
import pyarrow as pa

from kafka_ext.spark.reader import TaskReadConfig, consumer_config_for, records_to_batch
from kafka_ext.spark.source import arrow_schema, kafka_schema


def message(offset: int, key: bytes | None = b"k", value: bytes | None = b"v",
            timestamp_ms: int = 1_000, log_append_time: bool = False,
            headers: list[tuple[str, bytes | None]] | None = None) -> confluent_kafka.Message:
    kind = (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME if log_append_time
            else confluent_kafka.TIMESTAMP_CREATE_TIME)
    return confluent_kafka.Message(topic="t", partition=3, offset=offset, key=key, value=value,
                                   headers=headers, timestamp=(kind, timestamp_ms))


def test_batch_has_spark_kafka_columns_and_values() -> None:
    schema = arrow_schema(kafka_schema(include_headers=True))
    messages = [message(7, key=None, value=b"a", timestamp_ms=1_500,
                        headers=[("h", b"1"), ("n", None)]),
                message(8, value=None, timestamp_ms=2_000, log_append_time=True)]
    batch = records_to_batch(messages, "t", 3, True, schema)
    assert batch.schema == schema
    assert batch.to_pydict() == {
        "key": [None, b"k"],
        "value": [b"a", None],
        "topic": ["t", "t"],
        "partition": [3, 3],
        "offset": [7, 8],
        "timestamp": [pa.scalar(1_500_000, pa.timestamp("us", tz="UTC")).as_py(),
                      pa.scalar(2_000_000, pa.timestamp("us", tz="UTC")).as_py()],
        "timestampType": [0, 1],  # Kafka's CreateTime and LogAppendTime
        "headers": [[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None],
    }


def test_offsets_with_gaps_are_taken_from_each_record() -> None:
    schema = arrow_schema(kafka_schema())
    batch = records_to_batch([message(0), message(2), message(9)], "t", 3, False, schema)
    assert batch.column("offset").to_pylist() == [0, 2, 9]
    assert batch.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                  "timestampType"]


def test_dense_offsets_start_at_the_first_record() -> None:
    schema = arrow_schema(kafka_schema())
    batch = records_to_batch([message(o) for o in range(100, 110)], "t", 3, False, schema)
    assert batch.column("offset").to_pylist() == list(range(100, 110))


def test_task_consumer_never_commits_and_reads_uncommitted_by_default() -> None:
    config = consumer_config_for(TaskReadConfig({"bootstrap.servers": "h:1"}, False, True, 10,
                                                "prefix"), None)
    assert config["enable.auto.commit"] == "false"
    assert config["auto.offset.reset"] == "error"
    assert config["isolation.level"] == "read_uncommitted"
    assert config["group.id"].startswith("prefix-")
    committed = consumer_config_for(TaskReadConfig(
        {"bootstrap.servers": "h:1", "isolation.level": "read_committed"}, False, True, 10, "p"),
        None)
    assert committed["isolation.level"] == "read_committed"
