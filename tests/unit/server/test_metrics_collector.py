"""server/metrics.py: the counters the hot path feeds, and a scrape of a broker running in this
process (its collector reads the real broker's state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from kafka_ext.server.broker import Broker
from kafka_ext.server.config import build_config
from kafka_ext.server.metrics import (
    BUCKETS_MS,
    BrokerTopicStats,
    LatencyHistogram,
    MetricsServer,
    RequestMetrics,
)

_reg = registry()
ProduceRequest = _reg["ProduceRequest"].cls
ProduceResponse = _reg["ProduceResponse"].cls
FetchRequest = _reg["FetchRequest"].cls
FetchResponse = _reg["FetchResponse"].cls


def _batch(count: int) -> bytes:
    return build_batch([Record(i, 1_600_000_000_000 + i, b"k", b"v" * 10) for i in range(count)])


def _produce(*partitions: tuple[str, bytes | None, int]) -> tuple[object, list[object]]:
    """A produce request and its answer: (topic, records, error code) per partition."""
    request = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])
        for topic, records, _ in partitions])
    answers = [ProduceResponse.TopicProduceResponse(name=topic, partition_responses=[
        ProduceResponse.PartitionProduceResponse(index=0, error_code=code, base_offset=0)])
        for topic, _, code in partitions]
    return request, answers


def test_histogram_bounds_are_inclusive_and_buckets_cumulative() -> None:
    histogram = LatencyHistogram()
    for ms in (0.1, 1.0, 1.5, 99999.0):
        histogram.observe(ms)
    buckets = dict(histogram.buckets())
    assert buckets["0.25"] == 1 and buckets["1"] == 2 and buckets["2.5"] == 3
    assert buckets[f"{BUCKETS_MS[-1]:g}"] == 3 and buckets["+Inf"] == 4
    assert histogram.sum_ms == pytest.approx(0.1 + 1.0 + 1.5 + 99999.0)


def test_produce_counts_records_from_batch_headers_and_bytes_appended() -> None:
    stats = BrokerTopicStats()
    first, second = _batch(7), _batch(3)
    stats.record_produce(*_produce(("a", first, 0), ("b", second, 0)))
    stats.record_produce(*_produce(("a", memoryview(second), 0)))
    assert (stats.topics["a"].messages_in, stats.topics["a"].bytes_in) == (
        10, len(first) + len(second))
    assert (stats.topics["b"].messages_in, stats.topics["b"].bytes_in) == (3, len(second))
    assert stats.all_topics.messages_in == 13
    assert stats.all_topics.produce_requests == 3


def test_failed_partitions_append_nothing_and_count_failed_unless_expected() -> None:
    stats = BrokerTopicStats()
    stats.record_produce(*_produce(("a", _batch(5), int(ErrorCode.NOT_LEADER_OR_FOLLOWER)),
                                   ("a", _batch(5), int(ErrorCode.INVALID_RECORD)),
                                   ("a", None, 0)))  # a v0/v1 set with no whole message
    topic = stats.topics["a"]
    assert (topic.messages_in, topic.bytes_in, topic.produce_requests) == (0, 0, 3)
    assert topic.failed_produce_requests == 1 == stats.all_topics.failed_produce_requests


def test_fetch_counts_bytes_out_per_topic_and_failures() -> None:
    stats = BrokerTopicStats()
    batch = _batch(4)
    targets = [SimpleNamespace(topic="a"), SimpleNamespace(topic="a"),
               SimpleNamespace(topic="b"), SimpleNamespace(topic="")]
    results = [FetchResponse.PartitionData(partition_index=0, error_code=0,
                                           records=[memoryview(batch), batch]),
               FetchResponse.PartitionData(partition_index=1, error_code=0, records=[]),
               FetchResponse.PartitionData(partition_index=0,
                                           error_code=int(ErrorCode.CORRUPT_MESSAGE), records=[]),
               FetchResponse.PartitionData(partition_index=0,
                                           error_code=int(ErrorCode.UNKNOWN_TOPIC_ID),
                                           records=[])]
    stats.record_fetch(targets, results)
    assert stats.topics["a"].bytes_out == 2 * len(batch) == stats.all_topics.bytes_out
    assert stats.topics["b"].failed_fetch_requests == 1 == stats.all_topics.failed_fetch_requests
    assert stats.all_topics.fetch_requests == 4 and "" not in stats.topics


def test_deleted_topics_are_forgotten_and_the_totals_keep_their_count() -> None:
    stats = BrokerTopicStats()
    stats.record_produce(*_produce(("gone", _batch(2), 0), ("kept", _batch(1), 0)))
    stats.forget_deleted(["kept"])
    assert list(stats.topics) == ["kept"] and stats.all_topics.messages_in == 3


def test_fetches_count_as_fetch_and_as_consumer_or_follower() -> None:
    metrics = RequestMetrics()
    consumer = FetchRequest(replica_id=-1, replica_state=FetchRequest.ReplicaState(replica_id=-1))
    follower = FetchRequest(replica_id=-1, replica_state=FetchRequest.ReplicaState(replica_id=2))
    metrics.record(ApiKey.FETCH, 17, consumer, 1.0, 1.001, 1.002)
    metrics.record(ApiKey.FETCH, 17, follower, 1.0, 1.001, 1.002)
    metrics.record(ApiKey.FETCH, 4, FetchRequest(replica_id=3), 0.0, 1.0, 1.0)
    metrics.record(ApiKey.PRODUCE, 9, None, 0.0, 1.0, 1.0)
    assert metrics.requests == {("Fetch", 17): 2, ("FetchConsumer", 17): 1,
                                ("FetchFollower", 17): 1, ("Fetch", 4): 1,
                                ("FetchFollower", 4): 1, ("Produce", 9): 1}
    queue = metrics.stages["FetchConsumer"].queue
    assert queue.sum_ms == pytest.approx(1.0) and queue.counts[bisect_bucket(1.0)] == 1
    assert metrics.stages["Produce"].queue.sum_ms == 0  # no arrival stamp: no queue time


def bisect_bucket(ms: float) -> int:
    return next(i for i, bound in enumerate(BUCKETS_MS) if ms <= bound)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(build_config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                             "log.dirs": str(tmp_path / "data"),
                             "log.cleaner.enable": "false",
                             "diskless.metadata.topic.num.partitions": "1"}))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def test_a_scrape_describes_the_running_broker(broker: Broker) -> None:
    server = MetricsServer(broker)
    samples = {s.name: s.value for family in text_string_to_metric_families(
        generate_latest(server.registry).decode()) for s in family.samples if not s.labels}
    assert samples["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert samples["kafka_server_raftmetrics_current_leader"] == 1
    assert samples["kafka_server_replicamanager_partitioncount"] == len(
        broker.replica_manager.partitions)
    assert samples["kafka_server_replicamanager_underreplicatedpartitions"] == 0
    assert samples["kafka_server_brokertopicmetrics_messagesin_total"] == 0
    status, _, _ = server._answer("GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status.startswith("404")
    status, content_type, body = server._answer("GET /metrics HTTP/1.1\r\nAccept: "
                                                "application/openmetrics-text\r\n\r\n")
    assert status == "200 OK" and content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
