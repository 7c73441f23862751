"""The `kafka-ext` PySpark data source on a real local Spark (local[2]) against the real broker.

One SparkSession serves the whole module (the JVM takes seconds to start); each test has its own
broker process and topics. Streams are polled with deadlines, never timed with sleeps.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pytest
from clients import (
    ADMIN_TIMEOUT_S,
    Outgoing,
    confluent_admin,
    create_topic,
    dense_offsets,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)
from confluent_kafka.admin import NewPartitions

import kafka_ext.spark
from kafka_ext.spark import kafka_schema

STREAM_TIMEOUT_S = 90.0
BASE_TIMESTAMP_MS = 1_600_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # Spark's Python workers must run this interpreter, the one with kafka_ext installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]")
               .appName("kafka-ext-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kafka_ext.spark.register(session)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafka-ext").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("kafka-ext").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_of(df: Any) -> list[dict[str, Any]]:
    """Every row through Arrow (fast for 100k rows), timestamps as epoch milliseconds."""
    table: pa.Table = df.toArrow()
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                             table.column("timestamp").cast(pa.int64()))
    rows = table.to_pylist()
    for row in rows:
        row["timestamp"] //= 1000
    return rows


def produce(bootstrap: str, topic: str, records: list[Outgoing]) -> list[int]:
    return produce_confluent(bootstrap, topic, records, {"batch.size": 1_000_000})


def offsets_by_partition(rows: list[dict[str, Any]]) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for row in rows:
        result.setdefault(row["partition"], []).append(row["offset"])
    return {p: sorted(o) for p, o in sorted(result.items())}


# --- batch ---------------------------------------------------------------------------------------


def test_batch_read_returns_every_record_with_key_value_offset_and_headers(
        spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-batch")
    create_topic(broker.bootstrap, topic, partitions=6)
    records = make_records(100_000, partitions=6, base_timestamp_ms=BASE_TIMESTAMP_MS)
    offsets = produce(broker.bootstrap, topic, records)
    assert offsets == dense_offsets(records)

    df = read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema == kafka_schema(include_headers=True)
    assert df.rdd.getNumPartitions() == 6
    got = sorted(rows_of(df), key=lambda r: (r["partition"], r["offset"]))

    expected = sorted(
        ({"key": r.key, "value": r.value, "topic": topic, "partition": r.partition,
          "offset": o, "timestamp": r.timestamp_ms, "timestampType": 0,
          "headers": [{"key": k, "value": v} for k, v in r.headers]}
         for r, o in zip(records, offsets, strict=True)),
        key=lambda r: (r["partition"], r["offset"]))
    assert len(got) == 100_000
    assert got == expected


def test_schema_without_headers_is_spark_kafka_schema(spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-schema")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(3))
    df = read(spark, broker.bootstrap, subscribe=topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    assert [r["key"] for r in rows_of(df)] == [b"key-000000", b"key-000001", b"key-000002"]


def test_starting_and_ending_offsets_json_timestamps_and_assign(spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-offsets")
    create_topic(broker.bootstrap, topic, partitions=2)
    # record i goes to partition i % 2 at offset i // 2 with timestamp BASE + i
    produce(broker.bootstrap, topic, make_records(200, partitions=2,
                                                  base_timestamp_ms=BASE_TIMESTAMP_MS))

    by_json = read(spark, broker.bootstrap, subscribe=topic,
                   startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
                   endingOffsets=f'{{"{topic}":{{"0":50,"1":-1}}}}')
    assert offsets_by_partition(rows_of(by_json)) == {0: list(range(10, 50)),
                                                      1: list(range(0, 100))}

    # the first record at or after BASE + 120 is record 120 (p0 @60) and record 121 (p1 @60)
    by_timestamp = read(spark, broker.bootstrap, subscribe=topic,
                        startingTimestamp=str(BASE_TIMESTAMP_MS + 120))
    assert offsets_by_partition(rows_of(by_timestamp)) == {0: list(range(60, 100)),
                                                           1: list(range(60, 100))}

    per_partition = read(spark, broker.bootstrap, subscribe=topic,
                         startingOffsetsByTimestamp=(
                             f'{{"{topic}":{{"0":{BASE_TIMESTAMP_MS + 20},'
                             f'"1":{BASE_TIMESTAMP_MS + 181}}}}}'),
                         endingOffsetsByTimestamp=(
                             f'{{"{topic}":{{"0":{BASE_TIMESTAMP_MS + 40},'
                             f'"1":{BASE_TIMESTAMP_MS + 10_000}}}}}'))
    assert offsets_by_partition(rows_of(per_partition)) == {0: list(range(10, 20)),
                                                            1: list(range(90, 100))}

    assigned = read(spark, broker.bootstrap, assign=f'{{"{topic}":[1]}}',
                    endingOffsets=f'{{"{topic}":{{"1":5}}}}')
    rows = rows_of(assigned)
    assert [(r["partition"], r["offset"], r["key"]) for r in rows] == [
        (1, i, f"key-{2 * i + 1:06d}".encode()) for i in range(5)]


def test_min_partitions_splits_one_partition_into_contiguous_tasks(
        spark: Any, broker: Any) -> None:
    from pyspark.sql.functions import count, max, min, spark_partition_id

    topic = new_topic_name("spark-split")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(1000))
    df = read(spark, broker.bootstrap, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    spans = sorted(
        (r["lo"], r["hi"], r["n"])
        for r in df.groupBy(spark_partition_id().alias("task"))
        .agg(min("offset").alias("lo"), max("offset").alias("hi"), count("*").alias("n"))
        .collect())
    assert spans == [(0, 249, 250), (250, 499, 250), (500, 749, 250), (750, 999, 250)]

    capped = read(spark, broker.bootstrap, subscribe=topic, maxRecordsPerPartition="300")
    assert capped.rdd.getNumPartitions() == 4
    assert sorted(r["offset"] for r in capped.select("offset").collect()) == list(range(1000))


def test_records_deleted_before_the_read_fail_or_are_skipped_per_fail_on_data_loss(
        spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-lost")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(100))
    admin = confluent_admin(broker.bootstrap)
    (deleted,) = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 60)],
                                      request_timeout=ADMIN_TIMEOUT_S).values()
    assert deleted.result(timeout=ADMIN_TIMEOUT_S).low_watermark == 60
    from_zero = f'{{"{topic}":{{"0":0}}}}'  # offsets 0-59 no longer exist

    with pytest.raises(Exception, match="failOnDataLoss=false") as excinfo:
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=from_zero).collect()
    assert f"{topic}-0" in str(excinfo.value)

    skipped = read(spark, broker.bootstrap, subscribe=topic, startingOffsets=from_zero,
                   failOnDataLoss="false")
    assert offsets_by_partition(rows_of(skipped)) == {0: list(range(60, 100))}


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "t", "startingOffset": "earliest"}, "startingOffset"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "subscribe and assign"),
    ({}, "subscribe, subscribePattern, assign"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":'}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"},
     "startingTimestamp and startingOffsets"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "t", "includeHeaders": "yes"}, "includeHeaders"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"subscribe": "t", "kafka.no.such.property": "1"}, "kafka.no.such.property"),
    ({"subscribe": "t", "kafka.isolation.level": "dirty"}, "kafka.isolation.level"),
])
def test_bad_options_fail_at_load_naming_them(spark: Any, broker: Any,
                                              options: dict[str, str], named: str) -> None:
    with pytest.raises(Exception, match="KafkaSourceOptionError") as excinfo:
        read(spark, broker.bootstrap, **options)
    assert named in str(excinfo.value)


def test_batch_only_and_stream_only_options_fail_when_the_mode_is_known(
        spark: Any, broker: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="startingOffsets=latest"):
        read(spark, broker.bootstrap, subscribe="t", startingOffsets="latest").collect()
    stream = read_stream(spark, broker.bootstrap, subscribe="t", endingOffsets="latest")
    with pytest.raises(Exception, match="endingOffsets"):
        query = (stream.writeStream.format("memory").queryName("never")
                 .option("checkpointLocation", str(tmp_path / "cp")).start())
        try:
            query.awaitTermination(STREAM_TIMEOUT_S)
        finally:
            query.stop()


# --- streaming -----------------------------------------------------------------------------------


def parquet_rows(spark: Any, path: Path) -> list[tuple[int, int, bytes]]:
    """What the file sink has committed (Spark reads its _spark_metadata log, not stray files)."""
    if not (path / "_spark_metadata").exists():
        return []
    df = spark.read.schema("partition int, offset bigint, value binary").parquet(str(path))
    return sorted((r["partition"], r["offset"], r["value"]) for r in df.collect())


def start_parquet_stream(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path,
                         **options: str) -> Any:
    df = read_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", **options)
    return (df.select("partition", "offset", "value").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_stream_restarted_from_checkpoint_writes_every_record_exactly_once(
        spark: Any, broker: Any, tmp_path: Path) -> None:
    topic = new_topic_name("spark-stream")
    create_topic(broker.bootstrap, topic, partitions=3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = make_records(600, partitions=3)
    produce(broker.bootstrap, topic, first)

    query = start_parquet_stream(spark, broker.bootstrap, topic, out, checkpoint,
                                 maxOffsetsPerTrigger="100")
    try:
        wait_until(lambda: len(parquet_rows(spark, out)) >= 200, STREAM_TIMEOUT_S,
                   "the first micro-batches in the sink")
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 100 + 3  # maxOffsetsPerTrigger (+1 per partition rounding)
    seen_before_restart = len(parquet_rows(spark, out))
    assert seen_before_restart < 600 + 300

    second = make_records(300, partitions=3)
    produce(broker.bootstrap, topic, second)
    query = start_parquet_stream(spark, broker.bootstrap, topic, out, checkpoint)
    try:
        wait_until(lambda: len(parquet_rows(spark, out)) >= 900, STREAM_TIMEOUT_S,
                   "every record in the sink after the restart")
        # one more trigger must not duplicate anything
        query.processAllAvailable()
    finally:
        query.stop()
    expected = sorted((r.partition, o, r.value) for r, o in
                      zip(first + second, dense_offsets(first + second), strict=True))
    assert parquet_rows(spark, out) == expected


def test_available_now_stream_reads_the_backlog_in_limited_batches_and_stops(
        spark: Any, broker: Any, tmp_path: Path) -> None:
    topic = new_topic_name("spark-now")
    create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(250, partitions=2)
    produce(broker.bootstrap, topic, records)
    df = read_stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest",
                     maxOffsetsPerTrigger="100")
    query = (df.writeStream.format("memory").queryName("now")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(STREAM_TIMEOUT_S)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [100, 100, 50]
    rows = spark.sql("select partition, offset, key from now").collect()
    assert sorted((r["partition"], r["offset"], r["key"]) for r in rows) == sorted(
        (r.partition, o, r.key) for r, o in zip(records, dense_offsets(records), strict=True))


def test_stream_picks_up_partitions_added_while_it_runs(spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-grow")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(10, partitions=1))
    df = read_stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest")
    query = (df.writeStream.format("memory").queryName("grow").outputMode("append")
             .trigger(processingTime="200 milliseconds").start())
    try:
        def partitions_seen() -> set[int]:
            return {r["partition"] for r in spark.sql("select partition from grow").collect()}

        wait_until(lambda: partitions_seen() == {0}, STREAM_TIMEOUT_S, "partition 0 in the sink")
        admin = confluent_admin(broker.bootstrap)
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=ADMIN_TIMEOUT_S)
        produce(broker.bootstrap, topic, [
            Outgoing(partition=p, key=b"k", value=b"new-%d" % p, headers=(),
                     timestamp_ms=BASE_TIMESTAMP_MS) for p in (1, 2)])
        wait_until(lambda: partitions_seen() == {0, 1, 2}, STREAM_TIMEOUT_S,
                   "the new partitions in the sink")
        rows = spark.sql("select partition, offset, value from grow where partition > 0").collect()
        assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == [
            (1, 0, b"new-1"), (2, 0, b"new-2")]
    finally:
        query.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_topic_deleted_under_a_stream_fails_or_continues_per_fail_on_data_loss(
        spark: Any, broker: Any, fail_on_data_loss: bool) -> None:
    kept, doomed = new_topic_name("spark-kept"), new_topic_name("spark-doomed")
    create_topic(broker.bootstrap, kept, partitions=1)
    create_topic(broker.bootstrap, doomed, partitions=1)
    produce(broker.bootstrap, kept, make_records(5))
    produce(broker.bootstrap, doomed, make_records(5))
    name = f"deleted_{str(fail_on_data_loss).lower()}"
    df = read_stream(spark, broker.bootstrap, subscribe=f"{kept},{doomed}",
                     startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower(),
                     **{"kafkaConsumer.pollTimeoutMs": "10000"})
    query = (df.writeStream.format("memory").queryName(name)
             .trigger(processingTime="200 milliseconds").start())
    try:
        def count(topic: str) -> int:
            return int(spark.sql(f"select count(*) from {name} where topic = '{topic}'")
                       .collect()[0][0])

        wait_until(lambda: count(kept) == 5 and count(doomed) == 5, STREAM_TIMEOUT_S,
                   "both topics in the sink")
        admin = confluent_admin(broker.bootstrap)
        admin.delete_topics([doomed])[doomed].result(timeout=ADMIN_TIMEOUT_S)
        if fail_on_data_loss:
            wait_until(lambda: query.exception() is not None, STREAM_TIMEOUT_S,
                       "the query to fail")
            assert "failOnDataLoss" in str(query.exception())
            assert doomed in str(query.exception())
        else:
            produce(broker.bootstrap, kept, make_records(7))
            wait_until(lambda: count(kept) == 12, STREAM_TIMEOUT_S, "new records of the kept topic")
            assert query.isActive and query.exception() is None
            assert count(doomed) == 5
    finally:
        query.stop()


# --- transactions --------------------------------------------------------------------------------


def test_read_committed_returns_only_committed_transactions(spark: Any, broker: Any) -> None:
    topic = new_topic_name("spark-txn")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": new_topic_name("spark-txn-id"),
                                         "linger.ms": 5})
    producer.init_transactions(ADMIN_TIMEOUT_S)

    def transaction(prefix: str, count: int, commit: bool | None) -> None:
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=f"{prefix}-{i}".encode(), value=b"v", partition=0)
        producer.flush(ADMIN_TIMEOUT_S)
        if commit is True:
            producer.commit_transaction(ADMIN_TIMEOUT_S)
        elif commit is False:
            producer.abort_transaction(ADMIN_TIMEOUT_S)

    transaction("a", 10, commit=True)
    transaction("b", 5, commit=False)
    transaction("c", 7, commit=True)
    transaction("d", 3, commit=None)  # still open when Spark reads

    committed = read(spark, broker.bootstrap, subscribe=topic,
                     **{"kafka.isolation.level": "read_committed"})
    keys = [r["key"].decode() for r in committed.select("key").collect()]
    assert sorted(keys) == sorted([f"a-{i}" for i in range(10)] + [f"c-{i}" for i in range(7)])

    uncommitted = read(spark, broker.bootstrap, subscribe=topic)
    keys = [r["key"].decode() for r in uncommitted.select("key").collect()]
    assert sorted(keys) == sorted([f"a-{i}" for i in range(10)] + [f"b-{i}" for i in range(5)]
                                  + [f"c-{i}" for i in range(7)] + [f"d-{i}" for i in range(3)])
    producer.abort_transaction(ADMIN_TIMEOUT_S)
