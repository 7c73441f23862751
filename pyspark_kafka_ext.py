"""Entry point Spark's Python data source lookup finds: it registers every top-level `pyspark_*`
module's `DefaultSource`, so `format("kafka-ext")` works without `kafka_ext.spark.register`."""

from kafka_ext.spark.source import KafkaExtDataSource as DefaultSource

__all__ = ["DefaultSource"]
