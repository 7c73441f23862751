"""The Prometheus endpoint (prometheus.metrics.port) of a real broker: it answers under Kafka's
JMX exporter names, and its counters move by exactly what stock clients did."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from clients import (
    ADMIN_TIMEOUT_S,
    consume_confluent,
    create_topic,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import BrokerProcess, free_port, serve_for_module

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MetricsBroker(BrokerProcess):
    """A broker serving its metrics on a loopback port of its own."""

    def __init__(self, data_dir: Path) -> None:
        metrics_port = free_port()
        super().__init__(data_dir, {"prometheus.metrics.port": str(metrics_port),
                                    "prometheus.metrics.host": "127.0.0.1"})
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    """One broker for the module: each test uses topics and groups of its own."""
    yield from serve_for_module(MetricsBroker(tmp_path_factory.mktemp("metrics") / "data"))


def scrape(broker: MetricsBroker) -> Samples:
    """Every sample of one scrape, by (sample name, labels)."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample with exactly these labels; 0 when absent (a counter not yet counted)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples carrying these labels, whatever their other labels."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def test_endpoint_answers_with_kafka_names(broker: MetricsBroker) -> None:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
    samples = scrape(broker)
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_server_raftmetrics_current_leader") == 1
    assert value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(samples, "kafka_log_logmanager_logdirectoryoffline",
                 logDirectory=str(broker.data_dir.resolve())) == 0
    names = {name for name, _ in samples}
    for name in ("kafka_server_replicamanager_underreplicatedpartitions",
                 "kafka_server_replicamanager_partitioncount",
                 "kafka_server_replicamanager_leadercount",
                 "kafka_server_replicamanager_isrshrinks_total",
                 "kafka_server_replicamanager_isrexpands_total",
                 "kafka_controller_kafkacontroller_offlinepartitionscount",
                 "kafka_server_replicamanager_offlinepartitionscount",
                 "kafka_server_raftmetrics_high_watermark",
                 "kafka_coordinator_group_groupmetadatamanager_numgroups",
                 "kafka_server_diskless_wal_uploads_total",
                 "kafka_server_diskless_wal_commit_time_ms_count",
                 "process_resident_memory_bytes"):
        assert name in names, name
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(broker.metrics_url.replace("/metrics", "/nope"), timeout=10)
    assert missing.value.code == 404


def test_produce_and_fetch_move_the_topic_and_request_counters(broker: MetricsBroker) -> None:
    topic = new_topic_name("metrics")
    create_topic(broker.bootstrap, topic)
    before = scrape(broker)
    records = make_records(300)
    produce_confluent(broker.bootstrap, topic, records)
    after = scrape(broker)

    def moved(name: str, samples: Samples = after, previous: Samples = before,
              **labels: str) -> float:
        return value(samples, name, **labels) - value(previous, name, **labels)

    assert moved("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 300
    assert moved("kafka_server_brokertopicmetrics_messagesin_total") == 300  # all topics
    # The batches appended are the log: bytes in is exactly the log's size.
    log_size = value(after, "kafka_log_log_size", topic=topic, partition="0")
    assert log_size > 300 * 64
    assert moved("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == log_size
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == 300
    produces = (total(after, "kafka_network_requestmetrics_requests_total", request="Produce")
                - total(before, "kafka_network_requestmetrics_requests_total",
                        request="Produce"))
    assert produces >= 1
    assert moved("kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    assert value(after, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                 le="+Inf") == value(after, "kafka_network_requestmetrics_totaltimems_count",
                                     request="Produce")

    consume_confluent(broker.bootstrap, topic, {0: confluent_kafka.OFFSET_BEGINNING}, 300)
    fetched = scrape(broker)
    # Every record went out at least once (a consumer may read ahead or read again).
    assert moved("kafka_server_brokertopicmetrics_bytesout_total", fetched, after,
                 topic=topic) >= log_size
    assert moved("kafka_network_requestmetrics_requestqueuetimems_count", fetched, after,
                 request="FetchConsumer") >= 1
    assert moved("kafka_network_requestmetrics_requestqueuetimems_count", fetched, after,
                 request="Fetch") >= 1


def test_group_lag_is_the_high_watermark_minus_the_committed_offset(
        broker: MetricsBroker) -> None:
    topic, group = new_topic_name("lag"), new_topic_name("group")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_confluent(broker.bootstrap, topic, make_records(100, partitions=2))  # 50 each
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 20),
                                 confluent_kafka.TopicPartition(topic, 1, 50)],
                        asynchronous=False)
    finally:
        consumer.close()

    def committed_shown() -> Samples | None:
        samples = scrape(broker)
        shown = value(samples, "kafka_consumergroup_current_offset", consumergroup=group,
                      topic=topic, partition="0")
        return samples if shown == 20 else None

    samples = wait_until(committed_shown, ADMIN_TIMEOUT_S, "the committed offsets in the metrics")
    assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic,
                 partition="0") == 30
    assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic,
                 partition="1") == 0
    assert value(samples, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    assert value(samples, "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1


def test_diskless_produce_counts_wal_uploads_and_their_commit_times(
        broker: MetricsBroker) -> None:
    topic = new_topic_name("diskless-metrics")
    create_topic(broker.bootstrap, topic, config={"diskless.enable": "true"})
    before = scrape(broker)
    produce_confluent(broker.bootstrap, topic, make_records(50))
    after = scrape(broker)
    assert (value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic)
            - value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic)) == 50
    for name in ("kafka_server_diskless_wal_uploads_total",
                 "kafka_server_diskless_wal_upload_time_ms_count",
                 "kafka_server_diskless_wal_commit_time_ms_count"):
        assert value(after, name) > value(before, name), name
    assert (value(after, "kafka_server_diskless_wal_upload_bytes_total")
            - value(before, "kafka_server_diskless_wal_upload_bytes_total")
            >= value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic))
