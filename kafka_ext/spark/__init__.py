"""PySpark data source `kafka-ext`: batch and streaming reads of topics.

    import kafka_ext.spark
    kafka_ext.spark.register(spark)
    df = spark.read.format("kafka-ext").option("kafka.bootstrap.servers", "localhost:9092") \\
        .option("subscribe", "events").load()

Installed as a package, the source also registers itself: Spark imports every top-level
`pyspark_*` module and registers its `DefaultSource` (see `pyspark_kafka_ext.py`).
"""

from __future__ import annotations

from typing import Any

from kafka_ext.spark.source import SOURCE_NAME, KafkaExtDataSource, kafka_schema

__all__ = ["SOURCE_NAME", "KafkaExtDataSource", "kafka_schema", "register"]


def register(spark: Any) -> None:
    """Register the `kafka-ext` format with a SparkSession (idempotent)."""
    spark.dataSource.register(KafkaExtDataSource)
