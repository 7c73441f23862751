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
from kafka_ext.spark.options import KafkaSourceOptionError, parse_options
from kafka_ext.spark.planning import ReadTask
from kafka_ext.spark.reader import KafkaDataLossError, TaskReadConfig, read_task
from kafka_ext.spark.source import KafkaStreamReader, arrow_schema

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


def test_null_keys_values_header_values_and_timestamp_types_under_any_session_time_zone(
        spark: Any, broker: Any) -> None:
    created, appended = new_topic_name("spark-create"), new_topic_name("spark-append")
    create_topic(broker.bootstrap, created, partitions=1)
    create_topic(broker.bootstrap, appended, partitions=1,
                 config={"message.timestamp.type": "LogAppendTime"})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for topic in (created, appended):
        producer.produce(topic, key=None, value=b"v", partition=0, timestamp=BASE_TIMESTAMP_MS,
                         headers=[("h", None), ("g", b"1")])
        producer.produce(topic, key=b"k", value=None, partition=0, timestamp=BASE_TIMESTAMP_MS + 1)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")  # the instant must not move
    try:
        df = read(spark, broker.bootstrap, subscribe=f"{created},{appended}",
                  includeHeaders="true")
        rows = sorted(df.selectExpr("topic", "offset", "key", "value", "headers", "timestampType",
                                    "unix_millis(timestamp) AS ms").collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    by_topic = {t: [r for r in rows if r["topic"] == t] for t in (created, appended)}
    assert [(r["offset"], r["key"], r["value"], r["timestampType"], r["ms"])
            for r in by_topic[created]] == [(0, None, b"v", 0, BASE_TIMESTAMP_MS),
                                            (1, b"k", None, 0, BASE_TIMESTAMP_MS + 1)]
    assert [[(h["key"], h["value"]) for h in r["headers"] or []] for r in by_topic[created]] == [
        [("h", None), ("g", b"1")], []]
    assert by_topic[created][1]["headers"] is None  # as Spark: no headers is null, not []
    assert [(r["key"], r["value"], r["timestampType"]) for r in by_topic[appended]] == [
        (None, b"v", 1), (b"k", None, 1)]
    assert all(r["ms"] > BASE_TIMESTAMP_MS + 1_000_000 for r in by_topic[appended])  # broker time


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


def stream_reader(bootstrap: str, **options: str) -> KafkaStreamReader:
    """The driver side of a stream, run in this process (Spark calls the same methods)."""
    raw = {"kafka.bootstrap.servers": bootstrap, **options}
    return KafkaStreamReader(parse_options({k.lower(): v for k, v in raw.items()},
                                           streaming=True), kafka_schema())


def test_starting_timestamp_after_every_record_fails_or_starts_at_latest_per_strategy(
        broker: Any) -> None:
    from kafka_ext.spark.source import KafkaBatchReader

    topic = new_topic_name("spark-ts-strategy")
    create_topic(broker.bootstrap, topic, partitions=2)
    # partition 0 holds timestamps BASE+0..BASE+8, partition 1 BASE+1..BASE+9
    produce(broker.bootstrap, topic, make_records(10, partitions=2,
                                                  base_timestamp_ms=BASE_TIMESTAMP_MS))

    def planned(**options: str) -> list[tuple[int, int, int]]:
        raw = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **options}
        reader = KafkaBatchReader(parse_options({k.lower(): v for k, v in raw.items()},
                                                streaming=False), kafka_schema())
        return [(p.task.partition, p.task.start_offset, p.task.end_offset)
                for p in reader.partitions()]

    after_partition_0 = str(BASE_TIMESTAMP_MS + 9)  # only partition 1 has a record at/after it
    with pytest.raises(KafkaSourceOptionError,
                       match=f"{topic}-0.*startingOffsetsByTimestampStrategy"):
        planned(startingTimestamp=after_partition_0)
    assert planned(startingTimestamp=after_partition_0,
                   startingOffsetsByTimestampStrategy="latest") == [(1, 4, 5)]
    # an ending timestamp with no record at/after it is the latest offset
    assert planned(startingOffsetsByTimestamp=f'{{"{topic}":{{"0":-2,"1":-2}}}}',
                   endingTimestamp=after_partition_0) == [(0, 0, 5), (1, 0, 4)]


def test_stream_pattern_picks_up_a_topic_created_after_it_started(broker: Any) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    prefix = new_topic_name("spark-pattern")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(broker.bootstrap, first, partitions=1)
    produce(broker.bootstrap, first, make_records(3))
    reader = stream_reader(broker.bootstrap, subscribePattern=f"{prefix}-.*",
                           startingOffsets="earliest")
    try:
        start = reader.initialOffset()
        assert start == {first: {"0": 0}}
        create_topic(broker.bootstrap, second, partitions=2)
        produce(broker.bootstrap, second, make_records(4, partitions=2))
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {first: {"0": 3}, second: {"0": 2, "1": 2}}
        tasks = [p.task for p in reader.partitions(start, end)]
        assert [(t.topic, t.partition, t.start_offset, t.end_offset) for t in tasks] == [
            (first, 0, 0, 3), (second, 0, 0, 2), (second, 1, 0, 2)]
    finally:
        reader.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_stream_partition_added_with_records_already_deleted_is_data_loss(
        broker: Any, fail_on_data_loss: bool) -> None:
    topic = new_topic_name("spark-added")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(10))
    admin = confluent_admin(broker.bootstrap)
    (deleted,) = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 4)],
                                      request_timeout=ADMIN_TIMEOUT_S).values()
    assert deleted.result(timeout=ADMIN_TIMEOUT_S).low_watermark == 4
    reader = stream_reader(broker.bootstrap, subscribe=topic,
                           failOnDataLoss=str(fail_on_data_loss).lower())
    # the partition is new to the stream: absent from the start offsets, present at the end
    start, end = {}, {topic: {"0": 10}}
    try:
        if fail_on_data_loss:
            with pytest.raises(KafkaDataLossError, match=f"{topic}-0 at 4"):
                reader.partitions(start, end)
        else:
            (partition,) = reader.partitions(start, end)
            assert (partition.task.start_offset, partition.task.end_offset) == (4, 10)
    finally:
        reader.stop()


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


def transactional_producer(bootstrap: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "transactional.id": new_topic_name("spark-txn-id")})
    producer.init_transactions(ADMIN_TIMEOUT_S)
    return producer


def send_in_transaction(producer: confluent_kafka.Producer, topic: str, prefix: str,
                        count: int) -> None:
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, key=f"{prefix}-{i}".encode(), value=b"v", partition=0)
    producer.flush(ADMIN_TIMEOUT_S)


def read_range(bootstrap: str, topic: str, start: int, end: int,
               isolation_level: str = "read_uncommitted", fail_on_data_loss: bool = True,
               poll_timeout_ms: int = 30_000) -> list[tuple[int, bytes]]:
    """One executor task run in this process: (offset, key) of what it yields."""
    config = TaskReadConfig({"bootstrap.servers": bootstrap, "isolation.level": isolation_level},
                            include_headers=False, fail_on_data_loss=fail_on_data_loss,
                            poll_timeout_ms=poll_timeout_ms, group_id_prefix="spark-kafka-source")
    batches = read_task(ReadTask(topic, 0, start, end), config, arrow_schema(kafka_schema()))
    return [(row["offset"], row["key"]) for batch in batches for row in batch.to_pylist()]


def test_task_ending_on_aborted_records_and_markers_stops_at_its_end_offset(
        broker: Any) -> None:
    topic = new_topic_name("spark-txn-gap")
    create_topic(broker.bootstrap, topic, partitions=1)
    first, second = (transactional_producer(broker.bootstrap) for _ in range(2))
    send_in_transaction(first, topic, "c", 3)  # offsets 0-2
    first.commit_transaction(ADMIN_TIMEOUT_S)  # marker 3
    send_in_transaction(first, topic, "a", 5)  # offsets 4-8
    send_in_transaction(second, topic, "o", 3)  # offsets 9-11, still open when read
    first.abort_transaction(ADMIN_TIMEOUT_S)  # marker 12, after the last stable offset 9
    try:
        # [0, 9) ends in aborted records whose abort marker lies past the last stable offset:
        # nothing a read_committed consumer delivers or position() reports reaches offset 9.
        assert read_range(broker.bootstrap, topic, 0, 9, "read_committed") == [
            (0, b"c-0"), (1, b"c-1"), (2, b"c-2")]
        assert read_range(broker.bootstrap, topic, 4, 9, "read_committed") == []
        # [0, 13) ends on the abort marker
        assert [o for o, _ in read_range(broker.bootstrap, topic, 0, 13, "read_uncommitted")] == [
            0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11]
    finally:
        second.abort_transaction(ADMIN_TIMEOUT_S)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_task_ending_past_the_last_record_is_data_loss_after_the_poll_timeout(
        broker: Any, fail_on_data_loss: bool) -> None:
    # e.g. endingOffsets beyond the log, or a stream's topic recreated with fewer records
    topic = new_topic_name("spark-short")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(10))
    if fail_on_data_loss:
        with pytest.raises(KafkaDataLossError, match=f"{topic}-0.*failOnDataLoss=false"):
            read_range(broker.bootstrap, topic, 0, 20, poll_timeout_ms=2_000)
    else:
        rows = read_range(broker.bootstrap, topic, 0, 20, fail_on_data_loss=False,
                          poll_timeout_ms=2_000)
        assert [o for o, _ in rows] == list(range(10))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_task_of_a_topic_deleted_after_planning_fails_or_reads_nothing_per_fail_on_data_loss(
        broker: Any, fail_on_data_loss: bool) -> None:
    topic = new_topic_name("spark-gone")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, make_records(10))
    admin = confluent_admin(broker.bootstrap)
    admin.delete_topics([topic])[topic].result(timeout=ADMIN_TIMEOUT_S)
    if fail_on_data_loss:
        with pytest.raises(KafkaDataLossError, match=f"{topic}-0.*failOnDataLoss=false"):
            read_range(broker.bootstrap, topic, 0, 10, poll_timeout_ms=2_000)
    else:
        assert read_range(broker.bootstrap, topic, 0, 10, fail_on_data_loss=False,
                          poll_timeout_ms=2_000) == []


def _create_chunk_here(broker: Any, topic: str) -> None:
    """CreateChunks of partition 0 onto the same broker (a single node may chunk its own
    partition: the old log is sealed as a chunk, a new one starts)."""
    import socket

    from kafka_ext.client.probe import identify, round_trip
    from kafka_ext.protocol.api_keys import ApiKey
    from kafka_ext.protocol.messages import registry

    Metadata = registry().requests[ApiKey.METADATA].cls
    Request = registry().requests[ApiKey.CREATE_CHUNKS].cls
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        identify(sock)
        meta = round_trip(sock, ApiKey.METADATA, 12, Metadata(
            topics=[Metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 1)
        leader = meta.topics[0].partitions[0].leader_id
        answer = round_trip(sock, ApiKey.CREATE_CHUNKS, 0, Request(topic_partitions=[
            Request.CreateChunksTopicPartition(topic_name=topic, partition_id=0,
                                               broker_ids=[leader], start_offset=-1,
                                               start_timestamp=-1, prev_stop_offset=-1)]), 2)
    assert answer.results[0].error_code == 0, answer.results[0]


def test_a_partition_with_chunks_is_read_in_one_task_per_chunk(spark: Any, broker: Any) -> None:
    """Partition chunks (seed 000): the planner cuts the partition at its chunk boundaries, so
    each chunk is its own task, read from the chunk's replica; every record comes back."""
    from pyspark.sql.functions import count, max, min, spark_partition_id

    topic = new_topic_name("spark-chunks")
    create_topic(broker.bootstrap, topic, partitions=1)
    for _ in range(2):
        produce(broker.bootstrap, topic, make_records(300))
        _create_chunk_here(broker, topic)
    produce(broker.bootstrap, topic, make_records(300))
    df = read(spark, broker.bootstrap, subscribe=topic)
    assert df.rdd.getNumPartitions() == 3
    spans = sorted(
        (r["lo"], r["hi"], r["n"])
        for r in df.groupBy(spark_partition_id().alias("task"))
        .agg(min("offset").alias("lo"), max("offset").alias("hi"), count("*").alias("n"))
        .collect())
    assert spans == [(0, 299, 300), (300, 599, 300), (600, 899, 300)]
