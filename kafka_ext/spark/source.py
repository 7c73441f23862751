"""The `kafka-ext` PySpark data source (Spark 4 Python Data Source API): batch and streaming.

Mirrors Spark's Kafka source (`KafkaSourceProvider`, `KafkaBatch`, `KafkaMicroBatchStream`):
same schema, same option names, offsets checkpointed as the same JSON. The driver plans with a
`KafkaOffsetReader` and `plan_read_tasks`; each Spark task reads one `ReadTask` on an executor
(`reader.read_task`) and hands Arrow batches to Spark.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_ext.spark.offsets import (
    KafkaOffsetReader,
    PartitionOffsets,
    offsets_from_json,
    offsets_to_json,
)
from kafka_ext.spark.options import (
    KafkaSourceOptionError,
    KafkaSourceOptions,
    parse_options,
)
from kafka_ext.spark.planning import (
    PartitionRange,
    ReadTask,
    ReplicaLocator,
    plan_read_tasks,
    rate_limit,
)
from kafka_ext.spark.reader import (
    KafkaDataLossError,
    TaskReadConfig,
    consumer_config_for,
    read_task,
)

log = logging.getLogger(__name__)

SOURCE_NAME = "kafka-ext"

_HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                      StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema, plus `headers` when includeHeaders is true."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow form Spark expects of a Python data source's batches (its own conversion)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_consumer_properties(options: KafkaSourceOptions) -> None:
    """Let librdkafka judge the kafka.* options now (at load()) rather than inside a task."""
    read_config = _read_config(options)
    try:
        consumer = confluent_kafka.Consumer(consumer_config_for(read_config, None))
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        text = error.str() if isinstance(error, confluent_kafka.KafkaError) else str(error)
        named = re.findall(r'property:? "([^"]+)"', text)
        names = ", ".join(f"kafka.{n}" for n in named) or "kafka.*"
        raise KafkaSourceOptionError(f"option {names} rejected by the consumer: {text}") from exc
    consumer.close()


def _read_config(options: KafkaSourceOptions) -> TaskReadConfig:
    return TaskReadConfig(
        consumer_config=dict(options.consumer_config),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        group_id_prefix=options.group_id_prefix,
    )


class KafkaInputPartition(InputPartition):
    """A Spark input partition: one read task plus what the executor needs to run it."""

    def __init__(self, task: ReadTask, read_config: TaskReadConfig) -> None:
        super().__init__(task)
        self.task = task
        self.read_config = read_config


def _read(partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, KafkaInputPartition):
        return iter(())  # Spark's stand-in partition when the plan has no task
    return read_task(partition.task, partition.read_config, arrow_schema(schema))


def _data_loss(options: KafkaSourceOptions, message: str) -> None:
    """Spark's reportDataLoss: fail the query, or warn and go on, per failOnDataLoss."""
    if options.fail_on_data_loss:
        raise KafkaDataLossError(
            f"{message}. Some data may have been lost. Set the option failOnDataLoss=false to "
            f"continue without it.")
    log.warning("kafka-ext source: %s. Some data may have been lost; continuing "
                "(failOnDataLoss=false).", message)


def _tp_names(partitions: Any) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions))


class KafkaBatchReader(DataSourceReader):
    """`spark.read`: one fixed range per partition, planned once on the driver."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        offset_reader = KafkaOffsetReader(self.options)
        try:
            leaders = offset_reader.partitions()
            start = offset_reader.resolve(self.options.starting, leaders, starting=True)
            end = offset_reader.resolve(self.options.ending, leaders, starting=False)
            locator = offset_reader.replica_locator(leaders)
        finally:
            offset_reader.close()
        ranges = []
        gone = [tp for tp in leaders if start.get(tp, -1) < 0 or end.get(tp, -1) < 0]
        if gone:
            _data_loss(self.options, f"partitions {_tp_names(gone)} disappeared while planning")
        for tp in sorted(set(leaders) - set(gone)):
            if start[tp] > end[tp]:
                raise KafkaSourceOptionError(
                    f"{tp[0]}-{tp[1]} would start at offset {start[tp]} (option "
                    f"{self.options.starting.option or 'startingOffsets'}) after its end "
                    f"{end[tp]} (option {self.options.ending.option or 'endingOffsets'})")
            ranges.append(PartitionRange(tp[0], tp[1], start[tp], end[tp]))
        return _input_partitions(ranges, locator, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.schema)


def _input_partitions(ranges: list[PartitionRange], locator: ReplicaLocator,
                      options: KafkaSourceOptions) -> list[InputPartition]:
    tasks = plan_read_tasks(ranges, locator, options.min_partitions,
                            options.max_records_per_partition)
    read_config = _read_config(options)
    return [KafkaInputPartition(task, read_config) for task in tasks]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream`: micro-batches between offsets Spark checkpoints as Kafka JSON.

    initialOffset/latestOffset/partitions/commit run in one driver-side Python process; `read`
    runs on executors from a pickled copy (without the admin client).
    """

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._offset_reader: KafkaOffsetReader | None = None
        self._available_now_end: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offset_reader"] = None  # an AdminClient does not pickle; executors need none
        return state

    @property
    def offset_reader(self) -> KafkaOffsetReader:
        if self._offset_reader is None:
            self._offset_reader = KafkaOffsetReader(self.options)
        return self._offset_reader

    def initialOffset(self) -> dict:
        leaders = self.offset_reader.partitions()
        offsets = self.offset_reader.resolve(self.options.starting, leaders, starting=True)
        return offsets_to_json({tp: o for tp, o in offsets.items() if o >= 0})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        leaders = self.offset_reader.partitions()
        self._available_now_end = self.offset_reader.latest(leaders)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        leaders = self.offset_reader.partitions()
        gone = set(begin) - set(leaders)
        new = [tp for tp in leaders if tp not in begin]
        begin.update(self.offset_reader.earliest(new))
        latest = self.offset_reader.latest(leaders)
        gone |= set(leaders) - set(latest)
        if gone:
            _data_loss(self.options, f"partitions {_tp_names(gone)} no longer exist "
                                     f"(deleted topic?)")
        if self._available_now_end is not None:
            cap = self._available_now_end
            latest = {tp: min(o, cap.get(tp, begin.get(tp, o))) for tp, o in latest.items()}
        behind = [tp for tp, o in latest.items() if tp in begin and o < begin[tp]]
        if behind:
            _data_loss(self.options, f"latest offsets of {_tp_names(behind)} are before the "
                                     f"offsets already read (topic recreated or truncated?)")
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            found = self.offset_reader.earliest(new)
            lost = set(new) - set(found)
            if lost:
                _data_loss(self.options, f"new partitions {_tp_names(lost)} were deleted "
                                         f"before they could be read")
            # Spark's rule: a partition added while the stream runs must still hold offset 0.
            late = {tp: offset for tp, offset in found.items() if offset != 0}
            if late:
                _data_loss(self.options, "added partitions start after offset 0: " + ", ".join(
                    f"{t}-{p} at {o}" for (t, p), o in sorted(late.items())))
            begin.update(found)
        ranges = []
        for tp, until_offset in sorted(until.items()):
            if tp not in begin:
                continue
            if begin[tp] > until_offset:
                _data_loss(self.options, f"{tp[0]}-{tp[1]} offsets went back from "
                                         f"{begin[tp]} to {until_offset}")
                continue
            ranges.append(PartitionRange(tp[0], tp[1], begin[tp], until_offset))
        leaders = self.offset_reader.partitions() if ranges else {}
        return _input_partitions(ranges, self.offset_reader.replica_locator(leaders),
                                 self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.schema)

    def commit(self, end: dict) -> None:
        """Spark's Kafka source keeps its progress in the checkpoint only, never in Kafka."""

    def stop(self) -> None:
        if self._offset_reader is not None:
            self._offset_reader.close()
            self._offset_reader = None


class KafkaExtDataSource(DataSource):
    """`spark.read(Stream).format("kafka-ext")`: topics as Spark's Kafka source shows them.

    Options are checked when `load()` asks for the schema; the rules that differ between batch
    and streaming are checked when the reader is made.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        options = parse_options(self.options)
        check_consumer_properties(options)
        return kafka_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(parse_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(parse_options(self.options, streaming=True), schema)
